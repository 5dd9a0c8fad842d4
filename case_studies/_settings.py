"""Shared settings of the case studies: size mode, output folder, figures, headline numbers.

A case study runs as a script (``python -m privinfer.case_studies.NAME``), through
``privinfer case-study NAME``, or as a notebook (the jupytext pair of its ``.py`` file).  As a
notebook its figures are shown inline; as a script they are only saved (matplotlib picks a
headless backend by itself when no display is present).  Its headline numbers go to
``results.json`` in its output folder, where the tests check them: the narrative computes and
shows, the tests judge.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys

import numpy as np


def full_mode() -> bool:
    """True for the full settings (``PRIVINFER_FULL=1`` or ``--full`` on the command line)."""
    return os.environ.get("PRIVINFER_FULL", "") == "1" or "--full" in sys.argv[1:]


def output_dir(name: str) -> pathlib.Path:
    """Folder for figures and tables of case study ``name`` (created)."""
    root = pathlib.Path(os.environ.get("PRIVINFER_OUTPUT", "privinfer-output"))
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    return out


def in_notebook() -> bool:
    """True when figures go to a notebook: matplotlib's backend is IPython's inline one."""
    import matplotlib

    return "inline" in matplotlib.get_backend()


def show(fig, path, *, dpi: int = 120) -> pathlib.Path:
    """Save ``fig`` to ``path``; show it inline in a notebook; then close it.

    Closing keeps memory flat over a long study; in a notebook the figure is displayed first
    (as ``image/png``), so closing does not hide it.
    """
    import matplotlib.pyplot as plt

    path = pathlib.Path(path)
    fig.savefig(path, dpi=dpi)
    if in_notebook():
        from IPython.display import display

        display(fig)
    plt.close(fig)
    return path


def _plain(value):
    """``value`` as JSON: NumPy scalars and arrays become numbers and lists; NaN stays NaN."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return _plain(value.tolist())
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value)
    if isinstance(value, (int, str)) or value is None:
        return value
    raise TypeError(f"results hold numbers, strings, lists and dicts, not {type(value).__name__}")


def save_results(out, results: dict) -> pathlib.Path:
    """Write the study's headline numbers to ``OUT/results.json`` (read by the tests)."""
    path = pathlib.Path(out) / "results.json"
    text = json.dumps(_plain(results), indent=1, allow_nan=True)
    path.write_text(text + "\n")
    return path


def load_results(out) -> dict:
    """Read ``OUT/results.json`` written by :func:`save_results`."""
    return json.loads((pathlib.Path(out) / "results.json").read_text())


__all__ = ["full_mode", "output_dir", "in_notebook", "show", "save_results", "load_results"]
