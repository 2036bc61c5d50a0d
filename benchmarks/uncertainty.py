"""Coverage of the three estimators' 95 % confidence intervals, over many seeded noise draws.

For each method, problem and noise level: the fraction of seeds whose interval
``confidence_intervals(0.95)`` holds the true parameter (each parameter, and all of them
pooled), the same for the estimated initial values (``x0_ +- 1.96 x0_stderr_``), the RMS of
the z-scores ``(theta_ - theta) / theta_stderr_`` (1 when the standard errors are the spread
of the estimates), and CPU seconds per fit. AdjointODE's profile-likelihood intervals
(``profile_intervals``) are measured on the same draws of the Lotka-Volterra problem at
seed 000's noise.

Problems: Lotka-Volterra as in seed 000 (41 samples on [0, 4], both states, absolute noise)
and at WENDy's length (1024 samples on [0, 5]); SEIRD with every compartment counted daily for
60 days (log-normal noise, every initial value estimated). Writes
``benchmarks/results/uncertainty.md`` and ``.json``; CPU seconds are single-threaded, per fit.

    python benchmarks/uncertainty.py [--seeds 100] [--profile-seeds 100] [--n-jobs 2]
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

Z95 = 1.959963984540054

#: (problem key, noise) cells; the noise is in the problem's noise_kind.
CELLS = (("lotka_volterra", 0.25), ("lotka_volterra", 0.5), ("lotka_volterra_1024", 0.1),
         ("seird_daily", 0.05), ("seird_daily", 0.1))
METHODS = ("AdjointODE", "BCDProxODE", "WENDyODE")
#: The cell whose AdjointODE fits are also profiled (seed 000's noise level).
PROFILED = ("lotka_volterra", 0.5)


def problem(key):
    """The problem, its noise kind for the data and the estimator's settings."""
    from sklode.datasets import get_problem

    if key == "lotka_volterra":
        p = get_problem("lotka_volterra")
        return p, "absolute", {"theta0": p.theta_init}
    if key == "lotka_volterra_1024":
        p = replace(get_problem("lotka_volterra"), t=np.linspace(0.0, 5.0, 1024))
        return p, "relative_rms", {"theta0": p.theta_init}
    p = replace(get_problem("seird"), t=np.arange(40.0, 101.0), t0=40.0,
                observed=(0, 1, 2, 3, 4))
    return p, "lognormal", {"theta0": p.theta_init, "noise_kind": "lognormal"}


def one_fit(method, key, noise, seed, profile):
    """Coverage indicators, z-scores and CPU of one fit (and of its profile intervals)."""
    import torch

    import sklode
    from sklode.datasets import make_trajectory
    from sklode.exceptions import SklodeError

    torch.set_num_threads(1)
    p, kind, settings = problem(key)
    data = make_trajectory(p, noise=noise, noise_kind=kind, random_state=seed)
    est = getattr(sklode, method)(p.model, **settings)
    start = time.process_time()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(data.t, data.Y)
    except SklodeError:
        return None
    cpu = time.process_time() - start
    ci = est.confidence_intervals(0.95)
    out = {"theta": ((ci[:, 0] <= p.theta) & (p.theta <= ci[:, 1])).tolist(),
           "x0": (np.abs(est.x0_ - p.x0) <= Z95 * est.x0_stderr_).tolist(),
           "z": ((est.theta_ - p.theta) / est.theta_stderr_).tolist(), "cpu": cpu}
    if profile:
        start = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pi = est.profile_intervals(data.t, data.Y)
        out["profile"] = ((pi[:, 0] <= p.theta) & (p.theta <= pi[:, 1])).tolist()
        out["profile_cpu"] = time.process_time() - start
    return out


def summarise(fits):
    fits = [f for f in fits if f is not None]
    theta = np.array([f["theta"] for f in fits])
    z = np.array([f["z"] for f in fits])
    summary = {"fits": len(fits), "theta_coverage": theta.mean(axis=0).tolist(),
               "pooled": float(theta.mean()),
               "x0_coverage": float(np.mean([f["x0"] for f in fits])),
               "rms_z": float(np.sqrt(np.mean(z[np.isfinite(z)] ** 2))),
               "cpu": float(np.mean([f["cpu"] for f in fits]))}
    profiled = [f for f in fits if "profile" in f]
    if profiled:
        profile = np.array([f["profile"] for f in profiled])
        summary.update(profile_fits=len(profiled),
                       profile_coverage=profile.mean(axis=0).tolist(),
                       profile_pooled=float(profile.mean()),
                       profile_cpu=float(np.mean([f["profile_cpu"] for f in profiled])))
    return summary


def run(seeds, profile_seeds, n_jobs, methods=METHODS):
    from joblib import Parallel, delayed

    jobs = [(m, key, noise, s, m == "AdjointODE" and (key, noise) == PROFILED
             and s < profile_seeds)
            for key, noise in CELLS for m in methods for s in range(seeds)]
    fits = Parallel(n_jobs=n_jobs)(delayed(one_fit)(*job) for job in jobs)
    results = {}
    for (m, key, noise, _, _), fit in zip(jobs, fits):
        results.setdefault((key, noise, m), []).append(fit)
    return {cell: summarise(f) for cell, f in results.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--profile-seeds", type=int, default=100)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" /
                                                 "uncertainty"))
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="rerun only these; the other rows are kept from the output JSON")
    args = parser.parse_args(argv)
    methods = tuple(args.methods.split(","))
    results = {}
    previous = Path(args.output + ".json")
    if set(methods) != set(METHODS) and previous.exists():
        for row in json.loads(previous.read_text()):
            key = (row.pop("problem"), row.pop("noise"), row.pop("method"))
            if key[2] not in methods:
                results[key] = row
    fresh = run(args.seeds, args.profile_seeds, args.n_jobs, methods)
    results = {cell: fresh.get(cell, results.get(cell))
               for key, noise in CELLS for m in METHODS
               for cell in [(key, noise, m)] if cell in fresh or cell in results}
    names = {"lotka_volterra": "Lotka-Volterra, 41 samples (absolute σ)",
             "lotka_volterra_1024": "Lotka-Volterra, 1024 samples (σ × RMS)",
             "seird_daily": "SEIRD, 61 daily counts (log-normal σ)"}
    lines = ["# Coverage of 95 % confidence intervals", "",
             f"Written by `benchmarks/uncertainty.py` ({args.seeds} seeds per cell; the "
             "problems and the definitions are in its docstring). Coverage: the fraction of "
             "seeds whose interval holds the truth, per parameter, pooled over the "
             "parameters, and pooled over the estimated initial values; RMS z is 1 when the "
             "standard errors are the spread of the estimates. CPU seconds single-threaded "
             "per fit.", "",
             "| problem | σ | method | fits | coverage per parameter | pooled | x0 pooled "
             "| RMS z | CPU s |", "|---|---|---|---|---|---|---|---|---|"]
    for (key, noise, m), r in results.items():
        per = ", ".join(f"{c:.2f}" for c in r["theta_coverage"])
        lines.append(f"| {names[key]} | {noise:g} | {m} | {r['fits']} | {per} | "
                     f"{r['pooled']:.3f} | {r['x0_coverage']:.3f} | {r['rms_z']:.2f} | "
                     f"{r['cpu']:.2f} |")
    lines += ["", "## AdjointODE's profile-likelihood intervals", "",
              "| problem | σ | fits | coverage per parameter | pooled | CPU s per profile "
              "(all parameters) |", "|---|---|---|---|---|---|"]
    for (key, noise, m), r in results.items():
        if "profile_pooled" in r:
            per = ", ".join(f"{c:.2f}" for c in r["profile_coverage"])
            lines.append(f"| {names[key]} | {noise:g} | {r['profile_fits']} | {per} | "
                         f"{r['profile_pooled']:.3f} | {r['profile_cpu']:.2f} |")
    Path(args.output + ".md").write_text("\n".join(lines) + "\n")
    Path(args.output + ".json").write_text(json.dumps(
        [{"problem": k, "noise": n, "method": m, **r} for (k, n, m), r in results.items()],
        indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
