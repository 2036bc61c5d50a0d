"""Tests whose fits warn by design: the suite turns sklode's warnings into errors
(``pyproject.toml``), so a warning nobody expected fails the test that caused it."""

import pytest

_MODULES = {"FitFailedWarning": "sklearn.exceptions", "UserWarning": "builtins",
            "DeprecationWarning": "builtins"}


def warns_by_design(*categories, why):
    """Let the fits of the decorated test give these warnings (names of
    ``sklode.exceptions``' classes); ``why`` says why they are expected there."""
    assert why, "say why the warning is expected"

    def mark(test):
        for name in categories:
            module = _MODULES.get(name, "sklode.exceptions")
            test = pytest.mark.filterwarnings(f"ignore::{module}.{name}")(test)
        return test

    return mark
