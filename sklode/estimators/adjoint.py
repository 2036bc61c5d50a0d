"""AdjointODE: forward-solver weighted least squares with exact, cheap gradients (seed 002).

The cost (seed 002, eq. 6) is

    L(x0, theta) = 1/2 ||(x0 - s0) / sigma0||^2 + k/2 (c . x0 - N)^2
                   + 1/2 sum_i ||(x_obs(t_i; x0, theta) - y_i) / sigma_i||^2,

written as 1/2 ||r||^2 of one residual vector r so that every optimiser shares it: Gauss–Newton
type methods (scipy's trust-region ``least_squares``, the default) use the forward-sensitivity
Jacobian of r, gradient methods (BFGS, L-BFGS-B, the four nonlinear CG updates) use the
continuous-adjoint gradient (or forward sensitivities, ``gradient="forward"``). Both
derivatives come from :mod:`._sensitivity`: one forward solve plus one collocation pass on the
stored trajectory.
"""

from __future__ import annotations

import logging
from numbers import Integral, Real

import numpy as np
from scipy.optimize import least_squares, minimize
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from ..exceptions import IntegrationError
from ..integrate import INTEGRATORS
from ._base import ODEEstimatorBase, warn_not_converged
from ._optim import nonlinear_cg
from ._sensitivity import adjoint_gradient, forward_trajectory, sensitivities

__all__ = ["OPTIMIZERS", "AdjointODE", "LeastSquaresObjective"]

logger = logging.getLogger("sklode")

#: Optimisers accepted by ``AdjointODE(optimizer=...)`` and what drives them.
OPTIMIZERS = {
    "trf": "scipy least_squares, trust-region reflective, sensitivity Jacobian (bounds ok)",
    "lm": "scipy least_squares, MINPACK Levenberg-Marquardt, sensitivity Jacobian",
    "bfgs": "scipy BFGS (Wolfe line search), adjoint gradient",
    "l-bfgs-b": "scipy L-BFGS-B, adjoint gradient (bounds ok)",
    "cg-fr": "nonlinear CG, Fletcher-Reeves, strong-Wolfe line search, adjoint gradient",
    "cg-pr": "nonlinear CG, Polak-Ribiere (PR+)",
    "cg-hs": "nonlinear CG, Hestenes-Stiefel",
    "cg-dy": "nonlinear CG, Dai-Yuan",
}
_BOUNDED = ("trf", "l-bfgs-b")
_LINE_SEARCH_FLOOR = 1e-5
_START_EVALUATIONS = 200_000  # ~8 s of torch evaluations for the starting point's solve
_TRIAL_EVALUATION_FACTOR = 20  # trial points: 20x what the start needed (>= 20000)


class LeastSquaresObjective:
    """The residual vector of the seed's cost and its derivatives in optimiser variables.

    The unknowns ``z = [x0 (if estimated), theta]`` are optimised as ``u``, with
    ``z = scale * u`` (unknowns of very different sizes, x0 ~ 1e5 and theta ~ 1, all become
    order one) or ``theta = exp(u)`` for positive parameters.

    Parameters
    ----------
    model : ODEModel
    t0 : float
        Time of the initial state.
    t, Y : ndarray
        Increasing observation times (>= t0) and observations of the ``observed`` states.
    sigma : ndarray, same shape as Y
        Standard deviation of each observation.
    observed : tuple of int
    x0 : ndarray (n_states,)
        Starting (or fixed) initial state.
    theta : ndarray (n_params,)
        Starting parameters.
    estimate_x0 : bool
    prior : (s0, sigma0) or None
    invariant : (c, total, k) or None
    positive : bool
    integrator, rtol, atol : forward-solver settings.
    """

    def __init__(self, model, t0, t, Y, sigma, observed, x0, theta, *, estimate_x0, prior,
                 invariant, positive, integrator, rtol, atol):
        self.model, self.t0, self.t, self.Y = model, t0, t, Y
        self.sigma, self.observed = sigma, list(observed)
        self.x0_fixed = np.array(x0, dtype=np.float64)
        self.estimate_x0, self.prior, self.invariant = estimate_x0, prior, invariant
        self.positive = positive
        self.solver = {"integrator": integrator, "rtol": rtol, "atol": atol}
        self.n_states, self.n_params = model.n_states, model.n_params
        self.n_x0 = self.n_states if estimate_x0 else 0
        z0 = np.concatenate([self.x0_fixed[: self.n_x0], np.asarray(theta, np.float64)])
        self.scale = np.where(z0 != 0, np.abs(z0), 1.0)
        self.log_mask = np.zeros(z0.size, dtype=bool)
        if positive:
            self.log_mask[self.n_x0:] = True
        # Evaluation budget of one forward solve: generous at the start, then a multiple of
        # what the start needed, so that a trial point on the edge of blowing up (or stiff
        # for the integrator) is rejected in seconds instead of crawling for minutes.
        self.max_evaluations = _START_EVALUATIONS
        self.n_forward = 0  # forward ODE solves
        self.n_derivative = 0  # sensitivity or adjoint passes
        self._cache_key, self._cache = None, None

    # ------------------------------------------------------------------ variables
    def to_u(self, z):
        z = np.asarray(z, dtype=np.float64)
        if np.any(z[self.log_mask] <= 0):
            raise ValueError("positive=True needs strictly positive starting parameters; got "
                             f"theta0={z[self.n_x0:]}.")
        u = z / self.scale
        u[self.log_mask] = np.log(z[self.log_mask])
        return u

    def to_z(self, u):
        z = u * self.scale
        z[self.log_mask] = np.exp(u[self.log_mask])
        return z

    def dz_du(self, u):
        d = self.scale.copy()
        d[self.log_mask] = np.exp(u[self.log_mask])
        return d

    def split(self, z):
        x0 = self.x0_fixed.copy()
        x0[: self.n_x0] = z[: self.n_x0]
        return x0, z[self.n_x0:]

    # ------------------------------------------------------------------ residual
    def _evaluate(self, u):
        key = u.tobytes()
        if key != self._cache_key:
            x0, theta = self.split(self.to_z(u))
            self.n_forward += 1
            traj = forward_trajectory(self.model, theta, x0, self.t0, self.t, **self.solver,
                                      max_evaluations=self.max_evaluations)
            data = (traj.states[:, self.observed] - self.Y) / self.sigma
            r = np.concatenate([data.ravel(), self.extra_terms(x0)[0]])
            self._cache_key, self._cache = key, (traj, data, r, x0, theta)
        return self._cache

    def extra_terms(self, x0):
        """Residuals of the x0 prior and of the invariant penalty (when x0 is estimated),
        and their Jacobian with respect to x0 (constant: both are affine in x0).

        Returns
        -------
        r : ndarray (n_extra,)
        J : ndarray (n_extra, n_states)
        """
        r, J = [np.zeros(0)], [np.zeros((0, self.n_states))]
        if self.estimate_x0 and self.prior is not None:
            s0, sigma0 = self.prior
            r.append((x0 - s0) / sigma0)
            J.append(np.diag(1.0 / np.broadcast_to(sigma0, x0.shape)))
        if self.estimate_x0 and self.invariant is not None:
            c, total, k = self.invariant
            r.append([np.sqrt(k) * (c @ x0 - total)])
            J.append(np.sqrt(k) * c[None, :])
        return np.concatenate(r), np.vstack(J)

    def residual(self, u):
        return self._evaluate(u)[2]

    def safe_residual(self, u):
        """Residual, or NaNs where the ODE blows up (trust-region methods then shrink)."""
        try:
            return self.residual(u)
        except IntegrationError as exc:
            logger.debug("trial point rejected: %s", exc)
            return np.full(self.Y.size + self.extra_terms(self.x0_fixed)[0].size, np.nan)

    def cost(self, u):
        r = self.residual(u)
        return 0.5 * float(r @ r)

    # ------------------------------------------------------------------ derivatives
    def jacobian_z(self, u):
        """``dr/dz`` from forward sensitivities, shape (n_residuals, n_unknowns)."""
        traj, _, _, x0, theta = self._evaluate(u)
        self.n_derivative += 1
        S = sensitivities(self.model, theta, traj, with_x0=self.estimate_x0)
        J_data = S[:, self.observed, :] / self.sigma[:, :, None]
        J_extra = self.extra_terms(x0)[1]  # no rows unless x0 is estimated
        block = np.zeros((J_extra.shape[0], S.shape[-1]))
        block[:, : self.n_x0] = J_extra[:, : self.n_x0]
        return np.vstack([J_data.reshape(-1, S.shape[-1]), block])

    def jacobian(self, u):
        return self.jacobian_z(u) * self.dz_du(u)[None, :]

    def value_and_grad(self, u, method="adjoint"):
        """``(L, dL/du)``; ``method`` "adjoint" or "forward" (sensitivities)."""
        traj, data, r, x0, theta = self._evaluate(u)
        if method == "forward":
            return 0.5 * float(r @ r), self.jacobian(u).T @ r
        self.n_derivative += 1
        jumps = np.zeros((self.t.size, self.n_states))
        jumps[:, self.observed] = data / self.sigma
        g_x0, g_theta = adjoint_gradient(self.model, theta, traj, jumps)
        r_extra, J_extra = self.extra_terms(x0)
        g_x0 = g_x0 + J_extra.T @ r_extra
        g_z = np.concatenate([g_x0[: self.n_x0], g_theta])
        return 0.5 * float(r @ r), g_z * self.dz_du(u)

    def safe_value_and_grad(self, u, method="adjoint"):
        """As :meth:`value_and_grad`, with an infinite cost where the ODE blows up, so that
        line searches step back."""
        try:
            return self.value_and_grad(u, method)
        except IntegrationError as exc:
            logger.debug("trial point rejected: %s", exc)
            return np.inf, np.full(u.size, np.nan)


def _relative_sigma(Y, scale):
    # sigma_i = scale * |y_i|, floored so that a zero observation gets a finite weight.
    floor = 1e-6 * np.max(np.abs(Y), axis=0, keepdims=True)
    return scale * np.maximum(np.abs(Y), np.where(floor > 0, floor, 1.0))


class AdjointODE(ODEEstimatorBase):
    """Weighted least squares on forward ODE solves with exact gradients (seed 002).

    Fits ``theta`` and, optionally, the initial state ``x0`` at ``t0`` to observations of
    some of the states. Gradients come from the continuous adjoint (or forward sensitivities)
    solved on the stored forward trajectory, so one gradient costs about one and a half
    forward solves whatever the number of parameters. The default optimiser is trust-region
    Gauss–Newton (scipy ``least_squares``) on the exact sensitivity Jacobian: 6-12 iterations
    on the seed's SEIRD problems where BFGS needs 20-30.

    Parameters
    ----------
    model : ODEModel
    theta0 : array-like of shape (n_params,), default=None
        Initial parameter guess (None: the model's default guess).
    x0 : array-like of shape (n_states,), default=None
        Initial state at ``t0``: the starting guess when ``estimate_x0`` is True, the known
        value otherwise. None takes the first observation, which needs every state observed.
    t0 : float, default=None
        Time of ``x0``; None means the earliest training time. Must not be after it.
    observed : tuple of int, default=None
        Indices of the states that ``Y``'s columns hold (None: all states).
    estimate_x0 : bool, default=True
    sigma : float or array-like, default=1.0
        Standard deviation of the observations: one value, one per observed state, or one per
        observation (shape of ``Y``), in units of the data (``sigma_kind="absolute"``) or as a
        fraction of each observation (``"relative"``; the seed's weights, noise level times
        the data).
    sigma_kind : {"absolute", "relative"}, default="absolute"
    x0_prior : array-like of shape (n_states,), default=None
        Prior mean ``s0`` of the initial state (used when ``estimate_x0``).
    x0_prior_sigma : float or array-like, default=None
        Prior standard deviation ``sigma0``; required with ``x0_prior``.
    invariant : (array-like, float), default=None
        ``(c, N)``: penalise ``(k/2) (c . x0 - N)^2``, the seed's ``S+E+I+R+D = N``.
    invariant_weight : float, default=1e-4
        The penalty ``k``.
    optimizer : str, default="trf"
        One of :data:`OPTIMIZERS`: ``"trf"``, ``"lm"``, ``"bfgs"``, ``"l-bfgs-b"``,
        ``"cg-fr"``, ``"cg-pr"``, ``"cg-hs"``, ``"cg-dy"``.
    gradient : {"adjoint", "forward"}, default="adjoint"
        How gradient optimisers get the gradient (least-squares optimisers always use the
        forward-sensitivity Jacobian).
    positive : bool, default=False
        Optimise ``log(theta)``: parameters stay positive.
    bounds : (array-like, array-like), default=None
        Lower and upper bounds on ``theta`` (``"trf"`` and ``"l-bfgs-b"`` only).
    integrator : str, default="LSODA"
        Forward solver (:data:`sklode.integrate.INTEGRATORS`); stiff ones are fine.
    rtol, atol : float, default=1e-8, 1e-10
    tol : float, default=1e-8
        ``least_squares`` ftol/xtol/gtol; gradient methods stop when ``||g|| <= tol ||g0||``
        (the seed's rule).
    max_iter : int, default=200
    verbose : int, default=0
        Log each iteration through the ``sklode`` logger.

    Attributes
    ----------
    theta_ : ndarray of shape (n_params,)
    x0_ : ndarray of shape (n_states,)
    t0_ : float
    theta_cov_ : ndarray of shape (n_params, n_params)
        Gauss–Newton covariance ``s^2 (J^T J)^-1`` (``s^2`` the reduced chi-square).
    theta_stderr_ : ndarray of shape (n_params,)
    x0_stderr_ : ndarray of shape (n_states,)
        Zero for a fixed x0.
    loss_history_, grad_norm_history_ : list of float
        Cost ``L`` and gradient norm (in the optimiser's scaled variables) per iteration.
    n_iter_ : int
    n_solves_ : int
        Forward solves plus derivative (sensitivity or adjoint) passes.
    converged_ : bool
    optimizer_message_ : str
    observed_ : tuple of int

    See Also
    --------
    BCDProxODE : no forward solves; robust to poor initial guesses on fully observed data.
    WENDyODE : no forward solves; fast on long, densely sampled series.

    References
    ----------
    Hernández and Sánchez, "Parameter estimation in ODEs: modelling and computational issues"
    (seed 002).

    Examples
    --------
    >>> from sklode.datasets import make_trajectory
    >>> from sklode.estimators import AdjointODE
    >>> data = make_trajectory("seird", noise=0.05, random_state=0)
    >>> prob = data.problem
    >>> est = AdjointODE(prob.model, theta0=prob.theta_init, x0=prob.x0, t0=prob.t0,
    ...                  observed=prob.observed, estimate_x0=False, sigma=0.05,
    ...                  sigma_kind="relative").fit(data.t, data.Y)
    >>> est.theta_.round(2), est.converged_
    (array([0.86, 0.16, 0.2 , 0.01]), True)
    >>> est.theta_stderr_.round(3)
    array([0.062, 0.01 , 0.005, 0.   ])
    """

    _parameter_constraints = {
        "model": "no_validation",
        "theta0": ["array-like", None],
        "x0": ["array-like", None],
        "t0": [Real, None],
        "observed": ["array-like", None],
        "estimate_x0": ["boolean"],
        "sigma": [Interval(Real, 0, None, closed="neither"), "array-like"],
        "sigma_kind": [StrOptions({"absolute", "relative"})],
        "x0_prior": ["array-like", None],
        "x0_prior_sigma": [Interval(Real, 0, None, closed="neither"), "array-like", None],
        "invariant": [tuple, list, None],
        "invariant_weight": [Interval(Real, 0, None, closed="left")],
        "optimizer": [StrOptions(set(OPTIMIZERS))],
        "gradient": [StrOptions({"adjoint", "forward"})],
        "positive": ["boolean"],
        "bounds": [tuple, list, None],
        "integrator": [StrOptions(set(INTEGRATORS) | {k.lower() for k in INTEGRATORS})],
        "rtol": [Interval(Real, 0, None, closed="neither")],
        "atol": [Interval(Real, 0, None, closed="neither")],
        "tol": [Interval(Real, 0, None, closed="neither")],
        "max_iter": [Interval(Integral, 1, None, closed="left")],
        "verbose": ["verbose"],
    }

    def __init__(self, model=None, *, theta0=None, x0=None, t0=None, observed=None,
                 estimate_x0=True, sigma=1.0, sigma_kind="absolute", x0_prior=None,
                 x0_prior_sigma=None, invariant=None, invariant_weight=1e-4, optimizer="trf",
                 gradient="adjoint", positive=False, bounds=None, integrator="LSODA",
                 rtol=1e-8, atol=1e-10, tol=1e-8, max_iter=200, verbose=0):
        self.model = model
        self.theta0 = theta0
        self.x0 = x0
        self.t0 = t0
        self.observed = observed
        self.estimate_x0 = estimate_x0
        self.sigma = sigma
        self.sigma_kind = sigma_kind
        self.x0_prior = x0_prior
        self.x0_prior_sigma = x0_prior_sigma
        self.invariant = invariant
        self.invariant_weight = invariant_weight
        self.optimizer = optimizer
        self.gradient = gradient
        self.positive = positive
        self.bounds = bounds
        self.integrator = integrator
        self.rtol = rtol
        self.atol = atol
        self.tol = tol
        self.max_iter = max_iter
        self.verbose = verbose

    # ------------------------------------------------------------------ checks
    def _observed_indices(self):
        n = self.model.n_states
        if self.observed is None:
            return tuple(range(n))
        observed = tuple(int(i) for i in np.asarray(self.observed).reshape(-1))
        if not observed or len(set(observed)) != len(observed) or \
                min(observed) < 0 or max(observed) >= n:
            raise ValueError(f"observed must list distinct state indices in 0..{n - 1} of "
                             f"{self.model!r}; got {self.observed!r}.")
        return observed

    def _start_state(self, t, Y, observed, t0):
        n = self.model.n_states
        if self.x0 is not None:
            x0 = np.array(self.x0, dtype=np.float64).reshape(-1)
            if x0.shape != (n,):
                raise ValueError(f"x0 has {x0.size} entries but {self.model!r} has {n} "
                                 f"states {self.model.state_names}.")
            if not np.all(np.isfinite(x0)):
                raise ValueError(f"x0 must be finite; got {x0}.")
            return x0
        if not self.estimate_x0:
            raise ValueError("estimate_x0=False needs the known initial state: pass x0.")
        if len(observed) != n:
            missing = [self.model.state_names[i] for i in range(n) if i not in observed]
            raise ValueError(f"States {missing} are not observed, so the data give no "
                             "starting value for them: pass an initial guess x0.")
        x0 = np.empty(n)
        x0[list(observed)] = Y[0]
        return x0

    def _sigma(self, Y):
        sigma = np.asarray(self.sigma, dtype=np.float64)
        try:
            sigma = np.broadcast_to(sigma if sigma.ndim != 1 or sigma.size == 1
                                    else sigma[None, :], Y.shape)
        except ValueError:
            raise ValueError(f"sigma of shape {np.shape(self.sigma)} does not match Y of "
                             f"shape {Y.shape}: give one value, one per observed state, or "
                             "one per observation.") from None
        if not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
            raise ValueError("sigma must be positive and finite.")
        return _relative_sigma(Y, sigma) if self.sigma_kind == "relative" else sigma.copy()

    def _extra_terms(self, n):
        prior = invariant = None
        if self.x0_prior is not None:
            if self.x0_prior_sigma is None:
                raise ValueError("x0_prior needs x0_prior_sigma (the prior standard deviation).")
            s0 = np.array(self.x0_prior, dtype=np.float64).reshape(-1)
            sigma0 = np.broadcast_to(np.asarray(self.x0_prior_sigma, np.float64), (n,)).copy()
            if s0.shape != (n,) or np.any(sigma0 <= 0):
                raise ValueError(f"x0_prior needs {n} values and x0_prior_sigma positive "
                                 "values.")
            prior = (s0, sigma0)
        if self.invariant is not None:
            c, total = self.invariant
            c = np.array(c, dtype=np.float64).reshape(-1)
            if c.shape != (n,):
                raise ValueError(f"invariant=(c, N) needs c with {n} entries; got {c.size}.")
            invariant = (c, float(total), float(self.invariant_weight))
        return prior, invariant

    def _theta_bounds(self, objective):
        """Bounds on u (the optimiser's variables), or None."""
        if self.bounds is None:
            return None
        if self.optimizer not in _BOUNDED:
            raise ValueError(f"bounds need optimizer 'trf' or 'l-bfgs-b', not "
                             f"{self.optimizer!r}.")
        p, n_x0 = self.model.n_params, objective.n_x0
        lo = np.broadcast_to(np.asarray(self.bounds[0], np.float64), (p,))
        hi = np.broadcast_to(np.asarray(self.bounds[1], np.float64), (p,))
        if np.any(lo >= hi):
            raise ValueError("bounds: every lower bound must be below its upper bound.")
        lower = np.full(n_x0 + p, -np.inf)
        upper = np.full(n_x0 + p, np.inf)
        if self.positive:
            with np.errstate(divide="ignore"):
                lower[n_x0:], upper[n_x0:] = np.log(np.maximum(lo, 0.0)), np.log(hi)
        else:
            lower[n_x0:] = lo / objective.scale[n_x0:]
            upper[n_x0:] = hi / objective.scale[n_x0:]
        return lower, upper

    def _objective(self, t, Y, observed):
        """The cost for sorted, validated ``(t, Y)`` and its starting point ``u0``."""
        t0 = float(t[0]) if self.t0 is None else float(self.t0)
        if t0 > t[0]:
            raise ValueError(f"t0={t0} is after the first observation time {t[0]}; x0 must "
                             "be the state at or before the data.")
        theta0 = self._initial_theta()
        x0 = self._start_state(t, Y, observed, t0)
        prior, invariant = self._extra_terms(self.model.n_states)
        objective = LeastSquaresObjective(
            self.model, t0, t, Y, self._sigma(Y), observed, x0, theta0,
            estimate_x0=self.estimate_x0, prior=prior, invariant=invariant,
            positive=self.positive, integrator=self.integrator, rtol=self.rtol, atol=self.atol)
        return objective, objective.to_u(np.concatenate([x0[: objective.n_x0], theta0]))

    # ------------------------------------------------------------------ fit
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, t, Y):
        """Fit ``theta_`` (and ``x0_``) to observations ``Y`` of the ``observed`` states.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1)
        Y : array-like of shape (n_samples, n_observed)

        Returns
        -------
        self : AdjointODE

        Raises
        ------
        IntegrationError
            The ODE cannot be solved at the starting point.
        """
        model = self.model
        observed = self._observed_indices() if hasattr(model, "n_states") else ()
        t, Y, meta = self._validate_training_data(t, Y, observed)
        objective, u0 = self._objective(t, Y, observed)
        bounds = self._theta_bounds(objective)
        if bounds is not None:  # start strictly inside the box
            span = np.where(np.isfinite(bounds[1] - bounds[0]), bounds[1] - bounds[0], 1.0)
            u0 = np.clip(u0, bounds[0] + 1e-10 * span, bounds[1] - 1e-10 * span)
        try:
            start_traj = objective._evaluate(u0)[0]
        except IntegrationError as exc:
            x0, theta0 = objective.split(objective.to_z(u0))
            raise IntegrationError(
                f"AdjointODE cannot start: the ODE fails at the initial guess theta0="
                f"{theta0}, x0={x0}. {exc}", t_reached=exc.t_reached) from exc
        objective.max_evaluations = max(20_000,
                                        _TRIAL_EVALUATION_FACTOR * start_traj.n_evaluations)

        history = {"loss": [], "grad": []}
        result = self._run_optimizer(objective, u0, bounds, history)
        u = result["u"]
        z = objective.to_z(u)
        x0_fit, theta = objective.split(z)
        cov_z = self._covariance(objective, u)
        p = model.n_params
        theta_cov = cov_z[objective.n_x0:, objective.n_x0:]
        x0_stderr = np.zeros(model.n_states)
        if objective.n_x0:
            x0_stderr = np.sqrt(np.clip(np.diag(cov_z)[: objective.n_x0], 0, None))
        if not result["converged"]:
            warn_not_converged(self, result["n_iter"], result["message"],
                               f"Increase max_iter (now {self.max_iter}), loosen tol (now "
                               f"{self.tol}) or try optimizer='trf'.")
        return self._set_fitted(
            theta_=theta, x0_=x0_fit, t0_=objective.t0, theta_cov_=theta_cov,
            theta_stderr_=np.sqrt(np.clip(np.diag(theta_cov), 0, None)).reshape(p),
            x0_stderr_=x0_stderr, loss_history_=history["loss"],
            grad_norm_history_=history["grad"], n_iter_=int(result["n_iter"]),
            n_solves_=objective.n_forward + objective.n_derivative,
            converged_=bool(result["converged"]), optimizer_message_=str(result["message"]),
            **meta)

    def _log(self, history, loss, grad):
        history["loss"].append(float(loss))
        history["grad"].append(float(np.linalg.norm(grad)))
        if self.verbose:
            logger.info("AdjointODE iter %d: L = %.10g, |grad| = %.3g",
                        len(history["loss"]) - 1, loss, history["grad"][-1])

    def _run_optimizer(self, objective, u0, bounds, history):
        name = self.optimizer
        if name in ("trf", "lm"):
            def jac(u):
                J = objective.jacobian(u)
                r = objective.residual(u)
                self._log(history, 0.5 * r @ r, J.T @ r)  # jac runs once per accepted iterate
                return J

            method = "lm" if name == "lm" and bounds is None else "trf"
            fun = objective.residual if method == "lm" else objective.safe_residual
            res = least_squares(fun, u0, jac=jac, method=method,
                                bounds=bounds if bounds is not None else (-np.inf, np.inf),
                                ftol=self.tol, xtol=self.tol, gtol=self.tol,
                                max_nfev=self.max_iter, x_scale=1.0)
            return {"u": res.x, "converged": res.status > 0, "message": res.message,
                    "n_iter": max(len(history["loss"]) - 1, 0)}

        method = "forward" if self.gradient == "forward" else "adjoint"

        def fg(u):
            return objective.safe_value_and_grad(u, method)

        f0, g0 = objective.value_and_grad(u0, method)
        self._log(history, f0, g0)
        gtol = self.tol * np.linalg.norm(g0)

        def callback(u, *args):
            f, g = objective.safe_value_and_grad(u, method)  # cached: no extra solve
            self._log(history, f, g)

        if name.startswith("cg-"):
            res = nonlinear_cg(fg, u0, update=name[3:], gtol=gtol, max_iter=self.max_iter,
                               callback=callback)
        else:
            options = {"maxiter": self.max_iter}
            if name == "bfgs":
                options.update(gtol=gtol, norm=2)
            else:
                options.update(gtol=gtol / np.sqrt(u0.size), ftol=1e-15)
            res = minimize(fg, u0, jac=True, method="BFGS" if name == "bfgs" else "L-BFGS-B",
                           bounds=None if bounds is None else list(zip(*bounds)),
                           options=options, callback=callback)
        # A line search that fails ("precision loss") once the gradient has dropped by 1e-5
        # has hit the accuracy of a cost computed by an ODE solver, not a wrong turn: the seed
        # reports the same floor for CG ("does not admit eps < 1e-5"). Count it as converged.
        converged = bool(res.success) or bool(
            np.linalg.norm(res.jac) <= _LINE_SEARCH_FLOOR * np.linalg.norm(g0))
        return {"u": res.x, "converged": converged, "message": res.message,
                "n_iter": res.nit}

    def _covariance(self, objective, u):
        """Gauss–Newton covariance of z = [x0 (estimated), theta] at the optimum."""
        try:
            J = objective.jacobian_z(u)
            r = objective.residual(u)
        except IntegrationError:
            return np.full((u.size, u.size), np.nan)
        m_data = objective.Y.size
        dof = max(m_data - u.size, 1)
        chi2 = float(np.sum(r[:m_data] ** 2)) / dof
        return chi2 * np.linalg.pinv(J.T @ J)
