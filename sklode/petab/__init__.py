"""PEtab and SBML in: a PEtab problem (SBML model, conditions, measurements, observables,
noise and parameter tables) read into an ODE model in generated torch code, a list of
:class:`~sklode.Experiment` and a multi-start :class:`~sklode.AdjointODE`.

Needs the optional extra ``petab`` (``pip install 'sklode[petab]'``: petab, python-libsbml,
sbmlmath, sympy) to read files; :class:`GeneratedModel` itself needs only torch, so fitted
estimators load anywhere.

Examples
--------
>>> from sklode import petab                                       # doctest: +SKIP
>>> problem = petab.load("Boehm_JProteomeRes2014/Boehm_JProteomeRes2014.yaml")  # doctest: +SKIP
>>> problem.neg_log_likelihood(problem.nominal)                    # doctest: +SKIP
>>> est = problem.estimator(n_starts=10, random_state=0).fit(problem.experiments)  # doctest: +SKIP
"""

from pathlib import Path

from ._model import GeneratedModel
from ._sbml import UnsupportedFeature

__all__ = ["GeneratedModel", "PEtabProblem", "UnsupportedFeature", "example_path", "load",
           "read_sbml"]


def example_path(name="Bertozzi_PNAS2020"):
    """The YAML file of a PEtab problem shipped with sklode (from the PEtab benchmark
    collection, BSD-3-Clause).

    Parameters
    ----------
    name : {"Bertozzi_PNAS2020"}

    Returns
    -------
    pathlib.Path

    Examples
    --------
    >>> from sklode.petab import example_path
    >>> example_path().name
    'problem.yaml'
    """
    folder = Path(__file__).resolve().parents[1] / "data" / "petab" / name
    if not folder.is_dir():
        raise ValueError(f"sklode ships no PEtab problem {name!r}; it has "
                         "'Bertozzi_PNAS2020'.")
    return folder / "problem.yaml"


def __getattr__(name):  # the readers need the optional extra; import them on first use
    if name in ("load", "PEtabProblem"):
        from . import _problem

        return getattr(_problem, name)
    if name == "read_sbml":
        from ._sbml import read_sbml

        return read_sbml
    raise AttributeError(f"module 'sklode.petab' has no attribute {name!r}")
