"""The uncertainty of a fit, computed the same way for the three estimators.

Whatever method found ``theta_`` and ``x0_``, the data are modelled the same way: each
observation is the ODE's solution plus noise. So the standard errors come from one place,
the Gauss-Newton (Fisher information) covariance of that output-error least-squares problem
at the fitted point,

    cov(z) = (J^T W J)^-1,    z = [x0_1[free], ..., x0_K[free], theta[fitted]],

with ``J`` the forward-sensitivity Jacobian of the predicted observations and ``W`` the
inverse noise variances (estimated from the residuals when not given). The same Jacobian
answers the identifiability question: a column that is zero (an unknown the observations do
not depend on) or a set of columns that are collinear (unknowns the data see only in a
combination, like a rate and the initial value of the hidden state it multiplies) leave the
information singular. Those unknowns get an infinite standard error, never the small one a
pseudo-inverse would report, and :class:`~sklode.exceptions.IdentifiabilityWarning` names
them and the combination the data do determine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..exceptions import IdentifiabilityWarning, IntegrationError, warn
from ..outputerror._pose import objective_for_experiments

__all__ = ["COLLINEARITY_TOL", "FitUncertainty", "fit_uncertainty", "reduced_chi_square",
           "uncertainty_at_fit", "unknown_names", "warn_unidentifiable"]

#: Unknowns whose sensitivity columns, each scaled to unit length, span a direction with a
#: singular value below this are structurally unidentifiable: no amount of data at this
#: noise model separates them. Measured on a rate times a hidden state's initial value
#: (Lotka-Volterra, prey only): 6e-9 at the default rtol=1e-8, 5e-7 at rtol=1e-6 (the
#: accuracy of the sensitivities), while the next singular value is 1e-2 and the papers'
#: identifiable problems have 2e-5 (Hindmarsh-Rose, 10 parameters) or more.
COLLINEARITY_TOL = 1e-6
#: A combination of unknowns whose standard error exceeds this fraction of their values (in
#: relative units: 1 = 100 %, so the 95 % interval spans zero and beyond) is practically
#: unidentifiable: the data leave it free, though not exactly.
PRACTICAL_TOL = 1.0
#: A single unknown whose standard error exceeds this many times its value is practically
#: unidentifiable on its own: its 95 % interval spans -20 to +20 times the value, so not
#: even its order of magnitude is determined (ChickWeight's pooled logistic: a carrying
#: capacity of 3.2e9 g with a standard error 9.3e5 times that). Between PRACTICAL_TOL and
#: this, a lone unknown is named only with a second sign that the data do not hold it
#: (``ORDERS_FROM_START`` or a bound): a weak but real effect, e.g. a covariate slope, often
#: has a standard error near its value, and theta_stderr_ already says so.
LONE_PRACTICAL_TOL = 10.0
#: An unknown whose standard error exceeds PRACTICAL_TOL times its value and that ended this
#: many decades from its start ran away rather than converged to a value the data hold.
ORDERS_FROM_START = 3.0
# A column this much smaller than the largest (both in relative units) is a zero sensitivity.
_ZERO_COLUMN = 1e-10
# Components of a weak direction (unit vector) at least this large are named in it.
_INVOLVED = 0.3
#: Above this many sensitivity entries (observation times x states x unknowns), the
#: covariance after a fit is taken with the initial states held at the fit: the full
#: Jacobian in x0 grows as n_states^2 (Lorenz-96 at 1,000 states and 1,001 times: 8 GB, and
#: 50 s of the 74 s of a BCD-prox fit already at 100 states), the parameters' alone as
#: n_states. 2.5e7 entries are 200 MB: 100 states at 1,001 times stay exact.
SENSITIVITY_MAX_ENTRIES = 25_000_000


@dataclass(frozen=True)
class FitUncertainty:
    """Covariance of the unknowns and what the data cannot determine.

    Attributes
    ----------
    cov : ndarray of shape (n_unknowns, n_unknowns)
        Infinite on the diagonal and NaN off it for unidentifiable unknowns; all NaN when the
        ODE cannot be solved at the fit.
    unidentifiable : tuple of str
        One description per combination of unknowns the data cannot pin down.
    step : ndarray of shape (n_unknowns,) or None
        One Gauss-Newton step of the output-error cost from the point (zero at its optimum;
        NaN for unidentifiable unknowns): for a method whose estimate is not that optimum
        (BCD-prox), how far the optimum lies, which the covariance's intervals do not see.
        None where no residual was at hand.
    """

    cov: np.ndarray
    unidentifiable: tuple
    step: np.ndarray | None = None


def unknown_names(objective, model, several):
    """Names of the unknowns ``z``: ``x0[state]`` (``x0[k][state]`` for experiment k of
    several), then the fitted parameters.

    Parameters
    ----------
    objective : LeastSquaresObjective or ExperimentsObjective
    model : ODEModel
    several : bool
        Whether the data hold several experiments.

    Returns
    -------
    list of str
    """
    parts = getattr(objective, "parts", [objective])
    names = []
    for k, part in enumerate(parts):
        prefix = f"x0[{k}]" if several else "x0"
        names += [f"{prefix}[{model.state_names[s]}]" for s in part.x0_states]
    return names + [n for n, f in zip(model.param_names, objective.fitted) if f]


def _data_row_columns(objective):
    """The observed-state column of every data row of the residual, and whether the row is
    an observation (missing entries are zero rows)."""
    parts = getattr(objective, "parts", [objective])
    columns = np.concatenate([np.tile(np.arange(p.Y.shape[1]), p.Y.shape[0]) for p in parts])
    present = np.concatenate([p.mask.ravel() for p in parts])
    return columns, present


def fit_uncertainty(objective, u, names, *, noise="given", theta_cov=None, bound_sigma=None,
                    start=None, at_bound=None):
    """The Gauss-Newton covariance of the unknowns at ``u`` and the identifiability check.

    Parameters
    ----------
    objective : LeastSquaresObjective or ExperimentsObjective
        The output-error cost (:mod:`sklode.outputerror._objective`), weighted by the noise
        model's standard deviations.
    u : ndarray
        The fit, in the objective's optimiser variables.
    names : list of str
        Names of the unknowns (:func:`unknown_names`), for the messages.
    noise : {"given", "per_state"}, default="given"
        ``"given"``: the weights are right up to one common factor, estimated by the reduced
        chi-square of the data residuals (AdjointODE's convention). ``"per_state"``: every
        observed state's noise variance is estimated from its own residuals (the estimators
        that estimate one noise level per state).
    theta_cov : ndarray of shape (n_fitted, n_fitted), optional
        The method's own covariance of the fitted parameters (WENDy's), which then replaces
        the Gauss-Newton one; the initial values' covariance becomes the conditional one
        plus that of theta propagated through them (the delta method: ``x0_hat`` is the
        best fit for ``theta_hat``, so ``dx0/dtheta = -F_xx^-1 F_xtheta``). Where it is
        below the Cramer-Rao bound (the output-error covariance here) it is raised to it
        (:func:`cramer_rao_floor`).
    bound_sigma : ndarray of shape (n_observed,), optional
        With ``theta_cov``: the noise standard deviation of each observed state in that
        bound (the method's own estimate, from the data alone). None: the residuals'
        (``noise``). A fit whose forward solve drifts from the data overstates the noise
        in its residuals, and a bound from them overstates the spread (Van der Pol at
        mu = 4, WENDy: z-scores spread 0.55-0.83 and 98-100 % coverage).
    start : ndarray of shape (n_unknowns,), optional
        Where the optimiser started, in the unknowns ``z`` (NaN where unknown): an unknown
        with a large standard error that ended ``ORDERS_FROM_START`` decades from it is
        named (:data:`LONE_PRACTICAL_TOL`).
    at_bound : ndarray of bool of shape (n_unknowns,), optional
        The unknowns that ended on a bound: named likewise when their standard error is
        large.

    Returns
    -------
    FitUncertainty
    """
    n = u.size
    try:
        modelled = getattr(objective, "modelled_noise", False)
        J = objective.jacobian_z(u, fisher=True) if modelled else objective.jacobian_z(u)
        r = objective.residual(u)
    except IntegrationError:
        # No forward solve through the fitted x0 (it blows up): the method's own theta
        # covariance still stands; the initial values get none.
        cov = np.full((n, n), np.nan)
        if theta_cov is not None:
            cov[objective.n_x0:, objective.n_x0:] = theta_cov
        return FitUncertainty(cov, ())
    dof_fraction = max(1.0 - n / max(objective.n_data, 1), 1.0 / max(objective.n_data, 1))
    bound_J = None
    wants_bound = theta_cov is not None and bound_sigma is not None
    if noise == "per_state" or wants_bound:
        columns, present = _data_row_columns(objective)
    if wants_bound:
        bound_J = J.copy()
        bound_J[: columns.size] /= np.asarray(bound_sigma, np.float64)[columns, None]
    if noise == "per_state":
        J, r = J.copy(), r.copy()
        for column in np.unique(columns):
            rows_of = np.flatnonzero((columns == column) & present)
            # each state's share of the degrees of freedom lost to the n unknowns
            variance = np.sum(r[rows_of] ** 2) / max(rows_of.size * dof_fraction, 1.0)
            if variance > 0:
                J[rows_of] /= np.sqrt(variance)
                r[rows_of] /= np.sqrt(variance)
        chi2 = 1.0
    elif modelled:  # the noise is part of the model: no common factor left to estimate
        chi2 = 1.0
    else:
        chi2 = reduced_chi_square(objective, u)
    # the Fisher Jacobian of a modelled noise is not the residual's: no Gauss-Newton step
    return _covariance(J, chi2, objective.to_z(u), _typical_sizes(objective, u), names,
                       objective.n_x0, theta_cov,
                       residual=r if not modelled and r.shape == J.shape[:1] else None,
                       bound_J=bound_J, start=start, at_bound=at_bound)


def reduced_chi_square(objective, u):
    """The data residuals' sum of squares at ``u`` per degree of freedom (the prior and
    invariant rows, which follow the data rows, left out): the factor by which the given
    weights understate the noise variance.

    Parameters
    ----------
    objective : LeastSquaresObjective or ExperimentsObjective
    u : ndarray
        A point, in the objective's optimiser variables.

    Returns
    -------
    float
    """
    r = objective.residual(u)[: objective.n_data_rows]
    return float(r @ r) / max(objective.n_data - u.size, 1)


def cramer_rao_floor(method_cov, bound):
    """The covariance ``method_cov`` raised along the directions where it is below
    ``bound``, to lie above both.

    ``bound`` is the output-error Gauss-Newton covariance at the method's point, the
    Cramer-Rao bound: no (nearly) unbiased estimator from the same data has a smaller
    covariance, so a method's own first-order covariance below it understates its spread.
    WENDy's does at 10 % noise on Lotka-Volterra (z-scores spread 1.2-1.3,
    ``benchmarks/results/coverage.md``): its delta method treats the noisy data inside its
    regression matrix as exact.

    With ``method_cov = L L^T``, the result is ``L max(L^-1 bound L^-T, I) L^T`` (the
    eigenvalues of the whitened bound raised to at least 1): above both in the Loewner
    order, equal to ``method_cov`` where it already covers ``bound``, and the same in any
    units or parametrisation of theta. Unchanged when either is not finite or
    ``method_cov`` is singular (a direction the data do not determine is named elsewhere).

    Parameters
    ----------
    method_cov, bound : ndarray of shape (n, n)

    Returns
    -------
    ndarray of shape (n, n)
    """
    method_cov = np.asarray(method_cov, dtype=np.float64)
    if not (np.all(np.isfinite(method_cov)) and np.all(np.isfinite(bound))):
        return method_cov
    try:
        L = np.linalg.cholesky(0.5 * (method_cov + method_cov.T))
    except np.linalg.LinAlgError:
        return method_cov
    whitened = np.linalg.solve(L, np.linalg.solve(L, bound).T)
    ratio, W = np.linalg.eigh(0.5 * (whitened + whitened.T))
    if ratio.size == 0 or ratio[-1] <= 1.0:
        return method_cov
    raised = L @ W
    return (raised * np.maximum(ratio, 1.0)) @ raised.T


def _with_theta_covariance(J, n_x0, theta_cov, joint, bound=None):
    """The covariance when theta's comes from elsewhere, raised to the Cramer-Rao bound
    (``bound``, else ``joint``'s theta block): ``x0`` is refitted to theta, so its
    covariance is the conditional one plus theta's propagated (whitened Jacobian ``J``)."""
    cov = np.zeros_like(joint)
    bound = joint if bound is None else bound
    theta_cov = cramer_rao_floor(theta_cov, bound[n_x0:, n_x0:])
    cov[n_x0:, n_x0:] = theta_cov
    if n_x0:
        F = J.T @ J
        scale = np.sqrt(np.maximum(np.diag(F)[:n_x0], 1e-300))  # equilibrate F_xx
        conditional = np.linalg.pinv(F[:n_x0, :n_x0] / np.outer(scale, scale)) / np.outer(
            scale, scale)
        A = -conditional @ F[:n_x0, n_x0:]  # d x0_hat / d theta
        cov[:n_x0, :n_x0] = conditional + A @ theta_cov @ A.T
        cov[:n_x0, n_x0:] = A @ theta_cov
        cov[n_x0:, :n_x0] = (A @ theta_cov).T
    return cov


def _typical_sizes(objective, u):
    """The size each unknown's relative error is measured against: an initial value's state's
    RMS over its trajectory (so that an initial value near zero is not called unknown), a
    parameter's own magnitude (1 where it is zero)."""
    z = objective.to_z(u)
    sizes = np.where(z != 0, np.abs(z), 1.0)
    parts = getattr(objective, "parts", [objective])
    at = 0
    for k, part in enumerate(parts):
        own_u = objective._part_u(u, k) if len(parts) > 1 else u
        states = part._evaluate(own_u)[0].states[:, part.x0_states]
        rms = np.sqrt(np.mean(states**2, axis=0))
        sizes[at: at + part.n_x0] = np.maximum(np.abs(z[at: at + part.n_x0]),
                                               np.where(rms > 0, rms, 1.0))
        at += part.n_x0
    return sizes


def _covariance(J, chi2, z, sizes, names, n_x0=0, theta_cov=None, residual=None,
                bound_J=None, start=None, at_bound=None):
    """``chi2 (J^T J)^-1`` computed on unit-length columns; unknowns in a structurally
    unidentifiable direction set to infinite variance; practically unidentifiable ones kept
    (their variance is already large) but named. With ``residual`` (weighted as ``J``, its
    first rows the data's), also the Gauss-Newton step ``-J^+ r`` on the same identifiable
    directions (:attr:`FitUncertainty.step`). ``bound_J``: the Jacobian whitened by the
    noise of the Cramer-Rao bound that ``theta_cov`` is raised to (default ``J``'s)."""
    n = z.size
    step = None if residual is None else np.zeros(n)
    norms = np.linalg.norm(J, axis=0)
    size = norms * sizes  # each column in relative units
    dead = size <= _ZERO_COLUMN * max(float(np.max(size, initial=0.0)), 1e-300)
    live = np.flatnonzero(~dead)
    unidentifiable = []
    for k in np.flatnonzero(dead):
        ran = ""
        if start is not None and np.isfinite(start[k]) and start[k] * z[k] > 0:
            decades = abs(np.log10(abs(z[k]) / abs(start[k])))
            if decades >= ORDERS_FROM_START:  # it ran to where nothing depends on it
                ran = f" at {z[k]:.3g}, {decades:.0f} decades from its start {start[k]:.3g}"
        unidentifiable.append(f"{names[k]} (the observations do not depend on it{ran})")
    structural = set(np.flatnonzero(dead).tolist())
    named = set()  # the sets of unknowns already named: one sentence each
    cov = np.zeros((n, n))
    if live.size:
        U, weak, inverse, Vt = _unit_column_svd(J[:, live], norms[live])
        if step is not None:
            projected = U.T @ residual
            step[live] = -(Vt.T @ (np.sqrt(inverse) * projected)) / norms[live]
        cov[np.ix_(live, live)] = chi2 * ((Vt.T * inverse) @ Vt) / np.outer(norms[live],
                                                                            norms[live])
        if theta_cov is not None:
            bound = None
            if bound_J is not None:  # (J^T J)^+ of the bound's Jacobian, the same way
                bound = np.zeros((n, n))
                b_norms = np.linalg.norm(bound_J[:, live], axis=0)
                _, _, b_inverse, b_Vt = _unit_column_svd(bound_J[:, live], b_norms)
                bound[np.ix_(live, live)] = ((b_Vt.T * b_inverse) @ b_Vt) / np.outer(
                    b_norms, b_norms)
            cov = _with_theta_covariance(J / np.sqrt(chi2) if chi2 > 0 else J, n_x0,
                                         theta_cov, cov, bound)
        for direction in Vt[weak]:
            members = np.abs(direction) >= _INVOLVED * np.max(np.abs(direction))
            structural.update(live[members].tolist())
            if frozenset(live[members].tolist()) in named:
                continue  # another singular direction among the same unknowns
            named.add(frozenset(live[members].tolist()))
            relative = direction[members] / (norms[live][members] * z[live][members])
            unidentifiable.append(_combination([names[k] for k in live[members]], relative))
    # A method's own covariance can be singular (WENDy's on data its weak form cannot
    # resolve): those unknowns, and the initial values propagated from them, are undetermined.
    lost = [k for k in np.flatnonzero(~np.all(np.isfinite(cov), axis=1)) if k not in structural]
    if lost:
        structural.update(lost)
        unidentifiable.append(", ".join(names[k] for k in lost) + " (the method's information "
                              "matrix for them is singular on these data)")
    keep = np.array([k for k in range(n) if k not in structural], dtype=int)
    if keep.size:  # practical: wide directions of the relative covariance
        variance, W = np.linalg.eigh(cov[np.ix_(keep, keep)] / np.outer(sizes[keep],
                                                                       sizes[keep]))
        for value, direction in zip(variance[::-1], W.T[::-1]):
            if not np.sqrt(max(value, 0.0)) > PRACTICAL_TOL:
                break
            members = np.abs(direction) >= _INVOLVED * np.max(np.abs(direction))
            if members.sum() < 2:  # one imprecise unknown: its large error says it all
                continue
            if frozenset(keep[members].tolist()) in named:
                continue  # a second wide direction of the same unknowns: said once
            named.add(frozenset(keep[members].tolist()))
            signs = np.sign(z[keep][members]) * direction[members]
            unidentifiable.append(
                _combination([names[k] for k in keep[members]], signs)
                + f" (standard error {np.sqrt(value):.2g} times the values)")
        in_named = set().union(*named) if named else set()
        for k in keep:  # lone unknowns: their own relative standard error
            if k in in_named:
                continue  # already part of a named combination
            relative = np.sqrt(max(cov[k, k], 0.0)) / sizes[k]
            if not relative > PRACTICAL_TOL:
                continue
            evidence = []
            if start is not None and np.isfinite(start[k]) and start[k] * z[k] > 0:
                decades = abs(np.log10(abs(z[k]) / abs(start[k])))
                if decades >= ORDERS_FROM_START:
                    evidence.append(f"it ran {decades:.1f} decades from its start "
                                    f"{start[k]:.3g} to {z[k]:.3g}")
            if at_bound is not None and at_bound[k]:
                evidence.append(f"it ended on a bound at {z[k]:.3g}")
            if relative > LONE_PRACTICAL_TOL or evidence:
                unidentifiable.append(f"{names[k]} (standard error {relative:.2g} times its "
                                      "value" + "".join("; " + e for e in evidence) + ")")
    if structural:
        bad = sorted(structural)
        cov[bad, :] = np.nan
        cov[:, bad] = np.nan
        cov[bad, bad] = np.inf
        if step is not None:
            step[bad] = np.nan
    # several singular directions among the same unknowns read the same: say it once
    return FitUncertainty(cov, tuple(dict.fromkeys(unidentifiable)), step)


def _unit_column_svd(J, norms):
    """The SVD of ``J`` with its columns scaled to unit length (``norms``): ``U``, the
    directions whose singular value is below :data:`COLLINEARITY_TOL`, ``1/s^2`` with those
    directions zeroed, and ``Vt``."""
    U, s, Vt = np.linalg.svd(J / norms, full_matrices=False)
    weak = s < COLLINEARITY_TOL
    return U, weak, np.where(weak, 0.0, 1.0 / np.where(weak, 1.0, s) ** 2), Vt


def _combination(names, relative):
    """Describe a direction along which the unknowns ``names`` change by ``relative``
    (relative changes) and the data barely change. For two unknowns the data determine the
    product of powers orthogonal to it (``b*x0[y]`` when b and x0[y] trade off one for one)."""
    if len(names) == 1:
        return names[0]
    listed = " and ".join(names) if len(names) == 2 else ", ".join(names)
    if len(names) > 2 or not np.all(np.isfinite(relative)):
        return f"{listed} separately (only a combination of them is determined)"
    a, b = relative[1], -relative[0]  # exponents of names[0], names[1] in the invariant
    a, b = (1.0, b / a) if abs(a) >= abs(b) else (a / b, 1.0)
    if a < 0:
        a, b = -a, -b

    def power(name, p):
        return name if abs(abs(p) - 1) < 0.05 else f"{name}^{abs(p):.2g}"

    joined = "*" if b > 0 else "/"
    return (f"{listed} separately (the data determine only "
            f"{power(names[0], a)}{joined}{power(names[1], b)})")


def warn_unidentifiable(estimator_name, unidentifiable):
    """Warn, naming every combination of unknowns the data cannot pin down.

    Parameters
    ----------
    estimator_name : str
    unidentifiable : tuple of str
        From :attr:`FitUncertainty.unidentifiable`.
    """
    if not unidentifiable:
        return
    # a practical one carries its (finite) relative standard error in its description; a
    # lone unknown's says "times its value", a combination's "times the values"
    lone = [u for u in unidentifiable if "times its value" in u]
    practical = [u for u in unidentifiable if "times the values)" in u]
    structural = [u for u in unidentifiable if u not in practical and u not in lone]
    sentences = []
    if structural:
        sentences.append(
            "the data cannot pin down " + "; ".join(structural) + ". Their standard errors "
            "are infinite (theta_stderr_/x0_stderr_ = inf) and any value along that "
            "combination fits equally well.")
    if practical:
        sentences.append(
            ("The data also barely pin down " if sentences else "the data barely pin down ")
            + "; ".join(practical) + ": their standard errors are finite but large, and "
            "confidence intervals from them are not to be trusted (profile_intervals follows "
            "the cost instead).")
    if structural or practical:
        sentences.append("Fix one of them (fixed={...} or a known x0), observe another "
                         "state, or add an experiment that separates them.")
    if lone:
        sentences.append(
            ("The data do not determine " if sentences else "the data do not determine ")
            + "; ".join(lone) + ": the estimate is not a measurement of it. Hold it at a "
            "known value (fixed={...}), use a model without it, or add data where it acts.")
    warn(f"{estimator_name}: " + " ".join(sentences), IdentifiabilityWarning)


def uncertainty_at_fit(model, data, theta, x0s, *, fitted, sigma=None, noise_kind="absolute",
                       theta_cov=None, bound_sigma=None, options):
    """:func:`fit_uncertainty` of the output-error cost posed at a fit from any method.

    Parameters
    ----------
    model : ODEModel
        The model in the states the method fitted (e.g. log states for log-normal noise).
    data : ExperimentData
        The data in those states.
    theta : ndarray of shape (n_params,)
    x0s : ndarray of shape (n_experiments, n_states)
        The fitted initial states, in those states.
    fitted : ndarray of bool of shape (n_params,)
        Estimated parameters (the others were held).
    sigma : float or array-like, optional
        The noise standard deviations as the method took them (``noise_kind`` reads them);
        None: one level per observed state, estimated from the residuals.
    noise_kind : str, default="absolute"
    theta_cov : ndarray of shape (n_fitted, n_fitted), optional
        The method's own covariance of the fitted parameters (see :func:`fit_uncertainty`).
    bound_sigma : ndarray of shape (n_observed,), optional
        The noise level of the Cramer-Rao bound ``theta_cov`` is raised to (see
        :func:`fit_uncertainty`).
    options : dict
        ``integrator``, ``rtol``, ``atol`` of the forward solves.

    Returns
    -------
    FitUncertainty
    """
    from dataclasses import replace

    data = data.with_initial_states(x0s)
    n_x0 = int(sum(e.estimate_x0.sum() for e in data.experiments))
    n_times = sum(e.t.size for e in data.experiments)
    conditional = (n_times * model.n_states * (n_x0 + int(np.sum(fitted)))
                   > SENSITIVITY_MAX_ENTRIES and n_x0 > 0)
    if conditional:
        warn(f"The sensitivities in all {n_x0} initial values at {n_times} times would hold "
             f"{n_times * model.n_states * n_x0:.3g} numbers: theta_stderr_ is computed with "
             "x0_ held at the fit (conditional on it, so smaller than with x0 unknown), and "
             "x0_stderr_ is NaN. n_boot > 0 gives both from refits.", UserWarning)
        data = replace(data, experiments=[replace(e, estimate_x0=np.zeros_like(e.estimate_x0))
                                          for e in data.experiments])
    objective, u = objective_for_experiments(
        model, data, theta0=np.asarray(theta, np.float64),
        fitted=fitted, sigma=1.0 if sigma is None else sigma, noise_kind=noise_kind,
        **options)
    result = fit_uncertainty(objective, u, unknown_names(objective, model, data.several),
                             noise="per_state" if sigma is None else "given",
                             theta_cov=theta_cov, bound_sigma=bound_sigma)
    if not conditional:
        return result
    cov = np.full((n_x0 + result.cov.shape[0],) * 2, np.nan)
    cov[n_x0:, n_x0:] = result.cov
    step = None if result.step is None else np.concatenate([np.full(n_x0, np.nan),
                                                            result.step])
    return FitUncertainty(cov, result.unidentifiable, step)


def standard_errors(cov):
    """Square roots of the diagonal of a covariance (negative round-off clipped to 0).

    Parameters
    ----------
    cov : ndarray of shape (n, n)

    Returns
    -------
    ndarray of shape (n,)
    """
    return np.sqrt(np.clip(np.diag(cov), 0, None))


def uncertainty_attributes(uncertainty, data, fitted, model, estimator_name, *,
                           transformed=None, z0s=None):
    """``theta_cov_``, ``theta_stderr_``, ``x0_stderr_`` and ``unidentifiable_`` from a
    :class:`~sklode.diagnostics._uncertainty.FitUncertainty` (warning when the data cannot pin
    something down). ``transformed``/``z0s``: the fitted states' model and the initial
    states in them, when the fit ran in scaled states (standard errors are mapped back).
    """
    warn_unidentifiable(estimator_name, uncertainty.unidentifiable)
    cov, n_params = uncertainty.cov, model.n_params
    mask = np.array([e.estimate_x0 for e in data.experiments])
    n_x0 = int(mask.sum())
    theta_cov = np.zeros((n_params, n_params))  # held parameters: zero
    theta_cov[np.ix_(fitted, fitted)] = cov[n_x0:, n_x0:]
    x0_stderr = np.zeros(mask.shape)
    x0_stderr[mask] = standard_errors(cov[:n_x0, :n_x0])
    if transformed is not None:
        x0_stderr = from_state_scale(transformed, z0s, x0_stderr)[1]
    return {"theta_cov_": theta_cov, "theta_stderr_": standard_errors(theta_cov),
            "x0_stderr_": x0_stderr if data.several else x0_stderr[0],
            "unidentifiable_": uncertainty.unidentifiable}


def from_state_scale(transformed, z0, z0_stderr):
    """Initial states and their standard errors back in the original states (the delta
    method: ``dx/dz`` is ``scale`` or ``scale x``).

    Parameters
    ----------
    transformed : ScaledStates
    z0, z0_stderr : ndarray of shape (..., n_states)

    Returns
    -------
    x0, x0_stderr : ndarray of shape (..., n_states)
    """
    x0 = transformed.to_x(z0)
    slope = np.asarray(transformed.scale) * (np.abs(x0) if transformed.log else 1.0)
    return x0, slope * np.asarray(z0_stderr)
