"""Hierarchical GLS (two passes over the tree) against the sparse/Woodbury GLS solve.

Data: Kentucky tracts (``privinfer.census.synthetic_tracts("KY")``: real county x sex x age
counts of the 2010 SF1 split into 1,083 tracts; 49,818 cells), measured as the 2020 Census
does (state, county and tract levels; queries total and sex x age; rho 0.0025 per level and
query; state total invariant).  Printed, in one run:

* the hierarchical GLS time and peak memory (tracemalloc) on all of Kentucky;
* on the first ``--dense-counties`` counties (a sub-table small enough for it), the time and
  peak memory of the previous solve (``privinfer.inference.gls``: sparse LU and n column
  solves for the variances, since the tract level's totals make K non-diagonal), the same
  for the tree, their ratios, and the largest differences of estimates and standard errors
  (the two must agree to round-off);
* a national-size synthetic file (``--national``: 85,000 tracts in 3,221 counties in 51
  states under a nation, about 3.9 million cells): build, release and tree GLS times, peak
  memory.

Goals: Kentucky tracts under 2 s and 500 MB; equal to the dense solve to 1e-8; the national
file in under a minute.

Run: ``python benchmarks/bench_hierarchical_gls.py [--dense-counties 12] [--national]``
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import pandas as pd

from privinfer.census import frame_counts, hierarchy_measurements, synthetic_tracts
from privinfer.inference import gls, gls_estimate
from privinfer.lattice.laws import discrete_gaussian_variance

QUERIES = {"total": (), "sex x age": ("sex", "age")}


def measured(f, fn):
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    dt = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return out, dt, peak


def release_of(frame, geography, seed):
    mech = hierarchy_measurements(frame, geography=geography, attributes=["sex", "age"], queries=QUERIES,
                                  rho=0.0025)
    return mech.publish(frame_counts(frame), rng=seed)


def old_solve(release):
    m = release.mechanism
    v = np.repeat([discrete_gaussian_variance(float(s)) for s in m.sigmas], m.sizes)
    inv = release.invariant
    return gls(m.matrix, v, release.y, inv.matrix, release.t)


def national(seed):
    rng = np.random.default_rng(seed)
    n_tracts, n_counties, n_states = 85_000, 3_221, 51
    county_state = np.sort(rng.integers(0, n_states, n_counties))
    county_state[:n_states] = np.arange(n_states)
    county_state.sort()
    tract_county = np.sort(np.r_[np.arange(n_counties), rng.integers(0, n_counties, n_tracts - n_counties)])
    d = 46
    frame = pd.DataFrame({
        "state": np.repeat(np.char.add("s", county_state[tract_county].astype(str)), d),
        "county": np.repeat(np.char.add("c", tract_county.astype(str)), d),
        "tract": np.repeat(np.char.add("t", np.arange(n_tracts).astype(str)), d),
        "sex": np.tile(np.repeat(["male", "female"], 23), n_tracts),
        "age": np.tile(np.arange(23), 2 * n_tracts),
        "count": rng.poisson(87, n_tracts * d),
    })
    return frame


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dense-counties", type=int, default=12)
    ap.add_argument("--national", action="store_true")
    ap.add_argument("--seed", type=int, default=2024)
    args = ap.parse_args(argv)

    frame = synthetic_tracts("KY", rng=args.seed)
    rel = release_of(frame, ["county", "tract"], args.seed)
    est, t_tree, m_tree = measured(frame, lambda: gls_estimate(rel))
    x = frame_counts(frame)
    cover = np.mean((est.lower <= x) & (x <= est.upper))
    print(f"Kentucky tracts: {rel.mechanism.n} cells, {rel.mechanism.m} measurements")
    print(f"  tree GLS: {t_tree:.3f} s, peak {m_tree:.0f} MiB; RMSE {np.sqrt(np.mean((est.x - x) ** 2)):.2f}, "
          f"90% coverage {cover:.3f}, {int(np.sum(est.lower < 0))} intervals below zero")

    counties = sorted(frame["county"].unique())[: args.dense_counties]
    sub = frame[frame["county"].isin(counties)].reset_index(drop=True)
    rs = release_of(sub, ["county", "tract"], args.seed)
    tree, t1, m1 = measured(sub, lambda: gls_estimate(rs))
    old, t0, m0 = measured(sub, lambda: old_solve(rs))
    print(f"first {len(counties)} counties ({rs.mechanism.n} cells):")
    print(f"  previous solve {t0:.3f} s, peak {m0:.0f} MiB; tree {t1:.4f} s, peak {m1:.1f} MiB; "
          f"time ratio tree/previous {t1 / t0:.4f}, memory ratio {m1 / m0:.4f}")
    print(f"  max |x difference| {np.abs(tree.x - old.x).max():.2e}, max |se difference| {np.abs(tree.se - old.se).max():.2e}")

    if args.national:
        f, tb, mb = measured(None, lambda: national(args.seed))
        t0 = time.perf_counter()
        mech = hierarchy_measurements(f, geography=["state", "county", "tract"], attributes=["sex", "age"],
                                      queries=QUERIES, rho=0.0025, top="nation")
        t_build = time.perf_counter() - t0
        t0 = time.perf_counter()
        r = mech.publish(frame_counts(f), rng=args.seed)
        t_pub = time.perf_counter() - t0
        e, t_gls, m_gls = measured(None, lambda: gls_estimate(r))
        xn = frame_counts(f)
        print(f"national synthetic: {mech.n} cells; build {t_build:.1f} s, release {t_pub:.1f} s, "
              f"tree GLS {t_gls:.1f} s (peak {m_gls:.0f} MiB), 90% coverage "
              f"{np.mean((e.lower <= xn) & (xn <= e.upper)):.4f}")


if __name__ == "__main__":
    main()
