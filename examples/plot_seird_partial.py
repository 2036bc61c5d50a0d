"""
An outbreak seen in I, R and D only: seed 002's SEIRD examples
==============================================================

Seed 002's SEIRD model (α, β, γ, μ; N = 100,000) observed in the infected, recovered and
dead compartments only, daily from day 40 to day 80, with proportional noise; S and E are
hidden. AdjointODE, posed as the paper does (``sklode.registry``: its weights, and for the
examples that estimate x0 its prior and conservation penalty), fits its five examples over
ten seeds. The paper reports one noise draw per example (its Tables 1-4, BFGS column): the
table prints those relative errors beside our median and range over the ten seeds. The
errors are data-limited and vary by one to two orders of magnitude from draw to draw, so a
single draw is no benchmark: compare the medians across methods instead. The figure is
example E3 (θ and x0 estimated) on seed 0, with the 95 % band of the fitted parameters.
"""

import warnings

import numpy as np

from sklode.datasets import get_problem, make_trajectory
from sklode.plotting import plot_fit
from sklode.registry import METHODS

# Seed 002's relative errors of (alpha, beta, gamma, mu), one noise draw each, BFGS
PAPER = {"seird": (0.0768, 0.0021, 0.0897, 0.0001),      # Table 1, x0 known, 10 %
         "seird_e3": (0.0077, 0.0064, 0.0016, 0.0758),   # Table 2, x0 estimated, 10 %
         "seird_e4a": (0.0256, 0.0508, 0.0277, 0.0004),  # Table 3, 5 %
         "seird_e4b": (0.0047, 0.0307, 0.0628, 0.0705),  # Table 3, 15 %
         "seird_e4c": (0.0106, 0.0092, 0.0657, 0.0731)}  # Table 4, E observed too, 15 %
for name, paper in PAPER.items():
    problem = get_problem(name)
    errors = []
    for seed in range(10):
        data = make_trajectory(name, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # each fit's verdicts are not the point here
            est = METHODS["adjoint"].make(name).fit(data.t, data.Y)
        errors.append(np.abs(est.theta_ - problem.theta) / problem.theta)
    errors = np.array(errors)
    print(f"{name}: relative errors of (alpha, beta, gamma, mu)")
    print(f"  paper, one draw          {np.round(paper, 4)}")
    print(f"  ours, median of 10 seeds {np.round(np.median(errors, axis=0), 4)}")
    print(f"  ours, range              {np.round(errors.min(0), 4)} - "
          f"{np.round(errors.max(0), 4)}")

data = make_trajectory("seird_e3", random_state=0)
est = METHODS["adjoint"].make("seird_e3").fit(data.t, data.Y)
axes = plot_fit(est, data.t, data.Y, random_state=0)
axes[0].figure.suptitle("SEIRD example E3 (θ and x0 estimated; S, E hidden), AdjointODE")
