"""Events: the state jumps where a trigger function of the state crosses zero.

An :class:`Event` is part of a model (``model.events``, a tuple): where its ``trigger``
``g(t, x, theta)`` crosses zero from below (the trigger "becomes true"), the state is
replaced by ``assign(t, x, theta)``. The solves locate the crossing and restart from the new
state (:func:`sklode._events.solve_across_events`); the sensitivities jump there by the
standard rule for a state-dependent discontinuity, the event time's own sensitivity included
(``sklode.outputerror._sensitivity``), which needs the derivatives of ``g`` and of
``assign``: this class gives them by torch's autograd of the two functions.

A **delayed** event (``delay``) fires where its trigger rises but jumps ``delay`` later,
with the values ``assign`` gives at the trigger's time (SBML's ``useValuesFromTriggerTime``,
the default: only its ``targets`` take them, the other states go on) or at the jump's own.
Its firing time moves with the trigger's and with the delay's parameters, and the
sensitivities carry both.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["Event"]


def _tensors(t, x, theta):
    return (torch.tensor(float(t), dtype=torch.float64),
            torch.as_tensor(np.asarray(x, dtype=np.float64)),
            torch.as_tensor(np.asarray(theta, dtype=np.float64)))


class Event:
    """A jump of the state where a trigger function crosses zero from below.

    Parameters
    ----------
    trigger : callable
        ``trigger(t, x, theta) -> tensor`` (a scalar, in torch operations): the event
        fires where it crosses zero from below (``x > c`` is ``x - c``; ``x < c`` is
        ``c - x``). The trigger "holds" where it is >= 0.
    assign : callable
        ``assign(t, x, theta) -> tensor of shape (n_states,)``: the whole state just after
        the event (the components it does not change as they were).
    initial_value : bool, default=True
        Whether the trigger counts as holding before the start (SBML's ``initialValue``):
        then an event whose trigger holds at the start does not fire there, only after the
        trigger has stopped holding and holds again; with False it fires at the start.
    name : str, default=""
        Shown in messages.
    delay : float or callable, default=None
        The time from the trigger's crossing to the jump: a number, or ``delay(theta) ->
        tensor`` (a scalar, in torch operations, >= 0). None: the jump is at the crossing.
    use_values_from_trigger_time : bool, default=True
        For a delayed event, whether the jump takes the values ``assign`` gives at the
        trigger's time (then only ``targets`` change at the jump) or at the jump's time.
    targets : sequence of int, default=None
        The states ``assign`` sets (the others it returns as they are). Needed only for a
        delayed event with values from the trigger's time; None: every state.

    Examples
    --------
    A clamp: the state is set to zero where it falls below 1e-8.

    >>> import torch
    >>> from sklode.models import Event
    >>> clamp = Event(lambda t, x, theta: 1e-8 - x[0],
    ...               lambda t, x, theta: torch.zeros_like(x), name="extinction")
    >>> float(clamp.value(0.0, [2.0], []))
    -1.99999999
    """

    def __init__(self, trigger, assign, initial_value=True, name="", delay=None,
                 use_values_from_trigger_time=True, targets=None):
        self.trigger = trigger
        self.assign = assign
        self.initial_value = bool(initial_value)
        self.name = name
        self.delay = delay
        self.use_values_from_trigger_time = bool(use_values_from_trigger_time)
        self.targets = None if targets is None else tuple(int(i) for i in targets)

    def __repr__(self):
        return f"Event({self.name!r})" if self.name else "Event()"

    def value(self, t, x, theta):
        """The trigger's value at one point.

        Parameters
        ----------
        t : float
            The time.
        x : array-like of shape (n_states,)
            The state there.
        theta : array-like of shape (n_params,)
            The parameters.

        Returns
        -------
        float
            ``g(t, x, theta)``: the trigger holds where it is >= 0.
        """
        with torch.no_grad():
            return float(self.trigger(*_tensors(t, x, theta)))

    def values(self, times, X, theta):
        """The trigger at many points at once (one batched torch call where the trigger
        vectorises with :func:`torch.func.vmap`, else one call per point).

        Parameters
        ----------
        times : ndarray of shape (n_points,)
            The times.
        X : ndarray of shape (n_points, n_states)
            The state at each.
        theta : array-like of shape (n_params,)
            The parameters.

        Returns
        -------
        ndarray of shape (n_points,)
            ``g`` at each point.
        """
        times = torch.as_tensor(np.asarray(times, dtype=np.float64))
        X = torch.as_tensor(np.asarray(X, dtype=np.float64))
        theta_t = torch.as_tensor(np.asarray(theta, dtype=np.float64))
        if self.__dict__.get("_vectorises", True):
            try:
                with torch.no_grad():
                    out = torch.func.vmap(lambda t, x: torch.as_tensor(
                        self.trigger(t, x, theta_t), dtype=torch.float64))(times, X)
                return out.numpy().reshape(-1).copy()
            except Exception:  # noqa: BLE001 -- Python control flow on a value, say
                self._vectorises = False
        return np.array([self.value(t, x, theta) for t, x in zip(times.numpy(), X.numpy())])

    def value_derivatives(self, t, x, theta):
        """``(dg/dt, dg/dx, dg/dtheta)`` of the trigger at one point.

        Parameters
        ----------
        t : float
            The time.
        x : array-like of shape (n_states,)
            The state there.
        theta : array-like of shape (n_params,)
            The parameters.

        Returns
        -------
        g_t : float
            ``dg/dt``.
        g_x : ndarray of shape (n_states,)
            ``dg/dx``.
        g_theta : ndarray of shape (n_params,)
            ``dg/dtheta``.
        """
        inputs = tuple(v.requires_grad_() for v in _tensors(t, x, theta))
        g = self.trigger(*inputs)
        if not torch.is_tensor(g) or not g.requires_grad:  # a constant trigger
            return 0.0, np.zeros(inputs[1].numel()), np.zeros(inputs[2].numel())
        grads = torch.autograd.grad(g, inputs, allow_unused=True)
        out = [np.zeros(v.shape) if d is None else d.detach().numpy()
               for d, v in zip(grads, inputs)]
        return float(out[0]), out[1], out[2]

    def jump(self, t, x, theta):
        """The state just after the event.

        Parameters
        ----------
        t : float
            The time.
        x : array-like of shape (n_states,)
            The state there.
        theta : array-like of shape (n_params,)
            The parameters.

        Returns
        -------
        ndarray of shape (n_states,)
            ``assign(t, x, theta)``.
        """
        with torch.no_grad():
            out = torch.as_tensor(self.assign(*_tensors(t, x, theta)), dtype=torch.float64)
        return out.numpy().copy()

    def jump_derivatives(self, t, x, theta):
        """``(dh/dt, dh/dx, dh/dtheta)`` of ``h = assign`` at one point.

        Parameters
        ----------
        t : float
            The time.
        x : array-like of shape (n_states,)
            The state there.
        theta : array-like of shape (n_params,)
            The parameters.

        Returns
        -------
        h_t : ndarray of shape (n_states,)
            ``dh/dt``.
        h_x : ndarray of shape (n_states, n_states)
            ``dh/dx``.
        h_theta : ndarray of shape (n_states, n_params)
            ``dh/dtheta``.
        """
        inputs = _tensors(t, x, theta)
        jac = torch.autograd.functional.jacobian(
            lambda *args: torch.as_tensor(self.assign(*args), dtype=torch.float64)
            .reshape(-1), inputs)
        return (jac[0].numpy().reshape(-1), jac[1].numpy(), jac[2].numpy())

    def delay_value(self, theta):
        """The delay from the trigger to the jump (0.0 without one).

        Parameters
        ----------
        theta : array-like of shape (n_params,)
            The parameters.

        Returns
        -------
        float
            The delay at ``theta``.

        Raises
        ------
        ValueError
            Where the delay is negative or not finite.
        """
        if self.delay is None:
            return 0.0
        if callable(self.delay):
            with torch.no_grad():
                value = float(self.delay(_tensors(0.0, [], theta)[2]))
        else:
            value = float(self.delay)
        if not np.isfinite(value) or value < 0.0:
            raise ValueError(f"The delay of event {self.name or repr(self)!r} is {value:g} at "
                             "these parameters: a delay must be finite and >= 0.")
        return value

    def delay_derivative(self, theta):
        """``d delay / d theta``.

        Parameters
        ----------
        theta : array-like of shape (n_params,)
            Where to differentiate.

        Returns
        -------
        ndarray of shape (n_params,)
            Zero for a constant delay.
        """
        theta = _tensors(0.0, [], theta)[2].requires_grad_()
        if not callable(self.delay):
            return np.zeros(theta.numel())
        value = self.delay(theta)
        if not torch.is_tensor(value) or not value.requires_grad:  # a constant delay
            return np.zeros(theta.numel())
        (grad,) = torch.autograd.grad(value, (theta,), allow_unused=True)
        return np.zeros(theta.numel()) if grad is None else grad.detach().numpy().copy()
