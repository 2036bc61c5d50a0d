"""WENDy's solver (seed 001): the weak-form system, its OLS start and the iteratively
reweighted least squares, on arrays; :func:`wendy_solve` returns a :class:`WENDyResult`.

Call order of :func:`wendy_solve`:

1. noise level ``sigma`` (:func:`~._noise.estimate_noise`), smallest radius and the
   orthonormal test functions ``Phi``, ``Phidot`` (:mod:`._testfunctions`);
2. the weak-form system: :class:`LinearWeakForm` (``G theta - b``, with the optional bias
   correction) for models affine in theta, :class:`NonlinearWeakForm` otherwise; its
   unweighted solve is the OLS start;
3. IRLS: whiten with the residual covariance at the current iterate
   (:func:`~._covariance.covariance_blocks`, its ``df/dx`` at the data decorrelated from
   their own noise by :func:`~._smoothing.decorrelated_states`), solve the weighted problem,
   stop on a fixed point, a Shapiro-Wilk test of the whitened residual, a stall (the best
   weak-form likelihood gained less than ``_STALL_GAIN`` over ``_STALL_ITERS`` iterations)
   or ``max_iter``;
4. return the iterate with the smallest weak-form negative log-likelihood (the OLS start
   included; at a fixed point, the fixed point unless an earlier iterate beats it, which
   ``stop_reason`` then says); the covariance is the generalised least squares one at the
   returned iterate;
5. with ``method="mle"``, the weak-form likelihood's optimum from that iterate
   (:func:`~._likelihood.maximise_weak_likelihood`), its covariance the inverse Hessian.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.linalg import block_diag
from scipy.optimize import least_squares, lsq_linear
from scipy.stats import shapiro

from .._noise_level import estimate_noise
from ..exceptions import DivergenceError
from ._blockwise import (
    DENSE_MAX_ROWS,
    BlockWhitening,
    DenseWhitening,
    block_covariances,
    block_score_bias,
    sandwich_covariance,
)
from ._covariance import (
    covariance_blocks,
    inverse_from_cholesky,
    noise_corrected_split,
    score_bias,
    whiten,
)
from ._likelihood import WeakLikelihood, maximise_weak_likelihood
from ._smoothing import decorrelated_states
from ._testfunctions import (
    MAX_TEST_FUNCTIONS,
    select_min_radius,
    test_function_matrices,
)

__all__ = ["LinearWeakForm", "NonlinearWeakForm", "WENDyResult", "wendy_solve"]

logger = logging.getLogger("sklode")

# Shapiro-Wilk stop (seed 001): checked from iteration 10 on, stop when p < 1e-4.
_SW_FIRST_ITER = 10
_SW_LEVEL = 1e-4

# Stall stop: the IRLS ends when the smallest weak-form negative log-likelihood so far fell
# by less than _STALL_GAIN over the last _STALL_ITERS iterations (log-likelihood units: a
# likelihood ratio of 1.05, about a fifth of a standard error along the worst-determined
# direction). On Hindmarsh-Rose at 10 % noise the iterates otherwise wander about their
# best, or creep towards it by 0.01-0.05 per iteration, for the whole of max_iter (7 of 10
# fits ran 100 iterations); the best iterate is returned either way.
_STALL_ITERS = 10
_STALL_GAIN = 0.05

# Largest distance, in IRLS standard errors (Mahalanobis, the IRLS covariance), that the weak
# likelihood's optimum may lie from the IRLS estimate it started from: both estimate the same
# theta from the same residual. On Hindmarsh-Rose at 20 % noise the likelihood ran 15, 1.3e4
# and 1.5e6 of them away on three head-to-head draws (E2 up to 92, the IRLS's 0.22-0.83);
# no draw of logistic, Lotka-Volterra, FitzHugh-Nagumo (20 %) or protein transduction (10 %)
# checked tripped it.
_RUNAWAY = 10.0

# Relative change of theta below which the score's bias is not recomputed: the bias moves
# theta by about one standard error and varies slowly with theta, so once theta moves by
# less than 1 % the fixed point's bias is from within 1 % of it (~1 % of that shift).
_BIAS_UPDATE = 1e-2


@dataclass(frozen=True)
class WENDyResult:
    """What :func:`wendy_solve` returns.

    Attributes
    ----------
    theta : ndarray of shape (n_params,)
    theta_cov : ndarray of shape (n_params, n_params)
        Generalised least squares covariance ``(G^T C^-1 G)^-1`` at ``theta``.
    sigma : ndarray of shape (n_states,)
        Estimated noise standard deviation per state.
    theta_ols : ndarray of shape (n_params,)
        The ordinary least squares start.
    weak_nll : ndarray of shape (n_assessed,)
        The weak-form negative log-likelihood of every iterate assessed (0: the OLS start,
        last: the last iterate).
    returned : int
        Which of them ``theta`` is (the smallest).
    n_iter : int
    converged : bool
    stop_reason : str
    solver : str
        Which path ran.
    n_test_functions : int
        Over every experiment.
    radii : list of list of float
        The test-function radii of each experiment.
    sigmas : list of ndarray of shape (n_states,)
        The noise estimate of each experiment (``sigma`` pools them).
    """

    theta: np.ndarray
    theta_cov: np.ndarray
    sigma: np.ndarray
    theta_ols: np.ndarray
    weak_nll: np.ndarray
    returned: int
    n_iter: int
    converged: bool
    stop_reason: str
    solver: str
    n_test_functions: int
    radii: list
    sigmas: list


class LinearWeakForm:
    """The weak form of a model affine in theta: residual ``G theta - b``.

    With ``bias_correction`` the features lose the mean the noise adds to them (half the
    ``sigma^2``-weighted curvature) and each weighted solve subtracts the score's mean
    (:func:`~._covariance.score_bias`) at the current iterate, recomputed while theta still
    moves by more than ``_BIAS_UPDATE``. Bounds make every solve a bounded linear least
    squares (BVLS), so the path and the correction stay the same.

    Parameters
    ----------
    model : ODEModel
    t : ndarray of shape (n_times,)
    U : ndarray of shape (n_times, n_states)
    Phi, Phidot : ndarray of shape (K, n_times)
    s2 : ndarray of shape (n_states,)
        Noise variances.
    bias_correction : bool
    bounds : (ndarray, ndarray) or None
    """

    def __init__(self, model, t, U, Phi, Phidot, s2, *, bias_correction, bounds):
        K, d = Phi.shape[0], U.shape[1]
        f0, F1 = model.affine_split(t, U)
        self.H = None  # d^2 f / (dtheta dx) per point, for the score's bias
        if bias_correction:
            f0, F1, self.H = noise_corrected_split(model, t, U, f0, F1, s2)
        self.G = np.einsum("kn,nip->kip", Phi, F1).reshape(K * d, -1)
        self.b = -(Phi @ f0 + Phidot @ U).reshape(K * d)
        self.Phi, self.Phidot, self.s2, self.bounds = Phi, Phidot, s2, bounds
        self._bias_at, self._bias = None, None

    def residual(self, theta):
        """The weak residual ``G theta - b``, shape ``(K n_states,)``."""
        return self.G @ theta - self.b

    def jacobian(self, theta):
        """``G``."""
        return self.G

    def _lstsq(self, A, rhs):
        if self.bounds is None:
            return np.linalg.lstsq(A, rhs, rcond=None)[0]
        return lsq_linear(A, rhs, bounds=self.bounds, method="bvls").x

    def ols(self, theta0):
        """The unweighted solve (theta0 unused: the solve is exact)."""
        return self._lstsq(self.G, self.b)

    def solve_weighted(self, weights, J, theta_prev, Gw):
        """Weighted solve with the residual covariance's whitening ``weights``
        (:class:`._blockwise.DenseWhitening` with ``J`` the dense ``df/dx``, or
        :class:`._blockwise.BlockWhitening` with ``J`` its sparse entries).

        Returns the new theta and its whitened residual.
        """
        bw = weights.white(self.b)
        if self.H is not None:
            moved = (self._bias_at is None or np.linalg.norm(theta_prev - self._bias_at)
                     > _BIAS_UPDATE * np.linalg.norm(theta_prev))
            if moved:
                self._bias_at = theta_prev.copy()
                if isinstance(weights, BlockWhitening):
                    self._bias = block_score_bias(self.Phi, self.Phidot, *J, self.H, self.s2,
                                                  weights.inverse_blocks())
                else:
                    self._bias = score_bias(self.Phi, self.Phidot, J, self.H, self.s2,
                                            inverse_from_cholesky(weights.Lc))
            # Normal equations Gw^T Gw theta = Gw^T bw + c: shifting bw by the minimum-norm
            # z with Gw^T z = c keeps lstsq's handling of rank deficiency.
            bw = bw + np.linalg.lstsq(Gw.T, self._bias, rcond=None)[0]
        theta = self._lstsq(Gw, bw)
        return theta, Gw @ theta - bw


class NonlinearWeakForm:
    """The weak form of a model not affine in theta: ``r(theta) = Phi f(U, theta) + Phidot U``,
    solved by trust-region least squares (with ``bounds`` when given) at every iteration.

    Parameters
    ----------
    model : ODEModel
    t : ndarray of shape (n_times,)
    U : ndarray of shape (n_times, n_states)
    Phi, Phidot : ndarray of shape (K, n_times)
    bounds : (ndarray, ndarray) or None
    """

    def __init__(self, model, t, U, Phi, Phidot, *, bounds):
        self.model, self.t, self.U, self.Phi = model, t, U, Phi
        self.drift = Phidot @ U
        self.bounds = (-np.inf, np.inf) if bounds is None else bounds

    def residual(self, theta):
        """The weak residual, shape ``(K n_states,)``."""
        return (self.Phi @ self.model.f(self.t, self.U, theta) + self.drift).ravel()

    def jacobian(self, theta):
        """``d r / d theta``, shape ``(K n_states, n_params)``."""
        return np.einsum("kn,nip->kip", self.Phi,
                         self.model.jac_theta(self.t, self.U, theta)).reshape(-1, theta.size)

    def ols(self, theta0):
        """The unweighted solve from ``theta0`` (clipped into the bounds)."""
        return self.solve_weighted(None, None, np.clip(theta0, *self.bounds), None)[0]

    def solve_weighted(self, weights, J, theta_prev, Gw):
        """Trust-region solve of the whitened residual (``weights`` None: unweighted)."""
        def white(a):
            return a if weights is None else weights.white(a)

        res = least_squares(lambda th: white(self.residual(th)), theta_prev,
                            jac=lambda th: white(self.jacobian(th)), bounds=self.bounds,
                            method="trf", x_scale="jac")
        return res.x, res.fun


def _inverse(matrix):
    """``matrix^-1``, or NaN where it is singular (a covariance the data do not determine)."""
    try:
        return np.linalg.inv(matrix)
    except np.linalg.LinAlgError:
        return np.full(matrix.shape, np.nan)


def _weak_likelihood_result(likelihood, theta_irls, Gw, *, bias_correction, bounds,
                            max_iter, n_irls, fields):
    """The weak-form likelihood's optimum from the IRLS estimate, as a :class:`WENDyResult`.

    The likelihood's ``log det C`` can fall without bound where ``df/dx`` makes ``C`` nearly
    singular, so a trust region from the IRLS estimate can walk to a far, spurious optimum
    (Hindmarsh-Rose at 20 % noise: E2 92). An optimum further from the IRLS estimate than
    ``_RUNAWAY`` in the IRLS's own Mahalanobis distance is not the local one the IRLS
    approached: the IRLS estimate is returned instead, and ``stop_reason`` says so.
    """
    if bias_correction:
        likelihood.hold_bias(theta_irls)
    theta, hessian, n_tr, converged, message = maximise_weak_likelihood(
        likelihood, theta_irls, bounds=bounds, max_iter=max_iter)
    # The Mahalanobis distance in the IRLS covariance (Gw^T Gw)^-1 is the whitened step's norm.
    distance = float(np.linalg.norm(Gw @ (theta - theta_irls)))
    if distance > _RUNAWAY:
        return WENDyResult(theta=theta_irls, theta_cov=_inverse(Gw.T @ Gw),
                           n_iter=n_irls + n_tr, converged=True,
                           stop_reason=(f"the weak likelihood's optimum lies {distance:.3g} "
                                        f"IRLS standard errors from the IRLS estimate (more "
                                        f"than {_RUNAWAY:g}): a spurious optimum where the "
                                        "residual covariance degenerates; the IRLS estimate "
                                        "is returned"), **fields)
    theta_cov = _inverse(hessian)
    theta_cov = 0.5 * (theta_cov + theta_cov.T)  # inv's round-off breaks the symmetry
    return WENDyResult(theta=theta, theta_cov=theta_cov, n_iter=n_irls + n_tr,
                       converged=converged, stop_reason=f"weak likelihood: {message}", **fields)


def _sw_pvalue(residual):
    if residual.size < 3:
        return 1.0
    return float(shapiro(residual[:5000]).pvalue)  # scipy's approximation is valid to 5000


def wendy_solve(model, t, U, theta0, *, linear, alpha=1e-10, tol=1e-6, max_iter=100,
                min_radius=None, n_scales=4, max_test_functions=MAX_TEST_FUNCTIONS,
                bounds=None, bias_correction=True, sigma=None, method="irls", verbose=0):
    """WENDy: OLS start, then iteratively reweighted least squares on the weak form.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    t : ndarray of shape (n_times,), or a list of them (one per experiment)
        Increasing times (any spacing).
    U : ndarray of shape (n_times, n_states), or a list of them
        Observations of every state; several experiments share theta.
    theta0 : ndarray of shape (n_params,)
        Start of the nonlinear path (the linear path's OLS start is exact).
    linear : bool
        Whether the model is affine in theta (the linear path).
    alpha : float, default=1e-10
        Regularisation of the residual covariance.
    tol : float, default=1e-6
        Fixed-point tolerance on the relative change of theta.
    max_iter : int, default=100
        Maximum number of IRLS iterations.
    min_radius : float, optional
        Smallest test-function radius (None: from each experiment's data).
    n_scales : int, default=4
        Number of radii.
    max_test_functions : int, default=128
        Most orthonormal test functions per experiment.
    bounds : (ndarray, ndarray), optional
        Lower and upper bounds on theta, honoured by every solve of either path.
    bias_correction : bool, default=True
        Second-order errors-in-variables correction (linear path).
    sigma : ndarray of shape (n_states,), optional
        Noise standard deviation per state, in place of the estimate from the data.
    method : {"irls", "mle"}, default="irls"
        ``"mle"``: after the IRLS, minimise the weak-form negative log-likelihood from its
        estimate (:mod:`._likelihood`); the covariance is then the inverse Hessian.
    verbose : int, default=0
        Log each iteration.

    Returns
    -------
    WENDyResult
        The estimate, its covariance, the noise level and why the IRLS stopped.
    """
    ts = list(t) if isinstance(t, (list, tuple)) else [t]
    Us = list(U) if isinstance(U, (list, tuple)) else [U]
    # Each experiment gets its own noise estimate, radius and test functions; the weak forms
    # are stacked through a block-diagonal Phi over the concatenated samples, so every
    # pointwise formula below (features, Jacobians, covariance) is unchanged and the
    # residual covariance comes out block-diagonal: experiments have independent noise.
    if sigma is None:
        sigmas = [estimate_noise(ti, Ui) for ti, Ui in zip(ts, Us)]
    else:  # the user's noise level replaces the estimate
        sigmas = [np.broadcast_to(np.asarray(sigma, np.float64), (Us[0].shape[1],)).copy()
                  for _ in ts]
    counts = np.array([ti.size for ti in ts], dtype=np.float64)
    # One noise level per state for all experiments (pooled variance, weighted by samples).
    sigma = np.sqrt(np.average(np.array(sigmas) ** 2, axis=0, weights=counts))
    radii, Phis, Phidots = [], [], []
    for ti, Ui, si in zip(ts, Us, sigmas):
        radius = select_min_radius(ti, Ui, si) if min_radius is None else float(min_radius)
        Phi_e, Phidot_e, radii_e = test_function_matrices(ti, radius, n_scales=n_scales,
                                                          max_count=max_test_functions)
        Phis.append(Phi_e)
        Phidots.append(Phidot_e)
        radii.append(radii_e)
    if len(ts) == 1:
        Phi, Phidot, t, U = Phis[0], Phidots[0], ts[0], Us[0]
    else:
        Phi, Phidot = block_diag(*Phis), block_diag(*Phidots)
        t, U = np.concatenate(ts), np.vstack(Us)
    U_std = np.std(U, axis=0)
    sigma_eff = np.maximum(sigma, 1e-12 * (U_std + 1e-300))
    if linear:
        system = LinearWeakForm(model, t, U, Phi, Phidot, sigma_eff**2,
                                bias_correction=bias_correction, bounds=bounds)
        solver = "linear IRLS" + (", bias-corrected" if bias_correction else "")
    else:
        system = NonlinearWeakForm(model, t, U, Phi, Phidot, bounds=bounds)
        solver = "nonlinear IRLS (trust region)"
    if bounds is not None:
        solver += ", bounded"
    theta0 = np.asarray(theta0, dtype=np.float64)
    with np.errstate(all="ignore"):
        start = system.residual(theta0 if bounds is None else np.clip(theta0, *bounds))
    if not np.all(np.isfinite(start)):
        raise DivergenceError(
            f"The weak form of {model!r} is not finite on the data (at theta0={theta0}): the "
            "vector field overflows or is undefined at the observed states. Check the units "
            "of the data and the model's domain, or start from another theta0.", n_iter=0)
    theta = system.ols(theta0)
    theta_ols = theta.copy()

    drift_gram = Phidot @ Phidot.T
    # df/dx of the covariance at the data decorrelated from their own noise (see
    # ._smoothing); bias_correction=False keeps the paper's covariance at the noisy data.
    U_cov = U if not bias_correction else np.vstack(
        [decorrelated_states(ti, Ui, r[0]) for ti, Ui, r in zip(ts, Us, radii)])

    # Many states: each state's residual weighted by its own covariance block
    # (:mod:`._blockwise`), the dense (K d)^2 covariance being out of reach.
    blockwise = Phi.shape[0] * U.shape[1] > DENSE_MAX_ROWS
    if blockwise and method == "mle":
        raise ValueError(
            f"method='likelihood' needs the dense residual covariance, {Phi.shape[0]} test "
            f"functions x {U.shape[1]} states = {Phi.shape[0] * U.shape[1]} rows squared "
            f"(more than {DENSE_MAX_ROWS} rows); use method='irls' at this size.")

    def whitening(theta):
        """The residual covariance's whitening at ``theta``, and ``df/dx`` there."""
        if blockwise:
            sparse_J = model.jac_x_sparse(t, U_cov, theta)
            return BlockWhitening(block_covariances(Phi, Phidot, *sparse_J, sigma_eff**2),
                                  alpha), sparse_J
        J = model.jac_x(t, U_cov, theta)
        return DenseWhitening(whiten(covariance_blocks(Phi, Phidot, J, sigma_eff, drift_gram),
                                     alpha)), J

    def assess(theta, weights):
        """Weak-form negative log-likelihood of ``theta`` and its whitened Jacobian."""
        white = weights.white(system.residual(theta))
        nll = 0.5 * float(white @ white) + weights.half_logdet()
        return theta, nll, weights.white(system.jacobian(theta))

    def broke_down(n_iter, exc):
        return DivergenceError(
            f"WENDy's residual covariance broke down at iteration {n_iter} ({exc}); the "
            f"iterate theta = {theta} makes the weak form singular. Try bounds, a closer "
            "theta0, or a larger alpha.", n_iter=n_iter)

    history = []  # (theta_n, its weak-form NLL, its whitened Jacobian); n = 0 is OLS
    converged, stop_reason, n_iter = False, f"max_iter={max_iter} reached", 0
    for n_iter in range(1, max_iter + 1):
        try:
            weights, J = whitening(theta)
            history.append(assess(theta, weights))
            theta_new, white_res = system.solve_weighted(weights, J, theta, history[-1][2])
        except np.linalg.LinAlgError as exc:  # a covariance that is not positive definite
            raise broke_down(n_iter, exc) from exc
        if not np.all(np.isfinite(theta_new)):
            raise DivergenceError(
                f"WENDy iterates became non-finite at iteration {n_iter}; the data may not "
                "resolve this model (try more samples or a larger min_radius).", n_iter=n_iter)
        pvalue = _sw_pvalue(white_res)
        change = np.linalg.norm(theta_new - theta) / max(np.linalg.norm(theta), 1e-300)
        if verbose:
            logger.info("WENDy iter %d: relative change %.3g, SW p = %.3g, weak NLL %.6g",
                        n_iter, change, pvalue, history[-1][1])
        theta = theta_new
        if change < tol:
            converged, stop_reason = True, f"fixed point (relative change below tol={tol:g})"
            break
        if n_iter >= _SW_FIRST_ITER and pvalue < _SW_LEVEL:
            # The whitened residual stopped looking Gaussian: the iteration is leaving the
            # regime where its covariance model holds.
            converged, stop_reason = True, "Shapiro-Wilk stop"
            break
        nlls = [nll for _, nll, _ in history]
        if (len(nlls) > _STALL_ITERS
                and min(nlls[:-_STALL_ITERS]) - min(nlls) < _STALL_GAIN):
            converged = True
            stop_reason = (f"stalled (the weak NLL fell by less than {_STALL_GAIN:g} in "
                           f"{_STALL_ITERS} iterations: the iterates wander about, or creep "
                           "towards, the best one)")
            break
    # The last iterate is judged like the others: whichever has the smallest weak-form
    # negative log-likelihood (WENDy-MLE's objective) is returned, never blindly the last
    # one or the OLS start (a reference-code bug). At a fixed point that is the fixed point
    # unless the weighted iterations raised the criterion on the way, which is then said.
    # A fixed point moved by less than tol from the last whitened iterate, so it is judged
    # with that iterate's covariance (one covariance fewer: a quarter of a 3-iteration fit).
    fixed = stop_reason.startswith("fixed point")
    try:
        if not fixed:
            weights, J = whitening(theta)
        history.append(assess(theta, weights))
    except np.linalg.LinAlgError as exc:
        raise broke_down(n_iter, exc) from exc
    last = len(history) - 1
    weak_nll = np.array([nll for _, nll, _ in history])
    best = int(np.argmin(weak_nll))
    if fixed and weak_nll[best] >= weak_nll[last] - 1e-9 * (1.0 + abs(weak_nll[last])):
        best = last  # the fixed point, up to round-off in its criterion
    theta, _, Gw = history[best]
    if method == "mle":
        return _weak_likelihood_result(
            WeakLikelihood(system, model, t, U_cov, Phi, Phidot, sigma_eff, alpha,
                           linear=linear),
            theta, Gw, bias_correction=linear and bias_correction, bounds=bounds,
            max_iter=max_iter, n_irls=n_iter,
            fields=dict(sigma=sigma, theta_ols=theta_ols, weak_nll=weak_nll, returned=best,
                        solver=solver + ", weak likelihood", n_test_functions=Phi.shape[0],
                        radii=radii, sigmas=sigmas))
    if best != last:
        what = "the OLS start" if best == 0 else f"iterate {best} of {last}"
        stop_reason += (f"; {what} returned: it has the smallest weak NLL "
                        f"({history[best][1]:.6g}, the last iterate {history[last][1]:.6g})")
    # Parameter covariance of the generalised least squares estimate: (G^T C^-1 G)^-1, the
    # noise variance being already inside C through sigma; with block weights the sandwich
    # under the full C (at the last covariance evaluated, as the dense path's Gw).
    theta_cov = (sandwich_covariance(Phi, Phidot, *J, sigma_eff, weights,
                                     system.jacobian(theta))
                 if blockwise else _inverse(Gw.T @ Gw))
    if blockwise:
        solver += ", block-diagonal weights (many states)"
    return WENDyResult(theta=theta, theta_cov=theta_cov, sigma=sigma,
                       theta_ols=theta_ols,
                       weak_nll=weak_nll, returned=best,
                       n_iter=n_iter, converged=converged, stop_reason=stop_reason,
                       solver=solver, n_test_functions=Phi.shape[0], radii=radii,
                       sigmas=sigmas)
