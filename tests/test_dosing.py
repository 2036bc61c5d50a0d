"""Dosing records (sklode.Dose) against the closed forms of a one-compartment model,
x' = -k x: a bolus, a zero-order infusion (by rate or by duration), a steady state under
repeated dosing (NONMEM's SS = 1 and 2, of a bolus and of an infusion), a reset (EVID 3/4)
and additional doses (ADDL); the sensitivities of each against central differences, and a
fit from infusion data."""

import warnings

import numpy as np
import pytest

from _differences import state_differences

from sklode import AdjointODE, Dose, Experiment, simulate
from sklode.models import ODEModel
from sklode.outputerror._sensitivity import forward_trajectory, sensitivities

K = 0.3


class OneCompartment(ODEModel):
    """x' = -k x (the amount in the body); conc = x / V."""

    state_names = ("central",)
    param_names = ("k", "V")
    observable_names = ("conc",)

    def rhs(self, t, x, theta):
        return -theta[0] * x

    def observe(self, t, x, theta):
        return x / theta[1]


def _infused(t, k, rate, start, duration):
    """The amount at ``t`` from an infusion of ``rate`` over ``[start, start + duration]``."""
    t = np.asarray(t, dtype=float) - start
    inside = np.clip(t, 0.0, duration)
    return np.where(t <= 0, 0.0, rate / k * (1 - np.exp(-k * inside))
                    * np.exp(-k * np.clip(t - duration, 0.0, None)))


TOLERANCES = {"rtol": 1e-10, "atol": 1e-12}
# The solves at rtol 1e-10 on amounts ~10-500: 1e-8 relative leaves them room (measured
# ~4e-10).
RTOL = 1e-8


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
@pytest.mark.parametrize("spelling", ["rate", "duration"])
def test_an_infusion_feeds_at_its_rate_for_its_duration(integrator, spelling):
    t = np.array([0.5, 1.0, 2.0, 3.0, 5.0, 8.0])
    dose = (Dose(1.0, 0, 20.0, rate=10.0) if spelling == "rate"
            else Dose(1.0, 0, 20.0, duration=2.0))
    X = simulate(OneCompartment(), [K, 1.0], [0.0], t, t0=0.0, integrator=integrator,
                 doses=[dose], **TOLERANCES)
    np.testing.assert_allclose(X[:, 0], _infused(t, K, 10.0, 1.0, 2.0), rtol=RTOL,
                               atol=1e-10)


def _steady_bolus(k, amount, tau):
    """The amount just before a dose in the steady state of ``amount`` every ``tau``."""
    return amount * np.exp(-k * tau) / (1 - np.exp(-k * tau))


def _steady_infusion(k, rate, duration, tau):
    """The same for an infusion of ``rate`` over ``duration`` every ``tau``."""
    end = rate / k * (1 - np.exp(-k * duration))  # one infusion's amount at its end
    return end * np.exp(-k * (tau - duration)) / (1 - np.exp(-k * tau))


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_a_steady_state_dose_starts_from_the_periodic_state(integrator):
    tau, t = 12.0, np.array([25.0, 30.0, 35.0])
    # SS = 1 at 24 after 40 units put in at 0: the state is reset to the steady state,
    # then dosed, whatever came before
    bolus = simulate(OneCompartment(), [K, 1.0], [0.0], t, t0=0.0, integrator=integrator,
                     doses=[(0.0, 0, 40.0), Dose(24.0, 0, 100.0, interval=tau,
                                                 steady_state=1)], **TOLERANCES)
    expected = (_steady_bolus(K, 100.0, tau) + 100.0) * np.exp(-K * (t - 24.0))
    np.testing.assert_allclose(bolus[:, 0], expected, rtol=RTOL)
    # an infusion of 50 over 2 h every 12 h, at steady state from 24
    infused = simulate(OneCompartment(), [K, 1.0], [0.0], t, t0=0.0, integrator=integrator,
                       doses=[Dose(24.0, 0, 50.0, duration=2.0, interval=tau,
                                   steady_state=1)], **TOLERANCES)
    expected = (_steady_infusion(K, 25.0, 2.0, tau) * np.exp(-K * (t - 24.0))
                + _infused(t, K, 25.0, 24.0, 2.0))
    np.testing.assert_allclose(infused[:, 0], expected, rtol=RTOL)
    # SS = 2 superposes the steady state on what is there
    added = simulate(OneCompartment(), [K, 1.0], [0.0], t, t0=0.0, integrator=integrator,
                     doses=[(0.0, 0, 40.0), Dose(24.0, 0, 100.0, interval=tau,
                                                 steady_state=2)], **TOLERANCES)
    expected = ((_steady_bolus(K, 100.0, tau) + 100.0) * np.exp(-K * (t - 24.0))
                + 40.0 * np.exp(-K * t))
    np.testing.assert_allclose(added[:, 0], expected, rtol=RTOL)


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_a_reset_returns_to_the_initial_state_and_additional_doses_repeat(integrator):
    t = np.array([1.0, 5.0, 11.0, 13.0, 20.0])
    X = simulate(OneCompartment(), [K, 1.0], [2.0], t, t0=0.0, integrator=integrator,
                 doses=[(0.0, 0, 50.0), Dose(10.0, 0, 30.0, reset=True)], **TOLERANCES)
    # before 10: 52 decaying; at 10: back to the start (2), then 30 given
    expected = np.where(t <= 10.0, 52.0 * np.exp(-K * t), 32.0 * np.exp(-K * (t - 10.0)))
    np.testing.assert_allclose(X[:, 0], expected, rtol=RTOL)
    # ADDL: four doses of 10 every 4 h written as one record
    t = np.linspace(0.5, 20.0, 12)
    once = simulate(OneCompartment(), [K, 1.0], [0.0], t, t0=0.0, integrator=integrator,
                    doses=[Dose(0.0, 0, 10.0, interval=4.0, additional=3)], **TOLERANCES)
    by_hand = sum(np.where(t > s, 10.0 * np.exp(-K * (t - s)), 0.0) for s in (0, 4, 8, 12))
    np.testing.assert_allclose(once[:, 0], by_hand, rtol=RTOL)


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_sensitivities_across_infusions_steady_states_and_resets(integrator):
    t = np.array([1.0, 3.0, 6.0, 12.5, 14.0, 20.0, 26.0, 30.0])
    doses = [Dose(0.0, 0, 20.0, duration=2.0), Dose(12.0, 0, 50.0, duration=1.5,
                                                     interval=12.0, steady_state=1),
             Dose(24.0, 0, 10.0, reset=True)]
    theta, x0 = np.array([K, 1.0]), np.array([3.0])
    traj = forward_trajectory(OneCompartment(), theta, x0, 0.0, t, doses=doses,
                              integrator=integrator, **TOLERANCES)
    S = sensitivities(OneCompartment(), theta, traj, with_x0=True)
    numeric = state_differences(OneCompartment(), theta, x0, 0.0, t, doses=doses,
                                integrator="CVODES", **TOLERANCES)
    # solves at rtol 1e-10 differenced at h = 1e-6: ~1e-4 absolute in the quotient
    np.testing.assert_allclose(S, numeric, atol=1e-4)
    # the steady state forgets x0 (zero after 12 until the reset, which returns it: one)
    np.testing.assert_allclose(S[(t > 12) & (t < 24), 0, 0], 0.0, atol=1e-12)
    np.testing.assert_allclose(S[t > 24, 0, 0], np.exp(-K * (t[t > 24] - 24.0)), rtol=1e-6)
    # and its derivative in k is the implicit function theorem's, far from zero
    assert np.min(np.abs(S[(t > 12) & (t < 24), 0, 1])) > 1.0


def test_a_fit_recovers_clearance_and_volume_from_infusion_data():
    rng = np.random.default_rng(0)
    truth = np.array([0.25, 12.0])
    t = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0])
    doses = [Dose(0.0, "central", 300.0, rate=150.0), Dose(12.0, "central", 300.0,
                                                           rate=150.0)]
    conc = simulate(OneCompartment(), truth, [0.0], t, t0=0.0,
                    doses=[d._replace(state=0) for d in doses])[:, 0] / truth[1]
    y = conc * (1 + 0.02 * rng.standard_normal(t.size))
    est = AdjointODE(OneCompartment(), theta0=[0.4, 8.0], x0=[0.0], t0=0.0,
                     estimate_x0=False, noise_kind="proportional", sigma=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 10 points: the verdicts are not tested here
        est.fit([Experiment(t, y[:, None], doses=doses)])
    # 2 % noise on 10 concentrations: k and V to a few percent (their standard errors
    # ~1 %)
    np.testing.assert_allclose(est.theta_, truth, rtol=0.05)
    assert np.all(est.theta_stderr_ < 0.05 * truth)


@pytest.mark.parametrize("dose, message", [
    (Dose(0.0, "central", 10.0, rate=1.0, duration=2.0), "both a rate and a duration"),
    (Dose(0.0, "central", 10.0, steady_state=1), "without an interval"),
    (Dose(0.0, "central", 10.0, additional=2), "without an interval"),
    (Dose(0.0, "central", 10.0, duration=5.0, interval=4.0, steady_state=1),
     "lasts longer than its interval"),
    (Dose(0.0, "gut", 10.0), "names the state 'gut'"),
    (Dose(0.0, "central", -1.0), "negative"),
])
def test_dosing_records_that_cannot_be_given_are_refused_by_name(dose, message):
    est = AdjointODE(OneCompartment(), theta0=[0.4, 8.0], x0=[0.0], t0=0.0,
                     estimate_x0=False)
    with pytest.raises(ValueError, match=message):
        est.fit([Experiment([1.0, 2.0], [[1.0], [0.5]], doses=[dose])])


def test_a_nonmem_dose_table_goes_in_unchanged():
    pd = pytest.importorskip("pandas")
    from sklode import experiments_from_table

    observations = pd.DataFrame({"ID": [1, 1, 2], "TIME": [1.0, 2.0, 1.0],
                                 "DV": [1.0, 2.0, 3.0]})
    doses = pd.DataFrame({"ID": [1, 1, 1, 2], "TIME": [0.0, 12.0, 20.0, 0.0],
                          "CMT": ["central"] * 4, "AMT": [100.0, 100.0, 0.0, 50.0],
                          "RATE": [50.0, np.nan, 0.0, 0.0], "II": [0.0, 12.0, 0.0, 12.0],
                          "ADDL": [0, 2, 0, 0], "SS": [0, 0, 0, 1], "EVID": [1, 4, 3, 1]})
    first, second = experiments_from_table(observations, time="TIME", experiment="ID",
                                           values=["DV"], doses=doses, dose_state="CMT",
                                           dose_amount="AMT")
    assert first.doses == [Dose(0.0, "central", 100.0, rate=50.0),
                           Dose(12.0, "central", 100.0, interval=12.0, additional=2,
                                reset=True),
                           Dose(20.0, "central", 0.0, reset=True)]
    assert second.doses == [Dose(0.0, "central", 50.0, interval=12.0, steady_state=1)]


def test_a_plain_bolus_row_stays_a_triple_and_modelled_rates_are_refused():
    from sklode import experiments_from_table

    table = {"id": [1], "time": [1.0], "y": [1.0]}
    (e,) = experiments_from_table(table, experiment="id", values=["y"], doses={
        "id": [1], "time": [0.0], "state": ["central"], "amount": [5.0], "rate": [0.0]})
    assert e.doses == [(0.0, "central", 5.0)]
    with pytest.raises(ValueError, match="RATE column holds a negative value"):
        experiments_from_table(table, experiment="id", values=["y"], doses={
            "id": [1], "time": [0.0], "state": ["central"], "amount": [5.0], "rate": [-2]})


@pytest.mark.parametrize("name", ["BCDProxODE", "WENDyODE"])
def test_the_methods_on_the_data_grid_refuse_an_infusion_by_name(name):
    import sklode

    class Amount(ODEModel):  # the amount itself observed: what these methods fit
        state_names, param_names = ("central",), ("k",)

        def rhs(self, t, x, theta):
            return -theta[0] * x

    estimator = getattr(sklode, name)(Amount(), theta0=[0.4])
    t = np.linspace(0.5, 12.0, 24)
    with pytest.raises(ValueError, match="infusion, a steady state .* use AdjointODE"):
        estimator.fit([Experiment(t, np.ones((t.size, 1)),
                                  doses=[Dose(0.0, "central", 10.0, duration=1.0)])])


def test_a_bolus_history_is_one_compiled_solve_with_exact_sensitivities(monkeypatch):
    # 12 boluses every 6 h go into the C solve itself (a restart per dose, one call): the
    # states and their derivative in k equal the closed form, and the native solve is
    # called once, not once per dose
    from sklode.models._native import NativeSolver

    calls = []
    original = NativeSolver.__call__

    def counted(self, *args, **kwargs):
        calls.append(len(kwargs.get("doses") or ()))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(NativeSolver, "__call__", counted)
    doses = [(6.0 * j, 0, 10.0) for j in range(12)]
    t = np.array([1.0, 6.0, 7.0, 30.0, 30.5, 70.0, 80.0])  # 6 and 30: trough samples
    traj = forward_trajectory(OneCompartment(), np.array([K, 1.0]), np.array([0.0]), 0.0, t,
                              doses=doses, integrator="CVODES", **TOLERANCES)
    given = [[s for s, _, _ in doses if s < ti] for ti in t]  # a dose at t acts after t
    amount = np.array([sum(10.0 * np.exp(-K * (ti - s)) for s in g) for ti, g in zip(t, given)])
    d_amount = np.array([sum(-(ti - s) * 10.0 * np.exp(-K * (ti - s)) for s in g)
                         for ti, g in zip(t, given)])
    np.testing.assert_allclose(traj.states[:, 0], amount, rtol=RTOL)
    S = sensitivities(OneCompartment(), np.array([K, 1.0]), traj, with_x0=False)
    # the sensitivities solved with the states at rtol 1e-10 (not in the error test): 1e-7
    np.testing.assert_allclose(S[:, 0, 0], d_amount, rtol=1e-7)
    assert calls and all(n == 11 for n in calls)  # the dose at t0 goes into x0
