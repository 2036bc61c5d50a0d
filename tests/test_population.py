"""MixedEffectsODE: population fits against R's nlme, recovery of a known population, the
likelihood's identities, scikit-learn behaviour and bad input."""

import copy

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score

from sklode import Experiment, MixedEffectsODE
from sklode.datasets import load_indomethacin, make_population
from sklode.models import OralAbsorption, TwoCompartmentIV
from sklode.population._solver import linearised_data, lme_nll_full, marginal_nll
from sklode.population._subject import Subject

# nlme 3.1.162 (R 4.2.2) on the same table and model: nlme(conc ~ closed-form two-compartment
# IV concentration of (lk10, lk12, lk21, lV), random = pdDiag(lk10 + lV ~ 1)); its ML fit.
# benchmarks/population.py reruns nlme beside sklode and writes results/population.md.
NLME_INDOMETHACIN = {"theta": [1.2017021, 0.9112341, 0.8016079, 0.2931763],
                     "sd": [0.18629903, 0.17101456], "sigma": 0.08269691,
                     "loglik": 55.43782}


@pytest.fixture(scope="module")
def indomethacin_fit():
    subjects = load_indomethacin().experiments
    pop = MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10", "V"), x0=[0, 0],
                          t0=0.0).fit(subjects)
    return pop, subjects


@pytest.fixture(scope="module")
def simulated():
    data = make_population(16, random_state=3)
    pop = MixedEffectsODE(data.model, random=data.random,
                          observed=["concentration"]).fit(data.experiments)
    return pop, data


def test_indomethacin_equals_nlme(indomethacin_fit):
    pop, _ = indomethacin_fit
    # same objective and the same algorithm as nlme: agreement is limited only by the two
    # tools' convergence tolerances (measured 1.2e-6 relative); 1e-5 leaves room for
    # platform round-off
    np.testing.assert_allclose(pop.theta_, NLME_INDOMETHACIN["theta"], rtol=1e-5)
    np.testing.assert_allclose(pop.random_sd_, NLME_INDOMETHACIN["sd"], rtol=1e-5)
    np.testing.assert_allclose(pop.sigma_, [NLME_INDOMETHACIN["sigma"]], rtol=1e-5)
    # nlme prints log L to 7 significant digits
    assert -pop.neg_log_likelihood_ == pytest.approx(NLME_INDOMETHACIN["loglik"], abs=1e-5)
    assert pop.converged_ and pop.random_effects_.shape == (6, 2)
    # AIC with 7 parameters (4 fixed effects, 2 sds, sigma) as nlme counts them
    assert pop.n_parameters_ == 7
    assert pop.aic_ == pytest.approx(2 * pop.neg_log_likelihood_ + 14)


def test_foce_value_is_the_linearised_models_likelihood(indomethacin_fit):
    # At the fit, each subject's conditional mode makes the FOCE-I Laplace expression equal
    # to the linearised mixed model's likelihood (Woodbury and the determinant lemma): two
    # different computations, equal to the solves' precision
    pop, subjects = indomethacin_fit
    layout = pop._layout_
    data = [Subject(TwoCompartmentIV(error=None), e, (0,), layout.random,
                    {"integrator": "LSODA", "rtol": 1e-10, "atol": 1e-12})
            for e in pop._data(subjects, None)[1].experiments]
    phi = layout.pack(pop.theta_, pop.omega_, np.log(pop.sigma_))
    nll, etas = marginal_nll(data, layout, phi, pop.random_effects_)
    lin = linearised_data(data, layout, phi[: layout.n_b], etas, np.log(pop.sigma_))
    assert nll == pytest.approx(lme_nll_full(layout, phi, lin), abs=1e-7)
    # and the modes are those the fit reports (solved at rtol 1e-8 there)
    np.testing.assert_allclose(etas, pop.random_effects_, atol=1e-5)


def test_recovers_a_known_population(simulated):
    pop, data = simulated
    z = (pop.theta_ - data.theta) / pop.theta_stderr_
    # 16 subjects: each fixed effect within 3 standard errors of the truth (a 0.3 % chance
    # per parameter of failing for a calibrated estimator)
    assert np.all(np.abs(z) < 3), z
    # the between-subject sds (0.4, 0.25) from 16 subjects: within 3 of their standard errors
    assert np.all(np.abs(pop.random_sd_ - data.omega_sd) < 3 * pop.random_sd_stderr_)
    assert pop.sigma_[0] == pytest.approx(data.sigma, rel=0.2)  # 128 residuals: ~6 % sd
    # the empirical-Bayes etas track the true ones (shrunk towards 0)
    for j in range(2):
        assert np.corrcoef(pop.random_effects_[:, j], data.etas[:, j])[0, 1] > 0.8


def test_intervals_and_predictions(simulated):
    pop, data = simulated
    ci = pop.confidence_intervals(0.95)
    assert np.all(ci[:, 0] < pop.theta_) and np.all(pop.theta_ < ci[:, 1])
    # log-scale intervals: geometric symmetry around the estimate
    np.testing.assert_allclose(ci[:, 0] * ci[:, 1], pop.theta_ ** 2, rtol=1e-10)
    individual = pop.predict(data.experiments)
    population = pop.predict(data.experiments, level="population")
    Y = np.vstack([e.Y for e in data.experiments])
    rmse_ind = np.sqrt(np.mean((np.vstack(individual) - Y) ** 2))
    rmse_pop = np.sqrt(np.mean((np.vstack(population) - Y) ** 2))
    # individual predictions carry each subject's eta: close to the noise (0.1), far below
    # the population prediction's miss
    assert rmse_ind < 1.3 * data.sigma < rmse_pop
    # a single Experiment gives one array; its etas are those of the fit
    one = pop.predict(data.experiments[2])
    np.testing.assert_allclose(one, individual[2], rtol=1e-6)
    # re-found from eta = 0 rather than from the fit's previous mode: Fisher scoring stops
    # when the decrement is below 1e-12 |g| (g ~ 1e2 here, curvature ~ 1e2), which pins
    # each eta to a few 1e-6 (2.5e-6 seen on the CVODES path); their standard errors are ~0.1
    np.testing.assert_allclose(pop.random_effects(data.experiments[:3]),
                               pop.random_effects_[:3], atol=1e-5)


def test_replicate_data_has_the_fitted_spread(simulated):
    pop, data = simulated
    reps = pop.replicate_data(data.experiments[:1], n_replicates=400, random_state=0)[0]
    assert reps.shape == (400, 8, 1)
    # at 24 h the spread of log concentration is ~sd(ke) * 24 * ke ~ 0.6: far wider than the
    # residual noise relative to the level, and seeded
    again = pop.replicate_data(data.experiments[:1], n_replicates=400, random_state=0)[0]
    np.testing.assert_array_equal(reps, again)
    late = reps[:, -1, 0]
    assert np.std(late) > 3 * pop.sigma_[0]
    # the old name (simulate means states everywhere else) warns and draws the same data
    with pytest.warns(FutureWarning, match="replicate_data"):
        old = pop.simulate(data.experiments[:1], n_replicates=400, random_state=0)[0]
    np.testing.assert_array_equal(old, reps)


def test_full_covariance_is_positive_definite_and_close():
    data = make_population(16, random_state=3)
    pop = MixedEffectsODE(data.model, random=data.random, covariance="full",
                          observed=["concentration"], rtol=1e-6, atol=1e-8
                          ).fit(data.experiments)
    assert np.all(np.linalg.eigvalsh(pop.omega_) > 0)
    # the truth is uncorrelated: the estimated correlation within 3 standard errors of 0 for
    # 16 subjects (~1/sqrt(16) = 0.25 each)
    corr = pop.omega_[0, 1] / np.sqrt(pop.omega_[0, 0] * pop.omega_[1, 1])
    assert abs(corr) < 0.75
    assert pop.n_parameters_ == 3 + 3 + 1
    assert len(pop.parameter_labels_) == pop.parameter_cov_.shape[0] == 7
    with pytest.warns(FutureWarning, match="cov_ is now parameter_cov_"):
        assert pop.cov_ is pop.parameter_cov_  # the old name, for one release


# slow: ten population fits (~10 s); scoring held-out subjects is tested fast by
# test_intervals_and_predictions
@pytest.mark.slow
def test_cross_validation_over_subjects():
    # GroupKFold over subjects scores held-out subjects by their marginal log-likelihood per
    # observation: GridSearchCV over which parameters vary must pick the true structure (ka
    # and ke vary) over one that leaves ke shared
    data = make_population(10, random_state=5)
    # rtol 1e-6: the scores differ by far more than the solves' error, at half the CPU
    pop = MixedEffectsODE(data.model, random=("ka",), observed=["concentration"], rtol=1e-6,
                          atol=1e-8)
    search = GridSearchCV(pop, {"random": [("ka",), ("ka", "ke")]}, cv=GroupKFold(2))
    search.fit(data.experiments, groups=np.arange(10))
    assert search.best_params_ == {"random": ("ka", "ke")}
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
    # cross_val_score takes the list of subjects as X with y=None
    scores = cross_val_score(search.best_estimator_, data.experiments, groups=np.arange(10),
                             cv=GroupKFold(2))
    np.testing.assert_allclose(scores.mean(), search.best_score_, rtol=1e-6)


def test_clone_and_params():
    pop = MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10",), method="laplace")
    other = clone(pop)
    assert other.get_params()["random"] == ("k10",) and other.method == "laplace"


@pytest.mark.parametrize("settings, message", [
    ({"random": ("k99",)}, "not parameters of the model"),
    ({"random": ()}, "leaves nothing varying"),
    ({"random": ("k10",), "fixed": {"k10": 1.0}}, "both random and fixed"),
    ({"random": ("k10",), "method": "laplace", "optimizer": "lindstrom-bates"},
     "optimizer='lindstrom-bates' needs"),
    ({"random": ("k10",), "estimate_x0": True}, "cannot estimate_x0.*AdjointODE"),
    ({"random": ("k10",), "optimizer": "lindstrom-bates", "bounds": (0, 10)},
     "cannot honour bounds"),
    ({"random": ("k10",), "theta0": [1.2, 0.9, 0.8, 0.3], "bounds": (0, [1, 10, 10, 10])},
     "outside its allowed range"),
])
def test_bad_settings_raise(settings, message):
    subjects = load_indomethacin().experiments[:2]
    with pytest.raises(ValueError, match=message):
        MixedEffectsODE(TwoCompartmentIV(error=None), x0=[0, 0], t0=0.0,
                        **settings).fit(subjects)


def test_one_subject_is_refused_and_a_failed_fit_keeps_the_previous(indomethacin_fit):
    fitted, subjects = indomethacin_fit
    pop = copy.deepcopy(fitted)
    before = pop.theta_.copy()
    with pytest.raises(ValueError, match="at least two subjects"):
        pop.fit(subjects[:1])
    np.testing.assert_array_equal(pop.theta_, before)
    with pytest.raises(ValueError, match="level must be"):
        pop.predict(subjects, level="subject")


def test_inputs_are_not_mutated():
    data = make_population(4, random_state=1)
    copies = [(e.t.copy(), e.Y.copy(), list(e.doses)) for e in data.experiments]
    MixedEffectsODE(data.model, random=("ka",), observed=["concentration"],
                    max_iter=10).fit(data.experiments)
    for e, (t, Y, doses) in zip(data.experiments, copies):
        np.testing.assert_array_equal(e.t, t)
        np.testing.assert_array_equal(e.Y, Y)
        assert e.doses == doses


@pytest.mark.slow
def test_direct_foce_and_model_noise_agree_with_estimator_noise():
    # The same additive error written in the model (noise_sd: sigma_add a fixed effect, the
    # direct path) or left to the estimator (sigma_, Lindstrom-Bates then the direct path):
    # the same FOCE-I optimum
    subjects = load_indomethacin().experiments
    own = MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10",), x0=[0, 0], t0=0.0,
                          optimizer="direct").fit(subjects)
    model = MixedEffectsODE(TwoCompartmentIV(error="additive"), random=("k10",), x0=[0, 0],
                            t0=0.0, theta0=(1.0, 0.9, 0.8, 0.3, 0.1)).fit(subjects)
    # both minimise the same function to L-BFGS-B's tolerance on central differences
    assert model.neg_log_likelihood_ == pytest.approx(own.neg_log_likelihood_, abs=1e-3)
    np.testing.assert_allclose(model.theta_[:4], own.theta_, rtol=1e-2)
    assert model.theta_[4] == pytest.approx(own.sigma_[0], rel=1e-2)


def test_experiment_conditions_carry_covariates():
    # Two dose groups whose kv differs (a formulation): group B's subjects carry
    # conditions={"kv": 0.1}, known; kv is then estimated from group A alone (truth 0.05).
    # Ignoring the conditions would pool 0.05 and 0.1.
    group_a = make_population(8, random_state=2).experiments
    group_b = make_population(8, theta=(1.0, 0.1, 0.1), random_state=4).experiments
    subjects = list(group_a) + [
        Experiment(e.t, e.Y, x0=[0.0, 0.0], t0=0.0, doses=e.doses, conditions={"kv": 0.1},
                   name=f"B{k}") for k, e in enumerate(group_b)]
    pop = MixedEffectsODE(OralAbsorption(), random=("ka", "ke"), observed=["concentration"],
                          rtol=1e-6, atol=1e-8).fit(subjects)
    # within 3 standard errors of group A's value
    assert abs(pop.theta_[2] - 0.05) < 3 * pop.theta_stderr_[2]
    # and ka, ke (shared by both groups) recovered from all 16
    assert np.all(np.abs(pop.theta_[:2] - [1.0, 0.1]) < 3 * pop.theta_stderr_[:2])


def test_population_plots(simulated):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from sklode.plotting import plot_individual_fits, plot_random_effects, plot_vpc

    pop, data = simulated
    axes = plot_individual_fits(pop, data.experiments[:6], ncols=3)
    # one panel per subject: data, the individual curve and the population curve
    assert len(axes) == 6 and all(len(a.lines) == 3 for a in axes)
    axes = plot_random_effects(pop, {"dose index": np.arange(16)})
    assert [a.get_ylabel() for a in axes] == ["eta(ka)", "eta(ke)"]
    with pytest.raises(ValueError, match="has 3 values for 16 subjects"):
        plot_random_effects(pop, {"weight": [1, 2, 3]})
    ax = plot_vpc(pop, data.experiments, n_replicates=30, random_state=0)
    # eight sampling times: eight bins, three observed quantile lines
    assert len(ax.lines[0].get_xdata()) == 8


# the additive diagonal case is the simplest of the three: it runs with -m slow
@pytest.mark.parametrize("error, full, additive", [
    pytest.param(None, False, False, marks=pytest.mark.slow), ("combined", False, False),
    (None, True, False), ("combined", False, True)])
def test_foce_gradient_from_sensitivities_equals_finite_differences(error, full, additive):
    # The FOCE-I gradient (envelope of the mode, the mode's motion, the information's motion
    # through second derivatives of the observables) against central differences of the
    # marginal likelihood itself, at a point away from the optimum: an additive error, the
    # model's combined noise_sd (the interaction terms), and a full Omega
    import sklode.population._solver as solver
    from sklode.models import check_model
    from sklode.population._solver import Layout, _Marginal

    model = check_model(TwoCompartmentIV(error=error))
    data = MixedEffectsODE(model, random=("k10", "V"), x0=[0, 0], t0=0.0)._data(
        load_indomethacin().experiments[:3], None)[1]
    theta = [1.2, 0.9, 0.8, 0.29] + ([0.02, 0.1] if error else [])
    options = {"integrator": "LSODA", "rtol": 1e-10, "atol": 1e-12}
    random = np.array([0, 3])
    # additive: V's random effect normal (V + eta, V on its natural scale), k10's log-normal
    kinds = np.array([False, additive])
    subjects = [Subject(model, e, data.observed, random, options, additive=kinds)
                for e in data.experiments]
    layout = Layout(theta=np.array(theta), estimated=np.arange(len(theta)),
                    log_mask=np.arange(len(theta)) != (3 if additive else -1), random=random,
                    full=full, n_sigma=0 if error else 1, additive=kinds)
    omega = np.array([[0.04, 0.01], [0.01, 0.03]]) if full else np.diag(
        [0.04, 0.03 * (0.29 ** 2 if additive else 1.0)])  # (a normal effect's sd in V's units)
    phi = layout.pack(np.array(theta), omega, None if error else np.array([np.log(0.09)]))
    marginal = _Marginal(subjects, layout, "foce", np.zeros((3, 2)))
    marginal.value(phi)
    analytic = marginal.foce_gradient(phi)
    original = solver._GRADIENT_STEP
    try:
        # step 1e-3: truncation ~1e-6 relative; at 1e-4 the solves' noise (rtol 1e-10 on a
        # likelihood of ~50) is already 1e-2 in places
        solver._GRADIENT_STEP = 1e-3
        numeric = marginal.fd_gradient(phi)
    finally:
        solver._GRADIENT_STEP = original
    # measured agreement 6e-4 absolute on gradients of size 0.05-30
    np.testing.assert_allclose(analytic, numeric, atol=3e-3, rtol=1e-3)


def test_it_is_an_odeestimator_with_the_common_vocabulary(indomethacin_fit):
    # the shared base: the common parameters, x0_/t0_ of every subject, and simulate(t) giving
    # the states at the population values from them (the same numbers as sklode.simulate)
    from sklode import simulate
    from sklode._estimator import ODEEstimator

    pop, subjects = indomethacin_fit
    assert isinstance(pop, ODEEstimator)
    params = pop.get_params()
    for name in ("bounds", "positive", "estimate_x0", "random_state", "n_jobs", "fixed"):
        assert name in params
    assert pop.x0_.shape == (6, 2) and np.all(pop.t0_ == 0.0)
    X = pop.simulate([e.t for e in subjects])
    first = subjects[0]
    expected = simulate(pop.model, pop.theta_, pop.x0_[0], first.t, t0=0.0,
                        doses=[(time, pop.model.state_names.index(state), amount)
                               for time, state, amount in first.doses])
    np.testing.assert_array_equal(X[0], expected)


@pytest.mark.slow  # 12 s on two cores: the slow stage of .ci/run
def test_bounds_hold_the_population_values():
    # k21's unbounded estimate is 0.80 (nlme's 0.8016); bounded above by 0.7 the direct
    # optimiser (chosen by 'auto' with bounds) ends on the bound, to L-BFGS-B's projection
    # (exact), and costs more -log L than the unbounded fit (-55.44)
    subjects = load_indomethacin().experiments
    pop = MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10", "V"), x0=[0, 0],
                          t0=0.0, bounds=(0.0, [np.inf, np.inf, 0.7, np.inf]),
                          max_iter=60).fit(subjects)
    assert "direct" in pop.solver_
    assert pop.theta_[2] == pytest.approx(0.7, rel=1e-12)
    assert pop.neg_log_likelihood_ > -55.43


@pytest.mark.slow
def test_subjects_in_threads_give_the_same_fit():
    # n_jobs runs the subjects' mode searches in threads; their terms are summed in order,
    # so the fit is the same to the bit
    subjects = load_indomethacin().experiments
    fits = [MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10", "V"), x0=[0, 0],
                            t0=0.0, optimizer="direct", n_jobs=n_jobs).fit(subjects)
            for n_jobs in (None, 2)]
    np.testing.assert_array_equal(fits[0].theta_, fits[1].theta_)
    assert fits[0].neg_log_likelihood_ == fits[1].neg_log_likelihood_


class _Logistic:
    """y' = r y (1 - y / K), y(0) = y0 a parameter (initial_offsets): Orange-tree-like
    growth whose start is fitted."""

    @staticmethod
    def make():
        import torch  # noqa: F401 - the field below is torch

        from sklode import ODEModel

        class Logistic(ODEModel):
            state_names = ("y",)
            param_names = ("r", "K", "y0")
            default_theta = (0.5, 10.0, 1.0)

            def rhs(self, t, x, theta):
                return theta[0] * x * (1 - x / theta[1])

            def initial_offsets(self, theta):
                return np.array([theta[2]])

        return Logistic()


def test_an_initial_state_from_the_parameters_is_fitted_with_its_sensitivities():
    # the start y0 is a (shared) parameter through initial_offsets, which the population
    # fit ignored before (then a bare LinAlgError: the data's information on y0 was lost)
    from sklode import simulate

    model = _Logistic.make()
    rng = np.random.default_rng(5)
    truth = np.array([0.6, 10.0, 1.2])
    t = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0])
    subjects = []
    for i in range(12):
        th = truth * np.array([np.exp(0.2 * rng.standard_normal()), 1.0, 1.0])
        y = simulate(model, th, [th[2]], t, t0=0.0)
        subjects.append(Experiment(t, y + 0.05 * rng.standard_normal(y.shape), name=i))
    pop = MixedEffectsODE(model, random=("r",), x0=[0.0], t0=0.0,
                          theta0=[0.4, 8.0, 0.8]).fit(subjects)
    # 96 values at sd 0.05: y0 and K to a few percent, r's mean over 12 subjects (sd 20 %)
    # to ~10 %; each within 3 of its standard errors
    assert np.all(np.abs(pop.theta_ - truth) < 3 * pop.theta_stderr_ + 0.02 * truth)
    assert pop.theta_stderr_[2] < 0.05 * truth[2]


def _covariate_subjects(n=12, slope=-0.3, seed=5):
    """Logistic growth whose rate falls with a weight WT that each subject's conditions
    set: r_i = r exp(beta (WT - 70) / 10) exp(eta_i)."""
    import torch

    from sklode import ODEModel, simulate

    class Covariate(ODEModel):
        state_names = ("y",)
        param_names = ("r", "K", "beta", "WT")
        default_theta = (0.5, 10.0, 0.0, 70.0)

        def rhs(self, t, x, theta):
            rate = theta[0] * torch.exp(theta[2] * (theta[3] - 70.0) / 10.0)
            return rate * x * (1 - x / theta[1])

    model, rng = Covariate(), np.random.default_rng(seed)
    t = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0])
    subjects = []
    for i in range(n):
        weight = 50.0 + 40.0 * rng.random()
        th = np.array([0.6 * np.exp(0.1 * rng.standard_normal()), 10.0, slope, weight])
        y = simulate(model, th, [1.0], t, t0=0.0)
        subjects.append(Experiment(t, y + 0.05 * rng.standard_normal(y.shape),
                                   conditions={"WT": weight}, name=i))
    return model, subjects


def test_a_covariate_set_by_every_subject_is_held_and_its_slope_recovered():
    # WT, set by every subject's conditions, is not a population value: held without being
    # listed in fixed (a bare LinAlgError before); the slope, started at 0, is fitted on
    # its natural scale and comes out negative
    model, subjects = _covariate_subjects()
    pop = MixedEffectsODE(model, random=("r",), x0=[1.0], t0=0.0).fit(subjects)
    assert pop.theta_stderr_[3] == 0.0  # held
    # 96 values at sd 0.05 over weights 50-90: the slope to ~0.03 (its standard error)
    assert abs(pop.theta_[2] - (-0.3)) < 3 * pop.theta_stderr_[2]
    assert pop.theta_[2] < -0.2


def test_a_parameter_the_data_do_not_determine_is_named_not_a_bare_linalgerror():
    from sklode.exceptions import IdentifiabilityError

    model, subjects = _covariate_subjects()
    # a start of 0.1 puts the slope on the log scale, where it cannot turn negative: it
    # runs to 0 and the information on it vanishes; the error says so and what to do
    with pytest.raises(IdentifiabilityError, match=r"\['beta'\].*log scale.*start it at 0"):
        MixedEffectsODE(model, random=("r",), x0=[1.0], t0=0.0,
                        theta0=[0.5, 10.0, 0.1, 70.0]).fit(subjects)


# R's Orange trees (5 trees x 7 ages, circumference in mm) and nlme 3.1.162's textbook fit
# with an additive random effect on the asymptote (R 4.2.2, method="ML"), run to its fixed
# point (at its default tolerances it stops 2e-5 short: xmid 722.5636, scal 344.1697):
# nlme(circumference ~ SSlogis(age, Asym, xmid, scal), data = Orange,
#      fixed = Asym + xmid + scal ~ 1, random = Asym ~ 1,
#      start = c(Asym = 170, xmid = 700, scal = 350), method = "ML",
#      control = nlmeControl(tolerance = 1e-10, pnlsTol = 1e-10, msTol = 1e-12))
ORANGE_AGES = [118.0, 484.0, 664.0, 1004.0, 1231.0, 1372.0, 1582.0]
ORANGE = [[30, 58, 87, 115, 120, 142, 145], [33, 69, 111, 156, 172, 203, 203],
          [30, 51, 75, 108, 115, 139, 140], [32, 62, 112, 167, 179, 209, 214],
          [30, 49, 81, 125, 142, 174, 177]]
NLME_ORANGE = {"theta": [191.0490008, 722.5559796, 344.1623818], "sd": 31.482558,
               "sigma": 7.846254, "loglik": -131.5845791}


def test_an_additive_random_effect_equals_nlmes_orange_fit():
    import torch  # noqa: F401 - the field below is torch

    from sklode import ODEModel

    class Logistic(ODEModel):
        """y' = y (1 - y / Asym) / scal from y(0) = Asym / (1 + exp(xmid / scal)): SSlogis
        as an ODE, its start from the parameters (initial_offsets)."""

        state_names = ("circumference",)
        param_names = ("Asym", "xmid", "scal")
        default_theta = (170.0, 700.0, 350.0)

        def rhs(self, t, x, theta):
            return x * (1 - x / theta[0]) / theta[2]

        def initial_offsets(self, theta):
            return np.array([theta[0] / (1 + np.exp(theta[1] / theta[2]))])

    trees = [Experiment(ORANGE_AGES, np.array(c, dtype=float)[:, None], name=k + 1)
             for k, c in enumerate(ORANGE)]
    pop = MixedEffectsODE(Logistic(), random=("Asym",), random_kind="normal", x0=[0.0],
                          t0=0.0, rtol=1e-10, atol=1e-10).fit(trees)
    # the same likelihood and algorithm (Lindstrom-Bates) at the same fixed point: measured
    # 3e-9 on the estimates; 1e-6 is this fit's own stopping tolerance (tol)
    np.testing.assert_allclose(pop.theta_, NLME_ORANGE["theta"], rtol=1e-6)
    np.testing.assert_allclose(pop.random_sd_, [NLME_ORANGE["sd"]], rtol=1e-6)
    np.testing.assert_allclose(pop.sigma_, [NLME_ORANGE["sigma"]], rtol=1e-6)
    assert -pop.neg_log_likelihood_ == pytest.approx(NLME_ORANGE["loglik"], rel=1e-8)
    # additive: tree 4's asymptote is the population's plus its eta (mm), not a factor
    assert pop.individual_theta_[3, 0] == pytest.approx(
        pop.theta_[0] + pop.random_effects_[3, 0], rel=1e-12)


def test_the_pooled_start_is_not_judged_but_later_fits_are():
    # the pooled start differs from its subjects by design: the trust layer's checks (and
    # its refits from other starts) are skipped inside without_assessment, and only there
    from sklode import AdjointODE
    from sklode.diagnostics._assessment import without_assessment

    data = make_population(6, random_state=7)
    settings = dict(observed=["concentration"], x0=[0.0, 0.0], t0=0.0, estimate_x0=False)
    with without_assessment():
        quiet = AdjointODE(data.model, **settings).fit(data.experiments)
    judged = AdjointODE(data.model, **settings).fit(data.experiments)
    assert quiet.residual_runs_z_ is None and quiet.residual_time_means_ is None
    # (8 samples per subject: too few for the misfit ratio; the runs tests judge)
    assert judged.residual_runs_z_ is not None and judged.residual_time_means_ is not None
    np.testing.assert_array_equal(quiet.theta_, judged.theta_)  # the fit itself unchanged
