"""The compiled pointwise field: equal to the torch field, or not used at all."""

import pickle

import numpy as np
import pytest
import torch

from sklode import AdjointODE, simulate
from sklode.datasets import make_trajectory
from sklode.models import (
    SEIRD,
    FitzHughNagumo,
    FitzHughNagumoLinear,
    FunctionModel,
    HindmarshRose,
    LogisticGrowth,
    Lorenz63,
    Lorenz96,
    LotkaVolterra,
    OralAbsorption,
    ProteinTransduction,
    Rossler,
)
from sklode.models._compile import compile_field
from sklode.models._wrappers import HeldParameters, ScaledStates

ZOO = [LotkaVolterra(), FitzHughNagumo(), Rossler(), Lorenz96(8), Lorenz63(), SEIRD(1e5),
       LogisticGrowth(), FitzHughNagumoLinear(), HindmarshRose(), ProteinTransduction(0.3),
       OralAbsorption(), ScaledStates(LotkaVolterra(), np.array([2.0, 3.0]), log=True),
       HeldParameters(SEIRD(), np.array([True, False, True, True]),
                      np.array([1.0, 0.2, 0.3, 0.01]))]


def _points(model, seed=1):
    rng = np.random.default_rng(seed)
    for _ in range(5):
        yield (float(rng.uniform(0, 5)), rng.uniform(0.2, 3.0, model.n_states),
               model.theta_guess() * rng.uniform(0.5, 1.5, model.n_params))


@pytest.mark.parametrize("model", ZOO, ids=lambda m: type(m).__name__)
def test_every_zoo_model_compiles_to_the_same_field_and_jacobian(model):
    compiled = compile_field(model)
    assert compiled is not None and compiled.jacobian is not None
    assert compiled.jacobian_theta is not None
    torch_path = pickle.loads(pickle.dumps(model))
    torch_path._use_torch_path()
    for t, x, theta in _points(model):
        J_theta = torch_path.jac_theta(t, x, theta)  # torch.func's vmap of jacrev
        np.testing.assert_allclose(compiled.jacobian_theta(t, x, theta), J_theta,
                                   rtol=1e-12, atol=1e-13 * np.abs(J_theta).max())
        # The same arithmetic in another order of evaluation: equal to a few ulps of the
        # largest entry (a cancelling entry is 1e-14 in torch and 0 compiled).
        f, J = model.f(t, x, theta), model.jac_x(t, x, theta)
        np.testing.assert_allclose(compiled(t, x, theta), f, rtol=1e-13,
                                   atol=1e-13 * np.abs(f).max())
        np.testing.assert_allclose(compiled.jacobian(t, x, theta), J, rtol=1e-12,
                                   atol=1e-13 * np.abs(J).max())


def _hill(t, x, theta):
    # A user's model with functions and a smooth switch, no Python control flow.
    vmax, k, n, d = theta
    drive = vmax * x[..., 0] ** n / (k**n + x[..., 0] ** n)
    return torch.stack([torch.where(x[..., 1] > 0, drive, 0.0 * drive) - d * x[..., 0],
                        torch.sin(t) * torch.exp(-x[..., 1]) - torch.tanh(x[..., 0])], dim=-1)


def _switch(t, x, theta):
    # Python control flow on a value (the sign of a parameter): a recording would freeze one
    # branch, so the model cannot be compiled.
    if theta[1] > 0:
        return -theta[0] * x + theta[1]
    return -theta[0] * x


def test_a_user_model_compiles_and_value_dependent_control_flow_falls_back():
    hill = FunctionModel(_hill, ("u", "v"), ("vmax", "k", "n", "d"),
                         default_theta=(1.0, 0.5, 2.0, 0.3))
    compiled = compile_field(hill)
    assert compiled is not None and compiled.jacobian is not None
    for t, x, theta in _points(hill):
        np.testing.assert_allclose(compiled(t, x, theta), hill.f(t, x, theta), rtol=1e-13)
        J = hill.jac_x(t, x, theta)
        np.testing.assert_allclose(compiled.jacobian(t, x, theta), J, rtol=1e-12,
                                   atol=1e-13 * np.abs(J).max())
    switch = FunctionModel(_switch, ("a", "b"), ("k", "feed"), default_theta=(1.0, 2.0))
    assert compile_field(switch) is None
    assert switch.pointwise_field() == switch.f  # the torch path, as before
    # ... and solves exactly as before: x' = -k x + feed, so from 0 and 4 both relax to
    # feed / k = 2 as 2 -/+ 2 exp(-k t).
    X = simulate(switch, [0.5, 1.0], [0.0, 4.0], [0.0, 1.0])
    np.testing.assert_allclose(X[1], [2 - 2 * np.exp(-0.5), 2 + 2 * np.exp(-0.5)], rtol=1e-7)


def test_the_compiled_field_is_rebuilt_after_pickling_and_estimates_are_unchanged():
    model = LotkaVolterra()
    assert getattr(model.pointwise_field(), "compiled", None) is not None
    copy = pickle.loads(pickle.dumps(model))
    assert "_derived" not in copy.__dict__  # nothing derived travels with a pickle
    assert getattr(copy.pointwise_field(), "compiled", None) is not None
    d = make_trajectory("lotka_volterra", random_state=0)
    torch_path = LotkaVolterra()
    torch_path._use_torch_path()
    # (on LSODA: the torch path has no C build, so "auto" would give it LSODA and the
    # compiled model CVODES)
    fast = AdjointODE(model, theta0=(2.5, 1.5, 4.5, 1.5), integrator="LSODA").fit(d.t, d.Y)
    slow = AdjointODE(torch_path, theta0=(2.5, 1.5, 4.5, 1.5), integrator="LSODA").fit(d.t,
                                                                                     d.Y)
    # The field agrees to round-off, so the integrator takes the same steps.
    np.testing.assert_allclose(fast.theta_, slow.theta_, rtol=1e-10)


def test_a_model_that_falls_back_still_fits():
    switch = FunctionModel(_switch, ("a", "b"), ("k", "feed"), default_theta=(1.0, 2.0))
    t = np.linspace(0.0, 6.0, 31)
    Y = simulate(switch, [0.5, 1.0], [0.0, 4.0], t)
    est = AdjointODE(switch, theta0=(0.7, 0.8), estimate_x0=False, x0=[0.0, 4.0]).fit(t, Y)
    # Noise-free data on the torch path: the rates to well within the integrator's rtol.
    np.testing.assert_allclose(est.theta_, [0.5, 1.0], rtol=1e-6)


@pytest.mark.parametrize("model", ZOO, ids=lambda m: type(m).__name__)
def test_grid_jacobians_equal_torch_on_nested_grids(model):
    from sklode.models._compile import grid_functions

    grid = grid_functions(model, compile_field(model))
    # Programs of scalar operations get grid code; Lorenz-96 (np.roll on the state vector),
    # logistic growth (theta * x on the whole vector) and the two wrappers (vector scaling,
    # theta scattered into the full vector) are not such programs.
    vector_programs = ("Lorenz96", "LogisticGrowth", "ScaledStates", "HeldParameters")
    assert (grid is None) == (type(model).__name__ in vector_programs)
    if grid is None:
        return
    torch_path = pickle.loads(pickle.dumps(model))
    torch_path._use_torch_path()
    rng = np.random.default_rng(2)
    x = rng.uniform(0.2, 3.0, (4, 3, model.n_states))  # steps x Gauss nodes, as sensitivities
    t = rng.uniform(0, 5, (4, 3))
    theta = model.theta_guess() * rng.uniform(0.5, 1.5, model.n_params)
    for got, expected in zip(
            (grid[0](t, x, theta), model.jac_x(t, x, theta), model.jac_theta(t, x, theta)),
            (torch_path.f(t, x, theta), torch_path.jac_x(t, x, theta),
             torch_path.jac_theta(t, x, theta))):
        # Round-off of a different evaluation order, relative to the largest entry.
        np.testing.assert_allclose(got, expected, rtol=1e-12,
                                   atol=1e-13 * np.abs(expected).max())


@pytest.mark.parametrize("wrt", ["x", "theta"])
@pytest.mark.parametrize("model", ZOO[:4], ids=lambda m: type(m).__name__)
def test_the_projected_check_of_a_jacobian_rejects_one_wrong_entry(model, wrt):
    # the compiled Jacobians are checked as u @ J against one reverse pass (not one per
    # state): a single entry off by 1e-6 of the matrix's scale must still be caught
    from sklode.models._compile import _check, _projected_jacobian, _Unsupported

    compiled = compile_field(model)
    jacobian = compiled.jacobian if wrt == "x" else compiled.jacobian_theta
    reference = _projected_jacobian(model, wrt)
    u = reference.projection
    _check(model, lambda t, x, th: u @ jacobian(t, x, th), reference=reference)
    t, x, theta = next(_points(model))
    J = jacobian(t, x, theta)
    i, k = np.unravel_index(np.argmax(np.abs(J)), J.shape)

    def wrong(t, x, th):
        out = jacobian(t, x, th).copy()
        out[i, k] *= 1 + 1e-6
        return u @ out

    with pytest.raises(_Unsupported):
        _check(model, wrong, reference=reference)
