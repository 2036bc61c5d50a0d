"""WENDyODE: weak-form estimation of ODE parameters (seed 001)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.lapack import dpotri
from scipy.optimize import least_squares
from scipy.stats import shapiro
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from ..exceptions import IntegrationError
from ..integrate import simulate, solve
from ._base import ODEEstimatorBase, is_linear_on_data, warn_not_converged
from ._testfunctions import (
    _MAX_TEST_FUNCTIONS,
    is_uniform,
    select_min_radius,
    test_function_matrices,
)

__all__ = ["WENDyODE", "estimate_noise"]

logger = logging.getLogger("sklode")

# Noise filter: the 6th-derivative finite-difference stencil on 15 points, unit 2-norm
# (seed 001). It annihilates polynomials up to degree 14 on the stencil's own nodes, so on a
# smooth signal it sees only the noise.
_NOISE_STENCIL = 15
_NOISE_DERIVATIVE = 6

# Shapiro-Wilk stop (seed 001): checked from iteration 10 on, stop when p < 1e-4.
_SW_FIRST_ITER = 10
_SW_LEVEL = 1e-4

# Relative change of theta below which the score's bias is not recomputed (see wendy_solve).
_BIAS_UPDATE = 1e-2


def _fd_weights(nodes, derivative):
    """Finite-difference weights for ``derivative`` on arbitrary ``nodes`` (batched).

    Solves the Vandermonde moment conditions on nodes centred and scaled to [-1, 1], then
    rescales; exact for polynomials of degree < len(nodes).
    """
    centre = nodes.mean(axis=-1, keepdims=True)
    half = (nodes.max(axis=-1, keepdims=True) - nodes.min(axis=-1, keepdims=True)) / 2
    s = (nodes - centre) / half
    n = nodes.shape[-1]
    powers = np.arange(n)
    V = s[..., None, :] ** powers[:, None]  # (..., n_moments, n_nodes)
    rhs = np.zeros(nodes.shape[:-1] + (n,))
    rhs[..., derivative] = np.prod(np.arange(1, derivative + 1))
    return np.linalg.solve(V, rhs[..., None])[..., 0]


def estimate_noise(t, U):
    """Per-state noise standard deviation from a high-order difference filter.

    Each window of 15 consecutive samples is filtered by the unit-norm 6th-derivative
    stencil of its own times (so non-uniform grids are handled); for white noise of
    standard deviation sigma the filtered values have standard deviation sigma.

    Parameters
    ----------
    t : ndarray of shape (n_times,)
    U : ndarray of shape (n_times, n_states)

    Returns
    -------
    sigma : ndarray of shape (n_states,)
    """
    n = t.size
    width = min(_NOISE_STENCIL, n - (n + 1) % 2)  # odd, at most n
    idx = np.arange(n - width + 1)[:, None] + np.arange(width)[None, :]
    if is_uniform(t):
        weights = _fd_weights(np.arange(width, dtype=np.float64), min(_NOISE_DERIVATIVE,
                                                                      width - 1))
        weights = np.broadcast_to(weights / np.linalg.norm(weights), idx.shape)
    else:
        weights = _fd_weights(t[idx], min(_NOISE_DERIVATIVE, width - 1))
        weights = weights / np.linalg.norm(weights, axis=1, keepdims=True)
    filtered = np.einsum("wk,wkd->wd", weights, U[idx])
    return np.sqrt(np.mean(filtered**2, axis=0))


@dataclass
class WENDyResult:
    theta: np.ndarray
    theta_cov: np.ndarray
    sigma: np.ndarray
    n_iter: int
    converged: bool
    stop_reason: str
    theta_ols: np.ndarray
    n_test_functions: int
    radii: list


def _covariance_blocks(Phi, Phidot, J, sigma, drift_gram=None):
    """``L L^T`` of the weak residual w.r.t. the data, as a (K d, K d) matrix.

    With ``L[(k,i), (n,l)] = sigma_l (Phi[k,n] J[n,i,l] + Phidot[k,n] delta_il)``, block
    ``(i, j)`` of ``L L^T`` is

        Phi (diag(W_ij) Phi^T + diag(s_j J_ij) Phidot^T) + (Phi diag(s_i J_ji) Phidot^T)^T
        + delta_ij s_i Phidot Phidot^T,

    with ``s = sigma^2`` and ``W_ij = sum_l s_l J_il J_jl`` per point: two ``K x n_times``
    products per block (the first two terms share their left factor), none for Jacobian
    entries that vanish on the whole grid, and ``Phidot Phidot^T`` (``drift_gram``) computed
    once per fit. Never the dense ``K d x n_times d`` tensor.
    """
    K = Phi.shape[0]
    d = J.shape[1]
    s2 = sigma**2
    if drift_gram is None:
        drift_gram = Phidot @ Phidot.T
    W = np.einsum("nil,njl,l->nij", J, J, s2)
    C = np.zeros((K, d, K, d))
    for i in range(d):
        for j in range(i, d):
            block = s2[i] * drift_gram if i == j else np.zeros((K, K))
            right = None
            if np.any(W[:, i, j]):
                right = W[:, i, j, None] * Phi.T
            if np.any(J[:, i, j]):
                cross = (s2[j] * J[:, i, j])[:, None] * Phidot.T
                if i == j:  # the two cross terms are transposes of each other
                    cross = Phi @ cross
                    block = block + cross + cross.T
                else:
                    right = cross if right is None else right + cross
            if right is not None:
                block = block + Phi @ right
            if i != j and np.any(J[:, j, i]):
                block = block + (Phi @ ((s2[i] * J[:, j, i])[:, None] * Phidot.T)).T
            C[:, i, :, j] = block
            C[:, j, :, i] = block.T
    return C.reshape(K * d, K * d)


def _inverse_from_cholesky(Lc):
    """``C^-1`` from the lower Cholesky factor of ``C`` (LAPACK potri), symmetric."""
    inv, info = dpotri(Lc, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"potri failed with info={info}")
    return np.tril(inv) + np.tril(inv, -1).T


@dataclass
class FeatureGradients:
    """The nonzero slices of ``H[n, a, j, l] = d^2 f_a / (dtheta_j dx_l)`` on the grid.

    ``values[:, k]`` is ``H[:, equation[k], param[k], state[k]]``; slices that vanish at every
    point are not stored (a model's features touch few states: Lorenz-96 with one forcing per
    state would otherwise hold ``n_times * d^2 * n_params`` numbers, 0.5 GB at d = 40).
    """

    equation: np.ndarray
    param: np.ndarray
    state: np.ndarray
    values: np.ndarray  # (n_times, n_slices)
    n_params: int

    @classmethod
    def from_dense(cls, H):
        """From a dense ``(n_times, n_states, n_params, n_states)`` array."""
        nonzero = np.any(H != 0, axis=0)
        equation, param, state = np.nonzero(nonzero)
        return cls(equation, param, state, H[:, equation, param, state], H.shape[2])


def _score_bias(Phi, Phidot, J, H, s2, C_inv):
    """Mean of the weighted normal equations' score at the true theta, from noisy regressors.

    The IRLS solves ``G^T C^-1 (G theta - b) = 0`` with ``G`` built from the noisy data. Its
    first-order noise ``A_j eps`` (column ``j`` of ``G``) correlates with the residual's
    ``L eps``, so the score has mean ``c_j = tr(A_j^T C^-1 L)`` (noise standardised, ``sigma``
    inside ``A`` and ``L``): an O(sigma^2) bias of theta that shrinks the coefficients of
    nonlinear terms (FitzHugh-Nagumo at 20 % noise: the cubic coefficient by 2 standard
    errors). Subtracting ``c`` is the corrected score of errors-in-variables regression.

    With ``A_j[(k,a), (n,l)] = sigma_l Phi[k,n] H[n,a,j,l]`` (``H``: :class:`FeatureGradients`)
    and ``L`` as in :func:`_covariance_blocks`,

        c_j = sum_{a,l,n} s_l H[n,a,j,l] (sum_i J[n,i,l] P_ai[n] + Q_al[n]),

    with ``P_ai = diag(Phi^T Cinv_ai Phi)`` and ``Q_al = diag(Phi^T Cinv_al Phidot)``: one
    ``K x K x n_times`` product per block of ``C^-1`` that a nonzero slice reaches, never ``L``.
    """
    K = Phi.shape[0]
    d = J.shape[1]
    blocks = np.ascontiguousarray(C_inv.reshape(K, d, K, d).transpose(1, 3, 0, 2))
    coupled = np.any(J != 0, axis=0)  # coupled[i, l]: state l enters equation i
    times_phi = {}  # (x, y) -> Cinv_xy @ Phi

    def product(x, y):
        if (x, y) not in times_phi:
            times_phi[x, y] = blocks[x, y] @ Phi
        return times_phi[x, y]

    diag_P, diag_Q = {}, {}

    def P(a, i):  # P_ai = P_ia: a scalar equals its transpose
        key = (min(a, i), max(a, i))
        if key not in diag_P:
            diag_P[key] = np.einsum("kn,kn->n", Phi, product(*key))
        return diag_P[key]

    def Q(a, l):  # noqa: E741 -- diag(Phi^T Cinv_al Phidot), with Cinv_al^T = Cinv_la
        if (a, l) not in diag_Q:
            diag_Q[a, l] = np.einsum("kn,kn->n", product(l, a), Phidot)
        return diag_Q[a, l]

    c = np.zeros(H.n_params)
    for a, j, l, h in zip(H.equation, H.param, H.state, H.values.T):  # noqa: E741
        weight = Q(a, l).copy()
        for i in np.flatnonzero(coupled[:, l]):
            weight += J[:, i, l] * P(a, i)
        c[j] += s2[l] * float(h @ weight)
    return c


def _shoot_initial_state(model, theta, t, Y, x0):
    """Least-squares x0 at ``t[0]`` with ``theta`` fixed (trust region, batched differences).

    Every trial state ``z`` integrates the batch ``[z, z + h e_1, ...]`` as one system: its
    residual and the forward-difference Jacobian the trust region asks for next come from
    one solve, and the members share one step sequence, so the differences carry no
    step-size noise. The loop stops once a step changes the cost by less than 1 % of one
    residual's noise variance (the x0 then moves by well under a tenth of its standard
    error); integration is at ``_SHOOT_RTOL`` and at most ``_SHOOT_MAX_EVALUATIONS`` trial
    states are tried. Trial states that blow up get a huge residual. When the smoothed
    start itself blows up (logistic growth from 0.01 at 10 % noise smooths to a negative x0,
    and a constant penalty has no gradient to leave it), the start is the data's mean over
    the last 5 window samples integrated back to ``t[0]``. The exact sensitivity Jacobian was
    tried here and reverted: on Hindmarsh-Rose at 20 % noise the trust region then needed
    ~300 solves (up to 54 s) where differences need ~20.
    """
    n_states = Y.shape[1]

    def trajectories(Z):  # (n_batch, n_states) at t[0] -> (n_batch, n_times, n_states)
        sol = solve(model, theta, Z, (t[0], t[-1]), t_eval=t[1:], rtol=_SHOOT_RTOL,
                    atol=1e-3 * _SHOOT_RTOL)
        X = sol.y.reshape(Z.shape[0], n_states, -1).transpose(0, 2, 1)
        return np.concatenate([Z[:, None, :], X], axis=1)

    def with_differences(z, sign=1.0):
        """Trajectory from ``z`` and its forward (``sign=-1``: backward) differences, one
        batched solve (a batch costs little more than one solve for small models)."""
        h = sign * _FD_STEP * np.maximum(1.0, np.abs(z))
        X = trajectories(np.vstack([z, z + np.diag(h)]))
        return X[0], ((X[1:] - X[0]) / h[:, None, None]).reshape(n_states, -1).T

    # The trust region asks for the Jacobian at every accepted state right after its
    # residual: keeping the residual's differences halves the solves (FitzHugh-Nagumo: 12.6
    # -> 7 per fit).
    cache = {}

    def residual(z):
        try:
            X0, jac = with_differences(z)
        except IntegrationError:
            cache.clear()  # the Jacobian, if asked for, is formed on its own below
            try:
                return (trajectories(z[None])[0] - Y).ravel()
            except IntegrationError:  # steer away from initial states that blow up
                return np.full(Y.size, _BLOWN_UP)
        cache.update(z=z.copy(), jac=jac)
        return (X0 - Y).ravel()

    def jacobian(z):
        if "z" in cache and np.array_equal(cache["z"], z):
            return cache["jac"]
        for sign in (1.0, -1.0):  # backward differences if the forward batch blows up
            try:
                return with_differences(z, sign)[1]
            except IntegrationError:
                continue
        return np.zeros((Y.size, n_states))  # no direction integrates: the loop stops here

    def integrated_back():  # only computed when the smoothed start fails (a solve)
        tail = slice(max(0, t.size - 5), t.size)
        try:
            return simulate(model, theta, Y[tail].mean(axis=0), [t[0]],
                            t0=float(t[tail].mean()), rtol=1e-6, atol=1e-9)[0]
        except IntegrationError:
            return None

    for make_start in (lambda: x0, integrated_back):
        start = make_start()
        if start is None:
            continue
        if np.max(np.abs(residual(start))) < _BLOWN_UP:
            # The final cost is about Y.size noise variances: this ftol stops at a change of
            # under 1 % of one.
            res = least_squares(residual, start, jac=jacobian, x_scale="jac",
                                ftol=_SHOOT_FTOL_PER_SAMPLE / Y.size,
                                max_nfev=_SHOOT_MAX_EVALUATIONS)
            return res.x
    return x0  # no start integrates: predict() will say so with an IntegrationError


_BLOWN_UP = 1e10
# Forward-difference step for the x0 Jacobian, relative to max(1, |x0|): the batch shares
# one step sequence, so only round-off (~1e-16 / h) limits the difference.
_FD_STEP = 1e-7
_SHOOT_FTOL_PER_SAMPLE = 0.01
# Integration tolerance of the shooting: 1e-4 is 50x below the smallest noise of the paper's
# problems (5 %), and the batch shares its steps, so the differences stay smooth. 1e-6 cost
# 2x the time for the same x0 to 3 digits.
_SHOOT_RTOL = 1e-4
# A bound on the trust region's trial solves: with a poor theta (Hindmarsh-Rose at 20 %
# noise) the simulated bursts cannot match the data and the loop crawled for 200-500 solves
# (40-60 s) without improving the prediction; it keeps the best state found so far.
_SHOOT_MAX_EVALUATIONS = 30


def _whiten(C, alpha):
    """Cholesky factor of ``(1 - alpha) C + alpha I`` (lower)."""
    reg = (1.0 - alpha) * C
    reg[np.diag_indices_from(reg)] += alpha
    return np.linalg.cholesky(reg)


def _sw_pvalue(residual):
    if residual.size < 3:
        return 1.0
    return float(shapiro(residual[:5000]).pvalue)  # scipy's approximation is valid to 5000


def _noise_corrected_split(model, t, U, f0, F1, s2):
    """Affine split of ``f`` without the mean the noise adds to it, and ``d^2 f/dtheta dx``.

    ``E[f(u + eps)] = f(u) + 1/2 sum_l s_l d^2 f/du_l^2`` to second order (exact for the
    cubic and quadratic terms of the paper's problems), so the features evaluated at the
    noisy data lose that half-curvature, itself affine in theta. The returned
    :class:`FeatureGradients` hold the derivative of feature column ``j`` of equation ``a``
    in state ``l``, for the score's bias (:func:`_score_bias`).
    """
    p = F1.shape[-1]
    basis = np.eye(p)
    J0 = model.jac_x(t, U, np.zeros(p))

    def affine_in_x(gradient):
        # The same x-gradient at every point: no curvature to compute (most of the paper's
        # features, e.g. u; u1 u2 has a varying gradient and zero curvature).
        return bool(np.all(gradient == gradient[:1]))

    zero = np.zeros_like(U)
    m0 = zero if affine_in_x(J0) else 0.5 * model.curvature_x(t, U, np.zeros(p), s2)
    M1 = np.empty_like(F1)
    slices = []  # (equation, param, state, values), one parameter at a time: no n d^2 p array
    for j in range(p):
        gradient = model.jac_x(t, U, basis[j]) - J0  # (n_times, equation, state)
        M1[..., j] = zero if affine_in_x(gradient) else \
            0.5 * model.curvature_x(t, U, basis[j], s2) - m0
        for a, l in zip(*np.nonzero(np.any(gradient != 0, axis=0))):  # noqa: E741
            slices.append((a, j, l, gradient[:, a, l]))
    equation, param, state, values = zip(*slices) if slices else ((), (), (), ())
    H = FeatureGradients(np.array(equation, dtype=int), np.array(param, dtype=int),
                         np.array(state, dtype=int),
                         np.column_stack(values) if values else np.zeros((U.shape[0], 0)), p)
    return f0 - m0, F1 - M1, H


def wendy_solve(model, t, U, theta0, *, linear, alpha=1e-10, tol=1e-6, max_iter=100,
                min_radius=None, n_scales=4, max_test_functions=_MAX_TEST_FUNCTIONS,
                bounds=None, bias_correction=True, verbose=0):
    """WENDy: OLS start, then iteratively reweighted least squares on the weak form.

    With ``bias_correction`` (linear path only) the regression is corrected to second order
    in the noise: the features lose the mean the noise adds to them (half the
    ``sigma^2``-weighted curvature, :meth:`ODEModel.curvature_x`) and each weighted solve
    subtracts the score's mean :func:`_score_bias` at the current iterate.

    Returns
    -------
    WENDyResult
    """
    sigma = estimate_noise(t, U)
    sigma_eff = np.maximum(sigma, 1e-12 * (np.std(U, axis=0) + 1e-300))
    radius = select_min_radius(t, U, sigma) if min_radius is None else float(min_radius)
    Phi, Phidot, radii = test_function_matrices(t, radius, n_scales=n_scales,
                                                max_count=max_test_functions)
    K, d = Phi.shape[0], U.shape[1]
    drift = Phidot @ U  # (K, d)

    s2 = sigma_eff**2
    H = None  # d^2 f / (dtheta dx) per point, for the score's bias (linear path only)
    if linear:
        f0, F1 = model.affine_split(t, U)
        if bias_correction:
            f0, F1, H = _noise_corrected_split(model, t, U, f0, F1, s2)
        G = np.einsum("kn,nip->kip", Phi, F1).reshape(K * d, -1)
        b = -(Phi @ f0 + drift).reshape(K * d)

        def residual(theta):
            return G @ theta - b

        def jacobian(theta):
            return G

        bias = {}  # the score's bias and the iterate it was computed at

        def solve_weighted(Lc, J, theta_prev, Gw):
            bw = solve_triangular(Lc, b, lower=True)
            if H is not None:
                # The bias moves theta by about one standard error and varies slowly with
                # theta: recomputed while theta still moves by more than 1 %, then kept (the
                # fixed point's c is then from within 1 % of it: ~1 % of that shift).
                moved = (not bias or np.linalg.norm(theta_prev - bias["at"])
                         > _BIAS_UPDATE * np.linalg.norm(theta_prev))
                if moved:
                    bias.update(at=theta_prev.copy(), c=_score_bias(
                        Phi, Phidot, J, H, s2, _inverse_from_cholesky(Lc)))
                # Normal equations Gw^T Gw theta = Gw^T bw + c: shifting bw by the
                # minimum-norm z with Gw^T z = c keeps lstsq's handling of rank deficiency.
                bw = bw + np.linalg.lstsq(Gw.T, bias["c"], rcond=None)[0]
            theta = np.linalg.lstsq(Gw, bw, rcond=None)[0]
            return theta, Gw @ theta - bw

        theta = np.linalg.lstsq(G, b, rcond=None)[0]
    else:
        def residual(theta):
            return (Phi @ model.f(t, U, theta) + drift).reshape(K * d)

        def jacobian(theta):
            return np.einsum("kn,nip->kip", Phi, model.jac_theta(t, U, theta)).reshape(K * d, -1)

        lb, ub = (-np.inf, np.inf) if bounds is None else bounds

        def solve_weighted(Lc, J, theta_prev, Gw=None):  # J, Gw: only the linear path's
            res = least_squares(
                lambda th: solve_triangular(Lc, residual(th), lower=True), theta_prev,
                jac=lambda th: solve_triangular(Lc, jacobian(th), lower=True),
                bounds=(lb, ub), method="trf", x_scale="jac")
            return res.x, res.fun

        theta, _ = solve_weighted(np.eye(K * d), None, np.clip(theta0, lb, ub))
    theta_ols = theta.copy()

    drift_gram = Phidot @ Phidot.T

    def whitening(theta):
        """Cholesky factor of the residual covariance at ``theta``, and ``df/dx`` there."""
        J = model.jac_x(t, U, theta)
        return _whiten(_covariance_blocks(Phi, Phidot, J, sigma_eff, drift_gram), alpha), J

    def assess(theta, Lc):
        """Weak-form negative log-likelihood of ``theta`` and its whitened Jacobian."""
        white = solve_triangular(Lc, residual(theta), lower=True)
        nll = 0.5 * float(white @ white) + float(np.sum(np.log(np.diag(Lc))))
        return theta, nll, solve_triangular(Lc, jacobian(theta), lower=True)

    history = []  # (theta_n, its weak-form NLL, its whitened Jacobian); n = 0 is OLS
    converged, stop_reason, n_iter = False, f"max_iter={max_iter} reached", 0
    for n_iter in range(1, max_iter + 1):
        Lc, J = whitening(theta)
        history.append(assess(theta, Lc))
        theta_new, white_res = solve_weighted(Lc, J, theta, history[-1][2])
        if not np.all(np.isfinite(theta_new)):
            raise FloatingPointError(
                f"WENDy iterates became non-finite at iteration {n_iter}; the data may not "
                "resolve this model (try more samples or a larger min_radius).")
        pvalue = _sw_pvalue(white_res)
        change = np.linalg.norm(theta_new - theta) / max(np.linalg.norm(theta), 1e-300)
        if verbose:
            logger.info("WENDy iter %d: relative change %.3g, SW p = %.3g, weak NLL %.6g",
                        n_iter, change, pvalue, history[-1][1])
        theta = theta_new
        if change < tol:
            converged, stop_reason = True, "fixed point"
            break
        if n_iter >= _SW_FIRST_ITER and pvalue < _SW_LEVEL:
            # The whitened residual stopped looking Gaussian: the iteration is leaving the
            # regime where its covariance model holds.
            converged, stop_reason = True, "Shapiro-Wilk stop"
            break
    if stop_reason == "fixed point":
        Gw = history[-1][2]  # whitened at the previous iterate, equal to tol
    else:
        # Stopped without a fixed point (Shapiro-Wilk or max_iter): return the iterate with
        # the smallest weak-form negative log-likelihood (WENDy-MLE's objective), never
        # blindly the last one or the OLS start (a reference-code bug). On Hindmarsh-Rose at
        # 20 % noise the IRLS drifts away from good iterates and can diverge.
        history.append(assess(theta, whitening(theta)[0]))
        best = int(np.argmin([nll for _, nll, _ in history]))
        theta, _, Gw = history[best]
        stop_reason += f"; iterate {best} of {len(history) - 1} returned (smallest weak NLL)"
    # Parameter covariance of the generalised least squares estimate: (G^T C^-1 G)^-1, the
    # noise variance being already inside C through sigma.
    try:
        theta_cov = np.linalg.inv(Gw.T @ Gw)
    except np.linalg.LinAlgError:
        theta_cov = np.full((theta.size, theta.size), np.nan)
    return WENDyResult(theta=theta, theta_cov=theta_cov, sigma=sigma, n_iter=n_iter,
                       converged=converged, stop_reason=stop_reason, theta_ols=theta_ols,
                       n_test_functions=K, radii=radii)


def _smoothed_x0(t, U, radius):
    """State at ``t[0]``: local quadratic least-squares fit of the data within ``radius``."""
    n_local = max(5, int(np.searchsorted(t, t[0] + radius)))
    n_local = min(n_local, t.size)
    s = t[:n_local] - t[0]
    A = np.vander(s, 3, increasing=True)
    coef = np.linalg.lstsq(A, U[:n_local], rcond=None)[0]
    return coef[0]


class WENDyODE(ODEEstimatorBase):
    """Weak-form estimation of ODE parameters (WENDy), with parameter covariances.

    Multiplies the ODE by smooth compactly supported test functions and integrates by
    parts, so no forward solve and no derivative of the data is needed:

    .. math::

        \\sum_n w_n \\psi_k(t_n) f(u_n, \\theta) + \\sum_n w_n \\psi_k'(t_n) u_n \\approx 0.

    For a model affine in ``theta`` this is a linear regression ``G theta = b`` whose
    errors depend on the noise through ``L(theta)``; WENDy solves it by iteratively
    reweighted least squares with covariance ``(1 - alpha) L L^T + alpha I``.

    Parameters
    ----------
    model : ODEModel
        All states must be observed.
    theta0 : array-like of shape (n_params,), default=None
        Starting point for models not linear in theta (linear ones start from OLS and ignore
        it). ``None``: ``model.default_theta``.
    min_radius : float, default=None
        Smallest test-function radius, in time units. ``None`` selects it from the data:
        the smallest radius whose quadrature error (full vs half grid) cannot be told from
        the noise, and no smaller than the spacing of the 64 centres of the narrowest scale
        (see :func:`~sklode.estimators._testfunctions.select_min_radius`).
    n_scales : int, default=4
        Radii ``2^l min_radius`` for ``l < n_scales``.
    max_test_functions : int, default=128
        At most this many orthonormal test-function combinations (the strongest); the IRLS
        covariance is ``(K n_states)^2``, so the cost grows with its square. 128 loses
        nothing measurable on Lotka-Volterra, FitzHugh-Nagumo or protein transduction;
        spiking dynamics gain a little from more at low noise (Hindmarsh-Rose at 5 %: median
        E2 0.034 -> 0.031 with 256, at 1.5x the time) and lose at high noise (20 %: 0.44 ->
        0.76).
    alpha : float, default=1e-10
        Regularisation of the residual covariance (the paper's value).
    tol : float, default=1e-6
        Stop when the relative change of theta is below ``tol``.
    max_iter : int, default=100
    bounds : tuple of (array-like, array-like), default=None
        Lower and upper bounds on theta (nonlinear path only).
    bias_correction : bool, default=True
        Correct the weak-form regression for the noise in its own regressors, to second
        order (models affine in theta without bounds; the nonlinear path ignores it): the
        features lose the mean the noise adds to them (``1/2 sum_l sigma_l^2 d^2 f/du_l^2``,
        e.g. ``3 sigma^2 u`` for ``u^3``) and each IRLS solve subtracts the mean of its
        score (the corrected score of errors-in-variables regression). Noisy regressors
        otherwise shrink the coefficients of nonlinear terms: FitzHugh-Nagumo at 20 % noise
        has its cubic coefficient biased by two standard errors. Not in the paper;
        ``False`` is the paper's IRLS.
    x0 : {"fit", "fit_all", "smooth"}, default="fit"
        How ``x0_`` (the state at the first time, for ``predict``) is obtained; WENDy itself
        does not estimate it. ``"fit"``: least squares of the simulated trajectory against
        the data over ``x0`` with theta fixed, on a window of four smallest test-function
        radii (at most 15 % of the series; a few short batched forward solves, at most 30
        trial states). ``"fit_all"``: the same, then refined over the whole series, which
        lets ``x0_`` absorb the phase drift a small theta error builds up and so predicts
        better over long series (Lotka-Volterra at 10 % noise: median prediction error
        0.044 -> 0.009, about 0.1 s more; FitzHugh-Nagumo 0.019 -> 0.011, 0.5 s more), at
        the cost of solves over the whole series (chaotic or bursting dynamics gain little:
        Hindmarsh-Rose 0.66 -> 0.63 for 5 s more). ``"smooth"``: a local quadratic fit of
        the data near ``t0`` (no solve; noisier).
    verbose : int, default=0

    Attributes
    ----------
    theta_ : ndarray of shape (n_params,)
    theta_cov_ : ndarray of shape (n_params, n_params)
        Covariance of ``theta_`` (generalised least squares, noise level inside).
    theta_stderr_ : ndarray of shape (n_params,)
    sigma_ : ndarray of shape (n_states,)
        Estimated noise standard deviation per state.
    theta_ols_ : ndarray of shape (n_params,)
        The ordinary least-squares start.
    x0_, t0_ : initial state and time used by ``predict``.
    n_iter_, converged_, stop_reason_ : IRLS iterations and why it stopped.
    n_test_functions_ : int
    radii_ : list of float
        Test-function radii used (time units).

    See Also
    --------
    BCDProxODE : also filters the states; robust to bad initial guesses on coarse grids.
    AdjointODE : forward-solver least squares; partial observations, sparse sampling.

    References
    ----------
    Bortz, Messenger and Dukic, "Direct estimation of parameters in ODE models using WENDy",
    Bull. Math. Biol. 85:110 (2023).

    Examples
    --------
    >>> from sklode.datasets import make_trajectory
    >>> from sklode.estimators import WENDyODE
    >>> data = make_trajectory("wendy_lotka_volterra", noise=0.05, random_state=0)
    >>> est = WENDyODE(data.problem.model).fit(data.t, data.Y)
    >>> est.theta_.round(1)
    array([3., 1., 6., 1.])
    """

    _parameter_constraints = {
        "model": "no_validation",
        "theta0": ["array-like", None],
        "min_radius": [Interval(Real, 0, None, closed="neither"), None],
        "n_scales": [Interval(Integral, 1, 8, closed="both")],
        "max_test_functions": [Interval(Integral, 1, None, closed="left")],
        "alpha": [Interval(Real, 0, 1, closed="both")],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "bounds": [tuple, None],
        "bias_correction": ["boolean"],
        "x0": [StrOptions({"smooth", "fit", "fit_all"})],
        "verbose": ["verbose"],
    }

    def __init__(self, model=None, *, theta0=None, min_radius=None, n_scales=4,
                 max_test_functions=_MAX_TEST_FUNCTIONS, alpha=1e-10, tol=1e-6, max_iter=100,
                 bounds=None, bias_correction=True, x0="fit", verbose=0):
        self.model = model
        self.theta0 = theta0
        self.min_radius = min_radius
        self.n_scales = n_scales
        self.max_test_functions = max_test_functions
        self.alpha = alpha
        self.tol = tol
        self.max_iter = max_iter
        self.bounds = bounds
        self.bias_correction = bias_correction
        self.x0 = x0
        self.verbose = verbose

    def _min_samples(self):
        return _NOISE_STENCIL + 1

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, t, Y):
        """Estimate ``theta_`` and its covariance from observations ``Y`` at times ``t``.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1)
        Y : array-like of shape (n_samples, n_states)

        Returns
        -------
        self : WENDyODE
        """
        model = self.model
        t, Y, meta = self._validate_training_data(t, Y)
        theta0 = self._initial_theta()
        linear = is_linear_on_data(model, t, Y)
        bounds = None
        if self.bounds is not None:
            bounds = (np.broadcast_to(np.asarray(self.bounds[0], float), theta0.shape),
                      np.broadcast_to(np.asarray(self.bounds[1], float), theta0.shape))
            linear = False  # bounds need the constrained (nonlinear) solver
        res = wendy_solve(model, t, Y, theta0, linear=linear, alpha=self.alpha, tol=self.tol,
                          max_iter=self.max_iter, min_radius=self.min_radius,
                          n_scales=self.n_scales,
                          max_test_functions=self.max_test_functions, bounds=bounds,
                          bias_correction=self.bias_correction, verbose=self.verbose)
        x0 = _smoothed_x0(t, Y, res.radii[0])
        if self.x0 in ("fit", "fit_all"):
            # Shooting on a short window (four smallest radii, at most 15 % of the series,
            # at least 10 samples): a few cheap solves, and no sensitivity to chaotic
            # divergence later in the series.
            window = min(4 * res.radii[0], 0.15 * (t[-1] - t[0]))
            n_win = max(10, int(np.searchsorted(t, t[0] + window)))
            # ... but long enough for the data to move well above the noise: a trajectory
            # creeping up from near zero (logistic growth from 0.01) says nothing about x0
            # until it rises (wendy_logistic at 5 %: prediction error 1.13 -> 0.056).
            moved = np.abs(Y - x0) > 10.0 * np.maximum(res.sigma, 1e-300)
            first_move = int(np.argmax(np.any(moved, axis=1))) if np.any(moved) else t.size
            n_win = min(t.size, max(n_win, first_move + 10))
            x0 = _shoot_initial_state(model, res.theta, t[:n_win], Y[:n_win], x0)
            if self.x0 == "fit_all" and n_win < t.size:
                # From the window's x0, which is near the right basin, over everything.
                x0 = _shoot_initial_state(model, res.theta, t, Y, x0)
        if not res.converged:
            warn_not_converged(self, res.n_iter, res.stop_reason,
                               f"Increase max_iter (now {self.max_iter}) or tol (now "
                               f"{self.tol}).")
        return self._set_fitted(
            theta_=res.theta, theta_cov_=res.theta_cov,
            theta_stderr_=np.sqrt(np.clip(np.diag(res.theta_cov), 0, None)),
            sigma_=res.sigma, theta_ols_=res.theta_ols, x0_=x0, t0_=float(t[0]),
            n_iter_=res.n_iter, converged_=res.converged, stop_reason_=res.stop_reason,
            n_test_functions_=res.n_test_functions, radii_=list(res.radii),
            **meta)
