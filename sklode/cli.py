"""The ``sklode`` console command.

* ``sklode compare --problem rossler --methods bcdprox,wendy,adjoint --trials 10 --n-jobs 2``
  fits several estimators over seeded noisy trials of named problems, in parallel (locally or
  on a Dask cluster with ``--backend dask --scheduler ADDRESS``), and prints a summary table
  (``--output FILE.csv`` keeps the per-trial records, ``--plot FILE.png`` draws them).
* ``sklode fit data.csv --model LotkaVolterra --method adjoint`` fits a CSV of a time column
  and observed-state columns (named after the model's states).
* ``sklode demo`` fits one noisy trajectory with every estimator.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings

import numpy as np

from ._names import METHOD_NAMES, PROBLEM_NAMES

# Everything else is imported where it is used: ``sklode --help`` and argument errors answer
# without importing torch, scikit-learn or the estimators.


def _row(name, theta, truth, cpu, pred_err, note=""):
    values = " ".join(f"{v:8.4f}" for v in theta)
    err = np.max(np.abs(np.asarray(theta) - truth))
    return f"{name:<22} {values}   {err:9.4f} {pred_err:10.4f} {cpu:8.3f}  {note}"


def demo(problem_name="lotka_volterra", noise=None, seed=0, out=None):
    """Fit one noisy trajectory with every estimator; print a table. Returns the rows."""
    from .compare import _warm_up
    from .datasets import get_problem, make_trajectory
    from .metrics import prediction_error
    from .registry import METHODS

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
    _warm_up(problem.model, problem.x0, theta0)
    for name, method in METHODS.items():
        est = method.make(problem, theta0)  # as compare poses it
        reason = method.why_not(problem)
        if reason:
            print(f"{name:<22} skipped: {reason}", file=out)
            continue
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
    print("\npred err = ||X_true - X_hat||_F over all states on the data grid.", file=out)
    return rows


def _plot(records, path):
    """Box plots of the per-trial errors and CPU times by method, titled with what was
    compared (matplotlib extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'sklode[plot]'") from None
    from .plotting import plot_comparison

    axes = plot_comparison(records)
    figure = axes[0].figure
    figure.savefig(path, dpi=120)
    plt.close(figure)


def compare_command(args, out=None):
    """Run ``sklode compare``; returns the per-trial records (list of dict)."""
    from contextlib import nullcontext

    from joblib import parallel_config

    from .compare import compare, format_summary, summarize

    out = sys.stdout if out is None else out
    problems = [p for spec in args.problem for p in spec.split(",")]
    methods = args.methods.split(",")
    client = None
    if args.backend == "dask":
        try:
            from dask.distributed import Client
        except ImportError:
            raise SystemExit("--backend dask needs dask.distributed: pip install "
                             "'sklode[dask]'") from None
        client = Client(args.scheduler) if args.scheduler else Client(processes=False)
    context = parallel_config(backend=args.backend) if args.backend else nullcontext()
    try:
        with context:
            records = compare(problems, methods, trials=args.trials, noise=args.noise,
                              theta0_noise=args.theta0_noise, random_state=args.seed,
                              n_jobs=args.n_jobs, progress=not args.no_progress,
                              as_frame=False)
    finally:
        if client is not None:
            client.close()
    print(format_summary(summarize(records, blowup=args.blowup)), file=out)
    if args.output:
        _write_records(records, args.output)
        print(f"per-trial records written to {args.output}", file=out)
    if args.plot:
        _plot(records, args.plot)
        print(f"plot written to {args.plot}", file=out)
    return records


def _write_records(records, path):
    import json

    if str(path).endswith(".json"):
        with open(path, "w") as fh:
            json.dump(records, fh, indent=1, default=str)
        return
    import csv

    keys = list(dict.fromkeys(k for r in records for k in r))
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(records)


def _model_by_name(name):
    from . import models
    from .datasets import get_problem, list_problems

    if name in list_problems():
        return get_problem(name).model
    cls = getattr(models, name, None)
    if isinstance(cls, type) and issubclass(cls, models.ODEModel) and cls is not models.ODEModel:
        return cls()
    zoo = [n for n in models.__all__ if n not in ("ODEModel", "FunctionModel", "check_model")]
    raise ValueError(f"Unknown model {name!r}: use a zoo class ({', '.join(zoo)}) or a "
                     f"problem name ({', '.join(list_problems())}).")


def _number(text, where):
    """A float from a CSV cell or an option; empty or 'nan' is a missing value."""
    text = text.strip()
    try:
        return float(text) if text else float("nan")
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number (use an empty cell or nan for a "
                         "missing value).") from None


def fit_command(args, out=None):
    """Run ``sklode fit``; returns the fitted estimator, with ``cli_problems_``: the
    convergence and poor-fit warnings of the fit (``main`` then exits with status 1)."""
    import csv

    from .datasets import Problem
    from .exceptions import ConvergenceWarning, PoorFitWarning
    from .registry import get_method

    out = sys.stdout if out is None else out
    model = _model_by_name(args.model)
    with open(args.csv, newline="") as fh:
        rows = [row for row in csv.reader(fh) if row]
    if not rows:
        raise ValueError(f"{args.csv} is empty: it needs a header row ({args.time_column} and "
                         "state names) and one row per time.")
    header, body = rows[0], rows[1:]
    if args.time_column not in header:
        raise ValueError(f"{args.csv} has no time column {args.time_column!r} "
                         f"(columns: {header}); use --time-column.")
    columns = [c for c in header if c != args.time_column]
    unknown = [c for c in columns if c not in model.state_names]
    if unknown:
        raise ValueError(f"Columns {unknown} are not states of {model!r} "
                         f"{model.state_names}; name each data column after its state.")
    short = [k + 2 for k, row in enumerate(body) if len(row) != len(header)]
    if short:
        raise ValueError(f"{args.csv} row {short[0]} has a different number of cells than "
                         f"its header {header} ({len(short)} such row(s)); leave a cell "
                         "empty for a missing value.")
    values = np.array([[_number(v, f"{args.csv} row {k + 2}, column {header[j]!r}")
                        for j, v in enumerate(row)] for k, row in enumerate(body)],
                      dtype=np.float64).reshape(len(body), len(header))
    t = values[:, header.index(args.time_column)]
    Y = values[:, [header.index(c) for c in columns]]
    observed = tuple(model.state_names.index(c) for c in columns)
    theta0 = (np.array([_number(v, "--theta0") for v in args.theta0.split(",")])
              if args.theta0 else model.theta_guess())
    x0 = np.array([_number(v, "--x0") for v in args.x0.split(",")]) if args.x0 else None
    problem = Problem("user_data", model, None, None, np.sort(t), float(np.min(t)), observed,
                      0.0, "absolute", theta_init=theta0, x0_init=x0)
    max_iter = getattr(args, "max_iter", None)  # absent from namespaces built by hand
    overrides = {} if max_iter is None else {"max_iter": max_iter}
    est = get_method(args.method).make(problem, **overrides)
    start = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(t, Y)
    cpu = time.process_time() - start
    est.cli_problems_ = [f"{w.category.__name__}: {w.message}" for w in caught
                         if issubclass(w.category, (ConvergenceWarning, PoorFitWarning))]
    for problem_text in est.cli_problems_:
        print(f"WARNING {problem_text}", file=sys.stderr)
    stderr = getattr(est, "theta_stderr_", None)
    print(f"{args.method} on {args.csv}: {t.size} times, observed {columns}, model {model!r}",
          file=out)
    for i, name in enumerate(model.param_names):
        se = f" ± {stderr[i]:.4g} (1 s.e.)" if stderr is not None else ""
        print(f"  {name:>10} = {est.theta_[i]:.6g}{se}", file=out)
    print(f"  x0 at t0={est.t0_:g}: {np.round(est.x0_, 6).tolist()}", file=out)
    print(f"  converged: {getattr(est, 'converged_', True)}, iterations: {est.n_iter_}, "
          f"R^2: {est.score(t, Y):.4f}, CPU s: {cpu:.3f}", file=out)
    return est


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sklode", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_cmp = sub.add_parser("compare", help="compare estimators over seeded noisy trials")
    p_cmp.add_argument("--problem", action="append", required=True,
                       help=f"problem name(s), comma-separated or repeated: {list(PROBLEM_NAMES)}")
    p_cmp.add_argument("--methods", default=",".join(METHOD_NAMES))
    p_cmp.add_argument("--trials", type=int, default=10)
    p_cmp.add_argument("--n-jobs", type=int, default=None)
    p_cmp.add_argument("--noise", type=float, default=None,
                       help="noise standard deviation in each problem's convention")
    p_cmp.add_argument("--theta0-noise", type=float, default=None,
                       help="start trial k at theta_true + THETA0_NOISE * N(0, I)")
    p_cmp.add_argument("--seed", type=int, default=0, help="trial k uses noise seed SEED + k")
    p_cmp.add_argument("--blowup", type=float, default=100.0,
                       help="prediction error counted as a diverged fit (seed 000: 100)")
    p_cmp.add_argument("--backend", default=None, help="joblib backend: loky, threading, dask")
    p_cmp.add_argument("--scheduler", default=None,
                       help="Dask scheduler address (with --backend dask; default: a local "
                            "in-process cluster)")
    p_cmp.add_argument("--output", default=None, help="write per-trial records (.csv/.json)")
    p_cmp.add_argument("--plot", default=None, help="write box plots (.png; needs matplotlib)")
    p_cmp.add_argument("--no-progress", action="store_true", help="no progress bar")
    p_fit = sub.add_parser("fit", help="fit a CSV of t and observed-state columns")
    p_fit.add_argument("csv")
    p_fit.add_argument("--model", required=True, help="zoo class (e.g. LotkaVolterra) or "
                       "problem name")
    p_fit.add_argument("--method", default="adjoint", choices=list(METHOD_NAMES))
    p_fit.add_argument("--time-column", default="t")
    p_fit.add_argument("--theta0", default=None, help="comma-separated initial parameters")
    p_fit.add_argument("--x0", default=None, help="comma-separated initial state guess")
    p_fit.add_argument("--max-iter", type=int, default=None,
                       help="iterations of the method's main loop (default: its own)")
    p_demo = sub.add_parser("demo", help="fit a built-in noisy problem with every estimator")
    p_demo.add_argument("--problem", default="lotka_volterra", choices=list(PROBLEM_NAMES))
    p_demo.add_argument("--noise", type=float, default=None,
                        help="noise level (a standard deviation, in the problem's convention)")
    p_demo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from .exceptions import SklodeError

    try:
        if args.command == "demo":
            demo(args.problem, args.noise, args.seed)
        elif args.command == "compare":
            compare_command(args)
        elif args.command == "fit":
            if fit_command(args).cli_problems_:
                return 1  # a fit that did not converge or fits poorly is not a success
    except (ValueError, TypeError, SklodeError, OSError) as exc:
        # The estimators' messages name the argument, the value and the way out: a
        # traceback would only bury them. Exit status 2, as argparse uses for bad usage.
        print(f"sklode {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
