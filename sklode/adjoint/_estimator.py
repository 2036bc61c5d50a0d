"""AdjointODE: forward-solver weighted least squares with exact, cheap gradients (seed 002)."""

from __future__ import annotations

from numbers import Integral, Real
from typing import NamedTuple

import numpy as np
from joblib import Parallel, delayed
from sklearn.base import _fit_context
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

from .._estimator import COMMON_CONSTRAINTS, ODEEstimator, warn_not_converged
from .._validation import initial_times
from .._checks import (
    OLD_OPTIMIZER_SPELLINGS,
    bounds_with_positivity,
    check_bounds,
    check_fixed,
    check_positive,
)
from ..diagnostics._assessment import Polish, assess_fit, likelihood_attributes
from ..diagnostics._uncertainty import (
    fit_uncertainty,
    uncertainty_attributes,
    unknown_names,
)
from ..exceptions import (
    BoundWarning,
    IntegrationError,
    warn,
)
from ..observation._observation import NOISE_RANGE_WITHOUT_FLOOR
from ..outputerror._initial_state import data_starts
from ..outputerror._objective import NOISE_KINDS
from ..outputerror._optimize import (
    OPTIMIZERS,
    adjoint_solve,
    cannot_start,
    fides_unavailable_reason,
)
from ..outputerror._pose import objective_for_experiments
from ._profile import profile_intervals_of
from ._starts import (
    restart_check,
    usable_start,
    data_start,
    grown_horizon_fit,
    random_starts,
    start_from_init,
)

__all__ = ["AdjointODE"]


# A random start from which the ODE cannot be integrated is drawn again, at most this many
# times (each failure costs one forward solve, up to the blow-up): on Borghans_BiophysChem1997
# 10 of 20 uniform starts in the PEtab bounds could not be integrated.
_REDRAWS = 10


class _Posed(NamedTuple):
    """The problem AdjointODE's cost is posed on (see ``AdjointODE._fitted_states``)."""

    model: object
    data: object
    transformed: object  # the ScaledStates of log-normal noise, or None
    noise_kind: str
    x0_bounds: object


class AdjointODE(ODEEstimator):
    """Weighted least squares on forward ODE solves with exact gradients (seed 002).

    Fits ``theta`` and, optionally, the initial state ``x0`` at ``t0`` to observations of
    some of the states. Gradients come from the continuous adjoint (or forward sensitivities)
    solved on the stored forward trajectory, so one gradient costs about one and a half
    forward solves whatever the number of parameters. The default optimiser is trust-region
    Gauss–Newton (scipy ``least_squares``) on the exact sensitivity Jacobian, which needs
    fewer iterations than gradient methods when the unknowns are few
    (``docs/adjoint.md`` has the measurements).

    Parameters
    ----------
    model : ODEModel
        The vector field.
    theta0 : array-like of shape (n_params,) or dict, default=None
        Initial parameter guess (None: the model's default guess). Single shooting needs a
        guess whose trajectory stays finite over the data; start from another method's fit
        on hard problems. A ``theta0`` outside ``bounds``/``positive`` raises
        ``ValueError``; the default guess is moved inside them.
        A dict gives the values by parameter name, every one of them.
    x0 : array-like of shape (n_states,) or (n_experiments, n_states), or dict, default=None
        Initial state at ``t0`` (one for all experiments, or one each): the starting guess
        where estimated, the known value otherwise; NaN (or None) marks unknown components,
        which start from the data when that state is observed from its first time (of a
        quadratic through the first eighth of the samples, 5 to 15 of them, the first
        observation, and either with negative values of positive data (whose negative
        values reach at most a third as far) moved just inside the data's sign, the one with
        the lowest cost at the start that the ODE can be integrated from) and need a guess
        otherwise.
        A dict gives them by state name (a list of dicts: one per experiment); a state
        it leaves out is unknown.
    t0 : float or array-like of shape (n_experiments,), default=None
        Time of ``x0``; None means each experiment's first time. Must not be after it.
    estimate_x0 : bool or array-like of bool of shape (n_states,), default=True
        Which components of the initial state are estimated; the others are held at ``x0``.
    observed : sequence of int or str, default=None
        Which states ``Y``'s columns hold, as indices or state names (None: all states, in
        order); the others are hidden and fitted through the dynamics.
    fixed : dict, default=None
        Parameters held at given values while the others are fitted, by name, e.g.
        ``{"gamma": 0.25}``; their values are in ``theta_`` and their standard errors are 0.
    bounds : (array-like, array-like), default=None
        Lower and upper bounds on ``theta`` (scalars or one per parameter, ``±inf``
        allowed), honoured by every optimiser: natively by ``"trf"`` and ``"l-bfgs-b"``
        (an active bound is met exactly), through a smooth change of variables onto the open
        box by the others (the estimate stays strictly inside, within the optimiser's
        tolerance of an active bound).
    positive : bool, "log", "log10" or array-like of those of shape (n_params,), \
default=False
        Optimise ``log(theta)`` for these parameters: they stay strictly positive. True and
        ``"log"`` are the natural log; ``"log10"`` the decimal log (the same estimate, but a
        trust-region optimiser such as ``"fides"`` measures its steps in decades, as PEtab's
        ``log10`` parameter scale asks).
    x0_bounds : (array-like, array-like), default=None
        Lower and upper bounds on the estimated initial state (scalars or one per state,
        ``±inf`` allowed), e.g. ``(0, N)`` for compartments of a population of ``N``;
        honoured by every optimiser, like ``bounds``.
    sigma : float or array-like, default=None
        Standard deviation of the observations: one value, one per observed column, or one
        per observation (shape of ``Y``; NaN allowed where ``Y`` is NaN), read according to
        ``noise_kind``; an :class:`~sklode.Experiment`'s own ``sigma`` replaces it for that
        experiment. None: unit weights, and ``neg_log_likelihood_`` uses one noise scale
        per observable, the maximum-likelihood one at the fit. Unused when the model has
        ``noise_sd`` (the noise is then fitted with the other parameters).
    noise_kind : str or dict, default="absolute"
        The error model, one for all columns or a dict by observable name:
        ``"absolute"`` (``sigma`` in data units), ``"relative_rms"`` (a fraction of each
        column's RMS), ``"proportional"`` (a fraction of each observation: the seed's
        weights), all three normal; ``"lognormal"`` / ``"log10normal"`` (``sigma`` is the
        standard deviation of ``ln y`` / ``log10 y``: positive data with multiplicative
        noise; residuals ``log h - log y`` on the observables, so hidden states may be 0);
        ``"laplace"`` (``sigma`` is the Laplace scale ``b``; robust to outliers). With a
        model ``noise_sd`` only the distribution is chosen (``"absolute"`` for normal).
    x0_prior : array-like of shape (n_states,), default=None
        Prior mean ``s0`` of the initial state (used for its estimated components).
    x0_prior_sigma : float or array-like, default=None
        Prior standard deviation ``sigma0``; required with ``x0_prior``.
    invariant : (array-like, float), default=None
        ``(c, N)``: penalise ``(k/2) (c . x0 - N)^2``, the seed's ``S+E+I+R+D = N``.
    invariant_weight : float, default=1e-4
        The penalty ``k``.
    optimizer : str, default="trf"
        One of :data:`~sklode.adjoint.OPTIMIZERS`, spelled as scipy spells them: ``"trf"``,
        ``"lm"``, ``"bfgs"``, ``"l-bfgs-b"``, ``"cg-fr"``, ``"cg-pr"``, ``"cg-hs"``,
        ``"cg-dy"`` (the upper-case spellings of before are accepted with a FutureWarning until
        0.3); or ``"fides"`` (the optional package fides: an interior trust region
        on the Gauss-Newton matrix, switching to BFGS where that stalls, the optimiser
        pyPESTO runs). Gauss-Newton type methods (trf, lm, fides) need the fewest solves with
        few unknowns; gradient methods suit many. From random starts in a wide box (many
        local optima) fides reaches the best optimum from more starts than trf, which often
        stops on its ftol test early; it evaluates the sensitivities at every trial point.
    gradient : {"adjoint", "forward"}, default="adjoint"
        How gradient optimisers get the gradient (least-squares optimisers always use the
        forward-sensitivity Jacobian).
    init : {"bcdprox", "wendy"} or estimator, default=None
        Start from another method's fit on the same data: its ``theta_`` replaces
        ``theta0`` and its ``x0_`` the guesses of the estimated initial components. Neither
        method integrates the ODE from the guess, so a chaotic or stiff problem whose
        trajectory from ``theta0`` blows up starts near the answer (Rössler from random
        guesses). An estimator instance is cloned and fitted; the strings pose BCDProxODE or
        WENDyODE with this estimator's ``theta0``, ``x0``, ``estimate_x0``, ``observed``,
        ``fixed``, ``bounds`` and ``positive``. Where that method cannot take the data (WENDy
        and hidden states, an initial time before the data) the fit starts from ``theta0``
        and ``solver_`` says why. None: start from ``theta0``.
    n_starts : int, default=1
        Optimise from this many starts and keep the one with the lowest cost: the start
        above (``theta0`` or ``init``'s); without ``init``, a start from the data (the fit
        of WENDy, else of BCD-prox, where one of them can take the data: neither integrates
        the ODE from a guess, so it starts near the answer where random starts around a
        poor ``theta0`` stay poor); and random ones: uniform in ``bounds`` on the
        optimiser's scale (log-uniform for ``positive`` parameters) when every fitted
        parameter has finite bounds, otherwise each fitted parameter multiplied by
        ``exp(N(0, 1))`` (a factor of e either way at one standard deviation, 7.1 at two; a
        parameter at 0 drawn from ``N(0, 1)``). Starts whose trajectory cannot be integrated
        are skipped; ``n_starts_at_best_`` counts the starts that reached the best cost and
        ``solver_`` names the winner.
    start_sampling : {"random", "latin_hypercube"}, default="random"
        How the random starts are drawn: independently, or as a Latin hypercube (each
        parameter's range cut into ``n_starts - 1`` equally likely slices, one start in
        each; :class:`scipy.stats.qmc.LatinHypercube`), which spreads few starts more
        evenly.
    grow_horizon : bool, default=True
        Where the best fit misses the data by more than the noise allows (a misfit ratio
        above 1.25 in any observed state; :class:`~sklode.exceptions.PoorFitWarning` warns
        above 2.5), refit its start over growing time horizons: the first eighth of every
        experiment's span, then parts each sqrt(2) times longer (a quarter after two, a
        half after four) and all of it, each from the fit before; keep the lower cost. A
        forward solve from a guess 30 % off drifts out of phase with an oscillation or a
        chaotic orbit within a few cycles, and its cost has a local minimum there; over a
        short horizon it does not, and each longer one starts near its answer (Van der
        Pol, Rössler, Lorenz-63 from 1.3 times the truth). A fit that passes costs one
        forward solve more (the check).
    random_state : int, RandomState instance or None, default=None
        Seed of the random starts (they are drawn before any fit, so the result does not
        depend on ``n_jobs``).
    n_jobs : int, default=None
        Starts optimised at once (joblib threads; None: one).
    tol : float, default=1e-8
        ``least_squares`` ftol/xtol/gtol; gradient methods stop when the gradient norm has
        dropped to ``tol`` times its starting value (the seed's rule).
    max_iter : int, default=200
        Maximum number of optimiser iterations (``"lm"``: of cost evaluations, MINPACK's only
        limit, which also bounds its iterations).
    integrator : str, default="auto"
        Forward solver of the fit and of ``predict`` (:data:`sklode.integrate.INTEGRATORS`);
        stiff ones are fine. ``"CVODES"``: the model compiled to C and solved by SUNDIALS'
        CVODES with its own forward sensitivities (needs a C compiler and SUNDIALS; LSODA
        with a :class:`~sklode.exceptions.CompilationWarning` otherwise). ``"auto"``: CVODES
        where the model compiles here and has at most 160 states or a banded ``df/dx``,
        LSODA otherwise, without a warning (:func:`sklode.integrate.integrator_for`).
    rtol : float, default=1e-8
        Relative tolerance of every forward solve.
    atol : float, default=1e-10
        Absolute tolerance of every forward solve.
    verbose : int, default=0
        Log each iteration through the ``sklode`` logger; with ``n_starts > 1`` also print
        each start's final cost as it finishes.

    Attributes
    ----------
    theta_ : ndarray of shape (n_params,)
        Estimated parameters, in ``model.param_names`` order.
    x0_ : ndarray of shape (n_states,) or (n_experiments, n_states)
        Initial state at ``t0_`` (estimated components fitted, known ones as given), one row
        per experiment when ``fit`` received several.
    t0_ : float or ndarray of shape (n_experiments,)
        Time of ``x0_``.
    theta_cov_ : ndarray of shape (n_params, n_params)
        Gauss-Newton covariance ``s^2 (J^T J)^-1`` of the fitted cost (``s^2`` the reduced
        chi-square), jointly with the estimated initial values; zero rows for ``fixed``
        parameters, ``inf`` variance for unidentifiable ones (see ``unidentifiable_``).
    theta_stderr_ : ndarray of shape (n_params,)
        Square roots of the diagonal of ``theta_cov_``.
    start_costs_ : ndarray of shape (n_starts,)
        The final cost of every start (``inf`` where it could not be integrated): its
        ``-log L``, on the scale of ``neg_log_likelihood_``, where the noise is known
        (``sigma``) or modelled (``noise_sd``, a model's error parameters); half the sum of
        squared residuals where the noise level is estimated from them.
    n_starts_at_best_ : int
        Starts whose cost ended within 0.1 of the best (with a noise model the cost is
        ``-log L`` up to a constant, so 0.1 log-likelihood units).
    x0_stderr_ : ndarray of shape (n_states,) or (n_experiments, n_states)
        Standard errors of ``x0_`` from the same covariance; zero for known components.
    unidentifiable_ : tuple of str
        The parameters and initial values the data cannot pin down, each with the
        combination the data do determine (``"x0[predator] and b separately (the data
        determine only x0[predator]*b)"``); empty when everything is identifiable. Warned
        as :class:`~sklode.exceptions.IdentifiabilityWarning`; the structurally
        unidentifiable ones have infinite standard errors.
    loss_history_ : list of float
        Cost ``L`` per iteration (index 0: the start).
    grad_norm_history_ : list of float
        Gradient norm (in the optimiser's scaled variables) per iteration.
    n_iter_ : int
        Optimiser iterations run.
    n_solves_ : int
        Forward solves plus derivative (sensitivity or adjoint) passes, over every start.
    converged_ : bool
        The optimiser's own convergence test.
    fit_adequate_ : bool or None
        Whether the fit passed the adequacy check: the prediction's RMS residual is at most
        2.5 noise levels (estimated from the data) in every observed state; a failed check
        warns :class:`~sklode.exceptions.PoorFitWarning`. None when no experiment has 16
        complete samples to estimate its noise. Independent of ``converged_``.
    misfit_ratio_ : ndarray of shape (n_observed,) or None
        That RMS residual over the noise level, per observed state (near 1 for an adequate
        fit).
    stop_reason_ : str
        The optimiser's message: why it stopped.
    solver_ : str
        Which optimiser and derivative ran.
    observed_ : tuple of int
        Indices of the states ``Y``'s columns hold.
    n_features_in_ : int
        Always 1 (the time).

    See Also
    --------
    BCDProxODE : no forward solves; robust to poor initial guesses on fully observed data.
    WENDyODE : no forward solves; fast on long, densely sampled series.

    References
    ----------
    Hernández and Sánchez, "Parameter estimation in ODEs: modelling and computational issues"
    (seed 002).

    Examples
    --------
    >>> from sklode.datasets import make_trajectory
    >>> from sklode import AdjointODE
    >>> data = make_trajectory("seird", noise=0.05, random_state=0)
    >>> prob = data.problem
    >>> est = AdjointODE(prob.model, theta0=prob.theta_init, x0=prob.x0, t0=prob.t0,
    ...                  observed=prob.observed, estimate_x0=False, sigma=0.05,
    ...                  noise_kind="proportional").fit(data.t, data.Y)
    >>> est.theta_.round(2), est.converged_
    (array([0.86, 0.16, 0.2 , 0.01]), True)
    >>> est.theta_stderr_.round(3)
    array([0.062, 0.01 , 0.005, 0.   ])

    The normal-approximation interval of alpha, and its profile-likelihood interval (the
    cost is skewed: the profile's upper end lies further out):

    >>> est.confidence_intervals(0.95)[0].round(2)
    array([0.74, 0.98])
    >>> est.profile_intervals(data.t, data.Y, parameters=["alpha"])[0].round(2)
    array([0.75, 1.  ])
    """

    _parameter_constraints = {
        **COMMON_CONSTRAINTS,
        "x0_bounds": [tuple, list, None],
        "sigma": [Interval(Real, 0, None, closed="neither"), "array-like", None],
        "noise_kind": [StrOptions(set(NOISE_KINDS)), dict],
        "x0_prior": ["array-like", None],
        "x0_prior_sigma": [Interval(Real, 0, None, closed="neither"), "array-like", None],
        "invariant": [tuple, list, None],
        "invariant_weight": [Interval(Real, 0, None, closed="left")],
        "optimizer": [StrOptions(set(OPTIMIZERS) | set(OLD_OPTIMIZER_SPELLINGS),
                                 deprecated=set(OLD_OPTIMIZER_SPELLINGS))],
        "gradient": [StrOptions({"adjoint", "forward"})],
        "init": [StrOptions({"bcdprox", "wendy"}), HasMethods(["fit"]), None],
        "n_starts": [Interval(Integral, 1, None, closed="left")],
        "start_sampling": [StrOptions({"random", "latin_hypercube"})],
        "grow_horizon": ["boolean"],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
    }

    def __init__(self, model=None, *, theta0=None, x0=None, t0=None, estimate_x0=True,
                 observed=None, fixed=None, bounds=None, positive=False, x0_bounds=None,
                 sigma=None, noise_kind="absolute",
                 x0_prior=None, x0_prior_sigma=None, invariant=None, invariant_weight=1e-4,
                 optimizer="trf", gradient="adjoint", init=None, n_starts=1,
                 start_sampling="random", grow_horizon=True, random_state=None, n_jobs=None,
                 tol=1e-8, max_iter=200, integrator="auto", rtol=1e-8, atol=1e-10, verbose=0):
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
        self.x0_prior = x0_prior
        self.x0_prior_sigma = x0_prior_sigma
        self.invariant = invariant
        self.invariant_weight = invariant_weight
        self.optimizer = optimizer
        self.gradient = gradient
        self.init = init
        self.n_starts = n_starts
        self.start_sampling = start_sampling
        self.grow_horizon = grow_horizon
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.tol = tol
        self.max_iter = max_iter
        self.integrator = integrator
        self.rtol = rtol
        self.atol = atol
        self.verbose = verbose

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, t, Y=None):
        """Fit ``theta_`` (and ``x0_``) to observations ``Y`` of the ``observed`` states.

        Parameters
        ----------
        t : array-like of shape (n_samples,) or (n_samples, 1), or a list of them
            Observation times, at or after ``t0`` (any order is accepted); a list or tuple
            means several experiments sharing ``theta``, each with its own initial state.
        Y : array-like of shape (n_samples, n_observed), or a list of them
            Noisy observations of the ``observed`` states, one row per time; NaN marks a
            missing value, which contributes no residual.

        Returns
        -------
        self : AdjointODE
            The fitted estimator.

        Raises
        ------
        IntegrationError
            The ODE cannot be solved at the starting point.
        ImportError
            ``optimizer="fides"`` without the package fides.
        """
        missing = fides_unavailable_reason() if self.optimizer == "fides" else None
        if missing:
            raise ImportError(missing)
        data = self._validate_data(t, Y)
        start_theta, data, start_note = start_from_init(self, t, Y, data)
        fitted, theta0 = check_fixed(self.fixed, start_theta, self.model)
        self._check_enough_values(data, fitted)
        problem = self._fitted_states(data)
        thetas, reseeds = random_starts(self, theta0, fitted)
        starts = [(start, problem) for start in thetas]
        redrawable = set(range(1, len(starts)))  # the random starts
        if self.init is None and len(starts) > 1:
            # the second start comes from the data: random starts around a poor theta0 are
            # mostly poor too (Rossler, Lorenz-63), a gradient-free method's fit is not
            found = data_start(self, t, Y)
            if found is not None:
                name, other = found
                starts[1] = (usable_start(self, other.theta_, theta0, fitted),
                             self._fitted_states(data.with_initial_states(other.x0_)))
                start_note += f"; start 1 from {name}'s fit"
                redrawable.discard(1)

        def one(k, start, posed):
            """One start's ``(objective, result, redraws)``: a random start from which the
            ODE cannot be integrated is drawn again (its own stream: any n_jobs)."""
            objective, res = self._solve(posed, start, fitted)
            redraws, rng = 0, check_random_state(reseeds[k - 1]) if k in redrawable else None
            while (rng is not None and isinstance(res, IntegrationError)
                   and redraws < _REDRAWS):
                start = random_starts(self, theta0, fitted, n_random=1, rng=rng)[0][1]
                objective, res = self._solve(posed, start, fitted)
                redraws += 1
            return objective, res, redraws

        outcomes, n_redrawn = [], 0
        for objective, res, redraws in Parallel(
                n_jobs=self.n_jobs, prefer="threads", return_as="generator")(
                delayed(one)(k, start, posed) for k, (start, posed) in enumerate(starts)):
            outcomes.append((objective, res))
            n_redrawn += int(redraws > 0)
            if self.verbose and len(starts) > 1:  # progress per start on long problems
                status = (f"could not be integrated ({res})" if isinstance(res, Exception)
                          else f"{self._cost_name(objective)} "
                          f"{objective.cost(res.u) - self._cost_shift(objective):.6g}")
                print(f"{type(self).__name__} start {len(outcomes)}/{len(starts)}: {status}",
                      flush=True)
        # every start's cost on the scale of neg_log_likelihood_ where it is -log L up to a
        # constant of the data (noise known or modelled), so the two can be compared
        finished = [(objective.cost(res.u) - self._cost_shift(objective), k)
                    for k, (objective, res) in enumerate(outcomes)
                    if not isinstance(res, Exception)]
        if not finished:
            raise outcomes[0][1]  # no start could be integrated: the first one's reason
        best = min(finished)[1]  # lowest cost; ties to the earlier start (any n_jobs)
        start_costs = np.full(len(starts), np.inf)
        for cost, k in finished:
            start_costs[k] = cost
        objective, res = outcomes[best]
        n_solves = sum(o.n_forward + o.n_derivative for o, _ in outcomes)
        if self.grow_horizon:
            grown, grown_solves = grown_horizon_fit(self, objective, res, *starts[best],
                                                          fitted)
            n_solves += grown_solves
            if grown is not None:
                objective, res = grown
                cost = objective.cost(res.u) - self._cost_shift(objective)
                start_note += (f"; refitted over growing time horizons (cost "
                               f"{start_costs[best]:.6g} -> {cost:.6g})")
                start_costs[best] = cost
        if len(starts) > 1:
            start_note += (f"; best of {len(starts)} starts (start {best}; "
                           f"{n_redrawn} random start(s) drawn again where the ODE could not "
                           f"be integrated; {len(starts) - len(finished)} could not be "
                           "integrated in the end)")

        x0, theta = objective.split(objective.to_z(res.u))
        at_bound = self._warn_at_bounds(theta, fitted)
        # where the optimiser started, to tell a runaway from a converged estimate
        start_z = np.concatenate([np.full(objective.n_x0, np.nan), theta0[fitted]])
        uncertainty = fit_uncertainty(objective, res.u,
                                      unknown_names(objective, problem.model, data.several),
                                      start=start_z if len(starts) == 1 else None,
                                      at_bound=np.concatenate([np.zeros(objective.n_x0, bool),
                                                               at_bound[fitted]]))
        z0s = x0
        if problem.transformed is not None:
            x0 = problem.transformed.to_x(x0)
        if not res.converged:
            other = "optimizer='bfgs'" if self.optimizer == "trf" else "optimizer='trf'"
            warn_not_converged(self, res.n_iter, res.stop_reason,
                               f"Increase max_iter (now {self.max_iter}), loosen tol (now "
                               f"{self.tol}) or try {other}.")
        return self._set_fitted(
            theta_=theta, x0_=x0, t0_=initial_times(data),
            **uncertainty_attributes(uncertainty, data, fitted, self.model, type(self).__name__,
                                     transformed=problem.transformed, z0s=z0s),
            loss_history_=res.loss_history, grad_norm_history_=res.grad_norm_history,
            n_iter_=res.n_iter, n_solves_=n_solves,
            converged_=bool(res.converged), stop_reason_=res.stop_reason,
            solver_=res.solver + start_note, start_costs_=start_costs,
            # within 0.1 of the best cost (-log L units with a noise model): "reached it"
            n_starts_at_best_=int(np.sum(start_costs <= start_costs[best] + 0.1)),
            **likelihood_attributes(self.model, theta, data, x0, self._simulation_options(),
                                    sigma=self.sigma, noise_kind=self.noise_kind,
                                    n_fitted=int(fitted.sum()) + objective.n_x0),
            **assess_fit(self.model, data, theta, x0, estimator_name=type(self).__name__,
                         advice="", options=self._simulation_options(),
                         polish=Polish(fitted=fitted, sigma=self.sigma,
                                       noise_kind=self.noise_kind, positive=self.positive,
                                       init=None),
                         restarts=lambda: restart_check(
                             self, t, Y, start_costs[best], start_costs, best, outcomes, starts,
                             theta0, fitted)),
            **self._data_attributes(data))

    def _cost_shift(self, objective):
        """What the cost exceeds ``-log L`` by, where that is a constant of the data (the
        noise known, ``sigma``, or modelled); 0 where the noise level is estimated from the
        residuals (then ``-log L`` is profiled, not shifted)."""
        if not self._is_likelihood(objective.model):
            return 0.0
        return float(objective.cost_offset())

    def _is_likelihood(self, model):
        """Whether the cost is ``-log L`` plus a constant of the data: the noise levels
        known or modelled (without them one scale per observable is profiled out)."""
        return self.sigma is not None or model.has_noise_model

    def _cost_name(self, objective):
        """How a start's cost is shown: ``-log L`` where :meth:`_cost_shift` applies."""
        return "-log L" if self._is_likelihood(objective.model) else "cost"

    def profile_intervals(self, t, Y=None, level=0.95, *, parameters=None):
        """Profile-likelihood confidence intervals for ``theta_`` on the data ``fit`` saw.

        For each parameter, the cost is minimised over all the other unknowns (parameters
        and estimated initial values) with that parameter held at trial values; the interval
        is where this profile stays within ``chi2_1(level) / 2`` noise variances (the
        reduced chi-square of the fit) of the optimum. Unlike :meth:`confidence_intervals`
        it follows a curved, skewed or one-sided cost, and it reports an end at ``±inf``
        where the profile never rises that far: the data do not bound the parameter on
        that side (practical non-identifiability). Each point is a warm-started refit, so
        an interval costs about 10-20 fits' worth of a few iterations each; the parameters
        run in parallel over ``n_jobs`` threads.

        Parameters
        ----------
        t, Y : array-like, or lists of them
            The data given to :meth:`fit` (checked: the cost at the fit must match).
        level : float, default=0.95
            Coverage, strictly between 0 and 1.
        parameters : list of str or int, optional
            Which parameters to profile (names or indices; default: every fitted one).
            The others' rows, and those of ``fixed`` parameters, are their value twice.

        Returns
        -------
        intervals : ndarray of shape (n_params, 2)
            Lower and upper ends, in ``model.param_names`` order.

        Warns
        -----
        PoorFitWarning
            A profile point had a lower cost than the fit: ``theta_`` was not the optimum
            (refit from ``theta0`` near that point).
        IdentifiabilityWarning
            A profile stays flat to a limit (``inf``, a bound, or 0 for a ``positive``
            parameter): the data do not bound the parameter on that side.
        """
        return profile_intervals_of(self, t, Y, level, parameters)

    def _profiled(self, parameters, fitted):
        """Indices of the parameters to profile (fitted ones only)."""
        names = list(self.model.param_names)
        if parameters is None:
            return [j for j in range(len(names)) if fitted[j]]
        chosen = []
        for p in parameters:
            j = names.index(p) if isinstance(p, str) and p in names else p
            if not isinstance(j, (int, np.integer)) or not 0 <= j < len(names):
                raise ValueError(f"Unknown parameter {p!r}: use one of {names} or an index.")
            if fitted[j]:
                chosen.append(int(j))
        return chosen

    def _check_enough_values(self, data, fitted):
        """Refuse fewer observed values than unknowns (least squares would return an
        arbitrary point of a continuum of exact fits); an ``x0_prior`` adds residuals."""
        n_x0 = sum(int(e.estimate_x0.sum()) for e in data.experiments)
        n_unknowns = int(fitted.sum()) + n_x0
        n_values = sum(int(e.mask.sum()) for e in data.experiments)
        if self.x0_prior is None and n_values < n_unknowns:
            raise ValueError(
                f"{type(self).__name__} has {n_unknowns} unknowns ({int(fitted.sum())} "
                f"parameters, {n_x0} initial values) but the data hold only {n_values} "
                "observed values; it needs at least as many. Observe more times, hold "
                "parameters with fixed=, or give known initial values (estimate_x0=False).")

    def _theta_limits(self):
        """Lower and upper limits of every parameter: ``bounds``, and 0 below where
        ``positive``."""
        limits = bounds_with_positivity(self.bounds, self.positive, self.model)
        if limits is None:
            return np.full(self.model.n_params, -np.inf), np.full(self.model.n_params, np.inf)
        return limits

    def _fitted_states(self, data):
        """The problem the cost is posed on: the model and data as validated."""
        model = self.model
        x0_bounds = check_bounds(self.x0_bounds, model.n_states, model.state_names,
                                 name="x0_bounds")
        # log kinds are read by the likelihood layer on the observables: no state transform,
        # so a hidden state at 0 does not block them (only the observed values must be > 0)
        return _Posed(model, data, None, self.noise_kind, x0_bounds)

    def _pose(self, problem, theta, fitted):
        """The cost on ``problem`` with the parameters ``fitted`` free (the others held at
        ``theta``) and its point ``u`` at ``theta`` and the data's x0."""
        return objective_for_experiments(
            problem.model, problem.data, theta0=theta, fitted=fitted,
            sigma=1.0 if self.sigma is None else self.sigma,
            noise_kind=problem.noise_kind, x0_prior=self.x0_prior,
            x0_prior_sigma=self.x0_prior_sigma, invariant=self.invariant,
            invariant_weight=self.invariant_weight, positive=self.positive,
            integrator=self.integrator, rtol=self.rtol, atol=self.atol,
            estimator_name=type(self).__name__,
            # Fides reads the cost less its constant (adjoint_solve's cost_offset): it
            # needs no floor under the noise levels; trf's relative ftol would loosen
            noise_range=NOISE_RANGE_WITHOUT_FLOOR if self.optimizer == "fides" else None)


    def _solve(self, problem, theta_start, fitted):
        """``(objective, result)`` of one optimisation from ``theta_start``, from the one of
        the data's initial states (:func:`~sklode.outputerror._initial_state.data_starts`: smoothed,
        as observed, sign-corrected) with the lowest cost at ``theta_start`` (one forward solve
        each: on a chaotic system a start a third of a noise level off can cost 4x another);
        the result an IntegrationError where the ODE can be integrated from none of them."""
        failed, ready = [], []
        for data in self._data_starts(problem.data):
            objective, u0 = self._pose(problem._replace(data=data), theta_start, fitted)
            bounds = self._bounds_in_u(objective, problem.x0_bounds)
            if bounds is not None:  # start strictly inside the box
                span = np.where(np.isfinite(bounds[1] - bounds[0]), bounds[1] - bounds[0], 1.0)
                u0 = np.clip(u0, bounds[0] + 1e-10 * span, bounds[1] - 1e-10 * span)
            try:
                cost = objective.cost(u0)  # the solve is kept for the optimiser's first step
            except IntegrationError as exc:
                failed.append((objective, u0, exc))
                continue
            if np.isfinite(cost):
                ready.append((cost, len(ready), objective, u0, bounds))
        if not ready:
            return self._cannot_start(failed)
        _, _, objective, u0, bounds = min(ready)
        likelihood = self._is_likelihood(problem.model)
        try:
            res = adjoint_solve(objective, u0, optimizer=self.optimizer,
                                gradient=self.gradient, bounds=bounds, tol=self.tol,
                                max_iter=self.max_iter, verbose=self.verbose,
                                cost_offset=objective.cost_offset() if likelihood else 0.0)
        except IntegrationError as exc:
            return objective, exc
        return objective, res

    @staticmethod
    def _cannot_start(failed):
        """``(objective, IntegrationError)`` saying that the ODE fails from every start
        ``failed`` holds (``(objective, u0, error)``, the best start first)."""
        objective, u0, exc = failed[0]
        also = ("" if len(failed) == 1 else
                f" It failed too from {len(failed) - 1} other initial state(s) taken from the "
                "data (smoothed, as first observed, negative values of positive data moved just "
                "above 0): give x0 a guess, or x0_bounds.")
        return objective, cannot_start(objective, u0, exc, also)

    def _data_starts(self, data):
        """The data with their unknown initial components filled in each way
        :func:`~sklode.outputerror._initial_state.data_starts` offers, best first (an experiment
        with fewer ways keeps its last)."""
        name = type(self).__name__
        each = [data_starts(e, data.observed, self.model, name) for e in data.experiments]
        return [data.with_initial_states([starts[min(j, len(starts) - 1)] for starts in each])
                for j in range(max(map(len, each)))]

    def _min_samples_each(self):
        # a forward solve from a known start needs no second time point in each experiment
        # (one sample per condition is common in PEtab problems); the unknowns are counted
        # against all the values together (_check_enough_values)
        return 1

    def _warn_at_bounds(self, theta, fitted):
        """:class:`BoundWarning` naming the fitted parameters that ended on a finite bound
        (within 1e-6 of the box's width, on the optimiser's scale); returns which did."""
        checked = check_bounds(self.bounds, self.model.n_params, self.model.param_names)
        at_bound = np.zeros(self.model.n_params, dtype=bool)
        if checked is None:
            return at_bound
        lower, upper = checked
        log_scale = check_positive(self.positive, self.model.n_params)
        at = []
        for i in np.flatnonzero(fitted):
            lo, hi, value = lower[i], upper[i], theta[i]
            if log_scale[i] and lo > 0 and np.isfinite(hi):
                lo, hi, value = np.log(lo), np.log(hi), np.log(max(value, 1e-300))
            width = hi - lo if np.isfinite(hi - lo) else max(1.0, abs(value))
            for bound, side in ((lo, "lower"), (hi, "upper")):
                if np.isfinite(bound) and abs(value - bound) <= 1e-6 * width:
                    at.append(f"{self.model.param_names[i]} = {theta[i]:.4g} ({side})")
                    at_bound[i] = True
        if at:
            warn(f"{type(self).__name__}: {len(at)} fitted parameter(s) ended on a bound: "
                 f"{', '.join(at[:8])}{' ...' if len(at) > 8 else ''}. The optimum may lie "
                 "beyond (widen the bound unless it is a physical limit); their standard "
                 "errors ignore the bound.", BoundWarning)
        return at_bound


    def _bounds_in_u(self, objective, on_x0):
        """Bounds on the optimiser's variables (``on_x0``: on the initial state, in the
        fitted states), or None."""
        model = self.model
        checked = check_bounds(self.bounds, model.n_params, model.param_names)
        if checked is None and on_x0 is None:
            return None
        n_x0 = objective.n_x0
        lower = np.full(objective.scale.size, -np.inf)
        upper = np.full(objective.scale.size, np.inf)
        if on_x0 is not None:  # each estimated component by the bound of its state
            states = objective.x0_states
            lower[:n_x0] = on_x0[0][states] / objective.scale[:n_x0]
            upper[:n_x0] = on_x0[1][states] / objective.scale[:n_x0]
        if checked is None:
            return lower, upper
        lo, hi = checked[0][objective.fitted], checked[1][objective.fitted]
        log_scale = objective.log_mask[n_x0:]
        with np.errstate(divide="ignore"):  # (scale: the log's factor on a log scale)
            lower[n_x0:] = np.where(log_scale, np.log(np.maximum(lo, 0.0)),
                                    lo) / objective.scale[n_x0:]
            upper[n_x0:] = np.where(log_scale, np.log(np.maximum(hi, 0.0)),
                                    hi) / objective.scale[n_x0:]
        return lower, upper
