"""The compiled driver's linear solver: its dense (or banded) LU against SuiteSparse's KLU.

For each PEtab problem of the collection with at least ``--min-states`` states (a local copy,
``../shared/petab`` by default), in one process each: the problem loaded, then PEtab's
negative log-likelihood at the nominal parameters (``integrator="CVODES"``, rtol 1e-8, atol
1e-10) with the driver's LU forced dense/banded and forced to KLU (the same model encoded
twice, once each way), CPU seconds of an evaluation after the first (best of two), the
CVODES steps, and the two values' relative difference. AMICI's CPU for Chen_MSB2009 at the
same tolerances, measured beside (``benchmarks/petab_amici.py``'s environment), is quoted from
``--amici`` if given. The crossover sets ``sklode.models._band.SPARSE_LU_MIN_STATES``.

Writes ``benchmarks/results/sparse_lu.md`` and ``.json``. Single-threaded CPU seconds.

    python benchmarks/sparse_lu.py [--collection DIR] [--min-states 20] [PROBLEM ...]
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

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
# this folder holds petab.py: it must not hide the petab package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def _evaluate(problem, sparse):
    """CPU of one -log L (best of two after a first) with the LU of the kind asked."""
    import numpy as np

    from sklode.models import _band, _native
    from sklode.models._derived import derived

    model = problem.model
    saved = _band.SPARSE_LU_MIN_STATES, _band.SPARSE_LU_MAX_DENSITY
    steps = []
    original = _native.NativeSolver.__call__

    def counted(self, *args, **kwargs):
        out = original(self, *args, **kwargs)
        steps.append(out[2]["n_steps"])
        return out

    try:
        # KLU forced: wherever the band is wide, at any size and density; dense: never
        _band.SPARSE_LU_MIN_STATES = 1 if sparse else 10 ** 9
        _band.SPARSE_LU_MAX_DENSITY = 1.0
        derived(model).native = None  # encoded again, the other way
        native = model.native_solver()
        if native is None:
            raise RuntimeError(model.native_unavailable_reason())
        value = problem.neg_log_likelihood(integrator="CVODES")
        best = np.inf
        _native.NativeSolver.__call__ = counted
        for _ in range(2):
            steps.clear()
            start = time.process_time()
            problem.neg_log_likelihood(integrator="CVODES")
            best = min(best, time.process_time() - start)
    finally:
        _native.NativeSolver.__call__ = original
        _band.SPARSE_LU_MIN_STATES, _band.SPARSE_LU_MAX_DENSITY = saved
        derived(model).native = None
    return {"value": float(value), "cpu_s": best, "steps": int(sum(steps)),
            "sparse": bool(native.sparse), "band": list(native.band)}


def one(yaml):
    """The row of one problem (run in a process of its own)."""
    import sklode.petab as sp

    start = time.process_time()
    problem = sp.load(yaml)
    row = {"problem": Path(yaml).parent.name, "load_cpu_s": time.process_time() - start}
    model = problem.model
    rows, cols = model.jac_x_sparsity()
    row.update(n_states=model.n_states, nnz=len(rows),
               density=len(rows) / model.n_states ** 2,
               n_experiments=len(problem.experiments))
    row["dense"] = _evaluate(problem, sparse=False)
    row["klu"] = _evaluate(problem, sparse=True)
    a, b = row["dense"]["value"], row["klu"]["value"]
    row["relative_difference"] = abs(a - b) / max(abs(a), 1e-300)
    row["klu_over_dense"] = row["klu"]["cpu_s"] / row["dense"]["cpu_s"]
    row["auto_sparse"] = bool(model.native_solver().sparse)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*")
    parser.add_argument("--collection", default=str(HERE.parents[1] / "shared" / "petab"))
    parser.add_argument("--min-states", type=int, default=20)
    parser.add_argument("--amici", help="JSON of AMICI's Chen_MSB2009 timing")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one)))
        return
    import pandas as pd  # noqa: F401 -- the collection's tables need it

    collection = Path(args.collection)
    folders = sorted(p for p in collection.iterdir() if p.is_dir() and (
        not args.problems or p.name in args.problems))
    out = []
    for folder in folders:
        yaml = next(folder.glob("*.yaml"), None)
        if yaml is None:
            continue
        size = _states(yaml)
        if size is None or size < args.min_states:
            continue
        run = subprocess.run([sys.executable, __file__, "--one", str(yaml)],
                             capture_output=True, text=True, timeout=3600)
        if run.returncode != 0:
            out.append({"problem": folder.name, "stops": run.stderr.strip()[-400:]})
        else:
            out.append(json.loads(run.stdout.strip().splitlines()[-1]))
        print(json.dumps(out[-1]), flush=True)
    amici = json.loads(Path(args.amici).read_text()) if args.amici else None
    RESULTS.joinpath("sparse_lu.json").write_text(json.dumps(
        {"rows": out, "amici_chen": amici}, indent=1))
    RESULTS.joinpath("sparse_lu.md").write_text(_table(out, amici))


def _states(yaml):
    """The number of species in the problem's SBML (cheap: no import of the model)."""
    import re

    import yaml as pyyaml

    spec = pyyaml.safe_load(Path(yaml).read_text())
    sbml = spec["problems"][0]["sbml_files"][0]
    path = Path(yaml).parent / sbml
    if not path.is_file():
        return None
    return len(re.findall(r"<species\b", path.read_text()))


def _table(rows, amici):
    lines = ["# The driver's linear solver: dense/banded LU against KLU "
             "(`benchmarks/sparse_lu.py`)", "",
             "PEtab's -log L at the nominal parameters, `integrator=\"CVODES\"`, rtol 1e-8, "
             "atol 1e-10: CPU seconds of one evaluation (best of two after the first, one "
             "thread), the same model encoded with each linear solver. `auto` is what "
             "`use_sparse_lu` picks.", "",
             "| problem | states | nonzeros of df/dx | experiments | dense/band LU, s | "
             "KLU, s | KLU / dense | steps (dense, KLU) | values' difference | auto |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "stops" in r:
            lines.append(f"| {r['problem']} |" + " – |" * 8 + f" {r['stops'][:80]} |")
            continue
        lines.append(
            f"| {r['problem']} | {r['n_states']} | {r['nnz']} ({100 * r['density']:.1f} %) | "
            f"{r['n_experiments']} | {r['dense']['cpu_s']:.3f} | {r['klu']['cpu_s']:.3f} | "
            f"{r['klu_over_dense']:.2f} | {r['dense']['steps']}, {r['klu']['steps']} | "
            f"{r['relative_difference']:.1e} | {'KLU' if r['auto_sparse'] else 'dense/band'} |")
    same = [r["klu_over_dense"] for r in rows if "stops" not in r and not r["klu"]["sparse"]]
    if same:  # where the band is narrow both columns ran the same LU: the run's noise
        lines += ["", f"Where both columns ran the same LU (a narrow band at that size, "
                  f"{len(same)} problems) their ratio is the measurement's noise: "
                  f"{min(same):.2f}-{max(same):.2f}."]
    if amici:
        lines += ["", "AMICI 1.0.1 (KLU, its own build) on Chen_MSB2009 at the same "
                  "tolerances, same machine: " + ", ".join(
                      f"{k}: {v['cpu']:.2f} CPU s (-log L {v['nllh']:.6f})"
                      for k, v in amici.items())]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
