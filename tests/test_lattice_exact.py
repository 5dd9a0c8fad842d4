"""Exact lattice samplers against the law they claim: enumeration of small fibres, exact
Bernoulli decisions, the geometric law, and the exact/MCMC split of the lattice mechanisms.

Level of the statistical tests.  Every chi-square / binomial test here runs at
``ALPHA = 1e-3`` with a fixed seed, the level of the goodness-of-fit registry
(``tests/gof.py``): about 25 tests run in this file, so even with fresh seeds the chance of a
false alarm would stay near 2.5%, while the errors these tests exist to catch (a misread
scale, a wrong mode or acceptance ratio, a group's noise leaking into another) move cell
frequencies by percents, which at N = 20000 draws is a chi-square far beyond the critical
value (``test_the_fibre_test_rejects_a_wrong_scale`` shows one such error being caught).

Pooling.  Pearson's chi-square needs expected counts of at least 5, so cells below that are
pooled into one cell together with everything outside the enumerated window (and if that
pool is itself below 5 it joins the smallest kept cell).

Truncated enumeration.  Every law here is :math:`\\pi(e) \\propto \\prod_i w(e_i)` on a
lattice whose points are determined by ``D`` free cells ``z`` of ``e`` (``e = B z`` with
``B[F] = I``), with an unnormalized cell weight ``w`` that peaks at ``w(0) = 1``.  The
window is the box ``|z_j| <= W``.  Since the free cells are cells of e and ``w <= 1``,
:math:`\\prod_i w(e_i) \\le \\prod_j w(z_j)`, so the unnormalized mass outside the box is at
most :math:`\\Phi^D - \\Phi_W^D` with :math:`\\Phi = \\sum_{j\\in\\mathbb Z} w(j)` and
:math:`\\Phi_W = \\sum_{|j|\\le W} w(j)`; the normalizer is at least ``w(0)^n = 1`` (the point
``e = 0``).  So the truncated probability is at most :math:`\\tau = \\Phi^D - \\Phi_W^D`; W is
the smallest window with :math:`N\\tau \\le 0.01`, so renormalizing on the box moves the
expected counts by at most 0.01 in total -- nothing next to the sampling noise of a cell
with an expected count of 5 or more.
"""

from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import special, stats

from privinfer import invariants
from privinfer.lattice import (
    DiscreteGaussianLaw,
    DoubleGeometricLaw,
    FreeCellRejection,
    exact_sampler,
    free_cell_basis,
    sample_geometric,
    sample_partition_double_geometric,
    sample_partition_rejection,
)
from privinfer.lattice.exact import bernoulli_exp
from privinfer.mechanisms.integer_subspace import GeneralizedGaussian, GeneralizedLaplace

ALPHA = 1e-3
N = 20_000
#: groups of sizes 1..5, cells of a group contiguous
CODES = np.repeat(np.arange(5), np.arange(1, 6))


# ---------------------------------------------------------------------------------------------
# enumeration of fibres and pooled chi-square
# ---------------------------------------------------------------------------------------------
def log_weight(law):
    """Unnormalized log cell weight log w(k), w(0) = 1, of a law object."""
    if isinstance(law, DoubleGeometricLaw):
        b = float(law.scale)
        return lambda k: -np.abs(k) / b
    s2 = float(law.sigma2)
    return lambda k: -(np.asarray(k, dtype=float) ** 2) / (2.0 * s2)


def window(lw, D: int, n_draws: int) -> tuple[int, float]:
    """Smallest W with n_draws * (Phi^D - Phi_W^D) <= 0.01 (module docstring) and that bound.
    Phi is summed over |j| <= 4000: the omitted weights are below exp(-4000/b) resp.
    exp(-4000^2/(2 sigma^2)), zero in double precision for the laws used here."""
    j = np.arange(-4000, 4001)
    w = np.exp(lw(j))
    phi = w.sum()
    for W in range(1, 4000):
        phi_w = w[np.abs(j) <= W].sum()
        tau = phi**D - phi_w**D
        if n_draws * tau <= 0.01:
            return W, tau
    raise AssertionError("no window found")


def pooled_chisquare(obs, expected):
    """Pearson chi-square p-value with cells of expected count < 5 pooled (module docstring).
    ``obs`` and ``expected`` both sum to the number of draws."""
    obs = np.asarray(obs, dtype=float)
    expected = np.asarray(expected, dtype=float)
    keep = expected >= 5
    o, e = list(obs[keep]), list(expected[keep])
    po, pe = obs[~keep].sum(), expected[~keep].sum()
    if pe >= 5:
        o.append(po)
        e.append(pe)
    elif pe > 0 or po > 0:
        i = int(np.argmin(e))
        o[i] += po
        e[i] += pe
    assert len(e) >= 2, "too few cells for a chi-square test"
    return stats.chisquare(o, e).pvalue


def fibre_pvalue(e_draws, B, free, lw):
    """Chi-square p-value of lattice draws ``e_draws`` (N, n) against pi(e) ∝ prod w(e_i) on
    {B z : z in Z^D}, enumerated on the box |z| <= W (``free``: the rows of B forming I)."""
    B = np.asarray(B, dtype=np.int64)
    n, D = B.shape
    np.testing.assert_array_equal(B[free], np.eye(D, dtype=np.int64))
    Nd = e_draws.shape[0]
    W, tau = window(lw, D, Nd)
    assert Nd * tau <= 0.01
    r = np.arange(-W, W + 1)
    grids = np.meshgrid(*([r] * D), indexing="ij", sparse=True)
    logw = np.zeros((2 * W + 1,) * D)
    for i in range(n):
        v = sum(int(B[i, j]) * grids[j] for j in range(D) if B[i, j] != 0)
        logw = logw + lw(v)
    p = np.exp(logw - special.logsumexp(logw)).ravel()
    z = e_draws[:, free]
    inside = np.all(np.abs(z) <= W, axis=1)
    flat = np.ravel_multi_index(tuple((z[inside] + W).T), (2 * W + 1,) * D)
    obs = np.bincount(flat, minlength=p.size).astype(float)
    # the draws outside the box join the pooled cell (expected: its truncated mass, <= tau)
    obs = np.append(obs, (~inside).sum())
    exp = np.append(p * Nd, 0.0)
    return pooled_chisquare(obs, exp)


def group_basis(k: int) -> np.ndarray:
    """Lattice {e in Z^k : sum e = 0} with the first k - 1 cells free."""
    return np.vstack([np.eye(k - 1, dtype=np.int64), -np.ones((1, k - 1), dtype=np.int64)])


def check_partition_draws(e, codes, law):
    """Support and law of partition noise draws (N, n): zero group sums on every draw, zero
    noise in groups of one cell, and each group's law against its enumerated fibre."""
    codes = np.asarray(codes)
    sizes = np.bincount(codes)
    assert e.dtype == np.int64
    for g, k in enumerate(sizes):
        cells = np.flatnonzero(codes == g)
        np.testing.assert_array_equal(e[:, cells].sum(axis=1), 0)
        if k == 1:
            np.testing.assert_array_equal(e[:, cells], 0)
            continue
        pv = fibre_pvalue(e[:, cells], group_basis(k), np.arange(k - 1), log_weight(law))
        assert pv > ALPHA, f"group of size {k}: p = {pv:.2e}"


# ---------------------------------------------------------------------------------------------
# partitions
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [1, Fraction(125, 24)])
def test_composition_sampler_matches_enumeration_on_groups(scale):
    # scale 125/24 is the Census case (epsilon = 0.192); its fibres are wide, so only groups
    # of up to 3 cells (D <= 2) are enumerated there
    codes = CODES if scale == 1 else np.repeat(np.arange(3), [1, 2, 3])
    e = sample_partition_double_geometric(np.random.default_rng(101), codes, scale, N)
    assert e.shape == (N, codes.size)
    check_partition_draws(e, codes, DoubleGeometricLaw(scale))


@pytest.mark.parametrize("law", [DoubleGeometricLaw(1), DiscreteGaussianLaw(1.5)], ids=["dgeom", "dgauss"])
def test_rejection_sampler_matches_enumeration_on_groups(law):
    e = sample_partition_rejection(np.random.default_rng(102), CODES, law, N)
    assert e.shape == (N, CODES.size)
    check_partition_draws(e, CODES, law)


@pytest.mark.parametrize("method", ["compositions", "rejection"])
def test_groups_are_independent(method):
    # the joint law of a 2-cell and a 3-cell group (D = 1 + 2) is the product of their laws
    codes = np.array([0, 0, 1, 1, 1])
    rng = np.random.default_rng(103)
    if method == "compositions":
        e = sample_partition_double_geometric(rng, codes, 1, N)
    else:
        e = sample_partition_rejection(rng, codes, DoubleGeometricLaw(1), N)
    B = np.zeros((5, 3), dtype=np.int64)
    B[:2, :1] = group_basis(2)
    B[2:, 1:] = group_basis(3)
    assert fibre_pvalue(e, B, np.array([0, 2, 3]), log_weight(DoubleGeometricLaw(1))) > ALPHA


def test_groups_in_any_cell_order_and_shapes():
    # interleaved labels (not contiguous, not sorted) and the size argument
    codes = np.array([7, 3, 7, 3, 9, 7])
    rng = np.random.default_rng(104)
    for draw in (lambda s: sample_partition_double_geometric(rng, codes, 2, s),
                 lambda s: sample_partition_rejection(rng, codes, DiscreteGaussianLaw(2), s)):
        one = draw(())
        assert one.shape == (6,)
        many = draw((4, 5))
        assert many.shape == (4, 5, 6)
        flat = many.reshape(-1, 6)
        np.testing.assert_array_equal(flat[:, [0, 2, 5]].sum(axis=1), 0)
        np.testing.assert_array_equal(flat[:, [1, 3]].sum(axis=1), 0)
        np.testing.assert_array_equal(flat[:, 4], 0)
    # only singleton groups: no noise at all
    np.testing.assert_array_equal(sample_partition_double_geometric(rng, np.arange(4), 1, 3), 0)
    np.testing.assert_array_equal(sample_partition_rejection(rng, np.arange(4), DoubleGeometricLaw(1), 3), 0)


def test_the_fibre_test_rejects_a_wrong_scale():
    # power check of the machinery above: draws at scale 1.15 scored against scale 1
    e = sample_partition_double_geometric(np.random.default_rng(105), CODES, Fraction(23, 20), N)
    cells = np.flatnonzero(CODES == 3)
    pv = fibre_pvalue(e[:, cells], group_basis(4), np.arange(3), log_weight(DoubleGeometricLaw(1)))
    assert pv < ALPHA


# ---------------------------------------------------------------------------------------------
# free cells: a 3 x 3 table with both margins
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("law", [DoubleGeometricLaw(1), DiscreteGaussianLaw(1.5)], ids=["dgeom", "dgauss"])
def test_free_cell_rejection_on_a_3x3_table(law):
    inv = invariants.margins((3, 3), [(0,), (1,)])
    C = inv.integer_matrix()
    fcr = FreeCellRejection(inv.lattice_basis(), law)
    assert fcr.free.size == 4 and fcr.n == 9
    e = fcr.sample(np.random.default_rng(106), N, batch=8192)
    assert e.shape == (N, 9) and e.dtype == np.int64
    np.testing.assert_array_equal(e @ C.T, 0)  # C e = 0 exactly, in integers, on every draw
    assert fibre_pvalue(e, fcr.basis, fcr.free, log_weight(law)) > ALPHA


def test_exact_sampler_dispatch():
    inv = invariants.groups(CODES)
    assert exact_sampler(inv, DoubleGeometricLaw(1)).method == "partition-compositions"
    assert exact_sampler(inv, DiscreteGaussianLaw(1)).method == "partition-rejection"
    table = invariants.margins((3, 3), [(0,), (1,)])
    s = exact_sampler(table, DoubleGeometricLaw(1), rng=np.random.default_rng(0))
    assert s.method == "free-cell-rejection" and 0 < s.expected_acceptance < 1
    e = s.sample(np.random.default_rng(1), (3, 2))
    assert e.shape == (3, 2, 9)
    # an acceptance floor no rejection sampler can meet: no exact sampler
    assert exact_sampler(table, DoubleGeometricLaw(1), min_acceptance=1.0, rng=np.random.default_rng(0)) is None


# ---------------------------------------------------------------------------------------------
# exact Bernoulli(exp(l)) by lazy comparison
# ---------------------------------------------------------------------------------------------
def _exact_log(values):
    """log_p_exact for values given as exact rationals p (Decimal ln at the asked precision)."""
    calls = []

    def f(i, prec):
        calls.append(i)
        with localcontext() as ctx:
            ctx.prec = prec + 5
            p = values[i]
            return (Decimal(p.numerator) / Decimal(p.denominator)).ln()

    return f, calls


@pytest.mark.parametrize("p", [Fraction(3, 10), Fraction(1, 3), Fraction(999, 1000), Fraction(1, 1000)])
def test_bernoulli_exp_probability(p):
    # Binomial test at ALPHA of N draws
    f, _ = _exact_log([p] * N)
    out = bernoulli_exp(np.random.default_rng(107), np.full(N, math.log(p)), f)
    assert out.dtype == bool and out.shape == (N,)
    assert stats.binomtest(int(out.sum()), N, float(p)).pvalue > ALPHA


class FirstBits:
    """A Generator stand-in whose uniforms all start with the 53 bits ``j`` (the draws of
    ``integers(0, 2**53)``); every further bit comes from a real Generator.  It puts U in
    the float error band of ``bernoulli_exp`` by construction, forcing the exact path."""

    def __init__(self, j, seed):
        self.j = int(j)
        self.rng = np.random.default_rng(seed)

    def integers(self, low, high=None, size=None, dtype=np.int64):
        if high == 2**53:
            return np.full(() if size is None else size, self.j, dtype=np.int64)
        return self.rng.integers(low, high, size=size, dtype=dtype)


def test_bernoulli_exp_exact_path():
    p = Fraction(1, 3)
    c = (2**53) // 3  # U in [c, c + 1) / 2^53 straddles p = 1/3
    cond = Fraction(2**53, 3) - c  # P(U < p | first bits c) = 2^53/3 - c = 2/3
    assert cond == Fraction(2, 3)
    n = 4000
    for err in (0.0, 9e-7, -9e-7):  # any double-precision value within the stated 1e-6 band
        f, calls = _exact_log([p] * n)
        lp = np.full(n, math.log(p) + err)
        out = bernoulli_exp(FirstBits(c, 108), lp, f)
        assert len(set(calls)) == n  # every draw was decided by the exact comparison
        assert stats.binomtest(int(out.sum()), n, float(cond)).pvalue > ALPHA
        # U's first bits 1000 ulps below / above p: inside the float band, surely U < p / U > p
        f, calls = _exact_log([p] * 50)
        assert bernoulli_exp(FirstBits(c - 1000, 109), np.full(50, math.log(p) + err), f).all()
        assert len(set(calls)) == 50
        f, calls = _exact_log([p] * 50)
        assert not bernoulli_exp(FirstBits(c + 1000, 110), np.full(50, math.log(p) + err), f).any()
        assert len(set(calls)) == 50


def test_bernoulli_exp_float_path_needs_no_exact_value():
    # far from the band the double-precision comparison decides: log_p_exact is never called
    f, calls = _exact_log([Fraction(1, 2)] * 10)
    out = bernoulli_exp(FirstBits(2**51, 111), np.full(10, math.log(0.5)), f)  # U ~ 1/4 < 1/2
    assert out.all() and calls == []
    out = bernoulli_exp(FirstBits(3 * 2**51, 112), np.full(10, math.log(0.5)), f)  # U ~ 3/4
    assert not out.any() and calls == []


# ---------------------------------------------------------------------------------------------
# the geometric law
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scale", [Fraction(1, 2), 1, Fraction(125, 24), 3.7])
def test_sample_geometric_pmf(scale):
    # P(g) = (1 - a) a^g on {0, 1, ...}, a = exp(-1/b); cells 0..K-1 plus the tail P(g >= K) = a^K
    g = sample_geometric(scale, N, np.random.default_rng(113))
    assert g.dtype == np.int64 and g.shape == (N,) and g.min() >= 0
    a = math.exp(-1.0 / float(scale))
    K = int(np.ceil(np.log(5.0 / N) / np.log(a))) + 1  # beyond K the cells are pooled anyway
    k = np.arange(K)
    pk = (1 - a) * a**k
    obs = np.append(np.bincount(np.minimum(g, K), minlength=K + 1)[:K], (g >= K).sum())
    exp = N * np.append(pk, a**K)
    assert pooled_chisquare(obs, exp) > ALPHA
    assert np.shape(sample_geometric(scale, (), np.random.default_rng(0))) == ()
    assert sample_geometric(scale, (2, 3), np.random.default_rng(0)).shape == (2, 3)


def test_bad_inputs():
    rng = np.random.default_rng(0)
    for bad in (0, -1, 0.0, -0.5, Fraction(0), float("nan"), float("inf")):
        with pytest.raises(ValueError):
            sample_geometric(bad, 3, rng)
        with pytest.raises(ValueError):
            sample_partition_double_geometric(rng, [0, 0, 1], bad, 2)
        with pytest.raises(ValueError):
            DoubleGeometricLaw(bad)
        with pytest.raises(ValueError):
            DiscreteGaussianLaw(bad)
    for bad in ("1", None, True):
        with pytest.raises(TypeError):
            DoubleGeometricLaw(bad)
    with pytest.raises(ValueError, match="free-cell"):
        FreeCellRejection(np.array([[2], [-2]]), DoubleGeometricLaw(1))
    with pytest.raises(ValueError):
        GeneralizedLaplace(invariants.groups(CODES), 0.0)


# ---------------------------------------------------------------------------------------------
# through the mechanisms
# ---------------------------------------------------------------------------------------------
def _tables():
    return [("groups", invariants.groups(CODES), np.arange(15) * 3 + 1),
            ("2x3 margins", invariants.margins((2, 3), [(0,), (1,)]), np.array([4, 0, 7, 2, 9, 1]))]


@pytest.mark.parametrize("name,inv,x", _tables(), ids=["groups", "table"])
def test_generalized_laplace_exact_release(name, inv, x):
    mech = GeneralizedLaplace(inv, 0.7)
    assert mech.exact is True
    g = mech.guarantee
    assert g.parameters["delta"] == 0.0 and g.parameters["exact"] is True
    assert g.parameters["sampler"].startswith("exact")
    y = mech.release(np.broadcast_to(x, (500, inv.n)), rng=np.random.default_rng(114))
    assert y.dtype.kind == "i"
    np.testing.assert_array_equal(inv.of(y), np.broadcast_to(inv.of(x), (500,) + np.shape(inv.of(x))))
    assert np.any(y != x)  # noise was added
    gg = GeneralizedGaussian(inv, 1.5)
    assert gg.exact is True and gg.guarantee.parameters["delta"] == 0.0
    y = gg.release(x, rng=np.random.default_rng(115))
    np.testing.assert_array_equal(inv.of(y), inv.of(x))


def test_generalized_laplace_l2_is_mcmc():
    inv = invariants.groups(CODES)
    # an explicit burn-in skips the coupling: no TV estimate, so only the trivial bound eta <= 1,
    # i.e. delta = min(1, (1 + e^eps) * 1) = 1
    mech = GeneralizedLaplace(inv, 0.7, norm="l2", burn_in=3)
    assert mech.exact is False
    g = mech.guarantee
    assert g.parameters["exact"] is False and g.parameters["delta"] == 1.0
    x = np.arange(15)
    y = mech.release(np.broadcast_to(x, (20, 15)), rng=np.random.default_rng(116))
    np.testing.assert_array_equal(inv.of(y), np.broadcast_to(inv.of(x), (20, 5)))
    # sampler="mcmc" also turns the exact path off for the l1 norm
    assert GeneralizedLaplace(inv, 0.7, sampler="mcmc", burn_in=3).exact is False


def test_generalized_laplace_l2_coupling_delta():
    # a tiny lattice (3 cells, one total): the L-lag coupling estimate gives 0 < delta < 1,
    # and the chain length is chosen so that delta <= target_delta
    mech = GeneralizedLaplace(invariants.total(3), 1.0, norm="l2")
    mech.certify_burn_in(rng=np.random.default_rng(117))
    d = mech.guarantee.parameters["delta"]
    assert 0 < d < 1
    assert d <= mech.target_delta
    y = mech.release(np.array([5, 1, 3]), rng=np.random.default_rng(118))
    assert y.sum() == 9


def test_sampler_exact_without_an_exact_sampler_raises():
    with pytest.raises(ValueError, match="no exact sampler"):
        GeneralizedLaplace(invariants.groups(CODES), 0.7, norm="l2", sampler="exact")
    with pytest.raises(ValueError, match="no exact sampler"):
        GeneralizedLaplace(invariants.margins((3, 3), [(0,), (1,)]), 0.7, sampler="exact", min_acceptance=1.0)
    with pytest.raises(ValueError, match="sampler must be"):
        GeneralizedLaplace(invariants.groups(CODES), 0.7, sampler="exactly")
