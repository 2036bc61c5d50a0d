"""PEtab measurements at steady state (``time = inf``), on a model written here whose steady
state has a closed form and a conservation law (A <-> B keeps A + B; the Jacobian is
singular): -log L against the hand-written steady state, its gradient (the implicit
function theorem with the conserved total held) against central differences, and a fit."""

import warnings

import numpy as np
import pytest

pytest.importorskip("petab.v1")
pytest.importorskip("libsbml")
pytest.importorskip("sbmlmath")

from _petab_files import sbml_model, write_problem  # noqa: E402

from sklode import petab as sk_petab  # noqa: E402
from sklode.petab import UnsupportedFeature  # noqa: E402

NOMINAL = {"k1": 0.7, "k2": 0.3, "kp": 2.0, "kd": 0.5, "scale": 1.5}
SIGMA = 0.05
# condition: (A's start, k1 there); B starts at 1 everywhere
CONDITIONS = {"c1": (2.0, None), "c2": (5.0, 0.5)}
FINITE_TIMES = (0.5, 1.0, 2.0)  # c2 is also measured on its way to rest


def _clean(condition, k1, k2, kp, kd, scale, t=np.inf):
    """obs_A and obs_C by hand: A relaxes to T k2 / (k1 + k2) at rate k1 + k2 (T = A + B
    conserved), C to kp / kd."""
    a0, k1_here = CONDITIONS[condition]
    k1 = k1 if k1_here is None else k1_here
    total = a0 + 1.0
    a_rest = total * k2 / (k1 + k2)
    a = a_rest + (a0 - a_rest) * np.exp(-(k1 + k2) * t)
    c = kp / kd + (0.0 - kp / kd) * np.exp(-kd * t)
    return scale * a, c


def _rows(values=NOMINAL, seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for condition in CONDITIONS:
        for _ in range(3):  # replicates at rest
            a, c = _clean(condition, **values)
            rows.append(("obs_A", condition, a + SIGMA * rng.standard_normal(), "inf", SIGMA))
            rows.append(("obs_C", condition, c + SIGMA * rng.standard_normal(), "inf", SIGMA))
    for t in FINITE_TIMES:
        a, _ = _clean("c2", **values, t=t)
        rows.append(("obs_A", "c2", a + SIGMA * rng.standard_normal(), t, SIGMA))
    return rows


@pytest.fixture(scope="module")
def problem_path(tmp_path_factory):
    sbml = sbml_model(
        species={"A": 2.0, "B": 1.0, "C": 0.0},
        parameters=NOMINAL,
        reactions=[(["A"], ["B"], "k1 * A"), (["B"], ["A"], "k2 * B"),
                   ([], ["C"], "kp"), (["C"], [], "kd * C")])
    return write_problem(
        tmp_path_factory.mktemp("steady"), sbml,
        parameters=[(n, "log10", 1e-3, 1e3, v, 1) for n, v in NOMINAL.items()],
        observables=[("obs_A", "scale * A", "noiseParameter1_obs_A"),
                     ("obs_C", "C", "noiseParameter1_obs_C")],
        measurements=_rows(),
        conditions=(("A", "k1"), [("c1", 2.0, "k1"), ("c2", 5.0, 0.5)]))


def _by_hand(problem_path):
    import pandas as pd

    table = pd.read_csv(problem_path.parent / "measurements.tsv", sep="\t")
    total = 0.0
    for _, row in table.iterrows():
        a, c = _clean(row["simulationConditionId"], **NOMINAL, t=float(row["time"]))
        predicted = a if row["observableId"] == "obs_A" else c
        total += 0.5 * np.log(2 * np.pi * SIGMA**2) + 0.5 * (
            (row["measurement"] - predicted) / SIGMA) ** 2
    return total


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_measurements_at_steady_state_have_the_hand_written_likelihood(problem_path,
                                                                         integrator):
    problem = sk_petab.load(problem_path)
    steady = [e for e in problem.experiments if "steady state" in e.name]
    # c1 at rest, c2 at rest and c2 on its way (replicates at rest: 3 experiments each)
    assert {e.name.split(" ")[0] for e in steady} == {"c1", "c2"}
    assert any(e.name == "c2" for e in problem.experiments)
    value = problem.neg_log_likelihood(integrator=integrator, rtol=1e-10, atol=1e-12)
    # the steady state is reached to |f| <= 1e-12 + 1e-10 |x| (RTOL_SS, ATOL_SS): its
    # observables are within ~1e-10 of the closed form, 1e-9 of a -log L of size ~30
    assert value == pytest.approx(_by_hand(problem_path), rel=1e-8)


@pytest.mark.parametrize("integrator", ["CVODES", "LSODA"])
def test_the_steady_states_gradient_holds_the_conserved_total(problem_path, integrator):
    from test_petab import _posed

    problem = sk_petab.load(problem_path)
    objective, u0 = _posed(problem, integrator=integrator, rtol=1e-11, atol=1e-12)
    _, grad = objective.value_and_grad(u0, "adjoint")
    from_jacobian = objective.jacobian(u0).T @ objective.residual(u0)
    for j in range(u0.size):
        # log10 units, a 0.23 % step: the steady state is reached to |f| <= 4e-10 here,
        # which moves the cost by up to ~2e-8 between two solves, ~1e-5 of the quotient at
        # h = 1e-3 (at h = 1e-5 it was 1e-3 of it, measured). The five-point quotient's
        # own error is O(h^4): the cost is sharply curved in kd (sd 0.05 on C ~ 4), where
        # the three-point quotient at this h was 0.8 % off
        h = 1e-3

        def cost_at(step, j=j):
            moved = u0.copy()
            moved[j] += step
            return objective.cost(moved)

        numeric = (8 * (cost_at(h) - cost_at(-h)) - (cost_at(2 * h) - cost_at(-2 * h))) / (
            12 * h)
        assert from_jacobian[j] == pytest.approx(numeric, rel=1e-5, abs=1e-4), j
        assert grad[j] == pytest.approx(numeric, rel=1e-5, abs=1e-4), j
    # k2 moves A's rest only through the ratio k2 / (k1 + k2) of the conserved total:
    # a large derivative that a Jacobian inverse could not give (J is singular)
    assert abs(grad[1]) > 10


def test_a_fit_to_steady_state_data_returns_to_the_data(problem_path):
    problem = sk_petab.load(problem_path)
    est = problem.estimator(n_starts=3, random_state=0, theta0=problem.nominal * 1.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 15 values for 5 unknowns: verdicts not tested here
        est.fit(problem.experiments)
    # at least as good as the nominal point the data were drawn at
    assert est.neg_log_likelihood_ <= problem.neg_log_likelihood() + 1e-6
    fitted = dict(zip(problem.model.param_names, est.theta_))
    # kp / kd is C's rest, measured 6 times at sd 0.05 around 4: to ~1 %
    assert fitted["kp"] / fitted["kd"] == pytest.approx(4.0, rel=0.02)


def test_steady_state_data_after_a_pre_equilibration_are_refused_by_name(problem_path,
                                                                         tmp_path):
    import pandas as pd

    table = pd.read_csv(problem_path.parent / "measurements.tsv", sep="\t")
    table["preequilibrationConditionId"] = "c1"
    folder = tmp_path / "pre"
    folder.mkdir()
    for f in problem_path.parent.iterdir():
        (folder / f.name).write_text(f.read_text())
    table.to_csv(folder / "measurements.tsv", sep="\t", index=False)
    with pytest.raises(UnsupportedFeature, match="steady-state measurements .* after a "
                                                 "pre-equilibration"):
        sk_petab.load(folder / "problem.yaml")


def test_replicates_of_one_steady_state_are_not_called_a_poor_fit(problem_path, tmp_path):
    import pandas as pd

    from sklode.exceptions import PoorFitWarning

    # only c1's replicates at rest: the fitted rest explains none of their spread (R^2
    # near 0 by construction), which is noise, not a model that misses the data
    folder = tmp_path / "replicates"
    folder.mkdir()
    for f in problem_path.parent.iterdir():
        (folder / f.name).write_text(f.read_text())
    table = pd.read_csv(problem_path.parent / "measurements.tsv", sep="\t")
    at_rest = table[(table["simulationConditionId"] == "c1") & (table["time"] == np.inf)]
    at_rest.to_csv(folder / "measurements.tsv", sep="\t", index=False)
    problem = sk_petab.load(folder / "problem.yaml")
    assert len(problem.experiments) == 3  # three replicates of each observable
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        problem.estimator(theta0=problem.nominal).fit(problem.experiments)
    assert not [w for w in caught if issubclass(w.category, PoorFitWarning)]
