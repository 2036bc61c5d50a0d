"""Compare estimators over many seeded noisy trials, in parallel, with tidy per-trial records.

Every trial is a pure function of ``(problem, method, trial, random_state)``: the noise seed is
``random_state + trial`` and the perturbed initial guess is drawn from its own stream, so the
records do not depend on ``n_jobs`` or on the joblib backend (loky, threads, Dask, Ray).
One exception: with the threading backend, ``warnings`` and ``warning_messages`` may miss a
warning or hold another fit's. Python's warning filters and its recording hook are one per
process (context-local only from Python 3.14), and a fit that silences warnings for a moment
silences them in every thread; a fit may then meet the caller's own filters, and where those
turn a warning into an error (``python -W error``) that fit is recorded as failed.
Process-based backends record each fit's warnings exactly.

>>> from sklode.compare import compare, summarize
>>> records = compare("lotka_volterra", methods=["bcdprox", "adjoint"], trials=2,
...                   as_frame=False)
>>> [(r["method"], r["trial"], r["status"]) for r in records]  # doctest: +NORMALIZE_WHITESPACE
[('bcdprox', 0, 'ok'), ('bcdprox', 1, 'ok'), ('adjoint', 0, 'ok'), ('adjoint', 1, 'ok')]
>>> [s["ok"] for s in summarize(records)]
[2, 2]
"""

from __future__ import annotations

import logging
import time
import warnings

import numpy as np
from joblib import Parallel, delayed
from threadpoolctl import threadpool_limits

from ._store import Store, fit_key, read_store
from ._validation import check_experiments
from ._checks import check_theta0
from .datasets import Problem, get_problem, list_problems, make_trajectory
from .integrate import simulate
from .metrics import prediction_error
from .models import check_model
from .registry import METHODS, get_method

__all__ = ["compare", "compare_data", "describe_failures", "failures", "format_summary",
           "read_store", "summarize"]

logger = logging.getLogger("sklode")


def _trial_theta0(problem, trial, random_state, theta0_noise):
    base = problem.theta_init if problem.theta_init is not None else problem.model.theta_guess()
    if not theta0_noise:
        return np.array(base, dtype=np.float64)
    rng = np.random.default_rng([int(random_state), int(trial), 7])
    return problem.theta + theta0_noise * rng.standard_normal(problem.theta.size)


_WARM = set()


def _warm_up(model, x, theta):
    """Pay torch's one-off lazy initialisation (~1 s per process) before the clock starts,
    so that CPU columns measure fits, not the first autodiff call of each worker."""
    key = type(model).__name__
    if key not in _WARM:
        t = np.zeros(2)
        X = np.stack([x, x])
        model.f(t, X, theta)
        model.jac_x(t, X, theta)
        model.jac_theta(t, X, theta)
        model.vjp(t, X, theta, X)
        _WARM.add(key)


def _timed_fit(est, t, Y=None):
    """Fit ``est``; CPU and wall seconds, convergence, warnings, or the error. Never raises:
    a failed fit is a result, not a crash of the comparison."""
    cpu, wall = time.process_time(), time.perf_counter()
    data = (t,) if Y is None else (t, Y)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")  # every warning of the fit goes to the record
            est.fit(*data)
    except Exception as exc:
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}"[:300],
                "cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall,
                **_warning_fields(caught)}
    return {"status": "ok", "cpu_s": time.process_time() - cpu,
            "wall_s": time.perf_counter() - wall,
            "converged": bool(getattr(est, "converged_", True)), "n_iter": int(est.n_iter_),
            **_warning_fields(caught)}


def _warning_fields(caught):
    """The warnings of one fit for its record: their categories (sorted, once each) and
    their messages (once each, in order), so that a worker's warnings reach the records
    instead of its stderr."""
    relevant = [w for w in caught if not issubclass(w.category, DeprecationWarning)]
    messages = list(dict.fromkeys(f"{w.category.__name__}: {w.message}"[:300]
                                  for w in relevant))
    return {"warnings": sorted({w.category.__name__ for w in relevant}),
            "warning_messages": messages}


def _record(method, problem, trial, seed, theta0, noise=None):
    """Fit one estimator on one trial (``problem`` a Problem or a built-in problem's name);
    never raises (failures are recorded)."""
    if isinstance(problem, str):
        problem = get_problem(problem)
    record = {"method": method, "problem": problem.name, "trial": int(trial), "seed": int(seed),
              "noise": float(problem.noise if noise is None else noise),
              "noise_kind": problem.noise_kind,
              "theta0": list(map(float, theta0)), "status": "ok", "error": "",
              "converged": False, "n_iter": 0, "cpu_s": 0.0, "wall_s": 0.0}
    est = get_method(method).make(problem, theta0)
    reason = get_method(method).why_not(problem)
    if reason:
        record.update(status="skipped", error=reason)
        return record
    # Named problems reuse their cached clean trajectory; custom ones are simulated here.
    source = problem.name if problem.name in list_problems() else problem
    data = make_trajectory(source, noise=noise, random_state=seed)
    _warm_up(problem.model, problem.x0, problem.theta)
    record.update(_timed_fit(est, data.t, data.Y))
    if record["status"] != "ok":
        return record
    with warnings.catch_warnings():  # the errors below are measured, not the user's business
        warnings.simplefilter("ignore")
        return _errors(record, est, problem, data)


def _errors(record, est, problem, data):
    """The record with the fit's parameter and prediction errors."""
    theta = np.asarray(est.theta_, dtype=np.float64)
    record["theta"] = list(map(float, theta))
    if problem.theta is not None and problem.theta.size == theta.size:
        abs_err = np.abs(theta - problem.theta)
        record["theta_true"] = list(map(float, problem.theta))
        record["max_abs_theta_error"] = float(abs_err.max())
        rel = abs_err / np.where(problem.theta != 0, np.abs(problem.theta), 1.0)
        record["max_rel_theta_error"] = float(rel.max())
        for name, err in zip(problem.model.param_names, abs_err):
            record[f"error_{name}"] = float(err)
    try:  # prediction error of seed 000: simulate every state on the data grid
        X_hat = simulate(problem.model, theta, est.x0_, data.t, t0=est.t0_)
        record["prediction_error"] = float(prediction_error(data.X, X_hat))
    except Exception:  # the fitted ODE blows up over the data window
        record["prediction_error"] = float("inf")
    return record


def _as_frame(records, as_frame):
    if as_frame is False:
        return records
    try:
        import pandas as pd
    except ImportError:
        if as_frame:
            raise ImportError("as_frame=True needs pandas: pip install pandas") from None
        return records
    return pd.DataFrame.from_records(records)


def _run(tasks, n_jobs, progress, total, on_result=None):
    """The tasks' records, in order. Fits run in this process (n_jobs=1, the threading
    backend) with one BLAS thread, as in loky's and Dask's workers: a product summed by two
    threads differs in the last bits (WENDy's estimates by 6e-15), and records must not
    depend on n_jobs or the backend. ``on_result(index, record)``: called as each fit
    finishes (in completion order), e.g. to store it at once; the records are then not
    returned (None)."""
    if on_result is not None:  # tag each task with its position: results come unordered
        tasks = [delayed(_indexed)(k, task) for k, task in enumerate(tasks)]
    with threadpool_limits(limits=1):
        jobs = Parallel(n_jobs=n_jobs, return_as="generator" if on_result is None
                        else "generator_unordered")(tasks)
        if progress:
            try:
                from tqdm.auto import tqdm
            except ImportError:  # the progress bar is optional (extra "progress")
                logger.warning("progress=True needs tqdm (pip install tqdm); running "
                               "without it")
            else:
                jobs = tqdm(jobs, total=total, desc="sklode compare", unit="fit")
        if on_result is None:
            return list(jobs)
        for k, record in jobs:  # handed on, not kept: a long campaign's records stay in the
            on_result(k, record)  # store, not in this process's memory
        return None


def _indexed(k, task):
    function, args, kwargs = task
    return k, function(*args, **kwargs)


def compare(problems, methods=tuple(METHODS), *, trials=10, noise=None, theta0_noise=None,
            random_state=0, n_jobs=None, progress=False, as_frame=None, store=None):
    """Fit several estimators on many seeded noisy trials of named problems.

    Parameters
    ----------
    problems : str, Problem or list of them
        Names from :func:`sklode.datasets.list_problems` (or Problem objects).
    methods : sequence of str, default=("bcdprox", "wendy", "adjoint")
        Names from :data:`sklode.registry.METHODS`.
    trials : int, default=10
        Noisy trials per problem and method.
    noise : float, optional
        Noise standard deviation in each problem's convention; default the problem's.
    theta0_noise : float, optional
        When given, trial k starts from ``theta_true + theta0_noise * N(0, I)`` (the seed-000
        initialisation-robustness protocol, where ``theta0_noise**2`` is its sigma_theta^2);
        otherwise every trial starts from the paper's initial guess.
    random_state : int, default=0
        Trial k uses noise seed ``random_state + k``.
    n_jobs : int, optional
        joblib workers; use ``joblib.parallel_config(backend="dask")`` for a Dask cluster.
    progress : bool, default=False
        Show a tqdm progress bar (needs the ``progress`` extra).
    as_frame : bool, optional
        Return a pandas DataFrame (default when pandas is installed) or a list of dicts.
    store : str or os.PathLike, optional
        A results store (an SQLite file; ``.sqlite`` is appended to a path without a known
        extension): every fit is written to it as it finishes, in its own transaction, and
        fits already in it are not run again, so a rerun after a crash or a kill resumes
        where it stopped (only the fits in flight are lost). The records returned are then
        the store's for this campaign, in the usual order (:func:`read_store` reads a
        store).

    Returns
    -------
    records : DataFrame or list of dict
        One row per (problem, method, trial): ``method, problem, trial, seed, noise,
        noise_kind, theta0, status`` ("ok", "failed", "skipped"), ``error, converged,
        n_iter, cpu_s, wall_s, theta, theta_true, max_abs_theta_error,
        max_rel_theta_error, error_<param>, prediction_error``.
    """
    given = [problems] if isinstance(problems, (str, Problem)) else list(problems)
    problems = [get_problem(p) if isinstance(p, str) else p for p in given]
    methods = [methods] if isinstance(methods, str) else list(methods)
    for m in methods:
        get_method(m)  # unknown names raise, listing the known ones
    if int(trials) < 1:
        raise ValueError(f"trials must be >= 1, got {trials}.")
    # a task names a problem given by name (g) rather than carrying it: small tasks keep
    # small what a Dask scheduler logs (the last 1,000 messages to each worker, tasks included)
    grid = [(p, g, m, k, _trial_theta0(p, k, random_state, theta0_noise))
            for p, g in zip(problems, given) for m in methods for k in range(int(trials))]
    tasks = [delayed(_record)(m, g, k, random_state + k, theta0, noise)
             for _, g, m, k, theta0 in grid]
    if store is None:
        records = _run(tasks, n_jobs, progress, len(tasks))
        _warn_failures(records)
        return _as_frame(records, as_frame)
    settings = [{"problem": p.name, "method": m, "trial": int(k), "seed": int(random_state + k),
                 "noise": None if noise is None else float(noise),
                 "theta0": [float(v) for v in theta0]} for p, _, m, k, theta0 in grid]
    keys = [fit_key(s) for s in settings]
    with Store(store) as results:
        done = results.done()
        todo = [i for i, key in enumerate(keys) if key not in done]
        _run([tasks[i] for i in todo], n_jobs, progress, len(todo),
             on_result=lambda j, record: results.add(keys[todo[j]], settings[todo[j]], record))
        records = results.records(keys)
        _warn_failures(records)
        return _as_frame(records, as_frame)


def failures(records):
    """Per method, how many fits failed and the first failure's reason.

    Parameters
    ----------
    records : DataFrame or list of dict
        Output of :func:`compare` or :func:`compare_data`.

    Returns
    -------
    dict
        ``{method: (n_failed, n_fits, first reason)}`` for every method with a failed fit,
        in the records' order.
    """
    rows = records.to_dict("records") if hasattr(records, "to_dict") else list(records)
    found = {}
    for r in rows:
        n_failed, n_fits, first = found.get(r["method"], (0, 0, None))
        failed = r.get("status") == "failed"
        found[r["method"]] = (n_failed + failed, n_fits + 1,
                              first if first is not None or not failed else str(r.get("error")))
    return {m: v for m, v in found.items() if v[0]}


def describe_failures(records, width=300):
    """One line per method with failed fits, for messages and the command line.

    Parameters
    ----------
    records : DataFrame or list of dict
        Output of :func:`compare` or :func:`compare_data`.
    width : int, default=300
        Reasons longer than this many characters are cut.

    Returns
    -------
    str
        ``"adjoint: 10 of 10 fits failed; the first: ..."``, one line per method; '' when
        every fit ran.

    Examples
    --------
    >>> from sklode.compare import describe_failures
    >>> describe_failures([{"method": "adjoint", "status": "failed", "error": "blew up"},
    ...                    {"method": "wendy", "status": "ok"}])
    'adjoint: 1 of 1 fits failed; the first: blew up'
    """
    lines = []
    for method, (n_failed, n_fits, first) in failures(records).items():
        reason = first if len(first) <= width else first[: width - 3] + "..."
        lines.append(f"{method}: {n_failed} of {n_fits} fits failed; the first: {reason}")
    return "\n".join(lines)


def _warn_failures(records):
    """scikit-learn's ``FitFailedWarning`` (as ``cross_validate`` gives) naming each method
    whose fits failed and the first reason: a failure is never only a count in a table."""
    described = describe_failures(records)
    if described:
        from sklearn.exceptions import FitFailedWarning

        warnings.warn("Some fits failed (their records' 'error' holds every reason):\n"
                      + described, FitFailedWarning, stacklevel=3)


def compare_data(t, Y, model, methods=tuple(METHODS), *, theta0=None, observed=None, t0=None,
                 x0=None, n_jobs=None, as_frame=None, method_settings=None, **settings):
    """Fit several estimators to one user data set (no ground truth: no error columns).

    Parameters
    ----------
    t, Y : array-like, or lists of them
        Times and observations of the ``observed`` states (lists: several experiments);
        or ``t`` a list of :class:`~sklode.Experiment` and ``Y=None``.
    model : ODEModel
        The vector field.
    methods : sequence of str
        Names from :data:`sklode.registry.METHODS`.
    theta0, observed, t0, x0 : optional
        As for the estimators.
    n_jobs : int, optional
        joblib workers, one fit each.
    as_frame : bool, optional
        Return a pandas DataFrame (default when pandas is installed) or a list of dicts.
    method_settings : dict, optional
        Settings of one method only, by method name, e.g. ``{"bcdprox": {"lam": 2.0}}``.
    **settings
        Settings every estimator takes (the common vocabulary: ``estimate_x0``,
        ``positive``, ``sigma``, ``noise_kind``, ``fixed``, ``bounds``, ``x0_bounds``, ...).
        A setting an estimator does not have is refused before any fit.

    Returns
    -------
    records : DataFrame or list of dict
        ``method, status, error, converged, n_iter, cpu_s, wall_s, theta, score`` (R² on the
        data) and ``neg_log_likelihood``; a method that cannot take the data (WENDy and
        hidden states, BCD-prox and observables) is ``"skipped"`` with its reason.
    """
    model = check_model(model)
    method_settings = dict(method_settings or {})
    estimators = {}
    for method in methods:
        Estimator = get_method(method).estimator  # unknown names refused before any fit
        own = {"theta0": theta0, "observed": observed, "t0": t0, "x0": x0, **settings,
               **method_settings.get(method, {})}
        accepted = set(Estimator(model).get_params())
        unknown = sorted(set(own) - accepted)
        if unknown:
            raise ValueError(f"compare_data: {Estimator.__name__} has no setting "
                             f"{unknown[0]!r}; give method-specific settings through "
                             f"method_settings={{{method!r}: {{...}}}}.")
        estimators[method] = Estimator(model, **own)
    unknown = sorted(set(method_settings) - set(methods))
    if unknown:
        raise ValueError(f"method_settings names {unknown}, which are not among the methods "
                         f"compared {list(methods)}.")
    # the data errors every method would meet, raised once (not recorded as failed fits)
    check_experiments(t, Y, model=model, observed=observed, x0=x0, t0=t0,
                      estimate_x0=settings.get("estimate_x0", True), min_samples=2,
                      estimator_name="compare_data", warn_initial_time=False)
    check_theta0(theta0, model)

    def one(method):
        record = {"method": method, "status": "ok", "error": ""}
        est = estimators[method]
        _warm_up(model, np.ones(model.n_states), model.theta_guess())
        data = (t,) if Y is None else (t, Y)
        record.update(_timed_fit(est, *data))
        if record["status"] != "ok":
            if record["error"].startswith("ValueError"):  # the method cannot take the data
                record["status"] = "skipped"
            return record
        try:
            score = float(est.score(*data))
        except Exception as exc:  # the fitted ODE cannot be simulated over the data
            return {**record, "status": "failed", "error": f"{type(exc).__name__}: {exc}"}
        return {**record, "theta": list(map(float, est.theta_)), "score": score,
                "neg_log_likelihood": float(est.neg_log_likelihood_)}

    records = _run([delayed(one)(m) for m in methods], n_jobs, False, len(methods))
    _warn_failures(records)
    return _as_frame(records, as_frame)


def summarize(records, *, blowup=100.0):
    """Per (problem, method): fits, failures, medians of errors and times.

    Parameters
    ----------
    records : DataFrame or list of dict
        Output of :func:`compare`.
    blowup : float, default=100.0
        Prediction errors above this count as diverged fits (seed 000's protocol).

    Returns
    -------
    DataFrame or list of dict
        One row per (problem, method): ``trials, ok, failed, skipped, converged``,
        ``warned`` (fits that warned: their records list the warnings), the count of
        diverged fits, the medians of the errors and of CPU and wall seconds, and
        ``first_failure`` (the first failed fit's reason, '' where none failed).
    """
    rows = records.to_dict("records") if hasattr(records, "to_dict") else list(records)
    groups = {}
    for r in rows:
        groups.setdefault((r["problem"], r["method"]), []).append(r)
    summary = []
    for (problem, method), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]

        def median(key, ok=ok):
            vals = [r[key] for r in ok if key in r and r[key] is not None]
            return float(np.median(vals)) if vals else float("nan")

        summary.append({
            "problem": problem, "method": method, "trials": len(rs), "ok": len(ok),
            "failed": sum(r["status"] == "failed" for r in rs),
            "skipped": sum(r["status"] == "skipped" for r in rs),
            "converged": sum(bool(r.get("converged")) for r in ok),
            "warned": sum(bool(r.get("warnings")) for r in ok),
            f"prediction_error>{blowup:g}": sum(
                not (r.get("prediction_error", np.inf) <= blowup) for r in ok),
            "median_max_rel_theta_error": median("max_rel_theta_error"),
            "median_prediction_error": median("prediction_error"),
            "median_cpu_s": median("cpu_s"), "median_wall_s": median("wall_s"),
            "first_failure": next((str(r.get("error")) for r in rs
                                   if r["status"] == "failed"), ""),
        })
    return _as_frame(summary, None if hasattr(records, "to_dict") else False)


def format_summary(summary):
    """A markdown table of :func:`summarize`'s output.

    Parameters
    ----------
    summary : DataFrame or list of dict
        Output of :func:`summarize`.

    Returns
    -------
    str
        The table, one row per (problem, method); empty for no rows.
    """
    rows = summary.to_dict("records") if hasattr(summary, "to_dict") else list(summary)
    if not rows:
        return ""
    # the reasons go below the table, whole: a table cell would hide or cut them
    keys = [k for k in rows[0] if k != "first_failure"]
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = [f"{r[k]:.4g}" if isinstance(r[k], float) else str(r[k]) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    for r in rows:
        if r.get("first_failure"):
            lines.append(f"\n{r['method']} on {r['problem']}: {r['failed']} of {r['trials']} "
                         f"fits failed; the first: {r['first_failure']}")
    return "\n".join(lines)
