"""What only the methods on the data grid share (BCD-prox and WENDy, never AdjointODE).

Both fit the states themselves at the sampling times: they refuse observables and modelled
noise (:func:`require_state_data`), split experiments at their doses (:class:`DoseSplit`), may
fit in scaled or log states (:func:`on_state_scale`), hold ``fixed`` parameters inside a model
whose theta-steps stay linear least squares (:func:`hold_fixed`), and end their fits the same
way (:func:`finish_fit`: covariance, bootstrap, assessment, likelihood, offset from the
output-error optimum).
"""

from __future__ import annotations

from dataclasses import replace
from numbers import Integral

import numpy as np
from sklearn.utils._param_validation import Interval

from ._validation import estimated_x0_mask, experiment_label, initial_times
from ._checks import bounds_with_positivity, check_fixed
from .diagnostics._assessment import Polish, assess_fit, likelihood_attributes
from .diagnostics._bootstrap import bootstrap_replicates, replicate_noise
from .diagnostics._uncertainty import standard_errors, uncertainty_attributes
from .exceptions import ConvergenceWarning, PoorFitWarning, SklodeError, warn
from ._events import add_doses, bolus_only, dose_segments, model_events
from .integrate import simulate
from .models._wrappers import HeldParameters, ScaledStates

__all__ = ["BOOTSTRAP_CONSTRAINTS", "DoseSplit", "STATE_NOISE_KINDS", "bootstrap_attributes",
           "bounded_theta_problem", "finish_fit", "fitted_mask", "full_theta", "has_bounds",
           "hold_fixed", "is_linear_on_data", "offset_attributes", "on_state_scale",
           "require_observed", "require_state_data"]


#: A bootstrap bias beyond this many standard errors warns: intervals centred on theta_
#: would then cover the truth in 68 % of fits instead of 95 % (|b + Z| < 1.96 with
#: b = 1.5), so theta_ itself should not be read without the correction. Above the
#: bootstrap's own Monte Carlo error of the bias (1/sqrt(n_boot) standard errors: 0.14 at
#: 50 replicates) with room to spare.
BOOTSTRAP_BIAS = 1.5


#: The parameters of the parametric bootstrap (BCD-prox and WENDy: ``_bootstrap_attributes``).
BOOTSTRAP_CONSTRAINTS = {
    "n_boot": [Interval(Integral, 0, None, closed="left")],
    "random_state": ["random_state"],
    "n_jobs": [Integral, None],
}


#: The noise kinds the methods on the data grid (BCD-prox, WENDy) take: one weight per state.
STATE_NOISE_KINDS = ("absolute", "relative_rms", "proportional", "lognormal")


def require_state_data(model, data, noise_kind, estimator_name, proportional=True):
    """Refuse, naming AdjointODE, what only a forward-solver likelihood can fit: events,
    observables other than the states, a modelled noise, per-experiment parameter values,
    per-observable or Laplace/log10 error kinds (BCD-prox's fidelity and WENDy's weak form
    are written in the states, with one noise level per state).

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData or None
        None: check the model and the settings only (before the data are validated).
    noise_kind : str or dict
    estimator_name : str
    proportional : bool, default=True
        Whether the method takes ``noise_kind="proportional"`` (when not, it is left to the
        method's own message and not listed here).
    """
    way = "Use AdjointODE, which fits"
    events = model_events(model)
    if events:
        raise ValueError(
            f"{estimator_name} fits a smooth trajectory on the data grid, but "
            f"{type(model).__name__} has events ({', '.join(map(repr, events))}) that make "
            f"its state jump. {way} models with events (it solves across them).")
    if model.has_observation_model:
        raise ValueError(
            f"{estimator_name} fits the states themselves (its cost is written in x), but "
            f"{type(model).__name__} reads its data through observe() as "
            f"{model.observables}. {way} any observable through its sensitivities.")
    if model.has_noise_model:
        raise ValueError(
            f"{estimator_name} takes the noise level from sigma/noise_kind (or its own "
            f"estimate), not from a model's noise_sd. {way} noise parameters by maximum "
            "likelihood.")
    allowed = [k for k in STATE_NOISE_KINDS if proportional or k != "proportional"]
    if noise_kind == "proportional" and not proportional:
        pass  # the method's own message names the multiplicative kind it takes
    elif isinstance(noise_kind, dict) or noise_kind not in allowed:
        raise ValueError(
            f"{estimator_name} takes one noise kind for all states, one of {allowed}; got "
            f"noise_kind={noise_kind!r}. {way} per-observable, 'laplace' and 'log10normal' "
            "errors.")
    for k, e in enumerate(data.experiments if data is not None else ()):
        if e.conditions:
            where = f" {e.name!r}" if e.name is not None else f" {k}"
            raise ValueError(
                f"Experiment{where} sets parameters through conditions={e.conditions}, but "
                f"{estimator_name} fits one parameter vector for all experiments. {way} "
                "per-experiment conditions (or fit each condition separately).")


class DoseSplit:
    """Experiments with doses as the methods on the data grid (BCD-prox, WENDy) can take them.

    A dose at ``t0`` is added to the initial state (a known component) or to its estimate
    (reported back before the dose); the data after a later dose become a piece of their
    own, a new experiment whose initial state at its first sample is estimated (the dose's
    size then carries no information to these methods, but nothing is fitted across it).
    Each piece keeps the original experiment's guesses for its hidden states.

    Parameters
    ----------
    data : ExperimentData
    estimator_name : str
    min_samples : int
        Fewest samples a piece needs.
    node_at_t0 : bool
        Add an unobserved row at ``t0`` when it is before the first sample (BCD-prox's grid
        starts at the initial state).
    """

    def __init__(self, data, estimator_name, min_samples, node_at_t0):
        self.original = data
        pieces, self.first, self.folded = [], [], []
        self.node = [0] * data.n_experiments  # unobserved rows added before the first sample
        for k, e in enumerate(data.experiments):
            if not bolus_only(e.doses):
                raise ValueError(
                    f"{estimator_name} cuts its data grid at boluses, but experiment "
                    f"{e.name or k} has dosing records it cannot state on the grid (an "
                    "infusion, a steady state under repeated dosing or a reset): use "
                    "AdjointODE, which solves across them.")
            # the doses at t0 go into the initial state; later ones cut the series
            at_start, later = dose_segments(e.doses, e.t0, e.t[-1])
            at_t0 = add_doses(np.zeros(data.n_states), at_start)
            cuts = [time for time, _ in later]
            self.folded.append(at_t0)
            x0 = np.where(np.isfinite(e.x0), e.x0 + at_t0, np.nan)
            edges = [-np.inf] + sorted(set(cuts)) + [np.inf]
            self.first.append(len(pieces))
            for j, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
                rows = (e.t > lo) & (e.t <= hi)
                if j == 0:
                    piece = replace(e.at_rows(rows), x0=x0, doses=())
                    if node_at_t0 and e.t0 < piece.t[0]:
                        # one unobserved node at t0: its state is held where known (a dose
                        # into an empty compartment); estimated components are shot back
                        # from the first sample afterwards (shoot_back). Measured on LV with
                        # t0 half a time unit early: more nodes one sampling step apart left
                        # them near their start and biased theta by 10-18 %; one node did not.
                        n_new = 1
                        nodes = np.array([e.t0])
                        n_obs = piece.Y.shape[1]
                        empty = np.full((n_new, n_obs), np.nan)
                        piece = replace(piece, t=np.r_[nodes, piece.t],
                                        Y=np.vstack([empty, piece.Y]),
                                        mask=np.vstack([np.zeros((n_new, n_obs), bool),
                                                        piece.mask]),
                                        sigma=None if piece.sigma is None else np.vstack(
                                            [empty, piece.sigma]))
                        self.node[k] = n_new
                else:
                    piece = replace(e.at_rows(rows),
                                    t0=float(e.t[rows][0]) if rows.any() else lo,
                                    x0=np.where(np.isfinite(e.x0), e.x0, np.nan),
                                    estimate_x0=np.ones(data.n_states, dtype=bool), doses=())
                if int(rows.sum()) < min_samples:
                    where = f" {e.name!r}" if e.name is not None else f" {k}"
                    span = ("before its first dose after t0" if j == 0 else
                            f"after its dose at t={lo:g}")
                    raise ValueError(
                        f"{estimator_name} fits the data between doses as separate pieces, and "
                        f"experiment{where} has {int(rows.sum())} sample(s) {span}; it needs "
                        f"at least {min_samples}. Use AdjointODE, which integrates through "
                        "the doses.")
                pieces.append(piece)
        self.split = len(pieces) > data.n_experiments
        self.data = replace(data, experiments=tuple(pieces),
                            several=data.several or self.split)

    def shoot_back(self, model, theta, states, options):
        """Each piece's filtered states with the estimated components at an added ``t0`` node
        replaced by the fitted ODE integrated back from the first sample (the node has no
        data, so the filter leaves it near its start; the dynamics from the first filtered
        sample say where it was)."""
        out = list(states)
        for k, i in enumerate(self.first):
            if not self.node[k]:
                continue
            e = self.data.experiments[i]
            free = e.estimate_x0
            if not free.any():
                continue
            X = np.array(out[i], dtype=np.float64)
            back = simulate(model, theta, X[1], [e.t[0]], t0=float(e.t[1]), **options)[0]
            X[0] = np.where(free, back, X[0])
            out[i] = X
        return out

    def x0_back(self, rows):
        """The original experiments' initial states from the pieces' (before the doses at
        ``t0``)."""
        rows = np.reshape(rows, (-1, self.original.n_states))
        return np.array([rows[i] - self.folded[k] for k, i in enumerate(self.first)])

    def rows_back(self, rows):
        """Per-piece rows (standard errors) as the original experiments' first pieces'."""
        rows = np.reshape(rows, (-1, self.original.n_states))
        out = np.array([rows[i] for i in self.first])
        return out if self.original.several else out[0]

    def states_back(self, states):
        """Per-piece arrays at the sampling times joined into one per original experiment
        (the rows added before the first sample left out)."""
        out = []
        bounds = self.first + [len(states)]
        for k in range(self.original.n_experiments):
            parts = list(states[bounds[k]:bounds[k + 1]])
            parts[0] = parts[0][self.node[k]:]
            out.append(np.vstack(parts))
        return out


def require_observed(data, estimator_name, why):
    """Raise a ValueError when some state is never observed and the method needs them all.

    Parameters
    ----------
    data : ExperimentData
    estimator_name : str
    why : str
        Why the method needs every state, for the message.
    """
    if data.hidden:
        raise ValueError(
            f"{estimator_name} needs every state observed ({why}), but observed="
            f"{data.observed} leaves states {data.hidden} hidden. Use AdjointODE or "
            "BCDProxODE, which fit hidden states, or observe every state.")


def on_state_scale(model, data, scale, log, x0_bounds=None, estimator_name="this estimator"):
    """The problem in the states of :class:`~sklode.models._wrappers.ScaledStates`.

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData
    scale : ndarray of shape (n_states,)
        Positive scale of each state.
    log : bool
        Fit the logarithm of the states (log-normal noise): every observation and every
        given initial value must then be positive.
    x0_bounds : (ndarray, ndarray), optional
        Bounds on the initial state, in the original states.
    estimator_name : str, optional
        For messages.

    Returns
    -------
    data : ExperimentData
        Observations and initial states in the scaled states.
    transformed : ScaledStates
        The model in those states (``to_x`` maps results back).
    x0_bounds : (ndarray, ndarray) or None
        The bounds in those states.
    """
    transformed = ScaledStates(model, scale, log=log)
    columns = list(data.observed)
    experiments = []
    for k, e in enumerate(data.experiments):
        if log and (np.any(e.Y[e.mask] <= 0) or np.any(e.x0[np.isfinite(e.x0)] <= 0)):
            where = (f" of {experiment_label(k, data.experiments[k].name)}" if data.several
                     else "")
            raise ValueError(
                f"noise_kind='lognormal' makes {estimator_name} fit the logarithm of the "
                f"states, but Y{where} or x0 has values <= 0. Use noise_kind='absolute' or "
                "'relative_rms' for data that reach zero, or AdjointODE, whose log-normal "
                "likelihood needs only the observed values to be positive (a state starting "
                "at 0 is fine there).")
        rows = np.ones((e.Y.shape[0], model.n_states))  # placeholders off the observed
        rows[:, columns] = np.where(e.mask, e.Y, 1.0)
        Y = np.where(e.mask, transformed.to_z(rows)[:, columns], np.nan)
        experiments.append(replace(e, Y=Y, x0=transformed.to_z(e.x0)))
    if x0_bounds is not None:  # on the log scale a lower bound <= 0 bounds nothing
        lower = np.maximum(x0_bounds[0], 0.0) if log else x0_bounds[0]
        x0_bounds = (transformed.to_z(lower), transformed.to_z(x0_bounds[1]))
    return replace(data, experiments=tuple(experiments)), transformed, x0_bounds


def hold_fixed(model, fixed, theta0, bounds):
    """The problem with ``fixed`` parameters held: the model to fit, its start and bounds.

    Parameters
    ----------
    model : ODEModel
    fixed : dict or None
        Parameter name -> value.
    theta0 : ndarray of shape (n_params,)
    bounds : (ndarray, ndarray) or None
        Bounds on every parameter.

    Returns
    -------
    model : ODEModel
        ``model`` itself, or a :class:`~sklode.models._wrappers.HeldParameters` of the others.
    theta0 : ndarray
        Start of the fitted parameters.
    bounds : (ndarray, ndarray) or None
        Their bounds.
    """
    fitted, theta0 = check_fixed(fixed, theta0, model)
    if fitted.all():
        return model, theta0, bounds
    held = HeldParameters(model, fitted, theta0)
    if bounds is not None:
        bounds = (bounds[0][fitted], bounds[1][fitted])
    return held, theta0[fitted], bounds


def fitted_mask(model, n_params):
    """Which of the ``n_params`` parameters ``model`` (what :func:`hold_fixed` returned)
    fits: all, or the ones a :class:`~sklode.models._wrappers.HeldParameters` leaves free.

    Parameters
    ----------
    model : ODEModel
    n_params : int

    Returns
    -------
    ndarray of bool of shape (n_params,)
    """
    if isinstance(model, HeldParameters):
        return np.array(model.fitted)
    return np.ones(n_params, dtype=bool)


def full_theta(model, theta):
    """The whole parameter vector from the fitted ones (held values filled in).

    Parameters
    ----------
    model : ODEModel
        What :func:`hold_fixed` returned.
    theta : ndarray
        Fitted parameters.

    Returns
    -------
    ndarray of shape (n_params,)
    """
    return model.full(theta) if isinstance(model, HeldParameters) else theta


def is_linear_on_data(model, t, Y):
    """Whether ``model`` is affine in theta, probed at random points and at the first samples
    of the data (once per fit; decides between linear and nonlinear solver paths).

    Parameters
    ----------
    model : ODEModel
    t : ndarray of shape (n_times,)
    Y : ndarray of shape (n_times, n_states)

    Returns
    -------
    bool
    """
    return model.is_linear_in_theta() and model.is_linear_in_theta(t[:16], Y[:16])


def bounded_theta_problem(estimator, model=None, start=None):
    """The model to fit, its start and bounds, for methods whose theta-steps are linear
    least squares (BCD-prox, WENDy): ``fixed`` held (:func:`hold_fixed`), ``positive``
    as a lower bound of 0. ``model``: the model in the fitted states (default: the
    estimator's); ``start``: a full theta to start from instead of ``theta0`` (the
    bootstrap's refits start at ``theta_``)."""
    return hold_fixed(estimator.model if model is None else model, estimator.fixed,
                      estimator._initial_theta() if start is None else start,
                      bounds_with_positivity(estimator.bounds, estimator.positive,
                                             estimator.model))

@staticmethod


def has_bounds(estimator):
    """Whether ``bounds`` or ``x0_bounds`` constrain the fit (a polish or a Gauss-Newton
    step from it could then leave them)."""
    return estimator.bounds is not None or estimator.x0_bounds is not None


def offset_attributes(estimator, uncertainty, fitted, adequate, *, limit, meaning):
    """``output_error_offset_``: how far the method's estimate lies from the output-error
    optimum, per parameter in ``theta_stderr_`` (the Gauss-Newton step of that cost from the fit,
    :attr:`FitUncertainty.step`; 0 for held parameters, NaN where it is not known); warns when it
    exceeds ``limit`` (the method's ``OUTPUT_ERROR_OFFSET``) and the intervals are the ones at the
    fit (no bootstrap, no bounds that could stop the step), unless the fit was already called poor
    (``adequate`` False: that warning says more). ``meaning``: what the offset says of this
    method's intervals, a sentence of the warning."""
    n_params = estimator.model.n_params
    if uncertainty.step is None:
        return {"output_error_offset_": None}
    n_x0 = uncertainty.cov.shape[0] - int(np.sum(fitted))
    offset = np.zeros(n_params)
    with np.errstate(divide="ignore", invalid="ignore"):
        offset[fitted] = uncertainty.step[n_x0:] / np.sqrt(np.diag(uncertainty.cov)[n_x0:])
    offset[fitted] = np.where(np.isfinite(offset[fitted]), offset[fitted], np.nan)
    bounded = has_bounds(estimator)
    size = np.abs(offset)
    if (estimator.n_boot == 0 and not bounded and adequate is not False
            and np.nanmax(size, initial=0.0) > limit):
        worst = int(np.nanargmax(size))
        warn(f"{type(estimator).__name__}'s estimate lies {size[worst]:.1f} standard errors "
             f"from the output-error optimum in {estimator.model.param_names[worst]!r} (one "
             "Gauss-Newton step of that cost from this fit: output_error_offset_). "
             f"{meaning} n_boot=200 gives this method's own spread and bias; "
             "AdjointODE(init=...) from this fit gives the optimum, whose intervals hold.",
             PoorFitWarning)
    return {"output_error_offset_": offset}


def bootstrap_attributes(estimator, data, theta, x0s, fitted, attributes):
    """The parametric bootstrap's covariance in place of the Gauss-Newton one.

    With ``n_boot`` of 0 nothing changes (``theta_bias_`` is None). Otherwise
    ``n_boot`` replicates are simulated from the fit (:mod:`sklode.diagnostics._bootstrap`) and
    refitted by the method's ``_solve(replicate, start=theta)`` (its fit without the
    checks and the covariance: ``theta`` and ``x0s`` in the model's states, per
    experiment as split at the doses, mapped back by ``split.x0_back``); their
    covariance replaces
    ``theta_cov_``, ``theta_stderr_`` and ``x0_stderr_`` in ``attributes`` (a copy),
    except where the Gauss-Newton covariance found a structurally unidentifiable
    unknown (infinite variance: the replicates' spread would only reflect where the
    method stopped), and their mean minus ``theta`` is ``theta_bias_``. When fewer than
    half the replicates can be refitted, or the fit cannot be simulated, the
    Gauss-Newton covariance stays and a warning says why.
    """
    attributes = dict(attributes, theta_bias_=None)
    if not estimator.n_boot:
        return attributes
    name = type(estimator).__name__
    n_unknowns = int(fitted.sum()) + int(estimated_x0_mask(data).sum())
    try:
        means, sd = replicate_noise(estimator.model, theta, data, x0s, sigma=estimator.sigma,
                                    noise_kind=estimator.noise_kind, n_unknowns=n_unknowns,
                                    options=estimator._simulation_options())
    except SklodeError as exc:
        warn(f"{name} cannot bootstrap this fit: the ODE cannot be integrated from the "
             f"fitted theta_ and x0_ over the data ({exc}). theta_cov_ is the "
             "Gauss-Newton covariance.", ConvergenceWarning)
        return attributes
    def refit(replicate):  # the method again, from theta, on a simulated replicate
        solved = estimator._solve(replicate, start=theta)
        return solved.theta, solved.split.x0_back(solved.x0s)

    boot = bootstrap_replicates(refit, data, means, sd, n_boot=estimator.n_boot,
                                noise_kind=estimator.noise_kind,
                                random_state=estimator.random_state,
                                n_jobs=estimator.n_jobs)
    succeeded = boot.theta.shape[0]
    if succeeded < max(2, estimator.n_boot / 2):
        warn(f"{name}: only {succeeded} of {estimator.n_boot} bootstrap replicates could be "
             "refitted (the others failed to integrate or to converge), too few for a "
             "covariance; theta_cov_ is the Gauss-Newton covariance.", ConvergenceWarning)
        return attributes
    n_params = theta.size
    cov = np.zeros((n_params, n_params))
    cov[np.ix_(fitted, fitted)] = boot.covariance()[np.ix_(fitted, fitted)]
    unidentifiable = ~np.isfinite(np.diag(attributes["theta_cov_"]))
    cov[unidentifiable, :] = np.nan
    cov[:, unidentifiable] = np.nan
    cov[unidentifiable, unidentifiable] = np.inf
    mask = np.array([e.estimate_x0 for e in data.experiments])
    x0_stderr = np.where(mask, boot.x0_stderr(), 0.0)
    # infinite: unidentifiable, as above; NaN (WENDy's smoothed x0 has no first-order
    # error) is replaced, since the replicates do measure its spread
    x0_stderr = np.where(np.isinf(np.reshape(attributes["x0_stderr_"], mask.shape)),
                         np.inf, x0_stderr)
    bias = np.where(fitted, boot.theta.mean(axis=0) - theta, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        shift = np.where(fitted, np.abs(bias) / standard_errors(cov), 0.0)
    if np.nanmax(shift, initial=0.0) > BOOTSTRAP_BIAS:
        worst = int(np.nanargmax(shift))
        warn(f"{name}'s estimate is biased at this fit: refits of data simulated from "
             f"theta_ land {shift[worst]:.1f} standard errors from it in "
             f"{estimator.model.param_names[worst]!r} (theta_bias_), so theta_ is likely as far "
             "from the truth. confidence_intervals() centres on theta_ - theta_bias_; "
             "AdjointODE(init=...) from this fit gives the output-error optimum, which has "
             "no such bias.", PoorFitWarning)
    attributes.update(theta_cov_=cov, theta_stderr_=standard_errors(cov),
                      x0_stderr_=x0_stderr if data.several else x0_stderr[0],
                      theta_bias_=bias)
    return attributes

# ------------------------------------------------------------------ prediction


def finish_fit(estimator, *, given, fitted_data, split, uncertainty, fitted, theta, x0s,
               transformed, z0s, init, advice, offset_limit, offset_meaning, x0_stderr=None):
    """The fitted attributes BCD-prox and WENDy compute alike once their solver has run.

    In order: the covariance from ``uncertainty`` (mapped back from scaled states), the
    initial states and their errors mapped back across the dose split, the bootstrap's
    covariance in its place (``n_boot``), the fit's assessment (with an AdjointODE polish
    where no bounds apply), ``-log L`` with AIC and BIC, the offset from the output-error
    optimum and the data's own attributes.

    Parameters
    ----------
    estimator : BCDProxODE or WENDyODE
    given : ExperimentData
        The experiments as the user gave them (one ``x0_`` and ``t0_`` each).
    fitted_data : ExperimentData
        The experiments the method fitted: split at the doses (and scaled).
    split : DoseSplit
    uncertainty : FitUncertainty
    fitted : ndarray of bool
        The fitted (not held) parameters.
    theta : ndarray of shape (n_params,)
    x0s : ndarray of shape (n_pieces, n_states)
        The fitted initial states, per piece of the split.
    transformed, z0s : ScaledStates or None, ndarray
        The fitted states' model and the initial states in them (None: the model's states).
    init : str
        The ``AdjointODE(init=...)`` name that starts the output-error fit from this method.
    advice : str
        What to try when the fit is poor, a sentence of the warning.
    offset_limit : float
        The method's limit on ``output_error_offset_``, in standard errors.
    offset_meaning : str
        What that offset says of the method's intervals, a sentence of the warning.
    x0_stderr : ndarray, optional
        The method's own standard errors of the initial values, per piece, in place of the
        output-error ones.

    Returns
    -------
    attributes : dict
        For :meth:`~sklode._estimator.ODEEstimator._set_fitted`.
    x0s : ndarray of shape (n_experiments, n_states)
        The initial states as given (before the split's doses).
    """
    model, name = estimator.model, type(estimator).__name__
    options = estimator._simulation_options()
    attributes = uncertainty_attributes(uncertainty, fitted_data, fitted, model, name,
                                        transformed=transformed, z0s=z0s)
    if x0_stderr is not None:
        attributes["x0_stderr_"] = x0_stderr
    attributes["x0_stderr_"] = split.rows_back(attributes["x0_stderr_"])
    n_x0 = int(estimated_x0_mask(fitted_data).sum())
    x0s = split.x0_back(x0s)
    attributes = bootstrap_attributes(estimator, given, theta, x0s, fitted, attributes)
    polish = Polish(fitted=fitted, sigma=estimator.sigma, noise_kind=estimator.noise_kind,
                    positive=estimator.positive, init=None if has_bounds(estimator) else init)
    assessment = assess_fit(model, given, theta, x0s, estimator_name=name, advice=advice,
                            options=options, polish=polish)
    attributes = dict(
        theta_=theta, x0_=x0s if given.several else x0s[0], **attributes,
        t0_=initial_times(given),
        **likelihood_attributes(model, theta, given, x0s, options, sigma=estimator.sigma,
                                noise_kind=estimator.noise_kind,
                                n_fitted=int(fitted.sum()) + n_x0),
        **assessment, **offset_attributes(estimator, uncertainty, fitted,
                                          assessment["fit_adequate_"], limit=offset_limit,
                                          meaning=offset_meaning),
        **estimator._data_attributes(given))
    return attributes, x0s
