"""Where AdjointODE starts, and how it escapes a local minimum: random starts around
``theta0`` (Latin hypercube on the log scale), a start from another method's fit
(``init="bcdprox"``/``"wendy"``, looked up in the method table, never imported), the first data
start that a method on the data grid gives, and the refit of a poor fit over growing time
horizons (``grow_horizon``). Functions of the estimator: they read its settings and call its
``_solve``."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.utils import check_random_state

from .._methods import estimator_class
from ..diagnostics._adequacy import residual_runs, residuals
from ..diagnostics._assessment import POOR_FIT_RATIO, Restarts, misfit_ratios
from .._checks import check_positive
from ..exceptions import SklodeError, StartWarning, warn

__all__ = ["HORIZON_FRACTIONS", "HORIZON_MIN_SAMPLES", "HORIZON_RATIO", "data_start",
           "fit_other", "grown_horizon_fit", "random_starts", "start_from_init"]

#: The first parts of the time span that ``grow_horizon`` fits before the whole (each
#: experiment's, from its t0), each sqrt(2) times the one before, and the fewest samples a
#: part keeps. Each part starts from the fit of the one before, and a chaotic or
#: out-of-phase error grows over the added stretch: doubling (1/8, 1/4, 1/2) left 26 of 100
#: Lorenz-63 fits at 10 % noise in a local minimum 5-90 cost units above the one reached
#: from the truth; steps of sqrt(2) reach it at the same CPU (2.4 against 2.5 s a fit).
HORIZON_FRACTIONS = tuple(2.0 ** (k / 2) / 8 for k in range(6))  # 1/8 ... 1/sqrt(2)



HORIZON_MIN_SAMPLES = 10



#: ``grow_horizon`` refits a fit whose misfit ratio exceeds this in any observed state,
#: below ``POOR_FIT_RATIO``: the refit is kept only where it lowers the cost, so a lower
#: trigger costs CPU, never accuracy. Rossler at 10 % noise (1,001 samples) stopped in a
#: local minimum with ratios 1.3-1.46 on 3 of 100 draws, unwarned, 13-19 standard errors
#: off, at a cost 78 % above the optimum's (ratios 1.01-1.07).
HORIZON_RATIO = 1.25
#: ... and whose residuals say the miss is structure, not noise: a runs test z below this in
#: some observed state (p ~ 1.3e-3 for independent residuals), or a ratio above
#: POOR_FIT_RATIO. The ratio alone is the RMS residual over a noise level estimated without
#: the model, which heteroscedastic noise moves: SIR with I and R observed at 5 % relative
#: noise, fitted at the optimum, had ratios up to 1.69 and refitted 11 of 20 draws (4x the
#: CPU of the fit, never a lower cost), with runs z between -2.8 and 1.4; a local minimum of
#: an oscillator leaves long same-sign runs.
HORIZON_RUNS_Z = -3.0



def _first_part(data, fraction):
    """``data`` cut to the samples within the first ``fraction`` of each experiment's time
    span (at least ``HORIZON_MIN_SAMPLES``), or None where that keeps them all."""
    experiments, shorter = [], False
    for e in data.experiments:
        end = e.t0 + fraction * (e.t[-1] - e.t0)
        keep = max(int(np.searchsorted(e.t, end, side="right")), HORIZON_MIN_SAMPLES)
        if keep < e.t.size:
            shorter = True
            e = replace(e.at_rows(slice(keep)),
                        doses=tuple(d for d in e.doses if d[0] <= e.t[keep - 1]))
        experiments.append(e)
    return replace(data, experiments=tuple(experiments)) if shorter else None


def grown_horizon_fit(estimator, objective, res, theta_start, posed, fitted):
    """``((objective, result) or None, solves)``: the fit from ``theta_start`` over
    growing time horizons (``HORIZON_FRACTIONS`` of every experiment's span, then all),
    each from the one before, where the fit ``res`` misses the data by more than
    ``HORIZON_RATIO`` noise levels with residuals that run in stretches
    (``HORIZON_RUNS_Z``; or by more than ``POOR_FIT_RATIO``) and the grown fit's cost is
    lower; None otherwise."""
    x0s, theta = objective.split(objective.to_z(res.u))
    if posed.transformed is not None:
        x0s = posed.transformed.to_x(x0s)
    ratios = misfit_ratios(estimator.model, theta, posed.data,
                           np.reshape(x0s, (-1, posed.data.n_states)),
                           estimator._simulation_options())
    if ratios is None or np.all(ratios <= HORIZON_RATIO):
        return None, 0
    if np.all(ratios <= POOR_FIT_RATIO):  # a small miss: refit only where it is structure
        fit_residuals = residuals(estimator.model, theta, posed.data,
                                  np.reshape(x0s, (-1, posed.data.n_states)),
                                  estimator._simulation_options())
        runs = None if fit_residuals is None else residual_runs(fit_residuals)[0]
        if runs is not None and np.all(np.isfinite(runs)) and np.all(runs >= HORIZON_RUNS_Z):
            return None, 0
    solves, n_fitted = 0, int(fitted.sum())
    theta, whole = theta_start, posed.data
    for fraction in (*HORIZON_FRACTIONS, 1.0):
        data = whole if fraction == 1.0 else _first_part(whole, fraction)
        if data is None:  # no shorter than the whole
            continue
        n_x0 = sum(int(e.estimate_x0.sum()) for e in data.experiments)
        if (fraction < 1.0 and sum(int(e.mask.sum()) for e in data.experiments)
                < 2 * (n_fitted + n_x0)):  # too few values to pin the unknowns down
            continue
        grown, result = estimator._solve(posed._replace(data=data), theta, fitted)
        solves += grown.n_forward + grown.n_derivative
        if isinstance(result, Exception):
            return None, solves
        x0s, theta = grown.split(grown.to_z(result.u))
        whole = posed.data.with_initial_states(x0s)  # the next part starts from this fit
    if grown.cost(result.u) < objective.cost(res.u):
        return (grown, result), solves
    return None, solves


def random_starts(estimator, theta0, fitted, n_random=None, rng=None):
    """``theta0`` and ``n_starts - 1`` random starts, drawn up front from
    ``random_state`` (so the result does not depend on ``n_jobs``). Where every fitted
    parameter has finite bounds the starts cover the box: uniform on the optimiser's
    scale (log-uniform for ``positive`` parameters), as multistart tools draw them;
    otherwise each fitted parameter is ``theta0`` multiplied by ``exp(N(0, 1))`` (signs
    kept, a factor of e at one standard deviation), a zero one drawn from ``N(0, 1)``.
    ``start_sampling="latin_hypercube"`` takes the uniform numbers behind either from a
    Latin hypercube. Returns the starts and one seed per random start for drawing it
    again; ``n_random`` and ``rng`` draw that many plain random starts from ``rng``
    instead (a start drawn again)."""
    from scipy.stats import norm, qmc

    again = rng is not None
    n_random = estimator.n_starts - 1 if n_random is None else n_random
    if n_random == 0:
        return [theta0.copy()], []
    rng = rng if again else check_random_state(estimator.random_state)
    lower, upper = estimator._theta_limits()
    log_scale = check_positive(estimator.positive, estimator.model.n_params)
    box = bool(np.all(np.isfinite(lower[fitted]) & np.isfinite(upper[fitted])))
    # scipy's Latin hypercube takes a Generator, seeded from random_state's stream
    latin = (qmc.LatinHypercube(d=theta0.size, rng=np.random.default_rng(
        rng.randint(2**31))) if estimator.start_sampling == "latin_hypercube" and not again
             else None)
    if box:  # the held parameters' (maybe infinite) bounds are not drawn from
        lower, upper = np.where(fitted, lower, 0.0), np.where(fitted, upper, 0.0)
        on_log = log_scale & (lower > 0)
        lo = np.where(on_log, np.log(np.where(lower > 0, lower, 1)), lower)
        hi = np.where(on_log, np.log(np.where(upper > 0, upper, 1)), upper)
        U = (latin.random(n_random) if latin is not None
             else rng.uniform(size=(n_random, theta0.size)))
        draws = lo + (hi - lo) * U
        starts = np.where(on_log, np.exp(draws), draws)
    else:
        draws = (norm.ppf(latin.random(n_random)) if latin is not None
                 else rng.standard_normal((n_random, theta0.size)))
        starts = np.where(theta0 != 0, theta0 * np.exp(draws), draws)
    # drawn after the starts, so that they are the same with or without redraws
    reseeds = [] if again else list(rng.randint(2**31, size=n_random))
    return [theta0.copy()] + [np.where(fitted, start, theta0) for start in starts], reseeds


def start_from_init(estimator, t, Y, data):
    """``(theta0, data, note)``: the start ``init`` gives (the data with its estimated
    initial components replaced by the other fit's ``x0_``), or ``theta0`` and why not."""
    if estimator.init is None:
        return estimator._initial_theta(), data, ""
    other_name, other = fit_other(estimator, estimator.init, t, Y)
    if isinstance(other, Exception):
        shown = estimator.init if isinstance(estimator.init, str) else other_name
        warn(f"init={shown!r} could not "
             f"fit these data, so {type(estimator).__name__} starts from theta0 instead: "
             f"{other}", StartWarning)
        return (estimator._initial_theta(), data,
                f"; init={other_name} could not fit these data ({other}), so the start "
                "was theta0")
    theta0 = estimator._initial_theta()
    return (usable_start(estimator, other.theta_, theta0, np.ones(theta0.size, bool)),
            data.with_initial_states(other.x0_), f"; started from {other_name}'s fit")


def fit_other(estimator, init, t, Y, errors=(ValueError, SklodeError)):
    """``(name, fitted estimator)`` of ``init`` ("bcdprox", "wendy" or an estimator) on
    the same data, posed with this estimator's settings, or ``(name, exception)`` where
    it cannot fit them (``errors``)."""
    if isinstance(init, str):
        Other = estimator_class(init)  # the method table: no sibling package imported
        other = Other(estimator.model, theta0=estimator.theta0, x0=estimator.x0,
                      estimate_x0=estimator.estimate_x0, t0=estimator.t0,
                      observed=estimator.observed,
                      fixed=estimator.fixed, bounds=estimator.bounds, positive=estimator.positive)
    else:
        other = clone(init)
    try:
        with warnings.catch_warnings():  # its verdicts are not this fit's
            warnings.simplefilter("ignore")
            other.fit(t, Y)
    except errors as exc:
        return type(other).__name__, exc
    return type(other).__name__, other


def usable_start(estimator, theta, theta0, fitted):
    """Another method's ``theta`` as a start: ``theta0`` for the held parameters, and for a
    ``positive`` parameter that the other method put at or below zero (WENDy's linear
    regression and BCD-prox are not held positive), where log scaling cannot start."""
    log_scale = check_positive(estimator.positive, estimator.model.n_params)
    theta = np.asarray(theta, dtype=np.float64)
    keep = fitted & np.isfinite(theta) & ~(log_scale & ~(theta > 0))
    return np.where(keep, theta, theta0)


def data_start(estimator, t, Y):
    """``(name, fitted estimator)`` of the first of WENDy and BCD-prox that can fit these
    data (neither integrates the ODE from a guess), or None."""
    for method in ("wendy", "bcdprox"):
        # any failure: this start is an extra, never a reason for the fit to fail
        name, other = fit_other(estimator, method, t, Y, errors=Exception)
        if not isinstance(other, Exception) and np.all(np.isfinite(other.theta_)):
            return name, other
    return None


#: Random starts a poor single-start fit is refitted from before its warning calls it a local
#: minimum or not (about three more fits, paid only by a poor fit).
CHECK_RESTARTS = 3
# the init= name of each estimator data_start may fit
_INIT_NAMES = {"WENDyODE": "wendy", "BCDProxODE": "bcdprox"}


def restart_check(estimator, t, Y, cost, start_costs, best, outcomes, starts, theta0,
                  fitted):
    """:class:`Restarts` for a poor fit's warning: the other starts of this fit where
    there were some, else ``CHECK_RESTARTS`` random ones fitted now."""
    if len(starts) > 1:
        others = [k for k in range(len(starts)) if k != best]
        thetas = [outcomes[k][0].split(outcomes[k][0].to_z(outcomes[k][1].u))[1]
                  if not isinstance(outcomes[k][1], Exception) else theta0
                  for k in others]
        return Restarts(cost, start_costs[others], thetas,
                        f"this fit's {len(others)} other start(s)",
                        ["theta0 near that point"] * len(others))
    # none yet: refit from CHECK_RESTARTS others now
    posed = starts[0][1]
    tried = []
    # random starts around a poor theta0 are mostly poor too: the first other start is
    # a gradient-free method's fit, which does not integrate from a guess
    found = data_start(estimator, t, Y) if estimator.init is None else None
    if found is not None:
        name, other = found
        tried.append((usable_start(estimator, other.theta_, theta0, fitted),
                      estimator._fitted_states(posed.data.with_initial_states(other.x0_))))
        what = f"a start from {name}'s fit and "
        remedies = [f"init={_INIT_NAMES.get(name, name)!r} (or n_starts=2, whose second "
                    f"start is {name}'s fit)"]
    else:
        what, remedies = "", []
    n_random = CHECK_RESTARTS - len(tried)
    tried += [(start, posed) for start in random_starts(
        estimator, theta0, fitted, n_random=n_random,
        rng=check_random_state(estimator.random_state))[0][1:]]
    what += (f"{n_random} random starts around theta0 (a factor of e at one standard "
             "deviation)" if estimator.bounds is None else f"{n_random} random starts in the "
             "bounds")

    def one(start, posed):
        with warnings.catch_warnings():  # their own convergence is not the question
            warnings.simplefilter("ignore")
            objective, res = estimator._solve(posed, start, fitted)
        if isinstance(res, Exception):
            return np.inf, start
        return (objective.cost(res.u) - estimator._cost_shift(objective),
                objective.split(objective.to_z(res.u))[1])

    outcomes = Parallel(n_jobs=estimator.n_jobs, prefer="threads")(
        delayed(one)(start, posed) for start, posed in tried)
    seed = ("" if estimator.random_state is None
            else f", random_state={estimator.random_state!r}")
    remedies += [f"more starts (n_starts={CHECK_RESTARTS + 1}{seed}) or theta0 near that "
                 "point"] * n_random
    return Restarts(cost, np.array([c for c, _ in outcomes]), [t for _, t in outcomes],
                    what, remedies)
