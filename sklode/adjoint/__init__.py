"""The adjoint method (seed 002): forward-solver weighted least squares with exact gradients.

* :class:`AdjointODE` -- the estimator;
* :func:`adjoint_solve` -- its optimisers on a cost (an :class:`AdjointResult` out; the
  covariance of the fit is :mod:`sklode.diagnostics._uncertainty`'s, shared by the three
  estimators);
* :func:`build_objective` -- the exact cost AdjointODE minimises, posed from the
  estimator's own keyword arguments (:class:`LeastSquaresObjective`);
* :func:`sensitivities`, :func:`adjoint_gradient` -- the two derivative passes on a stored
  forward trajectory.
"""

from ..outputerror._objective import NOISE_KINDS, LeastSquaresObjective
from ..outputerror._optimize import OPTIMIZERS, AdjointResult, adjoint_solve
from ..outputerror._pose import build_objective
from ..outputerror._sensitivity import (
           adjoint_gradient,
           forward_trajectory,
           sensitivities,
)
from ._estimator import AdjointODE

__all__ = ["NOISE_KINDS", "OPTIMIZERS", "AdjointODE", "AdjointResult", "LeastSquaresObjective",
           "adjoint_gradient", "adjoint_solve", "build_objective", "forward_trajectory",
           "sensitivities"]
