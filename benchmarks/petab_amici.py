"""The AMICI side of ``benchmarks/petab.py``: run in an environment with ``amici`` and
``petab`` from the registry (never a dependency of sklode), e.g.

    python -m venv /tmp/amici && . /tmp/amici/bin/activate
    pip install amici petab scipy swig pypesto fides   # amici builds from source (~3 min)
    PATH=/tmp/amici/bin:$PATH python benchmarks/petab_amici.py [PROBLEM ...]

For each problem of ``../shared/petab`` (or those named): the model imported through
``amici.importers.petab``, PEtab's negative log-likelihood at the nominal parameters
(CVODES at rtol 1e-10, atol 1e-12), the CPU of one simulation (there and at rtol 1e-8,
atol 1e-10, the tolerances of ``petab_collection.md``'s CPU columns) and of one simulation
with forward sensitivities, or the error that stops the import. Writes
``benchmarks/results/petab_amici.json``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
# this folder holds petab.py: it must not hide the petab package from the imports below
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
COLLECTION = HERE.parents[1] / "shared" / "petab"


def _cpu(function, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        start = time.process_time()
        function()
        best = min(best, time.process_time() - start)
    return best


def one(folder):
    import amici
    import amici.sim.sundials as sundials
    import petab.v1 as petab
    from amici.importers.petab.v1 import import_petab_problem
    from amici.sim.sundials.petab.v1 import LLH, simulate_petab

    own = folder / f"{folder.name}.yaml"
    yaml = own if own.is_file() else next(folder.glob("*.yaml"))
    problem = petab.Problem.from_yaml(str(yaml))
    start = time.process_time()
    model = import_petab_problem(problem, output_dir=Path(tempfile.mkdtemp()) / folder.name,
                                 model_name=folder.name.replace("-", "_"))
    import_cpu = time.process_time() - start
    solver = model.create_solver()
    solver.set_relative_tolerance(1e-10)
    solver.set_absolute_tolerance(1e-12)
    solver.set_max_steps(100000)
    nominal = dict(zip(problem.x_ids, problem.x_nominal))

    def simulate():
        return simulate_petab(problem, amici_model=model, solver=solver,
                              problem_parameters=nominal, scaled_parameters=False)

    result = simulate()
    llh = float(result[LLH])
    out = {"neg_log_likelihood": -llh, "import_cpu_s": import_cpu,
           "simulate_cpu_s": _cpu(simulate), "amici": amici.__version__,
           "rtol": 1e-10, "atol": 1e-12}
    # and at the tolerances of petab_collection.md's CPU columns (rtol 1e-8, atol 1e-10)
    solver.set_relative_tolerance(1e-8)
    solver.set_absolute_tolerance(1e-10)
    out["simulate_cpu_s_rtol_1e-8"] = _cpu(simulate)
    solver.set_relative_tolerance(1e-10)
    solver.set_absolute_tolerance(1e-12)
    solver.set_sensitivity_order(sundials.SensitivityOrder.first)
    solver.set_sensitivity_method(sundials.SensitivityMethod.forward)
    out["simulate_with_sensitivities_cpu_s"] = _cpu(simulate)
    return out


def main(names):
    import logging

    warnings.simplefilter("ignore")
    logging.disable(logging.INFO)  # AMICI logs every parameter mapping at DEBUG
    path = HERE / "results" / "petab_amici.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    folders = sorted(p for p in COLLECTION.iterdir() if p.is_dir())
    for folder in folders:
        if names and folder.name not in names:
            continue
        try:
            results[folder.name] = one(folder)
        except Exception as exc:  # the feature that stops the import, recorded
            results[folder.name] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        print(folder.name, results[folder.name], flush=True)
        path.write_text(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1:])
