"""Forward simulation of an :class:`~sklode.ODEModel`, used by every ``predict``.

A thin, careful layer over :func:`scipy.integrate.solve_ivp`: output times may be unsorted,
repeated, or lie before the initial time (integrated backwards); stiff integrators get the
model's exact Jacobian; failures and blow-ups raise :class:`~sklode.IntegrationError` with the
time reached and what to try.
"""

from __future__ import annotations

import numpy as np
from scipy.integrate import solve_ivp
from scipy.linalg import block_diag

from .exceptions import CompilationWarning, IntegrationError, warn
from .models import check_model
from .models._band import (  # AUTO_MAX_BAND: documented as integrate's, with AUTO_MAX_STATES
    AUTO_MAX_BAND,  # noqa: F401
    jacobian_band,
    narrow_band,
    use_sparse_lu,
)
from ._events import (
    bolus_only,
    infused_states,
    interval_before,
    model_events,
    periodic_state,
    solve_across_doses,
    solve_across_events,
)
from .models._derived import derived
from .models._wrappers import fed_model

__all__ = ["simulate", "solve", "integrator_for", "INTEGRATORS"]

#: Integrators accepted by name (case-insensitive), and whether they use the Jacobian.
INTEGRATORS = {
    "RK45": False,
    "RK23": False,
    "DOP853": False,
    "Radau": True,
    "BDF": True,
    "LSODA": True,
    "CVODES": True,
    "auto": True,
}

# Explicit integrators (RK45, RK23, DOP853) have no step budget of their own, and on a stiff
# problem they take steps of the size of the fastest time scale: x' = -1e5 (x - cos t) over
# [0, 10] had not finished after 140 s under RK45 (wall, machine busy); LSODA takes 0.02 s.
# Past this many evaluations of the field they stop and name the stiff integrators: 500,000
# cost 20.5 CPU s there (solve_ivp steps in Python), this many 7.2 s. The datasets' problems
# need at most 26,000 (Hindmarsh-Rose under RK23 at rtol=1e-8).
EXPLICIT_MAX_EVALUATIONS = 200_000


def blowup_limit(x0, model, theta):
    """The state norm past which a solve of ``model`` from ``x0`` with parameters ``theta``
    counts as blowing up."""
    # (ODEModel.blowup_factor; a state that is a displacement from a parameter-dependent
    # value, ODEModel.state_offsets, counts from that value)
    offsets = model.state_offsets(theta)
    scale = np.abs(x0) if offsets is None else np.abs(x0) + np.abs(offsets)
    return model.blowup_factor * max(1.0, float(np.max(scale)))


def state_atol(model, theta, rtol, atol):
    """The absolute tolerance for ``model``'s states: ``atol`` plus ``rtol`` times the
    offsets of states integrated as displacements (:meth:`~sklode.ODEModel.state_offsets`),
    ``atol`` itself for a model without any."""
    offsets = model.state_offsets(theta)
    if offsets is None:
        return atol
    return atol + rtol * np.abs(np.asarray(offsets, dtype=np.float64))


#: ``integrator="auto"`` takes CVODES up to this many states: dense Newton solves grow as the
#: cube of the states, and Lorenz-96 with 160 states, solved dense (before its states were
#: reordered into a band), already took 0.88 of LSODA's CPU, where LSODA steps a non-stiff
#: system without a Jacobian.
AUTO_MAX_STATES = 160

# ... and above that where df/dx is banded (AUTO_MAX_BAND, defined with the band in
# models/_band.py) or sparse enough for KLU (models._band.use_sparse_lu).

#: Above this many states ``auto`` does not look for a band: finding the pattern of
#: ``df/dx`` evaluates it densely at four points (``4 n^2`` numbers, 128 MB at this size).
AUTO_MAX_BANDED_STATES = 2000


def native_solver_for(model, method):
    """The CVODES solver a solve of ``model`` on the integrator ``method`` (a name as
    :func:`_resolve_integrator` spells it) runs on, or None for the scipy path:
    ``"CVODES"`` where the model compiles (a :class:`CompilationWarning` once per model
    where it does not), ``"auto"`` where it compiles and has at most
    :data:`AUTO_MAX_STATES` states or (up to :data:`AUTO_MAX_BANDED_STATES`) a Jacobian
    band of at most :data:`AUTO_MAX_BAND` or a Jacobian the driver factors with KLU
    (:func:`~sklode.models._band.use_sparse_lu`)."""
    if method == "CVODES":
        return native_solver_or_warn(model)
    if method != "auto" or model.n_states > AUTO_MAX_BANDED_STATES:
        return None
    cheap_lu = model.n_states <= AUTO_MAX_STATES
    if not cheap_lu:
        lower, upper = jacobian_band(model)
        cheap_lu = narrow_band(lower, upper, model.n_states)
        sparse = use_sparse_lu(lower, upper, model.n_states, len(model.jac_x_sparsity()[0]))
        if not (cheap_lu or sparse):
            return None
    native = model.native_solver()
    if native is None:
        _warn_fallback_once()
    elif not (cheap_lu or native.sparse):
        return None  # a SUNDIALS without KLU: the dense LU of a wide Jacobian loses
    return native


_FALLBACK_WARNED = []  # once per process: every model falls back for the same reason


def _warn_fallback_once():
    """A :class:`CompilationWarning`, once per process, where ``integrator="auto"`` runs
    LSODA because CVODES cannot be used on this machine (not because of one model)."""
    from .models._native import native_unavailable_reason

    reason = native_unavailable_reason()
    if reason is None or _FALLBACK_WARNED:
        return
    _FALLBACK_WARNED.append(reason)
    warn(f"integrator='auto' runs scipy's LSODA here, not SUNDIALS' CVODES: {reason}. "
         "Solves are 6-50x slower (benchmarks/results/forward.md); sklode.show_versions() "
         "(or `sklode info`) shows what was found. integrator='LSODA' asks for it without "
         "this warning.", CompilationWarning)


def integrator_for(model, integrator):
    """The integrator a solve of ``model`` asked with ``integrator`` runs on.

    ``"auto"`` is ``"CVODES"`` where the model reaches CVODES here (the package's solver
    built at install, or a C compiler and SUNDIALS, and an ``rhs`` the recorder can unroll)
    and has at most :data:`AUTO_MAX_STATES` states, or a banded ``df/dx``
    (:data:`AUTO_MAX_BAND`, e.g. a discretised diffusion), or a sparse one the driver
    factors with SuiteSparse's KLU (a reaction network of hundreds of states,
    :func:`~sklode.models._band.use_sparse_lu`), and ``"LSODA"`` otherwise (where CVODES
    cannot be used on this machine at all, with a
    :class:`~sklode.exceptions.CompilationWarning` once per process naming why): CVODES took
    less CPU than LSODA on every model measured up to that size
    (``benchmarks/results/forward.md``), and the estimates of the two agree to their
    tolerance; the C library is built once per model and kept on disk. ``"CVODES"`` asked
    for by name and not available is LSODA with a
    :class:`~sklode.exceptions.CompilationWarning`; every other name is itself.

    Parameters
    ----------
    model : ODEModel
        The vector field (compiled on first use, once per model).
    integrator : str
        A name of :data:`INTEGRATORS` (case-insensitive).

    Returns
    -------
    str
        The name in :data:`INTEGRATORS`' spelling; never ``"auto"``.
    """
    method = _resolve_integrator(integrator)
    if method not in ("CVODES", "auto"):
        return method
    return "CVODES" if native_solver_for(model, method) is not None else "LSODA"


def _resolve_integrator(name):
    for key in INTEGRATORS:
        if isinstance(name, str) and name.lower() == key.lower():
            return key
    raise ValueError(
        f"integrator must be one of {sorted(INTEGRATORS)} (case-insensitive), got {name!r}."
    )


def solve(model, theta, x0, t_span, *, t_eval=None, integrator="LSODA", rtol=1e-8,
          atol=1e-10, dense_output=False, max_step=np.inf, max_evaluations=None):
    """Integrate ``model`` over ``t_span`` (either direction) and check the result.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    theta : array-like of shape (n_params,)
        Parameters.
    x0 : array-like of shape (n_states,) or (n_batch, n_states)
        State at ``t_span[0]``. A 2-D ``x0`` integrates ``n_batch`` copies of the ODE as one
        system: one integrator call with one step sequence for all, which costs little more
        than one solve when a field evaluation's overhead dominates (small models), and
        gives finite differences across the batch without step-size noise.
    t_span : (float, float)
        Start and end; the end may be before the start.
    t_eval : array-like, optional
        Output times, monotone in the direction of integration, without repeats.
    integrator : str, default="LSODA"
        One of :data:`INTEGRATORS`. ``"Radau"``, ``"BDF"`` and ``"LSODA"`` are stiff-capable
        and receive the model's Jacobian. ``"CVODES"`` solves with SUNDIALS' CVODES (BDF,
        the model's unrolled Jacobian), the whole solve in one C call
        (:meth:`~sklode.ODEModel.native_solver`); where the model cannot reach it, or
        for dense output, a batch or a backward solve, it is LSODA (a
        :class:`~sklode.exceptions.CompilationWarning` says so once per model).
        ``"auto"``: CVODES where the model reaches it, LSODA otherwise, without a warning
        (:func:`integrator_for`).
    rtol, atol : float
        Tolerances passed to :func:`scipy.integrate.solve_ivp`.
    dense_output : bool, default=False
        Keep the continuous solution (``sol.sol``), e.g. for an adjoint backward pass.
        Batched: ``sol.y`` rows are the flattened ``(n_batch, n_states)`` state.
    max_step : float, default=inf
        Largest step the integrator may take.
    max_evaluations : int, optional
        Give up (``IntegrationError``) after this many evaluations of the vector field: a
        trial parameter for which the solution nearly blows up or turns stiff can otherwise
        take hundreds of thousands of tiny steps.

    Returns
    -------
    scipy.integrate OdeResult
        With ``y`` of shape ``(n_states, len(t_eval))``.

    Raises
    ------
    IntegrationError
        The integrator failed, ``rhs`` produced non-finite values, or the state blew up.
    """
    method = _resolve_integrator(integrator)
    theta = np.asarray(theta, dtype=np.float64)
    x0 = np.asarray(x0, dtype=np.float64)
    if not (np.all(np.isfinite(x0)) and np.all(np.isfinite(theta))):
        # an optimiser's trial point beyond floating range: rejected like a blow-up (scipy
        # would raise a ValueError no caller expects)
        raise IntegrationError(
            f"The initial state {x0.tolist()} or the parameters {np.asarray(theta).tolist()} "
            f"of {model!r} are non-finite, so the ODE cannot be integrated.",
            t_reached=float(t_span[0]))
    n_states = x0.shape[-1]
    batched = x0.ndim == 2
    limit = blowup_limit(x0, model, theta)
    atol = state_atol(model, theta, rtol, atol)
    if batched and np.ndim(atol):
        atol = np.tile(atol, x0.shape[0])  # the batch is one flattened system
    if method in ("CVODES", "auto"):
        native = None
        if not (batched or dense_output or t_eval is None or t_span[1] < t_span[0]):
            native = native_solver_for(model, method)
        if native is not None:
            states, _, info = native(t_span[0], x0, theta, t_eval, rtol=rtol, atol=atol,
                                     max_steps=_max_steps(max_evaluations), blowup=limit)
            raise_native_failure(model, theta, t_span, info, limit)
            from scipy.optimize import OptimizeResult

            return OptimizeResult(t=np.asarray(t_eval, dtype=np.float64), y=states.T,
                                  nfev=info["n_rhs"], status=0, success=True, message="")
        method = "LSODA"  # dense output, a batch, backwards, or no compiled model

    field = None if batched else model.pointwise_field()
    jacobian = None if batched else model.pointwise_jacobian()
    last_t = [float(t_span[0])]  # the integrator's progress, for error messages
    n_evaluations = [0]
    explicit = not INTEGRATORS[method]
    if explicit:
        max_evaluations = min(max_evaluations or EXPLICIT_MAX_EVALUATIONS,
                              EXPLICIT_MAX_EVALUATIONS)

    def fun(t, x):
        last_t[0] = t
        n_evaluations[0] += 1
        if max_evaluations is not None and n_evaluations[0] > max_evaluations:
            advice = (f"the problem is probably stiff, which explicit integrators such as "
                      f"{method} cannot handle: use integrator='auto' (the default), "
                      "'LSODA', 'BDF' or 'Radau'" if explicit else "the solution is nearly "
                      "blowing up or the problem is stiff for this integrator (try "
                      "integrator='BDF' or 'Radau')")
            raise IntegrationError(
                f"Integration of {model!r} with theta={theta} needed more than "
                f"{max_evaluations} evaluations of the vector field and stopped at t={t:.6g} "
                f"(started at t={t_span[0]:.6g}, target t={t_span[1]:.6g}): {advice}.",
                t_reached=t)
        if float(x @ x) > limit * limit:  # checked here, not as an event: 10 % cheaper
            raise IntegrationError(
                f"The solution of {model!r} with theta={theta} blew up: ||x|| exceeded "
                f"{limit:.3g} at t={t:.6g} (started at t={t_span[0]:.6g}). The parameters are "
                "probably far from realistic values, or the model is unstable in this "
                "direction of time (backward integration of dissipative systems diverges).",
                t_reached=t)
        dx = model.f(t, x.reshape(-1, n_states), theta).ravel() if batched else \
            field(t, x, theta)
        if not np.isfinite(dx).all():
            raise IntegrationError(
                f"{model!r}.rhs returned non-finite values at t={t:.6g} for x={x} with "
                f"theta={theta}. The parameters may be outside the model's domain.",
                t_reached=t,
            )
        return dx

    if method == "LSODA" and not batched and not dense_output and t_eval is not None:
        return _solve_odeint(fun, jacobian, theta, model, x0, t_span, t_eval, rtol, atol,
                             max_step, last_t, n_evaluations)
    options = {}
    if INTEGRATORS[method]:
        options["jac"] = (
            (lambda t, x: block_diag(*model.jac_x(t, x.reshape(-1, n_states), theta)))
            if batched else (lambda t, x: jacobian(t, x, theta)))
    try:
        sol = solve_ivp(fun, t_span, x0.ravel(), method=method, t_eval=t_eval, rtol=rtol,
                        atol=atol, dense_output=dense_output, max_step=max_step, **options)
    except ValueError as exc:
        if not (dense_output and "strictly increasing" in str(exc)):
            raise
        # LSODA took a step of length zero (at a switch of the field that moves with the
        # solution, Isensee_JCB2018): scipy cannot join the pieces; step again and leave
        # the empty step's piece out
        sol = _solve_ivp_dense(fun, t_span, x0.ravel(), method, t_eval, rtol=rtol,
                               atol=atol, max_step=max_step, **options)
    t_reached = float(last_t[0])
    if sol.status == -1:
        stiff_hint = (
            " If the model is stiff, try integrator='BDF' or 'Radau'."
            if not INTEGRATORS[method] else " Loosening rtol/atol may also help."
        )
        raise IntegrationError(
            f"Integration of {model!r} with theta={theta} failed at t={t_reached:.6g} "
            f"(started at t={t_span[0]:.6g}, target t={t_span[1]:.6g}): {sol.message}."
            f"{stiff_hint} Unrealistic parameters often cause this.",
            t_reached=t_reached,
        )
    return sol


def _solve_ivp_dense(fun, t_span, x0, method, t_eval, **options):
    """:func:`scipy.integrate.solve_ivp` with dense output, stepping its solver here so that
    a step of length zero (which scipy's ``OdeSolution`` refuses) is left out; the result
    has the fields the callers read (``t``, ``y``, ``sol``, ``nfev``, ``status``,
    ``message``)."""
    from scipy import integrate
    from scipy.integrate._ivp.common import OdeSolution
    from scipy.optimize import OptimizeResult

    solver = getattr(integrate, method)(fun, t_span[0], x0, t_span[1], **options)
    ts, pieces, status, message = [t_span[0]], [], 0, "The solver reached the end."
    while solver.status == "running":
        message = solver.step() or message
        if solver.status == "failed":
            status = -1
            break
        if solver.t != solver.t_old:
            ts.append(solver.t)
            pieces.append(solver.dense_output())
    dense = OdeSolution(ts, pieces) if pieces else None
    if t_eval is None:
        t_out, y = np.asarray(ts), (np.array([x0]).T if dense is None else dense(ts))
    else:
        t_out = np.asarray(t_eval, dtype=np.float64)
        reached = (t_out <= ts[-1]) if t_span[1] >= t_span[0] else (t_out >= ts[-1])
        t_out = t_out[reached]
        y = dense(t_out) if dense is not None else np.empty((x0.size, 0))
    return OptimizeResult(t=t_out, y=y, sol=dense, nfev=solver.nfev, njev=solver.njev,
                          nlu=solver.nlu, status=status, message=message,
                          success=status >= 0)


_CVODES_FLAGS = {
    -1: "CV_TOO_MUCH_WORK: the step budget ran out (the problem may be stiff or nearly "
        "blowing up)",
    -2: "CV_TOO_MUCH_ACC: the tolerances are below what double precision can meet",
    -3: "CV_ERR_FAILURE: the error test failed repeatedly (a singularity or a discontinuity "
        "in the field)",
    -4: "CV_CONV_FAILURE: the Newton iteration failed to converge repeatedly",
    -8: "CV_RHSFUNC_FAIL", -9: "CV_FIRST_RHSFUNC_ERR: the field is not finite at the start",
    -10: "CV_REPTD_RHSFUNC_ERR: the field was not finite at every step tried",
    -12: "CV_UNREC_RHSFUNC_ERR",
}


def _max_steps(max_evaluations):
    # CVODES counts steps, not evaluations (about two a step): a step budget of the
    # evaluation budget is looser by that factor, never tighter.
    return 500_000 if max_evaluations is None else int(max_evaluations)


def native_solver_or_warn(model):
    """``model.native_solver()``, or None after a :class:`CompilationWarning` (once per
    model) saying why it cannot be compiled."""
    native = model.native_solver()
    forms = derived(model)
    if native is None and not forms.native_warned:
        forms.native_warned = True
        warn(f"integrator='CVODES' is not available for {model!r} "
             f"({model.native_unavailable_reason()}); using LSODA.", CompilationWarning)
    return native


def raise_native_failure(model, theta, t_span, info, limit):
    """Raise :class:`IntegrationError` for a failed CVODES solve (``info`` from
    :class:`~sklode.models._native.NativeSolver`), worded as the scipy path words it."""
    if not info["flag"]:
        return
    t = info["t_reached"]
    if info["failure"] == "blowup":
        raise IntegrationError(
            f"The solution of {model!r} with theta={theta} blew up: ||x|| exceeded "
            f"{limit:.3g} at t={t:.6g} (started at t={t_span[0]:.6g}). The parameters are "
            "probably far from realistic values.", t_reached=t)
    if info["failure"] == "nonfinite" and info["flag"] in (-9, -10, -12):
        raise IntegrationError(
            f"{model!r}.rhs returned non-finite values at t={t:.6g} for "
            f"x={info.get('x_nonfinite')} with theta={theta}. The parameters may be outside "
            "the model's domain.", t_reached=t)
    reason = _CVODES_FLAGS.get(info["flag"], f"CVODES flag {info['flag']}")
    raise IntegrationError(
        f"Integration of {model!r} with theta={theta} failed at t={t:.6g} (started at "
        f"t={t_span[0]:.6g}, target t={t_span[-1]:.6g}): {reason}. Loosening rtol/atol may "
        "also help. Unrealistic parameters often cause this.", t_reached=t)


def _solve_odeint(fun, jacobian, theta, model, x0, t_span, t_eval, rtol, atol, max_step,
                  last_t, n_evaluations):
    """:func:`solve` for LSODA without dense output, through :func:`scipy.integrate.odeint`:
    the same Fortran integrator with its own stepping loop (solve_ivp steps it from Python,
    8x the overhead once the field is compiled). ``fun`` raises on a blow-up."""
    from scipy.integrate import odeint
    from scipy.optimize import OptimizeResult

    times = np.concatenate([[t_span[0]], np.asarray(t_eval, dtype=np.float64)])
    y, info = odeint(fun, x0, times, Dfun=lambda t, x: jacobian(t, x, theta), tfirst=True,
                     rtol=rtol, atol=atol, hmax=0.0 if not np.isfinite(max_step) else max_step,
                     mxstep=100_000_000, full_output=True)
    if info["message"] != "Integration successful.":
        raise IntegrationError(
            f"Integration of {model!r} with theta={theta} failed near t={last_t[0]:.6g} "
            f"(started at t={t_span[0]:.6g}, target t={t_span[1]:.6g}): {info['message']} "
            "Loosening rtol/atol may also help. Unrealistic parameters often cause this.",
            t_reached=last_t[0])
    return OptimizeResult(t=times[1:], y=y[1:].T, nfev=n_evaluations[0], status=0,
                          success=True, message=info["message"])


def simulate(model, theta, x0, t, *, t0=None, integrator="auto", rtol=1e-8, atol=1e-10,
             doses=None):
    """States of ``model`` at times ``t``, starting from ``x0`` at ``t0``.

    Parameters
    ----------
    model : ODEModel
        The vector field.
    theta : array-like of shape (n_params,)
        Parameters.
    x0 : array-like of shape (n_states,)
        State at ``t0``.
    t : array-like of shape (n_times,)
        Output times in any order; repeats allowed; times before ``t0`` are reached by
        integrating backwards.
    t0 : float, optional
        Time of ``x0``. Default: the earliest of ``t``.
    integrator : str, default="auto"
        ``"auto"`` (SUNDIALS' CVODES where the model reaches it, LSODA otherwise:
        :func:`integrator_for`),
        ``"CVODES"``, or a :func:`scipy.integrate.solve_ivp` method; see :func:`solve`.
    rtol : float, default=1e-8
        Relative tolerance.
    atol : float, default=1e-10
        Absolute tolerance.
    doses : sequence of Dose or (float, int, float), optional
        Dosing records, states as indices: boluses ``(time, state index, amount)`` added to
        the state at those times (at or after ``t0``; the ODE is integrated in segments
        between them), and :class:`~sklode.Dose` records for infusions, steady states
        under repeated dosing, resets and additional doses. An output at a dose's time is
        the state just before it. A model with events
        (:class:`~sklode.models.Event`) jumps where they fire, located on a dense solve; its
        output times must be at or after ``t0``.

    Returns
    -------
    X : ndarray of shape (n_times, n_states)
        Row ``k`` is the state at ``t[k]``.

    Raises
    ------
    IntegrationError
        When integration fails or blows up; the message has the time reached.

    Examples
    --------
    >>> from sklode import simulate
    >>> from sklode.models import LotkaVolterra
    >>> X = simulate(LotkaVolterra(), [2, 1, 4, 1], [5, 3], [0.0, 0.5, 1.0])
    >>> X.shape
    (3, 2)
    """
    check_model(model)
    t = np.asarray(t, dtype=np.float64)
    if t.ndim != 1:
        raise ValueError(f"t must be one-dimensional, got shape {t.shape}.")
    if not np.all(np.isfinite(t)):
        raise ValueError("t contains non-finite values (NaN or inf).")
    x0 = np.asarray(x0, dtype=np.float64).reshape(-1)
    if x0.shape != (model.n_states,):
        raise ValueError(
            f"x0 has {x0.size} entries but {model!r} has {model.n_states} states "
            f"{model.state_names}."
        )
    theta = np.asarray(theta, dtype=np.float64).reshape(-1)
    if theta.shape != (model.n_params,):
        raise ValueError(
            f"theta has {theta.size} entries but {model!r} has {model.n_params} parameters "
            f"{model.param_names}."
        )
    if t.size == 0:
        return np.empty((0, model.n_states))
    t0 = float(np.min(t)) if t0 is None else float(t0)
    unique, inverse = np.unique(t, return_inverse=True)
    out = np.empty((unique.size, model.n_states))
    at_t0 = unique == t0
    out[at_t0] = x0
    kw = dict(integrator=integrator, rtol=rtol, atol=atol)
    ahead = unique[unique > t0]
    if model_events(model) or not bolus_only(doses):
        if np.any(unique < t0):
            raise ValueError("With events, infusions, steady-state doses or resets, every "
                             "output time must be at or after t0 (they are not integrated "
                             "backwards).")
        if ahead.size:
            out[unique > t0] = _solve_with_events(model, theta, x0, t0, ahead, kw, doses)
        return out[inverse.reshape(-1)]
    if doses:
        if np.any(unique < t0):
            raise ValueError("With doses, every output time must be at or after t0 (the "
                             "doses are not integrated backwards).")
        if ahead.size:
            out[unique > t0] = _solve_with_doses(model, theta, x0, t0, ahead, doses, kw)
        return out[inverse.reshape(-1)]
    if ahead.size:
        out[unique > t0] = solve(model, theta, x0, (t0, ahead[-1]), t_eval=ahead, **kw).y.T
    behind = unique[unique < t0][::-1]  # descending: backward integration
    if behind.size:
        out[unique < t0] = solve(model, theta, x0, (t0, behind[-1]), t_eval=behind, **kw).y.T[::-1]
    return out[inverse.reshape(-1)]


def _solve_with_doses(model, theta, x0, t0, ahead, doses, kw):
    """States at the increasing times ``ahead`` (all after ``t0``), integrated in segments
    between the doses."""
    def segment(start, end, x, t_eval, inside, index):
        return solve(model, theta, x, (start, end), t_eval=t_eval, **kw).y.T

    return solve_across_doses(segment, x0, t0, ahead, doses)



def _solve_with_events(model, theta, x0, t0, ahead, kw, doses=None):
    """States at the increasing times ``ahead`` (all after ``t0``), integrated from one of
    the model's events or dosing records to the next (:func:`event_locator`): infusions feed
    the model as extra parameters (:class:`~sklode.models._wrappers.WithInputs`), a
    steady-state dose starts from the periodic state of its regimen (Newton's method on one
    interval's solve, :func:`~sklode._events.periodic_state`)."""
    field, full = fed_field(model, theta, doses)

    def segment(start, end, x, t_eval, inside, index, inputs=None):
        return solve(field, full(inputs), x, (start, end), t_eval=t_eval, **kw).y.T

    def dense(start, end, x, inputs=None):
        sol = solve(field, full(inputs), x, (start, end), integrator="LSODA",
                    rtol=kw["rtol"], atol=kw["atol"], dense_output=True)
        return sol.sol.ts, sol.sol

    def periodic(record):
        dose, end = interval_before(record), np.array([record.time])
        return periodic_state(
            lambda x: (_solve_with_events(model, theta, x, dose.time, end, kw, [dose])[0],
                       None), np.zeros(x0.size), rtol=kw["rtol"], atol=kw["atol"])

    return solve_across_events(model_events(model), theta, x0, t0, ahead, segment, dense,
                               doses=doses, locate=fed_locator(model, field, full, **kw),
                               periodic=periodic)[0]


def fed_field(model, theta, doses):
    """The field the solves of ``doses`` integrate, and its parameters: ``model`` fed by
    their infusions (:func:`~sklode.models._wrappers.fed_model`), and
    ``parameters(inputs=None) -> theta`` followed by the infusions' rates (zeros when
    None; ``theta`` itself where nothing is infused)."""
    fed = infused_states(doses)

    def parameters(inputs=None):
        return theta if not fed else np.concatenate(
            [theta, np.zeros(len(fed)) if inputs is None else inputs])

    return fed_model(model, fed), parameters


def fed_locator(model, field, parameters, **options):
    """:func:`event_locator` for the fed ``field``, at the rates a segment is given:
    ``locate(start, end, x, inputs=None)``; None where the model has no events or CVODES
    cannot locate them (then LSODA's dense output)."""
    if not model_events(model) or event_locator(field, parameters(), **options) is None:
        return None

    def locate(start, end, x, inputs=None):
        return event_locator(field, parameters(inputs), **options)(start, end, x)

    return locate


def event_locator(model, theta, *, integrator, rtol, atol, max_evaluations=None):
    """``locate(start, end, x) -> (tau, which, x_tau)`` by CVODES' root finding on the compiled
    triggers of the model's events, where the solve runs on CVODES and every trigger
    compiled; else None (the crossings are then found on LSODA's dense output, to its
    tolerance, by Brent's method). CVODES locates a crossing to the time's rounding on its
    own interpolant, and needs no second solve with dense output."""
    events = model_events(model)
    native = native_solver_for(model, _resolve_integrator(integrator)) if events else None
    if native is None or native.n_events != len(events):
        return None
    theta = np.asarray(theta, dtype=np.float64)
    tolerance = state_atol(model, theta, rtol, atol)

    def locate(start, end, x):
        limit = blowup_limit(x, model, theta)
        tau, which, info = native.locate(start, x, theta, end, rtol=rtol, atol=tolerance,
                                         max_steps=_max_steps(max_evaluations), blowup=limit)
        raise_native_failure(model, theta, (start, end), info, limit)
        return tau, which, info["state"]

    return locate
