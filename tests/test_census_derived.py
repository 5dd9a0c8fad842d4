"""Derived quantities of a hierarchy's cells (privinfer.census.derived) against pandas."""

import numpy as np
import pytest

from census_helpers import random_frame
from privinfer.census import derived_draws, frame_counts, hierarchy_measurements, posterior_summary, unit_sums


def measurements(f):
    return hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                  queries={"total": ()}, rho=0.1)


def test_unit_sums_and_shares_equal_pandas_groupby():
    f = random_frame(4, counties=5, max_tracts=4)
    mech = measurements(f)
    x = frame_counts(f)
    A, B = unit_sums(mech, "tract", age="65+"), unit_sums(mech, "tract")
    tracts = [str(u) for u in mech.hierarchy.unit_labels[2]]
    old = f[f["age"] == "65+"].groupby("tract")["count"].sum().reindex(tracts, fill_value=0)
    tot = f.groupby("tract")["count"].sum().reindex(tracts)
    np.testing.assert_array_equal(x @ A, old.to_numpy())
    np.testing.assert_array_equal(x @ B, tot.to_numpy())
    women = unit_sums(mech, "county", sex="female", age=["0-17", "65+"])
    sel = f[(f["sex"] == "female") & f["age"].isin(["0-17", "65+"])].groupby("county")["count"].sum()
    np.testing.assert_array_equal(x @ women, sel.reindex([str(u) for u in mech.hierarchy.unit_labels[1]],
                                                         fill_value=0).to_numpy())
    # draws: the summary of identical draws is the value itself
    mean, lo, hi = posterior_summary(derived_draws(np.vstack([x, x, x]), A, B))
    np.testing.assert_allclose(mean, old.to_numpy() / tot.to_numpy())
    np.testing.assert_allclose(lo, hi)


def test_bad_names_are_refused():
    mech = measurements(random_frame(2))
    with pytest.raises(ValueError, match="unknown level"):
        unit_sums(mech, "block", age="65+")
    with pytest.raises(ValueError, match="unknown attribute"):
        unit_sums(mech, "tract", race="white")
    with pytest.raises(ValueError, match="no categories"):
        unit_sums(mech, "tract", age="90+")
    with pytest.raises(TypeError, match="hierarchy"):
        unit_sums(np.zeros(3), "tract")
    with pytest.raises(ValueError, match="level must be"):
        posterior_summary(np.zeros((3, 2)), level=1.5)
