"""The PEtab development problems (``../shared/petab``) through ``sklode.petab``, beside
AMICI and pyPESTO + Fides run in their own environment (``petab_amici.py``,
``petab_pypesto.py``).

1. Every problem: loaded (or the feature that stops the import), PEtab's -log L at the
   nominal parameters (LSODA at rtol 1e-10, atol 1e-12) beside AMICI's (CVODES at the same
   tolerances), the relative difference, and the CPU of one evaluation of each.
2. ``--fit PROBLEM ...``: 20 starts drawn uniformly in the bounds on each parameter's scale
   (``problem.starts(20, random_state=0)``, written to ``results/petab_starts.json`` for
   pyPESTO), sklode's AdjointODE from each (one thread, rtol 1e-8): best -log L, starts
   within 0.1 of the best, CPU; pyPESTO + Fides from the same starts when
   ``results/petab_pypesto.json`` holds them.

Writes ``benchmarks/results/petab.md`` and ``petab.json``.

    python benchmarks/petab.py [--fit Bertozzi_PNAS2020 ...] [--starts 20] [--skip-nominal]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
# this folder holds petab.py: it must not hide the petab package from the imports below
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
COLLECTION = HERE.parents[1] / "shared" / "petab"
RESULTS = HERE / "results"


def _cpu(function, repeats=3):
    best, value = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        value = function()
        best = min(best, time.process_time() - start)
    return best, value


def nominal(folder):
    from sklode import petab

    yaml = next(folder.glob("*.yaml"))
    start = time.process_time()
    try:
        problem = petab.load(yaml)
    except petab.UnsupportedFeature as exc:
        return {"refused": str(exc)}
    load_cpu = time.process_time() - start
    cpu, value = _cpu(lambda: problem.neg_log_likelihood(rtol=1e-10, atol=1e-12))
    return {"load_cpu_s": load_cpu, "neg_log_likelihood": value, "simulate_cpu_s": cpu,
            "states": problem.model.n_states, "estimated": len(problem.parameter_names),
            "experiments": len(problem.experiments)}


def fit(folder, n_starts):
    from sklode import petab

    problem = petab.load(next(folder.glob("*.yaml")))
    starts = problem.starts(n_starts, random_state=0)
    costs, stops, cpu = [], [], 0.0
    for k, start in enumerate(starts):
        est = problem.estimator(theta0=start)
        begin = time.process_time()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(problem.experiments)
            costs.append(float(est.neg_log_likelihood_))
            stops.append(f"{est.n_iter_} iterations: {est.stop_reason_}")
        except Exception as exc:  # a start that cannot be integrated counts as failed
            costs.append(float("inf"))
            stops.append(f"failed: {type(exc).__name__}: {str(exc)[:200]}")
        cpu += time.process_time() - begin
        print(f"  {folder.name} start {k + 1}/{n_starts}: {costs[-1]:.4f} ({stops[-1]})",
              flush=True)
    costs = np.array(costs)
    return ({"names": list(problem.parameter_names), "values": starts.tolist()},
            {"fvals": costs.tolist(), "best": float(costs.min()), "cpu_s": cpu,
             "within_0.1": int(np.sum(costs <= costs.min() + 0.1)), "stops": stops,
             "optimizer": f"{est.optimizer}, max_iter {est.max_iter}",
             "nominal": problem.neg_log_likelihood()})


def _load(name):
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else {}


def main(fit_names, n_starts, skip_nominal=False):
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    results = _load("petab.json")
    for folder in sorted(p for p in COLLECTION.iterdir() if p.is_dir()):
        if skip_nominal and (folder.name not in fit_names
                             or "nominal" in results.get(folder.name, {})):
            continue  # kept from the last run
        results.setdefault(folder.name, {})["nominal"] = nominal(folder)
        print(folder.name, results[folder.name]["nominal"], flush=True)
    starts = _load("petab_starts.json")
    for name in fit_names:
        starts[name], results[name]["fit"] = fit(COLLECTION / name, n_starts)
        (RESULTS / "petab_starts.json").write_text(json.dumps(starts))
        (RESULTS / "petab.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    (RESULTS / "petab.json").write_text(json.dumps(results, indent=1, sort_keys=True))
    write_markdown(results)


def write_markdown(results):
    amici, pypesto = _load("petab_amici.json"), _load("petab_pypesto.json")
    version = next((r["amici"] for r in amici.values() if "amici" in r), "?")
    lines = [
        "# The PEtab development problems: sklode beside AMICI and pyPESTO",
        "",
        f"Written by `benchmarks/petab.py` (sklode) with `benchmarks/petab_amici.py` (AMICI "
        f"{version}, imported through `amici.importers.petab`) and `benchmarks/"
        "petab_pypesto.py` (pyPESTO + Fides), each in its own process, one thread. -log L "
        "is PEtab's negative log-likelihood at the parameter table's nominal values: "
        "sklode with LSODA, AMICI with CVODES, both at rtol 1e-10, atol 1e-12. CPU: one "
        "evaluation of it (best of 3 for sklode, of 5 for AMICI; AMICI's through "
        "`simulate_petab`, its model compiled beforehand).",
        "",
        "| problem | sklode -log L | AMICI -log L | relative difference | sklode CPU s | "
        "AMICI CPU s | AMICI with sensitivities CPU s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in sorted(results.items()):
        n, a = r.get("nominal", {}), amici.get(name, {})
        ours = n.get("neg_log_likelihood")
        theirs = a.get("neg_log_likelihood")
        if "refused" in n:
            cell_ours = f"refused: {n['refused']}"
        else:
            cell_ours = f"{ours:.8f}"
        cell_theirs = f"{theirs:.8f}" if theirs is not None else \
            f"refused: {a.get('error', 'not run')[:120]}"
        rel = (f"{abs(ours - theirs) / abs(theirs):.1e}" if ours is not None
               and theirs is not None else "—")
        lines.append(
            f"| {name} | {cell_ours} | {cell_theirs} | {rel} | "
            f"{n.get('simulate_cpu_s', float('nan')):.3f} | "
            f"{a.get('simulate_cpu_s', float('nan')):.3f} | "
            f"{a.get('simulate_with_sensitivities_cpu_s', float('nan')):.3f} |")
    fits = {k: r["fit"] for k, r in results.items() if "fit" in r}
    if fits:
        lines += [
            "",
            "## Multi-start fits from the same starts",
            "",
            "Starts drawn uniformly in the parameter table's bounds on each parameter's "
            "scale (`problem.starts(n, random_state=0)`); sklode: `problem.estimator(theta0="
            "start)` (AdjointODE with the estimator's defaults: `optimizer=\"fides\"`, "
            "`max_iter=1000`, rtol 1e-8; `integrator=\"CVODES\"`: the SUNDIALS built "
            "with the package since 2026-12-07, Debian 12's 6.4.1 before); pyPESTO: Fides "
            "with AMICI's forward sensitivities at rtol 1e-8 "
            "from the same points (`benchmarks/petab_pypesto.py`, its own environment, on the "
            "day given; on petab's flattened problem where AMICI refuses time-point-specific "
            "mappings: Fiedler). 'within 0.1': starts whose final -log L is within 0.1 of "
            "that tool's best. The CPU of one multistart run varies between runs (pyPESTO on "
            "Bertozzi: 7.6 and 5.9 s on two days), and so does the machine (pyPESTO on Blasi: "
            "33.0 s on the machine of the first 2026-12-07 runs, 10.6 s on the one of the "
            "last), which is why pyPESTO's runs were repeated on the day, and machine, of "
            "sklode's: 'pyPESTO run' gives the day; the ratio compares runs of one machine.",
            "",
            "| problem | starts | nominal -log L | sklode best | within 0.1 | sklode CPU s | "
            "pyPESTO best | within 0.1 | pyPESTO CPU s | CPU sklode / pyPESTO | pyPESTO run |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, f in sorted(fits.items()):
            p = pypesto.get(name, {})
            lines.append(
                f"| {name} | {len(f['fvals'])} | {f['nominal']:.4f} | {f['best']:.4f} | "
                f"{f['within_0.1']} | {f['cpu_s']:.1f} | "
                + (f"{p['best']:.4f} | {p['within_0.1']} | {p['cpu_s']:.1f} | "
                   f"{f['cpu_s'] / p['cpu_s']:.2f} | {p.get('date', 'before 2026-12-05')} |"
                   if "best" in p else f"{p.get('error', 'not run')[:80]} | — | — | — | — |"))
        older = {k: f["code"] for k, f in sorted(fits.items()) if "code" in f}
        if older:
            lines += ["", "Rows fitted with an earlier sklode than the others (their CPU is "
                      "that code's): " + "; ".join(f"{k}: {v}" for k, v in older.items()) + "."]
        trf = {k: r["fit_trf"] for k, r in sorted(results.items()) if "fit_trf" in r}
        if trf:
            lines += [
                "", "### The same starts with trf (the default before Fides)", "",
                "`problem.estimator(theta0=start, optimizer=\"trf\")` (max_iter 200); the "
                "Fides columns repeat the table above.", "",
                "| problem | trf best | within 0.1 | trf CPU s | fitted by | Fides best | "
                "within 0.1 | Fides CPU s |", "|---|---|---|---|---|---|---|---|"]
            for name, f in trf.items():
                g = fits[name]
                lines.append(
                    f"| {name} | {f['best']:.4f} | {f['within_0.1']} | {f['cpu_s']:.1f} | "
                    f"{f.get('code', 'the code before Fides')} | {g['best']:.4f} | "
                    f"{g['within_0.1']} | {g['cpu_s']:.1f} |")
        lines += ["", "Problems without a row here were not fitted in this run (each start is "
                  "minutes on the larger ones: `--fit NAME` runs them)."]
    (RESULTS / "petab.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fit", nargs="*", default=[])
    parser.add_argument("--starts", type=int, default=20)
    parser.add_argument("--skip-nominal", action="store_true",
                        help="keep the nominal rows of the last run (the fits only)")
    args = parser.parse_args()
    main(args.fit, args.starts, args.skip_nominal)
