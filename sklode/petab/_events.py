"""SBML events that switch a value at a time: read as piecewise functions of time.

An event whose trigger is ``time >= T`` (or ``time > T``, ``T <= time``, ...) with ``T`` free of
states, and whose assignments set variables that nothing else changes (a parameter, a
constant or boundary species, a species no reaction touches) to values free of states, is
the same model as those variables written as piecewise functions of time: the value of the
last event fired so far, else the variable's own (initial) value. That is what this module
builds, so the solves, their sensitivities and their compiled form are those of any other
switch in time (the compiled solve finds the switch and restarts past it). It covers the
collection's time-triggered stimuli (Smith_BMCSystBiol2013: insulin set at ``t_ins``, 2880 and
2895 minutes).

The SBML semantics kept: with ``initialValue = true`` the trigger counts as true before the
start (t = 0), so an event whose time is at or before the start never fires; with
``false`` it fires at the start. A ``delay`` free of states adds to ``T``.
``useValuesFromTriggerTime`` and ``persistent`` cannot matter here (the values are free of
states and a time trigger never turns false). Events that fire at the same time apply in
the order of their priorities (constant numbers; higher first), else in document order: the
last one's value holds.

Refused with the reason: a trigger that depends on a state (the state would be located by
root finding and the sensitivities would jump at it), an assignment to a variable that
changes otherwise (a state jump), an assignment whose value names a state or another event's
target, a priority that is not a number.
"""

from __future__ import annotations

from ._errors import UnsupportedFeature

__all__ = ["event_switches"]


def _time_of(trigger, time, sp):
    """``T`` of a trigger ``time >= T`` (in any of its spellings), or None."""
    if not isinstance(trigger, (sp.GreaterThan, sp.StrictGreaterThan, sp.LessThan,
                                sp.StrictLessThan)):
        return None
    a, b = trigger.lhs, trigger.rhs
    if isinstance(trigger, (sp.LessThan, sp.StrictLessThan)):
        a, b = b, a  # T <= time
    difference = sp.expand(a - b)
    if sp.diff(difference, time) != 1:  # time - T with T free of time
        return None
    return time - difference


def event_switches(model, math, sym, time, sp, *, states, derivatives, parameters):
    """The variables the model's events set, as piecewise functions of time.

    Parameters
    ----------
    model : libsbml.Model
    math : callable
        ``math(sbase, what)``: the sympy expression of an SBML math element.
    sym : callable
        The symbol of a name.
    time : sympy.Symbol
    sp : module
        sympy.
    states : list of str
    derivatives : dict
        Each state's derivative (before assignment rules are substituted).
    parameters : dict
        The parameters no rule sets.

    Returns
    -------
    switches : dict
        Name -> the piecewise expression of each event target.
    times : list of sympy.Expr
        The events' times ``T`` (their symbols must not be estimated: the sensitivities of a
        switch time are not computed).
    """
    events = []
    state_symbols = {sym(s) for s in states}
    for k, event in enumerate(model.getListOfEvents()):
        name = event.getId() or f"number {k + 1}"
        trigger = event.getTrigger()
        if trigger is None or trigger.getMath() is None:
            raise ValueError(f"Event {name!r} has no trigger.")
        condition = math(trigger, f"The trigger of event {name!r}")
        T = _time_of(condition, time, sp)
        if T is None or T.free_symbols & state_symbols:
            raise UnsupportedFeature(
                f"the SBML event {name!r} triggered by {condition} (a trigger that depends "
                "on the state, located by root finding with sensitivities that jump there); "
                "events at a time (time >= T) are supported")
        if event.isSetDelay():
            delay = math(event.getDelay(), f"The delay of event {name!r}")
            if delay.free_symbols & (state_symbols | {time}):
                raise UnsupportedFeature(f"the delay of event {name!r}, which depends on the "
                                         "state")
            T = T + delay
        priority = 0.0
        if event.isSetPriority():
            value = math(event.getPriority(), f"The priority of event {name!r}")
            if value.free_symbols:
                raise UnsupportedFeature(f"the priority of event {name!r} ({value}), which is "
                                         "not a number")
            priority = float(value)
        assignments = {}
        for assignment in event.getListOfEventAssignments():
            target = assignment.getVariable()
            value = math(assignment, f"The assignment of event {name!r} to {target!r}")
            changes = derivatives.get(target, sp.Integer(0)) != 0 if target in states \
                else target not in parameters
            if changes:
                raise UnsupportedFeature(
                    f"the SBML event {name!r} assigns {target!r}, which also changes by "
                    "reactions or rules (the state would jump at the event)")
            assignments[target] = value
        events.append((T, priority, k, bool(trigger.getInitialValue()), assignments, name))
    targets = {sym(v) for e in events for v in e[4]}
    for T, _, _, _, assignments, name in events:
        for target, value in assignments.items():
            if value.free_symbols & (state_symbols | targets | {time}):
                raise UnsupportedFeature(
                    f"the assignment of event {name!r} to {target!r} ({value}), which names "
                    "the state, time or another event's target")

    def fired(event):
        T, _, _, initial_value, _, _ = event
        # a trigger true before the start (initialValue) never changes at T <= 0
        return sp.And(time >= T, T > 0) if initial_value else time >= T

    def after(later, earlier):  # ``later`` applies after ``earlier`` (its value holds)
        (Tl, pl, kl), (Te, pe, ke) = later[:3], earlier[:3]
        # later in time, or at the same time: lower priority (higher goes first), then
        # later in the document
        return Te <= Tl if (-pl, kl) > (-pe, ke) else Te < Tl

    switches = {}
    for target in dict.fromkeys(v for e in events for v in e[4]):
        setting = [e for e in events if target in e[4]]
        pieces = []
        for e in setting:
            last = [sp.Or(sp.Not(fired(o)), after(e, o)) for o in setting if o is not e]
            pieces.append((e[4][target], sp.And(fired(e), *last)))
        switches[target] = sp.Piecewise(*pieces, (sym(target), True))
    return switches, [e[0] for e in events]
