"""Run a case study as a notebook (jupytext -> nbclient), once per test session.

Each case study's percent-format ``.py`` is turned into a notebook by jupytext and executed
top to bottom in a fresh IPython kernel by nbclient, in a temporary folder, with the small
settings.  The executed notebook (with its inline figures) and the study's ``results.json``
are kept for the session, so the study's own test file and the documentation build share one
execution -- also across pytest-xdist workers: the workers of one run share a folder (named by
the run's ``PYTEST_XDIST_TESTRUNUID``), and a file lock per study makes the first worker that
needs a study execute it while the others wait and read its notebook.
``PRIVINFER_EXECUTED_NOTEBOOKS`` names a folder to copy the executed notebooks to.
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import tempfile
from dataclasses import dataclass

import nbformat
from filelock import FileLock

import privinfer.case_studies as cs
from privinfer.case_studies._notebook import execute_notebook
from privinfer.case_studies._settings import load_results

CASE_DIR = pathlib.Path(cs.__file__).parent
STUDIES = sorted(p.stem for p in CASE_DIR.glob("*.py") if not p.stem.startswith("_"))
DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"
# a generous bound per notebook: the slowest study takes about two minutes in small mode
TIMEOUT = 1800
_RUN = os.environ.get("PYTEST_XDIST_TESTRUNUID")
if _RUN:  # one folder for every worker of this run
    _SESSION = pathlib.Path(tempfile.gettempdir()) / f"privinfer-notebooks-{_RUN}"
    _SESSION.mkdir(exist_ok=True)
else:
    _SESSION = pathlib.Path(tempfile.mkdtemp(prefix="privinfer-notebooks-"))


@dataclass(frozen=True)
class ExecutedStudy:
    name: str
    notebook: object      # nbformat.NotebookNode, executed
    path: pathlib.Path    # the executed .ipynb
    output: pathlib.Path  # the study's output folder (figures, results.json)

    @property
    def results(self) -> dict:
        return load_results(self.output)

    def outputs(self, kind: str) -> list:
        """Every output of the code cells whose MIME bundle holds ``kind`` (e.g. ``image/png``)."""
        return [o for c in self.notebook.cells if c.cell_type == "code" for o in c.get("outputs", [])
                if kind in o.get("data", {})]

    def source(self) -> str:
        return "\n".join(c.source for c in self.notebook.cells if c.cell_type == "code")


@functools.cache
def execute_study(name: str) -> ExecutedStudy:
    """Execute case study ``name`` as a notebook in small mode (cached for the session)."""
    if name not in STUDIES:
        raise ValueError(f"unknown case study {name!r}")
    work = _SESSION / name
    done = _SESSION / f"{name}.done"
    with FileLock(str(_SESSION / f"{name}.lock")):
        if done.exists():  # executed by another worker of this run
            path = work / name / f"{name}.ipynb"
            nb = nbformat.read(path, as_version=4)
        else:
            nb, path = execute_notebook(name, work, full=False, data=os.environ.get("PRIVINFER_DATA", str(DATA)),
                                        timeout=TIMEOUT)
            done.touch()
    copy_to = os.environ.get("PRIVINFER_EXECUTED_NOTEBOOKS")
    if copy_to:
        pathlib.Path(copy_to).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, pathlib.Path(copy_to) / path.name)
    return ExecutedStudy(name, nb, path, work / name)
