"""The ``sklode`` console command.

* ``sklode compare --problem rossler --methods bcdprox,wendy,adjoint --trials 10 --n-jobs 2``
  fits several estimators over seeded noisy trials of named problems, in parallel (locally or
  on a Dask cluster with ``--backend dask --scheduler ADDRESS``), and prints a summary table
  (``--output FILE.csv`` keeps the per-trial records, ``--plot FILE.png`` draws them).
* ``sklode fit data.csv --model LotkaVolterra --method adjoint`` fits a CSV of a time column
  and observed-state columns (named after the model's states, or mapped with
  ``--column STATE=COLUMN`` and ``--column t=COLUMN``). ``--model`` also takes your own model
  as ``module:Class`` or ``path/to/file.py:Class``; ``--theta0``, ``--x0``, ``--t0``,
  ``--estimate-x0``, ``--observed``, ``--bounds``, ``--positive``, ``--fixed`` and
  ``--set SETTING=VALUE`` reach the estimator; it prints ``name = value ± stderr`` and writes
  the fit (``--output fit.json|fit.csv``, ``--plot fit.png``).
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


def _save_figure(draw, path):
    """Save the figure ``draw()`` draws (it returns its axes) to ``path`` (matplotlib extra)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("--plot needs matplotlib: pip install 'sklode[plot]'") from None
    figure = np.ravel(draw())[0].figure
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _plot(records, path):
    """Box plots of the per-trial errors and CPU times by method, titled with what was
    compared."""
    from .plotting import plot_comparison

    _save_figure(lambda: plot_comparison(records), path)


def _has_tqdm():
    """Whether the progress extra is installed: the command's bar is a convenience, and a
    core install runs without it and without a message about it."""
    from importlib.util import find_spec

    return find_spec("tqdm") is not None


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
        if args.scheduler:
            client = Client(args.scheduler)
        else:
            import dask

            # This process is the campaign: its own cluster keeps no log of recent messages
            # (Dask keeps the last 1,000 sent to each worker, tasks included, a few MiB per
            # 1,000 fits until they fill; benchmarks/results/campaign.md)
            dask.config.set({"distributed.admin.low-level-log-length": 0})
            client = Client(processes=False)
    context = parallel_config(backend=args.backend) if args.backend else nullcontext()
    store = getattr(args, "store", None)
    if store is not None:
        from ._store import Store, store_path

        with Store(store) as existing:
            n_stored = len(existing)
        if n_stored and not getattr(args, "resume", False):
            raise ValueError(f"The store {store_path(store)} already holds {n_stored} fit(s): "
                             "pass --resume to continue that campaign (fits already stored "
                             "are not run again), or give a new --store path.")
    elif getattr(args, "resume", False):
        raise ValueError("--resume continues the campaign of a --store: give --store PATH.")
    try:
        with context:
            records = compare(problems, methods, trials=args.trials, noise=args.noise,
                              theta0_noise=args.theta0_noise, random_state=args.seed,
                              n_jobs=args.n_jobs, progress=not args.no_progress
                              and _has_tqdm(),
                              as_frame=False, store=store)
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
    """The model ``--model`` names: a zoo class, a problem name, ``module:Class`` (importable
    from the working directory or PYTHONPATH) or ``path/to/file.py:Class``; a class is
    instantiated without arguments, an instance or a factory's result is used as it is."""
    from . import models
    from .datasets import get_problem, list_problems

    if name in list_problems():
        return get_problem(name).model
    if ":" in name:
        return _user_model(*name.rsplit(":", 1))
    cls = getattr(models, name, None)
    if isinstance(cls, type) and issubclass(cls, models.ODEModel) and cls is not models.ODEModel:
        return cls()
    zoo = [n for n in models.__all__ if n not in ("ODEModel", "FunctionModel", "check_model")]
    raise ValueError(f"Unknown model {name!r}: use a zoo class ({', '.join(zoo)}), a "
                     f"problem name ({', '.join(list_problems())}), module:Class or "
                     "path/to/file.py:Class.")


def _user_model(where, attribute):
    import importlib
    import importlib.util
    import os

    from .models import ODEModel, check_model

    if where.endswith(".py"):
        if not os.path.isfile(where):
            raise ValueError(f"--model {where}:{attribute}: no file {where!r}.")
        spec = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(where))[0], where)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    else:
        if os.getcwd() not in sys.path:  # as `python -m` does: the working directory first
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(where)
        except ImportError as exc:
            raise ValueError(f"--model {where}:{attribute}: cannot import {where!r} ({exc}); "
                             "run from its directory, set PYTHONPATH, or give the path to "
                             "the .py file.") from None
    target = getattr(module, attribute, None)
    if target is None:
        raise ValueError(f"--model {where}:{attribute}: {where!r} has no {attribute!r}.")
    model = target if isinstance(target, ODEModel) else target()
    return check_model(model)


def _number(text, where):
    """A float from a CSV cell or an option; empty or 'nan' is a missing value."""
    text = text.strip()
    try:
        return float(text) if text else float("nan")
    except ValueError:
        raise ValueError(f"{where}: {text!r} is not a number (use an empty cell or nan for a "
                         "missing value).") from None


def _numbers(text, option):
    return np.array([_number(v, option) for v in text.split(",")])


def _key_values(items, option):
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``, naming the option on a bad item."""
    pairs = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{option} takes NAME=VALUE, got {item!r}.")
        pairs[key.strip()] = value.strip()
    return pairs


def _bounds(items, model):
    """``--bounds LO:HI`` (every parameter) or ``--bounds NAME=LO:HI`` (repeatable)."""
    if not items:
        return None
    lower = np.full(model.n_params, -np.inf)
    upper = np.full(model.n_params, np.inf)
    for item in items:
        name, _, span = item.rpartition("=")
        lo, sep, hi = span.partition(":")
        if not sep:
            raise ValueError(f"--bounds takes LO:HI or NAME=LO:HI, got {item!r}.")
        if name and name not in model.param_names:
            raise ValueError(f"--bounds {item!r}: {model!r} has no parameter {name!r}; its "
                             f"parameters are {model.param_names}.")
        k = slice(None) if not name else model.param_names.index(name)
        lower[k] = _number(lo, "--bounds") if lo.strip() else -np.inf
        upper[k] = _number(hi, "--bounds") if hi.strip() else np.inf
    return lower, upper


def _setting(text):
    """A method setting's value: a number, True/False/None, or the text itself."""
    import ast

    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _days_since_first(cells, where):
    """ISO dates in a time column (``2020-03-01``, ``2020-03-01T06:00``) as days since the
    earliest, with that date; None when the column holds numbers."""
    first = cells[0].strip() if cells else ""
    try:
        float(first)
        return None
    except ValueError:
        pass
    try:
        stamps = np.array([np.datetime64(c.strip()) for c in cells])
    except ValueError:
        return None  # not dates either: the number parser names the cell
    if np.isnat(stamps).any():
        k = int(np.flatnonzero(np.isnat(stamps))[0])
        raise ValueError(f"{where}: row {k + 2} has no date; every row needs its time.")
    origin = stamps.min()
    return (stamps - origin) / np.timedelta64(1, "D"), str(origin)


def _read_table(path, time_column, mapping, model, observed):
    """``(t, Y, observed state names, data column names, time origin)`` from a CSV file: the
    origin is the first date when the time column holds dates (then ``t`` is in days since
    it), else None."""
    import csv

    with open(path, newline="") as fh:
        rows = [row for row in csv.reader(fh) if row and not row[0].startswith("#")]
    if not rows:
        raise ValueError(f"{path} is empty: it needs a header row ({time_column} and the "
                         "data columns) and one row per time.")
    header, body = [c.strip() for c in rows[0]], rows[1:]
    if time_column not in header:
        raise ValueError(f"{path} has no time column {time_column!r} (columns: {header}); "
                         "use --column t=NAME.")
    short = [k + 2 for k, row in enumerate(body) if len(row) != len(header)]
    if short:
        raise ValueError(f"{path} row {short[0]} has a different number of cells than "
                         f"its header {header} ({len(short)} such row(s)); leave a cell "
                         "empty for a missing value.")
    for state, column in mapping.items():
        if state not in model.observables:
            what = "observable" if model.has_observation_model else "state"
            raise ValueError(f"--column {state}={column}: {model!r} has no {what} {state!r}; "
                             f"its {what}s are {model.observables}.")
        if column not in header:
            raise ValueError(f"--column {state}={column}: {path} has no column {column!r} "
                             f"(columns: {header}).")
    if observed is None:  # the mapped states, then the columns named after states
        observed = list(mapping) + [c for c in header if c in model.observables
                                    and c not in mapping and c not in mapping.values()]
        unused = [c for c in header if c != time_column and c not in observed
                  and c not in mapping.values()]
        if unused and not mapping:  # with a mapping, the columns to use are named
            raise ValueError(f"Columns {unused} are not states of {model!r} "
                             f"{model.observables}; name each data column after its state, "
                             "map it with --column STATE=COLUMN, or choose the observed "
                             "states with --observed.")
    columns = [mapping.get(state, state) for state in observed]
    missing = [c for c in columns if c not in header]
    if missing:
        raise ValueError(f"{path} has no column for the observed state(s) {missing} "
                         f"(columns: {header}); map them with --column STATE=COLUMN.")
    time_index = header.index(time_column)
    dates = _days_since_first([row[time_index] for row in body],
                              f"{path} column {time_column!r}")
    numeric = columns if dates is not None else [time_column, *columns]
    used = [header.index(c) for c in numeric]  # other columns may be text
    values = np.array([[_number(row[j], f"{path} row {k + 2}, column {header[j]!r}")
                        for j in used] for k, row in enumerate(body)],
                      dtype=np.float64).reshape(len(body), len(used))
    if dates is not None:
        return dates[0], values, list(observed), columns, dates[1]
    return values[:, 0], values[:, 1:], list(observed), columns, None


def _estimate_x0(text, model):
    """``yes``/``no`` for every state, or ``STATE=yes|no,...`` per state (the others yes)."""
    words = {"yes": True, "no": False}
    text = text.strip()
    if text in words:
        return words[text]
    mask = {name: True for name in model.state_names}
    for item in text.split(","):
        state, _, word = item.partition("=")
        state, word = state.strip(), word.strip()
        if state not in mask or word not in words:
            raise ValueError(f"--estimate-x0 takes yes, no or STATE=yes|no,... with states "
                             f"{model.state_names}; got {item!r}.")
        mask[state] = words[word]
    return [mask[name] for name in model.state_names]


def _read_columns(path):
    """A CSV file as ``(header, {column: list of cells})`` (comment lines skipped)."""
    import csv

    with open(path, newline="") as fh:
        rows = [row for row in csv.reader(fh) if row and not row[0].startswith("#")]
    if not rows:
        raise ValueError(f"{path} is empty: it needs a header row and one row per value.")
    header, body = [c.strip() for c in rows[0]], rows[1:]
    short = [k + 2 for k, row in enumerate(body) if len(row) != len(header)]
    if short:
        raise ValueError(f"{path} row {short[0]} has a different number of cells than "
                         f"its header {header}; leave a cell empty for a missing value.")
    return header, {c: [row[j].strip() for row in body] for j, c in enumerate(header)}


def _label(cell):
    """An experiment label: an int when it is one, else the text."""
    try:
        return int(cell)
    except ValueError:
        return cell


def _read_experiments(path, time_column, mapping, model, observed, experiment, dose_table):
    """``(experiments, observed, columns)`` from a CSV with an experiment column (one row
    per time and experiment, one column per observable) and an optional dose table."""
    from .experiment import experiments_from_table

    header, cells = _read_columns(path)
    for name, what in ((time_column, "time"), (experiment, "experiment")):
        if name not in header:
            raise ValueError(f"{path} has no {what} column {name!r} (columns: {header}).")
    if observed is None:
        observed = list(mapping) + [c for c in header if c in model.observables
                                    and c not in mapping and c not in mapping.values()]
    columns = [mapping.get(name, name) for name in observed]
    missing = [c for c in columns if c not in header]
    if missing or not columns:
        raise ValueError(f"{path} has no column for the observable(s) {missing or observed} "
                         f"of {model!r} (columns: {header}); map them with --column "
                         "NAME=COLUMN.")
    empty = [row + 2 for row, c in enumerate(cells[experiment]) if not str(c).strip()]
    if empty:  # row 1 is the header
        raise ValueError(f"{path} column {experiment!r}: row(s) {empty[:5]} name no "
                         "experiment; every row needs its experiment's label.")
    table = {experiment: [_label(c) for c in cells[experiment]],
             time_column: [_number(c, f"{path} column {time_column!r}")
                           for c in cells[time_column]]}
    for name, column in zip(observed, columns):
        table[name] = [_number(c, f"{path} column {column!r}") for c in cells[column]]
    doses = dose_time = None
    if dose_table:
        dose_header, dose_cells = _read_columns(dose_table)
        dose_time = time_column if time_column in dose_header else "time"
        needed = [experiment, dose_time, "state", "amount"]
        absent = [c for c in needed if c not in dose_header]
        if absent:
            raise ValueError(f"--dose-table {dose_table} needs the columns {needed} (NONMEM "
                             f"style: experiment, time, state dosed, amount); it has "
                             f"{dose_header}.")
        doses = {experiment: np.array([_label(c) for c in dose_cells[experiment]],
                                      dtype=object),
                 dose_time: np.array([_number(c, f"{dose_table} column {dose_time!r}")
                                      for c in dose_cells[dose_time]]),
                 "state": np.array([_label(c) for c in dose_cells["state"]], dtype=object),
                 "amount": np.array([_number(c, f"{dose_table} column 'amount'")
                                     for c in dose_cells["amount"]])}
    table = {k: np.asarray(v, dtype=object if k == experiment else float)
             for k, v in table.items()}
    experiments = experiments_from_table(table, time=time_column, experiment=experiment,
                                         values=observed, doses=doses, dose_time=dose_time)
    return experiments, list(observed), columns


def _estimator_for(args, model, observed):
    """The estimator ``args`` ask for, in the common vocabulary."""
    from .registry import get_method

    opt = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    kwargs = {"observed": tuple(observed)}
    if opt("theta0"):
        kwargs["theta0"] = _numbers(args.theta0, "--theta0")
    if opt("x0"):
        kwargs["x0"] = _numbers(args.x0, "--x0")
    if opt("t0") is not None:
        kwargs["t0"] = _number(str(args.t0), "--t0")
    if opt("estimate_x0") is not None:
        kwargs["estimate_x0"] = _estimate_x0(args.estimate_x0, model)
    if opt("bounds"):
        kwargs["bounds"] = _bounds(args.bounds, model)
    if opt("positive"):
        kwargs["positive"] = True
    if opt("fixed"):
        kwargs["fixed"] = {k: _number(v, f"--fixed {k}") for k, v in
                           _key_values(args.fixed, "--fixed").items()}
    if opt("max_iter") is not None:
        kwargs["max_iter"] = args.max_iter
    kwargs.update({k: _setting(v) for k, v in _key_values(opt("set"), "--set").items()})
    Estimator = get_method(opt("method", "adjoint")).estimator
    settings = set(Estimator(model).get_params()) - {"model"}
    unknown = sorted(set(kwargs) - settings)
    if unknown:
        raise ValueError(f"--set {unknown[0]}: {Estimator.__name__} has no setting "
                         f"{unknown[0]!r}; its settings are {sorted(settings)}.")
    return Estimator(model, **kwargs)


def _write_fit(est, path, t, Y, observed, columns, stderr, r2, elapsed):
    """The fit as JSON (parameters, errors, x0, status) or as a CSV of data and fit."""
    import json

    if str(path).endswith(".csv"):
        import csv

        order = np.argsort(t, kind="stable")
        fitted = np.reshape(est.predict(t[order]), (len(t), -1))
        with open(path, "w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(["t"] + [f"{c}_data" for c in columns]
                            + [f"{s}_fit" for s in observed])
            for k, i in enumerate(order):
                writer.writerow([t[i], *Y[i], *fitted[k]])
        return
    names = est.model.param_names
    summary = {
        "method": type(est).__name__, "model": repr(est.model),
        "theta": dict(zip(names, map(float, est.theta_))),
        "theta_stderr": dict(zip(names, map(float, stderr))),
        "x0": dict(zip(est.model.state_names, map(float, np.ravel(est.x0_)))),
        "t0": float(est.t0_), "observed": observed, "converged": bool(est.converged_),
        "n_iter": int(est.n_iter_), "stop_reason": est.stop_reason_, "solver": est.solver_,
        "r2": r2, "cpu_s": elapsed,
    }
    with open(path, "w") as fh:
        json.dump(summary, fh, indent=1)


def fit_command(args, out=None):
    """Run ``sklode fit``; returns the fitted estimator, with ``cli_problems_``: the
    convergence, poor-fit and identifiability warnings of the fit (with ``--strict``,
    ``main`` then exits with status 1)."""

    out = sys.stdout if out is None else out
    model = _model_by_name(args.model)
    mapping = _key_values(getattr(args, "column", None), "--column")
    time_column = mapping.pop("t", getattr(args, "time_column", "t"))
    observed = getattr(args, "observed", None)
    if observed:
        observed = [s.strip() for s in observed.split(",")]
        unknown = [s for s in observed if s not in model.observables]
        if unknown:
            what = "observable" if model.has_observation_model else "state"
            raise ValueError(f"--observed {args.observed}: {model!r} has no {what}(s) "
                             f"{unknown}; its {what}s are {model.observables}.")
    experiment = getattr(args, "experiment", None)
    if experiment:
        return _fit_experiments(args, model, mapping, time_column, observed, out)
    if getattr(args, "dose_table", None):
        raise ValueError(f"--dose-table {args.dose_table} needs --experiment COLUMN: the "
                         "column naming each row's experiment in both tables (for a single "
                         "experiment, a column holding one label).")
    t, Y, observed, columns, origin = _read_table(args.csv, time_column, mapping, model,
                                                  observed)
    est = _estimator_for(args, model, observed)
    start = time.process_time()
    _fit_reporting(est, (t, Y))
    cpu = time.process_time() - start
    stderr = getattr(est, "theta_stderr_", np.full(model.n_params, np.nan))
    mapped = [s if c == s else f"{s} (column {c})" for s, c in zip(observed, columns)]
    print(f"{type(est).__name__} on {args.csv}: {t.size} times, observed {mapped}, model "
          f"{model!r}", file=out)
    if origin is not None:
        print(f"  times: days since {origin} (column {time_column!r} holds dates)", file=out)
    for i, name in enumerate(model.param_names):
        print(f"  {name:>10} = {est.theta_[i]:.6g} ± {stderr[i]:.4g} (1 s.e.)", file=out)
    print(f"  x0 at t0={est.t0_:g}: {np.round(est.x0_, 6).tolist()}", file=out)
    r2 = float(est.score(t, Y))
    print(f"  converged: {getattr(est, 'converged_', True)}, iterations: {est.n_iter_}, "
          f"R^2: {r2:.4f}, CPU s: {cpu:.3f}", file=out)
    if getattr(args, "output", None):
        _write_fit(est, args.output, t, Y, observed, columns, stderr, r2, cpu)
        print(f"fit written to {args.output}", file=out)
    if getattr(args, "plot", None):
        _plot_fit(est, t, Y, args.plot)
        print(f"plot written to {args.plot}", file=out)
    return est


def _fit_reporting(est, data):
    """Fit, printing every sklode warning on stderr; ``est.cli_problems_`` lists those that
    make ``main --strict`` exit with status 1 (convergence, poor fit, identifiability)."""
    from .exceptions import ConvergenceWarning, IdentifiabilityWarning, PoorFitWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(*data)
    shown, problems = set(), []
    for w in caught:  # sklode's own warnings (and scikit-learn's convergence one), once each
        if not (w.category.__module__.startswith("sklode")
                or issubclass(w.category, ConvergenceWarning)):
            continue
        text = f"{w.category.__name__}: {w.message}"
        if text in shown:
            continue
        shown.add(text)
        print(f"WARNING {text}", file=sys.stderr)
        if issubclass(w.category, (ConvergenceWarning, PoorFitWarning,
                                   IdentifiabilityWarning)):
            problems.append(text)
    est.cli_problems_ = problems
    return caught


def _fit_experiments(args, model, mapping, time_column, observed, out):
    """``sklode fit --experiment COLUMN``: one fit over every experiment of the table."""
    experiments, observed, columns = _read_experiments(
        args.csv, time_column, mapping, model, observed, args.experiment,
        getattr(args, "dose_table", None))
    est = _estimator_for(args, model, observed)
    start = time.process_time()
    _fit_reporting(est, (experiments,))
    cpu = time.process_time() - start
    stderr = est.theta_stderr_
    n_times = sum(len(e) for e in experiments)
    print(f"{type(est).__name__} on {args.csv}: {len(experiments)} experiments "
          f"({args.experiment}), {n_times} times, observed {observed}, model {model!r}",
          file=out)
    for i, name in enumerate(model.param_names):
        print(f"  {name:>10} = {est.theta_[i]:.6g} ± {stderr[i]:.4g} (1 s.e.)", file=out)
    x0s, t0s = np.reshape(est.x0_, (len(experiments), -1)), np.reshape(est.t0_, -1)
    estimated = np.reshape(getattr(est, "x0_stderr_", np.zeros_like(x0s)), x0s.shape) != 0
    if np.any(estimated):  # a line per experiment only where something was estimated
        for e, x0, t0, free in zip(experiments, x0s, t0s, estimated):
            if free.any():
                print(f"  x0 of {e.name} at t0={t0:g}: {np.round(x0, 6).tolist()}", file=out)
    else:
        known = np.unique(np.round(x0s, 6), axis=0)
        shown = (np.round(known[0], 6).tolist() if len(known) == 1
                 else f"{len(known)} different values")
        print(f"  x0 given, not estimated: {shown}", file=out)
    r2 = float(est.score(experiments))
    nll = getattr(est, "neg_log_likelihood_", np.nan)
    print(f"  converged: {est.converged_}, iterations: {est.n_iter_}, R^2: {r2:.4f}, "
          f"-log L: {nll:.6g}, CPU s: {cpu:.3f}", file=out)
    if getattr(args, "output", None):
        import json

        names = model.param_names
        summary = {
            "method": type(est).__name__, "model": repr(model),
            "theta": dict(zip(names, map(float, est.theta_))),
            "theta_stderr": dict(zip(names, map(float, stderr))),
            "x0": {str(e.name): dict(zip(model.state_names, map(float, x0)))
                   for e, x0 in zip(experiments, x0s)},
            "t0": {str(e.name): float(t0) for e, t0 in zip(experiments, t0s)},
            "observed": observed, "columns": columns, "converged": bool(est.converged_),
            "neg_log_likelihood": float(nll), "aic": float(est.aic_), "bic": float(est.bic_),
            "r2": r2, "cpu_s": cpu}
        with open(args.output, "w") as fh:
            json.dump(summary, fh, indent=1)
        print(f"fit written to {args.output}", file=out)
    return est


def _plot_fit(est, t, Y, path):
    """The data and the fit with its 95 % band."""
    from .plotting import plot_fit

    _save_figure(lambda: plot_fit(est, t, Y, random_state=0), path)


def petab_command(args, out=None):
    """``sklode petab PROBLEM.yaml``: the nominal -log L, a multi-start fit, the best
    parameters (flagged where they sit on a bound) and optionally the parameter table."""
    from . import petab
    from .exceptions import BoundWarning

    out = out or sys.stdout
    problem = petab.load(args.problem)
    print(f"{problem!r}", file=out)
    print(f"-log L at the nominal parameters: {problem.neg_log_likelihood():.6f}", file=out)
    settings = {"verbose": 1} if not args.quiet else {}
    if args.optimizer is not None:
        settings["optimizer"] = args.optimizer
    if args.max_iter is not None:
        settings["max_iter"] = args.max_iter
    est = problem.estimator(n_starts=args.starts, random_state=args.seed, n_jobs=args.n_jobs,
                            **settings)
    start = time.process_time()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(problem.experiments)
    cpu = time.process_time() - start
    for w in caught:
        if not issubclass(w.category, (DeprecationWarning, FutureWarning)):
            print(f"{w.category.__name__}: {w.message}", file=out)
    finite = np.isfinite(est.start_costs_)
    print(f"best -log L {est.neg_log_likelihood_:.6f} from {args.starts} starts "
          f"({est.n_starts_at_best_} within 0.1 of the best, {int((~finite).sum())} could "
          f"not be integrated); {cpu:.1f} CPU s in this process", file=out)
    at_bound = {str(w.message) for w in caught if issubclass(w.category, BoundWarning)}
    index = {n: i for i, n in enumerate(problem.model.param_names)}
    for name, lo, hi in zip(problem.parameter_names, problem.lower, problem.upper):
        value = est.theta_[index[name]]
        flag = "  (on a bound)" if any(f"{name} = " in m for m in at_bound) else ""
        print(f"  {name:32s} {value:.6g}   [{lo:g}, {hi:g}]{flag}", file=out)
    if args.output:
        import petab.v1 as petab_tables

        petab_tables.write_parameter_df(problem.parameter_table_of(est), args.output)
        print(f"parameter table written to {args.output}", file=out)
    return est


def main(argv=None):
    parser = argparse.ArgumentParser(prog="sklode", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_cmp = sub.add_parser(
        "compare", help="compare estimators over seeded noisy trials",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n"
               "  sklode compare --problem lotka_volterra --methods bcdprox,wendy,adjoint \\\n"
               "      --trials 20 --noise 0.5 --n-jobs 2 --output trials.csv --plot trials.png")
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
    p_cmp.add_argument("--strict", action="store_true",
                       help="exit with status 1 when any fit failed (default: 0; the summary "
                            "and stderr say how many failed and why)")
    p_cmp.add_argument("--blowup", type=float, default=100.0,
                       help="prediction error counted as a diverged fit (seed 000: 100)")
    p_cmp.add_argument("--backend", default=None, help="joblib backend: loky, threading, dask")
    p_cmp.add_argument("--scheduler", default=None,
                       help="Dask scheduler address (with --backend dask; default: a local "
                            "in-process cluster)")
    p_cmp.add_argument("--output", default=None, help="write per-trial records (.csv/.json)")
    p_cmp.add_argument("--store", default=None, metavar="PATH",
                       help="write every fit to this results store (SQLite; .sqlite is "
                            "appended without a known extension) as it finishes")
    p_cmp.add_argument("--resume", action="store_true",
                       help="continue the campaign of an existing --store: fits already in "
                            "it are not run again")
    p_cmp.add_argument("--plot", default=None, help="write box plots (.png; needs matplotlib)")
    p_cmp.add_argument("--no-progress", action="store_true",
                       help="no progress bar (there is one where tqdm is installed: "
                            "pip install 'sklode[progress]')")
    p_fit = sub.add_parser(
        "fit", help="fit a model to a CSV of times and observed states",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Fit an ODE model to a CSV file: a time column and one column per "
                    "observed state (named after the state, or mapped with --column).",
        epilog="example (the 1978 boarding-school flu, a model in sir.py):\n"
               "  sklode fit flu.csv --model sir.py:SICR --column t=day --column I=in_bed \\\n"
               "      --column C=convalescent --x0 762,1,0 --t0 0 --estimate-x0 no "
               "--positive \\\n      --output fit.json --plot fit.png")
    p_fit.add_argument("csv")
    p_fit.add_argument("--model", required=True,
                       help="zoo class (e.g. LotkaVolterra), problem name, module:Class "
                            "(importable from here or PYTHONPATH) or path/to/file.py:Class")
    p_fit.add_argument("--method", default="adjoint", choices=list(METHOD_NAMES))
    p_fit.add_argument("--column", action="append", metavar="STATE=COLUMN",
                       help="the CSV column holding a state (repeatable); t=COLUMN names the "
                            "time column (numbers, or ISO dates read as days since the first)")
    p_fit.add_argument("--time-column", default="t", help="the time column (default: t)")
    p_fit.add_argument("--observed", default=None, metavar="STATE,...",
                       help="the observed states, by name (default: the mapped and the "
                            "state-named columns)")
    p_fit.add_argument("--theta0", default=None, help="comma-separated initial parameters")
    p_fit.add_argument("--x0", default=None,
                       help="comma-separated initial state (a guess, or the value with "
                            "--estimate-x0 no; nan: unknown)")
    p_fit.add_argument("--t0", default=None, help="time of x0 (default: the first time)")
    p_fit.add_argument("--estimate-x0", default=None, metavar="yes|no|STATE=yes|no,...",
                       help="estimate the initial state (default: yes), or per state, e.g. "
                            "gut=no,central=yes")
    p_fit.add_argument("--experiment", default=None, metavar="COLUMN",
                       help="the column naming each row's experiment (subject, well): one fit "
                            "over all of them, x0 per experiment")
    p_fit.add_argument("--dose-table", default=None, metavar="FILE",
                       help="doses (CSV, NONMEM style: the experiment column, time, state, "
                            "amount); with --experiment")
    p_fit.add_argument("--bounds", action="append", metavar="[NAME=]LO:HI",
                       help="bounds on every parameter, or on one (repeatable); empty: "
                            "unbounded (e.g. beta=0:)")
    p_fit.add_argument("--positive", action="store_true",
                       help="keep every parameter positive")
    p_fit.add_argument("--fixed", action="append", metavar="NAME=VALUE",
                       help="hold a parameter at a value (repeatable)")
    p_fit.add_argument("--set", action="append", metavar="SETTING=VALUE",
                       help="any other setting of the method, e.g. lam=2 or "
                            "optimizer=bfgs (repeatable)")
    p_fit.add_argument("--strict", action="store_true",
                       help="exit with status 1 when the fit warned that it did not converge, "
                            "fits poorly or cannot pin a parameter down (default: the "
                            "warnings go to stderr and the status is 0)")
    p_fit.add_argument("--max-iter", type=int, default=None,
                       help="iterations of the method's main loop (default: its own)")
    p_fit.add_argument("--output", default=None,
                       help="write the fit: .json (parameters, errors, x0, status) or .csv "
                            "(data and fitted states)")
    p_fit.add_argument("--plot", default=None,
                       help="draw the data and the fit (.png; needs matplotlib)")
    p_petab = sub.add_parser(
        "petab", help="fit a PEtab problem (needs the extra 'petab')",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read a PEtab problem (SBML model and tables), print its -log L at the "
                    "nominal parameters and fit it by AdjointODE from random starts in its "
                    "bounds (on each parameter's scale).",
        epilog="example:\n  sklode petab Boehm_JProteomeRes2014.yaml --starts 20 --n-jobs 2 "
               "--output fitted_parameters.tsv")
    p_petab.add_argument("problem", help="the problem's YAML file")
    p_petab.add_argument("--starts", type=int, default=20)
    p_petab.add_argument("--n-jobs", type=int, default=None)
    p_petab.add_argument("--seed", type=int, default=0, help="seed of the random starts")
    p_petab.add_argument("--max-iter", type=int, default=None)
    p_petab.add_argument("--optimizer", choices=["fides", "trf"], default=None,
                         help="default fides where installed (pyPESTO's), else trf; "
                              "neither finds the best optimum on every problem")
    p_petab.add_argument("--output", default=None,
                         help="write the parameter table with the fitted values (.tsv)")
    p_petab.add_argument("--quiet", action="store_true", help="no line per start")
    sub.add_parser("info", help="versions, and the integrator integrator='auto' uses here "
                                "and why (sklode.show_versions)")
    p_demo = sub.add_parser("demo", help="fit a built-in noisy problem with every estimator")
    p_demo.add_argument("--problem", default="lotka_volterra", choices=list(PROBLEM_NAMES))
    p_demo.add_argument("--noise", type=float, default=None,
                        help="noise level (a standard deviation, in the problem's convention)")
    p_demo.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from .exceptions import SklodeError

    try:
        if args.command == "info":
            from ._versions import show_versions

            show_versions()
        elif args.command == "demo":
            demo(args.problem, args.noise, args.seed)
        elif args.command == "compare":
            from .compare import failures

            if failures(compare_command(args)) and args.strict:
                return 1  # --strict: a failed fit fails the command
        elif args.command == "petab":
            petab_command(args)
        elif args.command == "fit":
            # a warning is not a failure in a pipeline (its output is written); --strict
            # makes it one, as Python's -W error does for warnings
            if fit_command(args).cli_problems_ and args.strict:
                return 1
    except (ValueError, TypeError, SklodeError, OSError) as exc:
        # The estimators' messages name the argument, the value and the way out: a
        # traceback would only bury them. Exit status 2, as argparse uses for bad usage.
        print(f"sklode {args.command}: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
