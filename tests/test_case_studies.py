"""Every case study runs end to end in small mode and asserts its own headline numbers."""

import os
import pathlib
import subprocess
import sys

import pytest

import privinfer.case_studies as cs

CASE_DIR = pathlib.Path(cs.__file__).parent
STUDIES = sorted(p.stem for p in CASE_DIR.glob("*.py") if not p.stem.startswith("_"))


def test_case_studies_are_installed():
    assert STUDIES, "no case study found"


@pytest.mark.slow
@pytest.mark.parametrize("name", STUDIES)
def test_case_study_runs_in_small_mode(name, tmp_path):
    env = dict(os.environ, PRIVINFER_OUTPUT=str(tmp_path), MPLBACKEND="Agg", PRIVINFER_FULL="0")
    env.setdefault("PRIVINFER_DATA", str(pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"))
    # run from tmp_path: "python -m" puts the working folder first on sys.path, and the source
    # tree's privinfer/ (without the mapped models/ and case_studies/) must not shadow the
    # installed package
    proc = subprocess.run([sys.executable, "-m", f"privinfer.case_studies.{name}"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert any(tmp_path.rglob("*.png")), "a case study saves at least one figure"
