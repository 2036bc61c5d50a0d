"""
BCD-prox iteration by iteration: Euler against Adams-Bashforth (seed 000, Figure 1)
====================================================================================

Seed 000's Figure 1 follows BCD-prox's outer iterations on the Rössler system at noise
variance 1, with the explicit Euler residual (``order=1``) against the three-step
Adams-Bashforth one (``order=3``, the default). Here with the paper's stopping rule
(``stop="paper"``) from the paper's initial guess, and sklode's Anderson acceleration (the
paper's plain iteration, ``acceleration="none"``, reaches the same estimates after 6,361 and
18,498 iterations, 49 s); ``theta_history_`` holds the parameters after every iteration, so
the parameter error is drawn exactly (the paper draws the prediction error). The
higher-order residual ends closer to the true parameters (0.06 against 0.15 relative
error): Euler's discretisation error is O(h).
"""

import matplotlib.pyplot as plt
import numpy as np

from sklode import BCDProxODE
from sklode.datasets import get_problem, make_trajectory

problem = get_problem("rossler")
data = make_trajectory("rossler", noise=1.0, random_state=0)  # std 1: variance 1
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained")
for order, name in ((1, "Euler"), (3, "Adams-Bashforth 3")):
    est = BCDProxODE(problem.model, theta0=problem.theta_init, order=order,
                     stop="paper", max_iter=20_000).fit(data.t, data.Y)
    error = np.linalg.norm(est.theta_history_ - problem.theta, axis=1) / np.linalg.norm(
        problem.theta)
    iterations = np.arange(1, est.n_iter_ + 1)
    axes[0].loglog(iterations, error, label=f"{name}: {est.n_iter_} iterations")
    axes[1].loglog(iterations, est.fidelity_history_, label=name)
    print(f"{name:<18} theta = {np.round(est.theta_, 3)}  relative error {error[-1]:.3f}  "
          f"after {est.n_iter_} iterations ({est.stop_reason_})")
axes[0].set(title="relative parameter error", xlabel="outer iteration")
axes[1].set(title="data misfit E(n)", xlabel="outer iteration")
axes[0].legend(fontsize="small")
fig.suptitle("BCD-prox on Rössler, noise variance 1 (seed 000, Figure 1)")
