"""Doses: what happens to the state at given times, in one implementation.

A bolus ``(time, state, amount)`` adds ``amount`` to ``state`` at ``time``. :func:`dose_segments`
groups an experiment's doses by time and says which act at the start and which between output
times (a dose at an observation's time acts after that observation, as NONMEM orders a trough
sample and a dose); :func:`solve_across_doses` integrates from one dose to the next and applies
each, for every forward solve: :func:`sklode.integrate.simulate`, the trajectories with dense
output and the CVODES solves with sensitivities (:mod:`sklode.outputerror._sensitivity`; a
bolus of known size leaves the sensitivities continuous). The methods on the data grid cut
their data at the same dose times (:class:`sklode._on_grid.DoseSplit`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["add_doses", "dose_segments", "solve_across_doses"]


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
    grouped = {}
    for time, state, amount in doses:
        if time < t0:
            raise ValueError(f"A dose at t={time:g} comes before the initial time t0={t0:g}: "
                             "move t0 to (or before) the first dose.")
        if time < t_end or time == t0:
            grouped.setdefault(float(time), {}).setdefault(int(state), 0.0)
            grouped[float(time)][int(state)] += float(amount)
    at_start = grouped.pop(float(t0), None)
    return at_start, sorted(grouped.items())



def add_doses(x, amounts):
    """``x`` with ``amounts`` ``{state: amount}`` added (a copy)."""
    x = np.array(x, dtype=np.float64)
    for state, amount in (amounts or {}).items():
        x[state] += amount
    return x



def solve_across_doses(solve_segment, x0, t0, times, doses):
    """The states at ``times``, integrated in segments from one dose to the next.

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
    t_end = float(times[-1])
    at_start, later = dose_segments(doses or [], t0, t_end)
    x, start = add_doses(x0, at_start), t0
    states = np.empty((times.size, x.size))
    for end, amounts in later + [(t_end, None)]:
        inside = (times > start) & (times <= end)
        t_eval = np.union1d(times[inside], [end])
        index = np.searchsorted(t_eval, times[inside])
        out = solve_segment(start, end, x, t_eval, inside, index)
        states[inside] = out[index]
        x, start = add_doses(out[-1], amounts), end
    return states
