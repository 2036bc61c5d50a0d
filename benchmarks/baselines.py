"""The do-it-yourself baseline every sklode benchmark is measured against (not part of the
library: benchmarks and tests import it from this folder).

:func:`least_squares_fit` is what a scientist writes by hand: single shooting with
:func:`scipy.integrate.solve_ivp` inside :func:`scipy.optimize.least_squares` (finite-difference
Jacobian). Benchmarks run it in the same process as the sklode estimators and report speed as
a ratio to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import least_squares

__all__ = ["least_squares_fit", "least_squares_like_adjoint", "LeastSquaresResult", "NUMPY_RHS"]


# Hand-written numpy vector fields of the problems in sklode.datasets, as a user of plain
# scipy would write them (``fun(t, x, *theta)``). The baseline uses them so that its speed is
# not burdened by torch's per-call overhead; the tests use them as an independent check of
# the torch models.
def _lotka_volterra(t, x, a, b, c, d):
    return [a * x[0] - b * x[0] * x[1], -c * x[1] + d * x[0] * x[1]]


def _fitzhugh_nagumo(t, x, a, b, c):
    return [c * (x[0] - x[0] ** 3 / 3 + x[1]), -(x[0] - a + b * x[1]) / c]


def _rossler(t, x, a, b, c):
    return [-x[1] - x[2], x[0] + a * x[1], b + x[2] * (x[0] - c)]


def _lorenz96(t, x, F):
    return (np.roll(x, -1) - np.roll(x, 2)) * np.roll(x, 1) - x + F


def _seird(t, x, alpha, beta, gamma, mu, N=1e5):
    S, E, I = x[:3]  # noqa: E741
    infection = alpha * S * I / N
    return [-infection, infection - beta * E, beta * E - gamma * I, (gamma - mu) * I, mu * I]


def _logistic(t, x, w1, w2):
    return [w1 * x[0] + w2 * x[0] ** 2]


def _fitzhugh_nagumo_linear(t, x, *w):
    return [w[0] * x[0] + w[1] * x[0] ** 3 + w[2] * x[1], w[3] * x[0] + w[4] + w[5] * x[1]]


def _hindmarsh_rose(t, x, *w):
    u, v, z = x
    return [w[0] * v + w[1] * u**3 + w[2] * u**2 + w[3] * z, w[4] + w[5] * u**2 + w[6] * v,
            w[7] * u + w[8] + w[9] * z]


def _protein_transduction(t, x, *w, Km=0.3):
    S, dS, R, RS, Rpp = x
    sat = Rpp / (Km + Rpp)
    return [w[0] * S + w[1] * S * R + w[2] * RS, w[3] * S,
            w[4] * S * R + w[5] * RS + w[6] * sat, w[7] * S * R + w[8] * RS,
            w[9] * RS + w[10] * sat]


#: Problem name -> numpy ``fun(t, x, *theta)`` for :func:`scipy.integrate.solve_ivp`.
NUMPY_RHS = {
    "lotka_volterra": _lotka_volterra,
    "fitzhugh_nagumo": _fitzhugh_nagumo,
    "rossler": _rossler,
    "lorenz96": _lorenz96,
    "seird": _seird,
    "seird_e3": _seird,
    "seird_e4a": _seird,
    "seird_e4b": _seird,
    "seird_e4c": _seird,
    "wendy_logistic": _logistic,
    "wendy_lotka_volterra": _lotka_volterra,
    "wendy_fitzhugh_nagumo": _fitzhugh_nagumo_linear,
    "wendy_hindmarsh_rose": _hindmarsh_rose,
    "wendy_protein_transduction": _protein_transduction,
}


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
                      weights=None, extra=None, fun=None, integrator="LSODA", rtol=1e-8,
                      atol=1e-10, max_nfev=None):
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
    extra : callable, optional
        ``extra(x0) -> ndarray``: residuals appended to the data misfit (e.g. a prior on x0
        or a conservation penalty), so that the cost matches an AdjointODE cost exactly.
    fun : callable, optional
        Numpy vector field ``fun(t, x, *theta)`` (e.g. from :data:`NUMPY_RHS`); default: the
        model's own (torch-backed) :meth:`~sklode.ODEModel.f`.
    integrator, rtol, atol : passed to :func:`scipy.integrate.solve_ivp`.
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

    if fun is None:
        def fun(s, x, *theta):
            return model.f(s, x, np.asarray(theta))

    t_eval = t if t[0] > t0 else t[1:]
    limit = 1e8 * max(1.0, float(np.max(np.abs(Y))))

    def blowup(s, x, *theta):  # stop trajectories that explode instead of chasing them
        return limit**2 - float(np.dot(x, x)) if np.all(np.isfinite(x)) else -1.0

    blowup.terminal = True

    def residual(z):
        theta, x_init = unpack(z)
        with np.errstate(over="ignore", invalid="ignore"):  # failed trials are penalised below
            try:
                sol = solve_ivp(fun, (t0, t[-1]), x_init, method=integrator, t_eval=t_eval,
                                args=tuple(theta), rtol=rtol, atol=atol, events=blowup)
            except ValueError:  # the blow-up could not be located inside one step
                return np.full(n_res, 1e10)
        if sol.status != 0 or not np.all(np.isfinite(sol.y)):
            return np.full(n_res, 1e10)  # steer the optimiser away from failed regions
        X = sol.y.T if t[0] > t0 else np.vstack([x_init, sol.y.T])
        r = ((X[:, observed] - Y) / w).ravel()
        return r if extra is None else np.concatenate([r, np.ravel(extra(x_init))])

    n_res = Y.size + (0 if extra is None else np.size(extra(x0)))
    z0 = np.concatenate([theta0, x0]) if estimate_x0 else theta0
    sol = least_squares(residual, z0, x_scale="jac", max_nfev=max_nfev)
    theta, x_init = unpack(sol.x)
    return LeastSquaresResult(theta=theta.copy(), x0=np.array(x_init, dtype=np.float64),
                              cost=float(sol.cost), nfev=int(sol.nfev),
                              success=bool(sol.success), message=str(sol.message))


def least_squares_like_adjoint(problem, Y, *, numpy_rhs=True, **kwargs):
    """scipy ``least_squares`` on exactly the cost ``AdjointODE`` minimises for ``problem``.

    The weights, x0 prior and conservation penalty are those of
    :func:`sklode.adjoint.build_objective` with the registry's settings for the problem
    (``sklode.registry.METHODS["adjoint"]``), so the optimum is the one its fit should reach.

    Parameters
    ----------
    problem : Problem
    Y : ndarray
        Observations at ``problem.t`` of ``problem.observed``.
    numpy_rhs : bool, default=True
        Use the hand-written numpy vector field (what a user of scipy would write) rather
        than the model's torch one.
    **kwargs
        Passed on to :func:`least_squares_fit`.

    Returns
    -------
    LeastSquaresResult
    """
    from sklode._checks import check_theta0
    from sklode.adjoint import build_objective
    from sklode.registry import METHODS

    # The weights and the x0 terms are the objective's own, so the two costs cannot drift.
    settings = METHODS["adjoint"].settings(problem)
    objective, u0 = build_objective(problem.model, problem.t, np.asarray(Y, dtype=np.float64),
                                    **settings)
    theta0 = check_theta0(settings.get("theta0"), problem.model)
    has_extra = objective.extra_terms(objective.x0_fixed)[0].size > 0
    return least_squares_fit(problem.model, problem.t, Y, theta0, objective.x0_fixed,
                             t0=problem.t0, observed=problem.observed,
                             estimate_x0=bool(objective.n_x0), weights=objective.sigma,
                             extra=(lambda x: objective.extra_terms(x)[0]) if has_extra
                             else None,
                             fun=NUMPY_RHS.get(problem.name) if numpy_rhs else None, **kwargs)
