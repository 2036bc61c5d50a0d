"""The shared estimator base: validation messages, predict/score, tags, all-or-nothing fits.

The base holds no algorithm, so it is exercised through a small single-shooting estimator
built on the least-squares baseline.
"""

import pickle

import numpy as np
import pytest
from baselines import least_squares_fit
from numpy.testing import assert_allclose
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils import get_tags

from sklode._estimator import ODEEstimator, warn_not_converged
from sklode.datasets import make_trajectory
from sklode.exceptions import ConvergenceWarning, IntegrationError
from sklode.models import LotkaVolterra


class ShootingODE(ODEEstimator):
    """Test-only estimator: scipy least squares on theta and x0."""

    def __init__(self, model=None, theta0=None, max_nfev=None, x0=None, t0=None,
                 estimate_x0=True, observed=None, integrator="LSODA", rtol=1e-8, atol=1e-10):
        self.model = model
        self.theta0 = theta0
        self.max_nfev = max_nfev
        self.x0 = x0
        self.t0 = t0
        self.estimate_x0 = estimate_x0
        self.observed = observed
        self.integrator = integrator
        self.rtol = rtol
        self.atol = atol

    def _min_samples(self):
        return 3

    def fit(self, t, Y):
        data = self._validate_data(t, Y)
        (experiment,) = data.experiments  # one experiment, complete
        if not experiment.complete:
            raise ValueError("ShootingODE takes no missing values.")
        t, Y = experiment.t, experiment.Y
        theta0 = self.model.theta_guess() if self.theta0 is None else np.asarray(self.theta0)
        res = least_squares_fit(self.model, t, Y, theta0, Y[0], max_nfev=self.max_nfev)
        if not np.all(np.isfinite(res.theta)) or res.cost > 1e15:
            raise IntegrationError("fit diverged")
        if not res.success:
            warn_not_converged(self, res.nfev, res.message, "Increase max_nfev.")
        return self._set_fitted(theta_=res.theta, x0_=res.x0, t0_=t[0], n_iter_=res.nfev,
                                converged_=res.success, **self._data_attributes(data))


@pytest.fixture(scope="module")
def lv_data():
    return make_trajectory("lotka_volterra", noise=0.05, random_state=0)


@pytest.fixture(scope="module")
def fitted(lv_data):
    return ShootingODE(LotkaVolterra(), theta0=(2, 1, 4, 1)).fit(lv_data.t, lv_data.Y)


def test_fit_recovers_parameters_and_predicts(fitted, lv_data):
    # Noise std 0.05 on 41 points of states ~1-7: theta within 5 % (several standard errors).
    assert_allclose(fitted.theta_, [2, 1, 4, 1], rtol=0.05)
    assert fitted.score(lv_data.t, lv_data.Y) > 0.99  # R^2 near 1 at this noise level
    assert fitted.predict(lv_data.t).shape == (41, 2)
    assert fitted.n_features_in_ == 1 and fitted.t0_ == 0.0


def test_predict_is_order_and_subset_invariant(fitted, lv_data):
    rng = np.random.default_rng(0)
    perm = rng.permutation(lv_data.t.size)
    full = fitted.predict(lv_data.t)
    # The integrator visits the same unique times either way: identical to rounding.
    assert_allclose(fitted.predict(lv_data.t[perm]), full[perm], rtol=1e-12)
    assert_allclose(fitted.predict(lv_data.t[5:9]), full[5:9], rtol=1e-6)  # other step path


@pytest.mark.slow  # 4 s on two cores: the slow stage of .ci/run
def test_time_shapes_and_dataframe_give_identical_results(lv_data):
    pd = pytest.importorskip("pandas")
    a = ShootingODE(LotkaVolterra(), theta0=(2, 1, 4, 1)).fit(lv_data.t, lv_data.Y)
    b = ShootingODE(LotkaVolterra(), theta0=(2, 1, 4, 1)).fit(lv_data.t[:, None], lv_data.Y)
    c = ShootingODE(LotkaVolterra(), theta0=(2, 1, 4, 1)).fit(pd.DataFrame({"t": lv_data.t}),
                                                              lv_data.Y)
    assert_allclose(a.theta_, b.theta_, rtol=0)
    assert_allclose(a.theta_, c.theta_, rtol=0)
    assert list(c.feature_names_in_) == ["t"] and not hasattr(a, "feature_names_in_")


def test_unsorted_input_is_sorted_without_mutation(lv_data):
    perm = np.random.default_rng(1).permutation(lv_data.t.size)
    t, Y = lv_data.t[perm], lv_data.Y[perm]
    t_before, Y_before = t.copy(), Y.copy()
    est = ShootingODE(LotkaVolterra(), theta0=(2, 1, 4, 1)).fit(t, Y)
    assert_allclose(t, t_before, rtol=0) and assert_allclose(Y, Y_before, rtol=0)
    assert est.t0_ == 0.0
    sorted_fit = ShootingODE(LotkaVolterra(), theta0=(2, 1, 4, 1)).fit(lv_data.t, lv_data.Y)
    assert_allclose(est.theta_, sorted_fit.theta_, rtol=1e-10)


def test_one_dimensional_y_gives_one_dimensional_predictions():
    from sklode.models import LogisticGrowth

    d = make_trajectory("wendy_logistic", noise=0.01, random_state=0)
    est = ShootingODE(LogisticGrowth(), theta0=(1, -1)).fit(d.t[::8], d.Y[::8, 0])
    assert est.predict(d.t[:5]).shape == (5,)


T = np.linspace(0, 1, 6)
Y2 = np.ones((6, 2))


@pytest.mark.parametrize(
    "t, Y, pattern",
    [
        (np.r_[T[:5], T[4]], Y2, r"t contains duplicate times: t = 0.8 appears at least twice"),
        (np.r_[T[:5], np.nan], Y2, r"Input t contains NaN"),
        (np.r_[T[:5], np.inf], Y2, r"Input t contains infinity"),
        (T, Y2[:5], r"t and Y have different numbers of samples: 6 times and 5 rows"),
        (T[:1], Y2[:1], r"ShootingODE needs at least 3 time points, got n_samples=1"),
        (T, np.ones((6, 3)), r"Y has 3 column\(s\) but ShootingODE expects 2, one per observed "
                             r"state \('prey', 'predator'\)"),
        (np.c_[T, T], Y2, r"t must have shape \(n_samples,\) or \(n_samples, 1\)"),
        (T, None, r"requires y to be passed, but the target y is None"),
        (T, np.full((6, 2), np.nan), r"Y has no observed value: every entry is NaN"),
    ],
    ids=["duplicate", "nan-t", "inf-t", "lengths", "one-sample", "width", "2col-t", "no-y",
         "all-nan-y"],
)
def test_bad_training_data_raises_value_error_naming_the_problem(t, Y, pattern):
    with pytest.raises(ValueError, match=pattern):
        ShootingODE(LotkaVolterra()).fit(t, Y)


def test_not_fitted_error_before_fit():
    with pytest.raises(NotFittedError):
        ShootingODE(LotkaVolterra()).predict(T)


def test_failed_refit_keeps_the_previous_fit(fitted, lv_data):
    est = clone(fitted).fit(lv_data.t, lv_data.Y)
    state = {k: v for k, v in vars(est).items()}
    with pytest.raises(ValueError):
        est.fit(lv_data.t[:1], lv_data.Y[:1])
    assert vars(est).keys() == state.keys()
    assert_allclose(est.theta_, state["theta_"], rtol=0)


def test_a_failed_first_fit_leaves_no_fitted_attribute():
    est = ShootingODE(LotkaVolterra())
    with pytest.raises(ValueError):
        est.fit(T, np.ones((6, 3)))
    assert not [k for k in vars(est) if k.endswith("_")]


def test_tags_declare_time_input_and_multi_output():
    tags = get_tags(ShootingODE(LotkaVolterra()))
    assert tags.input_tags.one_d_array and tags.input_tags.two_d_array
    assert tags.target_tags.multi_output and tags.regressor_tags.poor_score


def test_pickle_round_trip_predicts_identically(fitted, lv_data):
    again = pickle.loads(pickle.dumps(fitted))
    assert_allclose(again.predict(lv_data.t), fitted.predict(lv_data.t), rtol=0)


def test_convergence_warning_names_the_estimator_and_fit_stays_usable(lv_data):
    est = ShootingODE(LotkaVolterra(), theta0=(1.5, 1.5, 3, 1.5), max_nfev=2)
    with pytest.warns(ConvergenceWarning, match=r"ShootingODE did not converge after \d+ "):
        est.fit(lv_data.t, lv_data.Y)
    assert est.converged_ is False and est.predict(lv_data.t).shape == (41, 2)
