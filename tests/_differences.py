"""Central differences of a forward solve's states, the reference the sensitivity tests
compare with."""

import numpy as np

from sklode.outputerror._sensitivity import forward_trajectory


def state_differences(model, theta, x0, t0, times, h=1e-6, **options):
    """``d states(times) / d [x0, theta]`` by central differences (steps ``h``, relative
    above 1); ``options`` as :func:`forward_trajectory`'s (the integrator, tolerances,
    doses)."""
    x0, theta = np.asarray(x0, dtype=float), np.asarray(theta, dtype=float)
    z, n = np.concatenate([x0, theta]), x0.size
    columns = []
    for j in range(z.size):
        step = h * max(1.0, abs(z[j]))
        up, down = z.copy(), z.copy()
        up[j] += step
        down[j] -= step
        columns.append((forward_trajectory(model, up[n:], up[:n], t0, times, **options).states
                        - forward_trajectory(model, down[n:], down[:n], t0, times,
                                             **options).states) / (2 * step))
    return np.stack(columns, axis=-1)
