"""WENDyODE: weak-form estimation of ODE parameters (seed 001)."""

from __future__ import annotations

from numbers import Integral, Real
from dataclasses import dataclass

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Hidden, Interval, StrOptions

from .._estimator import COMMON_CONSTRAINTS, ODEEstimator, warn_not_converged
from .._noise_level import MIN_SAMPLES
from .._on_grid import (
    BOOTSTRAP_CONSTRAINTS,
    DoseSplit,
    bounded_theta_problem,
    finish_fit,
    fitted_mask,
    full_theta,
    is_linear_on_data,
    on_state_scale,
    require_observed,
    require_state_data,
)
from .._validation import estimated_x0_mask
from .._checks import check_bounds
from ..diagnostics._bootstrap import replicate_noise
from ..diagnostics._uncertainty import uncertainty_at_fit
from ..exceptions import IntegrationError, warn
from ..models import check_model
from ..observation._likelihood import sigma_per_state
from ..outputerror._initial_state import (
    SHOOT_RTOL,
    shoot_initial_state,
    shooting_window,
    smoothed_x0,
)
from ._irls import wendy_solve
from ._testfunctions import MAX_TEST_FUNCTIONS

__all__ = ["WENDyODE"]

#: BCD-prox's check of the offset from the output-error optimum, for WENDy, whose standard errors
#: are its own (at or above the output-error bound), so the step is measured in them. Unbiased, the
#: step's spread is that of WENDy's estimate minus the nearly efficient optimum's (Hausman): below 1
#: standard error, and a step beyond 1.5 comes by chance in at most 13 % per parameter, only where
#: WENDy is far less precise than the optimum. Chosen on seeds 0-99 of benchmarks/coverage.py (100
#: draws per cell): warned 0-8 of 100 fits on the calibrated cells, 27 on FitzHugh-Nagumo at 10 %
#: (c: mean z +0.9, coverage 0.84; the unwarned fits cover 0.93) and 8-31 on the Brusselator (d:
#: 0.88; unwarned 0.92-0.99); at 2.0, FitzHugh-Nagumo's unwarned stay at 0.86. Checked on seeds
#: 100-199 (results/coverage_heldout.md).
OUTPUT_ERROR_OFFSET = 1.5


@dataclass(frozen=True)
class _Solved:
    """One run of WENDy on validated experiments (:meth:`WENDyODE._solve`): the solver's
    result and what the fit's tail and the bootstrap's refits read of it."""

    res: object  # WENDyResult
    split: object  # DoseSplit: the experiments cut at their doses
    data: object  # ExperimentData fitted: split, in the fitted (scaled) states
    transformed: object  # ScaledStates, or None
    fit_model: object  # the model fitted: fixed parameters held, states scaled
    theta: np.ndarray  # the full parameter vector
    z0s: np.ndarray  # the initial states in the fitted states
    x0s: np.ndarray  # the same in the model's states


class WENDyODE(ODEEstimator):
    """Weak-form estimation of ODE parameters (WENDy), with parameter covariances.

    Multiplies the ODE by smooth compactly supported test functions and integrates by
    parts, so no forward solve and no derivative of the data is needed:

    .. math::

        \\sum_n w_n \\psi_k(t_n) f(u_n, \\theta) + \\sum_n w_n \\psi_k'(t_n) u_n \\approx 0.

    For a model affine in ``theta`` this is a linear regression ``G theta = b`` whose
    errors depend on the noise through ``L(theta)``; WENDy solves it by iteratively
    reweighted least squares with covariance ``(1 - alpha) L L^T + alpha I``.

    Several experiments share ``theta``: the weak-form rows of all of them are stacked, each
    with its own test functions and noise estimate, and the residual covariance is block
    diagonal (independent noise). A time with a missing entry (NaN) leaves that
    experiment's grid; the quadrature handles the uneven spacing.

    Parameters
    ----------
    model : ODEModel
        The vector field. Every state must be observed (the weak form integrates each
        equation against the data).
    theta0 : array-like of shape (n_params,) or dict, default=None
        Starting point for models not linear in theta (linear ones start from the exact OLS
        solution and ignore it). ``None``: ``model.default_theta``. A ``theta0`` outside
        ``bounds``/``positive`` raises ``ValueError``; the default guess is moved inside them.
        A dict gives the values by parameter name, every one of them.
    x0 : array-like of shape (n_states,) or (n_experiments, n_states), or dict, default=None
        Initial state at the first observation time (of each experiment): the known value
        where ``estimate_x0`` is False, otherwise the start of the shooting (NaN or None:
        start from the smoothed data). WENDy's parameter estimate does not use it.
        A dict gives them by state name (a list of dicts: one per experiment); a state
        it leaves out is unknown.
    t0 : float or array-like of shape (n_experiments,), default=None
        Time of ``x0``; must be the first observation time. None: the first observation time
        of each experiment.
    estimate_x0 : bool or array-like of bool of shape (n_states,), default=True
        Which components of the initial state ``x0_`` are fitted (by ``x0_method``) rather
        than known.
    observed : sequence of int or str, default=None
        Which states ``Y``'s columns hold; the weak form needs all of them. None: every
        state, in order.
    fixed : dict, default=None
        Parameters held at given values while the others are fitted, by name, e.g.
        ``{"c": 4.0}``: the weak form is fitted in the others (it stays linear in them); their
        values are in ``theta_`` and their standard errors are 0.
    bounds : (array-like, array-like), default=None
        Lower and upper bounds on theta (scalars or one per parameter, ``±inf`` allowed),
        honoured by every solve on either path: bounded linear least squares (BVLS) in each
        IRLS step of the linear path, so its algorithm and bias correction stay the same.
    positive : bool or array-like of bool of shape (n_params,), default=False
        Keep these parameters non-negative, as a lower bound of 0 (the weak form is linear
        in theta, which a log scale would break).
    x0_bounds : (array-like, array-like), default=None
        Lower and upper bounds on the initial state (scalars or one per state, ``±inf``
        allowed), honoured by the shooting (a bounded trust region) and the smoothing
        (clipped).
    sigma : float or array-like of shape (n_states,), default=None
        Noise standard deviation of each state, read according to ``noise_kind``, in place
        of WENDy's estimate from the data (``sigma_`` then holds it). None: estimated.
    noise_kind : {"absolute", "relative_rms", "proportional", "lognormal"}, default="absolute"
        ``sigma`` in data units or as a fraction of each state's RMS; ``"lognormal"``: the
        weak form of ``log x`` is fitted (positive data with multiplicative noise; it stays
        linear in theta), ``sigma`` being the standard deviation of the logarithm.
        ``"proportional"`` (one level per value) raises a ValueError naming
        ``"lognormal"``: the residual covariance has one noise level per state.
    x0_method : {"shooting", "shooting_all", "smoothing"}, default="shooting"
        How the unknown components of ``x0_`` are obtained; WENDy itself does not estimate
        them. ``"shooting"``: least squares of the simulated trajectory against the data over
        ``x0`` with theta fixed, on a short window (four smallest test-function radii, at
        most 15 % of the series; a few batched forward solves). ``"shooting_all"``: the same,
        then refined over the whole series, which lets ``x0_`` absorb the phase drift a small
        theta error builds up and so predicts better over long series, at the cost of solves
        over the whole series. ``"smoothing"``: a local quadratic fit of the data near the
        first time (no solve; noisier).
    min_radius : float, default=None
        Smallest test-function radius, in time units. ``None`` selects it from the data:
        the smallest radius whose quadrature error (full vs half grid) cannot be told from
        the noise, and no smaller than the spacing of the 64 centres of the narrowest scale
        (see :func:`~sklode.wendy.select_min_radius`).
    n_scales : int, default=4
        Radii ``2^l min_radius`` for ``l < n_scales``.
    max_test_functions : int, default=128
        At most this many orthonormal test-function combinations (the strongest); the IRLS
        covariance is ``(K n_states)^2``, so the cost grows with its square. Raise it for
        spiking dynamics at low noise.
    covariance_regularization : float, default=1e-10
        The weight ``alpha`` of the identity in the residual covariance
        ``(1 - alpha) L L^T + alpha I`` (the paper's value; not scikit-learn's penalty
        ``alpha``).
    bias_correction : bool, default=True
        Correct the weak-form regression for the noise in its own regressors, to second
        order (models affine in theta; the nonlinear path ignores it): the features lose the
        mean the noise adds to them (``1/2 sum_l sigma_l^2 d^2 f/du_l^2``, e.g.
        ``3 sigma^2 u`` for ``u^3``) and each IRLS solve subtracts the mean of its score (the
        corrected score of errors-in-variables regression). Noisy regressors otherwise shrink
        the coefficients of nonlinear terms at high noise. Not in the paper; ``False`` is the
        paper's IRLS.
    method : {"irls", "likelihood"}, default="irls"
        ``"irls"``: the iteratively reweighted least squares, returning its most likely
        iterate. ``"likelihood"``: from that estimate, minimise the weak residual's Gaussian
        negative log-likelihood ``1/2 r^T C(theta)^-1 r + 1/2 log det C(theta)`` (its
        covariance's dependence on theta included, which the IRLS freezes) by a trust region
        with its exact gradient, minus the score's bias with ``bias_correction``;
        ``theta_cov_`` is then its inverse Hessian. Measured on 20 fresh draws per cell
        (``benchmarks/results/wendy.md``): closer to the output-error MLE at 20 % noise on
        FitzHugh-Nagumo (1.16x its RMS error against 1.24x) and on protein transduction
        (1.15-1.16x against 1.18-1.26x), further on the logistic at 20 % (1.16x against
        1.11x), equal elsewhere, at 2-14x the CPU; hence not the default. An optimum more than
        10 IRLS standard errors away (a degenerate covariance: Hindmarsh-Rose at 20 %) is
        refused in favour of the IRLS estimate, as ``stop_reason_`` says.
    tol : float, default=1e-6
        Stop the IRLS when the relative change of theta in one iteration is below ``tol``.
    max_iter : int, default=100
        Maximum number of IRLS iterations.
    n_boot : int, default=0
        Replicates of a parametric bootstrap (:mod:`sklode.diagnostics._bootstrap`): data simulated
        from the fit at the training times, with the noise level the data show, each
        refitted by this method from ``theta_``. Their covariance becomes ``theta_cov_``
        and their mean minus ``theta_`` is ``theta_bias_``. 0: no bootstrap.
        Each replicate costs about one fit with its shooting of ``x0`` (Brusselator, 401
        samples: 0.25 s, so 50 replicates 10-15 s).
    random_state : int, RandomState instance or None, default=None
        Seed of the bootstrap's noise.
    n_jobs : int, default=None
        joblib workers for the bootstrap's refits (``-1``: all cores); the result does not
        depend on it.
    integrator : str, default="auto"
        Forward solver of ``predict``/``simulate`` and of the shooting
        (:data:`sklode.integrate.INTEGRATORS`).
        ``"auto"`` (default): the model compiled to C and integrated by SUNDIALS' CVODES
        where a C compiler and SUNDIALS are found, LSODA otherwise
        (:func:`sklode.integrate.integrator_for`).
    rtol : float, default=1e-8
        Relative tolerance of ``predict``/``simulate``; the shooting integrates at
        ``max(rtol, 1e-4)``, since its answer is set by the noise, not by the integrator.
    atol : float, default=1e-10
        Absolute tolerance of ``predict``/``simulate``.
    verbose : int, default=0
        Log each IRLS iteration through the ``sklode`` logger.
    alpha : float, optional
        Deprecated name of ``covariance_regularization`` (warns; removed in sklode 0.3).

    Attributes
    ----------
    theta_ : ndarray of shape (n_params,)
        Estimated parameters, in ``model.param_names`` order.
    theta_cov_ : ndarray of shape (n_params, n_params)
        WENDy's covariance of ``theta_`` (generalised least squares of the weak residual,
        noise level inside), raised to the output-error Cramer-Rao bound at the fit along
        the directions where it is below it (``L max(L^-1 B L^-T, I) L^T``: WENDy's
        first-order covariance treats the noisy data in its regression as exact, and no
        unbiased estimator does better than the bound; Lotka-Volterra with 41 samples:
        coverage 84-88 % without it, 91-92 % with it), or with ``n_boot`` > 0 the bootstrap
        replicates' covariance;
        ``inf`` variance for parameters the data cannot pin down (see
        ``unidentifiable_``).
    theta_bias_ : ndarray of shape (n_params,) or None
        With ``n_boot`` > 0: the replicates' mean minus ``theta_``, WENDy's bias at this fit
        (:meth:`confidence_intervals` takes it out; above 1.5 standard errors it warns
        :class:`~sklode.exceptions.PoorFitWarning`). None without a bootstrap.
    output_error_offset_ : ndarray of shape (n_params,) or None
        How far ``theta_`` lies from the output-error optimum, per parameter in
        ``theta_stderr_``: one Gauss-Newton step of the output-error cost from the fit (0 for
        ``fixed`` parameters, NaN for unidentifiable ones). That optimum is nearly unbiased
        and at least as precise as WENDy, so beyond 1.5 WENDy's estimate is biased or far
        less precise than it and its intervals may undercover: the fit warns
        :class:`~sklode.exceptions.PoorFitWarning` (not with ``n_boot`` or bounds, nor on a
        fit already warned as poor). None where the forward solve at the fit failed.
    theta_stderr_ : ndarray of shape (n_params,)
        Square roots of the diagonal of ``theta_cov_``.
    sigma_ : ndarray of shape (n_states,)
        Noise standard deviation per state used by the fit: estimated (pooled over
        experiments, weighted by their numbers of samples) or the given ``sigma``; of
        ``log x`` for ``noise_kind="lognormal"``.
    theta_ols_ : ndarray of shape (n_params,)
        The ordinary least-squares start.
    x0_ : ndarray of shape (n_states,) or (n_experiments, n_states)
        Initial state at ``t0_`` (of each experiment), for ``predict``.
    x0_stderr_ : ndarray of shape (n_states,) or (n_experiments, n_states)
        Standard errors of ``x0_``: the shooting's given ``theta_`` plus ``theta_cov_``
        propagated through it (the delta method on the output-error Fisher information);
        zero for known components, NaN for ``x0_method="smoothing"``.
    unidentifiable_ : tuple of str
        The parameters and initial values the data cannot pin down, each with the
        combination the data do determine (``"x0[predator] and b separately (the data
        determine only x0[predator]*b)"``); empty when everything is identifiable. Warned
        as :class:`~sklode.exceptions.IdentifiabilityWarning`; the structurally
        unidentifiable ones have infinite standard errors.
    t0_ : float or ndarray of shape (n_experiments,)
        The first training time (of each experiment).
    n_iter_ : int
        IRLS iterations run (plus the trust region's with ``method="likelihood"``).
    converged_ : bool
        Whether the IRLS stopped by a rule (a fixed point, the Shapiro-Wilk test, or a stall:
        the weak-form likelihood no longer improving) rather than at ``max_iter``.
    fit_adequate_ : bool or None
        Whether the fit passed the adequacy check: the prediction's RMS residual is at most
        2.5 noise levels (estimated from the data) in every observed state; a failed check
        warns :class:`~sklode.exceptions.PoorFitWarning`. None when no experiment has 16
        complete samples to estimate its noise. Independent of ``converged_``.
    misfit_ratio_ : ndarray of shape (n_observed,) or None
        That RMS residual over the noise level, per observed state (near 1 for an adequate
        fit).
    stop_reason_ : str
        Why the IRLS stopped, and which iterate was returned, in words: always the one with
        the smallest weak-form negative log-likelihood, the OLS start included.
    solver_ : str
        Which path ran (linear or nonlinear IRLS, bias correction, bounds).
    n_test_functions_ : int
        Number of orthonormal test functions used (over every experiment).
    radii_ : list of float, or a list of them
        Test-function radii used (time units), per experiment when ``fit`` received several.
    observed_ : tuple of int
        Indices of the states ``Y``'s columns hold.
    n_features_in_ : int
        Always 1 (the time).

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
    >>> from sklode import WENDyODE
    >>> data = make_trajectory("wendy_lotka_volterra", noise=0.05, random_state=0)
    >>> est = WENDyODE(data.problem.model).fit(data.t, data.Y)
    >>> est.theta_.round(1)
    array([3., 1., 6., 1.])
    """

    _parameter_constraints = {
        **COMMON_CONSTRAINTS,
        "x0_method": [StrOptions({"shooting", "shooting_all", "smoothing"})],
        "min_radius": [Interval(Real, 0, None, closed="neither"), None],
        "n_scales": [Interval(Integral, 1, 8, closed="both")],
        "max_test_functions": [Interval(Integral, 1, None, closed="left")],
        "covariance_regularization": [Interval(Real, 0, 1, closed="both")],
        "alpha": [Interval(Real, 0, 1, closed="both"), Hidden(StrOptions({"deprecated"}))],
        "bias_correction": ["boolean"],
        "method": [StrOptions({"likelihood", "irls"})],
        **BOOTSTRAP_CONSTRAINTS,
    }

    def __init__(self, model=None, *, theta0=None, x0=None, t0=None, estimate_x0=True,
                 observed=None, fixed=None, bounds=None, positive=False, x0_bounds=None,
                 sigma=None, noise_kind="absolute",
                 x0_method="shooting",
                 min_radius=None, n_scales=4, max_test_functions=MAX_TEST_FUNCTIONS,
                 covariance_regularization=1e-10, bias_correction=True, method="irls",
                 tol=1e-6, max_iter=100, n_boot=0, random_state=None, n_jobs=None,
                 integrator="auto", rtol=1e-8, atol=1e-10, verbose=0, alpha="deprecated"):
        self.model = model
        self.theta0 = theta0
        self.x0 = x0
        self.t0 = t0
        self.estimate_x0 = estimate_x0
        self.observed = observed
        self.fixed = fixed
        self.bounds = bounds
        self.positive = positive
        self.x0_bounds = x0_bounds
        self.sigma = sigma
        self.noise_kind = noise_kind
        self.x0_method = x0_method
        self.min_radius = min_radius
        self.n_scales = n_scales
        self.max_test_functions = max_test_functions
        self.covariance_regularization = covariance_regularization
        self.alpha = alpha
        self.bias_correction = bias_correction
        self.method = method
        self.tol = tol
        self.max_iter = max_iter
        self.n_boot = n_boot
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.integrator = integrator
        self.rtol = rtol
        self.atol = atol
        self.verbose = verbose

    def _min_samples(self):
        return MIN_SAMPLES

    def _covariance_regularization(self):
        """``covariance_regularization``, or the deprecated ``alpha`` where it was given."""
        if isinstance(self.alpha, str):  # "deprecated": not given
            return self.covariance_regularization
        warn("WENDyODE(alpha=...) is now covariance_regularization=... (scikit-learn's "
             "alpha is a penalty; this is the identity's weight in the residual covariance); "
             "alpha goes in sklode 0.3.", FutureWarning)
        return self.alpha

    def _solve(self, given, *, start=None, verbose=0):
        """WENDy on validated data: the solver's result, theta and the initial states in the
        fitted states (``z0s``) and the model's (``x0s``). ``start``: a full theta to start
        from instead of ``theta0`` (the bootstrap's refits)."""
        name = type(self).__name__
        # the weak form needs no initial state: an earlier t0 (a dose before the first
        # sample) is reached by the shooting of x0
        split = DoseSplit(given, name, MIN_SAMPLES, node_at_t0=False)
        data = split.data
        if self.noise_kind == "proportional":
            raise ValueError(
                "WENDyODE's residual covariance has one noise level per state, so it cannot "
                "take noise proportional to each value; use noise_kind='lognormal' (the same "
                "multiplicative noise, fitted on the log scale) or 'relative_rms'.")
        model = self.model
        x0_bounds = check_bounds(self.x0_bounds, model.n_states, model.state_names,
                                 name="x0_bounds")
        transformed = None
        if self.noise_kind == "lognormal":  # the weak form of log x
            data, transformed, x0_bounds = on_state_scale(model, data, np.ones(model.n_states),
                                                          True, x0_bounds, estimator_name=name)
        grids = [complete_rows(e, k if data.several else None, name)
                 for k, e in enumerate(data.experiments)]
        ts, Us = [g[0] for g in grids], [g[1] for g in grids]
        fit_model, theta0, bounds = bounded_theta_problem(self, transformed, start)

        res = wendy_solve(fit_model, ts, Us, theta0,
                          linear=is_linear_on_data(fit_model, ts[0], Us[0]),
                          alpha=self._covariance_regularization(), tol=self.tol,
                          max_iter=self.max_iter,
                          min_radius=self.min_radius, n_scales=self.n_scales,
                          max_test_functions=self.max_test_functions, bounds=bounds,
                          bias_correction=self.bias_correction,
                          sigma=self._given_noise(Us),
                          method="mle" if self.method == "likelihood" else "irls",
                          verbose=verbose)
        theta = full_theta(fit_model, res.theta)
        shooting_model = model if transformed is None else transformed
        z0s = np.array([self._initial_state(shooting_model, e, tk, Uk, theta, sk, radii[0],
                                            x0_bounds)
                        for e, tk, Uk, sk, radii in zip(data.experiments, ts, Us, res.sigmas,
                                                         res.radii)])
        return _Solved(res=res, split=split, data=data, transformed=transformed,
                       fit_model=fit_model, theta=theta, z0s=z0s,
                       x0s=z0s if transformed is None else transformed.to_x(z0s))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, t, Y=None):
        """Estimate ``theta_`` and its covariance from observations ``Y`` at times ``t``.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1), or a list of them
            Observation times, any spacing (any order is accepted); a list or tuple means
            several experiments.
        Y : array-like of shape (n_samples, n_states), or a list of them
            Noisy observations of every state, one row per time; a time with a missing
            entry (NaN) leaves the grid.

        Returns
        -------
        self : WENDyODE
            The fitted estimator.
        """
        name = type(self).__name__
        require_state_data(check_model(self.model), None, self.noise_kind, name,
                           proportional=False)
        given = self._validate_data(t, Y)
        require_state_data(self.model, given, self.noise_kind, name, proportional=False)
        require_observed(given, name, "the weak form integrates every state's equation "
                         "against the data")
        solved = self._solve(given, verbose=self.verbose)
        res, split, data, transformed = solved.res, solved.split, solved.data, solved.transformed
        model, theta, z0s = self.model, solved.theta, solved.z0s
        shooting_model = model if transformed is None else transformed
        # theta_'s covariance is WENDy's own, raised where it is below the output-error
        # Cramer-Rao bound at WENDy's noise level; the initial values', the conditional one
        # given theta plus theta's propagated through them (smoothing gives none: NaN).
        fitted = fitted_mask(solved.fit_model, model.n_params)
        uncertainty = uncertainty_at_fit(
            shooting_model, data, theta, z0s, fitted=fitted, theta_cov=res.theta_cov,
            bound_sigma=self._bound_noise(shooting_model, data, theta, z0s, res.sigma,
                                          int(fitted.sum())),
            options=self._simulation_options())
        x0s = solved.x0s

        if not res.converged:
            warn_not_converged(self, res.n_iter, res.stop_reason,
                               f"Increase max_iter (now {self.max_iter}) or tol (now "
                               f"{self.tol}).")
        x0_stderr = None
        if self.x0_method == "smoothing":  # smoothing gives no first-order error
            x0_stderr = np.where(estimated_x0_mask(data), np.nan, 0.0)
        attributes, x0s = finish_fit(
            self, given=given, fitted_data=data, split=split, uncertainty=uncertainty,
            fitted=fitted, theta=theta, x0s=x0s, transformed=transformed, z0s=z0s,
            init="wendy", advice="Try x0_method='shooting_all' if the prediction drifts late "
            "in the series, or AdjointODE started from this theta_.",
            offset_limit=OUTPUT_ERROR_OFFSET,
            offset_meaning="The output-error optimum is nearly unbiased and at least as "
            "precise as WENDy, so WENDy's estimate is biased here or far less precise than "
            "that optimum; intervals centred on theta_ may then cover the truth less often "
            "than they claim.", x0_stderr=x0_stderr)
        several = given.several
        return self._set_fitted(
            **attributes, sigma_=res.sigma,
            theta_ols_=full_theta(solved.fit_model, res.theta_ols),
            n_iter_=res.n_iter, converged_=res.converged, stop_reason_=res.stop_reason,
            solver_=res.solver + (f", {given.n_experiments} experiments" if several else ""),
            n_test_functions_=res.n_test_functions,
            radii_=[list(r) for r in res.radii] if several else list(res.radii[0]))

    def _bound_noise(self, model, data, theta, x0s, sigma, n_fitted):
        """The noise level per state of the Cramer-Rao bound WENDy's covariance is raised to:
        the given ``sigma``, else the residuals of the forward solve at the fit unless they exceed
        ``POOR_FIT_RATIO`` times the model-free estimate (the bootstrap's rule,
        :func:`sklode.diagnostics._bootstrap.replicate_noise`). The model-free estimate alone errs
        by up to 40 % on 41 samples and left Lotka-Volterra at 10 % noise covering 86-92 %
        (0.91-0.94 with this rule); residuals alone overstate the noise where the forward
        solve drifts (Van der Pol at mu = 4: 98-100 %)."""
        if self.sigma is not None:
            return np.asarray(sigma, np.float64)
        n_x0 = int(estimated_x0_mask(data).sum())
        try:
            return replicate_noise(model, theta, data, x0s, sigma=None, noise_kind="absolute",
                                   n_unknowns=n_fitted + n_x0,
                                   options=self._simulation_options())[1]
        except IntegrationError:  # no forward solve: no bound from it either
            return None

    def _given_noise(self, Us):
        """``sigma`` per state in the fitted states, or None to estimate it."""
        if self.sigma is None:
            return None
        return sigma_per_state(self.sigma, self.noise_kind, np.vstack(Us), type(self).__name__)

    def _initial_state(self, model, experiment, t, U, theta, sigma, radius, x0_bounds):
        """``x0`` of one experiment: known components as given, the others by ``x0_method``
        from the smoothed data (or the given guess), within ``x0_bounds``."""
        free = experiment.estimate_x0
        smooth = smoothed_x0(t, U, radius)
        if x0_bounds is not None:
            smooth = np.clip(smooth, *x0_bounds)
        start = np.where(np.isfinite(experiment.x0), experiment.x0, smooth)
        if not free.any():
            return start
        if self.x0_method == "smoothing":
            return np.where(free, smooth, start)
        shoot = {"integrator": self.integrator, "rtol": max(self.rtol, SHOOT_RTOL),
                 "bounds": x0_bounds}
        n_win = shooting_window(t, U, smooth, sigma, radius)
        x0 = shoot_initial_state(model, theta, t[:n_win], U[:n_win], start, free=free,
                                 t0=experiment.t0, **shoot)
        if self.x0_method == "shooting_all" and n_win < t.size:
            # From the window's x0, which is near the right basin, over everything.
            x0 = shoot_initial_state(model, theta, t, U, x0, free=free, t0=experiment.t0,
                                     **shoot)
        return x0


def complete_rows(experiment, index, estimator_name):
    """The times and rows of ``experiment`` with every state observed.

    A time with a missing entry leaves the grid: the weak form integrates each equation
    against every state at every quadrature node, and its quadrature handles non-uniform
    grids, so the gap only widens a step.

    Parameters
    ----------
    experiment : Experiment
    index : int or None
        Its position among several experiments (None: the only one), for the message.
    estimator_name : str

    Returns
    -------
    t : ndarray of shape (n_kept,)
    U : ndarray of shape (n_kept, n_states)
    """
    keep = experiment.mask.all(axis=1)
    if keep.sum() < MIN_SAMPLES:
        where = "" if index is None else f" of experiment {index}"
        raise ValueError(
            f"{estimator_name} keeps only the times with every state observed, and Y{where} "
            f"has {int(keep.sum())} of them ({int((~keep).sum())} of {keep.size} times have a "
            f"missing entry); the weak form needs at least {MIN_SAMPLES}. Use BCDProxODE or "
            "AdjointODE, which fit data with missing values.")
    return experiment.t[keep], experiment.Y[keep]
