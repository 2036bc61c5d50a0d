"""The sklode estimators (each in its own module) and their shared base."""

from ._base import ODEEstimatorBase, warn_not_converged

__all__ = ["ODEEstimatorBase", "warn_not_converged"]
