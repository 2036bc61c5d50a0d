"""The states at which WENDy evaluates its residual covariance (#16), as array functions.

The residual covariance ``L L^T`` needs ``df/dx`` along the trajectory. The paper evaluates
it at the noisy data, which makes the weights depend on the very noise they weight: on
logistic growth at 20 % noise that correlation biased both coefficients by 0.5-0.7 of their
standard deviation (mean z-scores -0.74 and +0.53 over 30 draws; 0.03 and -0.05 with the
weights evaluated at the clean states). Evaluating it at a smooth estimate of the states instead
removes the correlation but also the variance the noise adds through ``df/dx`` itself,
which the noisy data carry implicitly: the covariance then nearly vanishes on
combinations of test functions close to the ODE's adjoint solutions, and on Lotka-Volterra
and Hindmarsh-Rose those directions got weights that quadrature error and second-order
noise do not deserve (Lotka-Volterra at 20 %: RMS E2 0.019 -> 0.058).

:func:`decorrelated_states` keeps both: the smoothed data plus their own residuals moved
by half the series. The surrogate has the data's noise level, so the covariance keeps the
noise's own contribution, but at each time the surrogate's noise comes from a distant,
independent sample.
"""

from __future__ import annotations

import numpy as np

from .._noise_level import is_uniform
from ._testfunctions import ETA, _bump

__all__ = ["local_quadratic", "smoothed_states", "decorrelated_states"]

# Candidate smoothing radii, in multiples of the smallest test-function radius.
_RADIUS_FACTORS = (1.0, 2.0, 4.0, 8.0, 16.0)


def _local_fit(t, U, radius, where):
    """Local quadratic fits at the times ``t[where]``: smoothed values, leverages, and each
    fit's weights on its window (``weights[rows == i]`` on ``t[cols[rows == i]]``)."""
    lo = np.searchsorted(t, t[where] - radius, side="right")
    hi = np.searchsorted(t, t[where] + radius, side="left")
    counts = hi - lo
    m = where.size
    rows = np.repeat(np.arange(m), counts)
    cols = np.arange(rows.size) - np.repeat(np.cumsum(counts) - counts - lo, counts)
    s = (t[cols] - t[where][rows]) / radius
    w = _bump(s, radius, ETA)[0]
    powers = np.empty((s.size, 5))
    powers[:, 0] = 1.0
    for k in range(1, 5):  # repeated products: far cheaper than float powers
        powers[:, k] = powers[:, k - 1] * s
    moments = np.stack([np.bincount(rows, weights=w * powers[:, k], minlength=m)
                        for k in range(5)], axis=1)
    S = moments[:, np.add.outer(np.arange(3), np.arange(3))]  # (m, 3, 3) Hankel
    S = S + 1e-12 * moments[:, :1, None] * np.eye(3)  # a window of fewer than 3 points
    S_inv = np.linalg.inv(S)
    # The fit's value at the centre: sum_j w_j (S^-1 p_j)[0] U_j with p_j = (1, s_j, s_j^2).
    weights = w * np.einsum("ri,ri->r", S_inv[rows, 0, :], powers[:, :3])
    smooth = np.zeros((m, U.shape[1]))
    for k in range(U.shape[1]):
        smooth[:, k] = np.bincount(rows, weights=weights * U[cols, k], minlength=m)
    leverage = S_inv[:, 0, 0] * np.exp(-ETA)  # own weight psi(0) = e^-eta
    return smooth, leverage, weights, cols


def local_quadratic(t, U, radius):
    """Local quadratic regression with bump weights of ``radius``, and its leave-one-out error.

    At each time the data within ``radius`` are fitted by a quadratic in ``t`` with weights
    ``psi((t_j - t_n) / radius)`` (the test-function bump); the fit's value is the smoothed
    state. Any grid; near the ends the window is one-sided. On a uniform grid the interior
    fits share one kernel, applied as a convolution.

    Parameters
    ----------
    t : ndarray of shape (n_times,)
        Increasing times.
    U : ndarray of shape (n_times, n_states)
    radius : float

    Returns
    -------
    smooth : ndarray of shape (n_times, n_states)
    loo : ndarray of shape (n_states,)
        Leave-one-out mean square error per state (from the hat matrix's diagonal, no refit).
    """
    n = t.size
    half = int(np.ceil(radius / ((t[-1] - t[0]) / (n - 1)))) if is_uniform(t) else n
    if 2 * half + 1 < n:
        smooth = np.empty_like(U)
        leverage = np.empty(n)
        edges = np.r_[np.arange(half), np.arange(n - half, n)]
        smooth[edges], leverage[edges] = _local_fit(t, U, radius, edges)[:2]
        # One interior fit gives the kernel: its weights on its window.
        _, lev, weights, cols = _local_fit(t, U[:, :0], radius, np.array([n // 2]))
        kernel = np.zeros(2 * half + 1)
        kernel[cols - (n // 2 - half)] = weights
        inner = slice(half, n - half)
        for k in range(U.shape[1]):
            smooth[inner, k] = np.convolve(U[:, k], kernel[::-1], mode="valid")
        leverage[inner] = lev[0]
    else:
        smooth, leverage = _local_fit(t, U, radius, np.arange(n))[:2]
    loo = np.mean(((U - smooth) / (1.0 - leverage)[:, None]) ** 2, axis=0)
    return smooth, loo


# A local fit uses at most about this many samples per half window: wider windows are fitted
# on every k-th sample and interpolated back, which keeps the cost linear in n_times for any
# radius (at N = 16384 the one-sided edge fits of the widest radius alone took 0.5 s).
_HALF_WINDOW_SAMPLES = 32


def smoothed_states(t, U, min_radius):
    """Local quadratic smoothing of each state at the radius its leave-one-out error prefers.

    Parameters
    ----------
    t : ndarray of shape (n_times,)
    U : ndarray of shape (n_times, n_states)
    min_radius : float
        The smallest test-function radius; candidates are 1-16 times it, at most half the
        series.

    Returns
    -------
    ndarray of shape (n_times, n_states)
    """
    span = t[-1] - t[0]
    mean_step = span / (t.size - 1)
    best = np.full(U.shape[1], np.inf)
    out = U.copy()
    for factor in _RADIUS_FACTORS:
        radius = factor * min_radius
        if factor > 1 and radius > span / 2:
            break
        stride = max(1, int(radius / mean_step) // _HALF_WINDOW_SAMPLES)
        keep = np.unique(np.r_[np.arange(0, t.size, stride), t.size - 1])
        smooth, loo = local_quadratic(t[keep], U[keep], radius)
        if stride > 1:
            smooth = np.column_stack([np.interp(t, t[keep], smooth[:, k])
                                      for k in range(U.shape[1])])
        better = loo < best
        best[better] = loo[better]
        out[:, better] = smooth[:, better]
        if not better.any():  # the leave-one-out error is U-shaped in the radius
            break
    return out


def decorrelated_states(t, U, min_radius):
    """States for the residual covariance: smoothed data plus residuals from half the series
    away (see the module's docstring).

    Parameters
    ----------
    t : ndarray of shape (n_times,)
    U : ndarray of shape (n_times, n_states)
    min_radius : float

    Returns
    -------
    ndarray of shape (n_times, n_states)
    """
    smooth = smoothed_states(t, U, min_radius)
    return smooth + np.roll(U - smooth, U.shape[0] // 2, axis=0)
