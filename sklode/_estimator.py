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
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from ._validation import check_experiments, check_theta0, check_times
from .exceptions import ConvergenceWarning
from .integrate import INTEGRATORS, simulate
from .models import check_model

__all__ = ["COMMON_CONSTRAINTS", "ODEEstimator", "experiment_on_data_grid", "is_linear_on_data",
           "require_complete", "require_observed", "standard_errors", "warn_not_converged"]

logger = logging.getLogger("sklode")

#: The declared types and ranges of the parameters every estimator shares (one vocabulary);
#: each estimator's ``_parameter_constraints`` starts from these.
COMMON_CONSTRAINTS = {
    "model": "no_validation",  # checked by check_model in fit, with messages about the model
    "theta0": ["array-like", None],
    "x0": ["array-like", None],
    "t0": [Real, None],
    "estimate_x0": ["boolean", "array-like"],
    "observed": ["array-like", None],
    "bounds": [tuple, list, None],
    "positive": ["boolean", "array-like"],
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

    def _validate_data(self, t, Y):
        """The model checked and ``(t, Y)`` with the initial-state settings, validated.

        Returns
        -------
        ExperimentData
        """
        model = check_model(self.model)
        return check_experiments(
            t, Y, model=model, observed=self.observed, x0=self.x0, t0=self.t0,
            estimate_x0=self.estimate_x0, min_samples=self._min_samples(),
            estimator_name=type(self).__name__)

    def _initial_theta(self):
        """``theta0`` as a checked float64 vector (the model's default guess when None)."""
        return check_theta0(self.theta0, self.model)

    @staticmethod
    def _data_attributes(data):
        """Fitted attributes that describe the training data (for :meth:`_set_fitted`)."""
        attributes = {"n_features_in_": 1, "observed_": data.observed, "_y_ndim": data.y_ndim}
        if data.feature_names is not None:
            attributes["feature_names_in_"] = data.feature_names
        return attributes

    def _set_fitted(self, **attributes):
        """Replace every fitted attribute at once (the previous fit's are all removed)."""
        for key in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, key)
        for key, value in attributes.items():
            setattr(self, key, value)
        return self

    # ------------------------------------------------------------------ prediction
    def _simulation_options(self):
        return {"integrator": self.integrator, "rtol": self.rtol, "atol": self.atol}

    def simulate(self, t):
        """All states (observed or not) at times ``t``, integrated from ``(t0_, x0_)``.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1)
            Any order, repeats allowed; times before ``t0_`` are integrated backwards.

        Returns
        -------
        X : ndarray of shape (n_samples, n_states)
            The states at ``t``, in the order given.
        """
        check_is_fitted(self)
        return simulate(self.model, self.theta_, self.x0_, check_times(t), t0=self.t0_,
                        **self._simulation_options())

    def predict(self, t):
        """Observed states at times ``t``, integrating the fitted ODE from ``(t0_, x0_)``.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1)
            Any order, repeats allowed; times before ``t0_`` are integrated backwards.

        Returns
        -------
        Y_pred : ndarray of shape (n_samples, n_observed)
            A vector of shape (n_samples,) if ``fit`` received a vector ``Y``.
        """
        Y = self.simulate(t)[:, list(self.observed_)]
        return Y[:, 0] if self._y_ndim == 1 else Y

    def confidence_intervals(self, level=0.95):
        """Normal-approximation confidence intervals for ``theta_``.

        ``theta_ ± z theta_stderr_`` with ``z`` the two-sided normal quantile of ``level``;
        a fixed or unidentified parameter has a zero or NaN width, as its standard error.

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
        return np.column_stack([self.theta_ - z * self.theta_stderr_,
                                self.theta_ + z * self.theta_stderr_])


def require_observed(data, estimator_name, alternatives="AdjointODE"):
    """Raise a ValueError when some state is never observed and the method needs them all.

    Parameters
    ----------
    data : ExperimentData
    estimator_name : str
    alternatives : str
        The estimators that can fit hidden states, for the message.
    """
    if data.hidden:
        raise ValueError(
            f"{estimator_name} needs every state observed, but observed={data.observed} "
            f"leaves states {data.hidden} hidden. Use {alternatives}, which fits hidden "
            "states, or observe every state.")


def require_complete(data, estimator_name):
    """Raise a ValueError when ``Y`` has missing entries (NaN) and the method cannot skip them.

    Parameters
    ----------
    data : ExperimentData
    estimator_name : str
    """
    for k, experiment in enumerate(data.experiments):
        if not experiment.complete:
            where = f" of experiment {k}" if data.several else ""
            raise ValueError(
                f"Y{where} has {int((~experiment.mask).sum())} missing value(s) (NaN), which "
                f"{estimator_name} does not handle in this version: drop the rows with "
                "missing values or fill them in before fitting.")


def experiment_on_data_grid(data, estimator_name):
    """The one experiment a method on the data grid (BCD-prox, WENDy) takes in this version:
    every state observed, no missing value, the initial state at the first observation time.

    Parameters
    ----------
    data : ExperimentData
    estimator_name : str
        For the messages.

    Returns
    -------
    Experiment
    """
    require_observed(data, estimator_name)
    require_complete(data, estimator_name)
    experiment = data.only_experiment(estimator_name)
    if experiment.t0 != experiment.t[0]:
        raise ValueError(f"{estimator_name} places the initial state at the first observation "
                         f"time {experiment.t[0]:g}; got t0={experiment.t0:g}. Leave t0 unset, "
                         "or use AdjointODE, which integrates from any t0.")
    return experiment


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
    warnings.warn(
        f"{type(estimator).__name__} did not converge after {n_iter} iterations "
        f"({reason}). {advice} The fitted estimator is usable; converged_ is False.",
        ConvergenceWarning,
        stacklevel=3,
    )
    logger.info("%s stopped without converging: %s", type(estimator).__name__, reason)
