"""Every system the three papers use, written once as an :class:`ODEModel`.

The exact problems (true parameters, initial states, grids) are in :mod:`sklode.datasets`.
"""

import torch

from ._base import ODEModel

__all__ = [
    "LotkaVolterra",
    "FitzHughNagumo",
    "Rossler",
    "Lorenz96",
    "Lorenz63",
    "SEIRD",
    "LogisticGrowth",
    "FitzHughNagumoLinear",
    "HindmarshRose",
    "ProteinTransduction",
    "OralAbsorption",
    "TwoCompartmentIV",
]


class LotkaVolterra(ODEModel):
    """Predator-prey: ``x1' = a x1 - b x1 x2``, ``x2' = -c x2 + d x1 x2`` (seed 000, eq. 16).

    Linear in ``theta = (a, b, c, d)``.
    """

    state_names = ("prey", "predator")
    param_names = ("a", "b", "c", "d")
    default_theta = (1.0, 1.0, 1.0, 1.0)

    def rhs(self, t, x, theta):
        prey, pred = x[..., 0], x[..., 1]
        a, b, c, d = theta
        return torch.stack([a * prey - b * prey * pred, -c * pred + d * prey * pred], dim=-1)


class FitzHughNagumo(ODEModel):
    """FitzHugh-Nagumo neuron in the (a, b, c) form of seed 000, eq. 17.

    ``v' = c (v - v^3/3 + w)``, ``w' = -(v - a + b w) / c``. Not linear in ``c``.
    """

    state_names = ("v", "w")
    param_names = ("a", "b", "c")
    default_theta = (1.0, 1.0, 1.0)

    def rhs(self, t, x, theta):
        v, w = x[..., 0], x[..., 1]
        a, b, c = theta
        return torch.stack([c * (v - v**3 / 3.0 + w), -(v - a + b * w) / c], dim=-1)


class Rossler(ODEModel):
    """Rossler attractor: ``x' = -y - z``, ``y' = x + a y``, ``z' = b + z (x - c)`` (eq. 18)."""

    state_names = ("x", "y", "z")
    param_names = ("a", "b", "c")
    default_theta = (1.0, 1.0, 1.0)

    def rhs(self, t, x, theta):
        u, v, w = x[..., 0], x[..., 1], x[..., 2]
        a, b, c = theta
        return torch.stack([-v - w, u + a * v, b + w * (u - c)], dim=-1)


class Lorenz96(ODEModel):
    """Lorenz-96: ``x_i' = (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F`` with cyclic indices (eq. 19).

    Parameters
    ----------
    n_states : int, default=40
        Dimension ``d``.
    per_component_forcing : bool, default=False
        If True, one forcing ``F_i`` per component (``d`` parameters) instead of a shared ``F``.
    """

    default_theta = None

    def __init__(self, n_states=40, per_component_forcing=False):
        self.state_names = tuple(f"x{i + 1}" for i in range(int(n_states)))
        self.per_component_forcing = per_component_forcing
        if per_component_forcing:
            self.param_names = tuple(f"F{i + 1}" for i in range(int(n_states)))
        else:
            self.param_names = ("F",)

    def rhs(self, t, x, theta):
        advection = (torch.roll(x, -1, dims=-1) - torch.roll(x, 2, dims=-1)) * torch.roll(
            x, 1, dims=-1
        )
        return advection - x + theta


class Lorenz63(ODEModel):
    """Lorenz's 1963 convection model: ``x' = sigma (y - x)``, ``y' = x (rho - z) - y``,
    ``z' = x y - beta z``; chaotic at the classic ``(10, 28, 8/3)``.

    Linear in ``theta = (sigma, rho, beta)``.
    """

    state_names = ("x", "y", "z")
    param_names = ("sigma", "rho", "beta")
    default_theta = (10.0, 28.0, 8.0 / 3.0)

    def rhs(self, t, x, theta):
        u, v, w = x[..., 0], x[..., 1], x[..., 2]
        sigma, rho, beta = theta
        return torch.stack([sigma * (v - u), u * (rho - w) - v, u * v - beta * w], dim=-1)


class SEIRD(ODEModel):
    """SEIRD epidemic with a population constant ``N`` (seed 002, eq. 4).

    ``S' = -a S I / N``, ``E' = a S I / N - b E``, ``I' = b E - g I``, ``R' = (g - m) I``,
    ``D' = m I`` with ``theta = (alpha, beta, gamma, mu)``. Linear in ``theta``; the sum of
    the states is conserved.

    Parameters
    ----------
    N : float, default=1e5
        Total population.
    """

    state_names = ("S", "E", "I", "R", "D")
    param_names = ("alpha", "beta", "gamma", "mu")
    default_theta = (1.0, 1.0 / 7.0, 1.0 / 5.0, 1.0 / 70.0)

    def __init__(self, N=1e5):
        self.N = N

    def rhs(self, t, x, theta):
        S, E, I = x[..., 0], x[..., 1], x[..., 2]  # noqa: E741 - the epidemiologists' name
        alpha, beta, gamma, mu = theta
        infection = alpha * S * I / self.N
        return torch.stack(
            [-infection, infection - beta * E, beta * E - gamma * I, (gamma - mu) * I, mu * I],
            dim=-1,
        )


class LogisticGrowth(ODEModel):
    """Logistic growth in linear-coefficient form ``u' = w1 u + w2 u^2`` (WENDy paper)."""

    state_names = ("u",)
    param_names = ("w1", "w2")
    default_theta = (1.0, -1.0)

    def rhs(self, t, x, theta):
        return theta[0] * x + theta[1] * x**2


class FitzHughNagumoLinear(ODEModel):
    """FitzHugh-Nagumo in the WENDy paper's linear-coefficient form.

    ``v' = w1 v + w2 v^3 + w3 w``, ``w' = w4 v + w5 + w6 w``.
    """

    state_names = ("v", "w")
    param_names = ("w1", "w2", "w3", "w4", "w5", "w6")
    default_theta = (1.0, -1.0, 1.0, -1.0, 0.1, 0.1)

    def rhs(self, t, x, theta):
        v, w = x[..., 0], x[..., 1]
        return torch.stack(
            [
                theta[0] * v + theta[1] * v**3 + theta[2] * w,
                theta[3] * v + theta[4] + theta[5] * w,
            ],
            dim=-1,
        )


class HindmarshRose(ODEModel):
    """Hindmarsh-Rose neuron in the WENDy paper's linear-coefficient form.

    ``x' = w1 y + w2 x^3 + w3 x^2 + w4 z``, ``y' = w5 + w6 x^2 + w7 y``,
    ``z' = w8 x + w9 + w10 z``.
    """

    state_names = ("x", "y", "z")
    param_names = tuple(f"w{i}" for i in range(1, 11))
    default_theta = None

    def rhs(self, t, x, theta):
        u, v, w = x[..., 0], x[..., 1], x[..., 2]
        w1, w2, w3, w4, w5, w6, w7, w8, w9, w10 = theta
        return torch.stack(
            [
                w1 * v + w2 * u**3 + w3 * u**2 + w4 * w,
                w5 + w6 * u**2 + w7 * v,
                w8 * u + w9 + w10 * w,
            ],
            dim=-1,
        )


class ProteinTransduction(ODEModel):
    """Protein transduction benchmark (``biochemM1``) in the WENDy paper's form.

    States ``(S, dS, R, RS, Rpp)``; the Michaelis constant ``Km`` is fixed, not estimated:

    ``S' = w1 S + w2 S R + w3 RS``, ``dS' = w4 S``,
    ``R' = w5 S R + w6 RS + w7 Rpp/(Km + Rpp)``, ``RS' = w8 S R + w9 RS``,
    ``Rpp' = w10 RS + w11 Rpp/(Km + Rpp)``.

    Parameters
    ----------
    Km : float, default=0.3
        The Michaelis constant of the two saturating terms.
    """

    state_names = ("S", "dS", "R", "RS", "Rpp")
    param_names = tuple(f"w{i}" for i in range(1, 12))
    default_theta = None

    def __init__(self, Km=0.3):
        self.Km = Km

    def rhs(self, t, x, theta):
        S, R, RS, Rpp = x[..., 0], x[..., 2], x[..., 3], x[..., 4]
        w1, w2, w3, w4, w5, w6, w7, w8, w9, w10, w11 = theta
        saturation = Rpp / (self.Km + Rpp)
        return torch.stack(
            [
                w1 * S + w2 * S * R + w3 * RS,
                w4 * S,
                w5 * S * R + w6 * RS + w7 * saturation,
                w8 * S * R + w9 * RS,
                w10 * RS + w11 * saturation,
            ],
            dim=-1,
        )


class OralAbsorption(ODEModel):
    """One-compartment pharmacokinetics with first-order oral absorption.

    ``gut' = -ka gut``, ``concentration' = kv gut - ke concentration``: a dose in the gut is
    absorbed at rate ``ka`` into a central volume ``V`` and eliminated at rate ``ke``, with
    ``kv = ka / V`` so that the model is linear in ``theta = (ka, ke, kv)``. The initial
    state of a subject is ``(dose, 0)``; only the concentration is usually measured, so the
    gut amount is a hidden state. From ``(dose, 0)`` at ``t = 0`` the concentration is
    ``dose kv / (ka - ke) (exp(-ke t) - exp(-ka t))``.
    """

    state_names = ("gut", "concentration")
    param_names = ("ka", "ke", "kv")
    default_theta = (1.0, 0.1, 0.05)

    def rhs(self, t, x, theta):
        gut, concentration = x[..., 0], x[..., 1]
        ka, ke, kv = theta
        return torch.stack([-ka * gut, kv * gut - ke * concentration], dim=-1)


class TwoCompartmentIV(ODEModel):
    """Two-compartment pharmacokinetics after intravenous doses, read as a concentration.

    ``central' = -(k10 + k12) central + k21 peripheral``, ``peripheral' = k12 central - k21
    peripheral`` (amounts); the instrument reads the plasma concentration
    ``conc = central / V``. Doses go into ``"central"`` (``Experiment(doses=[(0.0,
    "central", amount)])``) and both compartments start empty. The noise is part of the
    model: ``sd = sigma_add + sigma_prop * conc`` (``error="combined"``), ``sigma_add``
    alone (``"additive"``) or ``sigma_prop * conc`` (``"proportional"``), its parameters
    fitted by maximum likelihood with the rates; ``error=None`` leaves the noise to the
    estimator's ``sigma`` and ``noise_kind``.

    Parameters
    ----------
    error : {"combined", "additive", "proportional"} or None, default="combined"
        The residual error model.

    Examples
    --------
    >>> from sklode.models import TwoCompartmentIV
    >>> TwoCompartmentIV().param_names
    ('k10', 'k12', 'k21', 'V', 'sigma_add', 'sigma_prop')
    >>> TwoCompartmentIV(error=None).observe_values(0.0, [[2.0, 0.0]], [0.2, 0.1, 0.1, 4.0])
    array([[0.5]])
    """

    state_names = ("central", "peripheral")
    observable_names = ("conc",)
    _ERROR_PARAMETERS = {"combined": ("sigma_add", "sigma_prop"), "additive": ("sigma_add",),
                         "proportional": ("sigma_prop",), None: ()}

    def __init__(self, error="combined"):
        if error not in self._ERROR_PARAMETERS:
            raise ValueError(f"error must be one of {list(self._ERROR_PARAMETERS)}, got "
                             f"{error!r}.")
        self.error = error
        self.param_names = ("k10", "k12", "k21", "V") + self._ERROR_PARAMETERS[error]
        self.default_theta = (0.5, 0.5, 0.5, 1.0) + (0.1,) * len(
            self._ERROR_PARAMETERS[error])
        if error is None:
            self.noise_sd = None

    def rhs(self, t, x, theta):
        """Two-compartment exchange and elimination (see the class docstring).

        Parameters
        ----------
        t : torch.Tensor
            Time.
        x : torch.Tensor of shape (..., 2)
            Central and peripheral amounts.
        theta : torch.Tensor of shape (n_params,)
            Parameters.

        Returns
        -------
        torch.Tensor of shape (..., 2)
            The derivatives of the two amounts.
        """
        k10, k12, k21 = theta[0], theta[1], theta[2]
        central, peripheral = x[..., 0], x[..., 1]
        return torch.stack([-(k10 + k12) * central + k21 * peripheral,
                            k12 * central - k21 * peripheral], dim=-1)

    def observe(self, t, x, theta):
        """The plasma concentration ``central / V``.

        Parameters
        ----------
        t : torch.Tensor
            Time.
        x : torch.Tensor of shape (..., 2)
            States.
        theta : torch.Tensor of shape (n_params,)
            Parameters.

        Returns
        -------
        torch.Tensor of shape (..., 1)
            The concentration.
        """
        return x[..., 0:1] / theta[3]

    def noise_sd(self, t, y, theta):
        """The residual error's standard deviation at the predicted concentration ``y``.

        Parameters
        ----------
        t : torch.Tensor
            Time.
        y : torch.Tensor of shape (..., 1)
            Predicted concentrations.
        theta : torch.Tensor of shape (n_params,)
            Parameters.

        Returns
        -------
        torch.Tensor of shape (..., 1)
            The standard deviation of each observation.
        """
        if self.error == "combined":
            return theta[4] + theta[5] * y
        if self.error == "additive":
            return theta[4] * torch.ones_like(y)
        return theta[4] * y
