"""What every sklode estimator shares: data validation, ``predict``/``score``, tags, and the
all-or-nothing setting of fitted attributes. No algorithm lives here.

An estimator subclasses :class:`ODEEstimatorBase` once (no deeper hierarchy), declares its
``_parameter_constraints``, an ``__init__`` that stores its arguments unchanged, and a ``fit``
that

1. calls :meth:`~ODEEstimatorBase._validate_training_data`,
2. runs its private solver function on arrays,
3. hands every fitted attribute to :meth:`~ODEEstimatorBase._set_fitted` in one call.

Because step 3 happens only after the solver succeeded, a fit that raises leaves the
estimator exactly as it was (unfitted, or with the previous fit intact).
"""

from __future__ import annotations

import logging
import warnings

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._data import check_times, check_trajectory
from ..exceptions import ConvergenceWarning
from ..integrate import simulate
from ..models import check_model

__all__ = ["ODEEstimatorBase", "warn_not_converged", "is_linear_on_data"]

logger = logging.getLogger("sklode")

# predict() integrates the fitted ODE to this accuracy unless the estimator has its own
# integrator/rtol/atol hyper-parameters: well below any noise level in the papers.
_PREDICT_DEFAULTS = {"integrator": "LSODA", "rtol": 1e-8, "atol": 1e-10}


class ODEEstimatorBase(RegressorMixin, BaseEstimator):
    """Behaviour common to the sklode estimators; never instantiated directly.

    Subclasses must set, in ``fit``, at least ``theta_``, ``x0_``, ``t0_``, ``n_iter_`` and
    ``observed_`` (indices of the states that ``Y``'s columns hold) through
    :meth:`_set_fitted`.
    """

    # --------------------------------------------------------------------- tags
    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.one_d_array = True  # t may be (n,); (n, 1) stays accepted
        tags.target_tags.multi_output = True  # Y is (n, n_observed)
        tags.target_tags.single_output = True
        tags.regressor_tags.poor_score = True  # random regression data is no ODE trajectory
        return tags

    # --------------------------------------------------------------------- fitting helpers
    def _min_samples(self):
        """Fewest time points the method accepts (subclasses may need more)."""
        return 2

    def _validate_training_data(self, t, Y, observed=None):
        """Check the model and ``(t, Y)``; return sorted copies and the fit-time metadata.

        Parameters
        ----------
        t, Y : as given to ``fit``
        observed : tuple of int, optional
            Indices of the states that Y's columns hold; None: every state.

        Returns
        -------
        t_sorted, Y_sorted : ndarray
        meta : dict
            ``n_features_in_``, ``observed_``, and ``feature_names_in_`` when ``t`` is a
            DataFrame, plus the private ``_y_ndim``; pass it on to :meth:`_set_fitted`.
        """
        model = check_model(self.model)
        observed = tuple(range(model.n_states)) if observed is None else tuple(observed)
        names = tuple(model.state_names[i] for i in observed)
        t_sorted, Y_sorted, y_ndim, feature_names = check_trajectory(
            t, Y, n_observed=len(observed), observed_names=names,
            min_samples=self._min_samples(), estimator_name=type(self).__name__,
        )
        meta = {"n_features_in_": 1, "observed_": observed, "_y_ndim": y_ndim}
        if feature_names is not None:
            meta["feature_names_in_"] = feature_names
        return t_sorted, Y_sorted, meta

    def _initial_theta(self):
        """``theta0`` as a float64 vector (the model's default guess when None), checked."""
        model = self.model
        if self.theta0 is None:
            return model.theta_guess()
        theta0 = np.array(self.theta0, dtype=np.float64).reshape(-1)
        if theta0.shape != (model.n_params,):
            raise ValueError(f"theta0 has {theta0.size} entries but {model!r} has "
                             f"{model.n_params} parameters {model.param_names}.")
        return theta0

    def _set_fitted(self, **attributes):
        """Replace every fitted attribute at once (the previous fit's are all removed)."""
        for key in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
            delattr(self, key)
        for key, value in attributes.items():
            setattr(self, key, value)
        return self

    # --------------------------------------------------------------------- prediction
    def _simulation_options(self):
        params = self.get_params(deep=False)
        return {k: params.get(k, v) for k, v in _PREDICT_DEFAULTS.items()}

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
        check_is_fitted(self)
        times = check_times(t)
        X = simulate(self.model, self.theta_, self.x0_, times, t0=self.t0_,
                     **self._simulation_options())
        Y = X[:, list(self.observed_)]
        return Y[:, 0] if self._y_ndim == 1 else Y

    def confidence_intervals(self, level=0.95):
        """Normal-approximation confidence intervals for ``theta_``, shape (n_params, 2).

        Available for estimators that set ``theta_stderr_`` (WENDyODE, AdjointODE).
        """
        from scipy.stats import norm

        check_is_fitted(self)
        if not hasattr(self, "theta_stderr_"):
            raise AttributeError(f"{type(self).__name__} does not estimate standard errors.")
        z = norm.ppf(0.5 + level / 2.0)
        return np.column_stack([self.theta_ - z * self.theta_stderr_,
                                self.theta_ + z * self.theta_stderr_])

    def simulate(self, t):
        """All states (observed or not) at times ``t``, shape ``(n_samples, n_states)``."""
        check_is_fitted(self)
        return simulate(self.model, self.theta_, self.x0_, check_times(t), t0=self.t0_,
                        **self._simulation_options())


def is_linear_on_data(model, t, Y):
    """Whether ``model`` is affine in theta, probed at random points and at the first
    samples of the data (once per fit; decides between linear and nonlinear solver paths)."""
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
