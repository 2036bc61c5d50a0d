"""A user-written model for the real data of ``sklode.datasets.load_boarding_school_flu``,
shared by the tests (and copied to a file of its own by the command-line tests)."""

import torch

from sklode import ODEModel


class SICR(ODEModel):
    """S -> I (in bed) -> C (convalescent) in the 763-boy school."""

    state_names = ("S", "I", "C")
    param_names = ("beta", "gamma", "delta")
    default_theta = (1.5, 0.5, 0.5)

    def rhs(self, t, x, theta):
        new = theta[0] * x[..., 0] * x[..., 1] / 763.0
        return torch.stack([-new, new - theta[1] * x[..., 1],
                            theta[1] * x[..., 1] - theta[2] * x[..., 2]], dim=-1)
