"""sklode: scikit-learn estimators for ODE parameters, initial states and clean trajectories."""

from . import datasets, metrics, models, multistep
from .exceptions import ConvergenceWarning, IntegrationError, ModelError, NotLinearInThetaError
from .estimators import AdjointODE, BCDProxODE, WENDyODE
from .integrate import simulate
from .models import ODEModel

__version__ = "0.1.0.dev0"

__all__ = [
    "AdjointODE",
    "BCDProxODE",
    "WENDyODE",
    "ODEModel",
    "simulate",
    "datasets",
    "metrics",
    "models",
    "multistep",
    "ConvergenceWarning",
    "IntegrationError",
    "ModelError",
    "NotLinearInThetaError",
]
