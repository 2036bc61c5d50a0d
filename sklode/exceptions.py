"""The exceptions and warnings sklode raises: one family for all three estimators.

Every error a fit can raise for a reason inside the numerics derives from :class:`SklodeError`,
so ``except sklode.exceptions.SklodeError`` catches all of them whichever method ran. Each
also derives from the builtin a caller would naturally catch (``ValueError`` for a bad model,
``RuntimeError`` for a failed integration, ``FloatingPointError`` for diverging iterations).
Bad arguments and bad data raise plain ``ValueError``/``TypeError`` with a message that names
the argument and the way out, as scikit-learn does.

Non-convergence is reported with scikit-learn's own
:class:`sklearn.exceptions.ConvergenceWarning`, re-exported here.
"""

import os
import sys
import warnings

from sklearn.exceptions import ConvergenceWarning

__all__ = [
    "BoundWarning",
    "CompilationWarning",
    "ConvergenceWarning",
    "DivergenceError",
    "IdentifiabilityWarning",
    "InitialTimeWarning",
    "StartWarning",
    "IntegrationError",
    "ModelError",
    "IdentifiabilityError",
    "NotLinearInThetaError",
    "PoorFitWarning",
    "SklodeError",
]


class SklodeError(Exception):
    """Base class of the errors raised by sklode's numerics (not of argument errors)."""


class ModelError(SklodeError, ValueError):
    """An :class:`~sklode.ODEModel` is malformed (names, output shape or dtype of ``rhs``)."""


class NotLinearInThetaError(ModelError):
    """The model's vector field is not affine in its parameters."""


class IntegrationError(SklodeError, RuntimeError):
    """Forward integration of the ODE failed or blew up.

    Parameters
    ----------
    message : str
        What happened and what to try.
    t_reached : float, default=nan
        The last time the integrator reached.

    Attributes
    ----------
    t_reached : float
        The last time the integrator reached.
    """

    def __init__(self, message, t_reached=float("nan")):
        super().__init__(message)
        self.t_reached = t_reached


class IdentifiabilityError(SklodeError, ValueError):
    """The data do not determine some parameters: a fit cannot go on (a singular information
    matrix), and the message names them and what to do.

    Parameters
    ----------
    message : str
        Which parameters, and what to try.
    parameters : list of str, default=()
        Their names.

    Attributes
    ----------
    parameters : list of str
        The parameters involved.
    """

    def __init__(self, message, parameters=()):
        super().__init__(message)
        self.parameters = list(parameters)


class DivergenceError(SklodeError, FloatingPointError):
    """A method's iterates became non-finite (the vector field exploded on the data).

    Parameters
    ----------
    message : str
        Which method, at which iteration, and what to try.
    n_iter : int, default=-1
        The iteration at which it happened (-1: unknown).

    Attributes
    ----------
    n_iter : int
        The iteration at which it happened.
    """

    def __init__(self, message, n_iter=-1):
        super().__init__(message)
        self.n_iter = n_iter


class PoorFitWarning(UserWarning):
    """A fit finished (perhaps converged) but the method has reason to distrust it: the
    message says why and what to try instead."""


class IdentifiabilityWarning(UserWarning):
    """The data cannot pin down some parameters or initial values (their Fisher information
    is singular or nearly so): the message names them and the combination the data do
    determine. Where it is singular their standard errors are infinite; where it is only
    nearly so they are finite but large, and the message says which is which."""


class InitialTimeWarning(UserWarning):
    """Known initial values were given without ``t0`` and the data do not start at time 0,
    so it is ambiguous which time they hold at: they are taken at the first observation time
    (the documented default), and ``t0`` silences the warning."""


class BoundWarning(UserWarning):
    """A fitted parameter ended on one of its bounds: the optimum may lie beyond it (widen
    the bound if it is not a physical limit), and its standard error and interval, computed
    as if the bound were not there, do not describe it."""


class CompilationWarning(UserWarning):
    """``integrator="CVODES"`` was asked for but the model could not be compiled (no C
    compiler or SUNDIALS here, or an ``rhs`` that cannot be recorded, such as Python control
    flow on a value):
    the solve runs on scipy's LSODA instead, with the same tolerances. Said once per model;
    and once per process where ``integrator="auto"`` cannot use CVODES on this machine."""


class StartWarning(UserWarning):
    """The start a setting asked for could not be had (``init=`` could not fit the data),
    so the fit started elsewhere (``theta0``): the message says why; ``solver_`` too."""


# Frames a warning must not point at: sklode's own, and scikit-learn's fit wrapper (the
# ``_fit_context`` decorator in sklearn/base.py) between the user's call and ``fit``.
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
_WRAPPERS = (os.path.join("sklearn", "base.py"),)


def warn(message, category):
    """``warnings.warn`` pointing at the first frame outside sklode (the user's line), however
    deep inside sklode the warning was raised.

    Parameters
    ----------
    message : str
    category : type of Warning
    """
    frame, level = sys._getframe(1), 2  # level 2: the caller of this function
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE_DIR)
                                 or frame.f_code.co_filename.endswith(_WRAPPERS)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
