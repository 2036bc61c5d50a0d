"""Experiments as data: what is per experiment travels with its observations.

An :class:`Experiment` holds one experiment's times and observations with what is particular
to it: its initial state and time, its known noise levels, the doses given during it and the
parameter values its conditions set. ``fit([Experiment, ...])`` takes a list of them on every
estimator; :func:`experiments_from_table` builds them from a long (tidy) or wide table and a
NONMEM-style dose table.
"""

from __future__ import annotations

import numpy as np

from ._events import Dose

__all__ = ["Dose", "Experiment", "experiments_from_table"]


class Experiment:
    """One experiment: times, observations, and what is particular to it.

    Parameters
    ----------
    t : array-like of shape (n_samples,)
        Observation times (any order).
    Y : array-like of shape (n_samples, n_observed) or (n_samples,)
        Observations of the observed observables (the model's ``observable_names``, or its
        states), NaN where missing.
    x0 : array-like of shape (n_states,) or dict, optional
        This experiment's initial state (a guess where estimated, the value where known;
        NaN: unknown); overrides the estimator's ``x0``.
    t0 : float, optional
        Time of ``x0`` (at or before the first observation and the first dose); overrides
        the estimator's ``t0``.
    sigma : float or array-like, optional
        Known noise levels of these observations (one, one per column, or one per entry,
        NaN allowed where ``Y`` is NaN), read by the estimator's ``noise_kind``.
    doses : sequence of (float, str or int, float) or Dose, optional
        Boluses ``(time, state, amount)`` added to that state at that time, and
        :class:`Dose` records: infusions (a rate or a duration), doses repeated every
        interval (additional doses), steady states under repeated dosing, resets. An
        observation at a dose's time sees the state just before the dose.
    conditions : dict, optional
        ``{parameter: number}`` sets a parameter for this experiment only (a known
        stimulus, a body weight); ``{parameter: "other"}`` reads it from another parameter
        of ``param_names``, then fitted (PEtab's condition table).
    preequilibration : dict, optional
        Start from a steady state instead of ``x0`` (cells rested before the stimulus;
        PEtab's pre-equilibration): ``{"x0": start, "conditions": {...}, "reset": [...]}``.
        The model runs from ``start`` (one value per state) under this experiment's
        parameters with ``conditions`` applied on top until it stops changing; the
        experiment then starts there at ``t0``, except the states named in ``reset``,
        which start at ``x0``. The steady state's sensitivities to the parameters enter
        the fit (AdjointODE); ``x0`` is then not estimated.
    name : str, optional
        A label (a subject, a plate well) for messages and outputs.

    Examples
    --------
    >>> import numpy as np
    >>> from sklode import Experiment
    >>> exp = Experiment([0.5, 1.0, 2.0], [[1.0], [1.5], [1.2]], doses=[(0.0, "gut", 100.0)],
    ...                  conditions={"V": 30.0}, name="subject 1")
    >>> exp
    Experiment(name='subject 1', n_samples=3, doses=1, conditions=['V'])
    """

    def __init__(self, t, Y, *, x0=None, t0=None, sigma=None, doses=None, conditions=None,
                 preequilibration=None, name=None):
        self.t = t
        self.Y = Y
        self.x0 = x0
        self.t0 = t0
        self.sigma = sigma
        self.doses = doses
        self.conditions = conditions
        self.preequilibration = preequilibration
        self.name = name
        _check_fields(self)

    def __repr__(self):
        parts = [f"name={self.name!r}"] if self.name is not None else []
        parts.append(f"n_samples={len(np.reshape(self.t, -1))}")
        if self.doses:
            parts.append(f"doses={len(self.doses)}")
        if self.conditions:
            parts.append(f"conditions={sorted(self.conditions)}")
        if self.preequilibration:
            parts.append("preequilibrated")
        return f"Experiment({', '.join(parts)})"

    def __len__(self):
        return len(np.reshape(self.t, -1))


def _check_fields(experiment):
    """Refuse, naming the experiment and the field, what would fail later inside a fit with
    a message about Python types (a dose given as a bare number, conditions as a list, no
    samples)."""
    from collections.abc import Mapping

    who = f"Experiment {experiment.name!r}" if experiment.name is not None else "Experiment"
    try:
        n = len(np.reshape(np.asarray(experiment.t, dtype=object), -1))
    except (TypeError, ValueError):
        n = -1
    if n == 0:
        raise ValueError(f"{who} has no samples: t is empty. Leave the experiment out, or "
                         "give its observation times.")
    doses = experiment.doses
    if doses is not None:
        if isinstance(doses, (str, bytes, Mapping)) or not hasattr(doses, "__iter__"):
            raise TypeError(f"{who}: doses must be a list of (time, state, amount) triples, "
                            f"got {type(doses).__name__} {doses!r}; e.g. "
                            "doses=[(0.0, 'central', 100.0)].")
        for k, dose in enumerate(doses):
            if not isinstance(dose, Dose) and (isinstance(dose, (str, bytes)) or not hasattr(
                    dose, "__len__") or len(dose) != 3):
                raise ValueError(f"{who}: dose {k} is {dose!r}; each dose is a (time, state, "
                                 "amount) triple, e.g. (0.0, 'central', 100.0), or a "
                                 "sklode.Dose record.")
            for part, value in (("time", dose[0]), ("amount", dose[2])):
                try:
                    float(value)
                except (TypeError, ValueError):
                    raise ValueError(f"{who}: dose {k} has {part} {value!r}, not a "
                                     "number.") from None
    if experiment.conditions is not None and not isinstance(experiment.conditions, Mapping):
        raise TypeError(f"{who}: conditions must be a dict of parameter name to value (or to "
                        f"another parameter's name), got {type(experiment.conditions).__name__}"
                        f" {experiment.conditions!r}; e.g. conditions={{'V': 30.0}}.")


def _numbers(cells, column, what, rows=None):
    """``cells`` as float64, or a ValueError naming the column, the row and the value."""
    try:
        return np.asarray(cells, dtype=np.float64)
    except (TypeError, ValueError):
        for i, cell in enumerate(cells):
            try:
                float(cell)
            except (TypeError, ValueError):
                row = i if rows is None else int(rows[i])
                raise ValueError(f"The {what}'s column {column!r} holds {cell!r} in row {row}, "
                                 "not a number (NaN marks a missing value).") from None
        raise


def _columns(table):
    """A DataFrame or a dict of arrays as ``{name: ndarray}``."""
    if hasattr(table, "to_dict") and hasattr(table, "columns"):
        return {str(c): np.asarray(table[c]) for c in table.columns}
    if isinstance(table, dict):
        lengths = {len(np.reshape(v, -1)) for v in table.values()}
        if len(lengths) > 1:
            raise ValueError(f"The table's columns have different lengths {sorted(lengths)}.")
        return {str(k): np.asarray(v).reshape(-1) for k, v in table.items()}
    raise TypeError(f"A table must be a pandas DataFrame or a dict of columns, got "
                    f"{type(table).__name__}.")


def _check_labels(groups, column, what):
    """Refuse missing experiment labels (NaN, None, blank), naming their rows: they would
    otherwise become experiments of their own."""
    if column is None:
        return
    missing = [i for i, g in enumerate(groups.tolist())
               if g is None or (isinstance(g, float) and np.isnan(g))
               or (isinstance(g, str) and not g.strip())]
    if missing:
        raise ValueError(f"The {what}'s column {column!r} names no experiment in row(s) "
                         f"{missing[:5]}{' ...' if len(missing) > 5 else ''}: every row "
                         "needs its experiment's label (drop those rows, or fill them in).")


def _require(columns, names, what):
    missing = [n for n in names if n not in columns]
    if missing:
        raise ValueError(f"The {what} has no column {missing[0]!r}; its columns are "
                         f"{list(columns)}.")


def _observable_column(columns, values, value):
    """The column of a long table that names the observables ``values`` (they are not
    columns of their own), when ``observable=`` was left out."""
    missing = [v for v in values if v not in columns]
    candidates = [name for name, cells in columns.items()
                  if cells.dtype.kind in "OUS" and set(missing) <= set(cells.astype(str))]
    if len(candidates) != 1 or value not in columns:
        raise ValueError(
            f"values names {missing}, which are not columns of the table {list(columns)}: "
            "for a wide table name its columns; for a long one say which column names the "
            "observable (observable=) and which holds the values (value=, default 'value').")
    return candidates[0]


def experiments_from_table(table, *, time="time", experiment=None, values=None,
                           observable=None, value="value", doses=None, dose_state="state",
                           dose_amount="amount", dose_time=None, **settings):
    """Build a list of :class:`Experiment` from a long (tidy) or wide table.

    Long: one row per observation, a column naming the observable (``observable=``) and one
    holding the value (``value=``); wide: one column per observable (``values=``). Rows
    are grouped by the ``experiment`` column (a subject, a well) in order of first
    appearance; times repeated within an experiment (several observables on one row of a
    long table) become one row of ``Y``.

    Parameters
    ----------
    table : pandas.DataFrame or dict of array-like
        The observations.
    time : str, default="time"
        The time column.
    experiment : str, optional
        The column that names the experiment of each row; None: one experiment.
    values : sequence of str, optional
        The observables, in ``Y``'s column order: in a wide table, the columns that hold
        them; in a long table, which names of the ``observable`` column to keep (default:
        all, in order of first appearance).
    observable : str, optional
        In a long table, the column naming each row's observable (found by itself when
        ``values`` names observables that are not columns and one text column holds them).
    value : str, default="value"
        In a long table, the column holding the values.
    doses : pandas.DataFrame or dict, optional
        A dose table in the NONMEM style: the ``experiment`` column (when there is one),
        the time (``dose_time``), the state dosed
        (``dose_state``: a name or an index, the compartment) and the amount
        (``dose_amount``); and, where the table has them (in any case), NONMEM's and
        nlmixr2's dosing columns, read into :class:`Dose` records: ``RATE`` (or
        ``rate``), ``DUR`` (``duration``), ``II`` (``interval``), ``ADDL``
        (``additional``), ``SS`` (``steady_state``) and ``EVID`` (3: a reset, 4: a reset
        then the dose; 0 and 2 rows are not doses and are skipped). Empty cells read as
        0.
    dose_state, dose_amount : str
        The dose table's columns.
    dose_time : str, optional
        The dose table's time column (default: ``"time"`` where the dose table has one,
        else the same name as ``time``).
    **settings
        ``x0``, ``t0``, ``sigma``, ``conditions``: one value for every experiment, or a dict
        keyed by experiment name.

    Returns
    -------
    list of Experiment
        One per experiment, named by its value in the ``experiment`` column.

    Examples
    --------
    >>> from sklode import experiments_from_table
    >>> long = {"id": [1, 1, 1, 2, 2], "time": [0.5, 1.0, 2.0, 0.5, 1.0],
    ...         "obs": ["C", "C", "C", "C", "C"], "value": [3.1, 4.0, 2.2, 2.5, 3.9]}
    >>> dose = {"id": [1, 2], "time": [0.0, 0.0], "state": ["gut", "gut"],
    ...         "amount": [100.0, 80.0]}
    >>> exps = experiments_from_table(long, time="time", experiment="id", observable="obs",
    ...                               doses=dose)
    >>> [(e.name, len(e), e.doses) for e in exps]
    [(1, 3, [(0.0, 'gut', 100.0)]), (2, 2, [(0.0, 'gut', 80.0)])]
    """
    columns = _columns(table)
    _require(columns, [time] + ([experiment] if experiment else []), "table")
    if observable is None and values is not None and not set(values) <= set(columns):
        observable = _observable_column(columns, values, value)
    n_rows = len(columns[time])
    groups = columns[experiment] if experiment else np.zeros(n_rows, dtype=int)
    _check_labels(groups, experiment, "table")
    names = list(dict.fromkeys(groups.tolist()))
    if observable is not None:  # long
        _require(columns, [observable, value], "table")
        labels = columns[observable].astype(str)
        kept = list(values) if values is not None else list(dict.fromkeys(labels.tolist()))
        unknown = [v for v in kept if v not in set(labels.tolist())]
        if unknown:
            raise ValueError(f"values names {unknown}, which the column {observable!r} never "
                             f"holds (it holds {sorted(set(labels.tolist()))}).")
    else:  # wide
        if values is None:
            raise ValueError("A wide table needs values=, the columns holding the observables "
                             "(or pass observable= and value= for a long table).")
        kept = list(values)
        _require(columns, kept, "table")
    dose_rows = {}
    if doses is not None:
        dcols = _columns(doses)
        # the dose table's own "time" column (the contract's name), else the measurements'
        dtime = dose_time or ("time" if "time" in dcols else time)
        _require(dcols, [dtime, dose_state, dose_amount] + ([experiment] if experiment else []),
                 "dose table")
        dgroups = dcols[experiment] if experiment else np.zeros(len(dcols[dtime]), dtype=int)
        _check_labels(dgroups, experiment, "dose table")
        dose_times = _numbers(dcols[dtime], dtime, "dose table")
        amounts = _numbers(dcols[dose_amount], dose_amount, "dose table")
        unknown = [g for g in dict.fromkeys(dgroups.tolist()) if g not in names]
        if unknown:
            raise ValueError(f"The dose table names experiment(s) {unknown} that have no "
                             "observations in the table.")
        records = _record_columns(dcols, len(dose_times))
        for k, (g, tt, st, am) in enumerate(zip(dgroups.tolist(), dose_times,
                                                dcols[dose_state], amounts)):
            state = st.item() if hasattr(st, "item") else st
            dose_rows.setdefault(g, []).append(_dose_row(float(tt), state, float(am),
                                                         records, k))
    keyed = {k: v for k, v in settings.items() if isinstance(v, dict) and set(v) & set(names)}
    for key, given in keyed.items():  # a dict by experiment must name every experiment
        missing = [n for n in names if n not in given]
        if missing:
            raise ValueError(f"{key}= is a dict by experiment name but has no entry for "
                             f"experiment(s) {missing[:5]}: give one for each (it names "
                             f"{list(given)[:5]}).")
    out = []
    for name in names:
        rows = groups == name
        t_rows = _numbers(columns[time][rows], time, "table", np.flatnonzero(rows))
        times = np.unique(t_rows)
        Y = np.full((times.size, len(kept)), np.nan)
        where = np.searchsorted(times, t_rows)
        if observable is not None:
            labels_k = labels[rows]
            v = _numbers(columns[value][rows], value, "table", np.flatnonzero(rows))
            for j, obs in enumerate(kept):
                sel = labels_k == obs
                if np.unique(where[sel]).size != sel.sum():
                    raise ValueError(f"Experiment {name!r} has two values of {obs!r} at one "
                                     "time: average or remove repeated measurements.")
                Y[where[sel], j] = v[sel]
        else:
            if np.unique(where).size != where.size:
                raise ValueError(f"Experiment {name!r} has two rows at one time in a wide "
                                 "table: average or remove repeated measurements.")
            for j, col in enumerate(kept):
                Y[where, j] = _numbers(columns[col][rows], col, "table", np.flatnonzero(rows))
        per = {k: v[name] if k in keyed else v for k, v in settings.items()}
        given = [d for d in dose_rows.get(name, ()) if d is not None]
        out.append(Experiment(times, Y, doses=given or None, name=name, **per))
    return out


#: The dose table's optional columns (NONMEM's name, then sklode's), read case-blind.
_RECORD_COLUMNS = {"rate": ("rate",), "duration": ("dur", "duration"),
                   "interval": ("ii", "interval"), "additional": ("addl", "additional"),
                   "steady_state": ("ss", "steady_state"), "evid": ("evid",)}


def _record_columns(dcols, n):
    """The dose table's optional record columns present, as float arrays (NaN read as 0):
    ``{field: values}``."""
    by_lower = {str(c).lower(): c for c in dcols}
    found = {}
    for field, names in _RECORD_COLUMNS.items():
        column = next((by_lower[a] for a in names if a in by_lower), None)
        if column is not None:
            values = _numbers(dcols[column], column, "dose table")
            found[field] = np.where(np.isnan(values), 0.0, values)
    if "rate" in found and np.any(found["rate"] < 0):
        raise ValueError("The dose table's RATE column holds a negative value (NONMEM's -1 or "
                         "-2: a rate or duration set by the model), which sklode does not "
                         "model: give the rate or the duration itself.")
    return found


def _dose_row(time, state, amount, records, k):
    """One dose table row: a ``(time, state, amount)`` bolus, a :class:`Dose` record, or
    None for a row that is not a dose (EVID 0 or 2)."""
    get = {field: float(values[k]) for field, values in records.items()}
    evid = int(get.get("evid", 1))
    if evid not in (0, 1, 2, 3, 4):
        raise ValueError(f"The dose table's row {k} has EVID {evid}: 1 (a dose), 3 (a reset), "
                         "4 (a reset and a dose); 0 and 2 are not doses.")
    if evid in (0, 2):
        return None
    record = Dose(time, state, 0.0 if evid == 3 else amount, rate=get.get("rate", 0.0),
                  duration=get.get("duration", 0.0), interval=get.get("interval", 0.0),
                  additional=int(get.get("additional", 0)),
                  steady_state=int(get.get("steady_state", 0)), reset=evid in (3, 4))
    return record if not record.is_bolus else (time, state, amount)
