"""Many states (#27): the sparse Jacobian, the sparse sensitivities, BCD-prox's sparse
stability check, and the covariance taken with x0 held when the sensitivities in x0 would not
fit in memory."""

import warnings

import numpy as np
import pytest
import torch

import sklode
from sklode import ODEModel
from sklode import _sensitivity as sensitivity_module
from sklode import _uncertainty as uncertainty_module
from sklode.bcdprox import _estimator as bcd_estimator
from sklode.bcdprox import _fidelity as fidelity
from sklode.datasets import _lorenz96_x0, make_trajectory
from sklode.models import Lorenz96, LotkaVolterra


class Switched(ODEModel):
    """``c`` feeds ``a`` only while ``b > 5``: a Jacobian entry that is zero wherever the
    states are below 5, as at the random points the sparsity pattern is first probed at."""

    state_names = ("a", "b", "c")
    param_names = ("k",)

    def rhs(self, t, x, theta):
        a, b, c = x[..., 0], x[..., 1], x[..., 2]
        feed = torch.where(b > 5.0, c, torch.zeros_like(c))
        return torch.stack([-theta[0] * a + feed, a - b, -c], dim=-1)


def dense_from_sparse(rows, cols, values, n):
    out = np.zeros(values.shape[:-1] + (n, n))
    out[..., rows, cols] = values
    return out


def test_sparse_jacobian_equals_the_dense_one_with_few_products():
    model = Lorenz96(70)
    X = np.random.default_rng(0).normal(size=(30, 70)) * 3.0
    rows, cols, values = model.jac_x_sparse(0.0, X, [8.0])
    assert rows.size == 4 * 70  # x_{i-2}, x_{i-1}, x_i, x_{i+1} in equation i
    # The same reverse-mode arithmetic on both sides: only exact zeros are added, so equal
    # to the last bit.
    np.testing.assert_array_equal(dense_from_sparse(rows, cols, values, 70),
                                  model.jac_x(0.0, X, [8.0]))
    colours = model.__dict__["_sparsity_cache"][2]
    assert colours.max() + 1 <= 7  # a handful of products whatever the dimension


def test_an_entry_missed_where_the_pattern_was_probed_is_found_and_added():
    model = Switched()
    X = np.abs(np.random.default_rng(1).normal(size=(20, 3))) * 3.0
    X[:, 1] = np.minimum(X[:, 1], 4.0)
    rows, cols, _ = model.jac_x_sparse(0.0, X, [1.0])
    assert (0, 2) not in set(zip(rows, cols))  # switched off everywhere probed
    X[10:, 1] = 7.0  # now on at half the points
    rows, cols, values = model.jac_x_sparse(0.0, X, [1.0])
    assert (0, 2) in set(zip(rows, cols))
    np.testing.assert_array_equal(dense_from_sparse(rows, cols, values, 3),
                                  model.jac_x(0.0, X, [1.0]))


def test_residual_jacobian_equals_the_dense_blocks():
    model = Lorenz96(30)
    X = np.random.default_rng(0).normal(size=(40, 30)) * 3.0
    grid = fidelity.Grid.build(np.linspace(0.0, 0.39, 40), 3)
    J = fidelity.residual_jacobian(model, grid, X, np.array([8.0]))
    K = fidelity.jacobian_blocks(model, grid, X, np.array([8.0]))
    n_steps, n_blocks, d, _ = K.shape
    dense = np.zeros((n_steps * d, 40 * d))
    for i in range(n_steps):
        for k in range(n_blocks):
            if i + 1 - k >= 0:
                dense[i * d:(i + 1) * d, (i + 1 - k) * d:(i + 2 - k) * d] += K[i, k]
    # Same entries summed in the same order (the -I block and the diagonal of df/dx).
    np.testing.assert_allclose(J.toarray(), dense, rtol=0, atol=1e-15)


@pytest.mark.parametrize("with_x0", [True, False])
def test_sparse_sensitivities_equal_the_dense_pass(with_x0, monkeypatch):
    d = 130  # above _MATRIX_FREE_MIN_STATES: the sparse stages
    model = Lorenz96(d)
    traj = sensitivity_module.forward_trajectory(
        model, np.array([8.0]), _lorenz96_x0(d), 0.0, np.linspace(0.0, 0.5, 11),
        integrator="RK45", rtol=1e-8, atol=1e-8)
    sparse = sensitivity_module.sensitivities(model, np.array([8.0]), traj, with_x0=with_x0)
    monkeypatch.setattr(sensitivity_module, "_MATRIX_FREE_MIN_STATES", 10**9)
    dense = sensitivity_module.sensitivities(model, np.array([8.0]), traj, with_x0=with_x0)
    # The same Neumann sweeps to round-off, with sparse instead of dense products.
    np.testing.assert_allclose(sparse, dense, rtol=0, atol=1e-12 * np.abs(dense).max())


def test_sparse_stability_check_agrees_with_the_eigenvalues():
    model = Lorenz96(70)
    X = np.random.default_rng(2).normal(size=(25, 70)) * 4.0
    steps = np.geomspace(1e-3, 0.5, 25)  # from far below to far above 1 / rate
    t = np.concatenate([[0.0], np.cumsum(steps[:-1])])
    rates, coupled = bcd_estimator.fastest_rates(model, t, X, np.array([8.0]), steps)
    exact = np.max(np.abs(np.linalg.eigvals(model.jac_x(t, X, [8.0]))), axis=1)
    over = exact * steps > bcd_estimator._MAX_STEP_RATE
    assert over.any() and (~over).any()  # the grid straddles the threshold
    # Exact wherever the threshold is exceeded; an upper bound (Gershgorin) elsewhere.
    np.testing.assert_allclose(rates[over], exact[over], rtol=1e-12)
    assert np.all(rates >= exact * (1 - 1e-12))
    np.testing.assert_array_equal(coupled, np.any(model.jac_x(t, X, [8.0]) != 0, axis=0))


def test_covariance_with_x0_held_when_x0_sensitivities_would_not_fit(monkeypatch):
    data = make_trajectory("lotka_volterra", noise=0.1, noise_kind="relative_rms",
                           random_state=0)
    full = sklode.BCDProxODE(LotkaVolterra(), theta0=[2.0, 1.0, 4.0, 1.0]).fit(data.t,
                                                                                 data.Y)
    monkeypatch.setattr(uncertainty_module, "SENSITIVITY_MAX_ENTRIES", 100)
    with pytest.warns(UserWarning, match="x0_ held at the fit"):
        held = sklode.BCDProxODE(LotkaVolterra(), theta0=[2.0, 1.0, 4.0, 1.0]).fit(
            data.t, data.Y)
    np.testing.assert_array_equal(held.theta_, full.theta_)
    assert np.all(np.isnan(held.x0_stderr_))
    # A conditional Gauss-Newton variance is at most the marginal one (Schur complement);
    # strictly smaller here, where x0 and theta are correlated.
    assert np.all(held.theta_stderr_ <= full.theta_stderr_ * (1 + 1e-9))
    assert np.any(held.theta_stderr_ < 0.99 * full.theta_stderr_)
    assert np.all(np.isfinite(held.theta_stderr_))


def test_bcdprox_recovers_lorenz96_forcing_with_many_states():
    d = 80  # the sparse paths throughout: Jacobian, CG, stability check, sensitivities
    model = Lorenz96(d)
    t = np.linspace(0.0, 2.0, 201)
    X = sklode.simulate(model, [8.0], _lorenz96_x0(d), t)
    rng = np.random.default_rng(0)
    Y = X + 0.05 * np.std(X) * rng.standard_normal(X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chaos: the prediction from x0_ drifts (PoorFit)
        est = sklode.BCDProxODE(model, theta0=[10.4]).fit(t, Y)
    # 5 % noise on 16,000 values pins a shared forcing to ~1e-3 (the d = 40 problem of
    # seed 000 at 5 % reaches 4e-4); 1 % allows for the multistep discretisation.
    assert abs(est.theta_[0] - 8.0) < 0.08
    assert np.isfinite(est.theta_stderr_[0])
