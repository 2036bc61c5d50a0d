"""The error of a PEtab problem or SBML model that uses what the import does not support."""

__all__ = ["UnsupportedFeature"]


class UnsupportedFeature(NotImplementedError):
    """The SBML model or PEtab problem uses a feature the import does not support; the
    message names it."""
