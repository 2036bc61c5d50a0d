"""Many states (#27): the sparse Jacobian, the sparse sensitivities, BCD-prox's sparse
stability check, and the covariance taken with x0 held when the sensitivities in x0 would not
fit in memory."""

import warnings

import numpy as np
import pytest
import torch

import sklode
from sklode import ODEModel
from sklode.outputerror import _sensitivity as sensitivity_module
from sklode.diagnostics import _uncertainty as uncertainty_module
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
    from sklode.models._derived import derived

    colours = derived(model).sparsity[2]
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
    d = 70  # above _SPARSE_FORWARD_MIN_STATES: the sparse stages
    model = Lorenz96(d)
    traj = sensitivity_module.forward_trajectory(
        model, np.array([8.0]), _lorenz96_x0(d), 0.0, np.linspace(0.0, 0.5, 11),
        integrator="RK45", rtol=1e-8, atol=1e-8)
    sparse = sensitivity_module.sensitivities(model, np.array([8.0]), traj, with_x0=with_x0)
    monkeypatch.setattr(sensitivity_module, "_SPARSE_FORWARD_MIN_STATES", 10**9)
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


@pytest.mark.slow  # 4 s on two cores: the slow stage of .ci/run
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


# ------------------------------------------------------------------ WENDy with many states
from sklode.outputerror import _initial_state  # noqa: E402
from sklode.models import _autodiff  # noqa: E402
from sklode.wendy import (  # noqa: E402
    _blockwise,
    _irls,
    _testfunctions,  # noqa: E402
)
from sklode.wendy import _covariance as wendy_covariance  # noqa: E402


class CubicChain(ODEModel):
    """Nonlinear in x with pure second derivatives (cubic, squared neighbour, sine) and affine
    in theta: every term of WENDy's bias correction is exercised."""

    param_names = ("k", "c")

    def __init__(self, n_states=8):
        self.state_names = tuple(f"x{i}" for i in range(int(n_states)))

    def rhs(self, t, x, theta):
        return (-theta[0] * x**3 + theta[1] * torch.roll(x, 1, -1) ** 2 * x
                + torch.sin(torch.roll(x, -1, -1)))


def weak_setup(d=8, n_times=121):
    model = CubicChain(d)
    t = np.linspace(0.0, 3.0, n_times)
    U = np.random.default_rng(3).normal(size=(n_times, d))
    Phi, Phidot, _ = _testfunctions.test_function_matrices(t, 0.4, n_scales=2, max_count=30)
    s2 = np.random.default_rng(4).uniform(0.01, 0.05, d)
    return model, t, U, Phi, Phidot, s2


def test_block_covariances_are_the_dense_covariances_diagonal_blocks():
    model, t, U, Phi, Phidot, s2 = weak_setup()
    theta = np.array([1.0, 0.5])
    dense = wendy_covariance.covariance_blocks(Phi, Phidot, model.jac_x(t, U, theta),
                                               np.sqrt(s2))
    K, d = Phi.shape[0], U.shape[1]
    blocks = _blockwise.block_covariances(Phi, Phidot, *model.jac_x_sparse(t, U, theta), s2)
    expected = dense.reshape(K, d, K, d)[:, np.arange(d), :, np.arange(d)]  # (d, K, K)
    # Same products grouped differently (all states in one matrix product): round-off.
    np.testing.assert_allclose(blocks, expected, rtol=0, atol=1e-12 * np.abs(expected).max())


def test_sandwich_meat_equals_the_dense_covariance_form():
    model, t, U, Phi, Phidot, s2 = weak_setup()
    theta = np.array([1.0, 0.5])
    sigma = np.sqrt(s2)
    C = wendy_covariance.covariance_blocks(Phi, Phidot, model.jac_x(t, U, theta), sigma)
    V = np.random.default_rng(5).normal(size=(Phi.shape[0] * U.shape[1], 3))
    half = _blockwise._transpose_L_times(Phi, Phidot, *model.jac_x_sparse(t, U, theta), sigma,
                                         V.reshape(Phi.shape[0], U.shape[1], 3))
    half = half.reshape(-1, 3)
    # (L^T V)^T (L^T V) = V^T C V: L applied without forming C, to round-off.
    np.testing.assert_allclose(half.T @ half, V.T @ C @ V, rtol=1e-11)


def test_block_score_bias_is_the_general_formula_with_block_weights():
    model, t, U, Phi, Phidot, s2 = weak_setup()
    theta = np.array([1.0, 0.5])
    f0, F1 = model.affine_split(t, U)
    _, _, H = wendy_covariance.noise_corrected_split(model, t, U, f0, F1, s2)
    sparse_J = model.jac_x_sparse(t, U, theta)
    blocks = _blockwise.block_covariances(Phi, Phidot, *sparse_J, s2)
    weights = _blockwise.BlockWhitening(blocks, 1e-10)
    inverse = weights.inverse_blocks()
    K, d = Phi.shape[0], U.shape[1]
    dense_weights = np.zeros((K, d, K, d))
    for i in range(d):
        dense_weights[:, i, :, i] = inverse[i]
    general = wendy_covariance.score_bias(Phi, Phidot, model.jac_x(t, U, theta), H, s2,
                                          dense_weights.reshape(K * d, K * d))
    reduced = _blockwise.block_score_bias(Phi, Phidot, *sparse_J, H, s2, inverse)
    np.testing.assert_allclose(reduced, general, rtol=1e-10)


def test_sparse_noise_corrected_split_and_curvature_equal_the_dense(monkeypatch):
    model, t, U, Phi, Phidot, s2 = weak_setup(d=70, n_times=40)
    f0, F1 = model.affine_split(t, U)
    sparse = wendy_covariance.noise_corrected_split(model, t, U, f0, F1, s2)
    monkeypatch.setattr(wendy_covariance, "SPARSE_MIN_STATES", 10**9)
    monkeypatch.setattr(_autodiff, "_FORWARD_MODE_MIN_STATES", 10**9)
    dense = wendy_covariance.noise_corrected_split(model, t, U, f0, F1, s2)
    # Second derivatives by Hessian-vector products on the colouring against the replicated
    # batch: the same reverse passes, exact to round-off.
    np.testing.assert_allclose(sparse[0], dense[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(sparse[1], dense[1], rtol=1e-12, atol=1e-12)
    order = lambda H: np.lexsort((H.state, H.param, H.equation))  # noqa: E731
    for name in ("equation", "param", "state"):
        np.testing.assert_array_equal(getattr(sparse[2], name)[order(sparse[2])],
                                      getattr(dense[2], name)[order(dense[2])])
    np.testing.assert_allclose(sparse[2].values[:, order(sparse[2])],
                               dense[2].values[:, order(dense[2])], rtol=1e-12)


def test_wendy_with_block_weights_recovers_the_forcing_with_a_sandwich_error(monkeypatch):
    d, T = 20, 201
    model = Lorenz96(d)
    t = np.linspace(0.0, 2.0, T)
    X = sklode.simulate(model, [8.0], _lorenz96_x0(d), t)
    Y = X + 0.1 * np.std(X) * np.random.default_rng(0).standard_normal(X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # chaos: the prediction from x0_ drifts (PoorFit)
        dense = sklode.WENDyODE(model, theta0=[10.4]).fit(t, Y)
        monkeypatch.setattr(_irls, "DENSE_MAX_ROWS", 0)
        block = sklode.WENDyODE(model, theta0=[10.4]).fit(t, Y)
    assert "block-diagonal weights" in block.solver_
    # Over 40 draws of this problem the block-weighted estimate had sd 0.041 against a mean
    # sandwich SE of 0.046 (z spread 0.89, coverage 0.95): 3 SE is a ~0.3 % event.
    assert abs(block.theta_[0] - 8.0) < 3 * block.theta_stderr_[0]
    # Ignoring the states' cross-correlations costs efficiency, never consistency: the
    # sandwich SE is larger than the full GLS's (2.8x on this problem at 401 samples).
    assert dense.theta_stderr_[0] < block.theta_stderr_[0] < 10 * dense.theta_stderr_[0]
    with pytest.raises(ValueError, match="method='likelihood' needs the dense"):
        sklode.WENDyODE(model, theta0=[10.4], method="likelihood").fit(t, Y)


def test_wide_shooting_keeps_the_leading_samples_within_its_budget(monkeypatch):
    d = 12
    model = Lorenz96(d)
    t = np.linspace(0.0, 0.3, 16)
    x0 = _lorenz96_x0(d)
    X = sklode.simulate(model, [8.0], x0, t)
    Y = X + 0.05 * np.random.default_rng(1).standard_normal(X.shape)
    calls = []
    original = _initial_state.solve

    def counting(model, theta, X0, span, **kwargs):
        calls.append(kwargs["t_eval"].size)
        return original(model, theta, X0, span, **kwargs)

    monkeypatch.setattr(_initial_state, "solve", counting)
    monkeypatch.setattr(_initial_state, "_SHOOT_MAX_JACOBIAN", 5 * d * d)  # 5 samples
    fitted = _initial_state.shoot_initial_state(model, np.array([8.0]), t, Y, Y[0] + 0.1)
    assert max(calls) == 4  # samples 1-4 after the initial one: 5 rows of 12 values
    # Five samples of every state at noise 0.05 pin x0 to ~0.05 / sqrt(5) per component
    # (the dynamics move little in 0.08 time units); 0.1 is four such standard errors.
    assert np.max(np.abs(fitted - x0)) < 0.1


def test_wide_shooting_by_sensitivities_agrees_with_the_differences(monkeypatch):
    d = 70  # from _SENSITIVITY_MIN_STATES: the exact Jacobian, one sensitivity pass
    model = Lorenz96(d)
    t = np.linspace(0.0, 0.2, 11)
    x0 = _lorenz96_x0(d)
    Y = sklode.simulate(model, [8.0], x0, t) + 0.05 * np.random.default_rng(2).standard_normal(
        (11, d))
    exact = _initial_state.shoot_initial_state(model, np.array([8.0]), t, Y, Y[0] + 0.1)
    monkeypatch.setattr(_initial_state, "_SENSITIVITY_MIN_STATES", 10**9)
    differences = _initial_state.shoot_initial_state(model, np.array([8.0]), t, Y, Y[0] + 0.1)
    # The same least-squares problem with a Jacobian exact or to ~1e-7: the trust region
    # stops within ~1 % of a noise variance of the same optimum (noise 0.05: 1e-3 allows
    # 2 % of it).
    np.testing.assert_allclose(exact, differences, rtol=0, atol=1e-3)
    # Eleven samples of each state at noise 0.05: RMS error ~0.05 / sqrt(11) = 0.015
    # (measured 0.0155); 0.025 fails an estimate 60 % worse than that.
    assert np.sqrt(np.mean((exact - x0) ** 2)) < 0.025


@pytest.mark.slow  # 3 s on two cores: the slow stage of .ci/run
def test_sparse_sensitivities_through_stiff_steps_equal_the_dense_pass(monkeypatch):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from scale import reaction_diffusion_model

    d = 120  # stiff: D d^2 = 14, eigenvalues to ~-58; BDF's long steps defeat the series
    model = reaction_diffusion_model(d)
    s = (np.arange(d) + 0.5) / d
    theta = np.array([0.001, 2.0])
    traj = sensitivity_module.forward_trajectory(
        model, theta, 0.05 + 0.9 * np.exp(-((s - 0.3) / 0.08) ** 2), 0.0,
        np.linspace(0.0, 3.0, 13), integrator="BDF", rtol=1e-6, atol=1e-8)
    traj = traj.scipy() if traj.native is not None else traj
    calls = []
    from sklode.outputerror import _stages  # where the stage solves live

    original = _stages._neumann_series
    monkeypatch.setattr(_stages, "_neumann_series",
                        lambda r, apply, **kw: calls.append(original(r, apply, **kw))
                        or calls[-1])
    sparse = sensitivity_module.sensitivities(model, theta, traj)
    assert any(c is None for c in calls)  # some steps took the sparse LU
    monkeypatch.setattr(sensitivity_module, "_SPARSE_FORWARD_MIN_STATES", 10**9)
    dense = sensitivity_module.sensitivities(model, theta, traj)
    # Sparse LU against dense solves of the same stage systems: round-off.
    np.testing.assert_allclose(sparse, dense, rtol=0, atol=1e-10 * np.abs(dense).max())


class Unfolding(ODEModel):
    """State i feeds on state i + 1 only between times i and i + 1: every time switches on
    its own Jacobian entry, so widenings from 64 points at a time do not find them all."""

    param_names = ("k",)

    def __init__(self, n_states=300):
        self.state_names = tuple(f"x{i}" for i in range(int(n_states)))

    def rhs(self, t, x, theta):
        index = torch.arange(x.shape[-1], dtype=x.dtype)
        switch = ((t[..., None] > index) & (t[..., None] < index + 1)).to(x.dtype)
        return -theta[0] * x + switch * torch.roll(x, -1, -1) ** 2


def test_a_sparsity_that_keeps_growing_is_refused_not_guessed():
    model = Unfolding(300)
    t = np.arange(300.0) + 0.5
    X = np.random.default_rng(0).uniform(0.5, 2.0, (300, 300))
    with pytest.raises(sklode.exceptions.ModelError, match="keeps growing"):
        model.jac_x_sparse(t, X, [1.0])


def test_neumann_series_stops_early_when_it_cannot_converge_in_its_budget():
    from sklode.outputerror._stages import _neumann_series

    r = np.array([1.0, -2.0, 0.5])
    calls = []

    def contraction(rate):
        def apply(x):
            calls.append(1)
            return rate * x
        return apply

    # rate 0.1: 1e-15 is reached in ~16 sweeps, within 20; the fixed point is r / (1 - rate)
    x = _neumann_series(r, contraction(0.1), max_sweeps=20)
    np.testing.assert_allclose(x, r / 0.9, rtol=1e-14)
    # rate 0.9 would need ~330 sweeps: the rate is known after three, and it stops there
    calls.clear()
    assert _neumann_series(r, contraction(0.9), max_sweeps=20) is None
    assert len(calls) == 3
    # a diverging series stops as soon as its changes grow
    calls.clear()
    assert _neumann_series(r, contraction(1.5), max_sweeps=20) is None
    assert len(calls) == 3
