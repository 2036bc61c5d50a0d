"""The observation layer: observables, noise models with parameters, the likelihood, doses
and conditions, on all three estimators (what each supports, and what each refuses)."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from observation_models import (
    PK_TRUTH,
    OralPK,
    TwoConditionLV,
    TwoStates,
    pk_experiments,
    two_state_experiments,
)
from scipy import stats

from sklode import AdjointODE, BCDProxODE, Experiment, WENDyODE, simulate
from sklode._validation import check_experiments
from sklode.exceptions import IntegrationError
from sklode.metrics import neg_log_likelihood
from sklode.observation._noise import neg_log_likelihood_terms
from sklode.outputerror._pose import objective_for_experiments
from sklode.outputerror._sensitivity import forward_trajectory, sensitivities


def _quiet(est, *data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(*data)


# ----------------------------------------------------------------------------- likelihood
def test_every_noise_kind_is_the_log_density_of_its_distribution():
    # The reference is scipy.stats, an implementation independent of ours; exact to rounding.
    rng = np.random.default_rng(0)
    y, h, s = rng.uniform(0.5, 3, (7, 1)), rng.uniform(0.5, 3, (7, 1)), rng.uniform(0.1, 1, (7, 1))
    expected = {
        "absolute": -stats.norm.logpdf(y, h, s),
        "laplace": -stats.laplace.logpdf(y, h, s),
        "lognormal": -stats.lognorm.logpdf(y, s, scale=h),
        # log10 y ~ N(log10 h, s): the density of y carries 1 / (y ln 10)
        "log10normal": -(stats.norm.logpdf(np.log10(y), np.log10(h), s)
                         - np.log(y * np.log(10))),
    }
    for kind, reference in expected.items():
        assert_allclose(neg_log_likelihood_terms(y, h, s, (kind,)), reference, rtol=1e-12)


def test_sum_of_squares_rows_equal_the_likelihood_up_to_a_constant():
    # Minimising 1/2 ||R||^2 is maximising L only if the difference is the same everywhere.
    model = OralPK()
    data = check_experiments(pk_experiments(), None, model=model, estimate_x0=False,
                             x0=[0, 0], t0=0.0, estimator_name="test")
    objective, _ = objective_for_experiments(model, data, theta0=PK_TRUTH,
                                             noise_kind="absolute", rtol=1e-11, atol=1e-13)
    differences = []
    for factor in (1.0, 1.3, 0.7):
        theta = PK_TRUTH * factor
        u = objective.to_u(theta)
        est_nll = sum(_nll_at(model, e, theta) for e in data.experiments)
        differences.append(objective.cost(u) - est_nll)
    # both solves at rtol <= 1e-10: the difference agrees to 1e-8 of the cost
    assert np.ptp(differences) < 1e-8 * abs(differences[0])


def _states_at(model, experiment, theta):
    return simulate(model, theta, experiment.x0, experiment.t, t0=experiment.t0,
                    doses=experiment.doses, rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("noise_kind", ["absolute", "laplace", "lognormal", "log10normal"])
def test_the_cost_less_its_offset_is_the_negative_log_likelihood(noise_kind):
    # Fides sees cost - cost_offset() so that its relative stopping test reads -log L as
    # pyPESTO's does: the offset must be the whole constant, for every noise kind, at any
    # parameter value (two here, 30 % apart: a wrong constant that depends on theta fails)
    model = OralPK()
    data = check_experiments(pk_experiments(), None, model=model, estimate_x0=False,
                             x0=[0, 0], t0=0.0, estimator_name="test")
    objective, _ = objective_for_experiments(model, data, theta0=PK_TRUTH,
                                             noise_kind=noise_kind, rtol=1e-11, atol=1e-13)
    for factor in (1.0, 1.3):
        theta = PK_TRUTH * factor
        nll = sum(part.observation.neg_log_likelihood(_states_at(model, e, theta), theta)
                  for part, e in zip(objective.parts, data.experiments))
        # both from solves at rtol 1e-11; Laplace rows change by < 1e-8 per observation
        # below their floor (_LAPLACE_FLOOR)
        assert_allclose(objective.cost(objective.to_u(theta)) - objective.cost_offset(), nll,
                        rtol=1e-9, atol=1e-7)


def test_the_cost_offset_of_known_noise_levels_holds_their_log_terms():
    # Known sigma, plain weighted residuals (no observation layer): -log L holds
    # sum(log sigma + log(2 pi) / 2), which the cost leaves out
    model = TwoStates()
    experiments = two_state_experiments()
    data = check_experiments(experiments, None, model=model, estimate_x0=False,
                             x0=[0, 0], t0=0.0, estimator_name="test")
    sigma = 0.05
    objective, _ = objective_for_experiments(model, data, theta0=np.array([0.8, 0.3]),
                                             sigma=sigma, noise_kind="absolute", rtol=1e-11,
                                             atol=1e-13)
    theta = np.array([0.7, 0.35])
    nll = sum(float(np.nansum(neg_log_likelihood_terms(e.Y, _states_at(model, e, theta),
                                                       np.full(e.Y.shape, sigma),
                                                       ("absolute", "absolute"))))
              for e in data.experiments)
    assert_allclose(objective.cost(objective.to_u(theta)) - objective.cost_offset(), nll,
                    rtol=1e-9)


def _nll_at(model, experiment, theta):
    X = simulate(model, theta, experiment.x0, experiment.t, t0=experiment.t0,
                 doses=experiment.doses, rtol=1e-11, atol=1e-13)
    h = X[:, 1:2] / theta[2]
    return float(np.sum(neg_log_likelihood_terms(experiment.Y, h, theta[3] + theta[4] * h,
                                                 ("absolute",))))


@pytest.mark.parametrize("noise_kind", ["absolute", "laplace", "lognormal", "log10normal"])
def test_jacobian_and_adjoint_gradient_match_finite_differences(noise_kind):
    # Doses, a modelled noise and an observable at once: the chain rule through all three.
    model = OralPK()
    data = check_experiments(pk_experiments()[:2], None, model=model, estimate_x0=False,
                             x0=[0, 0], t0=0.0, estimator_name="test")
    # differences on LSODA's solves: CVODES' step sequence changes more between u and
    # u + 1e-6 e, which costs central differences an order of magnitude (1.5e-5 of the
    # largest entry at this step, against LSODA's 1.3e-6)
    objective, u = objective_for_experiments(model, data, theta0=PK_TRUTH * 1.1,
                                             noise_kind=noise_kind, rtol=1e-11, atol=1e-13,
                                             integrator="LSODA")
    J = objective.jacobian(u)
    value, grad_adjoint = objective.value_and_grad(u, "adjoint")
    step = 1e-6
    fd = np.column_stack([(objective.residual(u + step * e) - objective.residual(u - step * e))
                          / (2 * step) for e in np.eye(u.size)])
    # central differences on a 1e-11 solve: accurate to ~1e-6 of the largest entry
    assert_allclose(J, fd, atol=2e-6 * np.abs(fd).max())
    # the default integrator ("auto": CVODES' sensitivities where the model compiles) gives
    # the same Jacobian: both solved at 1e-11, they agreed to 5e-10 of the largest entry
    default, _ = objective_for_experiments(model, data, theta0=PK_TRUTH * 1.1,
                                           noise_kind=noise_kind, rtol=1e-11, atol=1e-13)
    assert_allclose(default.jacobian(u), J, atol=1e-8 * np.abs(J).max())
    assert_allclose(grad_adjoint, J.T @ objective.residual(u), rtol=1e-6,
                    atol=1e-8 * np.abs(grad_adjoint).max())


class _Proportional(TwoStates):
    """A -> B, both read with a proportional error: the noise is zero where B is."""

    param_names = ("k1", "k2", "b")
    default_theta = (0.5, 0.2, 0.1)
    observable_names = ("A_obs", "B_obs")

    def observe(self, t, x, theta):
        return x

    def noise_sd(self, t, y, theta):
        return theta[2] * y


def test_a_missing_datum_leaves_the_jacobian_finite():
    # B starts at 0, where its proportional noise is 0: its datum there is missing (NaN),
    # and the rows' derivative there is 0/0. The Jacobian's rows of a missing datum are
    # zeros, not NaN * 0 (Bachmann_MSB2011's J^T r gradient was NaN in every component),
    # and J^T r is the adjoint's gradient
    model = _Proportional()
    t = np.linspace(0.0, 10.0, 12)
    X = simulate(model, model.default_theta, [1.0, 0.0], t)
    rng = np.random.default_rng(7)
    Y = X * (1 + 0.1 * rng.standard_normal(X.shape))
    Y[0, 1] = np.nan
    data = check_experiments([Experiment(t, Y, x0=[1.0, 0.0], t0=0.0)], None, model=model,
                             estimate_x0=False, estimator_name="test")
    objective, u = objective_for_experiments(model, data, theta0=np.array([0.6, 0.25, 0.12]),
                                             rtol=1e-11, atol=1e-13)
    J = objective.jacobian(u)
    assert np.all(np.isfinite(J))
    value, grad = objective.value_and_grad(u, "adjoint")
    # two derivatives of one cost solved at 1e-11, as in the test above
    assert_allclose(J.T @ objective.residual(u), grad, rtol=1e-6,
                    atol=1e-8 * np.abs(grad).max())


@pytest.mark.parametrize("noise_kind", ["absolute", "lognormal", "log10normal",
                                        {"conc": "lognormal"}])
@pytest.mark.parametrize("fisher", [False, True])
def test_compiled_observation_jacobians_equal_torch(noise_kind, fisher):
    # The chain rule on the compiled observe/noise_sd against torch's forward mode on the
    # rows: the same derivatives, in another order of operations
    import torch

    from sklode.outputerror._pose import observation_for

    class IndexedPK(OralPK):  # observe and noise_sd on indexed states: programs of scalars
        def observe(self, t, x, theta):
            return torch.stack([x[..., 1] / theta[2]], dim=-1)

        def noise_sd(self, t, y, theta):
            return torch.stack([theta[3] + theta[4] * y[..., 0]], dim=-1)

    sliced = observation_for(OralPK(), pk_experiments()[0], (0,), 1.0, noise_kind)
    X = np.abs(np.random.default_rng(0).normal(5.0, 1.0, (pk_experiments()[0].t.size, 2)))
    assert sliced._numpy_jacobians(X, PK_TRUTH, fisher) is None  # x[..., 1:2]: torch's
    model = IndexedPK()
    data = check_experiments(pk_experiments()[:2], None, model=model, estimate_x0=False,
                             x0=[0, 0], t0=0.0, estimator_name="test")
    e = data.experiments[0]
    observation = observation_for(model, e, data.observed, 1.0, noise_kind)
    X = np.abs(np.random.default_rng(0).normal(5.0, 1.0, (e.t.size, model.n_states)))
    compiled = observation._numpy_jacobians(X, PK_TRUTH, fisher)
    assert compiled is not None
    rows = observation._fisher_rows if fisher else observation._rows
    for got, expected in zip(compiled, observation._batched_jacobians(rows, X, PK_TRUTH)):
        assert_allclose(got, expected, rtol=1e-10, atol=1e-12 * np.abs(expected).max())


@pytest.mark.parametrize("noise_kind", ["absolute", "log10normal"])
def test_compiled_observation_residual_and_domain_check_equal_torch(noise_kind):
    # The residual through the compiled observe/noise_sd (numpy: a PEtab problem evaluates
    # dozens of experiments per step) against torch's rows, with a missing entry; and the
    # same IntegrationError where a log kind meets a non-positive prediction
    import torch

    from sklode.exceptions import IntegrationError
    from sklode.outputerror._pose import observation_for

    class IndexedPK(OralPK):
        def observe(self, t, x, theta):
            return torch.stack([x[..., 1] / theta[2]], dim=-1)

        def noise_sd(self, t, y, theta):
            return torch.stack([theta[3] + theta[4] * y[..., 0]], dim=-1)

    model = IndexedPK()
    experiment = pk_experiments()[0]
    Y = experiment.Y.copy()
    Y[3] = np.nan
    data = check_experiments([Experiment(experiment.t, Y)], None, model=model,
                             estimate_x0=False, x0=[0, 0], t0=0.0, estimator_name="test")
    e = data.experiments[0]
    observation = observation_for(model, e, data.observed, 1.0, noise_kind)
    X = np.abs(np.random.default_rng(1).normal(5.0, 1.0, (e.t.size, model.n_states)))
    compiled = observation.residual(X, PK_TRUTH)
    with torch.no_grad():
        rows = observation._rows(observation._t, torch.from_numpy(X),
                                 torch.from_numpy(np.asarray(PK_TRUTH, dtype=np.float64)),
                                 observation._y_on_scale, observation._sigma_or_ones(),
                                 observation._mask)
    # the same elementwise formulas in numpy: equal to round-off
    assert_allclose(compiled, observation._flat(rows.numpy()), rtol=1e-13, atol=1e-15)
    assert observation.modelled_noise  # noise_sd: a data row and a noise row per entry
    assert compiled[3] == 0 and compiled[observation.n_rows // 2 + 3] == 0  # the missing one
    if noise_kind == "log10normal":
        X[2, 1] = -1.0
        with pytest.raises(IntegrationError, match="read on the log scale is not positive"):
            observation.residual(X, PK_TRUTH)


def test_sensitivities_are_continuous_across_a_dose():
    model = TwoStates()
    t = np.linspace(0.5, 12, 24)
    doses = [(3.0, 0, 2.0), (6.0, 1, 1.0)]
    traj = forward_trajectory(model, np.array([0.8, 0.3]), np.array([1.0, 0.5]), 0.0, t,
                              integrator="LSODA", rtol=1e-11, atol=1e-13, doses=doses)
    S = sensitivities(model, np.array([0.8, 0.3]), traj)
    step = 1e-6
    for j in range(4):
        x0, theta = np.array([1.0, 0.5]), np.array([0.8, 0.3])
        lo, hi = (x0.copy(), theta.copy()), (x0.copy(), theta.copy())
        target = 0 if j < 2 else 1
        lo[target][j % 2] -= step
        hi[target][j % 2] += step
        diff = (simulate(model, hi[1], hi[0], t, t0=0.0, doses=doses, rtol=1e-12, atol=1e-13)
                - simulate(model, lo[1], lo[0], t, t0=0.0, doses=doses, rtol=1e-12,
                           atol=1e-13)) / (2 * step)
        assert_allclose(S[:, :, j], diff, atol=1e-6)  # central differences of 1e-12 solves


# ----------------------------------------------------------------------------- recovery
def test_adjoint_recovers_pk_parameters_with_a_fitted_combined_error():
    est = _quiet(AdjointODE(OralPK(), estimate_x0=False, positive=True,
                            theta0=(0.8, 0.25, 20.0, 0.3, 0.2)), pk_experiments())
    z = (est.theta_ - PK_TRUTH) / est.theta_stderr_
    # 39 concentrations: every parameter within 3 standard errors of the truth (a 99.7 %
    # event each); the structural ones within 12 % (their standard errors are 5-8 %).
    assert np.all(np.abs(z) < 3), z
    assert_allclose(est.theta_[:3], PK_TRUTH[:3], rtol=0.12)
    assert est.converged_ and np.isfinite(est.neg_log_likelihood_)
    n = sum(len(e) for e in pk_experiments())
    assert est.aic_ == pytest.approx(2 * est.neg_log_likelihood_ + 2 * 5)
    assert est.bic_ == pytest.approx(2 * est.neg_log_likelihood_ + np.log(n) * 5)


def test_fides_starts_where_the_modelled_noise_is_far_below_the_data():
    # A PEtab box draws noise factors of 1e-5 and less; their product put two of Fiedler's 20
    # starts below the noise rows' floor (1e-8 of the data's size), which pyPESTO starts
    # from. Fides reads the cost less its constant and has no floor: from s ~ 1e-10 (the
    # concentrations are ~1-10) it reaches the optimum it reaches from a start near it.
    pytest.importorskip("fides")
    experiments = pk_experiments()
    settings = dict(estimate_x0=False, positive=True, optimizer="fides")
    low = (0.8, 0.25, 20.0, 1e-10, 1e-10)
    with pytest.raises(IntegrationError, match="noise_sd is not positive"):
        _quiet(AdjointODE(OralPK(), theta0=low, **{**settings, "optimizer": "trf"}),
               experiments)
    far = _quiet(AdjointODE(OralPK(), theta0=low, **settings), experiments)
    near = _quiet(AdjointODE(OralPK(), theta0=(0.8, 0.25, 20.0, 0.3, 0.2), **settings),
                  experiments)
    # the same optimum from both: -log L to 1e-6 and theta to 1e-3 of itself (the fits stop
    # on Fides' 1e-8 cost tests, a few 1e-4 of a standard error apart)
    assert far.neg_log_likelihood_ == pytest.approx(near.neg_log_likelihood_, abs=1e-6)
    assert_allclose(far.theta_, near.theta_, rtol=1e-3)


def test_likelihood_from_metrics_is_the_estimators_at_the_fit_and_larger_elsewhere():
    experiments = pk_experiments()
    est = _quiet(AdjointODE(OralPK(), estimate_x0=False, positive=True,
                            theta0=(0.8, 0.25, 20.0, 0.3, 0.2)), experiments)
    assert neg_log_likelihood(est, experiments) == pytest.approx(est.neg_log_likelihood_,
                                                                  rel=1e-10)
    # the fit is the maximum: any other theta has a larger -log L
    for factor in (1.02, 0.98):
        assert neg_log_likelihood(est, experiments, theta=est.theta_ * factor) > \
            est.neg_log_likelihood_


def test_a_hidden_state_starting_at_zero_does_not_block_log_normal_noise():
    rng = np.random.default_rng(3)
    experiments = []
    for e in pk_experiments():
        X = simulate(OralPK(), PK_TRUTH, [0, 0], e.t, t0=0.0,
                     doses=[(a, 0, c) for a, _, c in e.doses])
        conc = X[:, 1:2] / PK_TRUTH[2]
        experiments.append(Experiment(e.t, conc * np.exp(0.1 * rng.standard_normal(conc.shape)),
                                      x0=[0, 0], t0=0.0, doses=e.doses))

    class LogPK(OralPK):
        param_names = ("ka", "ke", "V", "s")
        default_theta = (1.0, 0.2, 20.0, 0.3)

        def noise_sd(self, t, y, theta):
            return theta[3] * y / y

    est = _quiet(AdjointODE(LogPK(), estimate_x0=False, positive=True, noise_kind="lognormal"),
                 experiments)
    assert_allclose(est.theta_[:3], PK_TRUTH[:3], rtol=0.1)  # 39 values at 10 % noise
    assert est.theta_[3] == pytest.approx(0.1, rel=0.3)  # sd of log from 39 residuals


def test_two_conditions_share_all_but_one_parameter():
    rng = np.random.default_rng(5)
    t = np.linspace(0.1, 4, 40)
    truth = np.array([2.0, 1.0, 4.0, 1.0, 3.0])
    experiments = []
    for a, conditions in ((2.0, None), (3.0, {"a": "a_2"})):
        X = simulate(TwoConditionLV(), [a, 1, 4, 1, 0], [5, 3], t, t0=0.0)
        experiments.append(Experiment(t, X + 0.1 * rng.standard_normal(X.shape), x0=[5, 3],
                                      t0=0.0, conditions=conditions))
    est = _quiet(AdjointODE(TwoConditionLV(), estimate_x0=False, sigma=0.1), experiments)
    assert_allclose(est.theta_, truth, rtol=0.03)  # 160 values at 0.1 noise: 1-2 % errors
    # predict replays each fitted experiment's condition
    second = est.predict([t, t])[1]
    assert_allclose(second, simulate(TwoConditionLV(), [est.theta_[4], *est.theta_[1:]],
                                     [5, 3], t, t0=0.0), rtol=1e-6)
    # a numeric condition holds a known setting
    known = [Experiment(e.t, e.Y, x0=[5, 3], t0=0.0, conditions=c)
             for e, c in zip(experiments, ({"a": 2.0}, {"a": 3.0}))]
    fixed_a = _quiet(AdjointODE(TwoConditionLV(), estimate_x0=False, sigma=0.1,
                                fixed={"a": 2.0, "a_2": 0.0}), known)
    assert_allclose(fixed_a.theta_[1:4], truth[1:4], rtol=0.03)


@pytest.mark.parametrize("Estimator", [AdjointODE, BCDProxODE, WENDyODE])
def test_every_estimator_fits_through_doses(Estimator):
    est = _quiet(Estimator(TwoStates(), estimate_x0=False), two_state_experiments())
    # 320 values at 0.05 noise: AdjointODE and WENDy within 1 %, BCD-prox's multistep
    # residual on a 0.25-h grid within 3 %
    assert_allclose(est.theta_, [0.8, 0.3], rtol=0.03)
    assert est.score(two_state_experiments()) > 0.99
    assert np.isfinite(est.neg_log_likelihood_)
    assert np.shape(est.x0_) == (2, 2)


def test_a_dose_before_the_first_sample_needs_no_hand_made_row():
    # A dose at 0 h, first sample at 0.25 h: BCD-prox adds the node at t0, WENDy shoots x0
    # from it, AdjointODE integrates from it.
    rng = np.random.default_rng(2)
    t = np.linspace(0.25, 12, 48)
    X = simulate(TwoStates(), [0.8, 0.3], [0, 0], t, t0=0.0, doses=[(0.0, 0, 10.0)])
    exp = Experiment(t, X + 0.05 * rng.standard_normal(X.shape), x0=[0, 0],
                     doses=[(0.0, "A", 10.0)])
    for Estimator in (AdjointODE, BCDProxODE, WENDyODE):
        est = _quiet(Estimator(TwoStates(), estimate_x0=False), exp)
        assert est.t0_ == 0.0
        assert_allclose(est.x0_, [0, 0])
        assert_allclose(est.theta_, [0.8, 0.3], rtol=0.05)  # 96 values at 0.05 noise


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("Estimator", [BCDProxODE, WENDyODE])
def test_grid_methods_refuse_what_only_a_forward_likelihood_fits(Estimator):
    with pytest.raises(ValueError, match="reads its data through observe.*Use AdjointODE"):
        Estimator(OralPK()).fit(pk_experiments())

    class Noisy(TwoStates):
        def noise_sd(self, t, y, theta):
            return 0.1 * y

    with pytest.raises(ValueError, match="not from a model's noise_sd. Use AdjointODE"):
        Estimator(Noisy(), estimate_x0=False).fit(two_state_experiments())
    exps = [Experiment(e.t, e.Y, x0=[0, 0], t0=0.0, conditions={"k1": 0.5})
            for e in two_state_experiments()]
    with pytest.raises(ValueError, match=r"conditions=\{'k1': 0.5\}.*Use AdjointODE"):
        Estimator(TwoStates(), estimate_x0=False).fit(exps)
    with pytest.raises(ValueError, match="got noise_kind='laplace'. Use AdjointODE"):
        Estimator(TwoStates(), estimate_x0=False, noise_kind="laplace").fit(
            two_state_experiments())


def test_lognormal_messages_do_not_send_the_user_back_and_forth():
    # BCD-prox refuses 'proportional', so its lognormal message must not suggest it.
    exps = two_state_experiments()
    with pytest.raises(ValueError) as info:
        BCDProxODE(TwoStates(), estimate_x0=False, noise_kind="lognormal").fit(exps)
    assert "proportional" not in str(info.value) and "AdjointODE" in str(info.value)


@pytest.mark.parametrize("make, match", [
    (lambda e: Experiment(e.t, e.Y, doses=[(0.0, "liver", 1.0)]), "names the state 'liver'"),
    (lambda e: Experiment(e.t, e.Y, conditions={"kk": 1.0}), "set 'kk', which is not a"),
    (lambda e: Experiment(e.t, e.Y, conditions={"k1": "k9"}), "read 'k1' from 'k9'"),
    (lambda e: Experiment(e.t, e.Y, doses=[(0.0, "A")]), r"each dose is a \(time, state, amount\)"),
    (lambda e: Experiment(e.t, e.Y, t0=1.0, doses=[(0.5, "A", 1.0)]),
     "t0=1 is after the first observation \\(or dose\\) time"),
])
def test_bad_experiments_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        AdjointODE(TwoStates()).fit([make(e) for e in two_state_experiments()])


def test_experiments_carry_their_own_y():
    with pytest.raises(ValueError, match="carry their own Y"):
        AdjointODE(TwoStates()).fit(two_state_experiments(), [np.zeros((80, 2))] * 2)


def test_a_known_sigma_may_be_nan_where_y_is():
    e = two_state_experiments()[0]
    Y = e.Y.copy()
    Y[::5, 1] = np.nan
    sigma = np.full(Y.shape, 0.05)
    sigma[::5, 1] = np.nan
    est = _quiet(AdjointODE(TwoStates(), estimate_x0=False),
                 Experiment(e.t, Y, x0=[0, 0], t0=0.0, doses=e.doses, sigma=sigma))
    assert_allclose(est.theta_, [0.8, 0.3], rtol=0.02)
    sigma[0, 0] = np.nan  # where Y is observed: refused, naming the entry
    with pytest.raises(ValueError, match="NaN is allowed only where Y is NaN"):
        AdjointODE(TwoStates(), estimate_x0=False).fit(
            Experiment(e.t, Y, x0=[0, 0], t0=0.0, doses=e.doses, sigma=sigma))


def test_a_model_with_observe_needs_observable_names():
    from sklode.exceptions import ModelError

    class NoNames(TwoStates):
        def observe(self, t, x, theta):
            return x[..., :1]

    with pytest.raises(ModelError, match="defines observe.*but no observable_names"):
        AdjointODE(NoNames()).fit(two_state_experiments())

    class WrongShape(OralPK):
        def observe(self, t, x, theta):
            return x

    with pytest.raises(ModelError, match=r"observe returned \(3, 2\) for a batch"):
        AdjointODE(WrongShape()).fit(pk_experiments())


# ----------------------------------------------------------------------------- as data
def test_experiments_from_long_and_wide_tables_agree():
    pd = pytest.importorskip("pandas")
    exps = two_state_experiments()
    long = {"id": [], "time": [], "what": [], "value": []}
    wide = {"id": [], "time": [], "A": [], "B": []}
    for k, e in enumerate(exps):
        for ti, row in zip(e.t, e.Y):
            wide["id"].append(f"s{k}")
            wide["time"].append(ti)
            wide["A"].append(row[0])
            wide["B"].append(row[1])
            for name, v in zip("AB", row):
                long["id"].append(f"s{k}")
                long["time"].append(ti)
                long["what"].append(name)
                long["value"].append(v)
    doses = pd.DataFrame({"id": ["s0", "s0", "s1", "s1"], "time": [0.0, 10.0, 0.0, 10.0],
                          "state": ["A"] * 4, "amount": [10.0, 8.0, 10.0, 8.0]})
    from sklode import experiments_from_table

    from_long = experiments_from_table(pd.DataFrame(long), time="time", experiment="id",
                                       observable="what", values=["A", "B"], doses=doses,
                                       x0=[0.0, 0.0], t0=0.0)
    from_wide = experiments_from_table(wide, time="time", experiment="id", values=["A", "B"],
                                       doses=doses, x0=[0.0, 0.0], t0=0.0)
    for a, b, e in zip(from_long, from_wide, exps):
        assert a.name == b.name
        assert_allclose(a.Y, e.Y)
        assert_allclose(b.Y, e.Y)
        assert a.doses == b.doses == [(0.0, "A", 10.0), (10.0, "A", 8.0)]
    fit_long = _quiet(AdjointODE(TwoStates(), estimate_x0=False), from_long)
    fit_direct = _quiet(AdjointODE(TwoStates(), estimate_x0=False), exps)
    assert_allclose(fit_long.theta_, fit_direct.theta_, rtol=1e-12)  # the same data
    with pytest.raises(ValueError, match="two values of 'A' at one time"):
        experiments_from_table({"time": [0, 0], "o": ["A", "A"], "value": [1, 2]},
                               observable="o")
    with pytest.raises(ValueError, match="no column 'amount'"):
        experiments_from_table(wide, experiment="id", values=["A"],
                               doses={"id": ["s0"], "time": [0.0], "state": ["A"]})


def test_cross_validation_over_experiments_with_any_regression_scorer():
    from sklearn.model_selection import GroupKFold, KFold, cross_val_score

    from sklode.metrics import experiment_scorer

    exps = two_state_experiments() + two_state_experiments(seed=4)
    est = AdjointODE(TwoStates(), estimate_x0=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r2 = cross_val_score(est, exps, cv=GroupKFold(n_splits=2), groups=[0, 0, 1, 1])
        rmse = cross_val_score(est, exps, cv=KFold(n_splits=2),
                               scoring=experiment_scorer("neg_root_mean_squared_error"))
    assert np.all(r2 > 0.99)  # held-out experiments predicted from their known x0
    # the held-out RMSE is the noise level, 0.05, to within the sampling spread
    assert np.all(np.abs(-rmse - 0.05) < 0.01)


def test_predict_an_experiment_gives_its_observables_at_its_times():
    exps = pk_experiments()
    est = _quiet(AdjointODE(OralPK(), estimate_x0=False, positive=True,
                            theta0=(0.8, 0.25, 20.0, 0.3, 0.2)), exps)
    P = est.predict(exps)
    assert len(P) == 3 and P[0].shape == (13, 1)
    X = simulate(OralPK(), est.theta_, [0, 0], exps[0].t, t0=0.0,
                 doses=[(0.0, 0, 320.0), (12.0, 0, 320.0)])
    assert_allclose(P[0][:, 0], X[:, 1] / est.theta_[2], rtol=1e-6)
    # a new subject with its known initial state and its own dose
    new = Experiment(exps[0].t, exps[0].Y, x0=[0, 0], t0=0.0, doses=[(0.0, "gut", 100.0)])
    X_new = simulate(OralPK(), est.theta_, [0, 0], exps[0].t, t0=0.0, doses=[(0.0, 0, 100.0)])
    assert_allclose(est.predict(new)[:, 0], X_new[:, 1] / est.theta_[2], rtol=1e-6)
    # estimated initial states of unseen experiments are not invented
    free = _quiet(AdjointODE(TwoStates(), x0=[0.1, 0.1]), two_state_experiments()[0])
    with pytest.raises(ValueError, match="needs its whole initial state known"):
        free.predict([Experiment(e.t, e.Y) for e in two_state_experiments()])


def test_a_noise_kind_per_observable():
    # prey with additive, predator with multiplicative noise: the dict reads each column
    # with its own distribution, and -log L is the sum of scipy's log densities at the fit
    from sklode.models import LotkaVolterra

    rng = np.random.default_rng(7)
    t = np.linspace(0, 4, 41)
    X = simulate(LotkaVolterra(), [2, 1, 4, 1], [5, 3], t)
    Y = np.column_stack([X[:, 0] + 0.2 * rng.standard_normal(41),
                         X[:, 1] * np.exp(0.1 * rng.standard_normal(41))])
    est = _quiet(AdjointODE(LotkaVolterra(), theta0=(2.5, 1.5, 4.5, 1.5), sigma=[0.2, 0.1],
                            noise_kind={"predator": "lognormal"}), t, Y)
    assert_allclose(est.theta_, [2, 1, 4, 1], rtol=0.05)  # 82 values, 2-10 % noise
    P = est.predict(t)
    reference = -(stats.norm.logpdf(Y[:, 0], P[:, 0], 0.2).sum()
                  + stats.lognorm.logpdf(Y[:, 1], 0.1, scale=P[:, 1]).sum())
    assert est.neg_log_likelihood_ == pytest.approx(reference, rel=1e-6)  # rtol-1e-8 solves
    with pytest.raises(ValueError, match="noise_kind names \\['wolf'\\]"):
        AdjointODE(LotkaVolterra(), noise_kind={"wolf": "laplace"}).fit(t, Y)


# slow: a profile of every parameter (~10 s); profiles with a known noise are tested fast in
# tests/test_uncertainty.py
@pytest.mark.slow
def test_profile_intervals_with_a_fitted_noise_are_likelihood_ratio_intervals():
    experiments = pk_experiments()
    est = _quiet(AdjointODE(OralPK(), estimate_x0=False, positive=True,
                            theta0=(0.8, 0.25, 20.0, 0.3, 0.2)), experiments)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        intervals = est.profile_intervals(experiments, parameters=["ka", "ke"])
    wald = est.confidence_intervals()
    for j in (0, 1):
        lo, hi = intervals[j]
        assert lo < est.theta_[j] < hi and np.isfinite([lo, hi]).all()
        # -log L itself is the cost: the profile interval is as wide as the Wald one within
        # a factor 1.5 on these near-quadratic rates (not inflated by a chi-square factor)
        ratio = (hi - lo) / (wald[j, 1] - wald[j, 0])
        assert 0.67 < ratio < 1.5, ratio
        # the likelihood at the ends has risen by chi2_1(0.95) / 2 = 1.92
        for end in (lo, hi):
            theta = est.theta_.copy()
            theta[j] = end
            assert neg_log_likelihood(est, experiments, theta=theta) > est.neg_log_likelihood_ + 1.9


def test_a_long_table_is_recognised_from_the_values_it_names():
    from sklode import experiments_from_table

    long = {"subject": [1, 1, 2, 2], "time": [0.5, 1.0, 0.5, 1.0],
            "observable": ["conc"] * 4, "value": [2.0, 1.5, 3.0, 2.5]}
    exps = experiments_from_table(long, time="time", experiment="subject", values=["conc"])
    assert [e.name for e in exps] == [1, 2]
    assert_allclose(exps[1].Y[:, 0], [3.0, 2.5])
    with pytest.raises(ValueError, match="say which column names the observable"):
        experiments_from_table(long, time="time", experiment="subject", values=["auc"])
