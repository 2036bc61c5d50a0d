"""AdjointODE's optimisers on a :class:`~._objective.LeastSquaresObjective`: one entry point,
:func:`adjoint_solve`, returning an :class:`AdjointResult`, and the Gauss-Newton covariance.

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

__all__ = ["OPTIMIZERS", "AdjointResult", "adjoint_solve", "gauss_newton_covariance"]

logger = logging.getLogger("sklode")

#: Optimisers accepted by ``AdjointODE(optimizer=...)``, spelled as scipy spells them, and
#: what drives each.
OPTIMIZERS = {
    "trf": "scipy least_squares, trust-region reflective, sensitivity Jacobian (bounds ok)",
    "lm": "scipy least_squares, MINPACK Levenberg-Marquardt, sensitivity Jacobian",
    "BFGS": "scipy BFGS (Wolfe line search), adjoint gradient",
    "L-BFGS-B": "scipy L-BFGS-B, adjoint gradient (bounds ok)",
    "CG-FR": "nonlinear CG, Fletcher-Reeves, strong-Wolfe line search, adjoint gradient",
    "CG-PR": "nonlinear CG, Polak-Ribiere (PR+)",
    "CG-HS": "nonlinear CG, Hestenes-Stiefel",
    "CG-DY": "nonlinear CG, Dai-Yuan",
}
#: The optimisers that honour bounds.
BOUNDED_OPTIMIZERS = ("trf", "L-BFGS-B")
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


def adjoint_solve(objective, u0, *, optimizer="trf", gradient="adjoint", bounds=None,
                  tol=1e-8, max_iter=200, verbose=0):
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
        Bounds on ``u`` (``"trf"`` and ``"L-BFGS-B"`` only).
    tol : float, default=1e-8
        ``least_squares`` ftol/xtol/gtol; gradient methods stop when ``||g|| <= tol ||g0||``.
    max_iter : int, default=200
        Maximum number of iterations (``"lm"``: of function evaluations, MINPACK's limit,
        which bounds the iterations too).
    verbose : int, default=0
        Log each iteration.

    Returns
    -------
    AdjointResult
        The optimum, the iteration count, why it stopped and the histories.

    Raises
    ------
    IntegrationError
        The ODE cannot be solved at the starting point.
    """
    try:
        start_evaluations = objective.evaluations_at(u0)
    except IntegrationError as exc:
        x0, theta0 = objective.split(objective.to_z(u0))
        raise IntegrationError(
            f"AdjointODE cannot start: the ODE fails at the initial guess theta0={theta0}, "
            f"x0={x0}. {exc}", t_reached=exc.t_reached) from exc
    objective.max_evaluations = max(20_000, _TRIAL_EVALUATION_FACTOR * start_evaluations)
    history = {"loss": [], "grad": []}

    def log(loss, grad):
        history["loss"].append(float(loss))
        history["grad"].append(float(np.linalg.norm(grad)))
        if verbose:
            logger.info("AdjointODE iter %d: L = %.10g, |grad| = %.3g",
                        len(history["loss"]) - 1, loss, history["grad"][-1])

    if optimizer in ("trf", "lm"):
        result = _least_squares(objective, u0, optimizer, bounds, tol, max_iter, log)
        result.n_iter = max(len(history["loss"]) - 1, 0)
    else:
        result = _gradient_method(objective, u0, optimizer, gradient, bounds, tol, max_iter,
                                  log)
    result.loss_history, result.grad_norm_history = history["loss"], history["grad"]
    return result


def _least_squares(objective, u0, optimizer, bounds, tol, max_iter, log):
    def jac(u):
        J = objective.jacobian(u)
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

        res = least_squares(objective.safe_residual, u0, jac=jac, method="trf", bounds=box,
                            ftol=tol, xtol=tol, gtol=tol, x_scale=1.0, callback=callback)
        solver = "trf (trust-region reflective, sensitivity Jacobian)"
    if res.status == -2:
        converged, reason = False, f"max_iter={max_iter} reached"
    else:
        converged, reason = res.status > 0, str(res.message)
    return AdjointResult(u=res.x, n_iter=0, converged=converged, stop_reason=reason,
                         solver=solver)


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

    if optimizer.startswith("CG-"):
        res = nonlinear_cg(fg, u0, update=optimizer[3:].lower(), gtol=gtol, max_iter=max_iter,
                           callback=callback)
    else:
        options = {"maxiter": max_iter}
        if optimizer == "BFGS":
            options.update(gtol=gtol, norm=2)
        else:
            options.update(gtol=gtol / np.sqrt(u0.size), ftol=1e-15)
        res = minimize(fg, u0, jac=True, method=optimizer,
                       bounds=None if bounds is None else list(zip(*bounds)),
                       options=options, callback=callback)
    # A line search that fails ("precision loss") once the gradient has dropped by 1e-5 has hit
    # the accuracy of a cost computed by an ODE solver, not a wrong turn: the seed reports the
    # same floor for CG ("does not admit eps < 1e-5"). Count it as converged.
    converged = bool(res.success) or bool(
        np.linalg.norm(res.jac) <= _LINE_SEARCH_FLOOR * np.linalg.norm(g0))
    reason = str(res.message)
    if not converged and res.nit >= max_iter:
        reason = f"max_iter={max_iter} reached ({reason})"
    return AdjointResult(u=res.x, n_iter=int(res.nit), converged=converged, stop_reason=reason,
                         solver=f"{optimizer} ({method} gradient)")


def gauss_newton_covariance(objective, u):
    """Gauss-Newton covariance of ``z = [x0[free], theta]`` at the optimum ``u``:
    ``s^2 (J^T J)^+`` with ``s^2`` the reduced chi-square of the data residuals.

    Parameters
    ----------
    objective : LeastSquaresObjective
        The cost.
    u : ndarray
        The optimum, in optimiser variables.

    Returns
    -------
    ndarray of shape (n_unknowns, n_unknowns)
        NaN where the ODE cannot be solved at ``u``.
    """
    try:
        J = objective.jacobian_z(u)
        r = objective.residual(u)
    except IntegrationError:
        return np.full((u.size, u.size), np.nan)
    m_data = objective.n_data_rows  # the data rows come first in r (zero where missing)
    dof = max(objective.n_data - u.size, 1)
    chi2 = float(np.sum(r[:m_data] ** 2)) / dof
    return chi2 * np.linalg.pinv(J.T @ J)
