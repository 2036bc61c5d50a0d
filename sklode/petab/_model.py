"""The ODEModel an SBML/PEtab import generates: torch source code held as a model constant.

The class needs only torch (not sympy or libsbml), so a fitted estimator holding one pickles
and loads anywhere sklode does. Its constants are the names and the generated source of
``rhs``, ``observe`` and ``noise_sd``; equal sources make equal models.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from ..models._base import ODEModel
from ..models._event import Event
from ..models._compile import parameters_read

__all__ = ["GeneratedModel"]


def _stack(values, shape):
    """The values (tensors or numbers) broadcast to ``shape`` and stacked on a last axis."""
    out = []
    for v in values:
        if not torch.is_tensor(v):
            v = torch.tensor(float(v), dtype=torch.float64)
        out.append(v.expand(shape) if v.shape != shape else v)
    return torch.stack(out, dim=-1)


_F64 = torch.zeros((), dtype=torch.float64)


def _as_tensor(v, like):
    return v if torch.is_tensor(v) else torch.as_tensor(float(v), dtype=like.dtype)


def _maximum(a, b):
    like = a if torch.is_tensor(a) else b
    return torch.maximum(_as_tensor(a, like), _as_tensor(b, like))


def _minimum(a, b):
    like = a if torch.is_tensor(a) else b
    return torch.minimum(_as_tensor(a, like), _as_tensor(b, like))


def _where(condition, a, b):
    if not torch.is_tensor(condition):
        return a if condition else b
    # float64 branches: torch.where of Python numbers follows the default dtype
    return torch.where(condition, _as_tensor(a, _F64), _as_tensor(b, _F64))


_NAMESPACE = {"torch": torch, "math": math, "_stack": _stack, "_maximum": _maximum,
              "_minimum": _minimum, "_where": _where}


def _events_of(namespace):
    """The :class:`~sklode.models.Event` objects of the generated ``event_triggers``,
    ``event_assign_<k>``, ``event_delays`` and ``EVENTS`` (none without them)."""
    triggers = namespace.get("event_triggers")
    if triggers is None:
        return ()

    def trigger_of(k):
        return lambda t, x, theta: triggers(t, x, theta)[..., k]

    delays = namespace.get("event_delays")

    def delay_of(k):
        return lambda theta: delays(theta)[..., k]

    return tuple(Event(trigger_of(k), namespace[f"event_assign_{k}"], initial_value=initial,
                       name=name, delay=delay_of(k) if delayed else None,
                       use_values_from_trigger_time=from_trigger, targets=targets)
                 for k, (initial, name, delayed, from_trigger, targets)
                 in enumerate(namespace["EVENTS"]))


class GeneratedModel(ODEModel):
    """An ODE model whose ``rhs``, ``observe`` and ``noise_sd`` are generated torch code
    (what :func:`sklode.petab.load` builds from SBML and the PEtab tables).

    Parameters
    ----------
    state_names, param_names : tuple of str
    source : str
        Python source defining ``rhs(t, x, theta)`` and, when there are observables,
        ``observe(t, x, theta)`` and ``noise_sd(t, y, theta)``, in torch operations.
    observable_names : tuple of str, optional
    default_theta : tuple of float, optional
    name : str, default=""
        The model's name (the SBML model id), shown in its repr.

    Examples
    --------
    >>> from sklode.petab import GeneratedModel
    >>> source = '''
    ... def rhs(t, x, theta):
    ...     return _stack([-theta[0] * x[..., 0]], x.shape[:-1])
    ... '''
    >>> model = GeneratedModel(("x",), ("k",), source, name="decay")
    >>> model.f(0.0, [[2.0]], [0.5])
    array([[-1.]])
    """

    def __init__(self, state_names, param_names, source, observable_names=None,
                 default_theta=None, name=""):
        self.state_names = tuple(state_names)
        self.param_names = tuple(param_names)
        self.source = source
        self.observable_names = None if observable_names is None else tuple(observable_names)
        self.default_theta = None if default_theta is None else tuple(default_theta)
        self.name = name
        namespace = dict(_NAMESPACE)
        exec(compile(source, f"<sklode generated model {name or ''}>", "exec"), namespace)
        self._rhs = namespace["rhs"]
        # piecewise steps: autograd's zero derivative in a threshold is intended
        self.check_derivatives = "_where(" not in source
        # the parameter tables' bounds span up to 16 decades, in which states of 1e11 are
        # solutions (Fujita): no blow-up guard (AMICI has none), the integrator's own
        # failures stop a solve that runs away
        self.blowup_factor = float("inf")
        self._observe = namespace.get("observe")
        self._noise = namespace.get("noise_sd")
        if self._noise is not None:
            self.noise_sd = self._noise_sd
        self.events = _events_of(namespace)
        self._offsets = namespace.get("state_offsets")
        self._initial = namespace.get("initial_offsets")
        self._initial_jacobian = namespace.get("initial_offsets_jacobian")
        at = namespace.get("INITIAL_OFFSETS_JACOBIAN_AT")
        self._initial_jacobian_at = None if at is None else tuple(np.array(at).T)

    def __repr__(self):
        return (f"GeneratedModel(name={self.name!r}, states={len(self.state_names)}, "
                f"params={len(self.param_names)}, observables="
                f"{len(self.observable_names or ())})")

    def __hash__(self):
        return hash((type(self).__name__, self.source, self.state_names, self.param_names))

    def __getstate__(self):  # rebuilt from the source: compiled functions do not pickle
        return {k: getattr(self, k) for k in ("state_names", "param_names", "source",
                                              "observable_names", "default_theta", "name")}

    def __setstate__(self, state):
        self.__init__(**state)

    def rhs(self, t, x, theta):
        return self._rhs(t, x, theta)

    def observe(self, t, x, theta):
        if self._observe is None:
            return x
        return self._observe(t, x, theta)

    def _noise_sd(self, t, y, theta):
        return self._noise(t, y, theta)

    def state_offsets(self, theta):
        """The offsets of states integrated as displacements from an initial value that
        depends on the parameters (zero for the others), or None when there are none."""
        if self._offsets is None:
            return None
        theta = torch.as_tensor(np.asarray(theta, dtype=np.float64))
        return self._offsets(theta).numpy()

    def _remembered(self, kind, theta, compute):
        """``compute(theta)`` kept for the last few ``theta``: a PEtab problem's experiments
        ask for their condition's initial values at every evaluation, and dozens of them
        share a few conditions (Bruno: 42 experiments, 6 conditions; a torch call each)."""
        theta = np.asarray(theta, dtype=np.float64)
        memory = self.__dict__.setdefault("_memory", {})
        # keyed by the parameters the initial values read: experiments of one condition
        # differ in observable and noise parameters only
        reads = self._initial_reads()
        key = (kind, (theta if reads is None else theta[reads]).tobytes())
        value = memory.get(key)  # (one lookup: safe beside another thread's clear)
        if value is None:
            if len(memory) >= 64:
                memory.clear()
            value = memory[key] = compute(torch.as_tensor(theta))
        return value.copy()

    def _initial_reads(self):
        """The parameters the initial values read, from their recorded program (found on
        first use and kept), or None where it cannot be recorded (then all)."""
        if "_initial_read" not in self.__dict__:
            read = parameters_read(lambda t, x, theta: self._initial(theta),
                                   len(self.state_names), len(self.param_names))
            self._initial_read = None if read is None else np.flatnonzero(read)
        return self._initial_read

    def initial_offsets(self, theta):
        """The initial values that depend on the parameters (zero for the other states), or
        None when no initial value does."""
        if self._initial is None:
            return None
        return self._remembered("offsets", theta, lambda th: self._initial(th).numpy())

    def initial_offsets_jacobian(self, theta):
        """``d initial_offsets / d theta``: the derivatives sympy wrote at import
        (``initial_offsets_jacobian`` in the source), or autograd of ``initial_offsets``."""
        return self._remembered("jacobian", theta, self._offsets_jacobian)

    def _offsets_jacobian(self, theta):
        if self._initial_jacobian is not None:
            jacobian = np.zeros((len(self.state_names), len(self.param_names)))
            jacobian[self._initial_jacobian_at] = self._initial_jacobian(theta).numpy()
            return jacobian
        return torch.autograd.functional.jacobian(self._initial, theta).numpy()
