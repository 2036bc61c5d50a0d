"""AdjointODE's random starts over the bounds and its warning for parameters that end on a
bound (#26 item 5, #28 item 5)."""

import warnings

import numpy as np
import pytest

from sklode import AdjointODE
from sklode.datasets import make_trajectory
from sklode.exceptions import BoundWarning


@pytest.fixture(scope="module")
def lv():
    return make_trajectory("lotka_volterra", noise=0.1, random_state=0)


def test_a_parameter_on_its_bound_is_named(lv):
    # the truth has a = 2: an upper bound of 1.8 holds it there
    est = AdjointODE(lv.problem.model, theta0=(1.5, 1, 3.5, 1),
                     bounds=([0, 0, 0, 0], [1.8, 5, 10, 5]))
    with pytest.warns(BoundWarning, match=r"a = 1\.8 \(upper\)"):
        est.fit(lv.t, lv.Y)
    assert est.theta_[0] == pytest.approx(1.8)


def test_no_bound_warning_inside_the_box(lv):
    est = AdjointODE(lv.problem.model, theta0=(1.5, 1, 3.5, 1),
                     bounds=([0, 0, 0, 0], [10, 10, 10, 10]))
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoundWarning)
        est.fit(lv.t, lv.Y)


def test_random_starts_cover_the_box_log_uniformly():
    model = make_trajectory("lotka_volterra", noise=0.1, random_state=0).problem.model
    est = AdjointODE(model, n_starts=401, random_state=0, positive=True,
                     bounds=([1e-2, 1e-2, 1e-2, 1e-2], [1e2, 1e2, 1e2, 1e2]),
                     fixed={"d": 1.0})
    fitted = np.array([True, True, True, False])
    starts = np.array(est._random_starts(np.array([2.0, 1.0, 4.0, 1.0]), fitted))[1:]
    assert np.all(starts[:, :3] >= 1e-2) and np.all(starts[:, :3] <= 1e2)
    assert np.all(starts[:, 3] == 1.0)  # a held parameter is not drawn
    logs = np.log10(starts[:, :3])  # uniform on [-2, 2]: mean 0, sd 4/sqrt(12) = 1.15
    # 400 draws: each mean within 4 standard errors (4 * 1.15 / 20 = 0.23)
    assert np.all(np.abs(logs.mean(axis=0)) < 0.23)
    assert np.all(logs.min(axis=0) < -1.8) and np.all(logs.max(axis=0) > 1.8)
