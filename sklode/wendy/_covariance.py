"""The weak residual's covariance and WENDy's errors-in-variables bias correction (seed 001).

Notation: ``Phi``, ``Phidot`` are the test-function matrices ``(K, n_times)``; ``J`` is
``df/dx`` on the grid ``(n_times, d, d)``; ``sigma`` the noise level per state. The weak
residual ``r = Phi f(U) + Phidot U`` depends on the data through ``L`` (its first-order
derivative), and its covariance is ``L L^T`` -- assembled blockwise, never as the dense
``K d x n_times d`` tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg.lapack import dpotri

__all__ = ["FeatureGradients", "InverseDiagonals", "covariance_blocks",
           "inverse_from_cholesky",
           "noise_corrected_split", "score_bias", "whiten"]


def covariance_blocks(Phi, Phidot, J, sigma, drift_gram=None):
    """``L L^T`` of the weak residual w.r.t. the data, as a (K d, K d) matrix.

    With ``L[(k,i), (n,l)] = sigma_l (Phi[k,n] J[n,i,l] + Phidot[k,n] delta_il)``, block
    ``(i, j)`` of ``L L^T`` is

        Phi (diag(W_ij) Phi^T + diag(s_j J_ij) Phidot^T) + (Phi diag(s_i J_ji) Phidot^T)^T
        + delta_ij s_i Phidot Phidot^T,

    with ``s = sigma^2`` and ``W_ij = sum_l s_l J_il J_jl`` per point: two ``K x n_times``
    products per block (the first two terms share their left factor), none for Jacobian
    entries that vanish on the whole grid, and ``Phidot Phidot^T`` (``drift_gram``) computed
    once per fit. Never the dense ``K d x n_times d`` tensor.
    """
    K = Phi.shape[0]
    d = J.shape[1]
    s2 = sigma**2
    if drift_gram is None:
        drift_gram = Phidot @ Phidot.T
    W = np.einsum("nil,njl,l->nij", J, J, s2)
    C = np.zeros((K, d, K, d))
    for i in range(d):
        for j in range(i, d):
            block = s2[i] * drift_gram if i == j else np.zeros((K, K))
            right = None
            if np.any(W[:, i, j]):
                right = W[:, i, j, None] * Phi.T
            if np.any(J[:, i, j]):
                cross = (s2[j] * J[:, i, j])[:, None] * Phidot.T
                if i == j:  # the two cross terms are transposes of each other
                    cross = Phi @ cross
                    block = block + cross + cross.T
                else:
                    right = cross if right is None else right + cross
            if right is not None:
                block = block + Phi @ right
            if i != j and np.any(J[:, j, i]):
                block = block + (Phi @ ((s2[i] * J[:, j, i])[:, None] * Phidot.T)).T
            C[:, i, :, j] = block
            C[:, j, :, i] = block.T
    return C.reshape(K * d, K * d)


def inverse_from_cholesky(Lc):
    """``C^-1`` from the lower Cholesky factor of ``C`` (LAPACK potri), symmetric."""
    inv, info = dpotri(Lc, lower=1)
    if info != 0:
        raise np.linalg.LinAlgError(f"potri failed with info={info}")
    return np.tril(inv) + np.tril(inv, -1).T


@dataclass
class FeatureGradients:
    """The nonzero slices of ``H[n, a, j, l] = d^2 f_a / (dtheta_j dx_l)`` on the grid.

    ``values[:, k]`` is ``H[:, equation[k], param[k], state[k]]``; slices that vanish at every
    point are not stored (a model's features touch few states: Lorenz-96 with one forcing per
    state would otherwise hold ``n_times * d^2 * n_params`` numbers, 0.5 GB at d = 40).
    """

    equation: np.ndarray
    param: np.ndarray
    state: np.ndarray
    values: np.ndarray  # (n_times, n_slices)
    n_params: int

    @classmethod
    def from_dense(cls, H):
        """From a dense ``(n_times, n_states, n_params, n_states)`` array."""
        nonzero = np.any(H != 0, axis=0)
        equation, param, state = np.nonzero(nonzero)
        return cls(equation, param, state, H[:, equation, param, state], H.shape[2])


def score_bias(Phi, Phidot, J, H, s2, C_inv):
    """Mean of the weighted normal equations' score at the true theta, from noisy regressors.

    The IRLS solves ``G^T C^-1 (G theta - b) = 0`` with ``G`` built from the noisy data. Its
    first-order noise ``A_j eps`` (column ``j`` of ``G``) correlates with the residual's
    ``L eps``, so the score has mean ``c_j = tr(A_j^T C^-1 L)`` (noise standardised, ``sigma``
    inside ``A`` and ``L``): an O(sigma^2) bias of theta that shrinks the coefficients of
    nonlinear terms (FitzHugh-Nagumo at 20 % noise: the cubic coefficient by 2 standard
    errors). Subtracting ``c`` is the corrected score of errors-in-variables regression.

    With ``A_j[(k,a), (n,l)] = sigma_l Phi[k,n] H[n,a,j,l]`` (``H``: :class:`FeatureGradients`)
    and ``L`` as in :func:`covariance_blocks`,

        c_j = sum_{a,l,n} s_l H[n,a,j,l] (sum_i J[n,i,l] P_ai[n] + Q_al[n]),

    with ``P_ai = diag(Phi^T Cinv_ai Phi)`` and ``Q_al = diag(Phi^T Cinv_al Phidot)``: one
    ``K x K x n_times`` product per block of ``C^-1`` that a nonzero slice reaches, never ``L``.
    """
    diagonals = InverseDiagonals(Phi, Phidot, C_inv)
    coupled = np.any(J != 0, axis=0)  # coupled[i, l]: state l enters equation i
    c = np.zeros(H.n_params)
    for a, j, l, h in zip(H.equation, H.param, H.state, H.values.T):  # noqa: E741
        weight = diagonals.Q(a, l).copy()
        for i in np.flatnonzero(coupled[:, l]):
            weight += J[:, i, l] * diagonals.P(a, i)
        c[j] += s2[l] * float(h @ weight)
    return c


class InverseDiagonals:
    """The per-time diagonals of ``C^-1`` seen through the test functions, computed on demand.

    ``P(a, i) = diag(Phi^T Cinv_ai Phi)`` and ``Q(a, l) = diag(Phi^T Cinv_al Phidot)``, each a
    ``(n_times,)`` array, with ``Cinv_xy`` the ``K x K`` block of ``C^-1`` between states x
    and y. Each costs a ``K x K x n_times`` product, so only the blocks a caller reaches are
    formed, and each once: the score's bias (:func:`score_bias`) and the weak likelihood's
    gradient (:mod:`._likelihood`) need the same ones.
    """

    def __init__(self, Phi, Phidot, C_inv):
        K = Phi.shape[0]
        d = C_inv.shape[0] // K
        self.Phi, self.Phidot = Phi, Phidot
        self.blocks = np.ascontiguousarray(C_inv.reshape(K, d, K, d).transpose(1, 3, 0, 2))
        self._times_phi, self._P, self._Q = {}, {}, {}

    def _product(self, x, y):  # Cinv_xy @ Phi
        if (x, y) not in self._times_phi:
            self._times_phi[x, y] = self.blocks[x, y] @ self.Phi
        return self._times_phi[x, y]

    def P(self, a, i):
        """``diag(Phi^T Cinv_ai Phi)``; ``P(a, i) = P(i, a)``: a scalar equals its transpose."""
        key = (min(a, i), max(a, i))
        if key not in self._P:
            self._P[key] = np.einsum("kn,kn->n", self.Phi, self._product(*key))
        return self._P[key]

    def Q(self, a, l):  # noqa: E741
        """``diag(Phi^T Cinv_al Phidot)``, from ``Cinv_al^T = Cinv_la``."""
        if (a, l) not in self._Q:
            self._Q[a, l] = np.einsum("kn,kn->n", self._product(l, a), self.Phidot)
        return self._Q[a, l]


def whiten(C, alpha):
    """Cholesky factor of ``(1 - alpha) C + alpha I`` (lower)."""
    reg = (1.0 - alpha) * C
    reg[np.diag_indices_from(reg)] += alpha
    return np.linalg.cholesky(reg)


def noise_corrected_split(model, t, U, f0, F1, s2):
    """Affine split of ``f`` without the mean the noise adds to it, and ``d^2 f/dtheta dx``.

    ``E[f(u + eps)] = f(u) + 1/2 sum_l s_l d^2 f/du_l^2`` to second order (exact for the
    cubic and quadratic terms of the paper's problems), so the features evaluated at the
    noisy data lose that half-curvature, itself affine in theta. The returned
    :class:`FeatureGradients` hold the derivative of feature column ``j`` of equation ``a``
    in state ``l``, for the score's bias (:func:`score_bias`).
    """
    p = F1.shape[-1]
    basis = np.eye(p)
    sparse = U.shape[1] >= SPARSE_MIN_STATES

    def entries(theta):
        """``df/dx`` at ``theta`` as (equations, states, values per point): the structural
        entries for many states, every entry (row-major) otherwise."""
        if sparse:
            return model.jac_x_sparse(t, U, theta)
        J = model.jac_x(t, U, theta)
        rows, cols = np.indices(J.shape[1:]).reshape(2, -1)
        return rows, cols, J.reshape(J.shape[0], -1)

    def affine_in_x(gradient):
        # The same x-gradient at every point: no curvature to compute (most of the paper's
        # features, e.g. u; u1 u2 has a varying gradient and zero curvature).
        return bool(np.all(gradient == gradient[:1]))

    rows, cols, J0 = entries(np.zeros(p))
    zero = np.zeros_like(U)
    m0 = zero if affine_in_x(J0) else 0.5 * model.curvature_x(t, U, np.zeros(p), s2)
    M1 = np.empty_like(F1)
    slices = []  # (equation, param, state, values), one parameter at a time: no n d^2 p array
    for j in range(p):
        r, _, Jj = entries(basis[j])
        if r.size != rows.size:  # the sparse pattern was widened: read J0 again on it
            rows, cols, J0 = entries(np.zeros(p))
        gradient = Jj - J0  # (n_times, entries)
        M1[..., j] = zero if affine_in_x(gradient) else \
            0.5 * model.curvature_x(t, U, basis[j], s2) - m0
        for k in np.flatnonzero(np.any(gradient != 0, axis=0)):
            slices.append((rows[k], j, cols[k], gradient[:, k]))
    equation, param, state, values = zip(*slices) if slices else ((), (), (), ())
    H = FeatureGradients(np.array(equation, dtype=int), np.array(param, dtype=int),
                         np.array(state, dtype=int),
                         np.column_stack(values) if values else np.zeros((U.shape[0], 0)), p)
    return f0 - m0, F1 - M1, H


#: From this many states the split reads ``df/dx`` through its structural entries
#: (:meth:`~sklode.ODEModel.jac_x_sparse`): the dense ``(n_times, d, d)`` per parameter
#: would be 8 GB at d = 1,000 and 1,001 samples.
SPARSE_MIN_STATES = 64

