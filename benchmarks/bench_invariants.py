"""Projection time and peak memory for ``groups`` invariants (partition totals).

Prints, for n = 1e4, 1e5, 1e6, 3e6 cells in ~n/1000 groups: the time of ``project_null``
on one vector, the peak traced memory (tracemalloc), and — where a dense projection
``P_N = I - C^T (C C^T)^+ C`` fits (n <= 1e4) — its time and the ratio dense / structured.

Run: ``python benchmarks/bench_invariants.py [--max-n 3000000]``
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from privinfer import invariants as I


def _timed(f, *args, repeat=3):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f(*args)
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--max-n", type=int, default=3_000_000)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(0)
    print(f"{'n':>10} {'groups':>7} {'structured s':>13} {'peak MiB':>9} {'x vector':>9} {'dense s':>9} {'dense/struct':>13}")
    for n in [10_000, 100_000, 1_000_000, 3_000_000]:
        if n > args.max_n:
            break
        g = max(1, n // 1000)
        labels = rng.integers(0, g, size=n)
        inv = I.groups(labels)
        v = rng.standard_normal(n)
        tracemalloc.start()
        t_struct, pn = _timed(inv.project_null, v)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert np.allclose(np.bincount(inv.group_codes, weights=pn), 0, atol=1e-6)
        dense_t = ratio = float("nan")
        if n <= 10_000:
            C = inv.matrix.toarray()
            def dense_proj(v):
                P = np.eye(n) - C.T @ np.linalg.pinv(C @ C.T) @ C
                return P @ v
            dense_t, pd = _timed(dense_proj, v, repeat=1)
            assert np.allclose(pd, pn, atol=1e-8)
            ratio = dense_t / t_struct
        print(f"{n:>10} {g:>7} {t_struct:>13.4f} {peak / 2**20:>9.1f} {peak / (8 * n):>9.2f} {dense_t:>9.3f} {ratio:>13.1f}")


if __name__ == "__main__":
    main()
