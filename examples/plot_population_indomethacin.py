"""
Population model: indometacin in six volunteers, subjects that differ
======================================================================

Six volunteers received the same intravenous dose of indometacin (Kwan et al. 1976, shipped
with sklode). A pooled fit gives every subject the same rates; one fit per subject gives six
unrelated answers from eleven samples each. A nonlinear mixed-effects model says what both
miss: the population's typical parameters and how much subjects differ around them.

:class:`sklode.MixedEffectsODE` fits the two-compartment model with the elimination rate
``k10`` and the volume ``V`` varying between subjects (log-normal: ``k10_i = k10 *
exp(eta_i)``), an additive residual error, by nlme's algorithm; on these data it equals R's
``nlme`` to six digits (``benchmarks/results/population.md``). The figures: each subject's
data with its individual and the population prediction, the random effects, and a visual
predictive check.
"""

import matplotlib.pyplot as plt

from sklode import MixedEffectsODE
from sklode.datasets import load_indomethacin
from sklode.models import TwoCompartmentIV
from sklode.plotting import plot_individual_fits, plot_random_effects, plot_vpc

subjects = load_indomethacin().experiments  # one Experiment per volunteer, dose at 0 h

pop = MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10", "V"), x0=[0.0, 0.0],
                      t0=0.0).fit(subjects)
for name, value, se in zip(pop.model.param_names, pop.theta_, pop.theta_stderr_):
    print(f"{name:>4} = {value:.4f} (se {se:.4f})")
print("between-subject sd (log scale):",
      {name: round(float(sd), 3) for name, sd in zip(pop.random_names_, pop.random_sd_)})
print(f"residual sd {pop.sigma_[0]:.4f}; log L {-pop.neg_log_likelihood_:.3f}; "
      f"AIC {pop.aic_:.2f}")

# %%
# Does V need to vary? Drop it and compare the information criteria (nested models, the
# same likelihood).
k10_only = MixedEffectsODE(TwoCompartmentIV(error=None), random=("k10",), x0=[0.0, 0.0],
                           t0=0.0).fit(subjects)
print(f"AIC with random k10 and V: {pop.aic_:.2f}; with k10 alone: {k10_only.aic_:.2f}")

# %%
# Each subject: the individual prediction (its own empirical-Bayes random effects) follows
# its data; the population prediction is the typical subject.
axes = plot_individual_fits(pop, subjects, ncols=3)
for ax in axes:
    ax.set_yscale("log")
axes[0].figure.suptitle("Indometacin: individual and population predictions")

# %%
# The random effects, and a visual predictive check: the observed 5 %, 50 % and 95 %
# quantiles per sampling time against the bands of 200 studies simulated from the fit.
plot_random_effects(pop)
plot_vpc(pop, subjects, n_replicates=200, random_state=0)
plt.show()
