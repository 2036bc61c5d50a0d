"""Diagnostics of a fit, the same for every method: its uncertainty (:mod:`._uncertainty`),
whether it describes its data (:mod:`._assessment`, :mod:`._adequacy`) and the parametric
bootstrap (:mod:`._bootstrap`). It reads the output-error layer and never imports an estimator.
"""
