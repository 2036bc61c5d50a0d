"""The parametric bootstrap: the sampling spread of a method's own estimator.

BCD-prox's estimate is not the output-error optimum, so the Gauss-Newton covariance of the
output-error problem evaluated at BCD-prox's point is not the spread of BCD-prox's estimate
(#28: Rossler at 3 % noise covered 5-60 %, the relaxation oscillator 0 %, Lorenz-63 100 %
with z-scores spread 0.1). The bootstrap asks the method itself: data are simulated from
the fitted model (``theta_``, ``x0_``, each experiment's doses and conditions) at the
training times with the training data's missing entries, noise of the level the data show is
added, and the method refits every replicate. The replicates' covariance is the method's
sampling covariance, and the mean replicate minus ``theta_`` estimates the method's bias at
this point, which no Fisher information can see.

The noise level of each observed state is the residual of the forward solve at the fit
(degrees of freedom lost to the unknowns taken out), unless it exceeds ``POOR_FIT_RATIO``
times the model-free difference filter of :func:`sklode.wendy.estimate_noise` on the data
(16 samples or more): a fit that misses part of the data (chaos followed past its horizon, a
relaxation jump) would overstate the noise, and the filter is taken instead. Not the smaller
of the two: the filter alone errs by up to 40 % on 41 samples (Lotka-Volterra, noise 0.1:
0.064-0.142 over six draws, the residual 0.086-0.115), and the minimum of two noisy estimates
is biased low. With sigma given, that is the noise.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .._noise_level import MIN_SAMPLES, estimate_noise
from ..exceptions import SklodeError
from ..observation._likelihood import sigma_per_state
from ..outputerror._predict import predicted_observables
from ._assessment import _NOISE_FLOOR, POOR_FIT_RATIO

__all__ = ["BootstrapResult", "bootstrap_replicates", "replicate_noise"]


@dataclass(frozen=True)
class BootstrapResult:
    """The refits of the replicates.

    Attributes
    ----------
    theta : ndarray of shape (n_succeeded, n_params)
        Every replicate's estimate (held parameters included).
    x0 : ndarray of shape (n_succeeded, n_experiments, n_states)
        Every replicate's initial states.
    n_failed : int
        Replicates whose refit raised or returned non-finite values (left out).
    """

    theta: np.ndarray
    x0: np.ndarray
    n_failed: int

    def covariance(self):
        """The replicates' covariance of theta (``ddof=1``)."""
        return np.atleast_2d(np.cov(self.theta, rowvar=False))

    def x0_stderr(self):
        """The replicates' standard deviation of each initial value (``ddof=1``)."""
        return np.std(self.x0, axis=0, ddof=1)


def replicate_noise(model, theta, data, x0s, *, sigma, noise_kind, n_unknowns, options):
    """The clean observables the replicates centre on and the noise to add to them.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
        The training data as given to ``fit``.
    x0s : ndarray of shape (n_experiments, n_states)
        The fit's initial states.
    sigma : float, array-like or None
        The estimator's ``sigma`` (None: estimated, see the module's docstring).
    noise_kind : {"absolute", "relative_rms", "lognormal"}
        ``"lognormal"``: the noise is added to the logarithm of the observables.
    n_unknowns : int
        Fitted parameters and initial values (degrees of freedom of the residual).
    options : dict
        ``integrator``, ``rtol``, ``atol`` of the forward solves.

    Returns
    -------
    means : list of ndarray of shape (n_times, n_observed)
        The fitted model's observables at each experiment's times (log scale for
        ``"lognormal"``).
    sd : ndarray of shape (n_observed,)
        The noise standard deviation of each observed state on that scale.

    Raises
    ------
    IntegrationError
        When the fitted model cannot be integrated over the data: there is nothing to
        simulate from.
    """
    columns = list(data.observed)
    log = noise_kind == "lognormal"
    means, values = [], []
    for x0, e in zip(x0s, data.experiments):
        with np.errstate(all="ignore"):
            P = predicted_observables(model, theta, e, x0, e.t, options)[:, columns]
            Y = e.Y
            if log:
                P, Y = np.log(P), np.log(Y)
        means.append(P)
        values.append(Y)
    stacked = np.vstack(values)
    if sigma is not None:
        return means, sigma_per_state(sigma, noise_kind, stacked, "the bootstrap")

    residual2 = np.nansum(np.vstack([(Y - P) ** 2 for Y, P in zip(values, means)]), axis=0)
    counts = np.sum(np.isfinite(stacked), axis=0)
    share = max(1.0 - n_unknowns / max(int(counts.sum()), 1), 0.1)
    sd = np.sqrt(residual2 / np.maximum(counts * share, 1.0))
    filtered2, n_filtered = np.zeros(len(columns)), 0
    for e, Y in zip(data.experiments, values):
        complete = e.mask.all(axis=1) & np.all(np.isfinite(Y), axis=1)
        if complete.sum() >= MIN_SAMPLES:
            floor = _NOISE_FLOOR * np.sqrt(np.mean(Y[complete] ** 2, axis=0))
            level = np.maximum(estimate_noise(e.t[complete], Y[complete]), floor)
            filtered2 += complete.sum() * level**2
            n_filtered += int(complete.sum())
    if n_filtered:
        filtered = np.sqrt(filtered2 / n_filtered)
        sd = np.where(sd > POOR_FIT_RATIO * filtered, filtered, sd)
    return means, sd


def _refit_one(refit, replicate):
    """``refit(replicate)`` as finite arrays, or None when it fails (counted by the caller).
    Its warnings are silenced here, in whichever worker runs it: they say nothing the fit's
    own did not."""
    import warnings

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            theta, x0 = refit(replicate)
    except (SklodeError, ArithmeticError, np.linalg.LinAlgError, ValueError):
        return None
    theta, x0 = np.asarray(theta, np.float64), np.asarray(x0, np.float64)
    if not (np.all(np.isfinite(theta)) and np.all(np.isfinite(x0))):
        return None
    return theta, x0


def bootstrap_replicates(refit, data, means, sd, *, n_boot, noise_kind, random_state,
                         n_jobs=None):
    """Refit ``n_boot`` simulated replicates of ``data``.

    Parameters
    ----------
    refit : callable
        ``refit(replicate) -> (theta, x0s)``: the method run on an ExperimentData, returning
        its full theta and its ``(n_experiments, n_states)`` initial states.
    data : ExperimentData
        The training data: times, missing entries, doses, conditions and initial-state
        guesses the replicates keep.
    means, sd :
        From :func:`replicate_noise`.
    n_boot : int
    noise_kind : str
        ``"lognormal"``: the replicate is ``exp(mean + noise)``.
    random_state : int, RandomState instance or None
    n_jobs : int or None, default=None
        Refits run in parallel over this many joblib workers. The replicates are all drawn
        before any refit, so the result does not depend on ``n_jobs``.

    Returns
    -------
    BootstrapResult
    """
    from joblib import Parallel, delayed
    from sklearn.utils import check_random_state

    rng = check_random_state(random_state)
    replicates = []
    for _ in range(n_boot):
        experiments = []
        for e, P in zip(data.experiments, means):
            Y = P + sd * rng.standard_normal(P.shape)
            if noise_kind == "lognormal":
                Y = np.exp(Y)
            experiments.append(replace(e, Y=np.where(e.mask, Y, np.nan)))
        replicates.append(replace(data, experiments=tuple(experiments)))
    outcomes = Parallel(n_jobs=n_jobs)(delayed(_refit_one)(refit, r) for r in replicates)
    done = [o for o in outcomes if o is not None]
    failed = n_boot - len(done)
    if not done:
        return BootstrapResult(np.empty((0, 0)), np.empty((0, data.n_experiments,
                                                           data.n_states)), failed)
    return BootstrapResult(np.array([o[0] for o in done]), np.array([o[1] for o in done]),
                           failed)
