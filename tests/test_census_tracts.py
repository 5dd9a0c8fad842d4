"""Synthetic tract hierarchies and the tract-table reader.

The county input is read through ``PRIVINFER_DATA`` (as in ``test_datasets.py``: CI sets it;
otherwise the repo-relative ``../shared/data`` is used).  Exactness (county cells split
exactly, integer counts) is checked on every cell; realism on summary statistics of one
fixed-seed Kentucky hierarchy, against thresholds well inside the measured values stated in
the module docstring.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from privinfer import datasets as ds
from privinfer.census.tracts import (AGE_GROUPS, SEXES, TRACT_COLUMNS, read_tract_table,
                                     synthetic_tracts, synthetic_tracts_from_counties)

REPO_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
N_CELLS = 46


@pytest.fixture(scope="module", autouse=True)
def data_env():
    mp = pytest.MonkeyPatch()
    if not os.environ.get(ds.DATA_ENV):
        mp.setenv(ds.DATA_ENV, str(REPO_DATA))
    yield Path(os.environ[ds.DATA_ENV])
    mp.undo()


@pytest.fixture(scope="module")
def ky_counties():
    return ds.load_nhgis_sex_by_age("KY")


@pytest.fixture(scope="module")
def ky():
    return synthetic_tracts("KY", rng=20100401)


def _assert_same(a, b):
    """Frames equal in columns, dtypes (categories and their order included), index and values
    (``pandas.testing.assert_frame_equal`` is slow on large categoricals)."""
    assert list(a.columns) == list(b.columns)
    for col in a.columns:
        assert a[col].dtype == b[col].dtype, col
        if isinstance(a[col].dtype, pd.CategoricalDtype):
            assert a[col].dtype.ordered == b[col].dtype.ordered, col
            assert list(a[col].cat.categories) == list(b[col].cat.categories), col
    assert a.index.equals(b.index)
    assert a.equals(b)


def _tract_cells(frame):
    """(tracts, 2, 23) counts and the county of each tract (relies on the documented order)."""
    return (frame["count"].to_numpy().reshape(-1, 2, 23), frame["county"].to_numpy()[::N_CELLS])


def _county_sums(frame):
    cells, county = _tract_cells(frame)
    ids, inverse = np.unique(county, return_inverse=True)
    out = np.zeros((len(ids), 2, 23), np.int64)
    np.add.at(out, inverse, cells)
    return ids, out


# ------------------------------------------------------------------ the frame
def test_frame_interface(ky):
    assert tuple(ky.columns) == TRACT_COLUMNS
    assert pd.api.types.is_string_dtype(ky["county"]) and pd.api.types.is_string_dtype(ky["tract"])
    assert not isinstance(ky["county"].dtype, pd.CategoricalDtype)
    for col, cats in (("sex", SEXES), ("age", AGE_GROUPS)):
        dt = ky[col].dtype
        assert isinstance(dt, pd.CategoricalDtype) and dt.ordered and tuple(dt.categories) == cats
    assert SEXES == ("male", "female") and AGE_GROUPS == ds.P12_AGE_GROUPS
    assert ky["count"].dtype == np.int64
    assert isinstance(ky.index, pd.RangeIndex) and ky.index.start == 0

    county, tract = ky["county"].to_numpy(dtype=object), ky["tract"].to_numpy(dtype=object)
    assert all(re.fullmatch(r"\d{5}", c) for c in set(county))
    assert all(re.fullmatch(r"\d{11}", t) and t.endswith("00") for t in set(tract))
    assert all(t[:5] == c for c, t in zip(county[::N_CELLS], tract[::N_CELLS]))
    # tract codes 000100, 000200, ... per county
    per_county = pd.Series(tract[::N_CELLS]).groupby(county[::N_CELLS]).agg(list)
    for c, codes in per_county.items():
        assert codes == [f"{c}{100 * (i + 1):06d}" for i in range(len(codes))]

    # sorted by county, tract, sex (male first), age (P12 order); 46 rows per tract
    assert ky.equals(ky.sort_values(["county", "tract", "sex", "age"], kind="stable").reset_index(drop=True))
    n_tracts = ky["tract"].nunique()
    assert len(ky) == N_CELLS * n_tracts
    assert np.array_equal(ky["sex"].cat.codes.to_numpy(), np.tile(np.repeat([0, 1], 23), n_tracts))
    assert np.array_equal(ky["age"].cat.codes.to_numpy(), np.tile(np.arange(23), 2 * n_tracts))
    assert ky["tract"].is_unique is False and ky["tract"].iloc[::N_CELLS].is_unique


# ------------------------------------------------------------------ exactness
def test_county_cells_split_exactly(ky, ky_counties):
    ids, sums = _county_sums(ky)
    assert np.array_equal(ids, ky_counties.geoid)
    assert np.array_equal(sums, ky_counties.sf)  # every county, every sex x age cell
    assert int(ky["count"].sum()) == 4_339_367  # official 2010 Kentucky population


def test_counts_are_nonnegative_integers(ky):
    assert ky["count"].dtype == np.int64
    assert int(ky["count"].min()) >= 0
    assert not ky["count"].isna().any()


# ------------------------------------------------------------------ tract sizes
def test_tract_count_and_sizes(ky, ky_counties):
    cells, county = _tract_cells(ky)
    sizes = cells.sum(axis=(1, 2))
    pop = ky_counties.sf.sum(axis=(1, 2))
    expected = np.maximum(1, np.rint(pop / 4000)).astype(int)
    got = pd.Series(county).value_counts().reindex(ky_counties.geoid).to_numpy()
    assert np.array_equal(got, expected)
    assert 1000 < len(sizes) < 1200  # 1,083 (Kentucky had 1,115 tracts in 2010)
    assert abs(sizes.mean() - 4000) < 100
    assert np.mean((sizes >= 1200) & (sizes <= 8000)) > 0.95
    q10, q90 = np.quantile(sizes, [0.1, 0.9])
    assert 1800 < q10 < 3200 and 4800 < q90 < 7000  # a realistic spread, neither flat nor wild


def test_mean_size_parameter(ky_counties):
    small = synthetic_tracts("KY", mean_size=2000, rng=1)
    sizes = small["count"].to_numpy().reshape(-1, N_CELLS).sum(axis=1)
    assert abs(sizes.mean() - 2000) < 60
    assert np.array_equal(_county_sums(small)[1], ky_counties.sf)


# ------------------------------------------------------------------ realism
def test_systematic_heterogeneity_exceeds_sampling_noise(ky):
    cells, county = _tract_cells(ky)
    by_age = cells.sum(axis=1)
    n = by_age.sum(axis=1).astype(float)
    for sl, lo, hi in ((slice(17, 23), 0.05, 0.09), (slice(0, 4), 0.05, 0.10)):  # 65+, under 18
        k = by_age[:, sl].sum(axis=1)
        share = k / n
        county_share = (pd.Series(k).groupby(county).transform("sum")
                        / pd.Series(n).groupby(county).transform("sum")).to_numpy()
        # Noise only: if a tract of N people were a random sample of its county, its count
        # in the group would be Binomial(N, p) with p the county's share, so the tract share
        # k / N has mean p and sd sqrt(p (1 - p) / N).  Across tracts of different sizes the
        # root mean square of these sds is the spread that noise alone would produce.
        noise_sd = np.sqrt(np.mean(county_share * (1 - county_share) / n))
        spread = np.std(share - county_share)
        assert noise_sd < 0.01
        assert spread > 5 * noise_sd, (spread, noise_sd)  # measured about 12 times
        assert lo < np.std(share) < hi  # about 7 points, as across real US tracts
    s65, s18 = by_age[:, 17:].sum(1) / n, by_age[:, :4].sum(1) / n
    assert -0.9 < np.corrcoef(s65, s18)[0, 1] < -0.5
    # retirement-like and young-family-like tracts both exist, and a few college tracts
    assert np.mean(s65 > 0.25) > 0.03 and np.mean(s65 < 0.07) > 0.05
    s1824 = by_age[:, 4:8].sum(1) / n
    assert 0.002 < np.mean(s1824 > 0.4) < 0.05


# ------------------------------------------------------------------ randomness
def test_reproducible_with_seed_and_different_otherwise(ky):
    again = synthetic_tracts("KY", rng=20100401)
    _assert_same(again, ky)
    other = synthetic_tracts("KY", rng=20100402)
    assert not np.array_equal(other["count"].to_numpy()[:N_CELLS * 50], ky["count"].to_numpy()[:N_CELLS * 50])
    g1 = synthetic_tracts("KY", rng=np.random.default_rng(5))
    g2 = synthetic_tracts("KY", rng=np.random.default_rng(5))
    _assert_same(g1, g2)
    a, b = synthetic_tracts("KY"), synthetic_tracts("KY")  # OS entropy
    assert not a["count"].equals(b["count"])


# ------------------------------------------------------------------ other inputs
def test_from_counties_user_array():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 400, size=(3, 2, 23))
    counts[1] = 0  # an empty county -> one tract of zeros
    ids = ["06037", "01001", "06001"]  # unsorted, leading zeros
    frame = synthetic_tracts_from_counties(counts, ids, mean_size=1500, rng=3)
    assert list(frame["county"].unique()) == ["01001", "06001", "06037"]
    got_ids, sums = _county_sums(frame)
    assert np.array_equal(sums, counts[[1, 2, 0]])
    assert (frame["county"] == "01001").sum() == N_CELLS
    assert frame["tract"].iloc[0] == "01001000100"
    via_pair = synthetic_tracts(source=(counts, ids), mean_size=1500, rng=3)
    _assert_same(via_pair, frame)
    # float counts that are whole numbers are accepted
    _assert_same(
        synthetic_tracts_from_counties(counts.astype(float), ids, mean_size=1500, rng=3), frame)


@pytest.mark.parametrize("counts, ids, match", [
    (np.ones((2, 2, 22), int), ["01001", "01003"], r"shape \(counties, 2, 23\)"),
    (-np.ones((2, 2, 23), int), ["01001", "01003"], "non-negative"),
    (np.full((2, 2, 23), 1.5), ["01001", "01003"], "integers"),
    (np.ones((2, 2, 23), int), ["01001"], "one code per county"),
    (np.ones((2, 2, 23), int), ["01001", "1003"], "5-digit"),
    (np.ones((2, 2, 23), int), [1001, 1003], "5-digit"),
    (np.ones((2, 2, 23), int), ["01001", "01001"], "distinct"),
])
def test_from_counties_bad_input(counts, ids, match):
    with pytest.raises(ValueError, match=match):
        synthetic_tracts_from_counties(counts, ids, rng=0)


def test_synthetic_tracts_bad_arguments():
    with pytest.raises(ValueError, match="state must be"):
        synthetic_tracts("TX", rng=0)
    with pytest.raises(ValueError, match="CA only"):
        synthetic_tracts("KY", source="dhc", rng=0)
    with pytest.raises(ValueError, match="county FIPS"):
        synthetic_tracts(source=np.ones((2, 2, 23), int), rng=0)
    with pytest.raises(ValueError, match="mean_size"):
        synthetic_tracts("KY", mean_size=0, rng=0)


def test_kentucky_and_california_fast_and_exact():
    t0 = time.perf_counter()
    synthetic_tracts("KY", rng=0)
    assert time.perf_counter() - t0 < 5.0  # about 0.2 s
    t0 = time.perf_counter()
    ca = synthetic_tracts("CA", rng=0)
    assert time.perf_counter() - t0 < 30.0  # about 0.6 s
    dhc = ds.load_ddp_dhc_ca(level="county")
    ids, sums = _county_sums(ca)
    assert np.array_equal(ids, dhc.geoid) and np.array_equal(sums, dhc.table())
    assert ca["county"].iloc[0] == "06001" and ca["tract"].iloc[0] == "06001000100"
    n_tracts = len(ca) // N_CELLS
    assert 9000 < n_tracts < 9600 and int(ca["count"].min()) >= 0


# ------------------------------------------------------------------ reading a user's table
@pytest.fixture(scope="module")
def small():
    """A small generated frame with leading-zero county codes."""
    counts = np.random.default_rng(1).integers(0, 300, size=(2, 2, 23))
    return synthetic_tracts_from_counties(counts, ["01001", "06075"], mean_size=2000, rng=2)


@pytest.mark.parametrize("suffix", [".csv", ".csv.gz", ".parquet"])
def test_read_round_trip(tmp_path, ky, small, suffix):
    for frame in (ky, small):
        f = tmp_path / ("t" + suffix)
        if suffix == ".parquet":
            frame.to_parquet(f)
        else:
            frame.to_csv(f, index=False)
        back = read_tract_table(f)
        _assert_same(back, frame)
    assert back["county"].iloc[0] == "01001" and back["tract"].iloc[0] == "01001000100"
    _assert_same(read_tract_table(str(f)), small)


def test_read_frame_sorts_and_reorders(small):
    shuffled = small.sample(frac=1, random_state=0).reset_index(drop=True)
    _assert_same(read_tract_table(shuffled), small)
    # plain-text attributes become ordered categoricals in order of first appearance
    plain = small.astype({"sex": object, "age": object})
    _assert_same(read_tract_table(plain), small)
    assert read_tract_table(shuffled.astype({"age": object}))["age"].dtype.ordered


def test_read_other_column_names(tmp_path):
    table = pd.DataFrame({"state": ["02"] * 4 + ["01"] * 4, "place": ["0100", "0100", "0200", "0200"] * 2,
                          "race": ["b", "a"] * 4, "n": [1.0, 2.0, 3.0, 0.0, 5.0, 6.0, 7.0, 8.0],
                          "extra": range(8)})
    f = tmp_path / "mine.csv"
    table.to_csv(f, index=False)
    out = read_tract_table(f, geography=("state", "place"), attributes="race", count="n")
    assert list(out.columns) == ["state", "place", "race", "count"]
    assert list(out["state"]) == ["01"] * 4 + ["02"] * 4 and out["place"].iloc[0] == "0100"
    assert list(out["race"].cat.categories) == ["b", "a"] and list(out["race"][:2]) == ["b", "a"]
    assert out["count"].dtype == np.int64 and list(out["count"][:2]) == [5, 6]


def _one_line_error(src, match, secret=(), **kw):
    with pytest.raises(ValueError, match=match) as err:
        read_tract_table(src, **kw)
    msg = str(err.value)
    assert "\n" not in msg
    for s in secret:
        assert s not in msg
    return msg


def test_read_errors(tmp_path, small):
    secret = ("01001000100", "06075")
    _one_line_error(small.drop(columns="age"), r"missing column\(s\): 'age'")
    _one_line_error(small.rename(columns={"count": "n"}), r"missing column\(s\): 'count'")

    dup = pd.concat([small, small.iloc[[3, 50, 51]]], ignore_index=True)
    _one_line_error(dup, r"^3 duplicate cell\(s\)", secret)

    neg = small.copy()
    neg.loc[[0, 7], "count"] = -4
    _one_line_error(neg, r"'count' has 2 negative value\(s\)", secret)

    frac = small.astype({"count": float})
    frac.loc[5, "count"] = 2.5
    _one_line_error(frac, r"'count' has 1 non-integer value\(s\)", secret)

    na = small.astype({"count": float})
    na.loc[[1, 2, 3], "count"] = np.nan
    _one_line_error(na, r"'count' has 3 missing value\(s\)", secret)

    text = small.astype({"count": object})
    text.loc[4, "count"] = "many"
    _one_line_error(text, r"'count' has 1 non-numeric value\(s\)", secret)

    big = small.astype({"count": np.uint64})
    big.loc[6, "count"] = np.uint64(2 ** 63)
    _one_line_error(big, r"'count' has 1 value\(s\) beyond the int64 range", secret)

    incomplete = small.drop(index=[0, N_CELLS + 5]).reset_index(drop=True)
    n_units = small["tract"].nunique()
    _one_line_error(incomplete, rf"^2 of {n_units} unit\(s\) \(county, tract\) lack some of the 46 sex x age",
                    secret)

    numeric_geo = small.astype({"county": int})
    _one_line_error(numeric_geo, r"geography column 'county' must hold text", secret)

    missing_geo = small.copy()
    missing_geo.loc[3, "tract"] = None
    _one_line_error(missing_geo, r"geography column 'tract' has 1 missing value\(s\)", secret)


def test_read_errors_from_files(tmp_path, small):
    secret = ("01001000100", "123456789012345678901234")
    f = tmp_path / "big.csv"
    small.to_csv(f, index=False)
    lines = f.read_text().splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + ",123456789012345678901234"
    lines[2] = lines[2].rsplit(",", 1)[0] + ",18446744073709551615"
    f.write_text("\n".join(lines) + "\n")
    _one_line_error(f, r"'count' has 2 value\(s\) beyond the int64 range", secret)

    g = tmp_path / "missing.csv"
    lines = small.to_csv(index=False).splitlines()
    lines[1] = lines[1].rsplit(",", 1)[0] + ","
    g.write_text("\n".join(lines) + "\n")
    _one_line_error(g, r"'count' has 1 missing value\(s\)", secret)

    p = tmp_path / "dup.parquet"
    pd.concat([small, small.iloc[:2]], ignore_index=True).to_parquet(p)
    _one_line_error(p, r"^2 duplicate cell\(s\)", secret)

    _one_line_error(tmp_path / "table.xlsx", r"use a \.csv or \.parquet suffix")
    _one_line_error(small.iloc[:0], "no rows")
