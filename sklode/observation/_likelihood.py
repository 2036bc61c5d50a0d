"""The observation model, the noise model and the likelihood: one layer under all three methods.

What every fit shares once its states are known at the observation times: the observables
``h = observe(t, x, theta)`` (or the observed states), the standard deviation of every
observation (known, read from ``sigma`` and ``noise_kind``, or the model's
``noise_sd(t, h, theta)`` with its own parameters), the distribution (normal, Laplace, normal
on the natural or decimal log scale) and the negative log-likelihood with every constant, as
PEtab defines it::

    normal       1/2 log(2 pi s^2) + 1/2 ((y - h) / s)^2
    lognormal    1/2 log(2 pi s^2) + log y + 1/2 ((log y - log h) / s)^2
    log10normal  1/2 log(2 pi s^2) + log(y ln 10) + 1/2 ((log10 y - log10 h) / s)^2
    laplace      log(2 s) + |y - h| / s

AdjointODE minimises it as a sum of squares ``1/2 ||R||^2`` (equal to ``-log L`` up to a
constant), so that Gauss-Newton, the forward sensitivities and the adjoint all apply: the data
rows ``R = (h - y) / s`` (on the log scale for the log kinds, ``sign(e) sqrt(2 |e| / s)`` for
Laplace) and, where the noise depends on the unknowns, one row ``sqrt(2 log s + C)`` per
observation (pyPESTO's and AMICI's device; ``C`` is fixed by the data alone, so costs of
different fits of the same data compare). The rows' derivatives in the states and the
parameters: by the chain rule on the compiled observation and noise models where both are
programs of scalar operations (every PEtab model; :func:`~sklode.models._compile.compile_grid`,
5-7x faster on the PEtab development problems), else torch's forward mode on the rows, with
directions only for the parameters the two models read.
"""

from __future__ import annotations


import numpy as np

from .._validation import DISTRIBUTIONS, NOISE_KINDS
from ._noise import distribution_of, neg_log_likelihood_terms
from ._observation import Observation

__all__ = ["NOISE_KINDS", "DISTRIBUTIONS", "data_neg_log_likelihood", "information_criteria",
           "first_impossible_observation",
           "kinds_by_column", "known_sigma", "sigma_per_state"]


def kinds_by_column(noise_kind, names, *, has_noise_model=False):
    """One noise kind per data column.

    Parameters
    ----------
    noise_kind : str or dict
        One kind for all, or a dict by observable name (absent names: ``"absolute"``).
    names : sequence of str
        The names of the data's columns.
    has_noise_model : bool, default=False
        The model gives ``noise_sd``: the kinds then choose the distribution only, and the
        data-relative kinds (``"relative_rms"``, ``"proportional"``) are refused.

    Returns
    -------
    tuple of str
    """
    if isinstance(noise_kind, dict):
        unknown = [k for k in noise_kind if k not in names]
        if unknown:
            raise ValueError(f"noise_kind names {unknown}, which are not among the data's "
                             f"columns {list(names)}: key it by observable name.")
        kinds = tuple(noise_kind.get(name, "absolute") for name in names)
    else:
        kinds = (noise_kind,) * len(names)
    for kind in kinds:
        if kind not in DISTRIBUTIONS:
            raise ValueError(f"noise_kind {kind!r} is not one of {NOISE_KINDS}.")
        if has_noise_model and kind in ("relative_rms", "proportional"):
            raise ValueError(
                f"noise_kind={kind!r} reads sigma relative to the data, but the model gives "
                "the noise itself (noise_sd): write the proportional part into noise_sd "
                "(e.g. theta_b * y) and use 'absolute', 'laplace', 'lognormal' or "
                "'log10normal' to choose the distribution.")
    return kinds


def known_sigma(Y, sigma, kinds):
    """The standard deviation (or Laplace scale) of every entry of ``Y``, from ``sigma``.

    Parameters
    ----------
    Y : ndarray of shape (n_times, n_columns)
        Observations, NaN where missing.
    sigma : float or array-like
        One value, one per column, or one per observation (which may be NaN where ``Y`` is).
    kinds : tuple of str
        One noise kind per column (:func:`kinds_by_column`).

    Returns
    -------
    ndarray of shape (n_times, n_columns)
        NaN where ``Y`` is missing.
    """
    value = np.asarray(sigma, dtype=np.float64)
    try:
        value = np.broadcast_to(value if value.ndim != 1 or value.size == 1
                                else value[None, :], Y.shape)
    except ValueError:
        raise ValueError(f"sigma of shape {np.shape(sigma)} does not match Y of shape "
                         f"{Y.shape}: give one value, one per observed column, or one per "
                         "observation.") from None
    present = np.isfinite(Y)
    bad = present & ~(np.isfinite(value) & (value > 0))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(f"sigma must be positive and finite wherever Y is observed (NaN is "
                         f"allowed only where Y is NaN); got {value[i, j]!r} at row {i}, "
                         f"column {j}.")
    out = np.where(present, value, np.nan)
    for j, kind in enumerate(kinds):
        column = Y[:, j]
        if kind == "relative_rms":
            out[:, j] *= np.sqrt(np.nanmean(column**2))
        elif kind == "proportional":
            # floored at 1e-6 of the column's largest value: a zero keeps a finite weight
            floor = 1e-6 * np.nanmax(np.abs(column))
            out[:, j] *= np.maximum(np.abs(column), floor if floor > 0 else 1.0)
    return out


def information_criteria(neg_log_likelihood, n_parameters, n_observations):
    """``(aic, bic)`` from ``-log L``, the number of estimated quantities and of observations.

    Parameters
    ----------
    neg_log_likelihood : float
    n_parameters : int
    n_observations : int

    Returns
    -------
    aic, bic : float
    """
    aic = 2.0 * neg_log_likelihood + 2.0 * n_parameters
    bic = 2.0 * neg_log_likelihood + np.log(max(n_observations, 1)) * n_parameters
    return float(aic), float(bic)


def data_neg_log_likelihood(model, experiments, observed, predictions, thetas, sigma,
                            noise_kind):
    """``-log L`` of several experiments' data under the observation and noise model.

    Parameters
    ----------
    model : ODEModel
    experiments : sequence of Experiment
        Validated experiments (:mod:`sklode._validation`).
    observed : tuple of int
        The observables the data's columns hold.
    predictions : sequence of ndarray of shape (n_times, n_states)
        Each experiment's states at its observation times.
    thetas : sequence of ndarray of shape (n_params,)
        Each experiment's parameters (its conditions applied).
    sigma : float, array-like or None
        Known noise levels, read by ``noise_kind``; None (and no ``noise_sd``): one scale per
        column, the maximum-likelihood one at these predictions (counted in ``n_profiled``).
    noise_kind : str or dict

    Returns
    -------
    neg_log_likelihood : float
    n_profiled : int
        Noise scales estimated here (one per column when ``sigma`` is None).
    """
    names = [model.observables[i] for i in observed]
    kinds = kinds_by_column(noise_kind, names, has_noise_model=model.has_noise_model)
    parts = []
    for e, X, theta in zip(experiments, predictions, thetas):
        obs = _observation(model, observed, e, kinds, sigma)
        H, S = obs.predicted(X, theta)
        parts.append((obs, H, S))
    profile = sigma is None and not model.has_noise_model and all(
        e.sigma is None for e in experiments)
    if profile:  # one ML scale per column, pooled over the experiments
        for j, kind in enumerate(kinds):
            dist = distribution_of(kind)
            E, W = [], []
            for obs, H, S in parts:
                m = obs.mask[:, j]
                E.append(dist.errors(obs.Y[m, j], H[m, j]))
                W.append(S[m, j])
            c = dist.profiled_scale(np.concatenate(E), np.concatenate(W))
            if not np.isfinite(c):
                return np.inf, len(kinds)
            c = max(c, 1e-300)
            for _, _, S in parts:
                S[:, j] *= c
    total = 0.0
    for obs, H, S in parts:
        terms = neg_log_likelihood_terms(obs.Y, H, S, obs.kinds)[obs.mask]
        if not np.all(np.isfinite(terms)):
            return np.inf, len(kinds) if profile else 0
        total += float(np.sum(terms))
    return total, (len(kinds) if profile else 0)


def sigma_per_state(sigma, noise_kind, values, estimator_name):
    """``sigma`` as one absolute standard deviation per column of ``values`` (the observed
    states, on the scale they are fitted at; NaN where missing), for the methods with one
    noise level per state (BCD-prox, WENDy).

    Parameters
    ----------
    sigma : float or array-like
        One positive value, or one per column.
    noise_kind : str
        ``"relative_rms"`` multiplies by each column's RMS; the others take ``sigma`` as it
        is (``"lognormal"``: on the log scale ``values`` are in).
    values : ndarray of shape (n_samples, n_observed)
    estimator_name : str

    Returns
    -------
    ndarray of shape (n_observed,)
    """
    width = values.shape[1]
    given = np.asarray(sigma, dtype=np.float64)
    if given.size not in (1, width) or np.any(given <= 0):
        got = f"an array of shape {given.shape}" if given.size > width else repr(sigma)
        raise ValueError(f"{estimator_name} takes sigma as one positive value or one per "
                         f"observed state ({width}); got {got}. Use AdjointODE for one "
                         "standard deviation per observation.")
    per_state = np.broadcast_to(given.reshape(-1), (width,)).copy()
    if noise_kind == "relative_rms":
        per_state *= np.sqrt(np.nanmean(values**2, axis=0))
    return per_state


def _observation(model, observed, experiment, kinds, sigma):
    """One experiment's :class:`Observation`: its noise from the model's noise model, else
    the experiment's ``sigma``, else ``sigma`` (1 where None: a profiled scale's shape)."""
    known = None
    if not model.has_noise_model:
        given = experiment.sigma if experiment.sigma is not None else (
            1.0 if sigma is None else sigma)
        known = known_sigma(experiment.Y, given, kinds)
    return Observation(model, observed, experiment.t, experiment.Y, kinds, known)


def first_impossible_observation(model, experiments, observed, predictions, thetas, sigma,
                                 noise_kind):
    """The first observation whose ``-log L`` term is not finite, in words (for a warning).

    Parameters
    ----------
    model, experiments, observed, predictions, thetas, sigma, noise_kind
        As :func:`data_neg_log_likelihood`.

    Returns
    -------
    str
    """
    names = [model.observables[i] for i in observed]
    kinds = kinds_by_column(noise_kind, names, has_noise_model=model.has_noise_model)
    for e, X, theta in zip(experiments, predictions, thetas):
        obs = _observation(model, observed, e, kinds, sigma)
        H, S = obs.predicted(X, theta)
        terms = neg_log_likelihood_terms(obs.Y, H, S, kinds)
        bad = np.isfinite(obs.Y) & ~np.isfinite(terms)
        if bad.any():
            k, j = np.argwhere(bad)[0]
            return (f"observable {names[j]!r} of experiment {e.name!r} at t={e.t[k]:g} has "
                    f"zero likelihood (measured {obs.Y[k, j]:g}, predicted {H[k, j]:g}, noise "
                    f"scale {S[k, j]:g}, {kinds[j]})")
    return "no single observation's term is infinite (a profiled noise scale is)"
