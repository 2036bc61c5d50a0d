"""A model's assignments as instructions for the CVODES driver compiled once at install.

:class:`~sklode.models._program.Program` unrolls ``rhs`` and its Jacobians to scalar
assignments; here each assignment becomes register instructions (``_tape_model.c`` runs
them), so that a model never seen before is solved by CVODES without a C compiler: the
library ``libsklode_tape`` is built with the package (build_tools/bundle_cvodes.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import struct
import sys
from pathlib import Path

import numpy as np

from ._program import OPERATIONS

__all__ = ["Tape", "encode", "tape_library"]

_CODE = {kind: k for k, kind in enumerate(OPERATIONS)}
_int_p = ctypes.POINTER(ctypes.c_int)
_double_p = ctypes.POINTER(ctypes.c_double)


class _TapeStruct(ctypes.Structure):
    """``sk_tape`` of _tape_model.c, field for field."""

    _fields_ = ([(f, ctypes.c_int) for f in ("nx", "np", "nroots", "nnz_x", "nnz_p",
                                             "band_lower", "band_upper", "n_registers",
                                             "sparse", "csc_nnz")]
                + [(f, _int_p) for f in ("pos", "jx_row", "jx_col", "jp_row", "jp_col",
                                         "csc_start", "csc_row", "csc_slot")]
                + [(f, _double_p) for f in ("switch_above", "switch_below", "registers")]
                + [(f, ctypes.c_int) for f in ("n_value", "n_root_value", "n_jx", "n_jp",
                                               "n_root")]
                + [(f, _int_p) for f in ("value", "jx", "jp", "root", "f_out", "jx_out",
                                         "jp_out", "g_out", "sw_out")]
                + [(f, ctypes.c_int) for f in ("nevents", "n_event")]
                + [(f, _int_p) for f in ("event", "e_out")])


class _Encoder:
    """Registers for the leaves, and instructions for the operations, of one program."""

    def __init__(self, n_states, n_params):
        self.n_states = n_states
        self.constants = {}  # bits of the value -> register
        self.initial = [0.0] * (1 + n_states + n_params)
        self.names = {}  # assigned name -> register
        self.segments = {}  # segment -> list of instructions

    def _constant(self, value):
        key = struct.pack("<d", value)
        if key not in self.constants:
            self.constants[key] = len(self.initial)
            self.initial.append(value)
        return self.constants[key]

    def register(self, e, segment, memo):
        """The register holding ``e`` once ``segment``'s instructions have run."""
        kind = e.op
        if kind == "t":
            return 0
        if kind == "x":
            return 1 + e.args[0]
        if kind == "p":
            return 1 + self.n_states + e.args[0]
        if kind == "const":
            return self._constant(e.args[0])
        if kind == "name":
            return self.names[e.args[0]]
        if id(e) in memo:  # a subexpression met twice in this segment (and kept alive by e)
            return memo[id(e)][0]
        if kind == "switch":
            direct, index = e.args
            operands = [self.register(direct, segment, memo), 0, index]
        else:
            operands = [self.register(a, segment, memo) for a in e.args]
            operands += [0] * (3 - len(operands))
        target = len(self.initial)
        self.initial.append(0.0)
        self.segments.setdefault(segment, []).append([_CODE[kind], target, *operands])
        memo[id(e)] = (target, e)
        return target

    def assign(self, lines, segment):
        memo = {}
        for label, e in lines:
            self.names[label] = self.register(e, segment, memo)

    def instructions(self, segment, split=0):
        """The segment's instructions, grouped (:func:`_grouped`) before and after its first
        ``split`` separately (those run alone for the switching functions)."""
        rows = self.segments.get(segment, [])
        rows = _grouped(rows[:split]) + _grouped(rows[split:])
        return np.ascontiguousarray(np.asarray(rows, dtype=np.intc).reshape(len(rows), 5))


def _grouped(rows):
    """``rows`` (instructions in an order that computes each operand first) reordered so that
    instructions of one operation follow each other: by their depth in the expression graph,
    then their operation. The interpreter's dispatch is one indirect branch per instruction;
    in the order of the assignments a reaction network alternates ``mul`` and ``add`` almost
    at random and the branch predictor misses about every other one (Chen_MSB2009, 500
    states: 11 ns an instruction). Instructions of equal depth do not read each other, so
    any order among them gives the same values to the bit."""
    if not rows:
        return []
    depth = {}
    keys = []
    for row in rows:
        op, target = row[0], row[1]
        # a switch's third field is its index, not a register; a select's is its operand
        operands = row[2:5] if op == _CODE["select"] else row[2:4]
        d = 1 + max(depth.get(r, 0) for r in operands)
        depth[target] = d
        keys.append((d, op))
    order = sorted(range(len(rows)), key=keys.__getitem__)
    return [rows[k] for k in order]


class Tape:
    """A model encoded for ``libsklode_tape``: the arrays and the struct pointing at them
    (the arrays are kept here, alive as long as the struct is used)."""

    def __init__(self, program, n_states, n_params, klu=True, events=None):
        enc = _Encoder(n_states, n_params)
        # the value lines the switching functions need come first, so that they run alone
        needed = program.root_lines()
        enc.assign(program.value_lines[:needed], "value")
        n_root_value = len(enc.segments.get("value", []))
        enc.assign(program.value_lines[needed:], "value")
        memo = {}
        f_out = [enc.register(e, "value", memo) for e in program.output]
        position = program.lu_order(n_states, klu)  # the package's SUNDIALS has KLU
        self.band, self.sparse = program.band, program.sparse
        start, row, slot = program.columns if program.sparse else ([0], [0], [0])
        arrays = {"f_out": f_out, "csc_start": start, "csc_row": row, "csc_slot": slot}
        for seed, label in (("x", "jx"), ("p", "jp")):
            enc.assign(program.tangent_lines[seed], label)
            rows, cols, values = program.sparsity(seed)
            memo = {}
            arrays[f"{label}_out"] = [enc.register(e, label, memo) for e in values]
            arrays[f"{label}_row"], arrays[f"{label}_col"] = rows, cols
        memo = {}
        arrays["g_out"] = [enc.register(r[1], "root", memo) for r in program.roots]
        arrays["sw_out"] = [enc.names[program.value_lines[r[0]][0]] for r in program.roots]
        if events is not None:  # the triggers' own program, in the same register file
            enc.assign(events.value_lines, "event")
            memo = {}
            arrays["e_out"] = [enc.register(e, "event", memo) for e in events.output]
        else:
            arrays["e_out"] = []
        self._arrays = {k: np.ascontiguousarray(v, dtype=np.intc) if len(v)
                        else np.zeros(1, dtype=np.intc) for k, v in arrays.items()}
        self._arrays["pos"] = None if position is None else np.ascontiguousarray(
            position, dtype=np.intc)
        for label, column in (("switch_above", 2), ("switch_below", 3)):
            self._arrays[label] = np.ascontiguousarray(
                [r[column] for r in program.roots] or [0.0], dtype=np.float64)
        self._arrays["registers"] = np.ascontiguousarray(enc.initial, dtype=np.float64)
        segments = {s: enc.instructions(s, n_root_value if s == "value" else 0)
                    for s in ("value", "jx", "jp", "root", "event")}
        self._arrays.update(segments)
        self.n_instructions = sum(len(v) for v in segments.values())
        self.n_registers = len(enc.initial)
        self.struct = _TapeStruct(
            nx=n_states, np=n_params, nroots=len(program.roots),
            nnz_x=len(arrays["jx_out"]), nnz_p=len(arrays["jp_out"]),
            band_lower=self.band[0], band_upper=self.band[1], n_registers=self.n_registers,
            sparse=int(self.sparse), csc_nnz=len(row),
            n_value=len(segments["value"]), n_root_value=n_root_value,
            n_jx=len(segments["jx"]), n_jp=len(segments["jp"]), n_root=len(segments["root"]),
            nevents=len(arrays["e_out"]), n_event=len(segments["event"]),
            **{k: self._pointer(k) for k in (
                "pos", "jx_row", "jx_col", "jp_row", "jp_col", "csc_start", "csc_row",
                "csc_slot", "switch_above",
                "switch_below", "registers", "value", "jx", "jp", "root", "f_out", "jx_out",
                "jp_out", "g_out", "sw_out", "event", "e_out")})
        self.pointer = ctypes.pointer(self.struct)

    def _pointer(self, key):
        array = self._arrays[key]
        if array is None:
            return None
        kind = _double_p if array.dtype == np.float64 else _int_p
        return array.ctypes.data_as(kind)


def encode(program, n_states, n_params, klu=True, events=None):
    """The model as a :class:`Tape` (``klu=False``: never KLU, the dense or banded LU;
    ``events``: the program of its events' triggers)."""
    return Tape(program, n_states, n_params, klu, events)


_LIBRARY = {}


def _library_name():
    if sys.platform == "win32":
        return "sklode_tape.dll"
    return "libsklode_tape.dylib" if sys.platform == "darwin" else "libsklode_tape.so"


def tape_library(folder):
    """The interpreter's solve and evaluate functions from the library in ``folder``
    (``sklode/_sundials/lib``), or ``(None, reason)``.

    Returns
    -------
    ((solve, evaluate) or None, str or None)
    """
    path = folder / _library_name()
    if path not in _LIBRARY:
        _LIBRARY[path] = _load(path)
    return _LIBRARY[path]


def _load(path):
    if not path.is_file():
        return None, (f"the package's CVODES solver ({path.name}) was not built at install")
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        return None, f"the package's CVODES solver could not be loaded: {exc}"
    here = Path(__file__).with_name
    shipped = hashlib.sha256(b"".join(here(name).read_bytes() for name in (
        "_tape_model.c", "_cvodes_driver.c"))).hexdigest()
    try:
        operations, source = lib.sklode_tape_operations, lib.sklode_tape_source
    except AttributeError:  # older than the source check
        operations = source = None
    if operations is not None:
        operations.restype = source.restype = ctypes.c_char_p
    if (operations is None or operations().decode() != ",".join(OPERATIONS)
            or source().decode() != shipped):
        return None, ("the package's CVODES solver was built from other sources than this "
                      "sklode's (an install that did not rebuild it): reinstall sklode")
    return bind_entries(lib, "sklode_tape_", [ctypes.POINTER(_TapeStruct)]) + (str(path),), None


def bind_entries(lib, prefix, leading=()):
    """The driver's entry points in ``lib`` (``prefix`` + solve, evaluate, adjoint, locate,
    event_values), typed: ``leading`` arguments (the interpreter's model) before those of
    _cvodes_driver.c.

    Returns
    -------
    (solve, evaluate, adjoint, locate, event_values) : ctypes functions
    """
    double_p = np.ctypeslib.ndpointer(dtype=np.float64, flags="C_CONTIGUOUS")
    int_p = np.ctypeslib.ndpointer(dtype=np.intc, flags="C_CONTIGUOUS")
    leading = list(leading)
    start = [ctypes.c_double, double_p, double_p, ctypes.c_int, double_p, ctypes.c_double,
             double_p, ctypes.c_long, ctypes.c_double]  # t0, x0, theta, times, tolerances
    solve = getattr(lib, prefix + "solve")
    solve.argtypes = leading + start + [ctypes.c_int, int_p] + [double_p] * 4 + [
        ctypes.c_int, double_p, int_p, double_p]  # the boluses: times, states, amounts
    solve.restype = ctypes.c_int
    adjoint = getattr(lib, prefix + "adjoint")
    adjoint.argtypes = leading + start + [double_p] * 5
    adjoint.restype = ctypes.c_int
    evaluate = getattr(lib, prefix + "evaluate")
    evaluate.argtypes = leading + [ctypes.c_double] + [double_p] * 5
    evaluate.restype = None
    locate = getattr(lib, prefix + "locate")
    locate.argtypes = leading + [ctypes.c_double, double_p, double_p, ctypes.c_double,
                                 ctypes.c_double, double_p, ctypes.c_long, ctypes.c_double,
                                 double_p, double_p, double_p]
    locate.restype = ctypes.c_int
    event_values = getattr(lib, prefix + "event_values")
    event_values.argtypes = leading + [ctypes.c_double] + [double_p] * 3
    event_values.restype = None
    return solve, evaluate, adjoint, locate, event_values
