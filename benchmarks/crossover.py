"""Gradients for many unknowns: CVODES' forward sensitivities against the adjoint (#27 item 3).

Lorenz-96 with d states, every initial value and the forcing estimated (d + 1 unknowns), 41
observations on [0, 2]: the CPU of one gradient of the least-squares cost (value included)

* ``integrator="CVODES"``, its switch lifted: the compiled model, CVODES' forward
  sensitivities (d + 1 columns) whatever their number;
* ``integrator="CVODES"`` as shipped: CVODES' sensitivities while states x columns stays
  under ``sklode.outputerror._sensitivity.NATIVE_MAX_WORK_GRADIENT``, the collocation adjoint on a
  LSODA trajectory above (the rule this benchmark sets);
* ``integrator="LSODA"``, ``gradient="adjoint"``: one solve with dense output and the
  Gauss-collocation continuous adjoint (one backward pass whatever the number of unknowns);
* ``integrator="LSODA"``, forward: the collocation forward sensitivities.

Writes ``benchmarks/results/crossover.md`` and ``.json``; one process, one thread, best of 3.

    python benchmarks/crossover.py
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

HERE = Path(__file__).parent
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

    variants = [("cvodes_forward", "CVODES", "forward"), ("cvodes_shipped", "CVODES", "adjoint"),
                ("lsoda_adjoint", "LSODA", "adjoint")]
    if d <= 40:  # the collocation forward pass above 48 states iterates per step: minutes
        variants.append(("lsoda_forward", "LSODA", "forward"))
    for label, integrator, method in variants:
        objective, u = build_objective(model, t, Y, theta0=[7.5], x0=x0 + 0.1, t0=0.0,
                                       integrator=integrator, rtol=1e-10, atol=1e-12)
        u = np.asarray(u, dtype=np.float64)
        shipped = sensitivity.NATIVE_MAX_WORK_JACOBIAN, sensitivity.NATIVE_MAX_WORK_GRADIENT
        if label == "cvodes_forward":
            sensitivity.NATIVE_MAX_WORK_JACOBIAN = sensitivity.NATIVE_MAX_WORK_GRADIENT = 10**9
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
        for k in ("cvodes_forward_grad", "cvodes_shipped_grad", "lsoda_forward_grad")
        if k in out))
    return out


def main():
    torch.set_num_threads(1)
    results = {d: one(d) for d in SIZES}
    lines = ["# Gradients for many unknowns: forward sensitivities or the adjoint", "",
             "Written by `benchmarks/crossover.py`. Lorenz-96, d states, every x0 and F "
             "estimated, 41 times on [0, 2], rtol 1e-10 (so that the gradients of the two "
             "integrators agree well enough to compare): CPU seconds of one gradient (value "
             "included), best of 3, one thread. 'CVODES as shipped': CVODES' sensitivities "
             "below states x columns of `NATIVE_MAX_WORK_GRADIENT`, the adjoint on a LSODA "
             "solution above (one extra solve).", "",
             "| d | unknowns | CVODES forward sensitivities | CVODES as shipped | LSODA + "
             "collocation adjoint | LSODA + collocation forward | gradients agree to |",
             "|---|---|---|---|---|---|---|"]
    lines[4:4] = ["'gradients agree to': the largest difference from the adjoint's gradient, "
                  "relative to its largest entry.", ""]
    for d, r in results.items():
        forward = f"{r['lsoda_forward']:.4f}" if "lsoda_forward" in r else "not run"
        lines.append(f"| {d} | {r['unknowns']} | {r['cvodes_forward']:.4f} | "
                     f"{r['cvodes_shipped']:.4f} | {r['lsoda_adjoint']:.4f} | {forward} | "
                     f"{r['max_relative_difference']:.1e} |")
    for r in results.values():
        for k in [k for k in r if k.endswith("_grad")]:
            del r[k]
    (HERE / "results" / "crossover.md").write_text("\n".join(lines) + "\n")
    (HERE / "results" / "crossover.json").write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
