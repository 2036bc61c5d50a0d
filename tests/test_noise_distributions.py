"""The noise distributions (sklode.observation._noise): each is a proper density, its profiled
scale is the maximum-likelihood one, and what the rows leave out is what -log L has beyond
them."""

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import minimize_scalar

from sklode.observation._noise import NOISE_DISTRIBUTIONS

DISTRIBUTIONS = sorted(NOISE_DISTRIBUTIONS)


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_each_density_integrates_to_one(name):
    # exp(-(-log L)) over every y is 1 when every constant (and the log's Jacobian) is in:
    # quad's error estimate is far below the 1e-7 asked
    dist = NOISE_DISTRIBUTIONS[name]
    h, s = 2.0, 0.3

    def density(y):
        return float(np.exp(-dist.neg_log_likelihood(np.array([y]), np.array([h]),
                                                     np.array([s]))[0]))

    lower = 0.0 if dist.on_log_scale else -np.inf
    total = sum(quad(density, a, b, limit=200)[0]
                for a, b in [(lower, h), (h, np.inf)])  # split at the mode's neighbourhood
    assert total == pytest.approx(1.0, abs=1e-7)


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_the_profiled_scale_minimises_the_summed_neg_log_likelihood(name):
    # the closed form against a bounded scalar minimisation of sum -log L(c * shapes) over c;
    # 1e-5 relative: the minimiser's xatol on a flat optimum
    dist = NOISE_DISTRIBUTIONS[name]
    rng = np.random.default_rng(0)
    h = rng.uniform(1.0, 3.0, 50)
    shapes = rng.uniform(0.5, 2.0, 50)
    y = h * np.exp(0.2 * shapes * rng.standard_normal(50)) if dist.on_log_scale else (
        h + 0.2 * shapes * rng.standard_normal(50))
    closed = dist.profiled_scale(dist.errors(y, h), shapes)
    found = minimize_scalar(lambda c: np.sum(dist.neg_log_likelihood(y, h, c * shapes)),
                            bounds=(1e-3, 10.0), method="bounded",
                            options={"xatol": 1e-10}).x
    assert closed == pytest.approx(found, rel=1e-5)


@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_rows_and_the_left_out_constant_give_neg_log_likelihood(name):
    # -log L = 1/2 row^2 + log s + (the constant without_constant takes away), the split
    # AdjointODE's least squares relies on; equal to rounding (1e-12)
    dist = NOISE_DISTRIBUTIONS[name]
    y, h, s = np.array([1.3, 0.7, 2.2]), np.array([1.0, 1.0, 2.0]), np.array([0.2, 0.5, 0.1])
    e = dist.errors(y, h)
    half_square = np.abs(e) / s if dist.rows == "absolute" else 0.5 * (e / s) ** 2
    rebuilt = half_square + np.log(s) - dist.without_constant(np.zeros(3), y)
    np.testing.assert_allclose(rebuilt, dist.neg_log_likelihood(y, h, s), rtol=1e-12)
