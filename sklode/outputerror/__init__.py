"""The output-error layer: what every fit that integrates the ODE builds on.

Trajectories and their exact derivatives (:mod:`._sensitivity`), steady states
(:mod:`._steady_state`), initial states from data and by shooting (:mod:`._initial_state`),
the weighted least-squares cost and its likelihood form (:mod:`._objective`) and the optimisers
on it (:mod:`._optimize`, :mod:`._cg`). AdjointODE, MixedEffectsODE, the PEtab estimator and
the diagnostics (:mod:`sklode.diagnostics`) build on it; it imports no estimator.
"""
