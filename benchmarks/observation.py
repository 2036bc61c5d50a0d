"""Observation models, noise parameters, doses and conditions: AdjointODE against the fit a
user writes by hand with scipy, on the same data and the same likelihood, in one process.

Three problems of our own making:

1. **Oral PK, two doses, combined error**: one-compartment oral absorption (gut -> central),
   the concentration ``central / V`` observed, ``sd = a + b * conc``; three subjects dosed at
   0 h and 12 h (320, 250, 400 mg), 13 samples each; ka, ke, V, a, b fitted.
2. **Fluorescence with log-normal noise**: a reporter made at rate 1 that matures and decays,
   read as ``F = scale * mature + offset`` with log-normal noise of unknown ``sigma``; mat, d,
   scale, offset, sigma fitted.
3. **Two conditions sharing all but one parameter**: Lotka-Volterra whose prey growth is
   ``a`` in the first experiment and ``a_2`` in the second (``conditions={"a": "a_2"}``),
   one noise level per species fitted; a, b, c, d, a_2, s_prey, s_pred fitted.

The hand-written fit: ``solve_ivp`` (LSODA, rtol 1e-10) in segments between the doses, the
full ``-log L`` in numpy (the PEtab convention, every constant), minimised over the log of
every parameter by ``scipy.optimize.minimize`` (L-BFGS-B on finite differences, then a BFGS
polish), from the same start as AdjointODE. Both CPU times are single-threaded.

Writes ``benchmarks/results/observation.md`` and ``.json``.

    python benchmarks/observation.py
"""

from __future__ import annotations

import json
import os
import time
import warnings
from pathlib import Path

if __name__ == "__main__":  # single-threaded when run; importing it (the tests) changes nothing
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.integrate import solve_ivp  # noqa: E402
from scipy.optimize import minimize  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

import sklode  # noqa: E402
from sklode import AdjointODE, Experiment, simulate  # noqa: E402

HERE = Path(__file__).parent
HALF_LOG_2PI = 0.5 * np.log(2 * np.pi)


# ----------------------------------------------------------------------------- the models
class OralPK(sklode.ODEModel):
    """Oral absorption, concentration observed, combined additive + proportional error."""

    state_names = ("gut", "central")
    param_names = ("ka", "ke", "V", "a", "b")
    observable_names = ("conc",)
    default_theta = (1.0, 0.2, 20.0, 0.3, 0.2)

    def rhs(self, t, x, theta):
        ka, ke = theta[0], theta[1]
        return torch.stack([-ka * x[..., 0], ka * x[..., 0] - ke * x[..., 1]], dim=-1)

    def observe(self, t, x, theta):
        return x[..., 1:2] / theta[2]

    def noise_sd(self, t, y, theta):
        return theta[3] + theta[4] * y


def pk_numpy(t, x, ka, ke):
    return [-ka * x[0], ka * x[0] - ke * x[1]]


class Reporter(sklode.ODEModel):
    """Immature -> mature reporter read as a scaled, offset fluorescence (log-normal)."""

    state_names = ("immature", "mature")
    param_names = ("mat", "d", "scale", "offset", "sigma")
    observable_names = ("F",)

    def rhs(self, t, x, theta):
        mat, d = theta[0], theta[1]
        return torch.stack([1.0 - (mat + d) * x[..., 0], mat * x[..., 0] - d * x[..., 1]],
                           dim=-1)

    def observe(self, t, x, theta):
        return theta[2] * x[..., 1:2] + theta[3]

    def noise_sd(self, t, y, theta):
        return theta[4] * torch.ones_like(y)


def reporter_numpy(t, x, mat, d):
    return [1.0 - (mat + d) * x[0], mat * x[0] - d * x[1]]


class TwoConditionLV(sklode.ODEModel):
    """Lotka-Volterra with a second prey growth rate for the second condition."""

    state_names = ("prey", "predator")
    param_names = ("a", "b", "c", "d", "a_2", "s_prey", "s_pred")

    def rhs(self, t, x, theta):
        a, b, c, d = theta[0], theta[1], theta[2], theta[3]
        prey, pred = x[..., 0], x[..., 1]
        return torch.stack([a * prey - b * prey * pred, -c * pred + d * prey * pred], dim=-1)

    def noise_sd(self, t, y, theta):
        return torch.stack([theta[5] * torch.ones_like(y[..., 0]),
                            theta[6] * torch.ones_like(y[..., 1])], dim=-1)


def lv_numpy(t, x, a, b, c, d):
    return [a * x[0] - b * x[0] * x[1], -c * x[1] + d * x[0] * x[1]]


# ----------------------------------------------------------------------------- the data
def pk_problem(rng):
    model, truth = OralPK(), np.array([1.2, 0.15, 30.0, 0.2, 0.1])
    t = np.array([0.25, 0.5, 1, 2, 4, 6, 8, 12.5, 13, 14, 16, 20, 24])
    experiments = []
    for k, dose in enumerate([320.0, 250.0, 400.0]):
        doses = [(0.0, "gut", dose), (12.0, "gut", dose)]
        X = simulate(model, truth, [0, 0], t, t0=0.0, doses=[(a, 0, c) for a, _, c in doses])
        conc = X[:, 1] / truth[2]
        y = conc + (truth[3] + truth[4] * conc) * rng.standard_normal(conc.size)
        experiments.append(Experiment(t, y[:, None], x0=[0.0, 0.0], t0=0.0, doses=doses,
                                      name=f"subject {k + 1}"))
    return dict(name="oral PK, 2 doses x 3 subjects, combined error", model=model,
                truth=truth, start=np.array([0.8, 0.25, 20.0, 0.3, 0.2]),
                experiments=experiments, noise_kind="absolute")


def reporter_problem(rng):
    model, truth = Reporter(), np.array([0.5, 0.1, 40.0, 5.0, 0.08])
    t = np.linspace(0.5, 30, 40)
    X = simulate(model, truth, [0, 0], t, t0=0.0)
    F = truth[2] * X[:, 1] + truth[3]
    y = F * np.exp(truth[4] * rng.standard_normal(F.size))
    return dict(name="fluorescence scale*mature+offset, log-normal", model=model, truth=truth,
                start=np.array([0.3, 0.2, 20.0, 2.0, 0.2]),
                experiments=[Experiment(t, y[:, None], x0=[0.0, 0.0], t0=0.0)],
                noise_kind="lognormal")


def lv_problem(rng):
    model, truth = TwoConditionLV(), np.array([2.0, 1.0, 4.0, 1.0, 3.0, 0.2, 0.1])
    t = np.linspace(0.1, 4, 40)
    experiments = []
    for k, (a, cond) in enumerate([(truth[0], None), (truth[4], {"a": "a_2"})]):
        theta = truth.copy()
        theta[0] = a
        X = simulate(model, theta, [5.0, 3.0], t, t0=0.0)
        Y = X + truth[5:7] * rng.standard_normal(X.shape)
        experiments.append(Experiment(t, Y, x0=[5.0, 3.0], t0=0.0, conditions=cond,
                                      name=f"condition {k + 1}"))
    return dict(name="Lotka-Volterra, two conditions (a, a_2), sigma per species",
                model=model, truth=truth, start=np.array([1.5, 1.2, 3.5, 0.8, 2.5, 0.3, 0.3]),
                experiments=experiments, noise_kind="absolute")


# ----------------------------------------------------------------------------- by hand
def _segments(f, args, x0, t, doses):
    """States at ``t`` from x0 at 0, integrated in segments between the doses."""
    x, start, out = np.array(x0, float), 0.0, np.empty((t.size, len(x0)))
    cuts = sorted({d[0] for d in doses if 0.0 < d[0] < t[-1]})
    for time_, state, amount in doses:
        if time_ == 0.0:
            x[state] += amount
    for end in cuts + [t[-1]]:
        inside = (t > start) & (t <= end)
        t_eval = np.union1d(t[inside], [end])
        sol = solve_ivp(f, (start, end), x, method="LSODA", t_eval=t_eval, args=args,
                        rtol=1e-10, atol=1e-12)
        out[inside] = sol.y.T[np.searchsorted(t_eval, t[inside])]
        x = sol.y[:, -1].copy()
        for time_, state, amount in doses:
            if time_ == end and end < t[-1]:
                x[state] += amount
        start = end
    return out


def hand_nll(problem, theta):
    name = problem["name"]
    total = 0.0
    for e in problem["experiments"]:
        t, Y = np.asarray(e.t, float), np.asarray(e.Y, float)
        if name.startswith("oral"):
            doses = [(d[0], 0, d[2]) for d in e.doses]
            X = _segments(pk_numpy, tuple(theta[:2]), [0, 0], t, doses)
            h = X[:, 1] / theta[2]
            s = theta[3] + theta[4] * h
            r = Y[:, 0] - h
            total += np.sum(np.log(s) + HALF_LOG_2PI + 0.5 * (r / s) ** 2)
        elif name.startswith("fluor"):
            X = _segments(reporter_numpy, tuple(theta[:2]), [0, 0], t, [])
            h = theta[2] * X[:, 1] + theta[3]
            if np.any(h <= 0):
                return np.inf
            e_ = np.log(Y[:, 0]) - np.log(h)
            s = theta[4]
            total += np.sum(np.log(s) + HALF_LOG_2PI + np.log(Y[:, 0]) + 0.5 * (e_ / s) ** 2)
        else:
            a = theta[4] if e.conditions else theta[0]
            X = _segments(lv_numpy, (a, *theta[1:4]), [5.0, 3.0], t, [])
            s = theta[5:7]
            total += np.sum(np.log(s) + HALF_LOG_2PI + 0.5 * ((Y - X) / s) ** 2)
    return float(total)


def fit_by_hand(problem):
    def cost(logs):
        with np.errstate(all="ignore"):
            value = hand_nll(problem, np.exp(logs))
        return value if np.isfinite(value) else 1e10

    u0 = np.log(problem["start"])
    first = minimize(cost, u0, method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-9,
                                                            "maxiter": 2000})
    polish = minimize(cost, first.x, method="BFGS", options={"gtol": 1e-7, "maxiter": 500})
    best = polish if polish.fun <= first.fun else first
    return np.exp(best.x), float(best.fun), int(first.nfev + polish.nfev)


def fit_adjoint(problem):
    est = AdjointODE(problem["model"], theta0=problem["start"], estimate_x0=False,
                     positive=True, noise_kind=problem["noise_kind"], tol=1e-12, max_iter=500,
                     rtol=1e-10, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(problem["experiments"])
    return est


def main():
    torch.set_num_threads(1)  # here, not at import: the tests import OralPK from this file
    rng = np.random.default_rng(2026)
    problems = [pk_problem(rng), reporter_problem(rng), lv_problem(rng)]
    rows = []
    with threadpool_limits(1):
        for problem in problems:
            fit_adjoint(problem)  # warm: compilation and first-call costs out of the timing
            c0 = time.process_time()
            est = fit_adjoint(problem)
            cpu_sklode = time.process_time() - c0
            c0 = time.process_time()
            theta_hand, nll_hand, nfev = fit_by_hand(problem)
            cpu_hand = time.process_time() - c0
            nll_ours = est.neg_log_likelihood_
            rows.append({
                "problem": problem["name"],
                "parameters": list(problem["model"].param_names),
                "truth": problem["truth"].tolist(),
                "sklode_theta": est.theta_.tolist(),
                "sklode_stderr": est.theta_stderr_.tolist(),
                "hand_theta": theta_hand.tolist(),
                "sklode_nll": nll_ours,
                "hand_nll_at_sklode": hand_nll(problem, est.theta_),
                "hand_nll": nll_hand,
                "relative_nll_difference": abs(nll_ours - nll_hand) / abs(nll_hand),
                "max_relative_theta_difference": float(np.max(np.abs(est.theta_ - theta_hand)
                                                              / np.abs(theta_hand))),
                "sklode_cpu_s": cpu_sklode, "hand_cpu_s": cpu_hand,
                "hand_nll_evaluations": nfev, "sklode_solves": int(est.n_solves_),
            })
            print(rows[-1]["problem"], f"nll {nll_ours:.10g} vs {nll_hand:.10g}",
                  f"cpu {cpu_sklode:.2f} vs {cpu_hand:.2f}")
    (HERE / "results" / "observation.json").write_text(json.dumps(rows, indent=1))
    lines = [
        "# Observation models, noise parameters, doses, conditions: AdjointODE vs scipy by hand",
        "",
        "Written by `benchmarks/observation.py` (one process, one thread). Both fits minimise "
        "the same -log L (PEtab's convention, every constant) from the same start; the hand "
        "fit is `solve_ivp` (LSODA, rtol 1e-10) in segments between doses inside "
        "`scipy.optimize.minimize` (L-BFGS-B on finite differences over log-parameters, then "
        "a BFGS polish). sklode: `AdjointODE(positive=True, tol=1e-12, rtol=1e-10)`, warm "
        "(second fit in the process).",
        "",
        "| problem | -log L sklode | -log L scipy | relative difference | max rel. theta "
        "difference | CPU s sklode | CPU s scipy | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['problem']} | {r['sklode_nll']:.10g} | {r['hand_nll']:.10g} | "
            f"{r['relative_nll_difference']:.1e} | {r['max_relative_theta_difference']:.1e} | "
            f"{r['sklode_cpu_s']:.2f} | {r['hand_cpu_s']:.2f} | "
            f"{r['hand_cpu_s'] / r['sklode_cpu_s']:.1f}x |")
    lines += ["", "Estimates (truth, sklode ± standard error, scipy):", ""]
    for r in rows:
        lines.append(f"- {r['problem']}: " + "; ".join(
            f"{p} {tr:g} / {s:.4g} ± {se:.2g} / {h:.4g}" for p, tr, s, se, h in zip(
                r["parameters"], r["truth"], r["sklode_theta"], r["sklode_stderr"],
                r["hand_theta"])))
    (HERE / "results" / "observation.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
