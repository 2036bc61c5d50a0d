"""The error measures the three papers report, as plain functions of arrays.

* seed 000 (BCD-prox): per-component parameter error ``|theta_hat - theta|``, prediction error
  ``||X - X_hat||_F`` and estimation error ``||X - X*||_F`` (Frobenius, not squared);
* seed 001 (WENDy): relative coefficient error ``E2 = ||w_hat - w||_2 / ||w||_2`` and the
  relative forward-simulation error ``E_FS = ||U_hat - U||_F / ||U||_F``;
* seed 002 (adjoint): relative parameter error per component ``|theta_hat - theta| / |theta|``.
"""

import numpy as np

__all__ = [
    "parameter_error",
    "relative_parameter_error",
    "relative_coefficient_error",
    "prediction_error",
    "estimation_error",
    "forward_simulation_error",
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
