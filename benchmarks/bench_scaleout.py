"""Benchmark of the partitioned release (privinfer.scaleout.release_frame) on a Dask LocalCluster.

Data: ``--cells`` counts in ``--groups`` groups of equal size, sorted by group (as census files
are ordered by geography), generated lazily in partitions of ``--partition-cells`` rows by the
workers themselves (nothing is held by the driver), so groups span partition boundaries.
Mechanism: generalized Laplace, l1 norm, epsilon = 0.5, each group's total kept (exact
compositions sampler, one SeedSequence per group).

Prints, in one run:

(a) cells per second of the release on a LocalCluster of 1 and of 2 worker processes (one
    thread each): survey + release + a reduction of the output (a checksum and the total of
    the released counts, checked against the input's); the ratio 2 workers / 1 worker; and
    each worker's peak resident memory (``ru_maxrss``) against the size of one partition --
    it must be bounded by the partition size, not the data size.  The two releases must be
    identical (same seed), which the checksums verify.
(b) the single-process baseline on the first partitions (up to 2 x 10^6 cells): the same
    per-group code on a pandas frame (``release_frame``), and the mechanism's own exact
    release of the whole block in one call (``GeneralizedLaplace(groups).release``: one
    generator for all groups, vectorized over groups); their ratio is the price of the
    per-group seeding contract.
(c) the price of privacy accounting on the 2-worker cluster: the same release with a ledger
    (``ledger=``: a second pass streams the counts to the driver, one window of partitions at
    a time, for the keyed fingerprint; then the budget check and the entry) against the
    release without one, both timed to the end of the survey and graph construction (the
    release itself is the same lazy frame); the driver's peak memory must stay bounded by a
    window of partitions.

Usage: python benchmarks/bench_scaleout.py [--cells N] [--groups G] [--partition-cells P] [--quick]
(--quick: 10^6 cells in 10^3 groups, partitions of 2 x 10^5).  The full size is 10^8 cells in
10^5 groups.
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

EPSILON = 0.5


def make_partition(i: int, start: int, stop: int, group_size: int) -> pd.DataFrame:
    """Rows start..stop-1: block id, group (row // group_size) and a count (seeded by i)."""
    rng = np.random.default_rng([2024, i])
    rows = np.arange(start, stop, dtype=np.int64)
    return pd.DataFrame({"block": rows, "group": rows // group_size,
                         "count": rng.integers(0, 1000, rows.size, dtype=np.int64)})


def lazy_frame(cells: int, groups: int, partition_cells: int):
    import dask.dataframe as dd

    group_size = cells // groups
    bounds = list(range(0, cells, partition_cells)) + [cells]
    args = [(i, a, b, group_size) for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
    return dd.from_map(lambda a: make_partition(*a), args, divisions=tuple(bounds[:-1]) + (cells - 1,),
                       enforce_metadata=False)


def _checksum(block: pd.DataFrame) -> pd.DataFrame:
    y = block["count"].to_numpy()
    w = (block["block"].to_numpy() % 1_000_003) + 1
    return pd.DataFrame({"total": [int(y.sum())], "check": [int((y * w).sum() % (2**61 - 1))]})


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def on_cluster(workers: int, cells: int, groups: int, partition_cells: int):
    from dask.distributed import Client, LocalCluster

    from privinfer.scaleout import release_frame

    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, memory_limit="4GiB",
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("privinfer.scaleout.groups"))  # imports are not timed
        base = client.run(peak_rss_mb)
        frame = lazy_frame(cells, groups, partition_cells)
        t0 = time.perf_counter()
        rel = release_frame(frame, value="count", group="group", mechanism="generalized-laplace", seed=1,
                            epsilon=EPSILON)
        sums = rel.frame.map_partitions(_checksum, meta={"total": "i8", "check": "i8"}).compute()
        dt = time.perf_counter() - t0
        peaks = client.run(peak_rss_mb)
    assert int(sums["total"].sum()) == int(rel.totals.sum()), "group totals not kept"
    return dt, tuple(sums["check"]), base, peaks, rel


def accounting(cells: int, groups: int, partition_cells: int):
    from dask.distributed import Client, LocalCluster

    from privinfer.scaleout import release_frame
    from privinfer.scaleout.frames import FINGERPRINT_WINDOW
    from privinfer.workflow import Ledger

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="4GiB",
                      dashboard_address=None) as cluster, Client(cluster), tempfile.TemporaryDirectory() as tmp:
        frame = lazy_frame(cells, groups, partition_cells)
        release_frame(frame, value="count", group="group", mechanism="generalized-laplace", seed=1,
                      epsilon=EPSILON)  # warm-up (imports on the workers), not timed
        times = {}
        for with_ledger in (False, True):
            kw = {"ledger": Ledger(Path(tmp) / "ledger.json")} if with_ledger else {}
            t0 = time.perf_counter()
            release_frame(frame, value="count", group="group", mechanism="generalized-laplace", seed=1,
                          epsilon=EPSILON, **kw)
            times[with_ledger] = time.perf_counter() - t0
    return times[False], times[True], FINGERPRINT_WINDOW


def single_process(cells: int, groups: int, partition_cells: int):
    from privinfer import invariants
    from privinfer.mechanisms import GeneralizedLaplace
    from privinfer.scaleout import release_frame

    n = min(cells, 2 * 10**6)
    parts = [make_partition(i, a, min(a + partition_cells, n), cells // groups)
             for i, a in enumerate(range(0, n, partition_cells))]
    df = pd.concat(parts, ignore_index=True)
    t0 = time.perf_counter()
    rel = release_frame(df, value="count", group="group", mechanism="generalized-laplace", seed=1, epsilon=EPSILON)
    t_frame = time.perf_counter() - t0
    codes = df["group"].to_numpy()
    mech = GeneralizedLaplace(invariants.groups(codes), EPSILON)
    t0 = time.perf_counter()
    y = mech.release(df["count"].to_numpy(), rng=1)
    t_mech = time.perf_counter() - t0
    assert mech.exact and np.array_equal(np.bincount(codes, y), np.bincount(codes, df["count"].to_numpy()))
    assert rel.guarantee["exact"]
    return n, t_frame, t_mech


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cells", type=int, default=10**8)
    ap.add_argument("--groups", type=int, default=10**5)
    ap.add_argument("--partition-cells", type=int, default=10**6)
    ap.add_argument("--quick", action="store_true", help="10^6 cells in 10^3 groups (sanity run)")
    a = ap.parse_args()
    if a.quick:
        a.cells, a.groups, a.partition_cells = 10**6, 10**3, 2 * 10**5
    part_mb = a.partition_cells * 3 * 8 / 2**20
    print(f"{a.cells:.3g} cells in {a.groups:.3g} groups of {a.cells // a.groups}; partitions of "
          f"{a.partition_cells:.3g} rows ({part_mb:.0f} MB of int64 columns each); generalized Laplace eps={EPSILON}")

    results = {}
    for w in (1, 2):
        dt, check, base, peaks, rel = on_cluster(w, a.cells, a.groups, a.partition_cells)
        results[w] = (dt, check)
        peak = ", ".join(f"{peaks[k]:.0f} MB (idle {base[k]:.0f} MB)" for k in sorted(peaks))
        print(f"(a) {w} worker(s): {dt:7.1f} s  {a.cells / dt:12,.0f} cells/s   peak RSS per worker: {peak}")
    print(f"    ratio 2 workers / 1 worker: {results[1][0] / results[2][0]:.2f}x speed-up; "
          f"identical releases: {results[1][1] == results[2][1]}; redrawn cells (groups spanning "
          f"partitions): {rel.redrawn_cells}")
    print(f"    guarantee: {rel.guarantee.definition}, epsilon={rel.guarantee['epsilon']}, "
          f"delta={rel.guarantee['delta']}, exact={rel.guarantee['exact']}")

    t_plain, t_ledger, window = accounting(a.cells, a.groups, a.partition_cells)
    print(f"(c) survey without a ledger {t_plain:6.1f} s; with a ledger (fingerprint pass, window of {window} "
          f"partitions) {t_ledger:6.1f} s: ratio {t_ledger / t_plain:.2f}; driver peak RSS {peak_rss_mb():.0f} MB")

    n, t_frame, t_mech = single_process(a.cells, a.groups, a.partition_cells)
    print(f"(b) single process, first {n:.3g} cells: release_frame (per-group streams) {n / t_frame:12,.0f} cells/s; "
          f"GeneralizedLaplace(groups).release (one stream) {n / t_mech:12,.0f} cells/s")
    print(f"    per-group seeding costs {t_frame / t_mech:.2f}x the one-stream exact release; "
          f"1 worker / single process (same code): {(a.cells / results[1][0]) / (n / t_frame):.2f}")


if __name__ == "__main__":
    main()
