"""A reaction network whose Jacobian no order of the states makes banded, for the compiled
driver's sparse LU (KLU): used by tests/test_native.py and by build_tools/check_wheel.py,
which checks an installed wheel (so this module needs only torch and sklode, not pytest)."""

import torch

from sklode import ODEModel

__all__ = ["Hub"]


class Hub(ODEModel):
    """A receptor (state 0) that every ligand binds and releases, each ligand also made and
    degraded: ``df/dx`` is an arrow (a full first row and column and the diagonal), which no
    order of the states makes a narrow band, and has ``3 n - 2`` nonzeros: sparse. Stiff
    (binding at ``k_on`` = 1e3 against turnover at 1)."""

    param_names = ("k_on", "k_off", "make", "lose")
    default_theta = (1e3, 5.0, 1.0, 1.0)

    def __init__(self, n_states=80):
        self.state_names = ("receptor",) + tuple(f"ligand{i}" for i in range(1, n_states))

    def rhs(self, t, x, theta):
        k_on, k_off, make, lose = theta
        receptor, ligands = x[..., :1], x[..., 1:]
        weights = torch.linspace(0.5, 1.5, ligands.shape[-1], dtype=x.dtype)
        bound = k_on * weights * receptor * ligands - k_off * (1.0 - ligands)
        d_ligands = -bound + make * weights - lose * ligands
        d_receptor = -bound.mean(dim=-1, keepdim=True) + make - lose * receptor
        return torch.cat([d_receptor, d_ligands], dim=-1)
