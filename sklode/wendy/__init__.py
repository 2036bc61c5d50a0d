"""WENDy (seed 001): weak-form estimation of ODE parameters with covariances.

* :class:`WENDyODE` -- the estimator;
* :func:`wendy_solve` -- the method on arrays (the estimator's solver), returning a
  :class:`WENDyResult`;
* :func:`estimate_noise`, :func:`select_min_radius`, :func:`test_function_matrices` -- its
  building blocks: the noise filter, the radius rule, the orthonormal test functions.
"""

from .._noise_level import estimate_noise
from ._estimator import WENDyODE
from ._irls import WENDyResult, wendy_solve
from ._testfunctions import select_min_radius, test_function_matrices

__all__ = ["WENDyODE", "WENDyResult", "estimate_noise", "select_min_radius",
           "test_function_matrices", "wendy_solve"]
