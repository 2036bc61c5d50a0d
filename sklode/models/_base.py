"""The one model definition every sklode estimator takes.

A model is written once, as a torch vector field ``rhs(t, x, theta)`` that is batched over
leading axes. Everything the three methods need is derived from it here, vectorised over all
time points in one call with :mod:`torch.func`:

* :meth:`ODEModel.f` -- the vector field on numpy input (for scipy integrators);
* :meth:`ODEModel.jac_x` and :meth:`ODEModel.jac_theta` -- Jacobians per time point;
* :meth:`ODEModel.vjp` -- vector-Jacobian products (reverse mode, one pass);
* :meth:`ODEModel.affine_split` -- ``f = f0(x) + F1(x) @ theta`` when ``f`` is linear in
  ``theta`` (checked numerically; :class:`NotLinearInThetaError` otherwise).

The numpy <-> torch boundary lives in this module only: all public methods take and return
float64 ndarrays.
"""

from __future__ import annotations

import inspect
import threading
from typing import NamedTuple

import numpy as np
import scipy.sparse
import torch

from ..exceptions import ModelError, NotLinearInThetaError
from ._compile import compile_field, grid_functions
from ._native import native_solver

__all__ = ["ODEModel", "FunctionModel", "HeldParameters", "ScaledStates", "check_model"]

_DTYPE = torch.float64

# jac_x replicates the batch once per state up to this many states (one backward pass);
# beyond it, one backward pass per state is cheaper (measured on Lorenz-96, d = 40).
_REPLICATE_MAX_STATES = 12
# jac_theta loops the compiled pointwise Jacobian over the points up to this many states
# (measured on 150 points: SEIRD 2.1 ms against torch's 2.5, Lorenz-96 with 10 states 4.7
# against 0.9); beyond it torch's vmap is faster.
_POINTWISE_MAX_STATES = 8
# From this many states, df/dtheta of models with fewer parameters than states is taken in
# forward mode (one product per parameter on the whole grid).
_FORWARD_MODE_MIN_STATES = 64


def _as_tensor(a):
    """float64 torch view of an array-like (no copy when already float64, contiguous, writable).

    Read-only inputs (memmaps, cached data) are copied: torch cannot wrap them safely, and
    inputs are never written to.
    """
    a = np.ascontiguousarray(a, dtype=np.float64)
    if not a.flags.writeable:
        a = a.copy()
    return torch.from_numpy(a)


def _time_tensor(t, batch_shape):
    """Time as a tensor broadcastable against ``x[..., 0]``."""
    t = np.asarray(t, dtype=np.float64)
    if t.ndim == 0:
        return torch.tensor(float(t), dtype=_DTYPE)
    return _as_tensor(np.broadcast_to(t, batch_shape))


class _Compiled(NamedTuple):
    """What :meth:`ODEModel.pointwise_field` and the Jacobians use: callables for one state
    (``field``, ``jacobian``: compiled, or the torch methods), the compiled ``df/dtheta``
    for one state and the grid functions ``(f, jac_x, jac_theta)``, each None when absent."""

    field: object
    jacobian: object
    jacobian_theta: object
    grid: object


class _Building(_Compiled):
    """The torch path, published on a model while its field is being compiled (the
    compiler's checks evaluate the model through it); other threads wait for the result."""


# One lock for every model's compilation: a thread that finds a model being compiled by
# another waits for the compiled field instead of taking the torch placeholder, which
# would also have made its CVODES solver None for good (a shared model fitted in threads
# then solved some fits on LSODA).
_COMPILE_LOCK = threading.RLock()


def _guarded(compiled, torch_path):
    """``compiled``, falling back to ``torch_path`` for a call where Python's math raises
    (a domain or range error) where torch returns inf or nan."""
    def call(t, x, theta):
        try:
            return compiled(t, x, theta)
        except (ArithmeticError, ValueError):
            return torch_path(t, x, theta)
    call.compiled = compiled
    return call


def sum_by_index(values, index, size):
    """``out[..., i] = sum of values[..., k] over the k with index[k] == i``.

    The entries of a sparse Jacobian (:meth:`ODEModel.jac_x_sparse`) gathered per equation
    (``index = rows``) or per state (``cols``), as one sparse matrix product.

    Parameters
    ----------
    values : ndarray of shape (..., nnz)
    index : ndarray of int of shape (nnz,)
    size : int

    Returns
    -------
    ndarray of shape (..., size)
    """
    gather = scipy.sparse.csr_matrix((np.ones(index.size), index, np.arange(index.size + 1)),
                                     shape=(index.size, size))
    flat = values.reshape(-1, index.size)
    return np.asarray(flat @ gather).reshape(values.shape[:-1] + (size,))


class ODEModel:
    """Parametric ordinary differential equation ``x'(t) = rhs(t, x, theta)``.

    Subclass it and define three names and one method; everything else (Jacobians,
    vector-Jacobian products, the affine split used by WENDy and BCD-prox) is derived.

    Attributes
    ----------
    state_names : tuple of str
        Names of the state components, in the order of the last axis of ``x``.
    param_names : tuple of str
        Names of the entries of ``theta``, in order.
    default_theta : tuple of float, optional
        The initial guess estimators use when ``theta0=None``. Missing means all ones.

    Notes
    -----
    The method to define is ``rhs(t, x, theta)``, in torch operations only. ``x`` has shape
    ``(..., n_states)``, ``theta`` shape ``(n_params,)``, ``t`` is a tensor broadcastable
    against ``x[..., 0]``; return a tensor of the same shape as ``x``. Each time point must
    depend only on its own row (the library evaluates whole grids in one call).

    Model constants (a population size, a dimension) are constructor arguments stored under
    the same name, as for scikit-learn estimators: they make the ``repr``, equality and
    pickling work without further code.

    Examples
    --------
    >>> import torch
    >>> from sklode import ODEModel
    >>> class Decay(ODEModel):
    ...     state_names = ("x",)
    ...     param_names = ("k",)
    ...     def rhs(self, t, x, theta):
    ...         return -theta[0] * x
    >>> Decay().f(0.0, [[2.0], [4.0]], [0.5])
    array([[-1.],
           [-2.]])
    >>> Decay().is_linear_in_theta()
    True
    """

    state_names: tuple = ()
    param_names: tuple = ()
    default_theta: tuple | None = None
    #: Names of what the instrument reads (the columns of ``Y``); None: the states themselves.
    #: A model that declares them defines :meth:`observe`.
    observable_names: tuple | None = None
    #: Optional ``noise_sd(t, y, theta)``: the standard deviation of every observation, in
    #: torch operations, with ``y`` the predicted observables ``(..., n_observables)``;
    #: None: the estimator's ``sigma`` and ``noise_kind`` give it. Its parameters are
    #: ordinary entries of ``param_names``, fitted by maximum likelihood with the others.
    noise_sd = None
    #: Whether :func:`check_model` compares autograd with finite differences; a model with
    #: steps (a dose switched on at a fitted time) sets False: autograd's derivative in the
    #: switching time is 0 by design, a finite difference across the step is not.
    check_derivatives = True
    #: A solve stops as blowing up (:class:`~sklode.exceptions.IntegrationError`) when the
    #: state's norm passes this many times its start (or 1): no trajectory of a physical
    #: model grows by 1e8. A model whose parameters may span many decades (a PEtab
    #: problem's bounds: states of 1e11 are solutions there) sets ``inf`` and relies on the
    #: integrator's own failures (non-finite values, the step budget).
    blowup_factor = 1e8

    def rhs(self, t, x, theta):  # pragma: no cover - abstract
        """The vector field, in torch operations: define it in every model.

        Parameters
        ----------
        t : torch.Tensor
            Time, broadcastable against ``x[..., 0]``.
        x : torch.Tensor of shape (..., n_states)
            States; each leading index is an independent point.
        theta : torch.Tensor of shape (n_params,)
            Parameters.

        Returns
        -------
        torch.Tensor of shape (..., n_states)
            ``dx/dt`` at every point.
        """
        raise NotImplementedError(
            f"{type(self).__name__} must define rhs(self, t, x, theta) with torch operations."
        )

    def observe(self, t, x, theta):
        """What the instrument reads, in torch operations (define it with
        ``observable_names``): scaled, offset or combined states, a concentration.

        Parameters
        ----------
        t : torch.Tensor
            Time, broadcastable against ``x[..., 0]``.
        x : torch.Tensor of shape (..., n_states)
            States; each leading index is an independent point.
        theta : torch.Tensor of shape (n_params,)
            Parameters (scales, offsets and volumes are ordinary entries).

        Returns
        -------
        torch.Tensor of shape (..., n_observables)
            The observables at every point; the default returns the states themselves.
        """
        return x

    @property
    def observables(self):
        """Names of the observables: ``observable_names``, or the states without
        :meth:`observe`."""
        return self.state_names if self.observable_names is None else tuple(
            self.observable_names)

    @property
    def n_observables(self):
        """Number of observables."""
        return len(self.observables)

    @property
    def has_observation_model(self):
        """Whether the model reads its data through :meth:`observe` (not the states)."""
        return self.observable_names is not None

    @property
    def has_noise_model(self):
        """Whether the model gives the noise of its observations (:attr:`noise_sd`)."""
        return self.noise_sd is not None

    def observe_values(self, t, x, theta):
        """:meth:`observe` on numpy input.

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States.
        theta : array-like of shape (n_params,)
            Parameters.

        Returns
        -------
        ndarray of shape (..., n_observables)
            The observables (the states themselves without an observation model).
        """
        x = _as_tensor(x)
        if not self.has_observation_model:
            return x.numpy().copy()
        with torch.inference_mode():
            return self.observe(_time_tensor(t, x.shape[:-1]), x, _as_tensor(theta)).numpy()

    # ------------------------------------------------------------------ identity
    @classmethod
    def _constant_names(cls):
        """Names of the constructor arguments (the model constants), sklearn-style."""
        init = cls.__init__
        if init is object.__init__:
            return []
        sig = inspect.signature(init)
        return [
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]

    def get_constants(self):
        """The model constants (the constructor arguments).

        Returns
        -------
        dict
            Name -> value.
        """
        return {name: getattr(self, name) for name in self._constant_names()}

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_constants().items())
        return f"{type(self).__name__}({args})"

    def __eq__(self, other):
        if type(self) is not type(other):
            return NotImplemented
        return self.get_constants() == other.get_constants()

    def __hash__(self):
        return hash((type(self).__name__, repr(self)))

    # ------------------------------------------------------------------ sizes
    @property
    def n_states(self):
        """Number of state components."""
        return len(self.state_names)

    @property
    def n_params(self):
        """Number of parameters."""
        return len(self.param_names)

    def theta_guess(self):
        """The default initial guess.

        Returns
        -------
        ndarray of shape (n_params,)
            ``default_theta`` as float64, or ones when none is declared.
        """
        if self.default_theta is None:
            return np.ones(self.n_params)
        return np.array(self.default_theta, dtype=np.float64)

    def state_offsets(self, theta):
        """Offsets ``c(theta)`` of states that are displacements ``x - c(theta)`` of the
        quantities they stand for, or None (the default: the states are the quantities).

        A PEtab import integrates a species whose initial value depends on parameters as
        its displacement from that value (starting at 0). The integrators then add
        ``rtol * |c|`` to the absolute tolerance: their error test follows the quantity,
        not a displacement that starts at 0 (on which ``rtol`` alone would ask for more
        digits than float64 holds when ``c`` is 1e7).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            Parameters.

        Returns
        -------
        ndarray of shape (n_states,) or None
            The offset of each state (0 for a state that is its quantity), or None.
        """
        return None

    def initial_offsets(self, theta):
        """The part of an experiment's initial state that depends on the parameters, or
        None (the default: an experiment's ``x0`` is its whole initial state).

        A PEtab import whose species start at an expression of parameters (an initial
        amount that is fitted) sets it: a fit or a likelihood solves each experiment from
        ``x0 + initial_offsets(theta)``, its sensitivities starting at
        :meth:`initial_offsets_jacobian` (as AMICI's ``sx0``).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            Parameters (an experiment's, its conditions applied).

        Returns
        -------
        ndarray of shape (n_states,) or None
            The offset of each state (0 for a state whose start does not depend on theta).
        """
        return None

    def initial_offsets_jacobian(self, theta):
        """``d initial_offsets / d theta`` (only called when :meth:`initial_offsets` is not
        None).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            Parameters.

        Returns
        -------
        ndarray of shape (n_states, n_params)
            The derivative.
        """
        raise NotImplementedError(f"{type(self).__name__} has no initial offsets.")

    # ------------------------------------------------------------------ derived numerics
    def _call(self, t, x, theta):
        return self.rhs(_time_tensor(t, x.shape[:-1]), x, theta)

    def f(self, t, x, theta):
        """The vector field on numpy input.

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States, one per leading index (whole grids in one call).
        theta : array-like of shape (n_params,)
            Parameters.

        Returns
        -------
        ndarray of shape (..., n_states)
            ``dx/dt`` at every point.
        """
        x = _as_tensor(x)
        # inference_mode, not no_grad: 20-25 % less overhead per call, which is most of the
        # cost of a forward solve for small models (one call per integrator stage).
        with torch.inference_mode():
            return self._call(t, x, _as_tensor(theta)).numpy()

    def pointwise_field(self):
        """The vector field for one state at a time, as fast as it can be made.

        scipy's integrators call the field once per stage with one state; through torch that
        costs 40-90 us of overhead per call. The first call here records ``rhs`` as plain
        numpy code (:func:`~sklode.models._compile.compile_field`, checked against ``rhs`` at
        random points) and keeps it on the model; where ``rhs`` cannot be recorded
        (value-dependent control flow, an unsupported operation) it is :meth:`f` itself.

        Returns
        -------
        callable
            ``field(t, x, theta)`` for ``t`` a float, ``x`` of shape ``(n_states,)`` and
            ``theta`` of shape ``(n_params,)``, returning ``dx/dt`` of shape
            ``(n_states,)``.
        """
        return self._pointwise().field

    def pointwise_jacobian(self):
        """``df/dx`` for one state at a time (stiff integrators): the recorded program
        differentiated in forward mode and checked against :meth:`jac_x`, or :meth:`jac_x`.

        Returns
        -------
        callable
            ``jacobian(t, x, theta)`` returning ``(n_states, n_states)``.
        """
        return self._pointwise().jacobian

    def _pointwise(self):
        """The compiled functions (:class:`_Compiled`), built on first use."""
        cached = self.__dict__.get("_pointwise_cache")
        if cached is not None and not isinstance(cached, _Building):
            return cached
        with _COMPILE_LOCK:
            cached = self.__dict__.get("_pointwise_cache")
            if cached is not None:  # built meanwhile, or this thread's own placeholder
                return cached
            # while compiling: the checks compare to the torch path
            self.__dict__["_pointwise_cache"] = _Building(self.f, self.jac_x, None, None)
            try:
                compiled = compile_field(self)
            except BaseException:
                self.__dict__.pop("_pointwise_cache", None)
                raise
            if compiled is None:
                self._use_torch_path()
                return self.__dict__["_pointwise_cache"]
            cached = _Compiled(
                field=_guarded(compiled, self.f),
                jacobian=(self.jac_x if compiled.jacobian is None
                          else _guarded(compiled.jacobian, self.jac_x)),
                jacobian_theta=compiled.jacobian_theta,
                grid=grid_functions(self, compiled))
            self.__dict__["_pointwise_cache"] = cached
        return cached

    def native_solver(self):
        """The model compiled to C and integrated by CVODES, or None.

        Built on first use from the recorded program of :meth:`pointwise_field` (see
        :mod:`sklode.models._native`; it needs a C compiler and SUNDIALS), checked against
        the numpy field at random points, and kept on the model; ``integrator="CVODES"``
        uses it.

        Returns
        -------
        NativeSolver or None
            None where the model cannot be compiled; :meth:`native_unavailable_reason`
            then says why.
        """
        cached = self.__dict__.get("_native_cache")
        if cached is None:
            with _COMPILE_LOCK:
                cached = self.__dict__.get("_native_cache")
                if cached is None:
                    cached = native_solver(self, getattr(self._pointwise().field, "compiled",
                                                         None))
                    self.__dict__["_native_cache"] = cached
        return cached[0]

    def native_unavailable_reason(self):
        """Why :meth:`native_solver` is None, or None when it is not.

        Returns
        -------
        str or None
            A sentence naming what is missing (a C compiler, SUNDIALS) or what the generator
            cannot write (an ``rhs`` with Python control flow on a value, or an operation it does
            not know).
        """
        self.native_solver()
        return self.__dict__["_native_cache"][1]

    def _use_torch_path(self):
        """Evaluate everything through torch (as when ``rhs`` does not compile)."""
        self.__dict__["_pointwise_cache"] = _Compiled(self.f, self.jac_x, None, None)

    def __getstate__(self):
        """The instance's attributes without the compiled field (rebuilt on first use) and
        without the record of :func:`check_model` (a copy is checked once again), so that a
        model's pickle, and scikit-learn's hash of the estimator's parameters, are those of
        its definition."""
        state = self.__dict__.copy()
        state.pop("_pointwise_cache", None)
        state.pop("_native_cache", None)
        state.pop("_observation_reads", None)
        state.pop("_observation_grid", None)
        state.pop("_checked_signature", None)
        state.pop("_sparsity_cache", None)
        return state

    def jac_x(self, t, x, theta):
        """Jacobian ``df/dx`` at every point, shape ``(..., n_states, n_states)``.

        Entry ``[..., i, j]`` is ``d f_i / d x_j``, by reverse mode.

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States, one per leading index (whole grids in one call).
        theta : array-like of shape (n_params,)
            Parameters.

        Returns
        -------
        ndarray of shape (..., n_states, n_states)
            The Jacobians.
        """
        grid = self._pointwise().grid
        if grid is not None:  # the compiled program on the whole grid
            with np.errstate(all="ignore"):
                return grid[1](t, np.asarray(x, dtype=np.float64),
                               np.asarray(theta, dtype=np.float64))
        # For few states, one backward pass through a batch replicated once per output
        # component; for many, one backward pass per component. Measured faster than forward
        # mode, whose dual-tensor overhead is large for small element-wise models.
        x = _as_tensor(x)
        theta = _as_tensor(theta)
        n = x.shape[-1]
        if n <= _REPLICATE_MAX_STATES:
            xb = x.unsqueeze(0).expand((n,) + x.shape).clone().requires_grad_(True)
            t_b = _time_tensor(t, x.shape[:-1])
            with torch.enable_grad():
                out = self.rhs(t_b, xb, theta)
                selector = torch.eye(n, dtype=_DTYPE).reshape((n,) + (1,) * (x.dim() - 1) + (n,))
                (grad,) = torch.autograd.grad(out, xb, grad_outputs=selector.expand_as(out))
            return grad.movedim(0, -2).numpy()
        xr = x.clone().requires_grad_(True)
        with torch.enable_grad():
            out = self._call(t, xr, theta)
            rows = [torch.autograd.grad(out[..., i].sum(), xr, retain_graph=i < n - 1)[0]
                    for i in range(n)]
        return torch.stack(rows, dim=-2).numpy()

    def jac_x_sparsity(self, t=None, x=None, theta=None):
        """Where ``df/dx`` can be non-zero: row and column indices of its structural entries.

        Found once per model and kept: the union of the non-zero entries of :meth:`jac_x` at
        random states (uniform on [-2, 2] and on [0.5, 2]) and random parameters (uniform on
        [0.5, 2]), plus at the points given (the first grid a caller passes). An entry that
        vanishes at all of them but not elsewhere (a switch that stays off there) is found
        later by :meth:`jac_x_sparse`'s check, which then widens the pattern.

        Parameters
        ----------
        t, x, theta : optional
            Points to include, as for :meth:`jac_x` (a few of the grid's rows are used).

        Returns
        -------
        rows : ndarray of int
            Equations: ``df_rows[k] / dx_cols[k]`` may be non-zero; sorted by row.
        cols : ndarray of int
            States, sorted within each row.
        """
        cached = self.__dict__.get("_sparsity_cache")
        if cached is None:
            rng = np.random.default_rng(0)
            n = self.n_states
            points = np.vstack([rng.uniform(-2.0, 2.0, (2, n)), rng.uniform(0.5, 2.0, (2, n))])
            theta_random = rng.uniform(0.5, 2.0, self.n_params)
            with np.errstate(all="ignore"):
                J = self.jac_x(0.5, points, theta_random)
            pattern = np.any(J != 0, axis=0)  # NaN counts as non-zero
            if x is not None:
                pattern |= self._pattern_at(t, x, theta)
            cached = self._store_sparsity(pattern)
        return cached[0], cached[1]

    def _pattern_at(self, t, x, theta, rows=None):
        """Non-zero pattern of ``jac_x`` at a few rows of a grid (all of ``rows`` if given)."""
        x = np.asarray(x, dtype=np.float64).reshape(-1, self.n_states)
        times = np.broadcast_to(np.asarray(0.0 if t is None else t, dtype=np.float64),
                                x.shape[:1])
        if rows is None:
            rows = np.unique([0, x.shape[0] // 2, x.shape[0] - 1])
        with np.errstate(all="ignore"):
            J = self.jac_x(times[rows], x[rows], theta)
        return np.any(J != 0, axis=0)

    def _store_sparsity(self, pattern):
        rows, cols = np.nonzero(pattern)
        # Greedy colouring of the rows: rows of one colour share no column, so one
        # vector-Jacobian product with the sum of their unit vectors reads all of their
        # entries (Lorenz-96: 4 entries per row, 4 to 7 colours whatever the dimension).
        by_column = [[] for _ in range(pattern.shape[1])]
        for r, c in zip(rows, cols):
            by_column[c].append(r)
        colour = np.full(pattern.shape[0], -1)
        for r in range(pattern.shape[0]):
            taken = {colour[q] for c in np.flatnonzero(pattern[r]) for q in by_column[c]}
            colour[r] = next(k for k in range(len(taken) + 1) if k not in taken)
        cached = (rows, cols, colour, pattern)
        self.__dict__["_sparsity_cache"] = cached
        return cached

    def jac_x_sparse(self, t, x, theta):
        """The structural entries of ``df/dx`` at every point, without the dense Jacobian.

        For models with many states, whose Jacobian is mostly zeros (a discretised PDE, a
        network, Lorenz-96): one vector-Jacobian product per colour of the rows
        (:meth:`jac_x_sparsity`), a handful whatever the dimension, instead of one per
        state, and ``n_points * nnz`` numbers instead of ``n_points * n_states**2``. One more
        product with random weights checks the result; where it disagrees, the pattern
        missed an entry that vanished where it was probed, and is widened from the dense
        Jacobian at the points that disagree.

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States, one per leading index.
        theta : array-like of shape (n_params,)
            Parameters.

        Returns
        -------
        rows : ndarray of int of shape (nnz,)
            The equation of each entry.
        cols : ndarray of int of shape (nnz,)
            The state of each entry.
        values : ndarray of shape (..., nnz)
            ``values[..., k] = d f_rows[k] / d x_cols[k]``.
        """
        x = np.asarray(x, dtype=np.float64)
        self.jac_x_sparsity(t, x, theta)
        for attempt in range(4):  # each widening adds what up to 64 disagreeing points show
            rows, cols, colour, pattern = self.__dict__["_sparsity_cache"]
            values = np.empty(x.shape[:-1] + (rows.size,))
            for k in range(colour.max() + 1 if colour.size else 0):
                v = np.zeros_like(x)
                v[..., colour == k] = 1.0
                vx, _ = self.vjp(t, x, theta, v)
                chosen = colour[rows] == k
                values[..., chosen] = vx[..., cols[chosen]]
            weights = np.random.default_rng(1).standard_normal(x.shape)
            vx, _ = self.vjp(t, x, theta, weights)
            terms = weights.reshape(-1, x.shape[-1])[:, rows] * values.reshape(-1, rows.size)
            sparse_vx = sum_by_index(terms, cols, x.shape[-1])
            magnitude = sum_by_index(np.abs(terms), cols, x.shape[-1])  # round-off's scale
            with np.errstate(invalid="ignore"):
                wrong = np.abs(sparse_vx - vx.reshape(sparse_vx.shape)) > 1e-9 * (
                    magnitude + np.abs(vx.reshape(sparse_vx.shape)) + 1e-300)
            wrong &= np.isfinite(vx.reshape(sparse_vx.shape))
            bad_points = np.flatnonzero(np.any(wrong, axis=1))
            if bad_points.size == 0:
                return rows, cols, values
            if attempt == 3:
                break
            flat = x.reshape(-1, x.shape[-1])
            times = np.broadcast_to(np.asarray(t, dtype=np.float64), x.shape[:-1]).reshape(-1)
            self._store_sparsity(pattern | self._pattern_at(times, flat, theta,
                                                            rows=bad_points[:64]))
        raise ModelError(
            f"The sparsity of df/dx of {self!r} keeps growing: entries that vanish where they "
            "were probed appear at other points (three widenings did not find them all), so "
            "its structural entries cannot be read reliably. Report the model; the dense "
            "jac_x is exact.")

    def curvature_x(self, t, x, theta, weights):
        """Weighted sum of the pure second derivatives, ``sum_l weights_l d^2 f / dx_l^2``.

        At every point, shape ``(..., n_states)``. With ``weights = sigma**2`` half of it is
        the mean that independent noise of standard deviation ``sigma`` on ``x`` adds to
        ``f`` (to second order; exact for polynomials of degree up to three), which WENDy's
        bias correction removes. Reverse over reverse mode on a batch replicated once per
        output component: one pass for the Jacobian (kept as a graph), then one backward pass
        per state with a nonzero weight.

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States, one per leading index (whole grids in one call).
        theta : array-like of shape (n_params,)
            Parameters.
        weights : array-like of shape (n_states,)
            Weight of each state's second derivative (zero weights cost nothing).

        Returns
        -------
        ndarray of shape (..., n_states)
            The weighted curvature at every point.
        """
        # Not nested forward mode (torch.func.jvp twice): measured 12x slower, it falls back
        # to Python reference kernels.
        x = _as_tensor(x)
        theta = _as_tensor(theta)
        weights = np.asarray(weights, dtype=np.float64)
        n = x.shape[-1]
        if n >= _FORWARD_MODE_MIN_STATES:  # the batch replicated n times would hold n^2 x
            return self._curvature_x_coloured(t, x, theta, weights)
        # selector[i, ..., k] = delta_ik: picks output i in copy i of the batch.
        selector = torch.eye(n, dtype=_DTYPE).reshape((n,) + (1,) * (x.dim() - 1) + (n,))
        xb = x.unsqueeze(0).expand((n,) + x.shape).clone().requires_grad_(True)
        out = torch.zeros_like(x)
        with torch.enable_grad():
            f = self.rhs(_time_tensor(t, x.shape[:-1]), xb, theta)
            # grad[i, ..., :] = d f_i / dx
            (grad,) = torch.autograd.grad(f, xb, grad_outputs=selector.expand_as(f),
                                          create_graph=True)
            if not grad.requires_grad:  # f is affine in x: no second derivative anywhere
                return out.numpy()
            for state in np.flatnonzero(weights):
                (second,) = torch.autograd.grad(grad[..., state].sum(), xb, retain_graph=True,
                                                allow_unused=True)
                if second is not None:  # None: this slope does not depend on x
                    out = out + float(weights[state]) * second[..., state].movedim(0, -1)
        return out.detach().numpy()

    def _curvature_x_coloured(self, t, x, theta, weights):
        """:meth:`curvature_x` by Hessian-vector products on the sparsity pattern.

        For a colour ``R`` of the rows (rows sharing no state, :meth:`jac_x_sparsity`),
        ``s = sum_{a in R} f_a`` has a block-diagonal Hessian (one block per row: the states
        that row reads), so its product with the indicator of the p-th state of every row
        of ``R`` reads ``d^2 f_a / dx_l^2`` for exactly those pairs: colours times the most
        states a row reads products (Lorenz-96: 4 x 4), each a second reverse pass over the
        whole grid, in ``n_points * n_states`` memory.
        """
        rows, cols = self.jac_x_sparsity()
        colour = self.__dict__["_sparsity_cache"][2]
        n = x.shape[-1]
        starts = np.searchsorted(rows, np.arange(n + 1))
        out = np.zeros(tuple(x.shape))
        xr = x.clone().requires_grad_(True)
        with torch.enable_grad():
            f = self._call(t, xr, theta)
            for k in range(colour.max() + 1 if colour.size else 0):
                members = np.flatnonzero(colour == k)
                picker = torch.zeros(n, dtype=_DTYPE)
                picker[members] = 1.0
                (grad,) = torch.autograd.grad((f * picker).sum(), xr, create_graph=True)
                if not grad.requires_grad:  # f is affine in x: no second derivative
                    return out
                width = int(np.max(starts[members + 1] - starts[members], initial=0))
                for position in range(width):
                    owner = [(a, cols[starts[a] + position]) for a in members
                             if starts[a] + position < starts[a + 1]]
                    owner = [(a, l) for a, l in owner if weights[l] != 0]  # noqa: E741
                    if not owner:
                        continue
                    direction = torch.zeros(n, dtype=_DTYPE)
                    direction[[state for _, state in owner]] = 1.0
                    (second,) = torch.autograd.grad((grad * direction).sum(), xr,
                                                    retain_graph=True, allow_unused=True)
                    if second is None:
                        continue
                    second = second.detach().numpy()
                    for a, l in owner:  # noqa: E741
                        out[..., a] += weights[l] * second[..., l]
        return out

    def jac_theta(self, t, x, theta):
        """Jacobian ``df/dtheta`` at every point, shape ``(..., n_states, n_params)``.

        Where ``rhs`` compiles (:meth:`pointwise_field`) to a program of scalar operations, that
        program's forward-mode Jacobian evaluated on the whole grid at once (50-100x faster
        than torch.func on the grids of the sensitivity passes); for other small compiled
        models the pointwise one, point by point. Both spare the first fit torch.func's
        1-2 s of lazy imports (torch._dynamo). Otherwise ``vmap`` over
        the points of a reverse-mode Jacobian (``theta`` is shared by all points, so plain
        reverse mode would sum over them).

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States, one per leading index (whole grids in one call).
        theta : array-like of shape (n_params,)
            Parameters.

        Returns
        -------
        ndarray of shape (..., n_states, n_params)
            The Jacobians.
        """
        grid = self._pointwise().grid
        if grid is not None:  # the compiled program on the whole grid
            with np.errstate(all="ignore"):  # torch's inf/nan, silently as torch does
                return grid[2](t, np.asarray(x, dtype=np.float64),
                               np.asarray(theta, dtype=np.float64))
        pointwise = (self._pointwise().jacobian_theta
                     if self.n_states <= _POINTWISE_MAX_STATES else None)
        if pointwise is not None:  # the compiled Jacobian, point by point
            x = np.asarray(x, dtype=np.float64)
            theta = np.asarray(theta, dtype=np.float64)
            flat = x.reshape(-1, x.shape[-1])
            times = np.broadcast_to(np.asarray(t, dtype=np.float64), x.shape[:-1]).reshape(-1)
            try:
                J = np.array([pointwise(ti, xi, theta) for ti, xi in zip(times, flat)])
                return J.reshape(x.shape[:-1] + (self.n_states, self.n_params))
            except (ArithmeticError, ValueError):
                pass  # math's domain errors at some point: torch's nan there
        x = _as_tensor(x)
        theta = _as_tensor(theta)
        if x.shape[-1] >= _FORWARD_MODE_MIN_STATES and theta.shape[0] < x.shape[-1]:
            # Many states, fewer parameters: one forward-mode product per parameter on the
            # whole grid; vmap of reverse mode would hold n_points * n_states^2 numbers
            # (Lorenz-96 at 200 states: 11 s and 3 GB per call).
            return self._jac_theta_forward(t, x, theta)
        batch = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])
        t_flat = _time_tensor(t, batch).reshape(-1) if np.ndim(t) else _time_tensor(t, ())

        def one_point(xi, ti):
            return torch.func.jacrev(lambda th: self.rhs(ti, xi, th))(theta)

        try:
            if t_flat.dim():
                J = torch.func.vmap(one_point)(flat, t_flat)
            else:
                J = torch.func.vmap(lambda xi: one_point(xi, t_flat))(flat)
        except (RuntimeError, ValueError, TypeError):
            # rhs with data-dependent Python control flow defeats vmap: forward mode per param.
            return self._jac_theta_forward(t, x, theta)
        return J.reshape(batch + J.shape[-2:]).detach().numpy()

    def _jac_theta_forward(self, t, x, theta):
        """``df/dtheta`` by one forward-mode product per parameter on the whole grid."""
        import warnings

        basis = torch.eye(theta.shape[0], dtype=_DTYPE)
        with warnings.catch_warnings():  # torch's forward mode loads decompositions through
            warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit on first use
            cols = [torch.func.jvp(lambda th: self._call(t, x, th), (theta,), (e,))[1]
                    for e in basis]
        if not cols:
            return np.zeros(tuple(x.shape) + (0,))
        return torch.stack(cols, dim=-1).detach().numpy()

    def vjp(self, t, x, theta, v):
        """Vector-Jacobian products of ``f`` on a whole grid in one reverse pass.

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States, one per leading index (whole grids in one call).
        theta : array-like of shape (n_params,)
            Parameters.
        v : array-like of shape (..., n_states)
            One cotangent per point.

        Returns
        -------
        vx : ndarray of shape (..., n_states)
            ``(df/dx)^T v`` at each point.
        vtheta : ndarray of shape (n_params,)
            ``sum over points of (df/dtheta)^T v``.
        """
        # Plain autograd: half the overhead of torch.func.vjp for these small graphs.
        x = _as_tensor(x).clone().requires_grad_(True)
        theta = _as_tensor(theta).clone().requires_grad_(True)
        with torch.enable_grad():
            out = self._call(t, x, theta)
            vx, vtheta = torch.autograd.grad(out, (x, theta), grad_outputs=_as_tensor(v),
                                             allow_unused=True)
        vx = torch.zeros_like(x) if vx is None else vx
        vtheta = torch.zeros_like(theta) if vtheta is None else vtheta
        return vx.detach().numpy(), vtheta.detach().numpy()

    # ------------------------------------------------------------------ linear structure
    def _linearity_probe(self, t=None, x=None, random_state=0):
        """Affine split by ``n_params + 1`` evaluations, and its misfit at random parameters.

        ``f0 = f(theta=0)`` and ``F1[..., k] = f(e_k) - f0`` are exact when ``f`` is affine in
        ``theta``; the returned defect is the relative misfit of ``f0 + F1 @ theta`` against
        ``f(theta)`` at two random parameter vectors (zero up to rounding for affine models,
        O(1) otherwise, infinite when ``f`` is not even finite at ``theta = 0``).
        """
        rng = np.random.default_rng(random_state)
        if x is None:
            x = rng.standard_normal((7, self.n_states))
            t = rng.uniform(0.0, 1.0, 7)
        elif t is None:
            t = 0.0
        x = np.asarray(x, dtype=np.float64)
        p = self.n_params
        with np.errstate(all="ignore"):
            f0 = self.f(t, x, np.zeros(p))
            F1 = np.stack([self.f(t, x, e) - f0 for e in np.eye(p)], axis=-1)
            scale = np.abs(self.theta_guess()) + 1.0
            defect = 0.0
            for _ in range(2):
                theta = self.theta_guess() + 0.5 * scale * rng.standard_normal(p)
                exact = self.f(t, x, theta)
                size = max(float(np.max(np.abs(exact))), float(np.max(np.abs(F1))), 1e-300)
                misfit = float(np.max(np.abs(f0 + F1 @ theta - exact))) / size
                defect = misfit if not np.isfinite(misfit) else max(defect, misfit)
                if not np.isfinite(defect):
                    break
        if not np.isfinite(defect):  # e.g. f(theta=0) divides by zero: not affine
            defect = np.inf
        return f0, F1, defect

    def is_linear_in_theta(self, t=None, x=None, rtol=1e-9):
        """Whether ``f(t, x, theta) = f0(t, x) + F1(t, x) @ theta`` (checked numerically).

        The check compares ``f`` with its affine reconstruction at two random parameter
        vectors, at the given points (or at random points when ``x`` is None). Exact for
        models affine in ``theta``; a nonlinear model misses by many orders of magnitude more
        than ``rtol``.

        Parameters
        ----------
        t : float or array-like, optional
            Times of the points.
        x : array-like of shape (..., n_states), optional
            Points to check at (None: random points).
        rtol : float, default=1e-9
            Relative misfit above which the model is declared nonlinear.

        Returns
        -------
        bool
            Whether the affine reconstruction is exact to ``rtol``.
        """
        return bool(self._linearity_probe(t, x)[2] <= rtol)

    def affine_split(self, t, x, rtol=1e-9, check=True):
        """The affine structure ``f = f0 + F1 @ theta`` on a grid.

        Parameters
        ----------
        t : float or array-like
            Time(s), broadcastable against ``x[..., 0]``.
        x : array-like of shape (..., n_states)
            States.
        rtol : float, default=1e-9
            Relative misfit above which the model is declared nonlinear in ``theta``.
        check : bool, default=True
            Verify linearity at these points (two extra evaluations of ``f``). Pass False
            inside iterations once linearity is established.

        Returns
        -------
        f0 : ndarray of shape (..., n_states)
            The field at ``theta = 0``.
        F1 : ndarray of shape (..., n_states, n_params)
            Its coefficients in each parameter.

        Raises
        ------
        NotLinearInThetaError
            When ``f`` is not affine in ``theta`` at these points.
        """
        if not check:
            x = np.asarray(x, dtype=np.float64)
            f0 = self.f(t, x, np.zeros(self.n_params))
            F1 = np.stack([self.f(t, x, e) - f0 for e in np.eye(self.n_params)], axis=-1)
            return f0, F1
        f0, F1, defect = self._linearity_probe(t, x)
        if defect > rtol:
            raise NotLinearInThetaError(
                f"{self!r} is not linear in its parameters {self.param_names}: f(theta) "
                f"differs from f0 + F1 @ theta by {defect:.2e} (relative). Methods that need "
                "the affine split (WENDy's linear path, BCD-prox's closed-form theta-step) "
                "must use their nonlinear path for this model."
            )
        return f0, F1


class FunctionModel(ODEModel):
    """An :class:`ODEModel` built from a plain function, for quick scripts.

    Parameters
    ----------
    rhs : callable
        ``rhs(t, x, theta)`` in torch operations (see :class:`ODEModel`). Define it at module
        level so that the model pickles (joblib, Dask and ``clone`` copy models).
    state_names : tuple of str
        Names of the states.
    param_names : tuple of str
        Names of the parameters.
    default_theta : tuple of float, optional
        The default initial guess.

    Examples
    --------
    >>> from sklode.models import FunctionModel
    >>> def growth(t, x, theta):
    ...     return theta[0] * x
    >>> m = FunctionModel(growth, ("N",), ("r",), default_theta=(0.1,))
    >>> m.f(0.0, [10.0], [0.1])
    array([1.])
    """

    def __init__(self, rhs, state_names, param_names, default_theta=None):
        self.rhs_function = rhs
        self.state_names = tuple(state_names)
        self.param_names = tuple(param_names)
        self.default_theta = None if default_theta is None else tuple(default_theta)

    @classmethod
    def _constant_names(cls):
        return ["rhs_function", "state_names", "param_names", "default_theta"]

    def __repr__(self):
        name = getattr(self.rhs_function, "__qualname__", repr(self.rhs_function))
        return (
            f"FunctionModel(rhs={name}, state_names={self.state_names!r}, "
            f"param_names={self.param_names!r}, default_theta={self.default_theta!r})"
        )

    def rhs(self, t, x, theta):
        """The wrapped function, ``rhs(t, x, theta)`` (see :meth:`ODEModel.rhs`).

        Parameters
        ----------
        t : torch.Tensor
            Time.
        x : torch.Tensor of shape (..., n_states)
            States.
        theta : torch.Tensor of shape (n_params,)
            Parameters.

        Returns
        -------
        torch.Tensor of shape (..., n_states)
            ``dx/dt``.
        """
        return self.rhs_function(t, x, theta)


class HeldParameters(ODEModel):
    """``model`` with some parameters held at given values: its parameters are the others.

    The field is ``model.rhs(t, x, values + S @ theta)`` with ``S`` the one-hot map of the
    fitted parameters into the whole vector, so it stays affine in theta when the model is,
    and every derivative comes from torch as for any model. Methods whose steps are linear
    least squares (BCD-prox, WENDy) hold parameters by fitting this model.

    Parameters
    ----------
    model : ODEModel
        The whole model.
    fitted : tuple of bool
        One per parameter of ``model``: True where it is fitted.
    values : tuple of float
        One per parameter of ``model``: the value of each held one (others unused).
    """

    def __init__(self, model, fitted, values):
        self.model = model
        self.fitted = tuple(bool(f) for f in fitted)
        self.values = tuple(float(v) for v in values)
        kept = [i for i, f in enumerate(self.fitted) if f]
        self.state_names = model.state_names
        self.param_names = tuple(model.param_names[i] for i in kept)
        self.default_theta = tuple(model.theta_guess()[kept])
        self.check_derivatives = model.check_derivatives  # a wrapper has its model's steps
        self.blowup_factor = model.blowup_factor
        scatter = np.zeros((len(self.fitted), len(kept)))
        scatter[kept, np.arange(len(kept))] = 1.0
        self._scatter = torch.from_numpy(scatter)
        self._held = torch.tensor(np.where(self.fitted, 0.0, self.values), dtype=_DTYPE)

    def __getstate__(self):  # rebuilt from its constants: the torch tensors follow
        return self.get_constants()

    def __setstate__(self, state):
        self.__init__(**state)

    def full(self, theta):
        """The whole parameter vector from the fitted ones.

        Parameters
        ----------
        theta : array-like of shape (n_fitted,)
            The fitted parameters.

        Returns
        -------
        ndarray of shape (n_params of model,)
            Held values in place.
        """
        return self._held.numpy() + self._scatter.numpy() @ np.asarray(theta, np.float64)

    def state_offsets(self, theta):
        """The whole model's offsets at the whole parameter vector."""
        return self.model.state_offsets(self.full(theta))

    def initial_offsets(self, theta):
        """The whole model's initial offsets at the whole parameter vector."""
        return self.model.initial_offsets(self.full(theta))

    def initial_offsets_jacobian(self, theta):
        """Their derivative in the fitted parameters."""
        return self.model.initial_offsets_jacobian(self.full(theta)) @ self._scatter.numpy()

    def rhs(self, t, x, theta):
        """The whole model's field at the whole parameter vector.

        Parameters
        ----------
        t : torch.Tensor
            Time.
        x : torch.Tensor of shape (..., n_states)
            States.
        theta : torch.Tensor of shape (n_fitted,)
            The fitted parameters.

        Returns
        -------
        torch.Tensor of shape (..., n_states)
            ``dx/dt``.
        """
        return self.model.rhs(t, x, self._held + self._scatter @ theta)


class ScaledStates(ODEModel):
    """``model`` in scaled (and optionally logarithmic) states ``z``, same parameters.

    ``z = x / scale`` or, with ``log``, ``z = log(x) / scale``; the field is
    ``model.rhs(t, x, theta) / scale`` or ``model.rhs(t, x, theta) / (scale x)``. Methods
    whose residual has one weight per state (BCD-prox's fidelity) weight it by fitting this
    model to the scaled data, and every method fits log-normal data on the log scale with
    ``log=True``. It stays affine in theta when the model is.

    Parameters
    ----------
    model : ODEModel
        The model in the original states.
    scale : tuple of float
        One positive scale per state.
    log : bool, default=False
        Whether ``z`` is the logarithm of the (positive) states.
    """

    def __init__(self, model, scale, log=False):
        self.model = model
        self.scale = tuple(float(v) for v in scale)
        self.log = bool(log)
        self.state_names = model.state_names
        self.param_names = model.param_names
        self.default_theta = model.default_theta
        self.check_derivatives = model.check_derivatives  # a wrapper has its model's steps
        self.blowup_factor = model.blowup_factor
        self._scale = torch.tensor(self.scale, dtype=_DTYPE)

    def __getstate__(self):  # rebuilt from its constants: the torch tensors follow
        return self.get_constants()

    def __setstate__(self, state):
        self.__init__(**state)

    def to_z(self, x):
        """The scaled states of original states ``x`` (any shape ending in ``n_states``)."""
        x = np.asarray(x, dtype=np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(x) if self.log else x) / np.asarray(self.scale)

    def to_x(self, z):
        """The original states of scaled states ``z``."""
        z = np.asarray(z, dtype=np.float64) * np.asarray(self.scale)
        return np.exp(z) if self.log else z

    def state_offsets(self, theta):
        """The model's offsets in scaled states (None on the log scale, whose error test
        is relative already)."""
        offsets = self.model.state_offsets(theta)
        if offsets is None or self.log:
            return None
        return np.asarray(offsets) / np.asarray(self.scale)

    def initial_offsets(self, theta):
        """The model's initial offsets in scaled states."""
        offsets = self.model.initial_offsets(theta)
        if offsets is None:
            return None
        if self.log:  # log(x0 + c) is not x0-plus-something: refuse rather than be wrong
            raise ValueError(f"{self.model!r} has initial offsets, which log-scaled states "
                             "cannot carry.")
        return np.asarray(offsets) / np.asarray(self.scale)

    def initial_offsets_jacobian(self, theta):
        """Their derivative, in scaled states."""
        return self.model.initial_offsets_jacobian(theta) / np.asarray(self.scale)[:, None]

    def rhs(self, t, x, theta):
        """The field in the scaled states.

        Parameters
        ----------
        t : torch.Tensor
            Time.
        x : torch.Tensor of shape (..., n_states)
            Scaled states ``z``.
        theta : torch.Tensor of shape (n_params,)
            Parameters.

        Returns
        -------
        torch.Tensor of shape (..., n_states)
            ``dz/dt``.
        """
        states = x * self._scale
        if not self.log:
            return self.model.rhs(t, states, theta) / self._scale
        states = torch.exp(states)
        return self.model.rhs(t, states, theta) / (self._scale * states)


def check_model(model):
    """Validate a model's names and its ``rhs`` once; raise :class:`ModelError` naming the fault.

    Checks that it is an :class:`ODEModel`, that the names are non-empty tuples of distinct
    strings, that ``default_theta`` has one entry per parameter, and that ``rhs`` returns a
    float64 tensor of the shape of ``x`` for a single point and a batch of points, with each
    batch row equal to the single-point result.

    Parameters
    ----------
    model : ODEModel
        The model to check.

    Returns
    -------
    model : ODEModel
        The same object, for chaining.
    """
    if not isinstance(model, ODEModel):
        raise ModelError(
            f"model must be an sklode.ODEModel instance, got {type(model).__name__}. "
            "Subclass ODEModel (state_names, param_names, rhs) or use FunctionModel."
        )
    # once per model: the checks (an autograd-against-differences comparison among them)
    # cost ~9 ms, more than a forward solve; the signature changes when anything the checks
    # read does (a constant, a name, a method assigned on the instance)
    signature = _check_signature(model)
    if signature is not None and model.__dict__.get("_checked_signature") == signature:
        return model
    name = type(model).__name__
    for attr in ("state_names", "param_names"):
        names = getattr(model, attr)
        if (
            not isinstance(names, tuple)
            or len(names) == 0
            or not all(isinstance(s, str) for s in names)
        ):
            raise ModelError(f"{name}.{attr} must be a non-empty tuple of str, got {names!r}.")
        if len(set(names)) != len(names):
            raise ModelError(f"{name}.{attr} has repeated names: {names!r}.")
    if model.default_theta is not None and len(model.default_theta) != model.n_params:
        raise ModelError(
            f"{name}.default_theta has {len(model.default_theta)} entries but "
            f"param_names has {model.n_params}: {model.param_names!r}."
        )
    theta = _as_tensor(model.theta_guess())
    rng = np.random.default_rng(0)
    batch = _as_tensor(rng.uniform(0.5, 1.5, (3, model.n_states)))
    with torch.no_grad():
        try:
            out = model.rhs(_time_tensor([0.0, 0.5, 1.0], (3,)), batch, theta)
            single = model.rhs(_time_tensor(0.5, ()), batch[1], theta)
        except Exception as exc:  # the user's code failed: say whose and where
            hint = (f" {_TORCH_ONLY}" if "Python scalars" in str(exc) or "numpy" in str(exc)
                    else "")
            raise ModelError(
                f"{name}.rhs raised {type(exc).__name__}: {exc} when called with x of shape "
                f"(3, {model.n_states}) and theta of shape ({model.n_params},).{hint}"
            ) from exc
    for label, value, shape in (("a batch", out, (3, model.n_states)),
                                ("one point", single, (model.n_states,))):
        if not isinstance(value, torch.Tensor):
            raise ModelError(
                f"{name}.rhs must return a torch.Tensor, got {type(value).__name__} for "
                f"{label}. Build the result with torch.stack([...], dim=-1)."
            )
        if tuple(value.shape) != shape:
            raise ModelError(
                f"{name}.rhs returned shape {tuple(value.shape)} for {label} x of shape "
                f"{shape}; expected {shape}, one derivative per state in "
                f"state_names={model.state_names!r}. Stack the derivatives on the last axis."
            )
        if value.dtype != _DTYPE:
            raise ModelError(
                f"{name}.rhs returned dtype {value.dtype}; expected torch.float64. Do not "
                "create tensors with a fixed dtype inside rhs (use x.new_tensor or plain "
                "Python numbers)."
            )
    # rtol 1e-9, not 1e-12: torch's vectorised pow/exp of a batch and its scalar path for one
    # point may differ by an ulp of a large intermediate; wrong indexing differs by O(1)
    if not torch.allclose(out[1], single, rtol=1e-9, atol=1e-12, equal_nan=True):
        raise ModelError(
            f"{name}.rhs gives a different result for a point inside a batch than for the "
            "same point alone: it must index states with x[..., i] and treat leading axes "
            "as independent time points."
        )
    if getattr(model, "check_derivatives", True):
        _check_differentiable(model, name, batch, theta)
    _check_observation_model(model, name, batch, theta)
    if signature is not None:
        model.__dict__["_checked_signature"] = signature
    return model


def _check_signature(model):
    """What :func:`check_model` reads, as a comparable tuple (None: cannot be summarised,
    check every time)."""
    try:
        default = (None if model.default_theta is None
                   else tuple(np.ravel(np.asarray(model.default_theta, dtype=float)).tolist()))
        own = tuple(None if model.__dict__.get(n) is None else id(model.__dict__[n])
                    for n in ("rhs", "observe", "noise_sd"))
        # functions among the constants (FunctionModel's rhs) by identity: their repr is a
        # name, which another function may share
        own += tuple(id(v) for v in model.get_constants().values() if callable(v))
        return (type(model), repr(model), model.state_names, model.param_names, default,
                model.observable_names, own, getattr(model, "check_derivatives", True))
    except Exception:  # an exotic model (a constant whose repr fails): check every call
        return None


def _check_observation_model(model, name, batch, theta):
    """``observe`` and ``noise_sd``: names, shapes and batching, as for ``rhs``."""
    names = model.observable_names
    if names is not None:
        if (not isinstance(names, tuple) or not names
                or not all(isinstance(s, str) for s in names) or len(set(names)) != len(names)):
            raise ModelError(f"{name}.observable_names must be a non-empty tuple of distinct "
                             f"str, got {names!r}.")
        if type(model).observe is ODEModel.observe:
            raise ModelError(f"{name} declares observable_names={names!r} but no observe(t, x, "
                             "theta): define observe to say how the states are read.")
    elif type(model).observe is not ODEModel.observe:
        raise ModelError(f"{name} defines observe(t, x, theta) but no observable_names: "
                         "declare observable_names, one name per column observe returns.")
    if model.noise_sd is not None and not callable(model.noise_sd):
        raise ModelError(f"{name}.noise_sd must be a method noise_sd(self, t, y, theta), got "
                         f"{type(model.noise_sd).__name__}.")
    n_obs = model.n_observables
    checks = [("observe", lambda t, x: model.observe(t, x, theta))] if names else []
    if model.noise_sd is not None:
        checks.append(("noise_sd", lambda t, x: model.noise_sd(
            t, model.observe(t, x, theta) if names else x, theta)))
    for method, call in checks:
        with torch.no_grad():
            try:
                out = call(_time_tensor([0.0, 0.5, 1.0], (3,)), batch)
                single = call(_time_tensor(0.5, ()), batch[1])
            except Exception as exc:
                raise ModelError(f"{name}.{method} raised {type(exc).__name__}: {exc} when "
                                 f"called on a batch of 3 states.") from exc
        for label, value, shape in (("a batch", out, (3, n_obs)),
                                    ("one point", single, (n_obs,))):
            if not isinstance(value, torch.Tensor) or tuple(value.shape) != shape:
                got = (tuple(value.shape) if isinstance(value, torch.Tensor)
                       else type(value).__name__)
                raise ModelError(
                    f"{name}.{method} returned {got} for {label}; expected a float64 tensor of "
                    f"shape {shape}, one value per observable {model.observables!r} (use "
                    "x[..., i:i+1] slices and torch.stack or torch.cat on the last axis).")
        if out.dtype != _DTYPE:
            raise ModelError(f"{name}.{method} returned dtype {out.dtype}; expected "
                             "torch.float64.")
        if not torch.allclose(out[1], single, rtol=1e-12, atol=1e-12, equal_nan=True):
            raise ModelError(f"{name}.{method} gives a different result for a point inside a "
                             "batch than alone: treat leading axes as independent points.")


# How many states the derivative check of check_model perturbs (each costs two rhs calls).
_CHECKED_STATES = 20
_TORCH_ONLY = ("Write rhs with torch operations on its tensors (torch.sin, torch.exp, "
               "torch.where, ...), not numpy or math functions, which cut the derivatives "
               "every method takes of it.")


def _check_differentiable(model, name, batch, theta):
    """Every method differentiates ``rhs`` (Jacobians, vector-Jacobian products): a field
    computed through numpy or ``math`` passes a plain call but fails, or silently loses its
    derivatives, under autograd. ``float(theta[0])`` even runs, with a derivative of zero
    in that parameter: autograd is compared with central differences of the same field."""
    t = _time_tensor([0.0, 0.5, 1.0], (3,))
    x = batch.clone().requires_grad_(True)
    th = theta.clone().requires_grad_(True)
    weights = _as_tensor(np.random.default_rng(1).uniform(0.5, 1.5, tuple(batch.shape)))
    try:
        with torch.enable_grad():  # also when a caller runs under torch.no_grad()
            out = model.rhs(t, x, th)
            if not out.requires_grad:
                raise ModelError(f"{name}.rhs returns a tensor that depends on neither x "
                                 "nor theta for autograd (it was rebuilt from numpy values "
                                 f"or detached). {_TORCH_ONLY}")
            grad_x, grad_theta = torch.autograd.grad((weights * out).sum(), (x, th),
                                                     allow_unused=True)
    except ModelError:
        raise
    except Exception as exc:  # the user's code failed under autograd: say what to change
        raise ModelError(f"{name}.rhs cannot be differentiated: {type(exc).__name__}: "
                         f"{str(exc).rstrip('.')}. {_TORCH_ONLY}") from exc
    grad_x = torch.zeros_like(batch) if grad_x is None else grad_x
    grad_theta = torch.zeros_like(theta) if grad_theta is None else grad_theta

    def weighted(xv, thv):
        with torch.no_grad():
            return float((weights * model.rhs(t, xv, thv)).sum())

    level = abs(weighted(batch, theta))
    # Directions of size h: each parameter, and each of up to _CHECKED_STATES states moved at
    # all three points; autograd's derivative along each against the central difference.
    directions = []
    for k, label in enumerate(model.param_names):
        step = torch.zeros_like(theta)
        step[k] = 1e-6 * max(1.0, abs(float(theta[k])))
        directions.append(("parameter", label, torch.zeros_like(batch), step))
    for k in range(min(model.n_states, _CHECKED_STATES)):
        step = torch.zeros_like(batch)
        step[:, k] = 1e-6 * max(1.0, float(batch[:, k].abs().max()))
        directions.append(("state", model.state_names[k], step, torch.zeros_like(theta)))
    for kind, label, dx, dtheta in directions:
        h = float(dx.abs().max() + dtheta.abs().max())
        fd = (weighted(batch + dx, theta + dtheta) - weighted(batch - dx, theta - dtheta)) / (
            2 * h)
        ad = float((grad_x * dx).sum() + (grad_theta * dtheta).sum()) / h
        if abs(ad - fd) > 1e-3 * (abs(ad) + abs(fd)) + 1e-7 * (1.0 + level):
            raise ModelError(
                f"{name}.rhs changes with the {kind} {label!r} (central difference "
                f"{fd:.4g}) but its autograd derivative in it is {ad:.4g}: a float(), "
                f".item(), numpy or math call, or a detach, cut the derivative. "
                f"{_TORCH_ONLY}")
