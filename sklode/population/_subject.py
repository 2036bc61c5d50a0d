"""One subject of a population: its predictions and their derivatives, its random effects'
conditional mode, and its contribution to the marginal likelihood. Arrays in, arrays out.

A subject's parameters are the population's ``theta`` with the random ones multiplied by
``exp(eta)`` (log-normal between subjects, nlme's log-parameter form), then its conditions
applied (``A @ theta + c``: covariates, dose groups). Its observations are normal around the
model's observables ``h`` with standard deviations ``s``: the model's ``noise_sd`` at ``h``
when it has one, else one additive level per observable (the estimator's ``sigma_``).

The conditional mode of ``eta`` minimises

    g(eta) = sum_j [ (y_j - h_j)^2 / (2 s_j^2) + log s_j ] + eta' Omega^-1 eta / 2

(the interaction form: ``s`` moves with ``eta`` when the noise depends on the prediction), by
Fisher scoring; the marginal ``-log L`` is Laplace's approximation at the mode,

    g(eta_hat) + (m / 2) log 2 pi + log|Omega| / 2 + log|H| / 2,

with ``H`` the expected information ``sum_j [dh dh' / s^2 + 2 dlog s dlog s'] + Omega^-1``
(FOCE-I; with an additive noise this is exactly the linearised mixed model's likelihood that
nlme reports) or the exact Hessian of ``g`` (Laplace).
"""

from __future__ import annotations

import numpy as np
import torch

from .._checks import condition_map
from ..exceptions import IntegrationError
from ..outputerror._sensitivity import forward_trajectory, sensitivities
from ._differences import central_differences

__all__ = ["Subject", "eta_scale", "subject_theta"]

_LOG_2PI = np.log(2.0 * np.pi)
# Fisher scoring stops when the decrement g' H^-1 g is below this (relative to g): the value
# at the mode is then exact to ~1e-12 relative, below the ODE solves' own noise (rtol)
_DECREMENT_TOL = 1e-12
_MAX_SCORING = 50
# Central-difference step of the exact Hessian in eta (Laplace): eta is on the log scale,
# O(0.1-1); the gradient it differences comes from sensitivities at rtol 1e-10.
_HESSIAN_STEP = 1e-4


def subject_theta(theta, random, eta, additive=None):
    """The subject's parameters: ``theta`` with ``theta[random] * exp(eta)`` (log-normal
    random effects), or ``theta[random] + eta`` where ``additive`` (normal ones)."""
    out = np.array(theta, dtype=np.float64)
    eta = np.asarray(eta, dtype=np.float64)
    if additive is None or not np.any(additive):
        out[random] = out[random] * np.exp(eta)
    else:
        out[random] = np.where(additive, out[random] + eta, out[random] * np.exp(eta))
    return out


def eta_scale(th, random, additive=None):
    """``d theta_i[random] / d eta`` at the subject's parameters ``th``: ``theta_i`` for a
    log-normal random effect, 1 for a normal (additive) one."""
    scale = np.array(th[random], dtype=np.float64)
    return scale if additive is None else np.where(additive, 1.0, scale)


class Subject:
    """One validated experiment of a population fit.

    Parameters
    ----------
    model : ODEModel
    experiment : sklode._validation.Experiment
        Known initial state (doses and conditions allowed).
    observed : tuple of int
        The observables ``Y``'s columns hold.
    random : ndarray of int
        Indices of the random parameters.
    options : dict
        ``integrator``, ``rtol``, ``atol`` of the forward solves.
    additive : ndarray of bool, optional
        Which random effects are normal (added), not log-normal.
    """

    def __init__(self, model, experiment, observed, random, options, additive=None):
        self.model, self.experiment, self.options = model, experiment, options
        self.random = np.asarray(random, dtype=int)
        self.additive = None if additive is None else np.asarray(additive, dtype=bool)
        self.columns = np.asarray(observed, dtype=int)
        mapping = condition_map(experiment.conditions, model)
        p = model.n_params
        self.A, self.c = mapping if mapping is not None else (np.eye(p), np.zeros(p))
        self.rows, self.cols = np.nonzero(experiment.mask)  # observed entries, row-major
        self.y = experiment.Y[self.rows, self.cols]
        self.n_values = self.y.size
        self.plain = not (model.has_observation_model or model.has_noise_model)
        self._t = torch.from_numpy(np.asarray(experiment.t, dtype=np.float64).copy())
        self._last = (None, None)  # (parameters, trajectory) of the last forward solve

    # ------------------------------------------------------------------ predictions
    def predict(self, theta, derivatives=False):
        """Observables (and their noise levels) at the observed entries.

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            The subject's parameters before its conditions.
        derivatives : bool, default=False
            Also return the derivatives in ``theta``.

        Returns
        -------
        h : ndarray of shape (n_values,)
        log_s : ndarray of shape (n_values,) or None
            ``log`` of the model's ``noise_sd`` (None without one).
        dh : ndarray of shape (n_values, n_params) or None
        dlog_s : ndarray of shape (n_values, n_params) or None
        """
        e = self.experiment
        th = self.A @ theta + self.c
        key = th.tobytes()
        offsets = self.model.initial_offsets(th)  # a start that depends on the parameters
        if key == self._last[0]:  # an accepted trial point is the next linearisation point
            traj = self._last[1]
        else:
            x0 = e.x0 if offsets is None else e.x0 + offsets
            traj = forward_trajectory(self.model, th, x0, e.t0, e.t, doses=e.doses or None,
                                      **self.options)
            self._last = (key, traj)
        X = traj.states
        S = None
        if derivatives:
            start = None if offsets is None else self.model.initial_offsets_jacobian(th)
            S = sensitivities(self.model, th, traj, with_x0=False,
                              start=start) @ self.A  # (n_t, n, p)
        if self.plain:
            h = X[self.rows, self.columns[self.cols]]
            dh = None if S is None else S[self.rows, self.columns[self.cols], :]
            return h, None, dh, None
        return self._observation(X, th, S)

    def _observation(self, X, th, S):
        """``h`` and ``log s`` through the model's ``observe`` and ``noise_sd`` (torch), with
        their derivatives by the chain rule through the states."""
        model, cols = self.model, torch.from_numpy(self.columns)

        def rows(x, theta):
            everything = model.observe(self._t, x, theta) if model.has_observation_model else x
            h = everything[:, cols]
            if not model.has_noise_model:
                return h, torch.zeros_like(h)
            return h, torch.log(model.noise_sd(self._t, everything, theta)[:, cols])

        Xt, tht = torch.from_numpy(X), torch.from_numpy(th)
        with torch.no_grad():
            h, log_s = (v.numpy()[self.rows, self.cols] for v in rows(Xt, tht))
        if not np.all(np.isfinite(log_s)):
            raise IntegrationError("The model's noise_sd is not positive at these parameters.")
        if S is None:
            return h, (log_s if model.has_noise_model else None), None, None
        # each time's rows depend on its own state only: a jacobian in the whole X holds
        # every time's block; dense is fine at the sizes of one subject
        (hx, hth), (sx, sth) = torch.func.jacrev(rows, argnums=(0, 1))(Xt, tht)
        r, c = self.rows, self.cols
        hx = hx.numpy()[r, c, r]      # (m, n): d h_(r,c) / d x_r
        sx = sx.numpy()[r, c, r]
        dh = np.einsum("mn,mnp->mp", hx, S[r]) + hth.numpy()[r, c] @ self.A
        dls = np.einsum("mn,mnp->mp", sx, S[r]) + sth.numpy()[r, c] @ self.A
        if not model.has_noise_model:
            return h, None, dh, None
        return h, log_s, dh, dls

    # ------------------------------------------------------------------ one eta
    def terms(self, theta, eta, log_sigma, derivatives=True):
        """``g(eta)`` without its constants, its gradient and expected information in eta.

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            Population parameters.
        eta : ndarray of shape (n_random,)
        log_sigma : ndarray of shape (n_columns,) or None
            Log of the additive noise levels (None: the model's ``noise_sd``).
        derivatives : bool, default=True

        Returns
        -------
        value : float
            ``sum [e^2 / (2 s^2) + log s]`` (the data part of ``g``).
        grad : ndarray of shape (n_random,) or None
        info : ndarray of shape (n_random, n_random) or None
        parts : tuple
            ``(h, log_s, dh, dlog_s)`` at the subject's parameters (derivatives in theta).
        """
        th = subject_theta(theta, self.random, eta, self.additive)
        h, log_s, dh, dls = self.predict(th, derivatives)
        if log_s is None:
            log_s = log_sigma[self.cols]
        e = self.y - h
        w = np.exp(-2.0 * log_s)
        value = float(np.sum(0.5 * e * e * w + log_s))
        if not derivatives:
            return value, None, None, (h, log_s, None, None)
        scale = eta_scale(th, self.random, self.additive)  # d theta_random / d eta
        dh_eta = dh[:, self.random] * scale
        grad = -(e * w) @ dh_eta
        info = (dh_eta * w[:, None]).T @ dh_eta
        if dls is not None:
            dls_eta = dls[:, self.random] * scale
            grad = grad + (1.0 - e * e * w) @ dls_eta
            info = info + 2.0 * dls_eta.T @ dls_eta
        return value, grad, info, (h, log_s, dh, dls)

    def mode(self, theta, omega_inv, log_sigma, eta0):
        """The conditional mode of eta (empirical Bayes estimate) by Fisher scoring.

        Returns
        -------
        eta : ndarray of shape (n_random,)
        value : float
            ``g(eta)`` without constants (data part plus ``eta' Omega^-1 eta / 2``).
        info : ndarray of shape (n_random, n_random)
            Expected information of ``g`` at the mode (``Omega^-1`` included).
        parts : tuple
            As :meth:`terms`.
        """
        eta = np.array(eta0, dtype=np.float64)
        data, grad, info, parts = self.terms(theta, eta, log_sigma)
        value = data + 0.5 * eta @ omega_inv @ eta
        for _ in range(_MAX_SCORING):
            H = info + omega_inv
            g = grad + omega_inv @ eta
            step = -np.linalg.solve(H, g)
            decrement = float(-g @ step)
            if decrement < _DECREMENT_TOL * max(1.0, abs(value)):
                break
            t = 1.0
            while t > 1e-3:  # a scoring step that does not decrease g after 10 halvings is
                # the solves' noise: the mode is found to their precision
                trial = eta + t * step
                try:
                    new = self.terms(theta, trial, log_sigma, derivatives=False)[0]
                except IntegrationError:
                    new = np.inf
                new += 0.5 * trial @ omega_inv @ trial
                # Armijo on the scoring direction (H is positive definite)
                if new <= value - 1e-4 * t * decrement:
                    break
                t *= 0.5
            else:
                break  # no decrease along the scoring direction: at the mode to precision
            eta = trial
            data, grad, info, parts = self.terms(theta, eta, log_sigma)
            value = data + 0.5 * eta @ omega_inv @ eta
        return eta, value, info + omega_inv, parts

    def exact_hessian(self, theta, omega_inv, log_sigma, eta):
        """The Hessian of ``g`` in eta at ``eta`` by central differences of its gradient
        (for Laplace's approximation)."""
        H = central_differences(lambda v: self.terms(theta, v, log_sigma)[1], eta,
                                _HESSIAN_STEP)
        return 0.5 * (H + H.T) + omega_inv

    def neg_log_likelihood(self, theta, omega, log_sigma, eta0, method="foce"):
        """This subject's marginal ``-log L`` (FOCE-I or Laplace) and its mode.

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
        omega : ndarray of shape (n_random, n_random)
        log_sigma : ndarray or None
        eta0 : ndarray of shape (n_random,)
            Start of the mode search.
        method : {"foce", "laplace"}

        Returns
        -------
        nll : float
        eta : ndarray of shape (n_random,)
        """
        omega_inv = np.linalg.inv(omega)
        eta, value, H, _ = self.mode(theta, omega_inv, log_sigma, eta0)
        if method == "laplace":
            H = self.exact_hessian(theta, omega_inv, log_sigma, eta)
        sign_h, logdet_h = np.linalg.slogdet(H)
        if sign_h <= 0:
            raise IntegrationError("The random effects' Hessian is not positive definite.")
        logdet_omega = np.linalg.slogdet(omega)[1]
        nll = value + 0.5 * (self.n_values * _LOG_2PI + logdet_omega + logdet_h)
        return float(nll), eta

    # ------------------------------------------------------------------ FOCE-I gradient
    def foce_gradient(self, theta, omega, log_sigma, eta, layout, omega_derivatives):
        """The gradient of this subject's FOCE-I ``-log L`` in the unknowns ``phi``, at the
        conditional mode ``eta``, from sensitivities.

        The mode moves with ``phi`` (implicit function theorem) and the information ``H``
        moves with the mode and with ``b``: both need the second derivatives of the
        observables (and log noise levels) in the parameters, taken as central differences
        of the sensitivity Jacobian along each fixed effect (two sensitivity solves per
        estimated parameter; the random parameters' directions are among them: on the log
        scale ``d/d eta_r = d/d b_r``).

        Parameters
        ----------
        theta : ndarray of shape (n_params,)
            Population parameters.
        omega : ndarray of shape (n_random, n_random)
        log_sigma : ndarray or None
            Additive noise levels (None: the model's ``noise_sd``).
        eta : ndarray of shape (n_random,)
            The conditional mode.
        layout : Layout
            The unknowns' layout (:mod:`._solver`).
        omega_derivatives : list of ndarray
            ``d Omega / d omega_k`` for each covariance unknown.

        Returns
        -------
        ndarray of shape (n_unknowns,)
        """
        E, R = layout.estimated, layout.random
        th = subject_theta(theta, R, eta, layout.additive)
        scale_eta = eta_scale(th, R, layout.additive)
        lognormal = (np.ones(R.size, dtype=bool) if layout.additive is None
                     else ~layout.additive)
        h, log_s, J, Js = self.predict(th, derivatives=True)
        additive = log_s is None
        if additive:
            log_s = log_sigma[self.cols]
            Js = np.zeros_like(J)
        # d theta / d b along each fixed effect (log scale: theta_k itself)
        scale_b = np.where(layout.log_mask, th[E], 1.0)
        position = {int(k): i for i, k in enumerate(E)}
        r_in_b = np.array([position[int(r)] for r in R])
        # second derivatives: d J / d b_k by central differences (log scale: multiplicative)
        step = 1e-4
        DJ, DJs = [], []
        for i, k in enumerate(E):
            plus, minus = th.copy(), th.copy()
            if layout.log_mask[i]:
                plus[k], minus[k] = th[k] * np.exp(step), th[k] * np.exp(-step)
            else:
                plus[k], minus[k] = th[k] + step, th[k] - step
            _, _, Jp, Jsp = self.predict(plus, derivatives=True)
            _, _, Jm, Jsm = self.predict(minus, derivatives=True)
            DJ.append((Jp - Jm) / (2 * step))
            DJs.append(np.zeros_like(J) if additive else (Jsp - Jsm) / (2 * step))

        e = self.y - h
        w = np.exp(-2.0 * log_s)
        X, Xs = J[:, E] * scale_b, Js[:, E] * scale_b       # d/db (m, n_b)
        A, C = X[:, r_in_b], Xs[:, r_in_b]                  # d/d eta (m, q)
        omega_inv = np.linalg.inv(omega)
        H = (A * w[:, None]).T @ A + 2.0 * C.T @ C + omega_inv
        H_inv = np.linalg.inv(H)

        def dA(i):
            """d A / d b_i and d C / d b_i."""
            a = DJ[i][:, R] * scale_eta
            c = DJs[i][:, R] * scale_eta
            # b_i is a log-normal random parameter's: d theta_i / d eta moves with it (its
            # own column); a normal one's is 1
            hit = np.flatnonzero((r_in_b == i) & lognormal)
            a[:, hit] += A[:, hit]
            c[:, hit] += C[:, hit]
            return a, c

        def moves(i):
            """d H / d b_i and d (grad_eta g) / d b_i (data parts)."""
            a, c = dA(i)
            x, xs = X[:, i], Xs[:, i]
            dw = -2.0 * w * xs
            dH = a.T @ (A * w[:, None]) + (A * w[:, None]).T @ a + (A * dw[:, None]).T @ A \
                + 2.0 * (c.T @ C + C.T @ c)
            d_ew = -x * w + e * dw                          # d (e w)
            d_res = 2.0 * e * w * x + 2.0 * e * e * w * xs  # d (1 - e^2 w)
            dgrad = -a.T @ (e * w) - A.T @ d_ew + c.T @ (1.0 - e * e * w) + C.T @ d_res
            return dH, dgrad

        pieces = [moves(i) for i in range(layout.n_b)]
        G = np.column_stack([pieces[i][1] for i in r_in_b]) + omega_inv  # exact Hessian in eta
        G = 0.5 * (G + G.T)
        dH_deta = [pieces[i][0] for i in r_in_b]
        trace_eta = np.array([np.sum(H_inv * d) for d in dH_deta])  # tr(H^-1 dH/d eta_r)

        grad = np.zeros(layout.n_b + layout.n_omega + layout.n_sigma)
        G_inv = np.linalg.inv(G)
        for i in range(layout.n_b):
            dH, dgrad = pieces[i]
            direct = -X[:, i] @ (e * w) + Xs[:, i] @ (1.0 - e * e * w)
            d_eta = -G_inv @ dgrad
            grad[i] = direct + 0.5 * np.sum(H_inv * dH) + 0.5 * trace_eta @ d_eta
        for j, d_omega in enumerate(omega_derivatives):
            d_inv = -omega_inv @ d_omega @ omega_inv
            direct = 0.5 * eta @ d_inv @ eta + 0.5 * np.sum(omega_inv * d_omega)
            d_eta = -G_inv @ (d_inv @ eta)
            grad[layout.n_b + j] = direct + 0.5 * np.sum(H_inv * d_inv) + 0.5 * trace_eta @ d_eta
        for c_index in range(layout.n_sigma):
            here = (self.cols == c_index).astype(float)
            direct = np.sum(here * (1.0 - e * e * w))
            dH = (A * (-2.0 * w * here)[:, None]).T @ A
            dgrad = 2.0 * A.T @ (e * w * here)
            d_eta = -G_inv @ dgrad
            grad[layout.n_b + layout.n_omega + c_index] = (
                direct + 0.5 * np.sum(H_inv * dH) + 0.5 * trace_eta @ d_eta)
        return grad
