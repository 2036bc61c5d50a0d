"""AdjointODE benchmarks: the seed's SEIRD examples against scipy least_squares, the
optimisers (CG variants included), and the cost of a gradient against the number of
parameters on Lorenz-96.

Single-threaded CPU seconds (``time.process_time``). Writes ``benchmarks/results/adjoint.json``
and ``adjoint.md``.

    python benchmarks/adjoint.py                      # every section (~6 min on one core)
    python benchmarks/adjoint.py --sections seird
"""

from __future__ import annotations

import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from run import run_sections  # noqa: E402

EXAMPLES = ("seird", "seird_e3", "seird_e4a", "seird_e4b", "seird_e4c")
LABELS = {"seird": "E2", "seird_e3": "E3", "seird_e4a": "E4a", "seird_e4b": "E4b",
          "seird_e4c": "E4c"}
SEED_BFGS_ITERS = {"seird": 14, "seird_e3": 41, "seird_e4a": 30, "seird_e4b": 43,
                   "seird_e4c": 27}
# Measured separately with seed 002's setup: scipy least_squares (TRF, FD Jacobian),
# median CPU s / solves there.
ANCHOR_LSQ = {"seird": (0.118, 30), "seird_e3": (0.389, 80), "seird_e4a": (0.184, 60),
              "seird_e4b": (0.577, 116), "seird_e4c": (0.271, 60)}


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return out, time.process_time() - start


def _baseline(problem, Y, numpy_rhs=True):
    from baselines import least_squares_like_adjoint

    return least_squares_like_adjoint(problem, Y, numpy_rhs=numpy_rhs)


def _fit(problem, Y, **params):
    from sklode.registry import METHODS

    est = METHODS["adjoint"].make(problem, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, cpu = _cpu(lambda: est.fit(problem.t, Y))
    return est, cpu


def _stats(values):
    v = np.asarray(values, dtype=float)
    return {"min": float(v.min()), "median": float(np.median(v)), "max": float(v.max())}


def section_seird(seeds=10):
    from sklode.datasets import get_problem, make_trajectory

    _fit(get_problem("seird"), make_trajectory("seird", random_state=0).Y)  # torch warm-up
    out = {}
    for name in EXAMPLES:
        problem = get_problem(name)
        rows = {k: [] for k in ("lsq", "lsq_torch", "trf", "bfgs")}
        for seed in range(seeds):
            Y = make_trajectory(name, random_state=seed).Y
            ref, cpu = _cpu(lambda: _baseline(problem, Y))
            rows["lsq"].append({"cpu_s": cpu, "iters": ref.nfev, "cost": ref.cost})
            ref_t, cpu = _cpu(lambda: _baseline(problem, Y, numpy_rhs=False))
            rows["lsq_torch"].append({"cpu_s": cpu, "cost": ref_t.cost})
            best = min(ref.cost, ref_t.cost)
            for opt in ("trf", "bfgs"):
                est, cpu = _fit(problem, Y, optimizer=opt)
                best = min(best, est.loss_history_[-1])
                rows[opt].append({
                    "cpu_s": cpu, "solves": est.n_solves_, "iters": est.n_iter_,
                    "cost": est.loss_history_[-1], "converged": est.converged_,
                    "theta_err": list(np.abs(est.theta_ / problem.theta - 1)),
                    "x0_err": list(np.abs(est.x0_ / problem.x0 - 1))})
            for rs in rows.values():
                rs[-1]["at_optimum"] = bool(rs[-1]["cost"] <= best * (1 + 1e-6))
        summary = {}
        for method, rs in rows.items():
            s = {"cpu_s": _stats([r["cpu_s"] for r in rs]),
                 "at_optimum": int(sum(r["at_optimum"] for r in rs)), "n": len(rs)}
            for key in ("solves", "iters"):
                if key in rs[0]:
                    s[key] = _stats([r[key] for r in rs])
            if "theta_err" in rs[0]:
                errs = np.array([r["theta_err"] for r in rs])
                s["theta_err"] = [_stats(errs[:, k]) for k in range(errs.shape[1])]
                s["x0_err_median"] = list(np.median([r["x0_err"] for r in rs], axis=0))
                s["converged"] = int(sum(r["converged"] for r in rs))
            summary[method] = s
        out[name] = summary
        print(name, {m: (round(s["cpu_s"]["median"], 3), s["at_optimum"])
                     for m, s in summary.items()}, flush=True)
    return out


def section_optimizers(seeds=3):
    from sklode.datasets import get_problem, make_trajectory

    problem = get_problem("seird")
    out = {}
    for opt in ("trf", "lm", "bfgs", "l-bfgs-b", "cg-fr", "cg-pr", "cg-hs", "cg-dy"):
        rs = []
        for seed in range(seeds):
            Y = make_trajectory("seird", random_state=seed).Y
            ref = _baseline(problem, Y)
            est, cpu = _fit(problem, Y, optimizer=opt)
            rs.append({"cpu_s": cpu, "iters": est.n_iter_, "solves": est.n_solves_,
                       "rel_cost": (est.loss_history_[-1] - ref.cost) / ref.cost,
                       "converged": est.converged_})
        out[opt] = {"cpu_s": _stats([r["cpu_s"] for r in rs]),
                    "iters": _stats([r["iters"] for r in rs]),
                    "solves": _stats([r["solves"] for r in rs]),
                    "max_rel_cost": max(r["rel_cost"] for r in rs),
                    "converged": int(sum(r["converged"] for r in rs)), "n": len(rs)}
        print(opt, out[opt]["iters"], out[opt]["max_rel_cost"], flush=True)
    return out


def _median_cpu(fn, repeat=3):
    fn()  # warm-up (torch lazy initialisation, caches)
    times = []
    for _ in range(repeat):
        _, cpu = _cpu(fn)
        times.append(cpu)
    return float(np.median(times))


def section_gradient_cost():
    """One gradient against one forward solve: SEIRD, and Lorenz-96 with np = d forcings."""
    from sklode import simulate
    from sklode.adjoint import LeastSquaresObjective, build_objective
    from sklode.datasets import get_problem, make_trajectory
    from sklode.models import Lorenz96
    from sklode.registry import METHODS

    out = {}
    problem = get_problem("seird_e3")
    Y = make_trajectory("seird_e3", random_state=0).Y
    obj, u = build_objective(problem.model, problem.t, Y, **METHODS["adjoint"].settings(problem))

    def fresh(fn):
        def run():
            obj._cache_key = None
            return fn()
        return run

    t_fwd = _median_cpu(fresh(lambda: obj.residual(u)), 10)
    t_adj = _median_cpu(fresh(lambda: obj.value_and_grad(u, "adjoint")), 10)
    t_sens = _median_cpu(fresh(lambda: obj.value_and_grad(u, "forward")), 10)
    out["seird"] = {"forward_s": t_fwd, "value_and_adjoint_grad_s": t_adj,
                    "value_and_forward_sens_s": t_sens,
                    "adjoint_in_forward_solves": t_adj / t_fwd,
                    "sensitivity_in_forward_solves": t_sens / t_fwd}
    print(out["seird"], flush=True)

    l96 = {}
    for d in (10, 20, 40, 80, 160, 320):
        model = Lorenz96(d, per_component_forcing=True)
        rng = np.random.default_rng(0)
        F = 8.0 + 0.5 * np.sin(2 * np.pi * np.arange(d) / d)
        x_spin = simulate(model, F, F + rng.standard_normal(d), [0.0, 5.0], t0=0.0)[-1]
        t = np.linspace(0.1, 1.0, 10)
        Yd = simulate(model, F, x_spin, t, t0=0.0) + 0.1 * rng.standard_normal((10, d))
        o = LeastSquaresObjective(model, 0.0, t, Yd, np.full(Yd.shape, 0.1), tuple(range(d)),
                                  x_spin, F * 1.02, free=np.zeros(d, dtype=bool), prior=None,
                                  invariant=None, positive=False, integrator="DOP853",
                                  rtol=1e-7, atol=1e-9)
        ud = o.to_u(F * 1.02)
        row = {"forward_s": _median_cpu(lambda: (setattr(o, "_cache_key", None),
                                                 o.residual(ud)))}
        row["adjoint_s"] = _median_cpu(lambda: (setattr(o, "_cache_key", None),
                                                o.value_and_grad(ud, "adjoint")))
        if d <= 160:
            row["forward_sens_s"] = _median_cpu(lambda: (setattr(o, "_cache_key", None),
                                                         o.value_and_grad(ud, "forward")), 1)
        if d <= 80:
            def fd():
                g = np.empty(d)
                f0 = (setattr(o, "_cache_key", None), o.cost(ud))[1]
                for k in range(d):
                    e = np.zeros(d)
                    e[k] = 1e-7
                    o._cache_key = None
                    g[k] = (o.cost(ud + e) - f0) / 1e-7
                return g
            row["fd_s"] = _median_cpu(fd, 1)
        if d <= 20:  # accuracy against central differences at a tight tolerance
            o.solver["rtol"] = 1e-12
            o.solver["atol"] = 1e-12
            o._cache_key = None
            _, g = o.value_and_grad(ud, "adjoint")
            ref = np.empty(d)
            for k in range(d):
                e = np.zeros(d)
                e[k] = 1e-5
                ref[k] = (o.cost(ud + e) - o.cost(ud - e)) / 2e-5
            row["adjoint_rel_err"] = float(np.max(np.abs(g - ref)) / np.max(np.abs(ref)))
        l96[str(d)] = row
        print(d, row, flush=True)
    out["lorenz96"] = l96
    return out


SECTIONS = {"seird": section_seird, "optimizers": section_optimizers,
            "gradient": section_gradient_cost}


def to_markdown(results):
    lines = ["# AdjointODE benchmark results", "",
             "Single thread, CPU seconds (`time.process_time`), generated by "
             "`python benchmarks/adjoint.py`. Noise is proportional (std = level · x), weights "
             "σ̄ = level · |y|, prior s0 = round((N/N̂)·x̂0) with σ0 = level · s0 and k = 1e-4 "
             "when x0 is estimated (the choices of the reference setup). A *solve* is one "
             "forward solve or one derivative (adjoint or sensitivity) pass; for "
             "least_squares it counts the finite-difference Jacobian's solves.", ""]
    if "seird" in results:
        lines += ["## Seed 002, Examples 2-4 (10 noise seeds each; median [min-max])", "",
                  "| example | method | CPU s | solves | iterations (seed BFGS) | "
                  "at optimum | anchor lsq CPU s / solves |",
                  "|---|---|---|---|---|---|---|"]
        for name, res in results["seird"].items():
            for method, s in res.items():
                label = {"lsq": "scipy least_squares, numpy rhs",
                         "lsq_torch": "scipy least_squares, same torch rhs",
                         "trf": "AdjointODE trf (default)", "bfgs": "AdjointODE BFGS"}[method]
                c = s["cpu_s"]
                solves = (f"{s['solves']['median']:.0f} [{s['solves']['min']:.0f}-"
                          f"{s['solves']['max']:.0f}]" if "solves" in s else "-")
                iters = (f"{s['iters']['median']:.0f} ({SEED_BFGS_ITERS[name]})"
                         if "iters" in s else "-")
                if method == "lsq":
                    iters = f"{s['iters']['median']:.0f} residual evaluations"
                anchor = ANCHOR_LSQ[name]
                lines.append(f"| {LABELS[name]} | {label} | {c['median']:.3f} "
                             f"[{c['min']:.3f}-{c['max']:.3f}] | {solves} | {iters} | "
                             f"{s['at_optimum']}/{s['n']} | {anchor[0]} / {anchor[1]} |")
        lines += ["", "Relative parameter errors of the default fit (min / median / max "
                  "over the seeds; data-limited since every fit reaches the same optimum):", "",
                  "| example | α | β | γ | μ | x0 median (S, E, I, R, D) |",
                  "|---|---|---|---|---|---|"]
        for name, res in results["seird"].items():
            errs = res["trf"]["theta_err"]
            cells = " | ".join(f"{e['min']:.3f} / {e['median']:.3f} / {e['max']:.3f}"
                               for e in errs)
            x0 = ", ".join(f"{v:.3f}" for v in res["trf"]["x0_err_median"])
            lines.append(f"| {LABELS[name]} | {cells} | ({x0}) |")
        lines.append("")
    if "optimizers" in results:
        lines += ["## Every optimiser on Example 2 (3 seeds; median)", "",
                  "| optimizer | CPU s | iterations | solves | max rel. cost above scipy's "
                  "optimum | converged |", "|---|---|---|---|---|---|"]
        for opt, s in results["optimizers"].items():
            lines.append(f"| {opt} | {s['cpu_s']['median']:.3f} | {s['iters']['median']:.0f} "
                         f"| {s['solves']['median']:.0f} | {s['max_rel_cost']:.1e} | "
                         f"{s['converged']}/{s['n']} |")
        lines.append("")
    if "gradient" in results:
        g = results["gradient"]["seird"]
        lines += ["## Cost of one gradient", "",
                  f"SEIRD Example 3 (9 unknowns): forward solve {1e3 * g['forward_s']:.1f} ms; "
                  f"value + adjoint gradient {1e3 * g['value_and_adjoint_grad_s']:.1f} ms "
                  f"(= {g['adjoint_in_forward_solves']:.2f} forward solves); value + forward "
                  f"sensitivities {1e3 * g['value_and_forward_sens_s']:.1f} ms "
                  f"(= {g['sensitivity_in_forward_solves']:.2f}).", "",
                  "Lorenz-96 with one forcing per state (np = d), T = 1, 10 observation times, "
                  "DOP853 rtol 1e-7:", "",
                  "| d = np | forward s | value + adjoint gradient s | value + forward "
                  "sensitivities s | forward-difference gradient s | adjoint rel. error |",
                  "|---|---|---|---|---|---|"]
        for d, r in results["gradient"]["lorenz96"].items():
            def cell(key, fmt="{:.4f}"):
                return fmt.format(r[key]) if key in r else "-"
            lines.append(f"| {d} | {cell('forward_s')} | {cell('adjoint_s')} | "
                         f"{cell('forward_sens_s')} | {cell('fd_s')} | "
                         f"{cell('adjoint_rel_err', '{:.1e}')} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    return run_sections("adjoint", SECTIONS, to_markdown, argv)


if __name__ == "__main__":
    sys.exit(main())
