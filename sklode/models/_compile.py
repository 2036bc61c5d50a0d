"""A model's torch ``rhs`` compiled into plain numpy code for pointwise calls.

scipy's integrators call the vector field one state at a time, and one call through torch
costs 40-90 us of overhead for a handful of scalar operations. :func:`compile_field` runs
``rhs`` once on real tensors of the pointwise shapes (``x`` of shape ``(n_states,)``) under a
:class:`torch.overrides.TorchFunctionMode` that records every torch operation, and writes the
recorded program as one numpy/``math`` function, executed with ``exec``; LV's field then costs
about 2 us per call.

The recording is exact for programs whose operations do not depend on the values: any
conversion of a traced tensor to a Python value (``if x[0] > 0``, ``float(theta[0])``,
``.item()``, ``.tolist()``) or any operation outside the table below aborts the compilation,
and the caller keeps the torch path. The compiled function is then checked against ``rhs``
at random points before it is used, so a wrong answer cannot come out of it unnoticed.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

__all__ = ["compile_field", "compile_grid", "grid_functions", "parameters_read"]

logger = logging.getLogger("sklode")


class _Unsupported(Exception):
    """The recorded program cannot be written as numpy code."""


# Elementwise functions of one tensor: numpy's name, and math's for 0-d operands (a scalar
# through math costs ~50 ns against ~700 ns through a numpy ufunc).
_UNARY = {
    "neg": ("np.negative", None), "exp": ("np.exp", "math.exp"), "log": ("np.log", "math.log"),
    "sin": ("np.sin", "math.sin"), "cos": ("np.cos", "math.cos"), "tan": ("np.tan", "math.tan"),
    "tanh": ("np.tanh", "math.tanh"), "sinh": ("np.sinh", "math.sinh"),
    "cosh": ("np.cosh", "math.cosh"), "sqrt": ("np.sqrt", "math.sqrt"),
    "abs": ("np.abs", "abs"), "log1p": ("np.log1p", "math.log1p"),
    "expm1": ("np.expm1", "math.expm1"), "atan": ("np.arctan", "math.atan"),
    "arctan": ("np.arctan", "math.atan"), "asin": ("np.arcsin", "math.asin"),
    "acos": ("np.arccos", "math.acos"), "square": ("np.square", None),
    "reciprocal": ("np.reciprocal", None), "sign": ("np.sign", None),
    "floor": ("np.floor", None), "ceil": ("np.ceil", None),
}
# Binary operators (operands in the recorded order; "r" versions swap them).
_BINARY = {
    "mul": "*", "add": "+", "sub": "-", "div": "/", "true_divide": "/", "pow": "**",
    "__mul__": "*", "__add__": "+", "__sub__": "-", "__truediv__": "/", "__pow__": "**",
    "__rmul__": "r*", "__radd__": "r+", "__rsub__": "r-", "__rtruediv__": "r/",
    "__rdiv__": "r/", "__rpow__": "r**", "rsub": "r-", "__matmul__": "@", "matmul": "@",
    "gt": ">", "lt": "<", "ge": ">=", "le": "<=", "eq": "==", "ne": "!=",
    "__gt__": ">", "__lt__": "<", "__ge__": ">=", "__le__": "<=", "__eq__": "==",
    "__ne__": "!=",
}
_TO_PYTHON = {"__bool__", "__float__", "__int__", "__index__", "item", "tolist", "numpy",
              "__array__", "__len__", "nonzero", "any", "all"}
# Operations that return their input's values unchanged (a new name for the same array).
_IDENTITY = {"clone", "contiguous", "double", "float", "to", "detach", "__pos__",
             "positive", "requires_grad_", "type_as"}


class _Recorder(TorchFunctionMode):
    """Record every torch operation as a line of numpy code."""

    def __init__(self, inputs):
        super().__init__()
        self.names = {id(tensor): name for name, tensor in inputs.items()}
        # 1-D inputs are also unpacked into lists of Python floats: scalar arithmetic on
        # floats costs ~30 ns a step against ~100 ns on numpy scalars.
        self.lists = {id(tensor): f"{name}_list" for name, tensor in inputs.items()
                      if tensor.dim() == 1}
        self.kept = list(inputs.values())  # keep the ids valid while recording
        self.constants = {}
        self.lines = []
        self.tape = []  # (op, args, kwargs, result) of every recorded line, for the Jacobian
        self.vector = False  # write code for whole grids of points (see _grid_functions)

    # -------------------------------------------------------------- operands
    def ref(self, value):
        """Source text for an operand: a traced tensor's name, a constant, a literal."""
        if isinstance(value, torch.Tensor):
            key = id(value)
            if key not in self.names:  # made outside the recording: a constant
                name = f"c{len(self.constants)}"
                array = value.detach().cpu().numpy().astype(np.float64, copy=True)
                self.constants[name] = array.item() if array.ndim == 0 else array
                self.names[key] = name
                self.kept.append(value)
            return self.names[key]
        if isinstance(value, (bool, int)) or value is None or value is Ellipsis:
            return repr(value)
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else f"float({str(value)!r})"
        if isinstance(value, slice):
            return f"slice({self.ref(value.start)}, {self.ref(value.stop)}, " \
                   f"{self.ref(value.step)})"
        if isinstance(value, torch.Size):
            return repr(tuple(value))
        if isinstance(value, tuple):
            return "(" + "".join(self.ref(v) + ", " for v in value) + ")"
        if isinstance(value, list):
            return "[" + ", ".join(self.ref(v) for v in value) + "]"
        raise _Unsupported(f"operand of type {type(value).__name__}")

    def traced(self, value):
        return isinstance(value, torch.Tensor) and id(value) in self.names

    def name(self, value):
        name = f"v{len(self.kept)}"  # one new entry per name: unique
        self.names[id(value)] = name
        self.kept.append(value)
        return name

    # -------------------------------------------------------------- operations
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        op = getattr(func, "__name__", str(func))
        if op in _TO_PYTHON and any(self.traced(a) for a in args):
            raise _Unsupported(f"{op} on a traced tensor (value-dependent control flow)")
        result = func(*args, **kwargs)
        operands = list(args) + list(kwargs.values())
        flat = [v for a in operands for v in (a if isinstance(a, (list, tuple)) else [a])]
        if not any(self.traced(v) for v in flat):
            return result  # no traced input: a constant, recorded when first used
        if op in ("dim", "size", "shape", "__get__", "ndimension", "numel"):
            return result  # shapes are fixed at the pointwise shapes
        self.lines.append(self.expression(op, args, kwargs, result))
        self.tape.append((op, args, kwargs, result))
        return result

    def expression(self, op, args, kwargs, result):
        """One line of numpy code computing ``result``."""
        if isinstance(result, (tuple, list)):  # unbind: name every element
            if op != "unbind" or kwargs.get("dim", args[1] if len(args) > 1 else 0) != 0:
                raise _Unsupported(op)
            names = [self.name(r) for r in result]
            source = self.lists.get(id(args[0]), self.ref(args[0]))
            return f"{', '.join(names)}{',' if len(names) == 1 else ''} = {source}"
        if not isinstance(result, torch.Tensor):
            raise _Unsupported(f"{op} returning {type(result).__name__}")
        scalar = result.dim() == 0
        target = self.name(result)
        return f"{target} = {self.source(op, args, kwargs, scalar)}"

    def source(self, op, args, kwargs, scalar):
        ref = self.ref
        scalar = scalar and not self.vector  # on a grid the 0-d values are arrays
        if op in _IDENTITY:
            return ref(args[0])
        if scalar and op == "neg":
            return f"(-{ref(args[0])})"
        if op in _UNARY and len(args) == 1 and not kwargs:
            vector, math_name = _UNARY[op]
            return f"{math_name if scalar and math_name else vector}({ref(args[0])})"
        if op in _BINARY and len(args) == 2:
            symbol = _BINARY[op]
            a, b = ref(args[0]), ref(args[1])
            if symbol.startswith("r"):
                symbol, a, b = symbol[1:], b, a
            alpha = kwargs.get("alpha")
            if alpha is not None:
                b = f"({ref(alpha)} * {b})"
            elif kwargs:
                raise _Unsupported(f"{op} with {sorted(kwargs)}")
            if symbol == "**" and scalar:
                return _scalar_power(a, b, args, op)
            return f"({a} {symbol} {b})"
        if op == "sigmoid":
            return f"(1.0 / (1.0 + np.exp(-{ref(args[0])})))"
        if op == "relu":
            return f"np.maximum({ref(args[0])}, 0.0)"
        if op in ("maximum", "minimum", "fmax", "fmin", "atan2", "arctan2", "hypot"):
            name = {"atan2": "arctan2"}.get(op, op)
            return f"np.{name}({ref(args[0])}, {ref(args[1])})"
        if op == "where" and len(args) == 3:
            return f"np.where({ref(args[0])}, {ref(args[1])}, {ref(args[2])})"
        if op in ("clamp", "clip"):
            low = kwargs.get("min", args[1] if len(args) > 1 else None)
            high = kwargs.get("max", args[2] if len(args) > 2 else None)
            return f"np.clip({ref(args[0])}, {ref(low)}, {ref(high)})"
        if op == "__getitem__":
            index = args[1]
            if isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis:
                index = index[1]
            if id(args[0]) in self.lists and isinstance(index, int):
                return f"{self.lists[id(args[0])]}[{index}]"  # one Python float
            return f"{ref(args[0])}[{ref(args[1])}]"
        if op in ("stack", "cat", "concatenate"):
            tensors = args[0]
            axis = kwargs.get("dim", args[1] if len(args) > 1 else 0)
            if op == "stack" and all(t.dim() == 0 for t in tensors):
                if self.vector:  # one column per state, over the grid
                    return f"np.stack(np.broadcast_arrays({ref(list(tensors))[1:-1]}), axis=-1)"
                return f"np.array({ref(list(tensors))})"  # the pointwise field's output
            name = "stack" if op == "stack" else "concatenate"
            return f"np.{name}({ref(list(tensors))}, axis={ref(axis)})"
        if op == "roll":
            shifts = kwargs.get("shifts", args[1] if len(args) > 1 else None)
            dims = kwargs.get("dims", args[2] if len(args) > 2 else None)
            return f"np.roll({ref(args[0])}, {ref(shifts)}, axis={ref(dims)})"
        if op in ("reshape", "view"):
            shape = args[1:] if len(args) > 2 else args[1]
            return f"np.reshape({ref(args[0])}, {ref(tuple(shape) if isinstance(shape, list) else shape)})"  # noqa: E501
        if op == "unsqueeze":
            return f"np.expand_dims({ref(args[0])}, {ref(kwargs.get('dim', args[1]))})"
        if op in ("sum", "mean", "prod"):
            axis = kwargs.get("dim", args[1] if len(args) > 1 else None)
            keep = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            return f"np.{op}({ref(args[0])}, axis={ref(axis)}, keepdims={ref(keep)})"
        if op in ("zeros_like", "ones_like"):
            return f"np.{op}({ref(args[0])}, dtype=np.float64)"
        raise _Unsupported(op)


def _pointwise_inputs(n_in, n_params):
    """Real tensors of the pointwise shapes that a program is recorded on (distinct values,
    so that no operation is folded away)."""
    return {"t": torch.tensor(0.5, dtype=torch.float64),
            "x": torch.linspace(0.7, 1.3, n_in, dtype=torch.float64),
            "theta": torch.linspace(0.8, 1.2, n_params, dtype=torch.float64)}


def compile_field(model):
    """The model's field as a numpy function ``f(t, x, theta)`` for one state, or None.

    Parameters
    ----------
    model : ODEModel

    Returns
    -------
    callable or None
        ``f(t: float, x: ndarray (n_states,), theta: ndarray (n_params,)) -> ndarray
        (n_states,)``, equal to ``model.f`` to round-off at random points; None (with a
        debug log line saying why) when ``rhs`` cannot be recorded as numpy code.
    """
    inputs = _pointwise_inputs(model.n_states, model.n_params)
    recorder = _Recorder(inputs)
    try:
        with torch.inference_mode(), recorder:
            out = model.rhs(inputs["t"], inputs["x"], inputs["theta"])
        if not recorder.traced(out) or tuple(out.shape) != (model.n_states,):
            raise _Unsupported("the output is not a traced (n_states,) tensor")
        source = _function_source(recorder, recorder.names[id(out)])
        scope = {"np": np, "math": math, **recorder.constants}
        exec(compile(source, f"<sklode compiled field of {model!r}>", "exec"), scope)
        field = scope["field"]
        _check(model, field)
    except _Unsupported as exc:
        logger.debug("%r keeps the torch field for pointwise calls: %s", model, exc)
        return None
    except Exception as exc:  # noqa: BLE001 -- any failure means: keep the torch path
        logger.debug("%r keeps the torch field for pointwise calls: %s: %s", model,
                     type(exc).__name__, exc)
        return None
    field.source = source
    field.recording = (recorder, inputs["x"], inputs["theta"], out)
    field.jacobian = _compiled_jacobian(model, recorder, inputs["x"], out, scope,
                                        model.n_states, "x")
    field.jacobian_theta = _compiled_jacobian(model, recorder, inputs["theta"], out, scope,
                                              model.n_params, "theta")
    return field


def _compiled_jacobian(model, recorder, seed, out, scope, n, wrt):
    """The Jacobian of the recorded program with respect to ``seed`` (x or theta), forward
    mode, checked against ``reference`` at random points, or None."""
    try:
        source = _jacobian_source(recorder, seed, out, model.n_states, n)
        scope = {**scope, "_EYE": np.eye(n)}
        exec(compile(source, f"<sklode compiled Jacobian of {model!r}>", "exec"), scope)
        jacobian = scope["jacobian"]
        reference = _projected_jacobian(model, wrt)
        _check(model, lambda t, x, theta: reference.projection @ jacobian(t, x, theta),
               reference=reference)
    except Exception as exc:  # noqa: BLE001 -- any failure means: keep torch's Jacobian
        logger.debug("%r keeps torch's Jacobian for pointwise calls: %s: %s", model,
                     type(exc).__name__, exc)
        return None
    jacobian.source = source
    return jacobian


def _projected_jacobian(model, wrt):
    """``u @ df/dx`` (``wrt="x"``) or ``u @ df/dtheta`` at one point for a fixed random
    ``u``, by one reverse pass: the reference the compiled Jacobian, projected on the same
    ``u``, is checked against. A wrong entry changes the projection unless the random
    weights cancel it exactly; the whole matrix took one backward pass per state (Chen et
    al. 2009's 500 states: 151 CPU s of checks). torch.func would import torch._dynamo,
    ~2 s."""
    u = np.random.default_rng(1).standard_normal(model.n_states)
    size = model.n_states if wrt == "x" else model.n_params

    def reference(t, x, theta):
        x = torch.tensor(x, dtype=torch.float64, requires_grad=wrt == "x")
        theta = torch.tensor(theta, dtype=torch.float64, requires_grad=wrt == "theta")
        with torch.enable_grad():
            out = model.rhs(torch.tensor(float(t), dtype=torch.float64), x, theta)
            (row,) = torch.autograd.grad(out, x if wrt == "x" else theta,
                                         grad_outputs=torch.as_tensor(u), allow_unused=True)
        return np.zeros(size) if row is None else row.numpy()
    reference.projection = u
    return reference


def _function_source(recorder, output):
    lines = ["t = float(t)", "x_list = x.tolist()", "theta_list = theta.tolist()"]
    body = "\n".join(f"    {line}" for line in lines + recorder.lines)
    return (f"def field(t, x, theta):\n{body}\n"
            f"    return np.asarray({output}, dtype=np.float64)\n")


def _check(model, field, n_points=4, reference=None):
    """Raise _Unsupported unless ``field`` equals ``reference`` (default ``model.f``) at
    random points."""
    reference = model.f if reference is None else reference
    rng = np.random.default_rng(0)
    theta0 = model.theta_guess()
    checked = 0
    for _ in range(4 * n_points):
        if checked == n_points:
            return
        x = rng.uniform(0.5, 2.0, model.n_states) * rng.choice([-1.0, 1.0], model.n_states)
        theta = theta0 * rng.uniform(0.5, 1.5, theta0.size) + rng.normal(0, 0.1, theta0.size)
        t = float(rng.uniform(0.0, 10.0))
        with np.errstate(all="ignore"):
            expected = reference(t, x, theta)
            try:
                got = field(t, x, theta)
            except (ValueError, OverflowError, ZeroDivisionError):
                continue  # math's domain errors: the caller falls back per call
        finite = np.isfinite(expected)
        if got.shape != expected.shape or not np.array_equal(finite, np.isfinite(got)) \
                or not np.allclose(got[finite], expected[finite], rtol=1e-10,
                                   atol=1e-12 * max(float(np.max(np.abs(expected[finite]),
                                                                 initial=0.0)), 1e-300)):
            raise _Unsupported("the compiled field differs from rhs at a random point")
        checked += 1
    if checked == 0:
        raise _Unsupported("no random point where the field could be compared")


def _scalar_power(a, b, args, op):
    """``a ** b`` on Python floats: ``**`` for an integer exponent (exact and fast),
    ``math.pow`` otherwise, which raises on a negative base (the caller then takes torch's
    NaN) where ``**`` would return a complex number."""
    exponent = args[1] if op in ("pow", "__pow__") else args[0]
    if isinstance(exponent, int) and not isinstance(exponent, bool):
        return f"({a} ** {b})"
    return f"math.pow({a}, {b})"


# ----------------------------------------------------------------------------- the Jacobian
def _binary(op, args):
    """``(symbol, left, right)`` of a binary operation in evaluation order."""
    symbol = _BINARY[op]
    left, right = args
    if symbol.startswith("r"):
        return symbol[1:], right, left
    return symbol, left, right


class _Tangents:
    """Forward-mode differentiation of a recorded program with respect to one input (``x``
    or ``theta``, of size ``n``): every value's tangent ``d value / d input`` has the value's
    shape plus a trailing axis of size ``n`` (a 0-d value's is a row of the Jacobian)."""

    def __init__(self, recorder, seed, n):
        self.rec, self.n = recorder, n
        self.names = {id(seed): "d_seed"}
        self.lines = []

    def of(self, value):
        return self.names.get(id(value)) if isinstance(value, torch.Tensor) else None

    def value(self, v):
        return self.rec.ref(v)

    def col(self, v):
        """A value broadcast against tangents (a trailing axis for arrays)."""
        text = self.value(v)
        if self.rec.vector and isinstance(v, torch.Tensor):  # 0-d values are grid arrays
            return f"np.expand_dims({text}, -1)"
        return f"{text}[..., None]" if isinstance(v, torch.Tensor) and v.dim() > 0 else text

    def shaped(self, tangent, operand, result):
        """``tangent`` of ``operand`` broadcast to ``result``'s shape plus the state axis."""
        if not isinstance(operand, torch.Tensor) or tuple(operand.shape) == tuple(result.shape):
            return tangent
        return f"np.broadcast_to({tangent}, {tuple(result.shape) + (self.n,)!r})"

    def axis(self, dim, ndim):
        return dim if dim >= 0 else dim - 1  # the state axis comes last

    def run(self, output):
        for op, args, kwargs, result in self.rec.tape:
            if isinstance(result, (tuple, list)):  # unbind along dim 0
                tangent = self.of(args[0])
                if tangent is not None:
                    for i, r in enumerate(result):
                        self.names[id(r)] = f"{tangent}[{i}]"
                continue
            expression = self.rule(op, args, kwargs, result)
            if expression is not None:
                name = "d_" + self.rec.names[id(result)]
                self.lines.append(f"{name} = {expression}")
                self.names[id(result)] = name
        tangent = self.of(output)
        return tangent if tangent is not None else self.zero(output)

    def zero(self, v):
        shape = tuple(v.shape) if isinstance(v, torch.Tensor) else ()
        return f"np.zeros({shape + (self.n,)!r})"

    def rule(self, op, args, kwargs, result):  # noqa: C901 -- one branch per operation
        T, col, val = self.of, self.col, self.value
        if op in _IDENTITY:
            return T(args[0])
        if op in _BINARY and len(args) == 2:
            symbol, a, b = _binary(op, args)
            da, db = T(a), T(b)
            if da is None and db is None or symbol in (">", "<", ">=", "<=", "==", "!="):
                return None
            alpha = kwargs.get("alpha")
            if alpha is not None and db is not None:
                db = f"({val(alpha)} * {db})"
            if symbol in ("+", "-"):
                terms = [self.shaped(da, a, result)] if da is not None else []
                if db is not None:
                    part = self.shaped(db, b, result)
                    terms.append(part if symbol == "+" or terms else f"(-{part})")
                return f" {symbol} ".join(terms) if len(terms) == 2 else terms[0]
            if symbol == "*":
                terms = [f"{da} * {col(b)}"] if da is not None else []
                terms += [f"{col(a)} * {db}"] if db is not None else []
                return " + ".join(f"({t})" for t in terms)  # products broadcast themselves
            if symbol == "/":
                top = da if da is not None else "0.0"
                if db is not None:
                    top = f"({top} - {col(result)} * {db})"
                return f"{top} / {col(b)}"
            if symbol == "**":
                terms = []
                if da is not None:
                    if result.dim() == 0 and not self.rec.vector:  # floats: math.pow
                        exponent = b if isinstance(b, int) else None
                        power = (f"{val(a)} ** {exponent - 1}" if exponent is not None
                                 else f"math.pow({val(a)}, {val(b)} - 1)")
                        terms.append(f"{val(b)} * {power} * {da}")
                    else:
                        terms.append(f"{col(b)} * {col(a)} ** ({col(b)} - 1) * {da}")
                if db is not None:
                    terms.append(f"{col(result)} * np.log({col(a)}) * {db}")
                return " + ".join(f"({t})" for t in terms)
            if symbol == "@":
                if db is not None and da is None and b.dim() == 1:
                    return f"{val(a)} @ {db}"
                if da is not None and db is None and a.dim() == 1:
                    return f"np.swapaxes({val(b)}, -1, -2) @ {da}"
            raise _Unsupported(f"the derivative of {op}")
        if len(args) >= 1 and isinstance(args[0], torch.Tensor):
            a, da = args[0], T(args[0])
        else:
            a, da = None, None
        unary = {
            "neg": "-{d}", "exp": "{r} * {d}", "log": "{d} / {a}",
            "sin": "np.cos({a}) * {d}", "cos": "-np.sin({a}) * {d}",
            "tan": "(1.0 + {r} ** 2) * {d}", "tanh": "(1.0 - {r} ** 2) * {d}",
            "sinh": "np.cosh({a}) * {d}", "cosh": "np.sinh({a}) * {d}",
            "sqrt": "{d} / (2.0 * {r})", "abs": "np.sign({a}) * {d}",
            "log1p": "{d} / (1.0 + {a})", "expm1": "({r} + 1.0) * {d}",
            "square": "2.0 * {a} * {d}", "reciprocal": "-({r} ** 2) * {d}",
            "atan": "{d} / (1.0 + {a} ** 2)", "arctan": "{d} / (1.0 + {a} ** 2)",
            "asin": "{d} / np.sqrt(1.0 - {a} ** 2)", "acos": "-{d} / np.sqrt(1.0 - {a} ** 2)",
            "sigmoid": "{r} * (1.0 - {r}) * {d}", "relu": "({a} > 0) * {d}",
        }
        if op in unary:
            return None if da is None else unary[op].format(d=da, a=col(a), r=col(result))
        if op in ("sign", "floor", "ceil", "zeros_like", "ones_like"):
            return None
        if op in ("maximum", "minimum", "fmax", "fmin"):
            b = args[1]
            if da is None and T(b) is None:
                return None
            test = ">=" if op in ("maximum", "fmax") else "<="
            first = self.shaped(da or self.zero(a), a, result)
            return (f"np.where({col(a)} {test} {col(b)}, {first}, "
                    f"{self.shaped(T(b) or self.zero(b), b, result)})")
        if op == "where":
            condition, a, b = args
            if T(a) is None and T(b) is None:
                return None
            return (f"np.where({col(condition)}, {self.shaped(T(a) or self.zero(a), a, result)}, "
                    f"{self.shaped(T(b) or self.zero(b), b, result)})")
        if op in ("clamp", "clip"):
            if da is None:
                return None
            low = kwargs.get("min", args[1] if len(args) > 1 else None)
            high = kwargs.get("max", args[2] if len(args) > 2 else None)
            inside = " & ".join([f"({col(a)} >= {col(low)})"] * (low is not None)
                                + [f"({col(a)} <= {col(high)})"] * (high is not None)) or "True"
            return f"({inside}) * {da}"
        if op == "__getitem__":
            if da is None:
                return None
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if Ellipsis in index:
                index = index + (slice(None),)
            return f"{da}[{self.rec.ref(index)}]"
        if op in ("stack", "cat", "concatenate"):
            tensors = args[0]
            if all(T(t) is None for t in tensors):
                return None
            parts = [T(t) or self.zero(t) for t in tensors]
            dim = kwargs.get("dim", args[1] if len(args) > 1 else 0)
            if op == "stack" and all(t.dim() == 0 for t in tensors):
                if self.rec.vector:
                    return f"np.stack(np.broadcast_arrays({', '.join(parts)}), axis=-2)"
                return f"np.array([{', '.join(parts)}])"
            name = "stack" if op == "stack" else "concatenate"
            return f"np.{name}([{', '.join(parts)}], axis={self.axis(dim, result.dim())})"
        if op == "roll":
            if da is None:
                return None
            shifts = kwargs.get("shifts", args[1] if len(args) > 1 else None)
            dims = kwargs.get("dims", args[2] if len(args) > 2 else None)
            dims = [self.axis(d, a.dim()) for d in (dims if isinstance(dims, (list, tuple))
                                                    else [dims])]
            return f"np.roll({da}, {self.rec.ref(shifts)}, axis={tuple(dims)!r})"
        if op in ("reshape", "view", "unsqueeze"):
            return None if da is None else \
                f"np.reshape({da}, {tuple(result.shape) + (self.n,)!r})"
        if op in ("sum", "mean"):
            if da is None:
                return None
            axis = kwargs.get("dim", args[1] if len(args) > 1 else None)
            keep = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            axes = tuple(range(a.dim())) if axis is None else tuple(
                self.axis(d, a.dim()) for d in (axis if isinstance(axis, (list, tuple))
                                                else [axis]))
            return f"np.{op}({da}, axis={axes!r}, keepdims={keep!r})"
        raise _Unsupported(f"the derivative of {op}")


def _jacobian_source(recorder, seed, output, n_states, n):
    tangents = _Tangents(recorder, seed, n)
    result = tangents.run(output)
    lines = ["t = float(t)", "x_list = x.tolist()", "theta_list = theta.tolist()",
             "d_seed = _EYE"] + recorder.lines + tangents.lines
    body = "\n".join(f"    {line}" for line in lines)
    return (f"def jacobian(t, x, theta):\n{body}\n"
            f"    return np.array({result}, dtype=np.float64).reshape({n_states}, {n})\n")


# ----------------------------------------------------------------------------- whole grids
def _is_scalar_program(recorder, x, theta, out):
    """Whether every recorded value is 0-d and the inputs are only indexed: then the same
    code evaluates a whole grid when each 0-d value becomes an array over the points."""
    for op, args, kwargs, result in recorder.tape:
        operands = [v for a in list(args) + list(kwargs.values())
                    for v in (a if isinstance(a, (list, tuple)) else [a])]
        if any(v is x or v is theta for v in operands) and op not in ("__getitem__", "unbind"):
            return False
        if op == "unbind" and args[0] is x:
            return False  # the points axis would be unbound
        results = result if isinstance(result, (list, tuple)) else [result]
        if any(r.dim() != 0 for r in results) and result is not out:
            return False
    return True


def grid_functions(model, field):
    """``(f, jac_x, jac_theta)`` evaluating whole grids ``x`` of shape ``(..., n_states)``
    (``t`` a float or of shape ``x.shape[:-1]``) with the compiled program, or None where it
    is not a scalar program. Each is checked against the pointwise functions on a random
    grid."""
    recorder, x, theta, out = field.recording
    try:
        functions = _grid_program(recorder, x, theta, out, model.n_states, model.n_params,
                                  model.n_states, repr(model))
        _check_grid(model, field, functions)
    except Exception as exc:  # noqa: BLE001 -- any failure means: keep the other paths
        logger.debug("%r has no compiled grid functions: %s: %s", model,
                     type(exc).__name__, exc)
        return None
    return functions


def _grid_program(recorder, x, theta, out, n_in, n_params, n_out, label):
    """The recorded scalar program as grid functions ``(f, jac_x, jac_theta)``; raises
    :class:`_Unsupported` where it is not a scalar program."""
    if not _is_scalar_program(recorder, x, theta, out):
        raise _Unsupported("not a program of scalar operations")
    recorder.vector = True
    try:
        lines = []
        for op, args, kwargs, result in recorder.tape:
            if isinstance(result, (tuple, list)):
                lines.append(recorder.lines[len(lines)])  # unbind of theta: unchanged
            else:
                lines.append(f"{recorder.names[id(result)]} = "
                             f"{recorder.source(op, args, kwargs, result.dim() == 0)}")
        # theta is one vector, or one per grid point (shape (..., n_params)): an
        # experiment whose observation parameters change between its time points
        head = ["t = np.asarray(t, dtype=np.float64)", "x_list = np.moveaxis(x, -1, 0)",
                "theta_list = (theta.tolist() if theta.ndim == 1 "
                "else list(np.moveaxis(theta, -1, 0)))"]
        sources = {"f": "def f(t, x, theta):\n" + "\n".join(
            f"    {line}" for line in head + lines) + f"\n    return np.broadcast_to("
            f"{recorder.names[id(out)]}, x.shape[:-1] + ({n_out},)).astype(np.float64)\n"}
        for name, seed, size in (("jac_x", x, n_in), ("jac_theta", theta, n_params)):
            tangents = _Tangents(recorder, seed, size)
            result = tangents.run(out)
            body = head + ["d_seed = _EYE_" + name] + lines + tangents.lines
            sources[name] = (f"def {name}(t, x, theta):\n" + "\n".join(
                f"    {line}" for line in body) + f"\n    return np.broadcast_to({result}, "
                f"x.shape[:-1] + ({n_out}, {size})).astype(np.float64)\n")
        scope = {"np": np, "math": math, **recorder.constants, "_EYE_jac_x": np.eye(n_in),
                 "_EYE_jac_theta": np.eye(n_params)}
        for name, source in sources.items():
            exec(compile(source, f"<sklode compiled {name} of {label} on grids>", "exec"),
                 scope)
        return scope["f"], scope["jac_x"], scope["jac_theta"]
    finally:
        recorder.vector = False


def compile_grid(function, n_in, n_params, n_out, label):
    """Any ``function(t, x, theta)`` of torch operations (``x`` of shape ``(..., n_in)``,
    output ``(..., n_out)``) as numpy grid functions ``(f, jac_x, jac_theta)``, checked
    against torch on a random grid; None where it cannot be recorded or is not a program of
    scalar operations. Used for observation and noise models.

    Parameters
    ----------
    function : callable
    n_in, n_params, n_out : int
    label : str
        For error messages and logs.

    Returns
    -------
    tuple of callable or None
        ``f(t, x, theta) -> (..., n_out)``, ``jac_x -> (..., n_out, n_in)``,
        ``jac_theta -> (..., n_out, n_params)``.
    """
    inputs = _pointwise_inputs(n_in, n_params)
    recorder = _Recorder(inputs)
    try:
        with torch.inference_mode(), recorder:
            out = function(inputs["t"], inputs["x"], inputs["theta"])
        if not recorder.traced(out) or tuple(out.shape) != (n_out,):
            raise _Unsupported("the output is not a traced (n_out,) tensor")
        functions = _grid_program(recorder, inputs["x"], inputs["theta"], out, n_in, n_params,
                                  n_out, label)
        rng = np.random.default_rng(4)
        x = rng.uniform(0.5, 2.0, (5, n_in))
        t = rng.uniform(0.0, 10.0, 5)
        theta = rng.uniform(0.5, 1.5, n_params)
        xt = torch.tensor(x, requires_grad=True)
        tht = torch.tensor(theta, requires_grad=True)
        with torch.enable_grad():
            value = function(torch.tensor(t), xt, tht)
            rows = [torch.autograd.grad(value[:, i].sum(), (xt, tht), retain_graph=True,
                                        allow_unused=True) for i in range(n_out)]
        expected_f = value.detach().numpy()
        expected_x = np.stack([np.zeros_like(x) if gx is None else gx.numpy()
                               for gx, _ in rows], axis=1)
        got_f, got_x = functions[0](t, x, theta), functions[1](t, x, theta)
        got_theta = functions[2](t, x, theta).sum(axis=0)
        expected_theta = np.stack([np.zeros(n_params) if gt is None else gt.numpy()
                                   for _, gt in rows])
        for got, expected in ((got_f, expected_f), (got_x, expected_x),
                              (got_theta, expected_theta)):
            if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-10,
                                                              atol=1e-12, equal_nan=True):
                raise _Unsupported("the grid function differs from torch on a random grid")
        # one theta per grid point (an experiment whose observation parameters change
        # between its rows): each point as with its own theta alone
        thetas = theta * rng.uniform(0.5, 1.5, (x.shape[0], n_params))
        for function in functions:
            rows = function(t, x, thetas)
            alone = np.stack([function(t[i:i + 1], x[i:i + 1], thetas[i])[0]
                              for i in range(x.shape[0])])
            if not np.allclose(rows, alone, rtol=1e-12, atol=1e-14, equal_nan=True):
                raise _Unsupported("the grid function differs with one theta per point")
    except Exception as exc:  # noqa: BLE001 -- any failure means: keep torch
        logger.debug("%s keeps torch: %s: %s", label, type(exc).__name__, exc)
        return None
    return functions


def _check_grid(model, field, functions, n_points=7):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.5, 2.0, (n_points, model.n_states))
    t = rng.uniform(0.0, 10.0, n_points)
    theta = model.theta_guess() * rng.uniform(0.5, 1.5, model.n_params)
    pointwise = (field, field.jacobian, field.jacobian_theta)
    for grid, point in zip(functions, pointwise):
        if point is None:
            raise _Unsupported("no pointwise function to check against")
        with np.errstate(all="ignore"):
            got = grid(t, x, theta)
            expected = np.array([point(ti, xi, theta) for ti, xi in zip(t, x)])
        if got.shape != expected.shape or not np.allclose(got, expected, rtol=1e-12,
                                                          atol=1e-14, equal_nan=True):
            raise _Unsupported("the grid function differs from the pointwise one")


# ----------------------------------------------------------------------------- dependencies
class _DependencyRecorder(_Recorder):
    """A recorder that keeps the tape only (no numpy code): any torch operation is fine."""

    def expression(self, op, args, kwargs, result):
        for r in (result if isinstance(result, (tuple, list)) else [result]):
            if isinstance(r, torch.Tensor):
                self.name(r)
        return ""


def parameters_read(function, n_states, n_params):
    """Which entries of ``theta`` ``function(t, x, theta)`` reads, from its recorded program.

    Structural, not numerical: an entry counts when any operation on the way to the output
    takes it (an index ``theta[k]``, an unbind, or ``theta`` as a whole), whatever the
    derivative's value at a point. Used to skip the derivative directions of parameters an
    observation model never reads.

    Parameters
    ----------
    function : callable
        ``function(t, x, theta)`` in torch operations, ``x`` of shape ``(n_states,)``.
    n_states, n_params : int

    Returns
    -------
    ndarray of bool of shape (n_params,) or None
        None where the program cannot be recorded (value-dependent control flow).
    """
    inputs = _pointwise_inputs(n_states, n_params)
    recorder = _DependencyRecorder(inputs)
    try:
        with torch.inference_mode(), recorder:
            out = function(inputs["t"], inputs["x"], inputs["theta"])
    except Exception as exc:  # noqa: BLE001 -- unrecordable: every parameter counts
        logger.debug("parameters_read: %s: %s", type(exc).__name__, exc)
        return None
    theta = inputs["theta"]
    everything = np.ones(n_params, dtype=bool)
    reads = {id(theta): everything}

    def of(value):
        return reads.get(id(value)) if isinstance(value, torch.Tensor) else None

    for op, args, kwargs, result in recorder.tape:
        operands = [v for a in list(args) + list(kwargs.values())
                    for v in (a if isinstance(a, (list, tuple)) else [a])]
        results = result if isinstance(result, (tuple, list)) else [result]
        if args and args[0] is theta and op in ("__getitem__", "unbind"):
            index = args[1] if op == "__getitem__" else None
            if isinstance(index, tuple) and len(index) == 2 and index[0] is Ellipsis:
                index = index[1]
            for i, r in enumerate(results):
                read = np.zeros(n_params, dtype=bool)
                if op == "unbind":
                    read[i] = True
                elif isinstance(index, int):
                    read[index] = True
                else:
                    read = everything
                reads[id(r)] = read
            continue
        read = None
        for v in operands:
            if of(v) is not None:
                read = of(v) if read is None else (read | of(v))
        if read is not None:
            for r in results:
                if isinstance(r, torch.Tensor):
                    reads[id(r)] = read
    read = of(out)
    return np.zeros(n_params, dtype=bool) if read is None else read.copy()
