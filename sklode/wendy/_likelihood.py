"""WENDy's weak-form likelihood: the weak residual's Gaussian negative log-likelihood in theta,
its gradient, and its minimisation by a trust region (the maximum-likelihood form of WENDy).

To first order in the noise the weak residual ``r(theta) = Phi f(U, theta) + Phidot U`` is
Gaussian with mean zero at the true theta and covariance ``C(theta) = L(theta) L(theta)^T``
(``L`` as in :func:`~._covariance.covariance_blocks`; it depends on theta through
``J = df/dx``). Its negative log-likelihood, up to a constant,

    l(theta) = 1/2 r^T C^-1 r + 1/2 log det C,

is what the IRLS only approaches (it freezes ``C`` at the previous iterate, so its fixed point
is not a stationary point of ``l``: it drops ``C``'s own derivative). With ``M = C^-1 r`` and
``dC/dtheta_j = (1 - alpha)(dL_j L^T + L dL_j^T)`` the gradient is

    dl/dtheta_j = (dr/dtheta_j)^T M - (1 - alpha) (dL_j^T M) . (L^T M)
                  + (1 - alpha) tr(C^-1 L dL_j^T),

every term pointwise in time except ``C^-1``: ``L^T M`` and ``dL_j^T M`` from ``Phi^T M`` and
``Phidot^T M``; the trace from the diagonals ``P_ai = diag(Phi^T Cinv_ai Phi)`` and
``Q_al = diag(Phi^T Cinv_al Phidot)`` (the same ones as the score's bias), never the dense
``K d x n_times d`` matrix ``L``. The Hessian is the gradient's central differences (a few
parameters: 2 n_params gradients), which also gives the covariance ``H^-1`` at the optimum.

On the linear path with the bias correction the objective is ``l(theta) - c^T theta``: ``c``
is the score's errors-in-variables bias (:func:`~._covariance.score_bias`), which the IRLS
subtracts from its normal equations, held at the start (it moves theta by about a standard
error and varies slowly with it), so that the minimiser solves the corrected score equation.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy.linalg import solve_triangular
from scipy.optimize import Bounds, minimize

from ._covariance import (
    InverseDiagonals,
    covariance_blocks,
    inverse_from_cholesky,
    score_bias,
    whiten,
)

__all__ = ["WeakLikelihood", "maximise_weak_likelihood"]

# Relative step of the differences: central ones of jac_x in theta (models not affine in
# theta: O(h^2) truncation plus O(eps / h) round-off, ~1e-8 relative at 1e-4) and forward ones
# of the gradient for the Hessian (O(h): ~1e-4 relative, enough to steer the trust region and
# for a covariance, at half the gradients of central differences).
_STEP = 1e-4

# Gradient norm (relative to the likelihood's scale, 1 + |l|) at which the trust region stops.
_GTOL = 1e-8

# Newton decrement g^T H^-1 g below which the optimum is reached whatever the trust region
# reports: twice the gain a last Newton step could bring, in log-likelihood units; 1e-6 is far
# below the 0.5 that one standard error along the worst direction costs.
_DECREMENT = 1e-6


class WeakLikelihood:
    """The weak-form negative log-likelihood of one WENDy problem, as a function of theta.

    Parameters
    ----------
    system : LinearWeakForm or NonlinearWeakForm
        Gives the residual and its theta-Jacobian.
    model : ODEModel
    t : ndarray of shape (n_times,)
    U_cov : ndarray of shape (n_times, n_states)
        The states at which ``df/dx`` of the covariance is evaluated.
    Phi, Phidot : ndarray of shape (K, n_times)
    sigma : ndarray of shape (n_states,)
        Noise levels.
    alpha : float
        Covariance regularisation (as in the IRLS).
    linear : bool
        Whether ``df/dx`` is affine in theta (then its theta-derivative is exact and fixed).
    """

    def __init__(self, system, model, t, U_cov, Phi, Phidot, sigma, alpha, *, linear):
        self.system, self.model, self.t, self.U_cov = system, model, t, U_cov
        self.Phi, self.Phidot, self.alpha = Phi, Phidot, alpha
        self.sigma, self.s2 = sigma, sigma**2
        self.drift_gram = Phidot @ Phidot.T
        self.linear = linear
        self.bias = None  # c of the corrected score, set by hold_bias
        self._dJ = None
        if linear:  # J is affine in theta: its derivative is J(e_j) - J(0) everywhere
            p = model.n_params
            J0 = model.jac_x(t, U_cov, np.zeros(p))
            self._dJ = np.stack([model.jac_x(t, U_cov, e) - J0 for e in np.eye(p)])

    def _jacobians(self, theta):
        """``J = df/dx`` at ``U_cov`` and ``dJ/dtheta_j`` stacked, ``(p, n, d, d)``."""
        J = self.model.jac_x(self.t, self.U_cov, theta)
        if self._dJ is not None:
            return J, self._dJ
        dJ = np.empty((theta.size,) + J.shape)
        for j in range(theta.size):
            h = _STEP * max(abs(theta[j]), 1e-3)
            up, down = theta.copy(), theta.copy()
            up[j] += h
            down[j] -= h
            dJ[j] = (self.model.jac_x(self.t, self.U_cov, up)
                     - self.model.jac_x(self.t, self.U_cov, down)) / (2.0 * h)
        return J, dJ

    def hold_bias(self, theta):
        """Hold the score's bias at ``theta`` (linear path with the bias correction only)."""
        H = getattr(self.system, "H", None)
        if H is None:
            return
        J = self.model.jac_x(self.t, self.U_cov, theta)
        Lc = whiten(covariance_blocks(self.Phi, self.Phidot, J, self.sigma, self.drift_gram),
                    self.alpha)
        self.bias = score_bias(self.Phi, self.Phidot, J, H, self.s2, inverse_from_cholesky(Lc))

    def value_and_gradient(self, theta):
        """``l(theta)`` (minus ``c^T theta`` when a bias is held) and its gradient.

        Raises ``np.linalg.LinAlgError`` where the covariance is not positive definite.
        """
        theta = np.asarray(theta, dtype=np.float64)
        Phi, Phidot, s2, keep = self.Phi, self.Phidot, self.s2, 1.0 - self.alpha
        K, d = Phi.shape[0], self.U_cov.shape[1]
        J, dJ = self._jacobians(theta)
        Lc = whiten(covariance_blocks(Phi, Phidot, J, self.sigma, self.drift_gram), self.alpha)
        r = self.system.residual(theta)
        white = solve_triangular(Lc, r, lower=True)
        value = 0.5 * float(white @ white) + float(np.sum(np.log(np.diag(Lc))))
        M = solve_triangular(Lc, white, lower=True, trans="T")  # C^-1 r
        gradient = self.system.jacobian(theta).T @ M

        Mk = M.reshape(K, d)
        A, B = Phi.T @ Mk, Phidot.T @ Mk  # (n, d): Phi^T M, Phidot^T M per state
        V = np.einsum("ni,nil->nl", A, J) + B  # (L^T M)[n, l] / sigma_l
        D = np.einsum("ni,pnil->pnl", A, dJ)  # (dL_j^T M)[n, l] / sigma_l
        gradient -= keep * np.einsum("pnl,nl,l->p", D, V, s2)

        # tr(C^-1 L dL_j^T) = sum_{n,i,l} dJ_j[n,i,l] s_l (sum_m P_im[n] J[n,m,l] + Q_il[n]),
        # only at the (i, l) that some dJ_j reaches and the m that J couples to l: the
        # diagonals cost a K x K x n_times product each, and most models touch few pairs.
        diagonals = InverseDiagonals(Phi, Phidot, inverse_from_cholesky(Lc))
        reached = np.any(dJ != 0, axis=(0, 1))  # (i, l)
        coupled = np.any(J != 0, axis=0)  # coupled[m, l]: state l enters equation m
        for i, l in zip(*np.nonzero(reached)):  # noqa: E741
            Y = diagonals.Q(i, l).copy()
            for m in np.flatnonzero(coupled[:, l]):
                Y += diagonals.P(i, m) * J[:, m, l]
            gradient += keep * s2[l] * (dJ[:, :, i, l] @ Y)
        if self.bias is not None:
            value -= float(self.bias @ theta)
            gradient -= self.bias
        return value, gradient

    def hessian(self, theta, gradient=None):
        """Forward differences of the gradient (``gradient``: the one at ``theta``, if known),
        symmetrised: ``n_params`` more gradients."""
        theta = np.asarray(theta, dtype=np.float64)
        if gradient is None:
            gradient = self.value_and_gradient(theta)[1]
        p = theta.size
        H = np.empty((p, p))
        for j in range(p):
            h = _STEP * max(abs(theta[j]), 1e-3)
            step = theta.copy()
            step[j] += h
            H[:, j] = (self.value_and_gradient(step)[1] - gradient) / h
        return 0.5 * (H + H.T)


def maximise_weak_likelihood(likelihood, theta_start, *, bounds=None, max_iter=100):
    """Minimise the weak-form negative log-likelihood from ``theta_start`` by a trust region.

    Parameters
    ----------
    likelihood : WeakLikelihood
    theta_start : ndarray of shape (n_params,)
        The start (the IRLS estimate).
    bounds : (ndarray, ndarray), optional
        Lower and upper bounds on theta.
    max_iter : int, default=100
        Most trust-region iterations.

    Returns
    -------
    theta : ndarray of shape (n_params,)
    hessian : ndarray of shape (n_params, n_params)
        The Hessian at ``theta`` (forward differences of the gradient).
    n_iter : int
    converged : bool
    message : str
    """
    cache = {}

    def fun(theta):
        key = theta.tobytes()
        if key not in cache:
            try:
                cache.clear()
                cache[key] = likelihood.value_and_gradient(theta)
            except np.linalg.LinAlgError:  # a singular covariance: outside the domain
                cache[key] = (np.inf, np.full(theta.size, np.nan))
        return cache[key]

    def hessian(theta):
        return likelihood.hessian(theta, fun(theta)[1])

    start = np.asarray(theta_start, dtype=np.float64)
    if bounds is not None:
        start = np.clip(start, *bounds)
    start_value = fun(start)[0]
    # trust-constr takes the bounds (an interior point); trust-exact is the unbounded method
    method, extra = ("trust-exact", {}) if bounds is None else \
        ("trust-constr", {"bounds": Bounds(*bounds)})
    with warnings.catch_warnings():
        # trust-constr's "delta_grad == 0" notices are about its quasi-Newton updates, which
        # are not used (the Hessian is given)
        warnings.simplefilter("ignore", UserWarning)
        res = minimize(lambda th: fun(th)[0], start, jac=lambda th: fun(th)[1], hess=hessian,
                       method=method, options={"maxiter": max_iter,
                                               "gtol": _GTOL * (1.0 + abs(start_value))},
                       **extra)
    theta = np.asarray(res.x, dtype=np.float64)
    value = fun(theta)[0]
    if not np.isfinite(value) or value > start_value:
        theta = start  # never worse than the start
    H = hessian(theta)
    # Converged when the trust region says so, or when the Newton step from the returned
    # point would gain less than _DECREMENT: trust-exact reports a "bad approximation" once
    # round-off in the forward-difference Hessian dominates the last digits of l.
    g = fun(theta)[1]
    try:
        decrement = float(g @ np.linalg.solve(H, g))
    except np.linalg.LinAlgError:
        decrement = np.inf
    converged = bool(res.success) or abs(decrement) < _DECREMENT
    if res.success:
        message = str(res.message)
    elif converged:
        message = f"converged (Newton decrement {decrement:.2g})"
    else:
        message = f"{res.message} (Newton decrement {decrement:.2g})"
    return theta, H, int(res.get("nit", 0)), converged, message
