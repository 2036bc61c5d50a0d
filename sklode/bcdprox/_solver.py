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

from .._checks import canonical_optimizer
from .._on_grid import is_linear_on_data
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
    states : list of ndarray of shape (n_times_e, n_states)
        The filtered states ``X*`` of each experiment, a true image of the outer map (never
        an extrapolation).
    fidelity_history : list of float
        ``E`` (summed over experiments) after each outer iteration.
    theta_history : list of ndarray
        ``theta`` after each outer iteration.
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
    states: list
    fidelity_history: list
    n_iter: int
    converged: bool
    stop_reason: str
    solver: str
    theta_history: list


# ------------------------------------------------------------------ the two block updates
def _gauss_newton_theta_step(model, grids, Xs, theta, linear, bounds, first):
    if linear:
        return fid.theta_step_linear(model, grids, Xs, bounds)
    # Nonlinear theta: Gauss-Newton to convergence from theta0 at the first iteration, then
    # warm-started single steps (the outer loop iterates anyway, and its fixed points are the
    # same: a Gauss-Newton fixed point is a stationary point of E(X, .)).
    max_iter = 50 if first else 1
    if bounds is not None:
        return fid.theta_step_bounded(model, grids, Xs, theta, bounds, max_iter=max_iter)
    return fid.theta_step_nonlinear(model, grids, Xs, theta, max_iter=max_iter)


def _lbfgs_theta_step(model, grids, Xs, theta, bounds):
    """The paper's theta-step: L-BFGS on sum_e E(X_e, .) with exact gradients."""
    def fun(th):
        E, grad = 0.0, np.zeros_like(th)
        for grid, X in zip(grids, Xs):
            Ee, _, dtheta = fid.fidelity_gradients(model, grid, X, th)
            E, grad = E + Ee, grad + dtheta
        return E, grad

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


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


# ------------------------------------------------------------------ the outer loop
def bcd_prox_solve(model, t, X_start, theta0, *, held=None, data_held=None, x0_bounds=None,
                   lam=1.0, order=3, optimizer="gauss-newton", acceleration="anderson",
                   anderson_memory=20, stop="relative", tol=1e-6, max_iter=5000, bounds=None,
                   verbose=0):
    """Run BCD-prox: alternate the theta-step and the proximal X-step from ``X*(0)``.

    Several experiments share theta: the theta-step stacks the residuals of all of them,
    and the X-step, separable across experiments, solves one block per experiment.

    With ``data_held`` (some state hidden) the iteration runs in two stages. The start of a
    hidden state, integrated with ``theta0``, is consistent with ``theta0`` itself, so the
    paper's iteration, free to move every entry, settles next to it: SEIRD with S and E
    hidden kept alpha and beta 44 % and 36 % off, at theta0. The first stage therefore holds
    the observations at the data while the hidden components and theta move (block
    coordinate descent of the fidelity, the hidden components anchored by the proximal term
    only), which lets the data decide theta; the second stage is the paper's iteration from
    there, which filters the observed states too (SEIRD: alpha and beta within 3-4 %).

    Parameters
    ----------
    model : ODEModel
        The vector field.
    t : ndarray of shape (n_times,), or a list of them (one per experiment)
        Strictly increasing times.
    X_start : ndarray of shape (n_times, n_states), or a list of them
        The start ``X*(0)`` of each experiment: the observations of every state (the
        paper's), or what :func:`sklode.bcdprox._start.start_states` builds from partial
        data.
    theta0 : ndarray of shape (n_params,)
        Only used as the warm start of nonlinear theta-steps (and by the L-BFGS-B path); the
        first theta-step of a linear model is exact and ignores it.
    held : ndarray of bool of shape (n_states,) or (n_times, n_states), or a list of them
        Entries of each experiment held at their value in ``X_start``: a vector marks the
        components of the first row (a known initial state), a matrix any entry.
    x0_bounds : (ndarray, ndarray), optional
        Lower and upper bounds of shape ``(n_states,)`` on the first row of every
        experiment: each X-step's result is projected onto them.
    lam : float, default=1.0
        Proximal weight.
    order : int, default=3
        Adams-Bashforth order.
    optimizer : {"gauss-newton", "l-bfgs-b"}, default="gauss-newton"
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
    verbose : int, default=0
        See :class:`BCDProxODE`.
    data_held : ndarray of bool of shape (n_times, n_states), or a list of them, optional
        The observed entries of each experiment, held at their value in ``X_start`` during
        a first stage (see above); None: one stage.

    Returns
    -------
    BCDProxResult
        Parameters, filtered states, history and why the loop stopped.
    """
    if data_held is not None:
        options = dict(x0_bounds=x0_bounds, lam=lam, order=order, optimizer=optimizer,
                       acceleration=acceleration, anderson_memory=anderson_memory,
                       stop=stop, tol=tol, max_iter=max_iter, bounds=bounds, verbose=verbose)
        starts = _as_list(X_start)
        rows = _as_list(np.zeros(starts[0].shape[1], bool) if held is None else held)
        first_held = []
        for k, entries in enumerate(_as_list(data_held)):
            entries = np.array(entries, dtype=bool)
            entries[0] |= np.asarray(rows[min(k, len(rows) - 1)], dtype=bool)
            first_held.append(entries)
        first = bcd_prox_solve(model, t, starts, theta0, held=first_held, **options)
        second = bcd_prox_solve(model, t, first.states, first.theta, held=held, **options)
        return BCDProxResult(
            theta=second.theta, states=second.states,
            fidelity_history=first.fidelity_history + second.fidelity_history,
            theta_history=first.theta_history + second.theta_history,
            n_iter=first.n_iter + second.n_iter,
            converged=first.converged and second.converged,
            stop_reason=second.stop_reason if first.converged
            else f"first stage (observations held): {first.stop_reason}",
            solver=second.solver + f", after a first stage with the observations held "
                                   f"({first.n_iter} iterations)")
    ts = [np.asarray(ti, dtype=np.float64) for ti in _as_list(t)]
    Xs = [np.array(Xi, dtype=np.float64) for Xi in _as_list(X_start)]
    n_states = Xs[0].shape[1]
    helds = _as_list(np.zeros(n_states, bool) if held is None else held)
    if len(helds) == 1 and len(Xs) > 1:
        helds = helds * len(Xs)
    grids = [fid.Grid.build(ti, order) for ti in ts]
    # Flat (row-major) indices of the held entries: a 1-D mask is the first row.
    fixed = [np.flatnonzero(np.asarray(h, dtype=bool)) for h in helds]
    linear = is_linear_on_data(model, ts[0], Xs[0])
    theta = np.array(theta0, dtype=np.float64)
    with np.errstate(all="ignore"):  # the field at the data, where the first steps evaluate it
        start = (fid.stacked_theta_jacobian(model, grids, Xs, theta) if linear
                 else fid.stacked_residual(model, grids, Xs, theta))
    if not np.all(np.isfinite(start)):
        raise DivergenceError(
            f"The vector field of {model!r} is not finite at the data (theta0={theta}): it "
            "overflows or is undefined at the observed states. Check the units of the data "
            "and the model's domain, or start from another theta0.", n_iter=0)
    use_lbfgs = canonical_optimizer(optimizer) == "l-bfgs-b"
    # λ = 0: the X-step must minimise E itself (a manifold of minimisers), not take one step.
    inner = 50 if lam == 0 else 1

    def project(X):  # the initial-state bounds, on the first row
        if x0_bounds is not None:
            X[0] = np.clip(X[0], *x0_bounds)
        return X

    def outer_map(anchors, theta_prev, first):
        if use_lbfgs:
            th = _lbfgs_theta_step(model, grids, anchors, theta_prev, bounds)
        else:
            th = _gauss_newton_theta_step(model, grids, anchors, theta_prev, linear, bounds,
                                          first)
        images, E_total = [], 0.0
        for grid, anchor, fixed_e in zip(grids, anchors, fixed):
            if use_lbfgs:
                X_new, E_e = _lbfgs_x_step(model, grid, anchor, th, lam, fixed_e)
            else:
                X_new, E_e = fid.x_step(model, grid, anchor, th, lam, max_inner=inner,
                                        fixed=fixed_e)
            if x0_bounds is not None:
                X_new = project(X_new)
                E_e = fid.fidelity(model, grid, X_new, th)
            images.append(X_new)
            E_total += E_e
        return th, images, E_total

    shapes = [X.shape for X in Xs]
    splits = np.cumsum([X.size for X in Xs])[:-1]

    def flat(arrays):
        return np.concatenate([a.ravel() for a in arrays])

    def unflat(v):
        return [part.reshape(shape) for part, shape in zip(np.split(v, splits), shapes)]

    Xs = [project(X) for X in Xs]
    history, thetas = [], []
    G_hist, F_hist = [], []  # Anderson: images G(x_k) and residuals G(x_k) - x_k
    converged, stop_reason = False, f"max_iter={max_iter} reached"
    E_prev = np.inf
    n_iter = 0
    for n_iter in range(1, max_iter + 1):
        try:
            with np.errstate(all="ignore"):  # non-finite results are reported just below
                theta_new, images, E_new = outer_map(Xs, theta, n_iter == 1)
        except np.linalg.LinAlgError:  # a step's least squares met non-finite numbers
            theta_new, images, E_new = theta, Xs, np.nan
        x_now, x_image = flat(Xs), flat(images)
        if not (np.isfinite(E_new) and np.all(np.isfinite(x_image))
                and np.all(np.isfinite(theta_new))):
            raise DivergenceError(
                f"BCD-prox produced non-finite states or parameters at iteration {n_iter} "
                f"(theta = {theta_new}). The initial guess theta0 may make the vector field "
                "explode on this grid; try a closer theta0 or a larger lam.", n_iter=n_iter)
        history.append(E_new)
        thetas.append(np.array(theta_new, dtype=np.float64))
        residual_fp = x_image - x_now
        rel_step = float(np.linalg.norm(residual_fp) / max(np.linalg.norm(x_image), 1e-300))
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
            Xs = images
            converged, stop_reason = True, reason
            break
        if acceleration == "anderson":
            Xs = unflat(_anderson_update(x_now, x_image, residual_fp, G_hist, F_hist,
                                         anderson_memory))
        else:
            Xs = images
    else:
        Xs = images
    if use_lbfgs:
        solver = "L-BFGS-B on both blocks (the paper's)"
    else:
        step = ("linear least squares" if linear else "Gauss-Newton") + (
            " with bounds" if bounds is not None else "")
        x_solve = ("banded Cholesky" if (order + 1) * n_states <= fid._BANDED_MAX_WIDTH
                   else "sparse CG")
        solver = f"gauss-newton: theta-step {step}, X-step {x_solve}"
    solver += ", Anderson-accelerated" if acceleration == "anderson" else ", plain iteration"
    if len(Xs) > 1:
        solver += f", {len(Xs)} experiments"
    return BCDProxResult(theta=theta, states=Xs, fidelity_history=history, n_iter=n_iter,
                         converged=converged, stop_reason=stop_reason, solver=solver,
                         theta_history=thetas)


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
