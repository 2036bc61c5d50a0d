"""Doses and events: what happens to the state at given times, or where a trigger fires.

A bolus ``(time, state, amount)`` adds ``amount`` to ``state`` at ``time``. :func:`dose_segments`
groups an experiment's doses by time and says which act at the start and which between output
times (a dose at an observation's time acts after that observation, as NONMEM orders a trough
sample and a dose); :func:`solve_across_doses` integrates from one dose to the next and applies
each, for every forward solve: :func:`sklode.integrate.simulate`, the trajectories with dense
output and the CVODES solves with sensitivities (:mod:`sklode.outputerror._sensitivity`; a
bolus of known size leaves the sensitivities continuous). The methods on the data grid cut
their data at the same dose times (:class:`sklode._on_grid.DoseSplit`).

A model's events (:class:`sklode.models.Event`, ``model.events``) jump the state where a
trigger function crosses zero: :func:`solve_across_events` locates each crossing (by CVODES'
root finding on the compiled triggers, or on LSODA's dense output), integrates up to it,
applies the jump and goes on, for the same forward solves. It is
the one loop of both: a dose is an event whose time is known and whose jump adds a constant,
and a solve may have both.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq

from .exceptions import IntegrationError

__all__ = ["Actions", "Dose", "Firing", "add_doses", "bolus_only", "dose_segments",
           "dosing_records", "dosing_schedule", "infused_states", "interval_before",
           "periodic_state",
           "solve_across_doses", "solve_across_events"]

#: More events than this in one solve is taken for events that fire without end; so are
#: this many firings in a row, each within 1e-9 (relative) of the time of the one before (a
#: jump that sets its own trigger off again at once).
MAX_EVENTS = 10_000
MAX_EVENTS_AT_ONCE = 100


def dose_segments(doses, t0, t_end):
    """The doses that act on ``(t0, t_end]`` grouped by time: ``[(time, amounts), ...]``.

    A dose at ``t0`` acts at once (after an observation at ``t0``); one at an observation
    time acts after that observation (a trough sample is taken before the dose, as NONMEM
    orders a sample and a dose at the same time).

    Parameters
    ----------
    doses : sequence of (float, int, float)
        ``(time, state index, amount)`` boluses.
    t0 : float
        Start of the integration.
    t_end : float
        Last output time.

    Returns
    -------
    at_start : dict or None
        Amounts ``{state: amount}`` added at ``t0`` (None when there are none).
    later : list of (float, dict)
        Times in ``(t0, t_end)`` and the amounts ``{state: amount}`` added there.
    """
    if not bolus_only(doses):
        raise ValueError("Infusions, steady states and resets are not plain boluses: they "
                         "are solved by solve_across_events.")
    at_start, later = dosing_schedule(doses, t0, t_end)
    return (None if at_start is None else at_start.amounts,
            [(time, actions.amounts) for time, actions in later])



class Dose(NamedTuple):
    """A dosing record, as pharmacometric data sets carry it (NONMEM's and nlmixr2's columns
    in brackets).

    A ``(time, state, amount)`` triple is a bolus, the same as ``Dose(time, state,
    amount)``.

    Parameters
    ----------
    time : float
        When the dose is given (``TIME``).
    state : str or int
        The state (compartment) dosed (``CMT``).
    amount : float, default=0.0
        The amount (``AMT``), added at once unless infused.
    rate : float, default=0.0
        A zero-order infusion at this rate, ``amount / rate`` long (``RATE``).
    duration : float, default=0.0
        A zero-order infusion this long, at ``amount / duration`` (``DUR``).
    interval : float, default=0.0
        The dosing interval (``II``) of the additional doses and of a steady state.
    additional : int, default=0
        This many more of the same dose, every ``interval`` after ``time`` (``ADDL``).
    steady_state : {0, 1, 2}, default=0
        ``1``: the state is first reset to the periodic steady state of this dose repeated
        every ``interval`` (as if given for ever), then the dose is given; ``2``: that steady
        state is added to the state as it is (``SS``; superposition, for linear kinetics).
    reset : bool, default=False
        Reset the state to the experiment's initial state before the dose (``EVID`` 3 with
        ``amount`` 0, or 4).

    Examples
    --------
    >>> from sklode import Dose
    >>> Dose(0.0, "central", 500.0, duration=2.0, interval=12.0, additional=3)
    ...  # doctest: +NORMALIZE_WHITESPACE
    Dose(time=0.0, state='central', amount=500.0, rate=0.0, duration=2.0, interval=12.0,
         additional=3, steady_state=0, reset=False)
    """

    time: float
    state: object
    amount: float = 0.0
    rate: float = 0.0
    duration: float = 0.0
    interval: float = 0.0
    additional: int = 0
    steady_state: int = 0
    reset: bool = False

    @property
    def infused(self):
        """Whether the amount is infused (a rate or a duration), not added at once."""
        return self.rate > 0.0 or self.duration > 0.0

    @property
    def infusion(self):
        """``(rate, duration)`` of an infused dose."""
        if self.rate > 0.0:
            return self.rate, self.amount / self.rate
        return self.amount / self.duration, self.duration

    @property
    def is_bolus(self):
        """A plain bolus: no infusion, steady state, reset or additional doses."""
        return not (self.infused or self.steady_state or self.reset or self.additional)


def dosing_records(doses):
    """Every dose as a :class:`Dose`, the additional doses (``ADDL``) written out, in time
    order (a triple is a bolus)."""
    out = []
    for dose in doses or ():
        record = dose if isinstance(dose, Dose) else Dose(*dose)
        out.append(record._replace(additional=0))
        for k in range(1, int(record.additional) + 1):  # the copies: plain repeats
            out.append(record._replace(time=record.time + k * record.interval, additional=0,
                                       steady_state=0, reset=False))
    return sorted(out, key=lambda d: d.time)


def bolus_only(doses):
    """Whether every dose is a plain bolus (the solves' fast path: constant jumps only)."""
    return all(not isinstance(d, Dose) or d.is_bolus for d in doses or ())


class Actions:
    """What the dosing records do at one time, in this order: a reset to the initial state,
    steady states (``steady``: their records), boluses (``amounts``: ``{state: amount}``),
    changes of the infusion rates (``rates``: ``{state: change}``)."""

    def __init__(self):
        self.reset, self.steady, self.amounts, self.rates = False, [], {}, {}

    def __bool__(self):
        return bool(self.reset or self.steady or self.amounts or self.rates)


def dosing_schedule(doses, t0, t_end):
    """The dosing records' actions on ``[t0, t_end)``, grouped by time (as
    :func:`dose_segments`, for every kind of record).

    Parameters
    ----------
    doses : sequence of Dose or (float, int, float)
        States as indices.
    t0, t_end : float

    Returns
    -------
    at_start : Actions or None
        What acts at ``t0``.
    later : list of (float, Actions)
        Times in ``(t0, t_end)`` and what acts there.
    """
    grouped = {}

    def at(time):
        return grouped.setdefault(float(time), Actions())

    for record in dosing_records(doses):
        if record.time < t0:
            raise ValueError(f"A dose at t={record.time:g} comes before the initial time "
                             f"t0={t0:g}: move t0 to (or before) the first dose.")
        if not (record.time < t_end or record.time == t0):
            continue
        actions, state = at(record.time), int(record.state)
        actions.reset = actions.reset or bool(record.reset)
        if record.steady_state:
            actions.steady.append(record)
        if record.infused:
            rate, duration = record.infusion
            actions.rates[state] = actions.rates.get(state, 0.0) + rate
            if record.time + duration < t_end:  # (the stop: a change at its own time)
                stop = at(record.time + duration)
                stop.rates[state] = stop.rates.get(state, 0.0) - rate
        elif record.amount or record.is_bolus:  # (a bolus of 0 still cuts the solve)
            actions.amounts[state] = actions.amounts.get(state, 0.0) + float(record.amount)
    at_start = grouped.pop(float(t0), None)
    return at_start, sorted(grouped.items())


def interval_before(record):
    """The dose of a steady-state ``record`` given one interval before it, as a plain
    record: the solve of that interval is the periodic state's map."""
    return record._replace(time=record.time - record.interval, steady_state=0, reset=False,
                           additional=0)


def infused_states(doses):
    """The states some infusion feeds, in increasing order."""
    return sorted({int(d.state) for d in dosing_records(doses) if d.infused})


def periodic_state(flow, x, *, rtol, atol, max_iter=20):
    """The fixed point ``x = flow(x)`` of one dosing interval (a periodic steady state), by
    Newton's method.

    Parameters
    ----------
    flow : callable
        ``flow(x) -> (x_next, jacobian)``: the state one interval later and its derivative
        in ``x`` (``(n, n)``; None: by forward differences).
    x : ndarray of shape (n_states,)
        The start of the iteration.
    rtol, atol : float
        The solves' tolerances: the iteration stops where a step is below them.
    max_iter : int, default=20

    Returns
    -------
    ndarray of shape (n_states,)
        The state before a dose in the steady state.

    Raises
    ------
    IntegrationError
        Where the iteration does not settle (no periodic steady state: a dose that
        accumulates without bound, kinetics that do not clear it).
    """
    x = np.array(x, dtype=np.float64)
    for _ in range(max_iter):
        x_next, J = flow(x)
        if J is None:
            J = np.empty((x.size, x.size))
            for j in range(x.size):
                h = 1e-7 * max(1.0, abs(x[j]))
                e = x.copy()
                e[j] += h
                J[:, j] = (flow(e)[0] - x_next) / h
        residual = x_next - x
        try:
            step = np.linalg.solve(np.eye(x.size) - J, residual)
        except np.linalg.LinAlgError:
            step = np.full(x.size, np.nan)
        if not np.all(np.isfinite(step)):
            break
        x = x + step
        if np.all(np.abs(step) <= 10 * (atol + rtol * np.abs(x))):
            return x
    raise IntegrationError(
        "The steady state under repeated dosing was not found: the state after one dosing "
        "interval does not settle to the state before it (the kinetics do not clear the "
        "dose within reach, or the amount accumulates without bound).", t_reached=np.nan)


def add_doses(x, amounts):
    """``x`` with ``amounts`` ``{state: amount}`` added (a copy)."""
    x = np.array(x, dtype=np.float64)
    for state, amount in (amounts or {}).items():
        x[state] += amount
    return x



def solve_across_doses(solve_segment, x0, t0, times, doses):
    """The states at ``times``, integrated in segments from one dose to the next
    (:func:`solve_across_events` without events).

    Parameters
    ----------
    solve_segment : callable
        ``solve_segment(start, end, x, t_eval, inside, index) -> states`` integrates from
        ``x`` at ``start`` to ``end`` and returns the states at ``t_eval`` (the segment's
        output times and ``end``, increasing), shape ``(len(t_eval), n_states)``; ``inside``
        (a mask of ``times``) and ``index`` (their rows in ``t_eval``) let it keep more of
        the segment (sensitivities, dense output).
    x0 : ndarray of shape (n_states,)
        The state at ``t0``, before any dose at ``t0``.
    t0 : float
    times : ndarray of shape (n_times,)
        Increasing output times; those at or before ``t0`` are left to the caller.
    doses : sequence of (float, int, float)
        ``(time, state index, amount)`` boluses.

    Returns
    -------
    ndarray of shape (n_times, n_states)
        The states at ``times`` (rows at or before ``t0`` unset).
    """
    return solve_across_events((), None, x0, t0, times, solve_segment, None, doses=doses)[0]


def model_events(model):
    """The model's events (``model.events``), a tuple (empty for most models)."""
    return tuple(getattr(model, "events", None) or ())


def _holds(events, t, x, theta):
    return [event.value(t, x, theta) >= 0.0 for event in events]


def _first_crossing(events, theta, steps, dense, holds):
    """The earliest time in ``(steps[0], steps[-1]]`` where a trigger crosses zero from
    below on the dense solution (a trigger holding at ``steps[0]`` must first stop holding),
    and the events that fire there; ``(None, [])`` where none does.

    Each trigger is read at the solver's steps; a crossing is bracketed between two steps
    and found by Brent's method on the dense output (a trigger that crosses and recrosses
    within one step is not seen, as in scipy's ``solve_ivp`` events)."""
    X = dense(steps).T
    found = []
    for k, event in enumerate(events):
        armed = not holds[k]
        previous = None
        values = event.values(steps, X, theta)
        for j, t in enumerate(steps):
            value = values[j]
            if not armed:  # (a trigger holding at zero at the start arms only later)
                armed = value < 0.0 and j > 0
            elif value >= 0.0 and previous is not None and previous < 0.0:
                a, b = steps[j - 1], t
                tau = brentq(lambda s: event.value(s, dense(np.array([s]))[:, 0], theta), a,
                             b, xtol=1e-14 * max(1.0, abs(b)), rtol=4 * np.finfo(float).eps)
                found.append((tau, k))
                break
            previous = value
    if not found:
        return None, []
    tau = min(f[0] for f in found)
    together = 1e-12 * max(1.0, abs(tau))
    return tau, sorted(k for t, k in found if t - tau <= together)


def _unmoved(events, which, time, before, after, theta):
    """The events of ``which`` whose triggers the firing left at the same value (a delayed
    event's, whose state waits; a trigger on time): they hold, at zero."""
    return {k for k in which
            if events[k].value(time, before, theta) == events[k].value(time, after, theta)}


def solve_across_events(events, theta, x0, t0, times, solve_segment, solve_dense,
                        doses=None, locate=None, periodic=None):
    """The states at ``times``, integrated from one firing to the next: the doses at their
    times and the events where their triggers cross zero (one loop for both: a dose is an
    event whose time is known and whose jump adds a constant). A delayed event's jump is
    scheduled where its trigger rises and applied ``delay`` later.

    Parameters
    ----------
    events : sequence of Event
    theta : ndarray of shape (n_params,)
    x0 : ndarray of shape (n_states,)
        The state at ``t0`` (before a dose or an event at the start).
    t0 : float
    times : ndarray of shape (n_times,)
        Increasing output times after ``t0``; an output at a firing's time sees the state
        before it (a trough sample before a dose, as NONMEM orders them).
    solve_segment : callable
        As for :func:`solve_across_doses`: ``solve_segment(start, end, x, t_eval, inside,
        index) -> states`` at ``t_eval`` (the segment's outputs and ``end``).
    solve_dense : callable or None
        ``solve_dense(start, end, x) -> (steps, dense)``: a solve from ``x`` at ``start``
        towards ``end`` with dense output ``dense(t) -> (n_states, len(t))`` and its steps
        (``start`` first), on which the triggers are located (None without events).
    doses : sequence of Dose or (float, int, float), optional
        Dosing records (states as indices): boluses, infusions (whose rates the segments
        get as ``solve_segment(..., inputs=rates)``, one per :func:`infused_states`, and
        ``solve_dense`` and ``locate`` as well), steady states and resets (to ``x0``).
    locate : callable, optional
        ``locate(start, end, x) -> (tau, which, x_tau)``: the first firing in ``(start,
        end]`` found by the solver itself (CVODES' root finding on the compiled triggers)
        and the state there, or ``(None, [], None)``; used instead of ``solve_dense`` where
        given.
    periodic : callable, optional
        ``periodic(record) -> x``: the state just before a dose of a steady-state record
        given every ``record.interval`` for ever (:func:`periodic_state`); needed where a
        record has ``steady_state``.

    Returns
    -------
    states : ndarray of shape (n_times, n_states)
    fired : list of Firing
        Each firing in time order. At one time the events whose triggers rose jump first
        (in their order), then the delayed jumps due, then the doses.

    Raises
    ------
    IntegrationError
        Where events fire without end.
    """
    x = np.array(x0, dtype=np.float64)
    t_end = float(times[-1])
    at_start_doses, later = dosing_schedule(doses or [], t0, t_end)
    states = np.empty((times.size, x.size))
    fired = []
    queue = []  # the delayed jumps scheduled and not yet applied, in time order
    fed = infused_states(doses)  # the infusions' rates, handed to each segment
    rates = np.zeros(len(fed))
    if fed:  # the solves take the rates of the infusions running
        plain_segment, plain_dense, plain_locate = solve_segment, solve_dense, locate

        def solve_segment(start, end, x, t_eval, inside, index):
            return plain_segment(start, end, x, t_eval, inside, index, inputs=rates.copy())

        if solve_dense is not None:
            def solve_dense(start, end, x):
                return plain_dense(start, end, x, inputs=rates.copy())

        if locate is not None:
            def locate(start, end, x):
                return plain_locate(start, end, x, inputs=rates.copy())

    def fire(time, which, actions, x):
        """Apply what happens at ``time``: the rising events in ``which`` (the delayed
        ones scheduled), the delayed jumps due, the dosing records' ``actions``; record
        the firing."""
        before = x
        now = [k for k in which if events[k].delay is None]
        scheduled = [_Scheduled(events[k], k, time, before, theta) for k in which
                     if events[k].delay is not None]
        for k in now:
            x = events[k].jump(time, x, theta)
        queue.extend(scheduled)
        queue.sort(key=lambda q: q.time)  # stable: scheduled together, applied in order
        due = [q for q in queue if q.time <= time]
        for entry in due:
            queue.remove(entry)
            x = entry.apply(x, theta)
        if actions:
            if actions.reset:
                x = np.array(x0, dtype=np.float64)
            for record in actions.steady:
                if periodic is None:
                    raise ValueError("A steady-state dose needs the solve's periodic state "
                                     "(periodic=...).")
                x = periodic(record) + (x if record.steady_state == 2 else 0.0)
            x = add_doses(x, actions.amounts)
            for state, change in actions.rates.items():
                rates[fed.index(state)] += change
        fired.append(Firing(float(time), now, before, x, scheduled, due, actions))
        return x

    holds = _holds(events, t0, x, theta) if events else []
    at_start = [k for k, event in enumerate(events) if holds[k] and not event.initial_value]
    if at_start or at_start_doses:
        x = fire(t0, at_start, at_start_doses, x)
        if events:
            holds = _holds(events, t0, x, theta)
    start, at_once, pending = float(t0), 0, list(later)
    # the triggers that rose at ``start`` and that the firing left where they were
    rose = _unmoved(events, at_start, t0, x0, x, theta)
    while True:
        horizon, actions = pending[0] if pending else (t_end, None)
        if queue and queue[0].time < t_end and (not pending or queue[0].time < horizon):
            horizon, actions = queue[0].time, None
        tau, which, search, x_search, searches = None, [], start, x, 0
        while events and search < horizon:
            if locate is not None:
                tau, which, x_tau = locate(search, horizon, x_search)
            else:
                steps, dense = solve_dense(search, horizon, x_search)
                tau, which = _first_crossing(events, theta, np.asarray(steps), dense, holds)
                x_tau = None if tau is None else dense(np.array([tau]))[:, 0]
            searches += 1
            if tau is None or tau - start > 1e-9 * max(1.0, abs(start)) or not rose & set(
                    which) or tau <= search or searches > 3:
                break
            # a trigger that rose at ``start`` and still sits at zero (a delayed event's,
            # a time trigger's: the jump did not move it), seen rising again by rounding:
            # the others that cross here fire; else search on from just past it, where
            # it holds (the solution there, as the search found it)
            which = [k for k in which if k not in rose]
            if which:
                break
            tau, search, x_search = None, tau, x_tau
            holds = [h or k in rose for k, h in enumerate(holds)]
        end = horizon if tau is None else tau
        inside = (times > start) & (times <= end)
        t_eval = np.union1d(times[inside], [end])
        index = np.searchsorted(t_eval, times[inside])
        out = solve_segment(start, end, x, t_eval, inside, index)
        states[inside] = out[index]
        dosed = actions is not None and end == horizon
        delayed_due = bool(queue) and queue[0].time <= end < t_end
        if tau is None and not dosed and not delayed_due:
            return states, fired
        if dosed:
            pending.pop(0)
        x = fire(end, which, actions if dosed else None, out[-1])
        rose = _unmoved(events, which, end, out[-1], x, theta)
        if which:
            at_once = at_once + 1 if end - start <= 1e-9 * max(1.0, abs(end)) else 0
            if len(fired) > MAX_EVENTS or at_once >= MAX_EVENTS_AT_ONCE:
                raise IntegrationError(
                    f"The events {[events[k].name or k for k in which]} fired "
                    f"{len(fired)} times by t={end:g}, the last {at_once + 1} within "
                    f"{end - fired[-at_once - 1].time:.3g} of one another: a jump that sets "
                    "its own trigger off again at once (or more events than a solve can "
                    "hold).", t_reached=end)
        if events:
            holds = _holds(events, end, x, theta)
            for k in rose:  # risen and not moved by the jump: holds, though at zero
                holds[k] = holds[k] or abs(events[k].value(end, x, theta)) <= 1e-9
        start = end


class Firing(NamedTuple):
    """What happened at one time of a solve (:func:`solve_across_events`).

    Attributes
    ----------
    time : float
    which : list of int
        The events that jumped where their triggers rose, in the order applied (empty for
        a dose alone, whose jump leaves the sensitivities continuous).
    before, after : ndarray of shape (n_states,)
        The state just before and just after.
    scheduled : list
        The delayed events whose triggers rose here (their jumps come later).
    due : list
        The delayed jumps applied here, each scheduled at an earlier firing (or here, with
        a zero delay).
    actions : Actions or None
        What the dosing records did here (after the events).
    """

    time: float
    which: list
    before: np.ndarray
    after: np.ndarray
    scheduled: list = []
    due: list = []
    actions: object = None


class _Scheduled:
    """A delayed event's jump, scheduled where its trigger rose: its time, and the values
    it assigns where they are taken at the trigger's time. The sensitivities keep the
    derivatives of both on it (``dtime``, ``dvalues``) between the two firings."""

    def __init__(self, event, k, trigger_time, state, theta):
        self.event, self.k = event, k
        self.trigger_time, self.state = float(trigger_time), np.array(state, dtype=float)
        self.time = self.trigger_time + event.delay_value(theta)
        self.values = (event.jump(trigger_time, state, theta)
                       if event.use_values_from_trigger_time else None)
        self.dtime = self.dvalues = None

    def targets(self, n):
        return np.arange(n) if self.event.targets is None else list(self.event.targets)

    def apply(self, x, theta):
        """The state after the jump, from ``x`` just before it."""
        if self.values is None:  # values at the jump's own time
            return self.event.jump(self.time, x, theta)
        x = np.array(x, dtype=np.float64)
        targets = self.targets(x.size)
        x[targets] = self.values[targets]
        return x
