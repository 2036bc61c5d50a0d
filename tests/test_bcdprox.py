"""BCDProxODE: the numerics against finite differences and dense algebra, recovery on
noise-free and noisy data against the reference implementation's measured figures, the λ
behaviour the paper reports, non-uniform grids, Laplace noise, and error handling."""

import dataclasses
import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.utils._param_validation import InvalidParameterError

from sklode import BCDProxODE, ConvergenceWarning
from sklode.bcdprox import _fidelity as fid
from sklode.bcdprox.multistep import ab_residual, adams_bashforth_coefficients
from sklode.datasets import get_problem, make_trajectory
from sklode.integrate import simulate
from sklode.metrics import estimation_error, parameter_error, prediction_error
from sklode.models import FitzHughNagumo, Lorenz96, LotkaVolterra
from _expected import warns_by_design

# Reference implementation (anchors/bcdprox.md), AB3, lambda = 1, noise std 0.5, seeds 0-2:
# median per-component |theta_hat - theta| and median prediction error ||X - X_hat||_F.
REFERENCE = {
    "lotka_volterra": ([0.288, 0.129, 0.690, 0.156], 1.505),
    "fitzhugh_nagumo": ([0.036, 0.082, 0.043], 2.034),
    "rossler": ([0.0027, 0.0228, 0.084], 1.606),
}


# --------------------------------------------------------------------------- numerics
@pytest.fixture(scope="module")
def rossler_noisy():
    return make_trajectory("rossler", random_state=0)


@pytest.mark.parametrize("order", [1, 3, 4])
def test_residual_jacobian_matches_finite_differences(order, rossler_noisy):
    d, p = rossler_noisy, rossler_noisy.problem
    grid = fid.Grid.build(d.t, order)
    K = fid.jacobian_blocks(p.model, grid, d.Y, p.theta)
    J = fid.residual_jacobian(p.model, grid, d.Y, p.theta)
    v = np.random.default_rng(0).standard_normal(d.Y.shape)
    h = 1e-6
    fd = (fid.residual(p.model, grid, d.Y + h * v, p.theta)
          - fid.residual(p.model, grid, d.Y - h * v, p.theta)) / (2 * h)
    # Central differences: O(h^2) truncation, ~1e-10 rounding relative to |R| ~ 1.
    assert_allclose(J @ v.ravel(), fd.ravel(), atol=1e-7)
    R = fid.residual(p.model, grid, d.Y, p.theta)
    assert_allclose(fid.jacobian_transpose_times(K, R, d.t.size).ravel(), J.T @ R.ravel(),
                    atol=1e-12)  # two exact computations of the same product


def test_banded_and_sparse_solves_equal_dense_algebra(rossler_noisy, monkeypatch):
    d, p = rossler_noisy, rossler_noisy.problem
    grid = fid.Grid.build(d.t, 3)
    R = fid.residual(p.model, grid, d.Y, p.theta)
    anchor = d.Y + 0.1
    J = fid.residual_jacobian(p.model, grid, d.Y, p.theta).toarray()
    rhs = np.random.default_rng(1).standard_normal(d.Y.shape)
    dense = np.linalg.solve(J.T @ J + 0.7 * np.eye(J.shape[1]), rhs.ravel())
    grad_dense = J.T @ R.ravel() + 0.5 * (d.Y - anchor).ravel()
    g_banded, _, solve_banded = fid._normal_equations(p.model, grid, d.Y, p.theta, R, anchor,
                                                      0.5)
    monkeypatch.setattr(fid, "_BANDED_MAX_WIDTH", 0)  # force the sparse route (CG)
    g_sparse, _, solve_cg = fid._normal_equations(p.model, grid, d.Y, p.theta, R, anchor, 0.5)
    # Banded Cholesky is exact to rounding; CG stops at a 1e-9 relative residual.
    assert_allclose(solve_banded(0.7, rhs).ravel(), dense, rtol=1e-10, atol=1e-12)
    assert_allclose(solve_cg(0.7, rhs).ravel(), dense, rtol=1e-7, atol=1e-8)
    assert_allclose(g_banded.ravel(), grad_dense, atol=1e-12)
    assert_allclose(g_sparse.ravel(), grad_dense, atol=1e-12)


@pytest.mark.parametrize("route", ["banded", "sparse"])
def test_fixed_entries_are_eliminated_from_the_x_step_solve(rossler_noisy, monkeypatch, route):
    # A known initial state: entries 0 and 2 of X (x0's first and third components) are held.
    # The solve must equal the dense system with those unknowns removed, and leave them at 0.
    d, p = rossler_noisy, rossler_noisy.problem
    grid = fid.Grid.build(d.t, 3)
    R = fid.residual(p.model, grid, d.Y, p.theta)
    J = fid.residual_jacobian(p.model, grid, d.Y, p.theta).toarray()
    rhs = np.random.default_rng(2).standard_normal(d.Y.shape)
    fixed = np.array([0, 2])
    free = np.setdiff1d(np.arange(J.shape[1]), fixed)
    A = (J.T @ J + 0.7 * np.eye(J.shape[1]))[np.ix_(free, free)]
    expected = np.zeros(J.shape[1])
    expected[free] = np.linalg.solve(A, rhs.ravel()[free])
    if route == "sparse":
        monkeypatch.setattr(fid, "_BANDED_MAX_WIDTH", 0)
    gradient, _, solve = fid._normal_equations(p.model, grid, d.Y, p.theta, R, d.Y + 0.1, 0.5,
                                               fixed)
    rhs_free = rhs.copy()
    rhs_free.reshape(-1)[fixed] = 0.0  # the caller's right-hand side is the gradient, zero there
    # Banded Cholesky is exact to rounding; CG stops at a 1e-9 relative residual.
    tol = {"banded": 1e-10, "sparse": 1e-7}[route]
    assert_allclose(solve(0.7, rhs_free).ravel(), expected, rtol=tol, atol=10 * tol)
    assert np.all(gradient.reshape(-1)[fixed] == 0.0)


def test_linear_theta_step_is_exact_on_an_ab_trajectory():
    model, theta = LotkaVolterra(), np.array([2.0, 1.0, 4.0, 1.0])
    t = np.sort(np.random.default_rng(0).uniform(0, 4, 60))
    from sklode.bcdprox.multistep import ab_integrate

    X = ab_integrate(lambda s, x: model.f(s, x, theta), [5.0, 3.0], t, 3)
    grid = fid.Grid.build(t, 3)
    # E(X, theta) = 0 exactly, so least squares returns theta to rounding.
    assert_allclose(fid.theta_step_linear(model, [grid], [X]), theta, rtol=1e-9)
    assert_allclose(fid.theta_step_nonlinear(model, [grid], [X], theta + 0.5), theta, rtol=1e-8)


def test_x_step_decreases_the_proximal_objective(rossler_noisy):
    d, p = rossler_noisy, rossler_noisy.problem
    grid = fid.Grid.build(d.t, 3)
    anchor = d.Y
    X, E = fid.x_step(p.model, grid, anchor, p.theta, lam=1.0)
    E0 = fid.fidelity(p.model, grid, anchor, p.theta)
    assert E + np.sum((X - anchor) ** 2) < E0  # strict decrease of E + lam |X - anchor|^2
    assert E == pytest.approx(fid.fidelity(p.model, grid, X, p.theta), rel=1e-12)


# --------------------------------------------------------------------------- recovery
@warns_by_design('PoorFitWarning',
                 why="noise-free data: the misfit is the discretisation's, which the check sees")
def test_noise_free_recovery_is_at_the_discretisation_error():
    for name, bound in [("lotka_volterra", 3e-3), ("fitzhugh_nagumo", 1e-3)]:
        d = make_trajectory(name, noise=0.0)
        p = d.problem
        est = BCDProxODE(p.model, theta0=p.theta_init).fit(d.t, d.Y)
        # AB3 on the paper grids: measured 1.6e-3 (LV, dt = 0.1) and 5.6e-4 (FHN, dt = 0.05)
        # relative error, the scheme's own bias (the reference code: 2e-3 on LV).
        assert np.max(np.abs(est.theta_ - p.theta) / np.abs(p.theta)) < bound


@warns_by_design('PoorFitWarning',
                 why="coarse grids on purpose: the discretisation error is what is measured")
def test_noise_free_error_falls_with_the_step_at_the_scheme_order():
    p0 = get_problem("lotka_volterra")
    errors = []
    for n in (41, 81, 161):
        p = dataclasses.replace(p0, t=np.linspace(0, 4, n))
        d = make_trajectory(p, noise=0.0)
        est = BCDProxODE(p.model, theta0=p.theta_init, order=2, tol=1e-9).fit(d.t, d.Y)
        errors.append(np.max(np.abs(est.theta_ - p.theta)))
    # AB2 is second order: halving the step divides the bias by ~4 (measured 4.07, 4.08).
    assert errors[0] / errors[1] > 3.5 and errors[1] / errors[2] > 3.5


# FitzHugh-Nagumo's 401 samples take 5 s on two cores: the slow stage of .ci/run
@pytest.mark.parametrize("name", ["lotka_volterra", "rossler",
                                  pytest.param("fitzhugh_nagumo", marks=pytest.mark.slow)])
@warns_by_design('PoorFitWarning',
                 why="the paper's settings, compared with the reference code, not judged")
def test_paper_problems_match_the_reference_implementation(name):
    truth = get_problem(name).theta
    errs, preds = [], []
    for seed in range(3):  # the reference's own seeds (its noise draws are the same)
        d = make_trajectory(name, random_state=seed)
        est = BCDProxODE(d.problem.model, theta0=d.problem.theta_init).fit(d.t, d.Y)
        assert est.converged_
        errs.append(parameter_error(est.theta_, truth))
        preds.append(prediction_error(d.X, est.simulate(d.t)))
    ref_err, ref_pred = REFERENCE[name]
    # Same algorithm, same data, different stopping point on the slow drift of the paper's
    # iteration: the measured medians are 0.97-1.2x the reference's on theta (Rossler's c:
    # 0.101 vs 0.084) and 0.64-1.0x on prediction error; 1.3x bounds that spread.
    assert np.all(np.median(errs, axis=0) <= 1.3 * np.array(ref_err))
    assert np.median(preds) <= 1.05 * ref_pred


@pytest.mark.slow
def test_lorenz96_recovers_the_forcing():
    d = make_trajectory("lorenz96", random_state=0)
    est = BCDProxODE(Lorenz96(40), theta0=(1000.0,)).fit(d.t, d.Y)
    # Reference: |F - 8| = 0.0047 when capped at 180 CPU s, not converged; ours converges
    # (here to 8.00014).
    assert abs(est.theta_[0] - 8.0) < 0.0047
    # The reference's estimation error, 3.62, is of its own draw (its burn-in and noise; 3.46
    # to 3.73 over its grids). On this draw (the burn-in now the same on every machine, see
    # datasets._lorenz96_x0) the filtered states miss by 3.84: within 10 % of it, and 12x
    # below the data's own error.
    assert estimation_error(d.X, est.states_) < 1.1 * 3.62
    assert estimation_error(d.X, est.states_) < 0.1 * estimation_error(d.X, d.Y)


@pytest.mark.slow  # 9 s on two cores: the slow stage of .ci/run
@warns_by_design('PoorFitWarning',
                 why="lambda=0 removes the proximal term on purpose: that fit stops short")
def test_lambda_plateau_and_lambda_zero(rossler_noisy):
    d, p = rossler_noisy, rossler_noisy.problem
    thetas = []
    for lam in (1.0, 5.0, 20.0):
        # The fixed point is approached slowly; tol=1e-7 puts every lam within 0.4 % of it
        # (at the default 1e-6 lam = 1 and lam = 20 still differ by 3 % in b).
        est = BCDProxODE(p.model, theta0=p.theta_init, lam=lam, tol=1e-7).fit(d.t, d.Y)
        thetas.append(est.theta_)
    assert_allclose(thetas, np.broadcast_to(thetas[0], (3, 3)), rtol=0.01)
    zero = BCDProxODE(p.model, theta0=p.theta_init, lam=0.0).fit(d.t, d.Y)
    # The paper: lam = 0 stops at once with a poor answer (here b is off by more than 50 %).
    assert zero.n_iter_ <= 3
    assert np.max(np.abs(zero.theta_ - p.theta) / p.theta) > 0.5


@pytest.mark.slow  # 4 s on two cores: the slow stage of .ci/run
@warns_by_design('PoorFitWarning',
                 why="BCD-prox's estimate lies about one standard error from the output-error optimum here")
def test_laplace_noise_does_as_well_as_gaussian():
    errs = {"gaussian": [], "laplace": []}
    for dist in errs:
        for seed in range(3):
            d = make_trajectory("rossler", distribution=dist, random_state=seed)
            est = BCDProxODE(d.problem.model, theta0=d.problem.theta_init).fit(d.t, d.Y)
            errs[dist].append(prediction_error(d.X, est.simulate(d.t)))
    # Same standard deviation: the medians over 3 seeds agree within 50 % (seed scatter is
    # about that large: 0.94-1.6 for Gaussian).
    assert np.median(errs["laplace"]) <= 1.5 * np.median(errs["gaussian"])


@pytest.mark.slow  # 4 s on two cores: the slow stage of .ci/run
@warns_by_design('PoorFitWarning',
                 why="BCD-prox's estimate lies about one standard error from the output-error optimum here")
def test_non_uniform_grid_fits_as_well_as_uniform():
    p0 = get_problem("rossler")
    results = {}
    for kind in ("uniform", "random"):
        errs = []
        for seed in range(3):
            t = p0.t.copy()
            if kind == "random":  # sorted random times: each interior time moved by up to
                rng = np.random.default_rng(100 + seed)  # 40 % of a step (gaps 0.2-1.8 dt)
                t[1:-1] += rng.uniform(-0.04, 0.04, t.size - 2)
            p = dataclasses.replace(p0, t=t)
            d = make_trajectory(p, random_state=seed)
            est = BCDProxODE(p.model, theta0=p.theta_init).fit(d.t, d.Y)
            errs.append(np.abs(est.theta_ - p.theta) / p.theta)
        results[kind] = np.median(errs, axis=0)
    # Same number of points: every median relative error within 2x of the uniform grid's
    # (measured: 0.019/0.149/0.015 against 0.016/0.102/0.034).
    assert np.all(results["random"] <= 2 * results["uniform"])


def test_nonlinear_model_is_fitted():
    d = make_trajectory("fitzhugh_nagumo", noise=0.1, random_state=0)
    est = BCDProxODE(FitzHughNagumo(), theta0=(2, 2, 5)).fit(d.t, d.Y)
    # Noise std 0.1 on 401 points: a few per cent on each parameter.
    assert_allclose(est.theta_, [0.5, 0.3, 3.0], rtol=0.05)


def test_outputs_follow_the_contract():
    d = make_trajectory("lotka_volterra", noise=0.1, random_state=1)
    est = BCDProxODE(LotkaVolterra(), theta0=(2, 2, 5, 2)).fit(d.t, d.Y)
    assert_allclose(est.x0_, est.states_[0], rtol=0)
    assert est.states_.shape == d.Y.shape and est.t0_ == 0.0
    # predicted_states_ is the AB3 recursion from x0_: its fidelity is zero up to rounding.
    R = ab_residual(est.predicted_states_, est.model.f(d.t, est.predicted_states_, est.theta_),
                    d.t, adams_bashforth_coefficients(d.t, 3))
    assert np.max(np.abs(R)) < 1e-12
    assert len(est.fidelity_history_) == est.n_iter_
    # predict integrates the ODE from (t0_, x0_) at any time, also between samples.
    assert_allclose(est.predict([0.05]), simulate(est.model, est.theta_, est.x0_, [0.05], t0=0.0),
                    rtol=1e-10)


@warns_by_design('PoorFitWarning',
                 why="the paper's L-BFGS path stops short of the output-error optimum; the test compares paths")
def test_lbfgs_paper_path_agrees_with_gauss_newton():
    d = make_trajectory("lotka_volterra", noise=0.0)
    fast = BCDProxODE(LotkaVolterra(), theta0=(2, 2, 5, 2)).fit(d.t, d.Y)
    paper = BCDProxODE(LotkaVolterra(), theta0=(2, 2, 5, 2), optimizer="l-bfgs-b",
                       acceleration="none", stop="paper", max_iter=3000).fit(d.t, d.Y)
    # Both reach the discretisation-limited answer (reference: 2e-3 absolute).
    assert np.max(np.abs(paper.theta_ - [2, 1, 4, 1])) < 5e-3
    assert_allclose(paper.theta_, fast.theta_, atol=5e-3)


# --------------------------------------------------------------------------- failures
@warns_by_design('PoorFitWarning', why="a fit stopped early on purpose")
def test_non_convergence_warns_and_leaves_a_usable_fit():
    d = make_trajectory("rossler", random_state=0)
    est = BCDProxODE(d.problem.model, theta0=d.problem.theta_init, max_iter=3)
    with pytest.warns(ConvergenceWarning, match=r"BCDProxODE did not converge after 3 iter"):
        est.fit(d.t, d.Y)
    assert est.converged_ is False and est.n_iter_ == 3
    assert np.all(np.isfinite(est.predict(d.t)))


@pytest.mark.parametrize("param, value, pattern", [
    ("lam", -1.0, r"The 'lam' parameter of BCDProxODE must be a float in the range \[0"),
    ("order", 0, r"The 'order' parameter of BCDProxODE must be an int in the range \[1, 8\]"),
    ("optimizer", "adam", r"The 'optimizer' parameter of BCDProxODE must be a str among"),
    ("stop", "never", r"The 'stop' parameter"),
])
def test_bad_hyper_parameters_raise_the_standard_message(param, value, pattern):
    d = make_trajectory("lotka_volterra", random_state=0)
    est = BCDProxODE(LotkaVolterra(), **{param: value})
    with pytest.raises(InvalidParameterError, match=pattern):
        est.fit(d.t, d.Y)


def test_bad_theta0_and_partial_observations_are_rejected():
    d = make_trajectory("lotka_volterra", random_state=0)
    with pytest.raises(ValueError, match=r"theta0 has 3 entries but LotkaVolterra\(\) has 4"):
        BCDProxODE(LotkaVolterra(), theta0=(1, 2, 3)).fit(d.t, d.Y)
    with pytest.raises(ValueError, match=r"Y has 1 column\(s\) but BCDProxODE expects 2"):
        BCDProxODE(LotkaVolterra()).fit(d.t, d.Y[:, :1])
    with pytest.raises(ValueError, match=r"needs at least 5 time points, got n_samples=4"):
        BCDProxODE(LotkaVolterra()).fit(d.t[:4], d.Y[:4])


def test_inputs_are_not_modified():
    d = make_trajectory("lotka_volterra", random_state=0)
    t, Y = d.t[::-1].copy(), d.Y[::-1].copy()
    t.setflags(write=False)
    Y.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est = BCDProxODE(LotkaVolterra(), theta0=(2, 2, 5, 2)).fit(t, Y)
    assert_allclose(t, d.t[::-1], rtol=0) and assert_allclose(Y, d.Y[::-1], rtol=0)
    assert est.t0_ == 0.0


def test_substeps_let_bcdprox_fit_sparse_samples():
    from sklode import simulate
    from sklode.models import LotkaVolterra

    theta = np.array([2.0, 1.0, 4.0, 1.0])
    t = np.linspace(0, 4, 11)  # steps of 0.4: too coarse for the multistep residual
    X = simulate(LotkaVolterra(), theta, [5, 3], t)
    errors = {1: [], 4: []}
    for seed in range(3):
        Y = X + 0.2 * np.random.default_rng(seed).standard_normal(X.shape)
        for k in errors:
            est = BCDProxODE(LotkaVolterra(), theta0=(2.5, 1.5, 4.5, 1.5), substeps=k)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(t, Y)
            errors[k].append(np.linalg.norm(est.theta_ - theta) / np.linalg.norm(theta))
    # Measured mean relative errors 0.42 on the data grid and 0.10 with 4 sub-steps (5
    # seeds); the sub-stepped fit must be at least twice as accurate, and it still reports
    # the states at the samples only.
    assert np.mean(errors[4]) < 0.5 * np.mean(errors[1])
    assert est.states_.shape == (11, 2) and est.predicted_states_.shape == (11, 2)


def test_a_zero_guess_on_the_log_scale_is_refused_without_a_numpy_warning():
    # A hidden state guessed at 0 with log-normal noise: the ValueError names the way out;
    # numpy's "divide by zero in log" used to leak before it.
    import warnings

    from sklode.datasets import make_trajectory

    d = make_trajectory("lotka_volterra", noise=0.2, noise_kind="lognormal", random_state=0)
    est = BCDProxODE(d.problem.model, theta0=(2.5, 1.5, 4.5, 1.5), sigma=0.2,
                     noise_kind="lognormal", observed=["prey"], x0=[5.0, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        with pytest.raises(ValueError, match="or AdjointODE, whose log-normal likelihood"):
            est.fit(d.t, d.Y[:, :1])
