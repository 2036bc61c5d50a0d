"""The stage algebra of the collocation passes (:mod:`._sensitivity`): the 3-stage
Gauss-Legendre tableau, the steps' collocation nodes, and the solves of each step's stage
system ``K x = r`` (or ``K^T x = r``) with dense inverses, fixed-point sweeps, vector-Jacobian
products or sparse products."""

from __future__ import annotations

import math

import numpy as np

_SQ15 = np.sqrt(15.0)
#: Gauss–Legendre 3-stage Butcher tableau (nodes, matrix, weights).
GAUSS_C = np.array([0.5 - _SQ15 / 10, 0.5, 0.5 + _SQ15 / 10])
GAUSS_A = np.array([
    [5 / 36, 2 / 9 - _SQ15 / 15, 5 / 36 - _SQ15 / 30],
    [5 / 36 + _SQ15 / 24, 2 / 9, 5 / 36 - _SQ15 / 24],
    [5 / 36 + _SQ15 / 30, 2 / 9 + _SQ15 / 15, 5 / 36],
])
GAUSS_B = np.array([5 / 18, 4 / 9, 5 / 18])
_STAGES = 3

# Jacobians of this many entries (nodes * n_states^2) are held at once; bounds memory at ~64 MB
# whatever the horizon.
_CHUNK_ENTRIES = 8_000_000
# Above this many states the stage systems are solved by fixed-point iteration (cost n^2 per
# sweep) instead of a dense (3n)^3 factorisation per step.
_DIRECT_MAX_STATES = 48
# Sweeps of the sparse stage solves' series before a sparse LU takes over (a 200-cell
# reaction-diffusion system under LSODA: 13 ms a step with up to 100 sweeps; see
# benchmarks/results/scale.md).
_SPARSE_MAX_SWEEPS = 20


def _chunks(n_steps, n_states):
    size = max(1, _CHUNK_ENTRIES // (_STAGES * n_states * n_states))
    return [(s, min(s + size, n_steps)) for s in range(0, n_steps, size)]


def _nodes(traj, lo, hi):
    """Collocation nodes of steps ``lo..hi-1``: step sizes (m,), node times (m, 3), states."""
    t_left = traj.grid[lo:hi]
    h = traj.grid[lo + 1:hi + 1] - t_left
    times = t_left[:, None] + h[:, None] * GAUSS_C[None, :]
    x = traj.dense(times.ravel()).T.reshape(times.shape + (-1,))
    return h, times, x


def _stage_operator(h, M):
    """``K = I - h * [a_ij M_j]`` for every step: (m, 3n, 3n)."""
    m, s, n, _ = M.shape
    blocks = np.einsum("ij,mjab->miajb", GAUSS_A, M).reshape(m, s * n, s * n)
    return np.eye(s * n) - h[:, None, None] * blocks


def _neumann_series(r, apply, max_sweeps=100):
    """Solve ``x = r + apply(x)`` by fixed-point sweeps; None when they do not converge to
    round-off within ``max_sweeps`` or start to diverge (the caller then solves directly).

    The sweeps' changes shrink by the contraction rate of ``apply``; once two changes give
    it, a series that would need more than ``max_sweeps`` sweeps in all stops there instead
    of running them out (a stiff step of a diffusion problem: 20 wasted sweeps on every
    step, two thirds of a 200-cell fit's time, before its direct solve)."""
    x = r.copy()
    scale = np.max(np.abs(r)) + 1e-300
    tolerance = 1e-15 * scale
    previous = None
    for sweep in range(1, max_sweeps + 1):
        x_new = r + apply(x)
        change = np.max(np.abs(x_new - x))
        if change <= tolerance:
            return x_new
        x = x_new
        if not np.all(np.isfinite(x)) or np.max(np.abs(x)) > 1e12 * scale:
            return None
        if previous is not None and sweep >= 3:
            rate = change / previous
            if rate >= 1.0 or sweep + math.log(tolerance / change) / math.log(rate) \
                    > max_sweeps:
                return None
        previous = change
    return None


class _StageSolver:
    """Solve ``K x = r`` (or ``K^T x = r``) for one chunk of steps.

    Few states: batched dense inverses. Many states: a Neumann series, which converges because
    accuracy-limited steps keep ``h * ||A (x) f_x||`` well below 1 (checked; a stiff step with
    many states falls back to a dense solve of that step alone).
    """

    def __init__(self, h, M):
        self.h, self.M = h, M
        n = M.shape[-1]
        self.direct = n <= _DIRECT_MAX_STATES
        self.inv = np.linalg.inv(_stage_operator(h, M)) if self.direct else None

    def transpose_times(self, k, v):
        """``M_j^T v_j`` for the 3 nodes of step k; v has shape (3, n)."""
        return np.einsum("jba,jb->ja", self.M[k], v)

    def _apply_blocks(self, k, x, transpose):
        # (h * Ahat) x with Ahat[i, j] = a_ij M_j; x has shape (3, n, ...).
        M, h = self.M[k], self.h[k]
        if transpose:  # (Ahat^T x)_j = M_j^T sum_i a_ij x_i
            mixed = np.tensordot(GAUSS_A.T, x, axes=1)
            return h * np.einsum("jba,jb...->ja...", M, mixed)
        mx = np.einsum("jab,jb...->ja...", M, x)
        return h * np.tensordot(GAUSS_A, mx, axes=1)

    def solve(self, k, r, transpose=False):
        """``r`` has shape (3, n) or (3, n, q); returns the same shape."""
        if self.direct:
            K_inv = self.inv[k].T if transpose else self.inv[k]
            flat = r.reshape(K_inv.shape[0], -1)
            return (K_inv @ flat).reshape(r.shape)
        x = _neumann_series(r, lambda x: self._apply_blocks(k, x, transpose))
        if x is not None:
            return x
        K = _stage_operator(self.h[k:k + 1], self.M[k:k + 1])[0]
        K = K.T if transpose else K
        return np.linalg.solve(K, r.reshape(K.shape[0], -1)).reshape(r.shape)


class _MatrixFreeStages:
    """Transposed stage solves of the adjoint pass with vector-Jacobian products only.

    For many states the n^2 Jacobian entries per node cost more than the pass itself (Lorenz-96,
    n = 320: 0.19 s of a 0.31 s gradient). ``K^T w = r`` is solved by the Neumann series
    ``w <- r + h A^T (x) f_x^T w``, one batched VJP over the step's 3 nodes per sweep; it
    converges when ``h ||A (x) f_x|| < 1``, which accuracy-limited explicit steps satisfy. A
    step where it does not (stiff) falls back to the dense Jacobian of that step.
    """

    def __init__(self, model, theta, h, times, x):
        self.model, self.theta, self.h, self.times, self.x = model, theta, h, times, x

    def transpose_times(self, k, v):
        return self.model.vjp(self.times[k], self.x[k], self.theta, v)[0]

    def solve(self, k, r, transpose=True):
        hk = self.h[k]
        w = _neumann_series(r, lambda w: hk * self.transpose_times(k, GAUSS_A.T @ w))
        if w is not None:
            return w
        M = self.model.jac_x(self.times[k], self.x[k], self.theta)
        return _StageSolver(self.h[k:k + 1], M[None]).solve(0, r, transpose=True)


class _SparseStages:
    """Stage solves of the forward pass with the Jacobian's structural entries only.

    For many states the dense ``(3, n, n)`` Jacobians of a step cost ``n`` backward passes
    and ``n^2`` numbers per node (Lorenz-96 at n = 1,000: 8 MB per node, and a thousand
    passes per chunk); :meth:`~sklode.ODEModel.jac_x_sparse` gives the few that are not zero
    with a handful of passes per chunk. ``K x = r`` is solved by the same Neumann series as
    :class:`_StageSolver`'s, with sparse products; a step where it does not converge within
    ``_SPARSE_MAX_SWEEPS`` (stiff) is solved by a sparse LU of the same entries.
    """

    def __init__(self, h, n, rows, cols, values):
        import scipy.sparse as sp

        self.h, self.n, self.values = h, n, values  # values: (m, 3, nnz)
        # The three nodes' Jacobians of a step as one block-diagonal (3n, 3n) matrix: one
        # construction per step, one product per sweep.
        indptr = np.searchsorted(rows, np.arange(n + 1))
        block_indptr = np.concatenate([indptr[:-1] + j * rows.size for j in range(_STAGES)]
                                      + [[_STAGES * rows.size]])
        block_indices = np.concatenate([cols + j * n for j in range(_STAGES)])
        self._matrix = lambda data: sp.csr_matrix((data, block_indices, block_indptr),
                                                  shape=(_STAGES * n, _STAGES * n))
        self._step, self._current = -1, None

    def times(self, k, x):
        """``M_j x_j`` for the 3 nodes of step k; x has shape (3, n, q)."""
        if k != self._step:
            self._step, self._current = k, self._matrix(self.values[k].ravel())
        return (self._current @ x.reshape(_STAGES * self.n, -1)).reshape(x.shape)

    def solve(self, k, r):
        hk = self.h[k]
        x = _neumann_series(r, lambda x: hk * np.tensordot(GAUSS_A, self.times(k, x), axes=1),
                            max_sweeps=_SPARSE_MAX_SWEEPS)
        if x is not None:
            return x
        # A stiff step (the series diverges, or converges too slowly to pay): a sparse LU
        # of K = I - h (A (x) M), whose blocks keep M's pattern.
        import scipy.sparse as sp
        from scipy.sparse.linalg import splu

        self.times(k, np.zeros((_STAGES, self.n, 1)))  # builds this step's block-diagonal M
        blocks = [[(-hk * GAUSS_A[i, j]) * self._current[j * self.n:(j + 1) * self.n,
                                                           j * self.n:(j + 1) * self.n]
                   for j in range(_STAGES)] for i in range(_STAGES)]
        K = (sp.identity(_STAGES * self.n, format="csc") + sp.bmat(blocks, format="csc"))
        return splu(K).solve(r.reshape(_STAGES * self.n, -1)).reshape(r.shape)
