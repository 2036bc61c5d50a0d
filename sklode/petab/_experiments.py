"""The experiments of a PEtab problem from its measurement and condition tables: one
:class:`~sklode.Experiment` per simulation condition (and pre-equilibration), split where
measurement rows set different placeholder values, and one per condition for the
measurements at steady state (``time = inf``)."""

from __future__ import annotations

import math

import numpy as np

from ..experiment import Experiment
from ._sbml import UnsupportedFeature

__all__ = ["ExperimentTables"]


def _is_missing(value):
    return value is None or (isinstance(value, float) and math.isnan(value)) or (
        isinstance(value, str) and value.strip() == "")


def _number_or_name(value):
    """A PEtab table entry: a float, or a parameter id (str)."""
    if isinstance(value, (int, float, np.number)):
        return float(value)
    text = str(value).strip()
    try:
        return float(text)
    except ValueError:
        return text


class ExperimentTables:
    """The experiments of a problem whose model (``ode``, read by
    :func:`~._sbml.read_sbml`) is known; ``sp`` is sympy and ``petab`` petab.v1."""

    def __init__(self, ode, sp, petab):
        self.ode, self.sp, self.petab = ode, sp, petab

    def initial_values(self, condition, shifted):
        """Each state's x0 in one condition (0 for shifted states: their offset is in the
        model) and the conditions that set the shifts."""
        ode, sp = self.ode, self.sp
        x0 = np.zeros(len(ode.states))
        overrides = {}
        for i, (s, g) in enumerate(zip(ode.states, ode.initial)):
            value = condition.get(s, float("nan")) if condition is not None else float("nan")
            value = None if _is_missing(value) else _number_or_name(value)
            if s in shifted:
                if value is not None:
                    overrides[f"x0_weight:{s}"] = 0.0
                    overrides[f"x0_value:{s}"] = value
                continue
            if value is not None:
                x0[i] = float(value)
            else:
                x0[i] = float(sp.N(g, 17))
        return x0, overrides

    def experiments(self, measurements, used, names, conditions, cond_columns, shifted,
                     n_observables):
        experiments = []
        pre_column = "preequilibrationConditionId"
        measurements = measurements.assign(_pre=(
            measurements[pre_column].map(lambda v: "" if _is_missing(v) else str(v))
            if pre_column in measurements else ""))
        for (cid, pid), rows in measurements.groupby(["simulationConditionId", "_pre"],
                                                     sort=False):
            for c in (cid, pid):
                if c and c not in conditions.index:
                    raise ValueError(f"The measurement table names the condition {c!r}, "
                                     "which the condition table does not define.")
            condition = conditions.loc[cid]
            base = self.parameter_conditions(condition, cond_columns)
            x0, x0_overrides = self.initial_values(condition, shifted)
            base.update(x0_overrides)
            preequilibration = None
            if pid:
                preequilibration, base, x0 = self.preequilibration(
                    conditions.loc[pid], condition, base, x0, cond_columns, shifted, pid, cid)
            at_rest = ~np.isfinite(rows["time"].astype(float).to_numpy())
            if at_rest.any() and pid:
                raise UnsupportedFeature(
                    f"steady-state measurements (time = inf) of condition {cid!r} after a "
                    f"pre-equilibration ({pid!r})")
            name = cid if not pid else f"{cid} (from {pid})"
            for part, steady in ((rows[~at_rest], False), (rows[at_rest], True)):
                if len(part):
                    experiments += self._experiments_of_rows(
                        part, used, names, n_observables, base, x0, preequilibration,
                        f"{name} (steady state)" if steady else name, cid, steady)
        return experiments

    def _experiments_of_rows(self, rows, used, names, n_observables, base, x0,
                             preequilibration, name, cid, steady):
        """The experiments of one condition's rows: one per set of placeholder values (and
        per replicate of a time and observable). Rows at ``time = inf`` (``steady``) are
        measured at the steady state the condition's own start reaches under its
        parameters: an experiment pre-equilibrated under its own conditions, observed at
        its start (as PEtab's post-equilibration, unless the model has several steady
        states reachable from the start and the trajectory)."""
        # each row's placeholder values; rows that disagree go to separate experiments
        assignments = [self.row_overrides(row) for _, row in rows.iterrows()]
        groups = []  # (assignment dict, list of row positions)
        for k, assignment in enumerate(assignments):
            for merged, members in groups:
                if all(merged.get(p, v) == v for p, v in assignment.items()) and not \
                        self._repeats(rows, members, k):
                    merged.update(assignment)
                    members.append(k)
                    break
            else:
                groups.append((dict(assignment), [k]))
        if steady:
            preequilibration = {"x0": x0, "conditions": dict(base), "reset": []}
        experiments = []
        for g, (assignment, members) in enumerate(groups):
            sub = rows.iloc[members]
            times = np.zeros(1) if steady else np.unique(sub["time"].astype(float).to_numpy())
            Y = np.full((times.size, n_observables), np.nan)
            for _, row in sub.iterrows():
                Y[0 if steady else np.searchsorted(times, float(row["time"])),
                  used.index(row["observableId"])] = float(row["measurement"])
            conds = dict(base)
            conds.update(assignment)
            for key, value in list(conds.items()):
                if isinstance(value, str) and value not in names:
                    raise ValueError(f"Condition {cid!r} sets {key!r} to {value!r}, "
                                     "which is no parameter of the problem.")
            label = name if len(groups) == 1 else f"{name} [{g + 1}]"
            experiments.append(Experiment(times, Y, x0=x0, t0=0.0, conditions=conds,
                                          preequilibration=preequilibration, name=label))
        return experiments

    def parameter_conditions(self, condition, cond_columns):
        """A condition row's parameter and compartment overrides (species are initial
        values, read by :meth:`initial_values`)."""
        out = {}
        for c in cond_columns:
            if c in self.ode.states:
                continue
            value = condition[c]
            if not _is_missing(value):
                out[c] = _number_or_name(value)
        return out

    def preequilibration(self, pre, main, base, x0_main, cond_columns, shifted, pid, cid):
        """``(preequilibration, main conditions, main x0)`` of an experiment pre-equilibrated
        under the condition ``pre``: the states the main condition sets start at its
        values (reset), the others at the steady state."""
        ode = self.ode
        pre_conditions = self.parameter_conditions(pre, cond_columns)
        x0_pre, pre_shift = self.initial_values(pre, shifted)
        pre_conditions.update(pre_shift)
        reset = [s for s in ode.states
                 if s in main.index and not _is_missing(main.get(s, float("nan")))]
        # a state carried over keeps its offset: the main phase must read the same one
        for s, g in zip(ode.states, ode.initial):
            if s not in shifted or s in reset:
                continue
            for k in (f"x0_weight:{s}", f"x0_value:{s}"):
                if k in pre_conditions:
                    base[k] = pre_conditions[k]
            for symbol in g.free_symbols:
                name = symbol.name
                if pre_conditions.get(name) != base.get(name):
                    raise UnsupportedFeature(
                        f"pre-equilibration ({pid!r} before {cid!r}) of {s!r}, whose initial "
                        f"value depends on {name!r}, which the two conditions set differently")
        # the experiment's own conditions apply in both phases; the pre-equilibration's
        # on top of them (undoing those it does not set back to the model's values)
        pre_only = dict(pre_conditions)
        for k in base:
            if k not in pre_only:
                pre_only[k] = k if not k.startswith("x0_") else (
                    1.0 if k.startswith("x0_weight:") else 0.0)
        return ({"x0": x0_pre, "conditions": pre_only, "reset": reset}, base, x0_main)

    @staticmethod
    def _repeats(rows, members, k):
        """Whether row ``k`` repeats the time and observable of a row already in members."""
        row = rows.iloc[k]
        sub = rows.iloc[members]
        return bool(((sub["observableId"] == row["observableId"])
                     & (sub["time"].astype(float) == float(row["time"]))).any())

    def row_overrides(self, row):
        """The placeholder values one measurement row sets."""
        out = {}
        oid = row["observableId"]
        for kind, column in (("observable", "observableParameters"),
                             ("noise", "noiseParameters")):
            value = row.get(column, float("nan"))
            if _is_missing(value):
                continue
            parts = self.petab.split_parameter_replacement_list(value)
            for k, part in enumerate(parts, start=1):
                out[f"{kind}Parameter{k}_{oid}"] = _number_or_name(part)
        return out
