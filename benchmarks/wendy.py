"""WENDyODE benchmarks: the paper's five problems, coverage of the intervals, grids, and
cost versus the number of samples.

Single-threaded CPU seconds (``time.process_time``). Writes ``benchmarks/results/wendy.json``
and ``wendy.md``.

    python benchmarks/wendy.py                       # every section (~10 min on one core)
    python benchmarks/wendy.py --sections table
    python benchmarks/wendy.py --sections likelihood   # IRLS vs weak likelihood (~35 min)
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
import tracemalloc
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from run import run_sections  # noqa: E402

RESULTS = Path(__file__).parent / "results"
PROBLEMS = ("wendy_logistic", "wendy_lotka_volterra", "wendy_fitzhugh_nagumo",
            "wendy_hindmarsh_rose", "wendy_protein_transduction")
NOISES = (0.05, 0.10, 0.20)

# Measured separately on the same data: best public median E2 (pyWENDy 2023 or HEAD, 1-3
# seeds) and the py2023 CPU seconds at the paper's N.
BAR_E2 = {
    "wendy_logistic": (0.006, 0.011, 0.025),
    "wendy_lotka_volterra": (0.0017, 0.0034, 0.0062),
    "wendy_fitzhugh_nagumo": (0.0034, 0.0085, 0.017),
    "wendy_hindmarsh_rose": (0.022, 0.18, 0.62),
    "wendy_protein_transduction": (0.018, 0.037, 0.086),
}
BAR_CPU = {"wendy_logistic": 0.41, "wendy_lotka_volterra": 2.0, "wendy_fitzhugh_nagumo": 2.0,
           "wendy_hindmarsh_rose": 7.4, "wendy_protein_transduction": 7.9}


def _timed_fit(est, data):
    """Fit ``est`` on ``data`` (warnings silenced); the estimator and its CPU seconds."""
    start = time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(data.t, data.Y)
    return est, time.process_time() - start


def fit(problem, data, **params):
    from sklode import WENDyODE

    return _timed_fit(WENDyODE(problem.model, **params), data)


def forward_error(problem, data, theta):
    """WENDy's E_FS: simulate from the true x0 with the estimate, relative Frobenius error."""
    from sklode.integrate import simulate
    from sklode.metrics import forward_simulation_error

    try:
        X = simulate(problem.model, theta, problem.x0, data.t, t0=problem.t0, rtol=1e-10,
                     atol=1e-10)
    except Exception:  # a blown-up forward simulation is reported as infinite error
        return float("inf")
    return forward_simulation_error(data.X, X)


def section_table(seeds=10):
    from sklode.datasets import make_trajectory
    from sklode.metrics import relative_coefficient_error

    out = {}
    for name in PROBLEMS:
        out[name] = {}
        for k, noise in enumerate(NOISES):
            rows = []
            for seed in range(seeds):
                data = make_trajectory(name, noise=noise, random_state=seed)
                est, cpu = fit(data.problem, data)
                paper, cpu_paper = fit(data.problem, data, bias_correction=False)
                rows.append({
                    "E2": relative_coefficient_error(est.theta_, data.problem.theta),
                    "E2_paper_irls": relative_coefficient_error(paper.theta_,
                                                                data.problem.theta),
                    "cpu_s_paper_irls": cpu_paper,
                    "E2_ols": relative_coefficient_error(est.theta_ols_, data.problem.theta),
                    "E_FS": forward_error(data.problem, data, est.theta_),
                    "cpu_s": cpu, "n_iter": est.n_iter_, "stop": est.stop_reason_,
                    "K": est.n_test_functions_, "min_radius": est.radii_[0]})
            med = {key: float(np.median([r[key] for r in rows]))
                   for key in ("E2", "E2_paper_irls", "E2_ols", "E_FS", "cpu_s",
                               "cpu_s_paper_irls", "n_iter")}
            med["bar_E2"] = BAR_E2[name][k]
            out[name][str(noise)] = {"median": med, "runs": rows}
            print(name, noise, {k2: round(v, 4) for k2, v in med.items()}, flush=True)
    return out


def _mle_fit(problem, data):
    """Output-error maximum likelihood on the same draw: AdjointODE (x0 estimated) started at
    the truth, so it finds the likelihood's local optimum nearest the truth."""
    from sklode import AdjointODE

    return _timed_fit(AdjointODE(problem.model, theta0=problem.theta, x0=problem.x0,
                                 t0=float(data.t[0]), estimate_x0=True), data)


# Output-error fits of Hindmarsh-Rose take about 2 CPU minutes each (bursts); 5 % noise only.
FLOOR_CELLS = [(name, noise) for name in PROBLEMS if name != "wendy_hindmarsh_rose"
               for noise in NOISES] + [("wendy_hindmarsh_rose", 0.05)]


def section_floor(seeds=10):
    """The efficiency floor: E2 of the output-error MLE on the same draws as the table.

    For Gaussian noise the MLE is asymptotically efficient; no estimator's median E2 over
    fresh draws can be far below it, whatever its 1-3-seed medians say.
    """
    from sklode.datasets import make_trajectory
    from sklode.metrics import relative_coefficient_error

    out = {}
    for name, noise in FLOOR_CELLS:
        errs, cpus = [], []
        for seed in range(seeds if name != "wendy_hindmarsh_rose" else 5):
            data = make_trajectory(name, noise=noise, random_state=seed)
            est, cpu = _mle_fit(data.problem, data)
            errs.append(relative_coefficient_error(est.theta_, data.problem.theta))
            cpus.append(cpu)
        out.setdefault(name, {})[str(noise)] = {
            "median_E2": float(np.median(errs)), "E2": errs,
            "median_cpu_s": float(np.median(cpus))}
        print("floor", name, noise, out[name][str(noise)]["median_E2"], flush=True)
    return out


def section_hr_more(seeds=10):
    """Hindmarsh-Rose with max_test_functions=256 (spiking dynamics gain from more)."""
    from sklode.datasets import make_trajectory
    from sklode.metrics import relative_coefficient_error

    out = {}
    for noise in NOISES:
        rows = []
        for seed in range(seeds):
            data = make_trajectory("wendy_hindmarsh_rose", noise=noise, random_state=seed)
            est, cpu = fit(data.problem, data, max_test_functions=256)
            rows.append({"E2": relative_coefficient_error(est.theta_, data.problem.theta),
                         "cpu_s": cpu, "K": est.n_test_functions_})
        out[str(noise)] = {key: float(np.median([r[key] for r in rows]))
                           for key in ("E2", "cpu_s", "K")}
        print("hr256", noise, out[str(noise)], flush=True)
    return out


def section_coverage(seeds=100):
    """Fraction of 95 % intervals that contain the truth, LV at 10 % noise."""
    from sklode.datasets import make_trajectory

    hits, total, widths = 0, 0, []
    for seed in range(seeds):
        data = make_trajectory("wendy_lotka_volterra", noise=0.10, random_state=1000 + seed)
        est, _ = fit(data.problem, data)
        lo, hi = est.confidence_intervals(0.95).T
        hits += int(np.sum((lo <= data.problem.theta) & (data.problem.theta <= hi)))
        total += data.problem.theta.size
        widths.append((hi - lo).tolist())
    out = {"coverage": hits / total, "n_intervals": total,
           "median_width": np.median(widths, axis=0).tolist()}
    print("coverage", out, flush=True)
    return out


def section_grids(seeds=5):
    """Uniform vs sorted-random times (same N = 512) vs t in [10, 15], LV at 5 % noise."""
    from sklode.datasets import get_problem, make_trajectory
    from sklode.metrics import relative_coefficient_error

    p0 = get_problem("wendy_lotka_volterra")
    out = {}
    for kind in ("uniform", "random", "shifted_t0_10"):
        errs = []
        for seed in range(seeds):
            rng = np.random.default_rng(50 + seed)
            if kind == "uniform":
                p = dataclasses.replace(p0, t=np.linspace(0, 5, 512))
            elif kind == "random":
                p = dataclasses.replace(p0, t=np.r_[0, np.sort(rng.uniform(0, 5, 510)), 5])
            else:
                p = dataclasses.replace(p0, t=np.linspace(10, 15, 512), t0=10.0)
            data = make_trajectory(p, noise=0.05, random_state=seed)
            est, _ = fit(p, data)
            errs.append(relative_coefficient_error(est.theta_, p.theta))
        out[kind] = {"median_E2": float(np.median(errs)), "E2": errs}
        print("grid", kind, out[kind]["median_E2"], flush=True)
    return out


def section_scaling(seeds=3):
    """CPU seconds (median over seeds, untraced) and peak traced memory (one traced fit)
    against N (LV on [0, 5], 10 % noise)."""
    from sklode.datasets import get_problem, make_trajectory
    from sklode.metrics import relative_coefficient_error

    p0 = get_problem("wendy_lotka_volterra")
    out = {}
    for n in (256, 512, 1024, 2048, 4096, 8192, 16384):
        p = dataclasses.replace(p0, t=np.linspace(0, 5, n))
        cpus, errs = [], []
        for seed in range(seeds):
            data = make_trajectory(p, noise=0.10, random_state=1 + seed)
            est, cpu = fit(p, data)
            cpus.append(cpu)
            errs.append(relative_coefficient_error(est.theta_, p.theta))
        data = make_trajectory(p, noise=0.10, random_state=1)
        tracemalloc.start()
        fit(p, data)
        peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        out[str(n)] = {"cpu_s": float(np.median(cpus)), "peak_MiB": peak,
                       "K": est.n_test_functions_, "E2": float(np.median(errs))}
        print("scaling", n, out[str(n)], flush=True)
    ns = np.array([int(k) for k in out])
    cpus = np.array([v["cpu_s"] for v in out.values()])
    out["loglog_slope_cpu_vs_N"] = float(np.polyfit(np.log(ns), np.log(cpus), 1)[0])
    return out


# pyWENDy's per-draw E2 on the head-to-head draws (problem -> sigma_NR -> seed -> version ->
# E2 or "capped"), measured by the project on 2026-12-01 with pyWENDy 2023 (33c6736cd0da,
# as its notebook calls it) and HEAD (e071fc88f161, the 2025 rewrite), one thread each and
# 60 CPU s per fit; HEAD ran 3 draws on Hindmarsh-Rose and protein transduction.
PEERS = Path(__file__).parent / "data" / "wendy_h2h_peers.json"


def h2h_data(name, noise, seed):
    """The head-to-head recipe: ``U = U* + sigma_NR RMS(U*) Z`` with
    ``Z = default_rng(seed).standard_normal``, the same ``Z`` at every noise level."""
    from sklode.datasets import get_problem

    problem = get_problem(name)
    X = problem.clean_states()
    Z = np.random.default_rng(seed).standard_normal(X.shape)
    return problem, X + noise * np.sqrt(np.mean(X**2)) * Z


def theta_cpu(problem, U):
    """CPU seconds of what pyWENDy computes, theta and its covariance (no x0, no forward
    solve): :func:`sklode.wendy._irls.wendy_solve` as the estimator calls it."""
    from sklode._on_grid import is_linear_on_data
    from sklode._checks import check_theta0
    from sklode.wendy._irls import wendy_solve

    start = time.process_time()
    wendy_solve(problem.model, problem.t, U, check_theta0(None, problem.model),
                linear=is_linear_on_data(problem.model, problem.t, U))
    return time.process_time() - start


def section_h2h(seeds=10):
    """WENDyODE against pyWENDy 2023 and HEAD on identical draws (the peers' recipe)."""
    from sklode import WENDyODE
    from sklode.metrics import relative_coefficient_error

    peers = json.loads(PEERS.read_text())
    out = {}
    for name in PROBLEMS:
        out[name] = {}
        for noise in NOISES:
            rows = []
            for seed in range(seeds):
                problem, U = h2h_data(name, noise, seed)
                draw = SimpleNamespace(t=problem.t, Y=U)
                est, cpu = _timed_fit(WENDyODE(problem.model), draw)
                peer = peers[name][str(noise)][str(seed)]
                row = {"seed": seed, "E2": relative_coefficient_error(est.theta_, problem.theta),
                       "py2023": peer.get("py2023"), "pyhead": peer.get("pyhead"),
                       "cpu_s": cpu, "cpu_s_theta": theta_cpu(problem, U),
                       "n_iter": est.n_iter_, "stop": est.stop_reason_}
                if name != "wendy_hindmarsh_rose":  # its output-error fits: 10-60 CPU s each
                    mle, _ = _mle_fit(problem, draw)
                    row["E2_mle"] = relative_coefficient_error(mle.theta_, problem.theta)
                rows.append(row)
            out[name][str(noise)] = rows
            print("h2h", name, noise, np.median([r["E2"] for r in rows]), flush=True)
    return out


def section_fresh(seeds=20, problems=PROBLEMS,
                  with_mle=("wendy_logistic", "wendy_lotka_volterra", "wendy_fitzhugh_nagumo",
                            "wendy_protein_transduction")):
    """RMS E2 on fresh draws of the library's own generator, with the output-error MLE on the
    same draws for the problems in ``with_mle`` (Hindmarsh-Rose's, 10-60 CPU s per fit, is the
    separate section ``fresh_hr``)."""
    from sklode.datasets import make_trajectory
    from sklode.metrics import relative_coefficient_error

    out = {}
    for name in problems:
        out[name] = {}
        for noise in NOISES:
            rows = []
            for seed in range(seeds):
                data = make_trajectory(name, noise=noise, random_state=500 + seed)
                est, cpu = fit(data.problem, data)
                row = {"E2": relative_coefficient_error(est.theta_, data.problem.theta),
                       "cpu_s": cpu}
                if name in with_mle:
                    mle, mle_cpu = _mle_fit(data.problem, data)
                    row["E2_mle"] = relative_coefficient_error(mle.theta_, data.problem.theta)
                    row["cpu_s_mle"] = mle_cpu
                rows.append(row)
            out[name][str(noise)] = rows
            print("fresh", name, noise, np.sqrt(np.mean([r["E2"] ** 2 for r in rows])),
                  flush=True)
    return out


def section_fresh_hr(seeds=20):
    """:func:`section_fresh` for Hindmarsh-Rose, with its output-error MLE."""
    return section_fresh(seeds, ("wendy_hindmarsh_rose",), ("wendy_hindmarsh_rose",))


def section_likelihood(seeds=20):
    """The weak-form likelihood against the IRLS: fresh draws of the library's generator
    (seeds 700-719, used nowhere else) with the output-error MLE beside them, and the
    peers' head-to-head draws (seeds 0-9) against pyWENDy's per-draw values."""
    from sklode import WENDyODE
    from sklode.datasets import make_trajectory
    from sklode.metrics import relative_coefficient_error

    peers = json.loads(PEERS.read_text())
    out = {"fresh": {}, "h2h": {}}
    for name in PROBLEMS:
        out["fresh"][name], out["h2h"][name] = {}, {}
        for noise in NOISES:
            rows = []
            for seed in range(seeds if name != "wendy_hindmarsh_rose" else 0):
                data = make_trajectory(name, noise=noise, random_state=700 + seed)
                row = {}
                for method in ("irls", "likelihood"):
                    est, cpu = fit(data.problem, data, method=method)
                    row[method] = relative_coefficient_error(est.theta_, data.problem.theta)
                    row[f"cpu_s_{method}"] = cpu
                mle, mle_cpu = _mle_fit(data.problem, data)
                row["mle"] = relative_coefficient_error(mle.theta_, data.problem.theta)
                row["cpu_s_mle"] = mle_cpu
                rows.append(row)
            out["fresh"][name][str(noise)] = rows
            h2h = []
            for seed in range(10):
                problem, U = h2h_data(name, noise, seed)
                draw = SimpleNamespace(t=problem.t, Y=U)
                peer = peers[name][str(noise)][str(seed)]
                row = {"seed": seed, "py2023": peer.get("py2023"), "pyhead": peer.get("pyhead")}
                for method in ("irls", "likelihood"):
                    est, cpu = _timed_fit(WENDyODE(problem.model, method=method), draw)
                    row[method] = relative_coefficient_error(est.theta_, problem.theta)
                    row[f"cpu_s_{method}"] = cpu
                h2h.append(row)
            out["h2h"][name][str(noise)] = h2h
            print("likelihood", name, noise, flush=True)
    return out


SECTIONS = {"likelihood": section_likelihood,
            "h2h": section_h2h, "fresh": section_fresh, "fresh_hr": section_fresh_hr,
            "table": section_table,
            "floor": section_floor, "hr_more": section_hr_more,
            "coverage": section_coverage, "grids": section_grids, "scaling": section_scaling}


def three_draw_rate(values, bar):
    """Fraction of all 3-draw subsets whose median is at most ``bar``: how often a median of
    3 draws, as the public figures are, would meet the bar with this estimator."""
    triples = list(itertools.combinations(values, 3))
    return float(np.mean([np.median(tr) <= bar for tr in triples]))


# pyWENDy 2023's median CPU seconds per fit on the head-to-head draws (same measurement as
# PEERS), per problem and noise level.
PY2023_CPU = {
    "wendy_logistic": (0.41, 0.41, 0.41), "wendy_lotka_volterra": (1.78, 1.82, 1.84),
    "wendy_fitzhugh_nagumo": (1.85, 1.87, 1.93), "wendy_hindmarsh_rose": (6.2, 11.1, 4.03),
    "wendy_protein_transduction": (6.89, 6.82, 7.53)}


def _peer_value(value):
    """A peer's E2, ``inf`` for a fit it did not finish in 60 CPU s, None where not run."""
    return float("inf") if value == "capped" else value


def _h2h_markdown(h2h):
    lines = ["## Head-to-head with pyWENDy on identical draws", "",
             "The recipe of the peers' measurement (`benchmarks/data/wendy_h2h_peers.json`): "
             "clean trajectory, grid and true θ from `get_problem`, `U = U* + σ_NR · RMS(U*) · "
             "Z` with `Z = default_rng(seed).standard_normal`, seeds 0-9, the same Z at every "
             "noise level. pyWENDy 2023 (bump test functions, 4 scales, SVD corner) and HEAD "
             "(2025: polynomial test functions, one radius, one per grid point); HEAD ran 3 "
             "draws on Hindmarsh-Rose and protein transduction (∞: not finished in 60 CPU s). "
             "'won' counts the draws where WENDyODE's E2 is lower. CPU: median per fit, one "
             "thread; 'θ' is what pyWENDy computes (θ and its covariance), 'fit' the whole "
             "`fit` (also x0_ by shooting and the output-error standard errors).", "",
             "The output-error MLE (AdjointODE from the truth, x0 estimated) on the same "
             "draws shows how lucky a draw set is: 'MLE won' counts the draws where the MLE "
             "is below py2023 / HEAD.", "",
             "| problem | σ_NR | WENDyODE median E2 [min-max] | py2023 | pyHEAD | MLE | won vs "
             "py2023 | won vs HEAD | MLE won vs py2023 / HEAD | CPU s θ / fit | py2023 CPU s | "
             "θ CPU / py2023 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    per_draw = ["", "### Per draw: WENDyODE · py2023 · pyHEAD", "",
                "| problem | σ_NR | " + " | ".join(f"seed {k}" for k in range(10)) + " |",
                "|---|---|" + "---|" * 10]
    for name, cells in h2h.items():
        for k, (noise, rows) in enumerate(cells.items()):
            ours = np.array([r["E2"] for r in rows])
            p23 = np.array([_peer_value(r["py2023"]) for r in rows], dtype=float)
            head = [(_peer_value(r["pyhead"]), e) for r, e in zip(rows, ours)
                    if r["pyhead"] is not None]
            head_e2 = np.array([h for h, _ in head], dtype=float)
            cpu_theta = float(np.median([r["cpu_s_theta"] for r in rows]))
            cpu_fit = float(np.median([r["cpu_s"] for r in rows]))
            if "E2_mle" in rows[0]:
                mle = np.array([r["E2_mle"] for r in rows])
                mle_head = sum(r["E2_mle"] < _peer_value(r["pyhead"]) for r in rows
                               if r["pyhead"] is not None)
                mle_cells = (f"{np.median(mle):.4g}", f"{int(np.sum(mle < p23))}/{len(rows)} / "
                             f"{mle_head}/{len(head)}")
            else:
                mle_cells = ("—", "—")
            lines.append(
                f"| {name} | {noise} | {np.median(ours):.4g} [{ours.min():.2g}-{ours.max():.2g}]"
                f" | {np.median(p23):.4g} | {np.median(head_e2):.4g} ({len(head)}) | "
                f"{mle_cells[0]} | {int(np.sum(ours < p23))}/{len(rows)} | "
                f"{sum(e < h for h, e in head)}/{len(head)} | {mle_cells[1]} | "
                f"{cpu_theta:.3f} / {cpu_fit:.3f} | {PY2023_CPU[name][k]} | "
                f"{cpu_theta / PY2023_CPU[name][k]:.2f} |")

            def cell(r):
                head_value = "—" if r["pyhead"] is None else (
                    "∞" if r["pyhead"] == "capped" else f"{r['pyhead']:.3g}")
                return f"{r['E2']:.3g} · {r['py2023']:.3g} · {head_value}"
            per_draw.append(f"| {name} | {noise} | " + " | ".join(cell(r) for r in rows) + " |")
    wins23 = sum(int(r["E2"] < _peer_value(r["py2023"])) for c in h2h.values()
                 for rows in c.values() for r in rows)
    total23 = sum(len(rows) for c in h2h.values() for rows in c.values())
    head_rows = [r for c in h2h.values() for rows in c.values() for r in rows
                 if r["pyhead"] is not None]
    winsh = sum(int(r["E2"] < _peer_value(r["pyhead"])) for r in head_rows)
    lines += ["", f"In all: lower E2 than py2023 on {wins23} of {total23} draws, than HEAD on "
              f"{winsh} of {len(head_rows)}."]
    return lines + per_draw + [""]


def _fresh_markdown(fresh):
    lines = ["## Fresh draws with the output-error MLE beside them", "",
             "20 draws per cell of `make_trajectory` (seeds 500-519; none used to tune the "
             "method), fitted by WENDyODE and by the output-error maximum likelihood "
             "(AdjointODE, x0 estimated, started at the truth: the efficient estimator's "
             "local optimum) on the same data. Root-mean-square E2 is the figure of merit "
             "(a 10-draw median moves by a third from one set of draws to the next).", "",
             "| problem | σ_NR | RMS E2 WENDyODE | RMS E2 MLE | ratio | median E2 WENDyODE | "
             "median E2 MLE | CPU s WENDyODE / MLE |", "|---|---|---|---|---|---|---|---|"]
    for name, cells in fresh.items():
        for noise, rows in cells.items():
            ours = np.array([r["E2"] for r in rows])
            rms = np.sqrt(np.mean(ours**2))
            cpu = np.median([r["cpu_s"] for r in rows])
            if "E2_mle" in rows[0]:
                mle = np.array([r["E2_mle"] for r in rows])
                mle_rms = np.sqrt(np.mean(mle**2))
                lines.append(f"| {name} | {noise} | {rms:.4g} | {mle_rms:.4g} | "
                             f"{rms / mle_rms:.2f} | {np.median(ours):.4g} | "
                             f"{np.median(mle):.4g} | {cpu:.2f} / "
                             f"{np.median([r['cpu_s_mle'] for r in rows]):.2f} |")
            else:
                lines.append(f"| {name} | {noise} | {rms:.4g} | — | — | {np.median(ours):.4g} "
                             f"| — | {cpu:.2f} / — |")
    return lines + [""]


def _likelihood_markdown(lik):
    def rms(values):
        values = np.array([v for v in values if v is not None], dtype=float)
        return np.sqrt(np.mean(values**2)) if values.size else float("nan")

    lines = ["## The weak-form likelihood against the IRLS", "",
             "`WENDyODE(method='likelihood')` (the weak residual's Gaussian likelihood in θ, "
             "minimised by a trust region from the IRLS estimate) against `method='irls'`. "
             "Fresh draws: 20 per cell of `make_trajectory` with seeds 700-719 (used nowhere "
             "else), the output-error MLE (AdjointODE, x0 estimated, started at the truth) on "
             "the same draws; RMS E2 and its ratio to the MLE's. Head-to-head: the peers' "
             "10 draws per cell (seeds 0-9, `h2h_data`), RMS E2 over the draws pyWENDy HEAD "
             "finished (all 10 except Hindmarsh-Rose and protein transduction: 1-3). CPU s are "
             "medians per fit.", "",
             "| problem | σ_NR | fresh RMS E2 IRLS / likelihood / MLE | ratio to MLE IRLS / "
             "likelihood | CPU s IRLS / likelihood / MLE | h2h RMS E2 IRLS / likelihood / "
             "pyWENDy HEAD (draws) | h2h draws below HEAD IRLS / likelihood |",
             "|---|---|---|---|---|---|---|"]
    for name, cells in lik["h2h"].items():
        for noise, h2h in cells.items():
            rows = lik["fresh"].get(name, {}).get(noise, [])
            if rows:
                e = {m: rms([r[m] for r in rows]) for m in ("irls", "likelihood", "mle")}
                cpu = {m: np.median([r[f"cpu_s_{m}"] for r in rows])
                       for m in ("irls", "likelihood", "mle")}
                fresh = (f"{e['irls']:.4g} / {e['likelihood']:.4g} / {e['mle']:.4g} | "
                         f"{e['irls'] / e['mle']:.2f} / {e['likelihood'] / e['mle']:.2f} | "
                         f"{cpu['irls']:.2f} / {cpu['likelihood']:.2f} / {cpu['mle']:.2f}")
            else:
                fresh = "— | — | —"
            done = [r for r in h2h if isinstance(r.get("pyhead"), (int, float))]
            below = {m: sum(r[m] < r["pyhead"] for r in done) for m in ("irls", "likelihood")}
            lines.append(
                f"| {name} | {noise} | {fresh} | {rms([r['irls'] for r in done]):.4g} / "
                f"{rms([r['likelihood'] for r in done]):.4g} / "
                f"{rms([r['pyhead'] for r in done]):.4g} ({len(done)}) | "
                f"{below['irls']}/{len(done)} / {below['likelihood']}/{len(done)} |")
    return lines + [""]


def to_markdown(results):
    lines = ["# WENDyODE benchmark results", "",
             "Single thread, CPU seconds. Noise: σ = σ_NR · RMS(clean data) (the paper's "
             "convention), a standard deviation. Generated by `python benchmarks/wendy.py`.", ""]
    if "likelihood" in results:
        lines += _likelihood_markdown(results["likelihood"])
    if "h2h" in results:
        lines += _h2h_markdown(results["h2h"])
    if "fresh" in results:
        lines += _fresh_markdown({**results["fresh"], **results.get("fresh_hr", {})})
    if "table" in results:
        floor = results.get("floor", {})
        lines += ["## The paper's five problems (medians over 10 seeds)", "",
                  "Efficiency floor: the output-error MLE (AdjointODE, x0 estimated, started "
                  "at the truth) on the same draws — asymptotically efficient, so a median "
                  "over fresh draws cannot sit far below it (10 seeds; Hindmarsh-Rose 5 seeds "
                  "at 5 % only: 2 CPU minutes per fit). The best public E2 are medians of "
                  "1-3 draws.", "",
                  "E2 is the default fit (bias-corrected IRLS); 'paper IRLS' is "
                  "`bias_correction=False`, the paper's estimating equations.", "",
                  "| problem | σ_NR | E2 | E2 paper IRLS | best public E2 | MLE floor E2 | "
                  "E2 OLS | E_FS | CPU s | CPU s paper IRLS | pyWENDy-2023 CPU s | IRLS its |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for name, res in results["table"].items():
            for noise, r in res.items():
                m = r["median"]
                fl = floor.get(name, {}).get(noise)
                fl = f"{fl['median_E2']:.4g}" if fl else "—"
                lines.append(f"| {name} | {noise} | {m['E2']:.4g} | {m['E2_paper_irls']:.4g} | "
                             f"{m['bar_E2']:.4g} | {fl} | {m['E2_ols']:.4g} | "
                             f"{m['E_FS']:.3g} | {m['cpu_s']:.3f} | "
                             f"{m['cpu_s_paper_irls']:.3f} | {BAR_CPU[name]} | "
                             f"{m['n_iter']:.0f} |")
        lines += ["", "### Root-mean-square E2 (steadier than a 10-seed median)", "",
                  "| problem | σ_NR | bias-corrected | paper IRLS | MLE floor | seeds where "
                  "the correction helps |", "|---|---|---|---|---|---|"]
        for name, res in results["table"].items():
            for noise, r in res.items():
                ours = np.array([run["E2"] for run in r["runs"]])
                paper = np.array([run["E2_paper_irls"] for run in r["runs"]])
                fl = floor.get(name, {}).get(noise)
                mle = f"{np.sqrt(np.mean(np.square(fl['E2']))):.4g}" if fl else "—"
                lines.append(f"| {name} | {noise} | {np.sqrt(np.mean(ours**2)):.4g} | "
                             f"{np.sqrt(np.mean(paper**2)):.4g} | {mle} | "
                             f"{int(np.sum(ours < paper))} of {ours.size} |")
        lines += ["", "### How often a median of 3 draws meets the bar", "",
                  "The public figures are medians of 1-3 draws. Over all triples of the "
                  "seeds (120 of 10; 10 of Hindmarsh-Rose's 5 MLE fits): the fraction whose "
                  "median E2 is at most the bar, for this estimator and for the MLE on the "
                  "same draws.", "",
                  "| problem | σ_NR | bar | ours | MLE |", "|---|---|---|---|---|"]
        for name, res in results["table"].items():
            for noise, r in res.items():
                bar = r["median"]["bar_E2"]
                ours = three_draw_rate([run["E2"] for run in r["runs"]], bar)
                fl = floor.get(name, {}).get(noise)
                mle = f"{three_draw_rate(fl['E2'], bar):.2f}" if fl else "—"
                lines.append(f"| {name} | {noise} | {bar:.4g} | {ours:.2f} | {mle} |")
        lines.append("")
    if "hr_more" in results:
        lines += ["## Hindmarsh-Rose with `max_test_functions=256` (10 seeds)", "",
                  "| σ_NR | E2 | CPU s | K |", "|---|---|---|---|"]
        for noise, r in results["hr_more"].items():
            lines.append(f"| {noise} | {r['E2']:.4g} | {r['cpu_s']:.3f} | {r['K']:.0f} |")
        lines.append("")
    if "coverage" in results:
        c = results["coverage"]
        lines += [f"## Coverage\n\n95 % intervals contain the truth for "
                  f"{100 * c['coverage']:.1f} % of {c['n_intervals']} parameter intervals "
                  "(LV, 10 % noise, 100 seeds).", ""]
    if "grids" in results:
        lines += ["## Grids (LV, N = 512, 5 % noise, 5 seeds)", "", "| grid | median E2 |",
                  "|---|---|"]
        for kind, r in results["grids"].items():
            lines.append(f"| {kind} | {r['median_E2']:.4g} |")
        lines.append("")
    if "scaling" in results:
        lines += ["## Cost against N (LV, 10 % noise; CPU and E2: medians over 3 seeds, "
                  "memory: one fit under tracemalloc)", "",
                  "| N | CPU s | peak traced MiB | K | E2 |", "|---|---|---|---|---|"]
        for n, r in results["scaling"].items():
            if n.isdigit():
                lines.append(f"| {n} | {r['cpu_s']:.3f} | {r['peak_MiB']:.0f} | {r['K']} | "
                             f"{r['E2']:.4g} |")
        lines += [f"\nlog-log slope of CPU against N: "
                  f"{results['scaling']['loglog_slope_cpu_vs_N']:.2f}", ""]
    return "\n".join(lines)


def main(argv=None):
    return run_sections("wendy", SECTIONS, to_markdown, argv)


if __name__ == "__main__":
    sys.exit(main())
