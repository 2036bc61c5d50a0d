"""Real-data shapes in the three estimators, measured over seeds: several experiments, 20 %
missing values, hidden states (SEIRD seen in I, R, D only), a pooled pharmacokinetic study
against scipy's least squares on the closed form, cross-validation over experiments, and
log-normal noise. Writes ``benchmarks/results/real_data.md``, which ``docs/data.md`` quotes.

CPU seconds are single-threaded (``time.process_time``, torch and BLAS on one thread).

    python benchmarks/real_data.py [--seeds 20]
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

THETA = np.array([2.0, 1.0, 4.0, 1.0])
GUESS = (2.5, 1.5, 4.5, 1.5)


def _relative(theta, truth):
    return float(np.linalg.norm(theta - truth) / np.linalg.norm(truth))


def _quiet_fit(est, t, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(t, Y)


def two_experiments(seeds):
    """Joint fit of two LV experiments against each alone (noise 0.3)."""
    from sklode import AdjointODE, BCDProxODE, WENDyODE, simulate
    from sklode.models import LotkaVolterra

    rows = []
    for Estimator in (BCDProxODE, WENDyODE, AdjointODE):
        errors = {"joint": [], "a": [], "b": []}
        cpu = 0.0
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            ta, tb = np.linspace(0, 4, 41), np.linspace(0.2, 3.2, 31)
            Ya = simulate(LotkaVolterra(), THETA, [5, 3], ta) + 0.3 * rng.standard_normal((41, 2))
            Yb = simulate(LotkaVolterra(), THETA, [2, 6], tb) + 0.3 * rng.standard_normal((31, 2))
            start = time.process_time()
            joint = _quiet_fit(Estimator(LotkaVolterra(), theta0=GUESS), [ta, tb], [Ya, Yb])
            cpu += time.process_time() - start
            a = _quiet_fit(Estimator(LotkaVolterra(), theta0=GUESS), ta, Ya)
            b = _quiet_fit(Estimator(LotkaVolterra(), theta0=GUESS), tb, Yb)
            for key, est in (("joint", joint), ("a", a), ("b", b)):
                errors[key].append(_relative(est.theta_, THETA))
        rows.append((Estimator.__name__, *(np.mean(errors[k]) for k in ("joint", "a", "b")),
                     cpu / seeds))
    lines = ["| estimator | joint | experiment a alone | experiment b alone "
             "| CPU s per joint fit |",
             "|---|---|---|---|---|"]
    lines += [f"| {n} | {j:.3f} | {a:.3f} | {b:.3f} | {c:.2f} |" for n, j, a, b, c in rows]
    return lines


def missing_values(seeds):
    """20 % of the entries missing (LV, noise 0.1)."""
    from sklode import AdjointODE, BCDProxODE, WENDyODE, simulate
    from sklode.models import LotkaVolterra

    t = np.linspace(0, 4, 41)
    X = simulate(LotkaVolterra(), THETA, [5, 3], t)
    lines = ["| estimator | mean error, complete | mean error, 20 % missing "
             "| worst, 20 % missing |",
             "|---|---|---|---|"]
    for Estimator in (BCDProxODE, WENDyODE, AdjointODE):
        full, gaps = [], []
        for seed in range(seeds):
            rng = np.random.default_rng(seed)
            Y = X + 0.1 * rng.standard_normal(X.shape)
            Yg = Y.copy()
            Yg[rng.random(Y.shape) < 0.2] = np.nan
            full.append(_relative(_quiet_fit(Estimator(LotkaVolterra(), theta0=GUESS,
                                                       x0=[5.5, 2.5]), t, Y).theta_, THETA))
            gaps.append(_relative(_quiet_fit(Estimator(LotkaVolterra(), theta0=GUESS,
                                                       x0=[5.5, 2.5]), t, Yg).theta_, THETA))
        lines.append(f"| {Estimator.__name__} | {np.mean(full):.3f} | {np.mean(gaps):.3f} | "
                     f"{np.max(gaps):.3f} |")
    return lines


def hidden_seird(seeds):
    """SEIRD observed in I, R, D daily on t = 40..80 (2 % noise); S and E hidden."""
    from sklode import AdjointODE, BCDProxODE, simulate
    from sklode.models import SEIRD

    theta, x0 = np.array([1, 1 / 7, 1 / 5, 1 / 70]), np.array([91647, 4853, 1755, 1620, 125.])
    t = np.arange(40.0, 81.0)
    X = simulate(SEIRD(), theta, x0, t)
    common = dict(theta0=(1.4, 0.09, 0.2, 0.001), x0=x0 * [1.05, 0.8, 1, 1, 1],
                  observed=["I", "R", "D"])
    results = {"BCDProxODE": [], "AdjointODE": []}
    cpu = {"BCDProxODE": 0.0, "AdjointODE": 0.0}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        Y = X[:, 2:] * (1 + 0.02 * rng.standard_normal((t.size, 3)))
        for name, est in (("BCDProxODE", BCDProxODE(SEIRD(), **common)),
                          ("AdjointODE", AdjointODE(SEIRD(), **common, positive=True,
                                                    sigma=0.02, noise_kind="proportional"))):
            start = time.process_time()
            _quiet_fit(est, t, Y)
            cpu[name] += time.process_time() - start
            states = est.states_ if name == "BCDProxODE" else est.simulate(t)
            hidden = np.max(np.abs(states[:, :2] - X[:, :2]) / X[:, :2], axis=0)
            results[name].append(np.r_[np.abs(est.theta_ - theta) / theta, hidden])
    lines = ["| estimator | α | β | γ | μ | S (worst time) | E (worst time) | CPU s per fit |",
             "|---|---|---|---|---|---|---|---|"]
    for name, values in results.items():
        mean = np.mean(values, axis=0)
        lines.append(f"| {name} | " + " | ".join(f"{v:.3f}" for v in mean)
                     + f" | {cpu[name] / seeds:.2f} |")
    return lines


def pk_study(seeds):
    """Five subjects, known doses, the gut hidden, concentration only, 10 % log-normal noise:
    AdjointODE against scipy least_squares on the closed-form solution (same weights)."""
    from scipy.optimize import least_squares

    from sklode import AdjointODE
    from sklode.models import OralAbsorption

    truth, doses = np.array([1.2, 0.15, 0.012]), [100.0, 200.0, 150.0, 300.0, 250.0]
    nominal = np.array([0.25, 0.5, 1, 1.5, 2, 3, 4, 6, 8, 12, 24.0])

    def concentration(theta, dose, t):
        ka, ke, kv = theta
        return dose * kv / (ka - ke) * (np.exp(-ke * t) - np.exp(-ka * t))

    gaps, cpu_adjoint, cpu_scipy = [], 0.0, 0.0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        ts, Ys = [], []
        for i, dose in enumerate(doses):
            t = np.sort(nominal * np.exp(0.1 * rng.standard_normal(nominal.size)))
            t = t[:-1] if i % 2 else t
            ts.append(t)
            Ys.append((concentration(truth, dose, t)
                       * np.exp(0.1 * rng.standard_normal(t.size)))[:, None])

        def weighted(theta, ts=ts, Ys=Ys):
            return np.concatenate([(concentration(theta, d, t) - Y[:, 0]) / (0.1 * Y[:, 0])
                                   for d, t, Y in zip(doses, ts, Ys)])

        start = time.process_time()
        best = least_squares(weighted, (0.8, 0.2, 0.02), xtol=1e-15, ftol=1e-15, gtol=1e-15)
        cpu_scipy += time.process_time() - start
        start = time.process_time()
        est = _quiet_fit(AdjointODE(OralAbsorption(), theta0=(0.8, 0.2, 0.02),
                                    x0=[[d, 0.0] for d in doses], estimate_x0=False, t0=0.0,
                                    observed=["concentration"], sigma=0.1,
                                    noise_kind="proportional", positive=True, rtol=1e-10,
                                    atol=1e-12, tol=1e-10), ts, Ys)
        cpu_adjoint += time.process_time() - start
        cost = 0.5 * float(np.sum(weighted(est.theta_) ** 2))
        gaps.append(abs(cost - best.cost) / best.cost)
    return ["| fits | worst relative cost difference | AdjointODE CPU s per fit | "
            "closed-form least_squares CPU s per fit |", "|---|---|---|---|",
            f"| {seeds} | {np.max(gaps):.1e} | {cpu_adjoint / seeds:.2f} | "
            f"{cpu_scipy / seeds:.3f} |"]


def lognormal(seeds):
    """Mean relative theta error on log-normal data, additive fit against log-scale fit."""
    from sklode import AdjointODE, BCDProxODE, WENDyODE
    from sklode.datasets import make_trajectory

    cases = [(BCDProxODE, "lotka_volterra", 0.1, {"theta0": GUESS}),
             (WENDyODE, "wendy_lotka_volterra", 0.1, {}),
             (AdjointODE, "lotka_volterra", 0.2, {"theta0": GUESS, "sigma": 0.2})]
    lines = ["| estimator | problem | noise | additive fit | noise_kind='lognormal' |",
             "|---|---|---|---|---|"]
    for Estimator, problem, noise, settings in cases:
        plain, on_log = [], []
        for seed in range(seeds):
            d = make_trajectory(problem, noise=noise, noise_kind="lognormal", random_state=seed)
            truth = d.problem.theta
            plain.append(_relative(_quiet_fit(Estimator(d.problem.model, **settings),
                                              d.t, d.Y).theta_, truth))
            on_log.append(_relative(_quiet_fit(Estimator(d.problem.model, **settings,
                                                         noise_kind="lognormal"),
                                               d.t, d.Y).theta_, truth))
        lines.append(f"| {Estimator.__name__} | {problem} | {noise:g} | {np.mean(plain):.4f} "
                     f"| {np.mean(on_log):.4f} |")
    return lines


def cross_validation():
    """Held-out R^2 of KFold(3) over six LV experiments (noise 0.2)."""
    from sklearn.model_selection import KFold, cross_val_score

    from sklode import AdjointODE, BCDProxODE, WENDyODE, simulate
    from sklode.models import LotkaVolterra

    rng = np.random.default_rng(0)
    t = np.linspace(0, 4, 41)
    ts, Ys = [], []
    for x0 in ([5, 3], [2, 6], [4, 4], [3, 2], [6, 2], [2, 3]):
        ts.append(t)
        Ys.append(simulate(LotkaVolterra(), THETA, x0, t) + 0.2 * rng.standard_normal((41, 2)))
    lines = ["| estimator | held-out R² per fold |", "|---|---|"]
    for Estimator in (BCDProxODE, WENDyODE, AdjointODE):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scores = cross_val_score(Estimator(LotkaVolterra(), theta0=GUESS), ts, Ys,
                                     cv=KFold(3))
        lines.append(f"| {Estimator.__name__} | " + ", ".join(f"{s:.3f}" for s in scores)
                     + " |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--output", default=str(Path(__file__).parent / "results" /
                                                 "real_data.md"))
    args = parser.parse_args(argv)
    n = args.seeds
    sections = [
        (f"Two LV experiments (41 times on [0, 4] from (5, 3); 31 on [0.2, 3.2] from (2, 6)), "
         f"noise 0.3: mean relative θ error over {n} seeds", two_experiments(n)),
        (f"20 % missing entries (LV, noise 0.1, {n} seeds): relative θ error",
         missing_values(n)),
        (f"SEIRD with S and E hidden, I, R, D daily on t = 40..80 (2 %), θ0 40 % off in α and "
         f"β: mean relative error over {max(n // 4, 3)} seeds", hidden_seird(max(n // 4, 3))),
        (f"Pooled oral-absorption study (5 subjects, known doses, gut hidden): AdjointODE "
         f"against the closed-form optimum, {max(n // 4, 3)} seeds", pk_study(max(n // 4, 3))),
        (f"Log-normal noise, {max(n // 2, 6)} seeds: mean relative θ error",
         lognormal(max(n // 2, 6))),
        ("Cross-validation over six LV experiments (KFold(3), noise 0.2, seed 0)",
         cross_validation()),
    ]
    text = ["# Real-data shapes: measured", "",
            "Written by `benchmarks/real_data.py`; CPU seconds single-threaded.", ""]
    for title, lines in sections:
        text += [f"## {title}", "", *lines, ""]
    Path(args.output).write_text("\n".join(text))
    print("\n".join(text))


if __name__ == "__main__":
    main()
