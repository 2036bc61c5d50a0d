"""The README's main job: ``sklode demo`` fits the built-in problem with every estimator."""

import io
import re
from pathlib import Path

import numpy as np
import pytest
from baselines import least_squares_like_adjoint

from sklode.cli import demo, main
from sklode.datasets import get_problem, make_trajectory
from sklode.registry import METHODS


def test_demo_fits_every_estimator():
    out = io.StringIO()
    rows = demo("lotka_volterra", seed=0, out=out)
    text = out.getvalue()
    names = [r[0] for r in rows]
    assert names == list(METHODS)
    for name in METHODS:
        line = next(ln for ln in text.splitlines() if ln.startswith(name))
        max_err = float(re.split(r"\s+", line.strip())[5])
        # Noise std 0.5 on 41 points: every method lands within ~1 of theta = (2, 1, 4, 1)
        # (measured max errors 0.92 BCD-prox, 0.11 WENDy); a broken fit is off by far more.
        assert max_err < 1.5
    assert all(np.all(np.isfinite(r[1])) for r in rows)


def test_demo_skips_what_cannot_fit_a_partially_observed_problem():
    # SEIRD observes I, R, D only: BCD-prox and WENDy need every state and are skipped (they
    # used to raise on the 3-column Y); AdjointODE and the hand-written baseline minimise the
    # same cost and must agree (measured to 4 digits; 1e-3 allows for both solvers'
    # tolerances).
    out = io.StringIO()
    rows = demo("seird", seed=0, out=out)
    assert [r[0] for r in rows] == ["adjoint"]
    assert out.getvalue().count("skipped: ") == 2
    baseline = least_squares_like_adjoint(get_problem("seird"),
                                          make_trajectory("seird", random_state=0).Y)
    np.testing.assert_allclose(rows[0][1], baseline.theta, rtol=1e-3)


def test_console_entry_point_runs(capsys):
    assert main(["demo", "--problem", "wendy_logistic", "--noise", "0.05"]) == 0
    assert "wendy" in capsys.readouterr().out


def test_ci_runs_the_readme_commands():
    """.ci/run must call exactly the README's two commands (install + main job, tests)."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text()
    ci = (root / ".ci" / "run").read_text()
    section = readme[readme.index("## Two commands"):]
    blocks = re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)
    install_and_run, tests = blocks[0].strip(), blocks[1].strip()
    install, run = [part.strip() for part in install_and_run.split("&&")]
    assert install.replace("pip install", "pip install --quiet") in ci
    assert run in ci.splitlines() and tests in ci.splitlines()


def test_fit_command_exits_nonzero_only_with_strict_when_the_fit_warned(tmp_path, capsys):
    data = make_trajectory("lotka_volterra", noise=0.1, random_state=0)
    path = tmp_path / "lv.csv"
    lines = ["t,prey,predator"] + [f"{t},{a},{b}" for t, (a, b) in zip(data.t, data.Y)]
    path.write_text("\n".join(lines))
    base = ["fit", str(path), "--model", "LotkaVolterra", "--theta0", "2.5,1.5,4.5,1.5"]
    assert main(base) == 0  # a converged, adequate fit
    capsys.readouterr()
    # One optimiser iteration cannot converge: stderr says why; the fit is written, so the
    # status is 0 (a warning is not a failure in a pipeline) unless --strict asks for 1
    assert main(base + ["--max-iter", "1"]) == 0
    assert "WARNING ConvergenceWarning: AdjointODE did not converge" in capsys.readouterr().err
    assert main(base + ["--max-iter", "1", "--strict"]) == 1
    assert "WARNING ConvergenceWarning: AdjointODE did not converge" in capsys.readouterr().err


def test_help_and_import_do_not_load_torch():
    import subprocess
    import sys

    from sklode._names import METHOD_NAMES
    from sklode.registry import METHODS

    assert METHOD_NAMES == tuple(METHODS)  # the names the parser offers are the registry's
    code = ("import sys, contextlib, io\n"
            "import sklode\n"
            "from sklode.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            "        main(['--help'])\n"
            "    except SystemExit:\n"
            "        pass\n"
            "print('torch' in sys.modules, 'sklearn' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    # --help answers from the parser alone: torch's import costs 1-3 s of the 4-5 s it took.
    assert out == ["False", "False"]


def test_estimator_errors_are_one_line_on_stderr_and_exit_status_2(tmp_path, capsys):
    d = make_trajectory("lotka_volterra", noise=0.1, random_state=0)
    csv = tmp_path / "lv.csv"
    csv.write_text("t,prey,predator\n" + "\n".join(
        f"{t},{a},{b}" for t, (a, b) in zip(d.t, d.Y)) + "\n")
    cases = [
        (["--theta0", "1,2"], "theta0 has 2 entries but LotkaVolterra() has 4 parameters"),
        (["--x0", "1,2,3"], "x0 must have shape (2,)"),
    ]
    for extra, message in cases:
        status = main(["fit", str(csv), "--model", "LotkaVolterra", *extra])
        err = capsys.readouterr().err
        assert status == 2
        assert err.startswith("sklode fit: error: ") and message in err
        assert "Traceback" not in err and err.count("\n") == 1
    assert main(["fit", str(tmp_path / "missing.csv"), "--model", "LotkaVolterra"]) == 2
    assert "missing.csv" in capsys.readouterr().err


@pytest.fixture
def flu_files(tmp_path, monkeypatch):
    """The boarding-school CSV as shipped (a text date column included) and a user model."""
    from importlib.resources import files

    text = files("sklode").joinpath("data", "boarding_school_flu.csv").read_text()
    (tmp_path / "flu.csv").write_text(text)
    (tmp_path / "sir_model.py").write_text(
        (Path(__file__).resolve().parents[1] / "docs" / "data" / "sir.py").read_text())
    monkeypatch.chdir(tmp_path)
    return tmp_path


FLU = ["fit", "flu.csv", "--column", "t=day", "--column", "I=in_bed", "--column",
       "C=convalescent", "--x0", "762,1,0", "--t0", "0", "--estimate-x0", "no", "--positive"]


@pytest.mark.parametrize("model", ["sir_model.py:SICR", "sir_model:SICR"])
def test_fit_takes_a_user_model_mapped_columns_and_writes_the_fit(model, flu_files, capsys):
    import json

    status = main(FLU + ["--model", model, "--output", "fit.json", "--plot", "fit.png"])
    out = capsys.readouterr().out
    assert status == 0
    assert "observed ['I (column in_bed)', 'C (column convalescent)']" in out
    fit = json.loads((flu_files / "fit.json").read_text())
    # the figures of tests/test_datasets.py: beta 1.60/day, 2.3 days in bed
    assert 1.5 < fit["theta"]["beta"] < 1.75 and 2.0 < 1 / fit["theta"]["gamma"] < 2.5
    assert f"beta = {fit['theta']['beta']:.6g} ± {fit['theta_stderr']['beta']:.4g}" in out
    assert fit["x0"] == {"S": 762.0, "I": 1.0, "C": 0.0} and fit["t0"] == 0.0
    assert (flu_files / "fit.png").stat().st_size > 10_000  # a drawn figure, not an empty file
    assert main(FLU + ["--model", model, "--output", "fit.csv"]) == 0
    rows = (flu_files / "fit.csv").read_text().splitlines()
    assert rows[0] == "t,in_bed_data,convalescent_data,I_fit,C_fit" and len(rows) == 15


def test_fit_options_reach_the_estimator(flu_files, capsys):
    import json

    base = FLU + ["--model", "sir_model.py:SICR", "--output", "fit.json"]
    assert main(base + ["--fixed", "delta=0.6", "--bounds", "beta=0:1.5"]) == 0
    fit = json.loads((flu_files / "fit.json").read_text())
    assert fit["theta"]["delta"] == 0.6  # held exactly
    assert fit["theta"]["beta"] <= 1.5 and fit["theta"]["beta"] == pytest.approx(1.5, abs=1e-6)
    capsys.readouterr()
    assert main(base + ["--set", "optimizer=bfgs", "--max-iter", "300"]) == 0
    fit = json.loads((flu_files / "fit.json").read_text())
    assert "bfgs" in fit["solver"] and fit["converged"]
    assert 1.5 < fit["theta"]["beta"] < 1.75  # the same optimum as trf's


@pytest.mark.parametrize("extra, message", [
    (["--model", "sir_model.py:SIR"], "'sir_model.py' has no 'SIR'"),
    (["--model", "no_such_module:SICR"], "cannot import 'no_such_module'"),
    (["--model", "sir_model.py:SICR", "--column", "R=in_bed"], "has no state 'R'"),
    (["--model", "sir_model.py:SICR", "--column", "I=bed"], "has no column 'bed'"),
    (["--model", "sir_model.py:SICR", "--set", "lam=2"], "AdjointODE has no setting 'lam'"),
    (["--model", "sir_model.py:SICR", "--bounds", "0..2"], "--bounds takes LO:HI"),
    (["--model", "sir_model.py:SICR", "--fixed", "delta"], "--fixed takes NAME=VALUE"),
    (["--model", "sir_model.py:SICR", "--observed", "I,R"], "has no state(s) ['R']"),
])
def test_fit_option_errors_are_one_line(extra, message, flu_files, capsys):
    assert main(FLU + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("sklode fit: error: ") and message in err and err.count("\n") == 1


def test_help_shows_an_example_for_fit_and_compare(capsys):
    for command in ("fit", "compare"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "example" in capsys.readouterr().out


def test_a_date_column_is_read_as_days_since_its_first_date(flu_files, capsys):
    import json

    # The shipped CSV has both: day (1..14) and date (1978-01-22..). With dates t is days
    # since 22 January, so the index case at day 0 is t0 = -1: the same fit, to the
    # optimiser's tolerance.
    dated = [a if a != "t=day" else "t=date" for a in FLU]
    dated[dated.index("--t0") + 1] = "-1"
    args = ["--model", "sir_model.py:SICR", "--output", "fit.json"]
    assert main(FLU + args) == 0
    by_day = json.loads((flu_files / "fit.json").read_text())
    capsys.readouterr()
    assert main(dated + args) == 0
    assert "times: days since 1978-01-22 (column 'date' holds dates)" in capsys.readouterr().out
    by_date = json.loads((flu_files / "fit.json").read_text())
    for name in ("beta", "gamma", "delta"):
        assert by_date["theta"][name] == pytest.approx(by_day["theta"][name], rel=1e-6)
    (flu_files / "gap.csv").write_text("date,in_bed,convalescent\n1978-01-22,3,0\n,8,0\n")
    assert main(["fit", "gap.csv", "--model", "sir_model.py:SICR", "--column", "t=date",
                 "--column", "I=in_bed", "--column", "C=convalescent"]) == 2
    assert "gap.csv column 'date': row 3 has no date" in capsys.readouterr().err


@pytest.mark.slow  # 4 s on two cores: the slow stage of .ci/run
def test_fit_experiment_column_with_a_dose_table_equals_the_python_api(tmp_path, capsys):
    # The shipped indomethacin table (six subjects) and a NONMEM-style dose table: the pooled
    # fit from the command line is the Python API's (same data, settings and start).
    import json

    from sklode import AdjointODE
    from sklode.datasets import load_indomethacin
    from sklode.models import TwoCompartmentIV

    data = load_indomethacin()
    csv = tmp_path / "indo.csv"
    rows = ["subject,time,conc"] + [f"{s},{t},{c}" for s, t, c in zip(
        data.table["subject"], data.table["time"], data.table["conc"])]
    csv.write_text("\n".join(rows) + "\n")
    doses = tmp_path / "doses.csv"
    doses.write_text("subject,time,state,amount\n"
                     + "".join(f"{k},0,central,1\n" for k in range(1, 7)))
    output = tmp_path / "fit.json"
    start = "0.5,0.5,0.5,1,0.05,0.1"
    assert main(["fit", str(csv), "--model", "TwoCompartmentIV", "--time-column", "time",
          "--experiment", "subject", "--dose-table", str(doses), "--x0", "0,0", "--t0", "0",
          "--estimate-x0", "central=no,peripheral=no", "--positive", "--theta0", start,
          "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    # x0 is given for every subject: one line says so, not one line per subject
    assert "6 experiments (subject)" in printed and "x0 given, not estimated: [0.0, 0.0]" \
        in printed and "x0 of 6" not in printed
    est = AdjointODE(TwoCompartmentIV(), x0=[0, 0], t0=0.0, estimate_x0=False, positive=True,
                     theta0=[float(v) for v in start.split(",")]).fit(data.experiments)
    cli = json.loads(output.read_text())
    assert list(cli["theta"]) == list(est.model.param_names)
    np.testing.assert_allclose(list(cli["theta"].values()), est.theta_, rtol=1e-8)
    assert cli["neg_log_likelihood"] == pytest.approx(est.neg_log_likelihood_, rel=1e-8)


def test_fit_prints_an_identifiability_warning_and_strict_exits_1(tmp_path, capsys):
    # Two parameters the data cannot separate: the warning reaches the console (it used to
    # be swallowed, printing "± inf" with exit status 0).
    model_file = tmp_path / "ratio.py"
    model_file.write_text(
        "import torch, sklode\n"
        "class Ratio(sklode.ODEModel):\n"
        "    state_names = ('x',)\n"
        "    param_names = ('a', 'b')\n"
        "    def rhs(self, t, x, theta):\n"
        "        return -theta[0] * theta[1] * x\n")
    t = np.linspace(0, 4, 30)
    csv = tmp_path / "decay.csv"
    csv.write_text("t,x\n" + "".join(f"{ti},{np.exp(-0.5 * ti) * (1 + 0.01 * np.sin(7 * ti))}\n"
                                       for ti in t))
    assert main(["fit", str(csv), "--model", f"{model_file}:Ratio", "--strict"]) == 1
    assert "WARNING IdentifiabilityWarning" in capsys.readouterr().err


def test_the_readme_flu_command_runs_as_written(tmp_path, monkeypatch, capsys):
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    line = next(line for line in (root / "README.md").read_text().splitlines()
                if line.startswith("sklode fit docs/data/flu.csv"))
    argv = shlex.split(line)[1:]
    argv = [str(root / a) if a.startswith("docs/") else a for a in argv]  # the model too
    monkeypatch.chdir(tmp_path)  # the plot is written here
    assert main(argv) == 0
    out = capsys.readouterr()
    assert (tmp_path / "fit.png").exists() and "converged: True" in out.out
    # the published fit of this outbreak: about 1.7 infections per boy-day, 2 days in bed
    beta = float(out.out.split("beta = ")[1].split()[0])
    assert 1.5 < beta < 1.9
