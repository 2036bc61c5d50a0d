"""The one registry of sklode's methods: name -> estimator, and how a named problem poses it.

:func:`sklode.compare.compare`, the ``sklode`` command, the benchmarks and the tests all make
their estimators here, so a problem is posed the same way everywhere (the SEIRD problems'
weights, prior and conservation penalty for AdjointODE, for instance) and a new method shows up
everywhere once it is added to :data:`METHODS`.

>>> from sklode.registry import METHODS
>>> list(METHODS)
['bcdprox', 'wendy', 'adjoint']
>>> est = METHODS["adjoint"].make("seird")
>>> est.noise_kind, est.observed
('proportional', (2, 3, 4))
>>> METHODS["wendy"].why_not("seird")
'wendy needs every state observed; seird observes (2, 3, 4)'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from .adjoint import AdjointODE
from .bcdprox import BCDProxODE
from .datasets import Problem, get_problem
from .models import SEIRD
from .wendy import WENDyODE

__all__ = ["METHODS", "Method", "get_method"]


def _as_problem(problem):
    return get_problem(problem) if isinstance(problem, str) else problem


def _pose_plainly(problem):
    """Methods on the data grid: the paper's initial guess, the rest from the data."""
    return {"theta0": None if problem.theta_init is None else problem.theta_init.copy()}


def _pose_adjoint(problem):
    """AdjointODE's settings for ``problem``, as its paper poses it.

    For the SEIRD examples this fills the seed's unstated quantities as the adjoint anchor
    does: weights ``noise * |y_i|``; when x0 is estimated, the prior
    ``s0 = round((N / N_hat) x0_init)`` with ``sigma0 = noise * s0`` and the penalty
    ``k = 1e-4`` on ``S + E + I + R + D = N``. Other problems: the paper's initial guesses,
    ``t0`` and observed states, x0 started from the first observation (or from the true
    initial state for hidden states, which the data cannot start).
    """
    p = problem
    settings = {"theta0": None if p.theta_init is None else p.theta_init.copy(),
                "t0": float(p.t0), "observed": tuple(p.observed)}
    if p.noise_kind == "proportional":
        settings.update(sigma=p.noise, noise_kind="proportional")
    if isinstance(p.model, SEIRD) and p.x0 is not None:
        if p.x0_init is None:
            settings.update(x0=p.x0.copy(), estimate_x0=False)
        else:
            N = float(p.model.N)
            s0 = np.round(N / p.x0_init.sum() * p.x0_init)
            settings.update(x0=p.x0_init.copy(), x0_prior=s0, x0_prior_sigma=p.noise * s0,
                            invariant=(np.ones(p.model.n_states), N), invariant_weight=1e-4)
    elif p.x0_init is not None:
        settings["x0"] = p.x0_init.copy()
    elif len(p.observed) < p.model.n_states and p.x0 is not None:
        settings["x0"] = p.x0.copy()  # unobserved states need a start: the true one
    return settings


@dataclass(frozen=True)
class Method:
    """One method: its estimator, what it needs of the data, and how it poses a problem.

    Attributes
    ----------
    name : str
        The short name used by ``compare``, the command line and the benchmarks.
    estimator : type
        The estimator class.
    pose : callable
        ``pose(problem) -> dict`` of constructor keyword arguments for a named problem.
    fits_hidden_states : bool
        Whether the method fits states that are never observed.
    initial_state_at_data : bool
        Whether the method is posed on the named problems with its initial state at the
        first observation time (the methods on the data grid: they take an earlier ``t0``
        from users' data, by an unobserved node or by shooting, but the papers' problems
        are compared where the papers fitted them).
    """

    name: str
    estimator: type
    pose: Callable[[Problem], dict]
    fits_hidden_states: bool
    initial_state_at_data: bool = False

    def settings(self, problem, theta0=None):
        """Constructor keyword arguments posing ``problem`` (``theta0`` overrides its guess).

        Parameters
        ----------
        problem : str or Problem
            A named problem or a :class:`~sklode.datasets.Problem`.
        theta0 : array-like, optional
            Initial guess replacing the problem's.

        Returns
        -------
        dict
            Keyword arguments for the estimator's constructor (the model excluded).
        """
        settings = self.pose(_as_problem(problem))
        if theta0 is not None:
            settings["theta0"] = np.asarray(theta0, dtype=np.float64).copy()
        return settings

    def make(self, problem, theta0=None, **overrides):
        """The estimator configured for ``problem``.

        Parameters
        ----------
        problem : str or Problem
            A named problem or a :class:`~sklode.datasets.Problem`.
        theta0 : array-like, optional
            Initial guess; default the problem's ``theta_init`` (or the model's guess).
        **overrides
            Further constructor arguments.

        Returns
        -------
        estimator
            An unfitted estimator.
        """
        p = _as_problem(problem)
        return self.estimator(p.model, **{**self.settings(p, theta0), **overrides})

    def why_not(self, problem):
        """Why this method cannot fit ``problem``, or None when it can.

        Parameters
        ----------
        problem : str or Problem
            A named problem or a :class:`~sklode.datasets.Problem`.

        Returns
        -------
        str or None
            The reason, in words.
        """
        p = _as_problem(problem)
        if not self.fits_hidden_states and len(p.observed) < p.model.n_states:
            return f"{self.name} needs every state observed; {p.name} observes {p.observed}"
        if self.initial_state_at_data and p.t0 < p.t[0]:
            return (f"{self.name} is compared on the named problems with its initial state "
                    f"at the first observation time; {p.name} starts at t0 = {p.t0:g}, "
                    f"before its first observation {p.t[0]:g}")
        needed = self.make(p)._min_samples()
        if p.t.size < needed:
            return f"{self.name} needs at least {needed} time points; {p.name} has {p.t.size}"
        return None


#: Every method, in the default order of comparisons.
METHODS = {
    "bcdprox": Method("bcdprox", BCDProxODE, _pose_plainly, fits_hidden_states=True,
                      initial_state_at_data=True),
    "wendy": Method("wendy", WENDyODE, _pose_plainly, fits_hidden_states=False,
                    initial_state_at_data=True),
    "adjoint": Method("adjoint", AdjointODE, _pose_adjoint, fits_hidden_states=True),
}


def get_method(name):
    """The :class:`Method` called ``name``, or a ValueError listing the names.

    Parameters
    ----------
    name : str
        One of ``METHODS``.

    Returns
    -------
    Method
        The registry entry.
    """
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ValueError(f"Unknown method {name!r}; choose from {tuple(METHODS)}.") from None
