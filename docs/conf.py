"""Sphinx configuration of sklode's documentation site.

Build it (warnings are errors) with the documented command::

    python -m pip install -e ".[docs]"
    python -m sphinx -W --keep-going -b html docs docs/_build/html

The Markdown pages of docs/ are the user guide (MyST), the API reference is generated from
the numpydoc docstrings, and the gallery runs every script of ``examples/`` and keeps
their figures.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # the gallery's timings are single-threaded
os.environ.setdefault("MPLBACKEND", "Agg")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sklode  # noqa: E402

project = "sklode"
author = "sklode developers"
copyright = "2026, sklode developers"
release = version = sklode.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints", "auto_examples/*.md5",
                    "auto_examples/*.py", "auto_examples/*.ipynb", "auto_examples/*.zip"]

myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]

autosummary_generate = True
# Every public method, the shared base's included; not scikit-learn's metadata-routing
# helpers, whose docstrings point into scikit-learn's own site.
autodoc_default_options = {
    "members": True, "inherited-members": True,
    "exclude-members": "get_metadata_routing, set_fit_request, set_predict_request, "
                       "set_score_request, set_params, get_params",
}
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False

sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "filename_pattern": r"\.py$",  # every example runs (each under a minute on one core)
    "within_subsection_order": "FileNameSortKey",
    "download_all_examples": False,
    "remove_config_comments": True,
    "show_memory": False,
}

html_theme = "pydata_sphinx_theme"
html_title = "sklode"
# Three top-level sections (user guide, gallery, API): the header holds them on one line at
# 1280 px (a dozen long page titles wrapped onto three), and each page of the user guide
# shows the guide's pages in the left sidebar (top-level pages left it empty).
html_theme_options = {"show_toc_level": 2, "navigation_with_keys": False,
                      "header_links_before_dropdown": 3}
html_static_path = ["_static"]
html_css_files = ["sklode.css"]
