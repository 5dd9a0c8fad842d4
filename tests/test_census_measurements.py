"""hierarchy_measurements: the Census design from a frame -- structure, budgets, noise, errors."""

import math

import numpy as np
import pandas as pd
import pytest

from census_helpers import random_frame
from privinfer.census import frame_counts, hierarchy_measurements
from privinfer.lattice.laws import discrete_gaussian_variance
from privinfer.mechanisms.hierarchy import HierarchyMeasurements

QUERIES = {"total": (), "sex x age": ("sex", "age")}


def _build(f, **kw):
    kw.setdefault("queries", QUERIES)
    kw.setdefault("rho", 0.0025)
    return hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"], **kw)


def test_structure_follows_the_frame_rows():
    f = random_frame(0)
    mech = _build(f)
    assert isinstance(mech, HierarchyMeasurements)
    assert mech.n == len(f)
    assert mech.names == ("state: total", "state: sex x age", "county: total", "county: sex x age",
                          "tract: total", "tract: sex x age")
    H = mech.hierarchy
    x = frame_counts(f)
    # every measured margin is the sum the frame says, whatever the row order
    answers = mech.answers(x)
    by_tract = f.groupby("tract", sort=True)["count"].sum().to_numpy()
    np.testing.assert_array_equal(answers[mech.slices[4]], by_tract)
    by_county_cell = f.groupby(["county", "sex", "age"], sort=False)["count"].sum()
    rows = answers[mech.slices[3]].reshape(H.n_units(1), 2, 3)
    for (c, s, a), v in by_county_cell.items():
        u = list(H.unit_labels[1]).index(c)
        assert rows[u, H.categories[0].index(s), H.categories[1].index(a)] == v
    assert answers[mech.slices[0]][0] == x.sum()
    rel = mech.publish(f["count"], rng=1)
    assert rel.t.tolist() == [x.sum()]
    # ids name each cell by its lowest unit and categories
    assert mech.cell_ids[0] == f"{f['tract'][0]}|{f['sex'][0]}|{f['age'][0]}"
    assert len(set(mech.cell_ids)) == mech.n


def test_rho_equals_the_formula():
    """sigma = 1/sqrt(2 rho) rounded up to 2 decimals; the stated rho is the sum of
    1/(2 sigma^2) over (level, query) and never exceeds the requested budget."""
    f = random_frame(1)
    budget = {("state", "sex x age"): 0.01, ("county", "total"): 0.003, ("tract", "sex x age"): 0.0025}
    mech = _build(f, rho=budget)
    assert mech.names == ("state: sex x age", "county: total", "tract: sex x age")
    for s, r in zip(mech.sigmas, budget.values()):
        want = math.ceil(100 / math.sqrt(2 * r)) / 100
        assert float(s) == pytest.approx(want, abs=1e-12)
        assert 1 / (2 * float(s) ** 2) <= r
    assert mech.guarantee.rho == pytest.approx(sum(1 / (2 * float(s) ** 2) for s in mech.sigmas))
    assert mech.guarantee.rho <= sum(budget.values())
    # one person enters one margin cell of every query: the joint bound equals the sum here
    assert mech.rho_joint == pytest.approx(mech.rho)


def test_each_query_noise_has_the_stated_variance():
    """Over N releases the noise of each query's rows has variance V = Var N_Z(0, sigma^2); the
    sample variance of N*r iid draws has sd ~ V sqrt(2/(N r)) (Gaussian kurtosis); accept within
    5 sd (chance of a false alarm below 1e-6 per query)."""
    f = random_frame(2)
    mech = _build(f, rho={("state", "total"): 0.5, ("county", "sex x age"): 0.01, ("tract", "total"): 0.0025})
    x = frame_counts(f)
    rng = np.random.default_rng(11)
    N = 2000
    noise = mech.release(np.broadcast_to(x, (N, x.size)), rng=rng) - mech.answers(x)
    for k, s in enumerate(mech.sigmas):
        e = noise[:, mech.slices[k]].ravel().astype(float)
        V = discrete_gaussian_variance(float(s))
        sd = V * math.sqrt(2 / e.size)
        assert abs(e.var() - V) < 5 * sd, (k, e.var(), V)
        assert abs(e.mean()) < 5 * math.sqrt(V / e.size)


def test_invariant_options():
    f = random_frame(3)
    assert _build(f, invariant=None).invariant is None
    m = _build(f, invariant="county")
    rel = m.publish(f["count"], rng=0)
    want = f.groupby("county", sort=True)["count"].sum().to_numpy()
    np.testing.assert_array_equal(rel.t, want)
    assert m.invariant_level == 1
    with pytest.raises(ValueError, match="invariant must be"):
        _build(f, invariant="sex")


def test_randomness_default_and_seeded():
    f = random_frame(4)
    m = _build(f)
    a, b = m.publish(f["count"], rng=5).y, m.publish(f["count"], rng=5).y
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(m.publish(f["count"]).y, m.publish(f["count"]).y)


@pytest.mark.parametrize("mutate, match", [
    (lambda f: f.drop(columns="tract"), "no geography or attribute column 'tract'"),
    (lambda f: pd.concat([f, f.iloc[:2]]), "duplicate cells: 2 rows"),
    (lambda f: f.assign(tract=np.where(f.index == 0, "000000", f["tract"])), "not nested|lack some"),
    (lambda f: f.iloc[1:], "lack some"),
    (lambda f: f.assign(county=f["county"].where(f.index != 3)), "missing labels"),
])
def test_bad_frames(mutate, match):
    f = random_frame(6)
    with pytest.raises(ValueError, match=match) as err:
        _build(mutate(f))
    assert "\n" not in str(err.value)


def test_units_not_nested():
    f = random_frame(6, counties=3, max_tracts=1)
    f["tract"] = "t" + f["tract"].str[-3:]  # the same tract label in every county
    with pytest.raises(ValueError, match="not nested in their parents"):
        _build(f)


@pytest.mark.parametrize("values, match", [
    ([-1], "1 negative counts"), ([1.5], "1 non-integer counts"), ([np.nan], "1 missing values"),
    ([2.0 ** 64], "beyond 64 bits"),
])
def test_bad_counts(values, match):
    f = random_frame(7)
    f["count"] = f["count"].astype(float)
    f.loc[0, "count"] = values[0]
    with pytest.raises(ValueError, match=match) as err:
        frame_counts(f)
    assert str(values[0]) not in str(err.value) or values[0] == -1


def test_bad_budgets_and_queries():
    f = random_frame(8)
    for rho, match in [(0.0, "finite number > 0"), ({("nation", "total"): 0.1}, "unknown level"),
                       ({("state", "race"): 0.1}, "unknown query"), ("x", "rho must be")]:
        with pytest.raises((ValueError, TypeError), match=match):
            _build(f, rho=rho)
    with pytest.raises(KeyError, match="no attribute named 'race'"):
        _build(f, queries={"race": ("race",)})
