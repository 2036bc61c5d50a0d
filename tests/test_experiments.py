"""AdjointODE on real-data shapes: several experiments sharing theta, missing values, fixed
parameters; predictions per experiment and for a new one. (BCD-prox and WENDy refuse these
inputs with a clear error in this version.)"""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from sklode import AdjointODE, BCDProxODE, WENDyODE, simulate
from sklode.adjoint import build_objective
from sklode.models import LotkaVolterra

THETA = np.array([2.0, 1.0, 4.0, 1.0])
GUESS = dict(theta0=(2.5, 1.5, 4.5, 1.5))


def _two_experiments(seed, noise=0.3):
    """LV from two initial states: 41 uniform times on [0, 4], 25 random times in [0.05, 3]."""
    rng = np.random.default_rng(seed)
    ta, tb = np.linspace(0, 4, 41), np.sort(rng.uniform(0.05, 3, 25))
    Xa = simulate(LotkaVolterra(), THETA, [5, 3], ta)
    Xb = simulate(LotkaVolterra(), THETA, [2, 6], tb, t0=0.0)
    return (ta, Xa + noise * rng.standard_normal(Xa.shape)), (tb, Xb + noise *
                                                                rng.standard_normal(Xb.shape))


def _error(theta):
    return np.linalg.norm(theta - THETA) / np.linalg.norm(THETA)


def test_two_experiments_recover_theta_better_than_either_alone():
    errors = {"joint": [], "a": [], "b": []}
    for seed in range(4):
        (ta, Ya), (tb, Yb) = _two_experiments(seed)
        joint = AdjointODE(LotkaVolterra(), **GUESS, t0=[0.0, 0.0],
                           x0=[[5.5, 2.5], [2.5, 5.5]]).fit([ta, tb], [Ya, Yb])
        a = AdjointODE(LotkaVolterra(), **GUESS).fit(ta, Ya)
        b = AdjointODE(LotkaVolterra(), **GUESS, t0=0.0, x0=[2.5, 5.5]).fit(tb, Yb)
        for key, est in (("joint", joint), ("a", a), ("b", b)):
            errors[key].append(_error(est.theta_))
        # Twice the data: every standard error below the smaller of the two alone.
        assert np.all(joint.theta_stderr_ < np.minimum(a.theta_stderr_, b.theta_stderr_))
    # Measured mean relative errors 0.044 joint against 0.084 and 0.047 alone (noise 0.3);
    # the joint fit must beat both on average over the seeds.
    mean = {key: float(np.mean(v)) for key, v in errors.items()}
    assert mean["joint"] < min(mean["a"], mean["b"])


def test_equal_length_lists_are_experiments_with_their_own_initial_states():
    (ta, Ya), _ = _two_experiments(0)
    Yb = simulate(LotkaVolterra(), THETA, [2, 6], ta) + 0.3 * np.random.default_rng(1).normal(
        size=Ya.shape)
    est = AdjointODE(LotkaVolterra(), **GUESS).fit([ta, ta], [Ya, Yb])
    assert est.converged_
    assert est.x0_.shape == (2, 2) and est.t0_.shape == (2,)
    assert est.x0_stderr_.shape == (2, 2)
    predictions = est.predict([ta, ta[:5]])
    assert [p.shape for p in predictions] == [(41, 2), (5, 2)]
    with pytest.raises(ValueError, match="fitted on 2 experiments.*pass a list"):
        est.predict(ta)
    with pytest.raises(ValueError, match="received 1 time vectors"):
        est.predict([ta])


def test_predict_a_new_experiment_from_its_initial_state():
    (ta, Ya), _ = _two_experiments(1)
    est = AdjointODE(LotkaVolterra(), **GUESS).fit(ta, Ya)
    new = est.predict(ta, x0=[2.0, 6.0], t0=0.0)
    assert_allclose(new, simulate(LotkaVolterra(), est.theta_, [2.0, 6.0], ta, t0=0.0),
                    rtol=1e-12)
    with pytest.raises(ValueError, match="pass x0 with it"):
        est.predict(ta, t0=0.0)


def test_missing_values_drop_out_of_the_cost():
    (ta, Ya), _ = _two_experiments(2, noise=0.1)
    rng = np.random.default_rng(0)
    Y = Ya.copy()
    Y[rng.random(Y.shape) < 0.2] = np.nan  # 20 % missing
    Y[0] = Ya[0]  # the first row starts x0
    est = AdjointODE(LotkaVolterra(), **GUESS).fit(ta, Y)
    # Noise 0.1 on 41 x 2 points with 20 % missing: within 5 % of theta (measured 1.1 %).
    assert _error(est.theta_) < 0.05
    assert np.isnan(Y).sum() > 10  # the input is untouched
    score = est.score(ta, Y)  # R^2 over the observed entries only
    assert 0.95 < score <= 1.0


def test_missing_values_keep_gradients_and_jacobian_exact():
    (ta, Ya), (tb, Yb) = _two_experiments(3)
    Ya, Yb = Ya.copy(), Yb.copy()
    Ya[3, 0] = Yb[5, 1] = np.nan
    obj, u = build_objective(LotkaVolterra(), [ta, tb], [Ya, Yb], theta0=GUESS["theta0"],
                             t0=[0.0, 0.0], x0=[[5.5, 2.5], [2.5, 5.5]], fixed={"b": 1.0},
                             rtol=1e-11, atol=1e-12)
    assert u.size == 2 + 2 + 3  # two initial states and three fitted parameters
    h = 1e-6
    fd = np.array([(obj.cost(u + h * e) - obj.cost(u - h * e)) / (2 * h)
                   for e in np.eye(u.size)])
    _, grad = obj.value_and_grad(u)
    r = obj.residual(u)
    # Central differences at tolerance 1e-11 are good to ~1e-6 of the gradient's scale.
    assert_allclose(grad, fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))
    assert_allclose(obj.jacobian(u).T @ r, fd, rtol=1e-5, atol=1e-6 * np.max(np.abs(fd)))
    assert np.all(r[:Ya.size].reshape(Ya.shape)[3, 0] == 0.0)


def test_a_fixed_parameter_stays_exactly_fixed():
    (ta, Ya), _ = _two_experiments(4)
    est = AdjointODE(LotkaVolterra(), **GUESS, fixed={"c": 4.0}).fit(ta, Ya)
    assert est.theta_[2] == 4.0
    assert est.theta_stderr_[2] == 0.0 and np.all(est.theta_cov_[2] == 0.0)
    assert np.all(est.theta_stderr_[[0, 1, 3]] > 0)
    with pytest.raises(ValueError, match="fixed names the parameter 'k'"):
        AdjointODE(LotkaVolterra(), fixed={"k": 1.0}).fit(ta, Ya)


@pytest.mark.parametrize("Estimator", [BCDProxODE, WENDyODE], ids=lambda c: c.__name__)
def test_methods_on_the_data_grid_refuse_what_they_cannot_take_yet(Estimator):
    (ta, Ya), (tb, Yb) = _two_experiments(5)
    with pytest.raises(ValueError, match="fits one experiment at a time"):
        Estimator(LotkaVolterra(), **GUESS).fit([ta, tb], [Ya, Yb])
    Y = Ya.copy()
    Y[4, 1] = np.nan
    with pytest.raises(ValueError, match=r"1 missing value\(s\) \(NaN\)"):
        Estimator(LotkaVolterra(), **GUESS).fit(ta, Y)


@pytest.mark.parametrize("optimizer", ["trf", "L-BFGS-B"])
def test_a_bounded_initial_state_stays_in_its_bounds(optimizer):
    # The prey starts at 5 in truth; an upper bound of 4.5 is active and must hold exactly.
    (ta, Ya), (tb, Yb) = _two_experiments(6, noise=0.1)
    est = AdjointODE(LotkaVolterra(), **GUESS, optimizer=optimizer, x0=[4.0, 3.0],
                     x0_bounds=(0.0, [4.5, np.inf])).fit(ta, Ya)
    assert 0.0 <= est.x0_[0] <= 4.5
    assert est.x0_[0] == pytest.approx(4.5, abs=1e-6)
    several = AdjointODE(LotkaVolterra(), **GUESS, optimizer=optimizer, t0=[0.0, 0.0],
                         x0=[[4.0, 3.0], [2.5, 5.5]], x0_bounds=(0.0, [4.5, 5.8])
                         ).fit([ta, tb], [Ya, Yb])
    assert np.all(several.x0_ <= [4.5, 5.8]) and np.all(several.x0_ >= 0.0)


def test_unbounded_optimizers_refuse_initial_state_bounds():
    (ta, Ya), _ = _two_experiments(6)
    with pytest.raises(ValueError, match=r"x0_bounds need optimizer 'trf' or 'L-BFGS-B'"):
        AdjointODE(LotkaVolterra(), **GUESS, optimizer="BFGS", x0_bounds=(0, 10)).fit(ta, Ya)
