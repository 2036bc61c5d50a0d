"""simulate with the model checked once against checked on every call (#27 item 1).

The old behaviour is reproduced in the same process by dropping the model's record of
``check_model`` before each call. ``simulate`` on 41 output times, warm, CPU milliseconds
per call (best of three batches of 50), one thread. Writes
``benchmarks/results/check_once.md``.

    python benchmarks/check_once.py
"""

from __future__ import annotations

import os
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

RESULTS = Path(__file__).parent / "results"


def per_call(model, theta, x0, t, forget):
    from sklode import simulate
    from sklode.models._derived import derived

    best = np.inf
    for _ in range(3):
        start = time.process_time()
        for _ in range(50):
            if forget:
                derived(model).checked_signature = None
            simulate(model, theta, x0, t, t0=t[0])
        best = min(best, (time.process_time() - start) / 50)
    return 1e3 * best


def main():
    from sklode.datasets import get_problem
    from sklode.models import LotkaVolterra, TwoCompartmentIV

    seird = get_problem("seird")
    cases = [("LotkaVolterra", LotkaVolterra(), [2, 1, 4, 1], [5, 3], np.linspace(0, 4, 41)),
             ("SEIRD", seird.model, seird.theta, seird.x0, np.linspace(40, 80, 41)),
             ("TwoCompartmentIV (observe, noise_sd)", TwoCompartmentIV(),
              [0.5, 0.5, 0.5, 1.0, 0.1, 0.1], [1.0, 0.0], np.linspace(0, 8, 41))]
    lines = ["# simulate: the model checked once, or on every call", "",
             "`python benchmarks/check_once.py`; CPU ms per `simulate` call on 41 times, warm, "
             "one thread, best of three batches of 50, both in the same process.", "",
             "| model | checked every call (before) | checked once (now) | ratio |",
             "|---|---|---|---|"]
    for name, model, theta, x0, t in cases:
        per_call(model, theta, x0, t, False)  # warm-up: compile, first check
        every = per_call(model, theta, x0, t, True)
        once = per_call(model, theta, x0, t, False)
        lines.append(f"| {name} | {every:.2f} | {once:.2f} | {every / once:.1f}x |")
    (RESULTS / "check_once.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
