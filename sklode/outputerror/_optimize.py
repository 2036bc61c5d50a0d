"""AdjointODE's optimisers on a :class:`~._objective.LeastSquaresObjective`: one entry point,
:func:`adjoint_solve`, returning an :class:`AdjointResult`.

Gauss-Newton type methods (scipy's trust-region ``least_squares``, the default) use the
forward-sensitivity Jacobian of the residual; gradient methods (BFGS, L-BFGS-B, the four
nonlinear CG updates) use the continuous-adjoint gradient (or forward sensitivities).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, minimize

from ..exceptions import IntegrationError
from ._cg import nonlinear_cg
from .._checks import canonical_optimizer

__all__ = ["OPTIMIZERS", "AdjointResult", "adjoint_solve"]

logger = logging.getLogger("sklode")

#: Optimisers accepted by ``AdjointODE(optimizer=...)`` (sklode's one spelling: lower case,
#: words joined by "-"), and what drives each.
OPTIMIZERS = {
    "trf": "scipy least_squares, trust-region reflective, sensitivity Jacobian (bounds ok)",
    "fides": "Fides interior trust region, Gauss-Newton then BFGS, sensitivity Jacobian "
             "(bounds ok; optional package fides)",
    "lm": "scipy least_squares, MINPACK Levenberg-Marquardt, sensitivity Jacobian",
    "bfgs": "scipy BFGS (Wolfe line search), adjoint gradient",
    "l-bfgs-b": "scipy L-BFGS-B, adjoint gradient (bounds ok)",
    "cg-fr": "nonlinear CG, Fletcher-Reeves, strong-Wolfe line search, adjoint gradient",
    "cg-pr": "nonlinear CG, Polak-Ribiere (PR+)",
    "cg-hs": "nonlinear CG, Hestenes-Stiefel",
    "cg-dy": "nonlinear CG, Dai-Yuan",
}
#: The optimisers that honour bounds.
BOUNDED_OPTIMIZERS = ("trf", "fides", "l-bfgs-b")
# A gradient method whose line search fails once the gradient has dropped by this factor has
# hit the accuracy of a cost computed by an ODE solver (the seed's "eps < 1e-5" floor for CG).
_LINE_SEARCH_FLOOR = 1e-5
# Trial points may take this many times the field evaluations the start needed (>= 20000).
_TRIAL_EVALUATION_FACTOR = 20


@dataclass
class AdjointResult:
    """What :func:`adjoint_solve` returns.

    Attributes
    ----------
    u : ndarray
        The optimum in optimiser variables (``objective.to_z`` maps it back).
    n_iter : int
        Iterations run.
    converged : bool
        The optimiser's own convergence test.
    stop_reason : str
        Why it stopped, in words.
    solver : str
        Which optimiser and derivative ran.
    loss_history : list of float
        Cost after each iteration (index 0: the start).
    grad_norm_history : list of float
        Gradient norm in optimiser variables, likewise.
    """

    u: np.ndarray
    n_iter: int
    converged: bool
    stop_reason: str
    solver: str
    loss_history: list = field(default_factory=list)
    grad_norm_history: list = field(default_factory=list)


class _MaxIterReached(Exception):
    pass


def cannot_start(objective, u0, exc, also=""):
    """The :class:`~sklode.exceptions.IntegrationError` of a fit whose ODE fails at its start
    ``u0`` with ``exc`` (``also``: a sentence added at the end)."""
    x0, theta0 = objective.split(objective.to_z(u0))
    return IntegrationError(
        f"AdjointODE cannot start: the ODE fails at the initial guess theta0={theta0}, "
        f"x0={x0}. {exc}{also}", t_reached=exc.t_reached)


def adjoint_solve(objective, u0, *, optimizer="trf", gradient="adjoint", bounds=None,
                  tol=1e-8, max_iter=200, verbose=0, cost_offset=0.0):
    """Minimise ``objective`` from ``u0`` with the chosen optimiser.

    Parameters
    ----------
    objective : LeastSquaresObjective or ExperimentsObjective
        The cost (:func:`~sklode.adjoint.build_objective`).
    u0 : ndarray
        Start, in optimiser variables (strictly inside ``bounds``).
    optimizer : str, default="trf"
        One of :data:`OPTIMIZERS`.
    gradient : {"adjoint", "forward"}, default="adjoint"
        How gradient methods get the gradient.
    bounds : (ndarray, ndarray), optional
        Bounds on ``u``: native in ``"trf"`` and ``"l-bfgs-b"``, through :class:`BoxMap` in
        the others.
    tol : float, default=1e-8
        ``least_squares`` ftol/xtol/gtol; gradient methods stop when ``||g|| <= tol ||g0||``.
    max_iter : int, default=200
        Maximum number of iterations (``"lm"``: of function evaluations, MINPACK's limit,
        which bounds the iterations too).
    verbose : int, default=0
        Log each iteration.
    cost_offset : float, default=0.0
        The cost minus ``-log L`` (:meth:`LeastSquaresObjective.cost_offset`), or 0 where
        the cost is not a likelihood. ``"fides"`` minimises the cost less this constant, so
        that its relative stopping test (``frtol``) reads ``-log L`` as pyPESTO's does; the
        other optimisers' steps and tests do not depend on it.

    Returns
    -------
    AdjointResult
        The optimum, the iteration count, why it stopped and the histories.

    Raises
    ------
    IntegrationError
        The ODE cannot be solved at the starting point.
    """
    optimizer = canonical_optimizer(optimizer)
    try:
        start_evaluations = objective.evaluations_at(u0)
    except IntegrationError as exc:
        raise cannot_start(objective, u0, exc) from exc
    objective.set_policy(
        max_evaluations=max(20_000, _TRIAL_EVALUATION_FACTOR * start_evaluations))
    history = {"loss": [], "grad": []}

    def log(loss, grad):
        history["loss"].append(float(loss))
        history["grad"].append(float(np.linalg.norm(grad)))
        if verbose:
            logger.info("AdjointODE iter %d: L = %.10g, |grad| = %.3g",
                        len(history["loss"]) - 1, loss, history["grad"][-1])

    if bounds is not None and optimizer not in BOUNDED_OPTIMIZERS:
        # The unconstrained optimisers honour bounds through a smooth change of variables
        # (the same algorithm on w, never a switch to a bounded one); the optimum is strictly
        # inside, within the optimiser's tolerance of an active bound.
        box = BoxMap(*bounds)
        result = adjoint_solve(_OnBox(objective, box), box.to_w(u0), optimizer=optimizer,
                               gradient=gradient, bounds=None, tol=tol, max_iter=max_iter,
                               verbose=verbose)
        result.u = box.to_u(result.u)
        result.solver += ", bounds by a smooth change of variables"
        return result
    if optimizer in ("trf", "lm"):
        result = _least_squares(objective, u0, optimizer, bounds, tol, max_iter, log)
        result.n_iter = max(len(history["loss"]) - 1, 0)
    elif optimizer == "fides":
        result = _fides(objective, u0, bounds, tol, max_iter, log, cost_offset)
    else:
        result = _gradient_method(objective, u0, optimizer, gradient, bounds, tol, max_iter,
                                  log)
    result.loss_history, result.grad_norm_history = history["loss"], history["grad"]
    return result


class _DerivativeFailed(Exception):
    """The sensitivities could not be integrated at a point whose residual could."""


def _least_squares(objective, u0, optimizer, bounds, tol, max_iter, log):
    last_good = []  # the last point whose Jacobian was computed

    def jac(u):
        try:
            J = objective.jacobian(u)
        except IntegrationError as exc:
            if not last_good:
                raise
            raise _DerivativeFailed(exc.t_reached) from exc
        last_good[:] = [np.array(u, dtype=np.float64)]
        if not np.all(np.isfinite(J)):
            # a sensitivity that overflowed at a finite residual (a noise level near 0, a
            # stiff transient): scipy's trf stops on it with a bare "infs or NaNs"; zero
            # those entries so the trust region steps on with the rest
            J = np.where(np.isfinite(J), J, 0.0)
        r = objective.residual(u)
        log(0.5 * r @ r, J.T @ r)  # jac runs once per accepted iterate
        return J

    box = bounds if bounds is not None else (-np.inf, np.inf)
    if optimizer == "lm" and bounds is None:
        # MINPACK has no iteration limit: bounding the evaluations bounds the iterations.
        res = least_squares(objective.residual, u0, jac=jac, method="lm", ftol=tol, xtol=tol,
                            gtol=tol, max_nfev=max_iter, x_scale=1.0)
        solver = "lm (MINPACK Levenberg-Marquardt, sensitivity Jacobian)"
    else:
        n_done = [0]

        def callback(intermediate_result):
            n_done[0] += 1
            if n_done[0] >= max_iter:
                raise StopIteration

        solver = "trf (trust-region reflective, sensitivity Jacobian)"
        try:
            res = least_squares(objective.safe_residual, u0, jac=jac, method="trf",
                                bounds=box, ftol=tol, xtol=tol, gtol=tol, x_scale=1.0,
                                callback=callback)
        except _DerivativeFailed as exc:
            # an accepted step to where the states integrate but their sensitivities do not
            # (a random start in a 16-decade PEtab box): keep the fit so far, say why
            return AdjointResult(
                u=last_good[0], n_iter=0, converged=False, solver=solver,
                stop_reason="stopped at the last point whose sensitivities could be "
                            "integrated: at the next accepted point they failed at "
                            f"t={exc.args[0]:.6g}")
    if res.status == -2:
        converged, reason = False, f"max_iter={max_iter} reached"
    else:
        converged, reason = res.status > 0, str(res.message)
    return AdjointResult(u=res.x, n_iter=0, converged=converged, stop_reason=reason,
                         solver=solver)


def fides_unavailable_reason():
    """Why ``optimizer="fides"`` cannot run here, or None when it can."""
    try:
        import fides  # noqa: F401
    except ImportError:
        return ("optimizer='fides' needs the package fides: pip install fides "
                "(or pip install 'sklode[petab]')")
    return None


def _fides(objective, u0, bounds, tol, max_iter, log, cost_offset=0.0):
    """Fides' interior trust region (Fröhlich & Sorger 2022, the optimiser pyPESTO runs on
    the PEtab collection) on ``L = 1/2 ||r||^2``: the Gauss-Newton matrix ``J^T J`` as the
    Hessian until 20 iterations pass without a trust-region update, BFGS after (its
    ``HybridFixed``), steps reflected at the bounds. On fits with many local optima (random
    starts in a PEtab box) trf tends to stop on its ftol test at a point Fides moves on from.

    Fides sees ``L - cost_offset`` (``-log L`` on a likelihood): its stopping test
    ``|df| < fatol + frtol |f|`` is relative to the cost, and the noise rows' constant made
    ``|L|`` 3-23x ``|-log L|`` on the PEtab problems, so fits stopped that much earlier than
    pyPESTO's from the same start.
    """
    reason = fides_unavailable_reason()
    if reason:
        raise ImportError(reason)
    import fides

    n = u0.size
    evaluated = [False]
    best = [np.inf]

    rejected = (np.nan, np.full(n, np.nan), np.full((n, n), np.nan))

    def fun(u):
        try:
            r = objective.residual(u)
            cost = 0.5 * float(r @ r) - cost_offset
            # the next trial point's states come with their sensitivities when this one
            # improved (most trust-region steps are taken: one solve instead of two), alone
            # after a rejection (the region shrinks; the next step may be rejected too)
            objective.set_policy(
                prefetch_sensitivities=not evaluated[0] or cost < optimizer.fval)
            if evaluated[0] and cost >= optimizer.fval:
                # No lower than the current iterate: Fides rejects this step whatever the
                # gradient (its ratio of actual to predicted decrease is <= 0, as the
                # Coleman-Li term it subtracts is >= 0) and shrinks the trust region exactly
                # as for a non-finite cost. Saying so spares the sensitivity solve.
                return rejected
            # a trial point whose CVODES sensitivities fail is rejected, as pyPESTO does
            # where AMICI fails, rather than differentiated on LSODA's trajectory (across
            # Weber et al.'s dose at t = 24: 15 CPU s a Jacobian, where CVODES' held switch
            # takes 40 ms); the start takes LSODA's rather than fail
            with objective.solving(sensitivities_fall_back=not evaluated[0]):
                J = objective.jacobian(u)
        except IntegrationError:
            if not evaluated[0]:
                raise  # at the start: adjoint_solve's caller says why, in words
            # a trial point where the ODE (or its sensitivities) cannot be integrated: a
            # non-finite cost makes Fides reject the step and shrink the trust region
            return rejected
        evaluated[0] = True
        # a sensitivity that overflowed at a finite residual: Fides stops on any
        # non-finite gradient; zero those entries so the trust region steps on with the rest
        J = np.where(np.isfinite(J), J, 0.0)
        grad = J.T @ r
        if cost < best[0]:  # Fides accepts only decreasing steps: log those, as iterates
            best[0] = cost
            log(cost + cost_offset, grad)
        return cost, grad, J.T @ J

    lower, upper = bounds if bounds is not None else (np.full(n, -np.inf), np.full(n, np.inf))
    optimizer = fides.Optimizer(
        fun, ub=np.asarray(upper, dtype=np.float64), lb=np.asarray(lower, dtype=np.float64),
        verbose=logging.ERROR, hessian_update=fides.HybridFixed(),
        options={fides.Options.MAXITER: int(max_iter), fides.Options.FATOL: tol,
                 fides.Options.FRTOL: tol})
    solver = "fides (interior trust region, Gauss-Newton then BFGS, sensitivity Jacobian)"
    try:
        optimizer.minimize(np.array(u0, dtype=np.float64))
    except RuntimeError as exc:  # a non-finite BFGS update: keep the best point so far
        return AdjointResult(u=np.array(optimizer.x_min), n_iter=int(optimizer.iteration),
                             converged=False, solver=solver,
                             stop_reason=f"stopped on a non-finite step ({exc})")
    finally:  # later solves (the covariance, predictions) want the states alone
        objective.set_policy(prefetch_sensitivities=False)
    flag = optimizer.exitflag
    reasons = {
        fides.ExitFlag.FTOL: f"cost changed by less than {tol:g} (absolute + relative)",
        fides.ExitFlag.XTOL: "step below xtol",
        fides.ExitFlag.GTOL: "gradient norm below gatol",
        fides.ExitFlag.MAXITER: f"max_iter={max_iter} reached",
        fides.ExitFlag.DELTA_TOO_SMALL: "trust region too small to proceed",
        fides.ExitFlag.EXCEEDED_BOUNDARY: "a step left the bounds",
    }
    return AdjointResult(u=np.array(optimizer.x_min), n_iter=int(optimizer.iteration),
                         converged=int(flag) > 0, solver=solver,
                         stop_reason=reasons.get(flag, f"fides exit flag {flag!r}"))


def _gradient_method(objective, u0, optimizer, gradient, bounds, tol, max_iter, log):
    method = "forward" if gradient == "forward" else "adjoint"

    def fg(u):
        return objective.safe_value_and_grad(u, method)

    f0, g0 = objective.value_and_grad(u0, method)
    log(f0, g0)
    gtol = tol * np.linalg.norm(g0)

    def callback(u, *args):
        f, g = objective.safe_value_and_grad(u, method)  # cached: no extra solve
        log(f, g)

    if optimizer.startswith("cg-"):
        res = nonlinear_cg(fg, u0, update=optimizer[3:].lower(), gtol=gtol, max_iter=max_iter,
                           callback=callback)
    else:
        options = {"maxiter": max_iter}
        if optimizer == "bfgs":
            options.update(gtol=gtol, norm=2)
        else:
            options.update(gtol=gtol / np.sqrt(u0.size), ftol=1e-15)
        res = minimize(fg, u0, jac=True, method=optimizer,
                       bounds=None if bounds is None else list(zip(*bounds)),
                       options=options, callback=callback)
    # A line search that fails ("precision loss") once the gradient has dropped by 1e-5 has hit
    # the accuracy of a cost computed by an ODE solver, not a wrong turn: the seed reports the
    # same floor for CG ("does not admit eps < 1e-5"). Count it as converged.
    # On a bound, the gradient's component that pushes out of the box is not a descent
    # direction: the test reads the projected gradient (zero there).
    converged = bool(res.success) or bool(
        np.linalg.norm(_projected(res.jac, res.x, bounds))
        <= _LINE_SEARCH_FLOOR * np.linalg.norm(_projected(g0, u0, bounds)))
    reason = str(res.message)
    if not converged and res.nit >= max_iter:
        reason = f"max_iter={max_iter} reached ({reason})"
    return AdjointResult(u=res.x, n_iter=int(res.nit), converged=converged, stop_reason=reason,
                         solver=f"{optimizer} ({method} gradient)")


# How far inside a bound BoxMap places a start that lies on or beyond it.
_START_MARGIN = 1e-3


class BoxMap:
    """A smooth one-to-one map from unconstrained ``w`` onto the open box ``(lower, upper)``.

    Per coordinate: ``lower + (upper - lower) / (1 + exp(-w))`` when both ends are finite,
    ``lower + exp(w)`` or ``upper - exp(-w)`` with one, ``w`` itself with none.

    Parameters
    ----------
    lower, upper : ndarray of shape (n,)
        Bounds, ``±inf`` allowed.
    """

    def __init__(self, lower, upper):
        self.lower = np.asarray(lower, dtype=np.float64)
        self.upper = np.asarray(upper, dtype=np.float64)
        self.both = np.isfinite(self.lower) & np.isfinite(self.upper)
        self.low_only = np.isfinite(self.lower) & ~self.both
        self.high_only = np.isfinite(self.upper) & ~self.both
        self.width = np.where(self.both, self.upper - self.lower, 1.0)

    def to_u(self, w):
        """The point in the box."""
        u = np.array(w, dtype=np.float64)
        with np.errstate(over="ignore"):
            u[self.both] = self.lower[self.both] + self.width[self.both] / (
                1.0 + np.exp(-w[self.both]))
            u[self.low_only] = self.lower[self.low_only] + np.exp(w[self.low_only])
            u[self.high_only] = self.upper[self.high_only] - np.exp(-w[self.high_only])
        return u

    def to_w(self, u):
        """The inverse of :meth:`to_u`, ``u`` first moved at least ``_START_MARGIN`` (of the
        box's width, or of ``max(1, |bound|)`` for a one-sided bound) inside: at the bound
        itself the map's derivative vanishes and that coordinate would never move."""
        u = np.asarray(u, dtype=np.float64)
        margin = _START_MARGIN * np.maximum(1.0, np.abs(np.where(self.low_only, self.lower,
                                                                 self.upper)))
        w = u.copy()
        share = np.clip((u - self.lower) / self.width, _START_MARGIN, 1.0 - _START_MARGIN)
        w[self.both] = np.log(share[self.both] / (1.0 - share[self.both]))
        w[self.low_only] = np.log(np.maximum(u - self.lower, margin)[self.low_only])
        w[self.high_only] = -np.log(np.maximum(self.upper - u, margin)[self.high_only])
        return w

    def du_dw(self, w):
        """The diagonal of the map's Jacobian."""
        d = np.ones_like(w, dtype=np.float64)
        with np.errstate(over="ignore"):
            s = 1.0 / (1.0 + np.exp(-w[self.both]))
            d[self.both] = self.width[self.both] * s * (1.0 - s)
            d[self.low_only] = np.exp(w[self.low_only])
            d[self.high_only] = np.exp(-w[self.high_only])
        return d


class _OnBox:
    """The objective seen in the variables ``w`` of a :class:`BoxMap` (chain rule on the
    Jacobian and gradient); everything else is the objective's own."""

    def __init__(self, objective, box):
        self._objective, self._box = objective, box

    def __getattr__(self, name):
        return getattr(self._objective, name)

    def to_z(self, w):
        return self._objective.to_z(self._box.to_u(w))

    def evaluations_at(self, w):
        return self._objective.evaluations_at(self._box.to_u(w))

    def residual(self, w):
        return self._objective.residual(self._box.to_u(w))

    def safe_residual(self, w):
        return self._objective.safe_residual(self._box.to_u(w))

    def jacobian(self, w):
        return self._objective.jacobian(self._box.to_u(w)) * self._box.du_dw(w)[None, :]

    def value_and_grad(self, w, method="adjoint"):
        value, grad = self._objective.value_and_grad(self._box.to_u(w), method)
        return value, grad * self._box.du_dw(w)

    def safe_value_and_grad(self, w, method="adjoint"):
        value, grad = self._objective.safe_value_and_grad(self._box.to_u(w), method)
        return value, grad * self._box.du_dw(w)


def _projected(g, u, bounds):
    """The gradient ``g`` at ``u`` without the components that push out of ``bounds``
    (a pair of arrays, or None) where ``u`` lies on one."""
    g = np.array(g, dtype=np.float64)
    if bounds is None:
        return g
    lower, upper = (np.broadcast_to(np.asarray(b, dtype=np.float64), g.shape) for b in bounds)
    g[(u <= lower) & (g > 0)] = 0.0
    g[(u >= upper) & (g < 0)] = 0.0
    return g
