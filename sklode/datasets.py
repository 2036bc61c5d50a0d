"""The three papers' problems under stable names, and seeded noisy observations of them.

Every figure in the tests, benchmarks and docs starts from :func:`get_problem` and
:func:`make_trajectory`, so each problem is defined exactly once.

Noise is always stated as a **standard deviation**, in one of three conventions:

``"absolute"``
    ``std = noise`` (seed 000's experiments; its reference code passed this number as a
    "variance", so its "sigma^2 = 0.5" runs really used std 0.5).
``"relative_rms"``
    ``std = noise * RMS(clean observed data)`` -- the WENDy paper's sigma_NR.
``"proportional"``
    ``std_i = noise * |x(t_i)|`` point by point -- seed 002's SEIRD convention.

Examples
--------
>>> from sklode.datasets import get_problem, make_trajectory
>>> problem = get_problem("lotka_volterra")
>>> problem.theta
array([2., 1., 4., 1.])
>>> data = make_trajectory("lotka_volterra", noise=0.5, random_state=0)
>>> data.t.shape, data.Y.shape, data.X.shape
((41,), (41, 2), (41, 2))
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from sklearn.utils import check_random_state

from ._names import PROBLEM_NAMES
from ._validation import NOISE_KINDS
from .exceptions import IntegrationError
from .experiment import Experiment, experiments_from_table
from .integrate import simulate
from .models import (
    SEIRD,
    FitzHughNagumo,
    FitzHughNagumoLinear,
    HindmarshRose,
    LogisticGrowth,
    Lorenz96,
    LotkaVolterra,
    ODEModel,
    OralAbsorption,
    ProteinTransduction,
    Rossler,
)

__all__ = ["Problem", "Trajectory", "get_problem", "list_problems", "load_boarding_school_flu",
           "load_hare_lynx", "load_indomethacin", "load_loblolly", "make_population",
           "make_trajectory", "NOISE_KINDS"]


# Clean trajectories are computed to this accuracy (the WENDy anchor re-simulated its data at
# 1e-10 and matched the shipped files to 8e-8): far below any noise level the papers use.
_CLEAN_RTOL = 1e-11
_CLEAN_ATOL = 1e-11


@dataclass(frozen=True)
class Problem:
    """One of the papers' estimation problems.

    Attributes
    ----------
    name : str
    model : ODEModel
    theta : ndarray of shape (n_params,)
        True parameters.
    x0 : ndarray of shape (n_states,)
        True state at ``t0``.
    t : ndarray of shape (n_times,)
        Observation times.
    t0 : float
        Time of ``x0`` (the first observation time except for ``seird``).
    observed : tuple of int
        Indices of the observed states (the columns of ``Y``).
    noise : float
        The paper's default noise level, as a standard deviation in ``noise_kind``.
    noise_kind : {"absolute", "relative_rms", "proportional"}
    theta_init : ndarray or None
        The paper's initial guess, when it fixes one.
    x0_init : ndarray or None
        The paper's initial guess of the initial state, when it estimates it.
    source : str
        Where the definition comes from.
    """

    name: str
    model: ODEModel
    theta: np.ndarray
    x0: np.ndarray
    t: np.ndarray
    t0: float
    observed: tuple
    noise: float
    noise_kind: str
    theta_init: np.ndarray | None = None
    x0_init: np.ndarray | None = None
    source: str = ""

    def clean_states(self):
        """All states at ``t`` without noise.

        Returns
        -------
        ndarray of shape (n_times, n_states)
            A copy of the cached clean trajectory.
        """
        return _clean_states(self.name).copy()


@dataclass(frozen=True)
class Trajectory:
    """Noisy observations of a :class:`Problem`.

    Attributes
    ----------
    t : ndarray of shape (n_times,)
        Observation times.
    Y : ndarray of shape (n_times, n_observed)
        Noisy observed states.
    X : ndarray of shape (n_times, n_states)
        Clean states (all of them, observed or not).
    noise_std : ndarray of shape (n_times, n_observed)
        The standard deviation used for each entry of ``Y``.
    problem : Problem
        The problem the data come from.
    """

    t: np.ndarray
    Y: np.ndarray
    X: np.ndarray
    noise_std: np.ndarray
    problem: Problem

    @property
    def X_observed(self):
        """Clean values of the observed states, shape ``(n_times, n_observed)``."""
        return self.X[:, list(self.problem.observed)]


def _arr(*values):
    return np.array(values, dtype=np.float64)


@functools.lru_cache(maxsize=None)
def _lorenz96_x0(n_states=40):
    """Seed 000's burn-in: start at 8 with 0.001 added to component d//2, run 50 time units.

    By classical Runge-Kutta with a fixed step of 0.001 in plain numpy, so that the problem is
    the same on every machine: over 50 time units of chaos (leading Lyapunov exponent ~1.7)
    any difference in an integrator's last bit grows to the attractor's size, and the state
    an adaptive scipy solver (DOP853 at 1e-10) reached changed with scipy's version (BCD-prox
    then read F = 7.9596 from one draw where it had read 8.0010 before)."""
    x = np.full(n_states, 8.0)
    x[n_states // 2] += 0.001
    step = 1e-3

    def field(x):  # Lorenz-96 with F = 8: (x_{i+1} - x_{i-2}) x_{i-1} - x_i + F
        return (np.roll(x, -1) - np.roll(x, 2)) * np.roll(x, 1) - x + 8.0

    for _ in range(50_000):
        k1 = field(x)
        k2 = field(x + step / 2 * k1)
        k3 = field(x + step / 2 * k2)
        k4 = field(x + step * k3)
        x = x + step / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    return x


# Seed 002's Examples 2-4 (its table of configurations): observation times,
# noise (proportional std), observed states, the seed's x0 guess (None: x0 known).
_SEIRD_EXAMPLES = {
    "seird": (np.arange(41.0, 54.0), 0.10, (2, 3, 4), None,
              "seed 002, Example 2 (Table 1): x0 known, I, R, D at t = 41..53"),
    "seird_e3": (np.arange(41.0, 56.0, 2.0), 0.10, (2, 3, 4),
                 _arr(91503, 4978, 1872, 1643, 132),
                 "seed 002, Example 3 (Table 2): x0 estimated, I, R, D at t = 41, 43, ..., 55"),
    "seird_e4a": (np.arange(41.0, 51.0), 0.05, (2, 3, 4), _arr(91645, 4782, 1844, 1605, 124),
                  "seed 002, Example 4 (Table 3, 5 %): x0 estimated, t = 41..50"),
    "seird_e4b": (np.arange(42.0, 57.0, 2.0), 0.15, (2, 3, 4),
                  _arr(90474, 5782, 1628, 987, 129),
                  "seed 002, Example 4 (Table 3, 15 %): x0 estimated, t = 42, 44, ..., 56"),
    "seird_e4c": (np.arange(42.0, 57.0, 2.0), 0.15, (1, 2, 3, 4),
                  _arr(90474, 5782, 1628, 987, 129),
                  "seed 002, Table 4: as seird_e4b with E also observed"),
}


def _build(name):
    if name == "lotka_volterra":
        return Problem(name, LotkaVolterra(), _arr(2, 1, 4, 1), _arr(5, 3),
                       np.linspace(0.0, 4.0, 41), 0.0, (0, 1), 0.5, "absolute",
                       theta_init=_arr(2, 2, 5, 2), source="seed 000, eq. 16")
    if name == "fitzhugh_nagumo":
        return Problem(name, FitzHughNagumo(), _arr(0.5, 0.3, 3.0), _arr(-1, 1),
                       np.linspace(0.0, 20.0, 401), 0.0, (0, 1), 0.5, "absolute",
                       theta_init=_arr(2, 2, 5), source="seed 000, eq. 17 and Fig. 2")
    if name == "rossler":
        return Problem(name, Rossler(), _arr(0.2, 0.2, 3.0), _arr(1.13293, -1.74953, 0.02207),
                       np.linspace(0.0, 20.0, 201), 0.0, (0, 1, 2), 0.5, "absolute",
                       theta_init=_arr(2, 2, 5), source="seed 000, eq. 18")
    if name == "lorenz96":
        return Problem(name, Lorenz96(40), _arr(8.0), _lorenz96_x0(40),
                       np.linspace(0.0, 2.0, 201), 0.0, tuple(range(40)), 0.5, "absolute",
                       theta_init=_arr(1000.0), source="seed 000, eq. 19 (d=40, burn-in x0)")
    if name == "seird" or name in _SEIRD_EXAMPLES:
        times, noise, observed, x0_init, source = _SEIRD_EXAMPLES[name]
        return Problem(name, SEIRD(1e5), _arr(1.0, 1 / 7, 1 / 5, 1 / 70),
                       _arr(91647, 4853, 1755, 1620, 125), times, 40.0, observed, noise,
                       "proportional", theta_init=_arr(1.4, 0.09, 0.2, 0.001),
                       x0_init=x0_init, source=source)
    if name == "wendy_logistic":
        return Problem(name, LogisticGrowth(), _arr(1, -1), _arr(0.01),
                       np.linspace(0.0, 10.0, 512), 0.0, (0,), 0.10, "relative_rms",
                       source="seed 001")
    if name == "wendy_lotka_volterra":
        return Problem(name, LotkaVolterra(), _arr(3, 1, 6, 1), _arr(1, 1),
                       np.linspace(0.0, 5.0, 1024), 0.0, (0, 1), 0.10, "relative_rms",
                       source="seed 001; WENDy's w = (3, -1, -6, 1) in LotkaVolterra's signs")
    if name == "wendy_fitzhugh_nagumo":
        return Problem(name, FitzHughNagumoLinear(),
                       _arr(3, -3, 3, -1 / 3, 17 / 150, 1 / 15), _arr(0, 0.1),
                       np.linspace(0.0, 25.0, 1024), 0.0, (0, 1), 0.10, "relative_rms",
                       source="seed 001")
    if name == "wendy_hindmarsh_rose":
        return Problem(name, HindmarshRose(),
                       _arr(10, -10, 30, -10, 10, -50, -10, 0.04, 0.0319, -0.01),
                       _arr(-1.3095, -7.5901, -0.2020), np.linspace(0.0, 9.99267, 1024), 0.0,
                       (0, 1, 2), 0.10, "relative_rms", source="seed 001")
    if name == "wendy_protein_transduction":
        return Problem(name, ProteinTransduction(0.3),
                       _arr(-0.07, -0.6, 0.35, 0.07, -0.6, 0.05, 0.017, 0.6, -0.35, 0.3, -0.017),
                       _arr(1, 0, 1, 0, 1), np.linspace(0.0, 25.0, 1024), 0.0,
                       (0, 1, 2, 3, 4), 0.10, "relative_rms",
                       source="seed 001 (biochemM1, Km = 0.3 fixed)")
    raise ValueError(f"Unknown problem {name!r}. Known problems: {', '.join(list_problems())}.")


_NAMES = PROBLEM_NAMES  # one list, readable without importing torch (the CLI)


def list_problems():
    """Names accepted by :func:`get_problem`.

    Returns
    -------
    list of str
        The problem names, in a stable order.
    """
    return list(_NAMES)


@functools.lru_cache(maxsize=None)
def _cached_problem(name):
    return _build(name)


def get_problem(name):
    """The problem called ``name`` (see :func:`list_problems`).

    Parameters
    ----------
    name : str
        A problem name.

    Returns
    -------
    Problem
        A fresh copy each time, so callers may modify its arrays.
    """
    p = _cached_problem(name)
    copy = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in vars(p).items()}
    return Problem(**copy)


def _simulate_clean(p):
    """The clean states by DOP853 (explicit, the reference data of every zoo problem), or by
    Radau where DOP853 fails: a stiff problem (a 1,000-cell diffusion grid) blows up under
    an explicit method."""
    options = dict(t0=p.t0, rtol=_CLEAN_RTOL,
                   atol=_CLEAN_ATOL * max(1.0, float(np.max(np.abs(p.x0)))))
    try:
        return simulate(p.model, p.theta, p.x0, p.t, integrator="DOP853", **options)
    except IntegrationError:
        return simulate(p.model, p.theta, p.x0, p.t, integrator="Radau", **options)


@functools.lru_cache(maxsize=None)
def _clean_states(name):
    X = _simulate_clean(_cached_problem(name))
    X.setflags(write=False)
    return X


def make_trajectory(problem, *, noise=None, noise_kind=None, distribution="gaussian",
                    random_state=None):
    """Seeded noisy observations of a problem.

    Parameters
    ----------
    problem : str or Problem
        A name from :func:`list_problems`, or a :class:`Problem` (its clean states are then
        simulated here).
    noise : float, optional
        Noise level as a standard deviation in ``noise_kind``; default: the problem's.
    noise_kind : {"absolute", "relative_rms", "proportional", "lognormal"}, optional
        Default: the problem's convention.
    distribution : {"gaussian", "laplace"}, default="gaussian"
        Laplace noise has the same standard deviation (scale ``std / sqrt(2)``).
    random_state : int, RandomState or None
        Seed for the noise.

    Returns
    -------
    Trajectory
        ``t``, noisy ``Y`` of the observed states, clean ``X`` of all states, the ``noise_std``
        used, and the ``problem``.
    """
    if isinstance(problem, str):
        p = get_problem(problem)
        X = _clean_states(problem).copy()
    elif isinstance(problem, Problem):
        p = problem
        X = _simulate_clean(p)
    else:
        raise TypeError(f"problem must be a name or a Problem, got {type(problem).__name__}.")
    noise = p.noise if noise is None else float(noise)
    noise_kind = p.noise_kind if noise_kind is None else noise_kind
    if noise < 0 or not np.isfinite(noise):
        raise ValueError(f"noise must be a finite standard deviation >= 0, got {noise}.")
    clean = X[:, list(p.observed)]
    if noise_kind == "absolute":
        std = np.full_like(clean, noise)
    elif noise_kind == "relative_rms":
        std = np.full_like(clean, noise * np.sqrt(np.mean(clean**2)))
    elif noise_kind in ("proportional", "lognormal"):
        std = noise * np.abs(clean)
    else:
        raise ValueError(f"noise_kind must be one of {NOISE_KINDS}, got {noise_kind!r}.")
    rng = check_random_state(random_state)
    if distribution == "gaussian":
        eps = rng.standard_normal(clean.shape)
    elif distribution == "laplace":
        eps = rng.laplace(0.0, 1.0 / np.sqrt(2.0), clean.shape)  # unit standard deviation
    else:
        raise ValueError(f"distribution must be 'gaussian' or 'laplace', got {distribution!r}.")
    if noise_kind == "lognormal":  # y = x exp(noise eps): positive, sd of log y = noise
        return Trajectory(t=p.t.copy(), Y=clean * np.exp(noise * eps), X=X, noise_std=std,
                          problem=p)
    return Trajectory(t=p.t.copy(), Y=clean + std * eps, X=X, noise_std=std, problem=p)


# ---------------------------------------------------------------------------------------------
# Real public data, shipped with the package (sklode/data/*.csv, sources in their headers)
# ---------------------------------------------------------------------------------------------
def _read_csv(name):
    """``(header comment, column names, rows of strings)`` of a shipped CSV."""
    from importlib.resources import files

    lines = files("sklode").joinpath("data", name).read_text().splitlines()
    comment = " ".join(line.lstrip("# ").strip() for line in lines if line.startswith("#"))
    rows = [line.split(",") for line in lines if line and not line.startswith("#")]
    return comment, rows[0], rows[1:]


def _real_data(name, time_column, value_columns, return_X_y, as_frame):
    from sklearn.utils import Bunch

    source, header, rows = _read_csv(name)
    t = np.array([float(r[header.index(time_column)]) for r in rows])
    Y = np.array([[float(r[header.index(c)]) for c in value_columns] for r in rows])
    if return_X_y:
        return t, Y
    frame = None
    if as_frame:
        import pandas as pd

        frame = pd.DataFrame({c: [r[header.index(c)] for r in rows] for c in header})
        for c in (time_column, *value_columns):
            frame[c] = pd.to_numeric(frame[c])
    return Bunch(t=t, Y=Y, time_column=time_column, columns=list(value_columns),
                 frame=frame, source=source)


def load_hare_lynx(*, return_X_y=False, as_frame=False):
    """Snowshoe hare and Canada lynx pelts traded with the Hudson's Bay Company, 1900-1920.

    21 yearly counts of each species, in thousands of pelts: the classic predator-prey
    cycle (about ten years long; lynx peak a year or two after hares), usually fitted with
    :class:`~sklode.models.LotkaVolterra` (hare = prey, lynx = predator). Pelts are a proxy
    for the populations, so the fit is a description of the cycle, not a census.

    Parameters
    ----------
    return_X_y : bool, default=False
        Return ``(t, Y)`` instead of a Bunch.
    as_frame : bool, default=False
        Also return the table as a pandas DataFrame (``frame``; needs pandas).

    Returns
    -------
    Bunch or (ndarray, ndarray)
        ``t`` (years, shape (21,)), ``Y`` (shape (21, 2): hare, lynx), ``columns``,
        ``time_column``, ``frame`` and ``source`` (the citation).

    Examples
    --------
    >>> from sklode.datasets import load_hare_lynx
    >>> data = load_hare_lynx()
    >>> data.t[:3], data.Y[:3, 0]
    (array([1900., 1901., 1902.]), array([30. , 47.2, 70.2]))
    >>> data.columns
    ['hare', 'lynx']
    """
    return _real_data("hare_lynx.csv", "year", ("hare", "lynx"), return_X_y, as_frame)


def load_boarding_school_flu(*, return_X_y=False, as_frame=False):
    """Influenza in an English boys' boarding school, 22 January - 4 February 1978.

    763 boys, one index case; each day the number confined to bed and the number
    convalescent (out of bed, not yet back in class). The closed population makes it the
    standard first fit of an SIR-type model (about 1.7 new infections per infectious boy per
    day, 2 days in bed); 512 boys were ill in all.

    Parameters
    ----------
    return_X_y : bool, default=False
        Return ``(t, Y)`` instead of a Bunch.
    as_frame : bool, default=False
        Also return the table, with its dates, as a pandas DataFrame (needs pandas).

    Returns
    -------
    Bunch or (ndarray, ndarray)
        ``t`` (day 1-14, shape (14,)), ``Y`` (shape (14, 2): in bed, convalescent),
        ``columns``, ``time_column``, ``frame`` and ``source`` (the citation).

    Examples
    --------
    >>> from sklode.datasets import load_boarding_school_flu
    >>> t, Y = load_boarding_school_flu(return_X_y=True)
    >>> int(Y[:, 0].max()), int(t[Y[:, 0].argmax()])
    (298, 6)
    """
    return _real_data("boarding_school_flu.csv", "day", ("in_bed", "convalescent"),
                      return_X_y, as_frame)


def load_indomethacin(*, as_frame=False, dose=1.0):
    """Plasma indometacin after one intravenous injection: six volunteers, 11 samples each.

    Concentrations (mcg/ml) from 0.25 to 8 h after the same intravenous dose (Kwan et al.
    1976, as distributed in R's ``datasets``); the classic multi-subject data set of
    nonlinear mixed-effects modelling (Pinheiro and Bates 2000). The source does not give the
    dose in the table, so it is given here as ``dose`` units into the central compartment
    at 0 h: volumes are then per unit of dose.

    Parameters
    ----------
    as_frame : bool, default=False
        Also return the long table as a pandas DataFrame (``frame``; needs pandas).
    dose : float, default=1.0
        The bolus put in each subject's ``experiments`` (state ``"central"``).

    Returns
    -------
    Bunch
        ``experiments`` (six :class:`~sklode.Experiment`, one per subject, named 1-6, each
        with its dose at 0 h), ``table`` (a dict of the long table's columns ``subject``,
        ``time``, ``conc``), ``frame`` and ``source``.

    Examples
    --------
    >>> from sklode.datasets import load_indomethacin
    >>> data = load_indomethacin()
    >>> len(data.experiments), data.experiments[0].doses
    (6, [(0.0, 'central', 1.0)])
    """
    from sklearn.utils import Bunch

    source, header, rows = _read_csv("indomethacin.csv")
    table = {"subject": np.array([int(r[0]) for r in rows]),
             "time": np.array([float(r[1]) for r in rows]),
             "conc": np.array([float(r[2]) for r in rows])}
    doses = {"subject": np.arange(1, 7), "time": np.zeros(6), "state": ["central"] * 6,
             "amount": np.full(6, float(dose))}
    experiments = experiments_from_table(table, time="time", experiment="subject",
                                         values=["conc"], doses=doses, t0=0.0)
    frame = None
    if as_frame:
        import pandas as pd

        frame = pd.DataFrame(table)
    return Bunch(experiments=experiments, table=table, frame=frame, source=source)


def load_loblolly(*, as_frame=False):
    """Heights of 14 loblolly pines at ages 3 to 25 years: a growth study, one experiment per
    tree.

    Kung (1986), as distributed in R's ``datasets`` (``Loblolly``); six heights (ft) per tree
    at the same ages, so a model's shape can be judged on all trees together
    (:class:`~sklode.exceptions.PoorFitWarning` when residuals miss every tree the same way
    at the same ages), though each tree alone is too short for a noise estimate.

    Parameters
    ----------
    as_frame : bool, default=False
        Also return the long table as a pandas DataFrame (``frame``; needs pandas).

    Returns
    -------
    Bunch
        ``experiments`` (14 :class:`~sklode.Experiment`, named by seed source, times in
        years, one column ``height``), ``table`` (a dict of the columns ``seed``, ``age``,
        ``height``), ``frame`` and ``source``.

    Examples
    --------
    >>> from sklode.datasets import load_loblolly
    >>> data = load_loblolly()
    >>> len(data.experiments), data.experiments[0].t.tolist()
    (14, [3.0, 5.0, 10.0, 15.0, 20.0, 25.0])
    """
    from sklearn.utils import Bunch

    source, header, rows = _read_csv("loblolly.csv")
    table = {"seed": np.array([int(r[0]) for r in rows]),
             "age": np.array([float(r[1]) for r in rows]),
             "height": np.array([float(r[2]) for r in rows])}
    experiments = experiments_from_table(table, time="age", experiment="seed",
                                         values=["height"])
    frame = None
    if as_frame:
        import pandas as pd

        frame = pd.DataFrame(table)
    return Bunch(experiments=experiments, table=table, frame=frame, source=source)


def make_population(n_subjects=50, *, theta=(1.0, 0.1, 0.05), random=("ka", "ke"),
                    omega_sd=(0.4, 0.25), sigma=0.1, times=(0.5, 1, 2, 4, 6, 8, 12, 24),
                    dose=100.0, random_state=None):
    """A simulated pharmacokinetic population with known parameters, for population fits.

    Each subject takes one oral ``dose`` into the gut at 0 h
    (:class:`~sklode.models.OralAbsorption`, both compartments empty before it); its
    ``random`` parameters are ``theta * exp(eta)`` with ``eta ~ N(0, diag(omega_sd^2))``;
    its concentration is sampled at ``times`` with additive normal noise of standard
    deviation ``sigma``.

    Parameters
    ----------
    n_subjects : int, default=50
        Number of subjects.
    theta : sequence of 3 floats, default=(1.0, 0.1, 0.05)
        Population ``(ka, ke, kv)``.
    random : sequence of str, default=("ka", "ke")
        The parameters that vary between subjects.
    omega_sd : sequence of float, default=(0.4, 0.25)
        Between-subject standard deviations (log scale), one per random parameter.
    sigma : float, default=0.1
        Standard deviation of the additive measurement noise.
    times : sequence of float, default=(0.5, 1, 2, 4, 6, 8, 12, 24)
        Sampling times (h) after the dose.
    dose : float, default=100.0
        The oral dose, into the gut at 0 h.
    random_state : int, RandomState or None
        Seed of the random effects and the noise.

    Returns
    -------
    Bunch
        ``experiments`` (one :class:`~sklode.Experiment` per subject, named 0, 1, ...,
        observing ``"concentration"``), ``model``, ``theta``, ``random``, ``omega_sd``,
        ``sigma``, ``etas`` (n_subjects, n_random) and ``individual_theta``.

    Examples
    --------
    >>> from sklode.datasets import make_population
    >>> pop = make_population(8, random_state=0)
    >>> len(pop.experiments), pop.experiments[0].doses, pop.etas.shape
    (8, [(0.0, 'gut', 100.0)], (8, 2))
    """
    from sklearn.utils import Bunch, check_random_state

    model = OralAbsorption()
    rng = check_random_state(random_state)
    theta = np.asarray(theta, dtype=np.float64)
    omega_sd = np.asarray(omega_sd, dtype=np.float64)
    index = [model.param_names.index(name) for name in random]
    t = np.asarray(times, dtype=np.float64)
    etas = rng.standard_normal((n_subjects, len(index))) * omega_sd
    experiments, individual = [], []
    for i in range(n_subjects):
        th = theta.copy()
        th[index] *= np.exp(etas[i])
        X = simulate(model, th, [0.0, 0.0], t, t0=0.0, doses=[(0.0, 0, float(dose))],
                     rtol=_CLEAN_RTOL, atol=_CLEAN_ATOL)
        Y = X[:, 1:] + sigma * rng.standard_normal((t.size, 1))
        experiments.append(Experiment(t, Y, x0=[0.0, 0.0], t0=0.0,
                                      doses=[(0.0, "gut", float(dose))], name=i))
        individual.append(th)
    return Bunch(experiments=experiments, model=model, theta=theta, random=tuple(random),
                 omega_sd=omega_sd, sigma=float(sigma), etas=etas,
                 individual_theta=np.array(individual))
