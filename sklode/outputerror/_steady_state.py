"""Pre-equilibration: the steady state an experiment starts from, and its sensitivities.

PEtab's pre-equilibration (and a laboratory's "cells rested overnight before the
stimulus"): the model runs under other parameter values until it stops changing, and the
experiment starts from there. The steady state is reached by integrating forward over
windows ten times longer each (1, 10, ..., 1e8 time units) until the field is below
``|f_i| <= atol_ss + rtol_ss |x_i|``; integrating (rather than a Newton solve of f = 0)
finds the steady state that the start leads to when conservation laws make the Jacobian
singular, as a simulation would.

Its sensitivities come from the implicit function theorem at that state, as AMICI's
Newton-based ones do: ``J S = -f_theta`` with ``J = df/dx``, and where conservation laws
make ``J`` singular (a left null space ``C`` with ``C^T f = 0`` at every state) the conserved
totals, fixed by the start, do not move: ``C^T S = 0``. Forward sensitivities along the
trajectory are not used where this applies: they reach the steady state's derivative only
after the slowest mode has had time to decay, which the state may not need when it starts
close along that mode (Weber et al. 2015 at its nominal parameters: off by up to 200x in a
component, against finite differences to 1e-8 for this solve). They remain the fallback
where ``J`` is singular for another reason.
"""

from __future__ import annotations

import numpy as np

from ..exceptions import IntegrationError
from ._sensitivity import forward_trajectory, sensitivities

__all__ = ["SharedSteadyState", "preequilibrated_start", "steady_state",
           "steady_state_sensitivities"]

#: Steady when every component moves less than this per unit of time (relative, absolute).
RTOL_SS, ATOL_SS = 1e-10, 1e-12
# Singular values of J below this fraction of the largest are conservation laws' (when
# C^T J and C^T f_theta vanish at a second state too); a slow mode has a larger one.
_NULL_RTOL = 1e-12
# C^T J and C^T f_theta below this fraction of their scale count as zero.
_CONSERVED_RTOL = 1e-8


def _settle(model, theta, x0, integrator, rtol, atol, max_time, with_sensitivities):
    """``(x, S)``: the windows' integration to rest, and (when asked) the forward
    sensitivities along it chained across the windows."""
    x = np.asarray(x0, dtype=np.float64).copy()
    n, p = x.size, model.n_params
    S_x, S_theta = np.eye(n), np.zeros((n, p))  # d x / d [x0, theta] so far
    t, window = 0.0, 1.0
    while True:
        f = model.f(t, x[None, :], theta)[0]
        if np.all(np.abs(f) <= ATOL_SS + RTOL_SS * np.abs(x)):
            break
        if t >= max_time:
            raise IntegrationError(
                f"The pre-equilibration did not reach a steady state within t = {max_time:g} "
                f"(largest |dx/dt| = {np.max(np.abs(f)):.3g} for "
                f"{model.state_names[int(np.argmax(np.abs(f)))]!r}): the model may oscillate "
                "under the pre-equilibration conditions.", t_reached=t)
        end = t + window
        traj = forward_trajectory(model, theta, x, t, np.array([end]), integrator=integrator,
                                  rtol=rtol, atol=atol)
        if with_sensitivities:
            S = sensitivities(model, theta, traj, with_x0=True)[-1]  # (n, n + p)
            S_x, S_theta = S[:, :n] @ S_x, S[:, :n] @ S_theta + S[:, n:]
        x, t, window = traj.states[-1].copy(), end, window * 10.0
    return x, (S_theta if with_sensitivities else None)


def _conservation_laws(model, theta, x, t=0.0):
    """``(C, J, F)``: the left null space ``C`` of ``J = df/dx`` at ``x`` that conservation
    laws make (``C^T J = 0`` checked at a second state too), ``J`` and ``F = df/dtheta``;
    None where ``J`` is singular other than by conservation laws, or the derivatives are not
    finite."""
    J = model.jac_x(t, x[None, :], theta)[0]
    F = model.jac_theta(t, x[None, :], theta)[0]
    if not (np.all(np.isfinite(J)) and np.all(np.isfinite(F))):
        return None
    U, singular, _ = np.linalg.svd(J)
    C = U[:, singular <= _NULL_RTOL * singular[0]] if singular[0] > 0 else U
    if C.shape[1]:
        # a conservation law holds at every state: check it at a second one, 1-2 % away
        # (a degenerate point such as x' = -(x - theta)^3 also has J = 0 and f_theta = 0).
        # C^T f_theta is checked at the rest only: where the law's weights depend on theta
        # (compartment sizes) it vanishes there and not elsewhere (Blasi et al. 2016)
        moved = x * (1.0 + 0.01 * (1.0 + np.linspace(0.0, 1.0, x.size)))
        J2 = model.jac_x(t, moved[None, :], theta)[0]
        for M in (J, F, J2):
            scale = np.abs(M).max()
            if not np.isfinite(scale) or np.abs(C.T @ M).max() > _CONSERVED_RTOL * max(
                    scale, np.finfo(float).tiny):
                return None
    return C, J, F


def _implicit_sensitivities(model, theta, x, t=0.0):
    """``d x_ss / d theta`` by the implicit function theorem at the steady state ``x``, the
    conserved totals held (see the module docstring); None where ``J`` is singular other
    than by conservation laws, or the derivatives are not finite."""
    laws = _conservation_laws(model, theta, x, t)
    if laws is None:
        return None
    C, J, F = laws
    stacked = np.vstack([J, C.T])
    S, _, rank, _ = np.linalg.lstsq(stacked, np.vstack([-F, np.zeros((C.shape[1],
                                                                          F.shape[1]))]),
                                    rcond=None)
    if rank < x.size or not np.all(np.isfinite(S)):
        return None
    return S


def steady_state(model, theta, x0, *, integrator="LSODA", rtol=1e-8, atol=1e-10,
                 with_sensitivities=False, max_time=1e8):
    """The steady state reached from ``x0`` under ``theta``.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    x0 : ndarray of shape (n_states,)
        The start of the pre-equilibration.
    integrator, rtol, atol
        As for :func:`sklode.simulate`.
    with_sensitivities : bool, default=False
        Also return ``d x_ss / d theta`` (:func:`steady_state_sensitivities`).
    max_time : float, default=1e8
        Give up (``IntegrationError``) when the state still moves after this long.

    Returns
    -------
    x_ss : ndarray of shape (n_states,)
    S : ndarray of shape (n_states, n_params) or None
        ``d x_ss / d theta`` (None unless asked).

    Raises
    ------
    IntegrationError
        When the model does not settle (an oscillator) or cannot be integrated.
    """
    theta = np.asarray(theta, dtype=np.float64)
    options = {"integrator": integrator, "rtol": rtol, "atol": atol, "max_time": max_time}
    x, _ = _settle(model, theta, x0, with_sensitivities=False, **options)
    if not with_sensitivities:
        return x, None
    return x, steady_state_sensitivities(model, theta, x0, x, **options)


def steady_state_sensitivities(model, theta, x0, x_ss, *, integrator="LSODA", rtol=1e-8,
                               atol=1e-10, max_time=1e8):
    """``d x_ss / d theta`` of the steady state ``x_ss`` reached from ``x0``: by the implicit
    function theorem with the conserved totals held, or (where ``J`` is singular otherwise)
    the forward sensitivities along the windows' integration.

    Parameters
    ----------
    model : ODEModel
    theta : ndarray of shape (n_params,)
    x0 : ndarray of shape (n_states,)
    x_ss : ndarray of shape (n_states,)
        The steady state :func:`steady_state` reached from ``x0``.
    integrator, rtol, atol, max_time
        As for :func:`steady_state` (used by the fallback).

    Returns
    -------
    ndarray of shape (n_states, n_params)
    """
    theta = np.asarray(theta, dtype=np.float64)
    S = _implicit_sensitivities(model, theta, np.asarray(x_ss, dtype=np.float64))
    if S is None:
        _, S = _settle(model, theta, x0, integrator, rtol, atol, max_time,
                       with_sensitivities=True)
    return S


class SharedSteadyState:
    """The last steady state (and its sensitivities) of a pre-equilibration that several
    experiments share: a PEtab problem pre-equilibrates every experiment under one condition
    (Weber: 9 experiments; Brannmark: 8), which AMICI computes once per evaluation.

    Parameters
    ----------
    field_params : ndarray of int or None
        The parameters the field reads (the others cannot move the steady state, and
        experiments differ in their observable and noise parameters); None: all.
    """

    def __init__(self, field_params=None):
        self.field_params = field_params
        self.key, self.value = None, None

    def get(self, model, theta, x0, with_sensitivities, options):
        """:func:`steady_state` of ``(model, theta, x0)``, kept while the parameters the field
        reads and ``x0`` are unchanged. Its ``S`` has zero columns for the others, so it is
        the same for every experiment that shares the state."""
        read = theta if self.field_params is None else theta[self.field_params]
        key = (read.tobytes(), np.asarray(x0, dtype=np.float64).tobytes())
        if key != self.key:
            self.key = None  # a failed solve keeps nothing
            self.value = steady_state(model, theta, x0, with_sensitivities=with_sensitivities,
                                      **options)
            self.key = key
        elif with_sensitivities and self.value[1] is None:  # the state is known
            x_ss = self.value[0]
            self.value = (x_ss, steady_state_sensitivities(model, theta, x0, x_ss, **options))
        return self.value


def preequilibrated_start(model, preequilibration, x0, theta, *, with_sensitivities=False,
                          shared=None, **options):
    """An experiment's start after its pre-equilibration, and its derivative.

    Parameters
    ----------
    model : ODEModel
    preequilibration : (ndarray, ndarray, ndarray, ndarray)
        ``(A, c, x0_pre, reset)``: the steady state is reached from ``x0_pre`` under the
        parameters ``A @ theta + c``; the ``reset`` components start at ``x0`` instead.
    x0 : ndarray of shape (n_states,)
        The experiment's own start (kept for the ``reset`` components).
    theta : ndarray of shape (n_params,)
        The shared parameters.
    with_sensitivities : bool, default=False
        Also return ``D``.
    shared : SharedSteadyState, optional
        The steady state this experiment shares with others (computed once for all).
    **options
        ``integrator``, ``rtol``, ``atol``.

    Returns
    -------
    start : ndarray of shape (n_states,)
    D : ndarray of shape (n_states, n_params) or None
        ``d start / d theta`` (None unless asked).
    """
    A, c, x0_pre, reset = preequilibration
    if shared is not None:
        x_ss, S = shared.get(model, A @ theta + c, x0_pre, with_sensitivities, options)
    else:
        x_ss, S = steady_state(model, A @ theta + c, x0_pre,
                               with_sensitivities=with_sensitivities, **options)
    D = None if S is None else (S @ A) * (~reset)[:, None]
    return np.where(reset, x0, x_ss), D
