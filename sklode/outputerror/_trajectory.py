"""The forward solution the derivative passes read (:class:`Trajectory`), and the dense
output of a solve in pieces."""

from __future__ import annotations

import numpy as np

__all__ = ["Trajectory"]


class Trajectory:
    """A forward solution kept for the derivative passes.

    Attributes
    ----------
    grid : ndarray (n_grid,)
        Integrator step boundaries merged with ``t0`` and the observation times (increasing).
    obs_index : ndarray of int (n_obs,)
        Position of each observation time in ``grid``.
    states : ndarray (n_obs, n_states)
        The solution at the observation times.
    dense : callable or None
        Dense output, ``dense(t) -> (n_states, len(t))``; None when every observation is at t0.
    x0 : ndarray (n_states,)
    n_evaluations : int
        Vector-field evaluations of the forward solve.
    native : callable or None
        For a CVODES solve (``integrator="CVODES"``, no dense output, no step grid):
        ``native(with_x0, params, start)`` solves again with forward sensitivities (the
        parameters' columns starting at ``start``, ``d x0 / d theta``, when given), which
        then replace both derivative passes while the columns are few.
    scipy : callable or None
        For a CVODES solve: the same solution by LSODA with dense output (built on first
        call), for the collocation passes where the columns are many.
    native_reads : ndarray of bool (n_params,) or None
        For a CVODES solve: the parameters its field reads (the only sensitivity columns
        it integrates).
    native_banded : bool
        For a CVODES solve: whether its ``df/dx`` is banded (its Jacobians stay on CVODES
        however many their columns).
    native_sparse : bool
        For a CVODES solve: whether its Newton solves use KLU (a network no order makes
        banded): then both its Jacobians and its gradients use CVODES' forward
        sensitivities however many their columns (measured in the comment on KLU networks
        at the top of this module).
    chained : bool
        A solve across a model's events: ``native`` chains its segments' sensitivities
        through the jumps (:func:`_trajectory_across_events`), and both derivative passes
        use it whatever the columns (there is no single dense solution to run them on).
    native_adjoint : callable or None
        For a CVODES solve of a field without switches and without doses:
        ``native_adjoint(jumps) -> (grad_x0, grad_theta)``, the gradient by CVODES' own
        adjoint (:meth:`~sklode.models._native.NativeSolver.adjoint`), which
        :func:`adjoint_gradient` takes where the forward columns are many.
    """

    def __init__(self, grid, obs_index, states, dense, x0, n_evaluations, native=None,
                 scipy=None, native_reads=None, native_banded=False, chained=False,
                 native_sparse=False, native_adjoint=None):
        self.grid = grid
        self.obs_index = obs_index
        self.states = states
        self.dense = dense
        self.x0 = x0
        self.n_evaluations = n_evaluations
        self.native = native
        self.scipy = scipy
        self.native_reads = native_reads
        self.native_banded = native_banded
        self.native_sparse = native_sparse
        self.chained = chained
        self.native_adjoint = native_adjoint


class _PiecewiseDense:
    """Dense output of a solve in segments between doses: each time is read from the segment
    whose interval ``(start, end]`` holds it (the collocation nodes are strictly inside)."""

    def __init__(self, ends, pieces):
        self.ends, self.pieces = np.asarray(ends), pieces

    def __call__(self, t):
        t = np.asarray(t, dtype=np.float64)
        which = np.minimum(np.searchsorted(self.ends, t, side="left"), len(self.pieces) - 1)
        out = np.empty((self.pieces[0](t[:1]).shape[0], t.size))
        for k in np.unique(which):
            out[:, which == k] = self.pieces[k](t[which == k])
        return out
