"""Every Python code block of the README and of ``docs/*.md`` runs (#56 item 4).

The blocks of one page run in order in one namespace (a page builds on its earlier blocks),
in a temporary directory, with sklode's warnings and scikit-learn's ``FitFailedWarning``
turned into errors: an example that warns must show and explain it, which a page says with
an HTML comment just above the block, ``<!-- expect: PoorFitWarning -->``; the block must
then give that warning (an explained warning that no longer happens is a stale text too).
A block that cannot run here (it needs a file the user has, or a service) is marked
``<!-- not run: reason -->``, and :func:`test_few_blocks_are_left_unrun` keeps that rare.
"""

import re
import warnings
from pathlib import Path

import pytest

import sklode.exceptions

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
_BLOCK = re.compile(r"(?:<!--\s*(expect|not run):\s*(.*?)\s*-->\s*\n)?```python\n(.*?)```",
                    re.S)


def blocks(page):
    """``(marker, argument, code, line)`` of every Python block of ``page``."""
    text = page.read_text()
    return [(m.group(1), m.group(2), m.group(3), text.count("\n", 0, m.start(3)) + 1)
            for m in _BLOCK.finditer(text)]


def _category(name):
    if name == "FitFailedWarning":
        from sklearn.exceptions import FitFailedWarning

        return FitFailedWarning
    return getattr(sklode.exceptions, name)


# pages whose examples run many fits (10-40 s each on two cores): the slow stage of .ci/run
_SLOW = {"README.md", "data.md", "sklearn.md", "compare.md"}


@pytest.mark.parametrize("page", [pytest.param(p, marks=pytest.mark.slow) if p.name in _SLOW
                                  else p for p in PAGES if blocks(p)],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_code_block_runs_without_unexplained_warnings(page, tmp_path, monkeypatch):
    from sklearn.exceptions import FitFailedWarning

    monkeypatch.chdir(tmp_path)
    pytest.importorskip("matplotlib").use("Agg")
    namespace = {"__name__": f"doc_{page.stem}"}
    for marker, argument, code, line in blocks(page):
        if marker == "not run":
            continue
        expected = [_category(n.strip()) for n in argument.split(",")] if marker else []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                exec(compile(code, f"{page.name}:{line}", "exec"), namespace)
            except Exception as exc:
                raise AssertionError(f"{page.name}, the block at line {line}: {exc!r}") from exc
        # CompilationWarning says what the machine lacks (no CVODES here), not the example
        ours = [w for w in caught
                if (w.category.__module__.startswith("sklode")
                    and not issubclass(w.category, sklode.exceptions.CompilationWarning))
                or issubclass(w.category, FitFailedWarning)]
        unexpected = [w for w in ours if not issubclass(w.category, tuple(expected) or ())]
        assert not unexpected, (f"{page.name}, the block at line {line} warns without saying "
                                f"so: {unexpected[0].category.__name__}: {unexpected[0].message}")
        for category in expected:
            assert any(issubclass(w.category, category) for w in ours), (
                f"{page.name}, the block at line {line} is said to give a "
                f"{category.__name__} and does not")


def test_few_blocks_are_left_unrun():
    every = [(page.name, marker) for page in PAGES for marker, *_ in blocks(page)]
    unrun = [name for name, marker in every if marker == "not run"]
    # measured: 39 blocks, 3 not run (a PEtab problem's files, a Dask cluster, Ray)
    assert len(every) >= 39 and len(unrun) <= 3, unrun
