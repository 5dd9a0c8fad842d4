"""Data loaders: the facts stated in each data set's PROVENANCE.md, and clear errors.

The real files are read through ``PRIVINFER_DATA`` (CI sets it; otherwise the repo-relative
``../shared/data`` is used).  Every number checked here is an official 2010 Census figure or
a fact recorded in the PROVENANCE file, not output of the loaders.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from privinfer import datasets as ds

REPO_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Official 2010 resident populations (apportionment base; Census 2010 Gazetteer POP10 sums).
OFFICIAL_2010 = {
    "IL": 12_830_632, "TX": 25_145_561, "FL": 18_801_310, "KY": 4_339_367,
    "CA": 37_253_956, "WA": 6_724_540, "PR": 3_725_789, "NV": 2_700_551,
}
US_50_DC = 308_745_538


@pytest.fixture(autouse=True)
def data_env(monkeypatch):
    if not os.environ.get(ds.DATA_ENV):
        monkeypatch.setenv(ds.DATA_ENV, str(REPO_DATA))
    return Path(os.environ[ds.DATA_ENV])


@pytest.fixture(scope="module")
def gaz():
    root = os.environ.get(ds.DATA_ENV) or str(REPO_DATA)
    return ds.load_gazetteer_counties(Path(root) / "census2010_county_pop_gazetteer")


# ------------------------------------------------------------------------- Gazetteer
def test_gazetteer_rows_and_state_totals(gaz):
    assert gaz.n == 3221
    assert np.sum(gaz.usps != "PR") == 3143 and np.sum(gaz.usps == "PR") == 78
    totals = gaz.state_totals()
    for s, v in OFFICIAL_2010.items():
        assert totals[s] == v, s
    assert sum(v for s, v in totals.items() if s != "PR") == US_50_DC
    assert len(totals) == 52  # 50 states + DC + PR


def test_gazetteer_fields(gaz):
    i = int(np.flatnonzero(gaz.geoid == "01001")[0])  # leading zero kept
    assert gaz.usps[i] == "AL" and gaz.name[i] == "Autauga County" and gaz.pop10[i] == 54571
    j = int(np.flatnonzero(gaz.geoid == "35013")[0])  # latin-1 decoded
    assert gaz.name[j] == "Doña Ana County"
    assert gaz.pop10.dtype == np.int64


def test_gazetteer_state_invariants(gaz):
    inv = gaz.invariant()
    assert inv.rank == 52 and inv.n == gaz.n
    assert inv.satisfied_by(gaz.pop10, atol=0)
    assert list(inv.t) == [gaz.state_totals()[s] for s in sorted(gaz.state_totals())]
    ky = gaz.for_state("KY")
    assert ky.n == 120 and ky.total == OFFICIAL_2010["KY"]
    assert list(ky.geoid) == sorted(ky.geoid)
    kinv = ky.invariant()
    assert kinv.rank == 1 and kinv.t[0] == OFFICIAL_2010["KY"] and kinv.satisfied_by(ky.population, atol=0)
    # same as the shortcut, and a sub-selection keeps only the chosen states
    assert np.array_equal(ds.state_county_populations("KY").population, ky.population)
    sub = gaz.subset(["CA", "NV"])
    assert sub.states() == ("CA", "NV") and sub.invariant().t.tolist() == [OFFICIAL_2010["CA"], OFFICIAL_2010["NV"]]
    with pytest.raises(KeyError, match="ZZ"):
        gaz.subset(["ZZ"])


# ------------------------------------------------------------------------- NHGIS
# (state, rows, mean |dp - sf|, max |dp - sf|, number exactly equal) from the PROVENANCE files
NHGIS_FACTS = [("KY", 120, 15.6, 61, 2), ("CA", 58, 18.0, 49, 0), ("NV", 17, 167.5, 686, None)]


@pytest.mark.parametrize("state,rows,mean_err,max_err,n_equal", NHGIS_FACTS)
def test_nhgis_counties_invariant_and_sf(gaz, state, rows, mean_err, max_err, n_equal):
    t = ds.load_nhgis_counties(state)
    assert t.n == rows and t.variable == "H7V001"
    # the state total is invariant: sum(dp) == sum(sf) == official total
    assert t.dp.sum() == t.sf.sum() == OFFICIAL_2010[state]
    assert t.invariant().satisfied_by(t.dp, atol=0)
    # sf is SF1 P1, which is the Gazetteer's POP10 county by county
    ref = gaz.for_state(state)
    assert np.array_equal(t.geoid, ref.geoid)
    assert np.array_equal(t.sf, ref.population)
    err = np.abs(t.errors)
    assert round(float(err.mean()), 1) == mean_err and int(err.max()) == max_err
    if n_equal is not None:
        assert int(np.sum(err == 0)) == n_equal


def test_nhgis_other_variables():
    nv_vars = ds.nhgis_variables("NV")
    assert len(nv_vars) == 249 and "H7V001" in nv_vars and "H76049" in nv_vars
    # P12 (sex by age) total population H76001 equals P1 total population in SF1
    p1 = ds.load_nhgis_counties("NV")
    p12 = ds.load_nhgis_counties("nv", variable="H76001")
    assert np.array_equal(p12.sf, p1.sf) and np.array_equal(p12.gisjoin, p1.gisjoin)
    # P12: male (H76002) + female (H76026) = total, in the SF1 values
    male = ds.load_nhgis_counties("NV", variable="H76002").sf
    female = ds.load_nhgis_counties("NV", variable="H76026").sf
    assert np.array_equal(male + female, p1.sf)
    ky_vars = ds.nhgis_variables("KY")
    assert "H7V001" in ky_vars and "H76002" in ky_vars
    kym = ds.load_nhgis_counties("KY", variable="H76002").sf
    kyf = ds.load_nhgis_counties("KY", variable="H76026").sf
    assert np.array_equal(kym + kyf, ds.load_nhgis_counties("KY").sf)
    with pytest.raises(KeyError, match="H0000"):
        ds.load_nhgis_counties("KY", variable="H0000")
    with pytest.raises(KeyError, match="H0000"):
        ds.load_nhgis_counties("NV", variable="H0000")
    with pytest.raises(ValueError, match="available: CA, KY, NV"):
        ds.load_nhgis_counties("TX")


# ------------------------------------------------------------------------- DHC 2022 (CA)
def test_ddp_dhc_ca_counties():
    d = ds.load_ddp_dhc_ca()
    assert d.n == 58 and d.total.sum() == OFFICIAL_2010["CA"]
    assert d.male_by_age.shape == (58, 23) and d.female_by_age.shape == (58, 23)
    assert len(d.age_groups) == 23 and d.table().shape == (58, 2, 23)
    assert np.array_equal(d.male + d.female, d.total)
    assert np.array_equal(d.table().sum(axis=(1, 2)), d.total)
    assert d.geoid[0] == "06001" and d.name[0] == "Alameda County"
    # against SF1 (NHGIS CA file): |dp - sf| mean 2.21, max 6
    sf = ds.load_nhgis_counties("CA")
    assert np.array_equal(sf.geoid, d.geoid)
    err = np.abs(d.total - sf.sf)
    assert round(float(err.mean()), 2) == 2.21 and int(err.max()) == 6
    assert ds.load_ddp_dhc_ca(level="place").n == 1523
    with pytest.raises(ValueError, match="level"):
        ds.load_ddp_dhc_ca(level="tract")


# ------------------------------------------------------------------------- population.json
def test_population_age_sex():
    p = ds.load_population_age_sex()
    assert p.year == 2000 and p.counts.shape == (19, 2)
    assert p.total == 281_420_717  # PROVENANCE: weighted 2000 total (official 281,421,906)
    assert list(p.ages) == list(range(0, 95, 5))
    p1850 = ds.load_population_age_sex(year=1850)
    assert p1850.counts[0, 0] == 1_483_789 and p1850.counts[0, 1] == 1_450_376
    with pytest.raises(ValueError, match="1890.*available: 1850, 1860, 1870, 1880, 1900"):
        ds.load_population_age_sex(year=1890)


# ------------------------------------------------------------------------- synthetic
def test_synthetic_spatiotemporal_and_invariant():
    x = ds.synthetic_spatiotemporal(rng=7)
    assert x.shape == (14, 24, 20) and x.dtype == np.int64 and x.min() >= 0
    assert np.array_equal(x, ds.synthetic_spatiotemporal(rng=7))
    # mean of the Poisson rates is 5 by construction; the cell mean has sd sqrt(5/6720) ~ 0.027,
    # so 5 standard errors is 0.14
    assert abs(x.mean() - 5.0) < 5 * np.sqrt(5.0 / x.size)
    inv = ds.spatiotemporal_invariant(x)
    assert inv.m == 24 * 20 + 14 * 20 and inv.rank == 740 and inv.null_dim == 6720 - 740
    assert inv.satisfied_by(x.ravel(), atol=0)
    # t is (hours x buildings totals over groups, then groups x buildings totals over hours)
    assert np.array_equal(inv.t, np.concatenate([x.sum(0).ravel(), x.sum(1).ravel()]))
    small = ds.synthetic_spatiotemporal(rng=1, groups=3, hours=4, buildings=2)
    assert small.shape == (3, 4, 2)
    assert ds.spatiotemporal_invariant(shape=(3, 4, 2)).rank == (3 + 4 - 1) * 2
    with pytest.raises(ValueError, match="groups"):
        ds.synthetic_spatiotemporal(groups=0)
    with pytest.raises(ValueError, match="3-way"):
        ds.spatiotemporal_invariant(np.zeros((3, 4)))


# ------------------------------------------------------------------------- errors
def test_missing_env_var_and_missing_files(monkeypatch, tmp_path):
    monkeypatch.delenv(ds.DATA_ENV, raising=False)
    with pytest.raises(FileNotFoundError, match="PRIVINFER_DATA.*Gaz_counties_national.txt"):
        ds.load_gazetteer_counties()
    with pytest.raises(FileNotFoundError, match="PRIVINFER_DATA.*long_dp1_050_NV.csv"):
        ds.load_nhgis_counties("NV")
    monkeypatch.setenv(ds.DATA_ENV, str(tmp_path))
    with pytest.raises(FileNotFoundError, match="census2010_county_pop_gazetteer/Gaz_counties_national.txt"):
        ds.load_gazetteer_counties()
    with pytest.raises(FileNotFoundError, match="population.json"):
        ds.load_population_age_sex(tmp_path)
    with pytest.raises(FileNotFoundError, match="file not found"):
        ds.load_ddp_dhc_ca(tmp_path / "nothing.csv")


def test_path_forms(data_env, tmp_path):
    sub = data_env / "ipums_usa_population_age_sex_1850_2000"
    a = ds.load_population_age_sex(sub / "population.json")  # the file
    b = ds.load_population_age_sex(sub)  # its directory
    c = ds.load_population_age_sex(data_env)  # the data root
    assert np.array_equal(a.counts, b.counts) and np.array_equal(a.counts, c.counts)


GAZ_HEADER = "USPS\tGEOID\tANSICODE\tNAME\tPOP10\tHU10\n"


def test_malformed_gazetteer(tmp_path):
    f = tmp_path / "Gaz_counties_national.txt"
    f.write_text("USPS\tGEOID\tNAME\tHU10\nAL\t01001\tA County\t5\n", encoding="latin-1")
    with pytest.raises(ds.DataFileError, match="missing column.*POP10"):
        ds.load_gazetteer_counties(tmp_path)
    f.write_text(GAZ_HEADER + "AL\t01001\t1\tA County\t12x4\t5\n", encoding="latin-1")
    with pytest.raises(ds.DataFileError, match="POP10, data row 1 is not an integer count") as ei:
        ds.load_gazetteer_counties(f)
    assert "12x4" not in str(ei.value)  # values are not echoed
    f.write_text(GAZ_HEADER + "AL\t01001\t1\tA County\t12\n", encoding="latin-1")
    with pytest.raises(ds.DataFileError, match="row 1 has 5 fields, the header has 6"):
        ds.load_gazetteer_counties(f)
    f.write_text(GAZ_HEADER + "AL\t1001\t1\tA County\t12\t5\n", encoding="latin-1")
    with pytest.raises(ds.DataFileError, match="GEOID must be 5 digits"):
        ds.load_gazetteer_counties(f)
    f.write_text("", encoding="latin-1")
    with pytest.raises(ds.DataFileError, match="empty"):
        ds.load_gazetteer_counties(f)


def test_malformed_nhgis_and_dhc(tmp_path):
    f = tmp_path / "long_dp1_050_NV.csv"
    f.write_text("gisjoin,name_dp,var_code,dp,name_sf,sf\nG3200010,A County,H7V001,,A County,7\n")
    with pytest.raises(ds.DataFileError, match="H7V001 dp, data row 1 is blank"):
        ds.load_nhgis_counties("NV", tmp_path)
    f.write_text("gisjoin,name_dp,var_code,dp\nG3200010,A County,H7V001,5\n")
    with pytest.raises(ds.DataFileError, match="missing column.*sf"):
        ds.load_nhgis_counties("NV", f)
    k = tmp_path / "nhgis_ppdd_20200723_county_KY.csv"
    k.write_text("gisjoin,name,state,H7V001_dp,H7V001_sf\nG2100010,A,21,5,6\nG2100010,A,21,5,6\n")
    with pytest.raises(ds.DataFileError, match="duplicate county gisjoin"):
        ds.load_nhgis_counties("KY", k)
    d = tmp_path / "Select_USCensusBureauMarch2022DP2010Demonstration.csv"
    header = ",".join(f'"{i}"' for i in range(1, 76))
    row = ["1", "DHCST", "CA", "50", "00", "00", "0", "0", "0500000US06001", "A County", "DHCST", "CA", "0", "2",
           "10", "5"] + ["0"] * 23 + ["6"] + ["0"] * 23 + ["0"] * 12  # male/female do not add up
    d.write_text(header + "\n" + ",".join(row) + "\n")
    with pytest.raises(ds.DataFileError, match="P12 columns are inconsistent"):
        ds.load_ddp_dhc_ca(d)


def test_malformed_population_json(tmp_path):
    f = tmp_path / "population.json"
    f.write_text("[{\"year\": 2000, ")
    with pytest.raises(ds.DataFileError, match="not valid JSON"):
        ds.load_population_age_sex(f)
    f.write_text(json.dumps([{"year": 2000, "age": 0, "sex": 1}]))
    with pytest.raises(ds.DataFileError, match="lacks one of the fields"):
        ds.load_population_age_sex(f)
    f.write_text(json.dumps([{"year": 2000, "age": 0, "sex": 1, "people": 3}]))
    with pytest.raises(ds.DataFileError, match="lacks some"):
        ds.load_population_age_sex(f)
