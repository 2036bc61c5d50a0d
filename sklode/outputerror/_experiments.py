"""The output-error cost over several experiments (:class:`ExperimentsObjective`): one
:class:`~._objective.LeastSquaresObjective` per experiment, shared parameters, forward solves
shared between experiments that differ only in their initial state, observations evaluated in
batches, and steady states computed once per parameter vector."""

from __future__ import annotations

import logging

import numpy as np

from ..exceptions import IntegrationError
from ..integrate import _resolve_integrator, native_solver_for
from ..models._compile import parameters_read
from ..models._derived import derived
from ..observation._observation import Observation
from ._objective import _Objective, _state_without_solves
from ._sensitivity import (
    Trajectory,
    forward_trajectory,
    sensitivities,
    uses_native_adjoint,
)
from ._steady_state import SharedSteadyState

__all__ = ["ExperimentsObjective"]

logger = logging.getLogger("sklode")


class _SharedSolve:
    """One forward solve for the experiments that pose the same initial value problem.

    A PEtab problem splits a condition into several experiments when its measurement rows
    give observable or noise parameters different values; the ODE is the same, and solving
    it once on the union of their times is what AMICI does (Fujita et al. 2010: 29
    experiments, 6 distinct solves). The CVODES path knows which parameters the field reads
    (:attr:`~sklode.models._native.NativeSolver.param_read`); the experiments of a group
    share the last solve while those parameters and the initial state are unchanged.
    """

    def __getstate__(self):
        return _state_without_solves(self, ("key", "traj"))

    def __init__(self, parts, field_params):
        self.parts, self.field_params = parts, field_params
        self.t = np.unique(np.concatenate([p.t for p in parts]))
        self.key, self.traj = None, None
        # each experiment's times among the union's, its own grid and its times on it
        # (fixed: computed once, not at every evaluation)
        self.layout = {}
        for p in parts:
            grid = np.union1d([p.t0], p.t)
            self.layout[id(p)] = (np.searchsorted(self.t, p.t), grid,
                                  np.searchsorted(grid, p.t))

    def trajectory(self, part, theta, x0, prefetch=None):
        key = (theta[self.field_params].tobytes(), np.asarray(x0, dtype=np.float64).tobytes())
        if key != self.key:
            self.key, self.traj = None, None
            self.traj = forward_trajectory(part.model, theta, x0, part.t0, self.t,
                                           **part.solver,
                                           max_evaluations=part.policy.max_evaluations,
                                           doses=part.doses, prefetch=prefetch)
            self.key = key
        return _restricted(self.traj, *self.layout[id(part)])



def _restricted(traj, index, grid, obs_index):
    """A CVODES trajectory at a subset ``index`` of its observation times (``grid``: the
    subset and the start, ``obs_index``: the subset's places on it)."""
    native, scipy = traj.native, traj.scipy
    if native is None:  # nothing was integrated (every time at the start)
        return Trajectory(grid, obs_index, traj.states[index], None, traj.x0,
                          traj.n_evaluations)

    def scipy_subset():
        whole = scipy()
        return Trajectory(whole.grid, whole.obs_index[index], whole.states[index], whole.dense,
                          whole.x0, whole.n_evaluations)

    native_adjoint = None
    if traj.native_adjoint is not None:
        def native_adjoint(jumps):  # the subset's data among the whole's times
            whole = np.zeros((traj.states.shape[0], jumps.shape[1]))
            whole[index] = jumps
            return traj.native_adjoint(whole)

    return Trajectory(grid, obs_index, traj.states[index], None, traj.x0, traj.n_evaluations,
                      native=lambda with_x0, params=None, start=None: native(
                          with_x0, params, start)[index],
                      scipy=scipy_subset, native_reads=traj.native_reads,
                      native_banded=traj.native_banded, chained=traj.chained,
                      native_sparse=traj.native_sparse, native_adjoint=native_adjoint)



def _compiled_solver(part):
    """The CVODES solver the experiment ``part``'s solves run on, or None (the scipy path)."""
    return native_solver_for(part.model, _resolve_integrator(part.solver["integrator"]))



def _share_solves(parts):
    """Give experiments that pose the same initial value problem one shared solve (the
    CVODES path only: the scipy path does not know which parameters its field reads)."""

    first = parts[0]
    if len(parts) < 2:
        return
    native = _compiled_solver(first)
    if native is None:
        return
    # every parameter the solve reads: the field's, and its switches' (a switch at a
    # parameter's time: Isensee_JCB2018's stimuli; grouping by the field's alone shared one
    # solve between experiments whose stimuli differ)
    field_params = np.flatnonzero(native.param_read)

    def field_rows(theta_map):  # how the conditions set the parameters the field reads
        if theta_map is None:
            return None
        return theta_map[0][field_params].tobytes() + theta_map[1][field_params].tobytes()

    groups = {}
    for part in parts:
        if part.n_x0:
            continue  # an estimated start is the experiment's own
        # experiments whose field is the same at every theta, from the same start; the
        # pre-equilibrated ones from the same rest too (Weber et al. 2015: 9 experiments,
        # 2 distinct solves). The trajectory's key (field parameters and the start reached)
        # guards the sharing; the group only decides who can meet it
        pre = (None if part.preequilibration is None else
               (field_rows(part.preequilibration[:2]), part.preequilibration[2].tobytes(),
                part.preequilibration[3].tobytes()))
        key = (part.t0, repr(part.doses), part.x0_fixed.tobytes(),
               field_rows(part.theta_map), pre)
        groups.setdefault(key, []).append(part)
    for members in groups.values():
        if len(members) > 1:
            shared = _SharedSolve(members, field_params)
            for part in members:
                part.share(solve=shared)



def _observation_only(model, native):
    """Which parameters only the observation and noise models read (not the field, not the
    initial values): experiments that differ in those alone have the same trajectory."""
    only = ~np.asarray(native.param_read, dtype=bool)
    if model.initial_offsets(model.theta_guess()) is not None:
        reads = getattr(model, "_initial_reads", None)
        read = None if reads is None else reads()
        if read is None:  # unknown: every parameter may set the start
            return np.zeros_like(only)
        only[read] = False
    return only



def _batch_observations(parts):
    """Batches (:class:`_ObservationBatch`) of the experiments whose observation rows can be
    evaluated as one grid: the compiled (numpy) observation path, the same noise kind per
    observable, no estimated x0 and no pre-equilibration. Within a batch, experiments that
    share a solve and differ only in their observation parameters share its sensitivities
    too."""
    first = parts[0]
    if len(parts) < 2:
        return []
    # (only the compiled solve is shared: on the scipy path each experiment is its own
    # group, and the model is not compiled for it)
    native = _compiled_solver(first)
    keep = (np.ones(first.n_params, dtype=bool) if native is None
            else ~_observation_only(first.model, native))
    batches = {}
    for k, part in enumerate(parts):
        observation = part.observation
        if (observation is None or part.n_x0 or part.preequilibration is not None
                or not observation.takes_rows_of_parameters):
            continue
        A, c = (part.theta_map if part.theta_map is not None
                else (np.eye(part.n_params), np.zeros(part.n_params)))
        shared = part.shared_solve
        same_trajectory = (k if shared is None else id(shared), A[keep].tobytes(),
                           c[keep].tobytes(), part.x0_fixed.tobytes())
        batch = batches.setdefault(observation.modelled_noise, {})
        batch.setdefault(same_trajectory, []).append(k)
    out = []
    for groups in batches.values():
        members = [k for group in groups.values() for k in group]
        kinds = {}
        for k in members:
            for column, kind in zip(parts[k].observation.columns, parts[k].observation.kinds):
                kinds.setdefault(column, set()).add(kind)
        if len(members) > 1 and all(len(v) == 1 for v in kinds.values()):
            out.append(_ObservationBatch(parts, list(groups.values())))
    return out



class _ObservationBatch:
    """The observation rows of several experiments evaluated as one grid (one theta per
    row); those that share one solve and differ only in the parameters their observation
    reads (a group) also share its sensitivities.

    A PEtab problem splits a condition into one experiment per set of observable and noise
    parameters its measurement rows give (Bruno et al. 2016: 42 experiments of one time
    point each, per-row noise levels, 6 conditions). Evaluated one by one, each costs ~0.5 ms
    of numpy calls on arrays of a few entries; as one grid, the calls are per batch. The
    rows, their order and their derivatives are those of the experiments' own objectives.

    Parameters
    ----------
    parts : list of LeastSquaresObjective
        The objective's experiments.
    groups : list of list of int
        The batch's experiments (places in ``parts``), by the trajectory they share: no
        estimated x0, no pre-equilibration; a group's maps differ only in observation-only
        rows and its experiments share a solve (or it is one experiment).
    """

    def __getstate__(self):
        return _state_without_solves(self, ("_key", "_cache"))

    def __init__(self, parts, groups):
        self.groups = [[parts[k] for k in group] for group in groups]
        self.indices = [k for group in groups for k in group]
        self.parts = [parts[k] for k in self.indices]
        self.observation, self.rows = Observation.stacked([p.observation for p in self.parts])
        self.counts = [p.t.size for p in self.parts]
        # each group's rows' times on its trajectory (a shared solve's union of times)
        self.times = [np.concatenate([g[0].shared_solve.layout[id(p)][0] for p in g])
                      if len(g) > 1 else np.arange(g[0].t.size) for g in self.groups]
        self.needed = [np.unique(np.concatenate([p._needed_params() for p in g]))
                       for g in self.groups]
        self._key, self._cache = None, None

    def _evaluate(self, u):
        key = u.tobytes()
        if key != self._key:
            X, thetas, trajectories = [], [], []
            for group, times, needed in zip(self.groups, self.times, self.needed):
                first = group[0]
                x0, theta = first.split(first.to_z(u))
                group_thetas = [p.experiment_theta(theta) for p in group]
                prefetch = None
                if first.policy.prefetch_sensitivities:  # the columns its Jacobian wants
                    with_x0, _, start = first.sensitivity_request(group_thetas[0])
                    prefetch = (with_x0, needed, start)
                first.n_forward += 1
                traj = first.solve(group_thetas[0], x0, prefetch)
                if len(group) > 1:
                    traj = first.shared_solve.traj  # on the union of the group's times
                X.append(traj.states[times])
                thetas += group_thetas
                trajectories.append(traj)
            per_row = np.repeat(np.array(thetas), self.counts, axis=0)
            X = np.concatenate(X)
            r = self.observation.residual(X, per_row)
            self._key, self._cache = key, (trajectories, X, thetas, per_row, r)
        return self._cache

    def residuals(self, u):
        """Each experiment's residual at its optimiser variables ``u`` (the same for all:
        none estimates x0)."""
        r = self._evaluate(u)[4]
        return [r[rows] for rows in self.rows]

    def jacobians(self, u):
        """Each experiment's :meth:`LeastSquaresObjective.jacobian_z` at ``u``."""
        trajectories, X, thetas, per_row, _ = self._evaluate(u)
        S_rows, k = [], 0
        for group, traj, times, needed in zip(self.groups, trajectories, self.times,
                                              self.needed):
            first, theta = group[0], thetas[k]
            first.n_derivative += 1
            _, _, start = first.sensitivity_request(theta)
            S = sensitivities(first.model, theta, traj, with_x0=False, params=needed,
                              start=start, fall_back=first.policy.sensitivities_fall_back)
            # the field's columns agree across a group (it reads none of the parameters
            # its experiments' maps differ in): the first experiment's map serves all
            S_rows.append(first._unknown_columns(S)[times])
            k += len(group)
        J_x, J_theta = self.observation.jacobians(X, per_row)
        J_data = np.einsum("rd,rdq->rq", J_x,
                           np.concatenate(S_rows)[self.observation.row_times()])
        # each experiment's observation rows through its own map (its theta per row)
        return [J_data[rows] + p._unknown_columns(J_theta[rows], x0_part=False)
                for p, rows in zip(self.parts, self.rows)]



def _share_steady_states(parts):
    """Give experiments pre-equilibrated from the same state one steady state (its solve
    and sensitivities once per evaluation instead of once per experiment)."""
    groups = {}
    for part in parts:
        if part.preequilibration is not None:
            key = (part.preequilibration[2].tobytes(), repr(part.solver))
            groups.setdefault(key, []).append(part)
    for members in groups.values():
        if len(members) < 2:
            continue
        model = members[0].model
        # the parameters the field reads, from its recorded program (kept on the model);
        # where it cannot be recorded the state is shared while all the values agree
        cache = derived(model).field_reads
        if "read" not in cache:
            cache["read"] = parameters_read(model.rhs, model.n_states, model.n_params)
        read = cache["read"]
        shared = SharedSteadyState(None if read is None else np.flatnonzero(read))
        for part in members:
            part.share(steady_state=shared)



class ExperimentsObjective(_Objective):
    """The sum of several experiments' costs with shared parameters.

    The unknowns are ``z = [x0_1[free], ..., x0_K[free], theta[fitted]]``; the residual is
    every experiment's data residuals, then every experiment's x0 terms, so that the data rows
    come first as in :class:`LeastSquaresObjective` (whose interface this class offers).

    Parameters
    ----------
    parts : list of LeastSquaresObjective
        One per experiment, started from the same theta with the same fitted and positive
        parameters.
    """

    def __init__(self, parts):
        self.parts = list(parts)
        first = self.parts[0]
        self.model, self.n_states, self.n_params = first.model, first.n_states, first.n_params
        self.fitted, self.theta_fixed = first.fitted, first.theta_fixed
        sizes = [p.n_x0 for p in self.parts]
        self.x0_slices = [slice(a, a + n) for a, n in zip(np.cumsum([0] + sizes[:-1]), sizes)]
        self.n_x0 = int(sum(sizes))
        self.x0_states = np.concatenate([p.x0_states for p in self.parts])
        self.scale = np.concatenate([p.scale[: p.n_x0] for p in self.parts]
                                    + [first.scale[first.n_x0:]])
        self.log_mask = np.concatenate([p.log_mask[: p.n_x0] for p in self.parts]
                                       + [first.log_mask[first.n_x0:]])
        self.n_data = sum(p.n_data for p in self.parts)
        self.n_data_rows = sum(p.n_data_rows for p in self.parts)
        _share_solves(self.parts)
        _share_steady_states(self.parts)
        self.batches = _batch_observations(self.parts)

    @property
    def policy(self):
        """The :class:`~._objective.SolvePolicy` every experiment's solves follow."""
        return self.parts[0].policy

    def set_policy(self, **changes):
        """Change fields of every experiment's :class:`~._objective.SolvePolicy`.

        Parameters
        ----------
        **changes
            ``prefetch_sensitivities``, ``sensitivities_fall_back``, ``max_evaluations``.
        """
        for part in self.parts:
            part.set_policy(**changes)

    @property
    def n_forward(self):
        """Forward solves so far, all experiments."""
        return sum(p.n_forward for p in self.parts)

    @property
    def n_derivative(self):
        """Derivative passes so far, all experiments."""
        return sum(p.n_derivative for p in self.parts)

    def _part_u(self, u, k):
        return np.concatenate([u[self.x0_slices[k]], u[self.n_x0:]])

    def split(self, z):
        """Every experiment's initial state, and theta.

        Parameters
        ----------
        z : ndarray of shape (n_unknowns,)
            The unknowns.

        Returns
        -------
        x0 : ndarray of shape (n_experiments, n_states)
            One initial state per experiment.
        theta : ndarray of shape (n_params,)
            The parameters.
        """
        states = [p.split(np.concatenate([z[s], z[self.n_x0:]]))
                  for p, s in zip(self.parts, self.x0_slices)]
        return np.array([x0 for x0, _ in states]), states[0][1]

    def evaluations_at(self, u):
        """Most field evaluations one experiment's forward solve needs at ``u``.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        int
            The largest count over the experiments.
        """
        return max(p.evaluations_at(self._part_u(u, k)) for k, p in enumerate(self.parts))

    def _stack_rows(self, pieces):
        """Data rows of every experiment first, then their x0 terms."""
        data = [piece[: p.n_data_rows] for p, piece in zip(self.parts, pieces)]
        extra = [piece[p.n_data_rows:] for p, piece in zip(self.parts, pieces)]
        return np.concatenate(data + extra)

    def residual(self, u):
        """The residual vector at ``u``.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals,)
            Every experiment's data residuals, then their x0 terms.
        """
        return self._stack_rows(self._residual_pieces(u))

    def _residual_pieces(self, u):
        """Each experiment's residual, the batched ones (:class:`_ObservationBatch`) as one
        grid each."""
        pieces = [None] * len(self.parts)
        for batch in self.batches:
            for k, piece in zip(batch.indices, batch.residuals(u[self.n_x0:])):
                pieces[k] = piece
        return [p.residual(self._part_u(u, k)) if piece is None else piece
                for k, (p, piece) in enumerate(zip(self.parts, pieces))]

    def safe_residual(self, u):
        """Residual, or NaNs where an experiment's ODE blows up.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals,)
            As :meth:`residual`, all NaN where some forward solve fails.
        """
        try:
            r = self.residual(u)
        except IntegrationError as exc:
            logger.debug("trial point rejected: %s", exc)
            return np.full(self.n_data_rows + sum(
                p.extra_terms(p.x0_fixed)[0].size for p in self.parts), np.nan)
        return np.full(r.size, np.nan) if np.any(np.isnan(r)) else r

    def _columns(self, k):
        return np.r_[np.arange(self.x0_slices[k].start, self.x0_slices[k].stop),
                     self.n_x0 + np.arange(self.scale.size - self.n_x0)]

    def _place(self, blocks):
        """Per-experiment Jacobians (rows x [own x0, theta]) into the whole one."""
        J = np.zeros((sum(b.shape[0] for b in blocks), self.scale.size))
        rows = 0
        for k, block in enumerate(blocks):
            J[rows: rows + block.shape[0], self._columns(k)] = block
            rows += block.shape[0]
        return J

    @property
    def modelled_noise(self):
        """Whether some experiment's noise depends on the unknowns."""
        return any(p.modelled_noise for p in self.parts)

    def cost_offset(self):
        """The cost minus ``-log L`` (see :meth:`LeastSquaresObjective.cost_offset`).

        Returns
        -------
        float
            The experiments' constants summed.
        """
        return sum(p.cost_offset() for p in self.parts)

    def jacobian_z(self, u, fisher=False):
        """Jacobian of the residual in the unknowns.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.
        fisher : bool, default=False
            Rows of the expected Fisher information (see
            :meth:`LeastSquaresObjective.jacobian_z`).

        Returns
        -------
        ndarray of shape (n_residuals, n_unknowns)
            ``dr/dz``, rows ordered as in :meth:`residual`.
        """
        blocks = [None] * len(self.parts)
        if not fisher:  # (the Fisher rows, for the covariance once, take each experiment's)
            for batch in self.batches:
                for k, block in zip(batch.indices, batch.jacobians(u[self.n_x0:])):
                    blocks[k] = block
        blocks = [p.jacobian_z(self._part_u(u, k), fisher) if block is None else block
                  for k, (p, block) in enumerate(zip(self.parts, blocks))]
        data = self._place([b[: p.n_data_rows] for p, b in zip(self.parts, blocks)])
        extra = self._place([b[p.n_data_rows:] for p, b in zip(self.parts, blocks)])
        return np.vstack([data, extra])

    def value_and_grad(self, u, method="adjoint"):
        """The total cost and its gradient in the optimiser variables.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.
        method : {"adjoint", "forward"}, default="adjoint"
            As for :meth:`LeastSquaresObjective.value_and_grad`.

        Returns
        -------
        L : float
            The cost.
        grad : ndarray of shape (n_unknowns,)
            ``dL/du``.
        """
        total, grad = 0.0, np.zeros(self.scale.size)
        pending = {}  # shared solve -> [its times' jumps summed, the first member's finish]
        for k, part in enumerate(self.parts):
            pieces = self._adjoint_pieces_shared(part, k, u) if method == "adjoint" else None
            if pieces is None:
                value, g = part.value_and_grad(self._part_u(u, k), method)
                total += value
                grad[self._columns(k)] += g
                continue
            value, jumps, n_theta, finish = pieces
            total += value
            shared = part.shared_solve
            if shared not in pending:
                pending[shared] = [np.zeros((shared.t.size, jumps.shape[1])), []]
            pending[shared][0][shared.layout[id(part)][0]] += jumps
            pending[shared][1].append((k, finish, jumps.shape[1], n_theta))
        for shared, (jumps, members) in pending.items():
            # the adjoint is linear in the jumps, and the members' maps from their
            # gradient in the start and theta agree on the field's parameters (the group's
            # key; no member estimates its start, so all have the same columns): one
            # backward solve for the group (Chen_MSB2009: 4 instead of 39), mapped by the
            # first member's finish; the others add only their own constant part
            try:
                g_x0, g_theta = shared.traj.native_adjoint(jumps)
            except IntegrationError:  # its backward solve failed: each member alone
                for k, *_ in members:
                    grad[self._columns(k)] += self.parts[k].value_and_grad(
                        self._part_u(u, k), method)[1]
                continue
            for k, finish, n_states, n_theta in members:
                grad[self._columns(k)] += (finish(g_x0, g_theta) if k == members[0][0] else
                                           finish(np.zeros(n_states), np.zeros(n_theta)))
        return total, grad

    def _adjoint_pieces_shared(self, part, k, u):
        """``(value, jumps, n_theta, finish)`` of ``part`` where its gradient can join its
        group's one backward solve by CVODES' adjoint (:meth:`value_and_grad`), or None."""
        shared = getattr(part, "shared_solve", None)
        if shared is None or part.n_x0 or part.offset_start:
            return None  # (an offset start's map reads the experiment's own parameters)
        u_part = self._part_u(u, k)
        if not uses_native_adjoint(part._evaluate(u_part)[0]):  # (the solve is cached)
            return None
        pieces = part.adjoint_pieces(u_part)
        if pieces is None:
            return None
        value, _, jumps, theta, finish = pieces
        return value, jumps, theta.size, finish
