"""Faults inside the numerics and what a fault leaves behind (#17): a field undefined in part
of the state space, finite-time blow-up, a stiff problem under an explicit integrator, an
optimiser stopped by ``max_iter``, an interrupted fit; inputs never modified, a failed refit
leaves the previous fit exactly as it was, warnings and never prints."""

import pickle
import warnings

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from sklode import AdjointODE, BCDProxODE, ODEModel, WENDyODE, integrate
from sklode.datasets import make_trajectory
from sklode.exceptions import ConvergenceWarning, IntegrationError, SklodeError
from sklode.integrate import simulate
from sklode.models import LotkaVolterra
from _expected import warns_by_design

ESTIMATORS = [BCDProxODE, WENDyODE, AdjointODE]
by_estimator = pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)
THETA0 = (2.5, 1.5, 4.5, 1.5)
LV = make_trajectory("lotka_volterra", noise=0.1, random_state=0)


def _quiet_fit(est, t, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(t, Y)


def _state(est):
    """Everything the estimator holds, as bytes: equal bytes mean nothing changed."""
    return pickle.dumps(vars(est))


@pytest.fixture(scope="module")
def fitted():
    return {E: _quiet_fit(E(LotkaVolterra(), theta0=THETA0), LV.t, LV.Y) for E in ESTIMATORS}


# ------------------------------------------------------------------ a field with a hole
class LVWithAHole(LotkaVolterra):
    """Lotka-Volterra, undefined (NaN) where the prey exceeds 12: the data (prey <= 5.7)
    never go there, trial parameters and predictions may."""

    def rhs(self, t, x, theta):
        field = super().rhs(t, x, theta)
        return torch.where(x[..., :1] > 12, torch.nan, field)


@by_estimator
def test_a_field_undefined_away_from_the_data_fits_and_refuses_to_predict_into_the_hole(
        Estimator, fitted):
    est = _quiet_fit(Estimator(LVWithAHole(), theta0=THETA0), LV.t, LV.Y)
    # The data never reach the hole: the same fit as the plain model, to the solvers' noise
    # (tolerances 1e-6 to 1e-8 relative).
    assert_allclose(est.theta_, fitted[Estimator].theta_, rtol=1e-5)
    with pytest.raises(IntegrationError, match=r"returned non-finite values at t=.* for "
                                               r"x=\[13"):
        est.predict(LV.t, x0=(13.0, 1.0))


def test_trial_steps_into_the_hole_are_rejected_and_the_fit_stays_finite():
    # From this start AdjointODE's optimiser tries parameters whose trajectories enter the
    # undefined region; those trials fail and are rejected like any failed step, and the fit
    # that results is finite and judged (here a poor local minimum, said by PoorFitWarning).
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = AdjointODE(LVWithAHole(), theta0=(4, 0.2, 1, 1)).fit(LV.t, LV.Y)
    assert np.all(np.isfinite(est.theta_)) and np.all(np.isfinite(est.x0_))
    assert "PoorFitWarning" in {w.category.__name__ for w in caught} or est.score(
        LV.t, LV.Y) > 0.9


# ------------------------------------------------------------------ finite-time blow-up
class Quadratic(ODEModel):
    """x' = k x^2: from x(0) = x0 the solution x0 / (1 - k x0 t) blows up at t = 1/(k x0)."""

    state_names = ("x",)
    param_names = ("k",)
    default_theta = (1.0,)

    def rhs(self, t, x, theta):
        return theta[0] * x * x


@pytest.fixture(scope="module")
def quadratic_data():
    t = np.linspace(0, 1, 60)
    X = simulate(Quadratic(), [1.0], [0.5], t)  # blows up at t = 2
    return t, X + 0.01 * np.random.default_rng(0).standard_normal(X.shape)


@by_estimator
def test_finite_time_blow_up_fits_before_it_and_predict_says_when(Estimator, quadratic_data):
    t, Y = quadratic_data
    est = _quiet_fit(Estimator(Quadratic()), t, Y)
    # 60 samples at noise 0.01 on x in [0.5, 1]: k within a few per cent of 1.
    assert est.theta_[0] == pytest.approx(1.0, rel=0.03)
    with pytest.raises(IntegrationError, match="blew up") as info:
        est.predict(np.linspace(0, 3, 7))
    blow_up = 1 / (est.theta_[0] * est.x0_[0])
    # The integrator stops where ||x|| passes 1e8 times its start: within 1e-7 of the pole.
    assert info.value.t_reached == pytest.approx(blow_up, rel=1e-3)


def test_a_start_that_blows_up_before_the_data_end(quadratic_data):
    t, Y = quadratic_data
    # k = 3 blows up at t = 0.67, inside the data: the forward-solve method cannot start and
    # says so, leaving no fitted state; the two methods without forward solves fit anyway.
    est = AdjointODE(Quadratic(), theta0=(3.0,))
    with pytest.raises(IntegrationError, match="cannot start: the ODE fails at the initial "
                                               "guess theta0=\\[3.\\]"):
        est.fit(t, Y)
    assert not [k for k in vars(est) if k.endswith("_")]
    for Estimator in (BCDProxODE, WENDyODE):
        other = _quiet_fit(Estimator(Quadratic(), theta0=(3.0,)), t, Y)
        assert other.theta_[0] == pytest.approx(1.0, rel=0.03)  # as from the default guess


# ------------------------------------------------------------------ stiffness
class Relaxation(ODEModel):
    """x' = -k (x - A cos t): with k = 1e5 the state follows A cos t after a 1e-5 transient,
    stiff for every explicit integrator."""

    state_names = ("x",)
    param_names = ("k", "A")
    default_theta = (1e5, 1.0)

    def rhs(self, t, x, theta):
        return -theta[0] * (x - theta[1] * torch.cos(t)[..., None])


@pytest.mark.parametrize("integrator", ["RK45", "DOP853"])
def test_a_stiff_problem_under_an_explicit_integrator_names_the_stiff_ones(integrator,
                                                                          monkeypatch):
    # The budget is lowered from 200,000 evaluations (8 s here) to keep the test short;
    # the mechanism is the same.
    monkeypatch.setattr(integrate, "EXPLICIT_MAX_EVALUATIONS", 20_000)
    t = np.linspace(0, 10, 51)
    with pytest.raises(IntegrationError,
                       match=r"probably stiff.*integrator='auto' \(the default\), 'LSODA'"):
        simulate(Relaxation(), [1e5, 1.0], [1.0], t, integrator=integrator)
    X = simulate(Relaxation(), [1e5, 1.0], [1.0], t)  # the default: the stiff problem solved
    # after the transient the state is cos t to O(1/k)
    assert_allclose(X[1:, 0], np.cos(t[1:]), atol=1e-4)


# slow: three stiff fits under explicit integrators (~8 s); naming the stiff states is tested
# fast by test_a_stiff_problem_under_an_explicit_integrator_names_the_stiff_ones
@pytest.mark.slow
def test_an_estimator_with_an_explicit_integrator_reports_stiffness(monkeypatch):
    monkeypatch.setattr(integrate, "EXPLICIT_MAX_EVALUATIONS", 20_000)
    t = np.linspace(0, 10, 51)
    Y = 2 * np.cos(t)[:, None] + 0.01 * np.random.default_rng(0).standard_normal((51, 1))
    # k held at its stiff value, A fitted: BCD-prox needs no forward solve to fit...
    est = _quiet_fit(BCDProxODE(Relaxation(), theta0=(1e5, 1.5), fixed={"k": 1e5},
                                integrator="RK45"), t, Y)
    assert est.theta_[1] == pytest.approx(2.0, rel=0.01)  # noise 0.01 on 51 samples
    with pytest.raises(IntegrationError, match="probably stiff"):  # ...predict does
        est.predict(t)
    # AdjointODE's forward solves meet it in fit
    with pytest.raises(IntegrationError, match="probably stiff"):
        AdjointODE(Relaxation(), theta0=(1e5, 1.5), fixed={"k": 1e5},
                   integrator="RK45").fit(t, Y)


# ------------------------------------------------------------------ max_iter
@by_estimator
@warns_by_design('PoorFitWarning', why="a fit stopped early on purpose")
def test_stopping_at_max_iter_warns_naming_it_and_leaves_a_usable_fit(Estimator):
    est = Estimator(LotkaVolterra(), theta0=THETA0, max_iter=2)
    with pytest.warns(ConvergenceWarning, match="max_iter") as record:
        est.fit(LV.t, LV.Y)
    assert "max_iter" in str(record[0].message)
    assert est.converged_ is False
    assert np.all(np.isfinite(est.predict(LV.t)))
    assert np.isfinite(est.score(LV.t, LV.Y))


# ------------------------------------------------------------------ nothing is lost
@by_estimator
def test_read_only_inputs_are_accepted_and_never_written(Estimator, fitted):
    t, Y = LV.t.copy(), LV.Y.copy()
    theta0 = np.array(THETA0)
    for a in (t, Y, theta0):
        a.flags.writeable = False
    est = _quiet_fit(Estimator(LotkaVolterra(), theta0=theta0), t, Y)
    # the same arithmetic on the same values: bit-identical
    np.testing.assert_array_equal(est.theta_, fitted[Estimator].theta_)
    np.testing.assert_array_equal(est.predict(t), fitted[Estimator].predict(LV.t))
    assert est.score(t, Y) == fitted[Estimator].score(LV.t, LV.Y)
    np.testing.assert_array_equal(Y, LV.Y)
    # several experiments, unsorted times, a read-only x0 guess
    order = np.argsort(-LV.t)
    ts, Ys = t[order], Y[order]
    ts.flags.writeable = Ys.flags.writeable = False
    x0 = np.array([5.0, 3.0])
    x0.flags.writeable = False
    several = _quiet_fit(Estimator(LotkaVolterra(), theta0=theta0, x0=x0), [t, ts], [Y, Ys])
    assert np.all(np.isfinite(several.theta_))
    np.testing.assert_array_equal(ts, LV.t[order])


class Exploding(LotkaVolterra):
    """A field that is NaN everywhere: every method fails inside its numerics."""

    def rhs(self, t, x, theta):
        return super().rhs(t, x, theta) * torch.nan


@by_estimator
def test_a_failed_refit_leaves_the_previous_fit_exactly_as_it_was(Estimator, fitted):
    est = pickle.loads(pickle.dumps(fitted[Estimator]))
    before = _state(est)
    with pytest.raises(ValueError):  # bad data: refused in validation
        est.fit(LV.t[:1], LV.Y[:1])
    assert _state(est) == before
    est.set_params(model=Exploding())
    with pytest.raises(SklodeError):  # fails inside the method's numerics
        _quiet_fit(est, LV.t, LV.Y)
    est.set_params(model=LotkaVolterra())
    assert pickle.dumps({k: v for k, v in vars(est).items() if k.endswith("_")}) == \
        pickle.dumps({k: v for k, v in vars(fitted[Estimator]).items() if k.endswith("_")})


class CountingLV(LotkaVolterra):
    """Lotka-Volterra that counts its field evaluations and, once ``stop_at`` is reached,
    raises KeyboardInterrupt from inside the numerics, as a Ctrl-C arriving mid-fit would.
    Counting calls, not seconds, interrupts at the same point on a fast or a slow machine."""

    calls = 0
    stop_at = None

    def rhs(self, t, x, theta):
        type(self).calls += 1
        if type(self).stop_at is not None and type(self).calls >= type(self).stop_at:
            raise KeyboardInterrupt
        return super().rhs(t, x, theta)


@by_estimator
def test_an_interrupted_fit_leaves_the_estimator_as_it_was(Estimator, fitted):
    est = pickle.loads(pickle.dumps(fitted[Estimator]))
    before = pickle.dumps({k: v for k, v in vars(est).items() if k.endswith("_")})
    try:
        # A whole fit first, to learn how many field evaluations it takes (AdjointODE 17,
        # WENDy 200, BCD-prox 358 here); then the same fit interrupted half-way through them.
        CountingLV.calls, CountingLV.stop_at = 0, None
        _quiet_fit(pickle.loads(pickle.dumps(est)).set_params(model=CountingLV()), LV.t, LV.Y)
        assert CountingLV.calls >= 4  # else "half-way" would be the set-up, not the fit
        CountingLV.calls, CountingLV.stop_at = 0, CountingLV.calls // 2
        with pytest.raises(KeyboardInterrupt):
            _quiet_fit(est.set_params(model=CountingLV()), LV.t, LV.Y)
    finally:
        CountingLV.stop_at = None
    est.set_params(model=LotkaVolterra())
    assert pickle.dumps({k: v for k, v in vars(est).items() if k.endswith("_")}) == before
    np.testing.assert_array_equal(est.predict(LV.t), fitted[Estimator].predict(LV.t))


@by_estimator
@warns_by_design('PoorFitWarning', why="fits with faults on purpose")
def test_problems_are_warnings_never_prints(Estimator, capsys):
    with pytest.warns(ConvergenceWarning) as record:
        Estimator(LotkaVolterra(), theta0=THETA0, max_iter=2).fit(LV.t, LV.Y)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    # every warning points at the caller's line, not at sklode's or scikit-learn's internals
    assert {w.filename for w in record} == {__file__}
