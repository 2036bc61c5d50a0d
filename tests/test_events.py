"""Events of a model (sklode.models.Event): the state jumps where a trigger crosses zero.

A refilled store: x decays at rate k; where it falls to c, it is refilled to r (a state-
triggered event whose time depends on every parameter), and a second state y integrates x
and is halved at each refill. Between refills x has a closed form, x = r exp(-k (t - tau)),
and the refills come every ln(r / c) / k, so the simulation, the sensitivities (the event
time's own derivative included) and a fit are checked against it."""

import warnings

import numpy as np
import pytest
import torch

from _differences import state_differences

from sklode import AdjointODE, simulate
from sklode.exceptions import IntegrationError
from sklode.models import Event, ODEModel
from sklode.outputerror._sensitivity import (
    adjoint_gradient,
    forward_trajectory,
    sensitivities,
)

THETA = np.array([0.5, 1.0, 3.0])  # k, c, r
X0 = np.array([2.5, 0.0])
TIMES = np.linspace(0.5, 10.0, 12)


class Refilled(ODEModel):
    state_names = ("x", "y")
    param_names = ("k", "c", "r")
    events = (Event(lambda t, x, th: th[1] - x[0],  # x falls to c
                    lambda t, x, th: torch.stack([th[2] + 0.0 * x[0], 0.5 * x[1]]),
                    name="refill"),)

    def rhs(self, t, x, theta):
        return torch.stack([-theta[0] * x[..., 0], x[..., 0] - 0.3 * x[..., 1]], dim=-1)


def _x_by_hand(t, k, c, r, x0):
    first = np.log(x0 / c) / k  # the first refill
    period = np.log(r / c) / k
    t = np.asarray(t, dtype=float)
    since = np.where(t < first, t, (t - first) % period)
    return np.where(t < first, x0 * np.exp(-k * t), r * np.exp(-k * since))


@pytest.mark.parametrize("integrator", ["LSODA", "CVODES"])
def test_a_state_triggered_event_refills_at_the_hand_written_times(integrator):
    X = simulate(Refilled(), THETA, X0, TIMES, t0=0.0, integrator=integrator, rtol=1e-10,
                 atol=1e-12)
    # each refill time is located on LSODA's dense output (error ~ rtol) and the segments
    # are solved at rtol 1e-10: 1e-8 of states ~ 1-3
    np.testing.assert_allclose(X[:, 0], _x_by_hand(TIMES, *THETA, X0[0]), rtol=1e-8,
                               atol=1e-9)


def test_cvodes_root_finding_locates_the_events_without_a_dense_solve(monkeypatch):
    # On CVODES the triggers are compiled with the field and located by its root finding
    # (rising crossings only): no second solve with dense output
    import sklode.integrate as integrate_module

    model = Refilled()
    native = model.native_solver()
    if native is None:
        pytest.skip(model.native_unavailable_reason())
    assert native.n_events == 1
    x = np.array([1.7, 0.3])
    assert native.event_values(0.4, x, THETA) == pytest.approx(THETA[1] - x[0], rel=1e-14)
    tight = dict(rtol=1e-10, atol=1e-12)
    tau, which, _ = native.locate(0.0, X0, THETA, 10.0, **tight)
    first = np.log(X0[0] / THETA[1]) / THETA[0]
    # the crossing of a solution solved at rtol 1e-10: its time within ~1e-9 (measured
    # 3.8e-10)
    assert which == [0] and tau == pytest.approx(first, abs=1e-8)
    # a trigger that holds at the start (x already below c, decaying) never rises through
    # zero: no firing, where a sign test alone would fire at once
    assert native.locate(0.0, np.array([0.5, 0.0]), THETA, 10.0, **tight)[:2] == (None, [])
    dense_solves = []
    solve = integrate_module.solve
    monkeypatch.setattr(integrate_module, "solve", lambda *a, **k: (
        dense_solves.append(1) if k.get("dense_output") else None) or solve(*a, **k))
    X = simulate(model, THETA, X0, TIMES, t0=0.0, integrator="CVODES", **tight)
    assert not dense_solves
    # as the hand-written refills above
    np.testing.assert_allclose(X[:, 0], _x_by_hand(TIMES, *THETA, X0[0]), rtol=1e-8,
                               atol=1e-9)


class _Unrecorded(Refilled):
    """Its trigger reads a value into Python (``float``): it cannot be compiled, and its
    crossings are found on LSODA's dense output instead."""

    events = (Event(lambda t, x, th: th[1] - x[0] if float(x.reshape(-1)[0]) > -1e300
                    else th[1], lambda t, x, th: torch.stack([th[2] + 0.0 * x[0],
                                                              0.5 * x[1]]), name="refill"),)


def test_a_trigger_that_cannot_be_compiled_is_located_on_the_dense_output():
    model = _Unrecorded()
    native = model.native_solver()
    if native is None:
        pytest.skip(model.native_unavailable_reason())
    assert native.n_events == 0  # the field compiled; its trigger did not
    X = simulate(model, THETA, X0, TIMES, t0=0.0, integrator="CVODES", rtol=1e-10,
                 atol=1e-12)
    np.testing.assert_allclose(X[:, 0], _x_by_hand(TIMES, *THETA, X0[0]), rtol=1e-8,
                               atol=1e-9)


@pytest.mark.parametrize("integrator", ["LSODA", "CVODES"])
def test_sensitivities_across_state_triggered_events_match_central_differences(integrator):
    model = Refilled()
    options = {"integrator": integrator, "rtol": 1e-11, "atol": 1e-12}
    traj = forward_trajectory(model, THETA, X0, 0.0, TIMES, **options)
    S = sensitivities(model, THETA, traj, with_x0=True)
    numeric = state_differences(model, THETA, X0, 0.0, TIMES, **options)
    # the refill times are located to ~1e-11 on each side: the quotient carries ~1e-11 /
    # 1e-6 = 1e-5 absolute; the sensitivities reach ~27 (y after several refills)
    np.testing.assert_allclose(S, numeric, atol=1e-4)
    # without the event time's derivative dx/dc after the first refill would be 0 (x is
    # reset to r): it is r k / c ... per refill passed, far from zero
    assert np.max(np.abs(S[TIMES > 3.0, 0, 3])) > 0.5
    # the adjoint gradient of a weighted sum of the states equals the sensitivities'
    weights = np.random.default_rng(0).standard_normal(traj.states.shape)
    g_x0, g_theta = adjoint_gradient(model, THETA, traj, weights)
    np.testing.assert_allclose(np.concatenate([g_x0, g_theta]),
                               np.einsum("ia,iaq->q", weights, S), rtol=1e-12, atol=1e-12)


class Treated(ODEModel):
    """x decays until it falls to c, where a treatment starts (s jumps from 0 to 1) and
    feeds x at rate p: x is continuous across the event, with a kink."""

    state_names = ("x", "s")
    param_names = ("k", "c", "p")
    events = (Event(lambda t, x, th: th[1] - x[0],
                    lambda t, x, th: torch.stack([x[0], 1.0 + 0.0 * x[1]]),
                    name="treatment"),)

    def rhs(self, t, x, theta):
        return torch.stack([-theta[0] * x[..., 0] + theta[2] * x[..., 1],
                            0.0 * x[..., 1]], dim=-1)


def _treated_by_hand(t, k, c, p, x0):
    tau = np.log(x0 / c) / k
    return np.where(t < tau, x0 * np.exp(-k * t),
                    p / k + (c - p / k) * np.exp(-k * (t - tau)))


def test_a_fit_across_a_threshold_event_recovers_the_threshold_and_the_rates():
    theta, x0 = np.array([0.5, 1.0, 0.2]), np.array([3.0, 0.0])
    t = np.linspace(0.25, 8.0, 32)
    clean = simulate(Treated(), theta, x0, t, t0=0.0, rtol=1e-10, atol=1e-12)
    # the treatment starts at ln 3 / 0.5 = 2.2, after which x settles towards p / k = 0.4
    np.testing.assert_allclose(clean[:, 0], _treated_by_hand(t, *theta, x0[0]), rtol=1e-8)
    Y = clean[:, :1] + 0.01 * np.random.default_rng(3).standard_normal((t.size, 1))
    # x is continuous across the event (a kink where it starts): the cost is smooth in
    # the parameters, and a fit from 30 % off every one returns (where an event makes an
    # observed state jump, the cost jumps as the event time crosses an observation time)
    est = AdjointODE(Treated(), theta0=theta * [1.3, 0.7, 1.3], x0=x0, t0=0.0,
                     estimate_x0=False, observed=[0], sigma=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # verdicts of the trust layer are not tested here
        est.fit(t, Y)
    # within three of its standard errors (0.4 % for k, 1.9 % for c, 1.1 % for p: the
    # threshold is seen only through the kink), which the sensitivities across the event
    # give; over seeds 3-7 the largest miss was 1.4 of them
    assert np.all(np.abs(est.theta_ - theta) <= 3 * est.theta_stderr_)
    assert np.all(est.theta_stderr_ < 0.05 * theta)


def test_initial_value_decides_whether_a_trigger_holding_at_the_start_fires():
    def model(initial_value):
        m = Refilled()
        m.events = (Event(lambda t, x, th: x[0] - 2.0,  # holds at the start (x = 2.5)
                          lambda t, x, th: torch.stack([x[0] + 10.0, x[1]]),
                          initial_value=initial_value),)
        return m

    later = simulate(model(True), THETA, X0, [1.0], t0=0.0)[0, 0]
    at_start = simulate(model(False), THETA, X0, [1.0], t0=0.0)[0, 0]
    # x decays and never comes back above 2: the event fires only at the start, and only
    # where the trigger does not count as holding before it
    assert later == pytest.approx(X0[0] * np.exp(-THETA[0]), rel=1e-6)
    assert at_start == pytest.approx((X0[0] + 10.0) * np.exp(-THETA[0]), rel=1e-6)


def test_an_event_that_sets_itself_off_again_is_stopped_with_a_message():
    m = Refilled()
    # refills to c itself: the trigger holds right after and the decay sets it off again
    m.events = (Event(lambda t, x, th: th[1] - x[0],
                      lambda t, x, th: torch.stack([th[1] * (1 + 1e-13) + 0 * x[0], x[1]]),
                      name="stuck"),)
    with pytest.raises(IntegrationError, match="fired 10[0-9] times by .* a jump that sets its own trigger off"):
        simulate(m, THETA, X0, [20.0], t0=0.0)


def _x_dosed_by_hand(t, k, c, r, x0, dose_time, amount):
    """x with ``amount`` added at ``dose_time`` (before the first refill), then refilled."""
    after_dose = x0 * np.exp(-k * dose_time) + amount
    first = dose_time + np.log(after_dose / c) / k
    period = np.log(r / c) / k
    t = np.asarray(t, dtype=float)
    return np.where(t <= dose_time, x0 * np.exp(-k * t),  # a sample at the dose sees before
                    np.where(t < first, after_dose * np.exp(-k * (t - dose_time)),
                             r * np.exp(-k * ((t - first) % period))))


@pytest.mark.parametrize("integrator", ["LSODA", "CVODES"])
def test_doses_and_events_in_one_solve(integrator):
    # one loop for both: a dose at t = 1 delays the first refill from 1.83 to 2.85; a
    # sample at the dose's time sees the state before it
    times = np.array([0.5, 1.0, 1.5, 2.5, 3.0, 5.0, 8.0])
    X = simulate(Refilled(), THETA, X0, times, t0=0.0, integrator=integrator, rtol=1e-10,
                 atol=1e-12, doses=[(1.0, 0, 1.0)])
    # as for the refills alone: 1e-8 of states ~ 1-3
    np.testing.assert_allclose(X[:, 0], _x_dosed_by_hand(times, *THETA, X0[0], 1.0, 1.0),
                               rtol=1e-8, atol=1e-9)
    # and the sensitivities across both, against central differences of the solve
    model, z = Refilled(), np.concatenate([X0, THETA])
    options = {"integrator": integrator, "rtol": 1e-11, "atol": 1e-12,
               "doses": [(1.0, 0, 1.0)]}

    def states(z):
        return forward_trajectory(model, z[2:], z[:2], 0.0, times, **options).states

    S = sensitivities(model, THETA, forward_trajectory(model, THETA, X0, 0.0, times,
                                                       **options), with_x0=True)
    numeric = np.empty_like(S)
    for j in range(z.size):
        h = 1e-6 * max(1.0, abs(z[j]))
        step = np.eye(z.size)[j] * h
        numeric[..., j] = (states(z + step) - states(z - step)) / (2 * h)
    # as in the test of the refills alone: ~1e-5 absolute on sensitivities up to ~27
    np.testing.assert_allclose(S, numeric, atol=1e-4)


@pytest.mark.parametrize("name", ["BCDProxODE", "WENDyODE"])
def test_the_methods_on_the_data_grid_refuse_a_model_with_events(name):
    import sklode

    t = np.linspace(0.0, 4.0, 30)
    Y = simulate(Refilled(), THETA, X0, t, t0=0.0)
    estimator = getattr(sklode, name)(Refilled(), theta0=THETA)
    with pytest.raises(ValueError, match="has events .*'refill'.* Use AdjointODE"):
        estimator.fit(t, Y)


def test_the_batched_trigger_values_equal_the_pointwise_ones():
    # the dense solve's steps are read in one vmapped call: the same numbers as one call
    # per point, also for a trigger with Python control flow (which falls back to the loop)
    rng = np.random.default_rng(1)
    times, X = np.sort(rng.uniform(0, 5, 50)), rng.uniform(0, 3, (50, 2))
    smooth = Refilled.events[0]
    branching = Event(lambda t, x, th: (x[0] - 1.0) if float(x[1]) > 1.5 else (t - 2.0),
                      lambda t, x, th: x)
    for event in (smooth, branching):
        pointwise = [event.value(t, x, THETA) for t, x in zip(times, X)]
        np.testing.assert_array_equal(event.values(times, X, THETA), pointwise)


# ---- delayed events: x decays; where it falls to c a refill is ordered and arrives D
# later (theta[3], estimated), setting x to r (a value fixed at the order: from the
# trigger's time) or adding r to what is left then (from the jump's own time); y is
# halved at the order's value of y (trigger time), so both kinds of value are exercised
def _delayed_model(from_trigger_time):
    if from_trigger_time:
        assign = lambda t, x, th: torch.stack([th[2] + 0.0 * x[0], 0.5 * x[1]])  # noqa: E731
    else:
        assign = lambda t, x, th: torch.stack([x[0] + th[2], x[1]])  # noqa: E731

    class DelayedRefill(ODEModel):
        state_names = ("x", "y")
        param_names = ("k", "c", "r", "D")
        events = (Event(lambda t, x, th: th[1] - x[0], assign, name="order",
                        delay=lambda th: th[3],
                        use_values_from_trigger_time=from_trigger_time,
                        targets=(0, 1) if from_trigger_time else None),)

        def rhs(self, t, x, theta):
            return torch.stack([-theta[0] * x[..., 0], x[..., 0] - 0.3 * x[..., 1]], dim=-1)

    return DelayedRefill()


DELAYED = np.array([0.5, 1.0, 3.0, 0.7])  # k, c, r, D


def _delayed_x_by_hand(t, k, c, r, D, x0, from_trigger_time):
    start, x = 0.0, x0
    while True:
        order = start + np.log(x / c) / k  # x reaches c (x > c at every start here)
        arrival = order + D
        if t <= arrival:
            return x * np.exp(-k * (t - start))
        left = c * np.exp(-k * D)
        x, start = (r if from_trigger_time else left + r), arrival


@pytest.mark.parametrize("from_trigger_time", [True, False])
@pytest.mark.parametrize("integrator", ["LSODA", "CVODES"])
def test_a_delayed_event_jumps_its_delay_after_the_trigger(integrator, from_trigger_time):
    model = _delayed_model(from_trigger_time)
    X = simulate(model, DELAYED, X0, TIMES, t0=0.0, integrator=integrator, rtol=1e-10,
                 atol=1e-12)
    expected = [_delayed_x_by_hand(t, *DELAYED, X0[0], from_trigger_time) for t in TIMES]
    # as the refills above: trigger times located to ~1e-10, segments at rtol 1e-10
    np.testing.assert_allclose(X[:, 0], expected, rtol=1e-8, atol=1e-9)


@pytest.mark.parametrize("from_trigger_time", [True, False])
@pytest.mark.parametrize("integrator", ["LSODA", "CVODES"])
def test_sensitivities_across_a_delayed_event_match_central_differences(integrator,
                                                                        from_trigger_time):
    model = _delayed_model(from_trigger_time)
    options = {"integrator": integrator, "rtol": 1e-11, "atol": 1e-12}
    traj = forward_trajectory(model, DELAYED, X0, 0.0, TIMES, **options)
    S = sensitivities(model, DELAYED, traj, with_x0=True)
    numeric = state_differences(model, DELAYED, X0, 0.0, TIMES, **options)
    # as the undelayed refills: event times to ~1e-11 each side, ~1e-5 in the quotient
    np.testing.assert_allclose(S, numeric, atol=1e-4)
    # the delay reaches x only through the jump's time: after the first arrival dx/dD is
    # k x (the refill starts decaying later), far from zero
    assert np.max(np.abs(S[TIMES > 3.5, 0, 5])) > 0.3
