"""Block updates of independent cells given their group sums (privinfer.lattice.block), checked
against exact conditional laws by enumeration -- no PyMC."""

import itertools

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln, logsumexp

from privinfer.lattice import (
    CellSum,
    GroupSumSampler,
    GroupTree,
    L1Target,
    LatticeState,
    LocalLogDensity,
    block_kernel,
    separable_cell_logp,
    unimodal_windows,
)

LAM = np.array([3.0, 5.0, 1.5, 8.0, 2.0, 4.0, 6.0])
Y = np.array([2, 7, 0, 9, 3, 1, 5])
CODES = np.array([0, 0, 1, 0, 1, 0, 1])
TOTALS = np.array([18, 9])
RATE = 0.7


def _poisson_cell(idx, v):
    v = np.asarray(v)
    idx = np.broadcast_to(idx, v.shape)
    with np.errstate(invalid="ignore"):
        lp = np.where(v >= 0, v * np.log(LAM[idx]) - LAM[idx] - gammaln(np.maximum(v, 0) + 1.0), -np.inf)
    return lp


def _density():
    """Poisson prior cells + double-geometric noise around Y: separable, log-concave."""
    noise = L1Target(RATE).terms[0].shifted(Y, -1)
    return LocalLogDensity([CellSum(_poisson_cell), noise])


def _compositions(T, k):
    for c in itertools.combinations(range(T + k - 1), k - 1):
        b = (-1,) + c + (T + k - 1,)
        yield [b[i + 1] - b[i] - 1 for i in range(k)]


def _fibre(codes, totals):
    """Every non-negative x with the group sums, and its group decomposition."""
    groups = [np.flatnonzero(codes == g) for g in range(len(totals))]
    parts = [np.array(list(_compositions(int(T), len(cells)))) for T, cells in zip(totals, groups)]
    pts = []
    for combo in itertools.product(*[range(len(p)) for p in parts]):
        x = np.zeros(codes.size, dtype=np.int64)
        for g, j in enumerate(combo):
            x[groups[g]] = parts[g][j]
        pts.append(x)
    return np.array(pts)


def test_group_tree_covers_every_group_once():
    codes = np.array([2, 0, 1, 1, 2, 2, 0, 2, 2, 3])  # sizes 2, 2, 5, 1
    tree = GroupTree(codes)
    assert tree.n_groups == 4 and list(tree.sizes) == [2, 2, 5, 1]
    assert tree.depth == 3  # ceil(log2(5))
    # leaves' values summed up the tree give each group's total
    x = np.arange(10) * 7 + 1
    S = GroupSumSampler(tree, lambda idx, v: -np.abs(v - 5.0), np.zeros(10, dtype=np.int64),
                        np.full(10, 100, dtype=np.int64))
    top = S._node_values(x)[-1]
    assert np.array_equal(top, np.bincount(codes, weights=x).astype(np.int64))
    with pytest.raises(ValueError, match="codes"):
        GroupTree(np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="at least one cell"):
        GroupTree(np.array([0, 2]))


def test_windows_of_unimodal_cells():
    cells = separable_cell_logp(_density())
    upper = TOTALS[CODES]
    lo, hi, mode, capped = unimodal_windows(cells, 7, 0, upper, log_drop=10.0)
    assert capped == 0
    idx = np.arange(7)
    grid = np.arange(0, 19)
    W = cells(idx[:, None], np.broadcast_to(grid, (7, 19)))
    for i in range(7):
        w = W[i, : upper[i] + 1]
        assert mode[i] == int(np.argmax(w))  # the mode found by bisection is the argmax
        inside = np.flatnonzero(w >= w.max() - 10.0)
        assert lo[i] == inside.min() and hi[i] == inside.max()  # the L-drop interval exactly
    # unbounded cells (no lower or upper bound): a discrete Gaussian around 40
    g = separable_cell_logp(LocalLogDensity([CellSum(lambda idx, v: -(np.asarray(v) - 40.0) ** 2 / 8.0)]))
    lo, hi, mode, _ = unimodal_windows(g, 3, None, None, log_drop=8.0)
    assert np.all(mode == 40) and np.all(lo == 32) and np.all(hi == 48)  # (v-40)^2/8 <= 8


def test_proposal_is_the_exact_conditional_law():
    # with windows 36 nats deep and tables kept down to 1e-14 of their maxima the tree FFBS
    # proposal is the conditional law given the group sums up to the dropped mass: log q
    # equals the enumerated log-probability to round-off
    cells = separable_cell_logp(_density())
    tree = GroupTree(CODES)
    lo, hi, _, _ = unimodal_windows(cells, 7, 0, TOTALS[CODES], log_drop=36.0)
    S = GroupSumSampler(tree, cells, lo, hi, floor=1e-14)
    pts = _fibre(CODES, TOTALS)
    lw = cells(np.arange(7), pts).sum(axis=1)
    exact = lw - logsumexp(lw)
    lq = np.array([S.log_q(x).sum() for x in pts])
    finite = np.isfinite(lq)
    assert np.exp(exact[~finite]).sum() < 1e-12  # points outside the windows carry no mass
    np.testing.assert_allclose(lq[finite], exact[finite], atol=1e-8)
    # and sample() draws from it: a draw's log q is what log_q says, sums are kept
    rng = np.random.default_rng(5)
    for _ in range(20):
        x, lq_x, ok = S.sample(rng, TOTALS)
        assert ok.all()
        assert np.array_equal(np.bincount(CODES, weights=x).astype(int), TOTALS)
        np.testing.assert_allclose(lq_x, S.log_q(x), atol=1e-10)


@pytest.mark.parametrize("log_drop", [18.0, 1.5])
def test_block_kernel_preserves_the_posterior(log_drop):
    # Start 4000 chains from exact draws of the target (enumeration) and take one block step:
    # the result must again follow the target (chi-square over the fibre's points, alpha
    # 1e-3).  log_drop = 1.5 cuts most of every cell's mass out of the proposal, so only the
    # Metropolis-Hastings correction keeps the step exact (and its acceptance drops below 1).
    density = _density()
    cells = separable_cell_logp(density)
    pts = _fibre(CODES, TOTALS)
    lw = cells(np.arange(7), pts).sum(axis=1)
    p = np.exp(lw - logsumexp(lw))
    rng = np.random.default_rng(11 if log_drop > 2 else 12)
    m = 4000
    start = pts[rng.choice(len(pts), size=m, p=p)]
    tree = GroupTree(CODES)
    state = LatticeState(start.copy(), density.init_stat(start))
    new, info = block_kernel(rng, state, tree, density, lower=0, log_drop=log_drop)
    assert np.array_equal(np.stack([np.bincount(CODES, weights=r) for r in new.e]).astype(int),
                          np.broadcast_to(TOTALS, (m, 2)))
    acc = info.n_accepted.sum() / info.n_proposed.sum()
    if log_drop > 2:
        assert acc > 0.999
    else:
        assert 0.05 < acc < 0.95
        assert np.mean(np.any(new.e != start, axis=1)) > 0.05  # it moves
    # chi-square of the visited points against the target, bins merged to expected >= 5
    keys = {tuple(r): k for k, r in enumerate(pts)}
    counts = np.bincount([keys[tuple(r)] for r in new.e], minlength=len(pts))
    order = np.argsort(p)[::-1]
    exp_c, obs_c, acc_e, acc_o = [], [], 0.0, 0
    for k in order:
        acc_e += p[k] * m
        acc_o += counts[k]
        if acc_e >= 5:
            exp_c.append(acc_e)
            obs_c.append(acc_o)
            acc_e, acc_o = 0.0, 0
    exp_c[-1] += acc_e
    obs_c[-1] += acc_o
    pval = stats.chisquare(obs_c, exp_c).pvalue
    assert pval > 1e-3, pval


def test_block_kernel_needs_a_separable_density():
    from privinfer.lattice import L2Target

    tree = GroupTree(np.zeros(3, dtype=int))
    dens = L2Target(1.0)
    st = LatticeState(np.array([[1, 2, 3]]), dens.init_stat(np.array([[1, 2, 3]])))
    with pytest.raises(ValueError, match="not separable"):
        block_kernel(np.random.default_rng(0), st, tree, dens)
