"""Population (nonlinear mixed-effects) models: :class:`MixedEffectsODE`.

Numerics on arrays in :mod:`._subject` (one subject's predictions, conditional mode and
marginal likelihood) and :mod:`._solver` (Lindstrom-Bates and the direct FOCE-I / Laplace
minimisation); the estimator in :mod:`._estimator`.
"""

from ._estimator import MixedEffectsODE

__all__ = ["MixedEffectsODE"]
