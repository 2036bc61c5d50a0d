"""Exceptions and warnings raised by sklode.

Non-convergence is reported with scikit-learn's own
:class:`sklearn.exceptions.ConvergenceWarning`, re-exported here for convenience.
"""

from sklearn.exceptions import ConvergenceWarning

__all__ = ["ConvergenceWarning", "IntegrationError", "ModelError", "NotLinearInThetaError"]


class ModelError(ValueError):
    """An :class:`~sklode.ODEModel` is malformed (names, output shape or dtype of ``rhs``)."""


class NotLinearInThetaError(ValueError):
    """The model's vector field is not affine in its parameters."""


class IntegrationError(RuntimeError):
    """Forward integration of the ODE failed or blew up.

    Attributes
    ----------
    t_reached : float
        The last time the integrator reached.
    """

    def __init__(self, message, t_reached=float("nan")):
        super().__init__(message)
        self.t_reached = t_reached
