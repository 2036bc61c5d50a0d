"""What the install's own CVODES costs and gives (#57): build time, size, and solves.

1. ``build``: ``build_tools/bundle_cvodes.py`` into a temporary folder, the source archive
   taken from the cache (its download, 1.25 MB, is reported apart): CPU seconds of the
   compiler (children's CPU from ``resource``), wall seconds, size on disk.
2. ``solves``: ``simulate`` of Lotka-Volterra (41 times) and Lorenz-96 (40 states, 201
   times), and one solve with forward sensitivities, with CVODES from each SUNDIALS found
   here (the package's build; the system's, ``SUNDIALS_DIR=/usr``, where Debian's
   ``libsundials-dev`` is installed) against LSODA in the same process: a subprocess per
   SUNDIALS, each with its own build cache (the model's C build excluded from the timings),
   CPU milliseconds, best of 5 rounds.

3. ``routes``: the two ways a model reaches the package's CVODES, each in a fresh process
   with an empty build cache: "tape" (the model's instructions run by the solver compiled at
   install, no compiler at run time) and "c" (the model written as C and compiled on first
   use). The first fit of a model never seen before (AdjointODE on an SIR epidemic, I and R
   observed; CPU of the process and its children, so the compiler's, and wall), then per
   solve and per solve with forward sensitivities (all parameters and x0) of Lotka-Volterra,
   Lorenz-96 (40 states) and that SIR, CPU ms, best of 5 rounds.

4. ``venv``: ``pip wheel .`` (wall), then a fresh venv with torch (from the local disk) and
   that wheel (wall), and the sizes: the wheel, sklode installed, the whole venv.

Writes ``benchmarks/results/install.md`` and ``.json``; CPU seconds single-threaded.

    python benchmarks/install.py [--parts build,solves,routes,venv]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "build_tools"))

# CPU ms of a call, the best of ``rounds`` means of ``repeat`` calls, after one untimed
# call (the model's build and checks); defined in both child programs below
_BEST = r"""
import time

def best(call, rounds=5, repeat=20):
    call()  # the model's build and checks: not timed
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(repeat):
            call()
        times.append((time.process_time() - start) / repeat)
    return 1e3 * min(times)
"""

_SOLVES = _BEST + r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
import sklode
from sklode.integrate import integrator_for
from sklode.models import Lorenz96, LotkaVolterra
from sklode.models._native import sundials_location
from sklode.datasets import get_problem


out = {"sundials": sundials_location()}
lv = LotkaVolterra(); t = np.linspace(0, 4, 41)
l96 = get_problem("lorenz96")
cases = {"lotka_volterra": (lv, [2, 1, 4, 1], [5, 3], t),
         "lorenz96_40": (l96.model, l96.theta, l96.x0, l96.t)}
for name, (model, theta, x0, times) in cases.items():
    row = {"auto": integrator_for(model, "auto")}
    for integrator in ("CVODES", "LSODA"):
        row[integrator] = best(lambda: sklode.simulate(model, theta, x0, times,
                                                       integrator=integrator),
                               repeat=20 if integrator == "CVODES" else 3)
    row["ratio"] = row["CVODES"] / row["LSODA"]
    out[name] = row
print(json.dumps(out))
"""


_ROUTES = _BEST + r"""
import json, os, resource, sys, time
import numpy as np, torch
torch.set_num_threads(1)

def cpu():
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime

from sklode import AdjointODE, simulate
from sklode.models import Lorenz96, LotkaVolterra, ODEModel
from sklode.datasets import get_problem

class SIR(ODEModel):  # head counts of a population of 1,000
    state_names = ("S", "I", "R"); param_names = ("beta", "gamma")
    default_theta = (0.5, 0.2)
    def rhs(self, t, x, theta):
        S, I = x[..., 0], x[..., 1]
        new = theta[0] * S * I / 1000.0
        return torch.stack([-new, new - theta[1] * I, theta[1] * I], dim=-1)

t = np.linspace(0, 40, 41)
clean = simulate(SIR(), [0.5, 0.2], [990, 10, 0], t, integrator="LSODA", rtol=1e-10,
                 atol=1e-12)
Y = clean[:, 1:] * (1 + 0.05 * np.random.default_rng(3).standard_normal((41, 2)))
start, wall = cpu(), time.perf_counter()
est = AdjointODE(SIR(), theta0=(0.4, 0.25), observed=["I", "R"], x0=[990, 10, 0],
                 estimate_x0=False, t0=0.0).fit(t, Y)
out = {"first_fit_cpu_s": cpu() - start, "first_fit_wall_s": time.perf_counter() - wall,
       "route": est.model.native_solver().route}


l96 = get_problem("lorenz96")
cases = {"lotka_volterra": (LotkaVolterra(), [2, 1, 4, 1], [5, 3], np.linspace(0, 4, 41)),
         "lorenz96_40": (l96.model, l96.theta, l96.x0, l96.t),
         "sir": (SIR(), [0.5, 0.2], [990.0, 10.0, 0.0], t)}
for name, (model, theta, x0, times) in cases.items():
    solver = model.native_solver()
    theta, x0 = np.asarray(theta, float), np.asarray(x0, float)
    p = np.arange(model.n_params)
    out[name] = {
        "solve_ms": best(lambda: solver(times[0], x0, theta, times[1:], rtol=1e-8, atol=1e-10)),
        "sens_ms": best(lambda: solver(times[0], x0, theta, times[1:], rtol=1e-8, atol=1e-10,
                                       sens_x0=True, sens_params=p), repeat=5)}
print(json.dumps(out))
"""


def routes():
    rows = {}
    for route in ("tape", "c"):
        with tempfile.TemporaryDirectory() as cache:
            run = subprocess.run([sys.executable, "-c", _ROUTES], capture_output=True,
                                 text=True, check=True,
                                 env={**os.environ, "SKLODE_CVODES_MODEL": route,
                                      "SKLODE_CACHE_DIR": cache})
        rows[route] = json.loads(run.stdout.strip().splitlines()[-1])
    return rows


def _size(folder):
    return sum(p.stat().st_size for p in Path(folder).rglob("*") if p.is_file()
               and not p.is_symlink()) / 1e6


def venv():
    with tempfile.TemporaryDirectory() as tmp:
        clone = Path(tmp) / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                        str(Path(tmp) / "wheels"), str(clone)], check=True, capture_output=True)
        wheel_wall = time.perf_counter() - start
        wheel = next((Path(tmp) / "wheels").glob("sklode-*.whl"))
        env = Path(tmp) / "venv"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "venv", str(env)], check=True)
        subprocess.run([str(env / "bin" / "python"), "-m", "pip", "install", "--quiet",
                        "torch==2.13.0", str(wheel)], check=True, capture_output=True)
        install_wall = time.perf_counter() - start
        site = next(env.glob("lib/python*/site-packages"))
        return {"wheel": wheel.name, "wheel_mb": wheel.stat().st_size / 1e6,
                "wheel_wall_s": wheel_wall, "install_wall_s": install_wall,
                "sklode_mb": _size(site / "sklode"), "venv_mb": _size(env),
                "torch_mb": _size(site / "torch")}


def build():
    from bundle_cvodes import ARCHIVE, fetch_archive

    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sklode"
    start = time.perf_counter()
    fetch_archive(cache)
    download = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        # in a child, so that the compiler's CPU is counted whole
        subprocess.run([sys.executable, str(ROOT / "build_tools" / "bundle_cvodes.py"),
                        str(Path(tmp) / "b")], check=True, capture_output=True)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
        size = sum(p.stat().st_size for p in (Path(tmp) / "b").rglob("*") if p.is_file())
    return {"archive": ARCHIVE, "download_wall_s": download, "build_cpu_s": cpu,
            "build_wall_s": wall, "size_mb": size / 1e6}


def solves():
    from sklode.models._native import BUNDLED

    rows = {}
    candidates = {"package (7.1.1, -O2)": {}}
    if Path("/usr/include/cvodes/cvodes.h").is_file():
        candidates["system (/usr)"] = {"SUNDIALS_DIR": "/usr"}
    for label, env in candidates.items():
        if not env and not (BUNDLED / "VERSION").is_file():
            continue
        with tempfile.TemporaryDirectory() as cache:
            run = subprocess.run([sys.executable, "-c", _SOLVES], capture_output=True,
                                 text=True, check=True,
                                 env={**os.environ, **env, "SKLODE_CACHE_DIR": cache})
        rows[label] = json.loads(run.stdout.strip().splitlines()[-1])
    return rows


def to_markdown(results):
    lines = ["# The install's own CVODES (`benchmarks/install.py`)", "",
             "Generated; CPU single-threaded, on the project's two-core machine.", ""]
    b = results.get("build")
    if b:
        lines += ["## Building it at install", "",
                  f"SUNDIALS from `{b['archive']}` (fetched in {b['download_wall_s']:.1f} s "
                  "wall: 0.0 where the archive was in the cache; 1.25 MB from PyPI "
                  "otherwise): the build's CPU (a Python process and the C compiler) "
                  f"{b['build_cpu_s']:.1f} s, {b['build_wall_s']:.1f} s wall, "
                  f"{b['size_mb']:.1f} MB in the package.", ""]
    s = results.get("solves")
    if s:
        lines += ["## Solves: CVODES against LSODA in the same process", "",
                  "| SUNDIALS | problem | auto | CVODES ms | LSODA ms | ratio |",
                  "|---|---|---|---|---|---|"]
        for label, row in s.items():
            for name in ("lotka_volterra", "lorenz96_40"):
                r = row[name]
                lines.append(f"| {label} | {name} | {r['auto']} | {r['CVODES']:.3f} | "
                             f"{r['LSODA']:.3f} | {r['ratio']:.3f} |")
        lines.append("")
    v = results.get("venv")
    if v:
        lines += ["## A wheel, and a fresh venv", "",
                  f"`pip wheel .` from a clean clone: {v['wheel_wall_s']:.0f} s wall (SUNDIALS "
                  f"and the solver compiled), `{v['wheel']}`, {v['wheel_mb']:.1f} MB. A fresh "
                  f"venv with torch 2.13.0 (CPU, from the local disk) and the wheel: "
                  f"{v['install_wall_s']:.0f} s wall; sklode installed {v['sklode_mb']:.1f} MB "
                  f"of a {v['venv_mb']:.0f} MB venv (torch {v['torch_mb']:.0f} MB).", ""]
    r = results.get("routes")
    if r:
        lines += ["## Two routes to CVODES: the package's solver, or C per model", "",
                  "Each route in a fresh process with an empty build cache. *tape*: the "
                  "model's instructions run by the solver compiled at install (no compiler "
                  "at run time; the default). *C*: the model written as C and compiled on "
                  "first use (`SKLODE_CVODES_MODEL=c`). The first fit of a model never seen "
                  "before: AdjointODE on an SIR epidemic (I and R observed, 5 % relative "
                  "noise, 41 times; counts of 1,000), CPU of the process and its children (the compiler's "
                  "included) and wall, imports excluded. Then CPU ms per solve (rtol 1e-8) and "
                  "per solve with forward sensitivities for every parameter and x0, best of 5 "
                  "rounds. Both routes give the same states and sensitivities to the bit "
                  "(tests/test_native.py).", "",
                  "| | tape | C | C / tape |", "|---|---|---|---|"]
        a, b = r["tape"], r["c"]
        lines.append(f"| first fit, CPU s | {a['first_fit_cpu_s']:.2f} | "
                     f"{b['first_fit_cpu_s']:.2f} | {b['first_fit_cpu_s'] / a['first_fit_cpu_s']:.2f} |")
        lines.append(f"| first fit, wall s | {a['first_fit_wall_s']:.2f} | "
                     f"{b['first_fit_wall_s']:.2f} | {b['first_fit_wall_s'] / a['first_fit_wall_s']:.2f} |")
        for name in ("lotka_volterra", "sir", "lorenz96_40"):
            for key, label in (("solve_ms", "solve"), ("sens_ms", "solve with sensitivities")):
                x, y = a[name][key], b[name][key]
                lines.append(f"| {name}: {label}, ms | {x:.3f} | {y:.3f} | {y / x:.2f} |")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="build,solves,routes,venv")
    args = parser.parse_args(argv)
    path = RESULTS / "install.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    parts = args.parts.split(",")
    if "build" in parts:
        results["build"] = build()
    if "solves" in parts:
        results["solves"] = solves()
    if "routes" in parts:
        results["routes"] = routes()
    if "venv" in parts:
        results["venv"] = venv()
    path.write_text(json.dumps(results, indent=1))
    (RESULTS / "install.md").write_text(to_markdown(results))
    print(to_markdown(results))


if __name__ == "__main__":
    main()
