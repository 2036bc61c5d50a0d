"""sklode.compare and the ``sklode compare`` / ``sklode fit`` commands."""

import csv
import io
import json
import types

import numpy as np
import pytest

from sklode.cli import compare_command, fit_command, main
from sklode.compare import compare, compare_data, format_summary, summarize
from sklode.datasets import get_problem, make_trajectory
from sklode.models import LotkaVolterra
from _expected import warns_by_design


@pytest.fixture(scope="module")
def records():
    return compare("lotka_volterra", ["bcdprox", "wendy", "adjoint"], trials=2,
                   as_frame=False)


def test_records_hold_errors_times_and_status(records):
    assert [(r["method"], r["trial"]) for r in records] == [
        (m, k) for m in ("bcdprox", "wendy", "adjoint") for k in (0, 1)]
    truth = get_problem("lotka_volterra").theta
    for r in records:
        assert r["status"] == "ok" and r["converged"] and r["cpu_s"] > 0
        assert r["seed"] == r["trial"]  # noise seed = random_state + trial
        err = np.abs(np.array(r["theta"]) - truth)
        assert r["max_abs_theta_error"] == pytest.approx(err.max())
        assert r["error_a"] == pytest.approx(err[0])
        # Noise std 0.5 on LV: every method is within ~1 of the truth and predicts the
        # clean states to a Frobenius error of ~1-2 (seed 000's table); 5 flags a bad fit.
        assert r["max_abs_theta_error"] < 1.5 and r["prediction_error"] < 5


def test_summary_counts_and_medians(records):
    summary = summarize(records)
    assert [s["method"] for s in summary] == ["bcdprox", "wendy", "adjoint"]
    for s in summary:
        assert (s["trials"], s["ok"], s["failed"], s["skipped"]) == (2, 2, 0, 0)
        errs = [r["prediction_error"] for r in records if r["method"] == s["method"]]
        assert s["median_prediction_error"] == pytest.approx(np.median(errs))
    table = format_summary(summary)
    assert table.count("\n") == 4 and "| bcdprox |" in table


def test_dataframe_output_and_noise_override():
    pd = pytest.importorskip("pandas")
    frame = compare("lotka_volterra", ["adjoint"], trials=1, noise=0.01)
    assert isinstance(frame, pd.DataFrame) and len(frame) == 1
    # At 1/50th of the default noise the error shrinks accordingly (measured 0.02).
    assert frame["max_abs_theta_error"].iloc[0] < 0.1
    assert isinstance(summarize(frame), pd.DataFrame)


def test_inapplicable_methods_are_skipped_not_failed():
    rs = compare("seird", ["wendy", "adjoint"], trials=1, as_frame=False)
    assert rs[0]["status"] == "skipped" and "every state observed" in rs[0]["error"]
    assert rs[1]["status"] == "ok"


@warns_by_design('FitFailedWarning', why="fits made to fail on purpose")
def test_failed_fits_are_recorded():
    # A start this far off makes the forward solve blow up: recorded, not raised.
    rs = compare("lotka_volterra", ["adjoint"], trials=1, theta0_noise=1e6, as_frame=False)
    assert rs[0]["status"] == "failed" and "IntegrationError" in rs[0]["error"]
    assert summarize(rs)[0]["failed"] == 1


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="Unknown method"):
        compare("lotka_volterra", ["nope"], trials=1)
    with pytest.raises(ValueError, match="trials"):
        compare("lotka_volterra", ["adjoint"], trials=0)


def test_compare_on_user_data():
    data = make_trajectory("lotka_volterra", noise=0.1, random_state=0)
    rs = compare_data(data.t, data.Y, LotkaVolterra(), theta0=(2, 1, 4, 1), as_frame=False)
    assert [r["method"] for r in rs] == ["bcdprox", "wendy", "adjoint"]
    for r in rs:
        # noise 0.1 on states of size 1-7: R^2 near 1 for every method.
        assert r["status"] == "ok" and r["score"] > 0.95


def _args(**kw):
    base = dict(problem=["lotka_volterra"], methods="bcdprox,adjoint", trials=2, n_jobs=1,
                noise=None, theta0_noise=None, seed=0, blowup=100.0, backend=None,
                scheduler=None, output=None, plot=None, no_progress=True)
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_compare_command_writes_records_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = io.StringIO()
    csv_path, png = tmp_path / "trials.csv", tmp_path / "plot.png"
    records = compare_command(_args(output=str(csv_path), plot=str(png)), out=out)
    text = out.getvalue()
    assert "| lotka_volterra | bcdprox | 2 | 2 |" in text
    with open(csv_path) as fh:
        assert len(list(csv.DictReader(fh))) == len(records) == 4
    assert png.stat().st_size > 10_000  # a real figure, not an empty file
    json_path = tmp_path / "trials.json"
    compare_command(_args(output=str(json_path), methods="adjoint", trials=1), out=out)
    assert json.loads(json_path.read_text())[0]["method"] == "adjoint"


def test_compare_command_line_with_progress(capsys):
    pytest.importorskip("tqdm")
    assert main(["compare", "--problem", "seird", "--methods", "adjoint", "--trials", "1"]) == 0
    captured = capsys.readouterr()
    assert "| seird | adjoint | 1 | 1 |" in captured.out
    assert "sklode compare" in captured.err  # the tqdm bar


def test_fit_command_on_a_csv(tmp_path):
    data = make_trajectory("lotka_volterra", noise=0.05, random_state=0)
    path = tmp_path / "lv.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["t", "predator", "prey"])  # any column order, named by state
        writer.writerows(np.column_stack([data.t, data.Y[:, 1], data.Y[:, 0]]))
    out = io.StringIO()
    args = types.SimpleNamespace(csv=str(path), model="LotkaVolterra", method="adjoint",
                                 time_column="t", theta0="2,2,5,2", x0=None)
    est = fit_command(args, out=out)
    # Noise 0.05: theta within 5 % (several standard errors).
    np.testing.assert_allclose(est.theta_, [2, 1, 4, 1], rtol=0.05)
    assert est.observed_ == (1, 0) and "± " in out.getvalue()
    bad = tmp_path / "bad.csv"
    bad.write_text("t,wolves\n0,1\n1,2\n")
    with pytest.raises(ValueError, match="not states"):
        fit_command(types.SimpleNamespace(csv=str(bad), model="LotkaVolterra",
                                          method="adjoint", time_column="t", theta0=None,
                                          x0=None))
    assert main(["fit", str(path), "--model", "NoSuchModel"]) == 2  # one line on stderr


def test_compare_data_takes_experiments_and_the_estimator_settings():
    from observation_models import (
        OralPK,
        TwoStates,
        pk_experiments,
        two_state_experiments,
    )

    rs = compare_data(two_state_experiments(), None, TwoStates(), estimate_x0=False,
                      method_settings={"bcdprox": {"lam": 2.0}}, as_frame=False)
    for r in rs:  # doses into A at 0 and 10 h, 320 values at noise 0.05: every fit adequate
        assert r["status"] == "ok" and r["score"] > 0.99, r
        assert np.isfinite(r["neg_log_likelihood"])
    rs = compare_data(pk_experiments(), None, OralPK(), estimate_x0=False, positive=True,
                      theta0=(0.8, 0.25, 20.0, 0.3, 0.2), as_frame=False)
    status = {r["method"]: (r["status"], r["error"]) for r in rs}
    assert status["adjoint"][0] == "ok"
    for method in ("bcdprox", "wendy"):  # the observable is a concentration, not a state
        assert status[method][0] == "skipped" and "Use AdjointODE" in status[method][1]
    with pytest.raises(ValueError, match="has no setting 'lam'"):
        compare_data(two_state_experiments(), None, TwoStates(), lam=2.0)


def test_worker_warnings_reach_the_records_not_stderr(capfd):
    # A hard start on Rossler for AdjointODE warns in the loky workers; the warnings used to
    # reach stderr labelled '<dynamic-code>:57'. Now they are in the records and counted.
    records = compare("lotka_volterra", ["adjoint"], trials=2, n_jobs=2, as_frame=False,
                      theta0_noise=3.0)
    err = capfd.readouterr().err
    assert "Warning" not in err, err
    summary = summarize(records)
    rows = summary.to_dict("records") if hasattr(summary, "to_dict") else summary
    warned = [r for r in records if r["warnings"]]
    assert rows[0]["warned"] == len(warned)
    for r in warned:
        assert r["warning_messages"] and all(m.split(":")[0] in r["warnings"]
                                             for m in r["warning_messages"])
