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

Writes ``benchmarks/results/install.md`` and ``.json``; CPU seconds single-threaded.

    python benchmarks/install.py [--parts build,solves]
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

_SOLVES = r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
import sklode
from sklode.integrate import integrator_for
from sklode.models import Lorenz96, LotkaVolterra
from sklode.models._native import sundials_location
from sklode.datasets import get_problem

def best(call, rounds=5, repeat=20):
    call()  # the model's build and checks: not timed
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(repeat):
            call()
        times.append((time.process_time() - start) / repeat)
    return 1e3 * min(times)

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
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="build,solves")
    args = parser.parse_args(argv)
    path = RESULTS / "install.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    parts = args.parts.split(",")
    if "build" in parts:
        results["build"] = build()
    if "solves" in parts:
        results["solves"] = solves()
    path.write_text(json.dumps(results, indent=1))
    (RESULTS / "install.md").write_text(to_markdown(results))
    print(to_markdown(results))


if __name__ == "__main__":
    main()
