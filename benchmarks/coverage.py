"""Coverage of the three estimators' 95 % intervals on twelve systems none was tuned on (#28).

For each system, noise level (3 % and 10 % of each state's RMS, ``relative_rms``) and method,
``--seeds`` noisy draws of every state are fitted from ``theta0 = 1.3 theta`` (x0 from the
data), and the z-scores ``(theta_ - theta) / theta_stderr_`` are pooled: per parameter the
coverage of ``theta_ +- 1.96 theta_stderr_``, the mean z (bias in standard errors) and the
spread of z (1 when the standard errors are the estimates' spread). Every warning a fit
raises is counted by category, so a cell that cannot be calibrated shows what the estimator
said instead. A fit that raises is counted as failed. CPU seconds single-threaded, per fit.

Systems: the nine of ``wendy_calibration.py`` (Van der Pol at mu = 1.5, 4 and the
relaxation case mu = 8 with jumps of ~4 samples, Duffing, Brusselator, enzyme kinetics, SIR,
Lorenz-63, Rossler), the zoo's Lotka-Volterra (41 samples: seed 000's grid), FitzHugh-Nagumo
(not affine in theta) and the logistic. Writes ``benchmarks/results/coverage.json`` and
``.md`` after every cell.

    python benchmarks/coverage.py [--seeds 100] [--n-jobs 2] [--systems sir,duffing] [--resume]
        [--methods AdjointODE,BCDProxODE+boot50] [--noises 0.1] [--first-seed 40]
        [--seed-offset 100 --results coverage_heldout] [--unwarned-from-records]

The last column, coverage of the unwarned fits, is what a user who heeds the warnings gets:
the fits that raised no warning of sklode's. ``--seed-offset K --results NAME`` draws seeds
``K..K+seeds-1`` into ``NAME.json``/``.md``/``_fits.jsonl``: fresh draws that check a
threshold chosen on seeds ``0..99``. ``--unwarned-from-records`` fits nothing: it adds that
column to the cells summarised before it existed, from their per-fit records, where those
records reproduce the cell's stored coverage exactly.

Every fit's record is appended to ``coverage_fits.jsonl`` as it finishes, so a killed run
loses only the fits in flight: ``--resume`` refits no seed found there. ``--first-seed N``
extends a cell already summarised over seeds ``0..N-1`` (whose records predate the file) by
seeds ``N..seeds-1``: counts, coverage, mean and spread of z merge exactly from the stored
summary (its z were all finite); the CPU column is then the new seeds' median.
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
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))

RESULTS = Path(__file__).parent / "results"
Z95 = 1.959963984540054
NOISES = (0.03, 0.1)
METHODS = ("AdjointODE", "BCDProxODE", "WENDyODE")


def systems():
    """name -> Problem: wendy_calibration's nine (built once per process there: a cache on
    a function of this script, which runs as ``__main__``, would not unpickle in joblib's
    workers) and three of the zoo."""
    from dataclasses import replace

    from wendy_calibration import _systems

    from sklode.datasets import get_problem

    out = dict(_systems())
    for name in ("lotka_volterra", "fitzhugh_nagumo", "wendy_logistic"):
        p = get_problem(name)
        out[name] = replace(p, observed=tuple(range(p.model.n_states)))
    return out


def one_fit(method, name, noise, seed):
    import torch

    import sklode
    from sklode.datasets import make_trajectory

    torch.set_num_threads(1)
    p = systems()[name]
    data = make_trajectory(p, noise=noise, noise_kind="relative_rms", random_state=seed)
    estimator, _, n_boot = method.partition("+boot")
    est = getattr(sklode, estimator)(p.model, theta0=1.3 * p.theta)
    if n_boot:  # "BCDProxODE+boot50": the parametric bootstrap's intervals
        est.set_params(n_boot=int(n_boot), random_state=seed)
    start = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            est.fit(data.t, data.Y)
        except Exception as exc:  # counted, with its type
            return {"failed": type(exc).__name__}
    cpu = time.process_time() - start
    said = sorted({w.category.__name__ for w in caught
                   if w.category.__module__.startswith("sklode")})
    # the start of each message too: which check spoke (a category has several)
    messages = sorted({str(w.message)[:100] for w in caught
                       if w.category.__module__.startswith("sklode")})
    # z of the interval the user gets (centred on theta_ - theta_bias_ after a bootstrap)
    lower, upper = est.confidence_intervals(0.95).T
    z = ((lower + upper) / 2 - p.theta) / est.theta_stderr_
    z_theta = (est.theta_ - p.theta) / est.theta_stderr_  # centred on theta_ itself
    # the output-error step in standard errors, to replay another warning limit offline
    offset = getattr(est, "output_error_offset_", None)
    return {"z": [float(v) for v in z], "z_theta": [float(v) for v in z_theta], "cpu": cpu,
            "warned": said, "messages": messages,
            "offset": None if offset is None else [float(v) for v in offset]}


def merge(old, new, new_fits):
    """Summary of seeds ``0..n-1`` (``old``) and ``n..m-1`` (``new``, from the records
    ``new_fits``) pooled: counts and coverage exactly, mean and spread of z per parameter from
    the first two moments (population sd, as ``np.nanstd``) over the finite z. Needs ``old``
    to have had no non-finite z (its per-parameter counts are not stored)."""
    if "coverage" not in old or "coverage" not in new or old["non_finite"]:
        raise ValueError("cannot merge summaries with non-finite or missing z")
    a = old["fits"] - old["failed"]
    b = new["fits"] - new["failed"]
    out = dict(new, fits=old["fits"] + new["fits"], failed=old["failed"] + new["failed"])
    out["warned"] = {k: old["warned"].get(k, 0) + new["warned"].get(k, 0)
                     for k in set(old["warned"]) | set(new["warned"])}
    for key in ("coverage", "coverage_theta"):
        if key in old and key in new:
            out[key] = ((a * np.array(old[key]) + b * np.array(new[key])) / (a + b)).tolist()
    z = np.array([f["z"] for f in new_fits if "z" in f])
    finite = np.isfinite(z)
    b_p = finite.sum(axis=0)  # finite z per parameter in the new seeds
    m1, m2 = np.array(old["mean_z"]), np.nansum(np.where(finite, z, 0.0), axis=0)
    second = a * (np.array(old["sd_z"]) ** 2 + m1**2) + np.sum(np.where(finite, z, 0.0)**2,
                                                                 axis=0)
    mean = (a * m1 + m2) / (a + b_p)
    out["mean_z"] = mean.tolist()
    out["sd_z"] = np.sqrt(second / (a + b_p) - mean**2).tolist()
    out["seeds_merged"] = [old["fits"], new["fits"]]
    out.pop("coverage_unwarned", None)  # the old seeds' warnings per fit are not stored
    return out


def summarise(fits, param_names):
    ok = [f for f in fits if "z" in f]
    out = {"fits": len(fits), "failed": len(fits) - len(ok), "param_names": param_names,
           "warned": {}}
    for f in fits:
        for w in f.get("warned", ()):
            out["warned"][w] = out["warned"].get(w, 0) + 1
    if not ok:
        return out
    z = np.array([f["z"] for f in ok])
    finite = np.isfinite(z)
    zf = np.where(finite, z, np.nan)
    if all("z_theta" in f for f in ok):
        z_theta = np.array([f["z_theta"] for f in ok])
        out["coverage_theta"] = np.mean(np.abs(np.where(np.isfinite(z_theta), z_theta, np.inf))
                                        <= Z95, axis=0).tolist()
    quiet = np.array([not f.get("warned") for f in ok])
    if quiet.any():
        out["coverage_unwarned"] = np.mean(np.abs(np.where(finite, z, np.inf))[quiet] <= Z95,
                                           axis=0).tolist()
    out.update(coverage=np.mean(np.abs(np.where(finite, z, np.inf)) <= Z95, axis=0).tolist(),
               mean_z=np.nanmean(zf, axis=0).tolist(), sd_z=np.nanstd(zf, axis=0).tolist(),
               non_finite=int(np.sum(~finite)),
               cpu=float(np.median([f["cpu"] for f in ok])))
    return out


def to_markdown(results, stem="coverage"):
    lines = ["# Coverage of 95 % intervals on twelve systems", "",
             "Written by `benchmarks/coverage.py` (its docstring has the protocol): draws of "
             "every state at 3 % and 10 % relative noise, fits from 1.3 θ, z = (θ̂ − θ)/se. "
             "Coverage per parameter, mean z and spread of z per parameter, the warnings the "
             "fits raised (fits warned / fits), failed fits; CPU s is the median per fit. "
             "`+bootB` rows: the same estimator with `n_boot=B`, its interval "
             "`confidence_intervals()` (centred on θ̂ − theta_bias_); `coverage_theta` in "
             "the JSON is the same interval centred on θ̂. Unwarned: the coverage of the fits "
             "that raised no warning (— where every fit warned, or where the cell's "
             f"per-fit records predate `{stem}_fits.jsonl`: the `+boot` rows).", "",
             "| system | σ_NR | method | fits (failed) | coverage per parameter | mean z | "
             "spread of z | warned | CPU s | unwarned coverage |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    if stem != "coverage":
        lines[0] += f" ({stem})"
    for key, r in results.items():
        name, noise, method = key.split("|")
        warned = ", ".join(f"{k} {v}" for k, v in sorted(r["warned"].items())) or "—"
        if "coverage" not in r:
            lines.append(f"| {name} | {noise} | {method} | {r['fits']} ({r['failed']}) | — | — "
                         f"| — | {warned} | — | — |")
            continue
        cov = ", ".join(f"{c:.2f}" for c in r["coverage"])
        mean = ", ".join(f"{m:+.2f}" for m in r["mean_z"])
        sd = ", ".join(f"{s:.2f}" for s in r["sd_z"])
        quiet = r.get("coverage_unwarned")
        quiet = "—" if quiet is None else ", ".join(f"{c:.2f}" for c in quiet)
        lines.append(f"| {name} | {noise} | {method} | {r['fits']} ({r['failed']}) | {cov} | "
                     f"{mean} | {sd} | {warned} | {r['cpu']:.2f} | {quiet} |")
    return "\n".join(lines) + "\n"


def read_records(records):
    """``{(key, seed): fit}`` from the per-fit records file, the last record of each seed
    (a rerun appends; its record wins)."""
    last = {}
    for line in records.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            last[r["key"], r["seed"]] = r["fit"]
    return last


def write_results(results, path, stem):
    """The summaries as ``path`` (JSON) and their table as ``RESULTS/stem.md``."""
    path.write_text(json.dumps(results, indent=1))
    (RESULTS / f"{stem}.md").write_text(to_markdown(results, stem))


def unwarned_from_records(results, records, path, stem):
    """Add ``coverage_unwarned`` to the cells of ``results`` that lack it, from the last
    record of each of their seeds in ``records``, where re-summarising those records gives
    the cell's stored coverage and fit count (so they are the fits it summarised)."""
    last = read_records(records)
    added = 0
    for key, cell in results.items():
        if "coverage_unwarned" in cell or "seeds_merged" in cell or "coverage" not in cell:
            continue
        fits = [last.get((key, s)) for s in range(cell["fits"])]
        if any(f is None for f in fits):
            continue
        again = summarise(fits, cell["param_names"])
        if (again["fits"] == cell["fits"] and again.get("coverage") == cell["coverage"]
                and "coverage_unwarned" in again):
            cell["coverage_unwarned"] = again["coverage_unwarned"]
            added += 1
    write_results(results, path, stem)
    print(f"unwarned coverage added to {added} of {len(results)} cells")
    return 0


def main(argv=None):
    from joblib import Parallel, delayed

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--n-jobs", type=int, default=2)
    parser.add_argument("--systems", default=None)
    parser.add_argument("--methods", default=",".join(METHODS),
                        help="comma-separated; NAME+bootB runs NAME with n_boot=B")
    parser.add_argument("--noises", default=",".join(map(str, NOISES)))
    parser.add_argument("--resume", action="store_true",
                        help="skip the cells already in coverage.json with as many fits, "
                             "and the seeds already in coverage_fits.jsonl")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="extend cells summarised over seeds 0..N-1 (see the docstring)")
    parser.add_argument("--seed-offset", type=int, default=0,
                        help="draw seeds K..K+seeds-1 (with --results: fresh draws)")
    parser.add_argument("--results", default="coverage",
                        help="stem of the results files (default: coverage)")
    parser.add_argument("--unwarned-from-records", action="store_true",
                        help="add the unwarned coverage to stored cells from their records")
    args = parser.parse_args(argv)
    if args.seed_offset and (args.first_seed or args.results == "coverage"):
        raise SystemExit("--seed-offset needs its own --results and no --first-seed")
    names = args.systems.split(",") if args.systems else list(systems())
    path = RESULTS / f"{args.results}.json"
    records = RESULTS / f"{args.results}_fits.jsonl"
    results = json.loads(path.read_text()) if path.exists() else {}
    stored = read_records(records) if args.resume and records.exists() else {}

    if args.unwarned_from_records:
        return unwarned_from_records(results, records, path, args.results)

    def run(key, method, name, noise, seed):
        fit = one_fit(method, name, noise, seed)
        with open(records, "a") as handle:  # one short line per append: safe across workers
            handle.write(json.dumps({"key": key, "seed": seed, "fit": fit}) + "\n")
        return fit

    with Parallel(n_jobs=args.n_jobs) as parallel:
        for name in names:
            params = list(systems()[name].model.param_names)
            for noise in map(float, args.noises.split(",")):
                for method in args.methods.split(","):
                    key = f"{name}|{noise}|{method}"
                    done = results.get(key, {})
                    if args.resume and done.get("fits") == args.seeds:
                        continue
                    seeds = range(args.seed_offset + args.first_seed,
                                  args.seed_offset + args.seeds)
                    todo = [s for s in seeds if (key, s) not in stored]
                    fresh = dict(zip(todo, parallel(delayed(run)(key, method, name, noise, s)
                                                    for s in todo)))
                    fits = [stored.get((key, s), fresh.get(s)) for s in seeds]
                    summary = summarise(fits, params)
                    if args.first_seed:
                        if done.get("fits") != args.first_seed:
                            raise SystemExit(f"{key}: {done.get('fits')} fits stored, "
                                             f"--first-seed {args.first_seed}")
                        summary = merge(done, summary, fits)
                    results[key] = summary
                    write_results(results, path, args.results)
                    print(name, noise, method, results[key].get(
                        "coverage"), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
