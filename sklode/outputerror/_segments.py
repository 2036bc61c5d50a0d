"""Solves in segments whose sensitivities are chained: across a model's events and across
dosing records that are more than boluses (infusions, steady states, resets).

Each segment between two firings is a plain solve (:func:`segmented_trajectory` is handed
the solver and the sensitivities of one piece, so that this module needs neither), its
sensitivities taken in its own start and theta; :func:`jump_sensitivities` carries them
across each firing: an event's jump by the standard rule for a discontinuity at a moving
time, a delayed event's jump at its later time, a reset to the initial state, the periodic
steady state of a repeated dose (its derivative by the implicit function theorem), and a
change of an infusion's rate (at a known time: the sensitivities are continuous).

An infusion feeds its state at a constant rate: the pieces solve the model with the rates
as extra parameters (:class:`sklode.models._wrappers.WithInputs`), one compiled program
whatever the rates, set segment by segment.
"""

from __future__ import annotations

import numpy as np

from .._events import interval_before, model_events, periodic_state, solve_across_events
from ..exceptions import IntegrationError
from ..integrate import fed_field, fed_locator, solve
from ._trajectory import Trajectory

__all__ = ["jump_sensitivities", "segmented_trajectory"]


def segmented_trajectory(model, theta, x0, t0, t_obs, *, integrator, rtol, atol,
                         max_evaluations, doses, solve_piece, piece_sensitivities):
    """``forward_trajectory`` of a model with events, or of doses that are more than
    boluses: one plain solve per segment between the firings, whose sensitivities in their
    own start and theta are chained through each firing.

    Parameters
    ----------
    model, theta, x0, t0, t_obs, integrator, rtol, atol, max_evaluations, doses
        As :func:`~sklode.outputerror._sensitivity.forward_trajectory`.
    solve_piece : callable
        ``solve_piece(model, theta, x, start, t_eval, **options) -> Trajectory``: a solve
        without events or doses.
    piece_sensitivities : callable
        ``piece_sensitivities(model, theta, traj, with_x0=True)``: its sensitivities.

    Returns
    -------
    Trajectory
        ``chained``: its ``native`` gives the chained sensitivities.
    """
    theta = np.asarray(theta, dtype=np.float64)
    events = model_events(model)
    field, full = fed_field(model, theta, doses)  # theta, then the infusions' rates
    n, p = x0.size, model.n_params

    pieces = []  # (trajectory, inside, index, the field's parameters) of each segment
    evaluations = [0]
    plain = {"integrator": integrator, "rtol": rtol, "atol": atol,
             "max_evaluations": max_evaluations, "doses": None, "prefetch": None}
    options = dict(integrator=integrator, rtol=rtol, atol=atol,
                   max_evaluations=max_evaluations, solve_piece=solve_piece,
                   piece_sensitivities=piece_sensitivities)

    def segment(start, end, x, t_eval, inside, index, inputs=None):
        th = full(inputs)
        traj = solve_piece(field, th, x, start, t_eval, **plain)
        pieces.append((traj, inside.copy(), index, th))
        evaluations[0] += traj.n_evaluations
        return traj.states

    def dense(start, end, x, inputs=None):
        sol = solve(field, full(inputs), x, (start, end), integrator="LSODA", rtol=rtol,
                    atol=atol, dense_output=True, max_evaluations=max_evaluations)
        evaluations[0] += sol.nfev
        return sol.sol.ts, sol.sol

    locate = fed_locator(model, field, full, integrator=integrator, rtol=rtol, atol=atol,
                         max_evaluations=max_evaluations)

    steady = {}  # each steady-state record's periodic state and its derivative

    def periodic(record):
        if record not in steady:
            steady[record] = _PeriodicState(model, theta, record, n, options)
        return steady[record].state

    after = t_obs > t0
    states = np.tile(x0, (t_obs.size, 1))
    states[after], fired = solve_across_events(events, theta, x0, t0, t_obs[after], segment,
                                               dense, doses=doses, locate=locate,
                                               periodic=periodic)

    def chained(with_x0, params=None, start=None):
        D0 = np.zeros((n, n + p))  # d (state at the segment's start) / d [x0, theta]
        D0[:, :n] = np.eye(n)
        if start is not None:
            D0[:, n:] = start
        D = D0
        S = np.empty((t_obs.size, n, n + p))
        S[~after] = D
        context = {"model": field, "events": events, "n_params": p, "initial": D0,
                   "steady": steady}
        firings = iter(fired)
        th_before = full()
        if fired and fired[0].time == t0:  # at the start: their times do not move
            D = jump_sensitivities(next(firings), D, th_before,
                                   pieces[0][3] if pieces else th_before, fixed=True,
                                   **context)
        for k, (traj, inside, index, th) in enumerate(pieces):
            part = piece_sensitivities(field, th, traj, with_x0=True)[..., :n + p]
            total = np.einsum("mab,bq->maq", part[..., :n], D)
            total[..., n:] += part[..., n:]
            S[np.flatnonzero(after)[inside]] = total[index]
            firing = next(firings, None)
            if firing is not None:
                th_next = pieces[k + 1][3] if k + 1 < len(pieces) else th
                D = jump_sensitivities(firing, total[-1], th, th_next, **context)
        return S if with_x0 else S[..., n:]

    def no_scipy():
        raise IntegrationError("The sensitivities of a solve across events or dosing "
                               "records come from its segments' solves, which failed here.")

    grid = np.union1d([t0], t_obs)
    return Trajectory(grid, np.searchsorted(grid, t_obs), states, None, x0, evaluations[0],
                      native=chained, scipy=no_scipy, native_reads=np.ones(p, dtype=bool),
                      chained=True)


class _PeriodicState:
    """The state just before a dose of ``record`` given every ``record.interval`` for ever
    (:func:`~sklode._events.periodic_state` on the solve of one interval), and its
    derivative in theta by the implicit function theorem, ``(I - Phi_x)^-1 Phi_theta``
    (``Phi``: the state one interval after a dose), computed on first use."""

    def __init__(self, model, theta, record, n, options):
        self.model, self.theta, self.options = model, theta, options
        # one interval ending at the dose's time, the dose at its start
        self.dose = interval_before(record)
        self.start = self.dose.time
        self.end = np.array([record.time])
        self.state = periodic_state(lambda x: self._flow(x)[:2],
                                    np.zeros(n), rtol=options["rtol"], atol=options["atol"])
        self._derivative = None

    def _flow(self, x, with_theta=False):
        traj = segmented_trajectory(self.model, self.theta, np.asarray(x, dtype=np.float64),
                                    self.start, self.end, doses=[self.dose], **self.options)
        S = traj.native(True)[0]  # (n, n + p) at the interval's end
        n = x.size
        return traj.states[0], S[:, :n], S[:, n:]

    def derivative(self):
        """``d state / d [x0, theta]``: zero in x0 (the steady state forgets the start)."""
        if self._derivative is None:
            _, Phi_x, Phi_theta = self._flow(self.state)
            n = self.state.size
            D = np.zeros((n, n + Phi_theta.shape[1]))
            D[:, n:] = np.linalg.solve(np.eye(n) - Phi_x, Phi_theta)
            self._derivative = D
        return self._derivative


def jump_sensitivities(firing, S_before, theta_before, theta_after, *, model, events,
                       n_params, initial, steady, fixed=False):
    """The state's derivative in ``[x0, theta]`` just after a firing, from the one just
    before: for each event's jump ``x+ = h(tau, x-, theta)`` at a time ``tau`` where the
    trigger ``g`` crosses zero, ``S+ = h_x S- + h_theta + (h_x f- + h_t - f+) dtau``, with
    ``dtau = -(g_x S- + g_theta) / (g_x f- + g_t)`` (zero where the time is ``fixed``, as
    a dose's); a bolus adds a constant and an infusion's rate changes at a known time,
    which leave ``S`` as it is.

    A delayed event keeps, where its trigger rises, the derivative of its jump's time
    (``dtau`` plus the delay's) and, where it assigns values taken there, theirs
    (``h_x (S- + f- dtau) + h_t dtau + h_theta``); its jump, later, sets its targets'
    rows to those and moves the others by ``(f- - f+) dtime``, as a jump at a known time.
    A reset returns ``S`` to ``initial``; a steady state sets it to (or, superposed, adds)
    its periodic state's derivative.

    ``model`` is the field the pieces solve (with the infusions' rates as parameters after
    the model's ``n_params``): ``theta_before`` and ``theta_after`` its parameters on
    either side.
    """
    tau, which, x_before = firing.time, firing.which, firing.before
    n, p = x_before.size, n_params

    def f(x, th):
        return model.f(tau, x[None, :], th)[0]

    dtau = np.zeros(S_before.shape[1])
    rising = list(which) + [entry.k for entry in firing.scheduled]
    if not fixed and rising:  # (a dose alone: a fixed time, a constant added)
        g_t, g_x, g_theta = events[rising[0]].value_derivatives(tau, x_before, theta_before)
        rate = float(g_x @ f(x_before, theta_before) + g_t)
        if not np.isfinite(rate) or rate == 0.0:
            raise IntegrationError(
                f"The trigger of event {events[rising[0]].name or rising[0]!r} touches zero "
                f"at t={tau:g} without crossing it: its time has no derivative there.",
                t_reached=tau)
        dtau = -(g_x @ S_before)
        dtau[n:] -= g_theta[:p]
        dtau /= rate
    for entry in firing.scheduled:  # what its later jump needs from here
        entry.dtime = dtau.copy()
        entry.dtime[n:] += entry.event.delay_derivative(theta_before)[:p]
        if entry.values is not None:
            h_t, h_x, h_theta = entry.event.jump_derivatives(tau, x_before, theta_before)
            entry.dvalues = h_x @ S_before + np.outer(h_x @ f(x_before, theta_before) + h_t,
                                                      dtau)
            entry.dvalues[:, n:] += h_theta[:, :p]
    x, S = x_before, S_before
    for k in which:
        h_t, h_x, h_theta = events[k].jump_derivatives(tau, x, theta_before)
        after = events[k].jump(tau, x, theta_before)
        S_next = h_x @ S
        S_next[:, n:] += h_theta[:, :p]
        S_next += np.outer(h_x @ f(x, theta_before) + h_t - f(after, theta_before), dtau)
        x, S = after, S_next
    for entry in firing.due:
        after = entry.apply(x, theta_before)
        if entry.values is None:  # a jump of values at its own (moving) time
            h_t, h_x, h_theta = entry.event.jump_derivatives(tau, x, theta_before)
            S_next = h_x @ S
            S_next[:, n:] += h_theta[:, :p]
            S_next += np.outer(h_x @ f(x, theta_before) + h_t - f(after, theta_before),
                               entry.dtime)
        else:
            S_next = S + np.outer(f(x, theta_before), entry.dtime)
            targets = entry.targets(n)
            S_next[targets] = entry.dvalues[targets]
            S_next -= np.outer(f(after, theta_before), entry.dtime)
        x, S = after, S_next
    actions = firing.actions
    if actions:
        if actions.reset:
            S = initial.copy()
        for record in actions.steady:
            D = steady[record].derivative()
            S = D.copy() if record.steady_state == 1 else S + D
    return S
