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
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._checks import as_float_array, by_name, check_sample_weight, check_times, initial_theta
from ._validation import _is_experiment_list, check_experiments, check_series
from .diagnostics._assessment import r2_by_state
from .exceptions import ConvergenceWarning, warn
from .experiment import Experiment as Given
from .integrate import INTEGRATORS, simulate
from .models import check_model
from .observation._likelihood import NOISE_KINDS
from .outputerror._initial_state import SHOOT_RTOL, shoot_initial_state
from .outputerror._predict import (
    conditioned_theta,
    experiment_start,
    predicted_observables,
)

__all__ = ["COMMON_CONSTRAINTS", "ODEEstimator", "set_fitted", "warn_not_converged"]

logger = logging.getLogger("sklode")


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
        """``theta0`` checked and inside ``bounds`` and ``positive``
        (:func:`~sklode._checks.initial_theta`)."""
        return initial_theta(self.theta0, self.model, bounds=self.bounds,
                             positive=self.positive, fixed=self.fixed)

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
