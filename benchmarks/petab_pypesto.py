"""pyPESTO + Fides (AMICI underneath) on the start points ``benchmarks/petab.py`` drew: run
in the benchmark's own environment (``pip install amici petab pypesto fides scipy swig``),
never a dependency of sklode.

    PATH=/tmp/amici/bin:$PATH python benchmarks/petab_pypesto.py PROBLEM [PROBLEM ...]

Reads ``benchmarks/results/petab_starts.json`` (each problem's starts, linear scale, in
the parameter table's order of the estimated parameters), fits from each with Fides
(AMICI forward sensitivities, rtol 1e-8, atol 1e-10: sklode's fitting tolerances) and writes
the final -log L of every start and the CPU of the whole multistart (one process, one
thread) to ``benchmarks/results/petab_pypesto.json``.
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# this folder holds petab.py: it must not hide the petab package from the imports below
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
COLLECTION = HERE.parents[1] / "shared" / "petab"


def one(name, starts):
    import petab.v1 as petab
    import pypesto
    import pypesto.optimize as optimize
    import pypesto.petab

    yaml = next((COLLECTION / name).glob("*.yaml"))
    problem = petab.Problem.from_yaml(str(yaml))
    if petab.lint.measurement_table_has_timepoint_specific_mappings(
            problem.measurement_df):
        # AMICI refuses observable/noise parameters that change between time points
        # (Fiedler): petab's own flattening gives an equivalent problem (one observable per
        # mapping, the same likelihood) that it takes
        petab.flatten_timepoint_specific_output_overrides(problem)
    importer = pypesto.petab.PetabImporter(problem, output_folder=tempfile.mkdtemp(),
                                           model_name=name)
    objective = importer.create_objective()
    solver = objective.amici_solver
    solver.set_relative_tolerance(1e-8)
    solver.set_absolute_tolerance(1e-10)
    pproblem = importer.create_problem(objective)
    # the starts on the optimiser's (scaled) parameters, in pyPESTO's full parameter order
    # (its guesses span every parameter; a fixed one keeps its value)
    scales = dict(zip(problem.parameter_df.index, problem.parameter_df.parameterScale))
    fixed = dict(zip((pproblem.x_names[i] for i in pproblem.x_fixed_indices),
                     pproblem.x_fixed_vals))
    guesses = []
    for start in starts["values"]:
        by_name = dict(zip(starts["names"], start))
        row = []
        for pid in pproblem.x_names:
            if pid in fixed:
                row.append(fixed[pid])
                continue
            v = by_name[pid]
            row.append(np.log10(v) if scales[pid] == "log10" else
                       np.log(v) if scales[pid] == "log" else v)
        guesses.append(row)
    pproblem.set_x_guesses(np.array(guesses))
    begin = time.process_time()
    result = optimize.minimize(pproblem, optimizer=optimize.FidesOptimizer(),
                               n_starts=len(guesses), progress_bar=False)
    cpu = time.process_time() - begin
    # in the starts' order (pyPESTO sorts its results by value; ids are the start indices),
    # so that each start compares with sklode's from the same point
    by_start = sorted(result.optimize_result.list, key=lambda r: int(r.id))
    fvals = [float(r.fval) for r in by_start]
    return {"fvals": fvals, "best": float(np.nanmin(fvals)), "cpu_s": cpu,
            # Fides evaluates value, gradient and Fisher information together: one per
            # iteration, so these count its iterations (with the rejected trial points)
            "n_evaluations": [int(r.n_fval) for r in by_start],
            "exitflags": [int(r.exitflag) if r.exitflag is not None else None
                          for r in by_start],
            "within_0.1": int(np.sum(np.array(fvals) <= np.nanmin(fvals) + 0.1)),
            "pypesto": pypesto.__version__, "date": time.strftime("%Y-%m-%d")}


def main(names):
    warnings.simplefilter("ignore")
    logging.disable(logging.INFO)
    starts = json.loads((HERE / "results" / "petab_starts.json").read_text())
    path = HERE / "results" / "petab_pypesto.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    for name in names:
        try:
            results[name] = one(name, starts[name])
        except Exception as exc:
            results[name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        print(name, {k: v for k, v in results[name].items() if k != "fvals"}, flush=True)
        path.write_text(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
