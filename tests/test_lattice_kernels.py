"""Lattice Metropolis kernels: local acceptance ratios, move sets, and exactness against
enumerated pmfs."""

import itertools

import numpy as np
import pytest
from scipy import special, stats

from privinfer import invariants
from privinfer.lattice import (
    GaussianTarget,
    L1Target,
    L2Target,
    LatticeMoves,
    PairMoves,
    coordinate_step,
    free_cell_basis,
    gibbs_sweep,
    init_state,
    run_sweeps,
)


@pytest.mark.parametrize("target", [L1Target(0.7), L2Target(0.4), GaussianTarget(2.5)])
def test_local_delta_equals_full_difference(target):
    rng = np.random.default_rng(0)
    B = invariants.margins((3, 4), [(0,), (1,)]).lattice_basis()
    moves = LatticeMoves.from_matrix(B)
    e = rng.integers(-6, 7, size=(50, moves.k)) @ B.T
    stat = target.init_stat(e)
    for j in range(moves.k):
        idx, val = moves.move(j)
        zeta = rng.integers(-5, 6, size=50)
        new_e = e.copy()
        new_e[:, idx] += zeta[:, None] * val
        dl, new_stat = target.delta(idx, e[:, idx], new_e[:, idx], stat)
        np.testing.assert_allclose(dl, target.logp(new_e) - target.logp(e), atol=1e-9)
        np.testing.assert_array_equal(new_stat, target.init_stat(new_e))


def test_free_cell_basis_generates_the_same_lattice():
    for inv in (invariants.total(6), invariants.margins((4, 4), [(0,), (1,)]),
                invariants.counting([(0, 1, 2), (2, 3, 4), (1, 4, 5)], 7)):
        B = inv.lattice_basis()
        Bf, F = free_cell_basis(B)
        assert F is not None
        np.testing.assert_array_equal(inv.integer_matrix() @ Bf, 0)
        np.testing.assert_array_equal(Bf[F], np.eye(B.shape[1], dtype=np.int64))
        # B = Bf @ B[F] (coordinates of e are its free cells), so both generate one lattice
        np.testing.assert_array_equal(Bf @ B[F], B)


def test_pair_moves_stay_in_groups_and_are_symmetric():
    labels = np.array([0, 0, 1, 1, 1, 2, 0])
    pm = PairMoves(labels)
    assert pm.k == 4
    rng = np.random.default_rng(1)
    pairs = np.concatenate([pm.schedule(rng) for _ in range(20000)])
    assert np.all(labels[pairs[:, 0]] == labels[pairs[:, 1]])
    assert np.all(pairs[:, 0] != pairs[:, 1])
    assert not np.any(pairs == 5)  # the singleton group never moves
    # symmetric selection: count(i, k) ~ count(k, i); 5 sd of the difference of two counts
    cnt = {}
    for i, k in map(tuple, pairs):
        cnt[(i, k)] = cnt.get((i, k), 0) + 1
    for (i, k), c in cnt.items():
        c2 = cnt.get((k, i), 0)
        assert abs(c - c2) <= 5 * np.sqrt(c + c2)


def test_kernels_are_pure_and_keep_the_lattice():
    inv = invariants.margins((2, 3), [(0,), (1,)])
    moves = LatticeMoves.from_matrix(inv.lattice_basis())
    tgt = L1Target(0.5)
    st = init_state(np.zeros(6, dtype=np.int64), moves, tgt, 10)
    e0 = st.e.copy()
    st2, info = gibbs_sweep(np.random.default_rng(0), st, moves, tgt, jump_scale=2.0)
    np.testing.assert_array_equal(st.e, e0)  # input untouched
    assert info.n_proposed == moves.k
    st3, acc = coordinate_step(np.random.default_rng(1), st2, 1, moves, tgt, 2.0)
    assert acc.shape == (10,)
    np.testing.assert_array_equal(inv.integer_matrix() @ st3.e.T, 0)
    with pytest.raises(ValueError):
        init_state(np.zeros(5), moves, tgt)
    with pytest.raises(ValueError):
        gibbs_sweep(np.random.default_rng(0), st, moves, tgt, jump_scale=-1.0)
    with pytest.raises(ValueError):
        gibbs_sweep(np.random.default_rng(0), st, moves, tgt, order="sideways")


def _chi2_against_enumeration(draws_z, logp_of_z, W):
    """Pearson chi-square of lattice-coordinate draws against the pmf on the box |z| <= W
    (outside mass pooled into one cell whose exact expectation is tiny)."""
    d = draws_z.shape[1]
    box = np.array(list(itertools.product(range(-W, W + 1), repeat=d)))
    lp = logp_of_z(box)
    p = np.exp(lp - special.logsumexp(lp))
    index = {tuple(z): i for i, z in enumerate(box)}
    obs = np.zeros(len(box))
    for z in map(tuple, draws_z):
        if z in index:
            obs[index[z]] += 1
    N = len(draws_z)
    exp = p * N
    keep = exp >= 5
    o = np.append(obs[keep], N - obs[keep].sum())
    e = np.append(exp[keep], N - exp[keep].sum())
    return stats.chisquare(o, e).pvalue


@pytest.mark.parametrize(
    "target,order,W",
    [(L1Target(0.6), "systematic", 14), (L2Target(0.8), "random", 14), (GaussianTarget(1.5), "reverse", 8)],
)
def test_sampler_matches_exact_pmf_on_2x3_table(target, order, W):
    # 2 x 3 table with both margins: e = B z, z = free cells (a, b).  Window |z| <= W:
    # the outside mass is <= sum_{k>W} 8k exp(-c k) with c = 4*0.6, sqrt(3)*0.8, resp. a
    # Gaussian term, all < 1e-4, so it shifts expected counts by < 1 at N = 6000.
    inv = invariants.margins((2, 3), [(0,), (1,)])
    Bf, F = free_cell_basis(inv.lattice_basis())
    moves = LatticeMoves.from_matrix(Bf)
    N = 6000
    st = init_state(np.zeros(6, dtype=np.int64), moves, target, N)
    st, info = run_sweeps(np.random.default_rng(7), st, moves, target, 300, order=order)
    z = st.e[:, F]
    p = _chi2_against_enumeration(z, lambda zz: target.logp(zz @ Bf.T), W)
    assert p > 1e-3  # alpha = 1e-3 (the GoF registry's level)


def test_pair_moves_sampler_matches_exact_pmf_on_sum_of_4():
    # sum invariant on 4 cells, l1 target rate 0.9; window |e_i| <= 8 for the first 3 cells:
    # ||e||_1 >= 2 max|e_i|, outside mass <= sum_{k>8} (24k^2+2) exp(-1.8 k) < 1e-4.
    tgt = L1Target(0.9)
    pm = PairMoves(np.zeros(4))
    N = 6000
    st = init_state(np.zeros(4, dtype=np.int64), pm, tgt, N)
    st, info = run_sweeps(np.random.default_rng(8), st, pm, tgt, 200, jump_scale=1.5)
    np.testing.assert_array_equal(st.e.sum(axis=1), 0)
    B = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1]])
    p = _chi2_against_enumeration(st.e[:, :3], lambda zz: tgt.logp(zz @ B.T), 8)
    assert p > 1e-3


@pytest.mark.parametrize("target", [GaussianTarget(1.3), L2Target(0.9)])
def test_pair_moves_gaussian_and_l2_exact_and_stat_consistent(target):
    # GaussianTarget takes the simultaneous-matching path (separable), L2Target the
    # one-pair-at-a-time path; both must hit the exact pmf and carry S = ||e||^2 exactly.
    # Window |e_i| <= W (first 3 cells): ||e||_2 >= max|e_i|, so the outside mass is at most
    # sum_{k>W} (24k^2+2) exp(-k^2/3.38) < 1e-9 (Gaussian, W = 9), resp.
    # sum_{k>W} (24k^2+2) exp(-0.9k) < 1e-4 (l2, W = 22).
    pm = PairMoves(np.zeros(4))
    N = 6000
    W = 9 if isinstance(target, GaussianTarget) else 22
    st = init_state(np.zeros(4, dtype=np.int64), pm, target, N)
    st, _ = run_sweeps(np.random.default_rng(9), st, pm, target, 200, jump_scale=1.5)
    np.testing.assert_array_equal(st.stat, target.init_stat(st.e))
    np.testing.assert_array_equal(st.e.sum(axis=1), 0)
    B = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [-1, -1, -1]])
    p = _chi2_against_enumeration(st.e[:, :3], lambda zz: target.logp(zz @ B.T), W)
    assert p > 1e-3
