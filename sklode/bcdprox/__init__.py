"""BCD-prox (seed 000): block-coordinate-descent proximal filtering and parameter estimation.

* :class:`BCDProxODE` -- the estimator;
* :func:`bcd_prox_solve` -- the method on arrays (the estimator's solver), returning a
  :class:`BCDProxResult`;
* :mod:`sklode.bcdprox.multistep` -- Adams-Bashforth weights on any grid, with the order ramp.
"""

from . import multistep
from ._estimator import BCDProxODE
from ._solver import BCDProxResult, bcd_prox_solve

__all__ = ["BCDProxODE", "BCDProxResult", "bcd_prox_solve", "multistep"]
