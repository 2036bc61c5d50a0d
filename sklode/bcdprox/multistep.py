"""Explicit Adams-Bashforth schemes on uniform and non-uniform grids, with the order ramp.

The step from ``t_i`` to ``t_{i+1}`` (0-based ``i``) reads

.. math:: x_{i+1} = x_i + h_i \\sum_{j=0}^{k_i - 1} B_{ij} f(x_{i-j}),
          \\qquad h_i = t_{i+1} - t_i,\\quad k_i = \\min(i + 1, m),

so the first step is Euler, the second AB2, ... until the full ``m``-step scheme (the order
ramp of seed 000, its ``k = min(i - 1, m)`` in 1-based indexing). On any grid,
``B_ij = (1/h_i) \\int_{t_i}^{t_{i+1}} L_j(s) ds`` with ``L_j`` the Lagrange basis polynomial of
the nodes ``t_i, ..., t_{i-k_i+1}``; on a uniform grid these are the textbook coefficients
(AB3: 23/12, -16/12, 5/12).
"""

from __future__ import annotations

import numpy as np

__all__ = ["adams_bashforth_coefficients", "ab_residual", "ab_combination", "ab_integrate"]


def adams_bashforth_coefficients(t, order):
    """Adams-Bashforth weights for every step of a (possibly non-uniform) grid.

    Parameters
    ----------
    t : array-like of shape (n_times,)
        Strictly increasing times.
    order : int
        Number of steps ``m >= 1`` of the full scheme (1 is explicit Euler).

    Returns
    -------
    B : ndarray of shape (n_times - 1, order)
        ``B[i, j]`` multiplies ``h_i f(x_{i-j})``; entries with ``j >= min(i + 1, order)``
        are zero (order ramp).

    Examples
    --------
    >>> B = adams_bashforth_coefficients([0.0, 0.1, 0.2, 0.3, 0.4], 3)
    >>> np.round(B * 12, 10)
    array([[ 12.,   0.,   0.],
           [ 18.,  -6.,   0.],
           [ 23., -16.,   5.],
           [ 23., -16.,   5.]])
    """
    t = np.asarray(t, dtype=np.float64)
    order = int(order)
    if order < 1:
        raise ValueError(f"order must be at least 1, got {order}.")
    if t.ndim != 1 or t.size < 2:
        raise ValueError("t must be one-dimensional with at least two times.")
    h = np.diff(t)
    if np.any(h <= 0):
        raise ValueError("t must be strictly increasing.")
    n_steps = t.size - 1
    B = np.zeros((n_steps, order))
    # Gauss-Legendre on [0, 1] with `order` nodes integrates the degree order-1 basis exactly.
    gl_nodes, gl_weights = np.polynomial.legendre.leggauss(order)
    s_q = 0.5 * (gl_nodes + 1.0)
    w_q = 0.5 * gl_weights
    steps = np.arange(n_steps)
    k_of_step = np.minimum(steps + 1, order)
    for k in range(1, order + 1):
        rows = steps[k_of_step == k]
        if rows.size == 0:
            continue
        # Nodes in units of the current step, relative to t_i: s_j = (t_{i-j} - t_i) / h_i.
        s = (t[rows[:, None] - np.arange(k)[None, :]] - t[rows, None]) / h[rows, None]
        for j in range(k):
            basis = np.ones((rows.size, s_q.size))
            for m in range(k):
                if m != j:
                    basis *= (s_q[None, :] - s[:, m, None]) / (s[:, j, None] - s[:, m, None])
            B[rows, j] = basis @ w_q
    return B


def ab_residual(X, F, t, B):
    """Residual of the Adams-Bashforth scheme for a whole trajectory.

    Parameters
    ----------
    X : ndarray of shape (n_times, n_states)
        States at the grid times.
    F : ndarray of shape (n_times, n_states)
        The vector field at those states, ``f(t_i, X[i], theta)``.
    t : ndarray of shape (n_times,)
        The grid.
    B : ndarray of shape (n_times - 1, order)
        From :func:`adams_bashforth_coefficients`.

    Returns
    -------
    R : ndarray of shape (n_times - 1, n_states)
        ``R[i] = X[i+1] - X[i] - h_i sum_j B[i, j] F[i-j]``; zero on an exact AB trajectory.
    """
    h = np.diff(t)
    return X[1:] - X[:-1] - h[:, None] * ab_combination(F, B)


def ab_combination(F, B):
    """``sum_j B[i, j] F[i - j]`` for every step ``i`` (rows before the grid start count 0).

    Parameters
    ----------
    F : ndarray of shape (n_times, ...)
        Values at the grid points (states, or Jacobians with trailing axes).
    B : ndarray of shape (n_times - 1, order)
        From :func:`adams_bashforth_coefficients`.

    Returns
    -------
    ndarray of shape (n_times - 1, ...)
        The weighted combination for every step.
    """
    n_steps, order = B.shape
    out = np.zeros((n_steps,) + F.shape[1:])
    trailing = (1,) * (F.ndim - 1)  # F may be (n_times, n_states) or (n_times, n_states, p)
    for j in range(order):
        out[j:] += B[j:, j].reshape((-1,) + trailing) * F[: n_steps - j]
    return out


def ab_integrate(f, x0, t, order):
    """Run the Adams-Bashforth recursion (with the order ramp) from ``x0`` over the grid.

    Parameters
    ----------
    f : callable
        ``f(t_i, x_i) -> ndarray of shape (n_states,)``.
    x0 : array-like of shape (n_states,)
        The state at ``t[0]``.
    t : array-like of shape (n_times,)
        Strictly increasing grid.
    order : int
        Number of steps of the full scheme.

    Returns
    -------
    X : ndarray of shape (n_times, n_states)
        A trajectory whose :func:`ab_residual` is zero.
    """
    t = np.asarray(t, dtype=np.float64)
    B = adams_bashforth_coefficients(t, order)
    h = np.diff(t)
    X = np.empty((t.size, np.size(x0)))
    F = np.empty_like(X)
    X[0] = x0
    for i in range(t.size - 1):
        F[i] = f(t[i], X[i])
        k = min(i + 1, order)
        X[i + 1] = X[i] + h[i] * (B[i, :k] @ F[i::-1][:k])
    return X

