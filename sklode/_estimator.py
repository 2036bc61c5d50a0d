"""What every sklode estimator shares: the data path into ``fit``, ``predict``/``score``,
confidence intervals, tags, and the all-or-nothing setting of fitted attributes. No algorithm
lives here.

An estimator subclasses :class:`ODEEstimator` once (no deeper hierarchy), declares its
``_parameter_constraints``, an ``__init__`` that stores its arguments unchanged, and a ``fit``
that reads, in one screen:

1. **validate**: :meth:`~ODEEstimator._validate_data` turns ``(t, Y)`` and the common
   initial-state settings into an :class:`~sklode._validation.ExperimentData`;
2. **resolve**: the estimator's own settings become plain arrays and strings;
3. **solve**: the method's solver function (arrays in, a result dataclass out);
4. **store**: every fitted attribute handed to :meth:`~ODEEstimator._set_fitted` in one call.

Because step 4 happens only after the solver succeeded, a fit that raises leaves the
estimator exactly as it was (unfitted, or with the previous fit intact).
"""

from __future__ import annotations

import logging
from dataclasses import replace
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .outputerror._initial_state import SHOOT_RTOL, shoot_initial_state
from .observation._likelihood import NOISE_KINDS, data_neg_log_likelihood, information_criteria
from .diagnostics._uncertainty import warn_unidentifiable
from ._validation import (
    _is_experiment_list,
    as_float_array,
    bounds_with_positivity,
    by_name,
    check_experiments,
    check_fixed,
    check_positive,
    check_sample_weight,
    check_series,
    check_theta0,
    check_times,
    condition_map,
)
from .exceptions import ConvergenceWarning, PoorFitWarning, SklodeError, warn
from .integrate import INTEGRATORS, simulate
from .models import check_model
from .models._base import HeldParameters, ScaledStates

__all__ = ["COMMON_CONSTRAINTS", "ODEEstimator", "from_state_scale", "full_theta", "hold_fixed",
           "is_linear_on_data", "misfit_ratios", "on_state_scale", "release_fixed",
           "require_observed", "set_fitted", "sigma_per_state", "standard_errors",
           "warn_not_converged"]

logger = logging.getLogger("sklode")

#: A bootstrap bias beyond this many standard errors warns: intervals centred on theta_
#: would then cover the truth in 68 % of fits instead of 95 % (|b + Z| < 1.96 with
#: b = 1.5), so theta_ itself should not be read without the correction. Above the
#: bootstrap's own Monte Carlo error of the bias (1/sqrt(n_boot) standard errors: 0.14 at
#: 50 replicates) with room to spare.
BOOTSTRAP_BIAS = 1.5
#: A BCD-prox estimate further than this many standard errors from the output-error optimum
#: (one Gauss-Newton step from it) in some parameter warns: its intervals, the output-error
#: ones at its point, are then shifted by as much and cover about 83 % (|1 + Z| < 1.96).
#: Measured (benchmarks/coverage.py cells, 8 seeds each): 0.0-0.8 on Duffing, SIR,
#: FitzHugh-Nagumo and Van der Pol at 3 %, up to 1.0-1.2 on the Brusselator at 3 % and
#: Lotka-Volterra at 10 % (coverage 0.87-1.00 over 100 draws), 1.1-1.7 on enzyme kinetics at
#: 10 % (0.85-0.92), 1-2.7 on Van der Pol at mu = 4 and 10 % (0.61-0.99) and 2-6 on Rossler
#: at 3 % (0.09-0.68).
OUTPUT_ERROR_OFFSET = 1.0
#: The same check for WENDy, whose standard errors are its own (at or above the output-error
#: bound), so the step is measured in them. Unbiased, the step's spread is that of WENDy's
#: estimate minus the nearly efficient optimum's (Hausman): below 1 standard error, and a
#: step beyond 1.5 comes by chance in at most 13 % per parameter, only where WENDy is far
#: less precise than the optimum. Chosen on seeds 0-99 of benchmarks/coverage.py (100 draws
#: per cell): warned 0-8 of 100 fits on the calibrated cells, 27 on FitzHugh-Nagumo at 10 %
#: (c: mean z +0.9, coverage 0.84; the unwarned fits cover 0.93) and 8-31 on the
#: Brusselator (d: 0.88; unwarned 0.92-0.99); at 2.0, FitzHugh-Nagumo's unwarned stay at
#: 0.86. Checked on seeds 100-199 (results/coverage_heldout.md).
WENDY_OUTPUT_ERROR_OFFSET = 1.5

#: The parameters of the parametric bootstrap (BCD-prox and WENDy: ``_bootstrap_attributes``).
BOOTSTRAP_CONSTRAINTS = {
    "n_boot": [Interval(Integral, 0, None, closed="left")],
    "random_state": ["random_state"],
    "n_jobs": [Integral, None],
}

#: The declared types and ranges of the parameters every estimator shares (one vocabulary);
#: each estimator's ``_parameter_constraints`` starts from these.
COMMON_CONSTRAINTS = {
    "model": "no_validation",  # checked by check_model in fit, with messages about the model
    "theta0": ["array-like", None],
    "x0": ["array-like", None],
    "t0": [Real, "array-like", None],
    "estimate_x0": ["boolean", "array-like"],
    "observed": ["array-like", None],
    "fixed": [dict, None],
    "bounds": [tuple, list, None],
    "x0_bounds": [tuple, list, None],
    "sigma": [Interval(Real, 0, None, closed="neither"), "array-like", None],
    "noise_kind": [StrOptions(set(NOISE_KINDS)), dict],
    "positive": ["boolean", StrOptions({"log", "log10"}), "array-like"],
    "tol": [Interval(Real, 0, None, closed="neither")],
    "max_iter": [Interval(Integral, 1, None, closed="left")],
    "integrator": [StrOptions(set(INTEGRATORS) | {k.lower() for k in INTEGRATORS})],
    "rtol": [Interval(Real, 0, None, closed="neither")],
    "atol": [Interval(Real, 0, None, closed="neither")],
    "verbose": ["verbose"],
}


#: A fit whose prediction misses the data of an observed state by more than this many noise
#: levels (RMS of the residual over the noise estimated from the data) is called poor.
#: Measured on the papers' problems: adequate fits 0.6-1.8 (the estimator slightly
#: underestimates the noise of smooth oscillations); poor ones 3.1 (AdjointODE stuck on
#: FitzHugh-Nagumo, R^2 -0.01), 4.7 (BCD-prox on a 21-point yearly cycle, R^2 0.69 where the
#: optimum reaches 0.99), 10.8.
POOR_FIT_RATIO = 2.5
#: A BCD-prox or WENDy fit whose misfit ratio exceeds this (adequate fits measured 0.6-1.8,
#: most near 1) is checked by an AdjointODE polish as well (:mod:`sklode.diagnostics._adequacy`); so is
#: every fit on series too short for the ratio. The polish costs about one more fit.
POLISH_RATIO = 1.5
#: On a series too short to estimate its noise (fewer than 16 complete rows), a fit is called
#: poor when its trajectory explains less than this fraction of the data's variance. Measured
#: on the 14-day boarding-school outbreak: the good fits reach R^2 0.85 (AdjointODE) and 0.67
#: (BCD-prox on the yearly grid), the failed one 0.10 (BCD-prox with beta driven to 0).
POOR_FIT_R2 = 0.5
# The noise level is floored at this fraction of the state's RMS: on (nearly) noise-free data
# a misfit below 1 % of the signal is never called poor.
_NOISE_FLOOR = 0.01
# A poor-fit warning names an observation further from all the others of its state than
# their whole range: no sampled trajectory jumps that far in one value (a peak sampled by a
# single point can, and is then named with an "if"); a typo or a unit slip does.
_ISOLATION = 1.0


class ODEEstimator(RegressorMixin, BaseEstimator):
    """Behaviour common to the sklode estimators; never instantiated directly.

    Subclasses have the common parameters ``model``, ``theta0``, ``x0``, ``t0``,
    ``estimate_x0``, ``observed``, ``integrator``, ``rtol`` and ``atol``, and set in ``fit``,
    through :meth:`_set_fitted`, at least ``theta_``, ``theta_cov_``, ``theta_stderr_``,
    ``x0_``, ``x0_stderr_``, ``t0_``, ``n_iter_``, ``converged_``, ``stop_reason_`` and
    ``solver_``, plus what :meth:`_data_attributes` returns.
    """

    def __sklearn_tags__(self):
        """Tags: times as a 1-D X, several observed states as a 2-D y."""
        tags = super().__sklearn_tags__()
        tags.input_tags.one_d_array = True  # t may be (n,); (n, 1) stays accepted
        tags.target_tags.multi_output = True  # Y is (n, n_observed)
        tags.target_tags.single_output = True
        tags.regressor_tags.poor_score = True  # random regression data is no ODE trajectory
        return tags

    # ------------------------------------------------------------------ the data path
    def _min_samples(self):
        """Fewest time points per experiment the method accepts (subclasses may need more)."""
        return 2

    def _min_samples_each(self):
        """With several experiments, the fewest time points each (None: ``_min_samples``)."""
        return None

    def _validate_data(self, t, Y, warn_initial_time=True):
        """The model checked and ``(t, Y)`` with the initial-state settings, validated
        (``warn_initial_time``: False where the fit already said it).

        Returns
        -------
        ExperimentData
        """
        model = check_model(self.model)
        return check_experiments(
            t, Y, model=model, observed=self.observed, x0=self.x0, t0=self.t0,
            estimate_x0=self.estimate_x0, min_samples=self._min_samples(),
            estimator_name=type(self).__name__, warn_initial_time=warn_initial_time,
            min_samples_each=self._min_samples_each())

    def _initial_theta(self):
        """``theta0`` as a checked float64 vector inside ``bounds`` and ``positive``.

        A ``theta0`` the user gave outside them is refused (a start the method would have to
        move without saying so); the model's default guess (``theta0=None``) is moved into
        them, since the user chose only the bounds."""
        theta0 = check_theta0(self.theta0, self.model)
        limits = bounds_with_positivity(self.bounds, self.positive, self.model)
        if limits is None:
            return theta0
        lo, hi = limits
        held = set(self.fixed or ())
        free = np.array([name not in held for name in self.model.param_names])
        if self.theta0 is None:
            inside = np.clip(theta0, lo, hi)
            # a log-scale parameter cannot start at 0: half way into its interval instead
            at_zero = check_positive(self.positive, self.model.n_params) & (inside <= 0)
            return np.where(at_zero, np.minimum(1.0, hi / 2), inside)
        outside = free & ((theta0 < lo) | (theta0 > hi))
        if outside.any():
            k = int(np.flatnonzero(outside)[0])
            name = self.model.param_names[k]
            raise ValueError(
                f"theta0 starts {name}={theta0[k]:g} outside its allowed range "
                f"[{lo[k]:g}, {hi[k]:g}] (from bounds= and positive=). Start inside it (or "
                "leave theta0=None: the model's default guess is then moved into it), or "
                "widen the bounds.")
        return theta0

    def _bounded_theta_problem(self, model=None, start=None):
        """The model to fit, its start and bounds, for methods whose theta-steps are linear
        least squares (BCD-prox, WENDy): ``fixed`` held (:func:`hold_fixed`), ``positive``
        as a lower bound of 0. ``model``: the model in the fitted states (default: the
        estimator's); ``start``: a full theta to start from instead of ``theta0`` (the
        bootstrap's refits start at ``theta_``)."""
        return hold_fixed(self.model if model is None else model, self.fixed,
                          self._initial_theta() if start is None else start,
                          bounds_with_positivity(self.bounds, self.positive, self.model))

    @staticmethod
    def _data_attributes(data):
        """Fitted attributes that describe the training data (for :meth:`_set_fitted`)."""
        attributes = {"n_features_in_": 1, "observed_": data.observed, "_y_ndim": data.y_ndim,
                      "_n_experiments": data.n_experiments if data.several else 0,
                      "_fitted_experiments": [(e.doses, e.conditions)
                                              for e in data.experiments]}
        if data.feature_names is not None:
            attributes["feature_names_in_"] = data.feature_names
        return attributes

    def _set_fitted(self, **attributes):
        """Replace every fitted attribute at once (the previous fit's are all removed)."""
        return set_fitted(self, **attributes)

    def _assess_fit(self, data, theta, x0s, advice, polish_fitted=None):
        """Judge the fit against its own training data; warn when it is poor.

        Four checks: the misfit ratio against the noise estimated from the data (16 samples
        per experiment), or R^2 on shorter series; the runs test of the residuals' signs
        (:func:`sklode.diagnostics._adequacy.residual_runs`) and of their means at times several
        experiments share (:func:`sklode.diagnostics._adequacy.residual_time_means`): structure a correct
        model does not leave;
        and, for a fit that is not itself an output-error optimum (``polish_fitted``: the
        fitted-parameter mask of BCD-prox and WENDy), an AdjointODE polish from it
        (:func:`sklode.diagnostics._adequacy.polish_gap`) where the misfit ratio cannot judge or exceeds
        ``POLISH_RATIO``, the data are small enough and no bounds apply.

        Returns the fitted attributes ``fit_adequate_`` (None when nothing could judge),
        ``misfit_ratio_`` (per observed state, or None), ``residual_runs_z_`` and
        ``residual_time_means_`` (per observed state, or None; :mod:`sklode.diagnostics._adequacy`) and
        ``output_error_excess_`` (the polish statistic, or None).
        """
        from .diagnostics._adequacy import (RUNS_FRACTION, RUNS_Z, polish_gap, residual_runs,
                                residual_time_means, residuals)

        x0s = np.reshape(x0s, (-1, data.n_states))
        name = type(self).__name__
        options = self._simulation_options()
        ratios = misfit_ratios(self.model, theta, data, x0s, options)
        adequate = None if ratios is None else bool(np.all(ratios <= POOR_FIT_RATIO))
        if ratios is None:  # too few samples to estimate the noise: judge by R^2
            r2 = explained_variance(self.model, theta, data, x0s, options)
            if r2 < POOR_FIT_R2:
                outlier = isolated_extreme(data, self.model.observables)
                warn(
                    f"{name} fits its training data poorly: the fitted trajectory "
                    f"explains R^2 = {r2:.2f} of the observations' variance (below "
                    f"{POOR_FIT_R2:g}; the series is too short to estimate its noise). "
                    f"theta_ may be a local optimum or the method may not suit these data."
                    f"{outlier} {advice}", PoorFitWarning)
                adequate = False
        elif not adequate:
            outlier = isolated_extreme(data, self.model.observables)
            worst = int(np.argmax(ratios))
            state = self.model.observables[data.observed[worst]]
            if not np.isfinite(ratios[worst]):  # no prediction to measure: say so plainly
                miss = ("the ODE integrated from the fitted theta_ and x0_ cannot reach the "
                        "end of the data (it blows up or leaves its domain), so predict and "
                        "score will raise IntegrationError")
            else:
                miss = (f"the prediction misses {state!r} by {ratios[worst]:.3g} noise levels "
                        f"(RMS of the residual over the noise estimated from the data; an "
                        f"adequate fit is near 1, poor above {POOR_FIT_RATIO:g})")
            warn(
                f"{name} fits its training data poorly: {miss}. theta_ may be "
                f"a local optimum or the method may not suit these data.{outlier} {advice}",
                PoorFitWarning)
        attributes = {"misfit_ratio_": ratios, "residual_runs_z_": None,
                      "residual_time_means_": None, "output_error_excess_": None}
        if adequate is False:
            attributes["fit_adequate_"] = False
            return attributes

        fit_residuals = residuals(self.model, theta, data, x0s, options)  # one solve each
        runs = None if fit_residuals is None else residual_runs(fit_residuals)
        if runs is not None:
            z, fraction = runs
            attributes["residual_runs_z_"] = z
            flagged = (z < RUNS_Z) & (fraction < RUNS_FRACTION)
            if np.any(flagged):
                worst = int(np.nanargmin(np.where(flagged, z, np.nan)))
                state = self.model.observables[data.observed[worst]]
                warn(f"{name}: the residuals of {state!r} run in long same-sign stretches "
                     f"({100 * fraction[worst]:.0f} % of the sign changes independent noise "
                     f"gives, runs test z = {z[worst]:.1f}). The model misses a systematic "
                     "part of the data: it may be misspecified, or the fit follows the wrong "
                     "part of an oscillation. Compare predict() with the data.",
                     PoorFitWarning)
                adequate = False

        means = None if fit_residuals is None else residual_time_means(fit_residuals, data)
        if means is not None:
            statistic, threshold = means
            attributes["residual_time_means_"] = statistic
            flagged = np.flatnonzero(statistic > threshold)
            if flagged.size:
                worst = int(flagged[np.argmax(statistic[flagged] / threshold[flagged])])
                state = self.model.observables[data.observed[worst]]
                warn(f"{name}: the residuals of {state!r} miss the experiments the same way at "
                     f"the same times (time-means statistic {statistic[worst]:.0f}, where "
                     f"independent noise stays below {threshold[worst]:.0f}): the model's "
                     "shape does not follow the data (misspecified), or a shared parameter "
                     "differs between experiments (see MixedEffectsODE).", PoorFitWarning)
                adequate = False

        bounded = self._has_bounds()
        # the polish costs about one more fit: run it where the cheap checks cannot judge
        # (too few samples per experiment for the noise) or the fit is suspect
        suspect = ratios is None or np.max(ratios) > POLISH_RATIO
        if polish_fitted is not None and suspect and not bounded:
            gap = polish_gap(self.model, data, theta, x0s, polish_fitted,
                             sigma=getattr(self, "sigma", None),
                             noise_kind=getattr(self, "noise_kind", "absolute"),
                             positive=getattr(self, "positive", False), options=options)
            if gap is not None:
                attributes["output_error_excess_"] = gap["statistic"]
                if gap["statistic"] > gap["threshold"]:
                    excess = 100 * (gap["cost"] / gap["polished_cost"] - 1)
                    warn(f"{name}'s estimate is a second-best for the output error: an "
                         f"AdjointODE polish from this fit lowers the cost by {excess:.0f} % "
                         f"({gap['statistic']:.1f} residual variances, where the noise "
                         f"explains up to {gap['threshold']:.1f}), to theta "
                         f"{np.round(gap['theta'], 4).tolist()}. Fit AdjointODE(init="
                         f"{'bcdprox' if 'BCD' in name else 'wendy'!r}) for the output-error "
                         "optimum.", PoorFitWarning)
                    adequate = False
                elif adequate is None:
                    adequate = True
        attributes["fit_adequate_"] = adequate
        return attributes

    def _uncertainty_attributes(self, uncertainty, data, fitted, transformed=None, z0s=None):
        """``theta_cov_``, ``theta_stderr_``, ``x0_stderr_`` and ``unidentifiable_`` from a
        :class:`~sklode.diagnostics._uncertainty.FitUncertainty` (warning when the data cannot pin
        something down). ``transformed``/``z0s``: the fitted states' model and the initial
        states in them, when the fit ran in scaled states (standard errors are mapped back).
        """
        warn_unidentifiable(type(self).__name__, uncertainty.unidentifiable)
        cov, n_params = uncertainty.cov, self.model.n_params
        mask = np.array([e.estimate_x0 for e in data.experiments])
        n_x0 = int(mask.sum())
        theta_cov = np.zeros((n_params, n_params))  # held parameters: zero
        theta_cov[np.ix_(fitted, fitted)] = cov[n_x0:, n_x0:]
        x0_stderr = np.zeros(mask.shape)
        x0_stderr[mask] = standard_errors(cov[:n_x0, :n_x0])
        if transformed is not None:
            x0_stderr = from_state_scale(transformed, z0s, x0_stderr)[1]
        return {"theta_cov_": theta_cov, "theta_stderr_": standard_errors(theta_cov),
                "x0_stderr_": x0_stderr if data.several else x0_stderr[0],
                "unidentifiable_": uncertainty.unidentifiable}

    def _has_bounds(self):
        """Whether ``bounds`` or ``x0_bounds`` constrain the fit (a polish or a Gauss-Newton
        step from it could then leave them)."""
        return (getattr(self, "bounds", None) is not None
                or getattr(self, "x0_bounds", None) is not None)

    def _offset_attributes(self, uncertainty, fitted, adequate, *, limit, meaning):
        """``output_error_offset_``: how far the method's estimate lies from the output-error
        optimum, per parameter in ``theta_stderr_`` (the Gauss-Newton step of that cost from
        the fit, :attr:`FitUncertainty.step`; 0 for held parameters, NaN where it is not
        known); warns when it exceeds ``limit`` (the method's: ``OUTPUT_ERROR_OFFSET``,
        ``WENDY_OUTPUT_ERROR_OFFSET``) and the intervals are the ones at the fit (no
        bootstrap, no bounds that could stop the step), unless the fit was already called
        poor (``adequate`` False: that warning says more). ``meaning``: what the offset
        says of this method's intervals, a sentence of the warning."""
        n_params = self.model.n_params
        if uncertainty.step is None:
            return {"output_error_offset_": None}
        n_x0 = uncertainty.cov.shape[0] - int(np.sum(fitted))
        offset = np.zeros(n_params)
        with np.errstate(divide="ignore", invalid="ignore"):
            offset[fitted] = uncertainty.step[n_x0:] / np.sqrt(np.diag(uncertainty.cov)[n_x0:])
        offset[fitted] = np.where(np.isfinite(offset[fitted]), offset[fitted], np.nan)
        bounded = self._has_bounds()
        size = np.abs(offset)
        if (getattr(self, "n_boot", 0) == 0 and not bounded and adequate is not False
                and np.nanmax(size, initial=0.0) > limit):
            worst = int(np.nanargmax(size))
            warn(f"{type(self).__name__}'s estimate lies {size[worst]:.1f} standard errors "
                 f"from the output-error optimum in {self.model.param_names[worst]!r} (one "
                 "Gauss-Newton step of that cost from this fit: output_error_offset_). "
                 f"{meaning} n_boot=200 gives this method's own spread and bias; "
                 "AdjointODE(init=...) from this fit gives the optimum, whose intervals hold.",
                 PoorFitWarning)
        return {"output_error_offset_": offset}

    def _bootstrap_attributes(self, data, theta, x0s, fitted, attributes):
        """The parametric bootstrap's covariance in place of the Gauss-Newton one.

        With ``n_boot`` of 0 nothing changes (``theta_bias_`` is None). Otherwise
        ``n_boot`` replicates are simulated from the fit (:mod:`sklode.diagnostics._bootstrap`) and
        refitted by the method's ``_solve(replicate, start=theta)`` (its fit without the
        checks and the covariance: ``theta`` and ``x0s`` in the model's states, per
        experiment as split at the doses, mapped back by ``split.x0_back``); their
        covariance replaces
        ``theta_cov_``, ``theta_stderr_`` and ``x0_stderr_`` in ``attributes`` (a copy),
        except where the Gauss-Newton covariance found a structurally unidentifiable
        unknown (infinite variance: the replicates' spread would only reflect where the
        method stopped), and their mean minus ``theta`` is ``theta_bias_``. When fewer than
        half the replicates can be refitted, or the fit cannot be simulated, the
        Gauss-Newton covariance stays and a warning says why.
        """
        from .diagnostics._bootstrap import bootstrap_replicates, replicate_noise

        attributes = dict(attributes, theta_bias_=None)
        if not self.n_boot:
            return attributes
        name = type(self).__name__
        n_unknowns = int(fitted.sum()) + int(estimated_x0_mask(data).sum())
        try:
            means, sd = replicate_noise(self.model, theta, data, x0s, sigma=self.sigma,
                                        noise_kind=self.noise_kind, n_unknowns=n_unknowns,
                                        options=self._simulation_options())
        except SklodeError as exc:
            warn(f"{name} cannot bootstrap this fit: the ODE cannot be integrated from the "
                 f"fitted theta_ and x0_ over the data ({exc}). theta_cov_ is the "
                 "Gauss-Newton covariance.", ConvergenceWarning)
            return attributes
        def refit(replicate):  # the method again, from theta, on a simulated replicate
            solved = self._solve(replicate, start=theta)
            return solved.theta, solved.split.x0_back(solved.x0s)

        boot = bootstrap_replicates(refit, data, means, sd, n_boot=self.n_boot,
                                    noise_kind=self.noise_kind, random_state=self.random_state,
                                    n_jobs=self.n_jobs)
        succeeded = boot.theta.shape[0]
        if succeeded < max(2, self.n_boot / 2):
            warn(f"{name}: only {succeeded} of {self.n_boot} bootstrap replicates could be "
                 "refitted (the others failed to integrate or to converge), too few for a "
                 "covariance; theta_cov_ is the Gauss-Newton covariance.", ConvergenceWarning)
            return attributes
        n_params = theta.size
        cov = np.zeros((n_params, n_params))
        cov[np.ix_(fitted, fitted)] = boot.covariance()[np.ix_(fitted, fitted)]
        unidentifiable = ~np.isfinite(np.diag(attributes["theta_cov_"]))
        cov[unidentifiable, :] = np.nan
        cov[:, unidentifiable] = np.nan
        cov[unidentifiable, unidentifiable] = np.inf
        mask = np.array([e.estimate_x0 for e in data.experiments])
        x0_stderr = np.where(mask, boot.x0_stderr(), 0.0)
        # infinite: unidentifiable, as above; NaN (WENDy's smoothed x0 has no first-order
        # error) is replaced, since the replicates do measure its spread
        x0_stderr = np.where(np.isinf(np.reshape(attributes["x0_stderr_"], mask.shape)),
                             np.inf, x0_stderr)
        bias = np.where(fitted, boot.theta.mean(axis=0) - theta, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            shift = np.where(fitted, np.abs(bias) / standard_errors(cov), 0.0)
        if np.nanmax(shift, initial=0.0) > BOOTSTRAP_BIAS:
            worst = int(np.nanargmax(shift))
            warn(f"{name}'s estimate is biased at this fit: refits of data simulated from "
                 f"theta_ land {shift[worst]:.1f} standard errors from it in "
                 f"{self.model.param_names[worst]!r} (theta_bias_), so theta_ is likely as far "
                 "from the truth. confidence_intervals() centres on theta_ - theta_bias_; "
                 "AdjointODE(init=...) from this fit gives the output-error optimum, which has "
                 "no such bias.", PoorFitWarning)
        attributes.update(theta_cov_=cov, theta_stderr_=standard_errors(cov),
                          x0_stderr_=x0_stderr if data.several else x0_stderr[0],
                          theta_bias_=bias)
        return attributes

    # ------------------------------------------------------------------ prediction
    def _simulation_options(self):
        return {"integrator": self.integrator, "rtol": self.rtol, "atol": self.atol}

    def _experiment_starts(self, given):
        """``[(times, x0, t0, doses, theta), ...]`` of :class:`sklode.Experiment` objects: a
        fitted experiment's ``x0_``/``t0_`` when as many are given as were fitted, else each
        one's own complete ``x0``."""
        items = given if isinstance(given, list) else [given]
        data = check_experiments(items if isinstance(given, list) else given, None,
                                 model=self.model, observed=self.observed, x0=self.x0,
                                 t0=self.t0, estimate_x0=self.estimate_x0, min_samples=1,
                                 estimator_name=type(self).__name__, warn_initial_time=False)
        n_fitted = max(getattr(self, "_n_experiments", 0), 1)
        rows = np.reshape(self.x0_, (-1, self.model.n_states))
        t0s = np.reshape(self.t0_, -1)
        starts = []
        for k, e in enumerate(data.experiments):
            if len(items) == n_fitted:
                x0, t0 = rows[k], float(t0s[k])
            elif np.all(np.isfinite(e.x0)) and not e.estimate_x0.any():
                x0, t0 = experiment_start(self.model, e, self.theta_), e.t0
            else:
                raise ValueError(
                    f"{type(self).__name__} was fitted on {n_fitted} experiment(s) and "
                    f"received {len(items)}: a new experiment needs its whole initial state "
                    "known (Experiment(x0=...) with estimate_x0=False), or predict the fitted "
                    "ones, in order.")
            starts.append((e.t, x0, t0, e.doses, conditioned_theta(self.theta_, e.conditions,
                                                                   self.model)))
        return starts, isinstance(given, list)

    def _starts(self, t, x0, t0):
        """``[(times, x0, t0, doses, theta), ...]`` to integrate, and whether the answer is a
        list."""
        check_is_fitted(self)
        from .experiment import Experiment as Given

        if isinstance(t, Given) or (isinstance(t, (list, tuple)) and t
                                    and isinstance(t[0], Given)):
            if x0 is not None or t0 is not None:
                raise ValueError("An Experiment carries its own x0 and t0: do not pass x0= "
                                 "or t0= with it.")
            return self._experiment_starts(list(t) if isinstance(t, (list, tuple)) else t)
        starts, several = self._array_starts(t, x0, t0)
        if x0 is not None:  # a new experiment: no doses, no conditions
            return [(tk, xk, t0k, (), self.theta_) for tk, xk, t0k in starts], several
        # the fitted experiments, with the doses and conditions they were fitted with
        fitted = getattr(self, "_fitted_experiments", [((), None)] * len(starts))
        return [(tk, xk, t0k, doses, conditioned_theta(self.theta_, conditions, self.model))
                for (tk, xk, t0k), (doses, conditions) in zip(starts, fitted)], several

    def _array_starts(self, t, x0, t0):
        """``[(times, x0, t0), ...]`` to integrate from arrays, and whether the answer is a
        list."""
        n_experiments = getattr(self, "_n_experiments", 0)
        if x0 is not None:  # a new experiment with the fitted theta
            x0 = as_float_array(by_name(x0, self.model.state_names, "x0"), "x0",
                                example="numbers, one per state")
            if x0.shape != (self.model.n_states,) or not np.all(np.isfinite(x0)):
                raise ValueError(
                    f"x0 of a new experiment must be {self.model.n_states} finite numbers, "
                    f"one per state {self.model.state_names}; got {x0.tolist()}.")
            times = check_times(t)
            if t0 is None:
                return [(times, x0, float(np.min(times)))], False
            t0 = as_float_array(t0, "t0", example="time")
            if t0.size != 1 or not np.isfinite(t0).all():
                raise ValueError(f"t0 of a new experiment must be one finite time; got "
                                 f"{t0.tolist()}.")
            return [(times, x0, float(t0.reshape(-1)[0]))], False
        if t0 is not None:
            raise ValueError("t0 is the time of a new experiment's x0: pass x0 with it.")
        if _is_experiment_list(t):
            if len(t) != max(n_experiments, 1):
                raise ValueError(
                    f"{type(self).__name__} was fitted on {max(n_experiments, 1)} "
                    f"experiment(s) but received {len(t)} time vectors: pass one per fitted "
                    "experiment, or x0= (and t0=) to predict a new one.")
            x0s = np.reshape(self.x0_, (-1, self.model.n_states))
            t0s = np.reshape(self.t0_, -1)
            return [(check_times(tk), x0s[k], float(t0s[k])) for k, tk in enumerate(t)], True
        if n_experiments:
            raise ValueError(
                f"{type(self).__name__} was fitted on {n_experiments} experiments, each with "
                "its own initial state: pass a list of time vectors (one per experiment), or "
                "x0= (and t0=) to predict a new experiment.")
        return [(check_times(t), self.x0_, self.t0_)], False

    def simulate(self, t, x0=None, t0=None):
        """All states (observed or not) at times ``t``, integrated from ``(t0_, x0_)``.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1), or a list of them
            Any order, repeats allowed; times before the initial time are integrated
            backwards. A list (one time vector per fitted experiment) when ``fit``
            received several experiments.
        x0 : array-like of shape (n_states,) or dict, optional
            The initial state of a new experiment, simulated with the fitted ``theta_``
            (a dict: by state name, every one of them).
        t0 : float, optional
            Time of ``x0`` (default: the earliest of ``t``).

        Returns
        -------
        X : ndarray of shape (n_samples, n_states), or a list of them
            The states at ``t``, in the order given.
        """
        starts, several = self._starts(t, x0, t0)
        out = [simulate(self.model, theta, xk, tk, t0=t0k, doses=doses,
                        **self._simulation_options())
               for tk, xk, t0k, doses, theta in starts]
        return out if several else out[0]

    def predict(self, t, x0=None, t0=None):
        """Observed states at times ``t``, integrating the fitted ODE from ``(t0_, x0_)``.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1), or a list of them
            Any order, repeats allowed; times before the initial time are integrated
            backwards. A list (one time vector per fitted experiment) when ``fit``
            received several experiments.
        x0 : array-like of shape (n_states,), optional
            The initial state of a new experiment, predicted with the fitted ``theta_``.
        t0 : float, optional
            Time of ``x0`` (default: the earliest of ``t``).

        Returns
        -------
        Y_pred : ndarray of shape (n_samples, n_observed), or a list of them
            A vector of shape (n_samples,) if ``fit`` received a vector ``Y``.
        """
        starts, several = self._starts(t, x0, t0)
        columns = list(self.observed_)
        out = []
        for tk, xk, t0k, doses, theta in starts:
            Xk = simulate(self.model, theta, xk, tk, t0=t0k, doses=doses,
                          **self._simulation_options())
            Yk = self.model.observe_values(np.reshape(tk, -1), Xk, theta)[:, columns]
            out.append(Yk[:, 0] if self._y_ndim == 1 else Yk)
        return out if several else out[0]

    def score(self, t, Y=None, sample_weight=None):
        """R² of the fitted ODE over the observed (non-missing) entries of ``Y``.

        One series (not a list) is scored as :meth:`predict` sees it: integrated from the
        fitted ``(t0_, x0_)``, so a later time window scores a forecast. A list means
        experiments, which may be new ones (a held-out fold of a cross-validation over
        experiments) whose initial states the fit never saw: the estimated components of
        each one's initial state are fitted to its own observations with ``theta_`` held
        (least-squares shooting from the fitted ``x0_``; known components come from
        ``x0``), and the prediction from there is scored. Each observed state's R² is
        computed on its non-missing entries (over every experiment for lists), then the
        states are averaged, as scikit-learn's ``r2_score`` does for several outputs.

        Parameters
        ----------
        t : array-like of shape (n_samples,), or a list of them
            Times, as for :meth:`fit`.
        Y : array-like of shape (n_samples, n_observed), or a list of them
            Observations, NaN where missing.
        sample_weight : array-like of shape (n_samples,), optional
            Weights of the samples (one series only).

        Returns
        -------
        float
            The mean R² over the observed states.
        """
        check_is_fitted(self)
        from .experiment import Experiment as Given

        if isinstance(t, Given) or (isinstance(t, (list, tuple)) and t
                                    and isinstance(t[0], Given)):
            if sample_weight is not None:
                raise ValueError("sample_weight is supported for one series only.")
            Y_true, Y_pred = self._experiment_predictions(t)
            return float(np.mean(r2_by_state(Y_true, Y_pred)))
        if _is_experiment_list(t):
            if sample_weight is not None:
                raise ValueError("sample_weight is supported for one series only.")
            data = self._scoring_data(t, Y)
            columns = list(data.observed)
            Y_true = np.vstack([e.Y for e in data.experiments])
            Y_pred = np.vstack([
                simulate(self.model, self.theta_, x0, e.t, t0=e.t0,
                         **self._simulation_options())[:, columns]
                for x0, e in zip(self._refitted_initial_states(data), data.experiments)])
        else:
            observed = list(self.observed_)
            times, Y_true, _ = check_series(
                t, Y, n_observed=len(observed), estimator_name=type(self).__name__,
                observed_names=[self.model.state_names[i] for i in observed],
                state_names=self.model.state_names)
            Y_pred = np.reshape(self.predict(times), (len(times), -1))
        weights = None if sample_weight is None else check_sample_weight(sample_weight,
                                                                          len(Y_true))
        return float(np.mean(r2_by_state(Y_true, Y_pred, weights)))

    def _experiment_predictions(self, given):
        """``(Y_true, Y_pred)`` stacked over :class:`sklode.Experiment` objects: the fitted
        ones from their ``x0_``, new ones from their known initial states, or, without
        observables and doses, with the estimated components refitted to their data."""
        items = list(given) if isinstance(given, (list, tuple)) else [given]
        data = self._scoring_data(items if isinstance(given, (list, tuple)) else given, None)
        n_fitted = max(getattr(self, "_n_experiments", 0), 1)
        rows = np.reshape(self.x0_, (-1, self.model.n_states))
        if len(items) == n_fitted:
            x0s = rows
        elif all(np.all(np.isfinite(e.x0)) and not e.estimate_x0.any()
                 for e in data.experiments):
            x0s = [e.x0 for e in data.experiments]
        elif not self.model.has_observation_model and not any(
                e.doses or e.conditions for e in data.experiments):
            x0s = self._refitted_initial_states(data)
        else:
            raise ValueError(
                f"{type(self).__name__} scores new experiments from their known initial "
                "states when they have observables, doses or conditions: give them "
                "Experiment(x0=...) with estimate_x0=False, or score the fitted experiments "
                "in order.")
        columns = list(data.observed)
        Y_pred = np.vstack([
            predicted_observables(self.model, self.theta_, e, x0, e.t,
                                  self._simulation_options())[:, columns]
            for e, x0 in zip(data.experiments, x0s)])
        return np.vstack([e.Y for e in data.experiments]), Y_pred

    def _scoring_data(self, t, Y):
        """``(t, Y)`` validated with the estimator's initial-state settings; per-experiment
        ``x0``/``t0`` settings apply only when as many experiments are scored as fitted."""
        n_given = len(t) if isinstance(t, (list, tuple)) else 1
        x0, t0 = self.x0, self.t0
        if x0 is not None and np.ndim(x0) == 2 and np.shape(x0)[0] != n_given:
            if not np.all(np.asarray(self.estimate_x0)):
                raise ValueError(
                    f"{type(self).__name__} was given known initial states for "
                    f"{np.shape(x0)[0]} experiments but is scored on {n_given}: per-experiment "
                    "values cannot follow a split of the experiments. Score each experiment "
                    "with its own estimator, or estimate those components.")
            x0 = None  # only guesses: the fitted x0_ starts the shooting instead
        if t0 is not None and np.ndim(t0) == 1 and np.size(t0) not in (1, n_given):
            raise ValueError(
                f"{type(self).__name__} was given t0 for {np.size(t0)} experiments but is "
                f"scored on {n_given}: per-experiment times cannot follow a split of the "
                "experiments. Use one t0 for all, or None (each experiment's first time).")
        return check_experiments(t, Y, model=self.model, observed=self.observed, x0=x0,
                                 t0=t0, estimate_x0=self.estimate_x0, min_samples=1,
                                 estimator_name=type(self).__name__, warn_initial_time=False)

    def _refitted_initial_states(self, data):
        """Each experiment's initial state: known components as validated, estimated ones
        shot from the fitted ``x0_`` (its row for the same experiment count, else the mean
        row) with the data's first observation where it is at ``t0``."""
        fitted_rows = np.reshape(self.x0_, (-1, self.model.n_states))
        same = fitted_rows.shape[0] == data.n_experiments
        states = []
        for k, experiment in enumerate(data.experiments):
            free = experiment.estimate_x0
            start = np.where(free, fitted_rows[k] if same else fitted_rows.mean(axis=0),
                             experiment.x0)
            if not same and experiment.t0 == experiment.t[0]:
                for column, state in enumerate(data.observed):
                    if free[state] and experiment.mask[0, column]:
                        start[state] = experiment.Y[0, column]
            x0 = shoot_initial_state(
                self.model, self.theta_, experiment.t, experiment.Y, start, free=free,
                observed=data.observed, t0=experiment.t0, integrator=self.integrator,
                rtol=max(self.rtol, SHOOT_RTOL))
            states.append(x0)
        return states

    def confidence_intervals(self, level=0.95):
        """Normal-approximation confidence intervals for ``theta_``.

        ``theta_ ± z theta_stderr_`` with ``z`` the two-sided normal quantile of ``level``;
        a fixed or unidentified parameter has a zero or NaN width, as its standard error.
        After a bootstrap (``n_boot`` > 0) the centre is ``theta_ - theta_bias_``: the
        method's bias measured on data simulated from its own fit, taken out (the basic
        bootstrap interval in its normal form).

        Parameters
        ----------
        level : float, default=0.95
            Coverage, strictly between 0 and 1.

        Returns
        -------
        intervals : ndarray of shape (n_params, 2)
            Lower and upper ends, in ``model.param_names`` order.
        """
        from scipy.stats import norm

        check_is_fitted(self)
        if not 0.0 < float(level) < 1.0:
            raise ValueError(f"level must be strictly between 0 and 1, got {level!r}.")
        z = norm.ppf(0.5 + float(level) / 2.0)
        centre = self.theta_
        bias = getattr(self, "theta_bias_", None)
        if bias is not None:  # the bootstrap measured the method's bias: take it out
            centre = centre - bias
        return np.column_stack([centre - z * self.theta_stderr_,
                                centre + z * self.theta_stderr_])


def set_fitted(estimator, **attributes):
    """Replace every fitted attribute of ``estimator`` at once: the previous fit's (names
    ending in ``_``) are all removed, then these set. Called only after a fit succeeded, so
    a fit that raises leaves the estimator as it was.

    Returns
    -------
    estimator
    """
    for key in [k for k in vars(estimator) if k.endswith("_") and not k.startswith("__")]:
        delattr(estimator, key)
    for key, value in attributes.items():
        setattr(estimator, key, value)
    return estimator


def conditioned_theta(theta, conditions, model):
    """An experiment's parameters: its ``conditions`` applied to the shared ``theta``.

    Parameters
    ----------
    theta : ndarray of shape (n_params,)
    conditions : dict or None
        A validated experiment's conditions (:mod:`sklode._validation`).
    model : ODEModel

    Returns
    -------
    ndarray of shape (n_params,)
    """
    mapping = condition_map(conditions, model)
    theta = np.asarray(theta, dtype=np.float64)
    return theta if mapping is None else mapping[0] @ theta + mapping[1]


def experiment_start(model, experiment, theta):
    """A validated experiment's initial state: its ``x0``, plus the model's initial offsets
    at its parameters where its initial values depend on them
    (:meth:`~sklode.ODEModel.initial_offsets`, a PEtab import).

    Parameters
    ----------
    model : ODEModel
    experiment : validated experiment (:mod:`sklode._validation`)
    theta : ndarray of shape (n_params,)
        The shared parameters (the experiment's conditions are applied here).

    Returns
    -------
    ndarray of shape (n_states,)
    """
    offsets = model.initial_offsets(conditioned_theta(theta, experiment.conditions, model))
    return experiment.x0 if offsets is None else experiment.x0 + offsets


def states_at_observations(model, theta, data, x0s, options):
    """Each experiment's states at its observation times and its parameters.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : array-like of shape (n_experiments, n_states)
    options : dict
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    states : list of ndarray of shape (n_times, n_states)
    thetas : list of ndarray of shape (n_params,)
    """
    x0s = np.reshape(x0s, (-1, data.n_states))
    thetas = [conditioned_theta(theta, e.conditions, model) for e in data.experiments]
    states = [simulate(model, th, x0, e.t, t0=e.t0, doses=e.doses, **options)
              for e, x0, th in zip(data.experiments, x0s, thetas)]
    return states, thetas


def likelihood_attributes(model, theta, data, x0s, options, *, sigma, noise_kind, n_fitted):
    """``neg_log_likelihood_``, ``aic_`` and ``bic_`` of a fit on its training data.

    ``-log L`` follows PEtab's convention (every constant); with no known noise level
    (``sigma=None`` and no ``noise_sd``) one scale per observable is the maximum-likelihood
    one at the fit and counts as an estimated parameter.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : array-like of shape (n_experiments, n_states)
    options : dict
    sigma : float, array-like or None
    noise_kind : str or dict
    n_fitted : int
        Estimated parameters and initial values.

    Returns
    -------
    dict
    """
    try:
        states, thetas = states_at_observations(model, theta, data, x0s, options)
        nll, n_profiled = data_neg_log_likelihood(model, data.experiments, data.observed,
                                                  states, thetas, sigma, noise_kind)
    except SklodeError:
        nll, n_profiled = np.inf, 0
    n_values = sum(int(e.mask.sum()) for e in data.experiments)
    aic, bic = information_criteria(nll, n_fitted + n_profiled, n_values)
    return {"neg_log_likelihood_": nll, "aic_": aic, "bic_": bic}


#: The noise kinds the methods on the data grid (BCD-prox, WENDy) take: one weight per state.
STATE_NOISE_KINDS = ("absolute", "relative_rms", "proportional", "lognormal")


def require_state_data(model, data, noise_kind, estimator_name, proportional=True):
    """Refuse, naming AdjointODE, what only a forward-solver likelihood can fit: observables
    other than the states, a modelled noise, per-experiment parameter values, per-observable
    or Laplace/log10 error kinds (BCD-prox's fidelity and WENDy's weak form are written in
    the states, with one noise level per state).

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData or None
        None: check the model and the settings only (before the data are validated).
    noise_kind : str or dict
    estimator_name : str
    proportional : bool, default=True
        Whether the method takes ``noise_kind="proportional"`` (when not, it is left to the
        method's own message and not listed here).
    """
    way = "Use AdjointODE, which fits"
    if model.has_observation_model:
        raise ValueError(
            f"{estimator_name} fits the states themselves (its cost is written in x), but "
            f"{type(model).__name__} reads its data through observe() as "
            f"{model.observables}. {way} any observable through its sensitivities.")
    if model.has_noise_model:
        raise ValueError(
            f"{estimator_name} takes the noise level from sigma/noise_kind (or its own "
            f"estimate), not from a model's noise_sd. {way} noise parameters by maximum "
            "likelihood.")
    allowed = [k for k in STATE_NOISE_KINDS if proportional or k != "proportional"]
    if noise_kind == "proportional" and not proportional:
        pass  # the method's own message names the multiplicative kind it takes
    elif isinstance(noise_kind, dict) or noise_kind not in allowed:
        raise ValueError(
            f"{estimator_name} takes one noise kind for all states, one of {allowed}; got "
            f"noise_kind={noise_kind!r}. {way} per-observable, 'laplace' and 'log10normal' "
            "errors.")
    for k, e in enumerate(data.experiments if data is not None else ()):
        if e.conditions:
            where = f" {e.name!r}" if e.name is not None else f" {k}"
            raise ValueError(
                f"Experiment{where} sets parameters through conditions={e.conditions}, but "
                f"{estimator_name} fits one parameter vector for all experiments. {way} "
                "per-experiment conditions (or fit each condition separately).")


class DoseSplit:
    """Experiments with doses as the methods on the data grid (BCD-prox, WENDy) can take them.

    A dose at ``t0`` is added to the initial state (a known component) or to its estimate
    (reported back before the dose); the data after a later dose become a piece of their
    own, a new experiment whose initial state at its first sample is estimated (the dose's
    size then carries no information to these methods, but nothing is fitted across it).
    Each piece keeps the original experiment's guesses for its hidden states.

    Parameters
    ----------
    data : ExperimentData
    estimator_name : str
    min_samples : int
        Fewest samples a piece needs.
    node_at_t0 : bool
        Add an unobserved row at ``t0`` when it is before the first sample (BCD-prox's grid
        starts at the initial state).
    """

    def __init__(self, data, estimator_name, min_samples, node_at_t0):
        self.original = data
        pieces, self.first, self.folded = [], [], []
        self.node = [0] * data.n_experiments  # unobserved rows added before the first sample
        for k, e in enumerate(data.experiments):
            at_t0 = np.zeros(data.n_states)
            cuts = []
            for time, state, amount in e.doses:
                if time == e.t0:
                    at_t0[state] += amount
                elif time < e.t[-1]:
                    cuts.append(time)
            self.folded.append(at_t0)
            x0 = np.where(np.isfinite(e.x0), e.x0 + at_t0, np.nan)
            edges = [-np.inf] + sorted(set(cuts)) + [np.inf]
            self.first.append(len(pieces))
            for j, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
                rows = (e.t > lo) & (e.t <= hi)
                if j == 0:
                    piece = replace(e.at_rows(rows), x0=x0, doses=())
                    if node_at_t0 and e.t0 < piece.t[0]:
                        # one unobserved node at t0: its state is held where known (a dose
                        # into an empty compartment); estimated components are shot back
                        # from the first sample afterwards (shoot_back). Measured on LV with
                        # t0 half a time unit early: more nodes one sampling step apart left
                        # them near their start and biased theta by 10-18 %; one node did not.
                        n_new = 1
                        nodes = np.array([e.t0])
                        n_obs = piece.Y.shape[1]
                        empty = np.full((n_new, n_obs), np.nan)
                        piece = replace(piece, t=np.r_[nodes, piece.t],
                                        Y=np.vstack([empty, piece.Y]),
                                        mask=np.vstack([np.zeros((n_new, n_obs), bool),
                                                        piece.mask]),
                                        sigma=None if piece.sigma is None else np.vstack(
                                            [empty, piece.sigma]))
                        self.node[k] = n_new
                else:
                    piece = replace(e.at_rows(rows),
                                    t0=float(e.t[rows][0]) if rows.any() else lo,
                                    x0=np.where(np.isfinite(e.x0), e.x0, np.nan),
                                    estimate_x0=np.ones(data.n_states, dtype=bool), doses=())
                if int(rows.sum()) < min_samples:
                    where = f" {e.name!r}" if e.name is not None else f" {k}"
                    span = ("before its first dose after t0" if j == 0 else
                            f"after its dose at t={lo:g}")
                    raise ValueError(
                        f"{estimator_name} fits the data between doses as separate pieces, and "
                        f"experiment{where} has {int(rows.sum())} sample(s) {span}; it needs "
                        f"at least {min_samples}. Use AdjointODE, which integrates through "
                        "the doses.")
                pieces.append(piece)
        self.split = len(pieces) > data.n_experiments
        self.data = replace(data, experiments=tuple(pieces),
                            several=data.several or self.split)

    def shoot_back(self, model, theta, states, options):
        """Each piece's filtered states with the estimated components at an added ``t0`` node
        replaced by the fitted ODE integrated back from the first sample (the node has no
        data, so the filter leaves it near its start; the dynamics from the first filtered
        sample say where it was)."""
        out = list(states)
        for k, i in enumerate(self.first):
            if not self.node[k]:
                continue
            e = self.data.experiments[i]
            free = e.estimate_x0
            if not free.any():
                continue
            X = np.array(out[i], dtype=np.float64)
            back = simulate(model, theta, X[1], [e.t[0]], t0=float(e.t[1]), **options)[0]
            X[0] = np.where(free, back, X[0])
            out[i] = X
        return out

    def x0_back(self, rows):
        """The original experiments' initial states from the pieces' (before the doses at
        ``t0``)."""
        rows = np.reshape(rows, (-1, self.original.n_states))
        return np.array([rows[i] - self.folded[k] for k, i in enumerate(self.first)])

    def rows_back(self, rows):
        """Per-piece rows (standard errors) as the original experiments' first pieces'."""
        rows = np.reshape(rows, (-1, self.original.n_states))
        out = np.array([rows[i] for i in self.first])
        return out if self.original.several else out[0]

    def states_back(self, states):
        """Per-piece arrays at the sampling times joined into one per original experiment
        (the rows added before the first sample left out)."""
        out = []
        bounds = self.first + [len(states)]
        for k in range(self.original.n_experiments):
            parts = list(states[bounds[k]:bounds[k + 1]])
            parts[0] = parts[0][self.node[k]:]
            out.append(np.vstack(parts))
        return out


def require_observed(data, estimator_name, why):
    """Raise a ValueError when some state is never observed and the method needs them all.

    Parameters
    ----------
    data : ExperimentData
    estimator_name : str
    why : str
        Why the method needs every state, for the message.
    """
    if data.hidden:
        raise ValueError(
            f"{estimator_name} needs every state observed ({why}), but observed="
            f"{data.observed} leaves states {data.hidden} hidden. Use AdjointODE or "
            "BCDProxODE, which fit hidden states, or observe every state.")


def predicted_observables(model, theta, experiment, x0, t, options):
    """All the model's observables at times ``t`` of an experiment (its doses and conditions
    applied), integrated from its ``x0`` at its ``t0``.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    experiment : Experiment
    x0 : ndarray of shape (n_states,)
    t : ndarray of shape (n_times,)
    options : dict

    Returns
    -------
    ndarray of shape (n_times, n_observables)
    """
    theta = conditioned_theta(theta, experiment.conditions, model)
    X = simulate(model, theta, x0, t, t0=experiment.t0, doses=experiment.doses, **options)
    return model.observe_values(t, X, theta)


def explained_variance(model, theta, data, x0s, options):
    """R² of the prediction over the observed entries, per observed state pooled over the
    experiments, then averaged over the states (``-inf`` if it cannot be integrated).

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : ndarray of shape (n_experiments, n_states)
    options : dict
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    float
    """
    columns = list(data.observed)
    truth, predicted = [], []
    for x0, e in zip(x0s, data.experiments):
        try:
            with np.errstate(all="ignore"):
                P = predicted_observables(model, theta, e, x0, e.t, options)[:, columns]
        except SklodeError:
            return -np.inf
        truth.append(np.where(e.mask, e.Y, np.nan))
        predicted.append(P)
    Y, P = np.vstack(truth), np.vstack(predicted)
    # a constant column has no variance to explain
    varying = [np.ptp(Y[np.isfinite(Y[:, k]), k]) > 0 for k in range(len(columns))]
    if not any(varying):
        return np.inf
    return float(np.mean(r2_by_state(Y[:, varying], P[:, varying])))


def isolated_extreme(data, state_names):
    """A sentence naming an observation that lies beyond all the others of its state by more
    than their whole range, or an empty string. A typo or a unit error in one value drags
    every method's fit (one prey count of 1e4 among 82 values of about 5 moved BCD-prox's a
    from 2 to 1,473), and the fit's residuals then point elsewhere; the data alone show it.

    Parameters
    ----------
    data : ExperimentData
    state_names : tuple of str
        The model's states.

    Returns
    -------
    str
    """
    for j, state in enumerate(data.observed):
        values, where = [], []
        for k, e in enumerate(data.experiments):
            rows = np.flatnonzero(e.mask[:, j])
            values.append(e.Y[rows, j])
            where += [(k, e.t[i]) for i in rows]
        values = np.concatenate(values)
        if values.size < 3:
            continue
        order = np.argsort(values)
        for extreme, nearest, rest in ((order[-1], order[-2], values[order[:-1]]),
                                       (order[0], order[1], values[order[1:]])):
            spread = np.ptp(rest)
            if spread > 0 and abs(values[extreme] - values[nearest]) > _ISOLATION * spread:
                k, time = where[extreme]
                exp = f" of experiment {k}" if data.several else ""
                return (f" The value {values[extreme]:.6g} of {state_names[state]!r} at t = "
                        f"{time:g}{exp} lies far outside all its others ({rest.min():.4g} to "
                        f"{rest.max():.4g}): if it is a typo or a unit error, set it to NaN "
                        "(a missing value) and fit again.")
    return ""


def r2_by_state(Y_true, Y_pred, sample_weight=None):
    """scikit-learn's R² of each column over its observed (finite) entries.

    Parameters
    ----------
    Y_true : ndarray of shape (n_samples, n_observed)
        Observations, NaN where missing.
    Y_pred : ndarray of shape (n_samples, n_observed)
    sample_weight : ndarray of shape (n_samples,), optional

    Returns
    -------
    list of float
        One R² per column.
    """
    from sklearn.metrics import r2_score

    scores = []
    for column in range(Y_true.shape[1]):
        present = np.isfinite(Y_true[:, column])
        scores.append(r2_score(Y_true[present, column], Y_pred[present, column],
                               sample_weight=None if sample_weight is None
                               else sample_weight[present]))
    return scores


def misfit_ratios(model, theta, data, x0s, options):
    """RMS of each observed state's residual over its noise level, pooled over experiments.

    The prediction integrates the ODE from each experiment's ``x0`` at its ``t0``; the noise
    of each experiment is estimated from its complete rows by the model-free high-order
    difference filter (:func:`sklode.wendy.estimate_noise`, which needs 16 samples),
    floored at ``_NOISE_FLOOR`` of the state's RMS. A prediction that cannot be integrated
    counts as an infinite misfit.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : ndarray of shape (n_experiments, n_states)
    options : dict
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    ndarray of shape (n_observed,) or None
        None when no experiment has enough complete rows to estimate its noise.
    """
    from ._noise_level import MIN_SAMPLES, estimate_noise

    columns = list(data.observed)
    residual2 = np.zeros(len(columns))
    noise2 = np.zeros(len(columns))
    for x0, e in zip(x0s, data.experiments):
        complete = e.mask.all(axis=1)
        if complete.sum() < MIN_SAMPLES:
            continue
        t, Y = e.t[complete], e.Y[complete]
        try:
            with np.errstate(all="ignore"):
                P = predicted_observables(model, theta, e, x0, t, options)[:, columns]
        except SklodeError:
            return np.full(len(columns), np.inf)
        floor = _NOISE_FLOOR * np.sqrt(np.mean(Y**2, axis=0))
        residual2 += np.sum((Y - P) ** 2, axis=0)
        noise2 += t.size * np.maximum(estimate_noise(t, Y), floor) ** 2
    if not np.any(noise2 > 0):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(residual2 / noise2)


def on_state_scale(model, data, scale, log, x0_bounds=None, estimator_name="this estimator"):
    """The problem in the states of :class:`~sklode.models._base.ScaledStates`.

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData
    scale : ndarray of shape (n_states,)
        Positive scale of each state.
    log : bool
        Fit the logarithm of the states (log-normal noise): every observation and every
        given initial value must then be positive.
    x0_bounds : (ndarray, ndarray), optional
        Bounds on the initial state, in the original states.
    estimator_name : str, optional
        For messages.

    Returns
    -------
    data : ExperimentData
        Observations and initial states in the scaled states.
    transformed : ScaledStates
        The model in those states (``to_x`` maps results back).
    x0_bounds : (ndarray, ndarray) or None
        The bounds in those states.
    """
    transformed = ScaledStates(model, scale, log=log)
    columns = list(data.observed)
    experiments = []
    for k, e in enumerate(data.experiments):
        if log and (np.any(e.Y[e.mask] <= 0) or np.any(e.x0[np.isfinite(e.x0)] <= 0)):
            where = f" of experiment {k}" if data.several else ""
            raise ValueError(
                f"noise_kind='lognormal' makes {estimator_name} fit the logarithm of the "
                f"states, but Y{where} or x0 has values <= 0. Use noise_kind='absolute' or "
                "'relative_rms' for data that reach zero, or AdjointODE, whose log-normal "
                "likelihood needs only the observed values to be positive (a state starting "
                "at 0 is fine there).")
        rows = np.ones((e.Y.shape[0], model.n_states))  # placeholders off the observed
        rows[:, columns] = np.where(e.mask, e.Y, 1.0)
        Y = np.where(e.mask, transformed.to_z(rows)[:, columns], np.nan)
        experiments.append(replace(e, Y=Y, x0=transformed.to_z(e.x0)))
    if x0_bounds is not None:  # on the log scale a lower bound <= 0 bounds nothing
        lower = np.maximum(x0_bounds[0], 0.0) if log else x0_bounds[0]
        x0_bounds = (transformed.to_z(lower), transformed.to_z(x0_bounds[1]))
    return replace(data, experiments=tuple(experiments)), transformed, x0_bounds


def sigma_per_state(sigma, noise_kind, values, estimator_name):
    """``sigma`` as one absolute standard deviation per column of ``values`` (the observed
    states, on the scale they are fitted at; NaN where missing), for the methods with one
    noise level per state (BCD-prox, WENDy).

    Parameters
    ----------
    sigma : float or array-like
        One positive value, or one per column.
    noise_kind : str
        ``"relative_rms"`` multiplies by each column's RMS; the others take ``sigma`` as it
        is (``"lognormal"``: on the log scale ``values`` are in).
    values : ndarray of shape (n_samples, n_observed)
    estimator_name : str

    Returns
    -------
    ndarray of shape (n_observed,)
    """
    width = values.shape[1]
    given = np.asarray(sigma, dtype=np.float64)
    if given.size not in (1, width) or np.any(given <= 0):
        got = f"an array of shape {given.shape}" if given.size > width else repr(sigma)
        raise ValueError(f"{estimator_name} takes sigma as one positive value or one per "
                         f"observed state ({width}); got {got}. Use AdjointODE for one "
                         "standard deviation per observation.")
    per_state = np.broadcast_to(given.reshape(-1), (width,)).copy()
    if noise_kind == "relative_rms":
        per_state *= np.sqrt(np.nanmean(values**2, axis=0))
    return per_state


def from_state_scale(transformed, z0, z0_stderr):
    """Initial states and their standard errors back in the original states (the delta
    method: ``dx/dz`` is ``scale`` or ``scale x``).

    Parameters
    ----------
    transformed : ScaledStates
    z0, z0_stderr : ndarray of shape (..., n_states)

    Returns
    -------
    x0, x0_stderr : ndarray of shape (..., n_states)
    """
    x0 = transformed.to_x(z0)
    slope = np.asarray(transformed.scale) * (np.abs(x0) if transformed.log else 1.0)
    return x0, slope * np.asarray(z0_stderr)


def hold_fixed(model, fixed, theta0, bounds):
    """The problem with ``fixed`` parameters held: the model to fit, its start and bounds.

    Parameters
    ----------
    model : ODEModel
    fixed : dict or None
        Parameter name -> value.
    theta0 : ndarray of shape (n_params,)
    bounds : (ndarray, ndarray) or None
        Bounds on every parameter.

    Returns
    -------
    model : ODEModel
        ``model`` itself, or a :class:`~sklode.models._base.HeldParameters` of the others.
    theta0 : ndarray
        Start of the fitted parameters.
    bounds : (ndarray, ndarray) or None
        Their bounds.
    """
    fitted, theta0 = check_fixed(fixed, theta0, model)
    if fitted.all():
        return model, theta0, bounds
    held = HeldParameters(model, fitted, theta0)
    if bounds is not None:
        bounds = (bounds[0][fitted], bounds[1][fitted])
    return held, theta0[fitted], bounds


def release_fixed(model, theta, cov):
    """The whole parameter vector and its covariance (zero for held parameters).

    Parameters
    ----------
    model : ODEModel
        What :func:`hold_fixed` returned.
    theta : ndarray
        Fitted parameters.
    cov : ndarray
        Their covariance.

    Returns
    -------
    theta : ndarray of shape (n_params,)
    cov : ndarray of shape (n_params, n_params)
    """
    if not isinstance(model, HeldParameters):
        return theta, cov
    fitted = np.array(model.fitted)
    whole = np.zeros((fitted.size, fitted.size))
    whole[np.ix_(fitted, fitted)] = cov
    return full_theta(model, theta), whole


def fitted_mask(model, n_params):
    """Which of the ``n_params`` parameters ``model`` (what :func:`hold_fixed` returned)
    fits: all, or the ones a :class:`~sklode.models._base.HeldParameters` leaves free.

    Parameters
    ----------
    model : ODEModel
    n_params : int

    Returns
    -------
    ndarray of bool of shape (n_params,)
    """
    if isinstance(model, HeldParameters):
        return np.array(model.fitted)
    return np.ones(n_params, dtype=bool)


def full_theta(model, theta):
    """The whole parameter vector from the fitted ones (held values filled in).

    Parameters
    ----------
    model : ODEModel
        What :func:`hold_fixed` returned.
    theta : ndarray
        Fitted parameters.

    Returns
    -------
    ndarray of shape (n_params,)
    """
    return model.full(theta) if isinstance(model, HeldParameters) else theta


def initial_times(data):
    """``t0_``: the time of the initial state, one float, or one per experiment.

    Parameters
    ----------
    data : ExperimentData

    Returns
    -------
    float or ndarray of shape (n_experiments,)
    """
    times = np.array([e.t0 for e in data.experiments])
    return times if data.several else float(times[0])


def estimated_x0_mask(data):
    """Which initial-state components are estimated, shaped like ``x0_``.

    Parameters
    ----------
    data : ExperimentData

    Returns
    -------
    ndarray of bool of shape (n_states,) or (n_experiments, n_states)
    """
    mask = np.array([e.estimate_x0 for e in data.experiments])
    return mask if data.several else mask[0]


def standard_errors(cov):
    """Square roots of the diagonal of a covariance (negative round-off clipped to 0).

    Parameters
    ----------
    cov : ndarray of shape (n, n)

    Returns
    -------
    ndarray of shape (n,)
    """
    return np.sqrt(np.clip(np.diag(cov), 0, None))


def is_linear_on_data(model, t, Y):
    """Whether ``model`` is affine in theta, probed at random points and at the first samples
    of the data (once per fit; decides between linear and nonlinear solver paths).

    Parameters
    ----------
    model : ODEModel
    t : ndarray of shape (n_times,)
    Y : ndarray of shape (n_times, n_states)

    Returns
    -------
    bool
    """
    return model.is_linear_in_theta() and model.is_linear_in_theta(t[:16], Y[:16])


def warn_not_converged(estimator, n_iter, reason, advice):
    """Issue the shared :class:`~sklearn.exceptions.ConvergenceWarning`.

    Parameters
    ----------
    estimator : estimator instance
    n_iter : int
        Iterations run.
    reason : str
        What stopped the solver, e.g. ``"max_iter=100 reached"``.
    advice : str
        What the user can change, e.g. ``"Increase max_iter or loosen tol."``.
    """
    warn(
        f"{type(estimator).__name__} did not converge after {n_iter} "
        f"iteration{'' if n_iter == 1 else 's'} "
        f"({reason}). {advice} The fitted estimator is usable; converged_ is False.",
        ConvergenceWarning)
    logger.info("%s stopped without converging: %s", type(estimator).__name__, reason)
