"""A PEtab problem read into sklode: the model (generated torch code), the experiments and
the parameter table, with PEtab's negative log-likelihood and a multi-start AdjointODE."""

from __future__ import annotations

import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._validation import check_experiments
from ..adjoint import AdjointODE
from ..exceptions import IntegrationError
from ..models._native import native_unavailable_reason
from ..observation._likelihood import data_neg_log_likelihood, first_impossible_observation
from ..outputerror._optimize import fides_unavailable_reason
from ..outputerror._pose import _preequilibration_of
from ..outputerror._predict import experiment_start, states_at_observations
from ..outputerror._steady_state import preequilibrated_start
from ._experiments import ExperimentTables, _is_missing, _number_or_name
from ._model import GeneratedModel
from ._sbml import UnsupportedFeature, read_sbml

__all__ = ["PEtabProblem", "load"]

_SCALES = ("lin", "log", "log10")
#: (observableTransformation, noiseDistribution) -> sklode's noise kind
_KINDS = {("lin", "normal"): "absolute", ("log", "normal"): "lognormal",
          ("log10", "normal"): "log10normal", ("lin", "laplace"): "laplace"}
_PLACEHOLDER = re.compile(r"^(observable|noise)Parameter(\d+)_(.+)$")


def _imports():
    try:
        import petab.v1 as petab
        import sympy
        from petab.v1.math import sympify_petab
    except ImportError as exc:
        raise ImportError(
            "sklode.petab needs the optional extra 'petab': pip install 'sklode[petab]' "
            f"(petab, python-libsbml, sbmlmath, sympy); missing: {exc.name}") from None
    return petab, sympy, sympify_petab


@dataclass
class PEtabProblem:
    """A PEtab problem in sklode's terms (what :func:`load` returns).

    Attributes
    ----------
    model : GeneratedModel
        The SBML model with the problem's observables and noise model, in torch code.
    experiments : list of Experiment
        One per simulation condition (split further where measurement rows give the
        observable or noise parameters different values, or repeat a time), with the
        condition table's and the measurement table's overrides as ``conditions``.
    parameter_names : tuple of str
        The estimated parameters, in the parameter table's order.
    nominal : ndarray
        Their nominal values (linear scale).
    scales : tuple of str
        Their scales ("lin", "log", "log10"): the optimiser works on that scale.
    lower, upper : ndarray
        Their bounds (linear scale).
    fixed : dict
        Every other entry of the model's theta and its value.
    noise_kind : dict
        The noise kind of each observable.
    name : str
    path : pathlib.Path
    """

    model: GeneratedModel
    experiments: list
    parameter_names: tuple
    nominal: np.ndarray
    scales: tuple
    lower: np.ndarray
    upper: np.ndarray
    fixed: dict
    noise_kind: dict
    name: str
    path: Path
    parameter_table: object = None

    def __repr__(self):
        return (f"PEtabProblem({self.name!r}: {self.model.n_states} states, "
                f"{len(self.parameter_names)} estimated parameters, "
                f"{len(self.experiments)} experiments, "
                f"{sum(int(np.isfinite(e.Y).sum()) for e in self.experiments)} measurements)")

    # ------------------------------------------------------------------ parameters
    def theta(self, values=None):
        """The model's full theta with the estimated parameters at ``values``.

        Parameters
        ----------
        values : array-like of shape (n_estimated,) or dict, optional
            Linear scale, in :attr:`parameter_names` order (default: the nominal values).

        Returns
        -------
        ndarray of shape (model.n_params,)
        """
        values = self._values(values)
        full = dict(self.fixed)
        full.update(zip(self.parameter_names, values))
        return np.array([full[name] for name in self.model.param_names], dtype=np.float64)

    def _values(self, values):
        if values is None:
            return self.nominal.copy()
        if isinstance(values, dict):
            missing = [n for n in self.parameter_names if n not in values]
            if missing:
                raise ValueError(f"values misses the estimated parameter(s) {missing}.")
            return np.array([float(values[n]) for n in self.parameter_names])
        values = np.asarray(values, dtype=np.float64).ravel()
        if values.size != len(self.parameter_names):
            raise ValueError(f"values has {values.size} entries; the problem estimates "
                             f"{len(self.parameter_names)} parameters "
                             f"({', '.join(self.parameter_names[:5])}, ...).")
        return values

    # ------------------------------------------------------------------ likelihood
    def _solved(self, values, options):
        """``(data, states, thetas)``: the validated experiments, each one's states at its
        times and its parameters, at ``values``; each started from its x0 or its
        pre-equilibrated steady state."""
        data = check_experiments(self.experiments, None, model=self.model,
                                 estimate_x0=False, min_samples=1,
                                 estimator_name="PEtabProblem", warn_initial_time=False)
        theta = self.theta(values)
        starts = _starts(self.model, data, theta, options)
        states, thetas = states_at_observations(self.model, theta, data, starts, options)
        return data, states, thetas

    def predict(self, values=None, *, rtol=1e-8, atol=1e-10, integrator="auto"):
        """Each experiment's observables at its times, at ``values`` (linear scale): what an
        estimator's ``predict`` gives for these experiments.

        Parameters
        ----------
        values : array-like of shape (n_estimated,) or dict, optional
            The estimated parameters on the linear scale (default: nominal).
        rtol, atol : float
            Tolerances of the forward solve.
        integrator : str, default="auto"
            The forward solver (:func:`sklode.integrate.integrator_for`: CVODES where it
            can be used, as the estimator's).

        Returns
        -------
        list of ndarray of shape (n_times, n_observables)
        """
        data, states, thetas = self._solved(
            values, {"integrator": integrator, "rtol": rtol, "atol": atol})
        return [self.model.observe_values(e.t, X, th)
                for e, X, th in zip(data.experiments, states, thetas)]

    def simulate(self, values=None, **options):
        """Deprecated name of :meth:`predict` (in sklode, ``simulate`` gives states; this
        gives observables). Warns; removed in sklode 0.3.

        Parameters
        ----------
        values : array-like of shape (n_estimated,) or dict, optional
            As :meth:`predict`.
        **options
            As :meth:`predict`.

        Returns
        -------
        list of ndarray of shape (n_times, n_observables)
        """
        warnings.warn("PEtabProblem.simulate is now PEtabProblem.predict (it gives the "
                      "observables; sklode's simulate gives states); simulate goes in "
                      "sklode 0.3.", FutureWarning, stacklevel=2)
        return self.predict(values, **options)

    def neg_log_likelihood(self, values=None, *, rtol=1e-8, atol=1e-10, integrator="auto"):
        """PEtab's negative log-likelihood of the measurements at ``values``.

        Parameters
        ----------
        values : array-like of shape (n_estimated,) or dict, optional
            The estimated parameters on the linear scale (default: nominal).
        rtol, atol : float
            Tolerances of the forward solve.
        integrator : str, default="auto"
            The forward solver (CVODES where it can be used, as the estimator's).

        Returns
        -------
        float
            ``inf`` where the ODE cannot be integrated at ``values`` (an
            :class:`~sklode.exceptions.IntegrationError`: an optimiser then steps back) or an
            observation has zero likelihood; both warn (:class:`UserWarning`) with the reason
            and, for the second, the observation.

        Raises
        ------
        ModelError
            Where the model cannot be evaluated at all (a construct the generated code
            cannot compute): that is not a likelihood of zero, so no number is returned.
        """
        try:
            data, states, thetas = self._solved(
                values, {"integrator": integrator, "rtol": rtol, "atol": atol})
        except IntegrationError as exc:
            warnings.warn(f"PEtabProblem.neg_log_likelihood is inf: {exc}", UserWarning,
                          stacklevel=2)
            return float("inf")
        nll, _ = data_neg_log_likelihood(self.model, data.experiments, data.observed, states,
                                         thetas, None, self.noise_kind)
        if not np.isfinite(nll):
            where = first_impossible_observation(self.model, data.experiments, data.observed,
                                                 states, thetas, None, self.noise_kind)
            warnings.warn(f"PEtabProblem.neg_log_likelihood is {nll}: {where}", UserWarning,
                          stacklevel=2)
        return float(nll)

    # ------------------------------------------------------------------ fitting
    def starts(self, n_starts, random_state=None):
        """``n_starts`` start points drawn uniformly in the bounds on each parameter's
        scale (linear scale values, shape (n_starts, n_estimated))."""
        from sklearn.utils import check_random_state

        rng = check_random_state(random_state)
        lo, hi = self._on_scale(self.lower), self._on_scale(self.upper)
        draws = lo + (hi - lo) * rng.uniform(size=(int(n_starts), lo.size))
        return self._from_scale(draws)

    def _on_scale(self, values):
        out = np.array(values, dtype=np.float64, copy=True)
        for i, scale in enumerate(self.scales):
            if scale == "log":
                out[..., i] = np.log(out[..., i])
            elif scale == "log10":
                out[..., i] = np.log10(out[..., i])
        return out

    def _from_scale(self, values):
        out = np.array(values, dtype=np.float64, copy=True)
        for i, scale in enumerate(self.scales):
            if scale == "log":
                out[..., i] = np.exp(out[..., i])
            elif scale == "log10":
                out[..., i] = 10.0 ** out[..., i]
        return out

    def estimator(self, *, n_starts=1, random_state=None, n_jobs=None, theta0=None,
                  **settings):
        """An :class:`~sklode.AdjointODE` posed on this problem: its bounds, scales (log and
        log10 parameters optimised on their own scale), fixed values and noise model; random
        starts drawn uniformly in the bounds on each parameter's scale.

        Parameters
        ----------
        n_starts : int, default=1
        random_state : int, RandomState instance or None
        n_jobs : int, optional
            Starts fitted in parallel (joblib).
        theta0 : array-like of shape (n_estimated,), optional
            The first start (linear scale); default the nominal values.
        **settings
            Other AdjointODE parameters (``rtol``, ``max_iter``, ``optimizer``,
            ``integrator``, ...). The default integrator is ``"CVODES"`` (the model compiled
            to C, CVODES' forward sensitivities) where this machine has a C compiler and
            SUNDIALS, ``"LSODA"`` otherwise. The default optimizer is ``"fides"`` with
            ``max_iter=1000`` where the package fides is installed (it comes with the
            ``petab`` extra): from random starts in a PEtab box it reaches the best optimum
            from more starts than ``"trf"`` (``max_iter=200``), the fallback.

        Returns
        -------
        AdjointODE
            Unfitted; fit it on :attr:`experiments`.
        """
        values = self._values(None if theta0 is None else theta0)
        # strictly inside the box (PEtab's nominal values may sit on a bound), nudged on the
        # parameter's own scale: on the linear scale, 1e-9 of [1e-8, 1e8] is 0.1, which
        # would move every smaller log-scale start to 0.1
        lo, hi = self._on_scale(self.lower), self._on_scale(self.upper)
        margin = 1e-9 * (hi - lo)
        values = self._from_scale(np.clip(self._on_scale(values), lo + margin, hi - margin))
        start = self.theta(values)
        names = list(self.model.param_names)
        lower = np.full(len(names), -np.inf)
        upper = np.full(len(names), np.inf)
        # the optimiser's variable is the parameter on its PEtab scale: Fides' trust region
        # measures steps in decades for log10 parameters, as pyPESTO's does (on Raia et al.
        # 2011, 20 starts, natural-log variables reached 349.44; log10 ones 345.31)
        positive = [False] * len(names)
        for k, name in enumerate(self.parameter_names):
            i = names.index(name)
            lower[i], upper[i] = self.lower[k], self.upper[k]
            positive[i] = False if self.scales[k] == "lin" else self.scales[k]
        fixed = dict(self.fixed)
        optimizer = settings.get("optimizer",
                                 "trf" if fides_unavailable_reason() else "fides")
        options = dict(theta0=start, optimizer=optimizer, estimate_x0=False, fixed=fixed,
                       bounds=(lower, upper), positive=positive, noise_kind=self.noise_kind,
                       n_starts=n_starts, random_state=random_state, n_jobs=n_jobs,
                       rtol=1e-8, atol=1e-10,
                       integrator="LSODA" if native_unavailable_reason() else "CVODES")
        if optimizer == "fides":
            # pyPESTO's optimiser and iteration limit on this collection: from random starts
            # in a 10-decade box trf stops on its ftol test at poor points more often. Any
            # other optimiser keeps AdjointODE's own max_iter.
            options["max_iter"] = 1000
        options.update(settings)
        return AdjointODE(self.model, **options)

    def parameter_table_of(self, estimator_or_values):
        """The parameter table (a pandas DataFrame) with ``nominalValue`` replaced by a
        fit's estimates (linear scale), ready for ``petab.v1.write_parameter_df``.

        Parameters
        ----------
        estimator_or_values : fitted estimator from :meth:`estimator`, or array-like
        """
        values = getattr(estimator_or_values, "theta_", None)
        if values is not None:
            index = {n: i for i, n in enumerate(self.model.param_names)}
            values = [values[index[n]] for n in self.parameter_names]
        values = self._values(values if values is not None else estimator_or_values)
        table = self.parameter_table.copy()
        for name, value in zip(self.parameter_names, values):
            table.loc[name, "nominalValue"] = float(value)
        return table


def _offsets_jacobian_source(offsets, symbols, theta_reads):
    """The source of ``initial_offsets_jacobian(theta)``, the nonzero entries of
    ``d initial_offsets / d theta`` at the positions ``INITIAL_OFFSETS_JACOBIAN_AT``: the
    offsets differentiated by sympy at import, so that a fit reads a few expressions instead
    of running autograd once per experiment and Jacobian (Bruno: 1.1 ms a call, 46 % of a
    start). Empty where a derivative is not an ordinary expression (a piecewise step's
    DiracDelta); autograd then."""
    import sympy as sp  # the optional extra (sklode[petab]): imported where it is needed

    from ._codegen import function_source  # sympy too

    entries, at = [], []
    for i, expression in enumerate(offsets):
        expression = sp.sympify(expression)
        for j, s in enumerate(symbols):
            if s in expression.free_symbols:
                derivative = sp.diff(expression, s)
                if derivative != 0:
                    entries.append(derivative)
                    at.append((i, j))
    if not entries or any(e.has(sp.DiracDelta, sp.Derivative, sp.Subs) for e in entries):
        return ""
    try:
        body = function_source("initial_offsets_jacobian", "theta", entries, theta_reads, "()")
    except UnsupportedFeature:
        return ""
    return f"\nINITIAL_OFFSETS_JACOBIAN_AT = {at!r}\n" + body


def _jump_events_source(ode, in_model_terms, z, offsets, displaced, reads):
    """The source of the events that make the state jump: ``event_triggers`` (each
    trigger's ``g``), ``event_assign_<k>`` (the whole state after event ``k``),
    ``event_delays`` (where an event has a delay: each one's, 0 for the others) and
    ``EVENTS`` (each one's ``(initial_value, name, delayed, use_values_from_trigger_time,
    targets)``), which :class:`GeneratedModel` turns into :class:`sklode.models.Event`;
    empty without them."""
    from ._codegen import function_source

    if not ode.jumps:
        return ""
    source = "\n" + function_source("event_triggers", "t, x, theta",
                                    [in_model_terms(j["trigger"]) for j in ode.jumps], reads,
                                    "x.shape[:-1]")
    for k, jump in enumerate(ode.jumps):
        new = []
        for s, offset in zip(ode.states, offsets):
            if s in jump["assignments"]:  # a displaced state keeps its offset out
                value = in_model_terms(jump["assignments"][s])
                new.append(value - offset if displaced else value)
            else:
                new.append(z[s])
        source += "\n" + function_source(f"event_assign_{k}", "t, x, theta", new, reads,
                                         "x.shape[:-1]")
    delays = [j["delay"] for j in ode.jumps]
    if any(d is not None for d in delays):  # free of the state: read theta only
        source += "\n" + function_source("event_delays", "theta", [
            in_model_terms(d) if d is not None else 0 for d in delays], reads, "()")
    source += "\nEVENTS = " + repr(tuple(
        (bool(j["initial_value"]), str(j["name"]), j["delay"] is not None,
         bool(j["use_values_from_trigger_time"]),
         tuple(i for i, s in enumerate(ode.states) if s in j["assignments"]))
        for j in ode.jumps)) + "\n"
    return source


def _starts(model, data, theta, options):
    """Each experiment's initial state: its x0, or after its pre-equilibration."""
    rows = []
    for e in data.experiments:
        pre = _preequilibration_of(e, model)
        rows.append(experiment_start(model, e, theta) if pre is None else
                    preequilibrated_start(model, pre, e.x0, theta, **options)[0])
    return np.array(rows)


def load(yaml_path):
    """Read a PEtab problem (its YAML file) into sklode.

    Parameters
    ----------
    yaml_path : str or os.PathLike
        The problem's YAML file (PEtab format version 1).

    Returns
    -------
    PEtabProblem

    Raises
    ------
    sklode.petab.UnsupportedFeature
        Naming the SBML or PEtab feature the problem uses that the import does not support
        (events, steady-state measurements after a pre-equilibration, log-Laplace noise, ...).

    Examples
    --------
    >>> from sklode import petab  # doctest: +SKIP
    >>> problem = petab.load("Bertozzi_PNAS2020/problem.yaml")  # doctest: +SKIP
    >>> problem.neg_log_likelihood(problem.nominal)  # doctest: +SKIP
    """
    petab, sp, sympify_petab = _imports()
    path = Path(yaml_path)
    with warnings.catch_warnings():  # petab's deprecation notices are not the user's
        warnings.simplefilter("ignore")
        problem = petab.Problem.from_yaml(str(path))
    return _Builder(problem, path, sp, sympify_petab, petab).build()


class _Builder:
    """The steps of :func:`load`, sharing the tables and the symbolic model."""

    def __init__(self, problem, path, sp, sympify_petab, petab):
        self.problem, self.path, self.sp, self.petab = problem, path, sp, petab
        self.sympify_petab = sympify_petab
        document = problem.model.sbml_document
        table = problem.parameter_df
        self.estimated = [] if table is None or "estimate" not in table else [
            p for p in table.index if int(table.loc[p, "estimate"]) == 1]
        self.ode = read_sbml(document, moving=self.estimated)
        self.name = problem.model.model_id or path.stem

    def _formula(self, text, what):
        sp = self.sp
        if _is_missing(text):
            raise ValueError(f"{what} is empty.")
        expr = self.sympify_petab(str(text)) if not isinstance(text, (int, float)) else \
            sp.Float(float(text), 17)
        expr = sp.sympify(expr)
        table = {}
        for s in expr.free_symbols:
            if s.name == "time" or (s.name == "t" and s.name not in self.ode.symbols):
                table[s] = self.ode.time
            else:
                table[s] = self.ode.symbols.get(s.name) or self.sp.Symbol(s.name, real=True)
        return expr.xreplace(table)

    def _check_columns(self):
        """Refuse a table without a column PEtab requires, naming the table and the column
        (instead of a KeyError deep inside the build)."""
        problem = self.problem
        required = {
            "measurement table": (problem.measurement_df, ("observableId",
                                  "simulationConditionId", "time", "measurement")),
            "observable table": (problem.observable_df, ("observableFormula",
                                 "noiseFormula")),
            "parameter table": (problem.parameter_df, ("parameterScale", "lowerBound",
                                "upperBound", "nominalValue", "estimate")),
        }
        for what, (table, columns) in required.items():
            if table is None:
                raise ValueError(f"{self.path}: the PEtab problem has no {what}.")
            present = list(table.columns) + [table.index.name]
            missing = [c for c in columns if c not in present]
            if missing:
                raise ValueError(f"{self.path}: the {what} has no column {missing[0]!r}, which "
                                 f"PEtab requires; its columns are {list(table.columns)}.")

    def build(self):
        sp, problem = self.sp, self.problem
        ode = self.ode
        self._check_columns()
        measurements = problem.measurement_df.copy()
        observables = problem.observable_df
        obs_ids = list(observables.index)
        used = [o for o in obs_ids if (measurements["observableId"] == o).any()]

        # ---- the observation model: formulas, noise formulas, kinds
        obs_exprs, noise_exprs, kinds, placeholders = [], [], {}, []
        for oid in used:
            row = observables.loc[oid]
            transform = row.get("observableTransformation", "lin")
            transform = "lin" if _is_missing(transform) else str(transform)
            dist = row.get("noiseDistribution", "normal")
            dist = "normal" if _is_missing(dist) else str(dist)
            if (transform, dist) not in _KINDS:
                raise UnsupportedFeature(f"the noise model {transform}-{dist} (observable "
                                         f"{oid!r}); supported: normal on lin/log/log10, "
                                         "Laplace on lin")
            kinds[oid] = _KINDS[transform, dist]
            obs_exprs.append(self._formula(row["observableFormula"],
                                           f"The formula of observable {oid!r}"))
            noise = row.get("noiseFormula", 1.0)
            noise_exprs.append(self._formula(noise, f"The noise formula of {oid!r}"))
        for expr in obs_exprs + noise_exprs:
            for s in expr.free_symbols:
                m = _PLACEHOLDER.match(s.name)
                if m and s.name not in placeholders:
                    placeholders.append(s.name)

        # ---- theta: model parameters, placeholders, parameter-table ids, x0 multiplexers
        parameters = problem.parameter_df
        names = list(ode.parameters)
        for extra in placeholders + [p for p in parameters.index if p not in ode.parameters]:
            if extra not in names and extra not in ode.states:
                names.append(extra)
        values = dict(ode.parameters)
        for p in placeholders:
            values.setdefault(p, float("nan"))  # must be set by every measurement row

        conditions = problem.condition_df
        cond_columns = [c for c in conditions.columns if c != "conditionName"]
        for c in cond_columns:
            if c not in values and c not in ode.states:
                if c in ode.assignments:
                    raise UnsupportedFeature(f"a condition table column ({c!r}) that an "
                                             "assignment rule sets")
                raise ValueError(f"The condition table's column {c!r} names no parameter, "
                                 "compartment or species of the model.")

        # states whose initial value depends on parameters (or a condition names one)
        state_index = {s: i for i, s in enumerate(ode.states)}
        shifted = []
        for s, g in zip(ode.states, ode.initial):
            named = s in conditions.columns and conditions[s].map(
                lambda v: isinstance(_number_or_name(v), str)).any()
            if g.free_symbols or named:
                shifted.append(s)
        for s in shifted:
            names += [f"x0_weight:{s}", f"x0_value:{s}"]
            values[f"x0_weight:{s}"], values[f"x0_value:{s}"] = 1.0, 0.0
        symbol = {n: ode.symbols.get(n) or sp.Symbol(n, real=True) for n in names}
        z = {s: sp.Symbol(f"_z_{i}", real=True) for i, s in enumerate(ode.states)}
        # Without pre-equilibration the states are the species themselves and each
        # experiment starts at x0 + initial_offsets(theta) (AMICI's way: full precision in a
        # species that depletes from 1e7, where z + 1e7 keeps 1e-9 of it). A pre-equilibrated
        # problem keeps them as displacements z = x - x0(theta) from z(0) = 0, so that the
        # steady state carries its offset into the main phase.
        pre_column = "preequilibrationConditionId"
        # (measurements at steady state are pre-equilibrated experiments too)
        displaced = (pre_column in measurements and bool(
            measurements[pre_column].map(lambda v: not _is_missing(v)).any())) or not \
            np.all(np.isfinite(measurements["time"].astype(float)))
        state_value = {}
        offsets = []
        for s, g in zip(ode.states, ode.initial):
            offset = (symbol[f"x0_weight:{s}"] * g + symbol[f"x0_value:{s}"] if s in shifted
                      else sp.Integer(0))
            offsets.append(offset)
            state_value[ode.symbols[s]] = z[s] + offset if displaced else z[s]
        # shifts are written in parameters only (an initial value never names a state)
        rhs = [e.xreplace(state_value) for e in ode.rhs]

        def in_model_terms(expr):
            expr = expr.xreplace({ode.symbols[v]: e for v, e in ode.assignments.items()
                                  if v in ode.symbols})
            return expr.xreplace(state_value)

        obs_exprs = [in_model_terms(e) for e in obs_exprs]
        y = {self.sp.Symbol(oid, real=True): sp.Symbol(f"_y_{j}", real=True)
             for j, oid in enumerate(used)}
        noise_exprs = [in_model_terms(e.xreplace({s: y[s] for s in e.free_symbols
                                                  if s in y})) for e in noise_exprs]
        # a noise formula that names states is computed in observe, as an extra observable
        # that no measurement holds (its column all NaN), which noise_sd then reads
        auxiliary = []
        states_z = set(z.values())
        for j, (oid, e) in enumerate(zip(used, noise_exprs)):
            if e.free_symbols & states_z:  # first: the observable's own formula, as y
                e = noise_exprs[j] = e.subs(obs_exprs[j], sp.Symbol(f"_y_{j}", real=True))
            if e.free_symbols & states_z:
                reverse = {v: obs_exprs[k] for k, v in enumerate(y.values())}
                obs_exprs.append(e.xreplace(reverse))
                auxiliary.append(f"sd({oid})")
                noise_exprs[j] = sp.Symbol(f"_y_{len(used) + len(auxiliary) - 1}", real=True)
        n_aux = len(auxiliary)
        aux_kinds = {a: "absolute" for a in auxiliary}

        # ---- generated code
        from ._codegen import function_source  # sympy: the optional extra, on first use

        reads = {ode.time: "t"}
        reads.update({z[s]: f"x[..., {i}]" for s, i in state_index.items()})
        reads.update({symbol[n]: f"theta[{i}]" for i, n in enumerate(names)})
        source = function_source("rhs", "t, x, theta", rhs, reads, "x.shape[:-1]")
        source += "\n" + function_source("observe", "t, x, theta", obs_exprs, reads,
                                         "x.shape[:-1]")
        noise_reads = {ode.time: "t"}
        noise_reads.update({symbol[n]: f"theta[{i}]" for i, n in enumerate(names)})
        noise_reads.update({sp.Symbol(f"_y_{j}", real=True): f"y[..., {j}]"
                            for j in range(len(used) + n_aux)})
        # the extra observables' own noise is 1 (they are never measured)
        source += "\n" + function_source("noise_sd", "t, y, theta",
                                         noise_exprs + [sp.Integer(1)] * n_aux,
                                         noise_reads, "y.shape[:-1]")
        if shifted:  # each state's offset: where the solve starts, or (displaced states)
            # what the integrators' error test adds to z
            theta_reads = {symbol[n]: f"theta[{i}]" for i, n in enumerate(names)}
            source += "\n" + function_source(
                "state_offsets" if displaced else "initial_offsets", "theta", offsets,
                theta_reads, "()")
            if not displaced:
                source += _offsets_jacobian_source(offsets, [symbol[n] for n in names],
                                                   theta_reads)
        source += _jump_events_source(ode, in_model_terms, z, offsets, displaced, reads)
        defaults = [values.get(n, float("nan")) for n in names]
        for n in names:
            if n in parameters.index:
                defaults[names.index(n)] = float(parameters.loc[n, "nominalValue"])
        model = GeneratedModel(tuple(ode.states), tuple(names), source,
                               observable_names=tuple(used) + tuple(auxiliary),
                               default_theta=tuple(np.nan_to_num(defaults, nan=1.0)),
                               name=self.name)

        # ---- parameter table
        for col in ("parameterScale", "lowerBound", "upperBound", "nominalValue", "estimate"):
            if col not in parameters.columns:
                raise ValueError(f"The parameter table has no column {col!r}.")
        estimated = self.estimated  # read in __init__, for the SBML import; checked above
        scales = tuple(str(parameters.loc[p, "parameterScale"]) for p in estimated)
        for p, s in zip(estimated, scales):
            if s not in _SCALES:
                raise UnsupportedFeature(f"the parameter scale {s!r} of {p!r}")
        fixed = {}
        for n in names:
            if n in estimated:
                continue
            if n in parameters.index:
                fixed[n] = float(parameters.loc[n, "nominalValue"])
            else:
                fixed[n] = float(values.get(n, float("nan")))
        for p in estimated:
            if p not in names:  # pragma: no cover - every table id is in names
                raise ValueError(f"The estimated parameter {p!r} is not used by the problem.")
        for T in ode.event_times:  # a switch time's own sensitivity is not computed
            moved = sorted(s.name for s in T.free_symbols if s.name in estimated)
            if moved:
                raise UnsupportedFeature(f"an SBML event at time {T}, which depends on the "
                                         f"estimated parameter(s) {moved}")

        experiments = ExperimentTables(self.ode, self.sp, self.petab).experiments(
            measurements, used, names, conditions, cond_columns, shifted, len(used) + n_aux)
        nan_fixed = [n for n, v in fixed.items() if math.isnan(v) and not any(
            e.conditions and n in e.conditions for e in experiments)]
        if nan_fixed:
            raise ValueError(f"The parameter(s) {nan_fixed[:5]} have no value: not in the "
                             "parameter table and set by no condition or measurement row.")
        for n in list(fixed):
            if math.isnan(fixed[n]):
                fixed[n] = 1.0  # every experiment sets it (checked above)
        return PEtabProblem(
            model=model, experiments=experiments, parameter_names=tuple(estimated),
            nominal=np.array([float(parameters.loc[p, "nominalValue"]) for p in estimated]),
            scales=scales,
            lower=np.array([float(parameters.loc[p, "lowerBound"]) for p in estimated]),
            upper=np.array([float(parameters.loc[p, "upperBound"]) for p in estimated]),
            fixed=fixed, noise_kind={**kinds, **aux_kinds}, name=self.name, path=self.path,
            parameter_table=parameters.copy())
