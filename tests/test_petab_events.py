"""SBML events that set values at times (sklode.petab._events), on a model written here:
X' = g(t) - k X, where g sums five event targets, each exercising one construct (a trigger
time that is a parameter, a constant species set by an event with a delay, initialValue
false at the start and true at the start, two simultaneous events ordered by priority, a
value that is an estimated parameter). Between the events g is constant, so X has a closed
form piece by piece: the likelihood, its gradient and a fit are checked against it."""

import warnings

import numpy as np
import pytest

pytest.importorskip("petab.v1")
pytest.importorskip("libsbml")
pytest.importorskip("sbmlmath")

from _petab_files import sbml_model, write_problem  # noqa: E402

from sklode import petab as sk_petab  # noqa: E402
from sklode.petab import UnsupportedFeature  # noqa: E402

K, A, T1 = 0.8, 1.5, 2.0
TIMES = (0.5, 1.0, 1.75, 2.5, 3.0, 4.0, 4.5, 5.5, 6.0, 8.0)
SIGMA = 0.05

EVENTS = [
    {"trigger": "time >= T1", "assignments": {"u": "a"}},          # u = a from T1 = 2
    {"trigger": "time >= 5", "assignments": {"u": "0"}},           # u = 0 from 5
    {"trigger": "time >= 1", "delay": "0.5", "assignments": {"S": "3"}},  # S = 3 at 1.5
    {"trigger": "time >= 0", "initial_value": False, "assignments": {"w": "2"}},  # at 0
    {"trigger": "time >= 0", "assignments": {"w2": "5"}},  # true before the start: never
    {"trigger": "time >= 3", "priority": "10", "assignments": {"q": "7"}},  # first at 3,
    {"trigger": "time >= 3", "priority": "1", "assignments": {"q": "9"}},   # then this
]


def _g_pieces(a):
    """(start, g) of each piece: g = u + S + w + w2 + q (w = 2 from the start)."""
    return [(0.0, 2.0), (1.5, 5.0), (2.0, 5.0 + a), (3.0, 14.0 + a), (5.0, 14.0)]


def _x(t, k=K, a=A, x0=1.0):
    """X by hand: on each piece X relaxes to g / k at rate k."""
    pieces = _g_pieces(a)
    x = x0
    for j, (begin, g) in enumerate(pieces):
        end = pieces[j + 1][0] if j + 1 < len(pieces) else np.inf
        if t <= end:
            return g / k + (x - g / k) * np.exp(-k * (t - begin))
        x = g / k + (x - g / k) * np.exp(-k * (end - begin))
    raise AssertionError("unreachable")


def _write(folder, events=EVENTS, estimate_T1=False, rate="g_in - k * X"):
    parameters = {"k": K, "a": A, "T1": T1, "u": 0.0, "w": 1.0, "w2": 0.0, "q": 0.0}
    sbml = sbml_model(species={"X": 1.0, "S": 0.0}, parameters=parameters,
                      rate_rules=[], reactions=[([], ["X"], rate.replace(
                          "g_in", "(u + S + w + w2 + q)"))], events=events)
    rng = np.random.default_rng(1)
    return write_problem(
        folder, sbml,
        parameters=[("k", "log10", 1e-2, 1e2, K, 1), ("a", "lin", -10, 10, A, 1),
                    ("T1", "lin", 0, 10, T1, int(estimate_T1))],
        observables=[("obs_X", "X", "noiseParameter1_obs_X")],
        measurements=[("obs_X", "c0", _x(t) + SIGMA * rng.standard_normal(), t, SIGMA)
                      for t in TIMES])


@pytest.fixture(scope="module")
def problem_path(tmp_path_factory):
    return _write(tmp_path_factory.mktemp("events"))


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_events_at_times_simulate_as_the_hand_written_pieces(problem_path, integrator):
    problem = sk_petab.load(problem_path)
    predicted = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)[0][:, 0]
    # the solves restart at each switch: within their tolerance of the closed form
    np.testing.assert_allclose(predicted, [_x(t) for t in TIMES], rtol=1e-7)
    Y = problem.experiments[0].Y[:, 0]
    by_hand = np.sum(0.5 * np.log(2 * np.pi * SIGMA**2)
                     + 0.5 * ((Y - [_x(t) for t in TIMES]) / SIGMA) ** 2)
    value = problem.neg_log_likelihood(integrator=integrator, rtol=1e-10, atol=1e-12)
    assert value == pytest.approx(by_hand, rel=1e-7)  # residuals ~1, states to 1e-8


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_the_gradient_across_the_events_matches_central_differences(problem_path,
                                                                     integrator):
    from test_petab import _gradients_and_central_differences, _posed

    problem = sk_petab.load(problem_path)
    objective, u0 = _posed(problem, integrator=integrator, rtol=1e-11, atol=1e-12)
    # h = 1e-5 as in test_petab: the adaptive solves' noise at 1e-11 stays below 1e-6
    grad, from_jacobian, numeric = _gradients_and_central_differences(objective, u0, 1e-5)
    for j in range(u0.size):
        assert from_jacobian[j] == pytest.approx(numeric[j], rel=1e-5, abs=1e-6), j
        assert grad[j] == pytest.approx(numeric[j], rel=1e-5, abs=1e-6), j
    # a (the value u takes between T1 and 5) reaches the cost only through the events
    assert abs(grad[1]) > 1.0


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_an_event_time_that_is_estimated_moves_with_its_sensitivity(tmp_path, integrator):
    # T1 estimated: the events that set u (at T1 and at 5) become jumps of a state u
    # (a switch's time has no sensitivity; a jump's has)
    from test_petab import _gradients_and_central_differences, _posed

    problem = sk_petab.load(_write(tmp_path / "moving", estimate_T1=True))
    assert "u_state" in problem.model.state_names and len(problem.model.events) == 2
    predicted = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)[0][:, 0]
    # as the switches: the solves restart at each event, within their tolerance
    np.testing.assert_allclose(predicted, [_x(t) for t in TIMES], rtol=1e-7)
    objective, u0 = _posed(problem, integrator=integrator, rtol=1e-11, atol=1e-12)
    grad, _, numeric = _gradients_and_central_differences(objective, u0, 1e-6)
    # the time located exactly (a time trigger); as the jumps' test
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-3)
    # X' jumps by a at T1: the cost depends on T1 (data at 2.5 and 3 after it)
    assert abs(grad[list(problem.parameter_names).index("T1")]) > 1.0


def test_a_fit_across_events_recovers_the_parameters(problem_path):
    problem = sk_petab.load(problem_path)
    est = problem.estimator(n_starts=2, random_state=0, theta0=np.array([0.3, 0.5]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 10 values for 2 unknowns: verdicts not tested here
        est.fit(problem.experiments)
    assert est.neg_log_likelihood_ <= problem.neg_log_likelihood() + 1e-6
    fitted = dict(zip(problem.model.param_names, est.theta_))
    # ten points at sd 0.05 on X ~ 2-18: k and a to a few percent (their standard errors
    # are ~0.5 % and ~2 %)
    assert fitted["k"] == pytest.approx(K, rel=0.03)
    assert fitted["a"] == pytest.approx(A, rel=0.1)


# ---- events that make the state jump: X' = -k X; where X falls below c it is refilled by
# d (a trigger on the state), and at T2 it gains 1.5 (a time trigger on a state that
# changes, at an estimated time; a doubling would commute with the decay and leave the
# later states independent of T2)
JUMP = {"k": 0.5, "c": 1.0, "d": 2.0, "T2": 6.0}
JUMP_TIMES = (0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.0, 9.0, 10.0)


def _jumping_x(t, k, c, d, T2, x0=4.0):
    """X by hand: from each start it decays, to the next refill (where it reaches c) or
    the doubling at T2, whichever comes first."""
    start, x, doubled = 0.0, x0, False
    while True:
        refill = start + np.log(x / c) / k if x > c else np.inf
        double = T2 if not doubled and T2 > start else np.inf
        nxt = min(refill, double)
        if t <= nxt:
            return x * np.exp(-k * (t - start))
        x = (c + d) if refill <= double else x * np.exp(-k * (double - start)) + 1.5
        doubled = doubled or double < refill
        start = nxt


def _write_jumps(folder, events=None, estimate=("k", "c", "d", "T2")):
    sbml = sbml_model(
        species={"X": 4.0}, parameters=JUMP, reactions=[(["X"], [], "k * X")],
        events=events if events is not None else [
            {"trigger": "X < c", "assignments": {"X": "X + d"}},
            {"trigger": "time >= T2", "assignments": {"X": "X + 1.5"}}])
    rng = np.random.default_rng(2)
    return write_problem(
        folder, sbml,
        parameters=[(n, "lin", 0.01, 20, v, int(n in estimate)) for n, v in JUMP.items()],
        observables=[("obs_X", "X", "noiseParameter1_obs_X")],
        measurements=[("obs_X", "c0", _jumping_x(t, **JUMP) + SIGMA * rng.standard_normal(),
                       t, SIGMA) for t in JUMP_TIMES])


@pytest.fixture(scope="module")
def jumps_path(tmp_path_factory):
    return _write_jumps(tmp_path_factory.mktemp("jumps"))


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_state_and_time_triggered_jumps_simulate_as_by_hand(jumps_path, integrator):
    problem = sk_petab.load(jumps_path)
    assert len(problem.model.events) == 2
    predicted = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)[0][:, 0]
    # two refills (2.77, 4.97), the gain at 6 and a third refill (8.38): the refill times
    # are located on a dense solve to ~1e-10
    np.testing.assert_allclose(predicted, [_jumping_x(t, **JUMP) for t in JUMP_TIMES],
                               rtol=1e-8)


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_the_gradient_across_jumps_matches_central_differences(jumps_path, integrator):
    from test_petab import _gradients_and_central_differences, _posed

    problem = sk_petab.load(jumps_path)
    objective, u0 = _posed(problem, theta0=problem.theta(problem.nominal * 1.02),
                           integrator=integrator, rtol=1e-11, atol=1e-12)
    # h = 1e-6: no event time crosses an observation time within it
    grad, from_jacobian, numeric = _gradients_and_central_differences(objective, u0, 1e-6)
    for j in range(u0.size):
        # the refill times are located to ~1e-11: ~1e-5 of the quotient at h = 1e-6
        assert from_jacobian[j] == pytest.approx(numeric[j], rel=1e-4, abs=1e-3), j
        assert grad[j] == pytest.approx(numeric[j], rel=1e-4, abs=1e-3), j
    # the threshold c and the time T2 reach the cost only through the events
    names = [n for n in problem.model.param_names if n in problem.parameter_names]
    assert abs(grad[names.index("c")]) > 1.0 and abs(grad[names.index("T2")]) > 1.0


def _refilled_after(t, k, c, d, t_open=3.0, x0=4.0):
    """X by hand when the refill waits for the time t_open too (``X < c && time >= 3``):
    at t_open the trigger becomes true with X already below c."""
    start, x = 0.0, x0
    while True:
        below = start + np.log(x / c) / k if x > c else start  # when X < c holds
        nxt = max(below, t_open)
        if t <= nxt:
            return x * np.exp(-k * (t - start))
        x, start = x * np.exp(-k * (nxt - start)) + d, nxt


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_a_trigger_combining_comparisons_fires_where_all_hold(tmp_path, integrator):
    # X < c && time >= 3: X reaches c at 2.77, the refill waits for t = 3 (the smallest
    # of c - X and time - 3 rises through zero there), then refills where X reaches c
    path = _write_jumps(tmp_path / "and", events=[
        {"trigger": "X < c && time >= 3", "assignments": {"X": "X + d"}}],
        estimate=("k", "c", "d"))
    problem = sk_petab.load(path)
    if integrator == "CVODES":  # the combined trigger compiles: CVODES' root finding
        assert problem.model.native_solver().n_events == 1
    predicted = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)[0][:, 0]
    expected = [_refilled_after(t, JUMP["k"], JUMP["c"], JUMP["d"]) for t in JUMP_TIMES]
    # as the jumps above: crossings located to ~1e-10
    np.testing.assert_allclose(predicted, expected, rtol=1e-8)


@pytest.mark.parametrize("events, estimate_T1, message", [
    ([{"trigger": "X == 3", "assignments": {"X": "0"}}], False,
     "not equalities"),
    ([{"trigger": "X > 3", "delay": "1", "persistent": False, "assignments": {"X": "0"}}],
     False, "the delay of event .* whose trigger is not persistent"),
    ([{"trigger": "X > 3", "delay": "X", "assignments": {"X": "0"}}], False,
     "the delay of event .* which depends on the state"),
])
def test_events_the_import_cannot_state_are_refused_by_name(tmp_path, events, estimate_T1,
                                                            message):
    path = _write(tmp_path / "refused", events=events, estimate_T1=estimate_T1)
    with pytest.raises(UnsupportedFeature, match=message):
        sk_petab.load(path)


# ---- a delayed jump: where X falls below c, a refill is ordered and arrives D later,
# X + d evaluated at the order (useValuesFromTriggerTime: X = c + d on arrival) or at the
# arrival (X = c exp(-k D) + d); D estimated
DELAYED = {"k": 0.5, "c": 1.0, "d": 2.0, "D": 0.7}


def _delayed_x(t, k, c, d, D, from_trigger_time, x0=4.0):
    start, x = 0.0, x0
    while True:
        arrival = start + np.log(x / c) / k + D  # x > c at every start here
        if t <= arrival:
            return x * np.exp(-k * (t - start))
        x, start = (c + d) if from_trigger_time else c * np.exp(-k * D) + d, arrival


def _write_delayed(folder, from_trigger_time):
    sbml = sbml_model(
        species={"X": 4.0}, parameters=DELAYED, reactions=[(["X"], [], "k * X")],
        events=[{"trigger": "X < c", "delay": "D", "assignments": {"X": "X + d"},
                 "use_values_from_trigger_time": from_trigger_time}])
    rng = np.random.default_rng(3)
    return write_problem(
        folder, sbml,
        parameters=[(n, "lin", 0.01, 20, v, 1) for n, v in DELAYED.items()],
        observables=[("obs_X", "X", "noiseParameter1_obs_X")],
        measurements=[("obs_X", "c0", _delayed_x(t, **DELAYED,
                                                 from_trigger_time=from_trigger_time)
                       + SIGMA * rng.standard_normal(), t, SIGMA) for t in JUMP_TIMES])


@pytest.mark.parametrize("from_trigger_time", [True, False])
@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_a_delayed_sbml_event_simulates_and_differentiates_as_by_hand(tmp_path, integrator,
                                                                      from_trigger_time):
    from test_petab import _gradients_and_central_differences, _posed

    problem = sk_petab.load(_write_delayed(tmp_path / "delayed", from_trigger_time))
    predicted = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)[0][:, 0]
    expected = [_delayed_x(t, **DELAYED, from_trigger_time=from_trigger_time)
                for t in JUMP_TIMES]
    # as the undelayed jumps: the orders located to ~1e-10
    np.testing.assert_allclose(predicted, expected, rtol=1e-8)
    objective, u0 = _posed(problem, theta0=problem.theta(problem.nominal * 1.02),
                           integrator=integrator, rtol=1e-11, atol=1e-12)
    grad, from_jacobian, numeric = _gradients_and_central_differences(objective, u0, 1e-6)
    # as the undelayed jumps (no arrival within h of an observation time)
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(from_jacobian, numeric, rtol=1e-4, atol=1e-3)
    # the delay reaches the cost only through the arrival times
    assert abs(grad[list(problem.parameter_names).index("D")]) > 1.0


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_a_parameter_set_at_a_state_trigger_becomes_a_state(tmp_path, integrator):
    # X' = u - k X, u = 0 until X falls to c, then u = a (a treatment starts): X relaxes
    # to a / k from c; the observable u reads the parameter's current value
    values = {"k": 0.5, "c": 1.0, "a": 2.0, "u": 0.0}
    sbml = sbml_model(species={"X": 4.0}, parameters=values,
                      reactions=[(["X"], [], "k * X"), ([], ["X"], "u")],
                      events=[{"trigger": "X < c", "assignments": {"u": "a"}}])
    tau = np.log(4.0 / values["c"]) / values["k"]

    def by_hand(t, k, c, a, **_):
        tau = np.log(4.0 / c) / k
        return 4.0 * np.exp(-k * t) if t < tau else a / k + (c - a / k) * np.exp(
            -k * (t - tau))

    path = write_problem(
        tmp_path / "treated", sbml,
        parameters=[(n, "lin", 0.01, 20, v, int(n != "u")) for n, v in values.items()],
        observables=[("obs_X", "X", "noiseParameter1_obs_X"), ("obs_u", "u", "1")],
        measurements=[("obs_X", "c0", by_hand(t, **values), t, SIGMA) for t in JUMP_TIMES]
        + [("obs_u", "c0", 0.0, 1.0, None), ("obs_u", "c0", values["a"], 5.0, None)])
    problem = sk_petab.load(path)
    assert "u_state" in problem.model.state_names
    predicted = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)[0]
    times = np.union1d(JUMP_TIMES, [1.0, 5.0])  # the rows: every measured time
    # u is 0 before the trigger (tau = 2.77) and a after: exactly
    np.testing.assert_array_equal(predicted[:, 1], np.where(times < tau, 0.0, values["a"]))
    # as the jumps above: the trigger located to ~1e-10
    np.testing.assert_allclose(predicted[:, 0], [by_hand(t, **values) for t in times],
                               rtol=1e-8)
    from test_petab import _gradients_and_central_differences, _posed

    objective, u0 = _posed(problem, theta0=problem.theta(problem.nominal * 1.02),
                           integrator=integrator, rtol=1e-11, atol=1e-12)
    grad, _, numeric = _gradients_and_central_differences(objective, u0, 1e-6)
    # as the jumps above
    np.testing.assert_allclose(grad, numeric, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_a_compartment_that_grows_at_an_event_dilutes_its_concentrations(tmp_path,
                                                                         integrator):
    # d[X]/dt = -k X / cell (the law is an amount per time): at t = 2 the cell doubles,
    # the amount stays (X halves) and the decay slows to k / 2
    k = 0.5
    sbml = sbml_model(species={"X": 4.0}, parameters={"k": k},
                      reactions=[(["X"], [], "k * X")],
                      events=[{"trigger": "time >= 2", "assignments": {"cell": "2"}}])

    def by_hand(t):
        return 4.0 * np.exp(-k * t) if t <= 2 else 2.0 * np.exp(-2 * k) * np.exp(
            -k / 2 * (t - 2))

    path = write_problem(
        tmp_path / "grown", sbml, parameters=[("k", "lin", 0.01, 20, k, 1)],
        observables=[("obs_X", "X", "noiseParameter1_obs_X")],
        measurements=[("obs_X", "c0", by_hand(t), t, SIGMA) for t in JUMP_TIMES])
    problem = sk_petab.load(path)
    predicted = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)[0][:, 0]
    # the event time is exact (a time trigger); segments at rtol 1e-10
    np.testing.assert_allclose(predicted, [by_hand(t) for t in JUMP_TIMES], rtol=1e-8)


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_conditions_that_differ_in_a_switch_time_are_not_one_solve(tmp_path, integrator):
    # X' = u - k X with u = a from T1: two conditions set T1 to 2 and to 4 and nothing
    # else. The field's derivatives do not read T1 (u is piecewise constant), so grouping
    # experiments by the parameters the field reads shared one solve between them
    # (Isensee_JCB2018's stimuli: -log L 6245 instead of AMICI's 3949)
    events = [{"trigger": "time >= T1", "assignments": {"u": "a"}}]
    sbml = sbml_model(species={"X": 1.0}, parameters={"k": K, "a": A, "T1": T1, "u": 0.0},
                      reactions=[([], ["X"], "u - k * X")], events=events)

    def by_hand(t, switch):
        before = np.exp(-K * min(t, switch))
        return before if t <= switch else A / K + (np.exp(-K * switch) - A / K) * np.exp(
            -K * (t - switch))

    path = write_problem(
        tmp_path / "two", sbml, parameters=[("k", "lin", 0.01, 10, K, 1)],
        observables=[("obs_X", "X", "0.1")],
        measurements=[("obs_X", c, 1.0, t, None) for c in ("early", "late")
                      for t in (1.0, 3.0, 5.0, 6.0)],
        conditions=(("T1",), [("early", 2.0), ("late", 4.0)]))
    problem = sk_petab.load(path)
    early, late = problem.predict(integrator=integrator, rtol=1e-10, atol=1e-12)
    times = (1.0, 3.0, 5.0, 6.0)
    # the switch restarts the solve: within its tolerance of the closed form
    np.testing.assert_allclose(early[:, 0], [by_hand(t, 2.0) for t in times], rtol=1e-7)
    np.testing.assert_allclose(late[:, 0], [by_hand(t, 4.0) for t in times], rtol=1e-7)
    # and the fit's objective, which shares solves between experiments the same way: its
    # residuals (h - 1) / 0.1 read each condition's own solve
    from test_petab import _posed

    objective, u0 = _posed(problem, theta0=problem.theta(problem.nominal),
                           integrator=integrator, rtol=1e-10, atol=1e-12)
    # each experiment's rows: its 4 data rows, then the modelled noise's 4
    h = 1.0 + 0.1 * objective.residual(u0).reshape(2, 2, 4)[:, 0].ravel()
    np.testing.assert_allclose(h, [by_hand(t, s) for s in (2.0, 4.0) for t in times],
                               rtol=1e-7)
