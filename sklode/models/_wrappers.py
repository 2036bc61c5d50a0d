"""Models made from other models: a plain function as a model (:class:`FunctionModel`), some
parameters held at values (:class:`HeldParameters`), and the states scaled or logged
(:class:`ScaledStates`), and a model fed constant inputs (:class:`WithInputs`: the rate of a
zero-order infusion). Each rebuilds itself from its constants when unpickled."""

from __future__ import annotations


import numpy as np
import torch

from ._base import ODEModel
from ._derived import derived
from ._tensors import _DTYPE

__all__ = ["FunctionModel", "HeldParameters", "ScaledStates", "WithInputs", "fed_model"]


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



class WithInputs(ODEModel):
    """``model`` with a constant input added to some states' derivatives: its parameters
    are the model's, then one input per state in ``states`` (``input:<state>``).

    The field is ``model.rhs(t, x, theta[:p])`` with ``u = theta[p:]`` added to the fed
    states' derivatives: a zero-order infusion's rate, which the dosing schedule
    (:mod:`sklode._dosing`) sets segment by segment. The inputs enter as parameters so that
    the compiled solvers take them like any other, one program for every rate.

    Parameters
    ----------
    model : ODEModel
        The model fed.
    states : tuple of int
        The states that receive an input.
    """

    def __init__(self, model, states):
        self.model = model
        self.states = tuple(int(i) for i in states)
        self.state_names = model.state_names
        self.param_names = tuple(model.param_names) + tuple(
            f"input:{model.state_names[i]}" for i in self.states)
        self.default_theta = tuple(model.theta_guess()) + (0.0,) * len(self.states)
        self.check_derivatives = model.check_derivatives
        self.blowup_factor = model.blowup_factor
        self._p = len(model.param_names)

    def __getstate__(self):
        return self.get_constants()

    def __setstate__(self, state):
        self.__init__(**state)

    def state_offsets(self, theta):
        """The model's offsets at its own parameters."""
        return self.model.state_offsets(np.asarray(theta, dtype=np.float64)[:self._p])

    def rhs(self, t, x, theta):
        """The model's field plus the inputs.

        Parameters
        ----------
        t : torch.Tensor
            The time, as the model's field takes it.
        x : torch.Tensor of shape (..., n_states)
            The states, batched as the model's.
        theta : torch.Tensor of shape (n_params + n_inputs,)
            The model's parameters, then the inputs.

        Returns
        -------
        torch.Tensor of shape (..., n_states)
            ``dx/dt``.
        """
        out = self.model.rhs(t, x, theta[:self._p])
        fed = dict(zip(self.states, range(self._p, self._p + len(self.states))))
        # one column at a time (not a product with the one-hot rows): the compiled solvers'
        # programs add a parameter to a column, which a matrix product would hide
        return torch.stack([out[..., j] + theta[fed[j]] if j in fed else out[..., j]
                            for j in range(out.shape[-1])], dim=-1)


def fed_model(model, states):
    """``model`` itself where ``states`` is empty, else its :class:`WithInputs` for those
    states, kept on the model (one compiled program per model and set of states fed, however
    many solves and rates)."""
    states = tuple(int(i) for i in states)
    if not states:
        return model
    cache = derived(model).fed
    if states not in cache:
        cache[states] = WithInputs(model, states)
    return cache[states]


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
