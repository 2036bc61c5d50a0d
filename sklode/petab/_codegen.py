"""sympy expressions -> the source of torch functions (batched over leading dimensions).

Common subexpressions are computed once (``sympy.cse``); numbers, and every subexpression
without a symbol (a half-life's ``log(2)``), are folded to float64 literals, so that torch's
functions only ever receive tensors; ``Piecewise`` becomes nested ``torch.where``, ``Max``/``Min`` ``torch.maximum``/
``torch.minimum``. Anything else that torch has no function for is refused by name.
"""

from __future__ import annotations

import sympy as sp

from ._sbml import UnsupportedFeature

__all__ = ["function_source"]

_FUNCTIONS = {
    sp.exp: "torch.exp", sp.log: "torch.log", sp.sin: "torch.sin", sp.cos: "torch.cos",
    sp.tan: "torch.tan", sp.asin: "torch.asin", sp.acos: "torch.acos",
    sp.atan: "torch.atan", sp.sinh: "torch.sinh", sp.cosh: "torch.cosh",
    sp.tanh: "torch.tanh", sp.Abs: "torch.abs", sp.floor: "torch.floor",
    sp.ceiling: "torch.ceil", sp.sign: "torch.sign", sp.erf: "torch.erf",
}
_RELATIONS = {sp.StrictGreaterThan: ">", sp.GreaterThan: ">=", sp.StrictLessThan: "<",
              sp.LessThan: "<=", sp.Equality: "==", sp.Unequality: "!="}


def _literal(value):
    """A float as Python source (a negative one in parentheses; nan and inf by name)."""
    if value != value:
        return "float('nan')"
    if value in (float("inf"), float("-inf")):
        return "float('inf')" if value > 0 else "(-float('inf'))"
    return repr(value) if value >= 0 else f"({value!r})"


def _constant(e):
    """The float value of ``e`` where it holds no symbol and is a number, else None."""
    if e.free_symbols or isinstance(e, (sp.logic.boolalg.Boolean, sp.core.relational.Relational)):
        return None
    try:
        value = complex(e.evalf(17))
    except (TypeError, ValueError):
        return None
    return value.real if value.imag == 0 else None


class _Emitter:
    def __init__(self, names):
        self.names = names  # sympy symbol -> code

    def branch(self, condition, if_true, if_false):
        """The code of ``if_true`` where ``condition`` holds, else ``if_false``, as nested
        ``_where`` on single comparisons: an ``And``, ``Or`` or ``Not`` becomes nesting, so
        that the solver sees each comparison as a switch of its own (it finds where one
        changes sign) and never a boolean operation."""
        if condition == sp.true:
            return if_true
        if condition == sp.false:
            return if_false
        if isinstance(condition, sp.And):
            first, rest = condition.args[0], sp.And(*condition.args[1:])
            return self.branch(first, self.branch(rest, if_true, if_false), if_false)
        if isinstance(condition, sp.Or):
            first, rest = condition.args[0], sp.Or(*condition.args[1:])
            return self.branch(first, if_true, self.branch(rest, if_true, if_false))
        if isinstance(condition, sp.Not):
            return self.branch(condition.args[0], if_false, if_true)
        return f"_where({self(condition)}, {if_true}, {if_false})"

    def __call__(self, e):
        if e in self.names:
            return self.names[e]
        if isinstance(e, sp.Symbol):
            raise ValueError(f"The expression names {e}, which is not defined here.")
        if e is sp.true or e == sp.true:
            return "True"
        if e is sp.false or e == sp.false:
            return "False"
        if e.is_Number or e.is_NumberSymbol:
            return _literal(float(e))
        value = _constant(e)
        if value is not None:  # log(2), cos(1)**2 + sin(1)**2: a number, computed here
            return _literal(value)
        if isinstance(e, sp.Add):
            return "(" + " + ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sp.Mul):
            numer, denom = [], []
            for a in e.args:
                if isinstance(a, sp.Pow) and a.exp.is_Number and a.exp < 0:
                    denom.append(self(a.base) if a.exp == -1 else self(sp.Pow(a.base, -a.exp)))
                else:
                    numer.append(self(a))
            text = " * ".join(numer) if numer else "1.0"
            if denom:
                text = f"{text} / ({' * '.join(denom)})"
            return f"({text})"
        if isinstance(e, sp.Pow):
            base, exp = e.args
            if exp == sp.Rational(1, 2):
                return f"torch.sqrt({self(base)})"
            if exp == -1:
                return f"(1.0 / {self(base)})"
            if exp.is_Integer and 0 < int(exp) <= 4:
                return "(" + " * ".join([self(base)] * int(exp)) + ")"
            if base == sp.E:
                return f"torch.exp({self(exp)})"
            return f"({self(base)} ** {self(exp)})"
        if e.func in _FUNCTIONS:
            return f"{_FUNCTIONS[e.func]}({self(e.args[0])})"
        if isinstance(e, sp.Max) or isinstance(e, sp.Min):
            helper = "_maximum" if isinstance(e, sp.Max) else "_minimum"
            text = self(e.args[0])
            for a in e.args[1:]:
                text = f"{helper}({text}, {self(a)})"
            return text
        if isinstance(e, sp.Piecewise):
            text = None
            for value, condition in reversed(e.args):
                if text is None:  # the last branch: taken when no condition holds
                    text = self(value) if condition == sp.true else \
                        self.branch(condition, self(value), "float('nan')")
                else:
                    text = self.branch(condition, self(value), text)
            return text
        if type(e) in _RELATIONS:
            return f"({self(e.lhs)} {_RELATIONS[type(e)]} {self(e.rhs)})"
        if isinstance(e, sp.And):
            return "(" + " & ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sp.Or):
            return "(" + " | ".join(self(a) for a in e.args) + ")"
        if isinstance(e, sp.Not):
            return f"(~{self(e.args[0])})"
        if isinstance(e, sp.Heaviside):
            return f"_where({self(e.args[0])} > 0, 1.0, _where({self(e.args[0])} < 0, 0.0, 0.5))"
        raise UnsupportedFeature(f"the function {e.func} (in {e}), which has no torch "
                                 "counterpart here")


def function_source(name, arguments, outputs, names, shape_of):
    """The source of ``def name(arguments): ... return _stack([...], shape)``.

    Parameters
    ----------
    name : str
    arguments : str
        e.g. ``"t, x, theta"``.
    outputs : list of sympy.Expr
        The values to stack on the last axis.
    names : dict
        sympy symbol -> the code that reads it (``"x[..., 0]"``, ``"theta[3]"``, ``"t"``).
    shape_of : str
        The code of the batch shape, e.g. ``"x.shape[:-1]"``.
    """
    outputs = [sp.sympify(o) for o in outputs]
    replacements, reduced = sp.cse(outputs, symbols=sp.numbered_symbols("_c"), optimizations=None)
    table = dict(names)
    lines = [f"def {name}({arguments}):"]
    # read each used input once into a local name
    used = set().union(*(o.free_symbols for o in outputs)) if outputs else set()
    for k, (symbol, code) in enumerate(sorted(table.items(), key=lambda kv: kv[1])):
        if symbol in used:
            local = f"_v{k}"
            lines.append(f"    {local} = {code}")
            table[symbol] = local
    emit = _Emitter(table)
    # common subexpressions that are numbers (their values) or conditions, substituted
    constants = {}
    for symbol, expr in replacements:
        expr = expr.xreplace(constants)
        if isinstance(expr, (sp.logic.boolalg.Boolean, sp.core.relational.Relational)):
            # a shared condition stays in the expressions that read it: Piecewise turns
            # its And/Or/Not into nesting (Emitter.branch), which a name would hide
            constants[symbol] = expr
            continue
        value = _constant(expr)
        if value is not None:
            constants[symbol] = sp.Float(value)
            continue
        lines.append(f"    {symbol} = {emit(expr)}")
        table[symbol] = str(symbol)
    values = ", ".join(emit(o.xreplace(constants)) for o in reduced)
    lines.append(f"    return _stack([{values}], {shape_of})")
    return "\n".join(lines) + "\n"
