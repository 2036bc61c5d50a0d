"""The ``sklode`` console command.

``sklode demo`` fits the built-in noisy Lotka-Volterra problem (seed 000's settings) with
every sklode estimator and with the hand-written scipy baseline, and prints estimated versus
true parameters and CPU seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

from .baselines import NUMPY_RHS, least_squares_fit
from .datasets import get_problem, list_problems, make_trajectory
from .estimators import available_estimators
from .integrate import simulate
from .metrics import prediction_error


def _row(name, theta, truth, cpu, pred_err, note=""):
    values = " ".join(f"{v:8.4f}" for v in theta)
    err = np.max(np.abs(np.asarray(theta) - truth))
    return f"{name:<22} {values}   {err:9.4f} {pred_err:10.4f} {cpu:8.3f}  {note}"


def demo(problem_name="lotka_volterra", noise=None, seed=0, out=None):
    """Fit one noisy trajectory with every estimator; print a table. Returns the rows."""
    out = sys.stdout if out is None else out
    problem = get_problem(problem_name)
    data = make_trajectory(problem_name, noise=noise, random_state=seed)
    truth = problem.theta
    theta0 = problem.theta_init if problem.theta_init is not None else problem.model.theta_guess()
    noise_used = problem.noise if noise is None else noise
    print(f"problem: {problem_name}  model: {problem.model!r}  source: {problem.source}", file=out)
    print(f"data: {data.t.size} times in [{data.t[0]:g}, {data.t[-1]:g}], observed "
          f"{[problem.model.state_names[i] for i in problem.observed]}, noise std "
          f"{noise_used:g} ({problem.noise_kind}), seed {seed}", file=out)
    print(f"initial guess theta0 = {np.round(theta0, 4).tolist()}", file=out)
    header = " ".join(f"{n:>8}" for n in problem.model.param_names)
    print(f"\n{'method':<22} {header}   {'max|err|':>9} {'pred err':>10} {'CPU s':>8}", file=out)
    print(_row("truth", truth, truth, 0.0, 0.0), file=out)
    rows = []
    # Warm up torch's autodiff once (a one-off ~1 s of lazy imports) so that the CPU
    # column measures the fits, not the first call.
    problem.model.jac_x(data.t[:2], data.Y[:2], theta0)
    problem.model.jac_theta(data.t[:2], data.Y[:2], theta0)
    for name, make in available_estimators().items():
        est = make(problem.model, theta0)
        start = time.process_time()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est.fit(data.t, data.Y)
        cpu = time.process_time() - start
        X_hat = est.simulate(data.t)
        note = "not converged" if any("converge" in str(w.message) for w in caught) else ""
        rows.append((name, est.theta_, cpu))
        print(_row(name, est.theta_, truth, cpu,
                   prediction_error(data.X, X_hat), note), file=out)
    start = time.process_time()
    base = least_squares_fit(problem.model, data.t, data.Y, theta0, data.Y[0], fun=NUMPY_RHS.get(problem_name),
                             t0=problem.t0, observed=problem.observed)
    cpu = time.process_time() - start
    X_base = simulate(problem.model, base.theta, base.x0, data.t, t0=problem.t0)
    rows.append(("least_squares", base.theta, cpu))
    print(_row("scipy least_squares", base.theta, truth, cpu, prediction_error(data.X, X_base),
               "baseline (single shooting)"), file=out)
    if not available_estimators():
        print("\n(no sklode estimator is available yet; only the baseline ran)", file=out)
    print("\npred err = ||X_true - X_hat||_F over all states on the data grid.", file=out)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sklode", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_demo = sub.add_parser("demo", help="fit a built-in noisy problem with every estimator")
    p_demo.add_argument("--problem", default="lotka_volterra", choices=list_problems())
    p_demo.add_argument("--noise", type=float, default=None,
                        help="noise level (a standard deviation, in the problem's convention)")
    p_demo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "demo":
        demo(args.problem, args.noise, args.seed)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
