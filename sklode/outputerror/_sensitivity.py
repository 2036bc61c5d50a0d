"""Exact derivatives of ODE solutions on the stored forward trajectory (AdjointODE numerics).

One forward solve with dense output fixes the trajectory x(t) and the integrator's own step
grid (merged with the observation times). On that grid both derivative passes integrate the
*linear* variational equations with the 3-stage Gauss–Legendre collocation method (order 6,
A-stable, so stiff problems solved with BDF/Radau/LSODA are fine):

* forward sensitivities (seed 002, eq. 10): ``S' = f_x S + [0 | f_theta]``, ``S(t0) = [I | 0]``;
* the continuous adjoint (seed 002, eqs. 13-18): ``-p' = f_x^T p`` with jumps ``g_i`` at the
  observation times, ``grad_x0 = p(t0)``, ``grad_theta = integral of f_theta^T p dt``.

Because the equations are linear in S (or p), the state only enters through the Jacobians at
the collocation nodes, whose times are known once the forward solve is done: every Jacobian is
evaluated in one batched torch call per chunk of steps, never point by point inside an
integrator. Gauss collocation is symplectic, so the backward pass is exactly the discrete
adjoint of the forward-sensitivity pass: the two gradients agree to round-off, and both
approximate the continuous derivatives to the order of the forward solve. The state is never
re-integrated backwards (backsolve adjoints are 100-1000x off on chaotic horizons).

All functions take and return numpy arrays.
"""

from __future__ import annotations

import numpy as np

from .._events import add_doses, bolus_only, dose_segments, model_events, solve_across_doses
from ..exceptions import IntegrationError
from ..integrate import (
    _max_steps,
    _resolve_integrator,
    blowup_limit,
    narrow_band,
    native_solver_for,
    raise_native_failure,
    solve,
    state_atol,
)
from ._trajectory import Trajectory, _PiecewiseDense
from ._segments import segmented_trajectory
from ._stages import (
    _CHUNK_ENTRIES,
    _STAGES,
    GAUSS_A,
    GAUSS_B,
    _chunks,
    _MatrixFreeStages,
    _nodes,
    _SparseStages,
    _StageSolver,
)

__all__ = ["Trajectory", "adjoint_gradient", "forward_trajectory", "sensitivities",
           "uses_native_adjoint"]


# CVODES' forward sensitivities cost grows with columns x states; above these products a
# gradient is CVODES' own adjoint where the solve has one (Trajectory.native_adjoint: one
# backward solve whatever the columns), and a Jacobian (or a gradient without it) the
# collocation passes on a LSODA trajectory. benchmarks/results/crossover.md: on the
# non-stiff Lorenz-96 with every x0 estimated the adjoint wins from 10 x 11 (20 x 21 = 420:
# 0.027 s against the forward sensitivities' 0.094; 80 x 81: 0.18 against 0.97); on the
# stiff PEtab problems from about 1,000-2,000 (Alkan 36 x 89 = 3,204: 3.6 against 13.8;
# Raimundez 2.3x; Zheng 930 1.3x; Bachmann 25 x 59 = 1,475 loses, 1.9 against 1.2, where a
# limit above it would cost Lorenz-96 at 40 x 41 = 1,640 a factor of 5: 0.23 against 0.047). Before the CVODES
# adjoint the collocation passes lost to CVODES on every stiff problem up to Zheng's 705.
NATIVE_MAX_WORK_JACOBIAN = 2000
NATIVE_MAX_WORK_GRADIENT = 1000
# A Jacobian of a system whose df/dx is banded (the driver's LU touching at most
# integrate.AUTO_MAX_BAND entries per column) stays on CVODES whatever its columns: each
# column's corrector solve then costs n times the band, as the collocation pass's sparse
# sweeps do, and CVODES takes fewer steps. Reaction-diffusion with every x0 estimated
# (benchmarks/scale.py, 101 times): d = 200, 202 columns, 1.9 CPU s per Gauss-Newton
# iteration against 8.8 on LSODA's collocation pass; d = 400, 10.0 against 40.7.
# The gradient keeps its limit: the adjoint's one backward solve wins there.
# A network whose Newton solves use KLU (native_sparse) keeps its Jacobians on CVODES'
# forward sensitivities whatever the columns and takes its gradient from CVODES' adjoint (or,
# without one, as J^T r from the forward sensitivities): the collocation passes run on LSODA's
# trajectory, and LSODA on a stiff network of that size is slow. Smith_BMCSystBiol2013 (109
# states, 35 experiments): 218 CPU s per gradient by the adjoint on LSODA's trajectory, 10.4
# s as J^T r; Chen_MSB2009 (500 states): J^T r 174 s, CVODES' adjoint 9.8 s (crossover.md).
# Above this many states the adjoint pass uses VJPs instead of materialised Jacobians
# (Lorenz-96 gradient: 0.33 -> 0.12 s at n = 320; at n = 60 materialising was 2x faster).
_MATRIX_FREE_MIN_STATES = 128
# From this many states the forward sensitivities read df/dx through its structural entries
# (Lorenz-96, 201 times, every x0: d = 70 0.98 s against 3.2 dense, d = 100 1.5 against 8.4;
# at d = 50 dense is faster).
_SPARSE_FORWARD_MIN_STATES = 64


def forward_trajectory(model, theta, x0, t0, t_obs, *, integrator, rtol, atol,
                       max_evaluations=None, doses=None, prefetch=None):
    """Solve from ``(t0, x0)`` to the last of the increasing times ``t_obs`` (all ``>= t0``)
    and keep what the derivative passes need.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    theta : ndarray of shape (n_params,)
        Parameters.
    x0 : ndarray of shape (n_states,)
        State at ``t0``.
    t0 : float
        Start time.
    t_obs : ndarray of shape (n_obs,)
        Increasing observation times, all at or after ``t0``.
    integrator : str
        Forward solver (:data:`sklode.integrate.INTEGRATORS`).
    rtol : float
        Relative tolerance.
    atol : float
        Absolute tolerance.
    max_evaluations : int, optional
        Give up (``IntegrationError``) after this many field evaluations.
    doses : sequence of Dose or (float, int, float), optional
        Dosing records, states as indices. Boluses ``(time, state, amount)``: the solve
        runs in segments between them; the sensitivities and the adjoint are continuous
        across a bolus of known size, so the derivative passes need only the dose times on
        the grid. Infusions, steady states and resets: a solve in segments whose
        sensitivities are chained (:mod:`._segments`).
    prefetch : (bool, array-like of int or None, ndarray or None), optional
        A request ``(with_x0, params, start)`` that :func:`sensitivities` will make: on the
        CVODES path the states are then solved together with those sensitivities (one solve
        instead of a states-only solve and a second one with sensitivities, as AMICI does
        when a gradient is wanted), kept for that request. Ignored by the scipy path.

    Returns
    -------
    Trajectory
        The solution at the observation times, the step grid and the dense output.

    Raises
    ------
    IntegrationError
        On blow-up or integrator failure.
    """
    t_obs = np.asarray(t_obs, dtype=np.float64)
    x0 = np.asarray(x0, dtype=np.float64)
    t_end = float(t_obs[-1])
    if t_end <= t0:  # every observation at t0: nothing to integrate
        grid = np.array([t0])
        return Trajectory(grid, np.zeros(t_obs.size, dtype=int),
                          np.tile(x0, (t_obs.size, 1)), None, x0, n_evaluations=0)
    if model_events(model) or not bolus_only(doses):
        return segmented_trajectory(model, theta, x0, t0, t_obs, integrator=integrator,
                                    rtol=rtol, atol=atol, max_evaluations=max_evaluations,
                                    doses=doses, solve_piece=_trajectory,
                                    piece_sensitivities=sensitivities)
    return _trajectory(model, theta, x0, t0, t_obs, integrator=integrator, rtol=rtol,
                       atol=atol, max_evaluations=max_evaluations, doses=doses,
                       prefetch=prefetch)


def _trajectory(model, theta, x0, t0, t_obs, *, integrator, rtol, atol, max_evaluations,
                doses, prefetch):
    """:func:`forward_trajectory` of a solve without events."""
    t_end = float(t_obs[-1])
    method = _resolve_integrator(integrator)
    native = native_solver_for(model, method)
    if native is not None:
        return _native_trajectory(native, model, theta, x0, t0, t_obs, doses, rtol=rtol,
                                  atol=atol, max_steps=_max_steps(max_evaluations),
                                  prefetch=prefetch)
    if method in ("CVODES", "auto"):
        integrator = "LSODA"
    if doses:
        return _trajectory_with_doses(model, theta, x0, t0, t_obs, doses, integrator=integrator,
                                      rtol=rtol, atol=atol, max_evaluations=max_evaluations)
    sol = solve(model, theta, x0, (t0, t_end), t_eval=t_obs[t_obs > t0], integrator=integrator,
                rtol=rtol, atol=atol, dense_output=True, max_evaluations=max_evaluations)
    states = np.empty((t_obs.size, x0.size))
    states[t_obs <= t0] = x0
    states[t_obs > t0] = sol.y.T
    grid = np.union1d(np.union1d(sol.sol.ts, t_obs), [t0])
    grid = grid[grid >= t0]
    obs_index = np.searchsorted(grid, t_obs)
    return Trajectory(grid, obs_index, states, sol.sol, x0, n_evaluations=sol.nfev)


def _trajectory_with_doses(model, theta, x0, t0, t_obs, doses, **options):
    """:func:`forward_trajectory` in segments between the doses (an observation at a dose's
    time sees the state before it)."""
    ends, pieces, steps, n_evaluations = [], [], [np.array([t0])], [0]

    def segment(start, end, x, t_eval, inside, index):
        sol = solve(model, theta, x, (start, end), t_eval=t_eval, dense_output=True, **options)
        ends.append(end)
        pieces.append(sol.sol)
        steps.append(sol.sol.ts)
        n_evaluations[0] += sol.nfev
        return sol.y.T

    states = solve_across_doses(segment, x0, t0, t_obs, doses)
    states[t_obs <= t0] = x0
    n_evaluations = n_evaluations[0]
    grid = np.union1d(np.concatenate(steps), t_obs)
    grid = grid[grid >= t0]
    return Trajectory(grid, np.searchsorted(grid, t_obs), states,
                      _PiecewiseDense(ends, pieces), np.asarray(x0, dtype=np.float64),
                      n_evaluations=n_evaluations)


def _native_solve(native, model, theta, x0, t0, t_obs, doses, options, columns=None):
    """States (and sensitivities in ``columns``: ``(with_x0, parameter indices)``) at
    ``t_obs`` by the compiled CVODES solve, in segments between the doses (the
    sensitivities are continuous across a bolus of known size)."""
    n = x0.size
    S = S_out = None
    if columns is not None:
        with_x0, params, start_derivative = columns
        S = np.zeros((n, (n if with_x0 else 0) + params.size))
        if with_x0:
            S[:, :n] = np.eye(n)
        if start_derivative is not None:  # x0 that depends on theta: AMICI's sx0
            S[:, n if with_x0 else 0:] = start_derivative[:, params]
        S_out = np.empty((t_obs.size, n, S.shape[1]))
        S_out[t_obs <= t0] = S
    limit = options.pop("blowup")
    # the boluses go into the C solve itself: a restart per dose, one call per solve (the
    # sensitivities are continuous across a known amount)
    at_start, later = dose_segments(doses or [], t0, float(t_obs[-1]))
    start = add_doses(x0, at_start)
    after = t_obs > t0
    states = np.empty((t_obs.size, x0.size))
    states[~after] = x0
    if after.any():
        boluses = [(time, state, amount) for time, amounts in later
                   for state, amount in sorted(amounts.items())]
        out, sens, info = native(t0, start, theta, t_obs[after], s0=S,
                                 sens_x0=columns is not None and columns[0],
                                 sens_params=None if S is None else columns[1], blowup=limit,
                                 doses=boluses, **options)
        raise_native_failure(model, theta, (t0, float(t_obs[-1])), info, limit)
        states[after] = out
        if S is not None:
            S_out[after] = sens
        return states, S_out, info["n_rhs"]
    return states, S_out, 0


def _native_trajectory(native, model, theta, x0, t0, t_obs, doses, prefetch=None,
                       **options):
    """:func:`forward_trajectory` by the compiled CVODES solve: the states at ``t_obs`` and
    a closure that solves again with forward sensitivities (only the parameters the field
    depends on are integrated; the other columns are zero), or returns those solved with
    the states when ``prefetch`` asked for them."""
    theta = np.asarray(theta, dtype=np.float64)
    given_atol = options["atol"]  # the scipy fallback below adds the offsets itself
    options["blowup"] = blowup_limit(x0, model, theta)
    options["atol"] = state_atol(model, theta, options["rtol"], given_atol)
    cache = {}

    def request(with_x0, params, start):
        read = native.param_in_field
        if start is not None:  # a parameter that sets the start has a column too
            read = read | np.any(start != 0, axis=0)
        columns = _columns_read(read, params)  # the others are zero
        return columns, (with_x0, columns.tobytes(), None if start is None else start.tobytes())

    def with_sensitivities(with_x0, columns, start):
        states, S, n_evaluations = _native_solve(native, model, theta, x0, t0, t_obs, doses,
                                                 dict(options),
                                                 columns=(with_x0, columns, start))
        n = x0.size
        offset = n if with_x0 else 0
        full = np.zeros(S.shape[:2] + (offset + model.n_params,))
        full[..., :offset] = S[..., :offset]
        full[..., offset + columns] = S[..., offset:]
        return states, full, n_evaluations

    states = None
    # (the work test of sensitivities(): beyond it the scipy path is taken)
    banded = narrow_band(*native.band, native.n_states)
    if prefetch is not None and (_native_work(None, prefetch[0], prefetch[1], n=x0.size,
                                              reads=native.param_in_field)
                                 <= NATIVE_MAX_WORK_JACOBIAN or banded or native.sparse):
        columns, key = request(*prefetch)
        try:
            states, cache[key], n_evaluations = with_sensitivities(prefetch[0], columns,
                                                                   prefetch[2])
        except IntegrationError:  # the sensitivities failed: the states alone may not
            cache.clear()
    if states is None:
        states, _, n_evaluations = _native_solve(native, model, theta, x0, t0, t_obs, doses,
                                                 dict(options))

    def sensitivities_at(with_x0, params=None, start=None):
        columns, key = request(with_x0, params, start)
        if key not in cache:
            cache[key] = with_sensitivities(with_x0, columns, start)[1]
        return cache[key]

    rebuilt = []

    def scipy():
        if not rebuilt:
            rebuilt.append(forward_trajectory(model, theta, x0, t0, t_obs, integrator="LSODA",
                                              rtol=options["rtol"], atol=given_atol,
                                              doses=doses))
        return rebuilt[0]

    native_adjoint = None
    if not doses and native.switch_times is not None and t_obs[-1] > t0:
        def native_adjoint(jumps):
            return _native_adjoint(native, model, theta, x0, t0, t_obs, jumps, options)

    grid = np.union1d([t0], t_obs)
    return Trajectory(grid, np.searchsorted(grid, t_obs), states, None, x0, n_evaluations,
                      native=sensitivities_at, scipy=scipy,
                      native_reads=native.param_in_field, native_banded=banded,
                      native_sparse=native.sparse, native_adjoint=native_adjoint)


def _native_adjoint(native, model, theta, x0, t0, t_obs, jumps, options):
    """``(grad_x0, grad_theta)`` by CVODES' adjoint, in segments between the times the
    field's switches change (their time constant: the state and lambda are continuous
    there, and the switch times do not move with theta). The states at the switch times
    come from one plain solve; each segment's gradient in its start is the next earlier
    segment's last jump."""
    ends = np.unique(native.switch_times)
    ends = ends[(ends > t0) & (ends < t_obs[-1])]
    starts = np.concatenate([[t0], ends])
    x_starts = np.vstack([x0[None], _native_solve(native, model, theta, x0, t0, ends, None,
                                                  dict(options))[0]]) if ends.size else x0[None]
    g_start, g_theta = np.zeros(x0.size), np.zeros(model.n_params)
    stops = np.concatenate([ends, [t_obs[-1]]])
    for start, stop, x in reversed(list(zip(starts, stops, x_starts))):
        inside = (t_obs > start) & (t_obs <= stop)
        times = np.union1d(t_obs[inside], [stop])
        part = np.zeros((times.size, x0.size))
        np.add.at(part, np.searchsorted(times, t_obs[inside]), jumps[inside])
        part[-1] += g_start  # the later segments' gradient in this one's end state
        _, g_start, g_part, info = native.adjoint(start, x, theta, times, part, **options)
        raise_native_failure(model, theta, (start, stop), info, options["blowup"])
        g_theta += g_part
    return g_start + jumps[t_obs <= t0].sum(axis=0), g_theta  # data at t0: lambda's jump


def _columns_read(read, params):
    """The parameters among ``params`` (all when None) that the field reads (``read``, a
    boolean mask): the sensitivity columns CVODES integrates."""
    if params is not None:
        wanted = np.zeros_like(read)
        wanted[params] = True
        read = read & wanted
    return np.flatnonzero(read)


def _native_work(traj, with_x0, params=None, n=None, reads=None):
    """States x sensitivity columns of a CVODES request: what its cost grows with (of a
    trajectory, or of ``n`` states whose field reads ``reads`` before it is solved)."""
    n = traj.x0.size if traj is not None else n
    reads = traj.native_reads if traj is not None else reads
    return n * ((n if with_x0 else 0) + _columns_read(reads, params).size)


def _native_sensitivities(traj, with_x0, params=None, start=None):
    """CVODES' forward sensitivities along ``traj``, or None where CVODES fails on them.

    The solve with sensitivities can fail where the states' own solve passed (derivatives
    of 1e15 when a parameter is 1e-8 and a state 1e7; with the sensitivities in CVODES'
    error test, 2 of Fujita's 20 random starts died of it mid-fit). The caller then runs the
    scipy path (LSODA's trajectory, collocation sensitivities or the adjoint) rather than
    fail a fit at a point whose cost is known.
    """
    try:
        return traj.native(with_x0, params, start)
    except IntegrationError:
        return None


# ----------------------------------------------------------------------------- the two passes
def sensitivities(model, theta, traj, with_x0=True, params=None, start=None,
                  fall_back=True):
    """Forward sensitivities of the state at the observation times.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    theta : ndarray of shape (n_params,)
        Parameters of the forward solve.
    traj : Trajectory
        The stored forward solution (:func:`forward_trajectory`).
    with_x0 : bool, default=True
        Include the derivatives in the initial state.
    params : array-like of int, optional
        The parameters whose columns are needed (default all). The CVODES path integrates
        only those (the others are returned as zeros); the scipy path computes every one.
    start : ndarray of shape (n_states, n_params), optional
        ``d x0 / d theta`` where the initial state depends on the parameters
        (:meth:`~sklode.ODEModel.initial_offsets`): the parameters' columns start there,
        so they are total derivatives.
    fall_back : bool, default=True
        Where CVODES fails on the sensitivities, compute them on LSODA's trajectory (True)
        or raise :class:`~sklode.exceptions.IntegrationError` (False: a trust region
        then rejects the point, as where AMICI fails; LSODA's trajectory across a jump in
        the field cost Weber's Jacobian 15 CPU s, CVODES' with its held switch 40 ms).

    Returns
    -------
    S : ndarray of shape (n_obs, n_states, q)
        ``dx(t_i)/d[x0, theta]`` with ``q = n_states + n_params`` (x0 columns first), or
        ``q = n_params`` when ``with_x0`` is False.
    """
    if traj.native is not None:
        if (_native_work(traj, with_x0, params) <= NATIVE_MAX_WORK_JACOBIAN
                or traj.native_banded or traj.native_sparse or traj.chained):
            S = _native_sensitivities(traj, with_x0, params, start)  # CVODES' own
            if S is not None:
                return S
            if not fall_back:
                raise IntegrationError("CVODES could not integrate the sensitivities at "
                                       "this point.")
        traj = traj.scipy()  # many columns: the collocation pass on LSODA's trajectory
    n = traj.x0.size
    p = model.n_params
    q = (n if with_x0 else 0) + p
    S = np.zeros((n, q))
    if with_x0:
        S[:, :n] = np.eye(n)
    if start is not None:
        S[:, q - p:] = start
    n_steps = traj.grid.size - 1
    out = np.empty((traj.grid.size, n, q))
    out[0] = S
    if n >= _SPARSE_FORWARD_MIN_STATES:  # many states: the Jacobians' structural entries
        return _sparse_sensitivities(model, theta, traj, S, out, q - p)[traj.obs_index]
    for lo, hi in _chunks(n_steps, n):
        h, times, x = _nodes(traj, lo, hi)
        M = model.jac_x(times, x, theta)                    # (m, 3, n, n)
        G = np.zeros(M.shape[:3] + (q,))
        G[..., q - p:] = model.jac_theta(times, x, theta)   # (m, 3, n, p)
        stages = _StageSolver(h, M)
        if stages.direct:  # whole-chunk step maps, then one small product per step
            T, U = _forward_step_maps(h, M, G, stages.inv)
            for k in range(hi - lo):
                S = T[k] @ S + U[k]
                out[lo + k + 1] = S
            continue
        for k in range(hi - lo):
            hk = h[k]
            rhs = S[None] + hk * np.tensordot(GAUSS_A, G[k], axes=1)
            Z = stages.solve(k, rhs)
            slope = np.einsum("jab,jbq->jaq", M[k], Z) + G[k]
            S = S + hk * np.tensordot(GAUSS_B, slope, axes=1)
            out[lo + k + 1] = S
    return out[traj.obs_index]


def _sparse_sensitivities(model, theta, traj, S, out, first_param_column):
    """The forward pass of :func:`sensitivities` with :class:`_SparseStages`; fills and
    returns ``out`` (every grid time)."""
    n_steps = traj.grid.size - 1
    n, q = S.shape
    rows, cols = model.jac_x_sparsity()
    per_step = _STAGES * (max(rows.size, n) + n * model.n_params)
    size = max(1, _CHUNK_ENTRIES // per_step)
    for lo in range(0, n_steps, size):
        hi = min(lo + size, n_steps)
        h, times, x = _nodes(traj, lo, hi)
        rows, cols, values = model.jac_x_sparse(times, x, theta)   # (m, 3, nnz)
        G = np.zeros(x.shape + (q,))
        G[..., first_param_column:] = model.jac_theta(times, x, theta)  # (m, 3, n, p)
        stages = _SparseStages(h, n, rows, cols, values)
        for k in range(hi - lo):
            hk = h[k]
            Z = stages.solve(k, S[None] + hk * np.tensordot(GAUSS_A, G[k], axes=1))
            slope = stages.times(k, Z) + G[k]
            S = S + hk * np.tensordot(GAUSS_B, slope, axes=1)
            out[lo + k + 1] = S
    return out


def _forward_step_maps(h, M, G, K_inv):
    """``S_{k+1} = T_k S_k + U_k`` for every step of a chunk, batched over the steps.

    With stage values ``Z = K^-1 (1 (x) S + h (A (x) I) G)`` and
    ``S_{k+1} = S + h sum_j b_j (M_j Z_j + G_j)``: ``T = I + h (b^T (x) I) M K^-1 (1 (x) I)`` and
    ``U = h (b^T (x) I) (M K^-1 h (A (x) I) G + G)``.
    """
    m, s, n, _ = M.shape
    KE = K_inv.reshape(m, s * n, s, n).sum(axis=2).reshape(m, s, n, n)  # K^-1 (1 (x) I)
    T = np.eye(n) + h[:, None, None] * np.einsum("j,mjab,mjbc->mac", GAUSS_B, M, KE)
    AG = h[:, None, None, None] * np.einsum("ij,mjaq->miaq", GAUSS_A, G)
    Psi = (K_inv @ AG.reshape(m, s * n, -1)).reshape(AG.shape)
    U = h[:, None, None] * np.einsum("j,mjaq->maq", GAUSS_B,
                                     np.einsum("mjab,mjbq->mjaq", M, Psi) + G)
    return T, U


def _adjoint_step_maps(h, M, K_inv):
    """The transposed recursion, batched over a chunk's steps.

    Per step: ``w = K^-T R lam`` with ``R = [b_j M_j^T]``; the cotangents of the nodes'
    ``f_theta`` are ``C lam`` with ``C = h (b (x) I) + h^2 (A^T (x) I) K^-T R``, and
    ``lam <- Q lam`` with ``Q = I + h sum_j (K^-T R)_j``.
    """
    m, s, n, _ = M.shape
    R = (GAUSS_B[None, :, None, None] * M.transpose(0, 1, 3, 2)).reshape(m, s * n, n)
    P = (K_inv.transpose(0, 2, 1) @ R).reshape(m, s, n, n)
    Q = np.eye(n) + h[:, None, None] * P.sum(axis=1)
    C = (h[:, None, None, None] * GAUSS_B[None, :, None, None] * np.eye(n)
         + h[:, None, None, None] ** 2 * np.einsum("ij,mjab->miab", GAUSS_A.T, P))
    return C, Q


def uses_native_adjoint(traj):
    """Whether :func:`adjoint_gradient` takes CVODES' adjoint for ``traj``: where it has one
    and the forward columns are many, or the network is on KLU."""
    if traj.native_adjoint is None:
        return False
    return traj.native_sparse or _native_work(traj, True) > NATIVE_MAX_WORK_GRADIENT


def adjoint_gradient(model, theta, traj, jumps):
    """Gradient of a cost whose derivative with respect to ``x(t_i)`` is ``jumps[i]``.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    theta : ndarray of shape (n_params,)
        Parameters of the forward solve.
    traj : Trajectory
        The stored forward solution (:func:`forward_trajectory`).
    jumps : ndarray of shape (n_obs, n_states)
        ``dL/dx(t_i)`` (for weighted least squares ``P^T (P x_i - y_i) / sigma_i^2``).

    Returns
    -------
    grad_x0 : ndarray (n_states,)
        ``p(t0)``.
    grad_theta : ndarray (n_params,)
        ``integral of f_theta^T p dt`` by the collocation quadrature.
    """
    if traj.native is not None:
        if uses_native_adjoint(traj):
            try:
                return traj.native_adjoint(jumps)  # many columns: CVODES' own adjoint
            except IntegrationError:  # its backward solve failed: the forward passes below
                pass
        if (_native_work(traj, True) <= NATIVE_MAX_WORK_GRADIENT or traj.chained
                or traj.native_sparse):
            S = _native_sensitivities(traj, True)  # few columns: CVODES' own
            if S is not None:
                g = np.einsum("ia,iaq->q", jumps, S)
                return g[:traj.x0.size], g[traj.x0.size:]
        traj = traj.scipy()  # many: the adjoint on LSODA's trajectory
    n = traj.x0.size
    n_steps = traj.grid.size - 1
    g = np.zeros((traj.grid.size, n))
    np.add.at(g, traj.obs_index, jumps)
    lam = g[-1].copy()
    grad_theta = np.zeros(model.n_params)
    matrix_free = n >= _MATRIX_FREE_MIN_STATES
    for lo, hi in reversed(_chunks(n_steps, n)):
        h, times, x = _nodes(traj, lo, hi)
        if matrix_free:  # n^2 Jacobian entries per node would dominate: use VJPs instead
            stages = _MatrixFreeStages(model, theta, h, times, x)
        else:
            stages = _StageSolver(h, model.jac_x(times, x, theta))
        cotangents = np.empty((hi - lo, _STAGES, n))
        if not matrix_free and stages.direct:
            C, Q = _adjoint_step_maps(h, stages.M, stages.inv)
            for k in range(hi - lo - 1, -1, -1):
                cotangents[k] = C[k] @ lam
                lam = Q[k] @ lam + g[lo + k]
        else:
            for k in range(hi - lo - 1, -1, -1):
                hk = h[k]
                r = GAUSS_B[:, None] * stages.transpose_times(
                    k, np.broadcast_to(lam, (_STAGES, n)))
                w = stages.solve(k, r, transpose=True)
                cotangents[k] = hk * (GAUSS_B[:, None] * lam[None] + hk * (GAUSS_A.T @ w))
                lam = lam + hk * w.sum(axis=0) + g[lo + k]
        # theta enters only through f_theta at the nodes: one batched reverse pass per chunk.
        grad_theta += model.vjp(times, x, theta, cotangents)[1]
    return lam, grad_theta
