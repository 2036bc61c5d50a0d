"""Forward solves: the compiled field against torch and hand-written numpy, in one process.

1. Per-call cost of the pointwise field for every zoo model: the torch path
   (``model.f``), the compiled one (``model.pointwise_field()``) and, where the baseline has
   one, the hand-written numpy field of ``benchmarks/baselines.py``.
2. AdjointODE (defaults: ``integrator="auto"``, and with ``integrator="LSODA"``) against
   the loop a user writes by hand (``solve_ivp`` inside ``least_squares`` with a
   finite-difference Jacobian on a numpy field, same data and start) on the seed's SEIRD
   examples and on four systems outside the papers (partial observation, x0 estimated): CPU
   seconds of a warm fit and of the loop (best of three each), and of the first fit of a
   fresh process (a subprocess per system, its imports excluded, the C compiler's CPU
   included), with the build cache filled and empty.
3. ``predict`` on 20,000 times against ``solve_ivp`` (LSODA) with a numpy field.
4. Wall time of ``import sklode`` and ``sklode --help`` in fresh processes.
   ``wide``: ``simulate`` with CVODES against LSODA on Lorenz-96 and a reaction-diffusion
   system from 5 to 200 states.
5. ``solves``: every condition of the PEtab development problems (and SEIRD, Lorenz-63)
   solved with and without forward sensitivities by AMICI, by sklode's scipy path (LSODA)
   and by its compiled path (``integrator="CVODES"``), in one process
   (``benchmarks/solves.py``; AMICI's columns need ``amici`` in the environment).

Writes ``benchmarks/results/forward.md`` and ``.json`` (the parts not run keep their last
results); CPU seconds single-threaded.

    python benchmarks/forward.py [--parts fields,fits,predict,cold,wide,solves]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import timeit
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)
HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))


# ----------------------------------------------------------------------------- held-out systems
def sir(t, x, theta):
    beta, gamma = theta[0], theta[1]
    S, I = x[..., 0], x[..., 1]  # noqa: E741
    return torch.stack([-beta * S * I, beta * S * I - gamma * I], dim=-1)


def sir_np(t, x, beta, gamma):
    S, I = x  # noqa: E741
    return [-beta * S * I, beta * S * I - gamma * I]


def sir_counts(t, x, theta):  # head counts of a population of 1,000
    S, I = x[..., 0], x[..., 1]  # noqa: E741
    new = theta[0] * S * I / 1000.0
    return torch.stack([-new, new - theta[1] * I, theta[1] * I], dim=-1)


def sir_counts_np(t, x, beta, gamma):
    S, I, _ = x  # noqa: E741
    new = beta * S * I / 1000.0
    return [-new, new - gamma * I, gamma * I]


def michaelis_menten(t, x, theta):
    vmax, km, feed = theta[0], theta[1], theta[2]
    s, p = x[..., 0], x[..., 1]
    rate = vmax * s / (km + s)
    return torch.stack([feed - rate, rate - 0.1 * p], dim=-1)


def michaelis_menten_np(t, x, vmax, km, feed):
    s, p = x
    rate = vmax * s / (km + s)
    return [feed - rate, rate - 0.1 * p]


def van_der_pol(t, x, theta):
    mu = theta[0]
    u, v = x[..., 0], x[..., 1]
    return torch.stack([v, mu * (1 - u**2) * v - u], dim=-1)


def van_der_pol_np(t, x, mu):
    u, v = x
    return [v, mu * (1 - u * u) * v - u]


def lorenz63(t, x, theta):
    sigma, rho, beta = theta[0], theta[1], theta[2]
    a, b, c = x[..., 0], x[..., 1], x[..., 2]
    return torch.stack([sigma * (b - a), a * (rho - c) - b, a * b - beta * c], dim=-1)


def lorenz63_np(t, x, sigma, rho, beta):
    a, b, c = x
    return [sigma * (b - a), a * (rho - c) - b, a * b - beta * c]


#: name -> (torch rhs, numpy rhs, states, params, theta, theta0, x0, t, observed, noise)
SYSTEMS = {
    "SIR, S hidden": (sir, sir_np, ("S", "I"), ("beta", "gamma"), (0.5, 0.1), (0.4, 0.15),
                      (0.99, 0.01), np.linspace(0, 60, 61), (1,), 0.005),
    "Michaelis-Menten with feed": (michaelis_menten, michaelis_menten_np, ("s", "p"),
                                   ("vmax", "km", "feed"), (1.0, 0.5, 0.3), (0.8, 0.7, 0.2),
                                   (2.0, 0.0), np.linspace(0, 30, 61), (0, 1), 0.02),
    "Van der Pol, v hidden": (van_der_pol, van_der_pol_np, ("u", "v"), ("mu",), (1.5,),
                              (1.0,), (2.0, 0.0), np.linspace(0, 20, 201), (0,), 0.1),
    "Lorenz-63, T = 201": (lorenz63, lorenz63_np, ("a", "b", "c"), ("sigma", "rho", "beta"),
                           (10.0, 28.0, 8 / 3), (9.0, 26.0, 2.5), (1.0, 1.0, 1.0),
                           np.linspace(0, 2, 201), (0, 1, 2), 0.5),
    # #57's held-out figure: an easy fit (at the optimum) with heteroscedastic noise, x0 known
    "SIR counts, I and R, 5 % relative noise": (
        sir_counts, sir_counts_np, ("S", "I", "R"), ("beta", "gamma"), (0.5, 0.2), (0.4, 0.25),
        (990.0, 10.0, 0.0), np.linspace(0, 40, 41), (1, 2), 0.05,
        {"relative": True, "estimate_x0": False}),
}


def system_problem(name, seed=0):
    """``(model, t, Y, fit settings, baseline settings)`` of a held-out system."""
    from sklode import simulate
    from sklode.models import FunctionModel

    rhs, rhs_np, states, params, theta, theta0, x0, t, observed, noise, *more = SYSTEMS[name]
    options = more[0] if more else {}
    model = FunctionModel(rhs, states, params)
    X = simulate(model, theta, x0, t)
    draws = np.random.default_rng(seed).standard_normal((t.size, len(observed)))
    if options.get("relative"):  # noise in proportion to the value
        Y = X[:, list(observed)] * (1 + noise * draws)
    else:
        Y = X[:, list(observed)] + noise * draws
    if options.get("estimate_x0", True):
        x0_guess = np.array(x0) * 1.1 + 0.01
        known = {}
    else:  # the initial state known: both fit theta alone, from t0 = 0
        x0_guess, known = np.array(x0), {"estimate_x0": False, "t0": 0.0}
    fit = dict(theta0=np.array(theta0), x0=x0_guess, observed=observed, **known)
    base = dict(theta0=np.array(theta0), x0=x0_guess, observed=observed, fun=rhs_np,
                **known)
    return model, t, Y, fit, base


def seird_problem(name, seed=0):
    from sklode.datasets import get_problem, make_trajectory
    from sklode.registry import METHODS

    problem = get_problem(name)
    data = make_trajectory(name, random_state=seed)
    return problem, data, METHODS["adjoint"].make(problem)


# ----------------------------------------------------------------------------- measurements
def field_costs():
    from baselines import NUMPY_RHS

    from sklode.datasets import get_problem, list_problems
    from sklode.models import OralAbsorption

    rows = {}
    cases = [(name, get_problem(name).model, get_problem(name).x0, get_problem(name).theta)
             for name in list_problems()]
    cases.append(("oral_absorption", OralAbsorption(), np.array([100.0, 0.0]),
                  np.array([1.2, 0.15, 30.0])))  # the zoo model outside the papers' problems
    for name, model, x, theta in cases:
        key = type(model).__name__
        if key in rows:
            continue
        x, theta = np.asarray(x, dtype=float), np.asarray(theta, dtype=float)
        field = model.pointwise_field()
        compiled = getattr(field, "compiled", None) is not None

        def per_call(f):
            number = 2000
            return min(timeit.repeat(f, number=number, repeat=3)) / number * 1e6

        numpy_rhs = NUMPY_RHS.get(name)
        rows[key] = {"torch_us": per_call(lambda: model.f(0.5, x, theta)),
                     "compiled_us": per_call(lambda: field(0.5, x, theta)) if compiled
                     else None,
                     "numpy_us": per_call(lambda: numpy_rhs(0.5, x, *theta))
                     if numpy_rhs else None}
    return rows


def _cpu(fn):
    start = time.process_time()
    out = fn()
    return time.process_time() - start, out


def _best(fn, repeat=3):
    """The lowest CPU of ``repeat`` runs (timings on a shared machine only add noise)."""
    runs = [_cpu(fn) for _ in range(repeat)]
    return min(r[0] for r in runs), runs[0][1]


def fit_pair(name):
    """Warm CPU of AdjointODE (its default integrator, and LSODA) and of the hand-written
    loop on one system (and the costs they reach)."""
    from baselines import least_squares_fit, least_squares_like_adjoint

    from sklode import AdjointODE
    from sklode.integrate import integrator_for

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in SYSTEMS:
            model, t, Y, fit, base = system_problem(name)
            AdjointODE(model, **fit).fit(t, Y)  # warm: the field compiled, the C build
            cpu, est = _best(lambda: AdjointODE(model, **fit).fit(t, Y))
            AdjointODE(model, **fit, integrator="LSODA").fit(t, Y)
            ls_cpu, ls_est = _best(lambda: AdjointODE(model, **fit, integrator="LSODA")
                                   .fit(t, Y))
            base_cpu, res = _best(lambda: least_squares_fit(model, t, Y, **base))
        else:
            problem, data, est0 = seird_problem(name)
            model = est0.model
            est0.fit(data.t, data.Y)
            cpu, est = _best(lambda: seird_problem(name)[2].fit(data.t, data.Y))
            seird_problem(name)[2].set_params(integrator="LSODA").fit(data.t, data.Y)
            ls_cpu, ls_est = _best(lambda: seird_problem(name)[2].set_params(
                integrator="LSODA").fit(data.t, data.Y))
            base_cpu, res = _best(lambda: least_squares_like_adjoint(problem, data.Y))
    return {"adjoint_cpu": cpu, "loop_cpu": base_cpu, "adjoint_cost": float(est.loss_history_[-1]),
            "loop_cost": float(res.cost), "lsoda_cpu": ls_cpu,
            "lsoda_cost": float(ls_est.loss_history_[-1]),
            "default_integrator": integrator_for(model, "auto")}


def first_fit(name, cold):
    """CPU of the first AdjointODE fit in a fresh process (imports excluded), the C
    compiler's own CPU (a child process) included; ``cold``: with an empty build cache (the
    data, simulated first, compile the model too: the fit gets a fresh copy of it and an
    empty cache)."""
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r})\n"
            "import forward, os, pickle, resource, tempfile, time, warnings\n"
            "from sklode import AdjointODE\n"
            f"name, cold = {name!r}, {cold!r}\n"
            "warnings.simplefilter('ignore')\n"
            "def cpu():\n"
            "    c = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
            "    return time.process_time() + c.ru_utime + c.ru_stime\n"
            "def fresh(model):\n"
            "    if cold:\n"
            "        os.environ['SKLODE_CACHE_DIR'] = tempfile.mkdtemp()\n"
            "    return pickle.loads(pickle.dumps(model))  # without its compiled caches\n"
            "if name in forward.SYSTEMS:\n"
            "    model, t, Y, fit, _ = forward.system_problem(name)\n"
            "    model = fresh(model)\n"
            "    start = cpu(); AdjointODE(model, **fit).fit(t, Y)\n"
            "else:\n"
            "    problem, data, est = forward.seird_problem(name)\n"
            "    est.set_params(model=fresh(est.model))\n"
            "    start = cpu(); est.fit(data.t, data.Y)\n"
            "print(cpu() - start)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    return float(out.stdout.split()[-1])


def predict_cost():
    from scipy.integrate import solve_ivp

    from sklode import AdjointODE
    from sklode.datasets import make_trajectory
    from sklode.models import LotkaVolterra

    d = make_trajectory("lotka_volterra", random_state=0)
    est = AdjointODE(LotkaVolterra(), theta0=(2.5, 1.5, 4.5, 1.5)).fit(d.t, d.Y)
    t = np.linspace(0.0, 20.0, 20_000)
    est.predict(t[:10])
    a, b, c, dd = est.theta_

    def numpy_field(s, x):
        return [a * x[0] - b * x[0] * x[1], -c * x[1] + dd * x[0] * x[1]]

    sk = min(_cpu(lambda: est.predict(t))[0] for _ in range(3))
    field = est.model.pointwise_field()  # the alternative: solve_ivp's stepping on it
    theta = est.theta_
    ivp = min(_cpu(lambda: solve_ivp(lambda s, x: field(s, x, theta), (0.0, 20.0), est.x0_,
                                     method="LSODA", t_eval=t, rtol=est.rtol,
                                     atol=est.atol))[0] for _ in range(3))
    sp = min(_cpu(lambda: solve_ivp(numpy_field, (0.0, 20.0), est.x0_, method="LSODA",
                                    t_eval=t, rtol=est.rtol, atol=est.atol))[0]
             for _ in range(3))
    return {"predict_cpu": sk, "solve_ivp_numpy_cpu": sp, "solve_ivp_compiled_cpu": ivp}


def wide_solves():
    """``simulate`` (rtol 1e-8) with CVODES against LSODA as the states grow: Lorenz-96
    (F = 8, 101 times on [0, 2]) and the reaction-diffusion system of ``scale.py`` (101
    times on [0, 3]); ms, best of 5. What ``integrator="auto"`` chooses on rests on it."""
    import scale

    from sklode import simulate
    from sklode.datasets import _lorenz96_x0
    from sklode.integrate import integrator_for
    from sklode.models import Lorenz96

    def best(f):
        return min(_cpu(f)[0] for _ in range(5)) * 1e3

    rows = []
    cases = [("Lorenz-96", d, Lorenz96(d), np.array([8.0]), _lorenz96_x0(d),
              np.linspace(0.0, 2.0, 101)) for d in (5, 10, 20, 40, 80, 160, 320, 1000)]
    for d in (10, 25, 50, 100, 200, 400, 1000):
        p = scale.problem("reaction_diffusion", d, 101)
        cases.append(("reaction-diffusion", d, p.model, p.theta, p.x0, p.t))
    for system, d, model, theta, x0, t in cases:
        model.native_solver()  # the C build, once per model, not timed here
        rows.append({"system": system, "states": d, "auto": integrator_for(model, "auto"),
                     "cvodes_ms": best(lambda: simulate(model, theta, x0, t,
                                                        integrator="CVODES")),
                     "lsoda_ms": best(lambda: simulate(model, theta, x0, t,
                                                       integrator="LSODA"))})
    return rows


def cold_start():
    def wall(args):
        start = time.perf_counter()
        subprocess.run(args, capture_output=True, check=True)
        return time.perf_counter() - start

    python = sys.executable
    return {"python_wall": min(wall([python, "-c", "pass"]) for _ in range(3)),
            "import_sklode_wall": min(wall([python, "-c", "import sklode"]) for _ in range(3)),
            "import_torch_sklearn_wall": min(wall([python, "-c", "import torch, sklearn"])
                                             for _ in range(3)),
            "help_wall": min(wall([python, "-m", "sklode.cli", "--help"]) for _ in range(3))}


def main(parts, problems=None):
    fits = ["seird", "seird_e3", "seird_e4a", "seird_e4b", "seird_e4c", *SYSTEMS]
    path = HERE / "results" / "forward.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    if "fields" in parts:
        results["fields"] = field_costs()
    if "predict" in parts:
        results["predict"] = predict_cost()
    if "cold" in parts:
        results["cold"] = cold_start()
    if "fits" in parts:
        results["fits"] = {name: {**fit_pair(name), "first_fit_cpu": first_fit(name, False),
                                  "first_fit_cold_cpu": first_fit(name, True)}
                           for name in fits}
    if "wide" in parts:
        results["wide"] = wide_solves()
    if "solves" in parts:
        import solves

        results["solves"] = solves.run(problems)
    lines = ["# Forward solves", "", "Written by `benchmarks/forward.py` (one process; the "
             "first fits in fresh subprocesses). CPU seconds single-threaded.", "",
             "## The field, per call (µs)", "",
             "| model | torch | compiled | hand-written numpy |", "|---|---|---|---|"]

    def us(v):
        return "–" if v is None else f"{v:.1f}"

    for key, r in results["fields"].items():
        lines.append(f"| {key} | {us(r['torch_us'])} | {us(r['compiled_us'])} | "
                     f"{us(r['numpy_us'])} |")
    lines += ["", "## AdjointODE against the hand-written loop (CPU s)", "",
              "AdjointODE with its default `integrator=\"auto\"` (here "
              f"{', '.join(sorted({r['default_integrator'] for r in results['fits'].values()}))}"
              ": SUNDIALS' CVODES built with the package, each model run as instructions in "
              "its precompiled solver; LSODA where it cannot be used) and with "
              "`integrator=\"LSODA\"`, warm (best of 3 in this process); the first fit of a "
              "fresh process (imports excluded, any compiler's CPU included) with the build "
              "cache `~/.cache/sklode/native` filled by an earlier process, and empty (nothing "
              "is compiled on the default route: with `SKLODE_CVODES_MODEL=c` the model is "
              "compiled to C in that fit).", "",
              "| system | AdjointODE warm | hand-written loop | warm / loop | first fit, "
              "fresh process | first fit, empty build cache | first fit (empty cache) minus "
              "loop | AdjointODE warm, LSODA | LSODA / loop | cost (AdjointODE, LSODA, "
              "loop) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, r in results["fits"].items():
        cold = r.get("first_fit_cold_cpu")
        lines.append(f"| {name} | {r['adjoint_cpu']:.3f} | {r['loop_cpu']:.3f} | "
                     f"{r['adjoint_cpu'] / r['loop_cpu']:.2f} | {r['first_fit_cpu']:.2f} | "
                     + (f"{cold:.2f} | {cold - r['loop_cpu']:+.2f} | " if cold else "– | – | ")
                     + f"{r['lsoda_cpu']:.3f} | {r['lsoda_cpu'] / r['loop_cpu']:.2f} | "
                     f"{r['adjoint_cost']:.4g}, {r['lsoda_cost']:.4g}, {r['loop_cost']:.4g} |")
    p, c = results["predict"], results["cold"]
    lines += ["", "## predict on 20,000 times (CPU s)", "",
              f"AdjointODE.predict {p['predict_cpu']:.3f}; solve_ivp (LSODA) with a numpy "
              f"field {p['solve_ivp_numpy_cpu']:.3f} (ratio "
              f"{p['predict_cpu'] / p['solve_ivp_numpy_cpu']:.2f}). predict integrates with "
              "odeint (LSODA stepping itself in Fortran); solve_ivp's LSODA, stepped from "
              f"Python, on the same compiled field takes {p['solve_ivp_compiled_cpu']:.3f}. "
              "AdjointODE's forward passes keep solve_ivp: its dense output is what the "
              "sensitivity and adjoint passes integrate on.", "",
              "## Cold start (wall s, best of 3)", "",
              f"`python -c pass` {c['python_wall']:.2f}; `import sklode` "
              f"{c['import_sklode_wall']:.2f}; `import torch, sklearn` "
              f"{c['import_torch_sklearn_wall']:.2f}; `sklode --help` {c['help_wall']:.2f}."]
    if results.get("wide"):
        lines += ["", "## Solves as the states grow (ms)", "",
                  "`simulate` at rtol 1e-8, best of 5: Lorenz-96 (F = 8, 101 times on [0, 2]) "
                  "and the reaction-diffusion system of `benchmarks/scale.py` (101 times on "
                  "[0, 3]); *auto* is what `integrator=\"auto\"` runs: CVODES up to "
                  "`AUTO_MAX_STATES` states, and above where `df/dx` is banded (the "
                  "compiled driver's LU then works on the band, with the states reordered "
                  "where that narrows it: reaction-diffusion is tridiagonal, Lorenz-96 a "
                  "ring, dense in its natural order and a band of 5 + 5 reordered).",
                  "", "| system | states | CVODES | LSODA | CVODES / LSODA | auto |",
                  "|---|---|---|---|---|---|"]
        for r in results["wide"]:
            lines.append(f"| {r['system']} | {r['states']} | {r['cvodes_ms']:.2f} | "
                         f"{r['lsoda_ms']:.2f} | {r['cvodes_ms'] / r['lsoda_ms']:.2f} | "
                         f"{r.get('auto', '–')} |")
    lines += solves_section(results.get("solves"))
    (HERE / "results" / "forward.md").write_text("\n".join(lines) + "\n")
    (HERE / "results" / "forward.json").write_text(json.dumps(results, indent=1) + "\n")
    print("\n".join(lines))


def solves_section(solves):
    """The table of the ``solves`` part (see ``benchmarks/solves.py``)."""
    if not solves:
        return []

    def ms(v):
        return "–" if v is None else f"{1e3 * v:.2f}"

    def ratio(a, b):
        return "–" if a is None or b is None else f"{a / b:.2f}"

    first = next((r["sklode"] for r in solves.values() if r.get("sklode", {}).get("sundials")),
                 {})
    lines = ["", "## Solves against AMICI (ms, one process; `benchmarks/solves.py`)", "",
             "Every simulation condition of the problem solved once (rtol 1e-8, atol 1e-10), "
             "best of at least 5 (as many as fit in 0.2 s, up to 50). sklode's PEtab "
             "experiments that pose the same initial value problem are solved once, as AMICI "
             "solves a condition once (the fits share those solves the same way). "
             "Sensitivities: the parameters the field reads (but the import's x0 shifts), the "
             "same columns for AMICI. sklode's CVODES path (SUNDIALS built with the package: "
             f"{first.get('sundials')}) by its two routes: *tape*, the model's instructions "
             "run by the solver compiled at install (no compiler at run time, the default), "
             "and *C*, the model written as C and compiled on first use; each 'ratio' is the "
             "column before it over AMICI's. One-time costs in CPU s: sklode's checks and "
             "numpy compilation, the tape's encoding, the C build (compiler included, cold "
             "cache), AMICI's import (code generation and C++ build). 'difference': largest "
             "difference between the CVODES (tape) and LSODA states, relative to the "
             "largest state.",
             "",
             "| problem | states | solves | AMICI | CVODES tape | ratio | CVODES C | ratio "
             "| LSODA | AMICI sens | tape sens | ratio | C sens | ratio | LSODA sens "
             "| odeint, numpy field | one-time: checks, tape, C build, AMICI import "
             "| difference |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, row in solves.items():
        s, a = row.get("sklode", {}), row.get("amici", {})
        if "error" in s:
            lines.append(f"| {name} | sklode failed: {s['error']} |")
            continue
        a_cpu, a_sens = a.get("cpu_s"), a.get("sens_cpu_s")
        tape, tape_sens = s.get("tape_cpu_s"), s.get("tape_sens_cpu_s")
        c, c_sens = s.get("c_cpu_s"), s.get("c_sens_cpu_s")
        lines.append(
            f"| {name} | {s['n_states']} | {s.get('n_solves', s['n_conditions'])} | "
            f"{ms(a_cpu)} | {ms(tape)} | {ratio(tape, a_cpu)} | {ms(c)} | "
            f"{ratio(c, a_cpu)} | {ms(s['lsoda_cpu_s'])} | {ms(a_sens)} | {ms(tape_sens)} | "
            f"{ratio(tape_sens, a_sens)} | {ms(c_sens)} | {ratio(c_sens, a_sens)} | "
            f"{ms(s['lsoda_sens_cpu_s'])} | {ms(s.get('odeint_numpy_cpu_s'))} | "
            f"{s['checks_cpu_s']:.2f}, {s.get('tape_build_cpu_s', float('nan')):.2f}, "
            f"{s.get('c_build_cpu_s', float('nan')):.2f}, "
            f"{a.get('import_cpu_s', float('nan')):.1f} | "
            f"{s.get('tape_state_difference', float('nan')):.1e} |")
        if "error" in a:
            lines.append(f"| {name}: AMICI | {a['error']} |")
    return lines


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", default="fields,fits,predict,cold,wide,solves")
    parser.add_argument("--problems", default=None,
                        help="comma-separated problems for the solves part (default: all)")
    args = parser.parse_args()
    main(args.parts.split(","), args.problems.split(",") if args.problems else None)
