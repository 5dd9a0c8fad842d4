"""Shared settings of the case studies: size mode, output folder, data folder."""

from __future__ import annotations

import os
import pathlib
import sys


def full_mode() -> bool:
    """True for the full settings (``PRIVINFER_FULL=1`` or ``--full`` on the command line)."""
    return os.environ.get("PRIVINFER_FULL", "") == "1" or "--full" in sys.argv[1:]


def output_dir(name: str) -> pathlib.Path:
    """Folder for figures and tables of case study ``name`` (created)."""
    root = pathlib.Path(os.environ.get("PRIVINFER_OUTPUT", "privinfer-output"))
    out = root / name
    out.mkdir(parents=True, exist_ok=True)
    return out
