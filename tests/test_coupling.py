"""L-lag couplings: maximal coupling of jumps, faithfulness, the TV bound formula, and
certified burn-in."""

import numpy as np
import pytest
from scipy import stats

from privinfer import invariants
from privinfer.lattice.coupling import (
    certify_burn_in,
    coupled_sweep,
    iterations_to_threshold,
    maximal_coupling_double_geometric,
    sample_meeting_times,
    tv_upper_bound,
)
from privinfer.lattice import (
    L1Target,
    LatticeMoves,
    gibbs_sweep,
    init_state,
    jump_logpmf,
)


@pytest.mark.parametrize("shift,scale", [(0, 1.0), (2, 1.0), (5, 3.0)])
def test_maximal_coupling_marginals_and_meeting_probability(shift, scale):
    N = 100_000
    rng = np.random.default_rng(0)
    px, py = maximal_coupling_double_geometric(rng, np.zeros(N, dtype=np.int64), np.full(N, shift), scale)
    k = np.arange(-200, 201)
    q = np.exp(jump_logpmf(k, scale))
    # P(meet) = sum_k min(q(k), q(k - shift)) = 1 - TV; 5 binomial standard errors
    p_meet = np.minimum(q, np.exp(jump_logpmf(k - shift, scale))).sum()
    assert abs(np.mean(px == py) - p_meet) <= 5 * np.sqrt(p_meet * (1 - p_meet) / N) + 1e-12
    # marginals: px ~ q, py - shift ~ q (chi-square on |k| <= 6 plus a pooled tail, alpha 1e-3)
    for draws in (px, py - shift):
        bins = np.clip(draws, -7, 7)
        obs = np.array([(bins == v).sum() for v in range(-7, 8)])
        p = q[np.abs(k) <= 6]
        tail = (1 - p.sum()) / 2
        exp = N * np.concatenate([[tail], p, [tail]])
        assert stats.chisquare(obs, exp).pvalue > 1e-3


def test_tv_bound_formula_by_hand():
    tau = np.array([3, 5, 10])
    # L = 2, t = 0: ceil(1/2) = 1, ceil(3/2) = 2, ceil(8/2) = 4 -> mean 7/3
    assert tv_upper_bound(tau, 2, 0) == pytest.approx(7 / 3)
    # t = 3: ceil(-2/2) = -1 -> 0, ceil(0) = 0, ceil(5/2) = 3 -> 1
    assert tv_upper_bound(tau, 2, 3) == pytest.approx(1.0)
    np.testing.assert_allclose(tv_upper_bound(tau, 2, [7, 8]), [1 / 3, 0.0])
    # first t with bound <= 0.5 is 7 (bound 1/3), and at t = 6 it is ceil(2/2)/3 = 1/3 as well,
    # t = 5: ceil(3/2) = 2 -> 2/3
    assert iterations_to_threshold(tau, 2, 0.5) == 6
    assert iterations_to_threshold(tau, 2, 0.0) == 8
    with pytest.raises(ValueError):
        tv_upper_bound(np.array([1, 5]), 2, 0)


def _setup():
    inv = invariants.margins((2, 3), [(0,), (1,)])
    return LatticeMoves.from_matrix(inv.lattice_basis()), L1Target(0.6)


def test_coupled_chains_stay_together_once_met():
    moves, tgt = _setup()
    rng = np.random.default_rng(3)
    st = init_state(np.zeros(6, dtype=np.int64), moves, tgt, 50)
    st, _ = gibbs_sweep(rng, st, moves, tgt)
    (X, Y), met = coupled_sweep(rng, st, st, moves, tgt)
    assert met.all()
    np.testing.assert_array_equal(X.e, Y.e)


def test_coupled_sweep_has_the_marginal_kernel():
    # From fixed distinct states, the X-marginal of one coupled sweep must equal one plain
    # sweep: compare the two samples of the first two cells with a contingency chi-square.
    moves, tgt = _setup()
    R = 20000
    ex = np.array([3, -1, -2, -3, 1, 2])
    ey = np.array([-2, 0, 2, 2, 0, -2])
    X0 = init_state(ex, moves, tgt, R)
    Y0 = init_state(ey, moves, tgt, R)
    (X, Y), _ = coupled_sweep(np.random.default_rng(4), X0, Y0, moves, tgt, jump_scale=1.5)
    S, _ = gibbs_sweep(np.random.default_rng(5), X0, moves, tgt, jump_scale=1.5)
    T, _ = gibbs_sweep(np.random.default_rng(6), Y0, moves, tgt, jump_scale=1.5)
    for a, b in ((X.e, S.e), (Y.e, T.e)):
        ka = [tuple(r) for r in np.clip(a[:, :2], -6, 6)]
        kb = [tuple(r) for r in np.clip(b[:, :2], -6, 6)]
        cats = sorted(set(ka) | set(kb))
        ca = np.array([ka.count(c) for c in cats])
        cb = np.array([kb.count(c) for c in cats])
        keep = (ca + cb) >= 10
        table = np.vstack([np.append(ca[keep], ca[~keep].sum()), np.append(cb[keep], cb[~keep].sum())])
        table = table[:, table.sum(0) > 0]
        assert stats.chi2_contingency(table)[1] > 1e-3


def test_meeting_times_and_certified_burn_in():
    moves, tgt = _setup()
    tau = sample_meeting_times(np.random.default_rng(7), moves, tgt, lag=5, n_replicates=64)
    assert tau.shape == (64,) and np.all(tau > 5)
    cert = certify_burn_in(np.random.default_rng(8), moves, tgt, threshold=0.05, n_replicates=64)
    T = cert.burn_in
    assert cert.tv_bound(T) <= 0.05
    if T > 0:
        assert cert.tv_bound(T - 1) > 0.05
    # the bound is non-increasing in t
    b = cert.tv_bound(np.arange(0, T + 5))
    assert np.all(np.diff(b) <= 0)
    # a wide target on a 9-dimensional lattice cannot meet within one coupled sweep
    wide = LatticeMoves.from_matrix(invariants.margins((4, 4), [(0,), (1,)]).lattice_basis())
    with pytest.raises(RuntimeError, match="had not met"):
        sample_meeting_times(np.random.default_rng(9), wide, L1Target(0.01), lag=1, n_replicates=4, max_sweeps=2)
