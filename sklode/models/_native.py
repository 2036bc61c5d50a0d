"""A model compiled to C and integrated by CVODES: the forward solve without Python.

scipy's integrators call back into Python for every evaluation of the field (and LSODA, BDF
and Radau step from Python in ``solve_ivp``), which puts a floor of several microseconds a
call under even a compiled numpy field. Here the recorded torch program of a model
(:func:`~sklode.models._compile.compile_field`) is written as C (the field and its two
Jacobians, differentiated in forward mode at code-generation time so that only their nonzero
entries are computed), linked with a fixed driver (``_cvodes_driver.c``) against SUNDIALS'
CVODES, compiled once per model with the system's C compiler and kept in a cache folder,
then loaded with :mod:`ctypes`: one call solves the whole trajectory, with forward
sensitivities when asked.

It needs a C compiler (``cc``, or ``$CC``) and SUNDIALS' headers and libraries (Debian/Ubuntu:
``apt-get install libsundials-dev``; conda: ``sundials``; or ``$SUNDIALS_DIR`` with
``include/`` and ``lib/``). Where any of that is missing, or the program is not a program of
scalar operations (vector models such as Lorenz-96), :func:`native_solver` returns None with
the reason, and callers keep the scipy path. Every compiled model is checked against the
numpy field and Jacobians at random points before it is used.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from ._compile import _BINARY, _IDENTITY, _is_scalar_program

__all__ = ["NativeSolver", "native_solver", "native_unavailable_reason"]

logger = logging.getLogger("sklode")

_DRIVER = Path(__file__).with_name("_cvodes_driver.c")
_LIBRARIES = ["sundials_cvodes", "sundials_nvecserial", "sundials_sunmatrixdense",
              "sundials_sunlinsoldense"]
# C names of the elementwise functions of one operand ({a} the operand, {r} the result) and
# their derivatives (times the operand's tangent).
_C_UNARY = {
    "neg": ("(-{a})", "-1.0"), "exp": ("exp({a})", "{r}"), "log": ("log({a})", "1.0 / {a}"),
    "sin": ("sin({a})", "cos({a})"), "cos": ("cos({a})", "-sin({a})"),
    "tan": ("tan({a})", "(1.0 + {r} * {r})"), "tanh": ("tanh({a})", "(1.0 - {r} * {r})"),
    "sinh": ("sinh({a})", "cosh({a})"), "cosh": ("cosh({a})", "sinh({a})"),
    "sqrt": ("sqrt({a})", "0.5 / {r}"), "abs": ("fabs({a})", "SIGN({a})"),
    "log1p": ("log1p({a})", "1.0 / (1.0 + {a})"), "expm1": ("expm1({a})", "({r} + 1.0)"),
    "atan": ("atan({a})", "1.0 / (1.0 + {a} * {a})"),
    "arctan": ("atan({a})", "1.0 / (1.0 + {a} * {a})"),
    "asin": ("asin({a})", "1.0 / sqrt(1.0 - {a} * {a})"),
    "acos": ("acos({a})", "-1.0 / sqrt(1.0 - {a} * {a})"),
    "square": ("({a} * {a})", "2.0 * {a}"), "reciprocal": ("(1.0 / {a})", "-({r} * {r})"),
    "sigmoid": ("(1.0 / (1.0 + exp(-{a})))", "{r} * (1.0 - {r})"),
    "relu": ("({a} > 0.0 ? {a} : 0.0)", "({a} > 0.0 ? 1.0 : 0.0)"),
    "sign": ("SIGN({a})", None), "floor": ("floor({a})", None), "ceil": ("ceil({a})", None),
}
_COMPARISONS = (">", "<", ">=", "<=", "==", "!=")


class _NotScalar(Exception):
    """The recorded program has an operation this generator does not write as C."""


class _Program:
    """The recorded scalar program as C statements: values, then the nonzero entries of the
    tangents with respect to ``x`` and ``theta``."""

    def __init__(self, recorder, x, theta, out):
        self.rec = recorder
        self.inputs = {id(x): "x", id(theta): "p"}
        self.value = {}            # id(tensor) -> C expression of its value
        self.tangent = {"x": {}, "p": {}}  # seed -> id(tensor) -> {index: C expression}
        self.value_lines = []
        self.tangent_lines = {"x": [], "p": []}
        self.output = None
        # values that change along a solution (they depend on t or x), and the switching
        # functions of the comparisons among them: CVODES finds where one changes sign and
        # restarts there, as at a discontinuity of the field
        self.varying = {id(x)}
        self.roots = []
        for op, args, kwargs, result in recorder.tape:
            self._record(op, args, kwargs, result, out)
        if self.output is None:
            raise _NotScalar("the output is not a stack of scalars")

    # ------------------------------------------------------------------ operands
    def ref(self, v):
        if isinstance(v, torch.Tensor):
            if id(v) in self.value:
                return self.value[id(v)]
            name = self.rec.names.get(id(v))
            if name == "t":
                return "t"
            if name in self.rec.constants and np.ndim(self.rec.constants[name]) == 0:
                return _literal(float(self.rec.constants[name]))
            raise _NotScalar(f"operand {name!r} is not a scalar")
        if isinstance(v, bool):
            return "1.0" if v else "0.0"
        if isinstance(v, (int, float)):
            return _literal(float(v))
        raise _NotScalar(f"operand of type {type(v).__name__}")

    def tan(self, seed, v):
        return self.tangent[seed].get(id(v), {}) if isinstance(v, torch.Tensor) else {}

    def _varies(self, v):
        return isinstance(v, torch.Tensor) and (id(v) in self.varying
                                                or self.rec.names.get(id(v)) == "t")

    def _name(self, result, expression):
        name = f"v{len(self.value_lines)}"
        self.value_lines.append(f"const double {name} = {expression};")
        self.value[id(result)] = name
        return name

    def _set_tangent(self, seed, result, entries):
        entries = {k: e for k, e in entries.items() if e is not None}
        if not entries:
            return
        base = self.value[id(result)]
        names = {}
        for k, expression in sorted(entries.items()):
            names[k] = f"d{seed}_{base}_{k}"
            self.tangent_lines[seed].append(f"const double {names[k]} = {expression};")
        self.tangent[seed][id(result)] = names

    # ------------------------------------------------------------------ one operation
    def _record(self, op, args, kwargs, result, out):  # noqa: C901 -- one branch per kind
        operands = [v for a in list(args) + list(kwargs.values())
                    for v in (a if isinstance(a, (list, tuple)) else [a])]
        if any(self._varies(v) for v in operands):
            for r in (result if isinstance(result, (list, tuple)) else [result]):
                self.varying.add(id(r))
        if isinstance(result, (tuple, list)):  # unbind of x or theta: its scalars
            seed = self.inputs.get(id(args[0]))
            if op != "unbind" or seed is None:
                raise _NotScalar(op)
            for i, r in enumerate(result):
                self.value[id(r)] = f"{seed}[{i}]"
                self.tangent[seed][id(r)] = {i: "1.0"}
            return
        if result is out:
            if op != "stack" or not all(v.dim() == 0 for v in args[0]):
                raise _NotScalar(f"the output is made by {op}")
            self.output = args[0]
            return
        if op == "__getitem__":
            index = args[1]
            if isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis:
                index = index[1]
            seed = self.inputs.get(id(args[0]))
            if seed is None or not isinstance(index, int):
                raise _NotScalar("indexing other than x[i] or theta[i]")
            self.value[id(result)] = f"{seed}[{index}]"
            self.tangent[seed][id(result)] = {index: "1.0"}
            return
        if op in _IDENTITY:
            self.value[id(result)] = self.ref(args[0])
            for seed in self.tangent:
                if self.tan(seed, args[0]):
                    self.tangent[seed][id(result)] = self.tan(seed, args[0])
            return
        if op in _BINARY and len(args) == 2:
            self._binary(op, args, kwargs, result)
        elif op in _C_UNARY and len(args) == 1 and not kwargs:
            function, derivative = _C_UNARY[op]
            a = self.ref(args[0])
            r = self._name(result, function.format(a=a))
            for seed in self.tangent:
                if derivative is not None:
                    factor = derivative.format(a=a, r=r)
                    self._set_tangent(seed, result, {k: f"({factor}) * {d}" for k, d in
                                                     self.tan(seed, args[0]).items()})
        elif op in ("maximum", "minimum", "fmax", "fmin"):
            a, b = self.ref(args[0]), self.ref(args[1])
            test = ">=" if op in ("maximum", "fmax") else "<="
            condition = f"({a} {test} {b})"
            self._name(result, f"({condition} ? {a} : {b})")
            self._choose(condition, args[0], args[1], result)
        elif op == "where" and len(args) == 3:
            condition = f"({self.ref(args[0])} != 0.0)"
            a, b = self.ref(args[1]), self.ref(args[2])
            self._name(result, f"({condition} ? {a} : {b})")
            self._choose(condition, args[1], args[2], result)
        elif op in ("clamp", "clip"):
            low = kwargs.get("min", args[1] if len(args) > 1 else None)
            high = kwargs.get("max", args[2] if len(args) > 2 else None)
            a = self.ref(args[0])
            value, inside = a, []
            if low is not None:
                value = f"fmax({value}, {self.ref(low)})"
                inside.append(f"({a} >= {self.ref(low)})")
            if high is not None:
                value = f"fmin({value}, {self.ref(high)})"
                inside.append(f"({a} <= {self.ref(high)})")
            self._name(result, value)
            condition = " && ".join(inside) or "1"
            for seed in self.tangent:
                self._set_tangent(seed, result, {k: f"(({condition}) ? {d} : 0.0)"
                                                 for k, d in self.tan(seed, args[0]).items()})
        else:
            raise _NotScalar(op)

    def _choose(self, condition, a, b, result):
        for seed in self.tangent:
            da, db = self.tan(seed, a), self.tan(seed, b)
            self._set_tangent(seed, result, {k: f"({condition} ? {da.get(k, '0.0')} : "
                                                f"{db.get(k, '0.0')})" for k in {*da, *db}})

    def _binary(self, op, args, kwargs, result):
        symbol = _BINARY[op]
        left, right = args
        if symbol.startswith("r"):
            symbol, left, right = symbol[1:], right, left
        if symbol == "@":
            raise _NotScalar("matmul")
        a, b = self.ref(left), self.ref(right)
        alpha = kwargs.get("alpha")
        if alpha is not None:
            b = f"({self.ref(alpha)} * {b})"
        elif kwargs:
            raise _NotScalar(f"{op} with {sorted(kwargs)}")
        if symbol in _COMPARISONS:
            self._name(result, f"(({a} {symbol} {b}) ? 1.0 : 0.0)")
            if self._varies(left) or self._varies(right):
                self.roots.append((len(self.value_lines), f"{a} - {b}"))
            return
        if symbol == "**":
            r = self._name(result, f"pow({a}, {b})")
        else:
            r = self._name(result, f"({a} {symbol} {b})")
        scale = f"{self.ref(alpha)} * " if alpha is not None else ""
        for seed in self.tangent:
            da, db = self.tan(seed, left), self.tan(seed, right)
            entries = {}
            for k in {*da, *db}:
                dak, dbk = da.get(k), db.get(k)
                terms = []
                if symbol in ("+", "-"):
                    terms += [dak] if dak else []
                    terms += [f"{'' if symbol == '+' else '-'}{scale}{dbk}"] if dbk else []
                elif symbol == "*":
                    terms += [f"{dak} * {b}"] if dak else []
                    terms += [f"{a} * {scale}{dbk}"] if dbk else []
                elif symbol == "/":
                    top = dak or "0.0"
                    if dbk:
                        top = f"({top} - {r} * {scale}{dbk})"
                    terms.append(f"{top} / {b}")
                elif symbol == "**":
                    if dak:
                        terms.append(f"{b} * pow({a}, {b} - 1.0) * {dak}")
                    if dbk:
                        terms.append(f"{r} * log({a}) * {scale}{dbk}")
                entries[k] = " + ".join(f"({t})" for t in terms) if terms else None
            self._set_tangent(seed, result, entries)

    # ------------------------------------------------------------------ the C source
    def source(self, n_states, n_params):
        lines = ["#define SIGN(a) (((a) > 0.0) - ((a) < 0.0))",
                 f"#define NX {n_states}", f"#define NP {n_params}"]
        outputs = [self.ref(v) for v in self.output]
        body = "\n".join(f"    {line}" for line in self.value_lines)
        lines.append("static void model_f(double t, const double *x, const double *p, "
                     "double *dx) {\n    (void)t; (void)x; (void)p;\n" + body + "\n" +
                     "\n".join(f"    dx[{i}] = {o};" for i, o in enumerate(outputs)) + "\n}")
        for seed, name, size in (("x", "jx", n_states), ("p", "jp", n_params)):
            rows, cols, values = [], [], []
            for i, v in enumerate(self.output):
                for k, expression in sorted(self.tan(seed, v).items()):
                    rows.append(i)
                    cols.append(k)
                    values.append(expression)
            upper = name.upper()
            lines.append(f"#define NNZ_{upper[1]} {len(values)}")
            lines.append(f"static const int {upper}_ROW[] = {{{', '.join(map(str, rows)) or '0'}}};")
            lines.append(f"static const int {upper}_COL[] = {{{', '.join(map(str, cols)) or '0'}}};")
            tangents = "\n".join(f"    {line}" for line in self.tangent_lines[seed])
            lines.append(
                f"static void model_{name}(double t, const double *x, const double *p, "
                f"double *{name}) {{\n    (void)t; (void)x; (void)p; (void){name};\n{body}\n"
                f"{tangents}\n" + "\n".join(f"    {name}[{k}] = {e};"
                                            for k, e in enumerate(values)) + "\n}")
        # the switching functions, each after the value lines it needs
        lines.append(f"#define NROOTS {len(self.roots)}")
        needed = max((k for k, _ in self.roots), default=0)
        root_body = "\n".join(f"    {line}" for line in self.value_lines[:needed])
        lines.append("static void model_roots(double t, const double *x, const double *p, "
                     "double *g) {\n    (void)t; (void)x; (void)p; (void)g;\n" + root_body +
                     "\n" + "\n".join(f"    g[{i}] = {e};" for i, (_, e) in
                                       enumerate(self.roots)) + "\n}")
        return "\n".join(lines) + "\n"


def _literal(value):
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return repr(value)


# ----------------------------------------------------------------------------- building
def _cache_dir():
    root = os.environ.get("SKLODE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sklode")
    return Path(root) / "native"


def _sundials_flags():
    """Compiler flags for SUNDIALS' headers and libraries, or None when none are found."""
    prefixes = [os.environ.get("SUNDIALS_DIR"), os.environ.get("CONDA_PREFIX"), sys.prefix,
                "/usr/local", "/usr"]
    for prefix in filter(None, prefixes):
        include = Path(prefix) / "include"
        if (include / "cvodes" / "cvodes.h").is_file():
            libs = [Path(prefix) / d for d in ("lib", "lib64", "lib/x86_64-linux-gnu",
                                                "lib/aarch64-linux-gnu")]
            libs = [d for d in libs if d.is_dir()]
            flags = [f"-I{include}"] + [f"-L{d}" for d in libs] + \
                    [f"-Wl,-rpath,{d}" for d in libs]
            core = any((d / f"libsundials_core{ext}").exists() for d in libs
                       for ext in (".so", ".a", ".dylib"))  # SUNDIALS 7 has a core library
            return flags + [f"-l{name}" for name in _LIBRARIES + ["sundials_core"] * core]
    return None


_UNAVAILABLE = {}  # reason by key, so that a missing compiler is looked for once


def native_unavailable_reason():
    """Why no model can be compiled here, or None.

    Returns
    -------
    str or None
        A sentence naming what is missing (a C compiler, SUNDIALS) and how to get it.
    """
    if "system" not in _UNAVAILABLE:
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        reason = None
        if not compiler:
            reason = "no C compiler (cc or $CC) was found"
        elif _sundials_flags() is None:
            reason = ("SUNDIALS (CVODES) was not found: install libsundials-dev (Debian, "
                      "Ubuntu) or conda's sundials, or set SUNDIALS_DIR")
        _UNAVAILABLE["system"] = reason
        _UNAVAILABLE["compiler"] = compiler
    return _UNAVAILABLE["system"]


def _build(source):
    """Compile ``source`` to a shared library in the cache (once per source) and load it."""
    flags = _sundials_flags()
    compiler = _UNAVAILABLE["compiler"]
    command = [compiler, "-O2", "-shared", "-fPIC", "-std=c99"]
    key = hashlib.sha256((source + " ".join(command + flags)).encode()).hexdigest()[:24]
    folder = _cache_dir()
    library = folder / f"model_{key}.so"
    if not library.exists():
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            c_file = Path(tmp) / "model.c"
            c_file.write_text(source)
            built = Path(tmp) / "model.so"
            run = subprocess.run(command + ["-o", str(built), str(c_file)] + flags + ["-lm"],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                raise RuntimeError(f"the C compiler failed: {run.stderr.strip()[:2000]}")
            os.replace(built, library)  # atomic: concurrent builders of one model agree
    lib = ctypes.CDLL(str(library))
    solve = lib.sklode_solve
    double_p = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")
    int_p = np.ctypeslib.ndpointer(dtype=np.intc, flags="C_CONTIGUOUS")
    solve.argtypes = [ctypes.c_double, double_p, double_p, ctypes.c_int, double_p,
                      ctypes.c_double, ctypes.c_double, ctypes.c_long, ctypes.c_double,
                      ctypes.c_int, int_p, double_p, double_p, double_p, double_p]
    solve.restype = ctypes.c_int
    return lib, solve


class NativeSolver:
    """A model's compiled CVODES solve (built by :func:`native_solver`).

    Attributes
    ----------
    n_states, n_params : int
    param_in_field : ndarray of bool (n_params,)
        Whether the field depends on each parameter (the others' sensitivities are zero
        and are not integrated).
    library : str
        Path of the shared library.
    """

    def __init__(self, lib, solve, n_states, n_params, param_in_field):
        self._lib, self._solve = lib, solve
        self.n_states, self.n_params = n_states, n_params
        self.param_in_field = param_in_field
        self.library = lib._name
        self._evaluate = lib.sklode_evaluate
        double_p = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")
        self._evaluate.argtypes = [ctypes.c_double] + [double_p] * 5
        self._evaluate.restype = None

    def evaluate(self, t, x, theta):
        """The C field, ``df/dx`` and ``df/dtheta`` at one point (for checks and tests).

        Returns
        -------
        (ndarray (n_states,), ndarray (n_states, n_states), ndarray (n_states, n_params))
        """
        n, p = self.n_states, self.n_params
        dx, jx, jp = np.empty(n), np.empty((n, n)), np.empty((n, max(p, 1)))
        self._evaluate(float(t), np.ascontiguousarray(x, dtype=np.float64),
                       np.ascontiguousarray(theta, dtype=np.float64), dx, jx, jp)
        return dx, jx, jp[:, :p]

    def __call__(self, t0, x0, theta, times, *, rtol, atol, max_steps=500_000, blowup=np.inf,
                 sens_x0=False, sens_params=None, s0=None):
        """Solve from ``(t0, x0)`` to the increasing ``times`` (all ``>= t0``).

        Parameters
        ----------
        t0 : float
        x0 : ndarray (n_states,)
        theta : ndarray (n_params,)
        times : ndarray (n_times,)
        rtol, atol : float
        max_steps : int
        blowup : float
            A state norm above this stops the solve (``failure == "blowup"``).
        sens_x0 : bool
            Sensitivities with respect to every component of ``x0`` (the first columns).
        sens_params : ndarray of int, optional
            Indices of the parameters to differentiate (the columns after those of ``x0``).
        s0 : ndarray (n_states, q), optional
            The sensitivities at ``t0`` (a solve continued after a dose); default the
            identity in the ``x0`` columns and zeros in the parameters'.

        Returns
        -------
        states : ndarray (n_times, n_states)
        sens : ndarray (n_times, n_states, q) or None
        info : dict
            ``t_reached``, ``n_rhs``, ``n_steps``, ``flag`` (0 on success, else CVODES'
            flag), ``failure`` (None, "blowup", "nonfinite" or "cvodes").
        """
        n = self.n_states
        params = np.zeros(0, dtype=np.intc) if sens_params is None else \
            np.ascontiguousarray(sens_params, dtype=np.intc)
        n_x0 = n if sens_x0 else 0
        # column j differentiates theta[columns[j]], or x0 where it is -1 (no source term)
        columns = np.concatenate([np.full(n_x0, -1, dtype=np.intc), params])
        q = columns.size
        if s0 is None:
            s0 = np.zeros((n, q))
            s0[:, :n_x0] = np.eye(n)[:, :n_x0]
        s0 = np.ascontiguousarray(np.asarray(s0, dtype=np.float64).T if q else np.zeros((1, n)))
        times = np.ascontiguousarray(times, dtype=np.float64)
        states = np.empty((times.size, n))
        sens = np.empty((times.size, max(q, 1), n))
        info = np.zeros(4)
        flag = self._solve(float(t0), np.ascontiguousarray(x0, dtype=np.float64),
                           np.ascontiguousarray(theta, dtype=np.float64), times.size, times,
                           float(rtol), float(atol), int(max_steps), float(blowup), q,
                           columns if q else np.zeros(1, dtype=np.intc), s0, states, sens, info)
        failure = (None, "blowup", "nonfinite", "cvodes")[int(info[3])] if flag else None
        result = {"t_reached": float(info[0]), "n_rhs": int(info[1]), "n_steps": int(info[2]),
                  "flag": int(flag), "failure": failure}
        return states, (np.swapaxes(sens[:, :q], 1, 2) if q else None), result


def native_solver(model, field):
    """The model's CVODES solver (:class:`NativeSolver`), or ``(None, reason)``.

    Parameters
    ----------
    model : ODEModel
    field : callable
        The compiled numpy field of ``model`` (:func:`~sklode.models._compile.compile_field`),
        whose recording is written as C and against which the result is checked.

    Returns
    -------
    (NativeSolver or None, str or None)
    """
    reason = native_unavailable_reason()
    if reason is not None:
        return None, reason
    if field is None or not hasattr(field, "recording"):
        return None, "rhs does not compile to a program of torch operations"
    recorder, x, theta, out = field.recording
    if not _is_scalar_program(recorder, x, theta, out):
        return None, "rhs is not a program of scalar operations (a vector model)"
    try:
        program = _Program(recorder, x, theta, out)
        source = program.source(model.n_states, model.n_params) + _DRIVER.read_text()
        lib, solve = _build(source)
    except (_NotScalar, RuntimeError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    in_field = np.zeros(model.n_params, dtype=bool)
    for v in program.output:
        for k in program.tan("p", v):
            in_field[k] = True
    solver = NativeSolver(lib, solve, model.n_states, model.n_params, in_field)
    problem = _check(model, field, solver)
    if problem:
        return None, problem
    return solver, None


def _check(model, field, solver, n_points=4):
    """A reason the C program disagrees with the numpy field and Jacobians at random
    points (as :func:`~sklode.models._compile._check` compares those with torch), or None."""
    rng = np.random.default_rng(0)
    theta0 = model.theta_guess()
    n, p = model.n_states, model.n_params
    references = (field, field.jacobian, field.jacobian_theta)
    checked = 0
    for _ in range(4 * n_points):
        if checked == n_points:
            break
        x = rng.uniform(0.5, 2.0, n) * rng.choice([-1.0, 1.0], n)
        theta = theta0 * rng.uniform(0.5, 1.5, p) + rng.normal(0, 0.1, p)
        t = float(rng.uniform(0.0, 10.0))
        got = solver.evaluate(t, x, theta)
        with np.errstate(all="ignore"):
            try:
                expected = [None if f is None else np.asarray(f(t, x, theta)).reshape(g.shape)
                            for f, g in zip(references, got)]
            except (ArithmeticError, ValueError):
                continue  # math's domain errors: C returns NaN there
        if not all(np.all(np.isfinite(g)) for g in got):
            continue
        for g, e in zip(got, expected):
            if e is None:
                continue
            scale = max(float(np.max(np.abs(e), initial=0.0)), 1e-300)
            if not np.allclose(g, e, rtol=1e-10, atol=1e-12 * scale):
                return "the C program differs from the numpy field at a random point"
        checked += 1
    if checked == 0:
        return "no random point where the C program could be compared"
    return None
