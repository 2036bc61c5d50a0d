"""The PEtab benchmark collection through ``sklode.petab``, problem by problem (#58 item 5).

Reads a local copy of the collection (a folder of problem folders, each with its PEtab yaml;
nothing is fetched) and, for each problem in its own process with a time cap:

* what it is: states, estimated parameters, experiments (condition splits), measurements;
* the load (``sklode.petab.load``: SBML import, code generation, checks), CPU s;
* PEtab's -log L at the nominal parameters (``integrator="auto"``; rtol 1e-10, atol 1e-12)
  against the reference: AMICI's value at those tolerances recorded in
  ``tests/data/petab_amici_nominal.json`` where there is one, else the likelihood of the
  problem's own simulated data (``simulations.tsv``/``simulatedData*.tsv`` through
  ``petab.calculate_llh``);
* CPU of one evaluation (after the first, which builds the solver) and of one gradient (the
  fit's objective at the nominal point: CVODES' forward sensitivities or its adjoint, by
  the size rule);
* what stops it: the exception of the step that failed, or the time cap.

Writes ``benchmarks/results/petab_collection.md`` and ``.json``; CPU seconds single-threaded.

    python benchmarks/petab_collection.py ../shared/petab [--timeout 300] [--problems A,B]

(``--problems``: those rerun, the others keep their recorded rows.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
HERE = Path(__file__).resolve().parent
# this folder holds petab.py: it must not hide the petab package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
RESULTS = HERE / "results"
AMICI_NOMINAL = HERE.parent / "tests" / "data" / "petab_amici_nominal.json"
AMICI_CPU = RESULTS / "petab_amici.json"  # benchmarks/petab_amici.py, run beside


def _reference(folder, yaml):
    """AMICI's recorded nominal -log L (rtol 1e-10) where there is one, else the -log L of
    the problem's own simulated data: ``(value, kind, None)``, or ``(None, None, why)``."""
    import petab

    recorded = json.loads(AMICI_NOMINAL.read_text())["neg_log_likelihood"].get(folder.name) \
        if AMICI_NOMINAL.is_file() else None
    if recorded is not None:  # tighter than some collections' simulated data (Brannmark)
        return float(recorded), "AMICI at rtol 1e-10 (recorded)", None
    why = "no simulated data shipped"
    files = sorted(folder.glob("simulations.tsv")) + sorted(folder.glob("simulatedData*.tsv"))
    if files:
        p = petab.Problem.from_yaml(str(yaml))
        simulated = petab.get_simulation_df(str(files[0]))
        measured = p.measurement_df
        try:  # petab's own matching of the two tables
            return -float(petab.calculate_llh(measured, simulated, p.observable_df,
                                              p.parameter_df)), "simulated data", None
        except Exception as exc:  # noqa: BLE001 -- tried again below, row by row
            why = f"petab.calculate_llh: {type(exc).__name__}: {exc}"[:160]
        # the simulations row by row beside the measurements they simulate (petab's
        # matching trips on empty cells read as NaN in one table and not the other)
        keys = ("observableId", "simulationConditionId")
        if len(simulated) == len(measured):  # in another order: by its keys where unique
            by = [k for k in ("observableId", "simulationConditionId",
                              "preequilibrationConditionId", "time")
                  if k in simulated and k in measured]
            order = [table.assign(_k=table[by].astype(str).agg("|".join, axis=1))
                     for table in (measured, simulated)]
            if all(t["_k"].is_unique for t in order) and set(order[0]["_k"]) == set(
                    order[1]["_k"]):
                simulated = order[1].set_index("_k").loc[order[0]["_k"]].reset_index(
                    drop=True)
        aligned = len(simulated) == len(measured) and all(
            (simulated[k].astype(str).to_numpy() == measured[k].astype(str).to_numpy()).all()
            for k in keys) and np.allclose(simulated["time"].astype(float),
                                           measured["time"].astype(float))
        if aligned:
            table = measured.copy()
            table["simulation"] = simulated["simulation"].to_numpy()
            try:
                llh = petab.calculate_llh(measured, table.drop(columns="measurement"),
                                          p.observable_df, p.parameter_df)
                return -float(llh), "simulated data", None
            except Exception as exc:  # noqa: BLE001 -- petab cannot evaluate it: say why
                why = f"petab.calculate_llh: {type(exc).__name__}: {exc}"[:160]
    return None, None, why


def _prediction_difference(problem, folder):
    """The largest difference between sklode's observables (rtol 1e-10) and the problem's
    own simulated data, row by row, relative to each value (at least 1e-3 of its
    observable's largest), and the rows compared; None where there are no simulated data.
    The check where petab cannot recompute the likelihood of the simulated data (a noise
    formula of states, Lang and Liu). A row whose observable parameters differ between
    replicates is compared with the nearest of its simulations."""
    import pandas as pd

    files = sorted(folder.glob("simulations.tsv")) + sorted(folder.glob("simulatedData*.tsv"))
    if not files:
        return None, 0
    simulated = pd.read_csv(files[0], sep="\t")
    if "simulation" not in simulated:
        return None, 0
    pre = "preequilibrationConditionId"
    simulated["_pre"] = (simulated[pre].fillna("").astype(str) if pre in simulated else "")
    scale = simulated.groupby("observableId")["simulation"].apply(lambda v: v.abs().max())
    names = problem.model.observable_names
    worst, rows = 0.0, 0
    for e, P in zip(problem.experiments, problem.predict(rtol=1e-10, atol=1e-12)):
        cid = e.name.split(" ")[0]
        pid = e.name.split("(from ")[1].split(")")[0] if "(from " in e.name else ""
        steady = "(steady state)" in e.name
        for i, t in enumerate(e.t):
            for j, o in enumerate(names):
                if not np.isfinite(e.Y[i, j]):
                    continue
                times = simulated["time"].astype(float)
                match = simulated[(simulated["observableId"] == o)
                                  & (simulated["simulationConditionId"] == cid)
                                  & (simulated["_pre"] == pid)
                                  & (np.isinf(times) if steady else np.isclose(times, t))]
                if not len(match):
                    continue
                ref = match["simulation"].to_numpy(dtype=float)
                k = int(np.argmin(np.abs(ref - P[i, j])))
                floor = 1e-3 * float(scale.get(o, 0.0)) or 1e-300
                worst = max(worst, abs(P[i, j] - ref[k]) / max(abs(ref[k]), floor))
                rows += 1
    return (worst if rows else None), rows


def one(folder, emit=lambda row: None):
    """The row of one problem (run in a child process); ``emit(row)`` after each step, so
    that a problem stopped by the time cap keeps what it measured."""
    import warnings

    import torch

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    import sklode.petab as sp

    folder = Path(folder)
    own = folder / f"{folder.name}.yaml"  # Zhao's folder also holds a test problem's
    yaml = own if own.is_file() else next(folder.glob("*.yaml"))
    row = {"problem": folder.name}
    step = "load"
    try:
        start = time.process_time()
        problem = sp.load(yaml)
        row["load_cpu_s"] = time.process_time() - start
        model = problem.model
        row.update(n_states=model.n_states, n_estimated=len(problem.parameter_names),
                   n_experiments=len(problem.experiments),
                   n_measurements=int(sum(np.isfinite(e.Y).sum() for e in problem.experiments)))
        emit(row)
        step = "-log L"
        start = time.process_time()
        nll = problem.neg_log_likelihood()
        row["first_eval_cpu_s"] = time.process_time() - start
        start = time.process_time()
        problem.neg_log_likelihood()
        row["eval_cpu_s"] = time.process_time() - start
        row["neg_log_likelihood"] = nll
        row["integrator"] = ("CVODES" if model.native_solver() is not None else "LSODA")
        emit(row)
        step = "reference"
        try:
            reference, kind, why = _reference(folder, yaml)
        except Exception as exc:  # noqa: BLE001 -- the reference's failure is not sklode's
            reference, kind, why = None, None, f"{type(exc).__name__}: {exc}"[:160]
        row["reference"], row["reference_kind"], row["no_simulated_data"] = reference, kind, why
        if reference is not None:  # compared at the references' tight tolerances
            tight = problem.neg_log_likelihood(rtol=1e-10, atol=1e-12)
            row["neg_log_likelihood_tight"] = tight
            row["relative_difference"] = abs(tight - reference) / max(abs(reference), 1e-300)
        else:  # the simulated data themselves, where petab cannot score them
            row["prediction_difference"], row["prediction_rows"] = _prediction_difference(
                problem, folder)
        emit(row)
        step = "gradient"
        from sklode._validation import check_experiments
        from sklode.outputerror._pose import objective_for_experiments

        data = check_experiments(problem.experiments, None, model=model, estimate_x0=False,
                                 min_samples=1, warn_initial_time=False)
        fitted = np.array([n in problem.parameter_names for n in model.param_names])
        objective, u0 = objective_for_experiments(
            model, data, theta0=problem.theta(None), fitted=fitted,
            noise_kind=problem.noise_kind, integrator="auto", rtol=1e-8, atol=1e-10)
        objective.value_and_grad(u0, "adjoint")  # its solves' set-up
        moved = u0 + 1e-4 * np.maximum(np.abs(u0), 1e-3)  # not the point the objective keeps
        start = time.process_time()
        objective.value_and_grad(moved, "adjoint")
        row["gradient_cpu_s"] = time.process_time() - start
    except Exception as exc:  # noqa: BLE001 -- what stops a problem is the result
        row["stops"] = f"{step}: {type(exc).__name__}: {exc}"[:400]
    return row


def run(collection, names, timeout):
    rows = []
    for name in names:
        start = time.perf_counter()
        try:
            out = subprocess.run([sys.executable, __file__, "--one", str(collection / name)],
                                 capture_output=True, text=True, timeout=timeout)
            lines = out.stdout.strip().splitlines()
            row = json.loads(lines[-1]) if out.returncode == 0 and lines else {
                "problem": name, "stops": f"crashed: {out.stderr.strip()[-300:]}"}
        except subprocess.TimeoutExpired as exc:  # what it measured before the cap
            printed = (exc.stdout or b"")
            printed = printed.decode() if isinstance(printed, bytes) else printed
            lines = printed.strip().splitlines()
            row = json.loads(lines[-1]) if lines else {"problem": name}
            done = [k for k in ("load_cpu_s", "eval_cpu_s", "reference_kind") if k in row]
            step = {0: "load", 1: "-log L", 2: "reference"}.get(len(done), "gradient")
            row["stops"] = f"{step}: no result within the {timeout:.0f} s cap"
        row["wall_s"] = time.perf_counter() - start
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def to_markdown(rows, timeout):
    def num(v, fmt):
        return "–" if v is None else format(v, fmt)

    def difference(r):
        if r.get("relative_difference") is not None:
            return format(r["relative_difference"], ".1e")
        if r.get("prediction_difference") is not None:
            return (f"observables {r['prediction_difference']:.1e} "
                    f"({r['prediction_rows']} rows)")
        return "–"

    ok = [r for r in rows if r.get("relative_difference") is not None]
    matched = sum(r["relative_difference"] <= 1e-6 for r in ok)
    lines = ["# The PEtab collection (`benchmarks/petab_collection.py`)", "",
             f"Each problem in its own process, capped at {timeout:.0f} s wall. -log L at "
             "the nominal parameters with `integrator=\"auto\"` (rtol 1e-8, atol 1e-10; "
             "the CPU columns), and at rtol 1e-10, atol 1e-12 against the likelihood of the "
             "problem's own simulated data, or AMICI's recorded value at those tolerances "
             "(the relative difference). CPU s single-threaded: the load (SBML import, code "
             "generation, checks), one evaluation after the first, one gradient (the fit's: "
             "CVODES' forward sensitivities, or its adjoint above the size rule of "
             "`benchmarks/results/crossover.md`). "
             f"{len(rows)} problems; {sum('stops' not in r for r in rows)} evaluated in "
             f"full; {matched} of {len(ok)} with a reference match it to 1e-6 relative.", "",
             "Where petab cannot score the simulated data (a noise formula of states), "
             "sklode's observables are compared with them row by row (largest relative "
             "difference, in parentheses the rows compared).", "",
             "'AMICI evaluation': AMICI 1.0.1's CPU for one simulation of the problem at the "
             "same tolerances (`benchmarks/petab_amici.py`, recorded in "
             "`results/petab_amici.json`, best of 5), where AMICI imports it; † at rtol "
             "1e-10, atol 1e-12 (recorded before the timing at these tolerances), a "
             "tighter solve than sklode's column.", "",
             "| problem | states | estimated | experiments | measurements | load | -log L | "
             "reference | relative difference | evaluation | AMICI evaluation | gradient | "
             "what stops it |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    amici = json.loads(AMICI_CPU.read_text()) if AMICI_CPU.is_file() else {}
    for r in rows:
        peer = amici.get(r["problem"], {})
        peer_cpu = peer.get("simulate_cpu_s_rtol_1e-8")
        tight = peer.get("simulate_cpu_s")  # recorded before the 1e-8 timing existed
        peer_text = (num(peer_cpu, ".3f") if peer_cpu is not None else
                     f"{tight:.3f} †" if tight is not None else
                     "refused" if "error" in peer else "–")
        reference = f"– ({r['no_simulated_data']})" if r.get("reference") is None and \
            r.get("no_simulated_data") else "–" if r.get("reference") is None else \
            f"{r['reference']:.6f} ({r['reference_kind']})"
        lines.append(
            f"| {r['problem']} | {r.get('n_states', '–')} | {r.get('n_estimated', '–')} | "
            f"{r.get('n_experiments', '–')} | {r.get('n_measurements', '–')} | "
            f"{num(r.get('load_cpu_s'), '.2f')} | {num(r.get('neg_log_likelihood'), '.6f')} | "
            f"{reference} | {difference(r)} | "
            f"{num(r.get('eval_cpu_s'), '.3f')} | {peer_text} | "
            f"{num(r.get('gradient_cpu_s'), '.3f')} | {r.get('stops', '')} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("collection", nargs="?")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--problems", default=None)
    parser.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(one(args.one, lambda row: print(json.dumps(row), flush=True))))
        return
    collection = Path(args.collection)
    names = args.problems.split(",") if args.problems else sorted(
        p.name for p in collection.iterdir() if p.is_dir() and any(p.glob("*.yaml")))
    rows = run(collection, names, args.timeout)
    recorded = RESULTS / "petab_collection.json"
    if args.problems and recorded.is_file():  # the others keep their last rows
        fresh = {r["problem"]: r for r in rows}
        kept = json.loads(recorded.read_text())
        rows = [fresh.pop(r["problem"], r) for r in kept] + list(fresh.values())
    recorded.write_text(json.dumps(rows, indent=1))
    (RESULTS / "petab_collection.md").write_text(to_markdown(rows, args.timeout))
    print(to_markdown(rows, args.timeout))


if __name__ == "__main__":
    main()
