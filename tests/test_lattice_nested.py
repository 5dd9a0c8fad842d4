"""Block updates under nested sum constraints with potentials on the intermediate sums
(privinfer.lattice.nested), checked against exact conditional laws by enumeration.

Every test problem is small enough to list every composition of each block's total among
its cells; the exact law of a block is ``exp(sum_i w_i(x_i) + sum_v phi_v(s_v))`` normalized
over those compositions, with the unit sums computed here from the codes (not by the code
under test).  Statistical checks use many independent copies of one small problem: the
sampler and the kernel treat blocks independently, so one call on ``R`` copies gives ``R``
independent draws of each block.
"""

import itertools

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln, logsumexp

from privinfer.lattice import (
    GroupSumSampler,
    GroupTree,
    NestedSumSampler,
    NestedTree,
    nested_block_kernel,
    unimodal_windows,
)

# -- problems --------------------------------------------------------------------------


def _cell_weights(lam, r_nb, kind):
    """Poisson(lam) log-pmf for kind 0, negative binomial (r, mean lam) for kind 1; cells are
    indexed modulo their number (copies share the weights)."""
    lam, r_nb, kind = map(np.asarray, (lam, r_nb, kind))
    n = lam.size
    p_nb = lam / (lam + r_nb)  # NB(r, p): mean r p / (1 - p) = lam

    def cell(idx, v):
        v = np.asarray(v)
        b = np.broadcast_to(np.asarray(idx) % n, v.shape)
        vv = np.maximum(v, 0)
        pois = vv * np.log(lam[b]) - lam[b] - gammaln(vv + 1.0)
        nb = (gammaln(vv + r_nb[b]) - gammaln(r_nb[b]) - gammaln(vv + 1.0)
              + r_nb[b] * np.log1p(-p_nb[b]) + vv * np.log(p_nb[b]))
        return np.where(v >= 0, np.where(kind[b] == 0, pois, nb), -np.inf)

    return cell


def _gaussian_potential(means_per_level, sds_per_level):
    """``phi(level, u, s) = -(s - m_u)^2 / (2 sd_u^2)``, units indexed modulo their number."""

    def phi(level, units, s):
        m = np.asarray(means_per_level[level - 1], dtype=float)
        sd = np.asarray(sds_per_level[level - 1], dtype=float)
        u = np.asarray(units) % m.size
        return -((np.asarray(s) - m[u]) ** 2) / (2.0 * sd[u] ** 2)

    return phi


class Problem:
    """A small nested problem: base codes, block totals, cell weights, potentials."""

    def __init__(self, codes, totals, cell, phi, coarse):
        self.coarse = coarse  # (log_drop, floor): a truncation that drops most of the mass
        self.codes = [np.asarray(c) for c in codes]
        self.totals = np.asarray(totals)
        self.cell = cell
        self.phi = phi  # a callable (used at levels 1..L-1) or a per-level list
        self.L = len(codes)
        self.n = self.codes[0].size
        sizes = [self.n] + [int(c.max()) + 1 for c in self.codes]
        self.sizes = sizes
        # unit of each cell at every level, composed from the codes
        self.unit_of_cell = [np.arange(self.n)]
        for c in self.codes:
            self.unit_of_cell.append(c[self.unit_of_cell[-1]])
        self.block_of_cell = self.unit_of_cell[-1]

    def potential(self, level):
        if callable(self.phi):
            return self.phi
        return self.phi[level - 1]

    def replicated(self, R):
        """Codes and totals of R independent copies (copy r's units follow copy r-1's)."""
        codes = [(np.arange(R)[:, None] * self.sizes[k + 1] + c[None, :]).ravel() for k, c in enumerate(self.codes)]
        return codes, np.tile(self.totals, R)

    def exact(self, b):
        """(points, log-probabilities) of block b: every composition of its total."""
        cells = np.flatnonzero(self.block_of_cell == b)
        T, k = int(self.totals[b]), cells.size
        pts = []
        for c in itertools.combinations(range(T + k - 1), k - 1):
            bars = (-1,) + c + (T + k - 1,)
            pts.append([bars[i + 1] - bars[i] - 1 for i in range(k)])
        pts = np.array(pts, dtype=np.int64)
        lw = self.cell(cells[None, :], pts).sum(axis=1)
        for level in range(1, self.L):
            phi = self.potential(level)
            if phi is None:
                continue
            units = np.unique(self.unit_of_cell[level][cells])
            for u in units:
                s = pts[:, self.unit_of_cell[level][cells] == u].sum(axis=1)
                lw = lw + phi(level, np.full(s.shape, u), s)
        return pts, cells, lw - logsumexp(lw)

    def background(self):
        """One composition per block (used to fill the blocks not under study)."""
        x = np.zeros(self.n, dtype=np.int64)
        for b, T in enumerate(self.totals):
            x[np.flatnonzero(self.block_of_cell == b)[0]] = T
        return x


# two blocks, each of two level-1 units of 2-3 cells; cells interleaved across units
TWO = Problem(
    codes=[np.array([0, 1, 2, 0, 3, 1, 3, 0, 2, 3]), np.array([0, 0, 1, 1])],
    totals=[9, 7],
    cell=_cell_weights(lam=[1.5, 2.0, 0.8, 1.2, 2.5, 1.0, 0.7, 1.8, 2.2, 1.1],
                       r_nb=[2.0, 3.0, 1.5, 2.5, 4.0, 2.0, 1.2, 3.0, 2.0, 1.5],
                       kind=[0, 1, 0, 1, 1, 0, 0, 1, 1, 0]),
    # unit 0's cells have mean 4.5, unit 1's 3.0, unit 2's 3.0, unit 3's 4.3: the potentials
    # pull units 0 and 2 away from their cells' means (and are sharper than the cells' spread)
    phi=_gaussian_potential([[2.5, 4.0, 4.5, 3.0]], [[1.0, 1.5, 1.2, 2.0]]),
    coarse=(1.5, 0.05),  # the proposal's support holds 27% and 86% of the blocks' mass
)

# three levels: cells -> level-1 units -> level-2 units -> blocks (two blocks of 7 and 3 cells)
THREE = Problem(
    codes=[np.array([0, 0, 1, 1, 1, 2, 3, 4, 4, 5]),  # level-1 units of sizes 2, 3, 1, 1, 2, 1
           np.array([0, 0, 1, 1, 2, 2]),               # level-2 units {0, 1}, {2, 3}, {4, 5}
           np.array([0, 0, 1])],                       # blocks {0, 1} (7 cells), {2} (3 cells)
    totals=[8, 5],
    cell=_cell_weights(lam=[1.0, 1.4, 0.9, 1.2, 0.6, 1.6, 1.1, 2.0, 1.3, 0.8],
                       r_nb=[2.0] * 10, kind=[0, 1, 0, 0, 1, 0, 1, 0, 1, 0]),
    phi=[_gaussian_potential([[1.0, 4.5, 2.5, 0.5, 2.0, 1.5]], [[1.0, 1.5, 1.0, 0.8, 1.2, 1.0]]),
         lambda level, u, s: -np.abs(np.asarray(s) - np.array([3.0, 2.0, 4.0])[np.asarray(u) % 3]) * 0.9],
    coarse=(1.0, 0.05),  # the proposal's support holds 32% and 23% of the blocks' mass
)


def _full_windows(prob, R=1):
    """Windows [0, block total]: every composition is inside."""
    _, totals = prob.replicated(R)
    tree = NestedTree(prob.replicated(R)[0])
    hi = totals[tree.block_of[0]].astype(np.int64)
    return tree, np.zeros(tree.n, dtype=np.int64), hi


def _chisquare_p(counts, p):
    """Chi-square goodness-of-fit p-value, categories merged (largest first) until each
    expected count is >= 5 so the chi-square approximation holds."""
    m = counts.sum()
    order = np.argsort(p)[::-1]
    exp_c, obs_c, e, o = [], [], 0.0, 0
    for k in order:
        e += p[k] * m
        o += counts[k]
        if e >= 5:
            exp_c.append(e)
            obs_c.append(o)
            e, o = 0.0, 0
    exp_c[-1] += e
    obs_c[-1] += o
    return stats.chisquare(obs_c, exp_c).pvalue


def _which(prob, x, R, pts, cells):
    """Index (into ``pts``) of block b's composition in each of the R copies of the state x."""
    keys = {tuple(r): k for k, r in enumerate(pts)}
    return np.array([keys[tuple(r)] for r in x.reshape(R, prob.n)[:, cells]])


def _counts(prob, x, R, b, pts, cells):
    """Counts of block b's compositions among R copies of the state x."""
    return np.bincount(_which(prob, x, R, pts, cells), minlength=len(pts))


# -- (a) the proposal law is the exact conditional law --------------------------------


@pytest.mark.parametrize("prob", [TWO, THREE], ids=["two-level", "three-level"])
def test_log_q_is_the_exact_conditional_law(prob):
    # Windows cover every composition and tables are cut at 1e-15 of their maxima: the
    # proposal probability of every composition is the enumerated one up to the dropped
    # mass and the FFT round-off (both ~1e-15 relative to a table's maximum), far below 1e-9.
    tree, lo, hi = _full_windows(prob)
    S = NestedSumSampler(tree, prob.cell, lo, hi, prob.phi, floor=1e-15)
    for b in range(len(prob.totals)):
        pts, cells, exact = prob.exact(b)
        x = np.tile(prob.background(), (len(pts), 1))
        x[:, cells] = pts
        lq = np.array([S.log_q(r)[b] for r in x])
        np.testing.assert_allclose(np.exp(lq), np.exp(exact), rtol=0, atol=1e-9)
        np.testing.assert_allclose(np.exp(lq).sum(), 1.0, rtol=0, atol=1e-9)
        # and in logs wherever the probability is not tiny
        big = exact > np.log(1e-6)
        assert big.sum() >= 10
        np.testing.assert_allclose(lq[big], exact[big], rtol=0, atol=1e-7)


# -- (b) sample() draws from it --------------------------------------------------------


@pytest.mark.parametrize("prob", [TWO, THREE], ids=["two-level", "three-level"])
def test_sample_frequencies_match_the_exact_law(prob):
    # R independent copies in one tree: one call draws each block R times.  Chi-square of
    # the counts against the enumerated law (expected counts >= 5 per merged category); under
    # the null the p-value is uniform, so a correct sampler fails p > 1e-3 with probability
    # 1e-3 -- and the seed is fixed, so the test is deterministic.
    R = 20000
    codes, totals = prob.replicated(R)
    tree, lo, hi = _full_windows(prob, R)
    S = NestedSumSampler(tree, prob.cell, lo, hi, prob.phi, floor=1e-15)
    x, lq, ok = S.sample(np.random.default_rng(2024), totals)
    assert ok.all()
    assert np.array_equal(tree.sums(x)[-1], totals)
    assert x.min() >= 0
    np.testing.assert_allclose(lq, S.log_q(x), atol=1e-9)  # sample and log_q agree
    for b in range(len(prob.totals)):
        pts, cells, exact = prob.exact(b)
        which = _which(prob, x, R, pts, cells)
        np.testing.assert_allclose(lq[b::len(prob.totals)], exact[which], atol=1e-9)  # q = pi
        p = np.exp(exact)
        pval = _chisquare_p(np.bincount(which, minlength=len(pts)), p / p.sum())
        assert pval > 1e-3, (b, pval)


# -- (c) the Metropolis--Hastings kernel is exact under coarse truncation --------------


def _exact_draws(rng, prob, R):
    """R copies, each block drawn from its exact law."""
    x = np.zeros((R, prob.n), dtype=np.int64)
    for b in range(len(prob.totals)):
        pts, cells, exact = prob.exact(b)
        p = np.exp(exact)
        x[:, cells] = pts[rng.choice(len(pts), size=R, p=p / p.sum())]
    return x.ravel()


@pytest.mark.parametrize("prob", [TWO, THREE], ids=["two-level", "three-level"])
def test_kernel_keeps_the_exact_law_under_coarse_truncation(prob):
    # Start every copy from an exact draw and take one kernel step with windows 1-1.5 nats
    # deep and tables cut at 5% of their maxima: most of the mass is outside the proposal's
    # support, so the draw alone is far from the target; the Metropolis--Hastings test
    # (current states outside the support are kept) must return exact draws again.
    # Chi-square at p > 1e-3 as above (the copies are independent before and after).
    R = 20000
    codes, totals = prob.replicated(R)
    tree = NestedTree(codes)
    rng = np.random.default_rng(7)
    start = _exact_draws(rng, prob, R)
    log_drop, floor = prob.coarse
    new, info = nested_block_kernel(rng, start, tree, prob.cell, prob.phi, lower=0, log_drop=log_drop, floor=floor)
    assert new.shape == start.shape and new.dtype == np.int64
    assert np.array_equal(tree.sums(new)[-1], totals)
    assert info.n_proposed.shape == (1,) and info.n_accepted.shape == (1,)
    assert info.n_proposed[0] == totals.size  # every block's total is covered
    rate = info.n_accepted[0] / info.n_proposed[0]
    assert 0.05 < rate < 0.95, rate  # the test refuses a real share of the moves
    moved = np.any((new != start).reshape(-1, prob.n), axis=1).mean()
    assert moved > 0.05
    for b in range(len(prob.totals)):
        pts, cells, exact = prob.exact(b)
        p = np.exp(exact)
        pval = _chisquare_p(_counts(prob, new, R, b, pts, cells), p / p.sum())
        assert pval > 1e-3, (b, pval)


def _proposal_support(prob, log_drop, floor):
    """Per block: the exact law, log q of every composition under the kernel's proposal."""
    tree = NestedTree(prob.codes)
    upper = (prob.totals[prob.block_of_cell] - 0).astype(np.int64)  # lower 0: T - 0 * (size - 1)
    lo, hi, _, _ = unimodal_windows(prob.cell, prob.n, 0, upper, log_drop=log_drop)
    S = NestedSumSampler(tree, prob.cell, lo, hi, prob.phi, floor=floor)
    out = []
    for b in range(len(prob.totals)):
        pts, cells, exact = prob.exact(b)
        x = np.tile(prob.background(), (len(pts), 1))
        x[:, cells] = pts
        lq = np.array([S.log_q(r)[b] for r in x])
        out.append((pts, cells, exact, lq))
    return out


@pytest.mark.parametrize("coarse", [True, False], ids=["coarse", "default"])
def test_kernel_from_a_fixed_start(coarse):
    # Every copy starts from the same composition x0 and takes T = 2 kernel steps.
    # Let S be the proposal's support (log q > -inf) and pi_S the target restricted to S.
    # For x in S, K(x, y) = min(q(y), pi(y) q(x) / pi(x)) >= eps pi_S(y) with
    # eps = min_{y in S} q(y) / pi_S(y), so TV(K^T(x0, .), pi_S) <= (1 - eps)^T
    # (Doeblin); here q = pi_S up to the FFT round-off, so eps ~ 1 and the bias is nil.
    # The independence update never proposes a state outside S, so from x0 the chain's
    # law is pi_S -- the exact law when S holds all the mass (default truncation:
    # TV(pi_S, pi) = pi(not S) < 1e-6), and not otherwise (coarse truncation: pair the
    # update with a local sweep to reach the rest).  Chi-square against pi_S at p > 1e-3.
    prob = TWO
    log_drop, floor = prob.coarse if coarse else (18.0, 1e-6)
    sup = _proposal_support(prob, log_drop, floor)
    R, T = 20000, 2
    codes, totals = prob.replicated(R)
    tree = NestedTree(codes)
    x0 = np.zeros(prob.n, dtype=np.int64)
    for b, (pts, cells, exact, lq) in enumerate(sup):
        x0[cells] = pts[np.argmax(np.where(np.isfinite(lq), exact, -np.inf))]  # the mode of pi_S
    x = np.tile(x0, R)
    rng = np.random.default_rng(99)
    for _ in range(T):
        x, info = nested_block_kernel(rng, x, tree, prob.cell, prob.phi, lower=0, log_drop=log_drop, floor=floor)
    for b, (pts, cells, exact, lq) in enumerate(sup):
        inS = np.isfinite(lq)
        mass_S = np.exp(exact[inS]).sum()
        if coarse:
            assert mass_S < 0.9  # the truncation is coarse indeed
        else:
            assert 1 - mass_S < 1e-6
        pi_S = np.where(inS, np.exp(exact), 0.0) / mass_S
        eps = np.exp(lq[inS] - np.log(pi_S[inS])).min()
        assert (1 - eps) ** T < 1e-6, eps
        counts = _counts(prob, x, R, b, pts, cells)
        assert counts[~inS].sum() == 0  # never outside the proposal's support
        keep = np.flatnonzero(inS)
        pval = _chisquare_p(counts[keep], pi_S[keep])
        assert pval > 1e-3, (b, pval)


def test_kernel_state_shapes_and_chains():
    prob = TWO
    tree = NestedTree(prob.codes)
    rng = np.random.default_rng(3)
    x0 = _exact_draws(rng, prob, 1)
    new, info = nested_block_kernel(rng, x0, tree, prob.cell, prob.phi, lower=0)
    assert new.shape == (prob.n,) and not np.shares_memory(new, x0)
    assert np.array_equal(tree.sums(new)[-1], prob.totals)
    many = np.stack([x0, x0, x0])
    new, info = nested_block_kernel(rng, many, tree, prob.cell, prob.phi, lower=0)
    assert new.shape == (3, prob.n)
    assert np.array_equal(tree.sums(new)[-1], np.tile(prob.totals, (3, 1)))
    assert info.n_proposed.tolist() == [2, 2, 2]
    assert info.capped == 0 and info.width >= 1
    assert np.all(info.n_accepted == 2)  # default truncation: the moves are accepted
    # a block whose total the coarse tables miss is never proposed (its log q is -inf)
    log_drop, floor = 1.0, 0.05
    new, info = nested_block_kernel(rng, many, tree, prob.cell, prob.phi, lower=0, log_drop=log_drop, floor=floor)
    assert info.n_proposed.tolist() == [1, 1, 1] and np.array_equal(new[:, prob.block_of_cell == 0],
                                                                    many[:, prob.block_of_cell == 0])
    lo, hi, _, _ = unimodal_windows(prob.cell, prob.n, 0, prob.totals[prob.block_of_cell], log_drop=log_drop)
    S = NestedSumSampler(tree, prob.cell, lo, hi, prob.phi, floor=floor)
    assert S.covers(prob.totals).tolist() == [False, True]
    x, lq, ok = S.sample(rng, prob.totals)
    assert ok.tolist() == [False, True] and np.all(x[prob.block_of_cell == 0] == -1) and lq[0] == -np.inf
    assert S.log_q(x0)[0] == -np.inf
    # a one-cell block is fixed by its total and never proposed
    t1 = NestedTree([np.array([0, 0, 1]), np.array([0, 1])])
    new, info = nested_block_kernel(rng, np.array([2, 3, 4]), t1, prob.cell, None, lower=0)
    assert new[2] == 4 and info.n_proposed.tolist() == [1]


# -- (e) one level is GroupSumSampler --------------------------------------------------


def test_one_level_is_the_group_sampler():
    codes = np.array([1, 0, 1, 2, 0, 1, 2, 2, 2, 0])
    totals = np.array([20, 12, 25])
    cell = TWO.cell
    lo, hi, _, _ = unimodal_windows(cell, 10, 0, totals[codes], log_drop=12.0)
    G = GroupSumSampler(GroupTree(codes), cell, lo, hi)
    # a top-level potential is a constant and is ignored
    N = NestedSumSampler(NestedTree([codes]), cell, lo, hi, [lambda level, u, s: s * 100.0])
    rng_g, rng_n = np.random.default_rng(8), np.random.default_rng(8)
    for _ in range(5):
        xg, lqg, okg = G.sample(rng_g, totals)
        xn, lqn, okn = N.sample(rng_n, totals)
        assert np.array_equal(xg, xn) and np.array_equal(okg, okn)
        np.testing.assert_array_equal(lqg, lqn)
        np.testing.assert_array_equal(G.log_q(xg), N.log_q(xg))
    assert N.width == G.width
    assert np.array_equal(N.covers(totals), G.covers(totals))


def test_from_tables_reproduces_the_cell_sampler():
    # leaf tables exp(w_i) on the windows give the sampler built from the cell weights
    codes = np.array([1, 0, 1, 2, 0, 1, 2, 2, 2, 0])
    totals = np.array([20, 12, 25])
    cell = TWO.cell
    lo, hi, _, _ = unimodal_windows(cell, 10, 0, totals[codes], log_drop=12.0)
    tree = GroupTree(codes)
    G = GroupSumSampler(tree, cell, lo, hi, floor=1e-12)
    W = int((hi - lo).max()) + 1
    grid = lo[:, None] + np.arange(W)
    P = np.where(grid <= hi[:, None], np.exp(cell(np.arange(10)[:, None], grid)), 0.0)
    F = GroupSumSampler.from_tables(tree, P * 3.7, lo, floor=1e-12)
    assert np.array_equal(F.lo, lo) and np.array_equal(F.hi, hi) and F.cell_logp is None
    rng_g, rng_f = np.random.default_rng(4), np.random.default_rng(4)
    for _ in range(5):
        xg, lqg, _ = G.sample(rng_g, totals)
        xf, lqf, _ = F.sample(rng_f, totals)
        assert np.array_equal(xg, xf)
        np.testing.assert_allclose(lqf, lqg, atol=1e-12)
        np.testing.assert_allclose(F.log_q(xg), G.log_q(xg), atol=1e-12)


def test_tree_sums_and_maps():
    tree = NestedTree(THREE.codes)
    assert tree.n == 10 and tree.n_levels == 3 and tree.n_blocks == 2
    assert tree.n_units == (10, 6, 3, 2)
    assert tree.block_sizes.tolist() == [7, 3]
    assert np.array_equal(tree.block_of[0], THREE.block_of_cell)
    x = np.arange(10) * 3 + 1
    sums = tree.sums(np.stack([x, 2 * x]))
    for level in range(4):
        expect = np.bincount(THREE.unit_of_cell[level], weights=x).astype(np.int64)
        assert np.array_equal(sums[level][0], expect) and np.array_equal(sums[level][1], 2 * expect)
        assert sums[level].dtype == np.int64


# -- (f) bad inputs --------------------------------------------------------------------


def test_bad_trees():
    with pytest.raises(ValueError, match="at least one level"):
        NestedTree([])
    with pytest.raises(ValueError, match="list of code vectors"):
        NestedTree(np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="level 1: codes must be non-negative integers"):
        NestedTree([np.array([0.0, 1.0])])
    with pytest.raises(ValueError, match="level 1: codes must be non-negative integers"):
        NestedTree([np.array([0, -1])])
    with pytest.raises(ValueError, match="level 2: codes must be a non-empty vector"):
        NestedTree([np.array([0, 1]), np.array([], dtype=int)])
    with pytest.raises(ValueError, match="level 1: unit 1 holds none of the cells"):
        NestedTree([np.array([0, 2, 2])])
    with pytest.raises(ValueError, match="level 2: unit 0 holds none of the level-1 units"):
        NestedTree([np.array([0, 1, 1]), np.array([1, 1])])
    with pytest.raises(ValueError, match="level 2: 3 codes, but level 1 has 2 units"):
        NestedTree([np.array([0, 1, 1]), np.array([0, 0, 1])])
    with pytest.raises(ValueError, match="last axis"):
        NestedTree([np.array([0, 1, 1])]).sums(np.zeros(4, dtype=int))


def test_bad_potentials_and_inputs():
    prob = TWO
    tree, lo, hi = _full_windows(prob)
    with pytest.raises(ValueError, match="potentials: 3 entries, expected 1"):
        NestedSumSampler(tree, prob.cell, lo, hi, [None, None, None])
    with pytest.raises(ValueError, match=r"potentials\[0\] \(level 1\) must be None or a callable"):
        NestedSumSampler(tree, prob.cell, lo, hi, [3.0])
    with pytest.raises(ValueError, match="potentials must be None, a callable"):
        NestedSumSampler(tree, prob.cell, lo, hi, 3.0)
    with pytest.raises(ValueError, match="level-1 potential returned shape"):
        NestedSumSampler(tree, prob.cell, lo, hi, lambda level, u, s: np.zeros(7))
    with pytest.raises(ValueError, match="level-1 potential is NaN or \\+inf for unit 0"):
        NestedSumSampler(tree, prob.cell, lo, hi, lambda level, u, s: np.where(np.asarray(u) == 0, np.nan, 0.0 * s))
    with pytest.raises(ValueError, match="level 1: unit 2's potential is -inf"):
        NestedSumSampler(tree, prob.cell, lo, hi, lambda level, u, s: np.where(np.asarray(u) == 2, -np.inf, 0.0 * s))
    with pytest.raises(ValueError, match="NestedTree"):
        NestedSumSampler(GroupTree(prob.codes[0]), prob.cell, lo, hi)
    with pytest.raises(ValueError, match="windows must have shape"):
        NestedSumSampler(tree, prob.cell, lo[:5], hi[:5])
    S = NestedSumSampler(tree, prob.cell, lo, hi, prob.phi)
    with pytest.raises(ValueError, match=r"totals must be integers of shape \(2,\)"):
        S.sample(np.random.default_rng(0), np.array([9, 7, 1]))
    with pytest.raises(ValueError, match=r"totals must be integers"):
        S.sample(np.random.default_rng(0), np.array([9.0, 7.0]))
    with pytest.raises(ValueError, match=r"x must have shape \(10,\)"):
        S.log_q(np.zeros(3, dtype=int))
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="state must hold integers"):
        nested_block_kernel(rng, prob.background() * 1.0, tree, prob.cell, prob.phi)
    with pytest.raises(ValueError, match=r"state must have shape \(10,\) or \(chains, 10\)"):
        nested_block_kernel(rng, np.zeros(4, dtype=int), tree, prob.cell, prob.phi)
    with pytest.raises(ValueError, match="below lower"):
        nested_block_kernel(rng, prob.background() - 1, tree, prob.cell, prob.phi, lower=0)
    with pytest.raises(ValueError, match="NestedTree"):
        nested_block_kernel(rng, prob.background(), GroupTree(prob.codes[0]), prob.cell, prob.phi)


def test_bad_leaf_tables():
    tree = GroupTree(np.array([0, 0, 1]))
    with pytest.raises(ValueError, match=r"leaf tables must have shape \(3, W\)"):
        GroupSumSampler.from_tables(tree, np.ones((2, 4)), np.zeros(2, dtype=int))
    with pytest.raises(ValueError, match="table offsets must be an integer vector"):
        GroupSumSampler.from_tables(tree, np.ones((3, 4)), np.zeros(3))
    with pytest.raises(ValueError, match="finite and non-negative"):
        GroupSumSampler.from_tables(tree, -np.ones((3, 4)), np.zeros(3, dtype=int))
    with pytest.raises(ValueError, match="positive entry"):
        GroupSumSampler.from_tables(tree, np.zeros((3, 4)), np.zeros(3, dtype=int))
