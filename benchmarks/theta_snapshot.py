"""Fit every method on every named problem it applies to (noise seed 0, posed by the registry)
and write ``theta_`` per fit; or compare two such snapshots.

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

import numpy as np


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


def compare(before, after):
    """A markdown table: the estimate before, and the largest relative change after."""
    lines = ["| problem / method | theta_ before | max relative change after | iterations "
             "before / after |", "|---|---|---|---|"]
    for key, old in before.items():
        new = after.get(key)
        if new is None:
            lines.append(f"| {key} | | not fitted after | |")
        elif "error" in old or "error" in new:
            same = old.get("error", "")[:60] == new.get("error", "")[:60]
            lines.append(f"| {key} | {old.get('error', '')[:60]}... | "
                         f"{'the same error' if same else new} | |")
        else:
            a, b = np.asarray(old["theta"]), np.asarray(new["theta"])
            rel = float(np.max(np.abs(b - a) / np.maximum(np.abs(a), 1e-300)))
            shown = np.array2string(a, precision=4, max_line_width=1000)
            lines.append(f"| {key} | {shown} | {rel:.1e} | {old['n_iter']} / {new['n_iter']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", help="write the snapshot here (JSON)")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    parser.add_argument("--integrator", help="set on every estimator (e.g. CVODES)")
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.load(open(path)) for path in args.compare)
        print(compare(before, after))
        return 0
    result = snapshot(args.integrator)
    if args.output:
        with open(args.output, "w") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
