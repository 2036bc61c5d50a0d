"""The observation layer: what links a trajectory to its data.

The noise distributions (:mod:`._noise`), the observation model with its residual rows and
derivatives (:mod:`._likelihood`'s :class:`Observation`), and ``-log L`` in PEtab's convention.
It sits under every method: it imports only the models and the data checks.
"""
