"""SBML events: values switched at a time (piecewise functions of time) or jumps of the state.

An event whose trigger is ``time >= T`` (or ``time > T``, ``T <= time``, ...) with ``T`` free of
states, and whose assignments set variables that nothing else changes (a parameter, a
constant or boundary species, a species no reaction touches) to values free of states, is
the same model as those variables written as piecewise functions of time: the value of the
last event fired so far, else the variable's own (initial) value. That is what this module
builds for them, so the solves, their sensitivities and their compiled form are those of any
other switch in time (the compiled solve finds the switch and restarts past it). It covers the
collection's time-triggered stimuli (Smith_BMCSystBiol2013: insulin set at ``t_ins``, 2880 and
2895 minutes). The SBML semantics kept: with ``initialValue = true`` the trigger counts as
true before the start (t = 0), so an event whose time is at or before the start never fires;
with ``false`` it fires at the start. A ``delay`` free of states adds to ``T``. Events that
fire at the same time apply in the order of their priorities (constant numbers; higher
first), else in document order: the last one's value holds.

Every other event is a **jump** of the state (:class:`sklode.models.Event`): its trigger, a
comparison ``a > b`` (or ``>=``, ``<``, ``<=``) of anything, or an ``and``, ``or``, ``not`` of
comparisons, fires where ``a - b`` (or ``b - a``; the smallest, largest, negated of the
parts') crosses zero from below; its assignments set states (species and rate-rule targets)
to values of the state and parameters just before it. A parameter or compartment that a
jump sets becomes a state whose derivative is zero (the caller, :mod:`._sbml`; a compartment
that changes size carries the concentrations in it, whose amounts stay). A delay free of the
state makes the jump come that long after the trigger rises, with the values at the
trigger's time (``useValuesFromTriggerTime``) or at its own. The solves locate the crossing
and the sensitivities jump there, the event time's own sensitivity included. An event that
assigns a variable some jump event assigns is a jump too; so is an event that sets a
compartment, and one whose time reads a parameter that will be estimated.

Refused with the reason: a trigger that is an equality, a delay that reads the state, a
delayed jump whose trigger is not persistent, a priority that is not a number.
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


def _jump_function(condition, sp):
    """``g`` of a trigger: it fires where ``g`` crosses zero from below, ``g >= 0`` where
    the trigger is true. A comparison is its difference; ``and`` the smallest of its parts'
    (true where all are), ``or`` the largest (true where one is), ``not`` the negation (the
    boundary itself aside). None for any other trigger (an equality, a Boolean constant)."""
    if isinstance(condition, (sp.GreaterThan, sp.StrictGreaterThan)):
        return condition.lhs - condition.rhs
    if isinstance(condition, (sp.LessThan, sp.StrictLessThan)):
        return condition.rhs - condition.lhs
    if isinstance(condition, (sp.And, sp.Or, sp.Not)):
        parts = [_jump_function(c, sp) for c in condition.args]
        if any(g is None for g in parts):
            return None
        if isinstance(condition, sp.Not):
            return -parts[0]
        return (sp.Min if isinstance(condition, sp.And) else sp.Max)(*parts)
    return None


def event_switches(model, math, sym, time, sp, *, states, derivatives, parameters,
                   compartments=(), moving=()):
    """The variables the model's time events set, as piecewise functions of time, and the
    other events as jumps.

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
    compartments : collection of str
        The compartments' ids: an event that sets one is a jump (the concentrations in it
        jump too, which a switch in time would not do).
    moving : collection of str
        Parameters that will be estimated: an event whose time reads one is a jump (the
        sensitivity of a switch's time is not computed; a jump's is).

    Returns
    -------
    switches : dict
        Name -> the piecewise expression of each switched variable.
    times : list of sympy.Expr
        The switch events' times ``T`` (their symbols must not be estimated: the
        sensitivities of a switch time are not computed).
    jumps : list of dict
        The jump events, in the order they apply when they fire together: ``trigger`` (the
        sympy ``g``), ``assignments`` ({variable: sympy value}; a variable that is not a
        state, a parameter or compartment, the caller makes a state), ``initial_value``,
        ``name``, ``delay`` (a sympy expression of parameters, or None) and
        ``use_values_from_trigger_time``.
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
        if T is not None and T.free_symbols & state_symbols:
            T = None
        delay = None
        if event.isSetDelay():
            delay = math(event.getDelay(), f"The delay of event {name!r}")
            if delay.free_symbols & (state_symbols | {time}):
                raise UnsupportedFeature(f"the delay of event {name!r}, which depends on the "
                                         "state")
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
            assignments[target] = math(assignment, f"The assignment of event {name!r} to "
                                                   f"{target!r}")
        events.append({"T": T, "delay": delay, "priority": priority, "k": k, "name": name,
                       "initial_value": bool(trigger.getInitialValue()),
                       "persistent": not trigger.isSetPersistent() or trigger.getPersistent(),
                       "use_values": not event.isSetUseValuesFromTriggerTime()
                       or event.getUseValuesFromTriggerTime(),
                       "condition": condition, "assignments": assignments})

    # which events jump: a trigger on the state, a target that changes otherwise, a value
    # that reads the state, time or another event's target; then every event that shares
    # a target with a jump
    targets = {sym(v) for e in events for v in e["assignments"]}
    for e in events:
        changing = [v for v in e["assignments"] if (
            derivatives.get(v, sp.Integer(0)) != 0 if v in states else v not in parameters)]
        e["jump"] = e["T"] is None or bool(changing) or any(
            value.free_symbols & (state_symbols | targets | {time})
            for value in e["assignments"].values()) or any(
            v in compartments for v in e["assignments"]) or any(
            s.name in moving for s in (e["T"] + (e["delay"] or 0)).free_symbols)
    while True:
        jumped = {v for e in events if e["jump"] for v in e["assignments"]}
        spread = [e for e in events if not e["jump"] and jumped & set(e["assignments"])]
        if not spread:
            break
        for e in spread:
            e["jump"] = True

    jumps = []
    for e in sorted((e for e in events if e["jump"]), key=lambda e: (-e["priority"], e["k"])):
        name = e["name"]
        g = _jump_function(e["condition"], sp)
        if g is None:
            raise UnsupportedFeature(
                f"the SBML event {name!r} triggered by {e['condition']} (comparisons with "
                "<, <=, >, >= and their and, or, not are supported, not equalities)")
        delay = e["delay"] if e["delay"] is not None and e["delay"] != 0 else None
        if delay is not None and not e["persistent"]:
            raise UnsupportedFeature(
                f"the delay of event {name!r}, whose trigger is not persistent (a jump "
                "cancelled where the trigger stops holding before the delay has passed)")
        jumps.append({"trigger": g, "assignments": e["assignments"],
                      "initial_value": e["initial_value"], "name": name, "delay": delay,
                      "use_values_from_trigger_time": e["use_values"]})

    switching = [e for e in events if not e["jump"]]
    for e in switching:
        if e["delay"] is not None:
            e["T"] = e["T"] + e["delay"]

    def fired(event):
        T = event["T"]
        # a trigger true before the start (initialValue) never changes at T <= 0
        return sp.And(time >= T, T > 0) if event["initial_value"] else time >= T

    def after(later, earlier):  # ``later`` applies after ``earlier`` (its value holds)
        Tl, Te = later["T"], earlier["T"]
        # later in time, or at the same time: lower priority (higher goes first), then
        # later in the document
        return Te <= Tl if (-later["priority"], later["k"]) > (-earlier["priority"],
                                                              earlier["k"]) else Te < Tl

    switches = {}
    for target in dict.fromkeys(v for e in switching for v in e["assignments"]):
        setting = [e for e in switching if target in e["assignments"]]
        pieces = []
        for e in setting:
            last = [sp.Or(sp.Not(fired(o)), after(e, o)) for o in setting if o is not e]
            pieces.append((e["assignments"][target], sp.And(fired(e), *last)))
        switches[target] = sp.Piecewise(*pieces, (sym(target), True))
    return switches, [e["T"] for e in switching], jumps
