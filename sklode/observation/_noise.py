"""The noise distributions: what each says of an observation ``y`` of a predicted ``h`` with
scale ``s``.

Each is one small frozen object with its density (``-log L`` of every observation, PEtab's
convention with every constant), the error its residual rows are written in, what those rows
leave out of ``-log L`` (:meth:`without_constant`), and the maximum-likelihood scale of given
errors. :class:`~sklode.observation._observation.Observation` builds its residual rows and their
derivatives from the two attributes every distribution declares: ``log_base`` (0: the error is
``y - h``; otherwise ``log_b y - log_b h``, ``log_base`` being ``ln b``) and ``rows``
(``"squared"``: rows ``e / s`` whose squares sum to the Gaussian part; ``"absolute"``: rows
``sign(e) sqrt(2 |e| / s)`` whose squares sum to ``|e| / s``).

Adding a distribution is one class here and one entry in :data:`NOISE_DISTRIBUTIONS`; the noise
kinds that read it are :data:`sklode._validation.NOISE_KINDS`.

>>> import numpy as np
>>> from sklode.observation._noise import NOISE_DISTRIBUTIONS
>>> laplace = NOISE_DISTRIBUTIONS["laplace"]
>>> float(laplace.neg_log_likelihood(np.array([1.0]), np.array([0.5]), np.array([0.5]))[0])
1.0
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._validation import DISTRIBUTIONS

__all__ = ["HALF_LOG_2PI", "NOISE_DISTRIBUTIONS", "Laplace", "LogNormal", "Normal",
           "distribution_of", "neg_log_likelihood_terms"]

HALF_LOG_2PI = 0.5 * np.log(2.0 * np.pi)


@dataclass(frozen=True)
class Normal:
    """``y = h + s eps``, ``eps`` standard normal: ``-log L = log s + log(2 pi)/2 + e^2/2``
    with ``e = (y - h) / s``."""

    name: str = "normal"
    log_base: float = 0.0
    rows: str = "squared"

    @property
    def on_log_scale(self):
        """Whether the error is on a log scale (the data must then be positive)."""
        return self.log_base > 0

    def errors(self, y, h):
        """The error on this distribution's scale, ``y - h``."""
        return y - h

    def neg_log_likelihood(self, y, h, s):
        """``-log L`` of each observation (NaN inputs give NaN)."""
        return np.log(s) + HALF_LOG_2PI + 0.5 * ((y - h) / s) ** 2

    def without_constant(self, per, y):
        """``per`` less the part of ``-log L`` that no residual row carries (here
        ``log(2 pi)/2``)."""
        return per - HALF_LOG_2PI

    def profiled_scale(self, errors, shapes):
        """The maximum-likelihood ``c`` of scales ``s = c * shapes`` for these errors."""
        return float(np.sqrt(np.mean((errors / shapes) ** 2)))


@dataclass(frozen=True)
class LogNormal(Normal):
    """``log_b y = log_b h + s eps`` (``log_base`` is ``ln b``): normal on the log scale, with
    the density's Jacobian ``log(y ln b)`` in ``-log L``."""

    name: str = "lognormal"
    log_base: float = 1.0

    def errors(self, y, h):
        """The error on the log scale, ``(ln y - ln h) / ln b`` (NaN or inf where ``y`` or
        ``h`` is not positive)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return (np.log(y) - np.log(h)) / self.log_base

    def neg_log_likelihood(self, y, h, s):
        """``-log L`` of each observation, the Jacobian of the log included."""
        e = self.errors(y, h)
        return np.log(s) + HALF_LOG_2PI + np.log(y * self.log_base) + 0.5 * (e / s) ** 2

    def without_constant(self, per, y):
        """``per`` less ``log(2 pi)/2`` and the density's ``log(y ln b)``."""
        per = per - HALF_LOG_2PI
        return per - np.log(y * self.log_base)


@dataclass(frozen=True)
class Laplace(Normal):
    """``y = h + s eps``, ``eps`` standard Laplace (``s`` is the scale ``b``; standard
    deviation ``sqrt(2) b``): ``-log L = log(2 s) + |y - h| / s``."""

    name: str = "laplace"
    rows: str = "absolute"

    def neg_log_likelihood(self, y, h, s):
        """``-log L`` of each observation."""
        return np.log(2.0 * s) + np.abs(y - h) / s

    def without_constant(self, per, y):
        """``per`` less ``log 2`` (the rows square to ``|e| / s``)."""
        return per - np.log(2.0)

    def profiled_scale(self, errors, shapes):
        """The maximum-likelihood ``c``: the mean absolute error in units of ``shapes``."""
        return float(np.mean(np.abs(errors) / shapes))


#: Every distribution by name (the names :data:`sklode._validation.DISTRIBUTIONS` gives the
#: noise kinds).
NOISE_DISTRIBUTIONS = {
    "normal": Normal(),
    "lognormal": LogNormal(),
    "log10normal": LogNormal(name="log10normal", log_base=float(np.log(10.0))),
    "laplace": Laplace(),
}


def distribution_of(kind):
    """The error distribution of a noise kind (:mod:`sklode.observation._noise`).

    Parameters
    ----------
    kind : str
        One of :data:`NOISE_KINDS`.

    Returns
    -------
    Normal, LogNormal or Laplace
    """
    return NOISE_DISTRIBUTIONS[DISTRIBUTIONS[kind]]



def neg_log_likelihood_terms(Y, H, S, kinds):
    """``-log L`` of every observation (PEtab's convention, all constants), NaN where ``Y``
    is missing.

    Parameters
    ----------
    Y : ndarray of shape (n_times, n_columns)
        Observations, NaN where missing.
    H : ndarray of shape (n_times, n_columns)
        Predicted observables (linear scale).
    S : ndarray of shape (n_times, n_columns)
        Standard deviations (on the scale of each kind; Laplace: the scale ``b``).
    kinds : tuple of str
        One noise kind per column.

    Returns
    -------
    ndarray of shape (n_times, n_columns)
    """
    out = np.full(Y.shape, np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        for j, kind in enumerate(kinds):
            y, h, s = Y[:, j], H[:, j], S[:, j]
            term = distribution_of(kind).neg_log_likelihood(y, h, s)
            out[:, j] = np.where(np.isfinite(y), term, np.nan)
    return out
