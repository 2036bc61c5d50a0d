"""Gradients for many unknowns: CVODES' forward sensitivities against the adjoint (#27 item 3).

Lorenz-96 with d states, every initial value and the forcing estimated (d + 1 unknowns), 41
observations on [0, 2]: the CPU of one gradient of the least-squares cost (value included)

* ``integrator="CVODES"``, its switch lifted: the compiled model, CVODES' forward
  sensitivities (d + 1 columns) whatever their number;
* ``integrator="CVODES"``, its adjoint forced: CVODES' own adjoint (one forward solve with
  checkpoints, one backward solve with its quadratures) whatever the number of unknowns;
* ``integrator="CVODES"`` as shipped: CVODES' sensitivities while states x columns stays
  under ``sklode.outputerror._sensitivity.NATIVE_MAX_WORK_GRADIENT``, CVODES' adjoint above
  (the rule this benchmark sets);
* ``integrator="LSODA"``, ``gradient="adjoint"``: one solve with dense output and the
  Gauss-collocation continuous adjoint (one backward pass whatever the number of unknowns);
* ``integrator="LSODA"``, forward: the collocation forward sensitivities.

With ``--petab FOLDER`` (a local copy of the PEtab benchmark collection) it also measures,
on its problems whose solves CVODES' adjoint can run (no doses, no events, switches at
constant times), one gradient of each problem's fit objective at its nominal point by the
forward sensitivities and by the adjoint, each problem in its own process (stiff networks:
where the two cross there).

Writes ``benchmarks/results/crossover.md`` and ``.json``; one process, one thread, best of 3.

    python benchmarks/crossover.py [--petab ../shared/petab]
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
# this folder holds petab.py: it must not hide the petab package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
SIZES = (5, 10, 20, 40, 80, 160)


def _best(fn, repeat=3):
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def one(d):
    from sklode import simulate
    from sklode.models import Lorenz96
    from sklode.outputerror._pose import build_objective

    model = Lorenz96(n_states=d)
    rng = np.random.default_rng(d)
    x0 = 8.0 + rng.normal(0.0, 1.0, d)
    t = np.linspace(0.0, 2.0, 41)
    Y = simulate(model, [8.0], x0, t) + rng.normal(0.0, 0.1, (t.size, d))
    out = {"unknowns": d + 1}
    import sklode.outputerror._sensitivity as sensitivity

    variants = [("cvodes_forward", "CVODES", "forward"), ("cvodes_adjoint", "CVODES", "adjoint"),
                ("cvodes_shipped", "CVODES", "adjoint"), ("lsoda_adjoint", "LSODA", "adjoint")]
    if d <= 40:  # the collocation forward pass above 48 states iterates per step: minutes
        variants.append(("lsoda_forward", "LSODA", "forward"))
    for label, integrator, method in variants:
        objective, u = build_objective(model, t, Y, theta0=[7.5], x0=x0 + 0.1, t0=0.0,
                                       integrator=integrator, rtol=1e-10, atol=1e-12)
        u = np.asarray(u, dtype=np.float64)
        shipped = sensitivity.NATIVE_MAX_WORK_JACOBIAN, sensitivity.NATIVE_MAX_WORK_GRADIENT
        if label == "cvodes_forward":
            sensitivity.NATIVE_MAX_WORK_JACOBIAN = sensitivity.NATIVE_MAX_WORK_GRADIENT = 10**9
        elif label == "cvodes_adjoint":
            sensitivity.NATIVE_MAX_WORK_GRADIENT = -1
        objective.value_and_grad(u, method)  # warm: compilation, the C build

        def gradient(shift=[0.0]):  # a new point each call: no cached solve
            shift[0] += 1e-9
            return objective.value_and_grad(u + shift[0], method)
        out[label] = _best(gradient)
        out[f"{label}_grad"] = gradient()[1].tolist()
        sensitivity.NATIVE_MAX_WORK_JACOBIAN, sensitivity.NATIVE_MAX_WORK_GRADIENT = shipped
    g = np.array(out["lsoda_adjoint_grad"])
    out["max_relative_difference"] = float(max(
        np.max(np.abs(np.array(out[k]) - g)) / np.max(np.abs(g))
        for k in ("cvodes_forward_grad", "cvodes_adjoint_grad", "cvodes_shipped_grad",
                  "lsoda_forward_grad")
        if k in out))
    return out


PETAB_FORWARD_MAX_WORK = 100_000  # states x columns beyond which the forward run is skipped


def petab_one(folder):
    """One problem's gradient both ways (run in its own process)."""
    import sklode.outputerror._sensitivity as sensitivity
    from sklode import petab as sk_petab
    from sklode._validation import check_experiments
    from sklode.outputerror._pose import objective_for_experiments

    problem = sk_petab.load(next(Path(folder).glob("*.yaml")))
    model = problem.model
    data = check_experiments(problem.experiments, None, model=model, estimate_x0=False,
                             min_samples=1, warn_initial_time=False)
    fitted = np.array([n in problem.parameter_names for n in model.param_names])
    row = {"states": model.n_states, "estimated": int(fitted.sum())}
    native = model.native_solver()
    if native is None or native.switch_times is None:
        return dict(row, skipped="no compiled solve, or switches that move with the solution")
    # (the share of parts a problem's doses or events keep off the adjoint is not counted)
    row["klu"] = bool(native.sparse)
    # the rule's measure (_sensitivity._native_work): the forward gradient integrates the
    # x0 columns too (its gradient in the start, which pre-equilibration and offsets use)
    work = model.n_states * (model.n_states + int(np.sum(native.param_in_field)))
    grads = {}
    # the forward route: CVODES' sensitivities' sum (a KLU network: J^T r, its route before
    # the adjoint)
    for label, limit in (("adjoint", -1), ("forward", 10**12)):
        if label == "forward" and work > PETAB_FORWARD_MAX_WORK:
            row["forward"] = None
            continue
        objective, u0 = objective_for_experiments(
            model, data, theta0=problem.theta(None), fitted=fitted,
            noise_kind=problem.noise_kind, integrator="auto", rtol=1e-8, atol=1e-10)
        method = "forward" if label == "forward" and native.sparse else "adjoint"
        shipped = sensitivity.NATIVE_MAX_WORK_GRADIENT
        sensitivity.NATIVE_MAX_WORK_GRADIENT = limit
        objective.value_and_grad(u0, method)  # its solves' set-up
        moved = u0 + 1e-4 * np.maximum(np.abs(u0), 1e-3)
        start = time.process_time()
        grads[label] = objective.value_and_grad(moved, method)[1]
        row[label] = time.process_time() - start
        sensitivity.NATIVE_MAX_WORK_GRADIENT = shipped
        if label == "adjoint" and not any(part._evaluate(moved)[0].native_adjoint is not None
                                          for part in objective.parts):
            return dict(row, skipped="no solve CVODES' adjoint can run (doses or events)")
    if "forward" in grads:
        row["agree"] = float(np.max(np.abs(grads["adjoint"] - grads["forward"]))
                             / max(np.max(np.abs(grads["forward"])), 1e-300))
    row["work"] = work
    return row


def petab_rows(folder, timeout=600):
    import subprocess

    rows = {}
    for problem in sorted(p for p in Path(folder).iterdir() if p.is_dir()):
        run = subprocess.run([sys.executable, __file__, "--one", str(problem)],
                             capture_output=True, text=True, timeout=timeout)
        try:
            rows[problem.name] = json.loads(run.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            rows[problem.name] = {"skipped": (run.stderr.strip().splitlines() or ["?"])[-1][:160]}
        print(problem.name, rows[problem.name], flush=True)
    return rows


def main():
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--petab")
    parser.add_argument("--one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.one:
        print(json.dumps(petab_one(args.one)))
        return
    results = {d: one(d) for d in SIZES}
    lines = ["# Gradients for many unknowns: forward sensitivities or the adjoint", "",
             "Written by `benchmarks/crossover.py`. Lorenz-96, d states, every x0 and F "
             "estimated, 41 times on [0, 2], rtol 1e-10 (so that the gradients of the two "
             "integrators agree well enough to compare): CPU seconds of one gradient (value "
             "included), best of 3, one thread. 'CVODES as shipped': CVODES' sensitivities "
             "below states x columns of `NATIVE_MAX_WORK_GRADIENT`, CVODES' adjoint above.",
             "",
             "| d | unknowns | CVODES forward sensitivities | CVODES adjoint | CVODES as shipped "
             "| LSODA + collocation adjoint | LSODA + collocation forward | gradients agree to |",
             "|---|---|---|---|---|---|---|---|"]
    lines[4:4] = ["'gradients agree to': the largest difference from the LSODA adjoint's "
                  "gradient, relative to its largest entry.", ""]
    for d, r in results.items():
        forward = f"{r['lsoda_forward']:.4f}" if "lsoda_forward" in r else "not run"
        lines.append(f"| {d} | {r['unknowns']} | {r['cvodes_forward']:.4f} | "
                     f"{r['cvodes_adjoint']:.4f} | {r['cvodes_shipped']:.4f} | "
                     f"{r['lsoda_adjoint']:.4f} | {forward} | "
                     f"{r['max_relative_difference']:.1e} |")
    for r in results.values():
        for k in [k for k in r if k.endswith("_grad")]:
            del r[k]
    if args.petab:
        petab = petab_rows(args.petab)
        results["petab"] = petab
        lines += ["", "## Stiff networks: the PEtab collection", "",
                  "Each problem's fit objective at its nominal point (`integrator=\"auto\"`, "
                  "rtol 1e-8, atol 1e-10), one gradient (value included) after one that builds "
                  "the solves, CPU seconds, each problem in its own process. Work: states x "
                  "(states + parameters the field reads), the forward gradient's columns "
                  "(`_sensitivity._native_work`, what the rule reads); the "
                  f"forward run is skipped above {PETAB_FORWARD_MAX_WORK:,}. Problems with "
                  "doses, events or switches that move with the solution have no CVODES "
                  "adjoint and are left out.", "",
                  "| problem | states | estimated | work | KLU | forward | adjoint | "
                  "forward / adjoint | gradients agree to |", "|---|---|---|---|---|---|---|---|---|"]
        for name, r in petab.items():
            if "skipped" in r or r.get("adjoint") is None:
                continue
            forward, adjoint = r.get("forward"), r["adjoint"]
            forward_text = "not run" if forward is None else f"{forward:.3f}"
            ratio = "" if forward is None else f"{forward / adjoint:.2f}"
            agree = format(r["agree"], ".1e") if "agree" in r else ""
            lines.append(f"| {name} | {r['states']} | {r['estimated']} | {r['work']:,} | "
                         f"{'yes' if r.get('klu') else 'no'} | {forward_text} | "
                         f"{adjoint:.3f} | {ratio} | {agree} |")
    (HERE / "results" / "crossover.md").write_text("\n".join(lines) + "\n")
    (HERE / "results" / "crossover.json").write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
