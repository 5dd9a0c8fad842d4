"""Benchmark of the exact lattice release (generalized Laplace, l1 norm, group totals kept).

Prints, in one run:

(a) the national county release: all 3,221 counties of the 2010 Census Gazetteer with the
    52 state totals (50 states, DC, Puerto Rico) kept exactly,
    ``GeneralizedLaplace(invariants.groups(states), epsilon=0.192)`` (exact: compositions per
    state), against a naive baseline with NumPy's floating-point geometric sampler: per state,
    iid two-sided geometric noise ``G1 - G2`` (``rng.geometric``), redrawn until the state's
    noise sums to zero.  Time per release of each and the ratio exact / naive;
(b) time per cell of the exact release for 10^5, 10^6 and 10^7 cells in groups of 3,000
    (epsilon = 0.192): the engine's partition sampler
    (:func:`privinfer.lattice.sample_partition_double_geometric`, the sampler behind the
    mechanism's release) applied to blocks of whole groups of at most 10^6 cells, so the
    peak memory stays a few int64 vectors of n cells (groups are independent, so drawing
    block by block is the same law); every group's noise is checked to sum to zero;
(c) for reference, the MCMC path on the first 100 counties (``sampler="mcmc"``: the burn-in
    is certified by L-lag couplings), its wall time and the delta its guarantee states.

Data: ``$PRIVINFER_DATA/census2010_county_pop_gazetteer`` (see ``privinfer.datasets``).

Usage: PRIVINFER_DATA=/path/to/data python benchmarks/bench_exact_release.py [--quick]
(--quick: fewer repetitions, sizes up to 10^6, 16 coupling replicates in (c)).
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from privinfer import invariants
from privinfer.datasets import load_gazetteer_counties
from privinfer.lattice import sample_partition_double_geometric
from privinfer.lattice.laws import as_rational
from privinfer.mechanisms.integer_subspace import GeneralizedLaplace

EPSILON = 0.192
GROUP = 3_000
BLOCK_GROUPS = 333  # groups per block in (b): 999,000 cells


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def naive_release(rng, x, blocks, eps):
    """Per group: iid G1 - G2 with P(G = g) = (1 - a) a^(g - 1), g >= 1, a = exp(-eps), redrawn
    until the group's noise sums to zero.  Returns (y, number of candidate vectors drawn)."""
    p = -np.expm1(-eps)  # 1 - a
    e = np.empty_like(x)
    tries = 0
    for cells in blocks:
        k = cells.size
        while True:
            tries += 1
            d = rng.geometric(p, k) - rng.geometric(p, k)
            if d.sum() == 0:
                break
        e[cells] = d
    return x + e, tries


def national(quick: bool) -> None:
    print("== (a) national county release: 3,221 counties, 52 state totals kept, epsilon = 0.192 ==")
    g = load_gazetteer_counties()
    x, usps = np.asarray(g.pop10, dtype=np.int64), g.usps
    inv = invariants.groups(usps)
    t_state = inv.of(x)
    codes = inv.partition.codes
    blocks = [np.flatnonzero(codes == c) for c in range(inv.partition.sizes.size)]
    mech = GeneralizedLaplace(inv, epsilon=EPSILON)
    assert mech.exact, "the national release must take the exact path"
    R = 10 if quick else 50
    rng = np.random.default_rng(20100401)

    t = time.perf_counter()
    y = mech.release(x, rng=rng)
    first = time.perf_counter() - t
    assert np.array_equal(inv.of(y), t_state)
    t = time.perf_counter()
    ys = [mech.release(x, rng=rng) for _ in range(R)]
    exact = (time.perf_counter() - t) / R
    for y in ys:  # the state totals are kept exactly on every release
        assert np.array_equal(inv.of(y), t_state)

    rng = np.random.default_rng(20100402)
    t = time.perf_counter()
    out = [naive_release(rng, x, blocks, EPSILON) for _ in range(R)]
    naive = (time.perf_counter() - t) / R
    for y, _ in out:
        assert np.array_equal(inv.of(y), t_state)
    tries = np.mean([k for _, k in out])

    g_ = mech.guarantee.parameters
    print(f"{g_['sampler']}, delta = {g_['delta']}: {exact * 1e3:8.2f} ms per release "
          f"(first release, with sampler setup: {first * 1e3:.2f} ms; {R} releases)")
    print(f"naive float-RNG rejection per state:      {naive * 1e3:8.2f} ms per release "
          f"({tries:.0f} candidate vectors per release)")
    print(f"ratio exact / naive: {exact / naive:.3f}  (goal <= 1)")


def per_cell(quick: bool) -> None:
    print("\n== (b) exact release, time per cell, groups of 3,000, epsilon = 0.192 ==")
    scale = 1 / as_rational(EPSILON, "epsilon")  # 125/24, as the mechanism reads epsilon
    sizes = [10**5, 10**6] if quick else [10**5, 10**6, 10**7]
    reps = {10**5: 5 if quick else 10, 10**6: 2 if quick else 3, 10**7: 1}
    base = None
    for n in sizes:
        rng = np.random.default_rng(n)
        codes = np.arange(n, dtype=np.int64) // GROUP
        n_groups = int(codes[-1]) + 1
        x = rng.poisson(1000, n).astype(np.int64)
        starts = np.arange(0, n_groups, BLOCK_GROUPS) * GROUP
        ends = np.append(starts[1:], n)
        times = []
        for _ in range(reps[n]):
            y = np.empty_like(x)
            t = time.perf_counter()
            for a, b in zip(starts, ends):
                y[a:b] = x[a:b] + sample_partition_double_geometric(rng, codes[a:b], scale)
            times.append(time.perf_counter() - t)
            group_noise = np.add.reduceat(y - x, np.arange(0, n, GROUP))
            assert not group_noise.any(), "a group total changed"
            del y
        ns = float(np.median(times)) / n * 1e9
        base = ns if base is None else base
        print(f"n = {n:>10,d} ({n_groups:5d} groups): {ns:8.1f} ns per cell "
              f"(x{ns / base:5.2f} of n = 10^5; median of {reps[n]}; peak RSS so far {peak_rss_mb():7.0f} MB)")
        del x, codes


def mcmc_reference(quick: bool) -> None:
    print("\n== (c) MCMC reference: first 100 counties, sampler='mcmc' (L-lag coupling certificate) ==")
    g = load_gazetteer_counties()
    x, usps = np.asarray(g.pop10[:100], dtype=np.int64), g.usps[:100]
    labels, counts = np.unique(usps, return_counts=True)
    inv = invariants.groups(usps)
    R = 16 if quick else 100
    t = time.perf_counter()
    mech = GeneralizedLaplace(inv, epsilon=EPSILON, sampler="mcmc", n_coupling_replicates=R)
    y = mech.release(x, rng=np.random.default_rng(20100403))
    dt = time.perf_counter() - t
    assert np.array_equal(inv.of(y), inv.of(x))
    cert = mech.certificate
    params = mech.guarantee.parameters
    print(f"groups {dict(zip(labels.tolist(), counts.tolist()))}; {R} coupling replicates, lag {cert.lag}, "
          f"certified {cert.burn_in} sweeps, chain run {mech.burn_in()} sweeps")
    print(f"wall time (certificate + one release): {dt:7.1f} s; stated delta = {params['delta']:.3g} "
          f"(exact path on the same counties: delta = 0)")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller run")
    args = ap.parse_args(argv)
    national(args.quick)
    per_cell(args.quick)
    mcmc_reference(args.quick)


if __name__ == "__main__":
    main()
