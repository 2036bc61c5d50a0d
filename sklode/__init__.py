"""sklode: scikit-learn estimators for ODE parameters, initial states and clean trajectories.

The three methods, each in its own subpackage with its solver on arrays and a thin
estimator: :mod:`sklode.bcdprox` (:class:`BCDProxODE`), :mod:`sklode.wendy`
(:class:`WENDyODE`) and :mod:`sklode.adjoint` (:class:`AdjointODE`). Models are
:class:`ODEModel` subclasses (:mod:`sklode.models` holds the zoo); :mod:`sklode.datasets`
the papers' problems; :mod:`sklode.registry` the methods by name, as :mod:`sklode.compare`
and the ``sklode`` command use them.
"""

from . import datasets, exceptions, metrics, models
from .adjoint import AdjointODE
from .bcdprox import BCDProxODE
from .exceptions import (
    ConvergenceWarning,
    DivergenceError,
    IntegrationError,
    ModelError,
    NotLinearInThetaError,
    SklodeError,
)
from .integrate import simulate
from .models import FunctionModel, ODEModel
from .wendy import WENDyODE

__version__ = "0.1.0.dev0"

__all__ = [
    "AdjointODE",
    "BCDProxODE",
    "WENDyODE",
    "ODEModel",
    "FunctionModel",
    "simulate",
    "datasets",
    "exceptions",
    "metrics",
    "models",
    "ConvergenceWarning",
    "DivergenceError",
    "IntegrationError",
    "ModelError",
    "NotLinearInThetaError",
    "SklodeError",
]
