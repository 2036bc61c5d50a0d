"""Does a fit describe its own training data? The checks every estimator runs after its fit.

The misfit ratio (RMS residual over the noise estimated from the data), R^2 on series too short
for that, the residual runs tests (:mod:`._adequacy`) and, for a fit that is not itself an
output-error optimum, an AdjointODE polish from it; :func:`assess_fit` runs them and warns
(:class:`~sklode.exceptions.PoorFitWarning`). Also the fit's ``-log L``, AIC and BIC.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from dataclasses import dataclass

import numpy as np

from .._noise_level import MIN_SAMPLES, estimate_noise
from .._validation import experiment_label
from ..exceptions import PoorFitWarning, SklodeError, warn
from ..observation._likelihood import data_neg_log_likelihood, information_criteria
from ..outputerror._predict import predicted_observables, states_at_observations
from ._adequacy import (
    RUNS_FRACTION,
    experiment_differences,
    RUNS_Z,
    polish_gap,
    residual_runs,
    residual_time_means,
    residuals,
)

__all__ = ["POOR_FIT_RATIO", "Polish", "Restarts", "assess_fit", "explained_variance",
           "isolated_extreme", "likelihood_attributes", "misfit_ratios", "r2_by_state"]

logger = logging.getLogger("sklode")


#: A fit whose prediction misses the data of an observed state by more than this many noise
#: levels (RMS of the residual over the noise estimated from the data) is called poor.
#: Measured on the papers' problems: adequate fits 0.6-1.8 (the estimator slightly
#: underestimates the noise of smooth oscillations); poor ones 3.1 (AdjointODE stuck on
#: FitzHugh-Nagumo, R^2 -0.01), 4.7 (BCD-prox on a 21-point yearly cycle, R^2 0.69 where the
#: optimum reaches 0.99), 10.8.
POOR_FIT_RATIO = 2.5



#: A BCD-prox or WENDy fit whose misfit ratio exceeds this (adequate fits measured 0.6-1.8, most
#: near 1) is checked by an AdjointODE polish as well (:mod:`sklode.diagnostics._adequacy`); so is
#: every fit on series too short for the ratio. The polish costs about one more fit.
POLISH_RATIO = 1.5



#: On a series too short to estimate its noise (fewer than 16 complete rows), a fit is called
#: poor when its trajectory explains less than this fraction of the data's variance. Measured
#: on the 14-day boarding-school outbreak: the good fits reach R^2 0.85 (AdjointODE) and 0.67
#: (BCD-prox on the yearly grid), the failed one 0.10 (BCD-prox with beta driven to 0).
POOR_FIT_R2 = 0.5



# Replicates of one steady state are judged only where the fit misses their mean by more
# than this many standard errors of it (an adequate fit misses it by about one).
_REPLICATE_MISS = 5.0



# The noise level is floored at this fraction of the state's RMS: on (nearly) noise-free data
# a misfit below 1 % of the signal is never called poor.
_NOISE_FLOOR = 0.01



# A poor-fit warning names an observation further from all the others of its state than
# their whole range: no sampled trajectory jumps that far in one value (a peak sampled by a
# single point can, and is then named with an "if"); a typo or a unit slip does.
_ISOLATION = 1.0



def likelihood_attributes(model, theta, data, x0s, options, *, sigma, noise_kind, n_fitted):
    """``neg_log_likelihood_``, ``aic_`` and ``bic_`` of a fit on its training data.

    ``-log L`` follows PEtab's convention (every constant); with no known noise level
    (``sigma=None`` and no ``noise_sd``) one scale per observable is the maximum-likelihood
    one at the fit and counts as an estimated parameter.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : array-like of shape (n_experiments, n_states)
    options : dict
    sigma : float, array-like or None
    noise_kind : str or dict
    n_fitted : int
        Estimated parameters and initial values.

    Returns
    -------
    dict
    """
    try:
        states, thetas = states_at_observations(model, theta, data, x0s, options)
        nll, n_profiled = data_neg_log_likelihood(model, data.experiments, data.observed,
                                                  states, thetas, sigma, noise_kind)
    except SklodeError:
        nll, n_profiled = np.inf, 0
    n_values = sum(int(e.mask.sum()) for e in data.experiments)
    aic, bic = information_criteria(nll, n_fitted + n_profiled, n_values)
    return {"neg_log_likelihood_": nll, "aic_": aic, "bic_": bic}



def explained_variance(model, theta, data, x0s, options):
    """R² of the prediction over the observed entries, per observed state pooled over the
    experiments, then averaged over the states (``-inf`` if it cannot be integrated; ``inf``
    where no state varies between what the model can tell apart: replicates of one steady
    state leave it nothing to explain). Where replicates share a time and a state (replicate
    experiments, PEtab's repeated rows), it is the R² of their means: their spread around
    them is noise no trajectory can explain (Liu et al. 2025, five tumour counts per day:
    0.38 of the raw variance at the collection's own optimum).

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : ndarray of shape (n_experiments, n_states)
    options : dict
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    float
    """
    columns = list(data.observed)
    try:  # one solve per experiment gives both the observables and the states
        with np.errstate(all="ignore"):
            states, thetas = states_at_observations(model, theta, data, x0s, options)
            P = np.vstack([model.observe_values(e.t, X, th)[:, columns]
                           for e, X, th in zip(data.experiments, states, thetas)])
    except SklodeError:
        return -np.inf
    Y = np.vstack([np.where(e.mask, e.Y, np.nan) for e in data.experiments])
    # what the model can tell apart: its state at a time (replicate experiments at one
    # steady state share both, and their spread is noise alone; a flat trajectory under
    # data that move still has several times)
    settings = np.array([hash((float(t), tuple(np.round(x, 12))))
                         for e, X in zip(data.experiments, states) for t, x in zip(e.t, X)])
    # a constant column has no variance to explain, nor one measured under one setting,
    # unless the fit misses the replicates' mean by more than _REPLICATE_MISS standard
    # errors of it (a fit stuck away from a steady state still shows)
    def judged(k):
        seen = np.isfinite(Y[:, k])
        if np.ptp(Y[seen, k]) <= 0:
            return False
        if np.unique(settings[seen]).size > 1:
            return True
        miss = np.mean(Y[seen, k] - P[seen, k])
        return bool(abs(miss) > _REPLICATE_MISS * np.std(Y[seen, k], ddof=1)
                    / np.sqrt(seen.sum()))

    varying = [judged(k) for k in range(len(columns))]
    if not any(varying):
        return np.inf
    from sklearn.metrics import r2_score

    scores = []
    for k in np.flatnonzero(varying):
        seen = np.isfinite(Y[:, k])
        keys, group = np.unique(settings[seen], return_inverse=True)
        if 1 < keys.size < seen.sum():  # replicates: the model can reach their means only
            counts = np.bincount(group)
            means = np.bincount(group, Y[seen, k]) / counts
            if np.ptp(means) > 0:
                scores.append(r2_score(means, np.bincount(group, P[seen, k]) / counts))
                continue
        scores.append(r2_score(Y[seen, k], P[seen, k]))
    return float(np.mean(scores))



def isolated_extreme(data, state_names):
    """A sentence naming an observation that lies beyond all the others of its state by more
    than their whole range, or an empty string. A typo or a unit error in one value drags
    every method's fit (one prey count of 1e4 among 82 values of about 5 moved BCD-prox's a
    from 2 to 1,473), and the fit's residuals then point elsewhere; the data alone show it.

    Parameters
    ----------
    data : ExperimentData
    state_names : tuple of str
        The model's states.

    Returns
    -------
    str
    """
    for j, state in enumerate(data.observed):
        values, where = [], []
        for k, e in enumerate(data.experiments):
            rows = np.flatnonzero(e.mask[:, j])
            values.append(e.Y[rows, j])
            where += [(k, e.t[i]) for i in rows]
        values = np.concatenate(values)
        if values.size < 3:
            continue
        order = np.argsort(values)
        for extreme, nearest, rest in ((order[-1], order[-2], values[order[:-1]]),
                                       (order[0], order[1], values[order[1:]])):
            spread = np.ptp(rest)
            if spread > 0 and abs(values[extreme] - values[nearest]) > _ISOLATION * spread:
                k, time = where[extreme]
                exp = (f" of {experiment_label(k, data.experiments[k].name)}"
                       if data.several else "")
                return (f" The value {values[extreme]:.6g} of {state_names[state]!r} at t = "
                        f"{time:g}{exp} lies far outside all its others ({rest.min():.4g} to "
                        f"{rest.max():.4g}): if it is a typo or a unit error, set it to NaN "
                        "(a missing value) and fit again.")
    return ""



def r2_by_state(Y_true, Y_pred, sample_weight=None):
    """scikit-learn's R² of each column over its observed (finite) entries.

    Parameters
    ----------
    Y_true : ndarray of shape (n_samples, n_observed)
        Observations, NaN where missing.
    Y_pred : ndarray of shape (n_samples, n_observed)
    sample_weight : ndarray of shape (n_samples,), optional

    Returns
    -------
    list of float
        One R² per column.
    """
    from sklearn.metrics import r2_score

    scores = []
    for column in range(Y_true.shape[1]):
        present = np.isfinite(Y_true[:, column])
        scores.append(r2_score(Y_true[present, column], Y_pred[present, column],
                               sample_weight=None if sample_weight is None
                               else sample_weight[present]))
    return scores



def misfit_ratios(model, theta, data, x0s, options):
    """RMS of each observed state's residual over its noise level, pooled over experiments.

    The prediction integrates the ODE from each experiment's ``x0`` at its ``t0``; the noise
    of each experiment is estimated from its complete rows by the model-free high-order
    difference filter (:func:`sklode.wendy.estimate_noise`, which needs 16 samples),
    floored at ``_NOISE_FLOOR`` of the state's RMS. A prediction that cannot be integrated
    counts as an infinite misfit.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : ndarray of shape (n_experiments, n_states)
    options : dict
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    ndarray of shape (n_observed,) or None
        None when no experiment has enough complete rows to estimate its noise.
    """

    columns = list(data.observed)
    residual2 = np.zeros(len(columns))
    noise2 = np.zeros(len(columns))
    for x0, e in zip(x0s, data.experiments):
        complete = e.mask.all(axis=1)
        if complete.sum() < MIN_SAMPLES:
            continue
        t, Y = e.t[complete], e.Y[complete]
        try:
            with np.errstate(all="ignore"):
                P = predicted_observables(model, theta, e, x0, t, options)[:, columns]
        except SklodeError:
            return np.full(len(columns), np.inf)
        floor = _NOISE_FLOOR * np.sqrt(np.mean(Y**2, axis=0))
        residual2 += np.sum((Y - P) ** 2, axis=0)
        noise2 += t.size * np.maximum(estimate_noise(t, Y), floor) ** 2
    if not np.any(noise2 > 0):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.sqrt(residual2 / noise2)


@dataclass(frozen=True)
class Polish:
    """How a fit was posed (:func:`assess_fit`): the fitted-parameter mask and the fit's noise
    settings, which the output-error checks pose again, and the ``init=`` name that starts
    AdjointODE from this method's fit (named in the warning's advice); ``init=None``: no
    AdjointODE polish (the fit is an output-error optimum already, or bounds apply that the
    polish could leave)."""

    fitted: np.ndarray
    sigma: object
    noise_kind: object
    positive: object
    init: str | None


@dataclass(frozen=True)
class Restarts:
    """Refits of an output-error fit from other starts (:func:`assess_fit` asks for them only
    when the fit is poor, to test "a local minimum" before saying it).

    Attributes
    ----------
    cost : float
        The fit's cost.
    costs : ndarray of shape (n_restarts,)
        Each other start's final cost (inf where it could not be integrated).
    thetas : list of ndarray
        Each other start's final parameters.
    tried : str
        What the other starts were, for the message (e.g. "3 random starts").
    remedies : list of str
        What to pass to reach each other start's optimum (e.g. "init='wendy'").
    """

    cost: float
    costs: np.ndarray
    thetas: list
    tried: str
    remedies: list


#: A restart whose cost is below the fit's by more than this fraction found another optimum.
#: The optimiser stops at a relative cost change of ``tol`` (1e-8 by default): two runs to the
#: same optimum agree to far better than this.
_SAME_OPTIMUM = 1e-4


def _pooling_sentence(differences):
    """Evidence that the experiments differ (a pooled parameter is the problem), or ''."""
    if differences is None or not differences.differ:
        return ""
    return (f" The experiments differ from one another: parameters of each experiment's own "
            f"would remove {100 * differences.share:.0f} % of the residual sum of squares "
            f"(F = {differences.f:.3g}, where independent noise stays below "
            f"{differences.threshold:.3g}), so a parameter pooled over them differs between "
            "them: MixedEffectsODE fits one per experiment (random=[...]), or give each its "
            "own through Experiment(conditions=...).")


def _optimizer_evidence(name, restarts, gap, polish, advice, ratio=None):
    """What was tried to tell a local minimum from a model that cannot describe the data:
    ``(sentence, the optimiser is the problem)``; the method's own ``advice`` only where
    nothing could be tried, and then marked untried. ``ratio``: the fit's worst misfit
    ratio, which the polished cost scales to say whether the better point is adequate."""
    if restarts is not None:
        finite = np.isfinite(restarts.costs)
        if finite.any():
            costs = np.where(finite, restarts.costs, np.inf)
            # the first start that reached the lowest optimum (to its tolerance): the start
            # from another method's fit, tried first, is named before a random one
            k = int(np.flatnonzero(costs <= costs.min() + _SAME_OPTIMUM * abs(costs.min()))[0])
            lowest = restarts.costs[k]
            if lowest < restarts.cost - _SAME_OPTIMUM * abs(restarts.cost):
                theta = np.array2string(np.asarray(restarts.thetas[k]), precision=4)
                return (f" Tried {restarts.tried}: one reached a cost {lowest:.6g}, "
                        f"{restarts.cost - lowest:.4g} below this fit's "
                        f"{restarts.cost:.6g}, at theta {theta}: this fit is a local "
                        f"minimum. Fit with {restarts.remedies[k]}.", True)
            return (f" Tried {restarts.tried}: {int(finite.sum())} reached no lower cost "
                    f"(lowest {lowest:.6g}, this fit {restarts.cost:.6g}), so the optimiser "
                    "is not the likely problem: the model, as posed, does not describe these "
                    "data.",
                    False)
    if gap is not None:
        drop = f"from {gap.cost:.6g} to {gap.polished_cost:.6g}"
        # the worst misfit ratio at the polished point (the RMS residual scales as sqrt)
        after = (None if ratio is None or not gap.cost > 0
                 else ratio * np.sqrt(gap.polished_cost / gap.cost))
        still = ("" if after is None or after <= POOR_FIT_RATIO else
                 f" Even there it misses by about {after:.3g} noise levels: the model, as "
                 "posed, does not describe these data either.")
        if gap.statistic > gap.threshold:
            return (f" An AdjointODE polish from this fit lowers the cost {drop} "
                    f"(to theta {np.round(gap.theta, 4).tolist()}), so {name} stopped short "
                    f"of the output-error optimum: fit AdjointODE(init={polish.init!r}) for "
                    f"it.{' Within ' + name + ': ' + advice if advice else ''}{still}", True)
        if gap.x0_statistic > gap.x0_threshold:
            return (f" {name}'s theta is as good as the output-error optimum (an AdjointODE "
                    f"polish moves it by {gap.statistic:.1f} residual variances, where the "
                    f"noise explains up to {gap.threshold:.1f}), but its x0_ is not: "
                    f"refitting the initial state with theta held lowers the cost from "
                    f"{gap.cost:.6g} to {gap.held_cost:.6g}. AdjointODE(init={polish.init!r}) "
                    f"refits x0 from this fit.{still}", True)
        return (f" An AdjointODE polish from this fit lowers the cost only {drop} "
                f"({gap.statistic:.1f} residual variances, where the noise explains up to "
                f"{gap.threshold:.1f}): {name}'s estimate is as good as the output-error "
                "optimum here, and the model, as posed, does not describe these data.", False)
    return (f" Not tried, so only a possibility: {advice}" if advice else "", None)


#: Off inside :func:`without_assessment`: a fit that is a means to another (a population
#: fit's pooled start, whose subjects differ by design) is not judged.
_ASSESSING = contextvars.ContextVar("sklode_assessing", default=True)


@contextlib.contextmanager
def without_assessment():
    """Fits inside this context skip :func:`assess_fit` (its attributes None): for a fit
    that only starts another (MixedEffectsODE's pooled start spent a fifth of Phenobarb's
    population fit judging, and refitting from other starts, a pooled fit that differs from
    its subjects by design)."""
    token = _ASSESSING.set(False)
    try:
        yield
    finally:
        _ASSESSING.reset(token)


def assess_fit(model, data, theta, x0s, *, estimator_name, advice, options, polish=None,
               restarts=None):
    """Judge the fit against its own training data; warn when it is poor.

    Five checks: the misfit ratio against the noise estimated from the data (16 samples per
    experiment), or R^2 on shorter series; the runs test of the residuals' signs
    (:func:`sklode.diagnostics._adequacy.residual_runs`) and of their means at times several
    experiments share (:func:`sklode.diagnostics._adequacy.residual_time_means`): structure a
    correct model does not leave; whether the experiments' mean residuals differ
    (:func:`sklode.diagnostics._adequacy.experiment_differences`: a parameter pooled over
    experiments that differ); and, for a fit that is not itself an output-error optimum
    (``polish``: what BCD-prox and WENDy pass, :class:`Polish`), an AdjointODE polish from it
    (:func:`sklode.diagnostics._adequacy.polish_gap`) where the misfit ratio cannot judge or
    exceeds ``POLISH_RATIO`` and the data are small enough (the caller passes no ``polish``
    where bounds apply: the polish could leave them).

    A poor fit's warning says what was tried to find its cause: the polish, or ``restarts``
    (a callable returning :class:`Restarts`, called only for a poor fit: AdjointODE's refits
    from other starts). ``advice`` (the method's own suggestion) is given, marked untried,
    only where neither could run.

    Returns the fitted attributes ``fit_adequate_`` (None when nothing could judge),
    ``misfit_ratio_`` (per observed state, or None), ``residual_runs_z_`` and
    ``residual_time_means_`` (per observed state, or None; :mod:`sklode.diagnostics._adequacy`) and
    ``output_error_excess_`` (the polish statistic, or None).
    """
    if not _ASSESSING.get():
        return {"fit_adequate_": None, "misfit_ratio_": None, "residual_runs_z_": None,
                "residual_time_means_": None, "output_error_excess_": None}
    x0s = np.reshape(x0s, (-1, data.n_states))
    name = estimator_name
    ratios = misfit_ratios(model, theta, data, x0s, options)
    adequate = None if ratios is None else bool(np.all(ratios <= POOR_FIT_RATIO))
    attributes = {"misfit_ratio_": ratios, "residual_runs_z_": None,
                  "residual_time_means_": None, "output_error_excess_": None}
    # the polish costs about one more fit: run it where the cheap checks cannot judge
    # (too few samples per experiment for the noise) or the fit is suspect
    suspect = ratios is None or np.max(ratios) > POLISH_RATIO
    gap = None
    if polish is not None and polish.init is not None and suspect:
        gap = polish_gap(model, data, theta, x0s, polish.fitted, sigma=polish.sigma,
                         noise_kind=polish.noise_kind, positive=polish.positive,
                         options=options)
        if gap is not None:
            attributes["output_error_excess_"] = gap.statistic
    differences = None
    if polish is not None and suspect:  # one sensitivity solve per experiment
        # at the output-error optimum: the polished point where there is one (a fit that
        # stopped short of it leaves gradients the pooling is not to blame for)
        at_theta, at_x0s = ((gap.theta, gap.x0s) if gap is not None and gap.x0s is not None
                            else (theta, x0s))
        differences = experiment_differences(
            model, data, at_theta, at_x0s, polish.fitted, sigma=polish.sigma,
            noise_kind=polish.noise_kind, positive=polish.positive, options=options)
    pooled = _pooling_sentence(differences)

    miss = None
    if ratios is None:  # too few samples to estimate the noise: judge by R^2
        r2 = explained_variance(model, theta, data, x0s, options)
        if r2 < POOR_FIT_R2:
            miss = (f"the fitted trajectory explains R^2 = {r2:.2f} of the observations' "
                    f"variance (below {POOR_FIT_R2:g}; the series is too short to estimate "
                    "its noise)")
    elif not adequate:
        worst = int(np.argmax(ratios))
        state = model.observables[data.observed[worst]]
        if not np.isfinite(ratios[worst]):  # no prediction to measure: say so plainly
            miss = ("the ODE integrated from the fitted theta_ and x0_ cannot reach the "
                    "end of the data (it blows up or leaves its domain), so predict and "
                    "score will raise IntegrationError")
        else:
            miss = (f"the prediction misses {state!r} by {ratios[worst]:.3g} noise levels "
                    f"(RMS of the residual over the noise estimated from the data; an "
                    f"adequate fit is near 1, poor above {POOR_FIT_RATIO:g})")
    if miss is not None:
        outlier = isolated_extreme(data, model.observables)
        evidence, _ = _optimizer_evidence(name, restarts() if restarts is not None else None,
                                          gap, polish, advice,
                                          None if ratios is None else float(np.max(ratios)))
        warn(f"{name} fits its training data poorly: {miss}.{outlier}{evidence}{pooled}",
             PoorFitWarning)
        attributes["fit_adequate_"] = False
        return attributes

    fit_residuals = residuals(model, theta, data, x0s, options)  # one solve each
    runs = None if fit_residuals is None else residual_runs(fit_residuals)
    if runs is not None:
        z, fraction = runs
        attributes["residual_runs_z_"] = z
        flagged = (z < RUNS_Z) & (fraction < RUNS_FRACTION)
        if np.any(flagged):
            worst = int(np.nanargmin(np.where(flagged, z, np.nan)))
            state = model.observables[data.observed[worst]]
            warn(f"{name}: the residuals of {state!r} run in long same-sign stretches "
                 f"({100 * fraction[worst]:.0f} % of the sign changes independent noise "
                 f"gives, runs test z = {z[worst]:.1f}). The model misses a systematic "
                 "part of the data: it may be misspecified, or the fit follows the wrong "
                 "part of an oscillation. Compare predict() with the data."
                 + pooled, PoorFitWarning)
            adequate = False

    means = None if fit_residuals is None else residual_time_means(fit_residuals, data)
    if means is not None:
        statistic, threshold = means
        attributes["residual_time_means_"] = statistic
        flagged = np.flatnonzero(statistic > threshold)
        if flagged.size and adequate is not False:
            worst = int(flagged[np.argmax(statistic[flagged] / threshold[flagged])])
            state = model.observables[data.observed[worst]]
            warn(f"{name}: the residuals of {state!r} miss the experiments the same way at "
                 f"the same times (time-means statistic {statistic[worst]:.0f}, where "
                 f"independent noise stays below {threshold[worst]:.0f}): the model's "
                 "shape does not follow the data (misspecified)." + pooled, PoorFitWarning)
            adequate = False
        elif flagged.size:
            adequate = False

    if gap is not None:
        if gap.statistic > gap.threshold:
            excess = 100 * (gap.cost / gap.polished_cost - 1)
            warn(f"{name}'s estimate is a second-best for the output error: an "
                 f"AdjointODE polish from this fit lowers the cost by {excess:.0f} % "
                 f"({gap.statistic:.1f} residual variances, where the noise "
                 f"explains up to {gap.threshold:.1f}), to theta "
                 f"{np.round(gap.theta, 4).tolist()}. Fit AdjointODE(init="
                 f"{polish.init!r}) for the output-error "
                 "optimum.", PoorFitWarning)
            adequate = False
        elif adequate is None:
            adequate = True
    attributes["fit_adequate_"] = adequate
    return attributes
