"""Validation of time vectors and observations: every data error a user can meet comes from here.

Messages name the value received and the way out, e.g.
``"t contains duplicate times: t = 0.4 appears at least twice ..."``.
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_array

__all__ = ["check_times", "check_trajectory"]


def _feature_names(t):
    columns = getattr(t, "columns", None)
    if columns is None:
        return None
    return np.asarray([str(c) for c in columns], dtype=object)


def check_times(t, *, name="t"):
    """Validate a time vector given as ``(n,)`` or ``(n, 1)``; return a 1-D float64 copy.

    Sparse, complex, object, empty and non-finite input raise scikit-learn's usual errors.
    Order and repeats are kept (prediction accepts both).
    """
    arr = check_array(t, ensure_2d=False, dtype=np.float64, input_name=name, copy=True)
    if arr.ndim == 2:
        if arr.shape[1] != 1:
            raise ValueError(
                f"{name} must have shape (n_samples,) or (n_samples, 1): one time per row. "
                f"Got shape {arr.shape}. sklode estimators take the times as X and the "
                "observed states as y."
            )
        arr = arr[:, 0]
    elif arr.ndim != 1:
        raise ValueError(f"{name} must be one- or two-dimensional, got shape {arr.shape}.")
    return np.ascontiguousarray(arr)


def check_trajectory(t, Y, *, n_observed, observed_names, min_samples, estimator_name):
    """Validate training data ``(t, Y)`` and return sorted copies.

    Parameters
    ----------
    t : array-like of shape (n_samples,) or (n_samples, 1), or a one-column DataFrame
    Y : array-like of shape (n_samples, n_observed) or (n_samples,)
    n_observed : int
        Number of columns Y must have.
    observed_names : tuple of str
        Their names, for messages.
    min_samples : int
        The fewest time points the method can work with.
    estimator_name : str

    Returns
    -------
    t_sorted : ndarray of shape (n_samples,)
    Y_sorted : ndarray of shape (n_samples, n_observed)
    y_ndim : int
        1 if Y was given as a vector (predictions are then returned as a vector).
    feature_names : ndarray of str or None
        Column names when ``t`` is a DataFrame.
    """
    feature_names = _feature_names(t)
    t_arr = check_times(t)
    if Y is None:
        raise ValueError(
            f"{estimator_name} requires y to be passed, but the target y is None. Pass the "
            "observed states Y of shape (n_samples, n_observed)."
        )
    Y_arr = check_array(Y, ensure_2d=False, dtype=np.float64, input_name="Y", copy=True)
    y_ndim = Y_arr.ndim
    if y_ndim == 1:
        Y_arr = Y_arr[:, None]
    elif y_ndim != 2:
        raise ValueError(f"Y must be one- or two-dimensional, got shape {Y_arr.shape}.")
    if Y_arr.shape[0] != t_arr.shape[0]:
        raise ValueError(
            f"t and Y have different numbers of samples: {t_arr.shape[0]} times and "
            f"{Y_arr.shape[0]} rows of Y. Each row of Y is the observation at one time."
        )
    n_samples = t_arr.shape[0]
    if n_samples < min_samples:
        raise ValueError(
            f"{estimator_name} needs at least {min_samples} time points, got "
            f"n_samples={n_samples}."
        )
    if Y_arr.shape[1] != n_observed:
        raise ValueError(
            f"Y has {Y_arr.shape[1]} column(s) but {estimator_name} expects {n_observed}, "
            f"one per observed state {tuple(observed_names)}. Reorder or select the columns "
            "of Y to match, or set which states are observed."
        )
    order = np.argsort(t_arr, kind="stable")
    t_sorted, Y_sorted = t_arr[order], Y_arr[order]
    repeated = np.flatnonzero(np.diff(t_sorted) == 0)
    if repeated.size:
        raise ValueError(
            f"t contains duplicate times: t = {t_sorted[repeated[0]]:g} appears at least twice "
            f"({repeated.size} repeat(s) in all). Average or remove repeated measurements "
            "before fitting."
        )
    return t_sorted, Y_sorted, y_ndim, feature_names
