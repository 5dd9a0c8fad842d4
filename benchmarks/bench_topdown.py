"""TopDown baseline: cost of the exact non-negative projection and of a full release.

Prints, for each case, the time of the structured method against a baseline solved in the
same run, the ratio, and the largest difference between the two answers:

* partition totals (all US counties, grouped by state): closed-form simplex projection vs.
  the general dual semismooth Newton projection on the same constraints;
* two-way margins (a small table): dual semismooth Newton vs. SciPy's SLSQP on the QP (given
  full-row-rank constraints: with the redundant row it stops at its iteration limit);
* one full release of the 14 x 24 x 20 spatio-temporal design (740-rank invariant).

Run: ``PRIVINFER_DATA=... python benchmarks/bench_topdown.py`` (uses synthetic counts for the
county case if the data directory is not available).
"""

from __future__ import annotations

import os
import time

import numpy as np
from scipy.optimize import minimize

from privinfer import datasets, invariants as I
from privinfer.mechanisms.topdown import TopDownBaseline, dual_newton_projection, nonnegative_projection


def clock(f, repeat=3):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = f()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main():
    rng = np.random.default_rng(0)
    # 1. counties within states
    if os.environ.get(datasets.DATA_ENV):
        gaz = datasets.load_gazetteer_counties()
        gaz = gaz.subset([s for s in gaz.states() if s != "PR"])
        x, labels = gaz.pop10.astype(float), gaz.usps
    else:
        labels = np.repeat(np.arange(51), 62)
        x = rng.poisson(50.0, labels.size).astype(float)
    inv = I.groups(labels)
    t = inv.of(x)
    m = x + rng.normal(0, 30.0, x.size)
    m[: x.size // 10] = rng.normal(0, 30.0, x.size // 10)  # some near-zero cells so clipping binds
    t_struct, z1 = clock(lambda: nonnegative_projection(m, inv, t))
    t_gen, z2 = clock(lambda: dual_newton_projection(m, inv.matrix, t), repeat=1)
    print(f"groups n={x.size} m={inv.m}: closed form {t_struct*1e3:.2f} ms, dual Newton {t_gen*1e3:.1f} ms, "
          f"ratio {t_gen / t_struct:.0f}x, max |diff| {np.max(np.abs(z1 - z2)):.2e}")

    # 2. two-way margins: dual Newton vs SLSQP
    shape = (8, 10)
    inv = I.margins(shape, [(0,), (1,)])
    x = rng.poisson(1.0, inv.n).astype(float)
    t = inv.of(x)
    m = x + rng.normal(0, 2.0, inv.n)
    C, tc = inv.matrix.toarray()[:-1], t[:-1]  # drop one redundant row: SLSQP needs full row rank
    t_newton, z1 = clock(lambda: nonnegative_projection(m, inv, t))

    def slsqp():
        r = minimize(lambda z: 0.5 * np.sum((z - m) ** 2), np.maximum(x, 0), jac=lambda z: z - m,
                     constraints=[{"type": "eq", "fun": lambda z: C @ z - tc, "jac": lambda z: C}],
                     bounds=[(0, None)] * inv.n, method="SLSQP", options={"ftol": 1e-14, "maxiter": 1000})
        return r.x

    t_slsqp, z2 = clock(slsqp, repeat=1)
    print(f"margins {shape}: dual Newton {t_newton*1e3:.1f} ms, SLSQP {t_slsqp*1e3:.1f} ms, "
          f"ratio {t_slsqp / t_newton:.1f}x, max |diff| {np.max(np.abs(z1 - z2)):.2e}")

    # 3. spatio-temporal design
    xs = datasets.synthetic_spatiotemporal(rng=1)
    inv = datasets.spatiotemporal_invariant(shape=xs.shape)
    mech = TopDownBaseline(inv, "discrete_gaussian", scale=3.0)
    t_rel, y = clock(lambda: mech.release(xs.ravel(), rng=2), repeat=1)
    meas = mech.measure(xs.ravel(), rng=2)
    t_meas, _ = clock(lambda: mech.measure(xs.ravel(), rng=2), repeat=1)
    print(f"spatio-temporal 14x24x20 (rank {inv.rank}): release {t_rel:.2f} s, of which measurement "
          f"{t_meas:.3f} s (ratio release/measurement {t_rel / t_meas:.0f}x); "
          f"mean |y - x| {np.mean(np.abs(y - xs.ravel())):.2f}, zero cells in x {np.mean(xs == 0):.2f}, "
          f"mean error on zero cells {np.mean((y - xs.ravel())[xs.ravel() == 0]):+.2f}")


if __name__ == "__main__":
    main()
