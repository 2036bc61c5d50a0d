"""WENDy's weak-form likelihood (sklode/wendy/_likelihood.py): its gradient against finite
differences, its optimum, and WENDyODE(method="likelihood")."""

import warnings

import numpy as np
import pytest
from numpy.testing import assert_allclose
from sklearn.utils._param_validation import InvalidParameterError

from sklode import WENDyODE
from sklode._on_grid import is_linear_on_data
from sklode.datasets import get_problem, make_trajectory
from sklode.models import FitzHughNagumo
from sklode.wendy import _irls
from sklode.wendy._likelihood import WeakLikelihood


def _likelihood_of(model, t, Y, theta0, **options):
    """The WeakLikelihood wendy_solve builds for these data, and its result."""
    built = {}

    class Spy(WeakLikelihood):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built["likelihood"] = self

    original = _irls.WeakLikelihood
    _irls.WeakLikelihood = Spy
    try:
        result = _irls.wendy_solve(model, t, Y, np.asarray(theta0, float),
                                   linear=is_linear_on_data(model, t, Y), method="mle",
                                   **options)
    finally:
        _irls.WeakLikelihood = original
    return built["likelihood"], result


def _central_differences(likelihood, theta, rel=1e-6):
    steps = rel * np.maximum(np.abs(theta), 1e-3)
    return np.array([(likelihood.value_and_gradient(theta + h * e)[0]
                      - likelihood.value_and_gradient(theta - h * e)[0]) / (2 * h)
                     for e, h in zip(np.eye(theta.size), steps)])


@pytest.mark.parametrize("name, model", [
    ("wendy_lotka_volterra", None),  # affine in theta: exact dJ/dtheta
    ("fitzhugh_nagumo", FitzHughNagumo()),  # not affine: dJ/dtheta by differences of jac_x
])
def test_gradient_equals_central_differences(name, model):
    data = make_trajectory(name, noise=0.1, random_state=1)
    model = data.problem.model if model is None else model
    likelihood, result = _likelihood_of(model, data.t, data.Y, data.problem.theta)
    theta = result.theta * 1.05  # off the optimum, where the gradient is not small
    analytic = likelihood.value_and_gradient(theta)[1]
    numeric = _central_differences(likelihood, theta)
    # Central differences at a 1e-6 relative step err by ~1e-9 relative (truncation plus
    # round-off in a likelihood of a few thousand); dJ/dtheta of the non-affine model by
    # differences adds ~1e-8. 1e-6 catches any missing term (each is 1e-2 or more of it).
    assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-6 * np.max(np.abs(numeric)))


def test_the_likelihood_estimate_is_a_stationary_point_no_worse_than_the_irls():
    data = make_trajectory("wendy_fitzhugh_nagumo", noise=0.1, random_state=2)
    likelihood, result = _likelihood_of(data.problem.model, data.t, data.Y, data.problem.theta)
    irls = _irls.wendy_solve(data.problem.model, data.t, data.Y, data.problem.theta,
                             linear=True, method="irls")
    value, gradient = likelihood.value_and_gradient(result.theta)
    assert result.converged
    # The Newton decrement g^T H^-1 g at the returned point: the log-likelihood a further
    # Newton step could gain. 1e-6 is the solver's own convergence threshold.
    assert gradient @ np.linalg.solve(likelihood.hessian(result.theta), gradient) < 1e-6
    assert value <= likelihood.value_and_gradient(irls.theta)[0] + 1e-9
    # Its covariance is the inverse Hessian: symmetric positive definite.
    assert_allclose(result.theta_cov, result.theta_cov.T, rtol=1e-12)
    assert np.all(np.linalg.eigvalsh(result.theta_cov) > 0)


def test_likelihood_method_recovers_lotka_volterra_with_calibrated_errors():
    data = make_trajectory("wendy_lotka_volterra", noise=0.05, random_state=0)
    est = WENDyODE(data.problem.model, method="likelihood").fit(data.t, data.Y)
    irls = WENDyODE(data.problem.model, method="irls").fit(data.t, data.Y)
    assert "weak likelihood" in est.solver_ and est.converged_
    # At 5 % noise on 1024 samples the coefficients' relative errors are ~0.5 % (the IRLS's
    # on the same draw 0.3-0.6 %); 2 % is four times that.
    assert_allclose(est.theta_, data.problem.theta, rtol=0.02)
    # Both estimate the same quantity from the same weak residual: standard errors within
    # 20 % of each other (measured 1-6 % apart), and the truth within 3 of them.
    assert_allclose(est.theta_stderr_, irls.theta_stderr_, rtol=0.2)
    assert np.all(np.abs(est.theta_ - data.problem.theta) < 3 * est.theta_stderr_)


def test_likelihood_method_honours_bounds():
    data = make_trajectory("wendy_lotka_volterra", noise=0.05, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = WENDyODE(data.problem.model, method="likelihood",
                       bounds=([0, 0, 0, 0], [2.5, 10, 10, 10])).fit(data.t, data.Y)
    # the unbounded optimum has a = 3.0: the bound binds (trust-constr's interior point
    # stops within ~1e-6 relative of it)
    assert est.theta_[0] <= 2.5 + 1e-9
    assert est.theta_[0] == pytest.approx(2.5, rel=1e-3)


def test_unknown_method_is_refused():
    p = get_problem("wendy_lotka_volterra")
    with pytest.raises(InvalidParameterError, match="method"):
        WENDyODE(p.model, method="mle").fit(p.t, p.clean_states())


def test_an_optimum_far_from_the_irls_estimate_is_refused(monkeypatch):
    # Hindmarsh-Rose at 20 % noise ran the likelihood's log det to a degenerate covariance
    # 15 to 1.5e6 IRLS standard errors away (E2 up to 92; ~10 CPU s per fit to reproduce):
    # here the trust region is made to return a point 100 standard errors away.
    data = make_trajectory("wendy_lotka_volterra", noise=0.05, random_state=0)
    irls = WENDyODE(data.problem.model).fit(data.t, data.Y)

    def runaway(likelihood, theta_start, **options):
        far = theta_start + 100 * irls.theta_stderr_
        return far, np.eye(far.size), 3, True, "converged"

    monkeypatch.setattr(_irls, "maximise_weak_likelihood", runaway)
    est = WENDyODE(data.problem.model, method="likelihood").fit(data.t, data.Y)
    assert_allclose(est.theta_, irls.theta_, rtol=1e-12)  # the IRLS estimate, unchanged
    assert "IRLS standard errors from the IRLS estimate" in est.stop_reason_
    assert_allclose(est.theta_stderr_, irls.theta_stderr_, rtol=1e-6)
