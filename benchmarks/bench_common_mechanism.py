"""Benchmark: computing common and residual mechanisms.

Cases (Common Mechanism paper, Sec. 7):
* age by sex: 4 nested bucketizations (Total / Age4 / Age9 / Age23) over 103 ages x 2 sexes
  (n = 206).  Baseline: the paper's route, the joint semidefinite programs CM_1234, CM_234
  (Theorem 5.3) plus CM_34; compared with the pairwise closed-form chain used by
  ``NestedSelection`` (Theorem 5.4), which yields the same mechanisms.
* one-way vs two-way marginals of 7 binary attributes (2^7 = 128 cells).  Baseline: the SDP
  solver on the two constraints; compared with Stott's closed form.

Prints wall-clock times (best of ``REPEATS``) and ratios measured in the same run.
Run: ``python benchmarks/bench_common_mechanism.py``.
"""

from __future__ import annotations

import itertools
import time

import numpy as np

from privinfer import invariants
from privinfer.common import DHC_AGE_EDGES, NestedSelection, bucket_matrix, common_mechanism, residual
from privinfer.mechanisms import LinearGaussian

REPEATS = 3


def best_time(f):
    times = []
    out = None
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t0)
    return min(times), out


def marginals(d, order):
    """Query matrix of all `order`-way marginals of d binary attributes (x in C order): the
    constraint matrix of the invariants core's ``margins``."""
    return invariants.margins((2,) * d, list(itertools.combinations(range(d), order))).matrix.toarray()


def age_by_sex():
    rho = 1 / 8
    Ms = [LinearGaussian(bucket_matrix(DHC_AGE_EDGES[k], 2), 1 / (2 * rho)) for k in ("Total", "Age4", "Age9", "Age23")]

    def route(method):
        if method == "sdp":  # the paper's route: joint SDPs for CM_1234 and CM_234
            c1234 = common_mechanism(*Ms, method="sdp")
            c234 = common_mechanism(*Ms[1:], method="sdp")
            c34 = common_mechanism(*Ms[2:])
        else:  # pairwise closed-form chain (what NestedSelection builds)
            c34 = common_mechanism(*Ms[2:])
            c234 = common_mechanism(Ms[1], c34, method="closed_form")
            c1234 = common_mechanism(Ms[0], c234, method="closed_form")
        res = [residual(c234, c1234), residual(c34, c234), residual(Ms[3], c34)]
        res += [residual(M, c) for M, c in zip(Ms[:3], (c1234, c234, c34))]
        return (c1234, c234, c34), res

    t_sdp, (commons_sdp, _) = best_time(lambda: route("sdp"))
    t_cf, (commons_cf, _) = best_time(lambda: route("closed_form"))
    t_plan, plan = best_time(lambda: NestedSelection(Ms))
    diff = max(np.max(np.abs(a.cost_matrix - b.cost_matrix)) for a, b in zip(commons_sdp, commons_cf))
    print("age by sex (n = 206; Total/Age4/Age9/Age23), 3 commons + 6 residuals:")
    print(f"  joint SDP route (CM_1234, CM_234 by SDP)        : {t_sdp * 1e3:9.1f} ms")
    print(f"  closed-form chain (Theorem 5.4 pairwise)        : {t_cf * 1e3:9.1f} ms")
    print(f"  ratio SDP / closed form                         : {t_sdp / t_cf:9.2f}x")
    print(f"  max |cost matrix difference| between the routes : {diff:.1e}")
    print(f"  NestedSelection plan (chain + recreation maps)  : {t_plan * 1e3:9.1f} ms")

    rng = np.random.default_rng(0)
    xs = [rng.poisson(rng.choice([0.3, 3.0, 30.0, 300.0]), size=206).astype(float) for _ in range(200)]
    t_run, choices = best_time(lambda: [plan.run(x, rng=rng).choice for x in xs])
    print(f"  decision + recreation per region (200 regions)  : {t_run / len(xs) * 1e3:9.2f} ms"
          f"  (choices: {np.bincount(choices, minlength=4).tolist()})")


def marginals_2_7():
    B1, B2 = marginals(7, 1), marginals(7, 2)
    M1, M2 = LinearGaussian(B1, 1.0), LinearGaussian(B2, 1.0)

    def route(method):
        c = common_mechanism(M1, M2, method=method)
        return c, residual(M1, c), residual(M2, c)

    t_sdp, (c_sdp, _, _) = best_time(lambda: route("sdp"))
    t_cf, (c_cf, _, _) = best_time(lambda: route("closed_form"))
    diff = np.max(np.abs(c_sdp.cost_matrix - c_cf.cost_matrix))
    print(f"one-way ({B1.shape[0]} queries) vs two-way ({B2.shape[0]} queries) marginals, 2^7 cells:")
    print(f"  SDP common + residuals          : {t_sdp * 1e3:9.1f} ms")
    print(f"  closed-form common + residuals  : {t_cf * 1e3:9.1f} ms")
    print(f"  ratio SDP / closed form         : {t_sdp / t_cf:9.2f}x")
    print(f"  common mechanism: {c_cf.m} queries; max |cost difference| between routes: {diff:.1e}")


if __name__ == "__main__":
    age_by_sex()
    marginals_2_7()
