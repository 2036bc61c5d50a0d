"""Scale (#27): the three estimators on systems hundreds to a thousand states wide.

* BCD-prox on Lorenz-96 (shared forcing F = 8, seed 000's burn-in x0, T = 1,001 samples at
  dt = 0.01, 10 % relative noise on every state) at d = 100, 300 and 1,000;
* WENDy on the same problem at the sizes its dense residual covariance allows (it is
  ``(K d)^2``: K ~ 266 test functions at T = 1,001, so 5.7 GB and a 26,600-wide Cholesky at
  d = 100);
* AdjointODE on a reaction-diffusion system (Fisher-KPP on [0, 1], d cells, no-flux ends,
  D = 0.001, r = 2, a bump at s = 0.3; T = 101 samples on [0, 3], 10 % relative noise, x0
  estimated: d + 2 unknowns) at d = 50, 100 and 200. Lorenz-96 over 10 time units is
  chaotic, so an output-error fit from 1.3 theta stops in a local optimum there
  (d = 50: error 0.23 after 127 CPU s), which measures nothing about scale;
* the same AdjointODE fit with x0 known (``AdjointODE+x0known``: 2 unknowns) at d = 50, 100,
  200, 400 and 1,000. With x0 estimated the Jacobian has d + 2 columns, so forming it costs
  T d (d + 2) at least, quadratic in d by construction; with x0 known it has 2.

The *integrator* column is what ``integrator="auto"`` chose (CVODES up to
``sklode.integrate.AUTO_MAX_STATES`` states, LSODA above).

Each configuration runs in its own process (one thread), so its peak resident memory
(``ru_maxrss``) is its own. Reported: CPU seconds of ``fit``, iterations, CPU per
iteration, peak memory, the parameters' relative error, and the slope of log(CPU per
iteration) against log(d). Writes ``benchmarks/results/scale.json`` and ``.md``.

    python benchmarks/scale.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402

RESULTS = Path(__file__).parent / "results"
CONFIGS = {
    "BCDProxODE": ("lorenz96", (100, 300, 1000), 1001),
    "WENDyODE": ("lorenz96", (100, 300, 1000), 1001),
    "AdjointODE": ("reaction_diffusion", (50, 100, 200), 101),
    "AdjointODE+x0known": ("reaction_diffusion", (50, 100, 200, 400, 1000), 101),
}


def reaction_diffusion_model(n_states):
    import torch

    from sklode import ODEModel

    class ReactionDiffusion(ODEModel):
        """Fisher-KPP on [0, 1] with ``n_states`` cells and no-flux ends:
        ``u_i' = D d^2 (u_{i-1} - 2 u_i + u_{i+1}) + r u_i (1 - u_i)``."""

        param_names = ("D", "r")

        def __init__(self, n_states=50):
            self.n_states_ = int(n_states)
            self.state_names = tuple(f"u{i + 1}" for i in range(int(n_states)))

        def rhs(self, t, x, theta):
            left = torch.cat([x[..., :1], x[..., :-1]], dim=-1)
            right = torch.cat([x[..., 1:], x[..., -1:]], dim=-1)
            return (theta[0] * len(self.state_names) ** 2 * (left - 2 * x + right)
                    + theta[1] * x * (1 - x))

    return ReactionDiffusion(n_states)


def problem(system, d, T):
    from sklode.datasets import Problem, _lorenz96_x0
    from sklode.models import Lorenz96

    if system == "lorenz96":
        return Problem("lorenz96", Lorenz96(d), np.array([8.0]), _lorenz96_x0(d),
                       np.linspace(0.0, 0.01 * (T - 1), T), 0.0, tuple(range(d)), 0.1,
                       "relative_rms", theta_init=None)
    s = (np.arange(d) + 0.5) / d
    return Problem("reaction_diffusion", reaction_diffusion_model(d), np.array([0.001, 2.0]),
                   0.05 + 0.9 * np.exp(-((s - 0.3) / 0.08) ** 2), np.linspace(0.0, 3.0, T),
                   0.0, tuple(range(d)), 0.1, "relative_rms", theta_init=None)


def one(method, system, d, T):
    """Fit once in this process; a JSON line on stdout."""
    import resource
    import time
    import warnings

    import torch

    import sklode
    import sklode.integrate
    from sklode.datasets import make_trajectory

    import sklode.diagnostics._uncertainty
    import sklode.adjoint._estimator
    import sklode.wendy._estimator

    torch.set_num_threads(1)

    def timed(function, total):
        """``function``, adding the CPU of each call to ``total[0]``."""
        def wrapper(*args, **kwargs):
            begin = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                total[0] += time.process_time() - begin
        return wrapper

    # the covariance after the fit (sensitivities), and WENDy's x0 after its theta (a
    # least-squares shooting fit with d sensitivity columns, once per fit, not per
    # iteration), timed apart
    covariance_cpu, shooting_cpu = [0.0], [0.0]
    timed_covariance = timed(sklode.diagnostics._uncertainty.fit_uncertainty, covariance_cpu)
    sklode.diagnostics._uncertainty.fit_uncertainty = timed_covariance
    sklode.adjoint._estimator.fit_uncertainty = timed_covariance
    sklode.wendy._estimator.shoot_initial_state = timed(
        sklode.wendy._estimator.shoot_initial_state, shooting_cpu)
    p = problem(system, d, T)
    data = make_trajectory(p, random_state=0)
    name, _, variant = method.partition("+")
    est = getattr(sklode, name)(p.model, theta0=1.3 * p.theta)
    if variant == "x0known":
        est.set_params(x0=p.x0, estimate_x0=False)
    start = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(data.t, data.Y)
    cpu = time.process_time() - start
    n_iter = int(est.n_iter_)
    print(json.dumps({
        "method": method, "system": system, "d": d, "T": T, "cpu_s": cpu, "n_iter": n_iter,
        "integrator": sklode.integrate.integrator_for(p.model, "auto"),
        "covariance_cpu_s": covariance_cpu[0], "x0_shooting_cpu_s": shooting_cpu[0],
        "cpu_per_iter_s": (cpu - covariance_cpu[0] - shooting_cpu[0]) / max(n_iter, 1),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "param_error": float(np.max(np.abs(est.theta_ / p.theta - 1.0))),
        "warned": sorted({w.category.__name__ for w in caught
                          if w.category.__module__.startswith(("sklode", "builtins"))}),
        "messages": sorted({f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught
                            if w.category.__module__.startswith(("sklode", "builtins"))})}))


def to_markdown(results):
    lines = ["# Scale: states in the hundreds to a thousand", "",
             "Written by `benchmarks/scale.py` (its docstring has the protocol). One process "
             "and one thread per row; CPU seconds of `fit`; peak resident memory of the "
             "process (it includes ~0.45 GB of torch, numpy and scipy); the parameters' "
             "largest relative error. *covariance* is the part of the CPU spent on the "
             "output-error covariance after the fit (sensitivities; with x0 held above "
             "`SENSITIVITY_MAX_ENTRIES`); *x0 shooting* the part WENDy spends on its initial "
             "state after θ (a least-squares fit of x0 on the leading samples, d sensitivity "
             "columns); CPU per iteration excludes both.", "",
             "| method | system | d | T | unknowns | integrator | CPU s | of which covariance | "
             "of which x0 shooting | iterations | CPU s / iteration | peak MB | error | warned |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results["runs"]:
        if "error" in r:
            lines.append(f"| {r['method']} | {r['system']} | {r['d']} | {r['T']} | | | "
                         f"failed: {r['error']} | | | | | | | |")
            continue
        unknowns = r["T"] * r["d"] if r["method"] == "BCDProxODE" else r["d"] + 2
        if r["method"] == "WENDyODE":
            unknowns = 1
        if r["method"] == "AdjointODE+x0known":
            unknowns = 2
        covariance = (f"{r['covariance_cpu_s']:.1f}" if "covariance_cpu_s" in r
                      else "not split")
        shooting = (f"{r['x0_shooting_cpu_s']:.1f}" if "x0_shooting_cpu_s" in r
                    else "not split") if r["method"] == "WENDyODE" else "—"
        lines.append(f"| {r['method']} | {r['system']} | {r['d']} | {r['T']} | {unknowns:,} | "
                     f"{r.get('integrator', 'not recorded')} | {r['cpu_s']:.1f} | "
                     f"{covariance} | {shooting} | {r['n_iter']} | "
                     f"{r['cpu_per_iter_s']:.3f} | "
                     f"{r['peak_rss_mb']:.0f} | {r['param_error']:.2e} | "
                     f"{', '.join(r['warned']) or '—'} |")
    lines += ["", "Slope of log(CPU per iteration) against log(d), per method:", ""]
    for method, slope in results["slopes"].items():
        lines.append(f"- {method}: {slope:.2f}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=4, metavar=("METHOD", "SYSTEM", "D", "T"))
    parser.add_argument("--methods", default=",".join(CONFIGS))
    args = parser.parse_args(argv)
    if args.one:
        method, system, d, T = args.one
        one(method, system, int(d), int(T))
        return 0
    runs = []
    for method in args.methods.split(","):
        system, sizes, T = CONFIGS[method]
        for d in sizes:
            proc = subprocess.run([sys.executable, __file__, "--one", method, system, str(d),
                                   str(T)], capture_output=True, text=True)
            if proc.returncode:
                runs.append({"method": method, "system": system, "d": d, "T": T,
                             "error": proc.stderr.strip().splitlines()[-1][:200]})
            else:
                runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(runs[-1], flush=True)
    slopes = {}
    for method in args.methods.split(","):
        ok = [r for r in runs if r["method"] == method and "error" not in r]
        if len(ok) >= 2:
            slopes[method] = float(np.polyfit(np.log([r["d"] for r in ok]),
                                              np.log([r["cpu_per_iter_s"] for r in ok]), 1)[0])
    results = {"runs": runs, "slopes": slopes}
    path = RESULTS / "scale.json"
    if path.exists() and args.methods != ",".join(CONFIGS):  # keep the other methods' rows
        old = json.loads(path.read_text())
        keep = [r for r in old["runs"] if r["method"] not in args.methods.split(",")]
        results = {"runs": keep + runs, "slopes": {**old["slopes"], **slopes}}
    path.write_text(json.dumps(results, indent=1))
    (RESULTS / "scale.md").write_text(to_markdown(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
