"""Benchmark runner: one problem, several methods, repeated over noise seeds.

Every method runs in the same process, single-threaded, on the same noisy data; speed is
reported as CPU seconds (``time.process_time``) and as a ratio to the hand-written scipy
baseline (:func:`baselines.least_squares_like_adjoint`: scipy ``least_squares`` with a numpy
vector field on AdjointODE's cost). Accuracy is reported with the papers' metrics. Estimators
come from :data:`sklode.registry.METHODS`, posed for the problem as ``compare`` poses them;
a method that cannot fit the problem (hidden states for BCD-prox and WENDy) is skipped with
its reason. Results go to ``benchmarks/results/<name>.json`` and ``.md``, which the docs
quote.

Usage::

    python benchmarks/run.py --problem lotka_volterra --seeds 3
    python benchmarks/run.py --problem rossler --methods least_squares,bcdprox --noise 0.5
    python benchmarks/run.py --problem seird --methods adjoint
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).parent / "results"


def _single_thread():
    """One thread everywhere: CPU seconds are then comparable across methods and machines.

    threadpoolctl limits only the libraries already loaded, and scipy ships its own OpenBLAS
    (and torch its own OpenMP), loaded on first import: import everything the benchmarks use
    first. Before this, scipy's BLAS ran two threads and CPU seconds (which count every
    thread) came out up to 2x high on small problems.
    """
    import scipy.integrate  # noqa: F401
    import scipy.linalg  # noqa: F401
    import scipy.optimize  # noqa: F401
    import torch
    from threadpoolctl import threadpool_info, threadpool_limits

    import sklode  # noqa: F401

    torch.set_num_threads(1)
    threadpool_limits(1)
    left = [pool["filepath"] for pool in threadpool_info() if pool["num_threads"] != 1]
    if left:
        raise RuntimeError(f"thread pools still above one thread: {left}")


def run_sections(stem, sections, to_markdown, argv=None):
    """Command line of the per-estimator benchmark scripts: run the chosen sections and
    write ``results/<stem>.json`` and ``.md`` after each (re-reading the JSON first, so
    sections may run in parallel processes)."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--sections", default=",".join(sections))
    args = parser.parse_args(argv)
    _single_thread()
    path = RESULTS / f"{stem}.json"
    results = {}
    for name in args.sections.split(","):
        section = sections[name]()
        results = json.loads(path.read_text()) if path.exists() else {}
        results[name] = section
        RESULTS.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(results, indent=1))
        (RESULTS / f"{stem}.md").write_text(to_markdown(results))
    print(to_markdown(results))
    return 0


BASELINE = "least_squares"


def _fit_baseline(problem, data):
    from baselines import least_squares_like_adjoint

    from sklode.integrate import simulate

    res = least_squares_like_adjoint(problem, data.Y)
    X_hat = simulate(problem.model, res.theta, res.x0, data.t, t0=problem.t0)
    return {"theta": res.theta, "X_hat": X_hat, "n_iter": res.nfev, "converged": res.success}


def _fit_estimator(method, problem, data):
    est = method.make(problem)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(data.t, data.Y)
    out = {"theta": est.theta_, "X_hat": est.simulate(data.t), "n_iter": int(est.n_iter_),
           "converged": bool(getattr(est, "converged_", True)),
           "warnings": sorted({type(w.message).__name__ for w in caught})}
    if hasattr(est, "states_"):
        out["X_star"] = est.states_
    return out


def applicable_methods(problem_name, methods=None):
    """The methods to run on ``problem_name`` and the ones skipped with their reason.

    Parameters
    ----------
    problem_name : str
    methods : list of str, optional
        Default: the baseline and every method of the registry.

    Returns
    -------
    run : list of str
    skipped : dict
        Method name -> why it cannot fit the problem.
    """
    from sklode.registry import METHODS

    methods = [BASELINE, *METHODS] if methods is None else list(methods)
    unknown = [m for m in methods if m != BASELINE and m not in METHODS]
    if unknown:
        raise SystemExit(f"unknown methods {unknown}; available: {BASELINE}, "
                         f"{', '.join(METHODS)}")
    skipped = {m: METHODS[m].why_not(problem_name) for m in methods if m != BASELINE}
    skipped = {m: why for m, why in skipped.items() if why}
    return [m for m in methods if m not in skipped], skipped


def run(problem_name, methods=None, seeds=(0,), noise=None, distribution="gaussian"):
    """Run every applicable method on every seed; return a list of per-fit records.

    Parameters
    ----------
    problem_name : str
    methods : list of str, optional
        Default: the baseline and every method of the registry. Methods that cannot fit the
        problem are skipped (printed with their reason).
    seeds : iterable of int, default=(0,)
    noise : float, optional
    distribution : str, default="gaussian"

    Returns
    -------
    list of dict
    """
    from sklode import metrics
    from sklode.compare import _warm_up
    from sklode.datasets import get_problem, make_trajectory
    from sklode.exceptions import SklodeError
    from sklode.registry import METHODS

    problem = get_problem(problem_name)
    methods, skipped = applicable_methods(problem_name, methods)
    for name, why in skipped.items():
        print(f"{problem_name}: {name} skipped ({why})", flush=True)
    # torch's one-off lazy set-up (~1 s per process) is paid before the clock starts.
    _warm_up(problem.model, problem.x0, problem.theta)
    records = []
    for seed in seeds:
        data = make_trajectory(problem_name, noise=noise, distribution=distribution,
                               random_state=seed)
        for method in methods:
            start = time.process_time()
            wall = time.perf_counter()
            try:
                if method == BASELINE:
                    out = _fit_baseline(problem, data)
                else:
                    out = _fit_estimator(METHODS[method], problem, data)
            except SklodeError as exc:  # a fit that cannot start or diverges is a result
                records.append({"problem": problem_name, "method": method, "seed": int(seed),
                                "status": "failed", "error": f"{type(exc).__name__}: {exc}"[:300],
                                "cpu_s": time.process_time() - start})
                print(f"{problem_name} seed={seed} {method:<14} failed: {records[-1]['error']}",
                      flush=True)
                continue
            rec = {
                "problem": problem_name, "method": method, "seed": int(seed), "status": "ok",
                "cpu_s": time.process_time() - start, "wall_s": time.perf_counter() - wall,
                "theta": np.asarray(out["theta"]).tolist(),
                "param_error": metrics.parameter_error(out["theta"], problem.theta).tolist(),
                "E2": metrics.relative_coefficient_error(out["theta"], problem.theta),
                "prediction_error": metrics.prediction_error(data.X, out["X_hat"]),
                "n_iter": out["n_iter"], "converged": out["converged"],
            }
            if "X_star" in out:
                rec["estimation_error"] = metrics.estimation_error(data.X, out["X_star"])
            records.append(rec)
            print(f"{problem_name} seed={seed} {method:<14} cpu={rec['cpu_s']:.3f}s "
                  f"E2={rec['E2']:.4g} pred={rec['prediction_error']:.4g}", flush=True)
    return records


def summarise(records):
    """Median per method over its successful fits, and the CPU ratio to the baseline's median."""
    methods = list(dict.fromkeys(r["method"] for r in records))
    med = {}
    for m in methods:
        rs = [r for r in records if r["method"] == m and r.get("status", "ok") == "ok"]
        if not rs:
            med[m] = {"n_fits": 0, "failed": sum(r["method"] == m for r in records)}
            continue
        med[m] = {
            "n_fits": len(rs),
            "failed": sum(r["method"] == m and r.get("status") == "failed" for r in records),
            "cpu_s": float(np.median([r["cpu_s"] for r in rs])),
            "param_error": np.median([r["param_error"] for r in rs], axis=0).tolist(),
            "E2": float(np.median([r["E2"] for r in rs])),
            "prediction_error": float(np.median([r["prediction_error"] for r in rs])),
            "converged": int(sum(r["converged"] for r in rs)),
        }
        if "estimation_error" in rs[0]:
            med[m]["estimation_error"] = float(np.median([r["estimation_error"] for r in rs]))
    if med.get(BASELINE, {}).get("n_fits"):
        base = med[BASELINE]["cpu_s"]
        for m in med:
            if med[m]["n_fits"]:
                med[m]["cpu_ratio_to_least_squares"] = med[m]["cpu_s"] / base
    return med


def to_markdown(problem_name, summary, meta):
    lines = [f"### {problem_name}", "",
             f"{meta['n_seeds']} noise seeds, noise {meta['noise']} ({meta['noise_kind']}, a "
             f"standard deviation), {meta['distribution']}; single thread; medians.", "",
             "| method | CPU s | ratio to least_squares | E2 | per-component abs. error | "
             "prediction error | converged |", "|---|---|---|---|---|---|---|"]
    for m, s in summary.items():
        if not s["n_fits"]:
            lines.append(f"| {m} | failed on all {s['failed']} seeds | | | | | |")
            continue
        ratio = s.get("cpu_ratio_to_least_squares", float("nan"))
        errs = ", ".join(f"{v:.3g}" for v in s["param_error"])
        lines.append(f"| {m} | {s['cpu_s']:.3f} | {ratio:.3g} | {s['E2']:.3g} | {errs} | "
                     f"{s['prediction_error']:.3g} | {s['converged']}/{s['n_fits']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", required=True)
    parser.add_argument("--methods", default=None,
                        help="comma-separated; default: least_squares and every estimator "
                             "that applies to the problem")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--noise", type=float, default=None)
    parser.add_argument("--distribution", default="gaussian")
    parser.add_argument("--name", default=None, help="results file stem")
    args = parser.parse_args(argv)
    _single_thread()
    from sklode.datasets import get_problem

    methods = args.methods.split(",") if args.methods else None
    records = run(args.problem, methods, range(args.seeds), args.noise, args.distribution)
    problem = get_problem(args.problem)
    meta = {"problem": args.problem, "n_seeds": args.seeds,
            "noise": problem.noise if args.noise is None else args.noise,
            "noise_kind": problem.noise_kind, "distribution": args.distribution,
            "python": platform.python_version(), "machine": platform.machine(),
            "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d")}
    summary = summarise(records)
    stem = args.name or f"{args.problem}"
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{stem}.json").write_text(json.dumps(
        {"meta": meta, "summary": summary, "records": records}, indent=1))
    (RESULTS / f"{stem}.md").write_text(to_markdown(args.problem, summary, meta))
    print(to_markdown(args.problem, summary, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
