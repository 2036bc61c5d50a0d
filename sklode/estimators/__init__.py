"""The sklode estimators (each in its own module) and their shared base."""

from ._base import ODEEstimatorBase, warn_not_converged
from .adjoint import AdjointODE
from .bcdprox import BCDProxODE
from .wendy import WENDyODE

__all__ = ["ODEEstimatorBase", "warn_not_converged", "available_estimators", "AdjointODE",
           "BCDProxODE", "WENDyODE"]


def available_estimators():
    """Name -> ``make(model, theta0)`` for every estimator in this version, in a stable order.

    Used by the ``sklode demo`` command and the benchmarks so that each new estimator shows
    up in both without further edits.
    """
    return {
        "bcdprox": lambda model, theta0: BCDProxODE(model, theta0=theta0),
        "wendy": lambda model, theta0: WENDyODE(model, theta0=theta0),
        "adjoint": lambda model, theta0: AdjointODE(model, theta0=theta0),
    }
