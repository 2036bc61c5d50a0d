"""The cost AdjointODE minimises (seed 002, eq. 6), on arrays.

    L(x0, theta) = 1/2 ||(x0 - s0) / sigma0||^2 + k/2 (c . x0 - N)^2
                   + 1/2 sum_i ||(x_obs(t_i; x0, theta) - y_i) / sigma_i||^2,

written as 1/2 ||r||^2 of one residual vector r so that every optimiser shares it: Gauss-Newton
type methods use the forward-sensitivity Jacobian of r, gradient methods the
continuous-adjoint gradient (or forward sensitivities). Both derivatives come from
:mod:`._sensitivity`: one forward solve plus one collocation pass on the stored trajectory.

:func:`build_objective` poses the cost from the same keyword arguments as
:class:`~sklode.AdjointODE`, so tests, baselines and benchmarks get the estimator's exact cost
without building an estimator.
"""

from __future__ import annotations

import logging

import numpy as np

from .._validation import (
    NOISE_KINDS,
    check_experiments,
    check_fixed,
    check_positive,
    check_theta0,
    condition_map,
    log_factors,
)
from ..exceptions import IntegrationError
from ..integrate import _resolve_integrator, native_solver_for
from ..models import check_model
from ..models._compile import parameters_read
from ..observation._likelihood import (
    DISTRIBUTIONS,
    Observation,
    kinds_by_column,
    known_sigma,
)
from ._initial_state import start_from_data
from ._sensitivity import (
    Trajectory,
    adjoint_gradient,
    forward_trajectory,
    sensitivities,
)
from ._steady_state import SharedSteadyState, preequilibrated_start

__all__ = ["NOISE_KINDS", "ExperimentsObjective", "LeastSquaresObjective", "build_objective",
           "objective_for_experiment", "objective_for_experiments",
           "observation_sigma"]

logger = logging.getLogger("sklode")

_START_EVALUATIONS = 200_000  # ~8 s of torch evaluations for the starting point's solve


def _state_without_solves(obj, names):
    """``obj.__dict__`` with the kept solves ``names`` emptied, for pickling: a solve on the
    CVODES path holds the compiled solver (ctypes pointers, which do not pickle), and an
    objective sent to another process (a start run on a Dask worker, returned with its
    result) recomputes a solve when it needs one."""
    state = obj.__dict__.copy()
    for name in names:
        if name in state:
            state[name] = None
    return state


class _Objective:
    """What every AdjointODE cost derives from its primitives: the map between the unknowns
    ``z`` and the optimiser variables ``u`` (``z = scale * u``, or ``exp(scale * u)`` where
    ``log_mask``: ``scale`` is then 1 for a natural-log variable, ``ln 10`` for a log10 one),
    the cost, the Jacobian in ``u`` and the blow-up-safe gradient.

    A subclass sets ``scale``, ``log_mask`` and ``theta_fixed`` and defines ``residual``,
    ``jacobian_z`` and ``value_and_grad``; it overrides nothing here.
    """

    def __getstate__(self):
        return _state_without_solves(self, ("_cache_key", "_cache"))

    #: solve the next points' states together with the sensitivities the Jacobian will ask
    #: for (the CVODES path): an optimiser sets it where it expects to want the Jacobian
    prefetch_sensitivities = False
    #: where CVODES fails on the sensitivities, compute them on LSODA's trajectory (else the
    #: Jacobian raises IntegrationError: a trust region rejects the point and shrinks)
    sensitivities_fall_back = True

    def to_u(self, z):
        """Optimiser variables from the unknowns.

        Parameters
        ----------
        z : array-like of shape (n_unknowns,)
            The unknowns: the free initial-state components, then the fitted parameters.

        Returns
        -------
        ndarray of shape (n_unknowns,)
            ``z / scale``, or ``log(theta) / scale`` for positive parameters.
        """
        z = np.asarray(z, dtype=np.float64)
        if np.any(z[self.log_mask] <= 0):
            raise ValueError("positive=True needs strictly positive starting parameters; got "
                             f"theta0={self.theta_fixed}.")
        u = z / self.scale
        u[self.log_mask] = np.log(z[self.log_mask]) / self.scale[self.log_mask]
        return u

    def to_z(self, u):
        """The unknowns from the optimiser variables (the inverse of :meth:`to_u`).

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_unknowns,)
            The unknowns.
        """
        z = u * self.scale
        z[self.log_mask] = np.exp(z[self.log_mask])
        return z

    def dz_du(self, u):
        """Diagonal of ``dz/du`` (the map is element-wise).

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_unknowns,)
            ``scale``, or ``scale * exp(scale * u)`` for positive parameters.
        """
        d = self.scale.copy()
        d[self.log_mask] *= np.exp(u[self.log_mask] * d[self.log_mask])
        return d

    def cost(self, u):
        """The cost at ``u``.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        float
            ``L = 1/2 ||r||^2``.
        """
        r = self.residual(u)
        return 0.5 * float(r @ r)

    # ------------------------------------------------------------------ derivatives
    def jacobian(self, u):
        """Jacobian of the residual in the optimiser variables.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals, n_unknowns)
            ``dr/du``.
        """
        return self.jacobian_z(u) * self.dz_du(u)[None, :]

    def safe_value_and_grad(self, u, method="adjoint"):
        """As :meth:`value_and_grad`, with an infinite cost where the ODE blows up, so that
        line searches step back.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.
        method : {"adjoint", "forward"}, default="adjoint"
            As for :meth:`value_and_grad`.

        Returns
        -------
        L : float
            The cost, or inf where the ODE cannot be solved.
        grad : ndarray of shape (n_unknowns,)
            ``dL/du``, or NaN there.
        """
        try:
            return self.value_and_grad(u, method)
        except IntegrationError as exc:
            logger.debug("trial point rejected: %s", exc)
            return np.inf, np.full(u.size, np.nan)


class LeastSquaresObjective(_Objective):
    """The residual vector of the seed's cost and its derivatives in optimiser variables.

    The unknowns ``z = [x0[free], theta[fitted]]`` are optimised as ``u``, with
    ``z = scale * u`` (unknowns of very different sizes, x0 ~ 1e5 and theta ~ 1, all become
    order one) or ``theta = exp(u)`` for positive parameters. Missing observations (NaN in
    ``Y``) contribute no residual: their entries of ``r`` are zero, with zero derivatives.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    t0 : float
        Time of the initial state.
    t : ndarray of shape (n_times,)
        Increasing observation times (>= t0).
    Y : ndarray of shape (n_times, n_observed)
        Observations of the ``observed`` states, NaN where missing.
    sigma : ndarray of shape (n_times, n_observed)
        Standard deviation of each observation.
    observed : tuple of int
        Indices of the states ``Y``'s columns hold.
    x0 : ndarray of shape (n_states,)
        Starting (or known) initial state.
    theta : ndarray of shape (n_params,)
        Starting parameters (the values of held ones).
    free : ndarray of bool of shape (n_states,)
        Components of x0 that are estimated.
    fitted : ndarray of bool of shape (n_params,), optional
        Parameters that are estimated (default: all); the others are held at ``theta``.
    prior : (ndarray, ndarray) or None
        Prior mean ``s0`` and standard deviation ``sigma0`` of x0 (applied to the free
        components).
    invariant : (ndarray, float, float) or None
        ``(c, total, k)``: penalty ``k/2 (c . x0 - total)^2`` (when some component is free).
    positive : ndarray of bool of shape (n_params,)
        Parameters optimised on the log scale.
    log_factor : ndarray of shape (n_params,), optional
        The positive parameters' ``c`` in ``theta = exp(c u)`` (1: natural log, the
        default; ``ln 10``: the optimiser works in decades, PEtab's log10 scale).
    integrator : str
        Forward solver (:data:`sklode.integrate.INTEGRATORS`).
    rtol : float
        Relative tolerance of the forward solves.
    atol : float
        Absolute tolerance of the forward solves.
    observation : Observation, optional
        The observation and noise model (:class:`sklode.observation._likelihood.Observation`): the data
        rows are its residual rows (observables, modelled noise, log or Laplace errors)
        instead of ``(x_observed - Y) / sigma``.
    doses : sequence of (float, int, float), optional
        Boluses ``(time, state, amount)`` of this experiment.
    theta_map : (ndarray, ndarray), optional
        ``(A, c)``: this experiment's parameters are ``A @ theta + c`` (its conditions).
    preequilibration : (ndarray, ndarray, ndarray, ndarray), optional
        ``(A, c, x0_pre, reset)``: the experiment starts from the steady state reached from
        ``x0_pre`` under ``A @ theta + c``, except the ``reset`` components (held at x0).
    """

    def __init__(self, model, t0, t, Y, sigma, observed, x0, theta, *, free, prior,
                 invariant, positive, integrator, rtol, atol, fitted=None, observation=None,
                 doses=None, theta_map=None, preequilibration=None, log_factor=None):
        self.model, self.t0, self.t = model, t0, t
        # (A, c, x0_pre, reset): start from the steady state reached from x0_pre under the
        # parameters A @ theta + c, except the ``reset`` components (held at x0)
        self.preequilibration = preequilibration
        self._pre_key, self._pre = None, None
        self.mask = np.isfinite(Y)  # observed entries
        self.Y = np.where(self.mask, Y, 0.0)
        self.sigma = np.where(self.mask, sigma, 1.0) if sigma is not None else None
        self.observation, self.doses, self.theta_map = observation, doses, theta_map
        self.observed = list(observed)
        self.x0_fixed = np.array(x0, dtype=np.float64)
        self.theta_fixed = np.array(theta, dtype=np.float64)
        self.free = np.asarray(free, dtype=bool)
        self.fitted = (np.ones(model.n_params, dtype=bool) if fitted is None
                       else np.asarray(fitted, dtype=bool))
        self.prior, self.invariant = prior, invariant
        self.solver = {"integrator": integrator, "rtol": rtol, "atol": atol}
        self.n_states, self.n_params = model.n_states, model.n_params
        self.n_x0 = int(self.free.sum())
        self.x0_states = np.flatnonzero(self.free)  # the state of each x0 unknown
        self.n_data = int(self.mask.sum())
        z0 = np.concatenate([self.x0_fixed[self.free], self.theta_fixed[self.fitted]])
        self.scale = np.where(z0 != 0, np.abs(z0), 1.0)
        self.log_mask = np.zeros(z0.size, dtype=bool)
        self.log_mask[self.n_x0:] = np.broadcast_to(positive, (self.n_params,))[self.fitted]
        if log_factor is None:
            log_factor = np.ones(self.n_params)
        self.scale[self.log_mask] = np.asarray(log_factor, dtype=np.float64)[
            self.fitted][self.log_mask[self.n_x0:]]
        # Evaluation budget of one forward solve: generous at the start, then a multiple of
        # what the start needed (set by the solver), so that a trial point on the edge of
        # blowing up (or stiff for the integrator) is rejected in seconds, not minutes.
        self.max_evaluations = _START_EVALUATIONS
        self.n_forward = 0  # forward ODE solves
        self.n_derivative = 0  # sensitivity or adjoint passes
        self._cache_key, self._cache = None, None
        # the start x0 + initial_offsets(theta) of a model whose initial values depend on the
        # parameters (a PEtab import); a pre-equilibration sets the start instead
        self.offset_start = preequilibration is None and model.initial_offsets(
            self.experiment_theta(self.theta_fixed)) is not None

    # ------------------------------------------------------------------ variables
    def split(self, z):
        """The whole initial state and theta from the unknowns.

        Parameters
        ----------
        z : ndarray of shape (n_unknowns,)
            The unknowns ``[x0[free], theta[fitted]]``.

        Returns
        -------
        x0 : ndarray of shape (n_states,)
            Known components as given, free ones from ``z``.
        theta : ndarray of shape (n_params,)
            Held parameters as given, fitted ones from ``z``.
        """
        x0 = self.x0_fixed.copy()
        x0[self.free] = z[: self.n_x0]
        theta = self._theta_of(z)
        if self.preequilibration is not None:
            x0 = self.preequilibrated(x0, theta)[0]
        elif self.offset_start:
            x0 = x0 + self.model.initial_offsets(self.experiment_theta(theta))
        return x0, theta

    def offsets_derivative(self, theta):
        """The derivative of the start ``x0 + initial_offsets`` in the shared theta.

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            The shared parameters (the conditions' map is applied here).

        Returns
        -------
        ndarray of shape (n_states, n_params)
            ``d start / d theta``.
        """
        D = self.model.initial_offsets_jacobian(self.experiment_theta(theta))
        return D if self.theta_map is None else D @ self.theta_map[0]

    def preequilibrated(self, x0, theta, with_sensitivities=False):
        """The start after pre-equilibration and its derivative in the shared theta.

        Parameters
        ----------
        x0 : ndarray of shape (n_states,)
            The experiment's own start (kept for the ``reset`` components).
        theta : ndarray of shape (n_params,)
            The shared parameters.
        with_sensitivities : bool, default=False
            Also compute ``D``.

        Returns
        -------
        x0 : ndarray of shape (n_states,)
            The start.
        D : ndarray of shape (n_states, n_params) or None
            ``d x0 / d theta`` (shared theta; None unless asked).
        """
        # the reset components of x0 are known (no x0 is estimated with a
        # pre-equilibration), so the start depends on theta only: cache it by theta
        key = theta.tobytes()
        if self._pre_key != key or (with_sensitivities and self._pre[1] is None):
            self._pre_key = key
            self._pre = preequilibrated_start(self.model, self.preequilibration, x0, theta,
                                              with_sensitivities=with_sensitivities,
                                              shared=self.__dict__.get("shared_steady_state"),
                                              **self.solver)
        start, D = self._pre
        return start, (D if with_sensitivities else None)

    def split_theta(self, u):
        """The shared theta at the optimiser variables.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_params,)
            Held parameters as given, fitted ones from ``u``.
        """
        return self._theta_of(self.to_z(u))

    def _theta_of(self, z):
        """Held parameters as given, fitted ones from the unknowns ``z``."""
        theta = self.theta_fixed.copy()
        theta[self.fitted] = z[self.n_x0:]
        return theta

    def experiment_theta(self, theta):
        """This experiment's parameters (its conditions applied to the shared ``theta``).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            The shared parameters.

        Returns
        -------
        ndarray of shape (n_params,)
            ``A @ theta + c``, or ``theta`` without conditions.
        """
        if self.theta_map is None:
            return theta
        A, c = self.theta_map
        return A @ theta + c

    # ------------------------------------------------------------------ residual
    def _evaluate(self, u):
        key = u.tobytes()
        if key != self._cache_key:
            x0, theta = self.split(self.to_z(u))
            theta = self.experiment_theta(theta)
            self.n_forward += 1
            traj = self.solve(theta, x0, self.sensitivity_request(theta)
                              if self.prefetch_sensitivities else None)
            if self.observation is None:
                data = np.where(self.mask,
                                (traj.states[:, self.observed] - self.Y) / self.sigma, 0.0)
            else:
                data = self.observation.residual(traj.states, theta)
            r = np.concatenate([data.ravel(), self.extra_terms(x0)[0]])
            self._cache_key, self._cache = key, (traj, data, r, x0, theta)
        return self._cache

    def solve(self, theta, x0, prefetch=None):
        """The trajectory at this experiment's times from ``x0`` under its parameters
        ``theta`` (the solve it shares with other experiments, or its own).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            The experiment's parameters (:meth:`experiment_theta`).
        x0 : ndarray of shape (n_states,)
            The state at the experiment's start.
        prefetch : tuple, optional
            Sensitivities to solve along (:func:`~sklode.outputerror._sensitivity.forward_trajectory`).

        Returns
        -------
        Trajectory
            The states at the experiment's times (and what the derivative passes need).
        """
        shared = self.__dict__.get("shared_solve")
        if shared is not None:
            return shared.trajectory(self, theta, x0, prefetch)
        return forward_trajectory(self.model, theta, x0, self.t0, self.t, **self.solver,
                                  max_evaluations=self.max_evaluations, doses=self.doses,
                                  prefetch=prefetch)

    @property
    def n_data_rows(self):
        """Number of data rows at the top of the residual (missing entries count, as zeros;
        a modelled noise adds one row per entry)."""
        return self.Y.size if self.observation is None else self.observation.n_rows

    def evaluations_at(self, u):
        """Field evaluations the forward solve at ``u`` needed.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        int
            The count (the solve is cached).
        """
        return self._evaluate(u)[0].n_evaluations

    def extra_terms(self, x0):
        """Residuals of the x0 prior and of the invariant penalty (when x0 is estimated),
        and their Jacobian with respect to the free components of x0 (constant: both are
        affine in x0).

        Parameters
        ----------
        x0 : ndarray of shape (n_states,)
            The whole initial state.

        Returns
        -------
        r : ndarray of shape (n_extra,)
            The residuals.
        J : ndarray of shape (n_extra, n_free)
            Their Jacobian.
        """
        r, J = [np.zeros(0)], [np.zeros((0, self.n_x0))]
        if self.n_x0 and self.prior is not None:
            s0, sigma0 = self.prior
            sigma0 = np.broadcast_to(sigma0, x0.shape)[self.free]
            r.append((x0[self.free] - s0[self.free]) / sigma0)
            J.append(np.diag(1.0 / sigma0))
        if self.n_x0 and self.invariant is not None:
            c, total, k = self.invariant
            r.append([np.sqrt(k) * (c @ x0 - total)])
            J.append(np.sqrt(k) * c[None, self.free])
        return np.concatenate(r), np.vstack(J)

    def residual(self, u):
        """The residual vector ``r`` at ``u`` (data misfits, then the x0 terms).

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals,)
            Raises :class:`~sklode.exceptions.IntegrationError` where the ODE cannot be
            solved.
        """
        return self._evaluate(u)[2]

    def cost_offset(self):
        """The cost ``1/2 ||r||^2`` minus the data's ``-log L`` (PEtab's convention, every
        constant) when the noise levels are known or modelled: a constant of the data
        (:meth:`~sklode.observation._likelihood.Observation.cost_offset`), so that an optimiser whose
        stopping test is relative to the cost can see ``-log L`` itself.

        Returns
        -------
        float
            The constant (the cost's units: half a sum of squares).
        """
        if self.observation is not None:
            return self.observation.cost_offset()
        # without the observation layer the noise levels are known (sigma is never None)
        return -float(np.sum((np.log(self.sigma) + 0.5 * np.log(2.0 * np.pi))[self.mask]))

    def safe_residual(self, u):
        """Residual, or NaNs where the ODE blows up (trust-region methods then shrink).

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals,)
            As :meth:`residual`, all NaN where the ODE cannot be solved.
        """
        try:
            return self.residual(u)
        except IntegrationError as exc:
            logger.debug("trial point rejected: %s", exc)
            return np.full(self.n_data_rows + self.extra_terms(self.x0_fixed)[0].size, np.nan)

    @property
    def modelled_noise(self):
        """Whether the noise depends on the unknowns (the model's ``noise_sd``)."""
        return self.observation is not None and self.observation.modelled_noise

    def jacobian_z(self, u, fisher=False):
        """Jacobian of the residual in the unknowns, from forward sensitivities.

        With ``fisher=True`` and a modelled noise, the data rows are those whose Gram
        matrix is the expected Fisher information (:meth:`Observation.fisher_jacobians`),
        for the covariance.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.
        fisher : bool, default=False
            Rows of the expected Fisher information instead of the residual's.

        Returns
        -------
        ndarray of shape (n_residuals, n_unknowns)
            ``dr/dz``.
        """
        traj, _, _, x0, theta = self._evaluate(u)
        self.n_derivative += 1
        with_x0, params, start = self.sensitivity_request(theta)
        S = sensitivities(self.model, theta, traj, with_x0=with_x0, params=params, start=start,
                          fall_back=self.sensitivities_fall_back)
        if self.preequilibration is None:
            S = self._unknown_columns(S)
        else:  # the start moves with theta through the steady state: chain it in
            n = self.n_states
            S_full = S
            _, D = self.preequilibrated(x0, self.split_theta(u), with_sensitivities=True)
            S = self._unknown_columns(S_full[..., n:], x0_part=False)
            S = S + (S_full[..., :n] @ D)[..., self.fitted]
        if self.observation is None:
            J_data = (S[:, self.observed, :] * (self.mask / self.sigma)[:, :, None]
                      ).reshape(-1, S.shape[-1])
        else:  # chain rule through the observation rows: dR/dx S + dR/dtheta
            J_x, J_theta = (self.observation.fisher_jacobians(traj.states, theta)
                            if fisher and self.modelled_noise
                            else self.observation.jacobians(traj.states, theta))
            J_data = np.einsum("rd,rdq->rq", J_x, S[self.observation.row_times()])
            J_data[:, self.n_x0:] += self._unknown_columns(J_theta, x0_part=False)
        J_extra = self.extra_terms(x0)[1]  # no rows unless x0 is estimated
        block = np.zeros((J_extra.shape[0], S.shape[-1]))
        block[:, : self.n_x0] = J_extra
        return np.vstack([J_data, block])

    def sensitivity_request(self, theta):
        """The sensitivities :meth:`jacobian_z` asks for (what a prefetching solve computes).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            This experiment's parameters (:meth:`experiment_theta`).

        Returns
        -------
        with_x0 : bool
            Whether the columns of the initial state are wanted.
        params : ndarray of int or None
            The parameters whose columns are wanted (None: all).
        start : ndarray of shape (n_states, n_params) or None
            The start's derivative in the parameters, where the initial values depend on
            them.
        """
        if self.preequilibration is not None:  # every column, chained through the rest
            return True, None, None
        # initial offsets: the parameters' columns start at their derivative (sx0)
        start = self.model.initial_offsets_jacobian(theta) if self.offset_start else None
        return self.n_x0 > 0, self._needed_params(), start

    def _needed_params(self):
        """This experiment's parameters whose sensitivities the fitted ones need (through
        the conditions' map): the CVODES path integrates only those."""
        needed = self.__dict__.get("_needed")  # the map and the fitted set do not change
        if needed is None:
            needed = (np.flatnonzero(self.fitted) if self.theta_map is None else
                      np.flatnonzero(np.any(self.theta_map[0][:, self.fitted] != 0, axis=1)))
            self._needed = needed
        return needed

    def _unknown_columns(self, D, x0_part=True):
        """Derivatives in ``[x0 (all states, when estimated) | this experiment's theta]``
        (last axis) as derivatives in the unknowns ``[x0[free] | theta[fitted]]``: the
        conditions' map applied, the held columns dropped."""
        offset = self.n_states if (x0_part and self.n_x0) else 0
        D_theta = D[..., offset:]
        if self.theta_map is not None:
            D_theta = D_theta @ self.theta_map[0]
        D_theta = D_theta[..., self.fitted]
        if not offset:
            return D_theta
        return np.concatenate([D[..., :offset][..., self.free], D_theta], axis=-1)

    def value_and_grad(self, u, method="adjoint"):
        """The cost and its gradient in the optimiser variables.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.
        method : {"adjoint", "forward"}, default="adjoint"
            Continuous adjoint (one backward pass) or forward sensitivities.

        Returns
        -------
        L : float
            The cost.
        grad : ndarray of shape (n_unknowns,)
            ``dL/du``.
        """
        traj, data, r, x0, theta = self._evaluate(u)
        if method == "forward":
            return 0.5 * float(r @ r), self.jacobian(u).T @ r
        self.n_derivative += 1
        if self.observation is None:
            jumps = np.zeros((self.t.size, self.n_states))
            jumps[:, self.observed] = data / self.sigma
            direct = 0.0
        else:  # the rows' gradient in the states at the observation times, and in theta
            _, jumps, direct = self.observation.gradient(traj.states, theta)
        g_x0, g_theta = adjoint_gradient(self.model, theta, traj, jumps)
        g_theta = g_theta + direct
        if self.theta_map is not None:
            g_theta = self.theta_map[0].T @ g_theta
        if self.preequilibration is not None:
            _, D = self.preequilibrated(x0, self.split_theta(u), with_sensitivities=True)
            g_theta = g_theta + D.T @ g_x0
        elif self.offset_start:
            g_theta = g_theta + self.offsets_derivative(self.split_theta(u)).T @ g_x0
        r_extra, J_extra = self.extra_terms(x0)
        g_z = np.concatenate([g_x0[self.free] + J_extra.T @ r_extra, g_theta[self.fitted]])
        return 0.5 * float(r @ r), g_z * self.dz_du(u)

class _SharedSolve:
    """One forward solve for the experiments that pose the same initial value problem.

    A PEtab problem splits a condition into several experiments when its measurement rows
    give observable or noise parameters different values; the ODE is the same, and solving
    it once on the union of their times is what AMICI does (Fujita et al. 2010: 29
    experiments, 6 distinct solves). The CVODES path knows which parameters the field reads
    (:attr:`~sklode.models._native.NativeSolver.param_in_field`); the experiments of a group
    share the last solve while those parameters and the initial state are unchanged.
    """

    def __getstate__(self):
        return _state_without_solves(self, ("key", "traj"))

    def __init__(self, parts, field_params):
        self.parts, self.field_params = parts, field_params
        self.t = np.unique(np.concatenate([p.t for p in parts]))
        self.key, self.traj = None, None
        # each experiment's times among the union's, its own grid and its times on it
        # (fixed: computed once, not at every evaluation)
        self.layout = {}
        for p in parts:
            grid = np.union1d([p.t0], p.t)
            self.layout[id(p)] = (np.searchsorted(self.t, p.t), grid,
                                  np.searchsorted(grid, p.t))

    def trajectory(self, part, theta, x0, prefetch=None):
        key = (theta[self.field_params].tobytes(), np.asarray(x0, dtype=np.float64).tobytes())
        if key != self.key:
            self.key, self.traj = None, None
            self.traj = forward_trajectory(part.model, theta, x0, part.t0, self.t,
                                           **part.solver, max_evaluations=part.max_evaluations,
                                           doses=part.doses, prefetch=prefetch)
            self.key = key
        return _restricted(self.traj, *self.layout[id(part)])


def _restricted(traj, index, grid, obs_index):
    """A CVODES trajectory at a subset ``index`` of its observation times (``grid``: the
    subset and the start, ``obs_index``: the subset's places on it)."""
    native, scipy = traj.native, traj.scipy

    def scipy_subset():
        whole = scipy()
        return Trajectory(whole.grid, whole.obs_index[index], whole.states[index], whole.dense,
                          whole.x0, whole.n_evaluations)

    return Trajectory(grid, obs_index, traj.states[index], None, traj.x0, traj.n_evaluations,
                      native=lambda with_x0, params=None, start=None: native(
                          with_x0, params, start)[index],
                      scipy=scipy_subset, native_reads=traj.native_reads,
                      native_banded=traj.native_banded)


def _compiled_solver(part):
    """The CVODES solver the experiment ``part``'s solves run on, or None (the scipy path)."""
    return native_solver_for(part.model, _resolve_integrator(part.solver["integrator"]))


def _share_solves(parts):
    """Give experiments that pose the same initial value problem one shared solve (the
    CVODES path only: the scipy path does not know which parameters its field reads)."""

    first = parts[0]
    if len(parts) < 2:
        return
    native = _compiled_solver(first)
    if native is None:
        return
    field_params = np.flatnonzero(native.param_in_field)

    def field_rows(theta_map):  # how the conditions set the parameters the field reads
        if theta_map is None:
            return None
        return theta_map[0][field_params].tobytes() + theta_map[1][field_params].tobytes()

    groups = {}
    for part in parts:
        if part.n_x0:
            continue  # an estimated start is the experiment's own
        # experiments whose field is the same at every theta, from the same start; the
        # pre-equilibrated ones from the same rest too (Weber et al. 2015: 9 experiments,
        # 2 distinct solves). The trajectory's key (field parameters and the start reached)
        # guards the sharing; the group only decides who can meet it
        pre = (None if part.preequilibration is None else
               (field_rows(part.preequilibration[:2]), part.preequilibration[2].tobytes(),
                part.preequilibration[3].tobytes()))
        key = (part.t0, repr(part.doses), part.x0_fixed.tobytes(),
               field_rows(part.theta_map), pre)
        groups.setdefault(key, []).append(part)
    for members in groups.values():
        if len(members) > 1:
            shared = _SharedSolve(members, field_params)
            for part in members:
                part.shared_solve = shared


def _observation_only(model, native):
    """Which parameters only the observation and noise models read (not the field, not the
    initial values): experiments that differ in those alone have the same trajectory."""
    only = ~np.asarray(native.param_in_field, dtype=bool)
    if model.initial_offsets(model.theta_guess()) is not None:
        reads = getattr(model, "_initial_reads", None)
        read = None if reads is None else reads()
        if read is None:  # unknown: every parameter may set the start
            return np.zeros_like(only)
        only[read] = False
    return only


def _batch_observations(parts):
    """Batches (:class:`_ObservationBatch`) of the experiments whose observation rows can be
    evaluated as one grid: the compiled (numpy) observation path, the same noise kind per
    observable, no estimated x0 and no pre-equilibration. Within a batch, experiments that
    share a solve and differ only in their observation parameters share its sensitivities
    too."""
    first = parts[0]
    if len(parts) < 2:
        return []
    # (only the compiled solve is shared: on the scipy path each experiment is its own
    # group, and the model is not compiled for it)
    native = _compiled_solver(first)
    keep = (np.ones(first.n_params, dtype=bool) if native is None
            else ~_observation_only(first.model, native))
    batches = {}
    for k, part in enumerate(parts):
        observation = part.observation
        if (observation is None or part.n_x0 or part.preequilibration is not None
                or not observation.takes_rows_of_parameters):
            continue
        A, c = (part.theta_map if part.theta_map is not None
                else (np.eye(part.n_params), np.zeros(part.n_params)))
        shared = part.__dict__.get("shared_solve")
        same_trajectory = (k if shared is None else id(shared), A[keep].tobytes(),
                           c[keep].tobytes(), part.x0_fixed.tobytes())
        batch = batches.setdefault(observation.modelled_noise, {})
        batch.setdefault(same_trajectory, []).append(k)
    out = []
    for groups in batches.values():
        members = [k for group in groups.values() for k in group]
        kinds = {}
        for k in members:
            for column, kind in zip(parts[k].observation.columns, parts[k].observation.kinds):
                kinds.setdefault(column, set()).add(kind)
        if len(members) > 1 and all(len(v) == 1 for v in kinds.values()):
            out.append(_ObservationBatch(parts, list(groups.values())))
    return out


class _ObservationBatch:
    """The observation rows of several experiments evaluated as one grid (one theta per
    row); those that share one solve and differ only in the parameters their observation
    reads (a group) also share its sensitivities.

    A PEtab problem splits a condition into one experiment per set of observable and noise
    parameters its measurement rows give (Bruno et al. 2016: 42 experiments of one time
    point each, per-row noise levels, 6 conditions). Evaluated one by one, each costs ~0.5 ms
    of numpy calls on arrays of a few entries; as one grid, the calls are per batch. The
    rows, their order and their derivatives are those of the experiments' own objectives.

    Parameters
    ----------
    parts : list of LeastSquaresObjective
        The objective's experiments.
    groups : list of list of int
        The batch's experiments (places in ``parts``), by the trajectory they share: no
        estimated x0, no pre-equilibration; a group's maps differ only in observation-only
        rows and its experiments share a solve (or it is one experiment).
    """

    def __getstate__(self):
        return _state_without_solves(self, ("_key", "_cache"))

    def __init__(self, parts, groups):
        self.groups = [[parts[k] for k in group] for group in groups]
        self.indices = [k for group in groups for k in group]
        self.parts = [parts[k] for k in self.indices]
        self.observation, self.rows = Observation.stacked([p.observation for p in self.parts])
        self.counts = [p.t.size for p in self.parts]
        # each group's rows' times on its trajectory (a shared solve's union of times)
        self.times = [np.concatenate([g[0].shared_solve.layout[id(p)][0] for p in g])
                      if len(g) > 1 else np.arange(g[0].t.size) for g in self.groups]
        self.needed = [np.unique(np.concatenate([p._needed_params() for p in g]))
                       for g in self.groups]
        self._key, self._cache = None, None

    def _evaluate(self, u):
        key = u.tobytes()
        if key != self._key:
            X, thetas, trajectories = [], [], []
            for group, times, needed in zip(self.groups, self.times, self.needed):
                first = group[0]
                x0, theta = first.split(first.to_z(u))
                group_thetas = [p.experiment_theta(theta) for p in group]
                prefetch = None
                if first.prefetch_sensitivities:  # the columns the group's Jacobian wants
                    with_x0, _, start = first.sensitivity_request(group_thetas[0])
                    prefetch = (with_x0, needed, start)
                first.n_forward += 1
                traj = first.solve(group_thetas[0], x0, prefetch)
                if len(group) > 1:
                    traj = first.shared_solve.traj  # on the union of the group's times
                X.append(traj.states[times])
                thetas += group_thetas
                trajectories.append(traj)
            per_row = np.repeat(np.array(thetas), self.counts, axis=0)
            X = np.concatenate(X)
            r = self.observation.residual(X, per_row)
            self._key, self._cache = key, (trajectories, X, thetas, per_row, r)
        return self._cache

    def residuals(self, u):
        """Each experiment's residual at its optimiser variables ``u`` (the same for all:
        none estimates x0)."""
        r = self._evaluate(u)[4]
        return [r[rows] for rows in self.rows]

    def jacobians(self, u):
        """Each experiment's :meth:`LeastSquaresObjective.jacobian_z` at ``u``."""
        trajectories, X, thetas, per_row, _ = self._evaluate(u)
        S_rows, k = [], 0
        for group, traj, times, needed in zip(self.groups, trajectories, self.times,
                                              self.needed):
            first, theta = group[0], thetas[k]
            first.n_derivative += 1
            _, _, start = first.sensitivity_request(theta)
            S = sensitivities(first.model, theta, traj, with_x0=False, params=needed,
                              start=start, fall_back=first.sensitivities_fall_back)
            # the field's columns agree across a group (it reads none of the parameters
            # its experiments' maps differ in): the first experiment's map serves all
            S_rows.append(first._unknown_columns(S)[times])
            k += len(group)
        J_x, J_theta = self.observation.jacobians(X, per_row)
        J_data = np.einsum("rd,rdq->rq", J_x,
                           np.concatenate(S_rows)[self.observation.row_times()])
        # each experiment's observation rows through its own map (its theta per row)
        return [J_data[rows] + p._unknown_columns(J_theta[rows], x0_part=False)
                for p, rows in zip(self.parts, self.rows)]


def _share_steady_states(parts):
    """Give experiments pre-equilibrated from the same state one steady state (its solve
    and sensitivities once per evaluation instead of once per experiment)."""
    groups = {}
    for part in parts:
        if part.preequilibration is not None:
            key = (part.preequilibration[2].tobytes(), repr(part.solver))
            groups.setdefault(key, []).append(part)
    for members in groups.values():
        if len(members) < 2:
            continue
        model = members[0].model
        # the parameters the field reads, from its recorded program (kept on the model);
        # where it cannot be recorded the state is shared while all the values agree
        cache = model.__dict__.setdefault("_field_reads", {})
        if "read" not in cache:
            cache["read"] = parameters_read(model.rhs, model.n_states, model.n_params)
        read = cache["read"]
        shared = SharedSteadyState(None if read is None else np.flatnonzero(read))
        for part in members:
            part.shared_steady_state = shared


def _every_experiment(name, doc):
    """A setting every experiment of an :class:`ExperimentsObjective` holds: read from the
    first, written to all."""
    def get(self):
        return getattr(self.parts[0], name)

    def set_all(self, value):
        for part in self.parts:
            setattr(part, name, value)

    return property(get, set_all, doc=doc)


class ExperimentsObjective(_Objective):
    """The sum of several experiments' costs with shared parameters.

    The unknowns are ``z = [x0_1[free], ..., x0_K[free], theta[fitted]]``; the residual is
    every experiment's data residuals, then every experiment's x0 terms, so that the data rows
    come first as in :class:`LeastSquaresObjective` (whose interface this class offers).

    Parameters
    ----------
    parts : list of LeastSquaresObjective
        One per experiment, started from the same theta with the same fitted and positive
        parameters.
    """

    def __init__(self, parts):
        self.parts = list(parts)
        first = self.parts[0]
        self.model, self.n_states, self.n_params = first.model, first.n_states, first.n_params
        self.fitted, self.theta_fixed = first.fitted, first.theta_fixed
        sizes = [p.n_x0 for p in self.parts]
        self.x0_slices = [slice(a, a + n) for a, n in zip(np.cumsum([0] + sizes[:-1]), sizes)]
        self.n_x0 = int(sum(sizes))
        self.x0_states = np.concatenate([p.x0_states for p in self.parts])
        self.scale = np.concatenate([p.scale[: p.n_x0] for p in self.parts]
                                    + [first.scale[first.n_x0:]])
        self.log_mask = np.concatenate([p.log_mask[: p.n_x0] for p in self.parts]
                                       + [first.log_mask[first.n_x0:]])
        self.n_data = sum(p.n_data for p in self.parts)
        self.n_data_rows = sum(p.n_data_rows for p in self.parts)
        _share_solves(self.parts)
        _share_steady_states(self.parts)
        self.batches = _batch_observations(self.parts)

    prefetch_sensitivities = _every_experiment(
        "prefetch_sensitivities", "Whether the experiments' next solves bring their "
        "sensitivities along.")
    sensitivities_fall_back = _every_experiment(
        "sensitivities_fall_back", "Whether the experiments' Jacobians fall back to LSODA "
        "where CVODES fails.")
    max_evaluations = _every_experiment(
        "max_evaluations", "Field evaluations allowed per forward solve (shared by the "
        "experiments).")

    @property
    def n_forward(self):
        """Forward solves so far, all experiments."""
        return sum(p.n_forward for p in self.parts)

    @property
    def n_derivative(self):
        """Derivative passes so far, all experiments."""
        return sum(p.n_derivative for p in self.parts)

    def _part_u(self, u, k):
        return np.concatenate([u[self.x0_slices[k]], u[self.n_x0:]])

    def split(self, z):
        """Every experiment's initial state, and theta.

        Parameters
        ----------
        z : ndarray of shape (n_unknowns,)
            The unknowns.

        Returns
        -------
        x0 : ndarray of shape (n_experiments, n_states)
            One initial state per experiment.
        theta : ndarray of shape (n_params,)
            The parameters.
        """
        states = [p.split(np.concatenate([z[s], z[self.n_x0:]]))
                  for p, s in zip(self.parts, self.x0_slices)]
        return np.array([x0 for x0, _ in states]), states[0][1]

    def evaluations_at(self, u):
        """Most field evaluations one experiment's forward solve needs at ``u``.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        int
            The largest count over the experiments.
        """
        return max(p.evaluations_at(self._part_u(u, k)) for k, p in enumerate(self.parts))

    def _stack_rows(self, pieces):
        """Data rows of every experiment first, then their x0 terms."""
        data = [piece[: p.n_data_rows] for p, piece in zip(self.parts, pieces)]
        extra = [piece[p.n_data_rows:] for p, piece in zip(self.parts, pieces)]
        return np.concatenate(data + extra)

    def residual(self, u):
        """The residual vector at ``u``.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals,)
            Every experiment's data residuals, then their x0 terms.
        """
        return self._stack_rows(self._residual_pieces(u))

    def _residual_pieces(self, u):
        """Each experiment's residual, the batched ones (:class:`_ObservationBatch`) as one
        grid each."""
        pieces = [None] * len(self.parts)
        for batch in self.batches:
            for k, piece in zip(batch.indices, batch.residuals(u[self.n_x0:])):
                pieces[k] = piece
        return [p.residual(self._part_u(u, k)) if piece is None else piece
                for k, (p, piece) in enumerate(zip(self.parts, pieces))]

    def safe_residual(self, u):
        """Residual, or NaNs where an experiment's ODE blows up.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals,)
            As :meth:`residual`, all NaN where some forward solve fails.
        """
        try:
            r = self.residual(u)
        except IntegrationError as exc:
            logger.debug("trial point rejected: %s", exc)
            return np.full(self.n_data_rows + sum(
                p.extra_terms(p.x0_fixed)[0].size for p in self.parts), np.nan)
        return np.full(r.size, np.nan) if np.any(np.isnan(r)) else r

    def _columns(self, k):
        return np.r_[np.arange(self.x0_slices[k].start, self.x0_slices[k].stop),
                     self.n_x0 + np.arange(self.scale.size - self.n_x0)]

    def _place(self, blocks):
        """Per-experiment Jacobians (rows x [own x0, theta]) into the whole one."""
        J = np.zeros((sum(b.shape[0] for b in blocks), self.scale.size))
        rows = 0
        for k, block in enumerate(blocks):
            J[rows: rows + block.shape[0], self._columns(k)] = block
            rows += block.shape[0]
        return J

    @property
    def modelled_noise(self):
        """Whether some experiment's noise depends on the unknowns."""
        return any(p.modelled_noise for p in self.parts)

    def cost_offset(self):
        """The cost minus ``-log L`` (see :meth:`LeastSquaresObjective.cost_offset`).

        Returns
        -------
        float
            The experiments' constants summed.
        """
        return sum(p.cost_offset() for p in self.parts)

    def jacobian_z(self, u, fisher=False):
        """Jacobian of the residual in the unknowns.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.
        fisher : bool, default=False
            Rows of the expected Fisher information (see
            :meth:`LeastSquaresObjective.jacobian_z`).

        Returns
        -------
        ndarray of shape (n_residuals, n_unknowns)
            ``dr/dz``, rows ordered as in :meth:`residual`.
        """
        blocks = [None] * len(self.parts)
        if not fisher:  # (the Fisher rows, for the covariance once, take each experiment's)
            for batch in self.batches:
                for k, block in zip(batch.indices, batch.jacobians(u[self.n_x0:])):
                    blocks[k] = block
        blocks = [p.jacobian_z(self._part_u(u, k), fisher) if block is None else block
                  for k, (p, block) in enumerate(zip(self.parts, blocks))]
        data = self._place([b[: p.n_data_rows] for p, b in zip(self.parts, blocks)])
        extra = self._place([b[p.n_data_rows:] for p, b in zip(self.parts, blocks)])
        return np.vstack([data, extra])

    def value_and_grad(self, u, method="adjoint"):
        """The total cost and its gradient in the optimiser variables.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.
        method : {"adjoint", "forward"}, default="adjoint"
            As for :meth:`LeastSquaresObjective.value_and_grad`.

        Returns
        -------
        L : float
            The cost.
        grad : ndarray of shape (n_unknowns,)
            ``dL/du``.
        """
        total, grad = 0.0, np.zeros(self.scale.size)
        for k, part in enumerate(self.parts):
            value, g = part.value_and_grad(self._part_u(u, k), method)
            total += value
            grad[self._columns(k)] += g
        return total, grad

# ------------------------------------------------------------------ posing the cost
def observation_sigma(Y, sigma, noise_kind):
    """Standard deviation of every observation, shape of ``Y``.

    Parameters
    ----------
    Y : ndarray of shape (n_times, n_observed)
    sigma : float or array-like
        One value, one per observed state, or one per observation.
    noise_kind : {"absolute", "relative_rms", "proportional"}
        ``sigma`` in data units, as a fraction of each state's RMS, or of each observation
        (floored at 1e-6 of the state's largest value, so a zero observation keeps a finite
        weight).

    Returns
    -------
    ndarray of shape (n_times, n_observed)
        The standard deviation of each entry of ``Y``.
    """
    return known_sigma(Y, sigma, (noise_kind,) * Y.shape[1])


def uses_observation_layer(model, noise_kind):
    """Whether the cost needs the general observation layer: observables, a modelled noise,
    per-observable kinds, or a log or Laplace error (otherwise the plain weighted residuals
    of the observed states, the seed's cost)."""
    return (model.has_observation_model or model.has_noise_model
            or isinstance(noise_kind, dict)
            or DISTRIBUTIONS.get(noise_kind, "normal") != "normal")


def observation_for(model, experiment, observed, sigma, noise_kind, noise_range=None):
    """The :class:`~sklode.observation._likelihood.Observation` of one experiment, or None when the plain
    weighted residuals suffice (:func:`uses_observation_layer`).

    Parameters
    ----------
    model : ODEModel
    experiment : Experiment
    observed : tuple of int
        The observables the data's columns hold.
    sigma : float or array-like
        Known noise levels (unused when the model has ``noise_sd``).
    noise_kind : str or dict
    noise_range : float, optional
        How far below the data's typical size a modelled noise level may fall
        (:class:`~sklode.observation._likelihood.Observation`; its default when None).

    Returns
    -------
    Observation or None
    """
    if not uses_observation_layer(model, noise_kind):
        return None
    names = [model.observables[i] for i in observed]
    kinds = kinds_by_column(noise_kind, names, has_noise_model=model.has_noise_model)
    known = None if model.has_noise_model else known_sigma(experiment.Y, sigma, kinds)
    return Observation(model, observed, experiment.t, experiment.Y, kinds, known,
                       **({} if noise_range is None else {"noise_range": noise_range}))


def _prior_and_invariant(n, x0_prior, x0_prior_sigma, invariant, invariant_weight):
    prior = penalty = None
    if x0_prior is not None:
        if x0_prior_sigma is None:
            raise ValueError("x0_prior needs x0_prior_sigma (the prior standard deviation).")
        s0 = np.array(x0_prior, dtype=np.float64).reshape(-1)
        sigma0 = np.broadcast_to(np.asarray(x0_prior_sigma, np.float64), (n,)).copy()
        if s0.shape != (n,) or np.any(sigma0 <= 0):
            raise ValueError(f"x0_prior needs {n} values and x0_prior_sigma positive values.")
        prior = (s0, sigma0)
    if invariant is not None:
        c, total = invariant
        c = np.array(c, dtype=np.float64).reshape(-1)
        if c.shape != (n,):
            raise ValueError(f"invariant=(c, N) needs c with {n} entries; got {c.size}.")
        penalty = (c, float(total), float(invariant_weight))
    return prior, penalty


def objective_for_experiment(model, experiment, observed, *, theta0, fitted=None, sigma=1.0,
                             noise_kind="absolute", x0_prior=None, x0_prior_sigma=None,
                             invariant=None, invariant_weight=1e-4, positive=False,
                             integrator="auto", rtol=1e-8, atol=1e-10,
                             estimator_name="AdjointODE", noise_range=None):
    """The cost of one validated :class:`~sklode._validation.Experiment` and its start ``u0``.

    Parameters
    ----------
    model : ODEModel
    experiment : Experiment
    observed : tuple of int
    theta0 : ndarray of shape (n_params,)
    fitted : ndarray of bool of shape (n_params,), optional
        Parameters that are estimated (default: all); the others are held at ``theta0``.
    sigma, noise_kind, x0_prior, x0_prior_sigma, invariant, invariant_weight, positive, \
integrator, rtol, atol
        As for :class:`~sklode.AdjointODE`.
    estimator_name : str, default="AdjointODE"
        For messages.
    noise_range : float, optional
        How far below the data's typical size a modelled noise level may fall before the
        cost is undefined (:class:`~sklode.observation._likelihood.Observation`).

    Returns
    -------
    objective : LeastSquaresObjective
    u0 : ndarray
        The starting point in optimiser variables.
    """
    x0 = start_from_data(experiment, observed, model, estimator_name)
    prior, penalty = _prior_and_invariant(model.n_states, x0_prior, x0_prior_sigma, invariant,
                                          invariant_weight)
    sigma = sigma if experiment.sigma is None else experiment.sigma
    observation = observation_for(model, experiment, observed, sigma, noise_kind, noise_range)
    objective = LeastSquaresObjective(
        model, experiment.t0, experiment.t, experiment.Y,
        None if observation is not None else observation_sigma(experiment.Y, sigma,
                                                                noise_kind),
        observed, x0, theta0,
        free=experiment.estimate_x0, prior=prior, invariant=penalty,
        positive=check_positive(positive, model.n_params),
        log_factor=log_factors(positive, model.n_params), integrator=integrator, rtol=rtol,
        atol=atol, fitted=fitted, observation=observation, doses=experiment.doses or None,
        theta_map=condition_map(experiment.conditions, model),
        preequilibration=_preequilibration_of(experiment, model))
    return objective, objective.to_u(np.concatenate([x0[objective.free],
                                                     theta0[objective.fitted]]))


def _preequilibration_of(experiment, model):
    """``(A, c, x0_pre, reset)`` of a validated experiment's pre-equilibration, or None."""
    pre = getattr(experiment, "preequilibration", None)
    if pre is None:
        return None
    if experiment.estimate_x0.any():
        raise ValueError(f"Experiment {experiment.name or ''} starts from a pre-equilibrated "
                         "steady state: its initial state is not estimated (estimate_x0=False).")
    conditions, x0_pre, reset = pre
    A, c = condition_map(conditions, model) or (np.eye(model.n_params), np.zeros(model.n_params))
    return A, c, np.asarray(x0_pre, dtype=np.float64), np.asarray(reset, dtype=bool)


def objective_for_experiments(model, data, **settings):
    """The cost of every experiment of an :class:`~sklode._validation.ExperimentData` (theta
    shared) and its start: a :class:`LeastSquaresObjective` for one experiment, an
    :class:`ExperimentsObjective` for several.

    Parameters
    ----------
    model : ODEModel
    data : ExperimentData
    **settings
        The keyword arguments of :func:`objective_for_experiment`.

    Returns
    -------
    objective : LeastSquaresObjective or ExperimentsObjective
    u0 : ndarray
        The starting point in optimiser variables.
    """
    posed = [objective_for_experiment(model, experiment, data.observed, **settings)
             for experiment in data.experiments]
    if not data.several:
        return posed[0]
    objective = ExperimentsObjective([part for part, _ in posed])
    u0 = np.concatenate([u[: part.n_x0] for part, u in posed]
                        + [posed[0][1][posed[0][0].n_x0:]])
    return objective, u0


def build_objective(model, t, Y, *, theta0=None, x0=None, t0=None, estimate_x0=True,
                    observed=None, **settings):
    """The exact cost :class:`~sklode.AdjointODE` with these settings minimises on ``(t, Y)``.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    t : array-like of shape (n_samples,)
        Observation times.
    Y : array-like of shape (n_samples, n_observed)
        Observations of the observed states.
    theta0, x0, t0, estimate_x0, observed : optional
        As for :class:`~sklode.AdjointODE`.
    **settings
        The cost's other keyword arguments of :class:`~sklode.AdjointODE` (``sigma``,
        ``noise_kind``, ``x0_prior``, ``x0_prior_sigma``, ``invariant``,
        ``invariant_weight``, ``positive``, ``integrator``, ``rtol``, ``atol``); optimiser
        settings are ignored.

    Returns
    -------
    objective : LeastSquaresObjective
        The cost.
    u0 : ndarray
        The starting point in optimiser variables.
    """
    cost_keys = ("sigma", "noise_kind", "x0_prior", "x0_prior_sigma", "invariant",
                 "invariant_weight", "positive", "integrator", "rtol", "atol")
    data = check_experiments(t, Y, model=check_model(model), observed=observed, x0=x0, t0=t0,
                             estimate_x0=estimate_x0, estimator_name="AdjointODE")
    fitted, theta0 = check_fixed(settings.get("fixed"), check_theta0(theta0, model), model)
    return objective_for_experiments(
        model, data, theta0=theta0, fitted=fitted,
        **{k: v for k, v in settings.items() if k in cost_keys})
