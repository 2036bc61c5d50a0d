"""WENDy for many states: each state's weak residual weighted by its own covariance block.

The residual covariance ``C = L L^T`` of :mod:`._covariance` is ``(K d) x (K d)``: at
d = 100 states and K = 266 test functions 5.7 GB and a 26,600-wide Cholesky factorisation,
at d = 1,000 570 GB. Above ``DENSE_MAX_ROWS`` rows the weights are the inverse of its
diagonal blocks ``C_ii`` (K x K, one per state) instead of its inverse:

* the estimate stays consistent (weighted least squares with any fixed positive definite
  weight is), losing only the efficiency the states' cross-correlations would add;
* ``theta_cov`` is the sandwich ``A^-1 (G^T W C W G) A^-1`` with ``A = G^T W G`` and the
  *full* ``C``, applied through ``L^T`` without forming it: the estimator's true first-order
  covariance, not the one its weights assume;
* the errors-in-variables bias of the score (:func:`._covariance.score_bias`) is taken for
  the weights actually used.

The blocks come from two matrix products per fit for all states at once,
``(Phi * Phi) W`` with ``W[n, i] = sum_l s_l J_il(n)^2`` (``K^2 x n_times`` times
``n_times x d``) and the same with ``Phi * Phidot``, and ``df/dx`` enters through its
structural entries only (:meth:`~sklode.ODEModel.jac_x_sparse`).
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_solve, cholesky, solve_triangular

from ..models._base import sum_by_index

__all__ = ["DENSE_MAX_ROWS", "BlockWhitening", "DenseWhitening", "block_covariances",
           "block_score_bias", "sandwich_covariance"]

#: The dense residual covariance up to this many rows (K d): 8,000 rows are 0.5 GB, and a
#: fit peaks near 2 GB (Lorenz-96 with 100 states and 1,001 samples, ~15,000 rows: 7 GB).
DENSE_MAX_ROWS = 8_000


class DenseWhitening:
    """The full covariance's lower Cholesky factor ``Lc`` (the paper's weights)."""

    def __init__(self, Lc):
        self.Lc = Lc

    def white(self, a):
        """``Lc^-1 a`` for ``a`` of shape (K d,) or (K d, q)."""
        return solve_triangular(self.Lc, a, lower=True)

    def half_logdet(self):
        """``log det C / 2``."""
        return float(np.sum(np.log(np.diag(self.Lc))))


class BlockWhitening:
    """Per-state Cholesky factors of ``(1 - alpha) C_ii + alpha I``; rows are ``k d + i``.

    Parameters
    ----------
    blocks : ndarray of shape (d, K, K)
        ``C_ii`` (:func:`block_covariances`).
    alpha : float
        Regularisation, as :func:`._covariance.whiten`'s.
    """

    def __init__(self, blocks, alpha):
        d, K, _ = blocks.shape
        regular = (1.0 - alpha) * blocks
        regular[:, np.arange(K), np.arange(K)] += alpha
        self.factors = np.stack([cholesky(b, lower=True) for b in regular])  # LinAlgError
        self.K, self.d = K, d

    def _per_state(self, a, solve):
        shaped = a.reshape((self.K, self.d) + a.shape[1:])
        out = np.empty_like(shaped)
        for i in range(self.d):
            out[:, i] = solve(i, shaped[:, i])
        return out.reshape(a.shape)

    def white(self, a):
        """``W^{1/2} a`` (``W`` = the inverse blocks), for ``a`` of shape (K d,) or (K d, q)."""
        return self._per_state(
            a, lambda i, v: solve_triangular(self.factors[i], v, lower=True))

    def weigh(self, a):
        """``W a``."""
        return self._per_state(a, lambda i, v: cho_solve((self.factors[i], True), v))

    def half_logdet(self):
        """``log det`` of the block-diagonal covariance, halved."""
        return float(np.sum(np.log(np.diagonal(self.factors, axis1=1, axis2=2))))

    def inverse_blocks(self):
        """``C_ii^-1`` for every state, shape (d, K, K)."""
        eye = np.eye(self.K)
        return np.stack([cho_solve((f, True), eye) for f in self.factors])


def block_covariances(Phi, Phidot, rows, cols, values, s2):
    """The diagonal blocks ``C_ii`` of the weak residual's covariance, shape (d, K, K).

    With ``L`` as in :func:`._covariance.covariance_blocks` and ``J`` given by its structural
    entries (``rows``, ``cols``, ``values`` of shape (n_times, nnz)),

        C_ii = Phi diag(W_ii) Phi^T + Phi diag(s_i J_ii) Phidot^T + (...)^T + s_i Phidot Phidot^T,

    ``W_ii = sum_l s_l J_il^2``. Both ``Phi diag(w) Phi^T`` terms for all states are one
    product each with the ``K^2 x n_times`` matrix of ``Phi_k Phi_m`` (its upper triangle:
    the first is symmetric).
    """
    K, n_times = Phi.shape
    d = s2.size
    W = sum_by_index(values**2 * s2[cols], rows, d)  # (n_times, d)
    diagonal = np.zeros((n_times, d))
    on_diagonal = rows == cols
    diagonal[:, rows[on_diagonal]] = values[:, on_diagonal] * s2[rows[on_diagonal]]
    upper = np.triu_indices(K)
    pair_products = Phi[upper[0]] * Phi[upper[1]]  # (K(K+1)/2, n_times)
    blocks = np.zeros((d, K, K))
    blocks[:, upper[0], upper[1]] = (pair_products @ W).T
    blocks[:, upper[1], upper[0]] = blocks[:, upper[0], upper[1]]
    cross = (Phi[:, None, :] * Phidot[None, :, :]).reshape(K * K, n_times) @ diagonal
    cross = cross.T.reshape(d, K, K)  # Phi diag(s_i J_ii) Phidot^T
    drift = Phidot @ Phidot.T
    blocks += cross + cross.transpose(0, 2, 1) + s2[:, None, None] * drift
    return blocks


def _transpose_L_times(Phi, Phidot, rows, cols, values, sigma, V):
    """``L^T V`` for ``V`` of shape (K, d, q): shape (n_times, d, q).

    ``(L^T V)[n, l] = sigma_l (sum_i J_il(n) (Phi^T V_i)[n] + (Phidot^T V_l)[n])``.
    """
    PV = np.einsum("kn,kiq->niq", Phi, V)
    out = np.einsum("kn,klq->nlq", Phidot, V)
    n_times, d, q = out.shape
    terms = values[:, :, None] * PV[:, rows, :]  # (n_times, nnz, q): J_il (Phi^T V_i)
    out += sum_by_index(terms.transpose(0, 2, 1), cols, d).transpose(0, 2, 1)
    return sigma[None, :, None] * out


def sandwich_covariance(Phi, Phidot, rows, cols, values, sigma, whitening, G):
    """``A^-1 (G^T W C W G) A^-1``, ``A = G^T W G``: the covariance of the block-weighted
    estimate under the full residual covariance ``C = L L^T``, never forming ``C``.

    Parameters
    ----------
    G : ndarray of shape (K d, p)
        The weak form's Jacobian in theta at the estimate.

    Returns
    -------
    ndarray of shape (p, p)
        NaN where ``A`` is singular.
    """
    K, d = Phi.shape[0], sigma.size
    WG = whitening.weigh(G)
    A = G.T @ WG
    half = _transpose_L_times(Phi, Phidot, rows, cols, values, sigma,
                              WG.reshape(K, d, -1)).reshape(-1, G.shape[1])
    B = half.T @ half
    try:
        A_inv = np.linalg.inv(A)
    except np.linalg.LinAlgError:
        return np.full(A.shape, np.nan)
    cov = A_inv @ B @ A_inv
    return 0.5 * (cov + cov.T)


def block_score_bias(Phi, Phidot, rows, cols, values, H, s2, inverse_blocks):
    """:func:`._covariance.score_bias` for the block-diagonal weights.

    With ``C^-1`` replaced by the weights ``W`` (zero off the state blocks), only
    ``P_aa = diag(Phi^T W_aa Phi)`` and ``Q_aa = diag(Phi^T W_aa Phidot)`` remain:
    ``c_j = sum_{(a, j, l)} s_l sum_n H_ajl(n) (J_al(n) P_aa(n) + [a = l] Q_aa(n))``.
    """
    K = Phi.shape[0]
    d = inverse_blocks.shape[0]
    flat = inverse_blocks.reshape(d, K * K)
    P = flat @ (Phi[:, None, :] * Phi[None, :, :]).reshape(K * K, -1)     # (d, n_times)
    Q = flat @ (Phi[:, None, :] * Phidot[None, :, :]).reshape(K * K, -1)  # (d, n_times)
    entry = {(a, l): k for k, (a, l) in enumerate(zip(rows, cols))}  # noqa: E741
    c = np.zeros(H.n_params)
    for a, j, l, h in zip(H.equation, H.param, H.state, H.values.T):  # noqa: E741
        weight = Q[a] if a == l else np.zeros_like(h)
        if (a, l) in entry:
            weight = weight + values[:, entry[a, l]] * P[a]
        c[j] += s2[l] * float(h @ weight)
    return c
