"""Goodness-of-fit machinery: ``release`` draws are scored against ``exp(logp)``.

One test (``tests/test_gof.py``) runs over a registry of every mechanism in the project,
so a sampler and its density cannot drift apart.  Registry entries live in
``tests/gof_cases_*.py`` modules, each exporting ``CASES: list[GofCase]``.

Discrete mechanisms: the pmf ``exp(logp(y, x))`` is evaluated on an enumerated window
``support`` holding all but ``tail_mass`` of the law, normalized there (so ``logp`` may
drop constants), and compared with the empirical counts by Pearson's chi-square (cells with
expected count < 5 pooled).  The window's missing mass shifts each expected count by at
most ``tail_mass * n_draws``; the case must keep ``tail_mass * n_draws < 0.5``.

Continuous mechanisms: the law lives on a d-dimensional affine subspace.  ``coords(e)``
maps noise ``e = y - x`` to coordinates in an orthonormal basis of that subspace, so the
density w.r.t. d-dimensional Lebesgue measure in those coordinates is ``exp(logp(y, x))``
(``logp`` must then be exact, constants included; pass ``logp`` to override, e.g. with an
exact marginal density).  For d <= 2 the density is integrated on a grid: it must
integrate to 1 and every coordinate's marginal CDF must match the draws (KS); see
:func:`grid_pvalue`.  For d = 3: nearest-neighbour density test, as in the ``goftests``
package used by NumPyro/Pyro): split the draws into A and B; for a in A with
density p(a) and distance r to its nearest neighbour in B,
``P(R > r) = (1 - mass of the ball)^{|B|} ~= exp(-|B| p(a) V_d r^d)``, so
``u = exp(-|B| p(a) V_d r^d)`` is approximately Uniform(0, 1); a KS test on ``u`` follows.
The approximation error is the density's variation across a nearest-neighbour ball,
O(r^2) with r ~ |B|^{-1/d}: negligible for d <= 3 at the sample sizes used.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import special, stats
from scipy.spatial import cKDTree

#: Significance level of every GoF test in the registry.  Several dozen cases run, so a
#: per-case alpha of 1e-3 keeps the family-wise false alarm rate under ~5%.
ALPHA = 1e-3


@dataclass
class GofCase:
    name: str
    mechanism: object
    x: np.ndarray
    kind: str  # "discrete" or "continuous"
    n_draws: int = 4000
    support: Callable[[], np.ndarray] | None = None  # discrete: (k, n) outputs y
    tail_mass: float = 0.0  # discrete: bound on the law's mass outside support
    coords: Callable[[np.ndarray], np.ndarray] | None = None  # continuous: e -> (N, d)
    logp: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None  # override of mechanism.logp
    seed: int = 20261121

    def __str__(self):
        return self.name


def draw(case: GofCase, n: int, rng) -> np.ndarray:
    x = np.broadcast_to(np.asarray(case.x), (n,) + np.shape(case.x))
    return np.asarray(case.mechanism.release(np.array(x), rng=rng))


def logp_of(case: GofCase, ys: np.ndarray) -> np.ndarray:
    f = case.logp if case.logp is not None else case.mechanism.logp
    x = np.asarray(case.x)
    out = [float(f(y, x)) for y in ys]
    return np.asarray(out)


def discrete_pvalue(case: GofCase) -> float:
    rng = np.random.default_rng(case.seed)
    ys = draw(case, case.n_draws, rng)
    sup = np.asarray(case.support())
    assert case.tail_mass * case.n_draws < 0.5, "window too small for this many draws"
    lp = logp_of(case, sup)
    p = np.exp(lp - special.logsumexp(lp))
    index = {tuple(np.asarray(s).ravel().tolist()): i for i, s in enumerate(sup)}
    counts = np.zeros(len(sup) + 1)
    for y in ys:
        counts[index.get(tuple(np.asarray(y).ravel().tolist()), len(sup))] += 1
    assert counts[-1] <= max(3, 10 * case.tail_mass * case.n_draws), (
        f"{counts[-1]:.0f} draws fell outside the window whose mass is <= {case.tail_mass:g}"
    )
    return pooled_chi2_pvalue(counts[:-1], p * case.n_draws)


def pooled_chi2_pvalue(obs, exp) -> float:
    """Pearson chi-square p-value of observed counts ``obs`` against expected counts ``exp``,
    the smallest expected cells pooled until every pooled cell has expectation >= 5."""
    order = np.argsort(exp)
    e_pool, o_pool, acc_e, acc_o = [], [], 0.0, 0.0
    for i in order:
        acc_e += exp[i]
        acc_o += obs[i]
        if acc_e >= 5:
            e_pool.append(acc_e)
            o_pool.append(acc_o)
            acc_e = acc_o = 0.0
    if acc_e > 0 and e_pool:
        e_pool[-1] += acc_e
        o_pool[-1] += acc_o
    e_pool = np.asarray(e_pool)
    o_pool = np.asarray(o_pool)
    if len(e_pool) < 2:
        raise AssertionError("support too small for a chi-square test")
    chi2 = float(np.sum((o_pool - e_pool) ** 2 / e_pool))
    return float(stats.chi2.sf(chi2, len(e_pool) - 1))


def _logp_stack(case: GofCase, ys: np.ndarray) -> np.ndarray:
    """logp at many outputs: one vectorized call when the mechanism supports stacks."""
    f = case.logp if case.logp is not None else case.mechanism.logp
    x = np.asarray(case.x, dtype=float)
    try:
        out = np.asarray(f(ys, x), dtype=float)
        if out.shape == (len(ys),):
            return out
    except Exception:  # noqa: BLE001 - fall back to one call per output
        pass
    return logp_of(case, ys)


def grid_pvalue(case: GofCase, ys: np.ndarray, z: np.ndarray) -> float:
    """d <= 2: integrate exp(logp) on a grid in the orthonormal coordinates.

    Checks (i) normalization -- the integral must be 1 within 1% (trapezoid error is
    O(h^2) ~ 1e-4 at these grids; a wrong constant, scale or dimension factor is off by far
    more) -- and (ii) each coordinate's marginal CDF against the draws by KS; returns the
    smallest KS p-value.  The grid spans the draws' range widened by half of it on each
    side; the mass outside is below the draws' own tail mass (~1/N) times a decaying factor.
    """
    x = np.asarray(case.x, dtype=float)
    d = z.shape[1]
    # coordinates are linear in the noise: recover e(z) = z @ M exactly from the draws
    M, *_ = np.linalg.lstsq(z, ys - x, rcond=None)
    lo, hi = z.min(axis=0), z.max(axis=0)
    width = hi - lo
    k = 2001 if d == 1 else 601
    axes = [np.linspace(lo[i] - width[i] / 2, hi[i] + width[i] / 2, k) for i in range(d)]
    mesh = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, d)
    dens = np.exp(_logp_stack(case, x + mesh @ M)).reshape((k,) * d)
    if d == 1:
        marg = [dens]
        mass = np.trapezoid(dens, axes[0])
    else:
        marg = [np.trapezoid(dens, axes[1], axis=1), np.trapezoid(dens, axes[0], axis=0)]
        mass = np.trapezoid(marg[0], axes[0])
    assert abs(mass - 1.0) < 0.01, f"{case.name}: exp(logp) integrates to {mass:.4f}, not 1"
    pvals = []
    for i in range(d):
        f = marg[i]
        cdf = np.concatenate([[0.0], np.cumsum((f[1:] + f[:-1]) / 2 * np.diff(axes[i]))])
        cdf /= cdf[-1]
        pvals.append(stats.kstest(z[:, i], lambda v, c=cdf, a=axes[i]: np.interp(v, a, c)).pvalue)
    return float(min(pvals))


def continuous_pvalue(case: GofCase) -> float:
    rng = np.random.default_rng(case.seed)
    ys = draw(case, case.n_draws, rng)
    x = np.asarray(case.x, dtype=float)
    z = np.asarray(case.coords(ys - x))
    if z.ndim == 1:
        z = z[:, None]
    d = z.shape[1]
    if d <= 2:
        return grid_pvalue(case, ys, z)
    half = len(z) // 2
    za, zb = z[:half], z[half:]
    ya = ys[:half]
    r, _ = cKDTree(zb).query(za, k=1)
    log_vd = (d / 2) * np.log(np.pi) - special.gammaln(d / 2 + 1)
    lp = logp_of(case, ya)
    log_mass = np.log(len(zb)) + lp + log_vd + d * np.log(r)
    u = np.exp(-np.exp(log_mass))
    return float(stats.kstest(u, "uniform").pvalue)


def pvalue(case: GofCase) -> float:
    if case.kind == "discrete":
        return discrete_pvalue(case)
    if case.kind == "continuous":
        return continuous_pvalue(case)
    raise ValueError(f"unknown kind {case.kind!r}")
