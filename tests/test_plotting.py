"""sklode.plotting draws what it says on the axes it returns (matplotlib's Agg backend)."""

import sys
import warnings

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")  # the "plot" extra; in the "test" extra too
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402

from sklode import AdjointODE, BCDProxODE, WENDyODE  # noqa: E402
from sklode.compare import compare  # noqa: E402
from sklode.datasets import make_trajectory  # noqa: E402
from sklode.models import LotkaVolterra  # noqa: E402
from sklode.plotting import (  # noqa: E402
    plot_comparison,
    plot_fit,
    plot_loss,
    plot_parameters,
    plot_states,
)

LV = make_trajectory("lotka_volterra", noise=0.1, random_state=0)
THETA0 = (2.5, 1.5, 4.5, 1.5)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_plot_fit_draws_data_fit_and_a_covariance_band():
    est = AdjointODE(LotkaVolterra(), theta0=THETA0).fit(LV.t, LV.Y)
    axes = plot_fit(est, LV.t, LV.Y, random_state=0)
    assert [ax.get_title() for ax in axes] == ["prey", "predator"]
    for k, ax in enumerate(axes):
        fit_line, data_line = ax.get_lines()
        np.testing.assert_array_equal(data_line.get_ydata(), LV.Y[:, k])
        band = [c for c in ax.collections if isinstance(c, PolyCollection)]
        assert len(band) == 1
        # the band brackets the fitted curve at every drawn time
        low, high = band[0].get_paths()[0].vertices[:, 1].min(), band[0].get_paths()[0] \
            .vertices[:, 1].max()
        assert low <= fit_line.get_ydata().min() and fit_line.get_ydata().max() <= high
    # the same seed, the same band
    again = plot_fit(est, LV.t, LV.Y, random_state=0)
    np.testing.assert_array_equal(axes[0].collections[0].get_paths()[0].vertices,
                                  again[0].collections[0].get_paths()[0].vertices)


def test_no_band_where_the_covariance_is_not_finite():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # prey-only LV: x0[predator]*b unidentifiable
        est = AdjointODE(LotkaVolterra(), theta0=(2, 1, 4, 1), x0=(5, 3),
                         observed=["prey"]).fit(LV.t, LV.Y[:, :1])
    assert not np.all(np.isfinite(est.theta_cov_))
    (ax,) = plot_fit(est, LV.t, LV.Y[:, :1])
    assert not ax.collections and len(ax.get_lines()) == 2


def test_plot_states_shows_filtered_and_hidden_states():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its verdicts on prey-only data are not tested here
        est = BCDProxODE(LotkaVolterra(), theta0=THETA0, x0=(5, 3), observed=["prey"]).fit(
            LV.t, LV.Y[:, :1])
    axes = plot_states(est, LV.t[::-1], LV.Y[::-1, :1])  # any row order
    assert [ax.get_title() for ax in axes] == ["prey", "predator (hidden)"]
    np.testing.assert_array_equal(axes[1].get_lines()[0].get_ydata(), est.states_[:, 1])
    assert len(axes[1].get_lines()) == 1  # no data for the hidden state
    np.testing.assert_array_equal(axes[0].get_lines()[1].get_ydata(), LV.Y[:, 0])


def test_plot_loss_draws_the_history_or_says_there_is_none():
    est = AdjointODE(LotkaVolterra(), theta0=THETA0).fit(LV.t, LV.Y)
    ax = plot_loss(est)
    np.testing.assert_allclose(ax.get_lines()[0].get_ydata(), np.abs(est.loss_history_))
    with pytest.raises(ValueError, match="records no loss history"):
        plot_loss(WENDyODE(LotkaVolterra()).fit(LV.t, LV.Y))


def test_plot_comparison_titles_what_was_compared():
    records = compare("lotka_volterra", ["bcdprox", "wendy"], trials=2, as_frame=False)
    axes = plot_comparison(records)
    assert axes[0].figure._suptitle.get_text() == (
        "lotka_volterra, noise 0.5: 2 trials per method (4 fits succeeded of 4)")
    assert [t.get_text() for t in axes[2].get_xticklabels()] == ["bcdprox", "wendy"]
    with pytest.raises(ValueError, match="axes"):
        plot_comparison(records, ax=plt.subplots(1, 2)[1])


def test_without_matplotlib_the_error_says_what_to_install(monkeypatch):
    import sklode.plotting as plotting

    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"pip install 'sklode\[plot\]'"):
        plotting._pyplot()


def test_plot_parameters_draws_the_iterates_of_bcdprox():
    est = BCDProxODE(LotkaVolterra(), theta0=THETA0).fit(LV.t, LV.Y)
    assert est.theta_history_.shape == (est.n_iter_, 4)
    np.testing.assert_array_equal(est.theta_history_[-1], est.theta_)  # the last iterate
    axes = plot_parameters(est, truth=[2, 1, 4, 1])
    assert [ax.get_title() for ax in axes] == ["a", "b", "c", "d"]
    np.testing.assert_array_equal(axes[2].get_lines()[0].get_ydata(), est.theta_history_[:, 2])
    assert axes[2].get_lines()[1].get_ydata()[0] == 4  # the reference line
    with pytest.raises(ValueError, match="records no parameter history"):
        plot_parameters(WENDyODE(LotkaVolterra()).fit(LV.t, LV.Y))
