"""The compiled CVODES path (``integrator="CVODES"``, sklode/models/_native.py).

Skipped where this machine has no C compiler or SUNDIALS (``.ci/run`` installs Debian's
libsundials-dev); the fallback's warning is tested everywhere.
"""

import pickle
import warnings

import numpy as np
import pytest
import torch

from sklode import AdjointODE, ODEModel, simulate
from sklode.exceptions import CompilationWarning, IntegrationError
from sklode.models import SEIRD, LogisticGrowth, Lorenz63, Lorenz96, LotkaVolterra
from sklode.models._native import (native_solver, native_unavailable_reason,
                                   route_unavailable_reason)
from sklode.outputerror._sensitivity import forward_trajectory, sensitivities

from network_models import Hub  # tests/: shared with build_tools/check_wheel.py

needs_compiler = pytest.mark.skipif(route_unavailable_reason("c") is not None,
                                    reason="no C compiler and SUNDIALS for per-model C")
needs_native = pytest.mark.skipif(native_unavailable_reason() is not None,
                                  reason=str(native_unavailable_reason()))


class Kitchen(ODEModel):
    """Every kind of operation the C generator writes, in one field."""

    state_names = ("a", "b", "c")
    param_names = ("k1", "k2", "k3", "tau")
    default_theta = (0.7, 1.3, 0.4, 2.0)

    def rhs(self, t, x, theta):
        a, b, c = x[..., 0], x[..., 1], x[..., 2]
        k1, k2, k3, tau = theta
        switch = torch.where(t >= tau, 1.0, 0.0)
        return torch.stack([
            -k1 * a / (1.0 + b ** 2) + k3 * torch.exp(-c) * switch,
            k1 * a - k2 * torch.sqrt(b * b + 1.0) + torch.maximum(c, a) * 0.1,
            torch.tanh(a) - k3 * torch.clamp(c, min=-1.0, max=1.0) + torch.sin(k2 * b) ** 3
            + torch.abs(b) * k1 ** 1.5 - torch.log1p(a * a),
        ], dim=-1)


class MeanField(ODEModel):
    """Every state pulled towards the mean of all: ``df/dx`` is dense in any order."""

    param_names = ("k",)
    default_theta = (1.0,)

    def __init__(self, n_states=200):
        self.state_names = tuple(f"x{i}" for i in range(n_states))

    def rhs(self, t, x, theta):
        return -x + theta[0] * torch.tanh(x.mean(dim=-1, keepdim=True))


class Smooth(ODEModel):
    """Kitchen without its kinks (max, clamp, abs), whose finite differences a solver
    stepping over a kink spoils; the switch in time stays."""

    state_names = ("a", "b", "c")
    param_names = ("k1", "k2", "k3", "tau")
    default_theta = (0.7, 1.3, 0.4, 2.0)

    def rhs(self, t, x, theta):
        a, b, c = x[..., 0], x[..., 1], x[..., 2]
        k1, k2, k3, tau = theta
        switch = torch.where(t >= tau, 1.0, 0.0)
        return torch.stack([
            -k1 * a / (1.0 + b ** 2) + k3 * torch.exp(-c) * switch,
            k1 * a - k2 * torch.sqrt(b * b + 1.0),
            torch.tanh(a) - k3 * c + torch.sin(k2 * b) ** 3 - torch.log1p(a * a),
        ], dim=-1)


class Switch(ODEModel):
    """``x' = 1`` until ``t = tau``, then ``x' = -1``: x(t) = t, then 2 tau - t."""

    state_names = ("x",)
    param_names = ("tau",)
    default_theta = (10.0,)  # model checks run at t <= 1: away from the switch

    def rhs(self, t, x, theta):
        return torch.stack([torch.where(t < theta[0], 1.0, -1.0) + 0.0 * x[..., 0]], dim=-1)


@needs_native
@pytest.mark.parametrize("model", [LotkaVolterra(), SEIRD(), Lorenz63(), Kitchen()],
                         ids=lambda m: type(m).__name__)
def test_c_program_equals_numpy_field(model):
    native = model.native_solver()
    assert native is not None, model.native_unavailable_reason()
    field = model.pointwise_field()
    rng = np.random.default_rng(3)
    for _ in range(5):
        x = rng.uniform(0.2, 2.0, model.n_states)
        theta = model.theta_guess() * rng.uniform(0.8, 1.2, model.n_params)
        t = float(rng.uniform(0, 4))
        f, jx, jp = native.evaluate(t, x, theta)
        # the same double-precision operations in another order: round-off only
        np.testing.assert_allclose(f, field(t, x, theta), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(jx, model.jac_x(t, x, theta), rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(jp, model.jac_theta(t, x, theta), rtol=1e-10, atol=1e-12)


@needs_native
@pytest.mark.parametrize("model, x0, horizon", [
    (LotkaVolterra(), [2.0, 1.0], 10.0), (SEIRD(), [99990.0, 0.0, 10.0, 0.0, 0.0], 100.0),
    (Kitchen(), [1.0, 0.5, 0.2], 5.0)], ids=["LV", "SEIRD", "Kitchen"])
def test_cvodes_solution_equals_lsoda(model, x0, horizon):
    theta = model.theta_guess()
    t = np.linspace(0.0, horizon, 21)
    a = simulate(model, theta, x0, t, integrator="CVODES", rtol=1e-11, atol=1e-12)
    b = simulate(model, theta, x0, t, integrator="LSODA", rtol=1e-11, atol=1e-12)
    # both solved to 1e-11 relative per step; errors accumulate over the horizon to ~1e-9
    np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-7 * np.max(np.abs(b)))


class SwitchWrittenDown(Switch):
    """:class:`Switch` with its condition as SBML exporters write it, ``tau - t > 0``: the
    switching function falls through zero, where Switch's rises."""

    def rhs(self, t, x, theta):
        return torch.stack([torch.where(theta[0] - t > 0, 1.0, -1.0) + 0.0 * x[..., 0]],
                           dim=-1)


@needs_native
@pytest.mark.parametrize("model", [Switch(), SwitchWrittenDown()],
                         ids=lambda m: type(m).__name__)
def test_switch_in_time_is_located_exactly(model):
    # the root of t - tau stops the solve at the switch: the kink is resolved to the
    # tolerance, not smeared over a step (x(3) = 2 tau - 3 = -0.4 for tau = 1.3)
    t = np.array([0.5, 1.3, 2.0, 3.0])
    X = simulate(model, [1.3], [0.0], t, t0=0.0, integrator="CVODES", rtol=1e-10,
                 atol=1e-12)
    np.testing.assert_allclose(X[:, 0], [0.5, 1.3, 0.6, -0.4], atol=1e-8)


@needs_native
@pytest.mark.parametrize("model", [Switch(), SwitchWrittenDown()],
                         ids=lambda m: type(m).__name__)
@pytest.mark.parametrize("rtol", [1e-6, 1e-10, 1e-12])
def test_a_solve_that_starts_on_its_switch_runs_on_the_far_side(model, rtol):
    # a PEtab condition that doses at t = 24 simulated from t0 = 24 (a solve split there, a
    # pre-equilibration ending there): the field past the start is the switched one,
    # x(t) = -(t - tau), at every tolerance, whichever way the condition is written. (The
    # case where CVODES reported the zero at the start as a rise is Weber's, in
    # test_petab.py; it did not occur on this line.) A line is integrated to round-off
    tau = 1.3
    t = np.array([tau, 1.5, 2.0, 3.0])
    X = simulate(model, [tau], [0.0], t, t0=tau, integrator="CVODES", rtol=rtol,
                 atol=1e-12)
    np.testing.assert_allclose(X[:, 0], -(t - tau), atol=1e-9)


class PulseUntil(ODEModel):
    """``x' = k [t <= tau] - x``: an input that ends at ``tau``."""

    state_names = ("x",)
    param_names = ("tau", "k")
    default_theta = (10.0, 1.0)  # model checks run at t <= 1: away from the switch

    def rhs(self, t, x, theta):
        on = torch.where(t <= theta[0], 1.0, 0.0) + 0.0 * x[..., 0]
        return torch.stack([theta[1] * on - x[..., 0]], dim=-1)


@needs_native
def test_no_step_past_the_last_time_where_the_field_switches():
    # an input that ends with the experiment (PEtab's Fujita doses end at its last time):
    # a step past the last time and back carries the switched-off field into the last value
    # (measured 1.8e-10 relative off before CVODES stopped at it) and can stall CVODES
    tau, k = 3600.0, 1e7
    X = simulate(PulseUntil(), [tau, k], [0.0], [0.0, tau / 2, tau], integrator="CVODES",
                 rtol=1e-10, atol=1e-12)
    # x(tau) = k (1 - e^-tau) = k exactly in float64; round-off of the BDF steps only
    assert X[-1, 0] == pytest.approx(k, rel=1e-12)


@needs_native
@pytest.mark.parametrize("with_x0", [True, False])
def test_cvodes_sensitivities_equal_collocation_and_differences(with_x0):
    model, theta, x0 = Smooth(), np.array([0.7, 1.3, 0.4, 2.5]), np.array([1.0, 0.5, 0.2])
    t = np.linspace(0.5, 4.0, 8)
    S, reference = (sensitivities(model, theta, forward_trajectory(
        model, theta, x0, 0.0, t, integrator=integrator, rtol=1e-11, atol=1e-12),
        with_x0=with_x0) for integrator in ("CVODES", "LSODA"))
    assert S.shape == (8, 3, (3 if with_x0 else 0) + 4)
    # an independent method (Gauss collocation on LSODA's trajectory): both at 1e-11, they
    # agreed to 5e-9 where measured
    np.testing.assert_allclose(S, reference, rtol=1e-6, atol=1e-7)
    u = np.concatenate([x0, theta]) if with_x0 else theta
    h = 1e-6
    for j in range(u.size):
        up, down = u.copy(), u.copy()
        up[j] += h
        down[j] -= h

        def states(v):
            x, th = (v[:3], v[3:]) if with_x0 else (x0, v)
            return simulate(model, th, x, t, t0=0.0, integrator="CVODES", rtol=1e-12,
                            atol=1e-13)
        fd = (states(up) - states(down)) / (2 * h)
        if j == u.size - 1:
            # d/dtau: the switch moves, and the jump of the field there is not in the
            # sensitivity equations (as on the scipy path); the states before it agree
            np.testing.assert_allclose(S[t < theta[3], :, j], fd[t < theta[3]], atol=1e-4)
            continue
        # central differences over adaptive solves: each solve's global error (~1e-10 at
        # rtol 1e-12, its step sequence changing with the perturbation) over h = 1e-6 leaves
        # noise up to ~5e-5 where measured
        np.testing.assert_allclose(S[..., j], fd, rtol=1e-4, atol=2e-4)


@needs_native
def test_cvodes_sensitivities_equal_scipy_path_with_doses():
    model, theta = LotkaVolterra(), LotkaVolterra().theta_guess()
    x0, t = np.array([2.0, 1.0]), np.linspace(0.5, 6.0, 12)
    doses = [(2.0, 0, 1.5), (4.0, 1, 0.5)]
    out = {}
    for integrator in ("CVODES", "LSODA"):
        traj = forward_trajectory(model, theta, x0, 0.0, t, integrator=integrator, rtol=1e-11,
                                  atol=1e-12, doses=doses)
        out[integrator] = traj.states, sensitivities(model, theta, traj, with_x0=True)
    # both paths at 1e-11: the trajectories agree to ~1e-9 after two doses
    np.testing.assert_allclose(out["CVODES"][0], out["LSODA"][0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(out["CVODES"][1], out["LSODA"][1], rtol=1e-6, atol=1e-8)


@needs_native
def test_a_failed_cvodes_sensitivity_solve_falls_back_to_the_scipy_path():
    from sklode.outputerror._sensitivity import adjoint_gradient

    model, theta = LotkaVolterra(), LotkaVolterra().theta_guess()
    x0, t = np.array([2.0, 1.0]), np.linspace(0.5, 6.0, 12)
    reference = forward_trajectory(model, theta, x0, 0.0, t, integrator="LSODA", rtol=1e-11,
                                   atol=1e-12)
    traj = forward_trajectory(model, theta, x0, 0.0, t, integrator="CVODES", rtol=1e-11,
                              atol=1e-12)

    def fails(with_x0, params=None, start=None):  # the error test on them, as on Fujita
        raise IntegrationError("CV_ERR_FAILURE: the error test failed repeatedly")

    traj.native = fails
    # the scipy path's own numbers (LSODA's trajectory at the same tolerances): equal
    np.testing.assert_allclose(sensitivities(model, theta, traj),
                               sensitivities(model, theta, reference), rtol=1e-12, atol=1e-14)
    jumps = np.ones((t.size, 2))
    for got, expected in zip(adjoint_gradient(model, theta, traj, jumps),
                             adjoint_gradient(model, theta, reference, jumps)):
        np.testing.assert_allclose(got, expected, rtol=1e-12)


@needs_native
def test_adjoint_fit_with_cvodes_equals_lsoda_fit():
    model = LotkaVolterra()
    truth = np.array([1.0, 1.0, 1.0, 1.0])
    t = np.linspace(0, 10, 41)
    Y = simulate(model, truth, [2.0, 1.0], t)
    Y = Y * (1 + 0.05 * np.random.default_rng(0).standard_normal(Y.shape))
    fits = {i: AdjointODE(model, integrator=i, theta0=1.3 * truth, rtol=1e-10,
                          atol=1e-12).fit(t, Y) for i in ("CVODES", "LSODA")}
    # the same optimum, solved by two integrators at 1e-10: agreement to ~1e-7 relative
    np.testing.assert_allclose(fits["CVODES"].theta_, fits["LSODA"].theta_, rtol=1e-6)
    np.testing.assert_allclose(fits["CVODES"].x0_, fits["LSODA"].x0_, rtol=1e-6)
    # and near the truth: 5 % noise on 41 samples gives errors of a few per cent
    np.testing.assert_allclose(fits["CVODES"].theta_, truth, rtol=0.1)


@needs_native
def test_blowup_and_nonfinite_raise_integration_error():
    class Blowup(ODEModel):
        state_names, param_names = ("x",), ("k",)

        def rhs(self, t, x, theta):
            return theta[0] * x ** 2

    with pytest.raises(IntegrationError, match="blew up"):
        simulate(Blowup(), [1.0], [1.0], [0.5, 2.0], t0=0.0, integrator="CVODES")
    with pytest.raises(IntegrationError, match="blew up"):  # the fits' solve checks it too
        forward_trajectory(Blowup(), np.array([1.0]), np.array([1.0]), 0.0,
                           np.array([0.5, 2.0]), integrator="CVODES", rtol=1e-8, atol=1e-10)

    class Domain(ODEModel):
        state_names, param_names = ("x",), ("k",)

        def rhs(self, t, x, theta):
            return torch.stack([-torch.sqrt(x[..., 0]) * theta[0]], dim=-1)  # NaN if x < 0

    with pytest.raises(IntegrationError, match="t="):
        simulate(Domain(), [1.0], [-1.0], [0.5, 2.0], t0=0.0, integrator="CVODES")


@needs_compiler
def test_build_is_cached_and_model_pickles(tmp_path, monkeypatch):
    monkeypatch.setenv("SKLODE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("SKLODE_CVODES_MODEL", "c")  # the route that builds per model
    first = LotkaVolterra().native_solver()
    second = LotkaVolterra().native_solver()  # a new instance: the same library from disk
    assert first.library == second.library
    assert len(list((tmp_path / "native").glob("*.so"))) == 1
    model = pickle.loads(pickle.dumps(LotkaVolterra()))
    assert "_derived" not in model.__dict__  # nothing derived travels with a pickle
    X = simulate(model, model.theta_guess(), [2.0, 1.0], [0.0, 1.0], integrator="CVODES")
    assert np.all(np.isfinite(X))


def test_auto_is_cvodes_where_the_model_compiles_and_lsoda_silently_elsewhere():
    from sklode.integrate import integrator_for

    compiled = LotkaVolterra()
    expected = "LSODA" if native_unavailable_reason() else "CVODES"
    assert integrator_for(compiled, "auto") == integrator_for(compiled, "AUTO") == expected
    assert integrator_for(compiled, "Radau") == "Radau"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "auto" never warns: LSODA is a choice, not a loss
        assert integrator_for(Branching(), "auto") == "LSODA"
        X = simulate(Branching(), [0.5], [2.0], [0.0, 1.0])  # the default is "auto"
    # x' = -k x from 2: the fallback solves it (to LSODA's rtol 1e-8)
    np.testing.assert_allclose(X[1], [2.0 * np.exp(-0.5)], rtol=1e-7)
    t = np.linspace(0.0, 5.0, 11)
    by_name = simulate(compiled, [2, 1, 4, 1], [5, 3], t, integrator=expected)
    np.testing.assert_array_equal(simulate(compiled, [2, 1, 4, 1], [5, 3], t), by_name)
    with pytest.raises(ValueError, match="integrator must be one of"):
        integrator_for(compiled, "cvode")
    # wider than AUTO_MAX_STATES and dense in any order: LSODA, without building the C
    # (whose dense Newton solves lose to LSODA's Jacobian-free steps on a wide non-stiff
    # system)
    from sklode.integrate import AUTO_MAX_STATES

    wide = MeanField(n_states=AUTO_MAX_STATES + 1)
    assert integrator_for(wide, "auto") == "LSODA"
    from sklode.models._derived import derived

    assert derived(wide).native is None  # not compiled to decide


@needs_native
def test_a_model_compiled_by_several_threads_at_once_gets_its_c_solver_in_each():
    # The numpy compilation publishes a torch placeholder while it checks itself; a thread
    # that built the C solver from that placeholder cached "cannot be compiled" for good.
    from concurrent.futures import ThreadPoolExecutor

    for _ in range(3):
        model = SEIRD()
        barrier = __import__("threading").Barrier(4)

        def build(_):
            barrier.wait()
            return model.native_solver()

        with ThreadPoolExecutor(max_workers=4) as pool:
            solvers = list(pool.map(build, range(4)))
        assert all(s is not None for s in solvers), model.native_unavailable_reason()
        assert len({id(s) for s in solvers}) == 1  # built once, shared


@needs_native
def test_an_objective_that_has_solved_on_cvodes_pickles_and_solves_again():
    # A start run on a Dask worker returns its objective; the solve it keeps holds the C
    # solver (ctypes), so it is left behind and recomputed (a worker's result that could
    # not be sent back hung the fit for good).
    from sklode.adjoint import build_objective

    model = LotkaVolterra()
    t = np.linspace(0.0, 10.0, 21)
    Y = simulate(model, [1.0, 1.0, 1.0, 1.0], [2.0, 1.0], t)
    objective, u = build_objective(model, t, Y, theta0=np.array([1.2, 1.0, 1.0, 1.0]),
                                   integrator="CVODES")
    r, J = objective.residual(u), objective.jacobian(u)
    copy = pickle.loads(pickle.dumps(objective))
    np.testing.assert_array_equal(copy.residual(u), r)  # the same solve, bit for bit
    np.testing.assert_array_equal(copy.jacobian(u), J)


class Branching(ODEModel):
    """Python control flow on a value: cannot be recorded, so it cannot be compiled."""

    state_names, param_names = ("x",), ("k",)

    def rhs(self, t, x, theta):
        if bool((x > -1e300).all()):
            return -theta[0] * x
        return theta[0] * x


def test_uncompilable_model_falls_back_with_one_warning():
    model = Branching()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        a = simulate(model, [0.5], [2.0], [0.0, 0.5, 1.0], integrator="CVODES")
        simulate(model, [0.5], [2.0], [0.0, 0.5], integrator="CVODES")
    compilation = [w for w in caught if issubclass(w.category, CompilationWarning)]
    assert len(compilation) == 1  # once per model
    assert "LSODA" in str(compilation[0].message)
    b = simulate(model, [0.5], [2.0], [0.0, 0.5, 1.0], integrator="LSODA")
    np.testing.assert_array_equal(a, b)  # the fallback is the LSODA path itself


@needs_native
@pytest.mark.parametrize("model, x0", [
    (Lorenz96(n_states=12), np.linspace(1.0, 2.0, 12)), (LogisticGrowth(), [0.1])],
    ids=["Lorenz96", "Logistic"])
def test_vector_programs_are_unrolled(model, x0):
    # rhs on whole vectors (roll, x ** 2): written element by element in C
    assert model.native_solver() is not None, model.native_unavailable_reason()
    theta, t = model.theta_guess(), np.linspace(0.0, 2.0, 9)
    a = simulate(model, theta, x0, t, integrator="CVODES", rtol=1e-11, atol=1e-12)
    b = simulate(model, theta, x0, t, integrator="LSODA", rtol=1e-11, atol=1e-12)
    # Lorenz-96 is chaotic: 1e-11 solves still agree to ~1e-8 over two time units
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@needs_native
def test_experiments_posing_one_initial_value_problem_share_a_solve(monkeypatch):
    # One dosing measured by two assays whose scale V differs (a condition on a parameter
    # only observe reads): the field is the same, so one CVODES solve serves both
    from observation_models import PK_TRUTH, OralPK

    import sklode.outputerror._experiments as experiments_module
    from sklode import Experiment
    from sklode._validation import check_experiments
    from sklode.outputerror._pose import objective_for_experiments

    rng = np.random.default_rng(5)
    t = np.linspace(0.5, 24, 16)
    doses = [(0.0, "gut", 320.0)]
    X = simulate(OralPK(), PK_TRUTH, [0, 0], t, t0=0.0, doses=[(0.0, 0, 320.0)])
    experiments = []
    for V in (30.0, 45.0):
        conc = X[:, 1] / V
        y = conc + (PK_TRUTH[3] + PK_TRUTH[4] * conc) * rng.standard_normal(conc.size)
        experiments.append(Experiment(t[::-1] if V > 40 else t, (y[::-1] if V > 40 else y)
                                      [:, None], x0=[0.0, 0.0], t0=0.0, doses=doses,
                                      conditions={"V": V}))
    fits = {}
    for share in (True, False):
        if not share:
            monkeypatch.setattr(experiments_module, "_share_solves", lambda parts: None)
        data = check_experiments(experiments, None, model=OralPK(), estimate_x0=False,
                                 estimator_name="test")
        objective, u = objective_for_experiments(OralPK(), data, theta0=PK_TRUTH * 1.1,
                                                 integrator="CVODES", rtol=1e-11, atol=1e-12)
        parts = objective.parts
        if share:
            assert parts[0].shared_solve is parts[1].shared_solve
        else:
            assert parts[0].shared_solve is None
        fits[share] = objective.residual(u), objective.jacobian(u)
    # the same solutions on the union of the times instead of each experiment's: equal to
    # the integration error at 1e-11
    np.testing.assert_allclose(fits[True][0], fits[False][0], rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(fits[True][1], fits[False][1], rtol=1e-6, atol=1e-8)


@needs_native
def test_a_likelihood_solves_experiments_posing_one_problem_once(monkeypatch):
    # The same dosing read by two assays whose scale V (a parameter only observe reads)
    # differs, and a third dosed twice as high: PEtab splits a condition this way when its
    # rows give the noise or observable parameters different values (Chen_MSB2009: 4
    # conditions, 39 experiments). states_at_observations (PEtabProblem.neg_log_likelihood,
    # predict, the trust layer) solves the first two once, on the union of their times.
    from observation_models import PK_TRUTH, OralPK

    import sklode.outputerror._predict as predict_module
    from sklode import Experiment
    from sklode._validation import check_experiments

    t_a, t_b = np.linspace(0.5, 24, 7), np.linspace(1.0, 30, 5)
    experiments = [Experiment(t, np.ones((t.size, 1)), x0=[0.0, 0.0], t0=0.0,
                              doses=[(0.0, "gut", amount)], conditions={"V": V})
                   for t, amount, V in ((t_a, 320.0, 30.0), (t_b, 320.0, 45.0),
                                        (t_a, 640.0, 30.0))]
    model = OralPK()
    data = check_experiments(experiments, None, model=model, estimate_x0=False,
                             estimator_name="test")
    calls = []
    solve = predict_module.simulate

    def counted(*args, **kwargs):
        calls.append(np.asarray(args[3]).size)
        return solve(*args, **kwargs)

    monkeypatch.setattr(predict_module, "simulate", counted)
    options = {"integrator": "CVODES", "rtol": 1e-10, "atol": 1e-12}
    x0s = np.zeros((3, 2))
    states, thetas = predict_module.states_at_observations(model, np.array(PK_TRUTH), data,
                                                           x0s, options)
    assert sorted(calls) == [7, 12]  # the two assays' union (12 times), the higher dose
    assert thetas[0][list(model.param_names).index("V")] == 30.0
    for e, X, th in zip(data.experiments, states, thetas):
        alone = solve(model, th, np.zeros(2), e.t, t0=0.0, doses=e.doses, **options)
        # the same solution at other output times: equal to the integration error at
        # rtol 1e-10 (CVODES interpolates between its own steps)
        np.testing.assert_allclose(X, alone, rtol=1e-7, atol=1e-9)


@needs_native
def test_many_columns_switch_to_the_collocation_passes():
    # Lorenz-96 with 40 states and x0 estimated: 40 x 41 above the gradient's work limit, so
    # the gradient is the adjoint on a LSODA trajectory; the objective is the CVODES one
    import sklode.outputerror._sensitivity as sensitivity
    from sklode.outputerror._pose import build_objective

    assert sensitivity.NATIVE_MAX_WORK_GRADIENT < 40 * 41
    model = Lorenz96(n_states=40)
    rng = np.random.default_rng(0)
    x0 = 8.0 + rng.normal(0.0, 1.0, 40)
    t = np.linspace(0.0, 1.0, 11)
    Y = simulate(model, [8.0], x0, t) + rng.normal(0.0, 0.1, (11, 40))
    gradients = {}
    for integrator in ("CVODES", "LSODA"):
        objective, u = build_objective(model, t, Y, theta0=[7.5], x0=x0 + 0.1, t0=0.0,
                                       integrator=integrator, rtol=1e-11, atol=1e-12)
        traj = objective._evaluate(np.asarray(u, dtype=np.float64))[0]  # cached: reused
        assert (traj.native is not None) == (integrator == "CVODES")
        calls = []
        if traj.native is not None:
            native = traj.native
            traj.native = lambda *args: calls.append(args) or native(*args)
        gradients[integrator] = objective.value_and_grad(np.asarray(u, dtype=np.float64))[1]
        assert calls == []  # CVODES' sensitivities were not asked for
    # the same adjoint pass on two solutions that agree to ~1e-10 over one time unit
    np.testing.assert_allclose(gradients["CVODES"], gradients["LSODA"], rtol=1e-6,
                               atol=1e-7 * np.abs(gradients["LSODA"]).max())


class StiffExchange(ODEModel):
    """``a' = -k a``, ``b' = 1000 a - 2000 b``: b(t) = c e^(-2000 t) + 1000/(2000 - k) a(t).

    BDF's Newton matrix ``I - gamma J`` has ``1 + gamma k`` above ``-1000 gamma`` in its first
    column, so once the steps grow past 1e-3 the LU must exchange rows."""

    state_names = ("a", "b")
    param_names = ("k",)
    default_theta = (1.0,)

    def rhs(self, t, x, theta):
        a, b = x[..., 0], x[..., 1]
        return torch.stack([-theta[0] * a, 1000.0 * a - 2000.0 * b], dim=-1)


@needs_native
def test_driver_lu_exchanges_rows_and_matches_the_closed_form():
    # The driver's own vector operations and pivoted LU (compiled with the model, in place
    # of the system SUNDIALS' unoptimised ones) against the closed form, with sensitivities.
    model = StiffExchange()
    native = model.native_solver()
    assert native is not None, model.native_unavailable_reason()
    k, t = 1.0, np.linspace(0.5, 20.0, 40)
    states, sens, info = native(0.0, np.array([1.0, 0.0]), np.array([k]), t, rtol=1e-10,
                                atol=1e-12, sens_params=np.array([0]))
    assert info["failure"] is None and info["n_steps"] < 2000  # large stiff steps were taken
    a = np.exp(-k * t)
    b = 1000.0 / (2000.0 - k) * (a - np.exp(-2000.0 * t))
    # BDF's global error at rtol 1e-10 is ~3e-10 here (LSODA's on the same tolerances is
    # 3.8e-10); a wrong factorisation or pivot would miss by orders of magnitude or fail
    exact = np.column_stack([a, b])
    assert np.max(np.abs(states - exact)) < 2e-9
    da = -t * a                                                        # d a / d k
    db = 1000.0 / (2000.0 - k) ** 2 * a + 1000.0 / (2000.0 - k) * da   # e^-2000t gone
    # the sensitivities ride on the states' steps (not in the error test): 1.3e-9 measured
    assert np.max(np.abs(sens[:, :, 0] - np.column_stack([da, db]))) < 1e-8


@needs_compiler
def test_driver_kernels_equal_the_sundials_library_to_the_bit():
    # The driver's vector operations and LU replace the library's for speed only: the same
    # solve and sensitivities, bit for bit, as with SUNDIALS' own (compiled here with
    # SKLODE_LIBRARY_KERNELS). Computing a x + b y where the library computes a (x - y)
    # (a = -b) changes this solve after a few steps; a difference in the last bit grows
    # along the solution and through the restart at the switch.
    from sklode.models._native import _DRIVER, _NO_EVENTS, NativeSolver, _build
    from sklode.models._program import Program

    model = Kitchen()
    ours, reason = native_solver(model, model._pointwise().field.compiled, route="c")
    assert ours is not None, reason
    recorder, x, theta, out = model._pointwise().field.compiled.recording
    source = (Program(recorder, x, theta, out).source(model.n_states, model.n_params)
              + _NO_EVENTS + "#define SKLODE_LIBRARY_KERNELS\n" + _DRIVER.read_text())
    library = NativeSolver(*_build(source), model.n_states, model.n_params,
                           ours.param_in_field)
    theta = np.array(model.default_theta)
    t = np.linspace(0.1, 8.0, 30)
    args = (0.0, np.array([1.0, 0.5, 0.2]), theta, t)
    kwargs = dict(rtol=1e-8, atol=1e-10, sens_x0=True, sens_params=np.arange(4))
    a, b = ours(*args, **kwargs), library(*args, **kwargs)
    assert a[2]["failure"] is None and a[2]["n_steps"] == b[2]["n_steps"] > 0
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


class SpringChain(ODEModel):
    """Masses on springs, each tied to its neighbours, states ordered (x1, v1, x2, v2, ...):
    ``df/dx`` is banded (3 diagonals below, 1 above) and ``I - gamma J`` is not diagonally
    dominant (x_i' = v_i), so the LU pivots inside the band. Stiff for large ``k``."""

    param_names = ("k", "c", "damping")
    default_theta = (400.0, 50.0, 0.5)

    def __init__(self, n_masses=30):
        self.n_masses = n_masses
        self.state_names = tuple(f"{s}{i}" for i in range(n_masses) for s in ("x", "v"))

    def rhs(self, t, x, theta):
        k, c, damping = theta
        pos, vel = x[..., 0::2], x[..., 1::2]
        left = torch.cat([torch.zeros_like(pos[..., :1]), pos[..., :-1]], dim=-1)
        right = torch.cat([pos[..., 1:], torch.zeros_like(pos[..., :1])], dim=-1)
        acc = -k * pos + c * (left - 2 * pos + right) - damping * vel
        return torch.stack([vel, acc], dim=-1).reshape(x.shape)


def _dense_twin(model):
    """The model's CVODES solver with the band set to the whole matrix (the package's
    solver, its band widths overwritten: no compiler needed)."""
    from sklode.models._native import BUNDLED, NativeSolver
    from sklode.models._program import Program
    from sklode.models._tape import encode, tape_library

    if tape_library(BUNDLED / "lib")[0] is None:
        pytest.skip(tape_library(BUNDLED / "lib")[1])
    recorder, x, theta, out = model._pointwise().field.compiled.recording
    n = model.n_states
    tape = encode(Program(recorder, x, theta, out), n, model.n_params)
    assert tape.band != (n - 1, n - 1)
    tape.struct.band_lower = tape.struct.band_upper = n - 1  # the twin is dense
    return NativeSolver(*tape_library(BUNDLED / "lib")[0], n, model.n_params,
                        model.native_solver().param_in_field, (n - 1, n - 1), tape=tape)


@needs_compiler
@pytest.mark.parametrize("model", [Kitchen(), SpringChain(12), MeanField(30), "Hub"],
                         ids=lambda m: m if isinstance(m, str) else type(m).__name__)
def test_the_interpreted_model_solves_as_the_compiled_c_to_the_bit(model):
    # One program, two routes to the same driver: its instructions run by the solver built
    # at install, and C compiled per model. Kitchen has every operation and a switch in
    # time, SpringChain a reordered band, MeanField a dense 30-state Jacobian, Hub (below)
    # a sparse one factored by KLU where the C links the package's SUNDIALS. Equal bits,
    # not a tolerance: the same double operations in the same order (a C compiler's
    # pow(x, 2.0) -> x * x is done for both before either), so any difference is a bug.
    model = Hub(80) if model == "Hub" else model
    field = model._pointwise().field.compiled
    tape, why = native_solver(model, field, route="tape")
    assert tape is not None and tape.route == "tape", why
    c, why = native_solver(model, field, route="c")
    assert c is not None and c.route == "c", why
    assert tape.band == c.band
    if tape.sparse != c.sparse:
        pytest.skip("the C links a SUNDIALS without KLU")
    rng = np.random.default_rng(0)
    theta = np.array(model.default_theta)
    x0 = rng.uniform(0.2, 1.0, model.n_states)
    t = np.linspace(0.1, 8.0, 30)
    kwargs = dict(rtol=1e-8, atol=1e-10, sens_x0=True,
                  sens_params=np.arange(model.n_params))
    a, b = tape(0.0, x0, theta, t, **kwargs), c(0.0, x0, theta, t, **kwargs)
    assert a[2]["failure"] is None and a[2]["n_steps"] == b[2]["n_steps"] > 0
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    for _ in range(20):  # and pointwise, where the checks compare with numpy to 1e-10
        x = rng.normal(size=model.n_states)
        for u, v in zip(tape.evaluate(1.0, x, theta), c.evaluate(1.0, x, theta)):
            np.testing.assert_array_equal(u, v)


@needs_native
def test_banded_lu_gives_the_dense_lu_bit_for_bit():
    from sklode.models._band import band_width, jacobian_band

    model = SpringChain(30)
    banded = model.native_solver()
    # 3 diagonals below and 1 above in the natural order (LU width 8); reverse
    # Cuthill-McKee finds 2 and 2 (width 7), which the C build and the Python side agree on.
    assert banded.band == jacobian_band(model) == (2, 2)
    assert band_width(*banded.band, model.n_states) == 7
    dense = _dense_twin(model)
    rng = np.random.default_rng(0)
    x0 = rng.normal(size=model.n_states)
    theta = np.array(model.default_theta)
    times = np.linspace(0.1, 5.0, 50)
    kwargs = dict(rtol=1e-8, atol=1e-10, sens_x0=True, sens_params=np.arange(3))
    a = banded(0.0, x0, theta, times, **kwargs)
    b = dense(0.0, x0, theta, times, **kwargs)
    # The band LU skips only entries that are structurally zero, in the same order, with
    # the same pivots (partial pivoting over the band's rows, all the nonzero ones): the
    # same arithmetic, so the same numbers to the last bit, states and sensitivities.
    for left, right in zip(a, b):
        if isinstance(left, np.ndarray):
            np.testing.assert_array_equal(left, right)
    assert a[-1]["n_steps"] == b[-1]["n_steps"] > 50  # stiff: many Newton solves ran


@needs_native
def test_auto_takes_cvodes_for_a_wide_banded_model_only():
    from sklode.integrate import AUTO_MAX_STATES, integrator_for, jacobian_band

    wide_banded = SpringChain(AUTO_MAX_STATES)  # 320 states
    assert jacobian_band(wide_banded) == (2, 2)
    assert integrator_for(wide_banded, "auto") == "CVODES"
    # A ring (Lorenz-96: x_{i-2} .. x_{i+1}, cyclic) is dense in its natural order and a band
    # of 5 + 5 once reordered; a mean field is dense in any order, so above the cap it
    # stays on LSODA.
    ring = Lorenz96(AUTO_MAX_STATES + 40)
    assert jacobian_band(ring) == (5, 5)
    assert integrator_for(ring, "auto") == "CVODES"
    dense = MeanField(AUTO_MAX_STATES + 1)
    assert jacobian_band(dense) == (AUTO_MAX_STATES, AUTO_MAX_STATES)
    assert integrator_for(dense, "auto") == "LSODA"
    # Beyond AUTO_MAX_BANDED_STATES the band is not looked for (its pattern would evaluate
    # df/dx densely): LSODA, and no pattern computed.
    from sklode.integrate import AUTO_MAX_BANDED_STATES

    huge = SpringChain(AUTO_MAX_BANDED_STATES // 2 + 1)
    assert integrator_for(huge, "auto") == "LSODA"
    from sklode.models._derived import derived

    assert derived(huge).sparsity is None
    x0 = np.sin(np.arange(ring.n_states))
    times = np.linspace(0.0, 0.5, 11)
    # Half a time unit of Lorenz-96 on both, at rtol 1e-8: measured 2e-8 of the largest
    # state apart; 1e-6 leaves room for the chaos' growth of the tolerance.
    on_cvodes = simulate(ring, [8.0], x0, times)
    on_lsoda = simulate(ring, [8.0], x0, times, integrator="LSODA")
    np.testing.assert_allclose(on_cvodes, on_lsoda, atol=1e-6 * np.abs(on_lsoda).max())
    theta = np.array(wide_banded.default_theta)
    x0 = np.random.default_rng(1).normal(size=wide_banded.n_states)
    times = np.linspace(0.0, 1.0, 11)
    with_cvodes = simulate(wide_banded, theta, x0, times)
    with_lsoda = simulate(wide_banded, theta, x0, times, integrator="LSODA")
    # Both at rtol 1e-8: they agree to a few 1e-7 of the largest state after 1 s of stiff
    # oscillation (measured below 1e-7).
    scale = np.abs(with_lsoda).max()
    np.testing.assert_allclose(with_cvodes, with_lsoda, atol=1e-6 * scale)


def test_compressed_columns_put_every_entry_where_scipy_does():
    from scipy.sparse import coo_matrix

    from sklode.models._band import compressed_columns

    rng = np.random.default_rng(3)
    n = 40
    rows = rng.integers(0, n, 150)
    cols = rng.integers(0, n, 150)
    keep = np.unique(rows * n + cols, return_index=True)[1]  # a pattern lists each once
    rows, cols = rows[keep], cols[keep]
    values = rng.normal(size=rows.size)
    start, row, slot = compressed_columns(rows, cols, n)
    # the pattern with the diagonal always stored, as scipy's CSC orders it
    expected = coo_matrix((np.ones(rows.size + n), (np.r_[rows, np.arange(n)],
                                                    np.r_[cols, np.arange(n)])),
                          shape=(n, n)).tocsc()
    expected.sum_duplicates()
    expected.sort_indices()
    np.testing.assert_array_equal(start, expected.indptr)
    np.testing.assert_array_equal(row, expected.indices)
    data = np.zeros(row.size)
    data[slot] = values
    rebuilt = np.zeros((n, n))
    for j in range(n):
        rebuilt[row[start[j]:start[j + 1]], j] = data[start[j]:start[j + 1]]
    dense = np.zeros((n, n))
    dense[rows, cols] = values
    np.testing.assert_array_equal(rebuilt, dense)


@needs_native
def test_klu_solves_a_sparse_network_as_the_dense_lu_does():
    from sklode.models._native import BUNDLED, NativeSolver
    from sklode.models._program import Program
    from sklode.models._tape import encode, tape_library

    model = Hub(80)
    sparse = model.native_solver()
    if sparse.route == "c" and not sparse.sparse:
        pytest.skip("a system SUNDIALS without KLU")
    assert sparse.sparse and sparse.band[0] > 20  # an arrow: no narrow band in any order
    if tape_library(BUNDLED / "lib")[0] is None:
        pytest.skip(tape_library(BUNDLED / "lib")[1])
    recorder, x, theta, out = model._pointwise().field.compiled.recording
    tape = encode(Program(recorder, x, theta, out), model.n_states, model.n_params, klu=False)
    assert not tape.sparse
    dense = NativeSolver(*tape_library(BUNDLED / "lib")[0], model.n_states,
                         model.n_params, sparse.param_in_field, tape.band, tape=tape)
    theta = np.array(model.default_theta)
    x0 = np.random.default_rng(0).uniform(0.0, 1.0, model.n_states)
    times = np.linspace(0.01, 5.0, 25)
    kwargs = dict(rtol=1e-10, atol=1e-12, sens_params=np.arange(model.n_params))
    a, b = sparse(0.0, x0, theta, times, **kwargs), dense(0.0, x0, theta, times, **kwargs)
    assert a[2]["failure"] is None and a[2]["n_steps"] > 100  # stiff: many Newton solves
    # Two LUs of the same matrices: the Newton iterates differ by rounding only (the same
    # 884 steps); measured 1.2e-13 of the largest state, 8.9e-13 of the largest
    # sensitivity. 1e-10 (the tolerance) would still catch a wrong entry or pivot.
    np.testing.assert_allclose(a[0], b[0], rtol=0, atol=1e-10 * np.abs(b[0]).max())
    np.testing.assert_allclose(a[1], b[1], rtol=0, atol=1e-10 * np.abs(b[1]).max())
    on_lsoda = simulate(model, theta, x0, times, t0=0.0, integrator="LSODA", rtol=1e-10,
                        atol=1e-12)
    # and the solution itself: LSODA at the same tolerance, 8.4e-10 of the largest state
    # apart (measured); 1e-7 is LSODA's global error at rtol 1e-10 with room
    np.testing.assert_allclose(a[0], on_lsoda, rtol=0, atol=1e-7 * np.abs(on_lsoda).max())


@needs_native
def test_auto_takes_cvodes_with_klu_for_a_large_sparse_network():
    from sklode.integrate import AUTO_MAX_STATES, integrator_for

    model = Hub(AUTO_MAX_STATES + 40)  # above the dense LU's cap, no narrow band
    native = model.native_solver()
    if native.route == "c" and not native.sparse:
        pytest.skip("a system SUNDIALS without KLU")
    assert native.sparse
    assert integrator_for(model, "auto") == "CVODES"
    # while a mean field, dense in any order, stays on LSODA (KLU would only add its
    # bookkeeping to a dense factorisation)
    assert integrator_for(MeanField(AUTO_MAX_STATES + 1), "auto") == "LSODA"


@needs_native
def test_a_klu_networks_gradient_by_cvodes_adjoint_equals_central_differences():
    # A network whose Newton solves use KLU takes its gradient from CVODES' own adjoint
    # (KLU on -J^T), not from the collocation adjoint on LSODA's trajectory: checked here
    # against central differences of the cost.
    from sklode import Experiment
    from sklode._validation import check_experiments
    from sklode.outputerror._pose import objective_for_experiments

    model = Hub(80)
    if not model.native_solver().sparse:
        pytest.skip("a system SUNDIALS without KLU")
    theta = np.array(model.default_theta)
    x0 = np.random.default_rng(0).uniform(0.0, 1.0, model.n_states)
    t = np.linspace(0.1, 3.0, 12)
    Y = simulate(model, theta, x0, t, t0=0.0, rtol=1e-10, atol=1e-12)
    Y = Y * (1 + 0.02 * np.random.default_rng(1).standard_normal(Y.shape))
    data = check_experiments([Experiment(t, Y, x0=x0, t0=0.0)], None, model=model,
                             estimate_x0=False, estimator_name="test")
    objective, u = objective_for_experiments(model, data, theta0=theta * 1.2,
                                             integrator="auto", rtol=1e-10, atol=1e-12)
    value, grad = objective.value_and_grad(u, "adjoint")
    traj = objective.parts[0]._evaluate(u)[0]
    assert traj.native_sparse and traj.native_adjoint is not None
    h = 1e-5
    differences = np.array([
        (objective.value_and_grad(u + h * e, "forward")[0]
         - objective.value_and_grad(u - h * e, "forward")[0]) / (2 * h)
        for e in np.eye(u.size)])
    # central differences of a cost solved at rtol 1e-10: truncation h^2 ~ 1e-10 and the
    # solver's noise / h ~ 1e-5 of the gradient's scale at most (measured 7.1e-7)
    np.testing.assert_allclose(grad, differences, rtol=1e-5, atol=1e-5 * np.abs(grad).max())


class PulsedHub(Hub):
    """:class:`Hub` whose ligands are made only between t = 1 and t = 2 (two switches at
    constant times), its receptor read through a scale only the observation reads."""

    param_names = Hub.param_names + ("scale",)
    default_theta = Hub.default_theta + (2.0,)
    observable_names = ("receptor_signal",)

    def rhs(self, t, x, theta):
        k_on, k_off, make, lose = theta[0], theta[1], theta[2], theta[3]
        pulse = (torch.where(t >= 1.0, 1.0, 0.0) - torch.where(t >= 2.0, 1.0, 0.0))[..., None]
        receptor, ligands = x[..., :1], x[..., 1:]
        weights = torch.linspace(0.5, 1.5, ligands.shape[-1], dtype=x.dtype)
        bound = k_on * weights * receptor * ligands - k_off * (1.0 - ligands)
        d_ligands = -bound + (0.2 + make * pulse) * weights - lose * ligands
        d_receptor = -bound.mean(dim=-1, keepdim=True) + make - lose * receptor
        return torch.cat([d_receptor, d_ligands], dim=-1)

    def observe(self, t, x, theta):
        return theta[4] * x[..., :1]


@needs_native
@pytest.mark.parametrize("model", [SpringChain(12), MeanField(30), "Hub"],
                         ids=["banded", "dense", "klu"])
def test_cvodes_adjoint_equals_its_forward_sensitivities(model):
    # The gradient of sum_k jumps_k . x(t_k) by CVODES' adjoint (one backward solve) against
    # the same sum of CVODES' forward sensitivities, on a banded, a dense and a KLU system
    model = Hub(80) if model == "Hub" else model
    solver = model.native_solver()
    theta = np.array(model.default_theta, dtype=float)
    rng = np.random.default_rng(0)
    x0 = rng.uniform(0.2, 1.0, model.n_states)
    times = np.linspace(0.0, 3.0, 13)  # the first at t0: lambda's jump there, no solve
    jumps = rng.normal(size=(times.size, model.n_states))
    tight = dict(rtol=1e-10, atol=1e-12)
    states, S, _ = solver(0.0, x0, theta, times, sens_x0=True,
                          sens_params=np.arange(model.n_params), **tight)
    after = times > 0.0
    states_adjoint, g_x0, g_theta, info = solver.adjoint(0.0, x0, theta, times[after],
                                                         jumps[after], **tight)
    assert info["failure"] is None
    # the forward pass is the same solve: the same steps, the same states to the bit
    np.testing.assert_array_equal(states_adjoint, states[after])
    expected = np.einsum("ka,kaq->q", jumps, S)
    got = np.concatenate([g_x0 + jumps[0], g_theta])
    # two discretisations of the same derivative, each within ~rtol of it: measured
    # 1.3e-8 (banded), 3.3e-10 (dense), 1.3e-8 (KLU) of the largest component
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())


@needs_native
def test_cvodes_adjoint_solves_in_segments_between_time_switches():
    # A pulse switched on and off at constant times: the adjoint runs between the switch
    # times (the switches held inside each segment), its gradient in each segment's start
    # carried back as the earlier segment's last jump
    from sklode.outputerror._sensitivity import forward_trajectory

    model = PulsedHub(40)
    solver = model.native_solver()
    np.testing.assert_array_equal(np.sort(solver.switch_times), [1.0, 2.0])
    theta = np.array(model.default_theta)
    x0 = np.random.default_rng(2).uniform(0.0, 1.0, model.n_states)
    t = np.array([0.0, 0.5, 1.0, 1.5, 2.5, 3.0])  # one observation on a switch time
    traj = forward_trajectory(model, theta, x0, 0.0, t, integrator="CVODES", rtol=1e-10,
                              atol=1e-12)
    assert traj.native_adjoint is not None
    jumps = np.random.default_rng(3).normal(size=(t.size, model.n_states))
    expected = np.einsum("ka,kaq->q", jumps, traj.native(True))
    got = np.concatenate(traj.native_adjoint(jumps))
    # as above (measured 1.3e-10); a jump in the field the segments missed would be off
    # by the pulse's whole effect, O(1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6 * np.abs(expected).max())


@needs_native
def test_experiments_sharing_a_solve_share_one_backward_solve(monkeypatch):
    # Three experiments of one network read through different scales (a parameter only the
    # observation reads): one forward solve and one backward solve for all three, whose
    # gradient equals J^T r from forward sensitivities
    from sklode import Experiment
    from sklode._validation import check_experiments
    from sklode.models._native import NativeSolver
    from sklode.outputerror._pose import objective_for_experiments

    model = PulsedHub(80)
    if not model.native_solver().sparse:
        pytest.skip("a system SUNDIALS without KLU")
    theta = np.array(model.default_theta)
    x0 = np.random.default_rng(0).uniform(0.0, 1.0, model.n_states)
    rng = np.random.default_rng(4)
    experiments = []
    for k, scale in enumerate((1.5, 2.0, 3.0)):
        t = np.linspace(0.2 + 0.1 * k, 3.0, 9)
        y = scale * simulate(model, theta, x0, t, t0=0.0, rtol=1e-10, atol=1e-12)[:, :1]
        experiments.append(Experiment(t, y * (1 + 0.05 * rng.standard_normal(y.shape)), x0=x0,
                                      t0=0.0, conditions={"scale": scale}))
    data = check_experiments(experiments, None, model=model, estimate_x0=False,
                             estimator_name="test")
    fitted = np.array([True, True, True, True, False])
    objective, u = objective_for_experiments(model, data, theta0=theta * 1.1, fitted=fitted,
                                             integrator="auto", rtol=1e-10, atol=1e-12)
    parts = objective.parts
    assert parts[0].shared_solve is parts[1].shared_solve is parts[2].shared_solve
    calls = []
    adjoint = NativeSolver.adjoint
    monkeypatch.setattr(NativeSolver, "adjoint",
                        lambda self, *a, **k: calls.append(a[0]) or adjoint(self, *a, **k))
    value, grad = objective.value_and_grad(u, "adjoint")
    assert calls == [2.0, 1.0, 0.0]  # one backward solve a segment, for the three
    value_forward, grad_forward = objective.value_and_grad(u, "forward")
    assert value == value_forward
    # the adjoint and the forward sensitivities at rtol 1e-10 (measured 2e-8)
    np.testing.assert_allclose(grad, grad_forward, rtol=1e-6,
                               atol=1e-6 * np.abs(grad_forward).max())

    # where CVODES' backward solve fails, the forward sensitivities give the gradient
    def failing(self, *args, **kwargs):
        raise IntegrationError("the backward solve failed")

    monkeypatch.setattr(NativeSolver, "adjoint", failing)
    moved = u * 1.01  # (a new point: no cached solve)
    _, grad_fallback = objective.value_and_grad(moved, "adjoint")
    _, grad_moved = objective.value_and_grad(moved, "forward")
    np.testing.assert_allclose(grad_fallback, grad_moved, rtol=1e-10,
                               atol=1e-10 * np.abs(grad_moved).max())
