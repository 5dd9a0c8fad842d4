"""Benchmark of the curator's lattice sampler.

Prints, in one run:
1. proposals per second of the local-ratio kernel (one chain, and 1000 chains vectorized)
   vs a straightforward per-coordinate sampler that re-evaluates the whole target
   (``-eps * ||e||``) and forms ``e + zeta * B[:, j]`` densely for each proposal; both on
   the same lattice, target and jump scale; ratios against that baseline;
2. the time for L-lag couplings to certify a TV bound below 0.01 for the delinquent-children
   table (l1 and l2) and for a 100-county state (sum invariant, eps = 0.192, l1).

Usage: python benchmarks/bench_lattice_sampler.py [--quick]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from privinfer import invariants
from privinfer.lattice import (
    L1Target,
    L2Target,
    LatticeMoves,
    certify_burn_in,
    double_geometric_jumps,
    free_cell_basis,
    init_state,
    moves_for,
)
from privinfer.lattice.kernels import resolve_jump_scales, sweep_inplace


def baseline_sweeps(rng, B, target, scales, n_sweeps):
    """Per-coordinate Metropolis re-evaluating the whole target for every proposal."""
    n, d = B.shape
    e = np.zeros(n, dtype=np.int64)
    lp = target.logp(e)
    for _ in range(n_sweeps):
        for j in range(d):
            zeta = int(double_geometric_jumps(rng, scales[j % scales.size], (1,))[0])
            prop = e + zeta * B[:, j]
            lp_prop = target.logp(prop)
            if np.log(rng.random()) < lp_prop - lp:
                e, lp = prop, lp_prop
    return n_sweeps * d


def local_sweeps(rng, moves, target, scales, n_sweeps, m):
    st = init_state(np.zeros(moves.n, dtype=np.int64), moves, target, m)
    for _ in range(n_sweeps):
        st, _ = sweep_inplace(rng, st, moves, target, scales, "systematic")
    return n_sweeps * moves.steps_per_sweep * m


def rate(f, *args):
    t = time.perf_counter()
    k = f(*args)
    return k / (time.perf_counter() - t)


def main(quick=False):
    rng = np.random.default_rng(0)
    print("== proposals per second (local ratios vs full re-evaluation) ==")
    cases = [("delinquent 4x4 margins", invariants.margins((4, 4), [(0,), (1,)]), 1.0),
             ("100 counties (sum)", invariants.total(100), 0.192),
             ("3000 cells, 50 groups", invariants.groups(np.repeat(np.arange(50), 60)), 0.192)]
    for name, inv, eps in cases:
        tgt = L1Target(eps)
        B = inv.lattice_basis()
        if inv.n <= 200:
            B = free_cell_basis(B)[0]
        fixed = LatticeMoves.from_matrix(B)
        sc = resolve_jump_scales(None, fixed, tgt)
        moves = moves_for(inv)
        sc_default = resolve_jump_scales(None, moves, tgt)
        ns = 2 if quick else 10
        base = rate(baseline_sweeps, rng, B, tgt, sc, max(1, ns // (1 + inv.n // 200)))
        one = rate(local_sweeps, rng, fixed, tgt, sc, ns, 1)
        many = rate(local_sweeps, rng, fixed, tgt, sc, ns, 1000)
        dflt = rate(local_sweeps, rng, moves, tgt, sc_default, ns, 1000)
        print(f"{name:24s} full re-eval {base:9.0f}/s | local, 1 chain {one:9.0f}/s ({one / base:5.2f}x)"
              f" | local, 1000 chains {many:11.0f}/s ({many / base:6.1f}x)"
              f" | {type(moves).__name__}, 1000 chains {dflt:11.0f}/s ({dflt / base:7.1f}x)")

    print("\n== time to a certified TV bound <= 0.01 (L-lag couplings) ==")
    x_cases = [("delinquent l1", invariants.margins((4, 4), [(0,), (1,)]), L1Target(1.0), 100),
               ("delinquent l2", invariants.margins((4, 4), [(0,), (1,)]), L2Target(1.0), 100),
               ("100 counties l1 eps=0.192", invariants.total(100), L1Target(0.192), 8 if quick else 32)]
    for name, inv, tgt, R in x_cases:
        moves = moves_for(inv)
        t = time.perf_counter()
        cert = certify_burn_in(rng, moves, tgt, threshold=0.01, n_replicates=R,
                               jump_scale=resolve_jump_scales(None, moves, tgt),
                               order="random" if moves.__class__.__name__ == "PairMoves" else "systematic")
        dt = time.perf_counter() - t
        print(f"{name:26s} burn-in {cert.burn_in:6d} sweeps (lag {cert.lag}, {R} replicates, "
              f"median tau {int(np.median(cert.meeting_times))}) in {dt:7.1f} s")


if __name__ == "__main__":
    main(quick="--quick" in sys.argv)
