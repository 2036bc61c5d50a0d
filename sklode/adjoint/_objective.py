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

from .._initial_state import start_from_data
from .._validation import NOISE_KINDS, check_experiments, check_positive, check_theta0
from ..exceptions import IntegrationError
from ..models import check_model
from ._sensitivity import adjoint_gradient, forward_trajectory, sensitivities

__all__ = ["NOISE_KINDS", "LeastSquaresObjective", "build_objective", "objective_for_experiment",
           "observation_sigma"]

logger = logging.getLogger("sklode")

_START_EVALUATIONS = 200_000  # ~8 s of torch evaluations for the starting point's solve


class LeastSquaresObjective:
    """The residual vector of the seed's cost and its derivatives in optimiser variables.

    The unknowns ``z = [x0[free], theta]`` are optimised as ``u``, with ``z = scale * u``
    (unknowns of very different sizes, x0 ~ 1e5 and theta ~ 1, all become order one) or
    ``theta = exp(u)`` for positive parameters.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    t0 : float
        Time of the initial state.
    t : ndarray of shape (n_times,)
        Increasing observation times (>= t0).
    Y : ndarray of shape (n_times, n_observed)
        Observations of the ``observed`` states.
    sigma : ndarray of shape (n_times, n_observed)
        Standard deviation of each observation.
    observed : tuple of int
        Indices of the states ``Y``'s columns hold.
    x0 : ndarray of shape (n_states,)
        Starting (or known) initial state.
    theta : ndarray of shape (n_params,)
        Starting parameters.
    free : ndarray of bool of shape (n_states,)
        Components of x0 that are estimated.
    prior : (ndarray, ndarray) or None
        Prior mean ``s0`` and standard deviation ``sigma0`` of x0 (applied to the free
        components).
    invariant : (ndarray, float, float) or None
        ``(c, total, k)``: penalty ``k/2 (c . x0 - total)^2`` (when some component is free).
    positive : ndarray of bool of shape (n_params,)
        Parameters optimised on the log scale.
    integrator : str
        Forward solver (:data:`sklode.integrate.INTEGRATORS`).
    rtol : float
        Relative tolerance of the forward solves.
    atol : float
        Absolute tolerance of the forward solves.
    """

    def __init__(self, model, t0, t, Y, sigma, observed, x0, theta, *, free, prior,
                 invariant, positive, integrator, rtol, atol):
        self.model, self.t0, self.t, self.Y = model, t0, t, Y
        self.sigma, self.observed = sigma, list(observed)
        self.x0_fixed = np.array(x0, dtype=np.float64)
        self.free = np.asarray(free, dtype=bool)
        self.prior, self.invariant = prior, invariant
        self.solver = {"integrator": integrator, "rtol": rtol, "atol": atol}
        self.n_states, self.n_params = model.n_states, model.n_params
        self.n_x0 = int(self.free.sum())
        z0 = np.concatenate([self.x0_fixed[self.free], np.asarray(theta, np.float64)])
        self.scale = np.where(z0 != 0, np.abs(z0), 1.0)
        self.log_mask = np.zeros(z0.size, dtype=bool)
        self.log_mask[self.n_x0:] = positive
        # Evaluation budget of one forward solve: generous at the start, then a multiple of
        # what the start needed (set by the solver), so that a trial point on the edge of
        # blowing up (or stiff for the integrator) is rejected in seconds, not minutes.
        self.max_evaluations = _START_EVALUATIONS
        self.n_forward = 0  # forward ODE solves
        self.n_derivative = 0  # sensitivity or adjoint passes
        self._cache_key, self._cache = None, None

    # ------------------------------------------------------------------ variables
    def to_u(self, z):
        """Optimiser variables from the unknowns.

        Parameters
        ----------
        z : array-like of shape (n_unknowns,)
            ``[x0[free], theta]``.

        Returns
        -------
        ndarray of shape (n_unknowns,)
            ``z / scale``, or ``log(theta)`` for positive parameters.
        """
        z = np.asarray(z, dtype=np.float64)
        if np.any(z[self.log_mask] <= 0):
            raise ValueError("positive=True needs strictly positive starting parameters; got "
                             f"theta0={z[self.n_x0:]}.")
        u = z / self.scale
        u[self.log_mask] = np.log(z[self.log_mask])
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
            ``z = [x0[free], theta]``.
        """
        z = u * self.scale
        z[self.log_mask] = np.exp(u[self.log_mask])
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
            ``scale``, or ``exp(u)`` for positive parameters.
        """
        d = self.scale.copy()
        d[self.log_mask] = np.exp(u[self.log_mask])
        return d

    def split(self, z):
        """The whole initial state and theta from the unknowns.

        Parameters
        ----------
        z : ndarray of shape (n_unknowns,)
            The unknowns ``[x0[free], theta]``.

        Returns
        -------
        x0 : ndarray of shape (n_states,)
            Known components as given, free ones from ``z``.
        theta : ndarray of shape (n_params,)
            The parameters.
        """
        x0 = self.x0_fixed.copy()
        x0[self.free] = z[: self.n_x0]
        return x0, z[self.n_x0:]

    # ------------------------------------------------------------------ residual
    def _evaluate(self, u):
        key = u.tobytes()
        if key != self._cache_key:
            x0, theta = self.split(self.to_z(u))
            self.n_forward += 1
            traj = forward_trajectory(self.model, theta, x0, self.t0, self.t, **self.solver,
                                      max_evaluations=self.max_evaluations)
            data = (traj.states[:, self.observed] - self.Y) / self.sigma
            r = np.concatenate([data.ravel(), self.extra_terms(x0)[0]])
            self._cache_key, self._cache = key, (traj, data, r, x0, theta)
        return self._cache

    def trajectory(self, u):
        """The forward trajectory at ``u`` (cached: derivatives at ``u`` reuse it).

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        Trajectory
            The stored forward solution (:func:`~sklode.adjoint.forward_trajectory`).
        """
        return self._evaluate(u)[0]

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
            return np.full(self.Y.size + self.extra_terms(self.x0_fixed)[0].size, np.nan)

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
    def jacobian_z(self, u):
        """Jacobian of the residual in the unknowns, from forward sensitivities.

        Parameters
        ----------
        u : ndarray of shape (n_unknowns,)
            Optimiser variables.

        Returns
        -------
        ndarray of shape (n_residuals, n_unknowns)
            ``dr/dz``.
        """
        traj, _, _, x0, theta = self._evaluate(u)
        self.n_derivative += 1
        S = sensitivities(self.model, theta, traj, with_x0=self.n_x0 > 0)
        if 0 < self.n_x0 < self.n_states:  # keep the free x0 columns and theta's
            S = S[..., np.concatenate([np.flatnonzero(self.free),
                                       self.n_states + np.arange(self.n_params)])]
        J_data = S[:, self.observed, :] / self.sigma[:, :, None]
        J_extra = self.extra_terms(x0)[1]  # no rows unless x0 is estimated
        block = np.zeros((J_extra.shape[0], S.shape[-1]))
        block[:, : self.n_x0] = J_extra
        return np.vstack([J_data.reshape(-1, S.shape[-1]), block])

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
        jumps = np.zeros((self.t.size, self.n_states))
        jumps[:, self.observed] = data / self.sigma
        g_x0, g_theta = adjoint_gradient(self.model, theta, traj, jumps)
        r_extra, J_extra = self.extra_terms(x0)
        g_z = np.concatenate([g_x0[self.free] + J_extra.T @ r_extra, g_theta])
        return 0.5 * float(r @ r), g_z * self.dz_du(u)

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
    value = np.asarray(sigma, dtype=np.float64)
    try:
        value = np.broadcast_to(value if value.ndim != 1 or value.size == 1
                                else value[None, :], Y.shape)
    except ValueError:
        raise ValueError(f"sigma of shape {np.shape(sigma)} does not match Y of shape "
                         f"{Y.shape}: give one value, one per observed state, or one per "
                         "observation.") from None
    if not np.all(np.isfinite(value)) or np.any(value <= 0):
        raise ValueError(f"sigma must be positive and finite; got {sigma!r}.")
    if noise_kind == "absolute":
        return value.copy()
    if noise_kind == "relative_rms":
        return value * np.sqrt(np.mean(Y**2, axis=0, keepdims=True))
    floor = 1e-6 * np.max(np.abs(Y), axis=0, keepdims=True)
    return value * np.maximum(np.abs(Y), np.where(floor > 0, floor, 1.0))


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


def objective_for_experiment(model, experiment, observed, *, theta0, sigma=1.0,
                             noise_kind="absolute", x0_prior=None, x0_prior_sigma=None,
                             invariant=None, invariant_weight=1e-4, positive=False,
                             integrator="LSODA", rtol=1e-8, atol=1e-10,
                             estimator_name="AdjointODE"):
    """The cost of one validated :class:`~sklode._validation.Experiment` and its start ``u0``.

    Parameters
    ----------
    model : ODEModel
    experiment : Experiment
    observed : tuple of int
    theta0 : ndarray of shape (n_params,)
    sigma, noise_kind, x0_prior, x0_prior_sigma, invariant, invariant_weight, positive, \
integrator, rtol, atol
        As for :class:`~sklode.AdjointODE`.
    estimator_name : str, default="AdjointODE"
        For messages.

    Returns
    -------
    objective : LeastSquaresObjective
    u0 : ndarray
        The starting point in optimiser variables.
    """
    x0 = start_from_data(experiment, observed, model, estimator_name)
    prior, penalty = _prior_and_invariant(model.n_states, x0_prior, x0_prior_sigma, invariant,
                                          invariant_weight)
    objective = LeastSquaresObjective(
        model, experiment.t0, experiment.t, experiment.Y,
        observation_sigma(experiment.Y, sigma, noise_kind), observed, x0, theta0,
        free=experiment.estimate_x0, prior=prior, invariant=penalty,
        positive=check_positive(positive, model.n_params), integrator=integrator, rtol=rtol,
        atol=atol)
    return objective, objective.to_u(np.concatenate([x0[experiment.estimate_x0], theta0]))


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
    return objective_for_experiment(
        model, data.only_experiment("AdjointODE"), data.observed,
        theta0=check_theta0(theta0, model),
        **{k: v for k, v in settings.items() if k in cost_keys})
