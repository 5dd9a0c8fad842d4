"""Benchmark of the nested block update (privinfer.lattice.nested) at state scale.

The shape of one state's sex x age cells: 46 blocks (the groups; each block's total is
invariant), each of 1,083 cells (tracts) in 120 counties of uneven sizes (the same county
partition in every block).  Cell weights are Gaussian, sd 10, around noisy measurements of
counts near 65; county potentials are Gaussian, sd 14, around the county's noisy
measurement of the group.  Tree: cells -> 46 x 120 county units -> 46 blocks.

Prints, in one run, the time per full update of all 46 blocks
1. nested_block_kernel on the whole tree (every block in one call),
2. nested_block_kernel block by block (46 calls on one-block trees, one after another),
3. the baseline: block_kernel on the same cells grouped by block, without county
   potentials (one call),
the ratios to the baseline, the acceptance rates, and the peak memory of one call of each
(tracemalloc, in a separate run from the timings).

Usage: python benchmarks/bench_nested_block.py [--quick]
"""

from __future__ import annotations

import sys
import time
import tracemalloc

import numpy as np

from privinfer.lattice import (
    CellSum,
    GroupTree,
    LatticeState,
    LocalLogDensity,
    NestedTree,
    SeparableCells,
    block_kernel,
    nested_block_kernel,
)

N_BLOCKS, N_TRACTS, N_COUNTIES = 46, 1083, 120
CELL_SD, COUNTY_SD = 10.0, 14.0


def county_sizes(rng):
    """120 county sizes summing to 1,083, skewed (lognormal), each at least 1."""
    w = rng.lognormal(0.0, 1.0, N_COUNTIES)
    s = np.maximum(1, np.floor(w / w.sum() * (N_TRACTS - N_COUNTIES)).astype(int) + 1)
    s[np.argmax(s)] += N_TRACTS - s.sum()
    return s


def problem(seed=0):
    rng = np.random.default_rng(seed)
    sizes = county_sizes(rng)
    county = np.repeat(np.arange(N_COUNTIES), sizes)  # county of each tract
    n = N_BLOCKS * N_TRACTS
    truth = rng.poisson(rng.uniform(45, 85, n)).astype(np.int64)
    y = truth + rng.normal(0, CELL_SD, n)  # tract measurements
    unit = (np.arange(N_BLOCKS)[:, None] * N_COUNTIES + county[None, :]).ravel()
    block_of_unit = np.repeat(np.arange(N_BLOCKS), N_COUNTIES)
    county_truth = np.bincount(unit, weights=truth, minlength=N_BLOCKS * N_COUNTIES)
    m = county_truth + rng.normal(0, COUNTY_SD, county_truth.size)  # county measurements

    def cell(idx, v):
        return -((np.asarray(v) - y[idx]) ** 2) / (2 * CELL_SD**2)

    def phi(level, units, s):
        return -((np.asarray(s) - m[units]) ** 2) / (2 * COUNTY_SD**2)

    return dict(truth=truth, y=y, m=m, unit=unit, block_of_unit=block_of_unit, county=county,
                sizes=sizes, cells=SeparableCells([CellSum(cell)]), cell=cell, phi=phi,
                block=np.repeat(np.arange(N_BLOCKS), N_TRACTS))


def per_block_parts(p):
    """One-block trees and their cell/potential functions (block b's cells and units)."""
    parts = []
    for b in range(N_BLOCKS):
        cells = np.arange(b * N_TRACTS, (b + 1) * N_TRACTS)
        units0 = b * N_COUNTIES
        tree = NestedTree([p["county"], np.zeros(N_COUNTIES, dtype=np.int64)])

        def cell(idx, v, off=cells[0]):
            return p["cell"](np.asarray(idx) + off, v)

        def phi(level, units, s, off=units0):
            return p["phi"](level, np.asarray(units) + off, s)

        parts.append((cells, tree, cell, phi))
    return parts


def run_nested(rng, x, tree, p, reps):
    acc = prop = 0
    for _ in range(reps):
        x, info = nested_block_kernel(rng, x, tree, p["cells"], p["phi"], lower=0)
        acc += info.n_accepted.sum()
        prop += info.n_proposed.sum()
    return x, acc / max(prop, 1), info


def run_per_block(rng, x, parts, reps):
    x = x.copy()
    acc = prop = 0
    for _ in range(reps):
        for cells, tree, cell, phi in parts:
            x[cells], info = nested_block_kernel(rng, x[cells], tree, cell, phi, lower=0)
            acc += info.n_accepted.sum()
            prop += info.n_proposed.sum()
    return x, acc / max(prop, 1)


def run_baseline(rng, x, tree, density, reps):
    st = LatticeState(x[None, :].copy(), density.init_stat(x[None, :]))
    acc = prop = 0
    for _ in range(reps):
        st, info = block_kernel(rng, st, tree, density, lower=0)
        acc += info.n_accepted.sum()
        prop += info.n_proposed.sum()
    return st.e[0], acc / max(prop, 1)


def timed(f, *args):
    t = time.perf_counter()
    out = f(*args)
    return time.perf_counter() - t, out


def peak_mib(f, *args):
    tracemalloc.start()
    f(*args)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def main(quick=False):
    reps = 2 if quick else 10
    p = problem(0)
    x0 = p["truth"]
    ntree = NestedTree([p["unit"], p["block_of_unit"]])
    gtree = GroupTree(p["block"])
    density = LocalLogDensity([CellSum(p["cell"])])
    parts = per_block_parts(p)
    print(f"{N_BLOCKS} blocks x {N_TRACTS} cells ({ntree.n} cells), {N_COUNTIES} counties per block "
          f"(sizes {p['sizes'].min()}..{p['sizes'].max()}), cell sd {CELL_SD:g}, county sd {COUNTY_SD:g}")
    rng = np.random.default_rng(1)
    # warm-up (imports, FFT plans), then the timings
    run_nested(rng, x0, ntree, p, 1)
    run_baseline(rng, x0, gtree, density, 1)
    t_base, (_, acc_base) = timed(run_baseline, rng, x0, gtree, density, reps)
    t_nest, (xn, acc_nest, info) = timed(run_nested, rng, x0, ntree, p, reps)
    t_seq, (xs, acc_seq) = timed(run_per_block, rng, x0, parts, reps)
    for x in (xn, xs):
        assert np.array_equal(np.bincount(p["block"], weights=x), np.bincount(p["block"], weights=x0))
    print(f"widest cell window {info.width}, capped {info.capped}")
    print(f"{'update of all 46 blocks':48s} {'s / update':>11s} {'ratio':>7s} {'accept':>7s}")
    rows = [("baseline: block_kernel, no potentials (1 call)", t_base, acc_base),
            ("nested_block_kernel, whole tree (1 call)", t_nest, acc_nest),
            ("nested_block_kernel, block by block (46 calls)", t_seq, acc_seq)]
    for name, t, a in rows:
        print(f"{name:48s} {t / reps:11.3f} {t / t_base:7.2f} {a:7.4f}")
    print("peak memory of one update (tracemalloc):")
    print(f"  baseline {peak_mib(run_baseline, rng, x0, gtree, density, 1):8.1f} MiB")
    print(f"  nested, whole tree {peak_mib(run_nested, rng, x0, ntree, p, 1):8.1f} MiB")
    print(f"  nested, block by block {peak_mib(run_per_block, rng, x0, parts, 1):8.1f} MiB")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
