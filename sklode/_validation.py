"""What ``fit`` and ``predict`` receive, turned into one container: every data error a user can
meet comes from here.

The one data path of sklode: :func:`check_experiments` turns ``(t, Y)`` and the estimator's
initial-state settings (``x0``, ``t0``, ``estimate_x0``, ``observed``) into an
:class:`ExperimentData`, a tuple of :class:`Experiment` (sorted times, observations with NaN
where missing, the mask of observed entries, ``t0``, the initial state with NaN where unknown,
and which of its components are estimated). Every solver consumes that container; a single
series is a list of one experiment.

Messages name the value received and the way out, e.g.
``"t contains duplicate times: t = 0.4 appears at least twice ..."``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .exceptions import InitialTimeWarning, warn
from ._checks import (
    _boolean_mask,
    _checked_array,
    as_float_array,
    by_name,
    check_observed,
    check_times,
)
from .experiment import Dose
from .experiment import Experiment as Given

__all__ = ["NOISE_KINDS", "Experiment", "ExperimentData", "check_experiments", "check_series",
           "estimated_x0_mask", "initial_times"]


#: How a noise level is read, everywhere in sklode: a standard deviation in data units, a
#: fraction of the RMS of each state, a fraction of each value (all three normal), the
#: standard deviation of the natural or decimal log of positive data (``y = h exp(s eps)``),
#: or the scale ``b`` of a Laplace error (standard deviation ``sqrt(2) b``).
NOISE_KINDS = ("absolute", "relative_rms", "proportional", "lognormal", "log10normal",
               "laplace")
#: The distribution of the error each kind stands for.
DISTRIBUTIONS = {"absolute": "normal", "relative_rms": "normal", "proportional": "normal",
                 "lognormal": "lognormal", "log10normal": "log10normal", "laplace": "laplace"}


@dataclass(frozen=True)
class Experiment:
    """One experiment: its sorted times, observations and initial state.

    Attributes
    ----------
    t : ndarray of shape (n_times,)
        Strictly increasing observation times.
    Y : ndarray of shape (n_times, n_observed)
        Observations of the observed states, NaN where an entry is missing.
    mask : ndarray of bool, shape (n_times, n_observed)
        True where ``Y`` holds an observation.
    t0 : float
        Time of the initial state (at or before ``t[0]``).
    x0 : ndarray of shape (n_states,)
        The initial state: the known value or a guess; NaN where nothing is known.
    estimate_x0 : ndarray of bool, shape (n_states,)
        Which components of ``x0`` the method estimates (the others are known and held).
    sigma : ndarray of shape (n_times, n_observed) or None
        This experiment's own known noise levels (NaN where ``Y`` is missing), read by
        ``noise_kind``; None: the estimator's ``sigma``.
    doses : tuple of (float, int, float)
        Boluses ``(time, state index, amount)``, sorted by time.
    conditions : dict
        Parameter overrides ``{parameter: value or the name of another parameter}``.
    name : str or None
        A label for messages and outputs.
    """

    t: np.ndarray
    Y: np.ndarray
    mask: np.ndarray
    t0: float
    x0: np.ndarray
    estimate_x0: np.ndarray
    sigma: np.ndarray | None = None
    doses: tuple = ()
    conditions: dict | None = None
    name: str | None = None
    #: ``(conditions, x0_pre, reset)`` or None: start from the steady state reached from
    #: ``x0_pre`` under the experiment's parameters with ``conditions`` on top.
    preequilibration: tuple | None = None

    @property
    def complete(self):
        """Whether every entry of ``Y`` is observed."""
        return bool(self.mask.all())

    def at_rows(self, rows):
        """The same experiment with only the sample rows ``rows`` (an index, a slice or a
        boolean mask): ``t``, ``Y``, ``mask`` and ``sigma`` cut alike, the rest as is."""
        return replace(self, t=self.t[rows], Y=self.Y[rows], mask=self.mask[rows],
                       sigma=None if self.sigma is None else self.sigma[rows])


@dataclass(frozen=True)
class ExperimentData:
    """Validated training data: one or several experiments sharing ``theta``.

    Attributes
    ----------
    experiments : tuple of Experiment
    observed : tuple of int
        Indices of the states that the columns of every ``Y`` hold.
    n_states : int
        Number of states of the model.
    several : bool
        Whether ``fit`` received a list of experiments (predictions are then lists too).
    y_ndim : int
        1 if ``Y`` was given as a vector (predictions are then vectors).
    feature_names : ndarray of str or None
        Column names when ``t`` was a DataFrame.
    """

    experiments: tuple
    observed: tuple
    n_states: int
    several: bool
    y_ndim: int
    feature_names: np.ndarray | None = None

    @property
    def n_experiments(self):
        """Number of experiments."""
        return len(self.experiments)

    @property
    def hidden(self):
        """Indices of the states that are never observed."""
        return tuple(i for i in range(self.n_states) if i not in self.observed)

    def with_initial_states(self, rows):
        """The same data with each experiment's estimated initial components replaced.

        Parameters
        ----------
        rows : array-like of shape (n_states,) or (n_experiments, n_states)
            New values (a start, another fit's ``x0_``); NaN keeps the current one.

        Returns
        -------
        ExperimentData
        """
        rows = np.reshape(rows, (self.n_experiments, self.n_states))
        return replace(self, experiments=tuple(
            replace(e, x0=np.where(e.estimate_x0 & np.isfinite(rows[k]), rows[k], e.x0))
            for k, e in enumerate(self.experiments)))


def _feature_names(t):
    columns = getattr(t, "columns", None)
    if columns is None:
        return None
    return np.asarray([str(c) for c in columns], dtype=object)


def _is_experiment_list(t):
    """A list or tuple whose items are themselves sequences: several experiments."""
    return isinstance(t, (list, tuple)) and len(t) > 0 and all(
        np.ndim(item) >= 1 for item in t)


def _check_column_names(Y, observed_names, state_names, where):
    """A DataFrame whose columns are the model's state names in another order than the
    estimator reads them would be fitted by position, the states swapped: refuse it."""
    columns = getattr(Y, "columns", None)
    if columns is None:
        return
    columns = [str(c) for c in columns]
    if columns == list(observed_names) or not set(columns) <= set(state_names):
        return  # the expected order, or names that are not states: read by position
    raise ValueError(
        f"Y{where}'s columns {columns} are state names, but the estimator reads Y's columns "
        f"by position as {list(observed_names)} (set by observed=). Select them in that "
        f"order, Y[{list(observed_names)!r}], or pass observed={columns!r}.")


def check_series(t, Y, *, n_observed, observed_names, min_samples=1, estimator_name,
                 where="", state_names=()):
    """One series ``(t, Y)`` as float64 copies in the order given, with its shapes checked.

    Parameters
    ----------
    t : array-like of shape (n_samples,) or (n_samples, 1)
    Y : array-like of shape (n_samples, n_observed) or (n_samples,)
        NaN where an entry is missing; at least one must be present.
    n_observed : int
        Number of columns ``Y`` must have.
    observed_names : sequence of str
        The observed states, for messages.
    min_samples : int, default=1
        Fewest time points accepted.
    estimator_name : str
        For messages.
    where : str, default=""
        Which experiment, for messages (e.g. ``" (experiment 1)"``).
    state_names : sequence of str, default=()
        All the model's states: a DataFrame ``Y`` whose columns are state names must list
        ``observed_names`` in order.

    Returns
    -------
    t : ndarray of shape (n_samples,)
    Y : ndarray of shape (n_samples, n_observed)
    y_ndim : int
        1 if ``Y`` was a vector.
    """
    t_arr = check_times(t, ensure_min_samples=0)
    if Y is None:
        raise ValueError(
            f"{estimator_name} requires y to be passed, but the target y is None. Pass the "
            "observed states Y of shape (n_samples, n_observed)."
        )
    _check_column_names(Y, observed_names, state_names, where)
    Y_arr = _checked_array(Y, "Y", masked_as_nan=True, ensure_2d=False,
                           ensure_all_finite="allow-nan",
                           ensure_min_samples=0, ensure_min_features=0, allow_nd=True)
    y_ndim = Y_arr.ndim
    if y_ndim == 1:
        Y_arr = Y_arr[:, None]
    elif y_ndim != 2:
        raise ValueError(f"Y{where} must be one- or two-dimensional, got shape {Y_arr.shape}.")
    if Y_arr.shape[0] != t_arr.shape[0]:
        transposed = y_ndim == 2 and Y_arr.shape == (n_observed, t_arr.shape[0])
        raise ValueError(
            f"t and Y{where} have different numbers of samples: {t_arr.shape[0]} times and "
            f"{Y_arr.shape[0]} rows of Y. Each row of Y is the observation at one time"
            + (f": Y of shape {Y_arr.shape} looks transposed, pass Y.T." if transposed
               else ".")
        )
    if t_arr.shape[0] < min_samples:
        raise ValueError(
            f"{estimator_name} needs at least {min_samples} time points, got "
            f"n_samples={t_arr.shape[0]}{where}."
        )
    if Y_arr.shape[1] != n_observed:
        raise ValueError(
            f"Y{where} has {Y_arr.shape[1]} column(s) but {estimator_name} expects "
            f"{n_observed}, one per observed state {tuple(observed_names)}. Reorder or select "
            "the columns of Y to match, or set which states are observed with observed=."
        )
    if not np.isfinite(Y_arr).any():
        raise ValueError(f"Y{where} has no observed value: every entry is NaN.")
    return t_arr, Y_arr, y_ndim


def experiment_label(k, name=None):
    """How a message names experiment ``k``: by its name where it has one."""
    return f"experiment {k}" if name is None else f"experiment {name!r} (number {k})"


def _check_one(t, Y, *, index, n_observed, observed_names, min_samples, estimator_name,
               state_names):
    where = "" if index is None else f" ({index})"
    t_arr, Y_arr, y_ndim = check_series(
        t, Y, n_observed=n_observed, observed_names=observed_names, min_samples=min_samples,
        estimator_name=estimator_name, where=where, state_names=state_names)
    order = np.argsort(t_arr, kind="stable")
    t_sorted, Y_sorted = t_arr[order], Y_arr[order]
    repeated = np.flatnonzero(np.diff(t_sorted) == 0)
    if repeated.size:
        raise ValueError(
            f"t{where} contains duplicate times: t = {t_sorted[repeated[0]]:g} appears at "
            f"least twice ({repeated.size} repeat(s) in all). Average or remove repeated "
            "measurements before fitting."
        )
    return t_sorted, Y_sorted, np.isfinite(Y_sorted), (y_ndim, order)


def _experiment_objects(t, Y):
    """``t`` as an :class:`sklode.Experiment` or a list of them, or None for arrays."""
    if isinstance(t, Given):
        items, single = [t], True
    elif isinstance(t, (list, tuple)) and t and any(isinstance(e, Given) for e in t):
        if not all(isinstance(e, Given) for e in t):
            raise TypeError("A list of experiments must hold only sklode.Experiment objects "
                            "(or only time vectors, with a list of Y).")
        items, single = list(t), False
    else:
        return None
    if Y is not None:
        raise ValueError("fit received Experiment objects, which carry their own Y: pass "
                         "fit(experiments) without Y.")
    return items[0] if single else items


def _experiment_settings(given, model, x0, t0):
    """Per-experiment ``x0`` rows and ``t0``: each Experiment's own, else the estimator's.

    Returns ``(rows, t0, default_t0)``: ``default_t0`` (each experiment's first time or
    dose) when neither the experiments nor the estimator give a ``t0`` (``t0`` is then
    None), else None.
    """
    items = given if isinstance(given, list) else [given]
    n, d = len(items), model.n_states
    if x0 is None:
        rows = np.full((n, d), np.nan)
    else:
        rows = _per_experiment(by_name(x0, model.state_names, "x0", absent=np.nan), n, d, "x0")
    for k, e in enumerate(items):
        if e.x0 is not None:
            own = as_float_array(by_name(e.x0, model.state_names, "x0", absent=np.nan), "x0",
                                 example="numbers, one per state (NaN: unknown)").reshape(-1)
            if own.size != d:
                raise ValueError(f"Experiment {e.name or k}: x0 needs {d} values, one per "
                                 f"state {model.state_names}; got {own.size}.")
            rows[k] = own
    # a dose before the first sample: integrate from the dose
    firsts = [min([float(np.min(np.reshape(e.t, -1)))] + [float(dd[0]) for dd in
                                                          (e.doses or ())]) for e in items]
    if all(e.t0 is None for e in items):
        return rows, t0, (firsts if t0 is None else None)
    base = (np.full(n, np.nan) if t0 is None else np.broadcast_to(
        as_float_array(t0, "t0", example="times").reshape(-1), (n,)).astype(float))
    times = [float(e.t0) if e.t0 is not None else base[k] if np.isfinite(base[k])
             else firsts[k] for k, e in enumerate(items)]
    return rows, times, None


def _experiment_extras(given, model, Y, order, where):
    """The validated per-experiment fields of an :class:`sklode.Experiment`: sigma (in the
    sorted order), doses with state indices, conditions, name."""
    extra = {"name": given.name}
    if given.sigma is not None:
        sigma = as_float_array(given.sigma, "sigma", example="positive numbers")
        if sigma.ndim == 2:
            if sigma.shape != Y.shape:
                raise ValueError(f"sigma{where} has shape {sigma.shape} but Y has {Y.shape}.")
            sigma = sigma[order]
        extra["sigma"] = np.broadcast_to(sigma if sigma.ndim != 1 or sigma.size == 1
                                         else sigma[None, :], Y.shape).copy()
    if given.doses:
        doses = []
        for dose in given.doses:
            if isinstance(dose, Dose):
                doses.append(_checked_record(dose, model, where))
                continue
            if len(dose) != 3:
                raise ValueError(f"Each dose{where} is (time, state, amount); got {dose!r}.")
            time, state, amount = dose
            state = _dosed_state(state, model, where)
            time, amount = float(time), float(amount)
            if not (np.isfinite(time) and np.isfinite(amount)):
                raise ValueError(f"A dose{where} has a non-finite time or amount: {dose!r}.")
            doses.append((time, int(state), amount))
        extra["doses"] = tuple(sorted(doses, key=lambda d: d[0]))  # stable at one time
    if given.conditions:
        for key, value in given.conditions.items():
            if key not in model.param_names:
                raise ValueError(f"conditions{where} set {key!r}, which is not a parameter of "
                                 f"the model {model.param_names}.")
            if isinstance(value, str):
                if value not in model.param_names:
                    raise ValueError(
                        f"conditions{where} read {key!r} from {value!r}, which is not a "
                        f"parameter of the model {model.param_names}: declare it in "
                        "param_names (it is then fitted for the experiments that use it).")
            elif not np.isfinite(as_float_array(value, f"conditions[{key!r}]",
                                                example="a number or a parameter name")).all():
                raise ValueError(f"conditions{where} set {key!r} to {value!r}: give a finite "
                                 "number or a parameter name.")
        extra["conditions"] = dict(given.conditions)
    pre = getattr(given, "preequilibration", None)
    if pre:
        unknown = set(pre) - {"x0", "conditions", "reset"}
        if unknown or "x0" not in pre:
            raise ValueError(f"preequilibration{where} is a dict with 'x0' (one value per "
                             "state) and optionally 'conditions' and 'reset'; got keys "
                             f"{sorted(pre)}.")
        x0_pre = as_float_array(by_name(pre["x0"], model.state_names, "preequilibration x0"),
                                "preequilibration x0", example="numbers, one per state")
        if x0_pre.shape != (model.n_states,) or not np.all(np.isfinite(x0_pre)):
            raise ValueError(f"preequilibration{where}: x0 needs {model.n_states} finite "
                             f"values, one per state {model.state_names}.")
        merged = dict(given.conditions or {})
        merged.update(pre.get("conditions") or {})
        for key, value in merged.items():
            if key not in model.param_names or (isinstance(value, str)
                                                and value not in model.param_names):
                raise ValueError(f"preequilibration{where} conditions set {key!r} to "
                                 f"{value!r}: both must be parameters of the model.")
        reset = np.zeros(model.n_states, dtype=bool)
        for state in pre.get("reset") or ():
            if state not in model.state_names:
                raise ValueError(f"preequilibration{where} resets {state!r}, which is not a "
                                 f"state of the model {model.state_names}.")
            reset[model.state_names.index(state)] = True
        extra["preequilibration"] = (merged, x0_pre, reset)
    return extra


def _per_experiment(value, n_experiments, width, name):
    """``value`` as ``(n_experiments, width)``: one row for all or one row each."""
    arr = as_float_array(value, name, example="numbers, one per state (NaN: unknown)")
    if arr.ndim <= 1 and arr.size == width:
        return np.broadcast_to(arr.reshape(-1), (n_experiments, width)).copy()
    if arr.shape == (n_experiments, width):
        return arr.copy()
    raise ValueError(f"{name} must have shape ({width},) or ({n_experiments}, {width}) for "
                     f"{n_experiments} experiment(s), one value per state; got shape "
                     f"{arr.shape}.")


def _warn_if_initial_time_is_ambiguous(model, estimate_x0, t0_values):
    """Known initial values with ``t0`` left out are placed at the first observation time; a
    user who meant time 0 (an outbreak's day 0 with counts from day 40) would get a silently
    wrong fit, so say so whenever the two readings differ."""
    known = [model.state_names[i] for i in np.flatnonzero(~estimate_x0)]
    late = [t for t in t0_values if t != 0.0]
    if known and late:
        warn(
            f"x0 gives the known initial values of {known} and t0 is None, so they are taken "
            f"as the state at the first observation time (t={late[0]:g}). If x0 is the state "
            f"at another time, pass it as t0 (t0=0.0 for time 0); pass t0={late[0]:g} to "
            "confirm the first observation time and silence this warning.",
            InitialTimeWarning)


def check_experiments(t, Y, *, model, observed=None, x0=None, t0=None, estimate_x0=True,
                      min_samples=2, estimator_name="estimator", warn_initial_time=True,
                      min_samples_each=None):
    """Validate training data and the initial-state settings into an :class:`ExperimentData`.

    Parameters
    ----------
    t : array-like of shape (n_samples,) or (n_samples, 1), or a list of them
        Observation times; a list or tuple of time vectors means several experiments.
    Y : array-like of shape (n_samples, n_observed), or a list of them
        Observations, NaN where missing; one array per experiment.
    model : ODEModel
    observed : sequence of int or str, optional
        States held by the columns of ``Y`` (None: all).
    x0 : array-like of shape (n_states,) or (n_experiments, n_states), optional
        Initial state: a guess where estimated, the value where known; NaN: unknown.
    t0 : float or array-like of shape (n_experiments,), optional
        Time of ``x0``; None: each experiment's first time.
    estimate_x0 : bool or array-like of bool of shape (n_states,), default=True
        Which components of ``x0`` are estimated.
    min_samples : int, default=2
        The fewest time points per experiment the method can work with.
    min_samples_each : int, optional
        With several experiments, the fewest per experiment instead (``min_samples`` then
        bounds their total); None: ``min_samples``.
    estimator_name : str, default="estimator"
        For messages.
    warn_initial_time : bool, default=True
        Warn :class:`~sklode.exceptions.InitialTimeWarning` when known initial values meet
        ``t0=None`` and data that do not start at 0 (``fit`` does; ``score`` and ``predict``
        on the same data do not say it a second time).

    Returns
    -------
    ExperimentData
    """
    observed = check_observed(observed, model)
    names = tuple(model.observables[i] for i in observed)
    given = _experiment_objects(t, Y)
    if given is not None:
        t = [e.t for e in given] if isinstance(given, list) else given.t
        Y = [e.Y for e in given] if isinstance(given, list) else given.Y
        x0, t0, default_t0 = _experiment_settings(given, model, x0, t0)
    else:
        default_t0 = None
    several = _is_experiment_list(t)
    if several:
        if not isinstance(Y, (list, tuple)) or len(Y) != len(t):
            got = f"a list of {len(Y)}" if isinstance(Y, (list, tuple)) else type(Y).__name__
            raise ValueError(f"t is a list of {len(t)} experiments, so Y must be a list of "
                             f"{len(t)} observation arrays, one per experiment; got {got}.")
        pairs = list(zip(t, Y))
    else:
        pairs = [(t, Y)]
    # several experiments: each may be shorter (one time point of a condition, as in PEtab
    # problems) where the method allows it, the whole not
    each = min_samples if not several or min_samples_each is None else min_samples_each
    if several and sum(np.size(ti) for ti, _ in pairs) < min_samples:
        raise ValueError(f"{estimator_name} needs at least {min_samples} time points in all, "
                         f"got {sum(np.size(ti) for ti, _ in pairs)}.")
    names_of = ([e.name for e in given] if isinstance(given, list)
                else [None] * len(pairs))
    checked = [_check_one(ti, Yi, index=experiment_label(k, names_of[k]) if several else None,
                          n_observed=len(observed),
                          observed_names=names, min_samples=each,
                          estimator_name=estimator_name, state_names=model.state_names)
               for k, (ti, Yi) in enumerate(pairs)]
    n_exp, n_states = len(checked), model.n_states

    x0_rows = np.full((n_exp, n_states), np.nan) if x0 is None else _per_experiment(
        by_name(x0, model.state_names, "x0", absent=np.nan), n_exp, n_states, "x0")
    if np.any(np.isinf(x0_rows)):
        raise ValueError(f"x0 must be finite (NaN marks an unknown component); got {x0}.")
    mask = _boolean_mask(estimate_x0, n_states, "estimate_x0", f"state {model.state_names}")
    known_but_missing = ~mask & np.isnan(x0_rows).any(axis=0)
    if known_but_missing.any():
        missing = [model.state_names[i] for i in np.flatnonzero(known_but_missing)]
        raise ValueError(f"estimate_x0 says the initial values of {missing} are known, but "
                         f"x0 does not give them (x0={x0!r}): pass x0, or estimate them.")
    if t0 is None:
        t0_values = (default_t0 if default_t0 is not None
                     else [float(ti[0]) for ti, *_ in checked])
        if warn_initial_time:
            _warn_if_initial_time_is_ambiguous(model, mask, t0_values)
    else:
        t0_arr = as_float_array(t0, "t0", example="times, one or one per experiment"
                                ).reshape(-1)
        if t0_arr.size == 1:
            t0_arr = np.repeat(t0_arr, n_exp)
        if t0_arr.size != n_exp or not np.all(np.isfinite(t0_arr)):
            raise ValueError(f"t0 must be one finite time or one per experiment "
                             f"({n_exp}); got {t0!r}.")
        t0_values = [float(v) for v in t0_arr]
    objects = (given if isinstance(given, list) else [given]) if given is not None else None
    experiments = []
    for k, ((ti, Yi, mi, (_, order)), t0k) in enumerate(zip(checked, t0_values)):
        where = f" of {experiment_label(k, names_of[k])}" if several else ""
        extra = ({} if objects is None else
                 _experiment_extras(objects[k], model, Yi, order, where))
        first = min([ti[0]] + [d[0] for d in extra.get("doses", ())])
        if t0k > first:
            raise ValueError(f"t0={t0k:g} is after the first observation (or dose) time{where} "
                             f"{first:g}; x0 must be the state at or before the data: pass "
                             f"a t0 <= {first:g}, or leave t0=None (the first observation "
                             "time).")
        experiments.append(Experiment(t=ti, Y=Yi, mask=mi, t0=t0k, x0=x0_rows[k],
                                      estimate_x0=mask.copy(), **extra))
    return ExperimentData(experiments=tuple(experiments), observed=observed, n_states=n_states,
                          several=several, y_ndim=checked[0][3][0],
                          feature_names=None if several else _feature_names(t))


def initial_times(data):
    """``t0_``: the time of the initial state, one float, or one per experiment.

    Parameters
    ----------
    data : ExperimentData

    Returns
    -------
    float or ndarray of shape (n_experiments,)
    """
    times = np.array([e.t0 for e in data.experiments])
    return times if data.several else float(times[0])


def estimated_x0_mask(data):
    """Which initial-state components are estimated, shaped like ``x0_``.

    Parameters
    ----------
    data : ExperimentData

    Returns
    -------
    ndarray of bool of shape (n_states,) or (n_experiments, n_states)
    """
    mask = np.array([e.estimate_x0 for e in data.experiments])
    return mask if data.several else mask[0]


def _dosed_state(state, model, where):
    """The index of a dose's state (a name or an index), or a ValueError naming it."""
    if isinstance(state, str):
        if state not in model.state_names:
            raise ValueError(f"A dose{where} names the state {state!r}, which is not one of "
                             f"{model.state_names}.")
        return model.state_names.index(state)
    if not (isinstance(state, (int, np.integer)) and 0 <= state < model.n_states):
        raise ValueError(f"A dose{where} names state {state!r}: use a state name or an index "
                         f"below {model.n_states}.")
    return int(state)


def _checked_record(dose, model, where):
    """A :class:`~sklode.Dose` with its state as an index, or a ValueError naming the
    field that cannot be given."""
    state = _dosed_state(dose.state, model, where)
    try:
        values = [float(v) for v in (dose.time, dose.amount, dose.rate, dose.duration,
                                     dose.interval)]
    except (TypeError, ValueError):
        raise ValueError(f"A dose{where} has a field that is not a number: {dose!r}.") from None
    time, amount, rate, duration, interval = values
    if not all(np.isfinite(values)) or min(amount, rate, duration, interval) < 0:
        raise ValueError(f"A dose{where} has a negative or non-finite time, amount, rate, "
                         f"duration or interval: {dose!r}.")
    if rate > 0 and duration > 0:
        raise ValueError(f"A dose{where} gives both a rate and a duration: {dose!r}. Give one "
                         "(the other is amount / it).")
    if (rate > 0 or duration > 0) and amount == 0:
        raise ValueError(f"A dose{where} infuses nothing (amount 0): {dose!r}.")
    if dose.steady_state not in (0, 1, 2):
        raise ValueError(f"A dose{where} has steady_state={dose.steady_state!r}: 0 (none), 1 "
                         "(reset to the steady state, then dose) or 2 (add it).")
    if (dose.steady_state or dose.additional) and interval <= 0:
        raise ValueError(f"A dose{where} repeats (steady_state or additional) without an "
                         f"interval: {dose!r}. Give interval= (NONMEM's II).")
    if dose.steady_state and (rate > 0 or duration > 0) and (
            (amount / rate if rate > 0 else duration) > interval):
        raise ValueError(f"A steady-state infusion{where} lasts longer than its interval: "
                         f"{dose!r} (overlapping infusions are not supported).")
    if int(dose.additional) != dose.additional or dose.additional < 0:
        raise ValueError(f"A dose{where} has additional={dose.additional!r}: a count >= 0.")
    return dose._replace(time=time, state=int(state), amount=amount, rate=rate,
                         duration=duration, interval=interval, additional=int(dose.additional),
                         steady_state=int(dose.steady_state), reset=bool(dose.reset))
