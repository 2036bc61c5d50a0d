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

import datetime
from dataclasses import dataclass, replace

import numpy as np
from sklearn.utils import check_array

from .exceptions import InitialTimeWarning, warn
from .experiment import Experiment as Given

__all__ = [
    "NOISE_KINDS",
    "Experiment",
    "ExperimentData",
    "as_float_array",
    "check_bounds",
    "check_experiments",
    "check_fixed",
    "check_positive",
    "check_sample_weight",
    "check_series",
    "check_observed",
    "check_theta0",
    "check_times",
    "condition_map",
    "log_factors",
    "bounds_with_positivity",
    "by_name",
]


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


def _dtype_kinds(value):
    """The numpy dtype kinds ``value`` holds: one per column of a DataFrame, else its own."""
    dtypes = getattr(value, "dtypes", None)
    if dtypes is not None and not isinstance(dtypes, np.dtype):  # a DataFrame
        return {getattr(d, "kind", "O") for d in dtypes}
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        try:
            dtype = np.asarray(value).dtype
        except (TypeError, ValueError):  # ragged nesting: the conversion will say so
            return set()
    return {getattr(dtype, "kind", "O")}


def _holds_dates(value):
    """Whether an object array holds dates (date dtypes are refused before conversion)."""
    try:
        items = np.asarray(value, dtype=object).ravel()
    except (TypeError, ValueError):
        return False
    return any(isinstance(v, (datetime.date, datetime.timedelta)) for v in items)


def _dates_error(name):
    return ValueError(
        f"{name} holds dates or durations; sklode needs numbers in the time unit of the "
        "model's rates. Convert them first, e.g. days since the first sample: "
        "(t - t[0]) / np.timedelta64(1, 'D'), or for a pandas column "
        "(df['date'] - df['date'].iloc[0]) / pd.Timedelta(days=1).")


def _refuse_dates_and_booleans(value, name, *, allow_bool=False):
    """Dates and durations would become nanoseconds since 1970 and booleans 0/1 without a
    word (a date column fitted every rate to 0): refuse both, naming the conversion."""
    kinds = _dtype_kinds(value)
    if kinds & {"M", "m"}:
        raise _dates_error(name)
    if "b" in kinds and not allow_bool:
        raise ValueError(
            f"{name} holds booleans (True/False), not measured values. Pass numbers; a "
            "missing observation is NaN in Y (not a mask), an estimated initial value is "
            "NaN in x0 or set by estimate_x0.")


def as_float_array(value, name, *, example="numbers"):
    """``value`` as a float64 array, or a ValueError naming ``name`` for text, complex values,
    objects or ragged nesting (numpy's own messages name neither the argument nor the fix).

    Parameters
    ----------
    value : array-like
    name : str
        The argument's name, for messages.
    example : str, default="numbers"
        What the argument should hold, for messages.

    Returns
    -------
    ndarray of float64
        A new array (never a view of ``value``).
    """
    if np.iscomplexobj(value):
        raise ValueError(f"{name} must be real {example}; got complex values {value!r}.")
    _refuse_dates_and_booleans(value, name)
    try:
        return np.array(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        if _holds_dates(value):
            raise _dates_error(name) from None
        raise ValueError(f"{name} must be real {example}; got {value!r} ({exc}).") from None


def _checked_array(value, name, *, allow_bool=False, masked_as_nan=False, **kwargs):
    """scikit-learn's ``check_array`` to float64, with numpy's conversion errors (text,
    objects, dates) and the complex-data error naming the argument and the way out.
    ``check_array`` reads a masked array's hidden values as data: with ``masked_as_nan``
    masked entries become NaN (missing), otherwise they are refused."""
    _refuse_dates_and_booleans(value, name, allow_bool=allow_bool)
    if np.ma.is_masked(value):
        if not masked_as_nan:
            raise ValueError(f"{name} has masked entries; remove them (a missing observation "
                             "is NaN in Y, or a masked entry of Y).")
        value = np.ma.masked_array(value, dtype=np.float64).filled(np.nan)
    try:
        return check_array(value, dtype=np.float64, input_name=name, copy=True, **kwargs)
    except (TypeError, ValueError) as exc:
        if _holds_dates(value):  # datetime objects in an object array
            raise _dates_error(name) from None
        text = str(exc)
        if text.startswith("Complex data not supported"):
            raise ValueError(f"{name}: Complex data not supported. Pass real numbers (the "
                             "real part or the modulus).") from None
        if isinstance(exc, ValueError) and not text.startswith("could not convert"):
            raise  # scikit-learn's own messages name the argument already
        raise ValueError(f"{name} must hold numbers (NaN where a value is missing); "
                         f"{text}.") from None


def check_times(t, *, name="t", ensure_min_samples=1):
    """Validate a time vector given as ``(n,)`` or ``(n, 1)``; return a 1-D float64 copy.

    Sparse, complex, text, object, empty and non-finite input raise ``ValueError`` naming
    ``name``. Order and repeats are kept (prediction accepts both).

    Parameters
    ----------
    t : array-like of shape (n_times,) or (n_times, 1)
        Times.
    name : str, default="t"
        The argument's name, for messages.
    ensure_min_samples : int, default=1
        Fewest times accepted (0: an empty vector passes, for callers that say more).

    Returns
    -------
    ndarray of shape (n_times,)
        A float64 copy.
    """
    if t is None:
        raise ValueError(f"{name} is None: pass the observation times, an array of shape "
                         "(n_samples,).")
    arr = _checked_array(t, name, ensure_2d=False, ensure_min_samples=ensure_min_samples,
                         allow_nd=True)
    if arr.ndim == 2:
        if arr.shape[1] != 1:
            raise ValueError(
                f"{name} must have shape (n_samples,) or (n_samples, 1): one time per row. "
                f"Got shape {arr.shape}. sklode estimators take the times as X and the "
                "observed states as y; several experiments are a list of time vectors."
            )
        arr = arr[:, 0]
    elif arr.ndim != 1:
        raise ValueError(f"{name} must be one- or two-dimensional, got shape {arr.shape}.")
    return np.ascontiguousarray(arr)


def by_name(value, names, name, *, absent=None):
    """``value`` in the order of ``names`` when it is a dict keyed by them (or a list of such
    dicts, one per experiment); anything else is returned as it is.

    Parameters
    ----------
    value : object
        ``theta0`` or ``x0`` as the user gave it.
    names : tuple of str
        The model's parameter or state names.
    name : str
        The argument's name, for messages.
    absent : float, optional
        The value of a name the dict leaves out (NaN: an unknown initial value); None: every
        name must be given.

    Returns
    -------
    object
    """
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
        return [by_name(v, names, name, absent=absent) for v in value]
    if not isinstance(value, dict):
        return value
    unknown = [k for k in value if k not in names]
    if unknown:
        raise ValueError(f"{name} names {unknown}, which the model does not have; its names "
                         f"are {names}.")
    missing = [k for k in names if k not in value]
    if missing and absent is None:
        raise ValueError(f"{name} gives no value for {missing}: name every one of {names}.")
    return [value.get(k, absent) for k in names]


def check_theta0(theta0, model):
    """``theta0`` as a float64 vector (the model's default guess when None), checked.

    Parameters
    ----------
    theta0 : array-like of shape (n_params,) or None
        The estimator's ``theta0``.
    model : ODEModel
        For the number and names of the parameters.

    Returns
    -------
    ndarray of shape (n_params,)
    """
    if theta0 is None:
        return model.theta_guess()
    theta0 = as_float_array(by_name(theta0, model.param_names, "theta0"), "theta0",
                            example=f"numbers, one per parameter {model.param_names}")
    if theta0.ndim > 1:
        raise ValueError(f"theta0 must be a vector of {model.n_params} numbers, one per "
                         f"parameter {model.param_names}; got shape {theta0.shape}.")
    theta0 = theta0.reshape(-1)
    if theta0.shape != (model.n_params,):
        raise ValueError(f"theta0 has {theta0.size} entries but {model!r} has "
                         f"{model.n_params} parameters {model.param_names}.")
    if not np.all(np.isfinite(theta0)):
        raise ValueError(f"theta0 must be finite; got {theta0}.")
    return theta0


def check_observed(observed, model):
    """Indices of the observables (the states, without ``observe``) ``Y``'s columns hold,
    from indices or names.

    Parameters
    ----------
    observed : sequence of int or str, or None
        None means every state, in order.
    model : ODEModel

    Returns
    -------
    tuple of int
    """
    names, n = model.observables, model.n_observables
    what = "observable" if model.has_observation_model else "state"
    if observed is None:
        return tuple(range(n))
    items = [observed] if isinstance(observed, (str, int, np.integer)) else list(
        np.asarray(observed, dtype=object).reshape(-1))
    indices = []
    for item in items:
        if isinstance(item, str):
            if item not in names:
                raise ValueError(f"observed names the {what} {item!r}, which {model!r} does "
                                 f"not have; its {what}s are {names}.")
            indices.append(names.index(item))
        elif isinstance(item, (int, np.integer)) and 0 <= int(item) < n:
            indices.append(int(item))
        else:
            raise ValueError(f"observed must list {what} indices in 0..{n - 1} or {what} "
                             f"names {names} of {model!r}; got {observed!r}.")
    if not indices or len(set(indices)) != len(indices):
        raise ValueError(f"observed must list distinct states of {model!r}, at least one; "
                         f"got {observed!r}.")
    return tuple(indices)


def check_bounds(bounds, n_params, param_names=None, *, name="bounds"):
    """``(lower, upper)`` arrays of shape ``(n_params,)`` from scalars or vectors, checked.

    Parameters
    ----------
    bounds : (array-like, array-like) or None
        Lower and upper bounds; ``±inf`` allowed. None: no bounds.
    n_params : int
    param_names : tuple of str, optional
        For messages.
    name : str, default="bounds"
        The argument's name, for messages (``x0_bounds`` bounds the initial state).

    Returns
    -------
    (ndarray, ndarray) or None
    """
    if bounds is None:
        return None
    try:
        lo, hi = bounds
        if np.iscomplexobj(lo) or np.iscomplexobj(hi):
            raise TypeError("complex bounds")
        lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
        for side in (lo, hi):  # a scalar for all, or exactly one per entry (as scipy)
            if side.ndim > 1 or (side.ndim == 1 and side.size != n_params):
                raise ValueError("length")
        lo = np.broadcast_to(lo, (n_params,)).copy()
        hi = np.broadcast_to(hi, (n_params,)).copy()
    except (TypeError, ValueError):
        what = f" {tuple(param_names)}" if param_names else ""
        raise ValueError(f"{name} must be (lower, upper), each one real number for all or "
                         f"{n_params} numbers, one per entry{what}; got {bounds!r}.") from None
    if np.any(np.isnan(lo)) or np.any(np.isnan(hi)):
        raise ValueError(f"{name} must not contain NaN (use -inf/inf for no bound); got "
                         f"{bounds!r}.")
    if np.any(lo >= hi):
        k = int(np.flatnonzero(lo >= hi)[0])
        which = param_names[k] if param_names else f"entry {k}"
        raise ValueError(f"{name}: every lower bound must be below its upper bound; for "
                         f"{which} got lower={lo[k]:g} >= upper={hi[k]:g}.")
    return lo, hi


def check_fixed(fixed, theta0, model):
    """Parameters held at given values: the mask of fitted ones and ``theta0`` with the held
    values in place.

    Parameters
    ----------
    fixed : dict or None
        Parameter name -> value.
    theta0 : ndarray of shape (n_params,)
        The starting guess.
    model : ODEModel

    Returns
    -------
    fitted : ndarray of bool of shape (n_params,)
    theta0 : ndarray of shape (n_params,)
    """
    fitted = np.ones(model.n_params, dtype=bool)
    theta0 = np.array(theta0, dtype=np.float64)
    if not fixed:
        return fitted, theta0
    if not isinstance(fixed, dict):
        raise ValueError(f"fixed must be a dict of parameter name -> value, e.g. "
                         f"{{{model.param_names[0]!r}: 1.0}}; got {fixed!r}.")
    for name, value in fixed.items():
        if name not in model.param_names:
            raise ValueError(f"fixed names the parameter {name!r}, which {model!r} does not "
                             f"have; its parameters are {model.param_names}.")
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"fixed[{name!r}] must be a real number; got {value!r}.") from None
        if not np.isfinite(value):
            raise ValueError(f"fixed[{name!r}] must be finite; got {value}.")
        k = model.param_names.index(name)
        fitted[k], theta0[k] = False, value
    if not fitted.any():
        raise ValueError(f"fixed holds every parameter of {model!r}: leave at least one to "
                         "fit, or simulate the model instead.")
    return fitted, theta0


#: what ``positive`` may say of a parameter beyond True and False: the base of the logarithm
#: the optimiser works in (PEtab's ``log`` and ``log10`` parameter scales)
LOG_SCALES = {"log": 1.0, "log10": float(np.log(10.0))}


def _positive_entries(positive, n_params):
    """``positive`` as a list of ``n_params`` entries, each False or a log factor (1 for the
    natural log, ``ln 10`` for log10), or a ValueError."""
    def entry(value):
        if isinstance(value, str):
            if value not in LOG_SCALES:
                raise ValueError(f"positive takes True, False, 'log' or 'log10' per parameter; "
                                 f"got {value!r}.")
            return LOG_SCALES[value]
        if isinstance(value, (bool, np.bool_)):
            return 1.0 if value else False
        raise ValueError("positive must be True, False or one entry per parameter (True, "
                         f"False, 'log' or 'log10'); got {positive!r}.")

    if isinstance(positive, (str, bool, np.bool_)):
        return [entry(positive)] * n_params
    values = list(np.asarray(positive, dtype=object).ravel()) if np.ndim(positive) else None
    if values is None or np.ndim(positive) != 1 or len(values) != n_params:
        raise ValueError(f"positive must be True, False or {n_params} entries (one per "
                         f"parameter: True, False, 'log' or 'log10'); got {positive!r}.")
    return [entry(v) for v in values]


def check_positive(positive, n_params):
    """``positive`` (a bool or a per-parameter mask) as a boolean array of shape (n_params,).

    Parameters
    ----------
    positive : bool, {"log", "log10"} or array-like of those
        True, ``"log"`` and ``"log10"`` all mean: kept positive, optimised on a log scale.
    n_params : int

    Returns
    -------
    ndarray of bool
    """
    return np.array([e is not False for e in _positive_entries(positive, n_params)],
                    dtype=bool)


def log_factors(positive, n_params):
    """Each parameter's factor ``c`` in ``theta = exp(c u)`` of the optimiser variable ``u``:
    1 for the natural log (``True``, ``"log"``), ``ln 10`` for ``"log10"``, 1 where the
    parameter is not on a log scale.

    Parameters
    ----------
    positive : bool, {"log", "log10"} or array-like of those
    n_params : int

    Returns
    -------
    ndarray of shape (n_params,)
    """
    return np.array([1.0 if e is False else e for e in _positive_entries(positive, n_params)])


def _boolean_mask(value, size, name, each):
    """``value`` (True, False or ``size`` booleans) as a boolean array of shape (size,); a
    ValueError naming ``name`` and what each entry stands for otherwise."""
    mask = np.asarray(value)
    if mask.ndim == 0 and mask.dtype == bool:
        return np.full(size, bool(mask))
    if mask.shape != (size,) or mask.dtype != bool:
        raise ValueError(f"{name} must be True, False or {size} booleans (one per {each}); "
                         f"got {value!r}.")
    return mask.copy()


def bounds_with_positivity(bounds, positive, model):
    """Bounds on theta with ``positive`` parameters' lower bounds raised to 0, or None.

    For methods whose theta-steps are linear least squares (BCD-prox, WENDy), positivity is
    a bound: a log scale would make those steps nonlinear.

    Parameters
    ----------
    bounds : (array-like, array-like) or None
    positive : bool or array-like of bool
    model : ODEModel

    Returns
    -------
    (ndarray, ndarray) or None
    """
    checked = check_bounds(bounds, model.n_params, model.param_names)
    mask = check_positive(positive, model.n_params)
    if not mask.any():
        return checked
    lo, hi = checked if checked is not None else (np.full(model.n_params, -np.inf),
                                                  np.full(model.n_params, np.inf))
    lo = np.where(mask, np.maximum(lo, 0.0), lo)
    if np.any(lo >= hi):
        k = int(np.flatnonzero(lo >= hi)[0])
        raise ValueError(f"positive=True for {model.param_names[k]} contradicts its upper "
                         f"bound {hi[k]:g}.")
    return lo, hi


def condition_map(conditions, model):
    """``(A, c)`` with an experiment's parameters ``A @ theta + c`` under ``conditions``, or
    None when there are none.

    Parameters
    ----------
    conditions : dict or None
        ``{parameter: number or the name of another parameter}``.
    model : ODEModel

    Returns
    -------
    (ndarray of shape (n_params, n_params), ndarray of shape (n_params,)) or None
    """
    if not conditions:
        return None
    names = list(model.param_names)
    A, c = np.eye(len(names)), np.zeros(len(names))
    for name, value in conditions.items():
        i = names.index(name)
        A[i, i] = 0.0
        if isinstance(value, str):
            A[i, names.index(value)] = 1.0
        else:
            c[i] = float(value)
    return A, c


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


def check_sample_weight(sample_weight, n_samples):
    """``sample_weight`` as ``n_samples`` finite non-negative float64 weights.

    Parameters
    ----------
    sample_weight : array-like of shape (n_samples,)
    n_samples : int

    Returns
    -------
    ndarray of shape (n_samples,)
    """
    weights = _checked_array(sample_weight, "sample_weight", ensure_2d=False,
                             ensure_min_samples=0, allow_bool=True)  # 0/1: a selection
    if weights.shape != (n_samples,):
        raise ValueError(f"sample_weight must have shape ({n_samples},), one weight per "
                         f"sample; got shape {weights.shape}.")
    if np.any(weights < 0):
        raise ValueError(f"sample_weight must be non-negative; got {weights.min():g}.")
    return weights


def _check_one(t, Y, *, index, n_observed, observed_names, min_samples, estimator_name,
               state_names):
    where = "" if index is None else f" (experiment {index})"
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
            if len(dose) != 3:
                raise ValueError(f"Each dose{where} is (time, state, amount); got {dose!r}.")
            time, state, amount = dose
            if isinstance(state, str):
                if state not in model.state_names:
                    raise ValueError(f"A dose{where} names the state {state!r}, which is not "
                                     f"one of {model.state_names}.")
                state = model.state_names.index(state)
            elif not (isinstance(state, (int, np.integer)) and 0 <= state < model.n_states):
                raise ValueError(f"A dose{where} names state {state!r}: use a state name or "
                                 f"an index below {model.n_states}.")
            time, amount = float(time), float(amount)
            if not (np.isfinite(time) and np.isfinite(amount)):
                raise ValueError(f"A dose{where} has a non-finite time or amount: {dose!r}.")
            doses.append((time, int(state), amount))
        extra["doses"] = tuple(sorted(doses))
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
    checked = [_check_one(ti, Yi, index=k if several else None, n_observed=len(observed),
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
        where = f" of experiment {k}" if several else ""
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
