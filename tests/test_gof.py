"""One goodness-of-fit test over every registered mechanism (see ``tests/gof.py``)."""

import importlib
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from gof import ALPHA, pvalue  # noqa: E402


def _collect():
    cases = []
    for path in sorted(pathlib.Path(__file__).parent.glob("gof_cases_*.py")):
        mod = importlib.import_module(path.stem)
        cases.extend(mod.CASES)
    return cases


CASES = _collect()


def test_registry_is_populated():
    assert len(CASES) > 0


@pytest.mark.parametrize("case", CASES, ids=str)
def test_release_matches_logp(case):
    p = pvalue(case)
    assert p > ALPHA, f"{case.name}: goodness-of-fit p-value {p:.2e} <= {ALPHA}"
