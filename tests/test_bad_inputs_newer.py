"""The catalogue of bad inputs to the newer surfaces (#56 item 9): ``Experiment``, tables,
``MixedEffectsODE``, PEtab and the command line. Every case raises ValueError/TypeError with
a message naming the input (the argument, the column and row, the experiment), in the style
of ``test_bad_inputs.py``: never a Python type error from deep inside, never silence.
"""

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sklode import AdjointODE, Experiment, MixedEffectsODE, experiments_from_table
from sklode.cli import main
from sklode.models import OralAbsorption

from test_bad_inputs import _raises

T = np.array([0.5, 1.0, 2.0, 4.0])
Y = np.array([[1.0], [1.5], [1.2], [0.8]])
LONG = pd.DataFrame({"id": ["a"] * 4 + ["b"] * 4, "time": np.r_[T, T],
                     "conc": np.r_[Y.ravel(), Y.ravel() * 1.1]})
DOSES = pd.DataFrame({"id": ["a", "b"], "time": [0.0, 0.0], "state": ["gut", "gut"],
                      "amount": [10.0, 12.0]})

EXPERIMENT_CASES = {
    "a dose as a bare number": (lambda: Experiment(T, Y, doses=5.0, name="s1"), TypeError,
                                "Experiment 's1': doses must be a list of (time, state, amount)"),
    "a dose of two fields": (lambda: Experiment(T, Y, doses=[(0.0, 5.0)]), ValueError,
                             "dose 0 is (0.0, 5.0); each dose is a (time, state, amount)"),
    "a dose amount as text": (lambda: Experiment(T, Y, doses=[(0.0, "gut", "ten")]), ValueError,
                              "dose 0 has amount 'ten', not a number"),
    "conditions as a list": (lambda: Experiment(T, Y, conditions=["V", 3.0], name=7), TypeError,
                             "Experiment 7: conditions must be a dict"),
    "no samples": (lambda: Experiment([], np.empty((0, 1)), name="s9"), ValueError,
                   "Experiment 's9' has no samples"),
}

TABLE_CASES = {
    "NaN experiment ids": (
        lambda: experiments_from_table(LONG.assign(id=["a", "a", np.nan, "a"] + ["b"] * 4),
                                       experiment="id", values=["conc"]),
        ValueError, "The table's column 'id' names no experiment in row(s) [2]"),
    "blank experiment ids": (
        lambda: experiments_from_table(LONG.assign(id=["a"] * 4 + ["b", " ", "b", "b"]),
                                       experiment="id", values=["conc"]),
        ValueError, "names no experiment in row(s) [5]"),
    "a value that is not a number": (
        lambda: experiments_from_table(LONG.assign(conc=LONG.conc.astype(object).where(
            LONG.index != 6, "five")), experiment="id", values=["conc"]),
        ValueError, "The table's column 'conc' holds 'five' in row 6, not a number"),
    "a time that is not a number": (
        lambda: experiments_from_table(LONG.assign(time=LONG.time.astype(object).where(
            LONG.index != 1, "noon")), experiment="id", values=["conc"]),
        ValueError, "column 'time' holds 'noon' in row 1"),
    "a dose amount that is not a number": (
        lambda: experiments_from_table(LONG, experiment="id", values=["conc"],
                                       doses=DOSES.assign(amount=["10", "lots"])),
        ValueError, "The dose table's column 'amount' holds 'lots' in row 1"),
    "a setting by experiment missing one": (
        lambda: experiments_from_table(LONG, experiment="id", values=["conc"],
                                       x0={"a": [0.0, 0.0]}),
        ValueError, "x0= is a dict by experiment name but has no entry for experiment(s) ['b']"),
    "a dose table naming an unknown experiment": (
        lambda: experiments_from_table(LONG, experiment="id", values=["conc"],
                                       doses=DOSES.assign(id=["a", "c"])),
        ValueError, "The dose table names experiment(s) ['c']"),
}


@pytest.mark.parametrize("case", list(EXPERIMENT_CASES) + list(TABLE_CASES))
def test_experiments_and_tables_refuse_bad_input_by_name(case):
    call, exc, pattern = {**EXPERIMENT_CASES, **TABLE_CASES}[case]
    _raises(call, exc, pattern)


def test_a_dose_table_with_its_own_time_column_needs_no_dose_time():
    # DESIGN §1b: a dose table has "time"; the measurements may call theirs "Time"
    experiments = experiments_from_table(LONG.rename(columns={"time": "Time"}), time="Time",
                                         experiment="id", values=["conc"], doses=DOSES)
    assert [e.doses for e in experiments] == [[(0.0, "gut", 10.0)], [(0.0, "gut", 12.0)]]


def test_errors_name_the_experiment_not_only_its_position():
    experiments = [Experiment(T, Y, name="s1"), Experiment(T[:1], Y[:1] * np.nan, name="s2")]
    _raises(lambda: AdjointODE(OralAbsorption(), observed=["concentration"], x0=[1, 0],
                               estimate_x0=False).fit(experiments),
            ValueError, "experiment 's2' (number 1)")


def test_mixed_effects_refuses_an_unknown_random_parameter():
    experiments = [Experiment(T, Y, name=k, doses=[(0.0, "gut", 10.0)]) for k in "abc"]
    _raises(lambda: MixedEffectsODE(OralAbsorption(), random=("ka", "V"),
                                    observed=["concentration"], x0=[0, 0],
                                    t0=0.0).fit(experiments),
            ValueError, "'V'")


def _csv(path, text):
    path.write_text(text)
    return str(path)


def test_cli_dose_table_without_experiment_is_an_error(tmp_path, capsys):
    data = _csv(tmp_path / "d.csv", "t,concentration\n" + "".join(
        f"{t},{y}\n" for t, y in zip(T, Y.ravel())))
    doses = _csv(tmp_path / "doses.csv", "id,time,state,amount\na,0,gut,10\n")
    # it used to drop the dose table silently (the only warning then blamed the optimiser)
    assert main(["fit", data, "--model", "OralAbsorption", "--observed", "concentration",
                 "--dose-table", doses]) == 2
    assert "needs --experiment COLUMN" in capsys.readouterr().err


def test_cli_empty_subject_cell_is_an_error(tmp_path, capsys):
    rows = "".join(f"{s},{t},{y}\n" for s in "ab" for t, y in zip(T, Y.ravel()))
    data = _csv(tmp_path / "d.csv", "id,t,concentration\n" + rows + ",5.0,0.5\n")
    assert main(["fit", data, "--model", "OralAbsorption", "--observed", "concentration",
                 "--experiment", "id", "--x0", "10,0", "--estimate-x0", "no"]) == 2
    assert "column 'id': row(s) [10] name no experiment" in capsys.readouterr().err


def test_petab_measurement_table_without_its_measurement_column(tmp_path):
    pytest.importorskip("petab")
    from sklode import petab

    source = Path(__file__).resolve().parents[2] / "shared" / "petab" / "Bertozzi_PNAS2020"
    if not source.exists():
        pytest.skip("the PEtab problems of ../shared are not here")
    copy = tmp_path / "problem"
    shutil.copytree(source, copy)
    table = pd.read_csv(copy / "measurements.tsv", sep="\t")
    table.drop(columns="measurement").to_csv(copy / "measurements.tsv", sep="\t", index=False)
    _raises(lambda: petab.load(copy / "problem.yaml"), ValueError,
            "the measurement table has no column 'measurement', which PEtab requires")
