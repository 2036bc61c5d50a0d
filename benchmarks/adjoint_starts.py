"""Seed 000's Rössler initialisation protocol for AdjointODE, by start strategy.

Noise variance 0.5; theta0 = theta_true + N(0, sigma_theta^2 I) for sigma_theta^2 in
{1, 5, 10, 20}, 10 draws each (the starts of ``sklode compare --theta0-noise``). Strategies:
theta0 alone, ``init="bcdprox"``, ``init="wendy"``. A fit "started" when it did not raise;
it is "at the optimum" when it passed the adequacy check (``fit_adequate_``) and its cost
is within 1e-6 (relative) of the lowest cost any strategy reached on that trial. Writes
``benchmarks/results/adjoint_starts.md``; CPU seconds single-threaded, per fit, the other
method's fit included.

    python benchmarks/adjoint_starts.py [--trials 10]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

LEVELS = (1.0, 5.0, 10.0, 20.0)
STRATEGIES = {"theta0 alone": None, "init='bcdprox'": "bcdprox", "init='wendy'": "wendy"}


def run(trials):
    """``{(level, strategy): (started, at_optimum, cpu_per_fit)}``."""
    from sklode import AdjointODE
    from sklode.datasets import get_problem, make_trajectory
    from sklode.exceptions import SklodeError

    problem = get_problem("rossler")
    out = {}
    for level in LEVELS:
        counts = {name: [0, 0, 0.0] for name in STRATEGIES}
        for trial in range(trials):
            rng = np.random.default_rng([0, trial, 7])
            theta0 = problem.theta + np.sqrt(level) * rng.standard_normal(problem.theta.size)
            data = make_trajectory("rossler", noise=np.sqrt(0.5), random_state=trial)
            costs = {}
            for name, init in STRATEGIES.items():
                start = time.process_time()
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        est = AdjointODE(problem.model, theta0=theta0, init=init).fit(data.t,
                                                                                      data.Y)
                except SklodeError:
                    counts[name][2] += time.process_time() - start
                    continue
                counts[name][2] += time.process_time() - start
                counts[name][0] += 1
                if est.fit_adequate_:
                    costs[name] = est.loss_history_[-1]
            best = min(costs.values(), default=np.inf)
            for name, cost in costs.items():  # the lowest cost any strategy reached
                counts[name][1] += int(cost <= best * (1 + 1e-6))
        for name, (started, optimum, cpu) in counts.items():
            out[level, name] = (started, optimum, cpu / trials)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" /
                                                 "adjoint_starts.md"))
    args = parser.parse_args(argv)
    results = run(args.trials)
    lines = ["# AdjointODE on the Rössler initialisation protocol, by start strategy", "",
             "Written by `benchmarks/adjoint_starts.py`. Noise variance 0.5, "
             f"{args.trials} draws of theta0 per level; at the optimum = adequate fit "
             "(`fit_adequate_`) at the lowest cost any strategy reached on the trial (relative "
             "1e-6). CPU "
             "seconds single-threaded per fit, the initialising fit included.", "",
             "| σθ² | strategy | fits started | fits at the optimum | CPU s per fit |",
             "|---|---|---|---|---|"]
    for (level, name), (started, optimum, cpu) in results.items():
        lines.append(f"| {level:g} | {name} | {started}/{args.trials} | {optimum}/{args.trials} "
                     f"| {cpu:.2f} |")
    totals = {name: [0, 0] for name in STRATEGIES}
    for (level, name), (started, optimum, _) in results.items():
        totals[name][0] += started
        totals[name][1] += optimum
    n = args.trials * len(LEVELS)
    lines += ["", "Over every level: " + "; ".join(
        f"{name} {s}/{n} started, {o}/{n} at the optimum" for name, (s, o) in totals.items())
        + "."]
    Path(args.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
