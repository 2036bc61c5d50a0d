"""The one table of sklode's estimation methods: a short name -> the estimator that implements it.

The method packages (:mod:`sklode.bcdprox`, :mod:`sklode.wendy`, :mod:`sklode.adjoint`) never
import one another. Where one method starts from another's fit (``AdjointODE(init="bcdprox")``)
or the registry and the ``sklode`` command list the methods, they look the estimator up here by
name. The table holds import paths, resolved on first use, so this module sits below every
method and imports none of them; a new method is one line here.

>>> from sklode._methods import METHOD_NAMES, estimator_class
>>> METHOD_NAMES
('bcdprox', 'wendy', 'adjoint')
>>> estimator_class("wendy").__name__
'WENDyODE'
"""

import importlib

__all__ = ["ESTIMATORS", "METHOD_NAMES", "estimator_class"]

#: Each method's short name and where its estimator lives (``"module:Class"``), in the default
#: order of comparisons.
ESTIMATORS = {
    "bcdprox": "sklode.bcdprox:BCDProxODE",
    "wendy": "sklode.wendy:WENDyODE",
    "adjoint": "sklode.adjoint:AdjointODE",
}
#: The short names, in order.
METHOD_NAMES = tuple(ESTIMATORS)


def estimator_class(name):
    """The estimator class of the method called ``name``.

    Parameters
    ----------
    name : str
        One of :data:`METHOD_NAMES`.

    Returns
    -------
    type
        The estimator class (imported on first use).
    """
    try:
        module, _, cls = ESTIMATORS[name].partition(":")
    except (KeyError, TypeError):
        raise ValueError(f"Unknown method {name!r}; choose from {METHOD_NAMES}.") from None
    return getattr(importlib.import_module(module), cls)
