"""The BCD-prox outer loop (seed 000, Algorithm 1): arrays in, a :class:`BCDProxResult` out.

From ``X*(0) = Y`` it alternates the theta-step ``theta*(n) = argmin_theta E(X*(n-1), theta)``
and the proximal X-step ``X*(n) = argmin_X E(X, theta*(n)) + lam ||X - X*(n-1)||^2``
(:mod:`._fidelity`), optionally Anderson-accelerated, until the stop rule holds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from .._estimator import is_linear_on_data
from ..exceptions import DivergenceError
from . import _fidelity as fid

__all__ = ["BCDProxResult", "bcd_prox_solve"]

logger = logging.getLogger("sklode")

# The paper's stop rule: |E(n) - E(n-1)| below this absolute number (seed 000, Algorithm 1).
PAPER_STOP_TOL = 1e-8

# Anderson acceleration: coefficients from a Tikhonov-regularised least squares (relative
# ridge 1e-10 keeps near-collinear histories from producing huge extrapolations), and a
# restart when the fixed-point residual grows by more than this factor in one step.
_ANDERSON_RIDGE = 1e-10
_ANDERSON_RESTART_GROWTH = 2.0


@dataclass(frozen=True)
class BCDProxResult:
    """What :func:`bcd_prox_solve` returns.

    Attributes
    ----------
    theta : ndarray of shape (n_params,)
        Estimated parameters.
    states : ndarray of shape (n_times, n_states)
        The filtered states ``X*``, a true image of the outer map (never an extrapolation).
    theta_cov : ndarray of shape (n_params, n_params)
        Gauss-Newton covariance of the last theta-step, given ``X*``.
    fidelity_history : list of float
        ``E`` after each outer iteration.
    n_iter : int
        Outer iterations run.
    converged : bool
        Whether the stop rule held before ``max_iter``.
    stop_reason : str
        Why the loop stopped, in words.
    solver : str
        Which path ran.
    """

    theta: np.ndarray
    states: np.ndarray
    theta_cov: np.ndarray
    fidelity_history: list
    n_iter: int
    converged: bool
    stop_reason: str
    solver: str


# ------------------------------------------------------------------ the two block updates
def _gauss_newton_theta_step(model, grid, X, theta, linear, bounds, first):
    if linear:
        return fid.theta_step_linear(model, grid, X, bounds)
    # Nonlinear theta: Gauss-Newton to convergence from theta0 at the first iteration, then
    # warm-started single steps (the outer loop iterates anyway, and its fixed points are the
    # same: a Gauss-Newton fixed point is a stationary point of E(X, .)).
    max_iter = 50 if first else 1
    if bounds is not None:
        return fid.theta_step_bounded(model, grid, X, theta, bounds, max_iter=max_iter)
    return fid.theta_step_nonlinear(model, grid, X, theta, max_iter=max_iter)


def _lbfgs_theta_step(model, grid, X, theta, bounds):
    """The paper's theta-step: L-BFGS on E(X, .) with exact gradients."""
    def fun(th):
        E, _, dtheta = fid.fidelity_gradients(model, grid, X, th)
        return E, dtheta

    box = None if bounds is None else list(zip(*bounds))
    start = theta if bounds is None else np.clip(theta, *bounds)
    return minimize(fun, start, jac=True, method="L-BFGS-B", bounds=box,
                    options={"maxcor": 100}).x


def _lbfgs_x_step(model, grid, anchor, theta, lam, fixed):
    """The paper's X-step: L-BFGS on E(., theta) + lam ||X - anchor||^2 (fixed entries held
    by equal bounds)."""
    def fun(x):
        X = x.reshape(anchor.shape)
        E, dX, _ = fid.fidelity_gradients(model, grid, X, theta)
        diff = X - anchor
        return E + lam * float(np.sum(diff * diff)), (dX + 2.0 * lam * diff).ravel()

    box = None
    if fixed.size:
        flat = anchor.ravel()
        box = [(None, None)] * flat.size
        for f in fixed:
            box[f] = (flat[f], flat[f])
    res = minimize(fun, anchor.ravel(), jac=True, method="L-BFGS-B", bounds=box,
                   options={"maxcor": 100})
    X = res.x.reshape(anchor.shape)
    return X, fid.fidelity(model, grid, X, theta)


def _theta_covariance(model, grid, X, theta):
    """``s^2 (G^T G)^-1`` of the theta-step at ``X``, with ``s^2 = E / (n_residuals - p)``:
    the uncertainty of theta given the filtered states (not of the states themselves)."""
    G = fid.theta_jacobian(model, grid, X, theta)
    R = fid.residual(model, grid, X, theta)
    dof = max(R.size - theta.size, 1)
    return float(np.sum(R * R)) / dof * np.linalg.pinv(G.T @ G)


# ------------------------------------------------------------------ the outer loop
def bcd_prox_solve(model, t, Y, theta0, *, lam=1.0, order=3, optimizer="gauss-newton",
                   acceleration="anderson", anderson_memory=20, stop="relative", tol=1e-6,
                   max_iter=5000, bounds=None, x0=None, verbose=0):
    """Run BCD-prox: alternate the theta-step and the proximal X-step from ``X*(0) = Y``.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    t : ndarray of shape (n_times,)
        Strictly increasing times.
    Y : ndarray of shape (n_times, n_states)
        Observations of every state.
    theta0 : ndarray of shape (n_params,)
        Only used as the warm start of nonlinear theta-steps (and by the L-BFGS-B path); the
        first theta-step of a linear model is exact and ignores it.
    lam : float, default=1.0
        Proximal weight.
    order : int, default=3
        Adams-Bashforth order.
    optimizer : {"gauss-newton", "L-BFGS-B"}, default="gauss-newton"
        Block solvers (see :class:`BCDProxODE`).
    acceleration : {"anderson", "none"}, default="anderson"
        Acceleration of the outer map.
    anderson_memory : int, default=20
        Iterates Anderson mixes.
    stop : {"relative", "paper"}, default="relative"
        Stop rule.
    tol : float, default=1e-6
        Tolerance of the relative stop rule.
    max_iter : int, default=5000
        Maximum number of outer iterations.
    bounds : (ndarray, ndarray), optional
        Lower and upper bounds on theta, honoured by every theta-step.
    x0 : ndarray of shape (n_states,), optional
        Known values of the state at ``t[0]``, NaN where free: those entries of ``X*`` are
        held at the given value.
    verbose : int, default=0
        See :class:`BCDProxODE`.

    Returns
    -------
    BCDProxResult
        Parameters, filtered states, history and why the loop stopped.
    """
    grid = fid.Grid.build(t, order)
    linear = is_linear_on_data(model, t, Y)
    X = np.array(Y, dtype=np.float64)
    fixed = np.zeros(0, dtype=int)
    if x0 is not None and np.any(np.isfinite(x0)):
        fixed = np.flatnonzero(np.isfinite(x0))  # row 0 of the row-major X
        X[0, fixed] = x0[fixed]
    theta = np.array(theta0, dtype=np.float64)
    with np.errstate(all="ignore"):  # the field at the data, where the first steps evaluate it
        start = (fid.theta_jacobian(model, grid, X, theta) if linear
                 else fid.residual(model, grid, X, theta))
    if not np.all(np.isfinite(start)):
        raise DivergenceError(
            f"The vector field of {model!r} is not finite at the data (theta0={theta}): it "
            "overflows or is undefined at the observed states. Check the units of the data "
            "and the model's domain, or start from another theta0.", n_iter=0)
    use_lbfgs = optimizer == "L-BFGS-B"
    # λ = 0: the X-step must minimise E itself (a manifold of minimisers), not take one step.
    inner = 50 if lam == 0 else 1

    def outer_map(X_anchor, theta_prev, first):
        if use_lbfgs:
            th = _lbfgs_theta_step(model, grid, X_anchor, theta_prev, bounds)
            X_new, E_new = _lbfgs_x_step(model, grid, X_anchor, th, lam, fixed)
        else:
            th = _gauss_newton_theta_step(model, grid, X_anchor, theta_prev, linear, bounds,
                                          first)
            X_new, E_new = fid.x_step(model, grid, X_anchor, th, lam, max_inner=inner,
                                      fixed=fixed)
        return th, X_new, E_new

    history = []
    G_hist, F_hist = [], []  # Anderson: images G(x_k) and residuals G(x_k) - x_k
    converged, stop_reason = False, f"max_iter={max_iter} reached"
    E_prev = np.inf
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        try:
            with np.errstate(all="ignore"):  # non-finite results are reported just below
                theta_new, X_image, E_new = outer_map(X, theta, n_iter == 1)
        except np.linalg.LinAlgError:  # a step's least squares met non-finite numbers
            theta_new, X_image, E_new = theta, X, np.nan
        if not (np.isfinite(E_new) and np.all(np.isfinite(X_image))
                and np.all(np.isfinite(theta_new))):
            raise DivergenceError(
                f"BCD-prox produced non-finite states or parameters at iteration {n_iter} "
                f"(theta = {theta_new}). The initial guess theta0 may make the vector field "
                "explode on this grid; try a closer theta0 or a larger lam.", n_iter=n_iter)
        history.append(E_new)
        residual_fp = X_image - X
        rel_step = float(np.linalg.norm(residual_fp) / max(np.linalg.norm(X_image), 1e-300))
        rel_theta = float(np.linalg.norm(theta_new - theta)
                          / max(np.linalg.norm(theta_new), 1e-300))
        if verbose and (n_iter % max(1, 100 // verbose) == 0 or n_iter == 1):
            logger.info("BCD-prox iter %d: E = %.6g, |dX|/|X| = %.3g, theta = %s",
                        n_iter, E_new, rel_step, np.array2string(theta_new, precision=5))
        if stop == "paper":
            done = n_iter > 1 and abs(E_prev - E_new) < PAPER_STOP_TOL
            reason = f"|E(n) - E(n-1)| < {PAPER_STOP_TOL:g} (the paper's rule)"
        else:
            # λ is an inverse step size: the step is ~ grad E / (2 λ), so λ·|ΔX| measures the
            # gradient and makes the rule independent of λ (plus one so λ = 0 still stops).
            done = max((1.0 + lam) * rel_step, rel_theta) <= tol
            reason = f"relative change of X* and theta below tol={tol:g}"
        theta, E_prev = theta_new, E_new
        if done:
            X = X_image
            converged, stop_reason = True, reason
            break
        if acceleration == "anderson":
            X = _anderson_update(X, X_image, residual_fp, G_hist, F_hist, anderson_memory)
        else:
            X = X_image
    else:
        X = X_image
    if use_lbfgs:
        solver = "L-BFGS-B on both blocks (the paper's)"
    else:
        step = ("linear least squares" if linear else "Gauss-Newton") + (
            " with bounds" if bounds is not None else "")
        x_solve = ("banded Cholesky" if (order + 1) * Y.shape[1] <= fid._BANDED_MAX_WIDTH
                   else "sparse CG")
        solver = f"gauss-newton: theta-step {step}, X-step {x_solve}"
    solver += ", Anderson-accelerated" if acceleration == "anderson" else ", plain iteration"
    return BCDProxResult(theta=theta, states=X, theta_cov=_theta_covariance(model, grid, X, theta),
                         fidelity_history=history, n_iter=n_iter, converged=converged,
                         stop_reason=stop_reason, solver=solver)


def _anderson_update(X, X_image, residual_fp, G_hist, F_hist, memory):
    """Anderson (type II) extrapolation of the fixed-point map ``X -> X_image``.

    Keeps the last ``memory`` differences of images and residuals, mixes them with the
    least-squares coefficients that minimise the linearised residual, and restarts from the
    plain image when the residual grows (``_ANDERSON_RESTART_GROWTH``).
    """
    g, f = X_image.ravel(), residual_fp.ravel()
    if F_hist and np.linalg.norm(f) > _ANDERSON_RESTART_GROWTH * np.linalg.norm(F_hist[-1]):
        G_hist.clear()
        F_hist.clear()
    G_hist.append(g)
    F_hist.append(f)
    if len(F_hist) > memory + 1:
        G_hist.pop(0)
        F_hist.pop(0)
    if len(F_hist) < 2:
        return X_image
    dF = np.diff(np.array(F_hist), axis=0).T  # (n, k)
    dG = np.diff(np.array(G_hist), axis=0).T
    gram = dF.T @ dF
    ridge = _ANDERSON_RIDGE * np.trace(gram) + 1e-300
    gamma = np.linalg.solve(gram + ridge * np.eye(gram.shape[0]), dF.T @ f)
    return (g - dG @ gamma).reshape(X.shape)
