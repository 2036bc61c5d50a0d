"""Experiments that start from a steady state (pre-equilibration): the start moves with the
parameters, and the fit follows it through the steady state's sensitivities."""

import warnings

import numpy as np
import pytest
import torch

from sklode import AdjointODE, Experiment, ODEModel
from sklode.outputerror._steady_state import steady_state


class Inflow(ODEModel):
    """x' = u - k x: at rest x = u / k."""

    state_names = ("x",)
    param_names = ("u", "k")

    def rhs(self, t, x, theta):
        return theta[0] - theta[1] * x


def _data(k=0.5, noise=0.02, seed=0):
    t = np.linspace(0.5, 10, 20)
    # rested at u = 1 (x = 1/k), then u = 2: x(t) = 2/k + (1/k - 2/k) exp(-k t)
    clean = 2 / k + (1 / k - 2 / k) * np.exp(-k * t)
    y = clean + noise * np.random.default_rng(seed).standard_normal(t.size)
    return Experiment(t, y[:, None], x0=[0.0], t0=0.0, conditions={"u": 2.0},
                      preequilibration={"x0": [0.0], "conditions": {"u": 1.0}})


def test_the_steady_state_and_its_sensitivity():
    x, S = steady_state(Inflow(), np.array([1.0, 0.5]), np.array([0.0]),
                        with_sensitivities=True)
    # x_ss = u / k = 2, dx/du = 1/k = 2, dx/dk = -u/k^2 = -4; to the integration's tolerance
    np.testing.assert_allclose(x, [2.0], rtol=1e-8)
    np.testing.assert_allclose(S, [[2.0, -4.0]], rtol=1e-5)


def test_a_fit_follows_the_start_through_the_steady_state():
    est = AdjointODE(Inflow(), theta0=[1.0, 0.8], fixed={"u": 1.0}, estimate_x0=False,
                     sigma=0.02)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit([_data()])
    # 20 values at 2 % noise: k within 2 % of 0.5 (several standard errors)
    assert est.theta_[1] == pytest.approx(0.5, rel=0.02)
    # the reported start is the steady state at the fitted k
    assert est.x0_[0, 0] == pytest.approx(1.0 / est.theta_[1], rel=1e-6)
    assert est.converged_


def test_the_gradient_through_the_steady_state_matches_finite_differences():
    from sklode._validation import check_experiments
    from sklode.outputerror._pose import objective_for_experiments

    model = Inflow()
    data = check_experiments([_data()], None, model=model, estimate_x0=False,
                             warn_initial_time=False)
    objective, u0 = objective_for_experiments(model, data, theta0=np.array([1.0, 0.6]),
                                              fitted=np.array([False, True]))
    _, grad = objective.value_and_grad(u0, "adjoint")
    J = objective.jacobian(u0)
    h = 1e-6
    numeric = (objective.cost(u0 + h) - objective.cost(u0 - h)) / (2 * h)
    # central difference of a smooth cost: 1e-5 relative
    assert grad[0] == pytest.approx(numeric, rel=1e-5)
    assert (J.T @ objective.residual(u0))[0] == pytest.approx(numeric, rel=1e-5)


def test_a_bad_preequilibration_is_refused():
    with pytest.raises(ValueError, match="preequilibration"):
        AdjointODE(Inflow(), estimate_x0=False).fit(
            [Experiment([1.0, 2.0], [[1.0], [1.2]], x0=[0.0], t0=0.0,
                        preequilibration={"start": [0.0]})])


class InflowWithUnread(ODEModel):
    """Inflow with a parameter the field does not read (an observable's scale, in PEtab)."""

    state_names = ("x",)
    param_names = ("u", "k", "unread")

    def rhs(self, t, x, theta):
        return theta[0] - theta[1] * x


@pytest.mark.parametrize("integrator", ["LSODA", "CVODES"])
def test_experiments_share_their_pre_equilibration(integrator, monkeypatch):
    # Three experiments rested at u = 1 and then stimulated at u = 2, 3, 1.5, each with its
    # own value of a parameter the field does not read: the fit's residual and Jacobian are
    # those of the experiments posed one by one, bit for bit, with one steady state per
    # evaluation.
    import sklode.outputerror._steady_state as steady
    from sklode._validation import check_experiments
    from sklode.outputerror._pose import objective_for_experiments

    model = InflowWithUnread()
    experiments = []
    for level, unread in ((2.0, 0.1), (3.0, 0.2), (1.5, 0.3)):
        base = _data()
        experiments.append(Experiment(
            base.t, base.Y, x0=[0.0], t0=0.0, conditions={"u": level, "unread": unread},
            preequilibration={"x0": [0.0], "conditions": {"u": 1.0, "unread": unread}}))

    def posed(chosen):
        data = check_experiments(chosen, None, model=model, estimate_x0=False,
                                 warn_initial_time=False)
        return objective_for_experiments(model, data, theta0=np.array([1.0, 0.6, 0.0]),
                                         fitted=np.array([False, True, False]),
                                         integrator=integrator)

    calls = []
    for name in ("steady_state", "steady_state_sensitivities"):
        original = getattr(steady, name)
        monkeypatch.setattr(steady, name, lambda *args, _f=original, **kwargs:
                            calls.append(1) or _f(*args, **kwargs))
    objective, u0 = posed(experiments)
    u = u0 * 1.1
    r, J = objective.residual(u), objective.jacobian(u)
    shared_calls = len(calls)
    alone = [posed([e]) for e in experiments]
    n = experiments[0].Y.size
    for k, (part, v0) in enumerate(alone):
        np.testing.assert_array_equal(r[k * n:(k + 1) * n], part.residual(v0 * 1.1))
        np.testing.assert_array_equal(J[k * n:(k + 1) * n], part.jacobian(v0 * 1.1))
    # the residual's steady state, then its sensitivities: once for all three
    # (the field's parameters come from its recorded program, whatever the integrator)
    assert shared_calls == 2


def test_replicates_of_a_pre_equilibrated_condition_share_one_solve(monkeypatch):
    # PEtab splits a condition into experiments by replicate (Weber et al. 2015: nine
    # experiments, two distinct solves): the same rest, the same stimulus, another value of
    # a parameter the field does not read, other times. One CVODES solve (and one with
    # sensitivities) per evaluation serves the two replicates; the third experiment, a
    # different stimulus, has its own
    import sklode.outputerror._experiments as experiments_module
    import sklode.outputerror._objective as objective_module
    from sklode._validation import check_experiments
    from sklode.models._native import native_unavailable_reason
    from sklode.outputerror._pose import objective_for_experiments

    if native_unavailable_reason() is not None:
        pytest.skip(native_unavailable_reason())
    model = InflowWithUnread()
    base = _data()
    experiments = [
        Experiment(base.t[::2], base.Y[::2], x0=[0.0], t0=0.0,
                   conditions={"u": 2.0, "unread": 0.1},
                   preequilibration={"x0": [0.0], "conditions": {"u": 1.0}}),
        Experiment(base.t[1::2], base.Y[1::2], x0=[0.0], t0=0.0,
                   conditions={"u": 2.0, "unread": 0.2},
                   preequilibration={"x0": [0.0], "conditions": {"u": 1.0}}),
        Experiment(base.t, base.Y * 1.4, x0=[0.0], t0=0.0,
                   conditions={"u": 3.0, "unread": 0.3},
                   preequilibration={"x0": [0.0], "conditions": {"u": 1.0}})]
    solves = []
    original = objective_module.forward_trajectory
    for module in (objective_module, experiments_module):  # one experiment's, shared ones
        monkeypatch.setattr(module, "forward_trajectory",
                            lambda *a, **k: solves.append(1) or original(*a, **k))
    results = {}
    for share in (True, False):
        if not share:
            monkeypatch.setattr(experiments_module, "_share_solves", lambda parts: None)
        data = check_experiments(experiments, None, model=model, estimate_x0=False,
                                 warn_initial_time=False)
        objective, u0 = objective_for_experiments(
            model, data, theta0=np.array([1.0, 0.6, 0.0]),
            fitted=np.array([False, True, False]), integrator="CVODES", rtol=1e-11,
            atol=1e-12)
        solves.clear()
        u = u0 * 1.1
        results[share] = objective.residual(u), objective.jacobian(u)
        assert len(solves) == (2 if share else 3)
        if share:
            parts = objective.parts
            assert parts[0].shared_solve is parts[1].shared_solve
            assert parts[2].shared_solve is None
    # the replicates' solve on the union of their times instead of each one's own: equal
    # to the integration error at 1e-11
    np.testing.assert_allclose(results[True][0], results[False][0], rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(results[True][1], results[False][1], rtol=1e-7, atol=1e-8)


def test_a_start_already_at_rest_still_has_its_steady_states_derivative():
    # From x0 = u / k nothing moves, so forward sensitivities along the (empty) integration
    # are zero; the steady state still moves with u and k: dx/du = 1/k, dx/dk = -u/k^2.
    # The implicit function theorem gives them exactly (to round-off of a 1x1 solve).
    x, S = steady_state(Inflow(), np.array([1.0, 0.5]), np.array([2.0]),
                        with_sensitivities=True)
    np.testing.assert_allclose(S, [[2.0, -4.0]], rtol=1e-12)


class Isomerisation(ODEModel):
    """A <-> B: A + B is conserved, so df/dx is singular at every state."""

    state_names = ("A", "B")
    param_names = ("k1", "k2")

    def rhs(self, t, x, theta):
        flux = theta[0] * x[..., 0] - theta[1] * x[..., 1]
        return torch.stack([-flux, flux], dim=-1)


def test_steady_state_sensitivities_hold_the_conserved_total():
    # At rest A = T k2 / (k1 + k2), B = T k1 / (k1 + k2) with T = A0 + B0 = 3: the
    # derivatives in closed form, exact to the steady state's own tolerance (1e-10 of x)
    k1, k2, total = 0.7, 0.4, 3.0
    x, S = steady_state(Isomerisation(), np.array([k1, k2]), np.array([1.0, 2.0]),
                        with_sensitivities=True)
    s = k1 + k2
    np.testing.assert_allclose(x, [total * k2 / s, total * k1 / s], rtol=1e-9)
    dA = np.array([-total * k2 / s**2, total * k1 / s**2])
    np.testing.assert_allclose(S, np.vstack([dA, -dA]), rtol=1e-8)


class CubicRest(ODEModel):
    """x' = -(x - c)^3: at rest x = c, where df/dx = 0 and df/dc = 0 (not a conservation)."""

    state_names = ("x",)
    param_names = ("c",)

    def rhs(self, t, x, theta):
        return -((x - theta[0]) ** 3)


def test_a_singular_jacobian_that_is_no_conservation_law_falls_back():
    # J = 0 and f_theta = 0 at the rest point look like a conserved x; at a second state
    # they do not vanish, so the implicit path declines (the integrated one is used)
    from sklode.outputerror._steady_state import _implicit_sensitivities

    assert _implicit_sensitivities(CubicRest(), np.array([1.0]), np.array([1.0])) is None
    S = _implicit_sensitivities(Isomerisation(), np.array([0.7, 0.4]),
                                np.array([3 * 0.4 / 1.1, 3 * 0.7 / 1.1]))
    assert S is not None
