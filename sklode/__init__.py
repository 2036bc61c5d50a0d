"""sklode: scikit-learn estimators for ODE parameters, initial states and clean trajectories.

The three methods, each in its own subpackage with its solver on arrays and a thin
estimator: :mod:`sklode.bcdprox` (:class:`BCDProxODE`), :mod:`sklode.wendy`
(:class:`WENDyODE`) and :mod:`sklode.adjoint` (:class:`AdjointODE`). Models are
:class:`ODEModel` subclasses (:mod:`sklode.models` holds the zoo); :mod:`sklode.datasets`
the papers' problems; :mod:`sklode.registry` the methods by name, as :mod:`sklode.compare`
and the ``sklode`` command use them.
"""

import importlib

# Public names and the modules that define them, imported on first use (PEP 562): ``import
# sklode`` and ``sklode --help`` then cost nothing beyond Python's start-up, and torch and
# scikit-learn load with the first estimator, model or dataset a script touches.
_LAZY = {
    "AdjointODE": ".adjoint",
    "BCDProxODE": ".bcdprox",
    "WENDyODE": ".wendy",
    "MixedEffectsODE": ".population",
    "ODEModel": ".models",
    "FunctionModel": ".models",
    "simulate": ".integrate",
    "Experiment": ".experiment",
    "Dose": ".experiment",
    "experiments_from_table": ".experiment",
    "show_versions": "._versions",
    "ConvergenceWarning": ".exceptions",
    "DivergenceError": ".exceptions",
    "IntegrationError": ".exceptions",
    "IdentifiabilityError": ".exceptions",
    "ModelError": ".exceptions",
    "NotLinearInThetaError": ".exceptions",
    "SklodeError": ".exceptions",
}
_SUBMODULES = {"datasets", "exceptions", "metrics", "models", "plotting"}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'sklode' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


__version__ = "0.1.0.dev0"

__all__ = [
    "AdjointODE",
    "BCDProxODE",
    "WENDyODE",
    "MixedEffectsODE",
    "ODEModel",
    "FunctionModel",
    "simulate",
    "Experiment",
    "Dose",
    "experiments_from_table",
    "show_versions",
    "datasets",
    "exceptions",
    "metrics",
    "models",
    "plotting",
    "ConvergenceWarning",
    "DivergenceError",
    "IntegrationError",
    "IdentifiabilityError",
    "ModelError",
    "NotLinearInThetaError",
    "SklodeError",
]
