"""
A problem of the PEtab benchmark collection, end to end: COVID-19 in New York and California
=============================================================================================

``Bertozzi_PNAS2020`` (shipped with sklode, BSD-3-Clause) is an SIR model in SBML with
PEtab tables: two conditions (the two states) that set the population and point the
model's R0, gamma and I(0) at each state's own estimated parameters, an observable (the
infected count) with a per-condition noise parameter, log10-scaled parameters with bounds.
:func:`sklode.petab.load` turns it into a generated torch model and two
:class:`~sklode.Experiment`; its negative log-likelihood at the nominal parameters is
AMICI's to 6e-11 (``benchmarks/results/petab.md``). A multi-start AdjointODE with starts
drawn in the bounds on the log scale then fits it, and the fitted values go back into a
PEtab parameter table.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np

from sklode import petab

problem = petab.load(petab.example_path("Bertozzi_PNAS2020"))
print(problem)
print("estimated:", ", ".join(problem.parameter_names))
print(f"-log L at the nominal parameters: {problem.neg_log_likelihood():.6f}")

# %%
# Fit from five starts drawn uniformly in the bounds on each parameter's scale. R0 and
# gamma of one state are barely separable from 11 weekly counts: the identifiability
# warning says which combination the data determine.
est = problem.estimator(n_starts=5, random_state=0)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    est.fit(problem.experiments)
for w in caught:
    print(f"{w.category.__name__}: {str(w.message)[:160]}...")
print(f"best -log L {est.neg_log_likelihood_:.6f}; {est.n_starts_at_best_} of 5 starts "
      "within 0.1 of it")

table = problem.parameter_table_of(est)  # petab.v1.write_parameter_df(table, "fitted.tsv")
print(table[["parameterScale", "lowerBound", "upperBound", "nominalValue"]])

# %%
# The data and the fitted observable of each condition.
fig, axes = plt.subplots(1, 2, figsize=(9, 3.5), sharey=False)
for ax, experiment in zip(axes, problem.experiments):
    prediction = est.predict(experiment)
    ax.plot(experiment.t, experiment.Y[:, 0], "o", label="reported infected")
    ax.plot(experiment.t, prediction[:, 0], "-", label="fit")
    ax.set_title(experiment.name)
    ax.set_xlabel("day")
axes[0].set_ylabel("infected")
axes[0].legend()
fig.tight_layout()
plt.show()
