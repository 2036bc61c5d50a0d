"""Population fits on arrays: the Lindstrom-Bates iterations (nlme's algorithm) and a direct
minimisation of the FOCE-I or Laplace marginal likelihood.

The unknowns ``phi`` are, in this order: the fixed effects ``b`` (the estimated parameters,
``log theta`` where ``log_mask``, else ``theta``), the random effects' covariance (``log`` of
the standard deviations for a diagonal ``Omega``; the log-diagonal then the strictly lower
entries of its Cholesky factor for a full one), and ``log sigma`` of the additive noise levels
(none when the model has its own ``noise_sd``, whose parameters are then among ``b``).

* :func:`lindstrom_bates` alternates a penalised nonlinear least-squares step (``b`` and every
  subject's ``eta`` for the current ``Omega`` and ``sigma``; Levenberg-Marquardt on the
  block-arrow normal equations) and a linear mixed-model step (the model linearised at that
  point; ``b`` by generalised least squares, ``Omega`` and ``sigma`` by maximum likelihood):
  Lindstrom and Bates (1990), the algorithm of R's ``nlme``. Additive noise only. No forward
  solve is differenced: the mixed-model step is linear algebra.
* :func:`direct_fit` minimises the marginal ``-log L`` (each subject's random effects at their
  conditional mode: :mod:`._subject`) with L-BFGS-B: any noise model; FOCE-I with its
  gradient from sensitivities (:meth:`Subject.foce_gradient`; the mode's and the
  information's motion from second derivatives by differences of the sensitivities),
  Laplace on central differences of the value; the slower path.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from joblib import Parallel, delayed
from scipy.optimize import minimize

from ..exceptions import IdentifiabilityError, IntegrationError
from ._differences import central_differences, second_differences
from ._subject import _LOG_2PI, eta_scale, subject_theta

__all__ = ["Layout", "PopulationResult", "direct_fit", "lindstrom_bates", "marginal_nll"]

# log standard deviation of a random effect kept in [log 1e-5, log 1e2]: a variance that
# collapses to zero (a parameter that does not vary) stops at the lower edge, not at -inf
_LOG_SD_BOUNDS = (np.log(1e-5), np.log(1e2))
# central-difference steps on phi (log scales and Cholesky entries are O(0.1-10)); the
# objective's noise is that of the solves (rtol), ~1e-9 relative
_GRADIENT_STEP = 1e-4
_HESSIAN_STEP = 1e-3
_PNLS_MAX_ITER = 50
# the nonlinear step stops when Gauss-Newton predicts a decrease below this (relative): the
# sum of squares is then exact far below the ODE solves' noise (rtol 1e-8)
_PNLS_RTOL = 1e-10


@dataclass
class Layout:
    """Where each unknown lives.

    Attributes
    ----------
    theta : ndarray of shape (n_params,)
        The model's parameters (held ones at their values).
    estimated : ndarray of int
        Indices of the estimated parameters (``b``'s order).
    log_mask : ndarray of bool of shape (n_estimated,)
        Which of them are on the log scale.
    random : ndarray of int
        Indices (into the model's parameters) of the random ones.
    full : bool
        Full covariance (else diagonal).
    n_sigma : int
        Additive noise levels estimated (0 with the model's ``noise_sd``).
    theta_bounds : (ndarray, ndarray) or None
        Lower and upper bounds of the estimated parameters (natural scale; +-inf allowed).
    names : tuple of str
        The model's parameter names (for messages).
    additive : ndarray of bool of shape (n_random,) or None
        Which random effects are normal (``theta + eta``; their population value on its
        natural scale), not log-normal (``theta exp(eta)``, on the log scale).
    """

    theta: np.ndarray
    estimated: np.ndarray
    log_mask: np.ndarray
    random: np.ndarray
    full: bool
    n_sigma: int
    theta_bounds: tuple = None
    names: tuple = ()
    additive: np.ndarray = None

    @property
    def n_b(self):
        return self.estimated.size

    @property
    def q(self):
        return self.random.size

    @property
    def n_omega(self):
        return self.q * (self.q + 1) // 2 if self.full else self.q

    def pack(self, theta, omega, log_sigma):
        """``phi`` from natural values."""
        est = theta[self.estimated]
        b = np.where(self.log_mask, np.log(np.where(self.log_mask, est, 1.0)), est)
        if self.full:
            L = np.linalg.cholesky(omega)
            w = np.concatenate([np.log(np.diag(L)), L[np.tril_indices(self.q, -1)]])
        else:
            w = 0.5 * np.log(np.diag(omega))
        ls = np.zeros(0) if log_sigma is None else np.asarray(log_sigma, dtype=np.float64)
        return np.concatenate([b, w, ls])

    def theta_of(self, b):
        theta = self.theta.copy()
        theta[self.estimated] = np.where(self.log_mask, np.exp(b), b)
        return theta

    def dtheta_db(self, theta):
        """``d theta[estimated] / d b`` (diagonal), at a subject's parameters."""
        return np.where(self.log_mask, theta[self.estimated], 1.0)

    def unpack(self, phi):
        """``(theta, omega, log_sigma)`` from ``phi``."""
        b, rest = phi[: self.n_b], phi[self.n_b:]
        w, ls = rest[: self.n_omega], rest[self.n_omega:]
        if self.full:
            L = np.diag(np.exp(w[: self.q]))
            L[np.tril_indices(self.q, -1)] = w[self.q:]
            omega = L @ L.T
        else:
            omega = np.diag(np.exp(2.0 * w))
        return self.theta_of(b), omega, (ls if self.n_sigma else None)

    def omega_derivatives(self, phi):
        """``d Omega / d omega_k`` for each covariance unknown at ``phi``."""
        w = phi[self.n_b: self.n_b + self.n_omega]
        q, out = self.q, []
        if not self.full:
            for k in range(q):
                d = np.zeros((q, q))
                d[k, k] = 2.0 * np.exp(2.0 * w[k])
                out.append(d)
            return out
        L = np.diag(np.exp(w[:q]))
        rows, cols = np.tril_indices(q, -1)
        L[rows, cols] = w[q:]
        units = [(k, k, np.exp(w[k])) for k in range(q)] + [(i, j, 1.0)
                                                            for i, j in zip(rows, cols)]
        for i, j, value in units:
            dL = np.zeros((q, q))
            dL[i, j] = value
            out.append(dL @ L.T + L @ dL.T)
        return out

    def bounds(self):
        """Box of L-BFGS-B: the log standard deviations, and the estimated parameters where
        ``theta_bounds`` says (on their scale: a log-scale parameter's bounds in logs)."""
        inf = (None, None)
        if self.full:
            w = [_LOG_SD_BOUNDS] * self.q + [inf] * (self.n_omega - self.q)
        else:
            w = [_LOG_SD_BOUNDS] * self.q
        b = [inf] * self.n_b
        if self.theta_bounds is not None:
            b = []
            for lo, hi, log in zip(*self.theta_bounds, self.log_mask):
                with np.errstate(divide="ignore"):
                    lo, hi = (np.log(max(lo, 0.0)), np.log(hi)) if log else (lo, hi)
                b.append((float(lo) if np.isfinite(lo) else None,
                          float(hi) if np.isfinite(hi) else None))
        return b + w + [inf] * self.n_sigma


@dataclass
class PopulationResult:
    """What a population fit found (``phi`` on the optimiser's scales)."""

    phi: np.ndarray
    etas: np.ndarray
    neg_log_likelihood: float
    n_iter: int
    converged: bool
    stop_reason: str
    solver: str
    history: list = field(default_factory=list)


def marginal_nll(subjects, layout, phi, etas, method="foce", n_jobs=None):
    """The population's marginal ``-log L`` at ``phi`` (each subject's mode searched from
    ``etas``; ``n_jobs`` subjects at once, in threads) and the modes. The subjects' terms are
    summed in their order whatever ``n_jobs``, so the value does not depend on it.

    Returns
    -------
    nll : float
        ``inf`` where a subject's ODE cannot be integrated.
    etas : ndarray of shape (n_subjects, n_random)
    """
    theta, omega, log_sigma = layout.unpack(phi)
    total, modes = 0.0, np.array(etas, dtype=np.float64)
    try:
        if n_jobs in (None, 1):
            terms = [subject.neg_log_likelihood(theta, omega, log_sigma, etas[k], method)
                     for k, subject in enumerate(subjects)]
        else:  # threads: the compiled solves release the GIL, the subjects share nothing
            terms = Parallel(n_jobs=n_jobs, prefer="threads")(
                delayed(subject.neg_log_likelihood)(theta, omega, log_sigma, etas[k], method)
                for k, subject in enumerate(subjects))
    except (IntegrationError, np.linalg.LinAlgError):
        return np.inf, np.array(etas, dtype=np.float64)
    for k, (nll, mode) in enumerate(terms):
        modes[k] = mode
        total += nll
    return total, modes


# ---------------------------------------------------------------------- Lindstrom-Bates
def _linearise(subjects, layout, b, etas, log_sigma):
    """Each subject's predictions, weights and derivatives in ``b`` and ``eta``."""
    theta = layout.theta_of(b)
    out = []
    for subject, eta in zip(subjects, etas):
        th = subject_theta(theta, layout.random, eta, layout.additive)
        h, _, dh, _ = subject.predict(th, derivatives=True)
        X = dh[:, layout.estimated] * layout.dtheta_db(th)
        Z = dh[:, layout.random] * eta_scale(th, layout.random, layout.additive)
        out.append((h, X, Z, np.exp(log_sigma[subject.cols])))
    return out


def _penalised(subjects, layout, b, etas, log_sigma, omega_inv):
    """The penalised sum of squares of the nonlinear step (inf where a solve fails)."""
    theta = layout.theta_of(b)
    total = 0.0
    try:
        for subject, eta in zip(subjects, etas):
            h = subject.predict(subject_theta(theta, layout.random, eta, layout.additive))[0]
            r = (subject.y - h) / np.exp(log_sigma[subject.cols])
            total += r @ r + eta @ omega_inv @ eta
    except IntegrationError:
        return np.inf
    return total


def _pnls(subjects, layout, b, etas, omega, log_sigma):
    """Penalised nonlinear least squares in ``b`` and every ``eta`` (Levenberg-Marquardt on
    the block-arrow normal equations: each subject's block eliminated by its Schur
    complement)."""
    omega_inv = np.linalg.inv(omega)
    value = _penalised(subjects, layout, b, etas, log_sigma, omega_inv)
    if not np.isfinite(value):
        raise IntegrationError("The population parameters cannot be integrated for every "
                               "subject at the start.")
    lam = 1e-3
    for _ in range(_PNLS_MAX_ITER):
        lin = _linearise(subjects, layout, b, etas, log_sigma)
        C = np.zeros((layout.n_b, layout.n_b))
        gb = np.zeros(layout.n_b)
        blocks = []
        for (subject, eta, (h, X, Z, s)) in zip(subjects, etas, lin):
            r = (h - subject.y) / s
            Xs, Zs = X / s[:, None], Z / s[:, None]
            A = Zs.T @ Zs + omega_inv
            B = Zs.T @ Xs
            ge = Zs.T @ r + omega_inv @ eta
            C += Xs.T @ Xs
            gb += Xs.T @ r
            blocks.append((A, B, ge))
        improved = False
        for _attempt in range(12):
            Sc = C + lam * np.diag(np.diag(C) + 1e-12)
            rhs = gb.copy()
            solved = []
            for A, B, ge in blocks:
                Ad = A + lam * np.diag(np.diag(A))
                AiB, Aig = np.linalg.solve(Ad, B), np.linalg.solve(Ad, ge)
                Sc -= B.T @ AiB
                rhs -= B.T @ Aig
                solved.append((AiB, Aig))
            db = -np.linalg.solve(Sc, rhs)
            d_etas = np.array([-Aig - AiB @ db for AiB, Aig in solved])
            # the Gauss-Newton model's decrease of the penalised sum of squares (twice the
            # gradient's inner product with the step): once it is below the solves' noise,
            # no trial can tell better from worse: converged
            predicted = -2.0 * (gb @ db + sum(blk[2] @ de for blk, de in zip(blocks, d_etas)))
            if predicted < _PNLS_RTOL * max(1.0, value):
                return b, etas, value
            new_etas = etas + d_etas
            new_b = b + db
            new_value = _penalised(subjects, layout, new_b, new_etas, log_sigma, omega_inv)
            if new_value < value:
                improved = True
                break
            lam *= 10.0
        if not improved:
            break
        decrease = value - new_value
        b, etas, value = new_b, new_etas, new_value
        lam = max(lam / 10.0, 1e-9)
        if decrease < 1e-12 * max(1.0, value):
            break
    return b, etas, value


def _lme_nll(subjects, layout, w_omega, log_sigma, lin_data, return_b=False):
    """``-log L`` of the linearised mixed model with ``b`` profiled out by generalised least
    squares (``lin_data``: each subject's ``(w, X, Z, columns)``)."""
    omega = layout.unpack(np.concatenate([np.zeros(layout.n_b), w_omega,
                                          log_sigma]))[1]
    XtVX = np.zeros((layout.n_b, layout.n_b))
    XtVw = np.zeros(layout.n_b)
    logdet, factors = 0.0, []
    for w, X, Z, cols in lin_data:
        s2 = np.exp(2.0 * log_sigma[cols])
        V = Z @ omega @ Z.T + np.diag(s2)
        try:
            L = np.linalg.cholesky(V)
        except np.linalg.LinAlgError:
            return np.inf
        logdet += 2.0 * np.sum(np.log(np.diag(L)))
        LX = np.linalg.solve(L, X)
        Lw = np.linalg.solve(L, w)
        XtVX += LX.T @ LX
        XtVw += LX.T @ Lw
        factors.append((LX, Lw))
    b = _generalised_least_squares(XtVX, XtVw, layout)
    quad = sum(float(np.sum((Lw - LX @ b) ** 2)) for LX, Lw in factors)
    n = sum(w.size for w, *_ in lin_data)
    nll = 0.5 * (n * _LOG_2PI + logdet + quad)
    return (nll, b) if return_b else nll


#: The smallest eigenvalue of the fixed effects' information relative to its largest below
#: which the data do not determine some combination of them (double precision keeps ~16
#: digits; the linearised design is good to the solves' ~8).
_SINGULAR_INFORMATION = 1e-13


def _generalised_least_squares(XtVX, XtVw, layout):
    """The fixed effects' generalised least-squares estimate, or an
    :class:`~sklode.exceptions.IdentifiabilityError` naming the parameters the data do not
    determine (a column of the linearised design that is zero, or the combination that
    its information matrix cannot see), instead of a bare ``LinAlgError``."""
    w, V = np.linalg.eigh(0.5 * (XtVX + XtVX.T))
    if w[-1] > 0 and w[0] > _SINGULAR_INFORMATION * w[-1]:
        return np.linalg.solve(XtVX, XtVw)
    names = [layout.names[k] if len(layout.names) > k else f"theta[{k}]"
             for k in layout.estimated]
    loading = np.abs(V[:, 0])
    which = np.flatnonzero(loading >= 0.1 * loading.max())
    involved = [names[j] for j in which]
    logged = [names[j] for j in which if layout.log_mask[j]]
    hint = (f" {logged} are estimated on the log scale (they started positive): one that "
            "may be negative (a covariate's slope or exponent) runs towards 0 there and its "
            "information with it; start it at 0 (or below), or pass positive= with False "
            "for it." if logged else "")
    raise IdentifiabilityError(
        f"The data do not determine the population parameter(s) {involved}: their columns "
        "of the linearised model are zero or move together (the information matrix is "
        f"singular, smallest eigenvalue {w[0]:.2g} of largest {w[-1]:.2g}). A parameter no "
        "observation depends on (a covariate effect with no covariate data, a parameter the "
        "model does not read) cannot be estimated: hold it with fixed={name: value}, or "
        "give data that depend on it." + hint, parameters=involved)


def lme_nll_full(layout, phi, lin_data):
    """``-log L`` of the linearised model at every unknown (``b`` not profiled), for the
    covariance of the estimates."""
    b = phi[: layout.n_b]
    _, omega, log_sigma = layout.unpack(phi)
    total = 0.0
    for w, X, Z, cols in lin_data:
        V = Z @ omega @ Z.T + np.diag(np.exp(2.0 * log_sigma[cols]))
        L = np.linalg.cholesky(V)
        r = np.linalg.solve(L, w - X @ b)
        total += 0.5 * (w.size * _LOG_2PI + 2.0 * np.sum(np.log(np.diag(L))) + r @ r)
    return total


def linearised_data(subjects, layout, b, etas, log_sigma):
    """Each subject's working response ``w = y - h + X b + Z eta`` and its ``X``, ``Z``."""
    out = []
    for subject, eta, (h, X, Z, _) in zip(subjects, etas,
                                          _linearise(subjects, layout, b, etas, log_sigma)):
        out.append((subject.y - h + X @ b + Z @ eta, X, Z, subject.cols))
    return out


def lindstrom_bates(subjects, layout, phi0, *, tol=1e-6, max_iter=50, log=None):
    """Alternate the nonlinear and the linear mixed-model steps until the unknowns settle.

    Parameters
    ----------
    subjects : list of Subject
    layout : Layout
        With ``n_sigma > 0`` (additive noise).
    phi0 : ndarray
        Start.
    tol : float
        Largest change of an unknown (on its scale) between two iterations at convergence.
    max_iter : int
    log : callable, optional
        Called with ``(iteration, nll)``.

    Returns
    -------
    PopulationResult
        ``neg_log_likelihood`` is the linearised model's at the last iteration (nlme's).
    """
    phi = np.array(phi0, dtype=np.float64)
    n_b, n_w = layout.n_b, layout.n_omega
    etas = np.zeros((len(subjects), layout.q))
    history, converged, nll = [], False, np.inf
    bounds = layout.bounds()[n_b:]
    for iteration in range(1, max_iter + 1):
        _, omega, log_sigma = layout.unpack(phi)
        b, etas, _ = _pnls(subjects, layout, phi[:n_b], etas, omega, log_sigma)
        lin = linearised_data(subjects, layout, b, etas, log_sigma)

        def profiled(v, lin=lin):
            return _lme_nll(subjects, layout, v[:n_w], v[n_w:], lin)

        res = minimize(profiled, phi[n_b:], method="L-BFGS-B", bounds=bounds,
                       options={"ftol": 1e-13, "gtol": 1e-9, "maxiter": 500})
        nll, b_new = _lme_nll(subjects, layout, res.x[:n_w], res.x[n_w:], lin, return_b=True)
        new = np.concatenate([b_new, res.x])
        change = float(np.max(np.abs(new - phi)))
        phi = new
        history.append(nll)
        if log is not None:
            log(iteration, nll)
        if change < tol:
            converged = True
            break
    # etas are the last nonlinear step's modes (for the previous Omega): the caller
    # searches the final ones from them
    return PopulationResult(
        phi=phi, etas=etas, neg_log_likelihood=nll, n_iter=iteration, converged=converged,
        stop_reason=("the unknowns changed by less than tol" if converged else
                     f"max_iter={max_iter} alternations reached"),
        solver="Lindstrom-Bates (nlme's alternating algorithm)", history=history)


# ---------------------------------------------------------------------- direct
class _Marginal:
    """The marginal ``-log L`` as a function of ``phi`` for scipy, its modes kept to start the
    next evaluation's mode searches (warm starts)."""

    def __init__(self, subjects, layout, method, etas, n_jobs=None):
        self.subjects, self.layout, self.method, self.n_jobs = subjects, layout, method, n_jobs
        self.etas = np.array(etas, dtype=np.float64)
        self.n_evaluations = 0

    def value(self, phi, keep=True):
        self.n_evaluations += 1
        nll, etas = marginal_nll(self.subjects, self.layout, phi, self.etas, self.method,
                                  self.n_jobs)
        if keep and np.isfinite(nll):
            self.etas = etas
        return nll

    def gradient(self, phi):
        """FOCE-I's gradient from sensitivities, or central differences of the value."""
        if self.method == "foce":
            return self.foce_gradient(phi)
        return self.fd_gradient(phi)

    def foce_gradient(self, phi):
        """The FOCE-I gradient from sensitivities (:meth:`Subject.foce_gradient`), at the
        modes of ``phi`` (searched from the kept ones)."""
        nll, etas = marginal_nll(self.subjects, self.layout, phi, self.etas, self.method,
                                  self.n_jobs)
        if not np.isfinite(nll):
            return np.zeros(phi.size)
        theta, omega, log_sigma = self.layout.unpack(phi)
        d_omega = self.layout.omega_derivatives(phi)
        try:
            return sum(s.foce_gradient(theta, omega, log_sigma, eta, self.layout, d_omega)
                       for s, eta in zip(self.subjects, etas))
        except (IntegrationError, np.linalg.LinAlgError):
            return self.fd_gradient(phi)

    def fd_gradient(self, phi):
        """Central differences of the value (each mode warm-started)."""
        return central_differences(lambda v: self.value(v, keep=False), phi, _GRADIENT_STEP)

    def hessian(self, phi):
        """Central differences of the FOCE-I gradient, or second differences of the value
        (Laplace); symmetric."""
        if self.method == "foce":
            H = central_differences(self.foce_gradient, phi, _HESSIAN_STEP).T
            return 0.5 * (H + H.T)
        return second_differences(lambda v: self.value(v, keep=False), phi, _HESSIAN_STEP)


def direct_fit(subjects, layout, phi0, etas0, *, method="foce", tol=1e-6, max_iter=200,
               n_jobs=None):
    """Minimise the marginal ``-log L`` (FOCE-I or Laplace) over ``phi``.

    Returns
    -------
    PopulationResult
    """
    marginal = _Marginal(subjects, layout, method, etas0, n_jobs)
    if not np.isfinite(marginal.value(np.asarray(phi0, dtype=np.float64))):
        raise IntegrationError("The population fit cannot start: a subject's ODE cannot be "
                               "integrated at the starting parameters.")
    history = []

    def fun(phi):
        return marginal.value(phi)

    def callback(xk):
        history.append(marginal.value(xk))

    res = minimize(fun, phi0, jac=marginal.gradient, method="L-BFGS-B",
                   bounds=layout.bounds(), callback=callback,
                   options={"maxiter": max_iter, "ftol": tol * 1e-3, "gtol": tol})
    nll = marginal.value(res.x)
    return PopulationResult(
        phi=res.x, etas=marginal.etas, neg_log_likelihood=nll, n_iter=int(res.nit),
        converged=bool(res.success), stop_reason=str(res.message),
        solver=f"direct L-BFGS-B on the {'FOCE-I' if method == 'foce' else 'Laplace'} "
               "likelihood", history=history)


def marginal_hessian(subjects, layout, phi, etas, method, n_jobs=None):
    """The Hessian of the marginal ``-log L`` in ``phi`` (central differences)."""
    return _Marginal(subjects, layout, method, etas, n_jobs).hessian(
        np.asarray(phi, dtype=float))
