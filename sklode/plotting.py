"""Figures of a fit: the data against the fitted trajectory (with a band from the parameter
covariance), BCD-prox's filtered states, the loss and the parameters by iteration, and
comparison box plots.

matplotlib is optional (``pip install 'sklode[plot]'``); every function takes an ``ax`` (or
creates a figure) and returns the axes it drew on, so it composes with the user's own figures.

Examples
--------
>>> import matplotlib
>>> matplotlib.use("Agg")
>>> from sklode import WENDyODE
>>> from sklode.datasets import make_trajectory
>>> from sklode.models import LotkaVolterra
>>> from sklode.plotting import plot_fit
>>> data = make_trajectory("lotka_volterra", noise=0.1, random_state=0)
>>> est = WENDyODE(LotkaVolterra()).fit(data.t, data.Y)
>>> axes = plot_fit(est, data.t, data.Y, random_state=0)
>>> [ax.get_title() for ax in axes]
['prey', 'predator']
"""

from __future__ import annotations

import numpy as np
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from .exceptions import SklodeError
from .integrate import simulate

__all__ = ["plot_comparison", "plot_fit", "plot_individual_fits", "plot_loss", "plot_parameters",
           "plot_random_effects", "plot_states", "plot_vpc"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("sklode.plotting needs matplotlib: pip install 'sklode[plot]'"
                          ) from None
    return plt


def _axes(ax, n, width=4.0, height=3.0):
    """``n`` axes: the given ones (one or a sequence) or a new row of them."""
    if ax is not None:
        axes = list(np.ravel(ax)) if np.ndim(ax) else [ax]
        if len(axes) != n:
            raise ValueError(f"ax must hold {n} axes (one per panel), got {len(axes)}.")
        return axes
    plt = _pyplot()
    _, axes = plt.subplots(1, n, figsize=(width * n, height), squeeze=False,
                           layout="constrained")
    return list(axes[0])


def _trajectory_band(est, times, level, n_draws, random_state):
    """Pointwise ``level`` quantiles of the observed states over parameters drawn from
    N(theta_, theta_cov_), or None where there is no usable covariance."""
    cov = getattr(est, "theta_cov_", None)
    if cov is None or not np.all(np.isfinite(cov)) or not np.any(cov):
        return None
    rng = check_random_state(random_state)
    draws = rng.multivariate_normal(est.theta_, cov, size=n_draws, check_valid="ignore")
    columns = list(est.observed_)
    curves = []
    for theta in draws:
        try:
            X = simulate(est.model, theta, est.x0_, times, t0=est.t0_, integrator=est.integrator,
                         rtol=est.rtol, atol=est.atol)
        except SklodeError:  # a draw whose trajectory blows up: not part of the band
            continue
        curves.append(X[:, columns])
    if len(curves) < max(10, n_draws // 2):
        return None
    tail = (1 - level) / 2
    return np.quantile(np.array(curves), [tail, 1 - tail], axis=0)


def plot_fit(est, t, Y, *, ax=None, band=True, level=0.95, n_draws=100, n_points=400,
             random_state=None):
    """The data and the fitted trajectory of each observed state, one panel per state.

    Parameters
    ----------
    est : fitted estimator
        BCDProxODE, WENDyODE or AdjointODE fitted on one experiment.
    t : array-like of shape (n_samples,)
        Observation times.
    Y : array-like of shape (n_samples, n_observed)
        Observations (NaN where missing).
    ax : matplotlib Axes or sequence of them, optional
        One per observed state; default: a new figure.
    band : bool, default=True
        Draw the pointwise ``level`` band of the trajectory over ``n_draws`` parameter
        vectors from N(``theta_``, ``theta_cov_``) (the initial state held at ``x0_``);
        skipped where the covariance is not finite (unidentifiable parameters).
    level : float, default=0.95
        Coverage of the band.
    n_draws : int, default=100
        Parameter draws for the band.
    n_points : int, default=400
        Times at which the trajectory is drawn.
    random_state : int, RandomState or None
        Seed of the parameter draws.

    Returns
    -------
    list of Axes
        The panels drawn on, one per observed state.
    """
    check_is_fitted(est)
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    Y = np.asarray(Y, dtype=np.float64).reshape(len(t), -1)
    names = [est.model.state_names[i] for i in est.observed_]
    axes = _axes(ax, len(names))
    times = np.linspace(min(est.t0_, t.min()), t.max(), n_points)
    fitted = np.reshape(est.predict(times), (n_points, -1))
    limits = _trajectory_band(est, times, level, n_draws, random_state) if band else None
    for k, (axis, name) in enumerate(zip(axes, names)):
        if limits is not None:
            axis.fill_between(times, limits[0][:, k], limits[1][:, k], alpha=0.25,
                              label=f"{level:.0%} band (θ covariance)")
        axis.plot(times, fitted[:, k], lw=1.8, label=f"{type(est).__name__} fit")
        axis.plot(t, Y[:, k], "o", ms=3.5, color="k", label="data")
        axis.set_title(name)
        axis.set_xlabel("t")
    axes[0].legend(fontsize="small")
    return axes


def plot_states(est, t, Y, *, ax=None):
    """BCD-prox's filtered states ``states_`` against the data, one panel per state
    (hidden states too: they have no data points).

    Parameters
    ----------
    est : fitted BCDProxODE
        Fitted on one experiment.
    t : array-like of shape (n_samples,)
        The training times, in any order.
    Y : array-like of shape (n_samples, n_observed)
        The training observations, in the order of ``t``.
    ax : matplotlib Axes or sequence of them, optional
        One per state of the model; default: a new figure.

    Returns
    -------
    list of Axes
        The panels drawn on, one per state.
    """
    check_is_fitted(est, "states_")
    t = np.asarray(t, dtype=np.float64).reshape(-1)
    order = np.argsort(t, kind="stable")  # states_ is at the sorted training times
    t, Y = t[order], np.asarray(Y, dtype=np.float64).reshape(len(t), -1)[order]
    states = est.states_[0] if isinstance(est.states_, list) else est.states_
    if states.shape[0] != len(t):
        raise ValueError(f"states_ holds {states.shape[0]} times but t has {len(t)}: pass the "
                         "training times (one experiment).")
    axes = _axes(ax, est.model.n_states)
    for i, (axis, name) in enumerate(zip(axes, est.model.state_names)):
        axis.plot(t, states[:, i], lw=1.8, label="filtered state X*")
        if i in est.observed_:
            axis.plot(t, Y[:, list(est.observed_).index(i)], "o", ms=3.5, color="k",
                      label="data")
        axis.set_title(name if i in est.observed_ else f"{name} (hidden)")
        axis.set_xlabel("t")
    axes[0].legend(fontsize="small")
    return axes


def plot_loss(est, *, ax=None):
    """The quantity the main loop decreased, by iteration, on a log scale: AdjointODE's
    cost (``loss_history_``) and gradient norm, BCD-prox's data misfit
    (``fidelity_history_``).

    Parameters
    ----------
    est : fitted AdjointODE or BCDProxODE
        The estimator whose history to draw.
    ax : matplotlib Axes, optional
        Default: a new figure.

    Returns
    -------
    Axes
        The axes drawn on.
    """
    check_is_fitted(est)
    series = [(label, getattr(est, attr)) for attr, label in (
        ("loss_history_", "cost"), ("grad_norm_history_", "gradient norm"),
        ("fidelity_history_", "data misfit ‖Y − X*‖²")) if len(getattr(est, attr, ()))]
    if not series:
        raise ValueError(f"{type(est).__name__} records no loss history (AdjointODE and "
                         "BCDProxODE do).")
    (axis,) = _axes(ax, 1, width=5.0)
    for label, values in series:
        axis.semilogy(np.arange(len(values)), np.abs(values), label=label)
    axis.set_xlabel("iteration")
    axis.set_title(f"{type(est).__name__}: {est.stop_reason_}"[:70])
    axis.legend(fontsize="small")
    return axis


def plot_parameters(est, *, truth=None, ax=None):
    """Each parameter by iteration (BCD-prox's ``theta_history_``), one panel per parameter,
    with a reference value drawn across where one is given.

    Parameters
    ----------
    est : fitted BCDProxODE
        Any estimator with a ``theta_history_`` of shape (n_iter, n_params).
    truth : array-like of shape (n_params,), optional
        Reference values (the true parameters of simulated data).
    ax : matplotlib Axes or sequence of them, optional
        One per parameter; default: a new figure.

    Returns
    -------
    list of Axes
        The panels drawn on, one per parameter.
    """
    check_is_fitted(est)
    history = getattr(est, "theta_history_", None)
    if history is None or len(history) == 0:
        raise ValueError(f"{type(est).__name__} records no parameter history (BCDProxODE "
                         "does, as theta_history_).")
    history = np.asarray(history)
    names = est.model.param_names
    axes = _axes(ax, len(names), width=3.0)
    iterations = np.arange(1, len(history) + 1)
    for k, (axis, name) in enumerate(zip(axes, names)):
        axis.plot(iterations, history[:, k], lw=1.6, label="iterate")
        if truth is not None:
            axis.axhline(np.ravel(truth)[k], color="k", ls="--", lw=1, label="reference")
        axis.set_title(name)
        axis.set_xlabel("iteration")
    if truth is not None:
        axes[0].legend(fontsize="small")
    return axes


_COMPARED = [("max_rel_theta_error", "max relative θ error"),
             ("prediction_error", "prediction error ‖X − X̂‖_F"),
             ("cpu_s", "CPU s per fit")]


def plot_comparison(records, *, title=None, ax=None):
    """Box plots of ``compare``'s records by method: parameter error, prediction error and
    CPU seconds per fit, with a title saying what was compared.

    Parameters
    ----------
    records : DataFrame or list of dict
        Output of :func:`sklode.compare.compare`.
    title : str, optional
        Default: the problems, noise levels and trial counts of the records.
    ax : sequence of 3 matplotlib Axes, optional
        Default: a new figure.

    Returns
    -------
    list of Axes
        The three panels drawn on.
    """
    rows = records.to_dict("records") if hasattr(records, "to_dict") else list(records)
    ok = [r for r in rows if r.get("status") == "ok"]
    if not ok:
        raise ValueError("No successful fit among the records: nothing to plot.")
    # every method keeps its place: one whose fits all failed shows an empty box and says so
    methods = list(dict.fromkeys(r["method"] for r in rows if r.get("status") != "skipped"))
    labels = []
    for m in methods:
        n_ok = sum(r["method"] == m for r in ok)
        n = sum(r["method"] == m and r.get("status") != "skipped" for r in rows)
        labels.append(m if n_ok == n else f"{m}\n({n - n_ok} of {n} failed)")
    axes = _axes(ax, len(_COMPARED))
    for axis, (key, label) in zip(axes, _COMPARED):
        data = [[r[key] for r in ok if r["method"] == m and np.isfinite(r.get(key, np.nan))]
                for m in methods]
        axis.boxplot([d if d else [np.nan] for d in data], tick_labels=labels)
        axis.set_title(label, fontsize="medium")
        axis.set_yscale("log")
    if title is None:
        problems = ", ".join(dict.fromkeys(str(r["problem"]) for r in rows))
        noises = sorted({r["noise"] for r in rows if r.get("noise") is not None})
        trials = len({r["trial"] for r in rows})
        noise = "" if not noises else ", noise " + "/".join(f"{n:g}" for n in noises)
        title = f"{problems}{noise}: {trials} trials per method ({len(ok)} fits succeeded " \
                f"of {len(rows)})"
        failed = [r for r in rows if r.get("status") == "failed"]
        if failed:  # the first reason, where the reader looks
            reason = str(failed[0].get("error"))
            title += (f"\n{failed[0]['method']} failed: "
                      f"{reason if len(reason) <= 90 else reason[:87] + '...'}")
    axes[0].figure.suptitle(title)
    return axes


# ---------------------------------------------------------------------- populations
def _subject_grid(experiment, n_points):
    """Times from the subject's start to its last sample; the first just after the start, so
    that a dose given then shows (a time at a dose sees the state before it)."""
    t = np.asarray(experiment.t, dtype=np.float64).reshape(-1)
    t0 = experiment.t0 if experiment.t0 is not None else t.min()
    grid = np.linspace(min(t0, t.min()), t.max(), n_points)
    grid[0] += 1e-6 * (grid[-1] - grid[0])
    return grid


def plot_individual_fits(est, subjects, *, observable=0, ax=None, n_points=200, ncols=4):
    """Each subject's data with its individual (empirical-Bayes) and population predictions.

    Parameters
    ----------
    est : MixedEffectsODE
        A fitted population.
    subjects : list of Experiment
        The subjects to draw (training or new ones: their own data give their etas).
    observable : int, default=0
        Which of the data's columns to draw.
    ax : sequence of matplotlib Axes, optional
        One per subject; default: a new grid of ``ncols`` columns.
    n_points : int, default=200
        Times at which the curves are drawn.
    ncols : int, default=4
        Columns of the new grid.

    Returns
    -------
    list of Axes
        One panel per subject.
    """
    check_is_fitted(est, "theta_")
    subjects = list(subjects)
    if ax is None:
        plt = _pyplot()
        nrows = -(-len(subjects) // ncols)
        _, grid = plt.subplots(nrows, min(ncols, len(subjects)), squeeze=False,
                               sharex=True, sharey=True, layout="constrained",
                               figsize=(2.6 * min(ncols, len(subjects)), 2.2 * nrows))
        axes = list(grid.ravel())
        for extra in axes[len(subjects):]:
            extra.set_visible(False)
        axes = axes[: len(subjects)]
    else:
        axes = _axes(ax, len(subjects))
    for k, (axis, subject) in enumerate(zip(axes, subjects)):
        grid_t = _subject_grid(subject, n_points)
        population = est.predict(subject, level="population", t=grid_t)[:, observable]
        individual = est.predict(subject, t=grid_t)[:, observable]
        Y = np.asarray(subject.Y, dtype=np.float64).reshape(len(subject.t), -1)
        axis.plot(grid_t, population, "--", color="0.5", lw=1.2, label="population")
        axis.plot(grid_t, individual, lw=1.6, label="individual")
        axis.plot(subject.t, Y[:, observable], "o", ms=3, color="k", label="data")
        axis.set_title(f"subject {subject.name if subject.name is not None else k}",
                       fontsize="small")
    axes[0].legend(fontsize="x-small")
    return axes


def plot_random_effects(est, covariates=None, *, ax=None):
    """The empirical-Bayes random effects, against a covariate per subject when given (a
    trend says the covariate explains between-subject variation and belongs in the model).

    Parameters
    ----------
    est : MixedEffectsODE
        A fitted population.
    covariates : dict of {str: array-like of shape (n_subjects,)}, optional
        One value per training subject (``subject_names_`` order); default: the random
        effects' histograms.
    ax : sequence of matplotlib Axes, optional
        One per random effect and covariate.

    Returns
    -------
    list of Axes
        One panel per random effect (and covariate).
    """
    check_is_fitted(est, "theta_")
    etas = est.random_effects_
    names = est.random_names_
    covariates = dict(covariates or {})
    pairs = [(j, c) for c in (covariates or [None]) for j in range(len(names))]
    axes = _axes(ax, len(pairs), width=3.2, height=2.8)
    for axis, (j, c) in zip(axes, pairs):
        if c is None:
            axis.hist(etas[:, j], bins=max(5, len(etas) // 4), color="C0", alpha=0.8)
            axis.set_xlabel(f"eta({names[j]})")
            axis.set_ylabel("subjects")
            continue
        values = np.asarray(covariates[c], dtype=np.float64).reshape(-1)
        if values.size != len(etas):
            raise ValueError(f"covariate {c!r} has {values.size} values for {len(etas)} "
                             "subjects.")
        axis.axhline(0.0, color="0.6", lw=0.8)
        axis.plot(values, etas[:, j], "o", ms=4)
        axis.set_xlabel(c)
        axis.set_ylabel(f"eta({names[j]})")
    return axes


def plot_vpc(est, subjects, *, observable=0, n_replicates=200, level=0.9, bins=None,
             ax=None, random_state=None):
    """Visual predictive check: the observed median and outer quantiles per time bin against
    the same statistics of data simulated from the fitted population (their ``level``
    bands over ``n_replicates`` replicate studies).

    Parameters
    ----------
    est : MixedEffectsODE
        A fitted population.
    subjects : list of Experiment
        The observed study (its design is simulated again).
    observable : int, default=0
        Which of the data's columns to check.
    n_replicates : int, default=200
        Simulated studies.
    level : float, default=0.9
        The outer quantiles drawn are ``(1 - level) / 2`` and ``(1 + level) / 2``.
    bins : array-like, optional
        Time-bin edges (default: the distinct observation times when there are at most 12,
        else 8 quantile bins).
    ax : matplotlib Axes, optional
        Where to draw; default: a new figure.
    random_state : int, RandomState or None
        Seed of the simulated studies.

    Returns
    -------
    Axes
        The panel drawn on.
    """
    check_is_fitted(est, "theta_")
    subjects = list(subjects)
    lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
    times = np.concatenate([np.asarray(s.t, dtype=np.float64).reshape(-1) for s in subjects])
    observed = np.concatenate([np.asarray(s.Y, dtype=np.float64).reshape(len(s.t), -1)
                               [:, observable] for s in subjects])
    simulated = np.concatenate([r[:, :, observable] for r in est.replicate_data(
        subjects, n_replicates=n_replicates, random_state=random_state)], axis=1)
    if bins is None:
        distinct = np.unique(times)
        if distinct.size <= 12:
            mid = (distinct[1:] + distinct[:-1]) / 2
            bins = np.concatenate([[distinct[0] - 1], mid, [distinct[-1] + 1]])
        else:
            bins = np.unique(np.quantile(times, np.linspace(0, 1, 9)))
            bins[-1] += 1e-9
    which = np.clip(np.digitize(times, bins) - 1, 0, len(bins) - 2)
    centres, obs_stats, sim_bands = [], [], []
    for k in range(len(bins) - 1):
        here = which == k
        if not here.any():
            continue
        values = observed[here]
        values = values[np.isfinite(values)]
        centres.append(np.median(times[here]))
        obs_stats.append(np.quantile(values, [lo_q, 0.5, hi_q]) if values.size
                         else [np.nan] * 3)
        per_replicate = np.quantile(simulated[:, here], [lo_q, 0.5, hi_q], axis=1)  # (3, R)
        sim_bands.append(np.quantile(per_replicate, [lo_q, hi_q], axis=1))  # (2, 3)
    centres, obs_stats, sim_bands = map(np.asarray, (centres, obs_stats, sim_bands))
    (axis,) = _axes(ax, 1, width=5.5, height=3.6)
    for j, (colour, label) in enumerate((("C0", f"{lo_q:.0%}"), ("C3", "median"),
                                         ("C0", f"{hi_q:.0%}"))):
        axis.fill_between(centres, sim_bands[:, 0, j], sim_bands[:, 1, j], color=colour,
                          alpha=0.2, label=f"simulated {label} ({level:.0%} band)")
        axis.plot(centres, obs_stats[:, j], "-o", color=colour, ms=3, lw=1.2,
                  label=f"observed {label}")
    axis.plot(times, observed, ".", color="0.4", ms=2)
    axis.set_xlabel("t")
    axis.legend(fontsize="x-small", ncol=2)
    return axis
