"""
Indometacin in six volunteers: observables, a fitted error model, subjects as experiments
==========================================================================================

Plasma concentrations of indometacin in six volunteers after the same intravenous dose (Kwan
et al. 1976, the classic multi-subject pharmacokinetic data set, shipped with sklode). The
instrument reads a concentration, an amount over a volume; the assay error grows with the
value; each subject is an :class:`sklode.Experiment` carrying its own dose. A long table
becomes six experiments with :func:`sklode.experiments_from_table`, and
:class:`sklode.models.TwoCompartmentIV` reads ``conc = central / V`` with the combined
error ``sd = sigma_add + sigma_prop * conc`` fitted by maximum likelihood with the rates.

The pooled fit (one parameter vector for all six) is compared with one fit per subject: the
spread of the per-subject rates is what a population (mixed-effects) model describes.
BCD-prox and WENDy fit states, not concentrations over an unknown volume, and say so.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np

from sklode import AdjointODE, WENDyODE, experiments_from_table, simulate
from sklode.datasets import load_indomethacin
from sklode.models import TwoCompartmentIV

data = load_indomethacin()
doses = {"subject": np.arange(1, 7), "time": np.zeros(6), "state": ["central"] * 6,
         "amount": np.ones(6)}  # the same dose in each; volumes are per unit of dose
subjects = experiments_from_table(data.table, time="time", experiment="subject",
                                  values=["conc"], doses=doses, t0=0.0)

model = TwoCompartmentIV(error="combined")
settings = dict(x0=[0.0, 0.0], estimate_x0=False, positive=True,
                theta0=(0.5, 0.5, 0.5, 1.0, 0.05, 0.1))
pooled = AdjointODE(model, **settings).fit(subjects)
print("pooled:", {k: round(float(v), 4) for k, v in zip(model.param_names, pooled.theta_)})
print(f"-log L = {pooled.neg_log_likelihood_:.2f}, AIC = {pooled.aic_:.2f}, "
      f"R^2 = {pooled.score(subjects):.3f}")

# the additive error alone: the likelihood says whether the proportional part is needed
additive = AdjointODE(TwoCompartmentIV(error="additive"),
                      **{**settings, "theta0": (0.5, 0.5, 0.5, 1.0, 0.05)}).fit(subjects)
print(f"additive error: AIC = {additive.aic_:.2f} (combined: {pooled.aic_:.2f})")

individual = []
for subject in subjects:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 11 samples for 6 parameters: warnings expected
        individual.append(AdjointODE(model, **settings).fit(subject))
k10 = np.array([e.theta_[0] for e in individual])
print(f"k10 per subject: {np.round(k10, 3)}; pooled {pooled.theta_[0]:.3f}")

try:
    WENDyODE(model).fit(subjects)
except ValueError as exc:
    print("WENDy:", str(exc)[:110], "...")

fig, axes = plt.subplots(2, 3, figsize=(10, 5.5), sharex=True, sharey=True)
grid = np.linspace(0.01, 8, 200)
for ax, subject, own in zip(axes.ravel(), subjects, individual):
    ax.semilogy(subject.t, subject.Y[:, 0], "o", color="k", ms=4, label="data")
    for est, style, label in ((pooled, "-", "pooled fit"), (own, "--", "own fit")):
        X = simulate(model, est.theta_, [0, 0], grid, t0=0.0, doses=[(0.0, 0, 1.0)])
        ax.semilogy(grid, X[:, 0] / est.theta_[3], style, label=label)
    ax.set_title(f"subject {subject.name}")
for ax in axes[1]:
    ax.set_xlabel("hours after the dose")
for ax in axes[:, 0]:
    ax.set_ylabel("indometacin (mcg/ml)")
axes[0, 0].legend()
fig.suptitle("Two-compartment model, combined error: pooled and per-subject fits")
fig.tight_layout()
