"""The do-it-yourself baseline every sklode benchmark is measured against.

:func:`least_squares_fit` is what a scientist writes by hand: single shooting with
:func:`scipy.integrate.solve_ivp` inside :func:`scipy.optimize.least_squares` (finite-difference
Jacobian). Benchmarks run it in the same process as the sklode estimators and report speed as
a ratio to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import least_squares

from .exceptions import IntegrationError
from .integrate import simulate

__all__ = ["least_squares_fit", "LeastSquaresResult"]


@dataclass(frozen=True)
class LeastSquaresResult:
    """Outcome of :func:`least_squares_fit`."""

    theta: np.ndarray
    x0: np.ndarray
    cost: float
    nfev: int
    success: bool
    message: str


def least_squares_fit(model, t, Y, theta0, x0, *, t0=None, observed=None, estimate_x0=True,
                      weights=None, integrator="LSODA", rtol=1e-8, atol=1e-10, max_nfev=None):
    """Fit ``theta`` (and ``x0``) by simulating and minimising the squared misfit.

    Parameters
    ----------
    model : ODEModel
    t : ndarray of shape (n_times,), sorted
    Y : ndarray of shape (n_times, n_observed)
    theta0 : array-like of shape (n_params,)
    x0 : array-like of shape (n_states,)
        Initial state (the starting guess when ``estimate_x0``).
    t0 : float, optional
        Time of ``x0``; default ``t[0]``.
    observed : sequence of int, optional
        States held by Y's columns; default all.
    estimate_x0 : bool, default=True
    weights : ndarray like Y, optional
        Residuals are divided by these (standard deviations).
    integrator, rtol, atol : passed to :func:`~sklode.simulate`.
    max_nfev : int, optional

    Returns
    -------
    LeastSquaresResult
    """
    t = np.asarray(t, dtype=np.float64)
    Y = np.asarray(Y, dtype=np.float64)
    observed = list(range(model.n_states)) if observed is None else list(observed)
    t0 = float(t[0]) if t0 is None else float(t0)
    theta0 = np.asarray(theta0, dtype=np.float64)
    x0 = np.asarray(x0, dtype=np.float64)
    w = np.ones_like(Y) if weights is None else np.asarray(weights, dtype=np.float64)
    n_p = model.n_params

    def unpack(z):
        return z[:n_p], (z[n_p:] if estimate_x0 else x0)

    def residual(z):
        theta, x_init = unpack(z)
        try:
            X = simulate(model, theta, x_init, t, t0=t0, integrator=integrator, rtol=rtol,
                         atol=atol)
        except IntegrationError:
            return np.full(Y.size, 1e10)  # steer the optimiser away from blown-up regions
        return ((X[:, observed] - Y) / w).ravel()

    z0 = np.concatenate([theta0, x0]) if estimate_x0 else theta0
    sol = least_squares(residual, z0, x_scale="jac", max_nfev=max_nfev)
    theta, x_init = unpack(sol.x)
    return LeastSquaresResult(theta=theta.copy(), x0=np.array(x_init, dtype=np.float64),
                              cost=float(sol.cost), nfev=int(sol.nfev),
                              success=bool(sol.success), message=str(sol.message))
