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

It needs a C compiler (``cc``, or ``$CC``) and SUNDIALS' headers and libraries: the static
library the install builds into the package (:data:`BUNDLED`), or ``$SUNDIALS_DIR`` with
``include/`` and ``lib/``, conda's ``sundials``, Debian/Ubuntu's ``libsundials-dev``. Vector programs (slices, ``theta * x``, rolls, sums) are
unrolled element by element at generation time. Where anything is missing, or ``rhs`` cannot
be recorded (Python control flow on a value), :func:`native_solver` returns None with the
reason, and callers keep the scipy path. Every compiled model is checked against the
numpy field and Jacobians at random points before it is used.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from ._band import band_order
from ._compile import _BINARY, _IDENTITY

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
# a comparison's value just past a root of a - b, where a - b has become > 0 or < 0
_SWITCH_SIDES = {">": (1, 0), ">=": (1, 0), "<": (0, 1), "<=": (0, 1), "==": (0, 0),
                 "!=": (1, 1)}


class _CannotWrite(Exception):
    """The recorded program has an operation (or a size) this generator does not write as C."""


_MAX_LINES = 200_000  # a program unrolled beyond this many C lines is not compiled


class _Program:
    """The recorded program as C statements, unrolled: every tensor is an array (numpy,
    dtype object) of C expressions, one per element, so that indexing, slicing, stacking,
    rolling and broadcasting happen at generation time and each elementwise operation
    becomes one line per element. The tangents with respect to ``x`` and ``theta`` are
    arrays of the same shape holding, per element, the nonzero entries ``{index: C
    expression}``."""

    def __init__(self, recorder, x, theta, out):
        self.rec = recorder
        self.value = {id(x): np.array([f"x[{i}]" for i in range(x.numel())], dtype=object),
                      id(theta): np.array([f"p[{k}]" for k in range(theta.numel())],
                                          dtype=object)}
        self.tangent = {"x": {id(x): _units(x.numel())}, "p": {id(theta): _units(theta.numel())}}
        self.value_lines = []
        self.tangent_lines = {"x": [], "p": []}
        # values that change along a solution (they depend on t or x), and the switching
        # functions of the comparisons among them: CVODES finds where one changes sign and
        # restarts there, as at a discontinuity of the field. Each root is (its value line,
        # g, the switch's value where g > 0, where g < 0)
        self.varying = {id(x)}
        self.roots = []
        for op, args, kwargs, result in recorder.tape:
            self._record(op, args, kwargs, result)
            if len(self.value_lines) > _MAX_LINES:
                raise _CannotWrite("the program unrolls to too many lines of C")
        if id(out) not in self.value:
            raise _CannotWrite("the output is not computed from the inputs")
        self.output = self.value[id(out)].reshape(-1)
        self.output_tangent = {seed: self.tan(seed, out).reshape(-1) for seed in self.tangent}

    # ------------------------------------------------------------------ operands
    def ref(self, v):
        """The value of an operand as an array of C expressions."""
        if isinstance(v, torch.Tensor):
            if id(v) in self.value:
                return self.value[id(v)]
            name = self.rec.names.get(id(v))
            if name == "t":
                return np.array("t", dtype=object)
            if name in self.rec.constants:
                constant = np.asarray(self.rec.constants[name], dtype=np.float64)
                return np.vectorize(_literal, otypes=[object])(constant)
            raise _CannotWrite(f"operand {name!r} of unknown origin")
        if isinstance(v, bool):
            return np.array("1.0" if v else "0.0", dtype=object)
        if isinstance(v, (int, float)):
            return np.array(_literal(float(v)), dtype=object)
        raise _CannotWrite(f"operand of type {type(v).__name__}")

    def tan(self, seed, v):
        """The operand's tangent: an array of ``{index: expression}`` (empty: constant)."""
        shape = np.shape(self.ref(v))
        if isinstance(v, torch.Tensor) and id(v) in self.tangent[seed]:
            return self.tangent[seed][id(v)]
        return _empty(shape)

    def _varies(self, v):
        return isinstance(v, torch.Tensor) and (id(v) in self.varying
                                                or self.rec.names.get(id(v)) == "t")

    def _keep(self, result, value, tangents):
        """Store a result computed by a shape operation (no new C lines)."""
        self.value[id(result)] = np.asarray(value, dtype=object).reshape(tuple(result.shape))
        for seed, tangent in tangents.items():
            self.tangent[seed][id(result)] = np.asarray(tangent, dtype=object).reshape(
                tuple(result.shape))

    def _elementwise(self, result, operands, value_of, derivatives_of):
        """One C line per element of ``result``: ``value_of(*values)`` and, per seed, the
        chain rule ``sum_j derivative_j * d operand_j``; ``derivatives_of(values, r)``
        returns one factor (or None: no dependence) per operand."""
        values = np.broadcast_arrays(*[self.ref(v) for v in operands])
        shape = values[0].shape
        if shape != tuple(result.shape):
            raise _CannotWrite(f"a broadcast to {tuple(result.shape)} from {shape}")
        names = np.empty(shape, dtype=object)
        tangents = {seed: np.empty(shape, dtype=object) for seed in self.tangent}
        operand_tangents = {seed: np.broadcast_arrays(*[self.tan(seed, v) for v in operands])
                            for seed in self.tangent}
        for index in np.ndindex(shape):
            elements = [v[index] for v in values]
            name = f"v{len(self.value_lines)}"
            self.value_lines.append(f"const double {name} = {value_of(*elements)};")
            names[index] = name
            factors = derivatives_of(elements, name)
            for seed in self.tangent:
                entries = {}
                for factor, d in zip(factors, (t[index] for t in operand_tangents[seed])):
                    if factor is None:
                        continue
                    for k, dk in d.items():
                        term = dk if factor == "1.0" else f"({factor}) * {dk}"
                        entries[k] = term if k not in entries else f"{entries[k]} + {term}"
                named = {}
                for k, expression in sorted(entries.items()):
                    named[k] = f"d{seed}_{name}_{k}"
                    self.tangent_lines[seed].append(f"const double {named[k]} = {expression};")
                tangents[seed][index] = named
        self.value[id(result)] = names
        for seed in self.tangent:
            self.tangent[seed][id(result)] = tangents[seed]
        return names

    # ------------------------------------------------------------------ one operation
    def _record(self, op, args, kwargs, result):  # noqa: C901 -- one branch per kind
        operands = [v for a in list(args) + list(kwargs.values())
                    for v in (a if isinstance(a, (list, tuple)) else [a])]
        if any(self._varies(v) for v in operands):
            for r in (result if isinstance(result, (list, tuple)) else [result]):
                self.varying.add(id(r))
        T = self.tangent
        if isinstance(result, (tuple, list)):  # unbind along dim 0
            if op != "unbind" or kwargs.get("dim", args[1] if len(args) > 1 else 0) != 0:
                raise _CannotWrite(op)
            value = self.ref(args[0])
            for i, r in enumerate(result):
                self._keep(r, value[i], {s: self.tan(s, args[0])[i] for s in T})
            return
        if not isinstance(result, torch.Tensor):
            raise _CannotWrite(f"{op} returning {type(result).__name__}")
        if op in _IDENTITY:
            self._keep(result, self.ref(args[0]), {s: self.tan(s, args[0]) for s in T})
        elif op == "__getitem__":
            index = args[1]
            self._keep(result, self.ref(args[0])[index],
                       {s: self.tan(s, args[0])[index] for s in T})
        elif op in ("stack", "cat", "concatenate"):
            tensors = args[0]
            axis = kwargs.get("dim", args[1] if len(args) > 1 else 0)
            join = np.stack if op == "stack" else np.concatenate
            self._keep(result, join([self.ref(v) for v in tensors], axis=axis),
                       {s: join([self.tan(s, v) for v in tensors], axis=axis) for s in T})
        elif op == "roll":
            shifts = kwargs.get("shifts", args[1] if len(args) > 1 else None)
            dims = kwargs.get("dims", args[2] if len(args) > 2 else None)
            self._keep(result, np.roll(self.ref(args[0]), shifts, axis=dims),
                       {s: np.roll(self.tan(s, args[0]), shifts, axis=dims) for s in T})
        elif op in ("reshape", "view", "unsqueeze"):
            shape = tuple(result.shape)
            self._keep(result, self.ref(args[0]).reshape(shape),
                       {s: self.tan(s, args[0]).reshape(shape) for s in T})
        elif op in ("expand", "expand_as", "broadcast_to"):
            shape = tuple(result.shape)
            self._keep(result, np.broadcast_to(self.ref(args[0]), shape),
                       {s: np.broadcast_to(self.tan(s, args[0]), shape) for s in T})
        elif op in ("sum", "mean"):
            self._reduce(op, args, kwargs, result)
        elif op in ("zeros_like", "ones_like"):
            fill = "0.0" if op == "zeros_like" else "1.0"
            self._keep(result, np.full(tuple(result.shape), fill, dtype=object), {})
        elif op in _BINARY and len(args) == 2:
            self._binary(op, args, kwargs, result)
        elif op in _C_UNARY and len(args) == 1 and not kwargs:
            function, derivative = _C_UNARY[op]
            self._elementwise(
                result, [args[0]], lambda a: function.format(a=a),
                lambda e, r: [None if derivative is None else derivative.format(a=e[0], r=r)])
        elif op in ("maximum", "minimum", "fmax", "fmin"):
            test = ">=" if op in ("maximum", "fmax") else "<="
            self._elementwise(result, [args[0], args[1]],
                              lambda a, b: f"(({a} {test} {b}) ? {a} : {b})",
                              lambda e, r: [f"(({e[0]} {test} {e[1]}) ? 1.0 : 0.0)",
                                            f"(({e[0]} {test} {e[1]}) ? 0.0 : 1.0)"])
        elif op == "where" and len(args) == 3:
            self._elementwise(result, list(args),
                              lambda c, a, b: f"(({c} != 0.0) ? {a} : {b})",
                              lambda e, r: [None, f"(({e[0]} != 0.0) ? 1.0 : 0.0)",
                                            f"(({e[0]} != 0.0) ? 0.0 : 1.0)"])
        elif op in ("clamp", "clip"):
            low = kwargs.get("min", args[1] if len(args) > 1 else None)
            high = kwargs.get("max", args[2] if len(args) > 2 else None)
            bounds = [b for b in (low, high) if b is not None]

            def value_of(a, *limits):
                out, k = a, 0
                if low is not None:
                    out, k = f"fmax({out}, {limits[k]})", k + 1
                if high is not None:
                    out = f"fmin({out}, {limits[k]})"
                return out

            def derivatives_of(e, r):
                inside, k = [], 1
                if low is not None:
                    inside.append(f"({e[0]} >= {e[k]})")
                    k += 1
                if high is not None:
                    inside.append(f"({e[0]} <= {e[k]})")
                return [f"(({' && '.join(inside) or '1'}) ? 1.0 : 0.0)"] + [None] * len(bounds)

            self._elementwise(result, [args[0]] + bounds, value_of, derivatives_of)
        else:
            raise _CannotWrite(op)

    def _reduce(self, op, args, kwargs, result):
        axis = kwargs.get("dim", args[1] if len(args) > 1 else None)
        value = self.ref(args[0])  # (keepdim: the result's shape says it)
        axes = tuple(range(value.ndim)) if axis is None else tuple(
            a % value.ndim for a in (axis if isinstance(axis, (list, tuple)) else [axis]))
        moved = np.moveaxis(value, axes, tuple(range(-len(axes), 0)))
        outer = moved.shape[:moved.ndim - len(axes)]
        count = int(np.prod(moved.shape[len(outer):]))
        flat = moved.reshape(outer + (count,))
        tangents = {s: np.moveaxis(self.tan(s, args[0]), axes, tuple(range(-len(axes), 0)))
                    .reshape(outer + (count,)) for s in self.tangent}
        scale = f" / {float(count)!r}" if op == "mean" else ""
        names = np.empty(outer, dtype=object)
        reduced = {s: np.empty(outer, dtype=object) for s in self.tangent}
        for index in np.ndindex(outer):
            name = f"v{len(self.value_lines)}"
            self.value_lines.append(f"const double {name} = ({' + '.join(flat[index])}){scale};")
            names[index] = name
            for s in self.tangent:
                entries = {}
                for d in tangents[s][index]:
                    for k, dk in d.items():
                        entries.setdefault(k, []).append(dk)
                named = {}
                for k, terms in sorted(entries.items()):
                    named[k] = f"d{s}_{name}_{k}"
                    self.tangent_lines[s].append(
                        f"const double {named[k]} = ({' + '.join(terms)}){scale};")
                reduced[s][index] = named
        shape = tuple(result.shape)
        self._keep(result, names.reshape(shape), {s: reduced[s].reshape(shape)
                                                  for s in self.tangent})

    def _binary(self, op, args, kwargs, result):
        symbol = _BINARY[op]
        left, right = args
        if symbol.startswith("r"):
            symbol, left, right = symbol[1:], right, left
        if symbol == "@":
            raise _CannotWrite("matmul")
        alpha = kwargs.get("alpha")
        if kwargs and alpha is None:
            raise _CannotWrite(f"{op} with {sorted(kwargs)}")
        scale = "" if alpha is None else f"{_literal(float(alpha))} * "
        if symbol in _COMPARISONS:
            if not (self._varies(left) or self._varies(right)):
                self._elementwise(result, [left, right],
                                  lambda a, b: f"(({a} {symbol} {b}) ? 1.0 : 0.0)",
                                  lambda e, r: [None, None])
                return
            # A switch along the solution: the solve reads it from sw[], which it sets at
            # the start and changes only where CVODES finds the root of a - b (AMICI's
            # Heaviside variables). Read from t and x inside the steps, the jump made every
            # step across it fail until the steps were shorter than t's last digit.
            # Without sw (the checks, the root functions) it is the comparison itself.
            above, below = _SWITCH_SIDES[symbol]

            def switch(a, b):  # each element's switch: the value line about to be written
                k = len(self.roots)
                self.roots.append((len(self.value_lines), f"{a} - {scale}{b}", above, below))
                return f"(sw ? sw[{k}] : (({a} {symbol} {b}) ? 1.0 : 0.0))"

            self._elementwise(result, [left, right], switch, lambda e, r: [None, None])
            return
        if symbol == "**":
            value_of = lambda a, b: f"pow({a}, {b})"  # noqa: E731
            derivatives = lambda e, r: [f"{e[1]} * pow({e[0]}, {e[1]} - 1.0)",  # noqa: E731
                                        f"{r} * log({e[0]})"]
        elif symbol in ("+", "-"):
            value_of = lambda a, b: f"({a} {symbol} {scale}{b})"  # noqa: E731
            second = ("" if symbol == "+" else "-") + (
                "1.0" if alpha is None else _literal(float(alpha)))
            derivatives = lambda e, r: ["1.0", second]  # noqa: E731
        elif symbol == "*":
            value_of = lambda a, b: f"({a} * {b})"  # noqa: E731
            derivatives = lambda e, r: [e[1], e[0]]  # noqa: E731
        elif symbol == "/":
            value_of = lambda a, b: f"({a} / {b})"  # noqa: E731
            derivatives = lambda e, r: [f"1.0 / {e[1]}", f"-{r} / {e[1]}"]  # noqa: E731
        else:
            raise _CannotWrite(f"operator {symbol}")
        self._elementwise(result, [left, right], value_of, derivatives)

    # ------------------------------------------------------------------ the C source
    def source(self, n_states, n_params):
        lines = ["#include <stddef.h>", "#define SIGN(a) (((a) > 0.0) - ((a) < 0.0))",
                 f"#define NX {n_states}", f"#define NP {n_params}"]
        body = "\n".join(f"    {line}" for line in self.value_lines)
        lines.append("static void model_f(double t, const double *x, const double *p, "
                     "const double *sw, double *dx) {\n    (void)t; (void)x; (void)p; "
                     "(void)sw;\n" + body + "\n" +
                     "\n".join(f"    dx[{i}] = {o};" for i, o in enumerate(self.output)) +
                     "\n}")
        for seed, name in (("x", "jx"), ("p", "jp")):
            rows, cols, values = [], [], []
            for i, entries in enumerate(self.output_tangent[seed]):
                for k, expression in sorted(entries.items()):
                    rows.append(i)
                    cols.append(k)
                    values.append(expression)
            upper = name.upper()
            if seed == "x":  # the band of df/dx, for the driver's LU (dense: NX - 1 each)
                position, below, above = band_order(rows, cols, n_states)
                self.band = (below, above)
                lines.append(f"#define BAND_LOWER {self.band[0]}")
                lines.append(f"#define BAND_UPPER {self.band[1]}")
                if position is not None:  # the LU's matrix has its states reordered
                    lines.append("#define HAS_PERM 1")
                    lines.append("static const int POS[] = {"
                                 + ", ".join(map(str, position)) + "};")
            lines.append(f"#define NNZ_{upper[1]} {len(values)}")
            for label, entries in (("ROW", rows), ("COL", cols)):
                listed = ", ".join(map(str, entries)) or "0"
                lines.append(f"static const int {upper}_{label}[] = {{{listed}}};")
            tangents = "\n".join(f"    {line}" for line in self.tangent_lines[seed])
            lines.append(
                f"static void model_{name}(double t, const double *x, const double *p, "
                f"const double *sw, double *{name}) {{\n    (void)t; (void)x; (void)p; "
                f"(void)sw; (void){name};\n{body}\n"
                f"{tangents}\n" + "\n".join(f"    {name}[{k}] = {e};"
                                            for k, e in enumerate(values)) + "\n}")
        # the switching functions and the switches' values, each after the value lines it
        # needs (there read from t and x: sw is NULL)
        lines.append(f"#define NROOTS {len(self.roots)}")
        needed = max((line + 1 for line, *_ in self.roots), default=0)
        root_body = "\n".join(f"    {line}" for line in self.value_lines[:needed])
        for label, column in (("ABOVE", 2), ("BELOW", 3)):
            listed = ", ".join(f"{r[column]:.1f}" for r in self.roots) or "0.0"
            lines.append(f"static const double SWITCH_{label}[] = {{{listed}}};")
        for function, target, of in (("model_roots", "g", lambda r: r[1]),
                                     ("model_switches", "value", lambda r: f"v{r[0]}")):
            lines.append(
                f"static void {function}(double t, const double *x, const double *p, "
                f"double *{target}) {{\n    const double *sw = NULL;\n"
                f"    (void)t; (void)x; (void)p; (void)sw; (void){target};\n{root_body}\n" +
                "\n".join(f"    {target}[{i}] = {of(r)};" for i, r in enumerate(self.roots))
                + "\n}")
        return "\n".join(lines) + "\n"


def _units(n):
    """Tangents of an input of size n with respect to itself: element i is ``{i: 1}``."""
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = {i: "1.0"}
    return out


def _empty(shape):
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(shape):
        out[index] = {}
    return out


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


#: SUNDIALS built into the package at install (build_tools/bundle_cvodes.py): one static
#: library and its headers.
BUNDLED = Path(__file__).resolve().parents[1] / "_sundials"
_BUNDLED_LIBRARY = "sklode_sundials"


def _sundials_prefixes():
    """Where SUNDIALS is looked for, in order: ``SUNDIALS_DIR`` (asked for by name), the
    package's own build, then a conda environment, the Python prefix and the system."""
    return [os.environ.get("SUNDIALS_DIR"), str(BUNDLED), os.environ.get("CONDA_PREFIX"),
            sys.prefix, "/usr/local", "/usr"]


def _sundials_prefix():
    """The first prefix holding CVODES' header, or None."""
    for prefix in filter(None, _sundials_prefixes()):
        if (Path(prefix) / "include" / "cvodes" / "cvodes.h").is_file():
            return Path(prefix)
    return None


def sundials_location():
    """Where SUNDIALS was found and its version, and the C compiler, in words (for
    :func:`sklode.show_versions`); None where it was not found.

    Returns
    -------
    str or None
    """
    prefix = _sundials_prefix()
    if prefix is None:
        return None
    version = "version unknown"
    config = prefix / "include" / "sundials" / "sundials_config.h"
    if config.is_file():
        for line in config.read_text(errors="replace").splitlines():
            if line.startswith("#define SUNDIALS_VERSION ") or line.startswith(
                    "#define SUNDIALS_PACKAGE_VERSION "):
                version = "SUNDIALS " + line.split()[-1].strip('"')
                break
    native_unavailable_reason()
    compiler = " ".join(_UNAVAILABLE.get("compiler") or []) or "no compiler"
    return f"{prefix} ({version}), models compiled with {compiler}"


def _compiler():
    """The C compiler command as a list of words (``$CC`` split as a shell would, e.g.
    ``"ccache gcc"``), and why it cannot be used, or None."""
    given = os.environ.get("CC")
    if given:
        words = shlex.split(given)
        if not words or shutil.which(words[0]) is None:
            return words, (f"the C compiler CC={given!r} was not found (unset CC to use the "
                           "system's cc, or point it at an installed compiler)")
        return words, None
    found = shutil.which("cc") or shutil.which("gcc")
    if not found:
        return None, "no C compiler (cc or $CC) was found"
    return [found], None


def _sundials_flags():
    """Compiler flags for SUNDIALS' headers and libraries, or None when none are found."""
    prefix = _sundials_prefix()
    if prefix is None:
        return None
    include = prefix / "include"
    bundle = [p for p in (prefix / "lib").glob(f"*{_BUNDLED_LIBRARY}*")
              if p.suffix in (".a", ".lib")]
    if bundle:  # the package's static library: linked into each model's library
        return [f"-I{include}", str(bundle[0])]
    libs = [prefix / d for d in ("lib", "lib64", "lib/x86_64-linux-gnu",
                                 "lib/aarch64-linux-gnu")]
    libs = [d for d in libs if d.is_dir()]
    flags = [f"-I{include}"] + [f"-L{d}" for d in libs] + [f"-Wl,-rpath,{d}" for d in libs]
    core = any((d / f"libsundials_core{ext}").exists() for d in libs
               for ext in (".so", ".a", ".dylib"))  # SUNDIALS 7 has a core library
    return flags + [f"-l{name}" for name in _LIBRARIES + ["sundials_core"] * core]


_UNAVAILABLE = {}  # reason by key, so that a missing compiler is looked for once


def native_unavailable_reason():
    """Why no model can be compiled here, or None.

    Returns
    -------
    str or None
        A sentence naming what is missing (a C compiler, SUNDIALS) and how to get it.
    """
    if "system" not in _UNAVAILABLE:
        compiler, reason = _compiler()
        if reason is None and _sundials_flags() is None:
            reason = ("SUNDIALS (CVODES) was not found: the install builds it into the "
                      "package where it can reach PyPI and a C compiler (pip install "
                      "--force-reinstall --no-deps sklode, its output says why not), or "
                      "install libsundials-dev (Debian, "
                      "Ubuntu) or conda's sundials, or set SUNDIALS_DIR")
        _UNAVAILABLE["system"] = reason
        _UNAVAILABLE["compiler"] = compiler
    return _UNAVAILABLE["system"]


def _build(source):
    """Compile ``source`` to a shared library in the cache (once per source) and load it."""
    flags = _sundials_flags()
    compiler = _UNAVAILABLE["compiler"]
    command = [*compiler, "-O2", "-shared", "-fPIC", "-std=c99"]
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
                      ctypes.c_double, double_p, ctypes.c_long, ctypes.c_double,
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
    band : (int, int)
        Diagonals of ``df/dx`` below and above the main one that its LU works on
        (``n_states - 1`` each when dense).
    library : str
        Path of the shared library.
    """

    def __init__(self, lib, solve, n_states, n_params, param_in_field, band=None):
        self._lib, self._solve = lib, solve
        self.n_states, self.n_params = n_states, n_params
        self.param_in_field = param_in_field
        self.band = (n_states - 1, n_states - 1) if band is None else band
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
        rtol : float
        atol : float or ndarray (n_states,)
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
                           float(rtol), np.ascontiguousarray(np.broadcast_to(
                               np.asarray(atol, dtype=np.float64), (n,))),
                           int(max_steps), float(blowup), q,
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
        return None, ("rhs cannot be recorded as a program of torch operations (Python "
                      "control flow on a value, or an operation the recorder does not know)")
    recorder, x, theta, out = field.recording
    try:
        program = _Program(recorder, x, theta, out)
        source = program.source(model.n_states, model.n_params) + _DRIVER.read_text()
        lib, solve = _build(source)
    except _CannotWrite as exc:
        return None, f"the C generator cannot write rhs: {exc}"
    except (RuntimeError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    in_field = np.zeros(model.n_params, dtype=bool)
    for entries in program.output_tangent["p"]:
        in_field[list(entries)] = True
    solver = NativeSolver(lib, solve, model.n_states, model.n_params, in_field, program.band)
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
