"""Benchmark: reading a counts file for ``privinfer release``.

``read_counts`` (pandas' Python CSV parser, which tells a missing field from an empty one,
then the per-cell checks: blank rows, field counts, exact integer parsing with the 2^52
bounds, ids) against two baselines measured in the same run on the same file:

* the standard library's ``csv.reader`` followed by ``int()`` on the count column (no checks);
* pandas' C parser reading the same file with ``dtype=str`` (fast, but it pads short rows
  with empty fields silently, which is why ``read_counts`` does not use it).

Also a wide file (many label columns, two rows) and the same table as Parquet (pyarrow).
Prints wall-clock times (best of ``REPEATS``) and ratios.  ``--quick``: small sizes, one run.
Run: ``python benchmarks/bench_read_counts.py [--quick]``.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np


def best_time(f, repeats):
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, one run (sanity check)")
    args = ap.parse_args()
    rows = 20_000 if args.quick else 1_000_000
    wide = 2_000 if args.quick else 30_000
    repeats = 1 if args.quick else 3

    import pandas as pd

    from privinfer.workflow.files import InvariantSpec, read_counts

    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "counts.csv"
        counts = rng.integers(0, 100_000, rows)
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["state", "county", "population"])
            w.writerows((f"s{i % 50}", f"c{i}", int(v)) for i, v in enumerate(counts))
        spec = InvariantSpec.parse("groups:state")

        def stdlib():
            with open(path, newline="") as fh:
                r = csv.reader(fh)
                next(r)
                return np.array([int(row[2]) for row in r])

        t_ours, table = best_time(lambda: read_counts(path, spec, integer=True), repeats)
        t_csv, base = best_time(stdlib, repeats)
        t_c, _ = best_time(lambda: pd.read_csv(path, dtype=str, keep_default_na=False), repeats)
        assert np.array_equal(table.values, base) and np.array_equal(base, counts)
        print(f"{rows} rows x 3 columns (CSV)")
        print(f"  read_counts          {t_ours:8.3f} s")
        print(f"  csv.reader + int     {t_csv:8.3f} s   ratio read_counts / baseline {t_ours / t_csv:5.2f}")
        print(f"  pandas C parser      {t_c:8.3f} s   ratio read_counts / C parser {t_ours / t_c:5.2f}")

        pq = Path(tmp) / "counts.parquet"
        pd.DataFrame({"state": [f"s{i % 50}" for i in range(rows)], "county": [f"c{i}" for i in range(rows)],
                      "population": counts}).to_parquet(pq)
        t_pq, table_pq = best_time(lambda: read_counts(pq, spec, integer=True), repeats)
        assert np.array_equal(table_pq.values, counts)
        print(f"  read_counts, Parquet {t_pq:8.3f} s   ratio Parquet / CSV {t_pq / t_ours:5.2f}")

        wpath = Path(tmp) / "wide.csv"
        with open(wpath, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow([f"c{j}" for j in range(wide)] + ["n"])
            w.writerow([f"a{j}" for j in range(wide)] + ["5"])
            w.writerow([f"b{j}" for j in range(wide)] + ["7"])
        t_wide, tw = best_time(lambda: read_counts(wpath, InvariantSpec.parse("total"), integer=True), repeats)
        t_wcsv, _ = best_time(lambda: list(csv.reader(open(wpath, newline=""))), repeats)
        assert len(tw.layout.label_columns) == wide
        print(f"{wide} label columns x 2 rows (CSV)")
        print(f"  read_counts          {t_wide:8.3f} s   ratio read_counts / csv.reader {t_wide / t_wcsv:7.1f}")


if __name__ == "__main__":
    main()
