"""
Hares and lynx, 1900-1920: three estimators on real data
========================================================

The Hudson's Bay Company's pelt counts (thousands, one per year) are the classic
predator-prey cycle. Lotka-Volterra fitted by the three methods: WENDy and AdjointODE
describe the cycle; BCD-prox, whose multistep residual needs several samples per time scale
of the dynamics, says that one sample a year is too coarse for it (``PoorFitWarning``) and
fits it once ``substeps=4`` puts grid times between the years.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np

from sklode import AdjointODE, BCDProxODE, WENDyODE
from sklode.datasets import load_hare_lynx
from sklode.models import LotkaVolterra

data = load_hare_lynx()
t = data.t - 1900  # years since 1900
guess = (0.5, 0.02, 0.8, 0.02)  # growth ~0.5/yr, a predator-prey encounter rate ~1/50

estimators = {
    "BCD-prox (yearly grid)": BCDProxODE(LotkaVolterra(), theta0=guess, positive=True),
    "BCD-prox, substeps=4": BCDProxODE(LotkaVolterra(), theta0=guess, positive=True,
                                       substeps=4),
    "WENDy": WENDyODE(LotkaVolterra(), positive=True),
    "AdjointODE (init=bcdprox)": AdjointODE(LotkaVolterra(), positive=True, init="bcdprox"),
}
times = np.linspace(0, 20, 400)
fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), layout="constrained", sharex=True)
for name, est in estimators.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est.fit(t, data.Y)
    said = sorted({w.category.__name__ for w in caught})
    a, b, c, d = est.theta_
    print(f"{name:<27} a={a:.3f} b={b:.4f} c={c:.3f} d={d:.4f}  R^2={est.score(t, data.Y):.3f}"
          f"  period {2 * np.pi / np.sqrt(a * c):.1f} yr  {', '.join(said)}")
    fitted = est.predict(times)
    for k in range(2):
        axes[k].plot(1900 + times, fitted[:, k], label=name)
for k, column in enumerate(data.columns):
    axes[k].plot(data.t, data.Y[:, k], "ko", ms=4, label="pelts")
    axes[k].set_title(f"{column} (thousands of pelts)")
    axes[k].set_xlabel("year")
axes[1].legend(fontsize="small")
fig.suptitle("Lotka-Volterra fitted to the Hudson's Bay Company records")
