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

import dataclasses
import logging
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .._validation import (
    NOISE_KINDS,
)
from ..exceptions import IntegrationError
from ._sensitivity import (
    adjoint_gradient,
    forward_trajectory,
    sensitivities,
)
from ._steady_state import preequilibrated_start

__all__ = ["NOISE_KINDS", "LeastSquaresObjective"]

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


@dataclass(frozen=True)
class SolvePolicy:
    """How an objective's forward solves run: what an optimiser may change, through
    :meth:`LeastSquaresObjective.set_policy` or the ``solving`` block, and nothing else does.

    Attributes
    ----------
    prefetch_sensitivities : bool
        Solve the next points' states together with the sensitivities the Jacobian will ask
        for (the CVODES path): an optimiser turns it on where it expects to want the Jacobian.
    sensitivities_fall_back : bool
        Where CVODES fails on the sensitivities, compute them on LSODA's trajectory (else the
        Jacobian raises IntegrationError: a trust region rejects the point and shrinks).
    max_evaluations : int
        Field evaluations allowed per forward solve: generous at the start, then a multiple
        of what the start needed (set by :func:`~._optimize.adjoint_solve`), so that a trial
        point on the edge of blowing up (or stiff for the integrator) is rejected in seconds,
        not minutes.
    """

    prefetch_sensitivities: bool = False
    sensitivities_fall_back: bool = True
    max_evaluations: int = _START_EVALUATIONS


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

    @contextmanager
    def solving(self, **changes):
        """Within the block, solve with these :class:`SolvePolicy` fields changed; the policy
        before it is back afterwards (whatever happens in the block).

        Parameters
        ----------
        **changes
            ``prefetch_sensitivities``, ``sensitivities_fall_back``, ``max_evaluations``.
        """
        before = self.policy
        self.set_policy(**changes)
        try:
            yield self
        finally:
            self.set_policy(**dataclasses.asdict(before))

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
        The observation and noise model (:class:`sklode.observation._observation.Observation`): the
        data rows are its residual rows (observables, modelled noise, log or Laplace errors) instead
        of ``(x_observed - Y) / sigma``.
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
        self.policy = SolvePolicy()
        # set by ExperimentsObjective (share): a solve, or a steady state, several experiments
        # posing the same initial value problem share
        self.shared_solve = None
        self.shared_steady_state = None
        self.n_forward = 0  # forward ODE solves
        self.n_derivative = 0  # sensitivity or adjoint passes
        self._cache_key, self._cache = None, None
        # the start x0 + initial_offsets(theta) of a model whose initial values depend on the
        # parameters (a PEtab import); a pre-equilibration sets the start instead
        self.offset_start = preequilibration is None and model.initial_offsets(
            self.experiment_theta(self.theta_fixed)) is not None

    # ------------------------------------------------------------------ variables
    def set_policy(self, **changes):
        """Change fields of the :class:`SolvePolicy` of the solves from here on.

        Parameters
        ----------
        **changes
            ``prefetch_sensitivities``, ``sensitivities_fall_back``, ``max_evaluations``.
        """
        self.policy = dataclasses.replace(self.policy, **changes)

    def share(self, *, solve=None, steady_state=None):
        """Take the forward solve or the steady state that other experiments posing the same
        problem share (:class:`~._experiments.ExperimentsObjective`).

        Parameters
        ----------
        solve : _SharedSolve, optional
            The one forward solve of the experiments' common initial value problem.
        steady_state : SharedSteadyState, optional
            Their common pre-equilibration.
        """
        if solve is not None:
            self.shared_solve = solve
        if steady_state is not None:
            self.shared_steady_state = steady_state

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
                                              shared=self.shared_steady_state,
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
                              if self.policy.prefetch_sensitivities else None)
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
            Sensitivities to solve along
            (:func:`~sklode.outputerror._sensitivity.forward_trajectory`).

        Returns
        -------
        Trajectory
            The states at the experiment's times (and what the derivative passes need).
        """
        shared = self.shared_solve
        if shared is not None:
            return shared.trajectory(self, theta, x0, prefetch)
        return forward_trajectory(self.model, theta, x0, self.t0, self.t, **self.solver,
                                  max_evaluations=self.policy.max_evaluations,
                                  doses=self.doses,
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
        (:meth:`~sklode.observation._observation.Observation.cost_offset`), so that an optimiser
        whose stopping test is relative to the cost can see ``-log L`` itself.

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
                          fall_back=self.policy.sensitivities_fall_back)
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
            Continuous adjoint (one backward pass) or forward sensitivities; forward in
            either case for a network on KLU whose solve has no CVODES adjoint.

        Returns
        -------
        L : float
            The cost.
        grad : ndarray of shape (n_unknowns,)
            ``dL/du``.
        """
        if method == "forward":
            return self._forward_value_and_grad(u)
        pieces = self.adjoint_pieces(u)
        if pieces is None:  # a KLU network without CVODES' adjoint: J^T r
            return self._forward_value_and_grad(u)
        value, traj, jumps, theta, finish = pieces
        return value, finish(*adjoint_gradient(self.model, theta, traj, jumps))

    def _forward_value_and_grad(self, u):
        r = self._evaluate(u)[2]
        return 0.5 * float(r @ r), self.jacobian(u).T @ r

    def adjoint_pieces(self, u):
        """The cost and what its adjoint gradient is made of, or None where the gradient
        is ``J^T r`` instead (a KLU network whose solve has no CVODES adjoint: the adjoint on
        LSODA's trajectory was 20x slower on Smith_BMCSystBiol2013).

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        value : float
            The cost.
        traj : Trajectory
            The forward solve at ``u``.
        jumps : ndarray (n_times, n_states)
            ``dL/dx`` at the observation times.
        theta : ndarray (n_params,)
            This experiment's parameters.
        finish : callable
            ``finish(grad_x0, grad_theta) -> dL/du`` from the adjoint's gradient in this
            experiment's start and parameters; affine: its part that does not depend on them
            (the observation's own parameters, the penalty on x0) is ``finish(0, 0)``.
        """
        traj, data, r, x0, theta = self._evaluate(u)
        if traj.native_sparse and traj.native_adjoint is None:
            return None
        self.n_derivative += 1
        if self.observation is None:
            jumps = np.zeros((self.t.size, self.n_states))
            jumps[:, self.observed] = data / self.sigma
            direct = 0.0
        else:  # the rows' gradient in the states at the observation times, and in theta
            _, jumps, direct = self.observation.gradient(traj.states, theta)
        r_extra, J_extra = self.extra_terms(x0)
        scale = self.dz_du(u)

        def finish(g_x0, g_theta):
            g_theta = g_theta + direct
            if self.theta_map is not None:
                g_theta = self.theta_map[0].T @ g_theta
            if self.preequilibration is not None and np.any(g_x0):
                _, D = self.preequilibrated(x0, self.split_theta(u), with_sensitivities=True)
                g_theta = g_theta + D.T @ g_x0
            elif self.offset_start and np.any(g_x0):
                g_theta = g_theta + self.offsets_derivative(self.split_theta(u)).T @ g_x0
            g_z = np.concatenate([g_x0[self.free] + J_extra.T @ r_extra, g_theta[self.fitted]])
            return g_z * scale

        return 0.5 * float(r @ r), traj, jumps, theta, finish


