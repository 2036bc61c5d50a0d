"""WENDy's noise estimate (seed 001): a high-order difference filter applied to the data."""

from __future__ import annotations

import numpy as np

__all__ = ["MIN_SAMPLES", "estimate_noise", "is_uniform"]

# Noise filter: the 6th-derivative finite-difference stencil on 15 points, unit 2-norm
# (seed 001). It annihilates polynomials up to degree 14 on the stencil's own nodes, so on a
# smooth signal it sees only the noise.
_NOISE_STENCIL = 15
_NOISE_DERIVATIVE = 6

#: The fewest samples WENDy accepts: one full noise stencil and one more.
MIN_SAMPLES = _NOISE_STENCIL + 1


def is_uniform(t):
    """Whether the grid steps are equal to 1e-9 relative."""
    h = np.diff(t)
    return bool(np.allclose(h, h[0], rtol=1e-9))


def _fd_weights(nodes, derivative):
    """Finite-difference weights for ``derivative`` on arbitrary ``nodes`` (batched).

    Solves the Vandermonde moment conditions on nodes centred and scaled to [-1, 1], then
    rescales; exact for polynomials of degree < len(nodes).
    """
    centre = nodes.mean(axis=-1, keepdims=True)
    half = (nodes.max(axis=-1, keepdims=True) - nodes.min(axis=-1, keepdims=True)) / 2
    s = (nodes - centre) / half
    n = nodes.shape[-1]
    powers = np.arange(n)
    V = s[..., None, :] ** powers[:, None]  # (..., n_moments, n_nodes)
    rhs = np.zeros(nodes.shape[:-1] + (n,))
    rhs[..., derivative] = np.prod(np.arange(1, derivative + 1))
    return np.linalg.solve(V, rhs[..., None])[..., 0]


def estimate_noise(t, U):
    """Per-state noise standard deviation from a high-order difference filter.

    Each window of 15 consecutive samples is filtered by the unit-norm 6th-derivative
    stencil of its own times (so non-uniform grids are handled); for white noise of
    standard deviation sigma the filtered values have standard deviation sigma.

    Parameters
    ----------
    t : ndarray of shape (n_times,)
        Increasing times (any spacing).
    U : ndarray of shape (n_times, n_states)
        Noisy observations of every state.

    Returns
    -------
    sigma : ndarray of shape (n_states,)
        Estimated noise standard deviation per state.
    """
    n = t.size
    width = min(_NOISE_STENCIL, n - (n + 1) % 2)  # odd, at most n
    idx = np.arange(n - width + 1)[:, None] + np.arange(width)[None, :]
    if is_uniform(t):
        weights = _fd_weights(np.arange(width, dtype=np.float64), min(_NOISE_DERIVATIVE,
                                                                      width - 1))
        weights = np.broadcast_to(weights / np.linalg.norm(weights), idx.shape)
    else:
        weights = _fd_weights(t[idx], min(_NOISE_DERIVATIVE, width - 1))
        weights = weights / np.linalg.norm(weights, axis=1, keepdims=True)
    filtered = np.einsum("wk,wkd->wd", weights, U[idx])
    return np.sqrt(np.mean(filtered**2, axis=0))
