"""An experiment's parameters, initial state, states and observables at its times: the one
forward prediction that fits, diagnostics and ``predict`` share."""

from __future__ import annotations

import numpy as np

from .._checks import condition_map
from ..integrate import _resolve_integrator, native_solver_for, simulate

__all__ = ["conditioned_theta", "experiment_start", "predicted_observables",
           "states_at_observations"]


def conditioned_theta(theta, conditions, model):
    """An experiment's parameters: its ``conditions`` applied to the shared ``theta``.

    Parameters
    ----------
    theta : ndarray of shape (n_params,)
    conditions : dict or None
        A validated experiment's conditions (:mod:`sklode._validation`).
    model : ODEModel

    Returns
    -------
    ndarray of shape (n_params,)
    """
    mapping = condition_map(conditions, model)
    theta = np.asarray(theta, dtype=np.float64)
    return theta if mapping is None else mapping[0] @ theta + mapping[1]



def experiment_start(model, experiment, theta):
    """A validated experiment's initial state: its ``x0``, plus the model's initial offsets
    at its parameters where its initial values depend on them
    (:meth:`~sklode.ODEModel.initial_offsets`, a PEtab import).

    Parameters
    ----------
    model : ODEModel
    experiment : validated experiment (:mod:`sklode._validation`)
    theta : ndarray of shape (n_params,)
        The shared parameters (the experiment's conditions are applied here).

    Returns
    -------
    ndarray of shape (n_states,)
    """
    offsets = model.initial_offsets(conditioned_theta(theta, experiment.conditions, model))
    return experiment.x0 if offsets is None else experiment.x0 + offsets



def states_at_observations(model, theta, data, x0s, options):
    """Each experiment's states at its observation times and its parameters.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    data : ExperimentData
    x0s : array-like of shape (n_experiments, n_states)
    options : dict
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    states : list of ndarray of shape (n_times, n_states)
    thetas : list of ndarray of shape (n_params,)
    """
    x0s = np.reshape(x0s, (-1, data.n_states))
    thetas = [conditioned_theta(theta, e.conditions, model) for e in data.experiments]
    # Experiments that pose one initial value problem (a PEtab condition split by its rows'
    # noise or observable parameters: Chen_MSB2009's 4 conditions are 39 experiments) are
    # solved once on the union of their times, as the estimators' objective does
    # (outputerror._experiments._SharedSolve). Which parameters the field reads is known on
    # the CVODES path; elsewhere only experiments with equal parameters share.
    native = native_solver_for(model, _resolve_integrator(options.get("integrator", "auto")))
    # (the switches' parameters too: a stimulus at a parameter's time)
    reads = None if native is None else np.asarray(native.param_read, dtype=bool)
    groups = {}
    for k, (e, x0, th) in enumerate(zip(data.experiments, x0s, thetas)):
        key = (float(e.t0), repr(e.doses), np.asarray(x0, dtype=np.float64).tobytes(),
               (th if reads is None else th[reads]).tobytes())
        groups.setdefault(key, []).append(k)
    states = [None] * len(thetas)
    for members in groups.values():
        first = data.experiments[members[0]]
        times = np.unique(np.concatenate([data.experiments[k].t for k in members]))
        X = simulate(model, thetas[members[0]], x0s[members[0]], times, t0=first.t0,
                     doses=first.doses, **options)
        for k in members:
            states[k] = X[np.searchsorted(times, data.experiments[k].t)]
    return states, thetas



def predicted_observables(model, theta, experiment, x0, t, options):
    """All the model's observables at times ``t`` of an experiment (its doses and conditions
    applied), integrated from its ``x0`` at its ``t0``.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    experiment : Experiment
    x0 : ndarray of shape (n_states,)
    t : ndarray of shape (n_times,)
    options : dict

    Returns
    -------
    ndarray of shape (n_times, n_observables)
    """
    theta = conditioned_theta(theta, experiment.conditions, model)
    X = simulate(model, theta, x0, t, t0=experiment.t0, doses=experiment.doses, **options)
    return model.observe_values(t, X, theta)
