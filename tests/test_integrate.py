"""simulate(): accuracy against closed forms, any output times, stiff integrators, failures."""

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose
from scipy.linalg import expm

from sklode import IntegrationError, ODEModel, simulate
from sklode.integrate import INTEGRATORS
from sklode.models import LotkaVolterra


class Linear2(ODEModel):
    """x' = A x with A = [[a, b], [-b, a]]: closed form expm(A t) x0."""

    state_names = ("u", "v")
    param_names = ("a", "b")

    def rhs(self, t, x, theta):
        a, b = theta
        return torch.stack([a * x[..., 0] + b * x[..., 1], -b * x[..., 0] + a * x[..., 1]], -1)


class StiffDecay(ODEModel):
    """u' = -k (u - cos t): stiff for large k; solution tracks cos t."""

    state_names = ("u",)
    param_names = ("k",)

    def rhs(self, t, x, theta):
        return -theta[0] * (x - torch.cos(t)[..., None])


class Explodes(ODEModel):
    """u' = u^2: blows up at t = 1/u0."""

    state_names = ("u",)
    param_names = ("k",)

    def rhs(self, t, x, theta):
        return theta[0] * x**2


def exact_linear(theta, x0, t, t0):
    A = np.array([[theta[0], theta[1]], [-theta[1], theta[0]]])
    return np.array([expm(A * (s - t0)) @ x0 for s in t])


@pytest.mark.parametrize("integrator", sorted(INTEGRATORS))
def test_matches_matrix_exponential_for_every_integrator(integrator):
    theta, x0 = np.array([-0.3, 2.0]), np.array([1.0, -0.5])
    t = np.linspace(0, 5, 30)
    X = simulate(Linear2(), theta, x0, t, integrator=integrator, rtol=1e-10, atol=1e-12)
    # Global error of an adaptive solver is a modest multiple of rtol; 1e-7 leaves margin
    # for the low-order RK23 at rtol=1e-10.
    assert_allclose(X, exact_linear(theta, x0, t, 0.0), atol=1e-7)


def test_unsorted_repeated_and_backward_times():
    theta, x0, t0 = np.array([-0.3, 2.0]), np.array([1.0, -0.5]), 1.0
    t = np.array([3.0, -1.0, 1.0, 0.5, 3.0, 2.2, -1.0])
    X = simulate(Linear2(), theta, x0, t, t0=t0, integrator="DOP853", rtol=1e-11, atol=1e-13)
    # Tight tolerances: only the solver's own error (~1e-10) remains.
    assert_allclose(X, exact_linear(theta, x0, t, t0), atol=1e-9)
    assert_allclose(X[0], X[4], rtol=0)  # repeated time -> identical rows
    assert_allclose(X[2], x0, rtol=0)  # t0 itself returns x0 exactly


def test_stiff_problem_with_stiff_integrator_uses_few_steps():
    k = 1e5
    t = np.linspace(0, 2, 11)
    X = simulate(StiffDecay(), [k], [1.0], t, integrator="BDF", rtol=1e-8, atol=1e-10)
    # After the initial layer (width 1/k) u = cos t + O(1/k) (the slow manifold).
    assert_allclose(X[1:, 0], np.cos(t[1:]), atol=5 / k)


def test_blow_up_raises_with_time_reached():
    with pytest.raises(IntegrationError, match="blew up") as info:
        simulate(Explodes(), [1.0], [1.0], [0.0, 2.0], integrator="RK45")
    # The exact blow-up time is 1/u0 = 1; the 1e8 threshold is reached 1e-8 before it.
    assert 0.99 < info.value.t_reached <= 1.0


class DrainsFromLevel(ODEModel):
    """q' = -r q from q(0) = c, integrated as the displacement u = q - c from u(0) = 0
    (how a PEtab import integrates an initial amount that is a parameter)."""

    state_names = ("u",)
    param_names = ("r", "c")

    def rhs(self, t, x, theta):
        return -theta[0] * (x + theta[1])

    def state_offsets(self, theta):
        return np.array([theta[1]])


@pytest.mark.parametrize("integrator", ["LSODA", "CVODES"])
def test_a_displacement_from_a_large_level_is_not_a_blow_up(integrator):
    # u falls from 0 to -3e9, 1e8 times past max(1, |x0|): the guard counts from the level
    X = simulate(DrainsFromLevel(), [1.0, 3e9], [0.0], [0.0, 20.0], integrator=integrator)
    # q(20) = c e^-20 = 6.2: u = -c to 2e-9 relative, within the solve's tolerance
    assert X[-1, 0] == pytest.approx(-3e9, rel=1e-6)
    with pytest.raises(IntegrationError, match="blew up"):  # the guard still works
        simulate(Explodes(), [3e9], [1.0], [0.0, 1.0], integrator=integrator)


def test_non_finite_rhs_raises_integration_error():
    with pytest.raises(IntegrationError, match="non-finite|blew up"):
        simulate(LotkaVolterra(), [np.inf, 1, 1, 1], [1.0, 1.0], [0.0, 1.0])


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"x0 has 3 entries but LotkaVolterra\(\) has 2 states"):
        simulate(LotkaVolterra(), [1, 1, 1, 1], [1, 2, 3], [0, 1])
    with pytest.raises(ValueError, match="theta has 2 entries"):
        simulate(LotkaVolterra(), [1, 1], [1, 2], [0, 1])
    with pytest.raises(ValueError, match="integrator must be one of"):
        simulate(LotkaVolterra(), [1, 1, 1, 1], [1, 2], [0, 1], integrator="euler")
    with pytest.raises(ValueError, match="non-finite"):
        simulate(LotkaVolterra(), [1, 1, 1, 1], [1, 2], [0, np.nan])


def test_integrator_names_are_case_insensitive():
    a = simulate(LotkaVolterra(), [2, 1, 4, 1], [5, 3], [0, 1], integrator="bdf")
    b = simulate(LotkaVolterra(), [2, 1, 4, 1], [5, 3], [0, 1], integrator="BDF")
    assert_allclose(a, b, rtol=0)


def test_evaluation_budget_stops_a_crawling_solve():
    """A solve that needs more vector-field evaluations than allowed raises, naming why."""
    from sklode.integrate import solve
    from sklode.models import LotkaVolterra

    with pytest.raises(IntegrationError, match="more than 50 evaluations"):
        solve(LotkaVolterra(), [2, 1, 4, 1], [5, 3], (0.0, 20.0), max_evaluations=50)
    sol = solve(LotkaVolterra(), [2, 1, 4, 1], [5, 3], (0.0, 1.0), max_evaluations=100_000)
    assert sol.status == 0


@pytest.mark.parametrize("integrator", ["LSODA", "Radau", "RK45"])
def test_batched_initial_states_match_separate_solves(integrator):
    from sklode.integrate import solve

    model = LotkaVolterra()
    theta = [2.0, 1.0, 4.0, 1.0]
    X0 = np.array([[5.0, 3.0], [4.0, 2.0], [1.0, 1.0]])
    t_eval = np.linspace(0, 2, 9)
    batch = solve(model, theta, X0, (0.0, 2.0), t_eval=t_eval, integrator=integrator,
                  rtol=1e-10, atol=1e-12).y.reshape(3, 2, -1)
    for k, x0 in enumerate(X0):
        alone = solve(model, theta, x0, (0.0, 2.0), t_eval=t_eval, integrator=integrator,
                      rtol=1e-10, atol=1e-12).y
        # Different step sequences, both at rtol 1e-10: agreement to ~1e-8 relative.
        assert_allclose(batch[k], alone, rtol=1e-7)


def test_the_dense_solve_stepped_here_equals_solve_ivps():
    # integrate.solve falls back to stepping scipy's solver itself when LSODA takes a step
    # of length zero (scipy's OdeSolution refuses it: Isensee_JCB2018's moving switch); on
    # an ordinary problem both give the same steps, values and dense output
    from scipy.integrate import solve_ivp

    from sklode.integrate import _solve_ivp_dense

    def fun(t, x):
        return np.array([-0.5 * x[0] + np.sin(t), x[0] - 0.1 * x[1]])

    t_eval = np.linspace(0.0, 5.0, 11)
    ours = _solve_ivp_dense(fun, (0.0, 5.0), np.array([1.0, 0.0]), "LSODA", t_eval,
                            rtol=1e-8, atol=1e-10)
    theirs = solve_ivp(fun, (0.0, 5.0), [1.0, 0.0], method="LSODA", t_eval=t_eval,
                       rtol=1e-8, atol=1e-10, dense_output=True)
    # the same solver, steps and interpolants: equal to rounding
    np.testing.assert_allclose(ours.y, theirs.y, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(ours.sol.ts, theirs.sol.ts)
    assert ours.status == 0 and ours.nfev == theirs.nfev
