"""BCDProxODE: block-coordinate-descent proximal filtering and estimation (seed 000)."""

from __future__ import annotations

from numbers import Integral, Real
from dataclasses import dataclass

import numpy as np
from sklearn.base import _fit_context
from sklearn.utils._param_validation import Interval, StrOptions

from .._estimator import COMMON_CONSTRAINTS, ODEEstimator, warn_not_converged
from .._on_grid import (
    BOOTSTRAP_CONSTRAINTS,
    DoseSplit,
    bounded_theta_problem,
    finish_fit,
    fitted_mask,
    full_theta,
    on_state_scale,
    require_state_data,
)
from .._checks import check_bounds
from ..diagnostics._uncertainty import uncertainty_at_fit
from ..exceptions import PoorFitWarning, SklodeError, warn
from ..models import check_model
from ..models._base import sum_by_index
from ..observation._likelihood import sigma_per_state
from ._solver import bcd_prox_solve
from ._start import (
    decoupled_hidden_states,
    observed_entries,
    start_states,
    with_substeps,
)
from .multistep import ab_integrate

__all__ = ["BCDProxODE"]

#: A BCD-prox estimate further than this many standard errors from the output-error optimum
#: (one Gauss-Newton step from it) in some parameter warns: its intervals, the output-error
#: ones at its point, are then shifted by as much and cover about 83 % (|1 + Z| < 1.96).
#: Measured (benchmarks/coverage.py cells, 8 seeds each): 0.0-0.8 on Duffing, SIR,
#: FitzHugh-Nagumo and Van der Pol at 3 %, up to 1.0-1.2 on the Brusselator at 3 % and
#: Lotka-Volterra at 10 % (coverage 0.87-1.00 over 100 draws), 1.1-1.7 on enzyme kinetics at
#: 10 % (0.85-0.92), 1-2.7 on Van der Pol at mu = 4 and 10 % (0.61-0.99) and 2-6 on Rossler
#: at 3 % (0.09-0.68).
OUTPUT_ERROR_OFFSET = 1.0

# Largest step times fastest rate of the dynamics (spectral radius of df/dx at X*) at which
# the multistep residual still describes the ODE: above 1 the state changes more than
# e-fold within a step. The paper's problems reach 0.12-0.74 (Rössler), oral absorption
# sampled at 12 h reaches 14.
_MAX_STEP_RATE = 1.0


# Above this many states the stability check reads the Jacobian's structural entries only.
_SPARSE_CHECK_MIN_STATES = 64


def fastest_rates(model, t, X, theta, steps):
    """The spectral radius of ``df/dx`` at every point, where it can exceed ``_MAX_STEP_RATE``
    per step, and where ``df/dx`` is non-zero.

    Few states: the eigenvalues of every dense Jacobian. Many: the largest absolute row sum
    of the sparse Jacobian (:meth:`~sklode.ODEModel.jac_x_sparse`) bounds the spectral
    radius from above, and the exact radius is computed only at the points where that bound
    times the step exceeds ``_MAX_STEP_RATE``: the same warning as the dense path, without
    ``n_points * n_states^3`` work (Lorenz-96 at 300 states: 27 s of a 156 s fit).

    Parameters
    ----------
    model : ODEModel
    t : ndarray of shape (n_points,)
    X : ndarray of shape (n_points, n_states)
    theta : ndarray of shape (n_params,)
    steps : ndarray of shape (n_points,)
        The step that follows each point.

    Returns
    -------
    rates : ndarray of shape (n_points,)
        Exact where ``rates * step`` exceeds the threshold, an upper bound elsewhere.
    coupled : ndarray of bool of shape (n_states, n_states)
    """
    n = model.n_states
    if n < _SPARSE_CHECK_MIN_STATES:
        J = model.jac_x(t, X, theta)
        return np.max(np.abs(np.linalg.eigvals(J)), axis=1), np.any(J != 0, axis=0)
    rows, cols, values = model.jac_x_sparse(t, X, theta)
    coupled = np.zeros((n, n), dtype=bool)
    coupled[rows, cols] = np.any(values != 0, axis=0)
    rates = sum_by_index(np.abs(values), rows, n).max(axis=1)  # largest absolute row sum
    for k in np.flatnonzero(rates * steps > _MAX_STEP_RATE):
        J = np.zeros((n, n))
        J[rows, cols] = values[k]
        rates[k] = np.max(np.abs(np.linalg.eigvals(J)))
    return rates, coupled


@dataclass(frozen=True)
class _Solved:
    """One run of BCD-prox on validated experiments (:meth:`BCDProxODE._solve`): the
    solver's result and what the fit's tail and the bootstrap's refits read of it."""

    res: object  # BCDProxResult
    split: object  # DoseSplit: the experiments cut at their doses
    scaled: object  # ExperimentData in the fitted (scaled) states, at the sampling times
    grid: object  # the same on the grid X* lives on (with substeps)
    fit_model: object  # the model fitted: fixed parameters held, states scaled
    transformed: object  # ScaledStates, or None
    theta: np.ndarray  # the full parameter vector
    states: list  # X* per piece, in the model's states, at the sampling times
    x0s: np.ndarray  # the initial state of each piece


class BCDProxODE(ODEEstimator):
    """Block-coordinate-descent proximal filtering and parameter estimation (BCD-prox).

    Fits the parameters ``theta`` and a filtered state trajectory ``X*`` to noisy states
    ``Y`` by alternating, from ``X*(0) = Y``,

    .. math::

        \\theta^{(n)} = \\arg\\min_\\theta E(X^{(n-1)}, \\theta), \\qquad
        X^{(n)} = \\arg\\min_X E(X, \\theta^{(n)}) + \\lambda \\|X - X^{(n-1)}\\|^2,

    where :math:`E = \\sum_i \\|x_{i+1} - x_i - h_i \\sum_j b_{ij} f(x_{i-j}, \\theta)\\|^2` is the
    residual of an explicit ``order``-step Adams-Bashforth scheme on the data grid (any grid:
    the coefficients are computed for the actual steps, with the paper's order ramp).

    Real data beyond the paper: several experiments share ``theta`` (one ``X*`` block per
    experiment, the theta-step stacks them); a missing entry (NaN) starts from linear
    interpolation of its state's observations and is then filtered like any other; a
    hidden state starts from its guess in ``x0``, integrated with ``theta0`` while the
    observed states follow the data, and a first stage holds the observations at the data
    while theta and the hidden states move, before the paper's iteration filters every
    entry (see :func:`~sklode.bcdprox.bcd_prox_solve`).

    Parameters
    ----------
    model : ODEModel
        The vector field.
    theta0 : array-like of shape (n_params,) or dict, default=None
        Initial parameter guess (``None``: ``model.default_theta``). Models linear in theta
        get an exact first theta-step that does not depend on it; change it for models that
        are not. A ``theta0`` outside ``bounds``/``positive`` raises ``ValueError``; the
        default guess is moved inside them.
        A dict gives the values by parameter name, every one of them.
    x0 : array-like of shape (n_states,) or (n_experiments, n_states), or dict, default=None
        Initial state at the first observation time (of each experiment). Where it is known
        (``estimate_x0=False``, or False in its mask) that row of ``X*`` is held at this
        value; for a hidden state it is the guess its start is integrated from (required);
        otherwise not needed, the data start the filter (NaN: no guess).
        A dict gives them by state name (a list of dicts: one per experiment); a state
        it leaves out is unknown.
    t0 : float or array-like of shape (n_experiments,), default=None
        Time of ``x0``; must be the first observation time (the filter lives on the data
        grid). None: the first observation time of each experiment.
    estimate_x0 : bool or array-like of bool of shape (n_states,), default=True
        Which components of the initial state are estimated (filtered) rather than known.
    observed : sequence of int or str, default=None
        Which states ``Y``'s columns hold, as indices or state names; the others are hidden
        (carried in ``X*`` with no data, started from their guess in ``x0``). None: every
        state, in order.
    fixed : dict, default=None
        Parameters held at given values while the others are fitted, by name, e.g.
        ``{"c": 4.0}``: the theta-steps fit the others (the model stays affine in them);
        their values are in ``theta_`` and their standard errors are 0.
    bounds : (array-like, array-like), default=None
        Lower and upper bounds on theta (scalars or one per parameter, ``±inf`` allowed),
        honoured by every theta-step (bounded linear least squares for models linear in
        theta, trust-region reflective otherwise, L-BFGS-B's own bounds on the paper's path).
    positive : bool or array-like of bool of shape (n_params,), default=False
        Keep these parameters non-negative, as a lower bound of 0 (the theta-step is a linear
        least squares, which a log scale would make nonlinear).
    x0_bounds : (array-like, array-like), default=None
        Lower and upper bounds on the initial state (scalars or one per state, ``±inf``
        allowed), e.g. ``(0, N)``: the first row of ``X*`` is projected onto them after
        every X-step.
    sigma : float or array-like of shape (n_observed,), default=None
        Noise standard deviation of each observed state, read according to ``noise_kind``:
        the fidelity and the proximal term then weight each state by ``1 / sigma`` (a
        hidden state by the observed states' relative noise times the size of its guess).
        None: unweighted, the paper's.
    noise_kind : {"absolute", "relative_rms", "proportional", "lognormal"}, default="absolute"
        ``sigma`` in data units or as a fraction of each observed state's RMS;
        ``"lognormal"``: the states are filtered on the log scale (positive data with
        multiplicative noise; ``sigma`` is then the standard deviation of the logarithm).
        ``"proportional"`` (one weight per value) raises a ValueError naming
        ``"lognormal"``: the fidelity has one weight per state.
    lam : float, default=1.0
        Proximal weight λ (an inverse step size). Larger values only cost iterations;
        ``lam=0`` is allowed and, as the paper reports, stops almost at once with a poor fit.
    order : int, default=3
        Adams-Bashforth order m (1 = explicit Euler). Lower it when the samples are so far
        apart that the explicit scheme is unstable.
    substeps : int, default=1
        Grid steps per sampling interval: ``substeps - 1`` equally spaced times without
        observations are inserted between consecutive samples and carried in ``X*`` like
        missing values, so the multistep residual describes the ODE on sparse samples
        (LV on [0, 4], noise 0.2, mean relative error of theta over 5 seeds: 11 samples
        0.42 -> 0.10 with 4 sub-steps, 21 samples 0.13 -> 0.07 with 2; 41 and 81 samples
        unchanged at 0.03-0.04). 1: the data grid, the paper's.
    optimizer : {"gauss-newton", "l-bfgs-b"}, default="gauss-newton"
        ``"gauss-newton"``: exact linear least squares for the theta-step of models linear in
        theta (Gauss-Newton otherwise) and one safeguarded Gauss-Newton step on the banded
        X-step per iteration (banded Cholesky, or sparse CG for many states).
        ``"l-bfgs-b"``: the paper's L-BFGS on both blocks (slow; kept for comparison; the
        spelling ``"L-BFGS-B"`` of before is accepted with a FutureWarning until 0.3).
    acceleration : {"anderson", "none"}, default="anderson"
        Anderson acceleration of the outer map ``X*(n-1) -> X*(n)``; ``"none"`` is the
        paper's plain iteration (many more iterations, the paper's path).
    anderson_memory : int, default=20
        Number of previous iterates Anderson mixes.
    stop : {"relative", "paper"}, default="relative"
        ``"relative"``: stop when the relative change of ``X*`` (times ``1 + lam``) and of
        ``theta`` in one iteration is at most ``tol`` (scale-free). ``"paper"``: stop when
        ``|E(n) - E(n-1)| < 1e-8`` (absolute, as in the paper; iteration counts then grow
        with the size and scale of the data).
    tol : float, default=1e-6
        Tolerance of the relative stop rule on the outer iterations.
    max_iter : int, default=5000
        Maximum number of outer iterations (one theta-step and one X-step each).
    n_boot : int, default=0
        Replicates of a parametric bootstrap (:mod:`sklode.diagnostics._bootstrap`): data simulated
        from the fit at the training times, with the noise level the data show, each
        refitted by this method from ``theta_``. Their covariance becomes ``theta_cov_``
        and their mean minus ``theta_`` is ``theta_bias_``. 0: no bootstrap.
        Each replicate costs about one fit (enzyme kinetics, 401 samples: 0.6 s, so 50
        replicates 35-45 s).
    random_state : int, RandomState instance or None, default=None
        Seed of the bootstrap's noise.
    n_jobs : int, default=None
        joblib workers for the bootstrap's refits (``-1``: all cores); the result does not
        depend on it.
    integrator : str, default="auto"
        Forward solver of ``predict``/``simulate`` and of the covariance's sensitivities
        (:data:`sklode.integrate.INTEGRATORS`).
        ``"auto"`` (default): the model compiled to C and integrated by SUNDIALS' CVODES
        where a C compiler and SUNDIALS are found, LSODA otherwise
        (:func:`sklode.integrate.integrator_for`).
    rtol : float, default=1e-8
        Relative tolerance of those forward solves.
    atol : float, default=1e-10
        Absolute tolerance of those forward solves.
    verbose : int, default=0
        Log progress through the ``sklode`` logger (``logging.INFO``).

    Attributes
    ----------
    theta_ : ndarray of shape (n_params,)
        Estimated parameters, in ``model.param_names`` order.
    theta_cov_ : ndarray of shape (n_params, n_params)
        Gauss-Newton covariance of the output-error problem (the ODE's solution against the
        data) at BCD-prox's ``theta_`` and ``x0_``, each observed state's noise estimated
        from its residuals (or ``sigma``); the filtered states carry no sampling error of
        their own, so the theta-step's covariance given them would be far too small. With
        ``n_boot`` > 0, the bootstrap replicates' covariance instead: the spread of
        BCD-prox's own estimate, which the output-error covariance is not where BCD-prox
        stops away from the output-error optimum. Zero rows for ``fixed`` parameters,
        ``inf`` variance for unidentifiable ones.
    theta_bias_ : ndarray of shape (n_params,) or None
        With ``n_boot`` > 0: the replicates' mean minus ``theta_``, BCD-prox's bias at this
        fit (:meth:`confidence_intervals` takes it out; above 1.5 standard errors it warns
        :class:`~sklode.exceptions.PoorFitWarning`). None without a bootstrap.
    output_error_offset_ : ndarray of shape (n_params,) or None
        How far ``theta_`` lies from the output-error optimum, per parameter in that
        optimum's standard errors (``theta_stderr_`` without a bootstrap): one Gauss-Newton
        step of the output-error cost from the fit (0 for ``fixed``
        parameters, NaN for unidentifiable ones). ``theta_cov_`` without a bootstrap is the
        optimum's spread: beyond 1 the intervals centred here undercover, and the fit warns
        :class:`~sklode.exceptions.PoorFitWarning` (not with ``n_boot`` or bounds). None
        where the forward solve at the fit failed.
    theta_stderr_ : ndarray of shape (n_params,)
        Square roots of the diagonal of ``theta_cov_``.
    states_ : ndarray of shape (n_samples, n_states), or a list of them
        Filtered states ``X*`` at the (sorted) training times, hidden states included; one
        array per experiment when ``fit`` received several.
    x0_ : ndarray of shape (n_states,) or (n_experiments, n_states)
        ``X*`` at the first training time (of each experiment).
    x0_stderr_ : ndarray of shape (n_states,) or (n_experiments, n_states)
        Standard errors of ``x0_`` from the same covariance; zero for known components.
    unidentifiable_ : tuple of str
        The parameters and initial values the data cannot pin down, each with the
        combination the data do determine (``"x0[predator] and b separately (the data
        determine only x0[predator]*b)"``); empty when everything is identifiable. Warned
        as :class:`~sklode.exceptions.IdentifiabilityWarning`; the structurally
        unidentifiable ones have infinite standard errors.
    t0_ : float or ndarray of shape (n_experiments,)
        The first training time (of each experiment).
    predicted_states_ : ndarray of shape (n_samples, n_states), or a list of them
        The Adams-Bashforth recursion from ``x0_`` with ``theta_`` on the training grid (the
        paper's X̂; ``predict`` instead integrates the ODE accurately).
    fidelity_history_ : list of float
        ``E`` after each outer iteration.
    theta_history_ : ndarray of shape (n_iter, n_params)
        ``theta`` after each outer iteration (held parameters included): the parameter
        traces of seed 000's Figure 1.
    n_iter_ : int
        Outer iterations run.
    converged_ : bool
        Whether the stop rule held before ``max_iter``.
    fit_adequate_ : bool or None
        Whether the fit passed the adequacy check: the prediction's RMS residual is at most
        2.5 noise levels (estimated from the data) in every observed state; a failed check
        warns :class:`~sklode.exceptions.PoorFitWarning`. None when no experiment has 16
        complete samples to estimate its noise. Independent of ``converged_``.
    misfit_ratio_ : ndarray of shape (n_observed,) or None
        That RMS residual over the noise level, per observed state (near 1 for an adequate
        fit).
    stop_reason_ : str
        Why the iterations stopped, in words.
    solver_ : str
        Which path ran (theta-step, X-step solve, acceleration).
    observed_ : tuple of int
        Indices of the states ``Y``'s columns hold.
    n_features_in_ : int
        Always 1 (the time).

    See Also
    --------
    WENDyODE : weak form; no state estimate, gives parameter covariances, fastest on long
        densely sampled series.
    AdjointODE : forward-solver least squares; handles partial observations and sparse
        sampling, where a multistep residual on the data grid is too coarse.

    Notes
    -----
    Cost per outer iteration: one batched Jacobian of ``f`` and one sparse solve with
    ``n_samples * n_states`` unknowns (block bandwidth ``order``); the theta-step is a linear
    least squares for models linear in theta.

    References
    ----------
    Raziperchikolaei and Bhat, "A block coordinate descent proximal method for simultaneous
    filtering and parameter estimation", ICML 2019.

    Examples
    --------
    >>> from sklode.datasets import make_trajectory
    >>> from sklode import BCDProxODE
    >>> from sklode.models import LotkaVolterra
    >>> data = make_trajectory("lotka_volterra", noise=0.05, random_state=0)
    >>> est = BCDProxODE(LotkaVolterra(), theta0=(2, 2, 5, 2)).fit(data.t, data.Y)
    >>> est.theta_.round(1)
    array([2. , 1. , 4.1, 1. ])
    >>> est.states_.shape, est.converged_
    ((41, 2), True)
    """

    _parameter_constraints = {
        **COMMON_CONSTRAINTS,
        "lam": [Interval(Real, 0, None, closed="left")],
        "order": [Interval(Integral, 1, 8, closed="both")],
        "optimizer": [StrOptions({"gauss-newton", "l-bfgs-b", "L-BFGS-B"},
                                 deprecated={"L-BFGS-B"})],
        "acceleration": [StrOptions({"anderson", "none"})],
        "anderson_memory": [Interval(Integral, 1, None, closed="left")],
        "stop": [StrOptions({"relative", "paper"})],
        "substeps": [Interval(Integral, 1, None, closed="left")],
        **BOOTSTRAP_CONSTRAINTS,
    }

    def __init__(self, model=None, *, theta0=None, x0=None, t0=None, estimate_x0=True,
                 observed=None, fixed=None, bounds=None, positive=False, x0_bounds=None,
                 sigma=None, noise_kind="absolute",
                 lam=1.0, order=3, substeps=1,
                 optimizer="gauss-newton", acceleration="anderson", anderson_memory=20,
                 stop="relative", tol=1e-6, max_iter=5000, n_boot=0, random_state=None,
                 n_jobs=None, integrator="auto", rtol=1e-8, atol=1e-10, verbose=0):
        self.model = model
        self.theta0 = theta0
        self.x0 = x0
        self.t0 = t0
        self.estimate_x0 = estimate_x0
        self.observed = observed
        self.fixed = fixed
        self.bounds = bounds
        self.positive = positive
        self.x0_bounds = x0_bounds
        self.sigma = sigma
        self.noise_kind = noise_kind
        self.lam = lam
        self.order = order
        self.substeps = substeps
        self.optimizer = optimizer
        self.acceleration = acceleration
        self.anderson_memory = anderson_memory
        self.stop = stop
        self.tol = tol
        self.max_iter = max_iter
        self.n_boot = n_boot
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.integrator = integrator
        self.rtol = rtol
        self.atol = atol
        self.verbose = verbose

    def _state_scale(self, data):
        """``(scale, log)`` of the fitted states from ``sigma`` and ``noise_kind``, or None
        for the paper's unweighted fidelity."""
        log = self.noise_kind == "lognormal"
        if self.noise_kind == "proportional":
            raise ValueError(
                "BCDProxODE weights its fidelity by one standard deviation per state, so it "
                "cannot take noise proportional to each value; use noise_kind='lognormal' "
                "(the same multiplicative noise, fitted on the log scale) or 'relative_rms'.")
        if self.sigma is None and not log:
            return None
        n_states, observed = self.model.n_states, list(data.observed)
        values = np.vstack([e.Y for e in data.experiments])
        if log:
            with np.errstate(divide="ignore", invalid="ignore"):
                values = np.log(values)
        rms = np.sqrt(np.nanmean(values**2, axis=0))
        per_state = sigma_per_state(1.0 if self.sigma is None else self.sigma,
                                    self.noise_kind, values, type(self).__name__)
        scale = np.ones(n_states)
        scale[observed] = per_state
        relative = float(np.mean(per_state / np.maximum(rms, 1e-300)))
        for state in data.hidden:  # no data: the observed states' relative noise
            guesses = np.array([e.x0[state] for e in data.experiments])
            with np.errstate(divide="ignore", invalid="ignore"):  # a guess <= 0 on the log
                # scale is refused, with its reason, when the states are transformed
                size = np.nanmean(np.abs(np.log(guesses) if log else guesses))
            scale[state] = (float(np.mean(per_state)) if log else
                            relative * size if np.isfinite(size) and size > 0 else 1.0)
        return scale, log

    def _warn_where_the_method_is_weak(self, fit_model, res, data):
        """Warn (PoorFitWarning) when the data are outside what BCD-prox's multistep residual
        can fit: steps beyond the explicit scheme's stability, or a hidden state that no
        observation reaches through its own equation."""
        worst, where = 0.0, 0.0
        coupled = np.zeros((fit_model.n_states,) * 2, dtype=bool)
        for e, X in zip(data.experiments, res.states):
            rates, pattern = fastest_rates(fit_model, e.t[:-1], X[:-1], res.theta,
                                           np.diff(e.t))
            coupled |= pattern
            products = np.diff(e.t) * rates
            k = int(np.argmax(products))
            if products[k] > worst:
                worst, where = float(products[k]), float(e.t[k])
        if worst > _MAX_STEP_RATE:
            warn(
                f"The samples are too far apart for BCD-prox's multistep residual: at "
                f"t = {where:g} a step times the fastest rate of the dynamics is {worst:.3g} "
                "(above 1 the state changes more than e-fold within one step), so the "
                "Adams-Bashforth rule misstates the ODE there and theta_ is unreliable. Raise "
                f"substeps (now {self.substeps}) to add grid times between the samples, or "
                "use AdjointODE, which integrates between samples.",
                PoorFitWarning)
        decoupled = decoupled_hidden_states(coupled, data.observed)
        if decoupled:
            names = [self.model.state_names[i] for i in decoupled]
            warn(
                f"The hidden state(s) {names} evolve without any observed state in their own "
                "equations, so the data reach them only through the others, which BCD-prox's "
                "block iteration follows slowly: the parameters of their equations stay near "
                "theta0 (oral absorption with only the concentration measured: ka 0.78 from "
                "0.8, truth 1.2). Use AdjointODE, which fits hidden states through forward "
                "solves.", PoorFitWarning)

    def _min_samples(self):
        return self.order + 2  # at least one full-order step after the ramp

    def _solve(self, given, *, start=None, verbose=0):
        """BCD-prox on validated data: the solver's result and the fit in the model's states.

        ``start``: a full theta to start from instead of ``theta0`` (the bootstrap's refits;
        the filtered states always start at the data, which the paper's iteration takes as
        its fidelity's target).
        """
        name = type(self).__name__
        model = self.model
        split = DoseSplit(given, name, self._min_samples(), node_at_t0=True)
        data = split.data  # doses at t0 folded in, later doses split, a node at t0
        x0_bounds = check_bounds(self.x0_bounds, model.n_states, model.state_names,
                                 name="x0_bounds")
        transformed = None
        weights = self._state_scale(data)
        if weights is not None:  # the fidelity weighted per state: fit in scaled states
            data, transformed, x0_bounds = on_state_scale(model, data, *weights, x0_bounds,
                                                          estimator_name=name)
        fit_model, theta0, bounds = bounded_theta_problem(self, transformed, start)
        scaled = data  # the data in the fitted states, at the sampling times
        data = grid = with_substeps(data, self.substeps)  # the grid X* lives on
        starts = [start_states(fit_model, theta0, e, data.observed, name)
                  for e in data.experiments]

        data_held = None
        if any(np.isnan(e.Y).all(axis=0).any() for e in data.experiments) or data.hidden:
            data_held = [observed_entries(e, data.observed, model.n_states)
                         for e in data.experiments]
        res = bcd_prox_solve(
            fit_model, [e.t for e in data.experiments], starts, theta0,
            held=[~e.estimate_x0 for e in data.experiments], data_held=data_held,
            x0_bounds=x0_bounds,
            lam=self.lam, order=self.order, optimizer=self.optimizer,
            acceleration=self.acceleration, anderson_memory=self.anderson_memory,
            stop=self.stop, tol=self.tol, max_iter=self.max_iter, bounds=bounds,
            verbose=verbose)

        theta = full_theta(fit_model, res.theta)
        states = res.states if transformed is None else [transformed.to_x(X)
                                                         for X in res.states]
        states = [X[::self.substeps] for X in states]  # at the sampling times
        try:  # estimated components at a t0 before the first sample: from the dynamics
            states = split.shoot_back(model, theta, states, self._simulation_options())
        except SklodeError:
            pass  # the backward solve fails: keep the filtered node
        return _Solved(res=res, split=split, scaled=scaled, grid=grid, fit_model=fit_model,
                       transformed=transformed, theta=theta, states=states,
                       x0s=np.array([X[0] for X in states]))

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, t, Y=None):
        """Fit ``theta_`` and the filtered states ``states_`` to observations ``Y`` at ``t``.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1), or a list of them
            Observation times, strictly increasing once sorted (any order is accepted); a
            list or tuple means several experiments.
        Y : array-like of shape (n_samples, n_observed), or a list of them
            Noisy observations of the observed states, one row per time, NaN where
            missing; one array per experiment.

        Returns
        -------
        self : BCDProxODE
            The fitted estimator.
        """
        name = type(self).__name__
        require_state_data(check_model(self.model), None, self.noise_kind, name,
                           proportional=False)
        given = self._validate_data(t, Y)
        model = self.model
        require_state_data(model, given, self.noise_kind, name, proportional=False)
        solved = self._solve(given, verbose=self.verbose)
        res, split, grid, fit_model = solved.res, solved.split, solved.grid, solved.fit_model
        transformed, theta, x0s = solved.transformed, solved.theta, solved.x0s
        # The filtered states carry no sampling error of their own, so theta_'s uncertainty
        # is that of the output-error problem at BCD-prox's (theta, x0), or the bootstrap's.
        fitted = fitted_mask(fit_model, model.n_params)
        z0s = np.array([X[0] for X in res.states])
        uncertainty = uncertainty_at_fit(
            model if transformed is None else transformed, solved.scaled, theta, z0s,
            fitted=fitted, sigma=None if self.sigma is None else 1.0,
            options=self._simulation_options())
        states = solved.states
        predicted = []
        for e, x0 in zip(grid.experiments, x0s):  # the recursion runs on the fitted grid
            with np.errstate(over="ignore", invalid="ignore"):
                predicted.append(ab_integrate(lambda s, x: model.f(s, x, theta), x0, e.t,
                                              self.order)[::self.substeps])
        if not all(np.all(np.isfinite(P)) for P in predicted):
            warn(
                f"The explicit Adams-Bashforth recursion of order {self.order} from x0_ is "
                "unstable on this time grid (large or very uneven steps), so "
                "predicted_states_ contains non-finite values. The fit itself is unaffected; "
                "predict() integrates the ODE with an adaptive solver.",
                UserWarning)
        self._warn_where_the_method_is_weak(fit_model, res, grid)
        if not res.converged:
            warn_not_converged(self, res.n_iter, res.stop_reason,
                               f"Increase max_iter (now {self.max_iter}) or tol (now "
                               f"{self.tol}), or use stop='relative' and "
                               "acceleration='anderson'.")

        attributes, x0s = finish_fit(
            self, given=given, fitted_data=split.data, split=split, uncertainty=uncertainty,
            fitted=fitted, theta=theta, x0s=x0s, transformed=transformed, z0s=z0s,
            init="bcdprox", advice=f"Try substeps={2 * self.substeps} (grid times between the "
            "samples), or AdjointODE started from this theta_.",
            offset_limit=OUTPUT_ERROR_OFFSET,
            offset_meaning="theta_stderr_ is the output-error optimum's spread, so intervals "
            "centred on theta_ cover the truth less often than they claim (about 83 % at 1 "
            "standard error).")

        def per_experiment(values):  # one array per experiment as given
            return list(values) if given.several else values[0]

        return self._set_fitted(
            **attributes, states_=per_experiment(split.states_back(states)),
            predicted_states_=per_experiment(split.states_back(predicted)),
            fidelity_history_=list(res.fidelity_history),
            theta_history_=np.array([full_theta(fit_model, th) for th in res.theta_history]),
            n_iter_=res.n_iter, converged_=res.converged, stop_reason_=res.stop_reason,
            solver_=res.solver)
