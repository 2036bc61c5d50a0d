"""Central differences of smooth functions of the population unknowns (arrays in, arrays
out): the gradient and Hessian where no derivative is written out, and derivatives of maps
such as the random effects' standard deviations."""

from __future__ import annotations

import numpy as np

__all__ = ["central_differences", "second_differences"]


def central_differences(fun, x, step):
    """``d fun / d x_k`` for each ``k`` by central differences: shape ``(n,) + fun's``."""
    out = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = step
        out.append((np.asarray(fun(x + e)) - np.asarray(fun(x - e))) / (2 * step))
    return np.array(out)


def second_differences(fun, x, step):
    """The Hessian of a scalar ``fun`` by central second differences (symmetric)."""
    n = x.size
    H = np.empty((n, n))
    f0 = fun(x)
    for i in range(n):
        ei = np.zeros(n)
        ei[i] = step
        H[i, i] = (fun(x + ei) - 2 * f0 + fun(x - ei)) / step ** 2
        for j in range(i):
            ej = np.zeros(n)
            ej[j] = step
            H[i, j] = H[j, i] = (fun(x + ei + ej) - fun(x + ei - ej) - fun(x - ei + ej)
                                 + fun(x - ei - ej)) / (4 * step * step)
    return H
