"""The user guide's snippets run as written."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("page", ["data.md", "trust.md", "errors.md"])
def test_every_python_block_of_the_page_runs(page):
    text = (DOCS / page).read_text()
    blocks = re.findall(r"```python\n(.*?)\n```", text, flags=re.S)
    assert blocks
    namespace = {}
    for block in blocks:  # one namespace: later blocks use earlier names, as a reader would
        exec(compile(block, f"{page} block", "exec"), namespace)
