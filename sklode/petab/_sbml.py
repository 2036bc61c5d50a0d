"""SBML -> a symbolic ODE: states, parameters, right-hand sides and initial values as sympy
expressions, read with libsbml and sbmlmath (the optional extra ``petab``).

What the ODE is, following the SBML specification (level 3, section 4) and what AMICI does:

* a species is a state unless an assignment rule sets it; its symbol denotes its
  concentration (amount / size of its compartment) unless ``hasOnlySubstanceUnits``, when it
  denotes its amount, and the state is what the symbol denotes. A reaction's kinetic law is
  an amount per time, so ``d[S]/dt = sum(stoichiometry * rate) / size(compartment)`` for a
  concentration and without the division for an amount. Boundary and constant species are
  not changed by reactions (their derivative is 0 unless a rate rule gives it);
* a rate rule makes its target (species or parameter) a state with that derivative;
* an assignment rule is substituted wherever its target appears (rules in the order that
  resolves them, every expression in the end in states, parameters and time);
* a parameter or compartment that no rule sets is an entry of theta, with its SBML value
  as the nominal;
* the initial value of a state: its initial assignment if there is one, else its initial
  amount or concentration (converted to what the state denotes), else a rate-rule target's
  SBML value; it may depend on parameters (fitted through them).

Events that set a value at a time are piecewise functions of time, the others jumps of
the state (:mod:`._events`).

What is refused, with the feature named: events whose trigger is an equality, whose delay
reads the state or whose delayed trigger is not persistent, algebraic rules, fast reactions,
delays (the ``delay`` function), ``rateOf``, a compartment whose size a rule changes,
stoichiometries set by rules or math.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ._errors import UnsupportedFeature
from ._events import event_switches

__all__ = ["SymbolicODE", "UnsupportedFeature", "read_sbml"]


@dataclass
class SymbolicODE:
    """An ODE read from SBML: every expression in ``states``, ``parameters`` and ``time``.

    Attributes
    ----------
    states : list of str
        State names (species and rate-rule targets, in document order).
    parameters : dict
        Name -> nominal value: the parameters and compartment sizes no rule sets.
    rhs : list of sympy.Expr
        d state / dt, one per state.
    initial : list of sympy.Expr
        Each state's initial value (may depend on parameters).
    assignments : dict
        Name -> sympy.Expr of every assignment-rule target (substituted already), so that
        observables that name one can be written in states and parameters; an event's
        target, as its piecewise function of time (:mod:`._events`).
    time : sympy.Symbol
        The symbol of time in the expressions.
    event_times : list of sympy.Expr
        The times of the model's switch events (in parameters).
    jumps : list of dict
        The events that make the state jump (:func:`._events.event_switches`).
    """

    states: list
    parameters: dict
    rhs: list
    initial: list
    assignments: dict = field(default_factory=dict)
    time: object = None
    symbols: dict = field(default_factory=dict)
    event_times: list = field(default_factory=list)
    jumps: list = field(default_factory=list)

    def symbol(self, name):
        """The sympy symbol of a state, parameter or assignment target by name."""
        return self.symbols[name]


def _imports():
    try:
        import libsbml
        import sbmlmath
        import sympy
    except ImportError as exc:  # pragma: no cover - exercised without the extra
        raise ImportError(
            "Reading SBML needs the optional extra 'petab': pip install 'sklode[petab]' "
            f"(python-libsbml, sbmlmath, sympy, petab); missing: {exc.name}") from None
    return libsbml, sbmlmath, sympy


def read_sbml(path_or_document, moving=()):
    """The symbolic ODE of an SBML file (or a libsbml document).

    Parameters
    ----------
    path_or_document : str, os.PathLike or libsbml.SBMLDocument
    moving : collection of str, default=()
        Parameters that will be estimated: an event at a time that reads one is made a
        jump (its time's sensitivity is then computed), not a switch in time.

    Returns
    -------
    SymbolicODE

    Raises
    ------
    UnsupportedFeature
        Naming the SBML feature (events, algebraic rules, ...) the model uses.
    ValueError
        When libsbml reports errors reading the file.
    """
    libsbml, sbmlmath, sp = _imports()
    if isinstance(path_or_document, libsbml.SBMLDocument):
        document = path_or_document.clone()
    else:
        document = libsbml.readSBMLFromFile(str(path_or_document))
        errors = [document.getError(i) for i in range(document.getNumErrors())]
        fatal = [e for e in errors if e.getSeverity() >= libsbml.LIBSBML_SEV_ERROR]
        if fatal:
            raise ValueError(f"libsbml cannot read {path_or_document}: "
                             f"{fatal[0].getMessage().strip()}")
    model = document.getModel()
    if model is None:
        raise ValueError(f"{path_or_document} holds no SBML model.")
    if model.getNumFunctionDefinitions():  # inline them: kinetic laws call them
        props = libsbml.ConversionProperties()
        props.addOption("expandFunctionDefinitions", True)
        if document.convert(props) != libsbml.LIBSBML_OPERATION_SUCCESS:
            raise UnsupportedFeature("SBML function definitions that libsbml cannot expand")
        model = document.getModel()
    _refuse_unsupported(model)

    time = sp.Symbol("t", real=True)
    symbols = {}

    def sym(name):
        if name not in symbols:
            symbols[name] = sp.Symbol(name, real=True)
        return symbols[name]

    def math(sbase, what):
        if sbase.getMath() is None:
            raise ValueError(f"{what} has no math.")
        expr = sbmlmath.sbml_math_to_sympy(sbase)
        return _normalised(expr, sym, time, sbmlmath, what)

    rules = {model.getRule(i).getVariable(): model.getRule(i)
             for i in range(model.getNumRules())}
    rate_rules = {v: r for v, r in rules.items() if r.isRate()}
    assign_rules = {v: r for v, r in rules.items() if r.isAssignment()}

    compartments = {c.getId(): c for c in model.getListOfCompartments()}
    for cid in compartments:
        if cid in rate_rules:
            raise UnsupportedFeature(f"a compartment whose size changes in time (rate rule "
                                     f"on {cid!r})")

    # states: species not set by assignment rules, then parameters with rate rules
    states, derivatives, initial = [], {}, {}
    species = list(model.getListOfSpecies())
    by_id = {s.getId(): s for s in species}
    for s in species:
        sid = s.getId()
        if sid in assign_rules:
            continue
        states.append(sid)
        derivatives[sid] = sp.Integer(0)
    for p in model.getListOfParameters():
        if p.getId() in rate_rules:
            states.append(p.getId())

    # reactions
    for reaction in model.getListOfReactions():
        law = reaction.getKineticLaw()
        if law is None:
            raise ValueError(f"Reaction {reaction.getId()!r} has no kinetic law.")
        rate = math(law, f"The kinetic law of reaction {reaction.getId()!r}")
        local = {}
        for container in (law.getListOfParameters(), law.getListOfLocalParameters()):
            for lp in container:
                local[sym(lp.getId())] = sp.Float(lp.getValue(), 17)
        if local:
            rate = rate.xreplace(local)
        for sign, refs in ((-1, reaction.getListOfReactants()),
                           (1, reaction.getListOfProducts())):
            for ref in refs:
                sid = ref.getSpecies()
                s = by_id[sid]
                if s.getBoundaryCondition() or s.getConstant() or sid in rate_rules \
                        or sid in assign_rules:
                    continue
                if ref.isSetId() and (ref.getId() in rules or model.getInitialAssignment(
                        ref.getId()) is not None):
                    raise UnsupportedFeature(f"a stoichiometry set by a rule or an initial "
                                             f"assignment (species reference {ref.getId()!r})")
                if hasattr(ref, "isSetStoichiometryMath") and ref.isSetStoichiometryMath():
                    raise UnsupportedFeature("stoichiometryMath")
                stoich = ref.getStoichiometry() if ref.isSetStoichiometry() else 1.0
                term = sign * sp.Float(stoich, 17) * rate
                if not s.getHasOnlySubstanceUnits():
                    term = term / sym(s.getCompartment())
                derivatives[sid] = derivatives[sid] + term
    for target, rule in rate_rules.items():
        derivatives[target] = math(rule, f"The rate rule of {target!r}")

    # assignment rules: substitute them into one another until none is left
    assignments = {v: math(r, f"The assignment rule of {v!r}") for v, r in assign_rules.items()}
    assignments = _resolved(assignments, sym, "assignment rules")

    def substituted(expr):
        return expr.xreplace({sym(v): e for v, e in assignments.items()})

    # parameters: globals and compartment sizes that no rule sets
    parameters = {}
    for p in model.getListOfParameters():
        if p.getId() not in rules:
            parameters[p.getId()] = float(p.getValue()) if p.isSetValue() else float("nan")
    for cid, c in compartments.items():
        if cid not in rules:
            parameters[cid] = float(c.getSize()) if c.isSetSize() else 1.0

    # initial values
    initial_assignments = {ia.getSymbol(): math(ia, f"The initial assignment of "
                                                    f"{ia.getSymbol()!r}")
                           for ia in model.getListOfInitialAssignments()}
    # a constant parameter or compartment with an initial assignment keeps that value: it is
    # an expression of the other parameters, substituted like an assignment rule
    for target in [t for t in initial_assignments if t in parameters]:
        value = initial_assignments.pop(target)
        if value.free_symbols:
            assignments[target] = value
            del parameters[target]
        else:  # a number: the parameter's value (a condition may still set it)
            parameters[target] = float(value)
    if any(e.free_symbols & {sym(v) for v in assignments} for e in assignments.values()):
        assignments = _resolved(assignments, sym, "assignment rules and initial assignments")
    for sid in states:
        if sid in initial_assignments:
            initial[sid] = initial_assignments[sid]
        elif sid in by_id:
            s = by_id[sid]
            size = sym(s.getCompartment())
            if s.isSetInitialAmount():
                amount = sp.Float(s.getInitialAmount(), 17)
                initial[sid] = amount if s.getHasOnlySubstanceUnits() else amount / size
            elif s.isSetInitialConcentration():
                conc = sp.Float(s.getInitialConcentration(), 17)
                initial[sid] = conc * size if s.getHasOnlySubstanceUnits() else conc
            else:
                raise ValueError(f"Species {sid!r} has no initial value (no initial amount, "
                                 "concentration or assignment).")
        else:  # a parameter with a rate rule: its SBML value
            p = model.getParameter(sid)
            initial[sid] = sp.Float(p.getValue(), 17)
    # an initial value may name another state's initial value or an assignment target
    state_initials = {sym(s): initial[s] for s in states}
    for _ in range(len(states) + 1):
        changed = False
        for s in states:
            new = substituted(initial[s]).xreplace(state_initials)
            if new != initial[s]:
                initial[s], changed = new, True
        state_initials = {sym(s): initial[s] for s in states}
        if not changed:
            break
    else:
        raise ValueError("The initial assignments refer to one another in a cycle.")

    # events that set a value at a time: the targets become piecewise functions of time
    switches, event_times, jumps = event_switches(
        model, math, sym, time, sp, states=states, derivatives=derivatives,
        parameters=parameters, compartments=set(compartments), moving=set(moving))
    switched = {sym(v): e for v, e in switches.items()}
    rhs = [substituted(derivatives[s]).xreplace(switched) for s in states]
    for jump in jumps:  # in states and parameters, as the field
        jump["trigger"] = substituted(jump["trigger"]).xreplace(switched)
        jump["assignments"] = {v: substituted(e).xreplace(switched)
                               for v, e in jump["assignments"].items()}
        if jump["delay"] is not None:
            jump["delay"] = substituted(jump["delay"]).xreplace(switched)
    assignments = {v: e.xreplace({sym(k): w for k, w in switches.items()})
                   for v, e in assignments.items()}
    assignments.update(switches)  # observables that name a target read its switch
    promoted = _promote_jumped(jumps, states, rhs, initial, parameters, assignments,
                               compartments, by_id, sym, sp)
    if promoted:  # the field, the triggers, the values and the rules read the new states
        assignments = {v: e.xreplace(promoted) for v, e in assignments.items()}
        assignments.update({str(old): new for old, new in promoted.items()})
    known = {sym(n) for n in list(states) + list(parameters)} | {time}
    for name, expr in [*zip(states, rhs), *initial.items()]:
        unknown = expr.free_symbols - known
        if unknown:
            raise ValueError(f"The expression of {name!r} names {sorted(map(str, unknown))}, "
                             "which the model does not define.")
    for s in initial:
        if time in initial[s].free_symbols:
            initial[s] = initial[s].xreplace({time: sp.Integer(0)})
    return SymbolicODE(states=states, parameters=parameters, rhs=rhs,
                       initial=[initial[s] for s in states], assignments=assignments,
                       time=time, symbols=symbols, event_times=event_times,
                       jumps=jumps)


def _promote_jumped(jumps, states, rhs, initial, parameters, assignments, compartments, by_id,
                    sym, sp):
    """Make each parameter or compartment that a jump event sets a state (``<id>_state``,
    zero derivative, the parameter's value as its initial value), in place; return
    ``{parameter symbol: state symbol}``. The state starts at the parameter's value (or
    its initial assignment).

    The parameter itself stays an entry of theta (the PEtab tables name it), now the
    state's initial value. A compartment that jumps carries its concentrations: their
    amounts stay, so each species in it that the same event does not set is scaled by
    ``size before / size after``."""
    targets = list(dict.fromkeys(v for jump in jumps for v in jump["assignments"]
                                 if v not in states))
    promoted = {}
    for v in targets:
        if v in parameters:
            start = sym(v)
        elif v in assignments:  # (no rule may set an event's target): its initial
            start = assignments[v]  # assignment, in parameters
        else:
            raise ValueError(f"An event assigns {v!r}, which is no species, parameter or "
                             "compartment of the model.")
        name = f"{v}_state"
        while name in parameters or name in states or name in by_id:
            name += "_"
        promoted[sym(v)] = sym(name)
        states.append(name)
        rhs.append(sp.Integer(0))
        initial[name] = start
    if not promoted:
        return promoted
    rhs[:] = [e.xreplace(promoted) for e in rhs]
    for jump in jumps:
        if jump["delay"] is not None and jump["delay"].free_symbols & set(promoted):
            raise UnsupportedFeature(f"the delay of event {jump['name']!r}, which reads "
                                     "a variable that an event sets")
        old = jump["assignments"]
        new = {}
        for v, value in old.items():
            new[str(promoted.get(sym(v), v))] = value
            if v in compartments:
                for sid, s in by_id.items():
                    if (s.getCompartment() == v and sid in states and sid not in old
                            and not s.getHasOnlySubstanceUnits()):
                        new.setdefault(sid, sym(sid) * sym(v) / value)
        jump["assignments"] = {v: e.xreplace(promoted) for v, e in new.items()}
        jump["trigger"] = jump["trigger"].xreplace(promoted)
    return promoted


def _refuse_unsupported(model):
    for i in range(model.getNumRules()):
        rule = model.getRule(i)
        if rule.isAlgebraic():
            raise UnsupportedFeature("SBML algebraic rules (a differential-algebraic system)")
    for reaction in model.getListOfReactions():
        if reaction.isSetFast() and reaction.getFast():
            raise UnsupportedFeature(f"fast reactions ({reaction.getId()!r})")
    if model.getNumConstraints():
        pass  # constraints only check a simulation; nothing to integrate


def _normalised(expr, sym, time, sbmlmath, what):
    """The expression with sklode's symbols: time as ``t``, every name a real symbol."""
    import sympy as sp

    replace = {}
    for s in expr.free_symbols:
        if isinstance(s, sbmlmath.TimeSymbol):
            replace[s] = time
        elif isinstance(s, sp.Symbol):
            replace[s] = sym(s.name)
    expr = expr.xreplace(replace)
    for node in sp.preorder_traversal(expr):
        name = type(node).__name__
        if name in ("Delay", "RateOf") or isinstance(node, sp.core.function.AppliedUndef):
            raise UnsupportedFeature(f"{what} uses {node.func}: delays, rateOf and undefined "
                                     "functions are not supported")
    return expr


def _resolved(assignments, sym, what):
    """Assignment expressions with every other assignment target substituted."""
    resolved = dict(assignments)
    targets = {sym(v) for v in resolved}
    for _ in range(len(resolved) + 1):
        pending = {v: e for v, e in resolved.items() if e.free_symbols & targets}
        if not pending:
            return resolved
        table = {sym(v): e for v, e in resolved.items()}
        for v, e in pending.items():
            resolved[v] = e.xreplace(table)
    raise ValueError(f"The {what} refer to one another in a cycle.")
