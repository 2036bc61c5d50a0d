"""The user guide's snippets run as written."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


# data.md fits every estimator on several data sets (29 s on two cores): the slow stage
@pytest.mark.parametrize("page", [pytest.param("data.md", marks=pytest.mark.slow), "trust.md",
                                  "errors.md"])
def test_every_python_block_of_the_page_runs(page):
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)\n```", text, flags=re.S)
    assert blocks
    namespace = {}
    for block in blocks:  # one namespace: later blocks use earlier names, as a reader would
        exec(compile(block, f"{page} block", "exec"), namespace)
