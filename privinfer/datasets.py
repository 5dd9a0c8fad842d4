"""Data sets: small published tables embedded here, loaders for files read from disk.

Files are never shipped with the package; loaders take a path, or read the directory named
by the ``PRIVINFER_DATA`` environment variable.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import invariants as _inv
from .invariants import Invariant

__all__ = ["delinquent_children", "DELINQUENT_COUNTIES", "DELINQUENT_EDUCATION",
           "intersecting_counting_example",
           "DATA_ENV", "DataFileError",
           "GazetteerCounties", "StateCounties", "load_gazetteer_counties", "state_county_populations",
           "NhgisCounties", "TOTAL_POPULATION", "load_nhgis_counties", "nhgis_variables",
           "NhgisSexByAge", "load_nhgis_sex_by_age",
           "DhcSexByAge", "P12_AGE_GROUPS", "load_ddp_dhc_ca",
           "PopulationAgeSex", "load_population_age_sex",
           "synthetic_spatiotemporal", "spatiotemporal_invariant"]

DELINQUENT_COUNTIES = ("Alpha", "Beta", "Gamma", "Delta")
DELINQUENT_EDUCATION = ("Low", "Medium", "High", "Very High")


def delinquent_children() -> np.ndarray:
    """Delinquent children by county (rows) and education of the household head (columns).

    FCSM (2005) Statistical Policy Working Paper 22, used in the integer subspace DP paper
    (Dharangutte, Gao, Gong, Yu 2023, Sec. 5).  Row totals 20, 55, 25, 35; column totals
    50, 35, 30, 20; grand total 135.  (The paper's text extraction prints 35 for Gamma's
    row total; its cells sum to 25 and the grand total 135 confirms 25.)
    Returns a fresh (4, 4) int64 array (rows in ``DELINQUENT_COUNTIES`` order, columns in
    ``DELINQUENT_EDUCATION`` order).
    """
    return np.array(
        [[15, 1, 3, 1], [20, 10, 10, 15], [3, 10, 10, 2], [12, 14, 7, 2]], dtype=np.int64
    )


# =============================================================================================
# Loaders for files on disk (never shipped: read from a path or from $PRIVINFER_DATA)
# =============================================================================================
#: Environment variable naming the data directory (one sub-directory per data set).
DATA_ENV = "PRIVINFER_DATA"


class DataFileError(ValueError):
    """A data file exists but does not have the expected layout (message names file and problem)."""


def intersecting_counting_example() -> tuple[np.ndarray, tuple[tuple[int, ...], ...]]:
    """Synthetic 14-record example with three intersecting counting constraints.

    The integer subspace DP paper (Dharangutte, Gao, Gong, Yu 2023, Sec. 5 and App. E.2,
    Fig. 3) uses three counting constraints S1, S2, S3 over 14 records whose pairwise and
    triple intersections are all non-empty; its figure and counts are not in our copy, so
    this is our construction with every region of the Venn diagram occupied:

    =================  ==========
    region             records
    =================  ==========
    S1 only            0, 1
    S2 only            2, 3
    S3 only            4, 5
    S1 & S2 only       6
    S1 & S3 only       7
    S2 & S3 only       8
    S1 & S2 & S3       9, 10
    in no subset       11, 12, 13
    =================  ==========

    So S1 = {0, 1, 6, 7, 9, 10}, S2 = {2, 3, 6, 8, 9, 10}, S3 = {4, 5, 7, 8, 9, 10}; the
    incidence matrix C (3 x 14, C[k, i] = 1 if record i is in S_k) has rank 3 and the noise
    lattice {e in Z^14 : C e = 0} has dimension 11.  Returns ``(x, subsets)``: fixed
    synthetic counts x (int64, length 14) and the three subsets, ready for
    ``invariants.counting(subsets, 14)``.
    """
    subsets = ((0, 1, 6, 7, 9, 10), (2, 3, 6, 8, 9, 10), (4, 5, 7, 8, 9, 10))
    x = np.array([12, 7, 30, 4, 9, 16, 21, 3, 11, 25, 6, 14, 2, 18], dtype=np.int64)
    return x, subsets


def _data_file(path, subdir: str, filename: str, what: str) -> Path:
    """Resolve a data file from ``path`` (the file, its directory, or the data root) or the env var."""
    if path is None:
        root = os.environ.get(DATA_ENV)
        if not root:
            raise FileNotFoundError(
                f"{what}: no path given and the {DATA_ENV} environment variable is not set; "
                f"set {DATA_ENV} to the data directory that holds {subdir}/{filename}, "
                f"or pass path= (the file or its directory)"
            )
        p = Path(root) / subdir / filename
        if not p.is_file():
            raise FileNotFoundError(
                f"{what}: expected file {subdir}/{filename} under {DATA_ENV}={root} (not found: {p})"
            )
        return p
    p = Path(path)
    if p.is_dir():
        for cand in (p / filename, p / subdir / filename):
            if cand.is_file():
                return cand
        raise FileNotFoundError(
            f"{what}: expected file {filename} in directory {p} (or {subdir}/{filename} below it)"
        )
    if not p.is_file():
        raise FileNotFoundError(f"{what}: file not found: {p} (expected {filename})")
    return p


def _read_csv(p: Path, *, encoding: str, delimiter: str = ",") -> tuple[list[str], list[list[str]]]:
    try:
        with open(p, newline="", encoding=encoding) as fh:
            rows = list(csv.reader(fh, delimiter=delimiter))
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{p.name}: cannot decode the file as {encoding}") from exc
    if not rows:
        raise DataFileError(f"{p.name}: the file is empty")
    header = [h.strip() for h in rows[0]]
    body = [r for r in rows[1:] if any(c.strip() for c in r)]
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise DataFileError(
                f"{p.name}: data row {i + 1} has {len(r)} fields, the header has {len(header)}"
            )
    return header, body


def _columns(header: list[str], names, fname: str) -> list[int]:
    missing = [c for c in names if c not in header]
    if missing:
        raise DataFileError(f"{fname}: missing column(s) {', '.join(missing)}")
    return [header.index(c) for c in names]


def _ints(values, fname: str, column: str) -> np.ndarray:
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        s = v.strip()
        try:
            out[i] = int(s)
        except ValueError:
            try:
                f = float(s)
            except ValueError:
                f = math.nan
            if not math.isfinite(f) or f != round(f):
                what = "blank" if not s else "not an integer count"
                raise DataFileError(f"{fname}: column {column}, data row {i + 1} is {what}") from None
            out[i] = int(f)
    return out


# ---------------------------------------------------------------------------------------------
# 2010 Census Gazetteer, counties
_GAZ = ("census2010_county_pop_gazetteer", "Gaz_counties_national.txt")


@dataclass(frozen=True)
class StateCounties:
    """One state's county populations and the state-total invariant.

    ``population`` (int64, one entry per county in GEOID order) sums to ``total``; the
    invariant kept by a release of these counts is the state total, ``sum_i x_i = total``
    (Integer subspace DP, Sec. 5; Subspace DP, Sec. 5.1).
    """

    state: str
    geoid: np.ndarray
    name: np.ndarray
    population: np.ndarray

    @property
    def n(self) -> int:
        return int(self.population.size)

    @property
    def total(self) -> int:
        return int(self.population.sum())

    def invariant(self) -> Invariant:
        """``total(n, t=[state total])``."""
        return _inv.total(self.n, t=[self.total])


@dataclass(frozen=True)
class GazetteerCounties:
    """2010 Census Gazetteer county rows: state USPS code, 5-digit GEOID (string), name, POP10.

    POP10 is the 2010 Census total population (SF1 P1); by state it sums to the official
    2010 state populations, the invariants of the Census county releases.
    """

    usps: np.ndarray
    geoid: np.ndarray
    name: np.ndarray
    pop10: np.ndarray

    @property
    def n(self) -> int:
        return int(self.pop10.size)

    def states(self) -> tuple[str, ...]:
        """Sorted state codes present (includes ``"PR"`` and ``"DC"`` in the national file)."""
        return tuple(sorted(set(self.usps.tolist())))

    def subset(self, states) -> "GazetteerCounties":
        """Rows of the given state codes (order of the file kept)."""
        states = [states] if isinstance(states, str) else list(states)
        unknown = sorted(set(states) - set(self.usps.tolist()))
        if unknown:
            raise KeyError(f"state code(s) not in the Gazetteer file: {', '.join(unknown)}")
        keep = np.isin(self.usps, states)
        return GazetteerCounties(self.usps[keep], self.geoid[keep], self.name[keep], self.pop10[keep])

    def for_state(self, state: str) -> StateCounties:
        """One state's county populations (GEOID order) and its state total."""
        sub = self.subset([state])
        order = np.argsort(sub.geoid, kind="stable")
        return StateCounties(state, sub.geoid[order], sub.name[order], sub.pop10[order])

    def state_totals(self) -> dict[str, int]:
        """``{USPS: sum of POP10}`` over the states present."""
        return {s: int(self.pop10[self.usps == s].sum()) for s in self.states()}

    def invariant(self) -> Invariant:
        """State totals as partition totals over all rows: ``groups(usps, t)``.

        Rows of C follow the sorted state codes (as :func:`privinfer.invariants.groups`
        orders them) and ``t`` holds the matching state totals.
        """
        totals = self.state_totals()
        return _inv.groups(self.usps, t=[totals[s] for s in self.states()])


def load_gazetteer_counties(path=None) -> GazetteerCounties:
    """Read the 2010 Census Gazetteer county file ``Gaz_counties_national.txt``.

    ``path`` is the file or its directory; default ``$PRIVINFER_DATA/census2010_county_pop_gazetteer``.
    Tab-separated, latin-1, values padded with spaces (stripped here); GEOID is kept as a
    string so leading zeros survive.  3,221 rows: 50 states + DC (3,143 counties) and 78
    Puerto Rico municipios.
    """
    p = _data_file(path, *_GAZ, "2010 Census Gazetteer counties")
    header, rows = _read_csv(p, encoding="latin-1", delimiter="\t")
    iu, ig, iname, ipop = _columns(header, ("USPS", "GEOID", "NAME", "POP10"), p.name)
    if not rows:
        raise DataFileError(f"{p.name}: no data rows")
    usps = np.array([r[iu].strip() for r in rows])
    geoid = np.array([r[ig].strip() for r in rows])
    bad = [i for i, g in enumerate(geoid) if len(g) != 5 or not g.isdigit()]
    if bad:
        raise DataFileError(f"{p.name}: GEOID must be 5 digits (data row {bad[0] + 1} is not)")
    name = np.array([r[iname].strip() for r in rows], dtype=object)
    pop = _ints([r[ipop] for r in rows], p.name, "POP10")
    if np.any(pop < 0):
        raise DataFileError(f"{p.name}: POP10 has negative entries")
    return GazetteerCounties(usps, geoid, name, pop)


def state_county_populations(state: str, path=None) -> StateCounties:
    """Shortcut: ``load_gazetteer_counties(path).for_state(state)``."""
    return load_gazetteer_counties(path).for_state(state)


# ---------------------------------------------------------------------------------------------
# IPUMS NHGIS demonstration data (paired privacy-protected / enumerated county values)
_NHGIS = {
    "KY": ("nhgis_ppdd_v20200527_county_KY", "nhgis_ppdd_20200723_county_KY.csv", "wide", "v20200527"),
    "CA": ("nhgis_ppdd_v20200527_county_place_CA", "nhgis_ppdd_20200527_place_county_CA.csv", "wide",
           "v20200527"),
    "NV": ("nhgis_ddp_v20191029_county_NV", "long_dp1_050_NV.csv", "long", "v20191029"),
}

#: NHGIS code of total population (SF1 P1).
TOTAL_POPULATION = "H7V001"


@dataclass(frozen=True)
class NhgisCounties:
    """Paired county values of one NHGIS variable: privacy-protected ``dp`` and enumerated ``sf``.

    ``dp`` comes from the Census Bureau's demonstration runs of the TopDown algorithm (the
    vintage is ``vintage``); ``sf`` is the published 2010 SF1 value.  For total population the
    state total is invariant: ``sum(dp) == sum(sf)``.  ``geoid`` is the 5-digit state+county
    FIPS code derived from ``gisjoin`` (``"G" + SS + "0" + CCC + "0"``).
    """

    state: str
    variable: str
    vintage: str
    gisjoin: np.ndarray
    geoid: np.ndarray
    name: np.ndarray
    dp: np.ndarray
    sf: np.ndarray

    @property
    def n(self) -> int:
        return int(self.sf.size)

    @property
    def errors(self) -> np.ndarray:
        """``dp - sf``: the demonstration release's error per county."""
        return self.dp - self.sf

    def invariant(self) -> Invariant:
        """The state total of the enumerated values: ``total(n, t=[sum(sf)])``."""
        return _inv.total(self.n, t=[int(self.sf.sum())])


def _nhgis_spec(state: str):
    key = str(state).upper()
    if key not in _NHGIS:
        raise ValueError(f"no NHGIS county file for state {state!r}; available: {', '.join(sorted(_NHGIS))}")
    return key, _NHGIS[key]


def _gisjoin_geoid(g: str) -> str:
    return g[1:3] + g[4:7]


def _nhgis_rows(key, spec, path):
    subdir, fname, layout, _ = spec
    p = _data_file(path, subdir, fname, f"NHGIS county file for {key}")
    header, rows = _read_csv(p, encoding="latin-1")
    return p, layout, header, rows


def nhgis_variables(state: str, path=None) -> tuple[str, ...]:
    """NHGIS variable codes available in the county file of ``state`` (e.g. ``"H7V001"``)."""
    key, spec = _nhgis_spec(state)
    p, layout, header, rows = _nhgis_rows(key, spec, path)
    if layout == "wide":
        return tuple(h[:-3] for h in header if h.endswith("_dp") and h[:-3] + "_sf" in header)
    (iv,) = _columns(header, ("var_code",), p.name)
    return tuple(dict.fromkeys(r[iv].strip() for r in rows))


def load_nhgis_counties(state: str, path=None, variable: str = TOTAL_POPULATION) -> NhgisCounties:
    """Paired privacy-protected (``dp``) and SF1 (``sf``) county values of one NHGIS variable.

    ``state`` is ``"KY"`` or ``"CA"`` (NHGIS privacy-protected demonstration data v20200527,
    wide files with ``<var>_dp`` / ``<var>_sf`` columns; for CA only the county rows, whose
    ``gisjoin`` has 8 characters, are kept) or ``"NV"`` (NHGIS tabulation of the Oct-2019
    demonstration product, long format ``gisjoin, name_dp, var_code, dp, name_sf, sf``).
    ``variable`` is an NHGIS code (default ``H7V001``, total population); see
    :func:`nhgis_variables`.  ``path``: the file or its directory (default under
    ``$PRIVINFER_DATA``).  Rows are returned in ``gisjoin`` order.
    """
    key, spec = _nhgis_spec(state)
    p, layout, header, rows = _nhgis_rows(key, spec, path)
    variable = str(variable).strip()
    if layout == "wide":
        ig, iname = _columns(header, ("gisjoin", "name"), p.name)
        if variable + "_dp" not in header or variable + "_sf" not in header:
            raise KeyError(f"{p.name}: no columns {variable}_dp / {variable}_sf (unknown variable {variable!r})")
        idp, isf = header.index(variable + "_dp"), header.index(variable + "_sf")
        rows = [r for r in rows if len(r[ig].strip()) == 8]
        gis = [r[ig].strip() for r in rows]
        names = [r[iname].strip() for r in rows]
        dp_raw = [r[idp] for r in rows]
        sf_raw = [r[isf] for r in rows]
    else:
        ig, iname, iv, idp, isf = _columns(header, ("gisjoin", "name_dp", "var_code", "dp", "sf"), p.name)
        rows = [r for r in rows if r[iv].strip() == variable]
        if not rows:
            raise KeyError(f"{p.name}: no rows with var_code {variable!r}")
        gis = [r[ig].strip() for r in rows]
        names = [r[iname].strip() for r in rows]
        dp_raw = [r[idp] for r in rows]
        sf_raw = [r[isf] for r in rows]
    if not rows:
        raise DataFileError(f"{p.name}: no county rows (gisjoin of 8 characters)")
    if len(set(gis)) != len(gis):
        raise DataFileError(f"{p.name}: duplicate county gisjoin codes for variable {variable}")
    bad = [g for g in gis if len(g) != 8 or not g.startswith("G") or not g[1:].isdigit()]
    if bad:
        raise DataFileError(f"{p.name}: malformed county gisjoin code(s) (expected 'G' + 7 digits)")
    dp = _ints(dp_raw, p.name, variable + " dp")
    sf = _ints(sf_raw, p.name, variable + " sf")
    order = np.argsort(np.array(gis), kind="stable")
    gis_arr = np.array(gis)[order]
    return NhgisCounties(
        key, variable, spec[3], gis_arr, np.array([_gisjoin_geoid(g) for g in gis_arr]),
        np.array(names, dtype=object)[order], dp[order], sf[order],
    )


@dataclass(frozen=True)
class NhgisSexByAge:
    """County x sex x age group counts (table P12, NHGIS codes ``H76003-H76025`` male and
    ``H76027-H76049`` female, 23 age groups of :data:`P12_AGE_GROUPS`) of one state, paired:
    ``sf`` the enumerated 2010 SF1 values and ``dp`` the Census Bureau's TopDown output of the
    demonstration run ``vintage``.  Both are (counties, 2, 23) int64 arrays (sex: male,
    female), counties in ``gisjoin`` order; each county's cells sum to its total population
    ``H76001`` (checked on load)."""

    state: str
    vintage: str
    gisjoin: np.ndarray
    geoid: np.ndarray
    name: np.ndarray
    dp: np.ndarray
    sf: np.ndarray

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(int(s) for s in self.sf.shape)

    @property
    def n(self) -> int:
        return int(self.sf.size)


def load_nhgis_sex_by_age(state: str = "KY", path=None) -> NhgisSexByAge:
    """Sex by age (P12) for every county of ``state`` from the NHGIS demonstration file
    (wide layout: ``"KY"`` or ``"CA"``); see :class:`NhgisSexByAge`."""
    key, spec = _nhgis_spec(state)
    p, layout, header, rows = _nhgis_rows(key, spec, path)
    if layout != "wide":
        raise ValueError(f"the NHGIS file of {key} has no sex-by-age columns in the wide layout")
    ig, iname = _columns(header, ("gisjoin", "name"), p.name)
    rows = [r for r in rows if len(r[ig].strip()) == 8]
    if not rows:
        raise DataFileError(f"{p.name}: no county rows (gisjoin of 8 characters)")
    codes = [f"H76{j:03d}" for j in list(range(3, 26)) + list(range(27, 50))]
    out = {}
    for suffix in ("dp", "sf"):
        cols = _columns(header, [c + "_" + suffix for c in codes], p.name)
        table = np.stack([_ints([r[c] for r in rows], p.name, codes[i] + "_" + suffix)
                          for i, c in enumerate(cols)], axis=1)
        (itot,) = _columns(header, ("H76001_" + suffix,), p.name)
        totals = _ints([r[itot] for r in rows], p.name, "H76001_" + suffix)
        if np.any(table.sum(axis=1) != totals):
            raise DataFileError(f"{p.name}: the {suffix} sex-by-age cells do not add up to H76001 in some county")
        out[suffix] = table.reshape(len(rows), 2, 23)
    gis = np.array([r[ig].strip() for r in rows])
    order = np.argsort(gis, kind="stable")
    names = np.array([r[iname].strip() for r in rows], dtype=object)
    return NhgisSexByAge(key, spec[3], gis[order], np.array([_gisjoin_geoid(g) for g in gis[order]]),
                         names[order], out["dp"][order], out["sf"][order])


# ---------------------------------------------------------------------------------------------
# Census Bureau 2022 demonstration DHC, California: P12 sex by age
_DHC = ("census_ddp_dhc_20220316_county_place_CA", "Select_USCensusBureauMarch2022DP2010Demonstration.csv")

#: The 23 age groups of table P12 (sex by age), in column order, for each sex.
P12_AGE_GROUPS = (
    "Under 5", "5 to 9", "10 to 14", "15 to 17", "18 and 19", "20", "21", "22 to 24",
    "25 to 29", "30 to 34", "35 to 39", "40 to 44", "45 to 49", "50 to 54", "55 to 59",
    "60 and 61", "62 to 64", "65 and 66", "67 to 69", "70 to 74", "75 to 79", "80 to 84",
    "85 and over",
)


@dataclass(frozen=True)
class DhcSexByAge:
    """Demonstration DHC table P12 for a set of areas: totals and 23 age groups per sex.

    ``male_by_age`` and ``female_by_age`` have shape (areas, 23) in :data:`P12_AGE_GROUPS`
    order; ``male + female == total`` and each age vector sums to its sex total (checked on
    load).  ``geoid`` is the 5-digit county FIPS (counties) or 7-digit place code (places).
    """

    level: str
    geoid: np.ndarray
    name: np.ndarray
    total: np.ndarray
    male: np.ndarray
    female: np.ndarray
    male_by_age: np.ndarray
    female_by_age: np.ndarray
    age_groups: tuple = P12_AGE_GROUPS

    @property
    def n(self) -> int:
        return int(self.total.size)

    def table(self) -> np.ndarray:
        """Counts as an (areas, 2, 23) array: sex (male, female) by age group."""
        return np.stack([self.male_by_age, self.female_by_age], axis=1)


def load_ddp_dhc_ca(path=None, level: str = "county") -> DhcSexByAge:
    """Census Bureau 2010 Demonstration DHC (2022-03-16) for California, table P12.

    Columns (named "1".."75" in the file; see the data set's PROVENANCE): "4" summary level
    (50 county, 160 place), "9" GEOID (e.g. ``0500000US06001``), "10" name, "15" total,
    "16" male, "17".."39" male age groups, "40" female, "41".."63" female age groups.
    ``level`` selects ``"county"`` (58 rows) or ``"place"`` (1,523 rows).  Rows in GEOID order.
    """
    levels = {"county": "50", "place": "160"}
    if level not in levels:
        raise ValueError(f"level must be 'county' or 'place', got {level!r}")
    p = _data_file(path, *_DHC, "Census 2022 demonstration DHC (California)")
    header, rows = _read_csv(p, encoding="latin-1")
    need = [str(k) for k in range(1, 64)]
    _columns(header, need, p.name)
    col = {h: i for i, h in enumerate(header)}
    rows = [r for r in rows if r[col["4"]].strip() == levels[level]]
    if not rows:
        raise DataFileError(f"{p.name}: no rows with summary level {levels[level]} ({level})")
    geo = [r[col["9"]].strip() for r in rows]
    if any("US" not in g for g in geo):
        raise DataFileError(f"{p.name}: column 9 must hold GEOIDs like 0500000US06001")
    geoid = np.array([g.split("US", 1)[1] for g in geo])
    name = np.array([r[col["10"]].strip() for r in rows], dtype=object)

    def block(first, last):
        return np.column_stack([_ints([r[col[str(k)]] for r in rows], p.name, f'"{k}"')
                                for k in range(first, last + 1)])

    total = block(15, 15)[:, 0]
    male = block(16, 16)[:, 0]
    female = block(40, 40)[:, 0]
    mba = block(17, 39)
    fba = block(41, 63)
    if not (np.array_equal(male + female, total) and np.array_equal(mba.sum(1), male)
            and np.array_equal(fba.sum(1), female)):
        raise DataFileError(
            f"{p.name}: P12 columns are inconsistent (male + female must equal the total and the "
            "age groups must sum to each sex total); is this the expected column layout?"
        )
    order = np.argsort(geoid, kind="stable")
    return DhcSexByAge(level, geoid[order], name[order], total[order], male[order], female[order],
                       mba[order], fba[order])


# ---------------------------------------------------------------------------------------------
# US population by age and sex (IPUMS USA tabulation, vega-datasets population.json)
_POP = ("ipums_usa_population_age_sex_1850_2000", "population.json")


@dataclass(frozen=True)
class PopulationAgeSex:
    """US population of one census year by 5-year age group (19) and sex (2).

    ``counts[i, j]``: people in age group starting at ``ages[i]`` (90 = 90 and over) of sex
    ``sexes[j]`` (``"men"``, ``"women"``).  Sample-weighted IPUMS estimates, so they do not
    match official totals exactly.
    """

    year: int
    ages: np.ndarray
    counts: np.ndarray
    sexes: tuple = ("men", "women")

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def load_population_age_sex(path=None, year: int = 2000) -> PopulationAgeSex:
    """Read ``population.json`` and return the (19 age groups x 2 sexes) table of ``year``."""
    p = _data_file(path, *_POP, "US population by age and sex (population.json)")
    try:
        with open(p, encoding="utf-8") as fh:
            recs = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DataFileError(f"{p.name}: not valid JSON ({type(exc).__name__})") from exc
    if not isinstance(recs, list) or not all(isinstance(r, dict) for r in recs):
        raise DataFileError(f"{p.name}: expected a JSON array of records")
    keys = ("year", "age", "sex", "people")
    for i, r in enumerate(recs):
        if any(k not in r for k in keys):
            raise DataFileError(f"{p.name}: record {i} lacks one of the fields {', '.join(keys)}")
        if not all(isinstance(r[k], int) and not isinstance(r[k], bool) for k in keys):
            raise DataFileError(f"{p.name}: record {i} has a non-integer field")
    years = sorted({r["year"] for r in recs})
    if year not in years:
        raise ValueError(f"year {year!r} not in {p.name}; available: {', '.join(map(str, years))}")
    ages = np.arange(0, 95, 5)
    counts = np.full((ages.size, 2), -1, dtype=np.int64)
    for r in recs:
        if r["year"] != year:
            continue
        if r["age"] not in ages or r["sex"] not in (1, 2):
            raise DataFileError(f"{p.name}: unexpected age {r['age']} or sex {r['sex']} in year {year}")
        i, j = int(r["age"]) // 5, r["sex"] - 1
        if counts[i, j] != -1:
            raise DataFileError(f"{p.name}: duplicate record for year {year}, age {r['age']}, sex {r['sex']}")
        counts[i, j] = r["people"]
    if np.any(counts < 0):
        raise DataFileError(f"{p.name}: year {year} lacks some (age, sex) records or has negative counts")
    return PopulationAgeSex(int(year), ages, counts)


# ---------------------------------------------------------------------------------------------
# Synthetic spatio-temporal counts (Subspace DP, Sec. 5.2 design)
def synthetic_spatiotemporal(rng=None, groups: int = 14, hours: int = 24, buildings: int = 20,
                             mean_count: float = 5.0) -> np.ndarray:
    r"""Synthetic person-hour counts ``x[g, h, b]`` (groups x hours x buildings), int64.

    Shaped like the campus WiFi data of Subspace DP (Gao, Gong, Yu 2022, Sec. 5.2: 14 groups
    of people, 24 hours, 20 buildings; 6,720 cells), which is not public.  Counts are
    independent Poisson with a log-linear mean

    .. math::
        \log\mu_{ghb} = c + \alpha_g + \beta_b + A_g\cos\!\big(2\pi(h - \phi_g)/24\big)
                        + \gamma_b\cos\!\big(2\pi(h - \psi_b)/24\big),

    with group sizes :math:`\alpha_g \sim N(0, 0.5^2)`, building popularity
    :math:`\beta_b \sim N(0, 0.7^2)`, group daily rhythms (amplitude
    :math:`A_g \sim U(0.5, 1.5)`, peak hour :math:`\phi_g \sim U(8, 20)`), building opening
    profiles (:math:`\gamma_b \sim U(0.3, 1.2)`, :math:`\psi_b \sim U(9, 18)`), and :math:`c`
    chosen so that the mean of :math:`\mu` over cells is ``mean_count`` (default 5, about the
    person-hours per cell of the paper's 3,243 people over one day).  Many cells are small or
    zero, as in the real data, which is where non-negativity post-processing biases releases.
    ``rng``: see :func:`privinfer._rng.as_generator`.
    """
    from ._rng import as_generator

    for nm, v in (("groups", groups), ("hours", hours), ("buildings", buildings)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{nm} must be a positive integer, got {v!r}")
    if not (isinstance(mean_count, (int, float)) and math.isfinite(mean_count) and mean_count > 0):
        raise ValueError(f"mean_count must be a finite number > 0, got {mean_count!r}")
    rng = as_generator(rng)
    g = np.arange(groups)[:, None, None]
    h = np.arange(hours)[None, :, None]
    b = np.arange(buildings)[None, None, :]
    alpha = rng.normal(0.0, 0.5, groups)
    beta = rng.normal(0.0, 0.7, buildings)
    amp = rng.uniform(0.5, 1.5, groups)
    phase = rng.uniform(8.0, 20.0, groups)
    gam = rng.uniform(0.3, 1.2, buildings)
    psi = rng.uniform(9.0, 18.0, buildings)
    eta = (alpha[g] + beta[b] + amp[g] * np.cos(2 * np.pi * (h - phase[g]) / 24.0)
           + gam[b] * np.cos(2 * np.pi * (h - psi[b]) / 24.0))
    mu = np.exp(eta)
    mu *= mean_count / mu.mean()
    return rng.poisson(mu).astype(np.int64)


def spatiotemporal_invariant(x=None, *, shape=None) -> Invariant:
    """The invariants of Subspace DP Sec. 5.2 on a (groups, hours, buildings) table.

    1. per building and hour, the total over groups: margin ``(1, 2)`` (hours x buildings);
    2. per group and building, the total over hours: margin ``(0, 2)`` (groups x buildings).

    ``margins(shape, [(1, 2), (0, 2)])``: ``H*B + G*B`` rows; each building's two margins share
    its grand total, so the rank is ``(H + G - 1) * B`` -- 740 for the paper's 14 x 24 x 20.
    Give the table ``x`` (then ``t`` is its margins, in C order) or just ``shape``.
    """
    if x is not None:
        arr = np.asarray(x)
        if arr.ndim != 3:
            raise ValueError(f"x must be a 3-way (groups, hours, buildings) table, got shape {arr.shape}")
        if shape is not None and tuple(shape) != arr.shape:
            raise ValueError(f"shape {tuple(shape)} does not match x with shape {arr.shape}")
        shape = arr.shape
    elif shape is None:
        shape = (14, 24, 20)
    if len(tuple(shape)) != 3:
        raise ValueError(f"shape must have 3 axes (groups, hours, buildings), got {tuple(shape)}")
    inv = _inv.margins(shape, [(1, 2), (0, 2)])
    if x is not None:
        inv = inv.with_t(inv.of(np.asarray(x, dtype=float).ravel()))
    return inv
