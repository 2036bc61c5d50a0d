"""Adams-Bashforth coefficients: textbook values, theoretical order on any grid, recursion."""

import numpy as np
import pytest
from numpy.testing import assert_allclose

from sklode.bcdprox.multistep import (
    ab_integrate,
    ab_residual,
    adams_bashforth_coefficients,
)

TEXTBOOK = {
    1: [1.0],
    2: [3 / 2, -1 / 2],
    3: [23 / 12, -16 / 12, 5 / 12],
    4: [55 / 24, -59 / 24, 37 / 24, -9 / 24],
    5: [1901 / 720, -2774 / 720, 2616 / 720, -1274 / 720, 251 / 720],
}


@pytest.mark.parametrize("order", sorted(TEXTBOOK))
def test_uniform_grid_gives_textbook_coefficients_with_the_ramp(order):
    B = adams_bashforth_coefficients(np.arange(10) * 0.1, order)
    assert_allclose(B[-1], TEXTBOOK[order], rtol=1e-12)
    for i in range(order):  # order ramp: step i uses min(i + 1, order) points
        k = min(i + 1, order)
        assert_allclose(B[i, :k], TEXTBOOK[k], rtol=1e-12)
        assert np.all(B[i, k:] == 0)


def _local_errors(t, order):
    """Residual of the exact solution of x' = cos(t) x (x = exp(sin t)) on grid t."""
    X = np.exp(np.sin(t))[:, None]
    F = np.cos(t)[:, None] * X
    R = ab_residual(X, F, t, adams_bashforth_coefficients(t, order))
    return np.max(np.abs(R[order - 1:]))  # full-order steps only


@pytest.mark.parametrize("uniform", [True, False], ids=["uniform", "nonuniform"])
@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_local_truncation_error_has_theoretical_order(order, uniform):
    rng = np.random.default_rng(0)
    base = np.linspace(0.0, 2.0, 21)
    if not uniform:  # jitter interior nodes by up to 30 % of a step: ratios stay bounded
        base[1:-1] += rng.uniform(-0.3, 0.3, 19) * 0.1
    errs, hs = [], []
    for refine in [4, 8, 16, 32]:
        # Subdivide every base interval evenly: the step-ratio pattern is preserved.
        t = np.interp(np.linspace(0, 20, 20 * refine + 1), np.arange(21), base)
        errs.append(_local_errors(t, order))
        hs.append(np.max(np.diff(t)))
    slope = np.polyfit(np.log(hs), np.log(errs), 1)[0]
    # Local error of an order-m AB step is O(h^(m+1)); the fitted slope lands within 0.3.
    assert abs(slope - (order + 1)) < 0.3


def test_recursion_has_zero_residual_and_converges():
    t = np.linspace(0, 1, 81)
    f = lambda s, x: -x  # noqa: E731
    X = ab_integrate(f, [1.0], t, 3)
    R = ab_residual(X, -X, t, adams_bashforth_coefficients(t, 3))
    assert np.max(np.abs(R)) < 1e-15  # exact by construction, up to rounding
    # The Euler first step of the ramp limits the global order to 2: halving h divides the
    # error by about 4 (3.5-4.5 allows for the higher-order terms still present).
    X_fine = ab_integrate(f, [1.0], np.linspace(0, 1, 161), 3)
    ratio = abs(X[-1, 0] - np.exp(-1)) / abs(X_fine[-1, 0] - np.exp(-1))
    assert 3.5 < ratio < 4.5


def test_bad_grids_are_rejected():
    with pytest.raises(ValueError, match="strictly increasing"):
        adams_bashforth_coefficients([0.0, 0.2, 0.1], 2)
    with pytest.raises(ValueError, match="order must be at least 1"):
        adams_bashforth_coefficients([0.0, 0.1], 0)
