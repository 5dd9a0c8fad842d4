"""Derived quantities of a hierarchy's cells (privinfer.census.derived) against pandas."""

import warnings

import numpy as np
import pandas as pd
import pytest

from census_helpers import random_frame
from privinfer.census import (derived_draws, derived_summary, frame_counts, hierarchy_measurements,
                              posterior_summary, unit_convergence, unit_sums)


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


def _chains_of(x, rng, chains=2, draws=1000):
    """Independent draws around the cells ``x``: every cell Poisson with mean ``x + 1``."""
    return rng.poisson(np.asarray(x, dtype=float) + 1.0, size=(chains, draws, len(x)))


def test_derived_summary_matches_arviz_and_posterior_summary():
    import arviz as az
    f = random_frame(5, counties=4, max_tracts=3)
    mech = measurements(f)
    A, B = unit_sums(mech, "tract", age="65+"), unit_sums(mech, "tract")
    X = _chains_of(frame_counts(f), np.random.default_rng(3))
    labels = [str(u) for u in mech.hierarchy.unit_labels[2]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # independent draws, 1,000 per chain: no warning (see below)
        out = derived_summary(X, A, B, index=labels)
    assert list(out.index) == labels
    assert list(out.columns) == ["mean", "lower", "upper", "r_hat", "ess_bulk", "ess_tail"]
    q = np.stack([(c @ A) / (c @ B) for c in X])
    mean, lo, hi = posterior_summary(q.reshape(-1, q.shape[2]))
    np.testing.assert_allclose(out["mean"], mean)
    np.testing.assert_allclose(out["lower"], lo)
    np.testing.assert_allclose(out["upper"], hi)
    ds = az.convert_to_dataset({"q": q})
    np.testing.assert_allclose(out["r_hat"], az.rhat(ds)["q"].values)
    np.testing.assert_allclose(out["ess_bulk"], az.ess(ds, method="bulk")["q"].values)
    np.testing.assert_allclose(out["ess_tail"], az.ess(ds, method="tail")["q"].values)
    # the same from an InferenceData, and sums (den None) as x @ A
    idata = az.from_dict(posterior={"x": X})
    np.testing.assert_allclose(derived_summary(idata, A, B)["r_hat"], out["r_hat"].to_numpy())
    sums = derived_summary(idata, A, warn=False)
    np.testing.assert_allclose(sums["mean"], (X.reshape(-1, X.shape[2]) @ A).mean(axis=0))


def test_derived_summary_flags_chains_that_disagree():
    f = random_frame(6, counties=3, max_tracts=3)
    mech = measurements(f)
    A, B = unit_sums(mech, "tract", age="65+"), unit_sums(mech, "tract")
    x = frame_counts(f)
    rng = np.random.default_rng(4)
    X = _chains_of(x, rng)
    # the second chain stuck where every tract's people aged 65+ are twice as many: split R-hat of
    # every share far above 1.01 (iid chains of 1,000 draws: R-hat - 1 is about (F - 1) / (2 x 500)
    # for an F(3, large) ratio of between- to within-chain variance, above 0.01 with probability
    # under 1e-6, so the warning cannot come from the noise)
    old = (A.sum(axis=1).A1 > 0)
    X[1][:, old] = 2 * X[1][:, old] + 1
    with pytest.warns(RuntimeWarning, match=r"of \d+ derived quantities have R-hat above 1.01"):
        out = derived_summary(X, A, B)
    tracts_with_old = (x @ A) > 0
    assert np.all(out["r_hat"].to_numpy()[tracts_with_old] > 1.1)


def test_derived_summary_refuses_bad_input():
    mech = measurements(random_frame(2))
    A = unit_sums(mech, "tract")
    n = A.shape[0]
    with pytest.raises(ValueError, match="chains, draws, cells"):
        derived_summary(np.zeros((10, n)), A)
    with pytest.raises(ValueError, match="rows"):
        derived_summary(np.zeros((2, 10, n + 1)), A)
    with pytest.raises(ValueError, match="index has"):
        derived_summary(np.ones((2, 10, n)), A, index=["a"] * (A.shape[1] + 1))
    with pytest.raises(ValueError, match="at least 4 draws"):
        derived_summary(np.ones((2, 3, n)), A)


def test_unit_convergence_is_each_units_worst_cell_beside_its_size():
    import arviz as az
    f = random_frame(7, counties=4, max_tracts=4)
    mech = measurements(f)
    hier = mech.hierarchy
    x = frame_counts(f)
    X = _chains_of(x, np.random.default_rng(5), draws=400)
    # one tract's cells stuck in the second chain at twice their value (R-hat far above 1.01, as
    # in test_derived_summary_flags_chains_that_disagree), one cell constant over all draws
    tract = np.asarray(hier.unit_of_cell[2])
    stuck = int(np.argmax(np.bincount(tract, weights=x)))
    X[1][:, tract == stuck] = 2 * X[1][:, tract == stuck] + 1
    const = np.flatnonzero(tract == 0)[0]
    X[:, :, const] = 3
    out = unit_convergence(X, mech, "tract")
    labels = [str(u) for u in hier.unit_labels[2]]
    assert list(out.index) == labels and out.index.name == "tract"
    assert list(out.columns) == ["total", "relative_size", "smallest_of_parent", "r_hat_max", "ess_bulk_min",
                                 "ess_tail_min"]
    # against ArviZ cell by cell and pandas unit by unit (the constant cell left out)
    ds = az.convert_to_dataset({"x": X})
    cells = {"r_hat_max": az.rhat(ds)["x"].values, "ess_bulk_min": az.ess(ds, method="bulk")["x"].values,
             "ess_tail_min": az.ess(ds, method="tail")["x"].values}
    for name, v in cells.items():
        v = v.astype(float)
        v[const] = np.nan
        by_unit = pd.Series(v).groupby(tract).max() if name == "r_hat_max" else pd.Series(v).groupby(tract).min()
        np.testing.assert_allclose(out[name].to_numpy(), by_unit.to_numpy())
    total = pd.Series(X.mean(axis=(0, 1))).groupby(tract).sum().to_numpy()
    np.testing.assert_allclose(out["total"], total)
    np.testing.assert_allclose(out["relative_size"], total / np.median(total))
    county = np.asarray(hier.parent[2])
    smallest = pd.Series(total).groupby(county).transform("min").to_numpy()
    np.testing.assert_array_equal(out["smallest_of_parent"], total == smallest)
    # the others: iid chains of 400 draws, split R-hat - 1 of order 1/400 per cell, so a unit's
    # worst over its cells stays far below 1.05 unless the grouping mixed the stuck tract in
    assert out["r_hat_max"].iloc[stuck] > 1.1 and np.delete(out["r_hat_max"].to_numpy(), stuck).max() < 1.05
    # the counties, and an InferenceData
    by_county = unit_convergence(az.from_dict(posterior={"x": X}), mech, "county")
    assert len(by_county) == hier.n_units(1) and by_county["smallest_of_parent"].sum() == 1
    with pytest.raises(ValueError, match="unknown level"):
        unit_convergence(X, mech, "block")
    with pytest.raises(ValueError, match="the draws hold 5 cells"):
        unit_convergence(X[:, :, :5], mech, "tract")
    with pytest.raises(ValueError, match="chains, draws, cells"):
        unit_convergence(X[0], mech, "tract")
