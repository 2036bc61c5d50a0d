"""Nonlinear conjugate gradients with the four classical updates (seed 002, section 4).

scipy has BFGS, L-BFGS-B and one CG variant (Polak–Ribière); the seed compares Fletcher–Reeves,
Polak–Ribière, Hestenes–Stiefel and Dai–Yuan, so this module supplies the update rules and
delegates the step length to :func:`scipy.optimize.line_search` (strong Wolfe conditions,
c2 = 0.1 as CG needs) instead of the seed's secant iteration on phi'(rho).
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.optimize import OptimizeResult, line_search

__all__ = ["CG_UPDATES", "nonlinear_cg"]

# Strong-Wolfe curvature constant: the textbook value for CG (well below 1/2, which
# Fletcher-Reeves needs for descent directions). 0.4 was tried: no fewer solves on SEIRD.
_C2 = 0.1
# Stalled: the cost fell by less than this (relative) over _STALL_WINDOW iterations. Below the
# accuracy of a cost computed by an ODE solver at rtol 1e-8 there is nothing left to gain.
_STALL_FTOL = 1e-10
_STALL_WINDOW = 5


def _fletcher_reeves(g, g_old, d_old):
    return (g @ g) / (g_old @ g_old)


def _polak_ribiere(g, g_old, d_old):
    # "PR+": negative values restart along -g, which makes PR globally convergent.
    return max(0.0, g @ (g - g_old) / (g_old @ g_old))


def _hestenes_stiefel(g, g_old, d_old):
    y = g - g_old
    return max(0.0, (g @ y) / (d_old @ y))


def _dai_yuan(g, g_old, d_old):
    y = g - g_old
    return (g @ g) / (d_old @ y)


#: The update rules, by the suffix of the names AdjointODE accepts (``optimizer="cg-fr"`` etc.).
CG_UPDATES = {
    "fr": _fletcher_reeves,
    "pr": _polak_ribiere,
    "hs": _hestenes_stiefel,
    "dy": _dai_yuan,
}


def nonlinear_cg(fun_and_grad, x0, *, update="pr", gtol=1e-8, max_iter=1000, callback=None):
    """Minimise a smooth function by nonlinear conjugate gradients.

    Parameters
    ----------
    fun_and_grad : callable
        ``fun_and_grad(x) -> (value, gradient)``.
    x0 : ndarray
    update : {"fr", "pr", "hs", "dy"}
    gtol : float
        Stop when ``||g||_2 <= gtol`` (the caller makes it relative), or when the cost has
        stalled: it fell by less than 1e-10 (relative) over the last 5 iterations.
    max_iter : int
    callback : callable, optional
        ``callback(x, value, gradient)`` after each accepted step.

    Returns
    -------
    scipy.optimize.OptimizeResult
        ``x, fun, jac, nit, success, message``.
    """
    beta_rule = CG_UPDATES[update]
    cache = {}

    def evaluate(x):
        key = x.tobytes()
        if key not in cache:
            cache.clear()
            cache[key] = fun_and_grad(x)
        return cache[key]

    def search(x, d, f, g, f_old):
        """Strong-Wolfe step length along d (None when the search fails)."""
        with warnings.catch_warnings():  # a failed search is handled below (retry along -g,
            # or stop and say why); scipy's LineSearchWarning is not public, so by message
            warnings.filterwarnings("ignore", "The line search algorithm did not converge")
            return line_search(lambda z: evaluate(z)[0], lambda z: evaluate(z)[1], x, d,
                               gfk=g, old_fval=f, old_old_fval=f_old, c2=_C2, maxiter=20)[0]

    x = np.array(x0, dtype=np.float64)
    f, g = evaluate(x)
    d = -g
    # scipy's own trick (as in minimize(method="CG")): a fictitious previous value makes the
    # first trial step about 1/||g|| long instead of 1, which would leave the ODE's domain.
    f_old = f + np.linalg.norm(g) / 2
    message, success, nit = f"max_iter={max_iter} reached", False, 0
    costs = [f]
    for nit in range(1, max_iter + 1):
        if np.linalg.norm(g) <= gtol:
            message, success, nit = "gradient norm below gtol", True, nit - 1
            break
        if len(costs) > _STALL_WINDOW and \
                costs[-_STALL_WINDOW - 1] - f <= _STALL_FTOL * abs(f):
            message, success, nit = "cost stalled (relative decrease < 1e-10)", True, nit - 1
            break
        if g @ d >= 0:  # not a descent direction: restart along -g
            d, f_old = -g, f + np.linalg.norm(g) / 2
        alpha = search(x, d, f, g, f_old)
        if alpha is None and not np.array_equal(d, -g):
            d = -g  # a failed search along a CG direction: retry once along -g
            alpha = search(x, d, f, g, f + np.linalg.norm(g) / 2)
        if alpha is None:
            message = "line search found no step satisfying the Wolfe conditions"
            nit -= 1
            break
        x_new = x + alpha * d
        f_new, g_new = evaluate(x_new)
        beta = beta_rule(g_new, g, d)
        d = -g_new + (beta if np.isfinite(beta) else 0.0) * d
        x, f_old, f, g = x_new, f, f_new, g_new
        costs.append(f)
        if callback is not None:
            callback(x, f, g)
    else:
        if np.linalg.norm(g) <= gtol:
            message, success = "gradient norm below gtol", True
    return OptimizeResult(x=x, fun=f, jac=g, nit=nit, success=success, message=message)
