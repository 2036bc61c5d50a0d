"""The checks of single arguments: times, arrays, names, ``theta0``, ``observed``, bounds,
``fixed``, ``positive``, conditions and sample weights, each with a message that names the
value received and the way out. :mod:`sklode._validation` builds the experiments from them."""

from __future__ import annotations

import datetime
import warnings

import numpy as np
from sklearn.utils import check_array

__all__ = ["OLD_OPTIMIZER_SPELLINGS", "LOG_SCALES", "canonical_optimizer", "initial_theta",
           "as_float_array",
           "bounds_with_positivity", "by_name",
           "check_bounds", "check_fixed", "check_observed", "check_positive",
           "check_sample_weight", "check_theta0", "check_times", "condition_map",
           "log_factors"]


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



def initial_theta(theta0, model, *, bounds, positive, fixed):
    """``theta0`` as a checked float64 vector inside ``bounds`` and ``positive``.

    A ``theta0`` the user gave outside them is refused (a start the method would have to move
    without saying so); the model's default guess (``theta0=None``) is moved into them, since
    the user chose only the bounds. Parameters held by ``fixed`` are not checked.

    Parameters
    ----------
    theta0 : array-like of shape (n_params,) or None
    model : ODEModel
    bounds : tuple or None
    positive : bool or array-like of bool
    fixed : dict or None

    Returns
    -------
    ndarray of shape (n_params,)
    """
    checked = check_theta0(theta0, model)
    limits = bounds_with_positivity(bounds, positive, model)
    if limits is None:
        return checked
    lo, hi = limits
    held = set(fixed or ())
    free = np.array([name not in held for name in model.param_names])
    if theta0 is None:
        inside = np.clip(checked, lo, hi)
        # a log-scale parameter cannot start at 0: half way into its interval instead
        at_zero = check_positive(positive, model.n_params) & (inside <= 0)
        return np.where(at_zero, np.minimum(1.0, hi / 2), inside)
    outside = free & ((checked < lo) | (checked > hi))
    if outside.any():
        k = int(np.flatnonzero(outside)[0])
        name = model.param_names[k]
        raise ValueError(
            f"theta0 starts {name}={checked[k]:g} outside its allowed range "
            f"[{lo[k]:g}, {hi[k]:g}] (from bounds= and positive=). Start inside it (or "
            "leave theta0=None: the model's default guess is then moved into it), or "
            "widen the bounds.")
    return checked


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


#: Optimiser names as they were spelled before one style (lower case, words joined by "-") held
#: for every estimator; each is accepted with a FutureWarning until 0.3.
OLD_OPTIMIZER_SPELLINGS = {"BFGS": "bfgs", "L-BFGS-B": "l-bfgs-b", "CG-FR": "cg-fr",
                           "CG-PR": "cg-pr", "CG-HS": "cg-hs", "CG-DY": "cg-dy"}


def canonical_optimizer(optimizer):
    """``optimizer`` in sklode's one spelling (lower case, words joined by ``-``).

    An old spelling (``"L-BFGS-B"``, ``"BFGS"``, ``"CG-FR"``, ...) is translated with a
    FutureWarning; every other name is returned as it is.

    Parameters
    ----------
    optimizer : str

    Returns
    -------
    str

    Examples
    --------
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     canonical_optimizer("L-BFGS-B")
    'l-bfgs-b'
    """
    if optimizer in OLD_OPTIMIZER_SPELLINGS:
        new = OLD_OPTIMIZER_SPELLINGS[optimizer]
        warnings.warn(f"optimizer={optimizer!r} is now spelled {new!r} (every sklode optimiser "
                      "name is lower case with '-' between words); the old spelling stops "
                      "working in sklode 0.3.", FutureWarning, stacklevel=3)
        return new
    return optimizer
