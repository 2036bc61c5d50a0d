"""Small PEtab problems written by the tests: an SBML model built with libsbml from formulas
(one compartment of size 1, so a species' concentration is its amount), and the four PEtab
tables from rows."""

import textwrap

import libsbml

#: The yaml of a problem whose four tables and model sit beside it under these names.
PROBLEM_YAML = textwrap.dedent("""\
    format_version: 1
    parameter_file: parameters.tsv
    problems:
    - condition_files: [conditions.tsv]
      measurement_files: [measurements.tsv]
      observable_files: [observables.tsv]
      sbml_files: [model.xml]
    """)


def _math(formula):
    node = libsbml.parseL3Formula(formula)
    if node is None:  # pragma: no cover - a typo in a test's formula
        raise ValueError(f"libsbml cannot parse {formula!r}: {libsbml.getLastParseL3Error()}")
    return node


def _check(code):
    if code != libsbml.LIBSBML_OPERATION_SUCCESS:  # pragma: no cover - a test's own mistake
        raise ValueError(libsbml.OperationReturnValue_toString(code))


def sbml_model(species, parameters, reactions=(), rate_rules=(), events=()):
    """SBML L3V1 text (the compartment ``cell`` is constant unless an event sets it).

    Parameters
    ----------
    species : dict of {name: initial amount}
    parameters : dict of {name: value}
        Constant parameters; a name in an event assignment becomes non-constant.
    reactions : sequence of (reactants, products, kinetic law)
        ``reactants``/``products``: lists of species names (stoichiometry 1).
    rate_rules : dict-like sequence of (variable, formula)
    events : sequence of dict
        ``trigger`` (formula), ``assignments`` ({variable: formula}) and optionally
        ``initial_value`` (default True), ``persistent`` (default True), ``delay`` (formula),
        ``priority`` (formula), ``use_values_from_trigger_time`` (default True).
    """
    document = libsbml.SBMLDocument(3, 1)
    model = document.createModel()
    model.setId("written_by_a_test")
    compartment = model.createCompartment()
    assigned = {v for e in events for v in e["assignments"]}
    for call in (compartment.setId("cell"), compartment.setSize(1.0),
                 compartment.setConstant("cell" not in assigned),
                 compartment.setSpatialDimensions(3)):
        _check(call)
    for name, amount in species.items():
        s = model.createSpecies()
        for call in (s.setId(name), s.setCompartment("cell"), s.setInitialAmount(amount),
                     s.setHasOnlySubstanceUnits(False), s.setBoundaryCondition(False),
                     s.setConstant(False)):
            _check(call)
    for name, value in parameters.items():
        p = model.createParameter()
        for call in (p.setId(name), p.setValue(value),
                     p.setConstant(name not in assigned
                                   and name not in dict(rate_rules))):
            _check(call)
    for k, (reactants, products, law) in enumerate(reactions):
        r = model.createReaction()
        _check(r.setId(f"r{k}"))
        _check(r.setReversible(False))
        for names, create in ((reactants, r.createReactant), (products, r.createProduct)):
            for name in names:
                ref = create()
                for call in (ref.setSpecies(name), ref.setStoichiometry(1.0),
                             ref.setConstant(True)):
                    _check(call)
        kinetic = r.createKineticLaw()
        _check(kinetic.setMath(_math(law)))
    for variable, formula in rate_rules:
        rule = model.createRateRule()
        _check(rule.setVariable(variable))
        _check(rule.setMath(_math(formula)))
    for k, spec in enumerate(events):
        event = model.createEvent()
        _check(event.setId(f"event{k}"))
        _check(event.setUseValuesFromTriggerTime(spec.get("use_values_from_trigger_time",
                                                          True)))
        trigger = event.createTrigger()
        _check(trigger.setMath(_math(spec["trigger"])))
        _check(trigger.setInitialValue(spec.get("initial_value", True)))
        _check(trigger.setPersistent(spec.get("persistent", True)))
        if "delay" in spec:
            _check(event.createDelay().setMath(_math(spec["delay"])))
        if "priority" in spec:
            _check(event.createPriority().setMath(_math(spec["priority"])))
        for variable, formula in spec["assignments"].items():
            assignment = event.createEventAssignment()
            _check(assignment.setVariable(variable))
            _check(assignment.setMath(_math(formula)))
    text = libsbml.writeSBMLToString(document)
    if document.getNumErrors(libsbml.LIBSBML_SEV_ERROR):  # pragma: no cover
        raise ValueError(document.getErrorLog().toString())
    return text


def _table(header, rows):
    return "\t".join(header) + "\n" + "".join(
        "\t".join("" if v is None else repr(float(v)) if isinstance(v, float) else str(v)
                  for v in row) + "\n" for row in rows)


def write_problem(folder, sbml, *, parameters, observables, measurements, conditions=None):
    """Write a PEtab problem into ``folder``; return its yaml path.

    Parameters
    ----------
    parameters : sequence of (id, scale, lower, upper, nominal, estimate)
    observables : sequence of (id, formula, noise formula)
    measurements : sequence of (observable, condition, measurement, time, noise parameters)
    conditions : (column names, rows), optional
        Defaults to one condition ``c0`` that changes nothing.
    """
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.xml").write_text(sbml)
    header, rows = conditions or ((), [("c0",)])
    (folder / "conditions.tsv").write_text(_table(("conditionId",) + tuple(header), rows))
    (folder / "parameters.tsv").write_text(_table(
        ("parameterId", "parameterScale", "lowerBound", "upperBound", "nominalValue",
         "estimate"), parameters))
    (folder / "observables.tsv").write_text(_table(
        ("observableId", "observableFormula", "noiseFormula"), observables))
    (folder / "measurements.tsv").write_text(_table(
        ("observableId", "simulationConditionId", "measurement", "time", "noiseParameters"),
        measurements))
    (folder / "problem.yaml").write_text(PROBLEM_YAML)
    return folder / "problem.yaml"
