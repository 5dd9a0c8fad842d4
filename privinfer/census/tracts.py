"""Tract hierarchies: a realistic synthetic county -> tract split of real county x sex x age
counts, and a reader for a user's own tract-level table.  Both return the same frame.

The frame
---------
One row per cell, columns

=========  ==========================================================================
county     5-digit county FIPS code as text, e.g. ``"21111"``
tract      11-digit tract GEOID as text: county FIPS + 6-digit tract code
           (``"21111000100"``)
sex        ordered Categorical ``("male", "female")``
age        ordered Categorical of the 23 age groups of table P12
           (:data:`privinfer.datasets.P12_AGE_GROUPS`, youngest first)
count      int64 >= 0
=========  ==========================================================================

rows sorted by county, tract, sex (male first) and age (P12 order); every tract has all
46 (sex, age) rows, zeros included.  :func:`read_tract_table` reads other geography and
attribute columns into the same shape (geography as text, attributes as categoricals,
``count`` int64).

How the synthetic hierarchy is built
------------------------------------
Input: county x sex x age counts ``n[c, s, a]`` (enumerated 2010 SF1 values of table P12
for Kentucky from the NHGIS file, the Census Bureau's 2022 demonstration DHC for California,
or any (counties, 2, 23) array).  For each county ``c`` with ``N_c`` people:

1. **Number of tracts.**  ``T_c = max(1, round(N_c / mean_size))``.  The Census Bureau
   delineated 2010 tracts with an optimum size of 4,000 people and a range of 1,200-8,000
   ("Census Tracts for the 2010 Census - Final Criteria", Federal Register, 2008), so with the
   default ``mean_size=4000`` a county of 2,282 people (Robertson County, KY) is one tract
   and Jefferson County, KY (741,096) gets 185.  Kentucky had 1,115 tracts in 2010 and
   California 8,057; this rule gives 1,083 and 9,317 (real Kentucky tracts are a little
   smaller, real California tracts larger than 4,000 people on average).
2. **Tract sizes.**  Target sizes ``m_t = N_c w_t`` with ``w = g / sum(g)``, ``g_t`` iid
   Gamma(shape 8): a random split of the county total whose sizes have a coefficient of
   variation of about 0.35 (sd about 1,400 at mean 4,000), so the great majority of tracts
   fall within 1,200-8,000, as real ones do.
3. **Tract age profiles that differ systematically.**  Real tracts are not random samples
   of their county: some are young-family suburbs, some retirement areas, some childless
   young-adult neighbourhoods, a few are dominated by college students.  Each tract's
   expected sex x age profile is the county's profile ``p_c[s, a] = n[c, s, a] / N_c``
   tilted log-linearly::

       q_t[s, a]  ∝  p_c[s, a] * exp( 0.38 z_t g_a + 0.15 f_t h_a + 2.3 k_t u_a + 0.08 e_tsa )

   * ``g_a`` is an age gradient: ``(x_a - 40) / 20`` above age 40 and ``(x_a - 40) / 60``
     below (``x_a`` the midpoint of age group ``a``; 85+ taken as 89), and ``z_t ~ N(0, 1)``
     the tract's latent *age index*: ``z_t > 0`` tilts toward the old (retirement tracts),
     ``z_t < 0`` toward the young.  At ``z = 2`` the 85+ group is 6.4 times and children
     under 5 0.62 times as frequent as in the county; at ``z = -2`` the reverse (before the
     margins are re-imposed in step 4).  The gradient is flatter below 40 because tracts
     differ more in their share of old people than of children.
   * ``h_a = +1`` for ages under 18, ``-1`` for ages 20-34, else 0, and ``f_t ~ N(0, 1)`` a
     *family index* independent of ``z_t``: family tracts with many children versus young
     adult tracts with few.  It makes the under-18 and 65+ shares less than perfectly
     anti-correlated, as they are in real tracts.
   * ``u_a = 1`` for the four groups aged 18-24 and ``k_t = 1`` marks a *college tract*
     (``exp(2.3)``, about 10 times the county's share of 18-24 year-olds; after step 4
     typically 40-70% of its people are 18-24).  The number of college tracts in a county is
     Poisson with mean ``0.002 T_c + E_c / 4000`` (at most ``T_c // 3``), where ``E_c`` is the
     county's number of 18-24 year-olds beyond the median county share of 18-24 in the input:
     counties with universities get them (expected numbers: Fayette 4.5, Warren 2.3,
     Jefferson 2.1, Madison 1.8, Calloway 1.2 in Kentucky; Los Angeles 29, San Diego 17,
     Santa Barbara 5.6, Yolo 4.7 in California), others rarely.  Counties whose excess of
     young adults comes from a military base (Christian County, KY: Fort Campbell) get such
     tracts too, which is apt: a barracks tract is just as dominated by 18-24 year-olds.
     College tracts take ``z_t = 0`` and a family index of -1.
   * ``e_tsa ~ N(0, 1)`` iid: a smaller independent departure of every cell (this also
     varies the tracts' sex ratios a little).
4. **Fit to the county exactly.**  The expected tract x cell table ``E[t, (s, a)]``
   starts at ``m_t q_t[s, a]`` and is fitted by iterative proportional fitting to both
   margins: column sums equal the county's cells ``n[c, s, a]`` and row sums equal the
   target sizes ``m_t`` (their sum is ``N_c``, so the margins agree; IPF stops when every
   row is within 1e-9 relative, after about 7 sweeps, at most 12 for California).  Then
   every county cell is split across the county's tracts by one multinomial draw of
   ``n[c, s, a]`` people with probabilities ``E[:, (s, a)] / n[c, s, a]``.  So for every
   county and cell the tract counts add up *exactly* to the county count and are never
   negative, and a tract's total equals its target size up to multinomial noise (about
   sqrt(m_t), i.e. +-65 people at 4,000).  A single-tract county is the county itself.
5. **Codes.**  Tracts are numbered per county in the Census's style: tract code
   ``000100, 000200, ...`` (basic tract numbers 1, 2, ... with suffix 00), GEOID = county
   FIPS + code.  (Real tract numbers are not consecutive and some carry suffixes such as
   ``.01``; nothing here depends on that.)

Randomness: ``rng=None`` draws from OS entropy; pass an int seed or a
``numpy.random.Generator`` to reproduce a hierarchy exactly (see :mod:`privinfer._rng`).

Why it is realistic: the numbers
--------------------------------
Target.  Across 2010 US census tracts the share of people aged 65+ has a standard deviation
of roughly 6-8 percentage points (median about 13%), the share under 18 roughly 6-8 points,
and the two are clearly negatively correlated (2010 Census Summary File 1, table P12 at
tract level, as published on data.census.gov or tabulated by NHGIS).  A check on data at
hand: the 469 California places of tract-like size (1,200-8,000 people) in the Census
Bureau's 2022 demonstration DHC have sd 8.8 points (65+) and 7.1 points (under 18),
correlation -0.73, quartiles of the 65+ share 9.9% / 13.9% / 19.5% and of the under-18
share 19.5% / 23.2% / 28.9% (places include retirement communities, so somewhat more
spread in age than tracts).  The tilt scales above were chosen to give about 7 points for
both shares within a state and a correlation near -0.75.

Measured on the generator's output (default settings; Kentucky mean over 20 seeds,
California over 5).  The noise-only sd is what multinomial sampling alone would give:
for a tract of ``N`` people drawn from its county with share ``p``, ``sqrt(p (1 - p) / N)``
(root mean square over tracts).

==================================  ======================  ======================
                                    Kentucky (NHGIS SF1)    California (DHC demo)
==================================  ======================  ======================
counties / tracts / rows            120 / 1,083 / 49,818    58 / 9,317 / 428,582
mean tract size                     4,007                   3,999
tract size 5/25/50/75/95%           2,050 / 3,040 / 3,880   1,990 / 2,980 / 3,830
                                    / 4,850 / 6,390         / 4,830 / 6,590
tracts within 1,200-8,000           99.0%                   98.6%
share 65+: sd across tracts         7.1 points              6.9 points
  sd of tract minus county share    6.8 points              6.7 points
  noise-only sd                     0.57 points             0.54 points
share 65+ quartiles                 8.0 / 12.1 / 17.4%      6.3 / 9.9 / 14.9%
share under 18: sd                  7.5 points              8.1 points
  noise-only sd                     0.71 points             0.73 points
share under 18 quartiles            18.3 / 23.2 / 28.5%     19.2 / 24.6 / 30.2%
corr(65+ share, under-18 share)     -0.76                   -0.75
tracts with > 40% aged 18-24        1.6%                    1.2%
runtime incl. reading the file      about 0.2 s             about 0.5-0.7 s
==================================  ======================  ======================

So the within-county spread of the 65+ share is about 12 times the sampling noise: the
heterogeneity is systematic.  (Across *counties* the sd of the 65+ share is only 2.4 points
in Kentucky and 3.8 in California.)  What the generator does not model: spatial contiguity
and correlation between neighbouring tracts, group quarters (prisons, barracks, nursing
homes) with extreme sex or age structure, tracts with no population, and attributes beyond
sex and age.
"""

from __future__ import annotations

import numbers
import os
from pathlib import Path

import numpy as np
import pandas as pd

from privinfer._rng import as_generator
from privinfer.datasets import P12_AGE_GROUPS, load_ddp_dhc_ca, load_nhgis_sex_by_age
from .ages import category_midpoints

__all__ = ["SEXES", "AGE_GROUPS", "TRACT_COLUMNS", "synthetic_tracts",
           "synthetic_tracts_from_counties", "read_tract_table"]

#: Sex categories of the frame, in order.
SEXES = ("male", "female")
#: Age categories of the frame: the 23 P12 age groups, youngest first.
AGE_GROUPS = tuple(P12_AGE_GROUPS)
#: Columns of the tract frame, in order.
TRACT_COLUMNS = ("county", "tract", "sex", "age", "count")

_N_CELLS = len(SEXES) * len(AGE_GROUPS)  # 46
# Midpoints (years) of the P12 age groups; 85+ taken as 89.
_AGE_MID = category_midpoints(AGE_GROUPS)
_AGE_GRADIENT = np.where(_AGE_MID >= 40.0, (_AGE_MID - 40.0) / 20.0, (_AGE_MID - 40.0) / 60.0)
_FAMILY = np.where(_AGE_MID < 18, 1.0, np.where((_AGE_MID >= 20) & (_AGE_MID < 35), -1.0, 0.0))
_COLLEGE = ((_AGE_MID >= 18) & (_AGE_MID < 25)).astype(float)

# Tilt scales (see the module docstring; tuned to the realism table there).
_SIZE_SHAPE = 8.0          # Gamma shape of the tract-size weights (CV = 1/sqrt(8) = 0.35)
_AGE_SCALE = 0.38          # log-tilt per unit of age index per unit of age gradient
_FAMILY_SCALE = 0.15       # log-tilt of children vs ages 20-34 per unit of family index
_COLLEGE_BOOST = 2.3       # log-boost of ages 18-24 in a college tract (exp(2.3) = 10)
_CELL_SD = 0.08            # sd of the independent per-cell log departure
_COLLEGE_BASE_RATE = 0.002  # college tracts per tract, everywhere
_COLLEGE_PEOPLE = 4000.0   # excess 18-24 year-olds per college tract
_IPF_TOL = 1e-9
_IPF_MAX_ITER = 1000
_MAX_TRACTS = 9999         # tract codes 000100 ... 999900


# =============================================================================================
# Synthetic tracts
# =============================================================================================
def synthetic_tracts(state: str = "KY", *, path=None, source=None, mean_size: float = 4000,
                     rng=None) -> pd.DataFrame:
    """A synthetic tract hierarchy built from real county x sex x age counts.

    ``state``: ``"KY"`` or ``"CA"``.  ``source`` selects the county table:

    * ``None`` (default): ``"nhgis"`` for Kentucky, ``"dhc"`` for California;
    * ``"nhgis"``: the enumerated 2010 SF1 values (``sf``) of table P12 in the NHGIS
      privacy-protected demonstration file (:func:`privinfer.datasets.load_nhgis_sex_by_age`;
      Kentucky or California);
    * ``"dhc"``: California's counties in the Census Bureau's 2022 demonstration DHC
      (:func:`privinfer.datasets.load_ddp_dhc_ca`);
    * a pair ``(counts, county_ids)``: your own (counties, 2, 23) counts and 5-digit county
      FIPS codes, passed to :func:`synthetic_tracts_from_counties` (``state`` and ``path``
      are then not used).

    ``path``: the data file or its directory (default: under ``$PRIVINFER_DATA``).
    ``mean_size``: target mean tract population (Census optimum 4,000).  ``rng``: ``None``
    for OS entropy, or an int seed / ``numpy.random.Generator`` to reproduce a hierarchy.
    Returns the tract frame (see the module docstring for the construction and its realism).
    """
    if isinstance(source, tuple):
        if len(source) != 2:
            raise ValueError("source must be None, 'nhgis', 'dhc' or a pair (counts, county_ids)")
        counts, county_ids = source
        return synthetic_tracts_from_counties(counts, county_ids, mean_size=mean_size, rng=rng)
    if isinstance(source, np.ndarray):
        raise ValueError("an array source needs its county FIPS codes: pass source=(counts, county_ids) "
                         "or call synthetic_tracts_from_counties(counts, county_ids)")
    key = str(state).strip().upper()
    if key not in ("KY", "CA"):
        raise ValueError(f"state must be 'KY' or 'CA' (or pass source=(counts, county_ids)), got {state!r}")
    if source is None:
        source = "nhgis" if key == "KY" else "dhc"
    if source == "nhgis":
        table = load_nhgis_sex_by_age(key, path)
        counts, county_ids = table.sf, table.geoid
    elif source == "dhc":
        if key != "CA":
            raise ValueError("source 'dhc' (the 2022 demonstration DHC) is available for CA only")
        table = load_ddp_dhc_ca(path, level="county")
        counts, county_ids = table.table(), table.geoid
    else:
        raise ValueError(f"source must be None, 'nhgis', 'dhc' or a pair (counts, county_ids), got {source!r}")
    return synthetic_tracts_from_counties(counts, county_ids, mean_size=mean_size, rng=rng)


def synthetic_tracts_from_counties(counts, county_ids, *, mean_size: float = 4000,
                                   rng=None) -> pd.DataFrame:
    """Split county x sex x age counts into synthetic tracts (construction in the module docstring).

    ``counts``: integer array-like of shape (counties, 2, 23) — sex (male, female) by the 23
    P12 age groups — with non-negative counts.  ``county_ids``: the counties' distinct 5-digit
    FIPS codes (text such as ``"21001"``), one per row of ``counts``.  Counties may come in any
    order; the frame is sorted by county.  For every county and cell the tract counts add up
    exactly to ``counts``.
    """
    counts = _county_counts(counts)
    ids = _county_ids(county_ids, counts.shape[0])
    if isinstance(mean_size, bool) or not isinstance(mean_size, numbers.Real) \
            or not np.isfinite(mean_size) or mean_size < 1:
        raise ValueError("mean_size must be a finite number >= 1")
    gen = as_generator(rng)
    order = np.argsort(ids, kind="stable")
    ids, counts = ids[order], counts[order].reshape(len(ids), _N_CELLS)

    totals = counts.sum(axis=1)
    n_tracts = np.maximum(1, np.rint(totals / float(mean_size)).astype(np.int64))
    if np.any(n_tracts > _MAX_TRACTS):
        raise ValueError(f"a county would get more than {_MAX_TRACTS} tracts (6-digit tract codes); "
                         "raise mean_size")
    share_1824 = counts[:, np.tile(_COLLEGE, 2) > 0].sum(axis=1) / np.maximum(totals, 1)
    baseline_1824 = float(np.median(share_1824)) if len(ids) else 0.0

    blocks = []
    for c in range(len(ids)):
        excess = max(0.0, float(totals[c]) * (share_1824[c] - baseline_1824))
        blocks.append(_split_county(counts[c], int(n_tracts[c]), excess, gen))
    return _frame(ids, n_tracts, np.concatenate(blocks, axis=0) if blocks
                  else np.zeros((0, _N_CELLS), np.int64))


def _county_counts(counts) -> np.ndarray:
    arr = np.asarray(counts)
    if arr.ndim != 3 or arr.shape[1:] != (2, len(AGE_GROUPS)):
        raise ValueError(f"counts must have shape (counties, 2, {len(AGE_GROUPS)}), got {arr.shape}")
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError("counts must be integers")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.floor(arr)):
            raise ValueError("counts must be finite integers")
        if np.any(np.abs(arr) >= 2.0 ** 62):
            raise ValueError("counts are too large")
    elif arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError("counts are too large")
    arr = arr.astype(np.int64)
    if np.any(arr < 0):
        raise ValueError("counts must be non-negative")
    return arr


def _county_ids(county_ids, n: int) -> np.ndarray:
    ids = np.asarray(county_ids)
    if ids.ndim != 1 or ids.shape[0] != n:
        raise ValueError(f"county_ids must be one-dimensional with one code per county ({n})")
    out = []
    for v in ids.tolist():
        if not isinstance(v, str) or len(v) != 5 or not v.isdigit() or not v.isascii():
            raise ValueError("county_ids must be 5-digit county FIPS codes given as text (e.g. '21001')")
        out.append(v)
    arr = np.array(out, dtype="<U5")
    if len(set(out)) != len(out):
        raise ValueError("county_ids must be distinct")
    return arr


def _split_county(cells: np.ndarray, n_tracts: int, excess_1824: float,
                  gen: np.random.Generator) -> np.ndarray:
    """(n_tracts, 46) tract counts whose column sums are ``cells`` exactly."""
    total = int(cells.sum())
    if n_tracts == 1 or total == 0:  # the county itself (or an empty county)
        out = np.zeros((n_tracts, _N_CELLS), np.int64)
        out[0] = cells
        return out
    # 2. target sizes
    g = gen.gamma(_SIZE_SHAPE, size=n_tracts)
    sizes = total * g / g.sum()
    # 3. tilted profiles (log scale, per tract x cell)
    z = gen.standard_normal(n_tracts)
    f = gen.standard_normal(n_tracts)
    k = np.zeros(n_tracts)
    lam = _COLLEGE_BASE_RATE * n_tracts + excess_1824 / _COLLEGE_PEOPLE
    n_college = min(int(gen.poisson(lam)), n_tracts // 3)
    if n_college:
        idx = gen.choice(n_tracts, size=n_college, replace=False)
        k[idx], z[idx], f[idx] = 1.0, 0.0, -1.0
    grad, fam, col = np.tile(_AGE_GRADIENT, 2), np.tile(_FAMILY, 2), np.tile(_COLLEGE, 2)
    logit = (_AGE_SCALE * z[:, None] * grad + _FAMILY_SCALE * f[:, None] * fam
             + _COLLEGE_BOOST * k[:, None] * col
             + _CELL_SD * gen.standard_normal((n_tracts, _N_CELLS)))
    w = np.exp(logit - logit.max(axis=1, keepdims=True)) * cells
    w /= w.sum(axis=1, keepdims=True)
    expected = _ipf(sizes[:, None] * w, sizes, cells.astype(float))
    # 4. one multinomial per county cell, with the fitted expected shares
    colsum = expected.sum(axis=0)
    probs = np.divide(expected, colsum, out=np.full_like(expected, 1.0 / n_tracts), where=colsum > 0)
    probs = np.clip(probs, 0.0, None)
    probs /= probs.sum(axis=0, keepdims=True)
    return gen.multinomial(cells, probs.T).T.astype(np.int64)


def _ipf(table: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Scale ``table`` (non-negative) to row sums ``rows`` and column sums ``cols``."""
    t = table.copy()
    for _ in range(_IPF_MAX_ITER):
        cs = t.sum(axis=0)
        t *= np.divide(cols, cs, out=np.zeros_like(cols), where=cs > 0)
        rs = t.sum(axis=1)
        if np.all(np.abs(rs - rows) <= _IPF_TOL * rows):
            break
        t *= np.divide(rows, rs, out=np.ones_like(rows), where=rs > 0)[:, None]
    return t


def _frame(ids: np.ndarray, n_tracts: np.ndarray, tract_counts: np.ndarray) -> pd.DataFrame:
    total_tracts = int(n_tracts.sum())
    tract_county = np.repeat(ids, n_tracts)
    offsets = np.concatenate([[0], np.cumsum(n_tracts)[:-1]]) if len(ids) else np.zeros(0, np.int64)
    number = np.arange(total_tracts) - np.repeat(offsets, n_tracts) + 1
    geoids = np.char.add(tract_county.astype("<U5"), np.char.zfill((number * 100).astype("<U6"), 6))
    sex_codes = np.repeat(np.arange(len(SEXES)), len(AGE_GROUPS))
    age_codes = np.tile(np.arange(len(AGE_GROUPS)), len(SEXES))
    return pd.DataFrame({
        "county": pd.array(np.repeat(tract_county, _N_CELLS).astype(object), dtype="str"),
        "tract": pd.array(np.repeat(geoids, _N_CELLS).astype(object), dtype="str"),
        "sex": pd.Categorical.from_codes(np.tile(sex_codes, total_tracts), categories=list(SEXES),
                                         ordered=True),
        "age": pd.Categorical.from_codes(np.tile(age_codes, total_tracts), categories=list(AGE_GROUPS),
                                         ordered=True),
        "count": tract_counts.reshape(-1).astype(np.int64),
    })


# =============================================================================================
# A user's own tract table
# =============================================================================================
_INT64_MAX = np.iinfo(np.int64).max


def read_tract_table(path_or_frame, *, geography=("county", "tract"), attributes=("sex", "age"),
                     count: str = "count") -> pd.DataFrame:
    """Read a user's own tract-level table into the tract-frame interface.

    ``path_or_frame``: a CSV file (suffix ``.csv``, optionally compressed, e.g. ``.csv.gz``),
    a Parquet file (``.parquet`` / ``.pq``) or a ``pandas.DataFrame``.  ``geography``: the
    nested geography columns, coarsest first (each is read as text so leading zeros stay;
    a numeric geography column in a frame or Parquet file is refused because its leading
    zeros may already be lost).  ``attributes``: the cross-classifying columns, kept as
    categoricals (an existing categorical keeps its categories and order; otherwise ordered
    categories in order of first appearance).  ``count``: the count column (integers, possibly
    written as whole floats such as ``3.0``), returned as int64 column ``"count"``.

    Returns a new frame with columns geography, attributes, ``"count"``, rows sorted by
    geography then attributes (in category order), index 0..n-1.  Every unit (distinct
    geography tuple) must have exactly one row for every combination of the attributes'
    categories.  Problems raise a one-line ``ValueError`` naming the column and how many
    rows or units are affected; data values are never printed.
    """
    geography, attributes = _names(geography, "geography"), _names(attributes, "attributes")
    if not geography:
        raise ValueError("geography must name at least one column")
    if not isinstance(count, str) or not count:
        raise ValueError("count must be a column name")
    names = list(geography) + list(attributes) + [count]
    if len(set(names)) != len(names):
        raise ValueError("geography, attributes and count must name distinct columns")
    if "count" in geography + attributes:
        raise ValueError("a geography or attribute column may not be called 'count' (the output's count column)")

    df = _read_any(path_or_frame, geography, attributes)
    missing = [c for c in names if c not in df.columns]
    if missing:
        raise ValueError(f"missing column(s): {', '.join(repr(c) for c in missing)}")
    df = df[names]
    if len(df) == 0:
        raise ValueError("the table has no rows")

    out = {}
    for c in geography:
        out[c] = _geography_column(df[c], c)
    for c in attributes:
        out[c] = _attribute_column(df[c], c)
    out["count"] = _count_column(df[count], count)
    frame = pd.DataFrame(out)

    keys = list(geography) + list(attributes)
    n_dup = int(frame.duplicated(subset=keys).sum())
    if n_dup:
        raise ValueError(f"{n_dup} duplicate cell(s): rows repeating the same {', '.join(keys)}")
    n_combos = 1
    for c in attributes:
        n_combos *= len(frame[c].cat.categories)
    per_unit = frame.groupby(list(geography), sort=False, observed=True).size()
    n_bad = int((per_unit != n_combos).sum())
    if n_bad:
        what = " x ".join(attributes) if attributes else "cell"
        raise ValueError(f"{n_bad} of {len(per_unit)} unit(s) ({', '.join(geography)}) lack some of the "
                         f"{n_combos} {what} combinations")
    return frame.sort_values(keys, kind="stable").reset_index(drop=True)


def _names(cols, what: str) -> tuple:
    if isinstance(cols, str):
        cols = (cols,)
    try:
        cols = tuple(cols)
    except TypeError:
        raise ValueError(f"{what} must be a column name or a sequence of column names") from None
    if not all(isinstance(c, str) and c for c in cols):
        raise ValueError(f"{what} must be column names (text)")
    return cols


def _read_any(src, geography, attributes) -> pd.DataFrame:
    if isinstance(src, pd.DataFrame):
        return src
    if not isinstance(src, (str, os.PathLike)):
        raise ValueError("path_or_frame must be a pandas DataFrame or the path of a .csv or .parquet file")
    p = Path(src)
    suffixes = [s.lower() for s in p.suffixes]
    if p.suffix.lower() in (".parquet", ".pq"):
        return pd.read_parquet(p)
    if ".csv" in suffixes[-2:]:
        header = pd.read_csv(p, nrows=0).columns
        text = {c: str for c in list(geography) + list(attributes) if c in header}
        return pd.read_csv(p, dtype=text, keep_default_na=False, na_values={c: [""] for c in header})
    raise ValueError(f"cannot tell the format of {p.name!r}: use a .csv or .parquet suffix")


def _geography_column(s: pd.Series, name: str):
    n_na = int(s.isna().sum())
    if n_na:
        raise ValueError(f"geography column {name!r} has {n_na} missing value(s)")
    if isinstance(s.dtype, pd.CategoricalDtype):
        s = s.astype(object)
    if pd.api.types.infer_dtype(s, skipna=False) != "string":
        raise ValueError(f"geography column {name!r} must hold text (codes such as '01001'); numbers "
                         "may have lost their leading zeros")
    return pd.array(s.to_numpy(dtype=object), dtype="str")


def _attribute_column(s: pd.Series, name: str):
    n_na = int(s.isna().sum())
    if n_na:
        raise ValueError(f"attribute column {name!r} has {n_na} missing value(s)")
    if isinstance(s.dtype, pd.CategoricalDtype):
        return pd.Categorical(s)
    values = s.to_numpy()
    return pd.Categorical(values, categories=pd.unique(values), ordered=True)


def _count_column(s: pd.Series, name: str) -> np.ndarray:
    n_na = int(s.isna().sum())
    if n_na:
        raise ValueError(f"count column {name!r} has {n_na} missing value(s)")
    if pd.api.types.is_bool_dtype(s.dtype):
        raise ValueError(f"count column {name!r} must hold integers, not booleans")
    if not pd.api.types.is_numeric_dtype(s.dtype):
        num = pd.to_numeric(s, errors="coerce")
        n_bad = int(num.isna().sum())
        if n_bad:
            raise ValueError(f"count column {name!r} has {n_bad} non-numeric value(s)")
        s = num
    if pd.api.types.is_integer_dtype(s.dtype):
        v = s.to_numpy()
        if v.dtype == np.uint64 and int(v.max()) > _INT64_MAX:
            n_big = int((v > np.uint64(_INT64_MAX)).sum())
            raise ValueError(f"count column {name!r} has {n_big} value(s) beyond the int64 range")
        v = v.astype(np.int64)
    else:
        f = s.to_numpy(dtype=float)
        n_big = int((~np.isfinite(f) | (np.abs(f) >= 2.0 ** 63)).sum())
        if n_big:
            raise ValueError(f"count column {name!r} has {n_big} value(s) beyond the int64 range")
        n_frac = int((f != np.floor(f)).sum())
        if n_frac:
            raise ValueError(f"count column {name!r} has {n_frac} non-integer value(s)")
        if np.any(np.abs(f) > 2.0 ** 53):
            raise ValueError(f"count column {name!r} has integers too large to be exact as floating point")
        v = f.astype(np.int64)
    n_neg = int((v < 0).sum())
    if n_neg:
        raise ValueError(f"count column {name!r} has {n_neg} negative value(s)")
    return v
