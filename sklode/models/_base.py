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
import torch

from . import _autodiff, _linearity
from ._derived import derived
from ._compile import compile_field, grid_functions
from ._native import native_solver
from ._tensors import _as_tensor, _time_tensor, sum_by_index

__all__ = ["ODEModel", "sum_by_index"]


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
        None). The default takes central differences of :meth:`initial_offsets` (steps of
        1e-6 relative: ~1e-10 relative error for smooth offsets); override it with the
        exact derivative where one is at hand (a PEtab import's, from sympy).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            Parameters.

        Returns
        -------
        ndarray of shape (n_states, n_params)
            The derivative.
        """
        theta = np.asarray(theta, dtype=np.float64)
        if self.initial_offsets(theta) is None:
            raise NotImplementedError(f"{type(self).__name__} has no initial offsets.")
        columns = []
        for j in range(theta.size):
            h = 1e-6 * max(1.0, abs(theta[j]))
            up, down = theta.copy(), theta.copy()
            up[j] += h
            down[j] -= h
            columns.append((np.asarray(self.initial_offsets(up), dtype=np.float64)
                            - np.asarray(self.initial_offsets(down), dtype=np.float64))
                           / (2 * h))
        return np.stack(columns, axis=-1)

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
        forms = derived(self)
        cached = forms.pointwise
        if cached is not None and not isinstance(cached, _Building):
            return cached
        with _COMPILE_LOCK:
            cached = forms.pointwise
            if cached is not None:  # built meanwhile, or this thread's own placeholder
                return cached
            # while compiling: the checks compare to the torch path
            forms.pointwise = _Building(self.f, self.jac_x, None, None)
            try:
                compiled = compile_field(self)
            except BaseException:
                forms.pointwise = None
                raise
            if compiled is None:
                self._use_torch_path()
                return forms.pointwise
            cached = _Compiled(
                field=_guarded(compiled, self.f),
                jacobian=(self.jac_x if compiled.jacobian is None
                          else _guarded(compiled.jacobian, self.jac_x)),
                jacobian_theta=compiled.jacobian_theta,
                grid=grid_functions(self, compiled))
            forms.pointwise = cached
        return cached

    def native_solver(self):
        """The model's CVODES solve in one C call, or None.

        Built on first use from the recorded program of :meth:`pointwise_field` (see
        :mod:`sklode.models._native`: its instructions run by the solver the install built,
        or C compiled per model), checked against
        the numpy field at random points, and kept on the model; ``integrator="CVODES"``
        uses it.

        Returns
        -------
        NativeSolver or None
            None where the model cannot reach CVODES; :meth:`native_unavailable_reason`
            then says why.
        """
        forms = derived(self)
        cached = forms.native
        if cached is None:
            with _COMPILE_LOCK:
                cached = forms.native
                if cached is None:
                    cached = native_solver(self, getattr(self._pointwise().field, "compiled",
                                                         None))
                    forms.native = cached
        return cached[0]

    def native_unavailable_reason(self):
        """Why :meth:`native_solver` is None, or None when it is not.

        Returns
        -------
        str or None
            A sentence naming what is missing (the package's solver, a C compiler,
            SUNDIALS) or what the generator cannot unroll (an ``rhs`` with Python control flow on a value, or an operation it does
            not know).
        """
        self.native_solver()
        return derived(self).native[1]

    def _use_torch_path(self):
        """Evaluate everything through torch (as when ``rhs`` does not compile)."""
        derived(self).pointwise = _Compiled(self.f, self.jac_x, None, None)

    def __getstate__(self):
        """The instance's attributes without what sklode derived from them
        (:mod:`sklode.models._derived`: rebuilt on first use, and a copy is checked once
        again), so that a model's pickle, and scikit-learn's hash of the estimator's
        parameters, are those of its definition."""
        state = self.__dict__.copy()
        state.pop("_derived", None)
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
        return _autodiff.jac_x(self, t, x, theta)

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
        return _autodiff.jac_x_sparsity(self, t, x, theta)


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
        return _autodiff.jac_x_sparse(self, t, x, theta)

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
        return _autodiff.curvature_x(self, t, x, theta, weights)


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
        return _autodiff.jac_theta(self, t, x, theta)


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
        return _autodiff.vjp(self, t, x, theta, v)

    # ------------------------------------------------------------------ linear structure

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
        return _linearity.is_linear_in_theta(self, t, x, rtol)

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
        return _linearity.affine_split(self, t, x, rtol, check)


