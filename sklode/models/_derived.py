"""What sklode derives from a model and keeps, in one place: :class:`Derived`, held in a single
slot of the model (``model.__dict__["_derived"]``), never part of its definition.

The compiled field and Jacobians, the CVODES solver, the sparsity pattern of ``df/dx``, the
record of :func:`~sklode.models.check_model`, and what the observation layer and the shared
solves record of the model: each is found once per model object and reused by every estimator
that fits it. Pickling and copying drop the slot (:meth:`ODEModel.__getstate__`), so a model's
pickle, its equality and scikit-learn's hash of an estimator's parameters are those of its
definition; a copy derives its own.

Why a slot and not a table keyed by the model: the derived forms hold the model's own bound
methods (the torch field is the fallback of the compiled one), so a table would keep every model
alive, and a table keyed by equality would hand one model's forms to another.
"""

from __future__ import annotations

__all__ = ["Derived", "derived"]

_SLOT = "_derived"


class Derived:
    """The derived forms of one model object (None until first built)."""

    def __init__(self):
        self.pointwise = None  # _Compiled: the numpy field, its Jacobians, the grid functions
        self.native = None  # (NativeSolver or None, why not)
        self.sparsity = None  # (rows, cols, colour, pattern) of df/dx
        self.checked_signature = None  # what check_model read when it last passed
        self.native_warned = False  # the CompilationWarning of integrator="CVODES" was given
        self.observation_grid = {}  # the compiled observation and noise models
        self.observation_reads = {}  # the parameters they read, by n_params
        self.field_reads = {}  # the parameters the field reads (shared steady states)
        self.fed = {}  # the model fed by infusions (WithInputs), by the states fed


def derived(model):
    """The :class:`Derived` of ``model``, made on first use.

    Parameters
    ----------
    model : ODEModel

    Returns
    -------
    Derived
    """
    found = model.__dict__.get(_SLOT)
    if found is None:
        found = model.__dict__.setdefault(_SLOT, Derived())  # one winner among threads
    return found
