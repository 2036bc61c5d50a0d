"""The papers' problems: clean trajectories against independent numpy solves; noise conventions."""

import numpy as np
import pytest
from baselines import NUMPY_RHS
from numpy.testing import assert_allclose
from scipy.integrate import solve_ivp

from sklode.datasets import get_problem, list_problems, make_trajectory


def test_every_problem_is_listed_and_has_a_reference_solver():
    assert sorted(NUMPY_RHS) == sorted(list_problems())


@pytest.mark.parametrize("name", sorted(NUMPY_RHS))
def test_clean_trajectory_matches_an_independent_solve(name):
    p = get_problem(name)
    ref = solve_ivp(NUMPY_RHS[name], (p.t0, p.t[-1]), p.x0, method="Radau", t_eval=p.t,
                    args=tuple(p.theta), rtol=1e-12, atol=1e-12 * max(1, np.abs(p.x0).max()))
    X = p.clean_states()
    # Two independent solvers at ~1e-11..1e-12 tolerances; Lorenz-96 and Rossler are chaotic
    # and amplify those differences over the window, hence 1e-6 relative to the state scale.
    assert_allclose(X, ref.y.T, atol=1e-6 * np.abs(ref.y).max())


def test_problem_definitions_follow_the_papers():
    lv_p = get_problem("lotka_volterra")
    assert lv_p.t.size == 41 and lv_p.t[1] - lv_p.t[0] == pytest.approx(0.1)
    assert_allclose(lv_p.theta_init, [2, 2, 5, 2])
    s = get_problem("seird")
    assert s.t0 == 40.0 and s.observed == (2, 3, 4) and s.noise_kind == "proportional"
    assert_allclose(s.t, np.arange(41, 54))
    l96 = get_problem("lorenz96")
    assert l96.model.n_states == 40 and l96.t.size == 201
    assert get_problem("wendy_hindmarsh_rose").t[1] == pytest.approx(0.009768, abs=1e-6)
    with pytest.raises(ValueError, match="Unknown problem 'lorenz63'. Known problems"):
        get_problem("lorenz63")


def test_get_problem_returns_independent_copies():
    p = get_problem("rossler")
    p.theta[0] = 99.0
    assert get_problem("rossler").theta[0] == 0.2


@pytest.mark.parametrize("distribution", ["gaussian", "laplace"])
def test_absolute_noise_has_the_stated_standard_deviation(distribution):
    d = make_trajectory("fitzhugh_nagumo", noise=0.5, distribution=distribution,
                        random_state=3)
    resid = d.Y - d.X_observed
    # 802 draws: the sample std is within ~3 standard errors (0.5/sqrt(2*802)*3 ~ 0.04,
    # larger for Laplace's heavier tails) of 0.5.
    assert resid.std() == pytest.approx(0.5, abs=0.06)
    assert_allclose(d.noise_std, 0.5)


def test_laplace_noise_is_laplace_shaped():
    d = make_trajectory("wendy_lotka_volterra", noise=0.1, distribution="laplace",
                        random_state=0)
    z = ((d.Y - d.X_observed) / d.noise_std).ravel()
    # Laplace kurtosis is 6 (Gaussian 3); with 2048 draws the estimate is within +-1.5.
    kurt = np.mean(z**4) / np.mean(z**2) ** 2
    assert 4.5 < kurt < 7.5


def test_relative_rms_and_proportional_conventions():
    d = make_trajectory("wendy_logistic", noise=0.2, random_state=0)
    rms = np.sqrt(np.mean(d.X_observed**2))
    assert_allclose(d.noise_std, 0.2 * rms)
    s = make_trajectory("seird", noise=0.05, random_state=0)
    assert_allclose(s.noise_std, 0.05 * np.abs(s.X_observed))


def test_seeded_noise_is_reproducible_and_zero_noise_is_clean():
    a = make_trajectory("rossler", random_state=7)
    b = make_trajectory("rossler", random_state=7)
    assert_allclose(a.Y, b.Y, rtol=0)
    clean = make_trajectory("rossler", noise=0.0, random_state=7)
    assert_allclose(clean.Y, clean.X, rtol=0)


def test_bad_noise_arguments():
    with pytest.raises(ValueError, match="noise_kind must be one of"):
        make_trajectory("rossler", noise_kind="variance")
    with pytest.raises(ValueError, match="distribution must be"):
        make_trajectory("rossler", distribution="cauchy")
    with pytest.raises(ValueError, match="finite standard deviation"):
        make_trajectory("rossler", noise=-1)


def test_lognormal_noise_is_multiplicative_with_the_given_log_sd():
    d = make_trajectory("wendy_logistic", noise=0.1, noise_kind="lognormal", random_state=0)
    clean = d.X[:, list(d.problem.observed)]
    assert np.all(d.Y > 0)
    ratio = np.log(d.Y / clean)
    # 0.1 on the log scale over the grid's samples: the sample sd within 15 % of it.
    assert abs(np.std(ratio) - 0.1) < 0.015 and abs(np.mean(ratio)) < 0.02


def test_the_real_data_sets_load_as_shipped():
    from sklode.datasets import load_boarding_school_flu, load_hare_lynx

    hl = load_hare_lynx(as_frame=True)
    assert hl.t.shape == (21,) and hl.Y.shape == (21, 2) and hl.columns == ["hare", "lynx"]
    assert hl.t[0] == 1900 and hl.t[-1] == 1920 and np.all(np.diff(hl.t) == 1)
    assert hl.Y[:, 0].max() == 77.4 and hl.Y[:, 1].max() == 59.4  # hare 1903, lynx 1904
    assert "Hudson's Bay Company" in hl.source and list(hl.frame.columns) == ["year", "hare",
                                                                               "lynx"]
    t, Y = load_boarding_school_flu(return_X_y=True)
    assert t.tolist() == list(range(1, 15)) and Y.shape == (14, 2)
    assert Y[:, 0].sum() == 1559 and Y[:, 1].sum() == 937  # the tabulated daily counts
    assert "British Medical Journal" in load_boarding_school_flu().source


def test_real_data_fit_to_the_figures_others_report(school_flu_model):
    from sklode import AdjointODE, WENDyODE
    from sklode.datasets import load_boarding_school_flu, load_hare_lynx
    from sklode.models import LotkaVolterra

    hl = load_hare_lynx()
    for est in (WENDyODE(LotkaVolterra(), positive=True),
                AdjointODE(LotkaVolterra(), positive=True, init="bcdprox")):
        est.fit(hl.t - 1900, hl.Y)
        # Lotka-Volterra describes the 1900-1920 cycle to R^2 0.956 (WENDy) / 0.960 (adjoint):
        # the usual description of these data, a ten-year period
        assert est.score(hl.t - 1900, hl.Y) > 0.93
        period = 2 * np.pi / np.sqrt(est.theta_[0] * est.theta_[2])
        assert 8 < period < 12

    t, Y = load_boarding_school_flu(return_X_y=True)
    flu = AdjointODE(school_flu_model, observed=["I", "C"], x0=(762, 1, 0), estimate_x0=False,
                     t0=0.0, positive=True).fit(t, Y)
    # Keeling & Rohani fit 1.66 per day and 2.2 days in bed to the in-bed counts alone; with
    # the convalescent counts too: beta 1.60 +- 0.04, 1/gamma 2.28 days (measured)
    assert 1.5 < flu.theta_[0] < 1.75 and 2.0 < 1 / flu.theta_[1] < 2.5


def test_a_problem_the_explicit_solver_fails_on_is_simulated_by_radau(monkeypatch):
    # A 1,000-cell diffusion grid blows up under DOP853 (the reference solver of the zoo's
    # data) within 0.03 time units; make_trajectory then simulates it with Radau. Here
    # DOP853 is made to fail so the test stays small.
    import sklode.datasets as datasets
    from sklode import simulate
    from sklode.exceptions import IntegrationError

    def explicit_fails(*args, integrator, **kwargs):
        if integrator == "DOP853":
            raise IntegrationError("blew up")
        return simulate(*args, integrator=integrator, **kwargs)

    monkeypatch.setattr(datasets, "simulate", explicit_fails)
    p = get_problem("lotka_volterra")
    d = make_trajectory(p, noise=0.0)
    reference = simulate(p.model, p.theta, p.x0, p.t, t0=p.t0, integrator="Radau",
                         rtol=1e-11, atol=1e-11 * max(1.0, float(np.max(np.abs(p.x0)))))
    # the same Radau solve, so the same numbers (no noise was added)
    np.testing.assert_array_equal(d.X, reference)
