"""The walk's carried update (privinfer.pymc.walk_carry): the integer shift, and exact
invariance of the joint posterior of (increment, cells) checked against enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.sparse as sp
from scipy import stats
from scipy.special import gammaln, softmax

from privinfer.pymc.walk_carry import carried_update, carry_directions, carry_shift, ellipse_update, scale_update_carried

ALPHA = 1e-3   # each test's false-alarm rate: the samples are independent, so KS and chi-square are exact


@pytest.mark.parametrize("seed", range(5))
def test_carry_shift_is_a_zero_sum_integer_vector_near_the_conditional_mean_shift(seed):
    rng = np.random.default_rng(seed)
    d = 46
    theta = rng.normal(0, 1, d)
    r = rng.random(d)
    N = 4000
    h = carry_shift(theta, N, r)
    assert h.dtype == np.int64 and h.sum() == 0
    c = r * N * softmax(theta)
    target = c - r * c.sum() / r.sum()
    assert np.all(np.abs(h - target) < 1.0)                  # largest remainders: within 1 of the real shift
    assert np.array_equal(h, carry_shift(theta, N, r))       # a function of the profile
    assert np.array_equal(carry_shift(theta, N, np.zeros(d)), np.zeros(d, dtype=np.int64))


def _shift_by_sorting(theta, N, r):
    """h(theta) written out: floors of the centred shift, +1 on the largest remainders in the
    order of a stable sort (ties to the lower index)."""
    c = r * N * softmax(theta)
    v = c - r * c.sum() / r.sum()
    h = np.floor(v).astype(np.int64)
    k = -h.sum()
    h[np.argsort(-(v - np.floor(v)), kind="stable")[:k]] += 1
    return h


@pytest.mark.parametrize("seed", range(5))
def test_carry_shift_rounds_by_the_largest_remainders_ties_to_the_lower_index(seed):
    rng = np.random.default_rng(seed)
    d = 46
    for _ in range(200):
        theta = rng.normal(0, 1, d)
        # ties: repeated log shares and carry fractions give equal remainders
        theta[rng.integers(0, d, 10)] = theta[0]
        r = np.where(rng.random(d) < 0.5, 0.5, rng.random(d))
        N = int(rng.integers(1, 5000))
        np.testing.assert_array_equal(carry_shift(theta, N, r), _shift_by_sorting(theta, N, r))
    theta = np.zeros(d)                      # every remainder equal: the lowest indices take the +1s
    r = np.r_[np.ones(d - 1), 0.0]
    np.testing.assert_array_equal(carry_shift(theta, 101, r), _shift_by_sorting(theta, 101, r))


def test_log_factorials_grow_and_keep_their_values():
    from scipy.special import gammaln

    from privinfer.pymc.walk_carry import log_factorials
    small = log_factorials(10).copy()
    big = log_factorials(5000)
    assert big.size == 5001 and not big.flags.writeable
    np.testing.assert_array_equal(big, gammaln(np.arange(5001) + 1.0))
    np.testing.assert_array_equal(log_factorials(10), small)


def test_kernel_scratch_is_cleared_if_left_dirty():
    from privinfer.pymc.walk_carry import _row_scratch
    acc, mark, _ = _row_scratch(37)
    acc[3], mark[5] = 2.0, True
    acc2, mark2, _ = _row_scratch(37)
    assert acc2 is acc and mark2 is mark and not acc.any() and not mark.any()


# The tiny posterior.  Two sibling units (one group), two cells each, two categories (one
# increment per unit, coded 0/1): unit profiles b_u + [0, eta_u], eta_1 = s, eta_2 = -s (the
# centred increments of a pair; the raw ones are m + s and m - s with m fixed by pair moves),
# Dirichlet-multinomial cells with concentration kappa given the unit totals, the cells'
# total T published exactly, and discrete Gaussian measurements of every cell, both unit
# totals and both category sums.  The target over (s, x) is enumerated: x over the fibre (286
# points) and s on a fine grid.
#
# With members (a walk whose units own several rows of cells, as a county's walk enters each of
# its tracts): the first unit owns two rows of two cells, the second one, every row with its own
# base profile and its own Dirichlet-multinomial given the row's total, all of a unit's rows
# moved by its one increment; measured: every cell, every row's total, the first unit's category
# sums and all cells' category sums; T = 9 over 6 cells (2,002 points).
SYSTEMS = {
    "rows": dict(base=np.array([[0.2, -0.1], [0.0, 0.3]]), members=None, T=10,
                 meas=[[0], [1], [2], [3], [0, 1], [2, 3], [0, 2], [1, 3]],
                 sigma=np.array([1.5, 1.5, 1.5, 1.5, 2.0, 2.0, 2.0, 2.0]),
                 y=np.array([3.0, 1.0, 2.0, 5.0, 4.0, 6.0, 5.0, 7.0]), carry=np.array([0.9, 0.7, 0.8, 0.6])),
    "members": dict(base=np.array([[0.2, -0.1], [-0.3, 0.1], [0.0, 0.3]]), members=np.array([0, 0, 1]), T=9,
                    meas=[[i] for i in range(6)] + [[0, 1], [2, 3], [4, 5], [0, 2], [1, 3], [0, 2, 4], [1, 3, 5]],
                    sigma=np.r_[np.full(6, 1.2), np.full(7, 1.6)],
                    y=np.array([2.0, 1.0, 1.0, 2.0, 1.0, 3.0, 3.0, 2.0, 4.0, 3.0, 4.0, 5.0, 5.0]),
                    carry=np.array([0.9, 0.7, 0.8, 0.6, 0.5, 0.9])),
    # rows of three cells (the second and third in the second category): a row's small cells
    # lumped (the carried update's quantile map) beside a cell carried alone; T = 7 over 6 cells
    # (792 points)
    "three": dict(base=np.array([[0.2, -0.1, 0.4], [0.0, 0.3, -0.2]]), members=None, T=7,
                  meas=[[i] for i in range(6)] + [[0, 1, 2], [3, 4, 5], [0, 3], [1, 2, 4, 5]],
                  sigma=np.r_[np.full(6, 1.3), np.full(4, 1.8)],
                  y=np.array([1.0, 2.0, 1.0, 0.0, 2.0, 1.0, 4.0, 3.0, 1.0, 6.0]),
                  carry=np.array([0.9, 0.8, 0.95, 0.7, 0.9, 0.85]), code=np.array([0, 1, 1])),
}
KAPPA, SIGMA, M = 5.0, 0.8, 0.2
CODE = np.array([0, 1])


def _code(sysm):
    return sysm.get("code", CODE)


def _grid(sysm):
    d = _code(sysm).size
    return np.arange(d * len(sysm["base"])).reshape(-1, d)


def _unit_of_rows(sysm):
    return np.arange(len(sysm["base"])) if sysm["members"] is None else sysm["members"]


def _matrix(sysm):
    B = np.zeros((len(sysm["meas"]), _grid(sysm).size))
    for r, cells in enumerate(sysm["meas"]):
        B[r, cells] = 1.0
    return B


def _log_target(sysm, s, x):
    """log pi(s, x) up to a constant, vectorized over the grid ``s``."""
    out = -((M + s) ** 2 + (M - s) ** 2) / (2 * SIGMA**2)
    for m, u in enumerate(_unit_of_rows(sysm)):
        sgn = 1.0 if u == 0 else -1.0
        th = sysm["base"][m][None, :] + sgn * s[:, None] * _code(sysm)[None, :]
        a = KAPPA * softmax(th, axis=1)
        xm = np.asarray(x)[_grid(sysm)[m]]
        N = xm.sum()
        out = out + gammaln(N + 1) + gammaln(KAPPA) - gammaln(N + KAPPA)
        out = out + (gammaln(xm + a) - gammaln(a) - gammaln(xm + 1)).sum(axis=1)
    res = sysm["y"] - _matrix(sysm) @ np.asarray(x, float)
    return out - (res**2 / (2 * sysm["sigma"] ** 2)).sum()


def _enumerated(n_cells: int, T: int, grid, log_target):
    """A law of (cells, one continuous coordinate) enumerated: the fibre of ``n_cells`` cells
    summing to ``T``, the weights ``exp(log_target(grid, x))`` over fibre x grid (scaled to a
    maximum of 1) and the fibre points' marginal pmf."""
    fibre = np.array([x for x in itertools.product(range(T + 1), repeat=n_cells) if sum(x) == T])
    logd = np.array([log_target(grid, x) for x in fibre])
    w = np.exp(logd - logd.max())
    mass = w.sum(axis=1)
    return fibre, w, mass / mass.sum()


def _draws_of(n, rng, grid, w, px):
    """``n`` exact draws of an enumerated law (:func:`_enumerated`): the fibre points' indices and
    the continuous coordinate given each, by inverting its cdf on the grid."""
    idx = rng.choice(len(px), size=n, p=px)
    s = np.empty(n)
    for k in np.unique(idx):
        sel = idx == k
        cdf = np.cumsum(w[k])
        s[sel] = np.interp(rng.random(sel.sum()), cdf / cdf[-1], grid)
    return idx, s


def _exact(sysm):
    grid = np.linspace(-8, 8, 16001)
    fibre, w, px = _enumerated(_grid(sysm).size, sysm["T"], grid, lambda g, x: _log_target(sysm, g, x))
    return fibre, grid, w, px


def _exact_draws(n, rng, sysm=SYSTEMS["rows"]):
    fibre, grid, w, px = _exact(sysm)
    idx, s = _draws_of(n, rng, grid, w, px)
    return fibre, grid, w, px, idx, s


def _replicated(x, s, sysm=SYSTEMS["rows"]):
    """n independent copies of the tiny system as one problem (block-diagonal rows)."""
    n = s.size
    g1 = _grid(sysm)
    R, c = g1.shape[0], g1.size
    B = sp.block_diag([sp.csr_matrix(_matrix(sysm))] * n, format="csc")
    B.sort_indices()
    grid = (np.arange(n)[:, None, None] * c + g1[None]).reshape(n * R, g1.shape[1])
    eta = np.stack([s, -s], axis=1).reshape(2 * n, 1).copy()
    delta = eta + M
    base = np.tile(sysm["base"], (n, 1))
    y = np.tile(sysm["y"], n)
    w = np.tile(1.0 / (2 * sysm["sigma"] ** 2), n)
    cells = np.asarray(x, dtype=np.int64).reshape(-1).copy()
    res = y - B @ cells.astype(float)
    pairs = (np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2))
    members = None if sysm["members"] is None else (np.arange(n)[:, None] * 2 + sysm["members"][None]).reshape(-1)
    return dict(B=B, grid=grid, eta=eta, delta=delta, base=base, y=y, w=w, cells=cells, res=res, pairs=pairs,
                members=members, carry=np.tile(sysm["carry"], n), code=_code(sysm),
                lump=None if sysm.get("lump") is None else np.tile(sysm["lump"], n))


def _carry(rng, st, carry=None, widths=0.5, steps=40, directions=None):
    return carried_update(rng, st["cells"], st["res"], st["pairs"], grid=st["grid"], code=st["code"], base=st["base"],
                          eta=st["eta"], delta=st["delta"], sigma=np.array([SIGMA]), kappa=KAPPA,
                          carry=st["carry"] if carry is None else np.tile(carry, st["pairs"][0].size),
                          row_ptr=st["B"].indptr.astype(np.int64), rows=st["B"].indices.astype(np.int64), w=st["w"],
                          widths=widths, steps=steps, members=st["members"], directions=directions, lump=st["lump"])


def _after_one_update(seed, n, carry=None, sysm=SYSTEMS["rows"], **slice_kw):
    """``n`` exact draws of (s, x), each moved by one carried update."""
    rng = np.random.default_rng(seed)
    fibre, grid, w, px, idx, s = _exact_draws(n, rng, sysm)
    st = _replicated(fibre[idx], s, sysm)
    x_before = st["cells"].copy()
    _carry(rng, st, carry=carry, **slice_kw)
    return fibre, grid, w, px, idx, s, st, x_before


def _chi2_pvalue(idx_new, px, n):
    """Chi-square test of the fibre points' frequencies against the exact pmf (cells with an
    expected count under 5 pooled into one)."""
    counts = np.bincount(idx_new, minlength=px.size)
    exp = n * px
    big = exp >= 5
    obs = np.append(counts[big], counts[~big].sum())
    ex = np.append(exp[big], exp[~big].sum())
    if ex[-1] == 0:
        obs, ex = obs[:-1], ex[:-1]
    return stats.chisquare(obs, ex).pvalue


def _marginal_cdf(w, px):
    """The enumerated marginal cdf of the increment ``s`` on the grid (:func:`_exact`'s weights)."""
    cdf = np.cumsum(w.T @ (px / w.sum(axis=1)))
    return cdf / cdf[-1]


def _assert_exact_draws(fibre, grid, w, px, s_new, cells):
    """``(s_new, cells)`` are exact draws of the enumerated joint law (:func:`_exact`): the
    increment's marginal (KS), the cells' pmf over the fibre (chi-square) and their dependence on
    the increment (chi-square of the fibre points given s > 0), each at false-alarm rate ALPHA."""
    cdf = _marginal_cdf(w, px)
    assert stats.kstest(s_new, lambda v: np.interp(v, grid, cdf)).pvalue > ALPHA
    lookup = {tuple(p): k for k, p in enumerate(fibre)}
    idx_new = np.array([lookup[tuple(r)] for r in cells])
    assert _chi2_pvalue(idx_new, px, s_new.size) > ALPHA
    # joint: the fibre points' pmf given s > 0 (exact: the enumerated weights on s > 0)
    pos = grid > 0
    p_pos = (w[:, pos].sum(axis=1) / w.sum(axis=1)) * px
    sel = s_new > 0
    assert _chi2_pvalue(idx_new[sel], p_pos / p_pos.sum(), int(sel.sum())) > ALPHA


def _pair_bookkeeping_holds(st, x_before, n, sysm):
    """Exact bookkeeping after a move of the ``n`` replicated pairs: each pair keeps its sums, the
    residuals follow the cells, every row's total holds.  Returns the cells ``(n, c)`` and the
    first unit's centred increment ``(n,)``."""
    c = _grid(sysm).size
    cells = st["cells"].reshape(n, c)
    assert np.allclose(st["eta"].reshape(n, 2).sum(axis=1), 0.0)
    assert np.allclose(st["delta"].reshape(n, 2).sum(axis=1), 2 * M)
    assert np.allclose(st["res"], st["y"] - st["B"] @ st["cells"].astype(float))
    d = _code(sysm).size
    assert np.array_equal(cells.reshape(n, c // d, d).sum(axis=2), x_before.reshape(n, c // d, d).sum(axis=2))
    return cells, st["eta"].reshape(n, 2)[:, 0]


@pytest.mark.parametrize("system, steps, widths, directions, lump", [
    ("rows", 40, 0.5, None, None), ("rows", 1, 2.25, None, None), ("members", 40, 0.5, None, None),
    ("rows", 40, 0.5, np.array([[1.0], [-0.5], [2.0]]), None),
    ("members", 40, 0.5, np.array([[1.0], [-0.5], [2.0]]), None),
    ("rows", 40, 0.5, None, [1, 1, 0, 0]), ("members", 40, 0.5, np.array([[1.0], [-0.5], [2.0]]), [1, 1, 0, 0, 1, 1]),
    ("three", 40, 0.5, None, None), ("three", 40, 0.5, None, [0, 1, 1, 0, 1, 1]),
    ("three", 40, 0.5, np.array([[1.0], [-0.5], [2.0]]), [1, 1, 1, 0, 1, 1])])
def test_carried_update_leaves_the_joint_posterior_of_increment_and_cells_invariant(system, steps, widths, directions,
                                                                                    lump):
    # exact draws of (s, x) -> one carried update of each -> still exact draws: the increment's
    # marginal (KS against the enumerated marginal), the cells' joint pmf (chi-square) and
    # their dependence (chi-square of the points given the sign of s) are tested; steps 1: one
    # slice interval, no stepping out, as wide as WalkGibbs's tuning makes it (4.5 sd; s's sd is
    # 0.5); members: each unit's increment carries the cells of its two rows; three directions:
    # a pair moves three times in a row, each move from where the last one left the cells
    # lump: those cells of every row (at least two) moved by the Dirichlet-multinomial's quantile
    # map (walk_carry's "Small cells"), as one category of the translation
    n = 20000
    sysm = dict(SYSTEMS[system], lump=None if lump is None else np.array(lump, dtype=bool))
    fibre, grid, w, px, idx, s, st, x_before = _after_one_update(5, n, sysm=sysm, steps=steps, widths=widths,
                                                                 directions=directions)
    c = _grid(sysm).size
    cells, s_new = _pair_bookkeeping_holds(st, x_before, n, sysm)
    assert cells.min() >= 0
    # it moves: the cells follow the profile (with members, in both rows of a unit)
    changed = cells != x_before.reshape(n, c)
    if system == "rows":
        assert changed.any(axis=1).mean() > 0.3
    elif system == "three":  # about 1.2 people per cell (measured 0.23 and 0.32 without and with lumps)
        assert changed.any(axis=1).mean() > 0.15
    else:       # rows of about 3 people: a shift rounds to 0 more often (measured 0.21, 0.11, 0.04)
        assert changed.any(axis=1).mean() > 0.1
        assert changed[:, :2].any(axis=1).mean() > 0.02 and changed[:, 2:4].any(axis=1).mean() > 0.02
    assert np.mean(np.abs(s_new - s)) > 0.2
    _assert_exact_draws(fibre, grid, w, px, s_new, cells)


def _ellipse(rng, st, precisions=None):
    return ellipse_update(rng, st["cells"], st["res"], st["pairs"], grid=st["grid"], code=st["code"], base=st["base"],
                          eta=st["eta"], delta=st["delta"], sigma=np.array([SIGMA]), kappa=KAPPA, carry=st["carry"],
                          row_ptr=st["B"].indptr.astype(np.int64), rows=st["B"].indices.astype(np.int64), w=st["w"],
                          members=st["members"], lump=st["lump"], precisions=precisions)


@pytest.mark.parametrize("system, lump", [("rows", None), ("members", None), ("three", None),
                                          ("three", [0, 1, 1, 0, 1, 1]), ("members", [1, 1, 0, 0, 1, 1])])
def test_ellipse_update_leaves_the_joint_posterior_of_increment_and_cells_invariant(system, lump):
    # exact draws of (s, x) -> one elliptical slice update of each pair's move -> still exact
    # draws (KS of the increment's marginal, chi-square of the cells' pmf and of their dependence
    # on s, each at ALPHA); the pair keeps its sums, the residuals and every row's total hold
    n = 20000
    sysm = dict(SYSTEMS[system], lump=None if lump is None else np.array(lump, dtype=bool))
    rng = np.random.default_rng(6)
    fibre, grid, w, px, idx, s = _exact_draws(n, rng, sysm)
    st = _replicated(fibre[idx], s, sysm)
    x_before = st["cells"].copy()
    evals = _ellipse(rng, st)
    assert evals >= 2 * n
    c = _grid(sysm).size
    cells, s_new = _pair_bookkeeping_holds(st, x_before, n, sysm)
    assert np.mean(np.abs(s_new - s)) > 0.2 and (cells != x_before.reshape(n, c)).any(axis=1).mean() > 0.02
    _assert_exact_draws(fibre, grid, w, px, s_new, cells)


def test_an_ellipse_under_a_misstated_prior_is_detected():
    # power: the same check with the pair's prior precision stated four times too large (the
    # ellipse's draws then too close to the prior's mean) fails by far
    n = 20000
    sysm = SYSTEMS["rows"]
    rng = np.random.default_rng(6)
    fibre, grid, w, px, idx, s = _exact_draws(n, rng, sysm)
    st = _replicated(fibre[idx], s, sysm)
    _ellipse(rng, st, precisions=np.full(st["delta"].shape, 4.0 / SIGMA**2))
    cdf = _marginal_cdf(w, px)
    s_new = st["eta"].reshape(n, 2)[:, 0]
    assert stats.kstest(s_new, lambda v: np.interp(v, grid, cdf)).pvalue < 1e-6


def test_ellipse_update_needs_a_prior_on_every_increment():
    st = _replicated(_exact(SYSTEMS["rows"])[0][[0]], np.array([0.1]))
    with pytest.raises(ValueError, match="prior precision > 0"):
        _ellipse(np.random.default_rng(0), st, precisions=np.zeros(st["delta"].shape))


def test_carried_update_refuses_a_bad_stepping_out_limit():
    rng = np.random.default_rng(1)
    fibre, grid, w, px, idx, s = _exact_draws(3, rng)
    st = _replicated(fibre[idx], s)
    for bad in (0, 2.5):
        with pytest.raises(ValueError, match="^steps must be an integer >= 1$"):
            _carry(rng, st, steps=bad)


def test_carried_update_refuses_bad_members_before_drawing():
    # the same check as register_walk's; the generator is untouched by a refused call
    rng = np.random.default_rng(2)
    sysm = SYSTEMS["members"]
    fibre, grid, w, px, idx, s = _exact_draws(2, rng, sysm)
    st = _replicated(fibre[idx], s, sysm)
    state = rng.bit_generator.state
    for bad, msg in ((None, "grid has 6 rows for 4 units"), (st["members"].astype(float), "members must give"),
                     (st["members"][:-1], "members must give")):
        st["members"] = bad
        with pytest.raises(ValueError, match=msg):
            _carry(rng, st)
    assert rng.bit_generator.state == state


def test_without_carry_the_cells_stay_and_the_update_is_the_increments_conditional():
    # carry fractions 0: h = 0, the cells never move and the update is the exact conditional of
    # the increment given the cells (checked against each draw's own enumerated conditional by
    # the probability integral transform, uniform when exact)
    n = 4000
    fibre, grid, w, px, idx, s, st, x_before = _after_one_update(6, n, np.zeros(4))
    assert np.array_equal(st["cells"], x_before)
    s_new = st["eta"].reshape(n, 2)[:, 0]
    cdfs = np.cumsum(w, axis=1)
    pit = np.array([np.interp(v, grid, cdfs[k] / cdfs[k, -1]) for v, k in zip(s_new, idx)])
    assert stats.kstest(pit, "uniform").pvalue > ALPHA


def _four_units(rng):
    """Four units of six cells (three age groups x two), every cell and every unit total
    measured with noise sd 3: ``(U, code, d, x, grid, B, y)``, ``B`` the CSC query matrix."""
    U, code = 4, np.array([0, 1, 2, 0, 1, 2])
    d = code.size
    x = rng.integers(5, 40, U * d).astype(np.int64)
    grid = np.arange(U * d).reshape(U, d)
    B = sp.vstack([sp.identity(U * d), sp.csr_matrix(np.kron(np.eye(U), np.ones((1, d))))], format="csc")
    B.sort_indices()
    return U, code, d, x, grid, B, B @ x + rng.normal(0, 3, B.shape[0])


@pytest.mark.parametrize("order, spacing", [(1, None), (2, None), (2, (0.4, 1.6))])
def test_the_ancillary_coordinates_are_kept_and_the_profiles_follow_the_walks_order(order, spacing):
    # three age groups (two increments per unit), four sibling units in one group: after the
    # update every unit's xi = x - h(theta) is unchanged, theta computed from the new increments
    # by the walk of the given order (a second-order walk: cumsum of the increments are the slopes,
    # times the spacing the steps; a carried update that ignored the spacing changes xi)
    from privinfer.pymc.walk_kernel import walk_offsets

    rng = np.random.default_rng(8)
    U, code, d, x, grid, B, y = _four_units(rng)
    w = np.full(B.shape[0], 1.0 / (2 * 9.0))
    base = rng.normal(0, 0.3, (U, d))
    delta = rng.normal(0, 0.3, (U, 2))
    eta = delta - delta.mean(axis=0)
    carry = rng.uniform(0.3, 0.9, U * d)

    def xi(cells, e):
        th = base + walk_offsets(e, code, order, spacing)
        return np.concatenate([cells[grid[u]] - carry_shift(th[u], cells[grid[u]].sum(), carry[grid[u]])
                               for u in range(U)])

    before = xi(x, eta)
    x_old = x.copy()
    res = y - B @ x.astype(float)
    carried_update(rng, x, res, (np.array([0, 2]), np.array([1, 3])), grid=grid, code=code, base=base, eta=eta,
                   delta=delta, sigma=np.array([0.4, 0.3]), kappa=200.0, carry=carry,
                   row_ptr=B.indptr.astype(np.int64), rows=B.indices.astype(np.int64), w=w, walk_order=order,
                   spacing=spacing)
    assert np.any(x != x_old)
    np.testing.assert_array_equal(xi(x, eta), before)
    np.testing.assert_allclose(eta, delta - delta.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose(res, y - B @ x.astype(float), atol=1e-9)


def test_carried_update_moves_each_pair_along_its_own_number_of_directions():
    # per_pair (1, 2) over the two coordinate directions of a first-order walk: the first pair's
    # increments change along exactly one coordinate (slice draws are continuous, so a drawn
    # direction moves them almost surely), the second pair's along both; bad counts are refused
    rng = np.random.default_rng(3)
    U, code, d, x, grid, B, y = _four_units(rng)
    kw = dict(grid=grid, code=code, base=rng.normal(0, 0.3, (U, d)), sigma=np.array([0.4, 0.3]), kappa=200.0,
              carry=np.full(U * d, 0.5), row_ptr=B.indptr.astype(np.int64), rows=B.indices.astype(np.int64),
              w=np.full(B.shape[0], 1.0 / 18.0))
    pairs = (np.array([0, 2]), np.array([1, 3]))
    for _ in range(10):
        delta = rng.normal(0, 0.3, (U, 2))
        eta = delta - delta.mean(axis=0)
        before = eta.copy()
        carried_update(rng, x, y - B @ x.astype(float), pairs, eta=eta, delta=delta, per_pair=np.array([1, 2]),
                       **kw)
        changed = eta != before
        assert changed[0].sum() == 1 and changed[2].sum() == 2
        np.testing.assert_array_equal(changed[0], changed[1])
    for bad in (np.array([0, 2]), np.array([1, 3]), np.array([1.5, 2]), 0):
        with pytest.raises(ValueError, match="^per_pair must be integers between 1 and the number of directions"):
            carried_update(rng, x, y - B @ x.astype(float), pairs, eta=eta, delta=delta, per_pair=bad, **kw)


def test_carry_directions_split_old_from_young_at_every_age():
    # first order: the coordinates; second order: raw directions whose cumulative sums (the
    # steps) are the unit vectors -- one step changes, every later age moves together -- and
    # the coordinates (a change of slope)
    from privinfer.pymc.walk_kernel import slopes

    np.testing.assert_array_equal(carry_directions(4, 1), np.eye(4))
    D = carry_directions(4, 2)
    assert D.shape == (8, 4)
    np.testing.assert_allclose(slopes(D[:4], 2), np.eye(4))
    np.testing.assert_array_equal(D[4:], np.eye(4))


# The carried scale update on the tiny posterior of SYSTEMS["rows"], now with the step scale
# free: sigma ~ HalfNormal(S0), raw increments delta_u ~ N(0, sigma^2) of two sibling units,
# centred increments (s, -s) with s = (delta_1 - delta_2)/2 ~ N(0, sigma^2/2) and the mean
# m = (delta_1 + delta_2)/2 ~ N(0, sigma^2/2) independent of it and unseen by the cells.  The
# target over (lambda = log sigma, s, x), m integrated out, is enumerated: x over the fibre, and
# (lambda, s) on a grid.
S0 = 0.8
LAM = np.linspace(-9.0, 2.0, 551)
SS = np.linspace(-5.0, 5.0, 1001)


def _scale_log_target(x, sysm=SYSTEMS["rows"]):
    """log pi(lambda, s, x) up to a constant on the grid LAM x SS: the half-normal prior with
    the log transform's Jacobian, s's normal prior and the cells' terms of _log_target (whose
    prior on the pair's increments is taken out)."""
    lam = LAM[:, None]
    var = np.exp(2 * lam) / 2
    prior = -np.exp(2 * lam) / (2 * S0**2) + lam - SS[None, :] ** 2 / (2 * var) - 0.5 * np.log(var)
    cells = _log_target(sysm, SS, x) + ((M + SS) ** 2 + (M - SS) ** 2) / (2 * SIGMA**2)
    return prior + cells[None, :]


def _scale_exact_draws(n, rng, sysm=SYSTEMS["rows"]):
    """Exact draws of (lambda, s, m, x): x from its enumerated marginal, then (lambda, s) from
    the grid given x (a grid cell, then uniform within it: the grid's spacing, 0.02 and 0.01,
    is far below the sd's of about 1 and 0.3 whose distributions the test compares), then m."""
    fibre = np.array([x for x in itertools.product(range(sysm["T"] + 1), repeat=4) if sum(x) == sysm["T"]])
    logd = [_scale_log_target(x, sysm) for x in fibre]
    top = max(ld.max() for ld in logd)
    w = [np.exp(ld - top) for ld in logd]
    mass = np.array([wk.sum() for wk in w])
    px = mass / mass.sum()
    lam_marg = sum(wk.sum(axis=1) * p / wk.sum() for wk, p in zip(w, px))
    idx = rng.choice(len(fibre), size=n, p=px)
    lam, s = np.empty(n), np.empty(n)
    dl, ds = LAM[1] - LAM[0], SS[1] - SS[0]
    for k in np.unique(idx):
        sel = np.flatnonzero(idx == k)
        flat = rng.choice(w[k].size, size=sel.size, p=(w[k] / w[k].sum()).ravel())
        i, j = np.unravel_index(flat, w[k].shape)
        lam[sel] = LAM[i] + dl * (rng.random(sel.size) - 0.5)
        s[sel] = SS[j] + ds * (rng.random(sel.size) - 0.5)
    m = rng.normal(0.0, np.exp(lam) / np.sqrt(2))
    cdf = np.cumsum(lam_marg)
    return fibre, px, idx, lam, s, m, cdf / cdf[-1]


def _scale_carried(rng, x, lam, s, m, sysm=SYSTEMS["rows"], steps=40, width=0.5, carry=None):
    """One scale_update_carried of one copy of the tiny system; returns (lambda, s, m, cells)."""
    B = sp.csc_matrix(_matrix(sysm))
    B.sort_indices()
    cells = np.asarray(x, dtype=np.int64).copy()
    res = sysm["y"] - B @ cells.astype(float)
    sigma, delta, _ = scale_update_carried(
        rng, cells, res, sysm["base"], np.array([[m + s], [m - s]]), np.zeros(2, dtype=np.int64),
        np.array([np.exp(lam)]), KAPPA, grid=_grid(sysm), code=CODE,
        carry=sysm["carry"] if carry is None else carry, row_ptr=B.indptr.astype(np.int64),
        rows=B.indices.astype(np.int64), w=1.0 / (2 * sysm["sigma"] ** 2), prior_scale=S0, steps=steps,
        width=width)
    assert np.allclose(res, sysm["y"] - B @ cells.astype(float))
    return np.log(sigma[0]), (delta[0, 0] - delta[1, 0]) / 2, (delta[0, 0] + delta[1, 0]) / 2, cells


@pytest.mark.parametrize("steps, width", [(40, 0.5), (1, 4.5)])
def test_carried_scale_update_leaves_the_joint_posterior_of_scale_increments_and_cells_invariant(steps, width):
    # exact draws of (lambda, s, m, x) -> one carried scale update of each -> still exact: the
    # scale's marginal (KS against the enumerated marginal), the cells' pmf and the cells given
    # a large scale (chi-square); every row keeps its total, the residuals follow the cells;
    # steps 1: one slice interval, no stepping out, 4.5 sd of lambda wide (WalkGibbs's tuning)
    n = 3000
    rng = np.random.default_rng(21)
    fibre, px, idx, lam, s, m, cdf = _scale_exact_draws(n, rng)
    out = [_scale_carried(rng, fibre[k], lam[i], s[i], m[i], steps=steps, width=width) for i, k in enumerate(idx)]
    lam_new = np.array([o[0] for o in out])
    cells = np.array([o[3] for o in out])
    assert np.array_equal(cells[:, :2].sum(axis=1), fibre[idx][:, :2].sum(axis=1)) and cells.min() >= 0
    assert np.mean(np.abs(lam_new - lam) > 1e-12) > 0.9           # an exact slice update moves every draw
    # and the cells follow: rows of about 5 people, a shift rounds to 0 often (measured 0.17)
    assert np.mean(np.any(cells != fibre[idx], axis=1)) > 0.1
    assert stats.kstest(lam_new, lambda v: np.interp(v, LAM, cdf)).pvalue > ALPHA
    lookup = {tuple(p): k for k, p in enumerate(fibre)}
    idx_new = np.array([lookup[tuple(r)] for r in cells])
    assert _chi2_pvalue(idx_new, px, n) > ALPHA
    big = lam_new > np.interp(0.5, cdf, LAM)
    logd = [_scale_log_target(x) for x in fibre]
    top = max(ld.max() for ld in logd)
    p_big = np.array([np.exp(ld - top)[LAM > np.interp(0.5, cdf, LAM)].sum() for ld in logd])
    assert _chi2_pvalue(idx_new[big], p_big / p_big.sum(), int(big.sum())) > ALPHA
