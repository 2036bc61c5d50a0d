"""The model of the README's ``sklode fit`` example: S -> I (in bed) -> C (convalescent) in
the 763 boys of the 1978 boarding-school outbreak (``docs/data/flu.csv``)."""

import torch

from sklode import ODEModel


class SICR(ODEModel):
    state_names = ("S", "I", "C")
    param_names = ("beta", "gamma", "delta")
    default_theta = (1.5, 0.5, 0.5)

    def rhs(self, t, x, theta):
        new = theta[0] * x[..., 0] * x[..., 1] / 763.0
        return torch.stack([-new, new - theta[1] * x[..., 1],
                            theta[1] * x[..., 1] - theta[2] * x[..., 2]], dim=-1)
