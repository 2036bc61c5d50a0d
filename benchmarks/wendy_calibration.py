"""Calibration of WENDyODE's intervals beyond the paper's five systems (#16).

For each system and noise level, ``--seeds`` noisy draws are fitted and the z-scores
``(theta_hat - theta) / stderr`` are pooled: a calibrated estimator has mean z near 0, spread
near 1 and 95 % intervals covering about 95 % of the truths. Single-threaded CPU seconds.
Writes ``benchmarks/results/wendy_calibration.json`` and ``.md``.

    python benchmarks/wendy_calibration.py               # 40 seeds, 3 % and 10 % (~15 min)
    python benchmarks/wendy_calibration.py --seeds 10 --systems van_der_pol,duffing

The systems (none of them is one of the paper's, and none is used to tune the method):
oscillators with degree-3 couplings (Van der Pol, Duffing), stiff-ish relaxation
oscillators (Van der Pol at mu = 4 on 1001 samples and at mu = 8 on 401, where each jump
spans about 4 samples), a chemical network (mass-action
Brusselator, Michaelis-Menten enzyme kinetics), an epidemic (SIR) and two chaotic ones
(Lorenz-63, Rossler). Each is written in its coefficient form, affine in theta.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).parent))
from run import _single_thread  # noqa: E402

RESULTS = Path(__file__).parent / "results"


def van_der_pol(t, x, theta):
    u, v = x[..., 0], x[..., 1]
    return torch.stack([theta[0] * v, theta[1] * v + theta[2] * u * u * v + theta[3] * u], -1)


def duffing(t, x, theta):
    u, v = x[..., 0], x[..., 1]
    return torch.stack([v, theta[0] * v + theta[1] * u + theta[2] * u**3], -1)


def brusselator(t, x, theta):
    u, v = x[..., 0], x[..., 1]
    return torch.stack([theta[0] + theta[1] * u + theta[2] * u * u * v,
                        theta[3] * u - theta[2] * u * u * v], -1)


def enzyme(t, x, theta):
    s, e, c = x[..., 0], x[..., 1], x[..., 2]
    bind = theta[0] * s * e
    return torch.stack([-bind + theta[1] * c, -bind + (theta[1] + theta[2]) * c,
                        bind - (theta[1] + theta[2]) * c], -1)


def sir(t, x, theta):
    s, i = x[..., 0], x[..., 1]
    return torch.stack([-theta[0] * s * i, theta[0] * s * i - theta[1] * i], -1)


def lorenz63(t, x, theta):
    a, b, c = x[..., 0], x[..., 1], x[..., 2]
    return torch.stack([theta[0] * (b - a), a * (theta[1] - c) - b, a * b - theta[2] * c], -1)


@functools.lru_cache(maxsize=None)  # built once per process (coverage.py's workers)
def _systems():
    from sklode.datasets import Problem
    from sklode.models import FunctionModel, Rossler

    def problem(name, model, theta, x0, t):
        return Problem(name=name, model=model, theta=np.asarray(theta, float),
                       x0=np.asarray(x0, float), t=t, t0=float(t[0]),
                       observed=tuple(range(len(x0))), noise=0.03, noise_kind="relative_rms",
                       theta_init=None, x0_init=None, source="benchmarks/wendy_calibration.py")

    vdp = FunctionModel(van_der_pol, ("u", "v"), ("a", "b", "c", "d"))
    return {
        "van_der_pol": problem("van_der_pol", vdp, (1.0, 1.5, -1.5, -1.0), (2.0, 0.0),
                               np.linspace(0, 20, 401)),
        "van_der_pol_stiff": problem("van_der_pol_stiff", vdp, (1.0, 4.0, -4.0, -1.0),
                                     (2.0, 0.0), np.linspace(0, 25, 1001)),
        # mu = 8 on 401 samples: each jump of the relaxation cycle spans about 4 samples.
        "van_der_pol_relaxation": problem("van_der_pol_relaxation", vdp,
                                          (1.0, 8.0, -8.0, -1.0), (2.0, 0.0),
                                          np.linspace(0, 30, 401)),
        "duffing": problem("duffing", FunctionModel(duffing, ("u", "v"), ("delta", "alpha",
                                                                         "beta")),
                           (-0.1, -1.0, -0.5), (1.5, 0.0), np.linspace(0, 20, 401)),
        "brusselator": problem("brusselator", FunctionModel(brusselator, ("u", "v"),
                                                            ("a", "b", "c", "d")),
                               (1.0, -3.0, 1.0, 2.0), (1.0, 1.0), np.linspace(0, 20, 401)),
        "enzyme": problem("enzyme", FunctionModel(enzyme, ("S", "E", "C"),
                                                  ("kon", "koff", "kcat")),
                          (2.0, 1.0, 0.5), (1.0, 0.5, 0.0), np.linspace(0, 10, 401)),
        "sir": problem("sir", FunctionModel(sir, ("S", "I"), ("beta", "gamma")),
                       (0.5, 0.1), (0.99, 0.01), np.linspace(0, 100, 401)),
        "lorenz63": problem("lorenz63", FunctionModel(lorenz63, ("a", "b", "c"),
                                                      ("sigma", "rho", "beta")),
                            (10.0, 28.0, 8.0 / 3.0), (-8.0, 7.0, 27.0),
                            np.linspace(0, 10, 2001)),
        "rossler": problem("rossler", Rossler(), (0.2, 0.2, 5.7), (1.0, 1.0, 0.0),
                           np.linspace(0, 50, 1001)),
    }


def calibrate(problem, noise, seeds, **params):
    """z-scores, coverage and CPU of WENDyODE over ``seeds`` draws of ``problem``."""
    from sklode import WENDyODE
    from sklode.datasets import make_trajectory

    zs, cpus, e2 = [], [], []
    for seed in range(seeds):
        data = make_trajectory(problem, noise=noise, random_state=seed)
        start = time.process_time()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = WENDyODE(problem.model, **params).fit(data.t, data.Y)
        cpus.append(time.process_time() - start)
        zs.append((est.theta_ - problem.theta) / est.theta_stderr_)
        e2.append(float(np.linalg.norm(est.theta_ - problem.theta)
                        / np.linalg.norm(problem.theta)))
    z = np.array(zs)
    finite = np.isfinite(z)
    return {
        "coverage": float(np.mean(np.abs(np.where(finite, z, np.inf)) <= 1.959964)),
        "mean_z": np.nanmean(z, axis=0).tolist(), "sd_z": np.nanstd(z, axis=0).tolist(),
        "worst_mean_z": float(np.nanmax(np.abs(np.nanmean(z, axis=0)))),
        "non_finite": int(np.sum(~finite)), "median_E2": float(np.median(e2)),
        "median_cpu_s": float(np.median(cpus)), "n_seeds": seeds,
        "param_names": list(problem.model.param_names)}


# The same benchmark run at commit 75f4170, before the covariance's df/dx was decorrelated
# from the noise (#16): the "before" columns.
BEFORE = RESULTS / "wendy_calibration_before.json"


def to_markdown(results):
    before = json.loads(BEFORE.read_text()) if BEFORE.exists() else {}
    lines = ["| system | σ_NR | coverage of 95 % intervals (before) | mean z per parameter | "
             "spread of z | median E2 (before) | CPU s |", "|---|---|---|---|---|---|---|"]
    for name, cells in results.items():
        for noise, r in cells.items():
            mean = ", ".join(f"{p} {m:+.2f}" for p, m in zip(r["param_names"], r["mean_z"]))
            spread = ", ".join(f"{s:.2f}" for s in r["sd_z"])
            old = before.get(name, {}).get(noise)
            was = (f" ({old['coverage']:.3f})", f" ({old['median_E2']:.3g})") if old else ("", "")
            lines.append(f"| {name} | {noise} | {r['coverage']:.3f}{was[0]} | {mean} | {spread} | "
                         f"{r['median_E2']:.3g}{was[1]} | {r['median_cpu_s']:.2f} |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--noises", default="0.03,0.1")
    parser.add_argument("--systems", default=None)
    parser.add_argument("--output", default=str(RESULTS / "wendy_calibration"))
    args = parser.parse_args(argv)
    _single_thread()
    systems = _systems()
    names = list(systems) if args.systems is None else args.systems.split(",")
    results = {}
    for name in names:
        for noise in (float(s) for s in args.noises.split(",")):
            r = calibrate(systems[name], noise, args.seeds)
            results.setdefault(name, {})[str(noise)] = r
            print(name, noise, f"coverage {r['coverage']:.3f} mean z "
                  f"{np.round(r['mean_z'], 2)} sd {np.round(r['sd_z'], 2)} "
                  f"E2 {r['median_E2']:.3g} cpu {r['median_cpu_s']:.2f}", flush=True)
    Path(args.output + ".json").write_text(json.dumps(results, indent=1))
    Path(args.output + ".md").write_text(to_markdown(results) + "\n")


if __name__ == "__main__":
    main()
