"""Posing the output-error cost from an estimator's settings: the observation model of each
experiment, the prior on x0 and the invariant penalty, one
:class:`~._objective.LeastSquaresObjective` per experiment (:func:`objective_for_experiment`), all
of them together
(:func:`objective_for_experiments`), and :func:`build_objective` from arrays."""

from __future__ import annotations

import numpy as np

from .._validation import check_experiments
from .._checks import check_fixed, check_positive, check_theta0, condition_map, log_factors
from ..models import check_model
from ..observation._likelihood import DISTRIBUTIONS, kinds_by_column, known_sigma
from ..observation._observation import Observation
from ._experiments import ExperimentsObjective
from ._initial_state import start_from_data
from ._objective import LeastSquaresObjective

__all__ = ["build_objective", "objective_for_experiment", "objective_for_experiments",
           "observation_for", "observation_sigma", "uses_observation_layer"]


# ------------------------------------------------------------------ posing the cost
def observation_sigma(Y, sigma, noise_kind):
    """Standard deviation of every observation, shape of ``Y``.

    Parameters
    ----------
    Y : ndarray of shape (n_times, n_observed)
    sigma : float or array-like
        One value, one per observed state, or one per observation.
    noise_kind : {"absolute", "relative_rms", "proportional"}
        ``sigma`` in data units, as a fraction of each state's RMS, or of each observation
        (floored at 1e-6 of the state's largest value, so a zero observation keeps a finite
        weight).

    Returns
    -------
    ndarray of shape (n_times, n_observed)
        The standard deviation of each entry of ``Y``.
    """
    return known_sigma(Y, sigma, (noise_kind,) * Y.shape[1])



def uses_observation_layer(model, noise_kind):
    """Whether the cost needs the general observation layer: observables, a modelled noise,
    per-observable kinds, or a log or Laplace error (otherwise the plain weighted residuals
    of the observed states, the seed's cost)."""
    return (model.has_observation_model or model.has_noise_model
            or isinstance(noise_kind, dict)
            or DISTRIBUTIONS.get(noise_kind, "normal") != "normal")



def observation_for(model, experiment, observed, sigma, noise_kind, noise_range=None):
    """The :class:`~sklode.observation._observation.Observation` of one experiment, or None when the
    plain weighted residuals suffice (:func:`uses_observation_layer`).

    Parameters
    ----------
    model : ODEModel
    experiment : Experiment
    observed : tuple of int
        The observables the data's columns hold.
    sigma : float or array-like
        Known noise levels (unused when the model has ``noise_sd``).
    noise_kind : str or dict
    noise_range : float, optional
        How far below the data's typical size a modelled noise level may fall
        (:class:`~sklode.observation._observation.Observation`; its default when None).

    Returns
    -------
    Observation or None
    """
    if not uses_observation_layer(model, noise_kind):
        return None
    names = [model.observables[i] for i in observed]
    kinds = kinds_by_column(noise_kind, names, has_noise_model=model.has_noise_model)
    known = None if model.has_noise_model else known_sigma(experiment.Y, sigma, kinds)
    return Observation(model, observed, experiment.t, experiment.Y, kinds, known,
                       **({} if noise_range is None else {"noise_range": noise_range}))



def _prior_and_invariant(n, x0_prior, x0_prior_sigma, invariant, invariant_weight):
    prior = penalty = None
    if x0_prior is not None:
        if x0_prior_sigma is None:
            raise ValueError("x0_prior needs x0_prior_sigma (the prior standard deviation).")
        s0 = np.array(x0_prior, dtype=np.float64).reshape(-1)
        sigma0 = np.broadcast_to(np.asarray(x0_prior_sigma, np.float64), (n,)).copy()
        if s0.shape != (n,) or np.any(sigma0 <= 0):
            raise ValueError(f"x0_prior needs {n} values and x0_prior_sigma positive values.")
        prior = (s0, sigma0)
    if invariant is not None:
        c, total = invariant
        c = np.array(c, dtype=np.float64).reshape(-1)
        if c.shape != (n,):
            raise ValueError(f"invariant=(c, N) needs c with {n} entries; got {c.size}.")
        penalty = (c, float(total), float(invariant_weight))
    return prior, penalty



def objective_for_experiment(model, experiment, observed, *, theta0, fitted=None, sigma=1.0,
                             noise_kind="absolute", x0_prior=None, x0_prior_sigma=None,
                             invariant=None, invariant_weight=1e-4, positive=False,
                             integrator="auto", rtol=1e-8, atol=1e-10,
                             estimator_name="AdjointODE", noise_range=None):
    """The cost of one validated :class:`~sklode._validation.Experiment` and its start ``u0``.

    Parameters
    ----------
    model : ODEModel
    experiment : Experiment
    observed : tuple of int
    theta0 : ndarray of shape (n_params,)
    fitted : ndarray of bool of shape (n_params,), optional
        Parameters that are estimated (default: all); the others are held at ``theta0``.
    sigma, noise_kind, x0_prior, x0_prior_sigma, invariant, invariant_weight, positive, \
integrator, rtol, atol
        As for :class:`~sklode.AdjointODE`.
    estimator_name : str, default="AdjointODE"
        For messages.
    noise_range : float, optional
        How far below the data's typical size a modelled noise level may fall before the
        cost is undefined (:class:`~sklode.observation._observation.Observation`).

    Returns
    -------
    objective : LeastSquaresObjective
    u0 : ndarray
        The starting point in optimiser variables.
    """
    x0 = start_from_data(experiment, observed, model, estimator_name)
    prior, penalty = _prior_and_invariant(model.n_states, x0_prior, x0_prior_sigma, invariant,
                                          invariant_weight)
    sigma = sigma if experiment.sigma is None else experiment.sigma
    observation = observation_for(model, experiment, observed, sigma, noise_kind, noise_range)
    objective = LeastSquaresObjective(
        model, experiment.t0, experiment.t, experiment.Y,
        None if observation is not None else observation_sigma(experiment.Y, sigma,
                                                                noise_kind),
        observed, x0, theta0,
        free=experiment.estimate_x0, prior=prior, invariant=penalty,
        positive=check_positive(positive, model.n_params),
        log_factor=log_factors(positive, model.n_params), integrator=integrator, rtol=rtol,
        atol=atol, fitted=fitted, observation=observation, doses=experiment.doses or None,
        theta_map=condition_map(experiment.conditions, model),
        preequilibration=_preequilibration_of(experiment, model))
    return objective, objective.to_u(np.concatenate([x0[objective.free],
                                                     theta0[objective.fitted]]))



def _preequilibration_of(experiment, model):
    """``(A, c, x0_pre, reset)`` of a validated experiment's pre-equilibration, or None."""
    pre = getattr(experiment, "preequilibration", None)
    if pre is None:
        return None
    if experiment.estimate_x0.any():
        raise ValueError(f"Experiment {experiment.name or ''} starts from a pre-equilibrated "
                         "steady state: its initial state is not estimated (estimate_x0=False).")
    conditions, x0_pre, reset = pre
    A, c = condition_map(conditions, model) or (np.eye(model.n_params), np.zeros(model.n_params))
    return A, c, np.asarray(x0_pre, dtype=np.float64), np.asarray(reset, dtype=bool)



def objective_for_experiments(model, data, **settings):
    """The cost of every experiment of an :class:`~sklode._validation.ExperimentData` (theta
    shared) and its start: a :class:`LeastSquaresObjective` for one experiment, an
    :class:`ExperimentsObjective` for several.

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData
    **settings
        The keyword arguments of :func:`objective_for_experiment`.

    Returns
    -------
    objective : LeastSquaresObjective or ExperimentsObjective
    u0 : ndarray
        The starting point in optimiser variables.
    """
    posed = [objective_for_experiment(model, experiment, data.observed, **settings)
             for experiment in data.experiments]
    if not data.several:
        return posed[0]
    objective = ExperimentsObjective([part for part, _ in posed])
    u0 = np.concatenate([u[: part.n_x0] for part, u in posed]
                        + [posed[0][1][posed[0][0].n_x0:]])
    return objective, u0



def build_objective(model, t, Y, *, theta0=None, x0=None, t0=None, estimate_x0=True,
                    observed=None, **settings):
    """The exact cost :class:`~sklode.AdjointODE` with these settings minimises on ``(t, Y)``.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    t : array-like of shape (n_samples,)
        Observation times.
    Y : array-like of shape (n_samples, n_observed)
        Observations of the observed states.
    theta0, x0, t0, estimate_x0, observed : optional
        As for :class:`~sklode.AdjointODE`.
    **settings
        The cost's other keyword arguments of :class:`~sklode.AdjointODE` (``sigma``,
        ``noise_kind``, ``x0_prior``, ``x0_prior_sigma``, ``invariant``,
        ``invariant_weight``, ``positive``, ``integrator``, ``rtol``, ``atol``); optimiser
        settings are ignored.

    Returns
    -------
    objective : LeastSquaresObjective
        The cost.
    u0 : ndarray
        The starting point in optimiser variables.
    """
    cost_keys = ("sigma", "noise_kind", "x0_prior", "x0_prior_sigma", "invariant",
                 "invariant_weight", "positive", "integrator", "rtol", "atol")
    data = check_experiments(t, Y, model=check_model(model), observed=observed, x0=x0, t0=t0,
                             estimate_x0=estimate_x0, estimator_name="AdjointODE")
    fitted, theta0 = check_fixed(settings.get("fixed"), check_theta0(theta0, model), model)
    return objective_for_experiments(
        model, data, theta0=theta0, fitted=fitted,
        **{k: v for k, v in settings.items() if k in cost_keys})
