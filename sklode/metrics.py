"""The error measures the three papers report, as plain functions of arrays.

* seed 000 (BCD-prox): per-component parameter error ``|theta_hat - theta|``, prediction error
  ``||X - X_hat||_F`` and estimation error ``||X - X*||_F`` (Frobenius, not squared);
* seed 001 (WENDy): relative coefficient error ``E2 = ||w_hat - w||_2 / ||w||_2`` and the
  relative forward-simulation error ``E_FS = ||U_hat - U||_F / ||U||_F``;
* seed 002 (adjoint): relative parameter error per component ``|theta_hat - theta| / |theta|``.

and the negative log-likelihood of a fitted estimator's data at any parameters
(:func:`neg_log_likelihood`, PEtab's convention: the number ``neg_log_likelihood_`` reports).
"""

import numpy as np

from .diagnostics._assessment import likelihood_attributes
from .experiment import Experiment

__all__ = [
    "parameter_error",
    "relative_parameter_error",
    "relative_coefficient_error",
    "prediction_error",
    "estimation_error",
    "forward_simulation_error",
    "neg_log_likelihood",
    "experiment_scorer",
]


def _pair(a, b, what):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"{what}: shapes differ, {a.shape} vs {b.shape}.")
    return a, b


def parameter_error(theta_hat, theta_true):
    """Absolute error per component, ``|theta_hat - theta_true|`` (seed 000).

    Parameters
    ----------
    theta_hat : array-like of shape (n_params,)
        Estimated parameters.
    theta_true : array-like of shape (n_params,)
        True parameters.

    Returns
    -------
    ndarray of shape (n_params,)
        The absolute errors.

    Examples
    --------
    >>> parameter_error([2.1, 0.9], [2.0, 1.0])
    array([0.1, 0.1])
    """
    a, b = _pair(theta_hat, theta_true, "parameter_error")
    return np.abs(a - b)


def relative_parameter_error(theta_hat, theta_true):
    """Relative error per component, ``|theta_hat - theta_true| / |theta_true|`` (seed 002).

    Parameters
    ----------
    theta_hat : array-like of shape (n_params,)
        Estimated parameters.
    theta_true : array-like of shape (n_params,)
        True parameters.

    Returns
    -------
    ndarray of shape (n_params,)
        The relative errors.
    """
    a, b = _pair(theta_hat, theta_true, "relative_parameter_error")
    return np.abs(a - b) / np.abs(b)


def relative_coefficient_error(theta_hat, theta_true):
    """WENDy's ``E2 = ||theta_hat - theta_true||_2 / ||theta_true||_2``.

    Parameters
    ----------
    theta_hat : array-like of shape (n_params,)
        Estimated parameters.
    theta_true : array-like of shape (n_params,)
        True parameters.

    Returns
    -------
    float
        E2.

    Examples
    --------
    >>> round(relative_coefficient_error([3.0, 4.0], [3.0, 4.5]), 6)
    0.09245
    """
    a, b = _pair(theta_hat, theta_true, "relative_coefficient_error")
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def prediction_error(X_true, X_predicted):
    """``||X_true - X_predicted||_F`` (seed 000; not squared, unlike its demo's printout).

    Parameters
    ----------
    X_true : array-like of shape (n_times, n_states)
        Clean states.
    X_predicted : array-like of shape (n_times, n_states)
        Predicted states, e.g. ``est.simulate(t)``.

    Returns
    -------
    float
        The Frobenius norm of the difference.
    """
    a, b = _pair(X_true, X_predicted, "prediction_error")
    return float(np.linalg.norm(a - b))


def estimation_error(X_true, X_filtered):
    """``||X_true - X*||_F`` for filtered states such as ``BCDProxODE.states_`` (seed 000).

    Parameters
    ----------
    X_true : array-like of shape (n_times, n_states)
        Clean states.
    X_filtered : array-like of shape (n_times, n_states)
        Filtered states.

    Returns
    -------
    float
        The Frobenius norm of the difference.
    """
    a, b = _pair(X_true, X_filtered, "estimation_error")
    return float(np.linalg.norm(a - b))


def forward_simulation_error(X_true, X_simulated):
    """WENDy's relative forward-simulation error ``||X_sim - X_true||_F / ||X_true||_F``.

    Parameters
    ----------
    X_true : array-like of shape (n_times, n_states)
        Clean states.
    X_simulated : array-like of shape (n_times, n_states)
        States simulated from the estimate.

    Returns
    -------
    float
        The relative error.
    """
    a, b = _pair(X_true, X_simulated, "forward_simulation_error")
    return float(np.linalg.norm(b - a) / np.linalg.norm(a))


def neg_log_likelihood(estimator, t, Y=None, theta=None):
    """``-log L`` of data under a fitted estimator's observation and noise model.

    The same number as the estimator's ``neg_log_likelihood_`` at ``theta=None`` on the data
    it was fitted to; at another ``theta`` the likelihood of the same model there (each
    experiment integrated from the fitted ``x0_``, its doses and conditions applied). PEtab's
    convention: every constant included (``1/2 log(2 pi sigma^2)`` per observation, the
    log-scale Jacobian ``log y``), so values compare with AMICI's and pyPESTO's. With no
    known noise level (``sigma=None`` and no ``noise_sd``), one scale per observable is the
    maximum-likelihood one at ``theta``.

    Parameters
    ----------
    estimator : fitted sklode estimator
        Gives the model, the observed columns, ``sigma``, ``noise_kind`` and ``x0_``.
    t : array-like, list of arrays, Experiment or list of Experiment
        The data, as for ``fit``.
    Y : array-like or list of them, optional
        Observations, when ``t`` holds times.
    theta : array-like of shape (n_params,), optional
        Parameters (default: the fitted ``theta_``).

    Returns
    -------
    float
        ``inf`` where the model cannot be integrated or the likelihood is undefined.

    Examples
    --------
    >>> import numpy as np
    >>> from sklode import AdjointODE
    >>> from sklode.datasets import make_trajectory
    >>> from sklode.metrics import neg_log_likelihood
    >>> d = make_trajectory("lotka_volterra", noise=0.1, random_state=0)
    >>> est = AdjointODE(d.problem.model, theta0=(2, 1, 4, 1), sigma=0.1).fit(d.t, d.Y)
    >>> bool(np.isclose(neg_log_likelihood(est, d.t, d.Y), est.neg_log_likelihood_))
    True
    """
    from sklearn.utils.validation import check_is_fitted

    check_is_fitted(estimator)
    data = estimator._scoring_data(t, Y)
    theta = estimator.theta_ if theta is None else np.asarray(theta, dtype=np.float64)
    x0s = np.reshape(estimator.x0_, (-1, estimator.model.n_states))
    if x0s.shape[0] != data.n_experiments:
        raise ValueError(f"The estimator was fitted on {x0s.shape[0]} experiment(s) but "
                         f"received {data.n_experiments}: pass the data it was fitted to.")
    return likelihood_attributes(estimator.model, theta, data, x0s,
                                 estimator._simulation_options(), sigma=estimator.sigma,
                                 noise_kind=estimator.noise_kind, n_fitted=0
                                 )["neg_log_likelihood_"]


class _ExperimentScorer:
    """A scikit-learn scorer over experiments: observed entries stacked, then the metric."""

    def __init__(self, name, metric, sign, kwargs):
        self.name, self.metric, self.sign, self.kwargs = name, metric, sign, kwargs

    def __call__(self, estimator, t, Y=None):
        given = t if isinstance(t, (list, tuple)) else [t]
        if given and isinstance(given[0], Experiment):
            Y_true, Y_pred = estimator._experiment_predictions(list(given))
        else:
            arrays = [np.asarray(y, dtype=np.float64) for y in
                      (Y if isinstance(t, (list, tuple)) else [Y])]
            predictions = estimator.predict(t)
            predictions = predictions if isinstance(t, (list, tuple)) else [predictions]
            Y_true = np.vstack([a.reshape(len(a), -1) for a in arrays])
            Y_pred = np.vstack([np.reshape(p, (len(p), -1)) for p in predictions])
        observed = np.isfinite(Y_true).all(axis=1)  # complete rows: every metric's input
        return self.sign * float(self.metric(Y_true[observed], Y_pred[observed],
                                             **self.kwargs))

    def __repr__(self):
        return f"experiment_scorer({self.name!r})"


def experiment_scorer(scoring):
    """Any scikit-learn regression scorer, for data given as experiments.

    scikit-learn's scorers compare ``predict(X)`` with ``y`` array to array; a list of
    experiments (ragged times, or :class:`~sklode.Experiment` objects that carry their own
    observations) is neither, so ``cross_val_score(..., scoring="neg_root_mean_squared_error")``
    fails on it. This wraps the same metric: each experiment is predicted (fitted ones from
    their ``x0_``, new ones from their known initial state, or with their initial state
    refitted, as :meth:`score` does), the rows with every column observed are stacked, and
    the metric is applied with scikit-learn's sign.

    Parameters
    ----------
    scoring : str
        A scikit-learn scorer name, e.g. ``"neg_root_mean_squared_error"``, ``"r2"``,
        ``"neg_mean_absolute_error"``.

    Returns
    -------
    callable
        ``scorer(estimator, experiments)`` or ``scorer(estimator, t_list, Y_list)``, for the
        ``scoring=`` argument of ``cross_val_score``, ``GridSearchCV`` and friends.

    Examples
    --------
    >>> from sklode.metrics import experiment_scorer
    >>> experiment_scorer("neg_root_mean_squared_error")
    experiment_scorer('neg_root_mean_squared_error')
    """
    from sklearn.metrics import get_scorer

    base = get_scorer(scoring)
    metric = getattr(base, "_score_func", None)
    if metric is None:
        raise ValueError(f"scoring={scoring!r} is not a metric scorer of scikit-learn.")
    return _ExperimentScorer(scoring, metric, getattr(base, "_sign", 1),
                             dict(getattr(base, "_kwargs", {})))
