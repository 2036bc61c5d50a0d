"""Is a converged fit the best the model can do, and can the model describe the data?

Two checks beside the misfit ratio of :mod:`sklode._estimator` (which needs 16 samples per
experiment to estimate the noise):

* :func:`polish_gap`: the output-error cost at a fit's parameters (the initial states
  re-fitted with theta held) against the cost an AdjointODE polish (trust-region least
  squares, at most ``POLISH_MAX_ITER`` iterations) reaches from there. The drop, in units of
  the residual variance at the polished point, is the profile likelihood-ratio statistic of
  the fit's theta: for a fit as good as the output-error optimum (or a little less efficient:
  WENDy, BCD-prox) it is about ``chi2(k)`` for ``k`` fitted parameters; a fit stopped on a
  second-best point drops by far more than the noise explains. It pools every experiment,
  so it works where each experiment is too short to estimate its noise.
* :func:`residual_time_means`: where several experiments share sampling times (a growth
  study, a dose group), the residuals' mean at each shared time against its standard error
  across experiments: a model whose shape is wrong misses every experiment the same way at
  the same time (this pools experiments too short for the runs test).
* :func:`experiment_differences`: with several experiments, the score test of the pooled
  parameters against parameters of each experiment's own: a parameter pooled over
  experiments that differ in it (a shared volume for neonates of 0.6-3.6 kg) leaves each
  experiment a gradient of its own, which a wrong model shape shared by all does not.
* :func:`residual_runs`: the Wald-Wolfowitz runs test of the residuals' signs in time order,
  pooled over experiments: a misspecified model (or a fit through the wrong branch of an
  oscillation) leaves long same-sign stretches. Flagged when significant (z below
  ``RUNS_Z``) and large (fewer than ``RUNS_FRACTION`` of the expected runs).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2

from ..exceptions import SklodeError
from ..outputerror._optimize import adjoint_solve
from ..outputerror._pose import objective_for_experiments
from ..outputerror._predict import predicted_observables

__all__ = ["EXPERIMENTS_LEVEL", "EXPERIMENTS_SHARE", "POLISH_LEVEL", "RUNS_FRACTION", "RUNS_Z",
           "TIME_MEANS_LEVEL", "ExperimentDifferences", "PolishGap", "experiment_differences",
           "polish_gap", "residual_runs", "residual_time_means", "residuals"]

logger = logging.getLogger("sklode")

#: Iterations of the polish (a fit near the optimum needs 3-10; the check stays cheap).
POLISH_MAX_ITER = 30
#: Data entries up to which the polish runs (beyond, one trust-region iteration costs more
#: than the fits it checks: Lorenz-96 has 8,000 entries and 40 states).
POLISH_MAX_ENTRIES = 4000
#: The statistic's level: a fit is second-best when its drop exceeds the chi2(k) quantile at
#: this level (one false alarm in 1,000 fits at the optimum).
POLISH_LEVEL = 0.999
#: A runs z-score below this (too few sign changes) flags residual structure: p ~ 3e-5 for
#: independent residuals, so fits of a correct model almost never trip it.
RUNS_Z = -4.0
#: ... and the runs are fewer than this fraction of those independent noise gives: on a long
#: series a tiny systematic offset is significant without mattering (WENDy's fit of the
#: 1,024-sample Lotka-Volterra at 5 % noise: z = -6.0 at 0.81 of the expected runs; Richards
#: growth fitted by the logistic, 101 samples: z = -4.7 at 0.53).
RUNS_FRACTION = 0.7
#: Fewest residuals per observable for the runs test.
RUNS_MIN = 20
#: The time-means statistic flags structure above its chi2 quantile at this level.
TIME_MEANS_LEVEL = 0.999
#: A time counts for the time-means test when this many experiments observed it, and the
#: test needs this many such times.
TIME_MEANS_MIN = 3
#: The experiments differ when the F statistic of parameters of their own exceeds its
#: quantile at this level ...
EXPERIMENTS_LEVEL = 0.999
#: ... and parameters of their own would explain at least this share of the residual sum of
#: squares. Residuals that run in stretches (a wrong shape) inflate F beyond its
#: independent-noise distribution, so significance alone would blame the pooling for any
#: misfit of many data; the share measures how much the pooling costs. Measured: a wrong
#: shape (logistic or exponential fitted to Gompertz growth) in 20 identical subjects leaves
#: 0.2-18 % at F 0.02-0.9 (below its threshold 2.1-2.5); a carrying capacity differing by
#: 10-30 % between subjects, 77-91 %; Phenobarb's neonates pooled, 99 %; ChickWeight's chicks
#: pooled, 53-92 %.
EXPERIMENTS_SHARE = 0.2


@dataclass(frozen=True)
class ExperimentDifferences:
    """Would parameters of each experiment's own explain the residuals
    (:func:`experiment_differences`)?

    Attributes
    ----------
    f : float
        The linearised F statistic of "each experiment its own fitted parameters" against
        the pooled fit.
    threshold : float
        Its ``EXPERIMENTS_LEVEL`` quantile.
    share : float
        The fraction of the residual sum of squares those parameters would remove.
    """

    f: float
    threshold: float
    share: float

    @property
    def differ(self):
        """Do the experiments differ (significant and large)?"""
        return bool(self.f > self.threshold and self.share >= EXPERIMENTS_SHARE)


def experiment_differences(model, data, theta, x0s, fitted, *, sigma, noise_kind, positive,
                           options):
    """The score test of a pooled fit against parameters of each experiment's own.

    At the pooled optimum the experiments' gradients in the shared parameters sum to zero;
    when a parameter differs between experiments each gradient is large on its own. The
    Gauss-Newton step of experiment ``k`` alone (its initial state and the fitted
    parameters, from its own residual ``r_k`` and Jacobian ``J_k``) would remove
    ``||P_k r_k||^2`` of the cost (``P_k`` the projection on ``J_k``'s columns). Summed over
    the experiments, less what the same step with the parameters shared removes (zero at
    the pooled optimum; not zero from a fit that stopped short of it, BCD-prox's or
    WENDy's), with ``(K - 1) p`` degrees of freedom against the remaining sum of squares,
    this is the linearised likelihood-ratio test of pooling. A shape the model
    gets wrong in every experiment alike leaves the same gradient in each, which the pooled
    fit has already zeroed: the test does not blame the pooling for it.

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData
    theta : ndarray of shape (n_params,)
    x0s : ndarray of shape (n_experiments, n_states)
    fitted : ndarray of bool of shape (n_params,)
    sigma, noise_kind, positive
        As the estimator's (``sigma=None``: 1).
    options : dict

    Returns
    -------
    ExperimentDifferences or None
        None with fewer than three experiments, nothing fitted, or where the Jacobian
        cannot be computed.
    """
    from scipy.stats import f as f_distribution

    if data.n_experiments < 3 or not np.any(fitted):
        return None
    try:
        objective, u = _posed_at(model, data, theta, x0s, fitted, sigma=sigma,
                                 noise_kind=noise_kind, positive=positive, options=options)
        separate, rss, n_data, rank = 0.0, 0.0, 0, 0
        with np.errstate(all="ignore"):
            for k, part in enumerate(objective.parts):
                own = objective._part_u(u, k)
                rows = part.n_data_rows
                reduction, n_kept, r = _step_reduction(part.residual(own)[:rows],
                                                       part.jacobian(own)[:rows])
                separate += reduction
                rss += float(r @ r)
                rank += n_kept
                n_data += int(part.n_data)
            # the same step with theta shared: what the pooled fit could still gain (zero at
            # its optimum; not for a method whose estimate is not that optimum)
            rows = objective.n_data_rows
            pooled = _step_reduction(objective.residual(u)[:rows],
                                     objective.jacobian(u)[:rows])[0]
    except (SklodeError, ValueError, np.linalg.LinAlgError, AttributeError) as exc:
        logger.debug("no experiment differences: %s", exc)
        return None
    n_params = int(np.sum(fitted))
    dof1 = (data.n_experiments - 1) * n_params
    dof2 = n_data - rank
    gain = separate - pooled  # pooled RSS minus separate RSS, both after one step
    if dof2 <= 0 or not (rss > separate >= 0) or not np.isfinite(rss):
        return None
    gain = max(gain, 0.0)
    f = (gain / dof1) / ((rss - separate) / dof2)
    return ExperimentDifferences(f=float(f), threshold=float(
        f_distribution.ppf(EXPERIMENTS_LEVEL, dof1, dof2)), share=gain / (rss - pooled))


def _posed_at(model, data, theta, x0s, fitted, *, sigma, noise_kind, positive, options):
    """``(objective, u)``: the output-error cost of the data posed at a fit (its ``theta``
    and initial states ``x0s``), weighted as the estimator's ``sigma`` says (None: 1)."""
    start = data.with_initial_states(np.reshape(x0s, (data.n_experiments, -1)))
    return objective_for_experiments(
        model, start, theta0=np.asarray(theta, dtype=np.float64), fitted=fitted,
        sigma=1.0 if sigma is None else sigma, noise_kind=noise_kind, positive=positive,
        **options)


def _step_reduction(r, J):
    """``(||P r||^2, rank, r)``: what one Gauss-Newton step on ``J``'s columns removes from
    ``r``'s sum of squares (rows with a non-finite entry left out)."""
    present = np.isfinite(r) & np.all(np.isfinite(J), axis=1)
    r, J = r[present], J[present]
    Q, R = np.linalg.qr(J / np.maximum(np.linalg.norm(J, axis=0), 1e-300))
    kept = np.abs(np.diag(R)) > 1e-8 * max(np.max(np.abs(np.diag(R)), initial=0.0), 1e-300)
    projected = Q[:, kept].T @ r
    return float(projected @ projected), int(kept.sum()), r


@dataclass(frozen=True)
class PolishGap:
    """What an AdjointODE polish from a fit found (:func:`polish_gap`).

    Attributes
    ----------
    statistic : float
        The drop of the output-error cost from the fit (its initial states refitted, theta
        held) to the polished optimum, in residual variances: chi-square with as many degrees
        of freedom as fitted parameters when the fit is itself an optimum.
    threshold : float
        That chi-square's ``POLISH_LEVEL`` quantile.
    cost, polished_cost : float
        The cost ``1/2 ||r||^2`` at the fit and after the polish.
    held_cost : float
        The cost with the fit's theta held and its initial states refitted.
    x0_statistic : float
        The drop from ``cost`` to ``held_cost`` in residual variances: what the fit's
        initial states alone miss (they are not the best for its own theta).
    x0_threshold : float
        The ``POLISH_LEVEL`` quantile of chi-square with as many degrees of freedom as
        estimated initial values (inf where none are).
    x0s : ndarray of shape (n_experiments, n_states)
        The polished initial states.
    theta : ndarray of shape (n_params,)
        The polished parameters.
    """

    statistic: float
    threshold: float
    cost: float
    polished_cost: float
    theta: np.ndarray
    held_cost: float = np.nan
    x0_statistic: float = 0.0
    x0_threshold: float = np.inf
    x0s: np.ndarray | None = None


def polish_gap(model, data, theta, x0s, fitted, *, sigma, noise_kind, positive, options):
    """The output-error cost at a fit and after an AdjointODE polish from it.

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData
    theta : ndarray of shape (n_params,)
    x0s : ndarray of shape (n_experiments, n_states)
    fitted : ndarray of bool of shape (n_params,)
    sigma, noise_kind, positive
        As the estimator's (``sigma=None``: 1, the statistic is scale-free).
    options : dict
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    PolishGap or None
        None when the polish does not apply (too large, or the cost cannot be evaluated at
        the fit).
    """
    from scipy.optimize import least_squares

    n_entries = sum(int(e.mask.sum()) for e in data.experiments)
    if n_entries > POLISH_MAX_ENTRIES:
        return None
    try:
        objective, u0 = _posed_at(model, data, theta, x0s, fitted, sigma=sigma,
                                  noise_kind=noise_kind, positive=positive, options=options)
        n_x0 = objective.n_x0
        with np.errstate(all="ignore"):
            r0 = objective.residual(u0)
            # the initial states alone first, theta held: what is left is theta's own gap
            if n_x0:
                def with_x0(v):
                    return np.concatenate([v, u0[n_x0:]])

                held = least_squares(lambda v: objective.safe_residual(with_x0(v)), u0[:n_x0],
                                     jac=lambda v: objective.jacobian(with_x0(v))[:, :n_x0],
                                     method="trf", max_nfev=POLISH_MAX_ITER)
                u_held = with_x0(held.x)
            else:
                u_held = u0
            r_held = objective.residual(u_held)
            result = adjoint_solve(objective, u_held, optimizer="trf",
                                   max_iter=POLISH_MAX_ITER)
            r1 = objective.residual(result.u)
    except (SklodeError, ValueError, np.linalg.LinAlgError) as exc:
        logger.debug("no polish: %s", exc)
        return None
    cost0, cost_held, cost1 = float(r0 @ r0), float(r_held @ r_held), float(r1 @ r1)
    k = u0.size - n_x0  # the fitted parameters: the statistic is profiled over x0
    dof = max(objective.n_data - u0.size, 1)
    variance = cost1 / dof
    if k == 0 or not (np.isfinite(cost0) and np.isfinite(cost_held) and variance > 0):
        return None
    x0s_polished, theta_polished = objective.split(objective.to_z(result.u))
    return PolishGap(statistic=max(cost_held - cost1, 0.0) / variance,
                     threshold=float(chi2.ppf(POLISH_LEVEL, k)), cost=cost0 / 2,
                     polished_cost=cost1 / 2, theta=theta_polished,
                     x0s=np.reshape(x0s_polished, (data.n_experiments, -1)),
                     held_cost=cost_held / 2,
                     x0_statistic=max(cost0 - cost_held, 0.0) / variance,
                     x0_threshold=float(chi2.ppf(POLISH_LEVEL, n_x0)) if n_x0 else np.inf)


def residuals(model, theta, data, x0s, options):
    """Each experiment's residuals ``Y - prediction`` (NaN where missing): what
    :func:`residual_runs` and :func:`residual_time_means` read.

    Returns
    -------
    list of ndarray of shape (n_times, n_observed), or None
        None when a prediction cannot be integrated.
    """
    columns = list(data.observed)
    out = []
    for x0, e in zip(np.reshape(x0s, (data.n_experiments, -1)), data.experiments):
        try:
            with np.errstate(all="ignore"):
                P = predicted_observables(model, theta, e, x0, e.t, options)[:, columns]
        except SklodeError:
            return None
        out.append(np.where(e.mask, e.Y - P, np.nan))
    return out


def residual_runs(residuals):
    """The runs z-score of each observable's residual signs (time order within each
    experiment, pooled over experiments).

    Parameters
    ----------
    residuals : list of ndarray of shape (n_times, n_observed)
        Each experiment's residuals, NaN where missing (:func:`residuals`).

    Returns
    -------
    z : ndarray of shape (n_observed,)
        ``(runs - expected) / sd``; NaN for an observable with fewer than ``RUNS_MIN``
        nonzero residuals or all of one sign.
    fraction : ndarray of shape (n_observed,)
        ``runs / expected``.
    """
    n_columns = residuals[0].shape[1]
    runs = np.zeros(n_columns)
    expected = np.zeros(n_columns)
    variance = np.zeros(n_columns)
    count = np.zeros(n_columns, dtype=int)
    for R in residuals:
        for j in range(n_columns):
            r = R[np.isfinite(R[:, j]), j]
            s = np.sign(r[r != 0])
            n_pos, n = int(np.sum(s > 0)), s.size
            n_neg = n - n_pos
            if n < 2 or n_pos == 0 or n_neg == 0:
                count[j] += n
                runs[j] += 1 if n else 0
                expected[j] += 1 if n else 0
                continue
            runs[j] += 1 + int(np.sum(s[1:] != s[:-1]))
            expected[j] += 1 + 2.0 * n_pos * n_neg / n
            variance[j] += (2.0 * n_pos * n_neg * (2.0 * n_pos * n_neg - n)
                            / (n * n * (n - 1)))
            count[j] += n
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (runs - expected) / np.sqrt(variance)
        fraction = runs / expected
    z[(count < RUNS_MIN) | ~(variance > 0)] = np.nan
    return z, fraction


def residual_time_means(residuals, data):
    """The time-means statistic of each observable and its threshold.

    At every time observed in at least ``TIME_MEANS_MIN`` experiments, the residuals' mean
    over the experiments divided by its standard error is a t statistic; each is mapped to a
    standard normal through its t distribution and the squares summed: about ``chi2(m)`` for
    ``m`` such times when the model's shape is right.

    Parameters
    ----------
    residuals : list of ndarray of shape (n_times, n_observed)
        Each experiment's residuals, NaN where missing (:func:`residuals`).
    data : ExperimentData
        Their times.

    Returns
    -------
    statistic : ndarray of shape (n_observed,)
        NaN for an observable with fewer than ``TIME_MEANS_MIN`` shared times.
    threshold : ndarray of shape (n_observed,)
        The ``TIME_MEANS_LEVEL`` quantile of ``chi2(m)``.
    Or None with fewer than ``TIME_MEANS_MIN`` experiments.
    """
    from scipy.stats import norm
    from scipy.stats import t as student

    if data.n_experiments < TIME_MEANS_MIN:
        return None
    times = np.concatenate([e.t for e in data.experiments])
    stacked = np.vstack(residuals)
    statistic = np.full(stacked.shape[1], np.nan)
    threshold = np.full(stacked.shape[1], np.nan)
    for j in range(stacked.shape[1]):
        z2, m = 0.0, 0
        for time in np.unique(times):
            values = stacked[times == time, j]
            values = values[np.isfinite(values)]
            n = values.size
            if n < TIME_MEANS_MIN:
                continue
            sd = np.std(values, ddof=1)
            if not sd > 0:
                continue
            t_stat = np.mean(values) / (sd / np.sqrt(n))
            # the t statistic's own tail, as a standard normal deviate (two-sided)
            p = 2 * student.sf(abs(t_stat), n - 1)
            z2 += norm.isf(max(p, 1e-300) / 2) ** 2
            m += 1
        if m >= TIME_MEANS_MIN:
            statistic[j], threshold[j] = z2, chi2.ppf(TIME_MEANS_LEVEL, m)
    return statistic, threshold
