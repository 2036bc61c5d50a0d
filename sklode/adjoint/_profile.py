"""Profile-likelihood confidence intervals (the interval pyPESTO and PESTO offer).

For one parameter ``theta_j`` the profile is the cost minimised over everything else with
``theta_j`` held at a value ``v``. The interval at level ``q`` is where the profile stays
within ``chi2_1(q) / 2`` noise variances of the optimum; unlike ``theta_ +- z stderr`` it
follows a curved or one-sided cost, and it is unbounded on a side where the profile never
climbs that high (a practically unidentifiable parameter).

:func:`profile_interval` finds the two ends for a profile given as a function; the estimator
supplies that function (a warm-started refit per value).
"""

from __future__ import annotations

import warnings

import numpy as np
from joblib import Parallel, delayed
from sklearn.utils.validation import check_is_fitted

from .._checks import check_fixed
from ..diagnostics._uncertainty import reduced_chi_square
from ..exceptions import ConvergenceWarning, IdentifiabilityWarning, PoorFitWarning, warn

__all__ = ["profile_interval", "profile_intervals_of"]


def profile_interval(rise, center, step, *, lower=-np.inf, upper=np.inf, max_steps=12,
                     xtol=1e-3):
    """The interval where ``rise(v) <= 1`` around ``center`` (where ``rise`` is 0).

    ``rise`` is the profile's increase over the optimum in units of the threshold, so the
    ends solve ``rise(v) = 1``. Each side walks out from ``center`` by ``step``, doubling
    until the rise passes 1 (or a limit is reached), then refines by regula falsi on
    ``sqrt(rise)``, which is linear in ``v`` where the cost is quadratic, so one or two
    refinements usually suffice. A rise far above the quadratic extrapolation of the last
    inside point is retried with half the step (up to four times) before it is believed:
    a refit warm-started too far away can miss the valley floor. Where the ODE cannot be
    solved (``rise`` is inf) the end is the last solvable value found by bisection.

    Parameters
    ----------
    rise : callable
        ``rise(v, side) -> float``: the profile's rise at ``v`` (``side`` is -1 or +1, so the
        caller can warm-start each side from its previous point); ``inf`` where the ODE
        cannot be solved.
    center : float
        The optimum.
    step : float
        First step from it (e.g. two standard errors), positive.
    lower, upper : float, default=-inf, inf
        Limits of the parameter (bounds); an end that would pass one is the limit itself when
        the rise there is still below 1.
    max_steps : int, default=12
        Doublings per side before the side is declared unbounded.
    xtol : float, default=1e-3
        Relative accuracy of the ends, in units of ``step``.

    Returns
    -------
    (float, float)
        The ends; ``-inf``/``inf`` where the profile never rises to the threshold within
        ``max_steps`` doublings (or before an infinite limit), the last solvable value
        where beyond it the ODE could not be solved.
    """
    ends = []
    for side, limit in ((-1, lower), (+1, upper)):
        inside, inside_rise = center, 0.0
        increment, end, halvings, unsolvable = step, None, 0, False
        for _ in range(max_steps + _MAX_HALVINGS):
            v = inside + side * increment
            if side * (v - limit) >= 0:  # at or past the limit
                v = limit
            value = rise(v, side)
            unsolvable |= not np.isfinite(value)
            if value >= 1.0 and halvings < _MAX_HALVINGS and _jumped(
                    center, inside, inside_rise, v, value):
                increment, halvings = 0.5 * increment, halvings + 1
                continue  # a refit that lost the valley, or a cliff: come closer first
            if value >= 1.0:
                end = _refine(rise, side, inside, inside_rise, v, value, xtol * step)
                break
            if v == limit:
                end = limit
                break
            inside, inside_rise, increment, halvings = v, value, 2.0 * increment, 0
        if end is None:  # never rose to the threshold: unbounded, or bounded by failure
            end = inside if unsolvable else side * np.inf
        ends.append(end)
    return ends[0], ends[1]


# Halvings of a step whose rise jumped far beyond the quadratic extrapolation.
_MAX_HALVINGS = 4


def _jumped(center, inside, inside_rise, v, value):
    """Whether the rise at ``v`` is far above what the quadratic through the optimum and
    the last inside point predicts (a warm-started refit that lost the valley floor, which
    a shorter step recovers, or a true cliff, which the shorter steps confirm)."""
    if inside == center:  # no inside point yet: nothing to extrapolate
        return False
    expected = inside_rise * ((v - center) / (inside - center)) ** 2
    return value > max(10.0 * expected, 2.0)


def _refine(rise, side, a, rise_a, b, rise_b, xtol, max_iter=10):
    """The crossing of ``rise = 1`` between ``a`` (below) and ``b`` (above): regula falsi
    on ``sqrt(rise) - 1`` (Illinois variant, so a strongly curved side still converges),
    bisection while ``b`` is a point where the ODE cannot be solved."""
    fa = np.sqrt(rise_a) - 1.0
    fb = np.sqrt(rise_b) - 1.0 if np.isfinite(rise_b) else np.nan
    last = 0  # which end the previous step replaced: -1 a, +1 b
    for _ in range(max_iter):
        v = 0.5 * (a + b) if np.isnan(fb) else b - fb * (b - a) / (fb - fa)
        value = rise(v, side)
        if not np.isfinite(value):  # unsolvable: an upper end to bisect towards
            b, fb, last = v, np.nan, +1
            continue
        f = np.sqrt(value) - 1.0
        if abs(f) < 1e-3 or abs(b - a) < xtol:
            return v
        if f > 0:
            b, fb = v, f
            if last == +1:
                fa *= 0.5
            last = +1
        else:
            a, fa = v, f
            if last == -1 and not np.isnan(fb):
                fb *= 0.5
            last = -1
    return a if np.isnan(fb) else b - fb * (b - a) / (fb - fa)


def profile_intervals_of(estimator, t, Y, level, parameters):
    """:meth:`AdjointODE.profile_intervals <sklode.AdjointODE.profile_intervals>` of a fitted
    ``estimator``: each chosen parameter's ends by :func:`profile_interval`, one warm-started
    refit per point, the parameters in parallel over ``n_jobs`` threads."""
    from scipy.stats import chi2 as chi_square

    check_is_fitted(estimator)
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be strictly between 0 and 1, got {level!r}.")
    model = estimator.model
    fitted = check_fixed(estimator.fixed, estimator.theta_, model)[0]
    data = estimator._validate_data(t, Y, warn_initial_time=False)
    problem = estimator._fitted_states(data.with_initial_states(estimator.x0_))
    objective, u = estimator._pose(problem, estimator.theta_, fitted)
    best = objective.cost(u)
    if not np.isclose(best, estimator.loss_history_[-1], rtol=1e-6, atol=1e-12):
        raise ValueError(
            f"profile_intervals needs the data fit() saw: the cost at the fit is "
            f"{best:.6g} on these data, {estimator.loss_history_[-1]:.6g} on the fitted ones.")
    # the cost is -log L up to a constant when the noise is modelled: no common noise
    # factor to estimate from the residuals
    noise_factor = (1.0 if getattr(objective, "modelled_noise", False)
                    else reduced_chi_square(objective, u))
    threshold = 0.5 * chi_square.ppf(float(level), 1) * noise_factor
    chosen = estimator._profiled(parameters, fitted)
    lower, upper = estimator._theta_limits()

    def one(j):
        lowest = [best]
        warm = {-1: (estimator.theta_.copy(), problem), +1: (estimator.theta_.copy(), problem)}
        held = fitted.copy()
        held[j] = False

        def rise(value, side):
            theta, posed = warm[side]
            theta = theta.copy()
            theta[j] = value
            objective, res = estimator._solve(posed, theta, held)
            if isinstance(res, Exception):
                return np.inf
            cost = objective.cost(res.u)
            lowest[0] = min(lowest[0], cost)
            value = max(cost - best, 0.0) / threshold
            if value < 1.0:  # inside: the next point on this side starts from here
                x0s, theta = objective.split(objective.to_z(res.u))
                warm[side] = (theta, posed._replace(
                    data=posed.data.with_initial_states(x0s)))
            return value

        stderr = estimator.theta_stderr_[j]
        step = (2.0 * stderr if np.isfinite(stderr) and stderr > 0
                else 0.1 * max(abs(estimator.theta_[j]), 1e-3))
        return profile_interval(rise, estimator.theta_[j], step, lower=lower[j],
                                upper=upper[j]), lowest[0]

    with warnings.catch_warnings():  # the refits' own convergence is not the question
        warnings.simplefilter("ignore", ConvergenceWarning)
        outcomes = Parallel(n_jobs=estimator.n_jobs, prefer="threads")(
            delayed(one)(j) for j in chosen)
    intervals = np.column_stack([estimator.theta_, estimator.theta_])
    flat = []
    for j, (ends, lowest) in zip(chosen, outcomes):
        intervals[j] = ends
        # an end at infinity or at a limit: the profile stayed below the threshold there
        for end, limit, side in ((ends[0], lower[j], "below"), (ends[1], upper[j], "above")):
            if np.isinf(end) or end == limit:
                flat.append(f"{model.param_names[j]!r} {side} {estimator.theta_[j]:.4g} "
                            f"(flat up to {end:.4g})")
        if lowest < best - 1e-6 * max(best, threshold):
            warn(
                f"Profiling {model.param_names[j]!r} found a cost {lowest:.6g} below the "
                f"fit's {best:.6g}: theta_ is not the optimum of these data. Refit with "
                "another theta0, init= or n_starts.", PoorFitWarning)
    if flat:
        warn(f"{type(estimator).__name__}: the profile likelihood stays within the "
             f"{100 * float(level):g} % threshold all the way to a limit for "
             + "; ".join(flat) + ": the data do not bound these parameters on that side "
             "(practically unidentifiable there), so those ends are the limits, not "
             "measurements.", IdentifiabilityWarning)
    return intervals
