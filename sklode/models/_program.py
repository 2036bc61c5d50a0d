"""A model's recorded torch program unrolled to scalar assignments, with its two Jacobians.

The recorded program of ``rhs`` (:func:`~sklode.models._compile.compile_field`) is unrolled
element by element: every tensor becomes an array of scalar expressions, so indexing,
slicing, stacking, rolling and broadcasting happen here and each elementwise operation
becomes one assignment per element. The Jacobians with respect to ``x`` and ``theta`` are
differentiated in forward mode at the same time, keeping only their nonzero entries.

Each expression is an :class:`Expr` tree that also carries its C text, so that the same
assignments reach CVODES two ways: written as C and compiled per model
(:meth:`Program.source`), or encoded as instructions for the interpreter compiled once at
install (:mod:`sklode.models._tape`), for machines with no C compiler at run time.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ._band import band_order, compressed_columns, use_sparse_lu
from ._compile import _BINARY, _IDENTITY

__all__ = ["CannotWrite", "Expr", "Program"]

_MAX_LINES = 200_000  # a program unrolled beyond this many assignments is not used


class CannotWrite(Exception):
    """The recorded program has an operation (or a size) this generator does not write."""


class Expr:
    """One scalar expression: a leaf or an operation on expressions, with its C text.

    ``op`` is a leaf kind (``"t"``, ``"x"``, ``"p"``, ``"const"``, ``"name"``: an assigned
    line) or an operation of :data:`OPERATIONS`; ``args`` the leaf's index, value or name,
    or the operands (a ``"switch"`` has its index as the second)."""

    __slots__ = ("op", "args", "text")

    def __init__(self, op, args, text):
        self.op, self.args, self.text = op, args, text

    def __str__(self):
        return self.text

    def is_leaf(self):
        return self.op in _LEAVES


_LEAVES = ("t", "x", "p", "const", "name")
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!="}
_FUNCTIONS = ("exp", "log", "sin", "cos", "tan", "tanh", "sinh", "cosh", "sqrt", "fabs",
              "log1p", "expm1", "atan", "asin", "acos", "floor", "ceil", "pow", "fmax",
              "fmin")
#: Every operation an expression may hold (the interpreter's instruction set).
OPERATIONS = (tuple(_INFIX) + tuple(_COMPARE) + _FUNCTIONS
              + ("neg", "sign", "select", "and", "switch"))


def _literal(value):
    if math.isnan(value):
        return "NAN"
    if math.isinf(value):
        return "INFINITY" if value > 0 else "(-INFINITY)"
    return repr(value)


def const(value):
    value = float(value)
    return Expr("const", (value,), _literal(value))


def name(text):
    return Expr("name", (text,), text)


_ARITHMETIC = {"add": float.__add__, "sub": float.__sub__, "mul": float.__mul__,
               "div": float.__truediv__}


def op(kind, *args):
    """The operation ``kind`` on the expressions ``args``.

    Arithmetic on constants is done here (Python's doubles round as C's), and a square is
    a product: a C compiler turns ``pow(x, 2.0)`` into ``x * x``, ``pow(x, -1.0)`` into
    ``1.0 / x`` (and ``3.0 - 1.0`` into ``2.0``), from which libm's ``pow`` can differ in
    the last bit; doing it here keeps the interpreted and the compiled model equal to the
    bit."""
    constants = [a.args[0] for a in args if a.op == "const"]
    if kind in _ARITHMETIC and len(constants) == 2:
        try:
            return const(_ARITHMETIC[kind](*constants))
        except ZeroDivisionError:
            pass
    if kind == "neg" and constants:
        return const(-constants[0])
    if kind == "pow" and args[1].op == "const" and args[1].args[0] in (1.0, 2.0, -1.0):
        exponent = args[1].args[0]
        return (args[0] if exponent == 1.0 else op("mul", args[0], args[0])
                if exponent == 2.0 else op("div", ONE, args[0]))
    texts = [a.text for a in args]
    if kind in _INFIX:
        text = f"({texts[0]} {_INFIX[kind]} {texts[1]})"
    elif kind in _COMPARE:
        text = f"(({texts[0]} {_COMPARE[kind]} {texts[1]}) ? 1.0 : 0.0)"
    elif kind in _FUNCTIONS:
        text = f"{kind}({', '.join(texts)})"
    elif kind == "neg":
        text = f"(-{texts[0]})"
    elif kind == "sign":
        text = f"SIGN({texts[0]})"
    elif kind == "select":
        text = f"(({texts[0]} != 0.0) ? {texts[1]} : {texts[2]})"
    elif kind == "and":
        text = f"(({texts[0]} != 0.0 && {texts[1]} != 0.0) ? 1.0 : 0.0)"
    else:
        raise ValueError(kind)
    return Expr(kind, args, text)


def switch(index, direct):
    """Switch ``index`` of the solve (``sw[index]``), or ``direct`` where there is none."""
    return Expr("switch", (direct, index), f"(sw ? sw[{index}] : {direct.text})")


ONE, ZERO = const(1.0), const(0.0)


def _is_one(e):
    return e.op == "const" and e.args[0] == 1.0


def _one_minus_square(a):
    return op("sub", ONE, op("mul", a, a))


# The elementwise functions of one operand: their value and their derivative (times the
# operand's tangent) from the operand a and the result r; None: no derivative (a step).
_UNARY = {
    "neg": (lambda a: op("neg", a), lambda a, r: const(-1.0)),
    "exp": (lambda a: op("exp", a), lambda a, r: r),
    "log": (lambda a: op("log", a), lambda a, r: op("div", ONE, a)),
    "sin": (lambda a: op("sin", a), lambda a, r: op("cos", a)),
    "cos": (lambda a: op("cos", a), lambda a, r: op("neg", op("sin", a))),
    "tan": (lambda a: op("tan", a), lambda a, r: op("add", ONE, op("mul", r, r))),
    "tanh": (lambda a: op("tanh", a), lambda a, r: _one_minus_square(r)),
    "sinh": (lambda a: op("sinh", a), lambda a, r: op("cosh", a)),
    "cosh": (lambda a: op("cosh", a), lambda a, r: op("sinh", a)),
    "sqrt": (lambda a: op("sqrt", a), lambda a, r: op("div", const(0.5), r)),
    "abs": (lambda a: op("fabs", a), lambda a, r: op("sign", a)),
    "log1p": (lambda a: op("log1p", a), lambda a, r: op("div", ONE, op("add", ONE, a))),
    "expm1": (lambda a: op("expm1", a), lambda a, r: op("add", r, ONE)),
    "atan": (lambda a: op("atan", a),
             lambda a, r: op("div", ONE, op("add", ONE, op("mul", a, a)))),
    "asin": (lambda a: op("asin", a),
             lambda a, r: op("div", ONE, op("sqrt", _one_minus_square(a)))),
    "acos": (lambda a: op("acos", a),
             lambda a, r: op("div", const(-1.0), op("sqrt", _one_minus_square(a)))),
    "square": (lambda a: op("mul", a, a), lambda a, r: op("mul", const(2.0), a)),
    "reciprocal": (lambda a: op("div", ONE, a), lambda a, r: op("neg", op("mul", r, r))),
    "sigmoid": (lambda a: op("div", ONE, op("add", ONE, op("exp", op("neg", a)))),
                lambda a, r: op("mul", r, op("sub", ONE, r))),
    "relu": (lambda a: op("select", op("gt", a, ZERO), a, ZERO),
             lambda a, r: op("gt", a, ZERO)),
    "sign": (lambda a: op("sign", a), None), "floor": (lambda a: op("floor", a), None),
    "ceil": (lambda a: op("ceil", a), None),
}
_UNARY["arctan"] = _UNARY["atan"]
_COMPARISON_OF = {symbol: kind for kind, symbol in _COMPARE.items()}
# a comparison's value just past a root of a - b, where a - b has become > 0 or < 0
_SWITCH_SIDES = {">": (1, 0), ">=": (1, 0), "<": (0, 1), "<=": (0, 1), "==": (0, 0),
                 "!=": (1, 1)}


class Program:
    """The recorded program as scalar assignments, unrolled: every tensor is an array
    (numpy, dtype object) of :class:`Expr`, one per element. The tangents with respect to
    ``x`` and ``theta`` are arrays of the same shape holding, per element, the nonzero
    entries ``{index: Expr}``.

    Attributes
    ----------
    value_lines : list of (str, Expr)
        The field's assignments, in order.
    tangent_lines : {"x": list, "p": list}
        The Jacobians' assignments (after the value lines).
    output : ndarray of Expr (n_states,)
    output_tangent : {"x": ndarray of dict, "p": ndarray of dict}
        Per output, its nonzero derivatives ``{index: Expr}``.
    roots : list of (int, Expr, float, float)
        Each switch of the field: the value line it is written at, its switching function
        g, and the switch's value where g > 0 and where g < 0.
    """

    def __init__(self, recorder, x, theta, out, prefix="v"):
        self.rec = recorder
        self.prefix = prefix  # of the value lines' names (another program's: another)
        self.value = {id(x): np.array([Expr("x", (i,), f"x[{i}]") for i in range(x.numel())],
                                      dtype=object),
                      id(theta): np.array([Expr("p", (k,), f"p[{k}]")
                                           for k in range(theta.numel())], dtype=object)}
        self.tangent = {"x": {id(x): _units(x.numel())}, "p": {id(theta): _units(theta.numel())}}
        self.value_lines = []
        self.tangent_lines = {"x": [], "p": []}
        # values that change along a solution (they depend on t or x), and the switching
        # functions of the comparisons among them: CVODES finds where one changes sign and
        # restarts there, as at a discontinuity of the field.
        self.varying = {id(x)}
        self.roots = []
        for kind, args, kwargs, result in recorder.tape:
            self._record(kind, args, kwargs, result)
            if len(self.value_lines) > _MAX_LINES:
                raise CannotWrite("the program unrolls to too many assignments")
        if id(out) not in self.value:
            raise CannotWrite("the output is not computed from the inputs")
        self.output = self.value[id(out)].reshape(-1)
        self.output_tangent = {seed: self.tan(seed, out).reshape(-1) for seed in self.tangent}
        self.band = None
        self.sparse = False
        self.columns = None

    # ------------------------------------------------------------------ operands
    def ref(self, v):
        """The value of an operand as an array of expressions."""
        if isinstance(v, torch.Tensor):
            if id(v) in self.value:
                return self.value[id(v)]
            label = self.rec.names.get(id(v))
            if label == "t":
                return np.array(Expr("t", (), "t"), dtype=object)
            if label in self.rec.constants:
                constant = np.asarray(self.rec.constants[label], dtype=np.float64)
                return np.vectorize(const, otypes=[object])(constant)
            raise CannotWrite(f"operand {label!r} of unknown origin")
        if isinstance(v, bool):
            return np.array(ONE if v else ZERO, dtype=object)
        if isinstance(v, (int, float)):
            return np.array(const(v), dtype=object)
        raise CannotWrite(f"operand of type {type(v).__name__}")

    def tan(self, seed, v):
        """The operand's tangent: an array of ``{index: Expr}`` (empty: constant)."""
        shape = np.shape(self.ref(v))
        if isinstance(v, torch.Tensor) and id(v) in self.tangent[seed]:
            return self.tangent[seed][id(v)]
        return _empty(shape)

    def _varies(self, v):
        return isinstance(v, torch.Tensor) and (id(v) in self.varying
                                                or self.rec.names.get(id(v)) == "t")

    def _keep(self, result, value, tangents):
        """Store a result computed by a shape operation (no new assignments)."""
        self.value[id(result)] = np.asarray(value, dtype=object).reshape(tuple(result.shape))
        for seed, tangent in tangents.items():
            self.tangent[seed][id(result)] = np.asarray(tangent, dtype=object).reshape(
                tuple(result.shape))

    def _assign(self, expression):
        """A new value line holding ``expression``; its name."""
        label = f"{self.prefix}{len(self.value_lines)}"
        self.value_lines.append((label, expression))
        return name(label)

    def _elementwise(self, result, operands, value_of, derivatives_of):
        """One assignment per element of ``result``: ``value_of(*values)`` and, per seed,
        the chain rule ``sum_j derivative_j * d operand_j``; ``derivatives_of(values, r)``
        returns one factor (or None: no dependence) per operand."""
        values = np.broadcast_arrays(*[self.ref(v) for v in operands])
        shape = values[0].shape
        if shape != tuple(result.shape):
            raise CannotWrite(f"a broadcast to {tuple(result.shape)} from {shape}")
        names = np.empty(shape, dtype=object)
        tangents = {seed: np.empty(shape, dtype=object) for seed in self.tangent}
        operand_tangents = {seed: np.broadcast_arrays(*[self.tan(seed, v) for v in operands])
                            for seed in self.tangent}
        for index in np.ndindex(shape):
            elements = [v[index] for v in values]
            named = self._assign(value_of(*elements))
            names[index] = named
            factors = derivatives_of(elements, named)
            for seed in self.tangent:
                entries = {}
                for factor, d in zip(factors, (t[index] for t in operand_tangents[seed])):
                    if factor is None:
                        continue
                    for k, dk in d.items():
                        term = dk if _is_one(factor) else op("mul", factor, dk)
                        entries[k] = term if k not in entries else op("add", entries[k], term)
                tangents[seed][index] = self._tangent_lines(seed, named, entries)
        self.value[id(result)] = names
        for seed in self.tangent:
            self.tangent[seed][id(result)] = tangents[seed]
        return names

    def _tangent_lines(self, seed, named, entries):
        out = {}
        for k, expression in sorted(entries.items()):
            label = f"d{seed}_{named.text}_{k}"
            self.tangent_lines[seed].append((label, expression))
            out[k] = name(label)
        return out

    # ------------------------------------------------------------------ one operation
    def _record(self, kind, args, kwargs, result):  # noqa: C901 -- one branch per kind
        operands = [v for a in list(args) + list(kwargs.values())
                    for v in (a if isinstance(a, (list, tuple)) else [a])]
        if any(self._varies(v) for v in operands):
            for r in (result if isinstance(result, (list, tuple)) else [result]):
                self.varying.add(id(r))
        T = self.tangent
        if isinstance(result, (tuple, list)):  # unbind along dim 0
            if kind != "unbind" or kwargs.get("dim", args[1] if len(args) > 1 else 0) != 0:
                raise CannotWrite(kind)
            value = self.ref(args[0])
            for i, r in enumerate(result):
                self._keep(r, value[i], {s: self.tan(s, args[0])[i] for s in T})
            return
        if not isinstance(result, torch.Tensor):
            raise CannotWrite(f"{kind} returning {type(result).__name__}")
        if kind in _IDENTITY:
            self._keep(result, self.ref(args[0]), {s: self.tan(s, args[0]) for s in T})
        elif kind == "__getitem__":
            index = args[1]
            self._keep(result, self.ref(args[0])[index],
                       {s: self.tan(s, args[0])[index] for s in T})
        elif kind in ("stack", "cat", "concatenate"):
            tensors = args[0]
            axis = kwargs.get("dim", args[1] if len(args) > 1 else 0)
            join = np.stack if kind == "stack" else np.concatenate
            self._keep(result, join([self.ref(v) for v in tensors], axis=axis),
                       {s: join([self.tan(s, v) for v in tensors], axis=axis) for s in T})
        elif kind == "roll":
            shifts = kwargs.get("shifts", args[1] if len(args) > 1 else None)
            dims = kwargs.get("dims", args[2] if len(args) > 2 else None)
            self._keep(result, np.roll(self.ref(args[0]), shifts, axis=dims),
                       {s: np.roll(self.tan(s, args[0]), shifts, axis=dims) for s in T})
        elif kind in ("reshape", "view", "unsqueeze"):
            shape = tuple(result.shape)
            self._keep(result, self.ref(args[0]).reshape(shape),
                       {s: self.tan(s, args[0]).reshape(shape) for s in T})
        elif kind in ("expand", "expand_as", "broadcast_to"):
            shape = tuple(result.shape)
            self._keep(result, np.broadcast_to(self.ref(args[0]), shape),
                       {s: np.broadcast_to(self.tan(s, args[0]), shape) for s in T})
        elif kind in ("sum", "mean"):
            self._reduce(kind, args, kwargs, result)
        elif kind in ("zeros_like", "ones_like"):
            fill = ZERO if kind == "zeros_like" else ONE
            self._keep(result, np.full(tuple(result.shape), fill, dtype=object), {})
        elif kind in _BINARY and len(args) == 2:
            self._binary(kind, args, kwargs, result)
        elif kind in _UNARY and len(args) == 1 and not kwargs:
            value_of, derivative = _UNARY[kind]
            self._elementwise(
                result, [args[0]], value_of,
                lambda e, r: [None if derivative is None else derivative(e[0], r)])
        elif kind in ("maximum", "minimum", "fmax", "fmin"):
            test = "ge" if kind in ("maximum", "fmax") else "le"
            self._elementwise(result, [args[0], args[1]],
                              lambda a, b: op("select", op(test, a, b), a, b),
                              lambda e, r: [op(test, e[0], e[1]),
                                            op("select", op(test, e[0], e[1]), ZERO, ONE)])
        elif kind == "where" and len(args) == 3:
            self._elementwise(result, list(args),
                              lambda c, a, b: op("select", c, a, b),
                              lambda e, r: [None, op("select", e[0], ONE, ZERO),
                                            op("select", e[0], ZERO, ONE)])
        elif kind in ("clamp", "clip"):
            self._clamp(args, kwargs, result)
        else:
            raise CannotWrite(kind)

    def _clamp(self, args, kwargs, result):
        low = kwargs.get("min", args[1] if len(args) > 1 else None)
        high = kwargs.get("max", args[2] if len(args) > 2 else None)
        bounds = [b for b in (low, high) if b is not None]

        def value_of(a, *limits):
            out, k = a, 0
            if low is not None:
                out, k = op("fmax", out, limits[k]), k + 1
            if high is not None:
                out = op("fmin", out, limits[k])
            return out

        def derivatives_of(e, r):
            inside, k = [], 1
            if low is not None:
                inside.append(op("ge", e[0], e[k]))
                k += 1
            if high is not None:
                inside.append(op("le", e[0], e[k]))
            within = ONE if not inside else inside[0] if len(inside) == 1 else op(
                "and", *inside)
            return [within] + [None] * len(bounds)

        self._elementwise(result, [args[0]] + bounds, value_of, derivatives_of)

    def _reduce(self, kind, args, kwargs, result):
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

        def total(terms):  # left to right, as C adds a + b + c
            out = terms[0]
            for term in terms[1:]:
                out = op("add", out, term)
            return op("div", out, const(count)) if kind == "mean" else out

        names = np.empty(outer, dtype=object)
        reduced = {s: np.empty(outer, dtype=object) for s in self.tangent}
        for index in np.ndindex(outer):
            named = self._assign(total(list(flat[index])))
            names[index] = named
            for s in self.tangent:
                entries = {}
                for d in tangents[s][index]:
                    for k, dk in d.items():
                        entries.setdefault(k, []).append(dk)
                reduced[s][index] = self._tangent_lines(
                    s, named, {k: total(terms) for k, terms in entries.items()})
        shape = tuple(result.shape)
        self._keep(result, names.reshape(shape), {s: reduced[s].reshape(shape)
                                                  for s in self.tangent})

    def _binary(self, kind, args, kwargs, result):
        symbol = _BINARY[kind]
        left, right = args
        if symbol.startswith("r"):
            symbol, left, right = symbol[1:], right, left
        if symbol == "@":
            raise CannotWrite("matmul")
        alpha = kwargs.get("alpha")
        if kwargs and alpha is None:
            raise CannotWrite(f"{kind} with {sorted(kwargs)}")

        def scaled(b):
            return b if alpha is None else op("mul", const(alpha), b)

        if symbol in _COMPARISON_OF:
            test = _COMPARISON_OF[symbol]
            if not (self._varies(left) or self._varies(right)):
                self._elementwise(result, [left, right], lambda a, b: op(test, a, b),
                                  lambda e, r: [None, None])
                return
            # A switch along the solution: the solve reads it from sw[], which it sets at
            # the start and changes only where CVODES finds the root of a - b (AMICI's
            # Heaviside variables). Read from t and x inside the steps, the jump made every
            # step across it fail until the steps were shorter than t's last digit.
            # Without sw (the checks, the root functions) it is the comparison itself.
            above, below = _SWITCH_SIDES[symbol]

            def value_of(a, b):  # each element's switch: the value line about to be written
                k = len(self.roots)
                self.roots.append((len(self.value_lines), op("sub", a, scaled(b)), above, below))
                return switch(k, op(test, a, b))

            self._elementwise(result, [left, right], value_of, lambda e, r: [None, None])
            return
        if symbol == "**":
            value_of = lambda a, b: op("pow", a, b)  # noqa: E731
            derivatives = lambda e, r: [  # noqa: E731
                op("mul", e[1], op("pow", e[0], op("sub", e[1], ONE))),
                op("mul", r, op("log", e[0]))]
        elif symbol in ("+", "-"):
            kind_of = "add" if symbol == "+" else "sub"
            value_of = lambda a, b: op(kind_of, a, scaled(b))  # noqa: E731
            second = const((1.0 if alpha is None else float(alpha))
                           * (1.0 if symbol == "+" else -1.0))
            derivatives = lambda e, r: [ONE, second]  # noqa: E731
        elif symbol == "*":
            value_of = lambda a, b: op("mul", a, b)  # noqa: E731
            derivatives = lambda e, r: [e[1], e[0]]  # noqa: E731
        elif symbol == "/":
            value_of = lambda a, b: op("div", a, b)  # noqa: E731
            derivatives = lambda e, r: [op("div", ONE, e[1]),  # noqa: E731
                                        op("div", op("neg", r), e[1])]
        else:
            raise CannotWrite(f"operator {symbol}")
        self._elementwise(result, [left, right], value_of, derivatives)

    # ------------------------------------------------------------------ sparsity
    def sparsity(self, seed):
        """The nonzero entries of ``df/dx`` (seed "x") or ``df/dtheta`` ("p"): rows,
        columns and their expressions, row by row."""
        rows, cols, values = [], [], []
        for i, entries in enumerate(self.output_tangent[seed]):
            for k, expression in sorted(entries.items()):
                rows.append(i)
                cols.append(k)
                values.append(expression)
        return rows, cols, values

    def lu_order(self, n_states, klu=True):
        """How the driver factors ``I - gamma df/dx``: sets :attr:`band` and :attr:`sparse`
        (KLU on :attr:`columns`, the compressed columns of
        :func:`~sklode.models._band.compressed_columns`, where :func:`use_sparse_lu` and
        ``klu`` say so) and returns the order of the states in the dense or banded LU
        (None: natural, and always with KLU, which orders them itself)."""
        rows, cols, _ = self.sparsity("x")
        position, below, above = band_order(rows, cols, n_states)
        self.band = (below, above)
        self.sparse = bool(klu) and use_sparse_lu(below, above, n_states, len(rows))
        self.columns = compressed_columns(rows, cols, n_states) if self.sparse else None
        return None if self.sparse else position

    # ------------------------------------------------------------------ the C source
    def source(self, n_states, n_params, klu=False):
        """The model part of the C solver (the driver follows it); ``klu``: the SUNDIALS it
        is linked with has KLU."""
        lines = ["#include <math.h>", "#include <stddef.h>"]
        if klu:  # before NP: SUNDIALS' sparse matrix has a field of that name
            lines += ["#define SKLODE_HAVE_KLU 1", "#include <sunmatrix/sunmatrix_sparse.h>",
                      "#include <sunlinsol/sunlinsol_klu.h>"]
        lines += ["#define SIGN(a) (((a) > 0.0) - ((a) < 0.0))",
                  f"#define NX {n_states}", f"#define NP {n_params}"]
        body = "\n".join(f"    const double {label} = {e};" for label, e in self.value_lines)
        lines.append("static void model_f(double t, const double *x, const double *p, "
                     "const double *sw, double *dx) {\n    (void)t; (void)x; (void)p; "
                     "(void)sw;\n" + body + "\n" +
                     "\n".join(f"    dx[{i}] = {o};" for i, o in enumerate(self.output)) +
                     "\n}")
        position = self.lu_order(n_states, klu)
        lines.append(f"#define SPARSE {int(self.sparse)}")
        start, row, slot = self.columns if self.sparse else ([0], [0], [0])
        lines.append(f"#define CSC_NNZ {len(row)}")
        for name, entries in (("START", start), ("ROW", row), ("SLOT", slot)):
            lines.append(f"static const int CSC_{name}[] = {{{', '.join(map(str, entries))}}};")
        lines.append(f"#define BAND_LOWER {self.band[0]}")
        lines.append(f"#define BAND_UPPER {self.band[1]}")
        lines.append(f"#define HAS_PERM {int(position is not None)}")
        lines.append("static const int POS[] = {" + ", ".join(
            map(str, range(n_states) if position is None else position)) + "};")
        for seed, label in (("x", "jx"), ("p", "jp")):
            rows, cols, values = self.sparsity(seed)
            upper = label.upper()
            lines.append(f"#define NNZ_{upper[1]} {len(values)}")
            for part, entries in (("ROW", rows), ("COL", cols)):
                listed = ", ".join(map(str, entries)) or "0"
                lines.append(f"static const int {upper}_{part}[] = {{{listed}}};")
            tangents = "\n".join(f"    const double {target} = {e};"
                                 for target, e in self.tangent_lines[seed])
            lines.append(
                f"static void model_{label}(double t, const double *x, const double *p, "
                f"const double *sw, double *{label}) {{\n    (void)t; (void)x; (void)p; "
                f"(void)sw; (void){label};\n{body}\n"
                f"{tangents}\n" + "\n".join(f"    {label}[{k}] = {e};"
                                            for k, e in enumerate(values)) + "\n}")
        # the switching functions and the switches' values, each after the value lines it
        # needs (there read from t and x: sw is NULL)
        lines.append(f"#define NROOTS {len(self.roots)}")
        root_body = "\n".join(f"    const double {label} = {e};"
                              for label, e in self.value_lines[:self.root_lines()])
        for label, column in (("ABOVE", 2), ("BELOW", 3)):
            listed = ", ".join(f"{r[column]:.1f}" for r in self.roots) or "0.0"
            lines.append(f"static const double SWITCH_{label}[] = {{{listed}}};")
        for function, target, of in (
                ("model_roots", "g", lambda r: r[1].text),
                ("model_switches", "value", lambda r: self.value_lines[r[0]][0])):
            lines.append(
                f"static void {function}(double t, const double *x, const double *p, "
                f"double *{target}) {{\n    const double *sw = NULL;\n"
                f"    (void)t; (void)x; (void)p; (void)sw; (void){target};\n{root_body}\n" +
                "\n".join(f"    {target}[{i}] = {of(r)};" for i, r in enumerate(self.roots))
                + "\n}")
        return "\n".join(lines) + "\n"

    def event_source(self):
        """The C of the events' trigger functions, this program's outputs (after
        :meth:`source`, which the driver needs with it): ``NEVENTS`` and
        ``model_event_values``."""
        body = "\n".join(f"    const double {label} = {e};" for label, e in self.value_lines)
        return (f"#define NEVENTS {self.output.size}\n"
                "static void model_event_values(double t, const double *x, const double *p, "
                f"double *g) {{\n    (void)t; (void)x; (void)p;\n{body}\n"
                + "\n".join(f"    g[{i}] = {o};" for i, o in enumerate(self.output))
                + "\n}\n")

    def root_lines(self):
        """How many value lines the switching functions need."""
        return max((line + 1 for line, *_ in self.roots), default=0)

    def switch_times(self):
        """The times at which the switches change, where each is a comparison of time with
        a constant (``t - c`` or ``c - t``: PEtab's and SBML's time triggers), or None where
        one depends on the states or parameters (its time is then found along the solve)."""
        times = []
        for _, g, _, _ in self.roots:
            left, right = g.args if g.op == "sub" else (None, None)
            if left is not None and left.op == "t" and right.op == "const":
                times.append(float(right.args[0]))
            elif left is not None and left.op == "const" and right.op == "t":
                times.append(float(left.args[0]))
            else:
                return None
        return np.array(times)

    def params_in_field(self, n_params):
        """Whether the field depends on each parameter."""
        in_field = np.zeros(n_params, dtype=bool)
        for entries in self.output_tangent["p"]:
            in_field[list(entries)] = True
        return in_field

    def params_read(self, n_params):
        """Whether the program reads each parameter at all: through its outputs'
        derivatives, and through its switching functions (a switch at a time that is a
        parameter changes the solution though no derivative of the field sees it)."""
        read = self.params_in_field(n_params)
        named = dict(self.value_lines)
        seen, stack = set(), [g for _, g, _, _ in self.roots]
        while stack:
            e = stack.pop()
            if id(e) in seen or not isinstance(e, Expr):
                continue
            seen.add(id(e))
            if e.op == "p":
                read[int(e.args[0])] = True
            elif e.op == "name":
                stack.append(named.get(e.args[0]))
            elif not e.is_leaf():
                stack.extend(a for a in e.args if isinstance(a, Expr))
        return read


def _units(n):
    """Tangents of an input of size n with respect to itself: element i is ``{i: 1}``."""
    out = np.empty(n, dtype=object)
    for i in range(n):
        out[i] = {i: ONE}
    return out


def _empty(shape):
    out = np.empty(shape, dtype=object)
    for index in np.ndindex(shape):
        out[index] = {}
    return out
