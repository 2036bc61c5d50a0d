"""Forward solves against AMICI, in one process (the ``solves`` part of ``forward.py``).

For each problem of ``../shared/petab`` (and the zoo's SEIRD and Lorenz-63, written as SBML
rate rules for AMICI): every simulation condition solved once at the nominal parameters,
without and with forward sensitivities, rtol 1e-8, atol 1e-10, CPU best of at least 5 calls
(as many as fit in 0.2 s, up to 50):

* AMICI (SBML compiled to C++, CVODES): ``run_simulation`` on the problem's ExpData (the
  PEtab parameter mapping done beforehand, outside the timing); sensitivities for the
  parameters the field depends on (the same columns sklode integrates);
* sklode's scipy path: LSODA (``odeint``) on the compiled numpy field and Jacobian, and its
  Gauss-collocation forward sensitivities on the stored trajectory;
* sklode's CVODES path, ``integrator="CVODES"`` (BDF with staggered forward sensitivities,
  SUNDIALS built with the package), by each of its two routes: the model's instructions
  interpreted by the solver compiled at install ("tape", no compiler at run time), and the
  model written as C and compiled once ("c");
* for SEIRD and Lorenz-63, ``odeint`` with a hand-written numpy field and Jacobian.

Also the one-time cost per model: the checks and the numpy compilation (``check_model``),
and each route's build (a fresh model and cache folder: the encoding, or the compiler's CPU
included, from ``resource``), and the largest difference between the CVODES and LSODA
states (relative to the state's scale).

AMICI and petab come from the registry into the benchmark's own environment; sklode is
installed there too so that both run in this process:

    python -m venv /tmp/amici && PATH=/tmp/amici/bin:$PATH /tmp/amici/bin/pip install swig
    PATH=/tmp/amici/bin:$PATH /tmp/amici/bin/pip install amici petab 'torch==2.13.0' -e '.[petab]'
    PATH=/tmp/amici/bin:$PATH /tmp/amici/bin/python benchmarks/forward.py --parts solves
"""

from __future__ import annotations

import logging
import os
import resource
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
# this folder holds petab.py: it must not hide the petab package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
COLLECTION = HERE.parents[1] / "shared" / "petab"
RTOL, ATOL = 1e-8, 1e-10


def _cpu(function, repeats=5, budget=0.2, most=50):
    """The lowest CPU seconds of ``function`` over at least ``repeats`` calls (as many as fit
    in ``budget`` seconds, at most ``most``): sub-millisecond solves need more than five."""
    times = []
    while len(times) < repeats or (sum(times) < budget and len(times) < most):
        start = time.process_time()
        function()
        times.append(time.process_time() - start)
    return min(times)


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# ----------------------------------------------------------------------------- sklode's side
def sklode_cases(name):
    """``(model, [(theta, x0, t0, t), ...])`` of a PEtab problem or a zoo system."""
    if name == "SEIRD":
        from sklode.models import SEIRD

        model = SEIRD(N=1e5)
        return model, [(np.array(model.default_theta), np.array([99990.0, 0, 10, 0, 0]),
                        0.0, np.linspace(0, 100, 16)[1:])]
    if name == "Lorenz63":
        from sklode.models import Lorenz63

        model = Lorenz63()
        return model, [(np.array(model.default_theta), np.array([1.0, 1.0, 1.0]), 0.0,
                        np.linspace(0, 2, 16)[1:])]
    import sklode.petab as sp
    from sklode.outputerror._predict import conditioned_theta
    from sklode._validation import check_experiments
    from sklode.petab._problem import _starts

    problem = sp.load(next((COLLECTION / name).glob("*.yaml")))
    data = check_experiments(problem.experiments, None, model=problem.model, estimate_x0=False,
                             min_samples=1, estimator_name="bench", warn_initial_time=False)
    theta = problem.theta(None)
    starts = _starts(problem.model, data, theta, {"integrator": "LSODA", "rtol": RTOL,
                                                  "atol": ATOL})
    cases = [(conditioned_theta(theta, e.conditions, problem.model), x0, e.t0, e.t)
             for e, x0 in zip(data.experiments, starts)]
    return problem.model, cases


def sklode_side(name, cache):
    """sklode's columns: LSODA, and CVODES by each route (the model interpreted by the
    package's precompiled solver, "tape", and compiled to C, "c"), each route's one-time
    cost measured on a fresh model and an empty build cache."""
    from sklode.outputerror._sensitivity import forward_trajectory, sensitivities
    from sklode.models import check_model

    os.environ["SKLODE_CACHE_DIR"] = cache
    start = time.process_time()
    model, cases = sklode_cases(name)
    check_model(model)
    model.pointwise_field()
    checks_cpu = time.process_time() - start
    native = model.native_solver()
    cases = _distinct(cases, native)
    out = {"n_states": model.n_states, "n_params": model.n_params,
           "n_conditions": len(cases), "n_solves": len(cases), "checks_cpu_s": checks_cpu,
           "native": native is not None, "native_reason": model.native_unavailable_reason(),
           "sundials": _sundials_version()}
    # sensitivities for the parameters the field reads, but the import's x0 shifts
    # ("x0_weight:S", never estimated; AMICI has no such parameters)
    params = None
    if native is not None:
        params = [k for k in np.flatnonzero(native.param_in_field)
                  if ":" not in model.param_names[k]]
        out["sensitivity_params"] = [model.param_names[k] for k in params]

    def solve_all(model, integrator, with_sens):
        result = []
        for theta, x0, t0, t in cases:
            traj = forward_trajectory(model, theta, x0, t0, t, integrator=integrator,
                                      rtol=RTOL, atol=ATOL)
            result.append(sensitivities(model, theta, traj, with_x0=False, params=params)
                          if with_sens else traj.states)
        return result

    out["lsoda_cpu_s"] = _cpu(lambda: solve_all(model, "LSODA", False))
    out["lsoda_sens_cpu_s"] = _cpu(lambda: solve_all(model, "LSODA", True))
    lsoda, lsoda_sens = solve_all(model, "LSODA", False), solve_all(model, "LSODA", True)
    if native is not None:
        for route in ("tape", "c"):
            os.environ["SKLODE_CVODES_MODEL"] = route
            try:
                fresh, _ = sklode_cases(name)
                fresh.pointwise_field()
                start, children = time.process_time(), _children_cpu()
                solver = fresh.native_solver()
                out[f"{route}_build_cpu_s"] = (time.process_time() - start + _children_cpu()
                                               - children)
                if solver is None:
                    out[f"{route}_reason"] = fresh.native_unavailable_reason()
                    continue
                out[f"{route}_cpu_s"] = _cpu(lambda: solve_all(fresh, "CVODES", False))
                out[f"{route}_sens_cpu_s"] = _cpu(lambda: solve_all(fresh, "CVODES", True))
                states = solve_all(fresh, "CVODES", False)
                sens = solve_all(fresh, "CVODES", True)
            finally:
                del os.environ["SKLODE_CVODES_MODEL"]
            out[f"{route}_state_difference"] = max(
                float(np.max(np.abs(x - y)) / max(np.max(np.abs(x)), 1e-300))
                for x, y in zip(lsoda, states))
            out[f"{route}_sensitivity_difference"] = max(
                float(np.max(np.abs(x[..., params] - y[..., params]))
                      / max(np.max(np.abs(x[..., params])), 1e-300))
                for x, y in zip(lsoda_sens, sens))
    if name in ("SEIRD", "Lorenz63"):
        out["odeint_numpy_cpu_s"] = _cpu(lambda: _odeint_numpy(name, cases))
    return out


def _sundials_version():
    from sklode.models._native import sundials_location

    return sundials_location()


def _distinct(cases, native):
    """One case per distinct initial value problem, on the union of its times (experiments
    that differ only in observable or noise parameters pose the same one)."""
    if native is None:
        return cases
    read = native.param_in_field
    groups = {}
    for theta, x0, t0, t in cases:
        key = (theta[read].tobytes(), np.asarray(x0).tobytes(), t0)
        if key in groups:
            groups[key][3] = np.union1d(groups[key][3], t)
        else:
            groups[key] = [theta, x0, t0, np.unique(t)]
    return [tuple(v) for v in groups.values()]


def _odeint_numpy(name, cases):
    from scipy.integrate import odeint

    for theta, x0, t0, t in cases:
        if name == "SEIRD":
            a, b, g, m = theta
            N = 1e5

            def f(x, _t):
                S, E, I = x[0], x[1], x[2]  # noqa: E741
                inf = a * S * I / N
                return [-inf, inf - b * E, b * E - g * I, (g - m) * I, m * I]

            def jac(x, _t):
                S, I = x[0], x[2]  # noqa: E741
                return [[-a * I / N, 0, -a * S / N, 0, 0],
                        [a * I / N, -b, a * S / N, 0, 0], [0, b, -g, 0, 0],
                        [0, 0, g - m, 0, 0], [0, 0, m, 0, 0]]
        else:
            s, r, bb = theta

            def f(x, _t):
                return [s * (x[1] - x[0]), x[0] * (r - x[2]) - x[1], x[0] * x[1] - bb * x[2]]

            def jac(x, _t):
                return [[-s, s, 0], [r - x[2], -1, -x[0]], [x[1], x[0], -bb]]
        odeint(f, x0, np.concatenate([[t0], t]), Dfun=jac, rtol=RTOL, atol=ATOL,
               mxstep=100000)


# ----------------------------------------------------------------------------- AMICI's side
def _zoo_sbml(name, path):
    """SEIRD or Lorenz-63 as an SBML model of rate rules (what AMICI imports)."""
    import libsbml

    if name == "SEIRD":
        states = {"S": 99990.0, "E": 0.0, "I": 10.0, "R": 0.0, "D": 0.0}
        params = {"alpha": 1.0, "beta": 1 / 7, "gamma": 1 / 5, "mu": 1 / 70, "N": 1e5}
        rules = {"S": "-alpha*S*I/N", "E": "alpha*S*I/N - beta*E", "I": "beta*E - gamma*I",
                 "R": "(gamma - mu)*I", "D": "mu*I"}
    else:
        states = {"x": 1.0, "y": 1.0, "z": 1.0}
        params = {"sigma": 10.0, "rho": 28.0, "beta": 8 / 3}
        rules = {"x": "sigma*(y - x)", "y": "x*(rho - z) - y", "z": "x*y - beta*z"}
    document = libsbml.SBMLDocument(3, 2)
    model = document.createModel()
    model.setId(name)
    for pid, value in {**states, **params}.items():
        p = model.createParameter()
        p.setId(pid)
        p.setValue(value)
        p.setConstant(pid in params)
    for sid, formula in rules.items():
        rule = model.createRateRule()
        rule.setVariable(sid)
        rule.setMath(libsbml.parseL3Formula(formula))
    libsbml.writeSBMLToFile(document, str(path))
    return list(params)


def amici_side(name, sens_params):
    import amici
    import amici.sim.sundials as sundials

    folder = Path(tempfile.mkdtemp())
    start, children = time.process_time(), _children_cpu()
    if name in ("SEIRD", "Lorenz63"):
        from amici.importers.sbml import SbmlImporter

        sbml = folder / f"{name}.xml"
        _zoo_sbml(name, sbml)
        SbmlImporter(str(sbml)).sbml2amici(f"zoo_{name}", str(folder / name), verbose=False)
        module = amici.import_model_module(f"zoo_{name}", str(folder / name))
        model = module.get_model()
        model.set_timepoints(np.linspace(0, 100 if name == "SEIRD" else 2, 16))
        edatas = [None]
    else:
        import petab.v1 as petab
        from amici.importers.petab.v1 import import_petab_problem
        from amici.sim.sundials.petab.v1 import create_parameterized_edatas

        problem = petab.Problem.from_yaml(str(next((COLLECTION / name).glob("*.yaml"))))
        model = import_petab_problem(problem, output_dir=folder / name,
                                     model_name=name.replace("-", "_"))
        edatas = create_parameterized_edatas(model, problem,
                                             dict(zip(problem.x_ids, problem.x_nominal)))
    import_cpu = time.process_time() - start + _children_cpu() - children
    solver = model.create_solver()
    solver.set_relative_tolerance(RTOL)
    solver.set_absolute_tolerance(ATOL)
    solver.set_max_steps(500000)

    def run():
        for edata in edatas:
            rdata = sundials.run_simulation(model, solver, edata)
            if rdata.status != 0:
                raise RuntimeError(f"AMICI status {rdata.status}")

    out = {"amici": amici.__version__, "import_cpu_s": import_cpu, "cpu_s": _cpu(run)}
    ids = list(model.get_free_parameter_ids())
    plist = [ids.index(p) for p in sens_params if p in ids]
    out["n_sensitivity_params"] = len(plist)
    solver.set_sensitivity_order(sundials.SensitivityOrder.first)
    solver.set_sensitivity_method(sundials.SensitivityMethod.forward)
    for edata in edatas:
        if edata is not None:
            edata.plist = plist
    model.set_parameter_list(plist)
    out["sens_cpu_s"] = _cpu(run)
    return out


NAMES = sorted(p.name for p in COLLECTION.iterdir() if p.is_dir()) + ["SEIRD", "Lorenz63"] \
    if COLLECTION.is_dir() else ["SEIRD", "Lorenz63"]


def run(names=None):
    """``{problem: {"sklode": {...}, "amici": {...}}}`` for ``names`` (default: all)."""
    warnings.simplefilter("ignore")
    logging.disable(logging.INFO)
    try:
        import amici  # noqa: F401
        have_amici = True
    except ImportError:
        have_amici = False
    results = {}
    for name in names or NAMES:
        row = {}
        with tempfile.TemporaryDirectory() as cache:
            try:
                row["sklode"] = sklode_side(name, cache)
            except Exception as exc:  # noqa: BLE001 -- the failure is the result
                row["sklode"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        if have_amici:
            try:
                row["amici"] = amici_side(name, row["sklode"].get("sensitivity_params", []))
            except Exception as exc:  # noqa: BLE001
                row["amici"] = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        results[name] = row
        print(name, row, flush=True)
    return results


if __name__ == "__main__":
    run(sys.argv[1:] or None)
