"""Every case study is installed, runs as a notebook with its figures inline, and has its
headline numbers checked by its own test file (``test_case_study_NAME.py``)."""

import os
import pathlib
import subprocess
import sys

import pytest

from notebook_helpers import STUDIES

HERE = pathlib.Path(__file__).parent
CHECKED = sorted(n for n in STUDIES if (HERE / f"test_case_study_{n}.py").exists())
SCRIPT_ONLY = sorted(set(STUDIES) - set(CHECKED))


def test_case_studies_are_installed():
    assert STUDIES, "no case study found"


@pytest.mark.parametrize("name", CHECKED)
def test_case_study_narrative_has_no_asserts(name):
    """Checks belong to the tests; the narrative computes, shows and saves its numbers."""
    src = (pathlib.Path(__import__("privinfer.case_studies", fromlist=["x"]).__file__).parent
           / f"{name}.py").read_text()
    offending = [i + 1 for i, line in enumerate(src.splitlines()) if line.lstrip().startswith("assert ")]
    assert not offending, f"{name}.py has asserts on lines {offending}"
    assert "matplotlib.use(" not in src, f"{name}.py forces a matplotlib backend (no inline figures)"
    assert "save_results(" in src, f"{name}.py does not save its headline numbers"


@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPT_ONLY)
def test_case_study_runs_as_a_script(name, tmp_path):
    env = dict(os.environ, PRIVINFER_OUTPUT=str(tmp_path), MPLBACKEND="Agg", PRIVINFER_FULL="0")
    env.setdefault("PRIVINFER_DATA", str(pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    # run from tmp_path: "python -m" puts the working folder first on sys.path, and the source
    # tree's privinfer/ (without the mapped models/ and case_studies/) must not shadow the
    # installed package
    proc = subprocess.run([sys.executable, "-m", f"privinfer.case_studies.{name}"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert any(tmp_path.rglob("*.png")), "a case study saves at least one figure"
