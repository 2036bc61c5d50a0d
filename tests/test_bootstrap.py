"""The parametric bootstrap (sklode/diagnostics/_bootstrap.py) and ``n_boot`` of BCDProxODE and
WENDyODE:
the replicates' noise, their covariance and bias against known answers, reproducibility, and
what happens when the replicates cannot be refitted."""

import warnings
from dataclasses import replace

import numpy as np
import pytest
from numpy.testing import assert_allclose, assert_array_equal

from sklode import BCDProxODE, WENDyODE
from sklode.datasets import get_problem, make_trajectory
from sklode.diagnostics._bootstrap import bootstrap_replicates, replicate_noise
from sklode.exceptions import ConvergenceWarning, IntegrationError, PoorFitWarning
from sklode.models import LotkaVolterra
from _expected import warns_by_design

OPTIONS = {"integrator": "LSODA", "rtol": 1e-8, "atol": 1e-10}


def _validated(t, Y):
    return BCDProxODE(LotkaVolterra())._validate_data(t, Y)


def test_replicates_have_the_given_mean_spread_and_missing_entries():
    """A refit that returns the data's mean plus 0.5 has bias 0.5 and variance sd^2 / n:
    the bootstrap must find both, and keep the training data's missing entries."""
    t = np.linspace(0.0, 1.0, 50)
    Y = np.ones((50, 2))
    Y[[3, 17], 1] = np.nan
    data = _validated(t, Y)
    means, sd = [np.full((50, 2), 2.0)], np.array([0.3, 0.6])
    seen_missing = []

    def refit(replicate):
        Yr = replicate.experiments[0].Y
        seen_missing.append(np.isnan(Yr))
        return np.nanmean(Yr, axis=0) + 0.5, np.zeros((1, 2))

    boot = bootstrap_replicates(refit, data, means, sd, n_boot=2000, noise_kind="absolute",
                                random_state=0)
    assert boot.n_failed == 0
    assert all(np.array_equal(m, np.isnan(Y)) for m in seen_missing)
    # bias: 2.0 + 0.5 - 2.0; the mean of 2,000 replicates errs by sd / sqrt(n * 2000), at
    # most 0.003, so 0.01 is over three of those
    assert_allclose(boot.theta.mean(axis=0) - 2.0, [0.5, 0.5], atol=0.01)
    # variance sd^2 / n with n = 50 and 48 entries; the sample variance of 2,000 replicates
    # has a relative error of sqrt(2 / 2000) = 3 %: 10 % is over three of those
    assert_allclose(np.diag(boot.covariance()), sd**2 / np.array([50, 48]), rtol=0.1)


def test_a_refit_that_fails_is_counted_and_left_out():
    t = np.linspace(0.0, 1.0, 20)
    data = _validated(t, np.ones((20, 2)))
    calls = []

    def refit(replicate):
        calls.append(1)
        if len(calls) % 2:
            raise IntegrationError("the replicate's ODE blew up")
        return np.array([1.0]), np.zeros((1, 2))

    boot = bootstrap_replicates(refit, data, [np.ones((20, 2))], np.ones(2), n_boot=10,
                                noise_kind="absolute", random_state=0)
    assert boot.n_failed == 5 and boot.theta.shape == (5, 1)


def test_replicate_noise_is_the_level_the_data_show():
    """Lotka-Volterra with absolute noise 0.1 on both states (41 samples each): the noise the
    replicates get is the noise in the data, from the fit's residuals or the difference
    filter, whichever is smaller."""
    data = make_trajectory("lotka_volterra", noise=0.1, noise_kind="absolute", random_state=3)
    p = get_problem("lotka_volterra")
    given = _validated(data.t, data.Y)
    x0s = data.X[:1]
    means, sd = replicate_noise(p.model, p.theta, given, x0s, sigma=None,
                                noise_kind="absolute", n_unknowns=6, options=OPTIONS)
    assert_allclose(means[0], data.X, rtol=1e-6, atol=1e-6)  # the true model simulated
    # 41 samples per state: a standard deviation estimated from them errs by about
    # 1 / sqrt(2 * 41) = 11 %; 30 % is under three of those
    assert_allclose(sd, [0.1, 0.1], rtol=0.3)
    _, given_sd = replicate_noise(p.model, p.theta, given, x0s, sigma=0.2,
                                  noise_kind="absolute", n_unknowns=6, options=OPTIONS)
    assert_array_equal(given_sd, [0.2, 0.2])


@pytest.fixture(scope="module")
def lotka_volterra():
    return make_trajectory("lotka_volterra", noise=0.05, random_state=0)


@pytest.mark.slow  # 8 s on two cores: the slow stage of .ci/run
def test_bcdprox_bootstrap_is_reproducible_and_replaces_the_covariance(lotka_volterra):
    d = lotka_volterra
    kwargs = {"theta0": (2, 2, 5, 2)}
    plain = BCDProxODE(LotkaVolterra(), **kwargs).fit(d.t, d.Y)
    assert plain.theta_bias_ is None
    assert_allclose(plain.confidence_intervals().mean(axis=1), plain.theta_, rtol=1e-12)
    boots = [BCDProxODE(LotkaVolterra(), n_boot=30, random_state=seed, **kwargs).fit(d.t, d.Y)
             for seed in (1, 1, 2)]
    assert_array_equal(boots[0].theta_cov_, boots[1].theta_cov_)
    assert not np.array_equal(boots[0].theta_cov_, boots[2].theta_cov_)
    boot = boots[0]
    assert_array_equal(boot.theta_, plain.theta_)  # the estimate is the method's own
    # Lotka-Volterra at 5 % on 41 samples is where BCD-prox is near the output-error optimum
    # (mean z within 0.3 over 40 draws), so its spread and the Gauss-Newton one agree up to
    # the 30 replicates' sampling error (13 % on a standard error) and the noise estimate's:
    # a factor 1.5 either way is beyond both
    ratio = boot.theta_stderr_ / plain.theta_stderr_
    assert np.all((ratio > 1 / 1.5) & (ratio < 1.5)), ratio
    assert np.all(boot.x0_stderr_ > 0)
    centre = boot.confidence_intervals().mean(axis=1)
    assert_allclose(centre, boot.theta_ - boot.theta_bias_, rtol=1e-12)


@warns_by_design('PoorFitWarning', why="few samples on purpose")
def test_the_bootstrap_gives_smoothed_initial_values_an_error(lotka_volterra):
    """WENDy's x0_method="smoothing" has no first-order error for x0 (NaN); the replicates
    measure one."""
    d = lotka_volterra
    plain = WENDyODE(LotkaVolterra(), x0_method="smoothing").fit(d.t, d.Y)
    boot = WENDyODE(LotkaVolterra(), x0_method="smoothing", n_boot=10,
                    random_state=0).fit(d.t, d.Y)
    assert np.all(np.isnan(plain.x0_stderr_))
    assert np.all(np.isfinite(boot.x0_stderr_) & (boot.x0_stderr_ > 0))


@pytest.mark.slow  # 7 s on two cores: the slow stage of .ci/run
def test_the_bootstrap_does_not_depend_on_n_jobs(lotka_volterra):
    d = lotka_volterra
    fits = [WENDyODE(LotkaVolterra(), n_boot=6, random_state=4, n_jobs=n_jobs).fit(d.t, d.Y)
            for n_jobs in (1, 2)]
    assert_array_equal(fits[0].theta_cov_, fits[1].theta_cov_)
    assert_array_equal(fits[0].theta_bias_, fits[1].theta_bias_)


@pytest.mark.slow  # 4 s on two cores: the slow stage of .ci/run
def test_wendy_bootstrap_agrees_with_its_own_covariance(lotka_volterra):
    d = lotka_volterra
    own = WENDyODE(LotkaVolterra()).fit(d.t, d.Y)
    boot = WENDyODE(LotkaVolterra(), n_boot=60, random_state=0).fit(d.t, d.Y)
    assert_array_equal(boot.theta_, own.theta_)
    # WENDy's covariance is its estimator's asymptotic one, so 60 replicates should land on
    # it up to their sampling error (9 % on a standard error) and the asymptotics' (41
    # samples): 1.4 either way
    ratio = boot.theta_stderr_ / own.theta_stderr_
    assert np.all((ratio > 1 / 1.4) & (ratio < 1.4)), ratio


def test_too_few_refits_keep_the_gauss_newton_covariance(lotka_volterra, monkeypatch):
    d = lotka_volterra
    plain = BCDProxODE(LotkaVolterra(), theta0=(2, 2, 5, 2)).fit(d.t, d.Y)
    solve = BCDProxODE._solve

    def failing(self, given, *, start=None, verbose=0):
        if start is not None:  # only the replicates' refits start at theta_
            raise IntegrationError("the replicate's ODE blew up")
        return solve(self, given, start=start, verbose=verbose)

    monkeypatch.setattr(BCDProxODE, "_solve", failing)
    est = BCDProxODE(LotkaVolterra(), theta0=(2, 2, 5, 2), n_boot=8, random_state=0)
    with pytest.warns(ConvergenceWarning, match="only 0 of 8 bootstrap replicates"):
        est.fit(d.t, d.Y)
    assert_array_equal(est.theta_cov_, plain.theta_cov_)
    assert est.theta_bias_ is None


def test_a_method_bias_is_measured_and_taken_out():
    """BCD-prox on 21 samples of Lotka-Volterra over [0, 4] (a sample per 0.2 time units,
    where its third-order Adams-Bashforth residual misstates the ODE) is biased: c and d
    7 standard errors low at 2 % noise. The bootstrap sees the bias on data simulated from
    the fit (4.2-4.6 standard errors), warns, and the interval's centre
    theta_ - theta_bias_ lies closer to the truth than theta_ in the parameter it names."""
    p = get_problem("lotka_volterra")
    sparse = replace(p, t=np.linspace(0.0, 4.0, 21))
    d = make_trajectory(sparse, noise=0.02, noise_kind="relative_rms", random_state=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = BCDProxODE(p.model, theta0=1.3 * p.theta, n_boot=30, random_state=0).fit(d.t,
                                                                                       d.Y)
    biased = [w for w in caught if issubclass(w.category, PoorFitWarning)
              and "biased at this fit" in str(w.message)]
    assert biased, [str(w.message) for w in caught]
    shift = np.abs(est.theta_bias_) / est.theta_stderr_
    worst = int(np.argmax(shift))
    assert shift[worst] > 1.5
    corrected = est.theta_ - est.theta_bias_
    assert abs(corrected[worst] - p.theta[worst]) < abs(est.theta_[worst] - p.theta[worst])
