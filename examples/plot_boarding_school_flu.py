"""
Influenza in a boarding school, 1978: your own model, end to end
================================================================

763 boys, one index case; each day the number in bed and the number convalescent. A model
of your own (susceptible, in bed, convalescent) written as an :class:`sklode.ODEModel`, its
known initial state (762 susceptible, 1 ill on day 0) and the observation pattern (S is never
observed) given in the estimator's common vocabulary. AdjointODE integrates from day 0;
BCD-prox estimates the hidden S along with the rates (starting it from a guess); WENDy needs
every state observed and says so, naming the estimators that can.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
import torch

from sklode import AdjointODE, BCDProxODE, ODEModel, WENDyODE
from sklode.datasets import load_boarding_school_flu
from sklode.plotting import plot_fit


class SICR(ODEModel):
    """S -> I (in bed) -> C (convalescent) -> back in class, in a closed school of N boys."""

    state_names = ("S", "I", "C")
    param_names = ("beta", "gamma", "delta")
    default_theta = (1.5, 0.5, 0.5)
    N = 763.0

    def rhs(self, t, x, theta):
        susceptible, ill, convalescent = x[..., 0], x[..., 1], x[..., 2]
        beta, gamma, delta = theta
        new = beta * susceptible * ill / self.N
        return torch.stack([-new, new - gamma * ill, gamma * ill - delta * convalescent],
                           dim=-1)


t, Y = load_boarding_school_flu(return_X_y=True)
adjoint = AdjointODE(SICR(), observed=["I", "C"], x0=(762, 1, 0), estimate_x0=False, t0=0.0,
                     positive=True).fit(t, Y)
for name, value, se in zip(SICR.param_names, adjoint.theta_, adjoint.theta_stderr_):
    print(f"AdjointODE {name:>6} = {value:.3f} ± {se:.3f} per day")
print(f"basic reproduction number beta/gamma = {adjoint.theta_[0] / adjoint.theta_[1]:.2f}, "
      f"{1 / adjoint.theta_[1]:.2f} days in bed, R^2 = {adjoint.score(t, Y):.3f}")

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    bcd = BCDProxODE(SICR(), observed=["I", "C"], x0=(750, np.nan, np.nan), positive=True,
                     substeps=4).fit(t, Y)
print("BCD-prox theta =", np.round(bcd.theta_, 3), f"R^2 = {bcd.score(t, Y):.3f}",
      sorted({w.category.__name__ for w in caught}))
try:
    WENDyODE(SICR(), observed=["I", "C"]).fit(t, Y)
except ValueError as exc:
    print("WENDy:", exc)

axes = plot_fit(adjoint, t, Y, random_state=0)
axes[0].figure.suptitle("SICR fitted by AdjointODE, with the 95 % band of its parameters")
bcd_fit = bcd.predict(np.linspace(1, 14, 200))
for k, ax in enumerate(axes):
    ax.plot(np.linspace(1, 14, 200), bcd_fit[:, k], "--", label="BCDProxODE fit")
    ax.set_xlabel("day")
axes[1].legend(fontsize="small")
plt.show()
