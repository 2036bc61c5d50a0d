"""The start ``X*(0)`` of BCD-prox for one experiment, when the data do not give every entry.

The paper starts from ``X*(0) = Y`` with every state observed at every time (seed 000). Real
data have gaps and unmeasured states; the seed's own follow-up suggests starting the
unobserved components by integrating from a guess. Here:

* an observed state with missing entries starts from linear interpolation of its own
  observations in time (constant beyond its first and last observation);
* a hidden state (never observed in this experiment) starts from its guess in ``x0`` and is
  integrated with ``theta0``, the observed states following their (interpolated) data, so
  the start is consistent with what was measured instead of a free simulation that drifts
  away from it;
* a known initial value replaces the first row of its component.

BCD-prox has no data term beyond this start (its proximal anchor is the previous iterate), so
the start is where the data enter; the iterations then move every entry, observed or not.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from scipy.integrate import solve_ivp

from ..exceptions import DivergenceError

__all__ = ["decoupled_hidden_states", "observed_entries", "start_states", "with_substeps"]

# Tolerance of the integration of the hidden states: the start only has to be in the right
# region (the iterations move it), so a loose rtol keeps this cheap.
_START_RTOL = 1e-6


def start_states(model, theta0, experiment, observed, estimator_name="BCDProxODE"):
    """``X*(0)`` of shape ``(n_times, n_states)`` for one experiment.

    Parameters
    ----------
    model : ODEModel
    theta0 : ndarray of shape (n_params,)
        Parameters of the integration of hidden states.
    experiment : Experiment
        Its ``x0`` holds the known values and the guesses (NaN: nothing known).
    observed : tuple of int
        The state of each column of ``experiment.Y``.
    estimator_name : str, default="BCDProxODE"
        For the messages.

    Returns
    -------
    ndarray of shape (n_times, n_states)
    """
    t, n_states = experiment.t, model.n_states
    X = np.full((t.size, n_states), np.nan)
    for column, state in enumerate(observed):
        seen = experiment.mask[:, column]
        if seen.any():
            X[:, state] = np.interp(t, t[seen], experiment.Y[seen, column])
    hidden = np.flatnonzero(np.all(np.isnan(X), axis=0))  # no observation in this experiment
    known = ~experiment.estimate_x0
    X[0, known] = experiment.x0[known]
    if hidden.size == 0:
        return X
    guess = experiment.x0[hidden]
    if np.any(np.isnan(guess)):
        names = [model.state_names[i] for i in hidden[np.isnan(guess)]]
        raise ValueError(
            f"{estimator_name} needs a guess of the initial value of the unobserved state(s) "
            f"{names} to start them (they are integrated from it with theta0, the observed "
            "states following the data): pass it in x0, with NaN for the components the data "
            "give.")
    follow = np.setdiff1d(np.arange(n_states), hidden)
    data_path = X[:, follow]

    def hidden_rhs(s, z):
        x = np.empty((1, n_states))
        x[0, follow] = [np.interp(s, t, column) for column in data_path.T]
        x[0, hidden] = z
        return model.f(np.array([s]), x, theta0)[0, hidden]

    with np.errstate(all="ignore"):
        sol = solve_ivp(hidden_rhs, (t[0], t[-1]), guess, method="LSODA", t_eval=t,
                        rtol=_START_RTOL, atol=_START_RTOL * (1e-3 + np.abs(guess)))
    if sol.status != 0 or sol.y.shape[1] != t.size or not np.all(np.isfinite(sol.y)):
        names = [model.state_names[i] for i in hidden]
        raise DivergenceError(
            f"{estimator_name} starts the unobserved state(s) {names} by integrating them from "
            f"x0 with theta0 = {np.asarray(theta0)}, the observed states following the data, "
            f"but that integration failed ({sol.message.strip()}). Give a closer theta0 or x0 "
            "guess.", n_iter=0)
    X[:, hidden] = sol.y.T
    return X


def observed_entries(experiment, observed, n_states):
    """Which entries of the experiment's states ``(n_times, n_states)`` are observed.

    Parameters
    ----------
    experiment : Experiment
    observed : tuple of int
        The state of each column of ``experiment.Y``.
    n_states : int

    Returns
    -------
    ndarray of bool of shape (n_times, n_states)
    """
    entries = np.zeros((experiment.t.size, n_states), dtype=bool)
    entries[:, list(observed)] = experiment.mask
    return entries


def decoupled_hidden_states(coupled, observed):
    """The hidden states whose own equations involve no observed state anywhere.

    The data reach such a state only through the other equations, which the block iteration
    follows slowly: its start, integrated with ``theta0``, stays nearly consistent with
    ``theta0``, and so do the parameters of its own equation (oral absorption with only the
    concentration measured: ``ka`` 0.78 from ``theta0`` 0.8, truth 1.2).

    Parameters
    ----------
    coupled : ndarray of bool of shape (n_states, n_states)
        Where ``df/dx`` is non-zero somewhere on the experiments' grids.
    observed : tuple of int

    Returns
    -------
    list of int
    """
    hidden = [i for i in range(coupled.shape[0]) if i not in observed]
    return [h for h in hidden if not coupled[h, list(observed)].any()]


def with_substeps(data, substeps):
    """``data`` with ``substeps - 1`` equally spaced times without observations inserted in
    every sampling interval (the samples stay at every ``substeps``-th grid time).

    Parameters
    ----------
    data : ExperimentData
    substeps : int

    Returns
    -------
    ExperimentData
    """
    if substeps == 1:
        return data
    experiments = []
    for e in data.experiments:
        fractions = np.arange(substeps) / substeps
        t = np.append((e.t[:-1, None] + np.diff(e.t)[:, None] * fractions).ravel(), e.t[-1])
        Y = np.full((t.size, e.Y.shape[1]), np.nan)
        mask = np.zeros(Y.shape, dtype=bool)
        Y[::substeps], mask[::substeps] = e.Y, e.mask
        experiments.append(replace(e, t=t, Y=Y, mask=mask))
    return replace(data, experiments=tuple(experiments))
