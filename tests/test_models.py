"""ODEModel: user models, derived Jacobians and VJPs, the affine split, validation messages."""

import pickle

import numpy as np
import pytest
import torch
from numpy.testing import assert_allclose

from sklode import ModelError, NotLinearInThetaError, ODEModel
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
    ProteinTransduction,
    Rossler,
    check_model,
)


class SIR(ODEModel):
    """The user-defined model of the issue, written exactly as a user would."""

    state_names = ("S", "I")
    param_names = ("beta", "gamma")

    def rhs(self, t, x, theta):
        S, I = x[..., 0], x[..., 1]  # noqa: E741
        beta, gamma = theta
        return torch.stack([-beta * S * I, beta * S * I - gamma * I], dim=-1)


def sir_numpy(x, theta):
    S, I = x[:, 0], x[:, 1]  # noqa: E741
    return np.stack([-theta[0] * S * I, theta[0] * S * I - theta[1] * I], axis=1)


def decay_rhs(t, x, theta):
    return -theta[0] * x


ZOO = [LotkaVolterra(), FitzHughNagumo(), Rossler(), Lorenz96(6), Lorenz96(5, True), SEIRD(),
       Lorenz63(), LogisticGrowth(), FitzHughNagumoLinear(), HindmarshRose(), ProteinTransduction()]


def zoo_point(model, rng, n=5):
    """Random positive states (ProteinTransduction's Rpp/(Km+Rpp) needs Rpp > -Km)."""
    return rng.uniform(0.2, 2.0, (n, model.n_states))


def test_user_model_on_a_grid_equals_handwritten_numpy(rng):
    x = rng.uniform(0, 1, (50, 2))
    theta = np.array([0.7, 0.2])
    # Same arithmetic in float64 on both sides: agreement to rounding.
    assert_allclose(SIR().f(np.linspace(0, 1, 50), x, theta), sir_numpy(x, theta), rtol=1e-14)


@pytest.mark.parametrize("model", ZOO, ids=repr)
def test_jac_x_equals_central_differences(model, rng):
    x = zoo_point(model, rng)
    theta = model.theta_guess() + 0.1
    J = model.jac_x(0.3, x, theta)
    h = 1e-6
    fd = np.empty_like(J)
    for j in range(model.n_states):
        e = np.zeros(model.n_states)
        e[j] = h
        fd[..., j] = (model.f(0.3, x + e, theta) - model.f(0.3, x - e, theta)) / (2 * h)
    # Central differences have O(h^2) truncation and ~eps/h rounding: 1e-7 relative is safe.
    assert_allclose(J, fd, rtol=1e-7, atol=1e-7)


@pytest.mark.parametrize("model", ZOO, ids=repr)
def test_jac_theta_equals_central_differences(model, rng):
    x = zoo_point(model, rng)
    theta = model.theta_guess() + 0.1
    J = model.jac_theta(0.0, x, theta)
    h = 1e-6
    for k in range(model.n_params):
        e = np.zeros(model.n_params)
        e[k] = h
        fd = (model.f(0.0, x, theta + e) - model.f(0.0, x, theta - e)) / (2 * h)
        assert_allclose(J[..., k], fd, rtol=1e-7, atol=1e-7)  # as above: FD error, not ours


@pytest.mark.parametrize("model", ZOO, ids=repr)
def test_curvature_x_equals_nested_forward_mode(model, rng):
    x = zoo_point(model, rng)
    theta = model.theta_guess() + 0.1
    weights = rng.uniform(0.5, 2.0, model.n_states)
    weights[0] = 0.0  # a zero weight skips that state
    curvature = model.curvature_x(0.3, x, theta, weights)
    xt, tt = torch.from_numpy(x), torch.full(x.shape[:-1], 0.3, dtype=torch.float64)
    expected = torch.zeros_like(xt)
    for state in range(1, model.n_states):
        e = torch.zeros_like(xt)
        e[:, state] = 1.0

        def slope(y, e=e):
            return torch.func.jvp(lambda z: model.rhs(tt, z, torch.from_numpy(theta)), (y,),
                                  (e,))[1]

        expected += weights[state] * torch.func.jvp(slope, (xt,), (e,))[1]
    # Two exact derivative computations (reverse over reverse vs forward over forward).
    assert_allclose(curvature, expected.detach().numpy(), rtol=1e-10, atol=1e-12)


def _half_linear(t, x, theta):
    return torch.stack([theta[0] * x[..., 0], x[..., 0] ** 2 + x[..., 1]], dim=-1)


def test_curvature_x_of_fields_affine_in_x_is_zero(rng):
    x = rng.standard_normal((4, 2))
    decay = FunctionModel(decay_rhs, ("x",), ("k",))
    assert_allclose(decay.curvature_x(0.0, x[:, :1], [0.5], [1.0]), 0.0, atol=0)
    # Only x0^2 is curved: d^2/dx0^2 = 2 in the second component, weighted by 3.
    model = FunctionModel(_half_linear, ("x", "y"), ("k",))
    expected = np.column_stack([np.zeros(4), np.full(4, 6.0)])
    assert_allclose(model.curvature_x(0.0, x, [0.5], [3.0, 1.0]), expected, rtol=1e-14)


def test_curvature_x_is_the_noise_mean_of_a_cubic_field():
    # FitzHugh-Nagumo's u1^3 term: E[(u + e)^3] - u^3 = 3 sigma^2 u, i.e. half the curvature.
    model = FitzHughNagumoLinear()
    x = np.array([[0.7, -0.2], [-1.3, 0.4]])
    theta = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])  # f1 = u1^3, f2 = 0
    sigma2 = np.array([0.04, 0.09])
    half = 0.5 * model.curvature_x(0.0, x, theta, sigma2)
    assert_allclose(half[:, 0], 3 * sigma2[0] * x[:, 0], rtol=1e-14)  # exact arithmetic
    assert_allclose(half[:, 1], 0.0, atol=1e-15)


@pytest.mark.parametrize("model", [LotkaVolterra(), Lorenz96(7), FitzHughNagumo()], ids=repr)
def test_vjp_equals_transposed_jacobians(model, rng):
    x = zoo_point(model, rng)
    theta = model.theta_guess() + 0.1
    v = rng.standard_normal(x.shape)
    vx, vtheta = model.vjp(0.0, x, theta, v)
    # Two exact derivative computations (forward vs reverse mode): agree to rounding.
    assert_allclose(vx, np.einsum("kij,ki->kj", model.jac_x(0.0, x, theta), v), rtol=1e-12)
    assert_allclose(vtheta, np.einsum("kip,ki->p", model.jac_theta(0.0, x, theta), v),
                    rtol=1e-12)


@pytest.mark.parametrize("model", [LotkaVolterra(), Rossler(), SEIRD(), Lorenz96(8),
                                   Lorenz96(4, True), HindmarshRose(), ProteinTransduction()],
                         ids=repr)
def test_affine_split_is_exact_for_linear_models(model, rng):
    x = zoo_point(model, rng, 9)
    f0, F1 = model.affine_split(0.0, x)
    theta = rng.standard_normal(model.n_params)
    # f0 + F1 theta reproduces f for any theta up to rounding of O(|f|) sums.
    scale = np.max(np.abs(model.f(0.0, x, theta))) + 1
    assert_allclose(f0 + F1 @ theta, model.f(0.0, x, theta), atol=1e-12 * scale)


def test_affine_split_of_lotka_volterra_has_the_known_structure():
    x = np.array([[2.0, 3.0]])
    f0, F1 = LotkaVolterra().affine_split(0.0, x)
    assert_allclose(f0, [[0.0, 0.0]], atol=1e-14)
    assert_allclose(F1[0], [[2.0, -6.0, 0.0, 0.0], [0.0, 0.0, -3.0, 6.0]], atol=1e-14)


def test_fitzhugh_nagumo_is_reported_not_linear(rng):
    model = FitzHughNagumo()
    assert not model.is_linear_in_theta()
    with pytest.raises(NotLinearInThetaError, match=r"FitzHughNagumo\(\) is not linear"):
        model.affine_split(0.0, zoo_point(model, rng))


@pytest.mark.parametrize("model", ZOO, ids=repr)
def test_models_pickle_with_equality_and_stable_repr(model):
    clone = pickle.loads(pickle.dumps(model))
    assert clone == model and hash(clone) == hash(model) and repr(clone) == repr(model)


def test_model_constants_enter_repr_and_equality():
    assert repr(SEIRD(N=1000.0)) == "SEIRD(N=1000.0)"
    assert SEIRD(1000.0) != SEIRD(2000.0)
    assert Lorenz96(40) == Lorenz96(40) and Lorenz96(40) != Lorenz96(10)
    assert Lorenz96(3).state_names == ("x1", "x2", "x3")


def test_function_model_pickles_and_evaluates():
    m = FunctionModel(decay_rhs, ("x",), ("k",), default_theta=(0.5,))
    assert_allclose(m.f(0.0, [[2.0]], [0.5]), [[-1.0]])
    assert pickle.loads(pickle.dumps(m)) == m
    assert repr(m).startswith("FunctionModel(rhs=decay_rhs")


class WrongShape(ODEModel):
    state_names = ("a", "b")
    param_names = ("k",)

    def rhs(self, t, x, theta):
        return theta[0] * x[..., 0]  # forgot to stack: one output instead of two


class WrongType(ODEModel):
    state_names = ("a",)
    param_names = ("k",)

    def rhs(self, t, x, theta):
        return (theta[0] * x).numpy()


class WrongDtype(ODEModel):
    state_names = ("a",)
    param_names = ("k",)

    def rhs(self, t, x, theta):
        return (theta[0] * x).float()


class NoNames(ODEModel):
    param_names = ("k",)

    def rhs(self, t, x, theta):
        return x


class MixesPoints(ODEModel):
    state_names = ("a",)
    param_names = ("k",)

    def rhs(self, t, x, theta):
        return theta[0] * x.sum(dim=0, keepdim=True).expand_as(x)


class Raises(ODEModel):
    state_names = ("a",)
    param_names = ("k",)

    def rhs(self, t, x, theta):
        raise KeyError("oops")


class BadDefault(ODEModel):
    state_names = ("a",)
    param_names = ("k",)
    default_theta = (1.0, 2.0)

    def rhs(self, t, x, theta):
        return x


@pytest.mark.parametrize(
    "model, pattern",
    [
        (WrongShape(), r"WrongShape.rhs returned shape \(3,\) for a batch x of shape \(3, 2\)"),
        (WrongType(), r"WrongType.rhs must return a torch.Tensor, got ndarray"),
        (WrongDtype(), r"WrongDtype.rhs returned dtype torch.float32; expected torch.float64"),
        (NoNames(), r"NoNames.state_names must be a non-empty tuple of str"),
        (MixesPoints(), r"MixesPoints.rhs gives a different result for a point inside a batch"),
        (Raises(), r"Raises.rhs raised KeyError"),
        (BadDefault(), r"BadDefault.default_theta has 2 entries but param_names has 1"),
        ("not a model", r"model must be an sklode.ODEModel instance, got str"),
    ],
)
def test_malformed_models_are_reported_by_name(model, pattern):
    with pytest.raises(ModelError, match=pattern):
        check_model(model)


def test_inputs_are_not_mutated_and_read_only_inputs_work(rng):
    x = rng.uniform(0, 1, (4, 2))
    x.setflags(write=False)
    before = x.copy()
    LotkaVolterra().jac_x(0.0, x, [1.0, 1.0, 1.0, 1.0])
    LotkaVolterra().f(0.0, x, [1.0, 1.0, 1.0, 1.0])
    assert_allclose(x, before, rtol=0)


def test_check_model_runs_once_per_model_and_again_after_a_change():
    # check_model costs more than a forward solve (an autograd-against-differences check):
    # simulate and the estimators call it on every use, so a model passes it once, until
    # something it reads changes
    from sklode.models import FunctionModel, check_model

    calls = []

    def growth(t, x, theta):
        calls.append(1)
        return theta[0] * x

    model = FunctionModel(growth, ("N",), ("r",), default_theta=(0.1,))
    check_model(model)
    first = len(calls)
    assert first > 0
    check_model(model)
    assert len(calls) == first  # the second call evaluated nothing

    def wrong(t, x, theta):  # same name, other function: checked again, and refused
        return x[..., :0]

    wrong.__qualname__ = growth.__qualname__
    model.rhs_function = wrong
    with pytest.raises(ModelError, match="returned shape"):
        check_model(model)
    model.rhs_function = growth
    model.state_names = ("N", "N")  # a name changed: checked again
    with pytest.raises(ModelError, match="repeated names"):
        check_model(model)
