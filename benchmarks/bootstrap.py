"""What the parametric bootstrap (``n_boot``) costs, and what ``n_jobs`` buys back (#28).

One fit of BCDProxODE and of WENDyODE on Rossler (3 % noise, 401 samples of every state; the
coverage benchmark's problem) with ``n_boot=0`` (the baseline, run in the same process) and
``n_boot=20`` at ``n_jobs=1`` and ``n_jobs=2`` (joblib's process workers): wall seconds, the
parent's CPU seconds, and the ratio to the baseline's wall time. The bootstrap's result does
not depend on ``n_jobs`` (tested). Writes ``benchmarks/results/bootstrap.md``.

    python benchmarks/bootstrap.py
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).parent))

RESULTS = Path(__file__).parent / "results"


def main():
    import torch

    import sklode
    from sklode.datasets import make_trajectory
    from wendy_calibration import _systems

    torch.set_num_threads(1)
    p = _systems()["rossler"]
    data = make_trajectory(p, noise=0.03, noise_kind="relative_rms", random_state=0)
    rows = ["# The bootstrap's cost", "",
            "Written by `benchmarks/bootstrap.py` (its docstring has the protocol): Rössler, "
            "3 % noise, 401 samples; one fit each; wall and parent-CPU seconds, ratio to the "
            "same estimator's `n_boot=0` wall time in this process. Two cores.", "",
            "| estimator | n_boot | n_jobs | wall s | CPU s (parent) | × n_boot=0 |",
            "|---|---|---|---|---|---|"]
    for name in ("BCDProxODE", "WENDyODE"):
        base = None
        for n_boot, n_jobs in ((0, 1), (20, 1), (20, 2)):
            est = getattr(sklode, name)(p.model, theta0=1.3 * p.theta, n_boot=n_boot,
                                        random_state=0, n_jobs=n_jobs)
            wall, cpu = time.perf_counter(), time.process_time()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(data.t, data.Y)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            base = wall if base is None else base
            rows.append(f"| {name} | {n_boot} | {n_jobs} | {wall:.1f} | {cpu:.1f} | "
                        f"{wall / base:.1f} |")
            print(rows[-1], flush=True)
    (RESULTS / "bootstrap.md").write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
