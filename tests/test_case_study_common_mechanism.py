"""Common mechanism case study (bucketization choice), executed as a notebook; its headline
numbers checked."""

import numpy as np
import pytest

from notebook_helpers import execute_study

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def study():
    return execute_study("common_mechanism")


@pytest.fixture(scope="module")
def r(study):
    return study.results


def test_notebook_shows_its_figures_inline(study):
    assert len(study.outputs("image/png")) == 2  # bucketization choice, one place


def test_every_run_costs_exactly_the_chosen_histogram(r):
    # the released mechanisms' cost matrices sum to the chosen M_k's (np.allclose, rtol 1e-9,
    # atol 1e-12 / sigma^2) on every run: the decisions are free
    assert r["runs"] == r["reps"] * r["places"] * 2 * len(r["budgets"])  # two z rules
    assert r["release_cost_mismatches"] == 0
    assert r["one_place_cost_ok"]


def test_every_path_costs_exactly_its_histogram(r):
    # every path of the procedure costs exactly the chosen mechanism, and its rho is the budget
    assert r["path_cost_mismatches"] == 0
    for b in r["budgets"]:
        assert np.allclose(b["rho_cm_path"], b["rho"], rtol=1e-9)


def test_common_mechanism_saves_budget(r):
    assert r["gamma"] > 0  # the saving against the threshold approach
    for b in r["budgets"]:
        assert b["plb_saved_alt"] > 0
        assert np.all(np.asarray(b["plb_saved_path"]) > 0)


def test_saving_for_age23_is_the_cost_matrix_composition(r):
    # a place ending at Age23 pays 1 + 1/23 + 1/4 + 1 rho under the alternative approach
    b8 = next(b for b in r["budgets"] if abs(b["rho"] - 1 / 8) < 1e-15)
    assert abs(b8["plb_saved_path"][3] - (1 - 1 / (1 + 1 / 23 + 1 / 4 + 1))) < 1e-9


def test_outputs_have_the_chosen_mechanisms_variance(r):
    # standardized MSE 1 for the common mechanism (exactly the law of M_k(x)), 1/(1 - gamma)
    # for the threshold approach's histogram at (1 - gamma) rho; mean of N squares of normals
    # has sd expect * sqrt(2/N): within 5 of them
    for b in r["budgets"]:
        assert set(b["mse"]) == {"CM z=3", "CM z=0.001", "thresholds, noisy count"}
        for name, m in b["mse"].items():
            expect = 1.0 if name.startswith("CM") else 1.0 / (1.0 - r["gamma"])
            tol = 5 * expect * np.sqrt(2.0 / m["n"])
            mse = m["sum_sq"] / m["n"]
            assert abs(mse - expect) < tol, f"rho={b['rho']}: {name} MSE {mse:.4f}, expected {expect:.4f} +- {tol:.4f}"


@pytest.mark.parametrize("what, a, b", [
    ("right", "CM z=0.001", "thresholds, noisy count"),
    ("right", "CM z=0.001", "CM z=3"),
    ("too fine", "thresholds, noisy count", "CM z=3"),
    ("right", "CM z=0.001", "thresholds, exact count (oracle)"),
])
def test_paired_comparison_of_choosers(r, what, a, b):
    # paired indicators pooled over all budgets and runs: the difference of the two shares has
    # standard error sqrt(p_disagree / N) (p_disagree: share of cases where exactly one of the
    # two is right, resp. too fine); the gap must exceed 3 of them
    row = next(p for p in r["paired"] if (p["what"], p["a"], p["b"]) == (what, a, b))
    gap = row["share_a"] - row["share_b"]
    se = np.sqrt(row["p_disagree"] / row["n"])
    assert gap > 3 * se, f"{what}: {a} vs {b}: gap {gap:.4f} not above 3 SE ({se:.4f})"
