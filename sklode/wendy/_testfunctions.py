"""WENDy's test functions on any time grid (seed 001), as plain array functions.

A test function is the C-infinity bump ``psi(t) = exp(-eta / (1 - ((t - c)/a)^2))`` on
``|t - c| < a`` (``eta = 9``), with centre ``c`` and radius ``a``. Integrals against data are
trapezoid sums on the actual grid, so non-uniform grids and any ``t0`` are handled exactly
the same way as uniform grids starting at 0.

Rows of the returned matrices already include the quadrature weights:
``Phi[k] @ u ~ int psi_k u dt`` and ``Phidot[k] @ u ~ int psi_k' u dt``.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._noise_level import is_uniform

__all__ = ["ETA", "MAX_TEST_FUNCTIONS", "is_uniform", "trapezoid_weights", "bump_rows",
           "product_rows", "test_function_matrices",
           "select_min_radius", "corner"]

#: The bump's sharpness (the paper's eta).
ETA = 9.0

# Raw bumps per scale before the SVD. Measured on the paper's problems with the exact
# residual covariance: 64 per scale gives the same E2 as 128, 256 or one per grid point,
# and keeps the IRLS covariance (K n_states square) small.
_CENTRES_PER_SCALE = 64

# The bump exp(-9 / (1 - s^2)) is effectively non-zero on |s| < 0.6 only: below this many
# steps per radius the trapezoid rule resolves it so badly that the error curve has a
# spurious corner there.
_MIN_RADIUS_STEPS = 8

# Orthonormalised test functions keep at most this condition number of the raw stack: the
# derivatives of weaker combinations are amplified by 1/sigma and only add noise.
_MAX_CONDITION = 1e4

# ... and at most this many of the strongest combinations (WENDy.jl caps at 200). Measured
# with the smallest radius at the centres' spacing (16 steps at N = 1024), where the
# condition cap keeps 186 of 256: 128 gives the same E2 on Lotka-Volterra and protein
# transduction at half the cost (the IRLS covariance is (K n_states)^2); on Hindmarsh-Rose
# 186 is a little better at 5 % noise (median E2 0.031 vs 0.034, 1.5x the time) and worse
# at 20 % (0.76 vs 0.44).
MAX_TEST_FUNCTIONS = 128


def trapezoid_weights(t):
    """Trapezoid-rule weights ``w`` on the grid: ``sum(w * g) ~ int g dt``."""
    t = np.asarray(t, dtype=np.float64)
    h = np.diff(t)
    w = np.zeros_like(t)
    w[:-1] += h / 2
    w[1:] += h / 2
    return w


def _bump(s, radius, eta):
    """Bump values and time-derivatives at scaled positions ``s = (t - c) / radius``."""
    inside = np.maximum(1.0 - s * s, 1e-300)  # a node rounded onto the edge: psi = 0 there
    val = np.exp(-eta / inside)
    # Only where psi > 0 (there inside > eta / 745, so inside**2 cannot underflow to 0; at the
    # edge it did, and the division warned on grids with a node within 1e-150 of the edge).
    dval = np.zeros(np.broadcast(s, val).shape)
    live = val > 0
    dval[live] = (val * (-2.0 * eta * s / np.where(live, inside, 1.0) ** 2))[live] / radius
    return val, dval


def bump_rows(t, centres, radius, eta=ETA):
    """Sparse bump values and time-derivatives at the grid, one row per centre.

    Each row is normalised to unit Euclidean norm of its samples (the paper's convention).

    Returns
    -------
    psi, dpsi : scipy.sparse.csr_matrix of shape (n_centres, n_times)
    """
    t = np.asarray(t, dtype=np.float64)
    lo = np.searchsorted(t, centres - radius, side="right")
    hi = np.searchsorted(t, centres + radius, side="left")
    counts = hi - lo
    rows = np.repeat(np.arange(centres.size), counts)
    cols = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if rows.size else \
        np.zeros(0, dtype=int)
    val, dval = _bump((t[cols] - centres[rows]) / radius, radius, eta)
    norms = np.sqrt(np.bincount(rows, weights=val * val, minlength=centres.size))
    norms[norms == 0] = 1.0
    shape = (centres.size, t.size)
    return (sp.csr_matrix((val / norms[rows], (rows, cols)), shape=shape),
            sp.csr_matrix((dval / norms[rows], (rows, cols)), shape=shape))


# Gauss-Legendre nodes per grid interval for the product integrals on non-uniform grids.
_PRODUCT_NODES = 8


def product_rows(t, centres, radius, eta=ETA):
    """Test-function rows for a non-uniform grid, quadrature included.

    ``Phi[k, n] = int psi_k(s) hat_n(s) ds`` and ``Phidot[k, n] = int psi_k'(s) hat_n(s) ds``
    with ``hat_n`` the piecewise-linear interpolation basis of the grid: the bump is
    integrated exactly (8-point Gauss-Legendre per interval) and only the data are
    interpolated. All weights are positive combinations, so no uneven pair of steps can blow
    them up (unlike higher-order Newton-Cotes rules), and integration by parts holds
    exactly for the interpolated data. The trapezoid rule, by contrast, is only second order
    here (it is spectrally accurate on uniform grids, where it is used instead).

    Returns
    -------
    Phi, Phidot : scipy.sparse.csr_matrix of shape (n_centres, n_times)
        """
    t = np.asarray(t, dtype=np.float64)
    lo = np.maximum(np.searchsorted(t, centres - radius, side="right") - 1, 0)
    hi = np.minimum(np.searchsorted(t, centres + radius, side="left"), t.size - 1)
    counts = np.maximum(hi - lo, 0)  # intervals [t_j, t_j+1] for j in lo .. hi-1
    rows = np.repeat(np.arange(centres.size), counts)
    left = np.concatenate([np.arange(a, b) for a, b in zip(lo, hi)]) if rows.size else \
        np.zeros(0, dtype=int)
    a_int = np.maximum(t[left], centres[rows] - radius)
    b_int = np.minimum(t[left + 1], centres[rows] + radius)
    nodes, weights = np.polynomial.legendre.leggauss(_PRODUCT_NODES)
    x = 0.5 * (a_int + b_int)[:, None] + 0.5 * (b_int - a_int)[:, None] * nodes[None, :]
    qw = 0.5 * (b_int - a_int)[:, None] * weights[None, :]
    val, dval = _bump((x - centres[rows, None]) / radius, radius, eta)
    h = (t[left + 1] - t[left])[:, None]
    hat_right = (x - t[left, None]) / h
    hat_left = 1.0 - hat_right
    shape = (centres.size, t.size)
    coo_rows = np.r_[rows, rows]
    coo_cols = np.r_[left, left + 1]

    def assemble(g):
        data = np.r_[np.sum(qw * g * hat_left, axis=1), np.sum(qw * g * hat_right, axis=1)]
        return sp.csr_matrix((data, (coo_rows, coo_cols)), shape=shape)

    return assemble(val), assemble(dval)


def corner(y):
    """Index of the corner of a curve: the split point of the best two-segment secant fit.

    Both segments join the end points to the candidate point; the candidate with the
    smallest relative misfit wins (the paper's ``getcorner``).
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n < 3:
        return n - 1
    x = np.arange(n, dtype=np.float64)
    scale = n / max(np.max(np.abs(y)), 1e-300)
    y = y * scale
    best, best_err = 1, np.inf
    for k in range(1, n - 1):
        left = y[0] + (y[k] - y[0]) * x[: k + 1] / k
        right = y[k] + (y[-1] - y[k]) * (x[k:] - k) / (n - 1 - k)
        err = (np.linalg.norm(left - y[: k + 1]) / max(np.linalg.norm(y[: k + 1]), 1e-300)
               + np.linalg.norm(right - y[k:]) / max(np.linalg.norm(y[k:]), 1e-300))
        if err < best_err:
            best, best_err = k, err
    return best


def _centres(t, radius, count):
    lo, hi = t[0] + radius, t[-1] - radius
    if hi <= lo:
        return np.array([0.5 * (t[0] + t[-1])])
    return np.linspace(lo, hi, count)


def select_min_radius(t, U, sigma=None, max_radius_steps=None):
    """The smallest bump radius whose integration error is below the noise, from the data.

    For each candidate radius (in units of the mean step, from small to large), the
    weak-form integrals ``int psi' u dt`` are computed with the trapezoid rule on the full
    grid and on every other point; their difference estimates the quadrature error of the
    half grid (the full grid's is far smaller). With the noise level ``sigma`` known, the
    difference of pure noise has a known mean square; the first radius whose measured mean
    square is consistent with noise alone (within three standard deviations of its
    chi-square scatter, plus 20 % for the error of ``sigma`` itself) is returned: there the
    quadrature error cannot be told from the noise. Without ``sigma``, or when no candidate
    passes, the radius at the corner of ``log e(m)`` is returned (the paper's rule; with
    noise its curve is a power law of the noise and the corner is arbitrary, so it is only
    the fallback).

    Parameters
    ----------
    t : ndarray of shape (n_times,)
        Increasing times (any spacing).
    U : ndarray of shape (n_times, n_states)
        Noisy observations of every state.
    sigma : ndarray of shape (n_states,), optional
        Noise standard deviation per state (:func:`~sklode.wendy.estimate_noise`).
    max_radius_steps : int, optional
        Largest candidate, in mean steps; default ``min(n_times // 8, 200)``.

    Returns
    -------
    radius : float
        In time units.
    """
    t = np.asarray(t, dtype=np.float64)
    n = t.size
    dt = (t[-1] - t[0]) / (n - 1)
    m_max = max_radius_steps or max(_MIN_RADIUS_STEPS + 1, min(n // 8, 200))
    # No radius below the spacing of the narrowest scale's centres: narrower bumps leave gaps
    # between them where data are not used at all.
    m_min = min(max(_MIN_RADIUS_STEPS, int(np.ceil((n - 1) / _CENTRES_PER_SCALE))), m_max - 1)
    candidates = np.unique(np.round(np.geomspace(m_min, m_max, 30)).astype(int))
    w_full = trapezoid_weights(t)
    w_half = np.zeros(n)
    w_half[::2] = trapezoid_weights(t[::2])
    dw = w_full - w_half
    mean_sigma2 = None if sigma is None else float(np.mean(np.asarray(sigma) ** 2))
    errors = []
    for m in candidates:
        radius = m * dt
        centres = _centres(t, radius, min(_CENTRES_PER_SCALE, n))
        _, dpsi = bump_rows(t, centres, radius)
        weighted = dpsi @ sp.diags(dw)  # row k: the quadrature difference's weights
        diff = weighted @ U
        mean_square = np.mean(diff**2)
        if sigma is not None:
            # E diff[k, l]^2 = sigma_l^2 sum_n (dpsi[k, n] dw_n)^2 for white noise alone
            noise_square = weighted.multiply(weighted).sum() / dpsi.shape[0] * mean_sigma2
            if mean_square <= (1.2 + 3.0 * np.sqrt(2.0 / diff.size)) * noise_square:
                return float(m * dt)
        errors.append(np.sqrt(mean_square) + 1e-300)
    k = corner(np.log(errors))
    return float(candidates[k] * dt)


def test_function_matrices(t, min_radius, n_scales=4, centres_per_scale=_CENTRES_PER_SCALE,
                           max_condition=_MAX_CONDITION, max_count=MAX_TEST_FUNCTIONS):
    """Orthonormal test-function matrices ``Phi`` and ``Phidot`` for radii ``2^l min_radius``.

    Bumps of every scale are stacked and orthonormalised with a truncated SVD (Gram matrix
    eigen-decomposition of the sparse stack: cost linear in ``n_times``), keeping the
    strongest combinations up to condition number ``max_condition``, at most ``max_count``
    of them; the derivative rows
    are the same linear combinations of the bump derivatives, so ``Phidot`` is exactly the
    derivative of ``Phi``'s test functions.

    Parameters
    ----------
    t : ndarray of shape (n_times,)
        Increasing times (any spacing).
    min_radius : float
        Radius of the narrowest scale, in time units.
    n_scales : int, default=4
        Radii ``2^l min_radius`` for ``l < n_scales``.
    centres_per_scale : int, default=64
        Raw bumps per scale before the SVD.
    max_condition : float, default=1e4
        Condition number of the raw stack kept by the truncation.
    max_count : int, default=128
        Most orthonormal combinations kept (the strongest).

    Returns
    -------
    Phi : ndarray of shape (n_test_functions, n_times)
        Test functions, quadrature weights included.
    Phidot : ndarray of shape (n_test_functions, n_times)
        Their time derivatives, quadrature weights included.
    radii : list of float
        The radii used.
    """
    t = np.asarray(t, dtype=np.float64)
    span = t[-1] - t[0]
    uniform = is_uniform(t)
    w = trapezoid_weights(t) if uniform else None
    radii = [r for r in (min_radius * 2.0**k for k in range(n_scales)) if r < span / 2]
    if not radii:
        radii = [span / 2.0 * 0.999]
    psis, dpsis = [], []
    for radius in radii:
        centres = _centres(t, radius, centres_per_scale)
        if uniform:  # trapezoid: spectrally accurate for compact smooth integrands
            psi, dpsi = bump_rows(t, centres, radius)
            psi, dpsi = psi @ sp.diags(w), dpsi @ sp.diags(w)
        else:
            psi, dpsi = product_rows(t, centres, radius)
        psis.append(psi)
        dpsis.append(dpsi)
    V = sp.vstack(psis).tocsr()
    Vd = sp.vstack(dpsis).tocsr()
    gram = (V @ V.T).toarray()
    evals, evecs = np.linalg.eigh(gram)
    order = np.argsort(evals)[::-1]
    evals, evecs = np.clip(evals[order], 0.0, None), evecs[:, order]
    sing = np.sqrt(evals)
    keep = min(max_count, max(1, int(np.sum(sing >= sing[0] / max_condition))))
    T = (evecs[:, :keep] / sing[:keep]).T  # rows: orthonormal combinations of the bumps
    Phi = np.asarray((V.T @ T.T).T)
    Phidot = np.asarray((Vd.T @ T.T).T)
    return Phi, Phidot, radii
