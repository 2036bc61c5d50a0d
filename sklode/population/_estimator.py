"""MixedEffectsODE: a nonlinear mixed-effects model whose structural part is an ODE (thin: the
numerics are in :mod:`._subject` and :mod:`._solver`)."""

from __future__ import annotations

import warnings
from numbers import Integral, Real

import numpy as np
from scipy.stats import norm
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from .._checks import check_bounds, check_positive, initial_theta
from .._estimator import COMMON_CONSTRAINTS, ODEEstimator
from .._validation import check_experiments
from ..adjoint import AdjointODE
from ..diagnostics._assessment import without_assessment
from ..exceptions import ConvergenceWarning, IdentifiabilityWarning, SklodeError, warn
from ..experiment import Experiment
from ..integrate import _resolve_integrator
from ..models import check_model
from ..observation._likelihood import information_criteria
from ..outputerror._predict import predicted_observables
from ._differences import central_differences, second_differences
from ._solver import (
    Layout,
    direct_fit,
    lindstrom_bates,
    linearised_data,
    lme_nll_full,
    marginal_hessian,
    marginal_nll,
)
from ._subject import Subject, subject_theta

__all__ = ["MixedEffectsODE"]

# Standard deviation (log scale) of every random effect at the start: 30 % between subjects,
# the middle of what pharmacokinetic populations show (10-60 %)
_OMEGA0_SD = 0.3


class MixedEffectsODE(ODEEstimator):
    """Population (nonlinear mixed-effects) fit of an ODE model to many subjects.

    Each subject ``i`` has its own parameters: the ``random`` ones are
    ``theta_i = theta * exp(eta_i)`` with ``eta_i ~ N(0, Omega)`` (log-normal between
    subjects, the log-parameter form of R's ``nlme``), the others are shared. Subjects are
    :class:`~sklode.Experiment` objects (doses, conditions and covariates travel with them).
    The residual error is the model's ``noise_sd`` (its parameters fitted with the others),
    or one additive standard deviation per observable (``sigma_``).

    The marginal likelihood integrates each subject's ``eta`` out by Laplace's approximation
    at its conditional mode: ``method="foce"`` with the expected (first-order) information,
    the FOCE-I objective, which for an additive error is exactly the linearised mixed model's
    likelihood that ``nlme`` reports; ``method="laplace"`` with the exact Hessian.

    Parameters
    ----------
    model : ODEModel
        The structural model (observables and ``noise_sd`` read when it has them).
    random : str or sequence of str
        The parameters that vary between subjects (strictly positive).
    method : {"foce", "laplace"}, default="foce"
        The approximation of the marginal likelihood.
    optimizer : {"auto", "lindstrom-bates", "direct"}, default="auto"
        ``"lindstrom-bates"`` alternates a penalised nonlinear least-squares step and a
        linear mixed-model step (nlme's algorithm; additive error and FOCE only; fast);
        ``"direct"`` minimises the chosen marginal likelihood itself (L-BFGS-B, each
        subject's mode warm-started; FOCE-I with its gradient from sensitivities, Laplace on
        central differences; any error model; 10-100x the CPU).
        ``"auto"``: Lindstrom-Bates where it applies, else direct started from it (or from a
        pooled fit).
    covariance : {"diagonal", "full"}, default="diagonal"
        The structure of ``Omega``.
    theta0 : array-like of shape (n_params,), optional
        Starting population values (default: the model's guess), refined by a pooled
        :class:`~sklode.AdjointODE` fit before the population fit.
    x0 : array-like of shape (n_states,), optional
        The known initial state of every subject (an :class:`~sklode.Experiment`'s own
        ``x0`` wins); doses put the drug in.
    t0 : float, optional
        Time of ``x0`` (default: each subject's first time).
    observed : sequence of str or int, optional
        The observables the data's columns hold (default: all).
    estimate_x0 : bool, default=False
        Every subject's initial state must be known (``x0``, or each Experiment's own; doses
        put the drug in): ``True`` raises a ValueError naming AdjointODE, which estimates
        initial states (one subject at a time).
    fixed : dict, optional
        ``{parameter: value}`` held at that value (not estimated, not random).
    bounds : (lower, upper), optional
        Bounds on the population values ``theta_`` (scalars or one per parameter, +-inf
        allowed), honoured by the direct optimiser (``optimizer="auto"`` then chooses it;
        ``"lindstrom-bates"`` refuses bounds) and by the pooled start.
    positive : bool, array-like of bool or None, default=None
        Which population values are estimated on the log scale (kept positive). None: every
        estimated parameter whose start is positive (the random ones must be).
    omega0 : float, default=0.3
        Starting standard deviation of every random effect (log scale).
    tol : float, default=1e-6
        Convergence tolerance on the unknowns (their scales: log values, log standard
        deviations).
    max_iter : int, default=100
        Alternations (Lindstrom-Bates) or L-BFGS-B iterations (direct).
    integrator : str, default="auto"
        Forward solver (:data:`sklode.integrate.INTEGRATORS`).
        ``"auto"`` (default): the model compiled to C and integrated by SUNDIALS' CVODES
        where a C compiler and SUNDIALS are found, LSODA otherwise
        (:func:`sklode.integrate.integrator_for`).
    rtol : float, default=1e-8
        Relative tolerance of the forward solves.
    atol : float, default=1e-10
        Absolute tolerance of the forward solves.
    verbose : int, default=0
        Print ``-log L`` at each alternation.
    random_state : int, RandomState instance or None, default=None
        Seed of :meth:`replicate_data` when it is given none (the fit itself draws nothing).
    n_jobs : int, default=None
        Subjects whose mode searches run at once in each evaluation of the marginal
        likelihood (joblib threads: the compiled CVODES solves release the GIL). None: one.
    random_kind : {"lognormal", "normal"} or dict, default="lognormal"
        The distribution of each random parameter between subjects: ``"lognormal"``,
        ``theta_i = theta * exp(eta_i)`` (nlme's log-parameter form; ``theta`` on the log
        scale, positive), or ``"normal"``, ``theta_i = theta + eta_i`` (additive, nlme's
        ``Asym ~ 1 | Tree``; ``theta`` on its natural scale, any sign; ``omega0`` then a
        fraction of ``|theta0|``). A dict by parameter name sets each (the others
        log-normal).

    Attributes
    ----------
    theta_ : ndarray of shape (n_params,)
        Population values (natural scale; held ones as given).
    theta_stderr_ : ndarray of shape (n_params,)
        Their standard errors (delta method from the log scale; 0 for held ones).
    omega_ : ndarray of shape (n_random, n_random)
        Covariance of the random effects (log scale).
    random_sd_, random_sd_stderr_ : ndarray of shape (n_random,)
        Standard deviations of the random effects and their standard errors.
    sigma_, sigma_stderr_ : ndarray of shape (n_observed,) or None
        Additive residual standard deviations (None when the model has ``noise_sd``).
    random_effects_ : ndarray of shape (n_subjects, n_random)
        Empirical-Bayes ``eta_i`` (conditional modes).
    individual_theta_ : ndarray of shape (n_subjects, n_params)
        Each subject's parameters (before its conditions).
    random_names_ : tuple of str
    subject_names_ : list
    neg_log_likelihood_, aic_, bic_ : float
        ``-log L`` with every constant (nlme's ``logLik`` is ``-neg_log_likelihood_``),
        AIC and BIC (observations as n).
    n_parameters_, n_observations_ : int
    parameter_cov_ : ndarray
        Covariance of all the unknowns on the optimiser's scales (log theta, log sd or
        Cholesky entries, log sigma), labelled by ``parameter_labels_``; ``theta_cov_`` is
        its block for ``theta_``, on the natural scale, as on every estimator. (Called
        ``cov_`` before; that name warns and goes in 0.3.)
    n_iter_, converged_, stop_reason_, solver_, loss_history_

    Examples
    --------
    >>> import numpy as np
    >>> from sklode import MixedEffectsODE, Experiment, simulate
    >>> from sklode.models import OralAbsorption
    >>> rng = np.random.default_rng(0)
    >>> t = np.array([0.5, 1, 2, 4, 6, 8, 12, 24.0])
    >>> subjects = []
    >>> for i in range(12):
    ...     theta = np.array([1.0, 0.1, 0.05]) * np.exp([0.3 * rng.normal(), 0, 0.2 * rng.normal()])
    ...     X = simulate(OralAbsorption(), theta, [0.0, 0.0], t, t0=0.0, doses=[(0.0, 0, 100.0)])
    ...     subjects.append(Experiment(t, X[:, 1:] + 0.1 * rng.normal(size=(8, 1)),
    ...                                doses=[(0.0, "gut", 100.0)], name=i))
    >>> pop = MixedEffectsODE(OralAbsorption(), random=("ka", "kv"), x0=[0, 0], t0=0.0,
    ...                       observed=["concentration"]).fit(subjects)
    >>> np.round(pop.theta_, 2)
    array([0.92, 0.1 , 0.05])
    """

    _parameter_constraints = {
        **COMMON_CONSTRAINTS,
        "random": [str, tuple, list],
        "method": [StrOptions({"foce", "laplace"})],
        "optimizer": [StrOptions({"auto", "lindstrom-bates", "direct"})],
        "covariance": [StrOptions({"diagonal", "full"})],
        "positive": ["boolean", "array-like", None],
        "omega0": [Interval(Real, 0, None, closed="neither")],
        "random_state": ["random_state"],
        "n_jobs": [Integral, None],
        "random_kind": [StrOptions({"lognormal", "normal"}), dict],
    }

    def __init__(self, model, random, *, method="foce", optimizer="auto",
                 covariance="diagonal", theta0=None, x0=None, t0=None, estimate_x0=False,
                 observed=None, fixed=None, bounds=None, positive=None, omega0=_OMEGA0_SD,
                 tol=1e-6, max_iter=100, integrator="auto", rtol=1e-8, atol=1e-10,
                 verbose=0, random_state=None, n_jobs=None, random_kind="lognormal"):
        self.model = model
        self.random = random
        self.random_kind = random_kind
        self.method = method
        self.optimizer = optimizer
        self.covariance = covariance
        self.theta0 = theta0
        self.x0 = x0
        self.t0 = t0
        self.estimate_x0 = estimate_x0
        self.observed = observed
        self.fixed = fixed
        self.bounds = bounds
        self.positive = positive
        self.omega0 = omega0
        self.tol = tol
        self.max_iter = max_iter
        self.integrator = integrator
        self.rtol = rtol
        self.atol = atol
        self.verbose = verbose
        self.random_state = random_state
        self.n_jobs = n_jobs

    # ------------------------------------------------------------------ set-up
    def _options(self):
        return {"integrator": _resolve_integrator(self.integrator), "rtol": self.rtol,
                "atol": self.atol}

    def _data(self, X, y, warn_initial_time=True):
        model = check_model(self.model)
        if isinstance(X, (list, tuple)) and len(X) == 0:
            raise ValueError("MixedEffectsODE needs a list of subjects (Experiment objects); "
                             "got an empty list.")
        data = check_experiments(X, y, model=model, observed=self.observed, x0=self.x0,
                                 t0=self.t0, estimate_x0=False, min_samples=1,
                                 estimator_name="MixedEffectsODE",
                                 warn_initial_time=warn_initial_time)
        return model, data

    def _random_indices(self, model):
        names = (self.random,) if isinstance(self.random, str) else tuple(self.random)
        if not names:
            raise ValueError("random=() leaves nothing varying between subjects: name at "
                             "least one parameter, or fit the pooled data with AdjointODE.")
        unknown = [n for n in names if n not in model.param_names]
        if unknown:
            raise ValueError(f"random names {unknown}, which are not parameters of the model "
                             f"{list(model.param_names)}.")
        if len(set(names)) != len(names):
            raise ValueError(f"random lists a parameter twice: {list(names)}.")
        held = [n for n in names if n in (self.fixed or {})]
        if held:
            raise ValueError(f"{held} are both random and fixed: a held parameter cannot vary "
                             "between subjects.")
        kinds = self.random_kind if isinstance(self.random_kind, dict) else {
            n: self.random_kind for n in names}
        unknown = [n for n in kinds if n not in names]
        bad = {n: k for n, k in kinds.items() if k not in ("lognormal", "normal")}
        if unknown or bad:
            raise ValueError(f"random_kind names {unknown or bad}: give 'lognormal' or "
                             f"'normal' for parameters among random={list(names)}.")
        additive = np.array([kinds.get(n, "lognormal") == "normal" for n in names])
        return names, np.array([model.param_names.index(n) for n in names]), additive

    def _layout(self, model, data):
        names, random, additive = self._random_indices(model)
        # inside the bounds as on every estimator (positive=None: no positivity bound)
        theta = np.array(initial_theta(
            self.theta0, model, bounds=self.bounds,
            positive=False if self.positive is None else self.positive, fixed=self.fixed))
        held = np.zeros(model.n_params, dtype=bool)
        for name in self.fixed or {}:
            if name not in model.param_names:
                raise ValueError(f"fixed names {name!r}, which is not a parameter of the model "
                                 f"{list(model.param_names)}.")
            k = model.param_names.index(name)
            held[k], theta[k] = True, float(self.fixed[name])
        # a parameter every subject's conditions set to a number (a covariate: a body
        # weight) has no population value to estimate: held, whatever theta0 says
        covariates = [k for k in range(model.n_params) if data.experiments and all(
            e.conditions and not isinstance(e.conditions.get(model.param_names[k], ""), str)
            for e in data.experiments)]
        clash = [model.param_names[k] for k in covariates if k in set(random)]
        if clash:
            raise ValueError(f"{clash} are random but every subject's conditions set them: a "
                             "covariate is known per subject, it does not vary at random.")
        held[covariates] = True
        limits = check_bounds(self.bounds, model.n_params, model.param_names)
        lognormal = ~additive
        if np.any(theta[random][lognormal] <= 0):
            bad = [names[i] for i in np.flatnonzero((theta[random] <= 0) & lognormal)]
            raise ValueError(f"The log-normal random parameters {bad} must start positive "
                             f"(theta_i = theta * exp(eta)); got theta0 {theta[random]}. "
                             "random_kind='normal' makes a parameter's random effect additive "
                             "(any sign).")
        if self.positive is None:  # every parameter that starts positive
            log_scale = theta > 0
        else:
            log_scale = check_positive(self.positive, model.n_params)
            bad = log_scale & ~held & (theta <= 0)
            if bad.any():
                raise ValueError(
                    f"positive= puts {[model.param_names[k] for k in np.flatnonzero(bad)]} on "
                    "the log scale, but they start at or below 0: give theta0 > 0 for them.")
        # a random parameter's scale is its random effect's: log for a log-normal one
        # (theta exp(eta) = exp(b + eta)), natural for a normal one (b + eta)
        log_scale[random] = lognormal
        estimated = np.flatnonzero(~held)
        layout = Layout(theta=theta, estimated=estimated, log_mask=log_scale[estimated],
                        random=random, full=self.covariance == "full",
                        n_sigma=0 if model.has_noise_model else len(data.observed),
                        theta_bounds=None if limits is None else (limits[0][estimated],
                                                                  limits[1][estimated]),
                        names=tuple(model.param_names), additive=additive)
        return names, layout

    def _subjects(self, model, data, layout):
        for e in data.experiments:
            if getattr(e, "preequilibration", None) is not None:
                raise ValueError("MixedEffectsODE does not take pre-equilibrated experiments.")
        return [Subject(model, e, data.observed, layout.random, self._options(),
                        additive=layout.additive) for e in data.experiments]

    def _pooled_start(self, model, data, layout, subjects):
        """A pooled AdjointODE fit (every subject the same parameters) as the start, and
        the residual levels around it."""
        experiments = [_as_public(e, model) for e in data.experiments]
        pooled = AdjointODE(
            model, theta0=layout.theta, x0=None, estimate_x0=False, observed=data.observed,
            fixed={model.param_names[k]: layout.theta[k]
                   for k in range(model.n_params) if k not in layout.estimated} or None,
            positive=np.isin(np.arange(model.n_params),
                             layout.estimated[layout.log_mask]),
            # one set of parameters for subjects that differ misses them by design: a refit
            # over growing horizons would not make the start better
            bounds=self.bounds, max_iter=200, grow_horizon=False, **self._options())
        with warnings.catch_warnings(), without_assessment():
            warnings.simplefilter("ignore")
            try:
                pooled.fit(experiments)
            except (SklodeError, ValueError):
                return layout.theta, None
        theta = np.array(pooled.theta_, dtype=np.float64)
        if layout.n_sigma == 0:
            return theta, None
        residuals = [[] for _ in data.observed]
        for subject in subjects:
            h = subject.predict(theta)[0]
            for j in range(len(data.observed)):
                residuals[j].extend(subject.y[subject.cols == j] - h[subject.cols == j])
        return theta, np.log([max(np.sqrt(np.mean(np.square(r))), 1e-8) if r else 1.0
                              for r in residuals])

    # ------------------------------------------------------------------ fit
    def fit(self, X, y=None):
        """Fit the population to a list of subjects.

        Parameters
        ----------
        X : list of Experiment
            One per subject (at least two), doses and conditions included.
        y : None
            Unused (the observations are in the experiments).

        Returns
        -------
        self : MixedEffectsODE
            The fitted estimator.
        """
        self._validate_params()
        if np.any(self.estimate_x0):
            raise ValueError(
                "MixedEffectsODE needs every subject's initial state known (x0=, or each "
                "Experiment's own x0; doses put the drug in): it cannot estimate_x0. Fit "
                "initial states per subject with AdjointODE(estimate_x0=True).")
        model, data = self._data(X, y)
        if data.n_experiments < 2:
            raise ValueError("MixedEffectsODE needs at least two subjects (a list of "
                             "Experiment); one subject has no between-subject variation: fit "
                             "it with AdjointODE.")
        names, layout = self._layout(model, data)
        subjects = self._subjects(model, data, layout)
        additive = layout.n_sigma > 0
        optimizer = self.optimizer
        bounded = layout.theta_bounds is not None
        if optimizer == "auto":
            optimizer = ("lindstrom-bates" if additive and self.method == "foce"
                         and not bounded else "direct")
        if optimizer == "lindstrom-bates" and bounded:
            raise ValueError("optimizer='lindstrom-bates' cannot honour bounds (its linear "
                             "mixed-model step is unconstrained); use optimizer='direct' "
                             "(or 'auto', which then chooses it).")
        if optimizer == "lindstrom-bates" and not (additive and self.method == "foce"):
            raise ValueError(
                "optimizer='lindstrom-bates' needs method='foce' and an additive error (a "
                "model without noise_sd); use optimizer='direct' (or 'auto').")

        theta_start, log_sigma0 = self._pooled_start(model, data, layout, subjects)
        # a normal random effect's sd starts as that fraction of its parameter's size
        size = np.where(layout.additive, np.abs(theta_start[layout.random]), 1.0)
        omega0 = np.diag((self.omega0 * np.where(size > 0, size, 1.0)) ** 2)
        phi0 = layout.pack(theta_start, omega0, log_sigma0)
        log = None
        if self.verbose:
            def log(iteration, nll):
                print(f"iteration {iteration}: -log L = {nll:.6f}")
        solvers = []
        etas = np.zeros((len(subjects), layout.q))
        if additive:  # Lindstrom-Bates: the result, or the direct path's start
            result = lindstrom_bates(subjects, layout, phi0, tol=self.tol,
                                     max_iter=self.max_iter if optimizer != "direct" else 20,
                                     log=log)
            solvers.append(result.solver)
            phi0, etas = result.phi, result.etas
        if optimizer == "direct":
            result = direct_fit(subjects, layout, phi0, etas, method=self.method, tol=self.tol,
                                max_iter=self.max_iter, n_jobs=self.n_jobs)
            solvers.append(result.solver)
        phi = result.phi
        nll, etas = marginal_nll(subjects, layout, phi, result.etas, self.method,
                                 self.n_jobs)
        if not np.isfinite(nll):
            raise SklodeError("The population fit ended where a subject's ODE cannot be "
                              "integrated; try another theta0.")

        # covariance of the unknowns: the linearised model's information (Lindstrom-Bates),
        # or the marginal likelihood's Hessian (direct)
        if optimizer == "lindstrom-bates":
            theta, _, log_sigma = layout.unpack(phi)
            lin = linearised_data(subjects, layout, phi[: layout.n_b], etas, log_sigma)
            # the linearised model is linear algebra: no solve noise, a small step
            hessian = second_differences(lambda v: lme_nll_full(layout, v, lin), phi, 1e-4)
        else:
            hessian = marginal_hessian(subjects, layout, phi, etas, self.method,
                                       self.n_jobs)
        cov = _inverse(hessian)
        labels = self._labels(model, names, layout, data)
        bad = [labels[k] for k in np.flatnonzero(~np.isfinite(np.diag(cov)))]
        if bad:
            warn(f"MixedEffectsODE: the data do not determine {bad} (their information is "
                 "singular: infinite standard errors). Fewer random effects, or fix some "
                 "parameters.", IdentifiabilityWarning)
        if not result.converged:
            warn(f"MixedEffectsODE did not converge: {result.stop_reason}. The estimates "
                 "are usable but not final: raise max_iter, or start closer (theta0).",
                 ConvergenceWarning)

        theta, omega, log_sigma = layout.unpack(phi)
        n_b, n_w = layout.n_b, layout.n_omega
        theta_cov = np.zeros((model.n_params, model.n_params))
        jac = layout.dtheta_db(theta)  # d theta / d b
        theta_cov[np.ix_(layout.estimated, layout.estimated)] = (
            jac[:, None] * cov[:n_b, :n_b] * jac[None, :])
        sd, sd_cov = _random_sds(layout, phi, cov)
        n_values = sum(s.n_values for s in subjects)
        k = n_b + n_w + layout.n_sigma
        aic, bic = information_criteria(nll, k, n_values)
        sigma_stderr = None
        if additive:
            sigma = np.exp(log_sigma)
            sigma_stderr = sigma * np.sqrt(np.diag(cov)[n_b + n_w:])
        return self._set_fitted(
            theta_=theta, theta_cov_=theta_cov,
            theta_stderr_=np.sqrt(np.maximum(np.diag(theta_cov), 0.0)),
            omega_=omega, random_sd_=sd, random_sd_stderr_=np.sqrt(np.diag(sd_cov)),
            sigma_=np.exp(log_sigma) if additive else None, sigma_stderr_=sigma_stderr,
            random_effects_=etas,
            individual_theta_=np.array([subject_theta(theta, layout.random, e, layout.additive)
                                        for e in etas]),
            random_names_=tuple(names), subject_names_=[e.name for e in data.experiments],
            neg_log_likelihood_=float(nll), aic_=aic, bic_=bic, n_parameters_=k,
            n_observations_=n_values, parameter_cov_=cov, parameter_labels_=labels,
            # every subject's known initial state, as x0_ and t0_ are on every estimator
            # (simulate(t) integrates the population values from them)
            x0_=np.array([e.x0 for e in data.experiments]),
            x0_stderr_=np.zeros((data.n_experiments, model.n_states)),
            t0_=np.array([e.t0 for e in data.experiments]),
            n_iter_=result.n_iter, converged_=result.converged,
            stop_reason_=result.stop_reason, solver_=" then ".join(solvers),
            loss_history_=np.asarray(result.history), _layout=layout,
            **self._data_attributes(data))

    @staticmethod
    def _labels(model, names, layout, data):
        labels = [f"log {model.param_names[k]}" if log else model.param_names[k]
                  for k, log in zip(layout.estimated, layout.log_mask)]
        if layout.full:
            labels += [f"log L[{n},{n}]" for n in names]
            labels += [f"L[{names[i]},{names[j]}]" for i, j in zip(*np.tril_indices(layout.q,
                                                                                      -1))]
        else:
            labels += [f"log sd({n})" for n in names]
        labels += [f"log sigma({model.observables[j]})" for j in data.observed][
            : layout.n_sigma]
        return labels

    # ------------------------------------------------------------------ use
    def _fitted_subjects(self, X, y=None):
        check_is_fitted(self, "theta_")
        single = not isinstance(X, (list, tuple))
        model, data = self._data([X] if single else X, y, warn_initial_time=False)
        if data.observed != self.observed_:
            raise ValueError(f"These data hold observables {data.observed}, the fit "
                             f"{self.observed_}.")
        return single, model, data, self._subjects(model, data, self._layout_)

    @property
    def _layout_(self):
        return self.__dict__["_layout"]

    def _modes(self, subjects):
        log_sigma = None if self.sigma_ is None else np.log(self.sigma_)
        omega_inv = np.linalg.inv(self.omega_)
        return [s.mode(self.theta_, omega_inv, log_sigma, np.zeros(len(self.random_names_)))[0]
                for s in subjects]

    def random_effects(self, X):
        """Empirical-Bayes random effects of (new or training) subjects given their data.

        Parameters
        ----------
        X : Experiment or list of Experiment
            Subjects with data.

        Returns
        -------
        ndarray of shape (n_subjects, n_random)
            Their conditional modes under the fitted population.
        """
        _, _, _, subjects = self._fitted_subjects(X)
        return np.array(self._modes(subjects))

    def predict(self, X, level="individual", t=None):
        """Each subject's observables at its times (or at ``t``).

        Parameters
        ----------
        X : Experiment or list of Experiment
            Subjects (training or new ones).
        level : {"individual", "population"}, default="individual"
            ``"individual"``: with each subject's empirical-Bayes random effects given its
            own data (new subjects too); ``"population"``: the population values
            (``eta = 0``).
        t : array-like of shape (n_times,), optional
            Predict at these times instead of the observation times (a smooth curve), for
            every subject.

        Returns
        -------
        ndarray of shape (n_times, n_observed), or a list of them
            The observed observables, one array per subject (one array for one
            Experiment).
        """
        if level not in ("individual", "population"):
            raise ValueError(f"level must be 'individual' or 'population'; got {level!r}.")
        single, model, data, subjects = self._fitted_subjects(X)
        etas = (self._modes(subjects) if level == "individual"
                else [np.zeros(len(self.random_names_))] * len(subjects))
        out = []
        for subject, eta, e in zip(subjects, etas, data.experiments):
            times = e.t if t is None else np.sort(np.asarray(t, dtype=float).reshape(-1))
            out.append(self._observables(model, subject, eta, times))
        return out[0] if single else out

    def _observables(self, model, subject, eta, times):
        e = subject.experiment
        theta = subject_theta(self.theta_, self._layout_.random, eta, self._layout_.additive)
        P = predicted_observables(model, theta, e, e.x0, np.asarray(times, dtype=float),
                                  self._options())
        return P[:, list(self.observed_)]

    def score(self, X, y=None):
        """Mean log-likelihood per observation of the subjects under the fitted population
        (their random effects integrated out as in the fit): higher is better, comparable
        between models on the same data (cross-validation over subjects, ``GridSearchCV``
        over ``random``).

        Parameters
        ----------
        X : Experiment or list of Experiment
            Subjects with data.
        y : None
            Unused (the observations are in the experiments).

        Returns
        -------
        float
            ``-neg_log_likelihood / n_observations`` of these subjects.
        """
        _, _, _, subjects = self._fitted_subjects(X, y)
        log_sigma = None if self.sigma_ is None else np.log(self.sigma_)
        total = n = 0
        for s in subjects:
            nll, _ = s.neg_log_likelihood(self.theta_, self.omega_, log_sigma,
                                          np.zeros(len(self.random_names_)), self.method)
            total, n = total + nll, n + s.n_values
        return -total / n

    @property
    def cov_(self):
        """Deprecated name of :attr:`parameter_cov_` (sklode 0.3 removes it)."""
        warn("MixedEffectsODE.cov_ is now parameter_cov_ (the covariance of every unknown on "
             "the optimiser's scales; theta_cov_ is theta_'s, as on every estimator); cov_ "
             "goes in sklode 0.3.", FutureWarning)
        return self.parameter_cov_

    def confidence_intervals(self, level=0.95):
        """Wald intervals of the population values (on the log scale for log parameters,
        so they stay positive).

        Parameters
        ----------
        level : float, default=0.95
            Coverage of the intervals.

        Returns
        -------
        ndarray of shape (n_params, 2)
            Held parameters get their value twice.
        """
        check_is_fitted(self, "theta_")
        layout = self._layout_
        z = norm.ppf(0.5 + level / 2)
        out = np.column_stack([self.theta_, self.theta_])
        se_b = np.sqrt(np.diag(self.parameter_cov_)[: layout.n_b])
        b = layout.pack(self.theta_, self.omega_, None if self.sigma_ is None
                        else np.log(self.sigma_))[: layout.n_b]
        lo, hi = b - z * se_b, b + z * se_b
        out[layout.estimated, 0] = np.where(layout.log_mask, np.exp(lo), lo)
        out[layout.estimated, 1] = np.where(layout.log_mask, np.exp(hi), hi)
        return out

    def simulate(self, t, x0=None, t0=None, **replicate):
        """Every state at times ``t`` at the population values ``theta_`` (``eta = 0``), from
        each fitted subject's known initial state (as on every estimator).

        Given Experiments (and ``n_replicates``/``random_state``), this is the old
        ``simulate``, now :meth:`replicate_data`: it warns and draws replicates (until 0.3).

        Parameters
        ----------
        t : list of array-like
            One time vector per fitted subject (or a new subject's times with ``x0``).
        x0 : array-like of shape (n_states,), optional
            A new subject's initial state.
        t0 : float, optional
            Its time.
        **replicate
            ``n_replicates``, ``random_state`` of the deprecated call.

        Returns
        -------
        list of ndarray of shape (n_times, n_states)
            The states, one array per subject (an array for a new subject).
        """
        items = t if isinstance(t, (list, tuple)) else [t]
        if replicate or (items and all(isinstance(e, Experiment) for e in items)):
            warn("MixedEffectsODE.simulate(experiments, n_replicates=...) is now "
                 "replicate_data (noisy replicate data sets); simulate gives the states, as "
                 "on every estimator. The old call goes in sklode 0.3.", FutureWarning)
            if x0 is not None:
                replicate.setdefault("n_replicates", x0)
            if t0 is not None:
                replicate.setdefault("random_state", t0)
            return self.replicate_data(t, **replicate)
        return super().simulate(t, x0=x0, t0=t0)

    def replicate_data(self, X, n_replicates=100, random_state=None):
        """Replicate data sets from the fitted population: new random effects and residual
        noise for every subject's design (its times, doses, conditions).

        Parameters
        ----------
        X : Experiment or list of Experiment
            The designs (their observations are not used).
        n_replicates : int, default=100
            Replicate data sets per subject.
        random_state : int, RandomState or None
            Seed of the random effects and the noise (None: the estimator's
            ``random_state``).

        Returns
        -------
        list of ndarray of shape (n_replicates, n_times, n_observed)
            One per subject.
        """
        single, model, data, subjects = self._fitted_subjects(X)
        rng = check_random_state(self.random_state if random_state is None else random_state)
        L = np.linalg.cholesky(self.omega_)
        out = []
        for subject, e in zip(subjects, data.experiments):
            reps = np.empty((n_replicates, e.t.size, len(self.observed_)))
            for r in range(n_replicates):
                eta = L @ rng.standard_normal(L.shape[0])
                h = self._observables(model, subject, eta, e.t)
                if self.sigma_ is not None:
                    sd = np.broadcast_to(self.sigma_, h.shape)
                else:
                    theta = subject_theta(self.theta_, self._layout_.random, eta,
                                          self._layout_.additive)
                    sd = _noise_sd(model, e, theta, h, self.observed_, subject)
                reps[r] = h + sd * rng.standard_normal(h.shape)
            out.append(reps)
        return out[0] if single else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.required = False
        tags.input_tags.two_d_array = False
        tags.non_deterministic = False
        return tags


def _noise_sd(model, experiment, theta, h, observed, subject):
    """The model's ``noise_sd`` at the predicted observables (all of them, then the data's
    columns)."""
    import torch

    th = torch.from_numpy(subject.A @ theta + subject.c)
    t = torch.from_numpy(np.asarray(experiment.t, dtype=float))
    full = np.zeros((h.shape[0], model.n_observables))
    full[:, list(observed)] = h
    with torch.no_grad():
        sd = model.noise_sd(t, torch.from_numpy(full), th).numpy()
    return sd[:, list(observed)]


def _as_public(e, model):
    """A validated experiment back as a public :class:`~sklode.Experiment` (for the pooled
    start)."""
    doses = list(e.doses) if e.doses else None  # states as indices, records kept
    return Experiment(e.t, e.Y, x0=e.x0, t0=e.t0, doses=doses, conditions=e.conditions,
                      name=e.name)


def _inverse(H):
    """The covariance from the Hessian; infinite variances where it is singular."""
    try:
        w, V = np.linalg.eigh(0.5 * (H + H.T))
    except np.linalg.LinAlgError:
        return np.full(H.shape, np.inf)
    if w.min() > 1e-10 * max(w.max(), 1e-300):
        return (V / w) @ V.T
    cov = np.linalg.pinv(H)
    weak = np.abs(V[:, w <= 1e-10 * max(w.max(), 1e-300)]).max(axis=1) > 1e-3
    cov[weak, :] = cov[:, weak] = np.inf
    return cov


def _random_sds(layout, phi, cov):
    """Standard deviations of the random effects and their covariance (delta method)."""
    n_b, n_w = layout.n_b, layout.n_omega

    def sds(w):
        _, omega, _ = layout.unpack(np.concatenate([phi[:n_b], w, phi[n_b + n_w:]]))
        return np.sqrt(np.diag(omega))

    w = phi[n_b: n_b + n_w]
    J = central_differences(sds, w, 1e-6).T  # (n_random, n_omega)
    block = cov[n_b: n_b + n_w, n_b: n_b + n_w]
    with np.errstate(invalid="ignore"):
        return sds(w), J @ block @ J.T
