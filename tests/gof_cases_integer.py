"""Goodness-of-fit cases for the integer mechanisms (registry: tests/test_gof.py).

Each window below is a box in free lattice coordinates; the bound on the law's mass outside
it is computed from a lower bound on the norm in terms of the box coordinate
``k = max_j |z_j|`` and the count of coordinate vectors with that maximum, divided by the
normalizer's lower bound Z >= 1 (the term e = 0).  Every bound is far below 0.5 / n_draws.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from gof import GofCase
from privinfer import invariants
from privinfer.mechanisms.discrete import DiscreteGaussian, DoubleGeometric
from privinfer.mechanisms.integer_subspace import GeneralizedGaussian, GeneralizedLaplace


def _box(d, W):
    return np.array(list(itertools.product(range(-W, W + 1), repeat=d)), dtype=np.int64)


def _tail(d, W, log_weight):
    """sum_{k > W} #{z in Z^d : max|z_j| = k} * exp(log_weight(k)), #= (2k+1)^d - (2k-1)^d."""
    return sum(((2 * k + 1) ** d - (2 * k - 1) ** d) * math.exp(log_weight(k)) for k in range(W + 1, W + 400))


# --- unconstrained baselines ---------------------------------------------------------------
# Double geometric, scale 1 on Z^2: P(|k| > W) = 2 a^(W+1) / (1 + a) per cell, union over 2 cells.
_a = math.exp(-1.0)
_x2 = np.array([3, -2])
_dg = GofCase(
    name="DoubleGeometric(n=2, scale=1)",
    mechanism=DoubleGeometric(2, scale=1),
    x=_x2,
    kind="discrete",
    support=lambda: _x2 + _box(2, 12),
    tail_mass=2 * 2 * _a**13 / (1 + _a),
)
# Discrete Gaussian sigma = 1.5 on Z^2: P(|k| > W) <= 2 sum_{k > W} exp(-k^2 / (2 sigma^2)) / Z_1 with
# Z_1 >= 1, per cell, union over 2 cells.
_dgs = GofCase(
    name="DiscreteGaussian(n=2, sigma=1.5)",
    mechanism=DiscreteGaussian(2, 1.5),
    x=_x2,
    kind="discrete",
    support=lambda: _x2 + _box(2, 9),
    tail_mass=2 * 2 * sum(math.exp(-k * k / 4.5) for k in range(10, 200)),
)

# --- lattice mechanisms (MCMC with a coupling-certified burn-in, TV threshold 1e-3) ----------
_opts = dict(tv_threshold=1e-3, n_coupling_replicates=200)

# total on 3 cells: e = (a, b, -a-b), ||e||_1 = |a| + |b| + |a+b| >= 2 max(|a|, |b|).
_inv3 = invariants.total(3)
_x3 = np.array([5, 0, 7])
_B3 = np.array([[1, 0], [0, 1], [-1, -1]])
_gl3 = GofCase(
    name="GeneralizedLaplace(total(3), eps=1, l1)",
    mechanism=GeneralizedLaplace(_inv3, 1.0, "l1", **_opts),
    x=_x3,
    kind="discrete",
    support=lambda: _x3 + _box(2, 9) @ _B3.T,
    tail_mass=_tail(2, 9, lambda k: -2.0 * k),
)

# 2 x 3 table with both margins: free cells (a, b) = e[0, 0], e[0, 1];
# e = [[a, b, -a-b], [-a, -b, a+b]], ||e||_1 >= 4 max(|a|, |b|), ||e||_2^2 = 2(a^2 + b^2 + (a+b)^2) >= 3 max^2.
_inv23 = invariants.margins((2, 3), [(0,), (1,)])
_x23 = np.array([4, 1, 6, 2, 8, 3])
_B23 = np.array([[1, 0], [0, 1], [-1, -1], [-1, 0], [0, -1], [1, 1]])
_gl23_l1 = GofCase(
    name="GeneralizedLaplace(2x3 margins, eps=0.8, l1)",
    mechanism=GeneralizedLaplace(_inv23, 0.8, "l1", **_opts),
    x=_x23,
    kind="discrete",
    support=lambda: _x23 + _box(2, 7) @ _B23.T,
    tail_mass=_tail(2, 7, lambda k: -0.8 * 4 * k),
)
_gl23_l2 = GofCase(
    name="GeneralizedLaplace(2x3 margins, eps=1, l2)",
    mechanism=GeneralizedLaplace(_inv23, 1.0, "l2", **_opts),
    x=_x23,
    kind="discrete",
    support=lambda: _x23 + _box(2, 11) @ _B23.T,
    tail_mass=_tail(2, 11, lambda k: -math.sqrt(3.0) * k),
)

# total on 4 cells, discrete Gaussian sigma = 1.2: ||e||_2 >= max(|a|, |b|, |c|).
_inv4 = invariants.total(4)
_x4 = np.array([2, 9, 4, 0])
_B4 = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1]])
_gg4 = GofCase(
    name="GeneralizedGaussian(total(4), sigma=1.2)",
    mechanism=GeneralizedGaussian(_inv4, 1.2, **_opts),
    x=_x4,
    kind="discrete",
    support=lambda: _x4 + _box(3, 7) @ _B4.T,
    tail_mass=_tail(3, 7, lambda k: -k * k / (2 * 1.44)),
)

CASES = [_dg, _dgs, _gl3, _gl23_l1, _gl23_l2, _gg4]
