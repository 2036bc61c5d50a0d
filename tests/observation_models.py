"""Models with observables, modelled noise, doses and conditions, shared by the tests of the
observation layer (module level, so that they pickle)."""

import numpy as np
import torch
from observation import (
    OralPK,  # benchmarks/observation.py: the same model as its PK problem
)

import sklode
from sklode import Experiment, simulate

__all__ = ["OralPK", "TwoStates", "TwoConditionLV", "BertozziSIR", "PK_TRUTH", "PK_TIMES",
           "pk_experiments", "two_state_experiments", "bertozzi_experiments"]


class TwoStates(sklode.ODEModel):
    """A -> B -> out, both observed: every method can fit it."""

    state_names = ("A", "B")
    param_names = ("k1", "k2")
    default_theta = (0.5, 0.2)

    def rhs(self, t, x, theta):
        return torch.stack([-theta[0] * x[..., 0],
                            theta[0] * x[..., 0] - theta[1] * x[..., 1]], dim=-1)


class TwoConditionLV(sklode.ODEModel):
    """Lotka-Volterra with a second prey growth rate ``a_2`` for a second condition."""

    state_names = ("prey", "predator")
    param_names = ("a", "b", "c", "d", "a_2")
    default_theta = (2.0, 1.0, 4.0, 1.0, 2.0)

    def rhs(self, t, x, theta):
        a, b, c, d = theta[0], theta[1], theta[2], theta[3]
        prey, pred = x[..., 0], x[..., 1]
        return torch.stack([a * prey - b * prey * pred, -c * pred + d * prey * pred], dim=-1)


PK_TRUTH = np.array([1.2, 0.15, 30.0, 0.2, 0.1])
PK_TIMES = np.array([0.25, 0.5, 1, 2, 4, 6, 8, 12.5, 13, 14, 16, 20, 24])


def pk_experiments(seed=0, subjects=(320.0, 250.0, 400.0)):
    """Seeded data of ``OralPK`` at ``PK_TRUTH``: one subject per dose, dosed at 0 and 12 h."""
    rng = np.random.default_rng(seed)
    model, out = OralPK(), []
    for k, dose in enumerate(subjects):
        doses = [(0.0, "gut", dose), (12.0, "gut", dose)]
        X = simulate(model, PK_TRUTH, [0, 0], PK_TIMES, t0=0.0,
                     doses=[(a, 0, c) for a, _, c in doses])
        conc = X[:, 1] / PK_TRUTH[2]
        y = conc + (PK_TRUTH[3] + PK_TRUTH[4] * conc) * rng.standard_normal(conc.size)
        out.append(Experiment(PK_TIMES, y[:, None], x0=[0.0, 0.0], t0=0.0, doses=doses,
                              name=f"subject {k + 1}"))
    return out


def two_state_experiments(seed=1, noise=0.05):
    """``TwoStates`` at k = (0.8, 0.3), two experiments dosed into A at 0 and 10 h."""
    rng = np.random.default_rng(seed)
    model, out = TwoStates(), []
    t = np.linspace(0.25, 20, 80)
    for _ in range(2):
        doses = [(0.0, "A", 10.0), (10.0, "A", 8.0)]
        X = simulate(model, [0.8, 0.3], [0, 0], t, t0=0.0,
                     doses=[(a, 0, c) for a, _, c in doses])
        out.append(Experiment(t, X + noise * rng.standard_normal(X.shape), x0=[0.0, 0.0],
                              t0=0.0, doses=doses))
    return out


class BertozziSIR(sklode.ODEModel):
    """The PEtab benchmark problem Bertozzi_PNAS2020 (SIR per US state), translated by hand.

    The SBML model's species S, I, R start at ``S = N - I0``, ``I = I0``, ``R = 0`` with
    ``beta = R0 gamma / N``; the condition table sets ``N`` (a number) and ``I0``, ``R0``,
    ``gamma`` (names of estimated parameters) per state; the observable is ``I`` with the
    noise standard deviation ``sd_I_<state>``. ``S`` depends on the estimated ``I0``, so the
    states here are ``(S + I, I, R)``: the first starts at the known ``N``, the second is
    the estimated initial value (``I0``), and ``S = x0 - x1``.
    """

    state_names = ("SI", "I", "R")
    observable_names = ("y_I",)
    param_names = ("R0_NY", "gamma_NY", "sd_I_NY", "R0_CA", "gamma_CA", "sd_I_CA",
                   "R0_", "gamma_", "N_", "sd_")

    def rhs(self, t, x, theta):
        R0, gamma, N = theta[6], theta[7], theta[8]
        S, I = x[..., 0] - x[..., 1], x[..., 1]  # noqa: E741
        infection = R0 * gamma / N * S * I
        return torch.stack([-gamma * I, infection - gamma * I, gamma * I], dim=-1)

    def observe(self, t, x, theta):
        return x[..., 1:2]

    def noise_sd(self, t, y, theta):
        return theta[9] * torch.ones_like(y)


def bertozzi_experiments(folder):
    """The problem's measurements as two Experiments (CA, NY) with their conditions, and the
    nominal parameters (linear scale) by name."""
    import csv

    def table(name):
        with open(folder / name, newline="") as fh:
            return list(csv.DictReader(fh, delimiter="\t"))

    nominal = {r["parameterId"]: float(r["nominalValue"]) for r in table("parameters.tsv")}
    conditions = {r["conditionId"]: r for r in table("conditions.tsv")}
    experiments = []
    for cid, state in (("u_CA", "CA"), ("u_NY", "NY")):
        rows = [r for r in table("measurements.tsv") if r["simulationConditionId"] == cid]
        t = np.array([float(r["time"]) for r in rows])
        Y = np.array([[float(r["measurement"])] for r in rows])
        c = conditions[cid]
        experiments.append(Experiment(
            t, Y, t0=0.0, x0=[float(c["N_"]), nominal[c["I0_"]], 0.0], name=state,
            conditions={"N_": float(c["N_"]), "R0_": c["R0_"], "gamma_": c["gamma_"],
                        "sd_": f"sd_I_{state}"}))
    return experiments, nominal
