"""Run a case study as a notebook: jupytext turns its percent-format ``.py`` file into a
notebook, nbclient executes it top to bottom in a fresh IPython kernel (figures inline, as in
Jupyter), and the executed notebook is written beside the study's figures.

Needs the ``docs`` (or ``test``) extra: jupytext, nbclient, ipykernel.
"""

from __future__ import annotations

import os
import pathlib

__all__ = ["study_source", "execute_notebook", "NotebookDependencyError"]

#: Seconds one cell may run (the slowest small-mode study takes about two minutes in all).
CELL_TIMEOUT = 3600


class NotebookDependencyError(ImportError):
    """jupytext / nbclient / ipykernel are missing."""


def study_source(name: str) -> pathlib.Path:
    """The percent-format source of case study ``name`` (searched on the package's path)."""
    import privinfer.case_studies as cs

    if not name.startswith("_"):
        for folder in cs.__path__:
            path = pathlib.Path(folder) / f"{name}.py"
            if path.is_file():
                return path
    raise ValueError(f"unknown case study {name!r}")


def execute_notebook(name: str, output_root, *, full: bool = False, data=None, timeout: int = CELL_TIMEOUT):
    """Execute case study ``name`` as a notebook; returns ``(notebook, path)``.

    The kernel starts in ``output_root`` (so the study's files go to ``output_root/name`` and a
    source checkout in the caller's working folder cannot shadow the installed package), with
    ``PRIVINFER_OUTPUT=output_root``, ``PRIVINFER_FULL`` set by ``full``, ``PRIVINFER_DATA``
    by ``data`` (default: inherited) and no ``MPLBACKEND`` (the kernel's inline backend).  The
    executed notebook is written to ``output_root/name/name.ipynb``.  A failing cell raises
    ``nbclient.exceptions.CellExecutionError`` naming the cell.
    """
    try:
        import jupytext
        import nbformat
        from nbclient import NotebookClient
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise NotebookDependencyError(
            f"running a case study as a notebook needs jupytext, nbclient and ipykernel "
            f"(pip install \"privinfer[docs]\"): {exc}") from exc
    source = study_source(name)
    root = pathlib.Path(output_root)
    (root / name).mkdir(parents=True, exist_ok=True)
    nb = jupytext.read(source)
    env = {"PRIVINFER_OUTPUT": str(root), "PRIVINFER_FULL": "1" if full else "0"}
    if data is not None:
        env["PRIVINFER_DATA"] = str(data)
    # the kernel inherits this process's environment at start: set it for the start only
    saved = {k: os.environ.get(k) for k in [*env, "MPLBACKEND"]}
    os.environ.update(env)
    os.environ.pop("MPLBACKEND", None)
    try:
        NotebookClient(nb, timeout=timeout, kernel_name="python3",
                       resources={"metadata": {"path": str(root)}}).execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    path = root / name / f"{name}.ipynb"
    nbformat.write(nb, path)
    return nb, path
