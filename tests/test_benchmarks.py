"""The benchmark runner poses every method on every named problem it applies to, through the
one registry (it used to fail on SEIRD: "Y has 3 column(s) but AdjointODE expects 5")."""

import numpy as np
import pytest
import run as benchmark_run

from sklode.datasets import list_problems, make_trajectory
from sklode.registry import METHODS


@pytest.mark.parametrize("problem", list_problems())
def test_every_applicable_method_accepts_the_problems_data(problem):
    methods, skipped = benchmark_run.applicable_methods(problem)
    assert methods[0] == benchmark_run.BASELINE
    assert set(methods[1:]) | set(skipped) == set(METHODS)
    data = make_trajectory(problem, random_state=0)
    for name in methods[1:]:
        est = METHODS[name].make(problem)
        experiments = est._validate_data(data.t, data.Y)  # what fit validates first
        assert experiments.experiments[0].Y.shape == data.Y.shape
    for name, why in skipped.items():
        # The only reasons a method cannot fit a named problem: hidden states (WENDy), or an
        # initial state before the data for the methods on the data grid (the SEIRD ones).
        assert ("needs every state observed" in why and not METHODS[name].fits_hidden_states
                or "before its first observation" in why
                and METHODS[name].initial_state_at_data)


def test_runner_fits_seird_with_the_adjoint_method_and_the_baseline():
    records = benchmark_run.run("seird", ["adjoint", "least_squares"], seeds=[0])
    assert [r["method"] for r in records] == ["adjoint", "least_squares"]
    # Both minimise the same cost: the same optimum to the solvers' tolerances.
    assert records[0]["theta"] == pytest.approx(records[1]["theta"], rel=1e-3)


def test_runner_skips_methods_that_cannot_fit_hidden_states(capsys):
    records = benchmark_run.run("seird", seeds=[0])
    assert {r["method"] for r in records} == {"adjoint", "least_squares"}
    assert "bcdprox skipped" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.parametrize("problem", list_problems())
def test_runner_runs_every_method_on_every_problem(problem):
    methods, _ = benchmark_run.applicable_methods(problem)
    records = benchmark_run.run(problem, seeds=[0])
    assert [r["method"] for r in records] == methods


def test_coverage_benchmark_scores_one_fit_per_method():
    import uncertainty

    for method in uncertainty.METHODS:
        fit = uncertainty.one_fit(method, "lotka_volterra", 0.5, seed=0, profile=False)
        # Calibrated standard errors put a z-score beyond 4 with probability 6e-5; the
        # BCD-prox errors of 1e-7 this benchmark exposed gave z of order 1e6.
        assert np.all(np.abs(fit["z"]) < 4), (method, fit["z"])
        assert len(fit["theta"]) == 4 and len(fit["x0"]) == 2
    summary = uncertainty.summarise([fit, None])  # a failed fit (None) is left out
    assert summary["fits"] == 1 and 0.0 <= summary["pooled"] <= 1.0


def test_head_to_head_draws_follow_the_peers_recipe_and_the_peers_file_covers_them():
    import json

    import wendy as wendy_benchmark

    for noise in (0.05, 0.2):
        problem, U = wendy_benchmark.h2h_data("wendy_logistic", noise, 3)
        X = problem.clean_states()
        Z = np.random.default_rng(3).standard_normal(X.shape)
        # U = U* + sigma_NR RMS(U*) Z with the same Z at every noise level
        np.testing.assert_allclose(U, X + noise * np.sqrt(np.mean(X**2)) * Z, rtol=0,
                                   atol=1e-14)
    peers = json.loads(wendy_benchmark.PEERS.read_text())
    for name in wendy_benchmark.PROBLEMS:
        for noise in wendy_benchmark.NOISES:
            cell = peers[name][str(noise)]
            assert sorted(cell, key=int) == [str(s) for s in range(10)]
            assert all(isinstance(cell[s]["py2023"], float) for s in cell)


def test_calibration_benchmark_scores_z_of_one_system():
    import wendy_calibration

    problem = wendy_calibration._systems()["sir"]
    r = wendy_calibration.calibrate(problem, 0.03, 2)
    assert r["n_seeds"] == 2 and len(r["mean_z"]) == 2 and 0 <= r["coverage"] <= 1
    # a 3 % fit of SIR is within a few standard errors (measured |z| < 1.5 on these seeds)
    assert np.all(np.abs(r["mean_z"]) < 4)
