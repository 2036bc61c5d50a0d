"""The band of ``df/dx``: which diagonals its structural entries occupy, in the order of the
states that narrows it most. The compiled CVODES driver factors a banded Jacobian in that order
(:mod:`._native`), and ``integrator="auto"`` chooses CVODES where it is narrow
(:mod:`sklode.integrate`)."""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import reverse_cuthill_mckee

__all__ = ["band_order", "band_width", "jacobian_band"]


def band_order(rows, cols, n_states):
    """The order of the states in which ``df/dx`` (entries at ``rows``, ``cols``) has the
    narrowest band, and that band.

    The natural order, unless reverse Cuthill-McKee on the symmetrised pattern gives a
    narrower LU band (:func:`band_width`): a ring like Lorenz-96
    (``x_{i-2}, x_{i-1}, x_i, x_{i+1}``, cyclic) is dense in its natural order and banded
    once its two halves are interleaved.

    Parameters
    ----------
    rows, cols : sequence of int
        The structural entries of ``df/dx``.
    n_states : int

    Returns
    -------
    position : ndarray of int (n_states,) or None
        ``position[state]``: its row and column in the reordered matrix; None for the
        natural order.
    lower, upper : int
        Diagonals below and above the main one in that order.
    """
    rows, cols = np.asarray(rows, dtype=int), np.asarray(cols, dtype=int)

    def band(r, c):
        if r.size == 0:
            return 0, 0
        return max(int(np.max(r - c)), 0), max(int(np.max(c - r)), 0)

    natural = band(rows, cols)
    if rows.size == 0 or band_width(*natural, n_states) <= 3:
        return (None, *natural)
    pattern = coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n_states,) * 2).tocsr()
    order = reverse_cuthill_mckee((pattern + pattern.T).tocsr(), symmetric_mode=True)
    position = np.empty(n_states, dtype=int)
    position[order] = np.arange(n_states)
    reordered = band(position[rows], position[cols])
    if band_width(*reordered, n_states) < band_width(*natural, n_states):
        return (position, *reordered)
    return (None, *natural)


def jacobian_band(model):
    """The band of ``df/dx``: ``(lower, upper)`` diagonals below and above the main one,
    from its structural entries (:meth:`~sklode.ODEModel.jac_x_sparsity`, found once per
    model), with the states in the order that narrows it most
    (:func:`band_order`: a ring such as Lorenz-96 is banded once
    reordered). A dense one has ``n_states - 1`` on a side."""
    rows, cols = model.jac_x_sparsity()
    return tuple(band_order(rows, cols, model.n_states)[1:])



def band_width(lower, upper, n_states):
    """Entries per column the driver's banded LU touches: ``2 lower + upper + 1`` (partial
    pivoting widens U by ``lower``), at most ``n_states``."""
    return min(2 * lower + upper + 1, n_states)
