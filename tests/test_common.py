"""The common vocabulary: the same parameter names with the same meaning in all three
estimators, the same fitted attributes, and no silent switch of algorithm."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose

from sklode import AdjointODE, BCDProxODE, WENDyODE, simulate
from sklode.adjoint import OPTIMIZERS
from sklode.datasets import make_trajectory
from sklode.exceptions import (
    ConvergenceWarning,
    DivergenceError,
    IntegrationError,
    SklodeError,
)
from sklode.models import LotkaVolterra
from sklode.outputerror._optimize import BOUNDED_OPTIMIZERS
from _expected import warns_by_design

ESTIMATORS = [BCDProxODE, WENDyODE, AdjointODE]
by_estimator = pytest.mark.parametrize("Estimator", ESTIMATORS, ids=lambda c: c.__name__)

COMMON_PARAMETERS = ("model", "theta0", "x0", "t0", "estimate_x0", "observed", "fixed",
                     "bounds", "positive", "tol", "max_iter", "verbose", "integrator", "rtol",
                     "atol")
COMMON_FITTED = ("theta_", "theta_cov_", "theta_stderr_", "x0_", "x0_stderr_", "t0_",
                 "n_iter_", "converged_", "stop_reason_", "solver_", "observed_",
                 "n_features_in_")
THETA0 = (2.5, 1.5, 4.5, 1.5)


@pytest.fixture(scope="module")
def lv():
    # The BCD-prox paper's LV problem at noise std 0.1: 41 points, enough for WENDy's 16.
    return make_trajectory("lotka_volterra", noise=0.1, random_state=0)


def _fit(est, data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(data.t, data.Y)


@pytest.fixture(scope="module")
def fitted(lv):
    return {E: _fit(E(LotkaVolterra(), theta0=THETA0), lv) for E in ESTIMATORS}


@by_estimator
def test_common_parameters_exist_with_the_same_defaults(Estimator):
    params = Estimator(LotkaVolterra()).get_params()
    assert set(COMMON_PARAMETERS) <= set(params)
    defaults = {"theta0": None, "x0": None, "t0": None, "estimate_x0": True, "observed": None,
                "fixed": None, "bounds": None, "positive": False, "verbose": 0,
                "integrator": "auto", "rtol": 1e-8, "atol": 1e-10}
    assert {k: params[k] for k in defaults} == defaults


@by_estimator
def test_common_fitted_attributes_are_set(Estimator, fitted):
    est = fitted[Estimator]
    for name in COMMON_FITTED:
        assert hasattr(est, name), name
    assert est.theta_.shape == (4,) and est.theta_cov_.shape == (4, 4)
    assert est.x0_.shape == (2,) and est.x0_stderr_.shape == (2,)
    assert isinstance(est.stop_reason_, str) and est.stop_reason_
    assert isinstance(est.solver_, str) and est.solver_
    assert est.observed_ == (0, 1) and est.n_features_in_ == 1
    # Noise std 0.1 on 41 points: every method within 0.6 of theta = (2, 1, 4, 1) (measured
    # max errors 0.25-0.45); a broken fit is off by far more.
    assert np.max(np.abs(est.theta_ - [2, 1, 4, 1])) < 0.6


@by_estimator
def test_confidence_intervals_on_every_estimator(Estimator, fitted):
    est = fitted[Estimator]
    ci = est.confidence_intervals(0.95)
    assert ci.shape == (4, 2)
    assert np.all(np.isfinite(ci)) and np.all(ci[:, 0] <= est.theta_) and np.all(
        est.theta_ <= ci[:, 1])
    # A 99 % interval is wider than a 95 % one by the ratio of normal quantiles.
    wide = est.confidence_intervals(0.99)
    assert_allclose((wide[:, 1] - wide[:, 0]), (ci[:, 1] - ci[:, 0]) * 2.5758 / 1.9600,
                    rtol=1e-4)
    with pytest.raises(ValueError, match="level must be strictly between 0 and 1"):
        est.confidence_intervals(1.5)


@by_estimator
def test_a_known_x0_array_is_held_exactly(Estimator, lv):
    x0 = np.array([5.0, 3.0])  # the true initial state of the problem
    est = _fit(Estimator(LotkaVolterra(), theta0=THETA0, x0=x0, estimate_x0=False), lv)
    assert np.array_equal(est.x0_, x0)
    assert np.array_equal(est.x0_stderr_, [0.0, 0.0])


@by_estimator
def test_a_per_state_estimate_x0_mask_holds_only_the_known_component(Estimator, lv):
    x0 = np.array([5.0, np.nan])  # prey known, predator unknown
    est = _fit(Estimator(LotkaVolterra(), theta0=THETA0, x0=x0,
                         estimate_x0=np.array([False, True])), lv)
    assert est.x0_[0] == 5.0
    assert est.x0_stderr_[0] == 0.0
    # The predator starts near its true 3 (noise 0.1; the data are there at t0).
    assert abs(est.x0_[1] - 3.0) < 0.5


@by_estimator
def test_an_x0_guess_is_accepted(Estimator, lv):
    est = _fit(Estimator(LotkaVolterra(), theta0=THETA0, x0=[4.0, 2.0]), lv)
    assert np.all(np.isfinite(est.x0_))


@pytest.mark.parametrize("Estimator, settings", [
    (BCDProxODE, {"tol": 1e-14}),
    (WENDyODE, {"tol": 1e-14}),
    *[(AdjointODE, {"optimizer": name, "tol": 1e-14}) for name in OPTIMIZERS],
], ids=lambda v: v.__name__ if isinstance(v, type) else v.get("optimizer", ""))
@warns_by_design('PoorFitWarning',
                 why="fits cut at a few iterations on purpose")
def test_max_iter_bounds_the_iterations_of_the_main_loop(Estimator, settings, lv):
    est = Estimator(LotkaVolterra(), theta0=THETA0, max_iter=3, **settings)
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        est.fit(lv.t, lv.Y)
    assert 1 <= est.n_iter_ <= 3
    assert not est.converged_
    assert "max_iter=3" in est.stop_reason_ or est.optimizer == "lm"


BOUND_PATHS = [
    (BCDProxODE, {}),
    (BCDProxODE, {"optimizer": "l-bfgs-b", "acceleration": "none", "max_iter": 300}),
    (WENDyODE, {}),
    (AdjointODE, {"optimizer": "trf"}),
    (AdjointODE, {"optimizer": "l-bfgs-b"}),
]


@pytest.mark.parametrize("Estimator, settings", BOUND_PATHS,
                         ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
@warns_by_design('BoundWarning',
                 why="a bound placed inside the optimum on purpose")
def test_an_active_bound_holds_exactly(Estimator, settings, lv, fitted):
    # The unconstrained c (third parameter) is near 4; an upper bound of 3.5 is active.
    upper = np.array([np.inf, np.inf, 3.5, np.inf])
    est = _fit(Estimator(LotkaVolterra(), theta0=(2.5, 1.5, 3.0, 1.5),
                         bounds=(-np.inf, upper), **settings), lv)
    assert fitted[Estimator].theta_[2] > 3.5  # the bound is active
    assert est.theta_[2] <= 3.5
    if Estimator is not BCDProxODE:
        # WENDy and AdjointODE minimise one cost over theta: its bounded optimum sits on the
        # bound. BCD-prox's states move with theta, so its bounded fixed point may lie inside.
        assert est.theta_[2] == pytest.approx(3.5, abs=1e-6)
    assert "bound" in est.solver_ or est.optimizer in ("trf", "l-bfgs-b")


@by_estimator
def test_non_binding_bounds_change_nothing(Estimator, lv, fitted):
    # No silent path switch: bounds that do not bind give the unbounded estimate.
    est = _fit(Estimator(LotkaVolterra(), theta0=THETA0, bounds=(-100.0, 100.0)), lv)
    # Same algorithm; the bounded solvers stop to their own tolerances (1e-6 relative).
    assert_allclose(est.theta_, fitted[Estimator].theta_, rtol=1e-5)


@by_estimator
@warns_by_design('BoundWarning', 'PoorFitWarning',
                 why="a parameter held at a wrong value on purpose")
def test_a_fixed_parameter_stays_exactly_fixed(Estimator, lv, fitted):
    est = _fit(Estimator(LotkaVolterra(), theta0=THETA0, fixed={"c": 4.0}), lv)
    assert est.theta_[2] == 4.0
    assert est.theta_stderr_[2] == 0.0 and np.all(est.theta_cov_[2] == 0.0)
    assert np.all(est.theta_stderr_[[0, 1, 3]] > 0)
    # c held at its true value: the others still within 0.6 of (2, 1, ., 1) at noise 0.1.
    assert np.max(np.abs(est.theta_[[0, 1, 3]] - [2, 1, 1])) < 0.6
    # Held with a bound on another parameter: both honoured.
    # (b starts inside its bound: a start outside the bounds is refused)
    both = _fit(Estimator(LotkaVolterra(), theta0=(2.5, 0.8, 4.5, 1.5), fixed={"c": 4.0},
                          bounds=([-np.inf, -np.inf, -np.inf, -np.inf],
                                  [np.inf, 0.9, np.inf, np.inf])), lv)
    assert both.theta_[2] == 4.0 and both.theta_[1] <= 0.9


@by_estimator
def test_positive_keeps_parameters_non_negative(Estimator, lv):
    est = _fit(Estimator(LotkaVolterra(), theta0=THETA0, positive=True), lv)
    assert np.all(est.theta_ >= 0)
    # A start the constraint excludes is refused (no method moves it silently)...
    with pytest.raises(ValueError, match=r"theta0 starts b=-1 outside its allowed range "
                                         r"\[0, inf\]"):
        Estimator(LotkaVolterra(), theta0=(2.5, -1.0, 4.5, 1.5), positive=True).fit(lv.t, lv.Y)
    # ...while the default guess is moved inside: ones, except b's upper bound of 0.5.
    start = Estimator(LotkaVolterra(), positive=True, bounds=(-np.inf, [9, 0.5, 9, 9]))
    assert_allclose(start._initial_theta(), [1, 0.5, 1, 1], rtol=0)


# The change of variables is one map shared by every unbounded optimiser; the CG variants
# crawl to max_iter along it (8 s each), so one of them runs by default and the other three
# with -m slow.
@pytest.mark.parametrize("optimizer", [
    pytest.param(name, marks=pytest.mark.slow) if name in ("cg-dy", "cg-fr", "cg-hs") else name
    for name in sorted(set(OPTIMIZERS) - set(BOUNDED_OPTIMIZERS))])
@warns_by_design('BoundWarning',
                 why="a bound placed inside the optimum on purpose")
def test_unconstrained_optimizers_honour_bounds_by_a_change_of_variables(optimizer, lv,
                                                                          fitted):
    # c (third parameter) is near 4 unconstrained; an upper bound of 3.5 binds.
    upper = np.array([np.inf, np.inf, 3.5, np.inf])
    est = _fit(AdjointODE(LotkaVolterra(), theta0=(2.5, 1.5, 3.45, 1.5), optimizer=optimizer,
                          bounds=(-np.inf, upper)), lv)
    assert fitted[AdjointODE].theta_[2] > 3.5
    assert est.theta_[2] <= 3.5  # the map reaches the box's interior only
    # The bounded optimum sits on the bound; the optimisers stop within their tolerance of
    # it (from c = 3.45, inside the bound, BFGS and lm within 1e-11; the CG variants crawl
    # towards the bound, where the map's derivative vanishes, until max_iter: measured
    # 1.7e-4 to 2.0e-3 short of it on LSODA, CG-FR 3.7e-3 on CVODES, where the crawl's
    # path differs at round-off).
    assert est.theta_[2] == pytest.approx(3.5, abs=5e-3)
    assert "change of variables" in est.solver_


@by_estimator
def test_observed_by_state_names_equals_by_index(Estimator, lv, fitted):
    est = _fit(Estimator(LotkaVolterra(), theta0=THETA0, observed=("prey", "predator")), lv)
    assert_allclose(est.theta_, fitted[Estimator].theta_, rtol=1e-12)


def test_wendy_refuses_hidden_states_naming_the_estimators_that_can(lv):
    est = WENDyODE(LotkaVolterra(), theta0=THETA0, observed=("prey",))
    with pytest.raises(ValueError, match=r"needs every state observed.*Use AdjointODE or "
                                         r"BCDProxODE"):
        est.fit(lv.t, lv.Y[:, :1])


def test_bcdprox_asks_for_a_guess_of_a_hidden_state(lv):
    est = BCDProxODE(LotkaVolterra(), theta0=THETA0, observed=("prey",))
    with pytest.raises(ValueError, match=r"needs a guess of the initial value of the "
                                         r"unobserved state\(s\) \['predator'\]"):
        est.fit(lv.t, lv.Y[:, :1])


@pytest.mark.parametrize("Estimator", [BCDProxODE, WENDyODE], ids=lambda c: c.__name__)
def test_an_initial_time_before_the_data_is_reached(Estimator):
    # x0 at t0 = 0 with the first sample at 0.5: BCD-prox puts an unobserved node at t0,
    # WENDy shoots x0 from it (both used to refuse; a NaN row had to be added by hand).
    model, theta = LotkaVolterra(), np.array([2.0, 1.0, 4.0, 1.0])
    t = np.linspace(0.5, 4.5, 41)
    rng = np.random.default_rng(0)
    Y = simulate(model, theta, [5.0, 3.0], t, t0=0.0) + 0.05 * rng.standard_normal((41, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Estimator(model, theta0=THETA0, t0=0.0).fit(t, Y)
    assert est.t0_ == 0.0
    # 82 values at noise 0.05, x0 half a time unit before them: within 10 % (the measured
    # errors are 0.3-4 %; a fit that took x0 at t = 0.5 would be 40-70 % off)
    assert_allclose(est.x0_, [5.0, 3.0], rtol=0.1)
    assert_allclose(est.theta_, theta, rtol=0.1)


def test_failures_share_one_exception_family():
    assert issubclass(IntegrationError, SklodeError) and issubclass(IntegrationError,
                                                                     RuntimeError)
    assert issubclass(DivergenceError, SklodeError) and issubclass(DivergenceError,
                                                                    FloatingPointError)


@by_estimator
def test_a_field_that_overflows_on_the_data_raises_a_sklode_error(Estimator):
    # x' = exp(k x) on data of size ~1e3 overflows at the data (BCD-prox, WENDy) and blows up
    # at once when integrated (AdjointODE): each says so with an sklode error, not garbage.
    from sklode.models import FunctionModel

    model = FunctionModel(_exponential_growth, ("x",), ("k",), default_theta=(1.0,))
    t = np.linspace(0.0, 1.0, 40)
    Y = np.linspace(1e3, 2e3, 40)[:, None]
    est = Estimator(model, theta0=(1.0,), max_iter=50)
    with pytest.raises(SklodeError):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(t, Y)


def _exponential_growth(t, x, theta):
    import torch

    return torch.exp(theta[0] * x)


def test_each_solver_runs_without_the_estimator_shell(lv, fitted):
    # The estimators are thin: their solver functions on plain arrays give the same theta.
    from sklode.adjoint import adjoint_solve, build_objective
    from sklode.bcdprox import bcd_prox_solve
    from sklode.wendy import wendy_solve

    model, theta0 = LotkaVolterra(), np.array(THETA0)
    bcd = bcd_prox_solve(model, lv.t, lv.Y, theta0)
    assert np.array_equal(bcd.theta, fitted[BCDProxODE].theta_)
    assert len(bcd.states) == 1 and bcd.states[0].shape == lv.Y.shape and bcd.converged

    wendy = wendy_solve(model, lv.t, lv.Y, theta0, linear=True)
    assert np.array_equal(wendy.theta, fitted[WENDyODE].theta_)
    assert wendy.theta_cov.shape == (4, 4) and wendy.solver.startswith("linear IRLS")

    objective, u0 = build_objective(model, lv.t, lv.Y, theta0=theta0)
    adjoint = adjoint_solve(objective, u0)
    x0, theta = objective.split(objective.to_z(adjoint.u))
    assert np.array_equal(theta, fitted[AdjointODE].theta_)
    assert np.array_equal(x0, fitted[AdjointODE].x0_)


@pytest.mark.parametrize("Estimator", [AdjointODE, BCDProxODE, WENDyODE])
@warns_by_design('PoorFitWarning', why="x0 read at the wrong time on purpose")
def test_known_x0_without_t0_warns_when_the_data_do_not_start_at_zero(Estimator):
    from sklode.exceptions import InitialTimeWarning

    d = make_trajectory("wendy_lotka_volterra", noise=0.05, random_state=0)
    t, Y = d.t[::8], d.Y[::8]  # 128 samples: enough for every method, cheap
    x0 = d.problem.x0
    settings = {"theta0": (3.0, 1.0, 6.0, 1.0), "x0": x0, "estimate_x0": False}
    # Data from t = 40 with x0 known and t0 left out: taken at t = 40 (the documented
    # default), which a user who meant day 0 would not see. The warning says so.
    with pytest.warns(InitialTimeWarning, match=r"first observation time \(t=40\).*t0=0.0"):
        est = Estimator(LotkaVolterra(), **settings).fit(t + 40.0, Y)
    assert est.t0_ == 40.0
    # No ambiguity, no warning: the data start at 0, or t0 is given.
    for times, t0 in ((t, None), (t + 40.0, 40.0)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", InitialTimeWarning)
            Estimator(LotkaVolterra(), **settings, t0=t0).fit(times, Y)
