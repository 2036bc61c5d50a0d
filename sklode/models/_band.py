"""The structure of ``df/dx`` for the compiled CVODES driver's linear solver (:mod:`._native`):
which diagonals its structural entries occupy, in the order of the states that narrows it
most (the driver factors a banded Jacobian in that order, and ``integrator="auto"`` chooses
CVODES where it is narrow, :mod:`sklode.integrate`), or, where no order makes it narrow, its
entries as compressed columns for SuiteSparse's sparse LU, KLU (:func:`use_sparse_lu`)."""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import reverse_cuthill_mckee

__all__ = ["band_order", "band_width", "compressed_columns", "jacobian_band", "narrow_band",
           "use_sparse_lu", "AUTO_MAX_BAND", "SPARSE_LU_MIN_STATES", "SPARSE_LU_MAX_DENSITY"]

#: ``integrator="auto"`` takes CVODES above ``integrate.AUTO_MAX_STATES`` states where
#: ``df/dx`` is banded with at most this many diagonals in its LU (:func:`band_width`:
#: ``2 * lower + upper + 1``, pivoting included). The compiled driver's LU and solves then
#: cost ``n_states`` times the band, not its cube and square: a 1,000-cell
#: reaction-diffusion grid (tridiagonal, 4) solved in 9.4 ms against LSODA's 748
#: (``benchmarks/results/forward.md``).
AUTO_MAX_BAND = 32

#: KLU from this many states, where no order of the states gives a band of at most
#: :data:`AUTO_MAX_BAND` (benchmarks/results/sparse_lu.md, the PEtab collection, KLU's CPU
#: per -log L over the dense LU's: 0.07 at 500 states, 0.33 at 124, 0.59 at 109, 0.77 at
#: 75; at 33-36 states 0.55-1.57, mixed, where the run's noise is 0.86-1.04).
SPARSE_LU_MIN_STATES = 64

#: ... and where at most this fraction of ``df/dx`` is structurally nonzero: a mean field
#: (every state reads all) is dense in any order, and KLU's factorisation of it only adds
#: its bookkeeping to the dense LU's work. SalazarCavazos_MBoC2020 (75 states, 27 % nonzero)
#: still gains (0.77).
SPARSE_LU_MAX_DENSITY = 0.3


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


def use_sparse_lu(lower, upper, n_states, nnz):
    """Whether the driver factors ``I - gamma df/dx`` with KLU rather than its dense or banded
    LU: from :data:`SPARSE_LU_MIN_STATES` states where the band (in its best order, pivoting
    included) is wider than :data:`AUTO_MAX_BAND` and at most :data:`SPARSE_LU_MAX_DENSITY`
    of ``df/dx``'s entries (``nnz`` of them) are structurally nonzero."""
    return (n_states >= SPARSE_LU_MIN_STATES and not narrow_band(lower, upper, n_states)
            and nnz <= SPARSE_LU_MAX_DENSITY * n_states ** 2)


def narrow_band(lower, upper, n_states):
    """Whether a ``(lower, upper)`` band is narrow enough for CVODES' banded LU at any size
    (:data:`AUTO_MAX_BAND`)."""
    return band_width(lower, upper, n_states) <= AUTO_MAX_BAND


def compressed_columns(rows, cols, n_states):
    """``df/dx``'s structural entries and its diagonal as compressed sparse columns (the
    layout of SUNDIALS' ``CSC_MAT``), and where each entry lands.

    Parameters
    ----------
    rows, cols : sequence of int
        The structural entries of ``df/dx``, in the order the generated code writes them.
    n_states : int

    Returns
    -------
    start : ndarray of int (n_states + 1,)
        Column ``j``'s entries are ``start[j]`` to ``start[j + 1] - 1``.
    row : ndarray of int (nnz,)
        Each stored entry's row, increasing within a column.
    slot : ndarray of int (len(rows),)
        Where the generated entry ``k`` is stored.
    """
    rows = np.asarray(rows, dtype=np.int64)
    cols = np.asarray(cols, dtype=np.int64)
    diagonal = np.arange(n_states)
    # each (row, col) once, sorted by column then row; the diagonal always stored, since
    # CVODES forms I - gamma J in place only where all of it is
    keys = np.unique(np.concatenate([cols * n_states + rows, diagonal * n_states + diagonal]))
    row = keys % n_states
    start = np.searchsorted(keys // n_states, np.arange(n_states + 1))
    slot = np.searchsorted(keys, cols * n_states + rows)
    return start, row, slot
