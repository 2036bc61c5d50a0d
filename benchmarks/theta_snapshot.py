"""Fit every method on every named problem it applies to (noise seed 0, posed by the registry)
and write ``theta_`` per fit, with the PEtab problems' nominal -log L and a MixedEffectsODE
fit of indomethacin; or compare two such snapshots.

Used to show that a refactoring leaves the estimates unchanged::

    python benchmarks/theta_snapshot.py --output after.json
    python benchmarks/theta_snapshot.py --compare before.json after.json > table.md

A fit that raises is recorded with its error (single shooting cannot start from the default
guess on some problems); the comparison then checks the error is the same.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# this folder holds petab.py: it must not hide the petab package from sklode.petab
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]


def snapshot(integrator=None):
    """``{"problem/method": {"theta", "n_iter", "x0"} or {"error"}}`` for every applicable fit
    (with ``integrator`` set on every estimator when given)."""
    from sklode.datasets import list_problems, make_trajectory
    from sklode.exceptions import SklodeError
    from sklode.registry import METHODS

    out = {}
    for name in list_problems():
        data = make_trajectory(name, random_state=0)
        for method_name, method in METHODS.items():
            if method.why_not(name):
                continue
            est = method.make(name)
            if integrator is not None:
                est.set_params(integrator=integrator)
            key = f"{name}/{method_name}"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                try:
                    est.fit(data.t, data.Y)
                except SklodeError as exc:
                    out[key] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
                    continue
            out[key] = {"theta": est.theta_.tolist(), "n_iter": int(est.n_iter_),
                        "x0": np.asarray(est.x0_).tolist()}
            print(key, out[key]["theta"], flush=True)
    return out


#: The PEtab problems benchmarks/petab.py fits (its twelve, beside pyPESTO).
PETAB_FITTED = ("Armistead_CellDeathDis2024", "Bertozzi_PNAS2020", "Borghans_BiophysChem1997",
                "Brannmark_JBC2010", "Bruno_JExpBot2016", "Fiedler_BMCSystBiol2016",
                "Fujita_SciSignal2010", "Raia_CancerResearch2011", "Schwen_PONE2014",
                "Sneyd_PNAS2002", "Weber_BMC2015", "Zheng_PNAS2012")


def petab_nominal(collection, names=PETAB_FITTED):
    """``{"petab/NAME": {"neg_log_likelihood"}}`` at the nominal values (the default forward
    solve) of the problems ``names``."""
    from sklode import petab

    out = {}
    for folder in sorted(collection / name for name in names):
        try:
            problem = petab.load(next(folder.glob("*.yaml")))
        except petab.UnsupportedFeature:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = float(problem.neg_log_likelihood())
        out[f"petab/{folder.name}"] = {"neg_log_likelihood": value}
        print(folder.name, value, flush=True)
    return out


def population():
    """The indomethacin MixedEffectsODE fit (the two-compartment IV model, k10 and V random)."""
    from sklode import MixedEffectsODE
    from sklode.datasets import load_indomethacin
    from sklode.models import TwoCompartmentIV

    est = MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10", "V"), x0=[0.0, 0.0],
                          t0=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(load_indomethacin().experiments)
    cov = est.theta_cov_
    record = {"theta": est.theta_.tolist(), "n_iter": int(est.n_iter_),
              "omega": np.asarray(est.omega_).tolist(),
              "neg_log_likelihood": float(est.neg_log_likelihood_),
              "theta_cov": np.asarray(cov).tolist()}
    print("indomethacin", record["theta"], record["neg_log_likelihood"], flush=True)
    return {"population/indomethacin": record}


def _relative(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(b - a) / np.maximum(np.abs(a), 1e-300))) if a.size else 0.0


def compare(before, after):
    """A markdown table: the estimate before, and the largest relative change after."""
    lines = ["| problem / method | theta_ before | max relative change after | bit for bit | "
             "iterations before / after |", "|---|---|---|---|---|"]
    for key, old in before.items():
        new = after.get(key)
        if new is None:
            lines.append(f"| {key} | | not fitted after | |")
        elif "error" in old or "error" in new:
            same = old.get("error", "")[:60] == new.get("error", "")[:60]
            lines.append(f"| {key} | {old.get('error', '')[:60]}... | "
                         f"{'the same error' if same else new} | {same} | |")
        elif "theta" not in old:
            rel = _relative(old["neg_log_likelihood"], new["neg_log_likelihood"])
            lines.append(f"| {key} | -log L {old['neg_log_likelihood']:.6f} | {rel:.1e} | "
                         f"{old['neg_log_likelihood'] == new['neg_log_likelihood']} | |")
        else:
            keys = [k for k in old if k != "n_iter" and k in new]
            rel = max(_relative(old[k], new[k]) for k in keys)
            exact = all(np.array_equal(np.asarray(old[k]), np.asarray(new[k])) for k in keys)
            shown = np.array2string(np.asarray(old["theta"]), precision=4, max_line_width=1000)
            lines.append(f"| {key} | {shown} | {rel:.1e} | {exact} | "
                         f"{old.get('n_iter', '-')} / {new.get('n_iter', '-')} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="write the snapshot here (JSON)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--integrator", help="set on every estimator (e.g. CVODES)")
    parser.add_argument("--parts", default="zoo,petab,population",
                        help="comma-separated: zoo, petab (the collection's nominal -log L), "
                             "population (indomethacin)")
    parser.add_argument("--collection", default=str(Path(__file__).resolve().parents[2]
                                                    / "shared" / "petab"))
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.load(open(path)) for path in args.compare)
        print(compare(before, after))
        return 0
    parts = args.parts.split(",")
    result = snapshot(args.integrator) if "zoo" in parts else {}
    if "petab" in parts:
        result.update(petab_nominal(Path(args.collection)))
    if "population" in parts:
        result.update(population())
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
