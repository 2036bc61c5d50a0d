"""A model integrated by CVODES in one C call: the forward solve without Python.

scipy's integrators call back into Python for every evaluation of the field (and LSODA, BDF
and Radau step from Python in ``solve_ivp``), which puts a floor of several microseconds a
call under even a compiled numpy field. Here the recorded torch program of a model
(:func:`~sklode.models._compile.compile_field`) is unrolled to scalar assignments, the field
and its two Jacobians differentiated in forward mode so that only their nonzero entries are
computed (:class:`~sklode.models._program.Program`), and reaches a fixed CVODES driver
(``_cvodes_driver.c``) one of two ways:

- ``"tape"``: encoded as register instructions (:mod:`sklode.models._tape`) for the driver
  and interpreter the install compiles into the package with SUNDIALS
  (``_sundials/lib/libsklode_tape``). No compiler at run time; a new model costs the
  encoding only.
- ``"c"``: written as C, linked with the driver against SUNDIALS (the package's static
  library, ``$SUNDIALS_DIR``, conda's ``sundials`` or Debian's ``libsundials-dev``),
  compiled once per model with the system's C compiler (``cc`` or ``$CC``) and kept in a
  cache folder.

Either way :mod:`ctypes` loads one function that solves the whole trajectory, with forward
sensitivities when asked. ``$SKLODE_CVODES_MODEL`` picks a route (``tape`` or ``c``);
otherwise the tape where the package's library is there (measured as fast, see
benchmarks/results/install.md), else C. Where neither works, or ``rhs`` cannot be recorded
(Python control flow on a value), :func:`native_solver` returns None with the reason, and
callers keep the scipy path. Every model is checked against the numpy field and Jacobians at
random points before it is used.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from ._compile import _pointwise_inputs, _Recorder, _Unsupported
from ._program import CannotWrite, Program
from ._tape import bind_entries, encode, tape_library

__all__ = ["NativeSolver", "native_solver", "native_unavailable_reason", "ROUTES"]

#: The two ways a model reaches CVODES, in the order "auto" tries them.
ROUTES = ("tape", "c")

logger = logging.getLogger("sklode")

_DRIVER = Path(__file__).with_name("_cvodes_driver.c")
# the C of a model without events (the driver reads NEVENTS and model_event_values)
_NO_EVENTS = ("#define NEVENTS 0\nstatic void model_event_values(double t, const double *x, "
              "const double *p, double *g) {\n    (void)t; (void)x; (void)p; (void)g;\n}\n")
_LIBRARIES = ["sundials_cvodes", "sundials_nvecserial", "sundials_sunmatrixdense",
              "sundials_sunlinsoldense"]
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
    _compiled_unavailable_reason()
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


def _klu_linked():
    """Whether the SUNDIALS a model's C is linked with has KLU: the package's own build
    (build_tools/bundle_cvodes.py) does; a system's is not relied on."""
    prefix = _sundials_prefix()
    version = None if prefix is None else Path(prefix) / "VERSION"
    return (prefix is not None and Path(prefix).resolve() == BUNDLED.resolve()
            and version.is_file() and "KLU" in version.read_text())


_UNAVAILABLE = {}  # reason by key, so that a missing compiler is looked for once


def _routes():
    """The routes to try, in order: the one ``$SKLODE_CVODES_MODEL`` names; C first where
    ``$SUNDIALS_DIR`` asks for another SUNDIALS (the package's solver is linked with its
    own); else :data:`ROUTES`."""
    asked = os.environ.get("SKLODE_CVODES_MODEL", "").strip().lower()
    if asked and asked not in ROUTES:
        raise ValueError(f"SKLODE_CVODES_MODEL={asked!r}: it is one of {', '.join(ROUTES)}")
    if asked:
        return (asked,)
    return ("c", "tape") if os.environ.get("SUNDIALS_DIR") else ROUTES


def cvodes_in_words():
    """How models reach CVODES here, in words (for :func:`sklode.show_versions`), or None
    where they cannot.

    Returns
    -------
    str or None
    """
    for route in _routes():
        if route_unavailable_reason(route) is not None:
            continue
        if route == "tape":
            version = (BUNDLED / "VERSION").read_text().strip()
            return (f"SUNDIALS {version}, built with the package ({BUNDLED}); each model "
                    "runs as instructions in its precompiled solver, no C compiler needed")
        return f"{sundials_location()} on first use"
    return None


def route_unavailable_reason(route):
    """Why ``route`` ("tape" or "c") cannot be used here, or None."""
    if route == "tape":
        return tape_library(BUNDLED / "lib")[1]
    return _compiled_unavailable_reason()


def native_unavailable_reason():
    """Why no model can be solved by CVODES here, or None.

    Returns
    -------
    str or None
        A sentence naming what is missing (the package's CVODES solver, a C compiler,
        SUNDIALS) and how to get it.
    """
    reasons = [route_unavailable_reason(route) for route in _routes()]
    return None if None in reasons else "; ".join(reasons)


def _compiled_unavailable_reason():
    """Why no model can be compiled here, or None."""
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
    reason = _compiled_unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
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
    return bind_entries(ctypes.CDLL(str(library)), "sklode_") + (str(library),)


class NativeSolver:
    """A model's CVODES solve in one C call (built by :func:`native_solver`).

    Attributes
    ----------
    n_states, n_params : int
    param_in_field : ndarray of bool (n_params,)
        Whether the field depends on each parameter (the others' sensitivities are zero
        and are not integrated).
    param_read : ndarray of bool (n_params,)
        Whether the solve reads each parameter at all: the field's, and those its switching
        functions and event triggers read (a switch at a parameter's time). Two solves
        from one start whose parameters agree on these are the same solve.
    band : (int, int)
        Diagonals of ``df/dx`` below and above the main one that its LU works on
        (``n_states - 1`` each when dense).
    sparse : bool
        Whether the Newton iterations factor with SuiteSparse's KLU on the nonzero entries
        of ``df/dx`` (:func:`~sklode.models._band.use_sparse_lu`) rather than the dense or
        banded LU.
    n_roots : int
        Switching functions of the field (comparisons of values that change along the
        solution).
    switch_times : ndarray or None
        Where every switch compares time with a constant: those times (a field without
        switches: empty); else None.
    n_events : int
        The model's events whose triggers CVODES' root finding locates (:meth:`locate`); 0
        where the model has none or they could not be recorded (then they are located on
        LSODA's dense output).
    library : str
        Path of the shared library.
    route : {"tape", "c"}
        How the model reaches the driver (see the module's docstring).
    """

    def __init__(self, solve, evaluate, adjoint, locate, event_values, library, n_states,
                 n_params, param_in_field, band=None, tape=None, sparse=False, n_roots=0,
                 switch_times=None, n_events=0, param_read=None):
        self._solve, self._evaluate, self._adjoint = solve, evaluate, adjoint
        self._locate, self._event_values = locate, event_values
        self.n_events = int(n_events)
        self.library = library
        self.n_states, self.n_params = n_states, n_params
        self.param_in_field = param_in_field
        self.param_read = np.ones(n_params, dtype=bool) if param_read is None else param_read
        self.band = (n_states - 1, n_states - 1) if band is None else band
        self.sparse = bool(sparse)
        self.n_roots = int(n_roots)
        self.switch_times = switch_times
        self.route = "c" if tape is None else "tape"
        self._tape = tape  # the encoded model, kept alive while its pointer is used
        self._model = () if tape is None else (tape.pointer,)

    def evaluate(self, t, x, theta):
        """The C field, ``df/dx`` and ``df/dtheta`` at one point (for checks and tests).

        Returns
        -------
        (ndarray (n_states,), ndarray (n_states, n_states), ndarray (n_states, n_params))
        """
        n, p = self.n_states, self.n_params
        dx, jx, jp = np.empty(n), np.empty((n, n)), np.empty((n, max(p, 1)))
        self._evaluate(*self._model, float(t), np.ascontiguousarray(x, dtype=np.float64),
                       np.ascontiguousarray(theta, dtype=np.float64), dx, jx, jp)
        return dx, jx, jp[:, :p]

    def __call__(self, t0, x0, theta, times, *, rtol, atol, max_steps=500_000, blowup=np.inf,
                 sens_x0=False, sens_params=None, s0=None, doses=None):
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
        doses : sequence of (float, int, float), optional
            Boluses ``(time, state, amount)`` after ``t0``, in time order, added in the
            solve itself (a restart at each; one at an output time acts after it; the
            sensitivities are continuous across them).

        Returns
        -------
        states : ndarray (n_times, n_states)
        sens : ndarray (n_times, n_states, q) or None
        info : dict
            ``t_reached``, ``n_rhs``, ``n_steps``, ``flag`` (0 on success, else CVODES'
            flag), ``failure`` (None, "blowup", "nonfinite" or "cvodes"), ``x_nonfinite``
            (the state where the field was last not finite, for "nonfinite").
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
        info = np.zeros(4 + n)  # then the state where the field was last non-finite
        flag = self._solve(*self._model, float(t0), np.ascontiguousarray(x0, dtype=np.float64),
                           np.ascontiguousarray(theta, dtype=np.float64), times.size, times,
                           float(rtol), np.ascontiguousarray(np.broadcast_to(
                               np.asarray(atol, dtype=np.float64), (n,))),
                           int(max_steps), float(blowup), q,
                           columns if q else np.zeros(1, dtype=np.intc), s0, states, sens, info,
                           *_dose_arrays(doses))
        failure = (None, "blowup", "nonfinite", "cvodes")[int(info[3])] if flag else None
        result = {"t_reached": float(info[0]), "n_rhs": int(info[1]), "n_steps": int(info[2]),
                  "flag": int(flag), "failure": failure,
                  "x_nonfinite": info[4:].copy() if failure == "nonfinite" else None}
        return states, (np.swapaxes(sens[:, :q], 1, 2) if q else None), result

    def adjoint(self, t0, x0, theta, times, jumps, *, rtol, atol, max_steps=500_000,
                blowup=np.inf):
        """The states at ``times`` and the gradient of a sum of terms in them by CVODES'
        adjoint: one forward solve with checkpoints, one backward solve of
        ``lambda' = -(df/dx)^T lambda`` with ``lambda`` jumping by ``jumps[k]`` at
        ``times[k]``, and its quadrature ``-(df/dtheta)^T lambda``.

        The field's switches keep the values they take just after ``t0`` (no root is
        searched): a caller whose switches change inside ``(t0, times[-1])`` solves in
        segments between them (:attr:`switch_times`), the gradient in each segment's start
        carried as the next earlier segment's last jump.

        Parameters
        ----------
        t0, x0, theta, times, rtol, atol, max_steps, blowup
            As in :meth:`__call__`; ``times[-1] > t0``.
        jumps : ndarray (n_times, n_states)
            ``dL/dx`` at each time, at the states there.

        Returns
        -------
        states : ndarray (n_times, n_states)
            Without switches, equal to the bit to :meth:`__call__`'s (the same steps).
        grad_x0 : ndarray (n_states,)
        grad_theta : ndarray (n_params,)
        info : dict
            As :meth:`__call__`'s (the forward solve's counts).

        Raises
        ------
        ValueError
            For ``times`` not past ``t0``.
        """
        n, p = self.n_states, self.n_params
        times = np.ascontiguousarray(times, dtype=np.float64)
        if times.size == 0 or times[-1] <= t0:
            raise ValueError("the CVODES adjoint needs a last time after t0")
        states = np.empty((times.size, n))
        grad_x0, grad_theta = np.empty(n), np.empty(max(p, 1))
        info = np.zeros(4 + n)
        flag = self._adjoint(*self._model, float(t0),
                             np.ascontiguousarray(x0, dtype=np.float64),
                             np.ascontiguousarray(theta, dtype=np.float64), times.size, times,
                             float(rtol), np.ascontiguousarray(np.broadcast_to(
                                 np.asarray(atol, dtype=np.float64), (n,))),
                             int(max_steps), float(blowup),
                             np.ascontiguousarray(jumps, dtype=np.float64), states, grad_x0,
                             grad_theta, info)
        failure = (None, "blowup", "nonfinite", "cvodes")[int(info[3])] if flag else None
        result = {"t_reached": float(info[0]), "n_rhs": int(info[1]), "n_steps": int(info[2]),
                  "flag": int(flag), "failure": failure,
                  "x_nonfinite": info[4:].copy() if failure == "nonfinite" else None}
        return states, grad_x0, grad_theta[:p], result


    def locate(self, t0, x0, theta, t_end, *, rtol, atol, max_steps=500_000, blowup=np.inf):
        """Where the first of the model's events fires after ``t0``: CVODES' root finding
        on the triggers (rising crossings of zero), the field's switches restarting the
        solve as in :meth:`__call__`.

        Returns
        -------
        tau : float or None
            The time the first trigger crosses zero rising, None where none does before
            ``t_end``.
        which : list of int
            The events whose triggers cross there.
        info : dict
            As :meth:`__call__`'s, and ``state``: the state at ``tau`` (at ``t_end`` where
            no trigger crosses).
        """
        n = self.n_states
        stop, fired, info = np.empty(1 + n), np.zeros(max(self.n_events, 1)), np.zeros(4 + n)
        flag = self._locate(*self._model, float(t0), np.ascontiguousarray(x0, dtype=np.float64),
                            np.ascontiguousarray(theta, dtype=np.float64), float(t_end),
                            float(rtol), np.ascontiguousarray(np.broadcast_to(
                                np.asarray(atol, dtype=np.float64), (n,))),
                            int(max_steps), float(blowup), stop, fired, info)
        failure = (None, "blowup", "nonfinite", "cvodes")[int(info[3])] if flag else None
        result = {"t_reached": float(info[0]), "n_rhs": int(info[1]), "n_steps": int(info[2]),
                  "flag": int(flag), "failure": failure,
                  "x_nonfinite": info[4:].copy() if failure == "nonfinite" else None,
                  "state": stop[1:].copy()}
        which = [int(k) for k in np.flatnonzero(fired[:self.n_events])]
        return (float(stop[0]) if which else None), which, result

    def event_values(self, t, x, theta):
        """The C triggers at one point (for checks and tests): ndarray (n_events,)."""
        g = np.empty(max(self.n_events, 1))
        self._event_values(*self._model, float(t), np.ascontiguousarray(x, dtype=np.float64),
                           np.ascontiguousarray(theta, dtype=np.float64), g)
        return g[:self.n_events]


def _dose_arrays(doses):
    """``(n, times, states, amounts)`` of boluses for the C solve (arrays of one unused
    element where there are none)."""
    if not doses:
        return 0, np.zeros(1), np.zeros(1, dtype=np.intc), np.zeros(1)
    times = np.ascontiguousarray([d[0] for d in doses], dtype=np.float64)
    if np.any(np.diff(times) < 0):
        raise ValueError("The doses given to the compiled solve must be in time order.")
    return (len(doses), times, np.ascontiguousarray([d[1] for d in doses], dtype=np.intc),
            np.ascontiguousarray([d[2] for d in doses], dtype=np.float64))


def _event_program(model):
    """The program of the model's events' triggers (their values stacked), or None where
    it has none or they cannot be written for CVODES (Python control flow on a value, a
    comparison of varying values inside a trigger: their crossings are then located on
    LSODA's dense output)."""
    events = tuple(getattr(model, "events", None) or ())
    if not events:
        return None
    inputs = _pointwise_inputs(model.n_states, model.n_params)
    recorder = _Recorder(inputs)
    try:
        with torch.inference_mode(), recorder:
            out = torch.stack([event.trigger(inputs["t"], inputs["x"], inputs["theta"])
                               for event in events])
        program = Program(recorder, inputs["x"], inputs["theta"], out, prefix="e")
    except (_Unsupported, CannotWrite, TypeError, ValueError, RuntimeError) as exc:
        logger.debug("%r: its events are located on LSODA's dense output: %s", model, exc)
        return None
    if program.roots or program.output.size != len(events):
        return None
    return program


def native_solver(model, field, route=None):
    """The model's CVODES solver (:class:`NativeSolver`), or ``(None, reason)``.

    Parameters
    ----------
    model : ODEModel
    field : callable
        The compiled numpy field of ``model`` (:func:`~sklode.models._compile.compile_field`),
        whose recording is unrolled and against which the result is checked.
    route : {"tape", "c"}, optional
        How the model reaches the driver; default the first of :data:`ROUTES` (or
        ``$SKLODE_CVODES_MODEL``) that works here.

    Returns
    -------
    (NativeSolver or None, str or None)
    """
    routes = _routes() if route is None else (route,)
    reasons = [route_unavailable_reason(r) for r in routes]
    if None not in reasons:
        return None, "; ".join(reasons)
    if field is None or not hasattr(field, "recording"):
        return None, ("rhs cannot be recorded as a program of torch operations (Python "
                      "control flow on a value, or an operation the recorder does not know)")
    recorder, x, theta, out = field.recording
    n, p = model.n_states, model.n_params
    chosen = routes[reasons.index(None)]
    try:
        program = Program(recorder, x, theta, out)
        events = _event_program(model)
        n_events = 0 if events is None else events.output.size
        read = program.params_read(p)
        if getattr(model, "events", None):  # what its triggers read too
            read = read | (np.ones(p, dtype=bool) if events is None else
                           events.params_read(p))
        if chosen == "tape":
            tape = encode(program, n, p, events=events)
            solver = NativeSolver(*tape_library(BUNDLED / "lib")[0], n, p,
                                  program.params_in_field(p), tape.band, tape=tape,
                                  sparse=tape.sparse, n_roots=len(program.roots),
                                  switch_times=program.switch_times(), n_events=n_events,
                                  param_read=read)
        else:
            source = (program.source(n, p, klu=_klu_linked())
                      + (_NO_EVENTS if events is None else events.event_source())
                      + _DRIVER.read_text())
            solver = NativeSolver(*_build(source), n, p, program.params_in_field(p),
                                  program.band, sparse=program.sparse,
                                  n_roots=len(program.roots),
                                  switch_times=program.switch_times(), n_events=n_events,
                                  param_read=read)
    except CannotWrite as exc:
        return None, f"the program of rhs cannot be unrolled for CVODES: {exc}"
    except (RuntimeError, OSError) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    problem = _check(model, field, solver)
    if problem:
        return None, problem
    return solver, None


def _check(model, field, solver, n_points=4):
    """A reason the CVODES model disagrees with the numpy field and Jacobians at random
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
                return (f"the CVODES model ({solver.route}) differs from the numpy field at a "
                        "random point")
        if solver.n_events:  # the triggers too, against the events' own
            expected = np.array([event.value(t, x, theta) for event in model.events])
            if not np.allclose(solver.event_values(t, x, theta), expected, rtol=1e-10,
                               atol=1e-12 * max(float(np.max(np.abs(expected))), 1e-300)):
                return (f"the CVODES model's event triggers ({solver.route}) differ from the "
                        "model's at a random point")
        checked += 1
    if checked == 0:
        return "no random point where the CVODES model could be compared"
    return None
