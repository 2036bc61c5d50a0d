"""Initial states from data, shared by the estimators: a start from the first observations,
a local smoother, and shooting (least squares of a simulated trajectory over ``x0`` with
``theta`` held).

WENDy estimates no initial state of its own, so it shoots from its ``theta``; any method can
use the same helpers to start unknown components.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import least_squares

from ..exceptions import IntegrationError
from ..integrate import simulate, solve
from ._sensitivity import forward_trajectory, sensitivities

__all__ = ["data_starts", "shoot_initial_state", "shooting_window", "smoothed_x0",
           "start_from_data"]

# A residual this large marks a trial initial state whose trajectory blew up.
_BLOWN_UP = 1e10
# Forward-difference step for the x0 Jacobian, relative to max(1, |x0|): the batch shares
# one step sequence, so only round-off (~1e-16 / h) limits the difference.
_FD_STEP = 1e-7
# Most entries (observed values x free initial values) of the shooting's Jacobian: 160 MB.
# From this many states the shooting's Jacobian is the exact forward sensitivities (Lorenz-96
# at 300 states: the batched differences, one solve of 301 copies, are a 90,300-component
# system: 61 GB of LSODA workspace, and 180 of a 209 s fit in slices of 4,096 components).
_SENSITIVITY_MIN_STATES = 64
_SHOOT_MAX_JACOBIAN = 20_000_000
# Stop once a step changes the cost by less than 1 % of one residual's noise variance.
_SHOOT_FTOL_PER_SAMPLE = 0.01
# Integration tolerance of the shooting (its floor: a looser rtol is used if asked): 1e-4 is
# 50x below the smallest noise of the papers' problems (5 %), and the batch shares its steps,
# so the differences stay smooth. 1e-6 cost 2x the time for the same x0 to 3 digits.
SHOOT_RTOL = 1e-4
# A bound on the trust region's trial solves: with a poor theta (Hindmarsh-Rose at 20 %
# noise) the simulated bursts cannot match the data and the loop crawled for 200-500 solves
# (40-60 s) without improving the prediction; it keeps the best state found so far.
_SHOOT_MAX_EVALUATIONS = 30
# Shooting window: four smallest test-function radii, at most 15 % of the series, at least
# 10 samples, and at least 10 samples past the first one that moves 10 noise levels.
_WINDOW_RADII = 4
_WINDOW_FRACTION = 0.15
_WINDOW_MIN_SAMPLES = 10
_WINDOW_MOVE_SIGMAS = 10.0
# The smoothed data start: a quadratic through the first eighth of an experiment's samples of
# each state, at least 5 and at most 15 of them. At the series' first time a quadratic's
# variance is 0.89 (5 samples), 0.66 (9) and 0.46 (15) of one sample's; a longer window would
# bend over a fast transient.
_SMOOTH_FRACTION = 8
_SMOOTH_MIN_SAMPLES = 5
_SMOOTH_MAX_SAMPLES = 15
# Data of one sign: the other sign reaches (5th percentile) at most this fraction of the
# data's own reach (95th). Noise about a small positive state gives it negative values of a
# few noise levels, many of them where the state is near 0 (an infected fraction under 10 %
# noise: 4 in 100 draws blew up from a negative first reading when a quarter of negative
# values made it "two-signed"); an oscillation about 0 reaches as far on both sides.
_OTHER_SIGN_REACH = 1.0 / 3.0
# A start of the wrong sign is moved to this fraction of the data's reach, of their sign.
_INSIDE_SIGN = 1e-3


def start_from_data(experiment, observed, model, estimator_name):
    """The initial state with its unknown (NaN) components started from the data.

    A component that is observed at the first time starts at that observation; a hidden one
    (or one missing there) needs a guess in ``x0``.

    Parameters
    ----------
    experiment : Experiment
    observed : tuple of int
    model : ODEModel
    estimator_name : str
        For the message.

    Returns
    -------
    ndarray of shape (n_states,)
    """
    x0 = experiment.x0.copy()
    unknown = np.isnan(x0)
    reads_states = not model.has_observation_model
    for column, state in enumerate(observed if reads_states else ()):
        if unknown[state] and experiment.mask[0, column]:
            x0[state] = experiment.Y[0, column]
    if np.any(np.isnan(x0)):
        missing = [model.state_names[i] for i in np.flatnonzero(np.isnan(x0))]
        why = ("not observed at the first time" if reads_states else
               "the data are observables, not states")
        raise ValueError(f"The data give no starting value for the initial state of "
                         f"{missing} ({why}): pass a guess in x0 to {estimator_name}.")
    return x0


def data_starts(experiment, observed, model, estimator_name):
    """Initial states to start a forward-solver fit from: the unknown (NaN) components
    smoothed from the data, as first observed, and each of those with a component of
    one-signed data (the other sign reaches at most a third as far: 5th against 95th
    percentile) whose start has the other sign moved just inside the data's sign (1e-3 of
    their reach).

    A noisy first observation of a small positive state can be negative (an infected
    fraction of 1e-3 under 2 % noise), and the ODE then blows up (``I' = (beta S - gamma) I``
    grows the negative ``I`` without bound); on a chaotic system either of two starts a third
    of a noise level off can cost 4x the other. A forward solver starts from the one with
    the lowest cost that it can integrate. Known components, guesses in ``x0``, hidden
    states and data read through an observation model are never changed. A state whose data
    change sign (an oscillation about 0) is never moved: the origin is often an equilibrium
    (Van der Pol's), where the observations do not depend on the parameters, and its flat
    cost can be below that of a start whose cycle drifts out of phase.

    Parameters
    ----------
    experiment : Experiment
    observed : tuple of int
    model : ODEModel
    estimator_name : str
        For the message of :func:`start_from_data`.

    Returns
    -------
    list of ndarray of shape (n_states,)
        Distinct starts, at least one.
    """
    first = start_from_data(experiment, observed, model, estimator_name)
    unknown = np.isnan(experiment.x0)
    if model.has_observation_model or not unknown.any():
        return [first]
    smoothed, signs, reach = first.copy(), np.zeros_like(first), np.zeros_like(first)
    for column, state in enumerate(observed):
        seen = experiment.mask[:, column]
        if not unknown[state] or not seen[0]:
            continue
        t, y = experiment.t[seen], experiment.Y[seen, column]
        low, high = np.percentile(y, [5.0, 95.0])
        if high > 0 and -low <= _OTHER_SIGN_REACH * high:
            signs[state], reach[state] = 1.0, high
        elif low < 0 and high <= _OTHER_SIGN_REACH * -low:
            signs[state], reach[state] = -1.0, -low
        n_local = min(_SMOOTH_MAX_SAMPLES, max(_SMOOTH_MIN_SAMPLES, y.size // _SMOOTH_FRACTION))
        if y.size >= n_local:
            smoothed[state] = smoothed_x0(t[:n_local], y[:n_local, None], np.inf)[0]
    # just inside the sign, not at 0: a state at 0 often stays there (an infected fraction),
    # an invariant set on which the observations do not depend on the parameters and CVODES,
    # whose steps follow the states' error alone, takes steps too long for the sensitivities
    projected = [np.where(unknown & (x * signs < 0), _INSIDE_SIGN * signs * reach, x)
                 for x in (smoothed, first)]
    starts = []
    for x in [smoothed, first, *projected]:
        if not any(np.array_equal(x, other) for other in starts):
            starts.append(x)
    return starts


def smoothed_x0(t, U, radius):
    """State at ``t[0]`` from a local quadratic least-squares fit of the data within ``radius``
    (at least 5 samples).

    Parameters
    ----------
    t : ndarray of shape (n_times,)
    U : ndarray of shape (n_times, n_states)
    radius : float
        Time span of the fit.

    Returns
    -------
    ndarray of shape (n_states,)
    """
    n_local = max(5, int(np.searchsorted(t, t[0] + radius)))
    n_local = min(n_local, t.size)
    s = t[:n_local] - t[0]
    A = np.vander(s, 3, increasing=True)
    coef = np.linalg.lstsq(A, U[:n_local], rcond=None)[0]
    return coef[0]


def shooting_window(t, U, x0, sigma, radius):
    """How many leading samples the short-window shooting fits.

    Four ``radius`` (at most 15 % of the series, at least 10 samples): a few cheap solves and
    no sensitivity to chaotic divergence later in the series; but long enough for the data to
    move well above the noise, since a trajectory creeping up from near zero (logistic growth
    from 0.01) says nothing about x0 until it rises (wendy_logistic at 5 %: prediction error
    1.13 -> 0.056).

    Parameters
    ----------
    t : ndarray of shape (n_times,)
    U : ndarray of shape (n_times, n_states)
    x0 : ndarray of shape (n_states,)
        The smoothed start.
    sigma : ndarray of shape (n_states,)
        Noise level per state.
    radius : float
        The smallest test-function radius.

    Returns
    -------
    int
    """
    window = min(_WINDOW_RADII * radius, _WINDOW_FRACTION * (t[-1] - t[0]))
    n_win = max(_WINDOW_MIN_SAMPLES, int(np.searchsorted(t, t[0] + window)))
    moved = np.abs(U - x0) > _WINDOW_MOVE_SIGMAS * np.maximum(sigma, 1e-300)
    first_move = int(np.argmax(np.any(moved, axis=1))) if np.any(moved) else t.size
    return min(t.size, max(n_win, first_move + _WINDOW_MIN_SAMPLES))


def shoot_initial_state(model, theta, t, Y, x0, *, free=None, observed=None, t0=None,
                        bounds=None, integrator="LSODA", rtol=SHOOT_RTOL):
    """Least-squares initial state with ``theta`` held (trust region, batched differences).

    Every trial state ``z`` integrates the batch ``[z, z + h e_1, ...]`` as one system: its
    residual and the forward-difference Jacobian the trust region asks for next come from
    one solve, and the members share one step sequence, so the differences carry no
    step-size noise. The loop stops once a step changes the cost by less than 1 % of one
    residual's noise variance (the x0 then moves by well under a tenth of its standard
    error); at most ``_SHOOT_MAX_EVALUATIONS`` trial states are tried. Trial states that blow
    up get a huge residual. When the start itself blows up (logistic growth from 0.01 at 10 %
    noise smooths to a negative x0, and a constant penalty has no gradient to leave it), the
    start is the data's mean over the last 5 samples integrated back to ``t[0]`` (every state
    observed only).

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    t : ndarray of shape (n_times,)
        Increasing observation times.
    Y : ndarray of shape (n_times, n_observed)
        Observations of the states ``observed``, NaN where missing.
    x0 : ndarray of shape (n_states,)
        The start; components outside ``free`` are held at their value.
    free : ndarray of bool of shape (n_states,), optional
        Components to fit (default: all).
    observed : sequence of int, optional
        The state of each column of ``Y`` (default: every state, in order).
    t0 : float, optional
        Time of the initial state, at or before ``t[0]`` (default: ``t[0]``).
    bounds : (ndarray, ndarray), optional
        Lower and upper bounds of shape ``(n_states,)`` on the initial state.
    integrator : str, default="LSODA"
    rtol : float, default=SHOOT_RTOL

    Returns
    -------
    x0 : ndarray of shape (n_states,)
        The fitted state (the start itself when no start integrates: ``predict`` will then
        say so with an :class:`~sklode.exceptions.IntegrationError`).
    """
    # Differences, not the exact sensitivity Jacobian: with the exact one the trust region
    # needed ~300 solves (up to 54 s) on Hindmarsh-Rose at 20 % noise where differences need
    # ~20 (the differences smooth over the integrator's own error).
    n_states = model.n_states
    x0 = np.asarray(x0, dtype=np.float64)
    observed = np.arange(n_states) if observed is None else np.asarray(observed, dtype=int)
    t0 = float(t[0]) if t0 is None else float(t0)
    at_t0 = t0 == t[0]  # the first row of the trajectory is the initial state itself
    seen = np.isfinite(Y)
    Y_seen = Y[seen]
    free = np.ones(n_states, dtype=bool) if free is None else np.asarray(free, dtype=bool)
    n_free = int(free.sum())
    if n_free == 0:
        return x0.copy()
    if Y_seen.size * n_free > _SHOOT_MAX_JACOBIAN:
        # Wide models: the differences and the Jacobian hold (observed values) x (free
        # initial values) numbers, 1.2 GB each for Lorenz-96 with 1,000 states on a
        # 150-sample window (a 10 GB fit); the leading samples that fit the budget pin x0
        # (the later ones add chaos and cost, not information about x0).
        per_row = np.cumsum(seen.sum(axis=1))
        keep = max(2, int(np.searchsorted(per_row, _SHOOT_MAX_JACOBIAN // n_free, "right")))
        t, Y, seen = t[:keep], Y[:keep], seen[:keep]
        Y_seen = Y[seen]
    box = (-np.inf, np.inf) if bounds is None else (bounds[0][free], bounds[1][free])

    def full(Z):  # free components -> whole states, shape (n_batch, n_states)
        X0 = np.broadcast_to(x0, (Z.shape[0], n_states)).copy()
        X0[:, free] = Z
        return X0

    def trajectories(Z):  # (n_batch, n_free) -> observed entries, (n_batch, n_seen)
        X0 = full(Z)
        t_eval = t[1:] if at_t0 else t
        sol = solve(model, theta, X0, (t0, t[-1]), t_eval=t_eval, integrator=integrator,
                    rtol=rtol, atol=1e-3 * rtol)
        X = sol.y.reshape(Z.shape[0], n_states, -1).transpose(0, 2, 1)
        if at_t0:
            X = np.concatenate([X0[:, None, :], X], axis=1)
        return X[:, :, observed][:, seen]

    def with_sensitivities(z, sign=1.0):
        """Trajectory from ``z`` and its exact Jacobian from one forward-sensitivity pass
        (wide models: the differences are one solve of n_free + 1 copies of the model,
        and the sensitivities read df/dx through its structural entries). ``sign`` is
        :func:`with_differences`'s, without meaning for an exact Jacobian."""
        traj = forward_trajectory(model, theta, full(z[None])[0], t0, t,
                                  integrator=integrator, rtol=rtol, atol=1e-3 * rtol)
        S = sensitivities(model, theta, traj, with_x0=True)[:, observed][:, :, :n_states]
        return traj.states[:, observed][seen], S[:, :, free][seen]

    def with_differences(z, sign=1.0):
        """Trajectory from ``z`` and its forward (``sign=-1``: backward) differences, one
        batched solve (a batch costs little more than one solve for small models)."""
        h = sign * _FD_STEP * np.maximum(1.0, np.abs(z))
        X = trajectories(np.vstack([z, z + np.diag(h)]))
        return X[0], ((X[1:] - X[0]) / h[:, None]).T

    # Wide models: the exact Jacobian (one sparse pass, nothing to retry backwards); others:
    # forward differences, backward ones if the forward batch blows up.
    wide = n_states >= _SENSITIVITY_MIN_STATES
    with_jacobian = with_sensitivities if wide else with_differences
    signs = (1.0,) if wide else (1.0, -1.0)

    # The trust region asks for the Jacobian at every accepted state right after its
    # residual: keeping the residual's differences halves the solves (FitzHugh-Nagumo: 12.6
    # -> 7 per fit).
    cache = {}

    def residual(z):
        try:
            X0, jac = with_jacobian(z)
        except IntegrationError:
            cache.clear()  # the Jacobian, if asked for, is formed on its own below
            try:
                return trajectories(z[None])[0] - Y_seen
            except IntegrationError:  # steer away from initial states that blow up
                return np.full(Y_seen.size, _BLOWN_UP)
        cache.update(z=z.copy(), jac=jac)
        return X0 - Y_seen

    def jacobian(z):
        if "z" in cache and np.array_equal(cache["z"], z):
            return cache["jac"]
        for sign in signs:
            try:
                return with_jacobian(z, sign)[1]
            except IntegrationError:
                continue
        return np.zeros((Y_seen.size, n_free))  # no direction integrates: the loop stops

    def integrated_back():  # only computed when the given start fails (a solve)
        if observed.size != n_states or not seen.all():
            return None
        tail = slice(max(0, t.size - 5), t.size)
        try:
            back = simulate(model, theta, Y[tail][:, np.argsort(observed)].mean(axis=0), [t0],
                            t0=float(t[tail].mean()), rtol=1e-6, atol=1e-9)[0]
        except IntegrationError:
            return None
        return back[free]

    for make_start in (lambda: x0[free], integrated_back):
        start = make_start()
        if start is None:
            continue
        start = np.clip(start, *box)
        if np.max(np.abs(residual(start))) < _BLOWN_UP:
            # The final cost is about Y_seen.size noise variances: this ftol stops at a
            # change of under 1 % of one.
            res = least_squares(residual, start, jac=jacobian, x_scale="jac", bounds=box,
                                ftol=_SHOOT_FTOL_PER_SAMPLE / Y_seen.size,
                                max_nfev=_SHOOT_MAX_EVALUATIONS)
            return full(res.x[None])[0]
    return x0.copy()
