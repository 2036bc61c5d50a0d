"""ODE models: the :class:`ODEModel` base class and the zoo of the three papers' systems."""

from ._base import ODEModel
from ._check import check_model
from ._event import Event
from ._wrappers import FunctionModel
from ._zoo import (
    SEIRD,
    FitzHughNagumo,
    FitzHughNagumoLinear,
    HindmarshRose,
    LogisticGrowth,
    Lorenz63,
    Lorenz96,
    LotkaVolterra,
    OralAbsorption,
    ProteinTransduction,
    Rossler,
    TwoCompartmentIV,
)

__all__ = [
    "ODEModel",
    "Event",
    "FunctionModel",
    "check_model",
    "LotkaVolterra",
    "FitzHughNagumo",
    "Rossler",
    "Lorenz96",
    "Lorenz63",
    "SEIRD",
    "LogisticGrowth",
    "FitzHughNagumoLinear",
    "HindmarshRose",
    "ProteinTransduction",
    "OralAbsorption",
    "TwoCompartmentIV",
]
