"""Sphinx configuration of the privinfer documentation.

Build: ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (from the repository root).

Case studies.  Each ``case_studies/NAME.py`` (jupytext percent format) is one page.  If the
environment variable ``PRIVINFER_EXECUTED_NOTEBOOKS`` names a folder, the executed notebooks
``NAME.ipynb`` in it are shown as they are (the tests pass the notebooks they executed; every
study must be there).  Otherwise the build executes each study itself in small mode
(``PRIVINFER_FULL=0``; the studies read their data from ``PRIVINFER_DATA``).
"""

from __future__ import annotations

import os
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))

import privinfer  # noqa: E402
import privinfer_docs  # noqa: E402

project = "privinfer"
author = "the privinfer authors"
copyright = "the privinfer authors"
release = version = privinfer.__version__

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "privinfer_docs",
]

exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}

# -- MyST and notebooks ------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
# Nothing is executed unless a page asks for it in its metadata: the case studies staged for
# execution (below) and the getting-started pages that run their code.
nb_execution_mode = "off"
nb_execution_timeout = 1800
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_execution_in_temp = True  # files the code writes (ledgers, releases) go to a temporary folder
nb_output_stderr = "remove"  # progress bars and library warnings on stderr are not part of a page
nb_merge_streams = True

privinfer_docs.stage_case_studies(HERE / "case-studies" / "notebooks",
                                  os.environ.get("PRIVINFER_EXECUTED_NOTEBOOKS"))

# -- API reference -----------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # the docstrings say what the arguments are
autodoc_default_options = {"show-inheritance": False}
autosummary_generate = False
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True
napoleon_use_param = False  # types stay text (they are prose here, not cross-references)
napoleon_use_rtype = False

# -- HTML --------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = "privinfer"
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 1,
    "secondary_sidebar_items": {"**": ["page-toc"], "mechanisms": []},
    "header_links_before_dropdown": 6,
    "footer_start": ["copyright"],
    "footer_end": [],
}
html_sidebars = {"index": [], "mechanisms": [], "getting-started/*": []}
html_static_path = ["_static"]
html_css_files = ["privinfer.css"]
# no remote resources are fetched at build time (no intersphinx); MathJax is loaded by the
# reader's browser
