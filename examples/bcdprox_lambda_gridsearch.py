"""
BCD-prox's λ sweep with GridSearchCV (seed 000, Figure 2)
=========================================================

Seed 000's Figure 2 with scikit-learn: theta against the proximal weight lambda.

GridSearchCV sweeps ``lam``; scorers that return the fitted parameters put theta for every
lambda into ``cv_results_``. The single "split" trains and scores on the whole trajectory, as
the paper's figure does; swap in ``TimeSeriesSplit(5)`` to see held-out forecasting skill.

    python examples/bcdprox_lambda_gridsearch.py
"""

import numpy as np
from sklearn.model_selection import GridSearchCV

from sklode import BCDProxODE
from sklode.datasets import make_trajectory

data = make_trajectory("rossler", random_state=0)  # noise std 0.5, the paper's setting
problem = data.problem
everything = np.arange(data.t.size)


def parameter_scorer(k):
    return lambda est, t, Y: est.theta_[k]


scoring = {"r2": "r2"}
scoring.update({name: parameter_scorer(k) for k, name in enumerate(problem.model.param_names)})
search = GridSearchCV(
    BCDProxODE(problem.model, theta0=problem.theta_init, tol=1e-7),
    {"lam": [1.0, 3.0, 5.0, 7.0, 10.0, 20.0, 1000.0]},
    cv=[(everything, everything)], scoring=scoring, refit=False, n_jobs=2,
)
search.fit(data.t, data.Y)

res = search.cv_results_
print(f"{'lambda':>8} " + " ".join(f"{n:>8}" for n in problem.model.param_names)
      + f" {'R^2':>7} {'fit s':>7}")
for i, lam in enumerate(res["param_lam"]):
    thetas = " ".join(f"{res[f'mean_test_{n}'][i]:8.4f}" for n in problem.model.param_names)
    print(f"{lam:8g} {thetas} {res['mean_test_r2'][i]:7.4f} {res['mean_fit_time'][i]:7.2f}")
print(f"{'truth':>8} " + " ".join(f"{v:8.4f}" for v in problem.theta))
lams = [1, 3, 5, 7, 10, 20]
thetas = np.array([[res[f"mean_test_{n}"][i] for n in problem.model.param_names]
                   for i, lam in enumerate(res["param_lam"]) if lam in lams])
spread = np.max(np.abs(thetas - thetas.mean(0)) / np.abs(thetas.mean(0)))
print(f"largest relative deviation of theta over lambda = 1..20: {spread:.2%}")
