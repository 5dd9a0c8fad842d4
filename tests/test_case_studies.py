"""Every case study is installed, runs as a notebook with its figures inline, and has its
headline numbers checked by its own test file (``test_case_study_NAME.py``)."""

import pathlib

import pytest

from notebook_helpers import STUDIES

HERE = pathlib.Path(__file__).parent
CHECKED = sorted(n for n in STUDIES if (HERE / f"test_case_study_{n}.py").exists())
SCRIPT_ONLY = sorted(set(STUDIES) - set(CHECKED))


def test_case_studies_are_installed():
    assert STUDIES, "no case study found"


def test_every_case_study_has_its_checks():
    """Each study is executed as a notebook by its own test file, which checks its numbers."""
    assert not SCRIPT_ONLY, f"case studies without a test_case_study_NAME.py: {SCRIPT_ONLY}"


@pytest.mark.parametrize("name", CHECKED)
def test_case_study_narrative_has_no_asserts(name):
    """Checks belong to the tests; the narrative computes, shows and saves its numbers."""
    src = (pathlib.Path(__import__("privinfer.case_studies", fromlist=["x"]).__file__).parent
           / f"{name}.py").read_text()
    offending = [i + 1 for i, line in enumerate(src.splitlines()) if line.lstrip().startswith("assert ")]
    assert not offending, f"{name}.py has asserts on lines {offending}"
    assert "matplotlib.use(" not in src, f"{name}.py forces a matplotlib backend (no inline figures)"
    assert "save_results(" in src, f"{name}.py does not save its headline numbers"
