"""NoisyMeasurements: exact likelihood, exact releases, zCDP accounting, spec round trip, the
LinearQueries lattice term (kernels and PyMC) against enumerated posteriors, and the GLS and
TopDown-style baselines against dense solves."""

from __future__ import annotations

import itertools
import json
import math
import pathlib
import sys
from fractions import Fraction

import arviz as az
import numpy as np
import pymc as pm
import pytest
import scipy.sparse as sp
from scipy import stats

from privinfer import invariants as I
from privinfer.inference import gls, gls_estimate, topdown_style_estimate
from privinfer.invariants import InfeasibleInvariantError
from privinfer.lattice import (
    LatticeMoves,
    LocalLogDensity,
    MoveCycle,
    PairMoves,
    RectangleMoves,
    direction_gibbs,
    init_state,
    sweep,
)
from privinfer.lattice.kernels import conflict_free_rounds
from privinfer.mechanisms import (
    MeasurementRelease,
    NoisyMeasurements,
    county_sex_age_measurements,
    from_spec,
    margin_query,
    table_measurements,
)
from privinfer.models import grid_moves, noisy_measurements_model

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from posterior_helpers import empirical_tv, exact_marginals, marginal_tv_tolerance  # noqa: E402

SHAPE = (2, 2)  # 2 counties x 2 sexes


def _tiny(sigmas=(1.5, 1.0, 2.0), invariant=True):
    """Detailed cells, county totals and state sex totals of a 2 x 2 table; state total invariant."""
    qs = [margin_query(SHAPE, (0, 1)), margin_query(SHAPE, (0,)), margin_query(SHAPE, (1,))]
    return NoisyMeasurements(qs, list(sigmas), I.total(4) if invariant else None,
                             names=["detailed", "county", "sex"])


def _dg_logpmf(k, sigma):
    """Discrete Gaussian log-pmf written out here: -k^2/(2 s^2) - log sum_j exp(-j^2/(2 s^2))."""
    j = np.arange(-2000, 2001)
    logz = math.log(float(np.sum(np.exp(-(j * j) / (2.0 * sigma * sigma)))))
    return -(np.asarray(k, dtype=float) ** 2) / (2.0 * sigma * sigma) - logz


def _fibre(total, n=4):
    return np.array([p for p in itertools.product(range(total + 1), repeat=n) if sum(p) == total], dtype=np.int64)


def _exact_posterior(mech, y, points):
    logw = np.array([mech.logp(y, p) for p in points])
    w = np.exp(logw - logw.max())
    return logw, w / w.sum()


# ---------------------------------------------------------------------------------------------
# the mechanism
# ---------------------------------------------------------------------------------------------
def test_logp_is_the_sum_of_discrete_gaussian_log_pmfs():
    mech = _tiny()
    x = np.array([3, 1, 0, 2])
    y = np.array([5, -1, 2, 4, 1, 7, 0, 3])  # 4 detailed, 2 county, 2 sex
    B = [np.eye(4), np.array([[1, 1, 0, 0], [0, 0, 1, 1]]), np.array([[1, 0, 1, 0], [0, 1, 0, 1]])]
    want = (_dg_logpmf(y[:4] - B[0] @ x, 1.5).sum() + _dg_logpmf(y[4:6] - B[1] @ x, 1.0).sum()
            + _dg_logpmf(y[6:] - B[2] @ x, 2.0).sum())
    assert mech.logp(y, x) == pytest.approx(want, rel=1e-12)
    # stacks, and -inf off the integers
    np.testing.assert_allclose(mech.logp(np.stack([y, y]), np.stack([x, x])), [want, want], rtol=1e-12)
    assert mech.logp(y + np.r_[0.5, np.zeros(7)], x) == -np.inf
    assert mech.in_support(y + np.r_[0.5, np.zeros(7)], x) is False
    assert mech.in_support(y, x) is True


def test_symbolic_logp_equals_numpy():
    import pytensor.tensor as pt

    mech = _tiny()
    x = np.array([3, 1, 0, 2])
    y = mech.release(x, rng=4)
    xs = pt.lvector("x")
    f = __import__("pytensor").function([xs], mech.logp(y, xs))
    assert float(f(x)) == pytest.approx(mech.logp(y, x), rel=1e-12)


def test_releases_are_integer_follow_the_discrete_gaussian_and_publish_the_invariant_exactly():
    mech = _tiny()
    x = np.array([30, 11, 0, 22])
    rel = mech.publish(x, rng=20240611)
    assert rel.y.dtype == np.int64 and rel.y.shape == (mech.m,)
    np.testing.assert_array_equal(rel.t, [63])  # published exactly
    np.testing.assert_array_equal(rel.invariant.t, [63])
    assert rel.measurements("county").shape == (2,)
    # the noise of each query follows its discrete Gaussian: chi-square on 4,000 releases
    ys = mech.release(np.broadcast_to(x, (4000, 4)), rng=7)
    noise = ys - mech.answers(x)
    for sl, s in zip(mech.slices, mech.sigmas):
        e = noise[:, sl].ravel()
        ks = np.arange(-8, 9)
        p = np.exp(_dg_logpmf(ks, float(s)))
        obs = np.array([np.sum(e == k) for k in ks] + [np.sum(np.abs(e) > 8)])
        exp = np.r_[p, 1 - p.sum()] * e.size
        keep = exp >= 5
        obs = np.r_[obs[keep], obs[~keep].sum()]
        exp = np.r_[exp[keep], exp[~keep].sum()]
        assert stats.chisquare(obs, exp).pvalue > 1e-4  # fixed seed; fails only for a wrong law


def test_zcdp_rho_is_the_sum_over_queries_of_sensitivity_squared_over_two_sigma_squared():
    # a 0/1 hierarchy (Delta_k = 1) and a weighted query with column norms sqrt(5) and 1
    W = np.array([[1, 0, 2], [2, 1, 0]])
    mech = NoisyMeasurements([np.eye(3), np.ones((1, 3)), W], [2.0, Fraction(5, 2), 3.0])
    deltas = [max(np.linalg.norm(B[:, i]) for i in range(3)) for B in (np.eye(3), np.ones((1, 3)), W)]
    assert deltas[2] == pytest.approx(math.sqrt(5))
    rho = sum(d * d / (2 * s * s) for d, s in zip(deltas, (2.0, 2.5, 3.0)))
    g = mech.guarantee
    assert g.kind == "zcdp" and g.rho == pytest.approx(rho, rel=1e-12)
    np.testing.assert_allclose(g["sensitivities"], deltas)
    # the joint bound: max over cells of sum_k ||B_k e_i||^2 / (2 sigma_k^2)
    joint = max(1 / 8 + 1 / 12.5 + float(W[:, i] @ W[:, i]) / 18 for i in range(3))
    assert g["rho_joint"] == pytest.approx(joint) and joint <= g.rho
    approx = g.to_approx_dp(1e-6)
    assert approx.epsilon == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e6)))
    # the builder rounds sigma up: the stated rho never exceeds the budget
    m2 = county_sex_age_measurements(3, 2, 4, rho_detailed=0.01, rho_county=0.02, rho_state_sex_age=0.015)
    assert m2.guarantee.rho <= 0.045 and m2.guarantee.rho > 0.045 * 0.99
    assert m2.names == ("county x sex x age", "county", "sex x age") and m2.invariant.kind.value == "total"


def test_spec_round_trip_through_json():
    mech = _tiny(sigmas=(Fraction(3, 2), 1.0, 2.25))
    text = json.dumps(mech.spec())
    again = from_spec(json.loads(text))
    assert type(again) is NoisyMeasurements and again.spec() == json.loads(text)
    assert again.invariant.kind == mech.invariant.kind and again.names == mech.names
    assert again.sigmas == mech.sigmas
    x = np.array([4, 0, 2, 7])
    np.testing.assert_array_equal(again.release(x, rng=3), mech.release(x, rng=3))
    y = mech.release(x, rng=5)
    assert again.logp(y, x) == mech.logp(y, x)


def test_bad_inputs_raise_one_line_errors():
    with pytest.raises(ValueError, match="query 1 has 3 columns"):
        NoisyMeasurements([np.eye(4), np.ones((1, 3))], [1.0, 1.0])
    with pytest.raises(ValueError, match="query 0 must have integer entries"):
        NoisyMeasurements([0.5 * np.eye(2)], [1.0])
    with pytest.raises(ValueError, match="one sigma per query"):
        NoisyMeasurements([np.eye(2), np.ones((1, 2))], [1.0])
    with pytest.raises(ValueError, match=r"sigmas\[0\] must be a finite number > 0"):
        NoisyMeasurements([np.eye(2)], [-1.0])
    with pytest.raises(ValueError, match="zero matrix"):
        NoisyMeasurements([sp.csr_matrix((2, 3))], [1.0])
    with pytest.raises(ValueError, match="constrains 3 cells"):
        NoisyMeasurements([np.eye(2)], [1.0], I.total(3))
    mech = _tiny()
    with pytest.raises(ValueError, match="non-negative counts"):
        mech.release(np.array([1, -1, 0, 2]))
    with pytest.raises(ValueError, match="integer"):
        mech.release(np.array([1.5, 1, 0, 2]))
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4\)|length 4|4"):
        mech.release(np.array([1, 1, 0]))
    y = mech.release(np.array([1, 1, 0, 2]), rng=1)
    with pytest.raises(ValueError, match="needs its published values t"):
        MeasurementRelease(mech, y)
    with pytest.raises(ValueError, match=r"t must have shape \(1,\)"):
        MeasurementRelease(mech, y, np.array([1, 2]))
    with pytest.raises(InfeasibleInvariantError, match="no non-negative integer counts"):
        MeasurementRelease(mech, y, np.array([-3]))
    with pytest.raises(ValueError, match="finite integers"):
        MeasurementRelease(mech, y + 0.5, np.array([4]))
    with pytest.raises(ValueError, match=r"shape \(8,\)"):
        MeasurementRelease(mech, y[:5], np.array([4]))
    with pytest.raises(ValueError, match="rho must be"):
        table_measurements((2, 2), {(0,): 0.0})
    with pytest.raises(ValueError, match="distinct axes"):
        margin_query((2, 2), (0, 0))


# ---------------------------------------------------------------------------------------------
# the lattice term
# ---------------------------------------------------------------------------------------------
def _posterior_density(mech, y):
    return LocalLogDensity([t.shifted(y, -1) for t in mech.local_logp().terms])


def test_linear_queries_term_scores_moves_from_the_touched_rows():
    mech = _tiny()
    y = np.array([5, -1, 2, 4, 1, 7, 0, 3])
    dens = _posterior_density(mech, y)
    pts = _fibre(6)
    # the local density is the log-likelihood up to one constant on the fibre
    diff = dens.logp(pts) - np.array([mech.logp(y, p) for p in pts])
    assert np.ptp(diff) < 1e-9
    rng = np.random.default_rng(1)
    for _ in range(50):
        v = pts[rng.integers(len(pts))]
        idx = np.sort(rng.choice(4, size=rng.integers(1, 4), replace=False))
        new = v[idx] + rng.integers(-3, 4, size=idx.size)
        w = v.copy()
        w[idx] = new
        dl, new_stat = dens.delta(idx, v[idx], new, dens.init_stat(v))
        assert dl == pytest.approx(dens.logp(w) - dens.logp(v), abs=1e-9)
        np.testing.assert_allclose(new_stat, dens.init_stat(w))
    # pair effects: the net rows of A (e_i - e_j), padded
    term = dens.terms[0]
    rows, coef = term.pair_effects(np.array([[0, 1], [0, 3]]))
    A = term.A.toarray()
    for p, (i, j) in enumerate([(0, 1), (0, 3)]):
        got = np.zeros(A.shape[0])
        np.add.at(got, rows[p], coef[p])
        np.testing.assert_array_equal(got, A[:, i] - A[:, j])


def test_conflict_free_rounds_share_no_slot_and_cover_every_pair():
    rng = np.random.default_rng(3)
    # each move changes up to 3 distinct slots of 12 (-1: padding)
    slots = np.array([np.r_[rng.choice(12, size=k, replace=False), -np.ones(3 - k, int)]
                      for k in rng.integers(0, 4, size=40)])
    rounds = conflict_free_rounds(slots)
    assert sorted(np.concatenate(rounds).tolist()) == list(range(40))
    for r in rounds:
        used = slots[r][slots[r] >= 0]
        assert len(used) == len(set(used.tolist()))  # no slot changed by two moves of a round
    assert len(rounds) < 40


def _chi_square_against(points, w, draws):
    keys = {tuple(p): i for i, p in enumerate(points)}
    cnt = np.bincount([keys[tuple(r)] for r in draws], minlength=len(points))
    exp = w * len(draws)
    keep = exp >= 5
    return stats.chisquare(np.r_[cnt[keep], cnt[~keep].sum()], np.r_[exp[keep], exp[~keep].sum()]).pvalue


@pytest.mark.parametrize("kernel", ["pairs", "grid", "basis", "heat-bath"])
def test_kernels_sample_the_exact_posterior_of_a_tiny_hierarchy(kernel):
    # 2 counties x 2 sexes, state total 6 fixed: 84 points, posterior enumerated exactly.
    # 3,000 independent chains (vectorized) after 150 sweeps each give 3,000 independent
    # draws; a chi-square test at level 1e-4 (fixed seeds) fails only if the law is wrong.
    mech = _tiny()
    x = np.array([3, 1, 0, 2])
    y = mech.release(x, rng=11)
    dens = _posterior_density(mech, y)
    pts = _fibre(6)
    _, w = _exact_posterior(mech, y, pts)
    rng = np.random.default_rng(12)
    N = 3000
    if kernel == "pairs":
        moves = PairMoves(np.zeros(4, dtype=np.int64))
        st = init_state(x, moves, dens, N)
        for _ in range(150):
            st, _ = sweep(rng, st, moves, dens, 1.0, lower=0, nonzero=True)
        draws = st.e
    elif kernel == "grid":
        # transfers within counties, within sexes, and the rectangle move of the 2 x 2 grid
        moves = MoveCycle([PairMoves(np.array([0, 0, 1, 1])), PairMoves(np.array([0, 1, 0, 1])),
                           RectangleMoves(np.arange(4).reshape(2, 2), 4)], matchings=(1, 1, 2))
        st = init_state(x, moves, dens, N)
        for _ in range(150):
            st, _ = sweep(rng, st, moves, dens, 1.5, lower=0, nonzero=True)
        draws = st.e
    elif kernel == "basis":
        moves = LatticeMoves.from_matrix(I.total(4).lattice_basis())
        st = init_state(x, moves, dens, N)
        for _ in range(150):
            st, _ = sweep(rng, st, moves, dens, 1.0, lower=0)
        draws = st.e
    else:
        moves = LatticeMoves.from_matrix(I.total(4).lattice_basis())
        N = 600  # one chain at a time
        draws = []
        for c in range(N):
            st = init_state(x, moves, dens, 1)
            for _ in range(30):
                for j in range(moves.k):
                    st, _ = direction_gibbs(rng, st, *moves.move(j), dens, lower=0)
            draws.append(st.e[0])
        draws = np.array(draws)
    np.testing.assert_allclose(st.stat, dens.init_stat(st.e))  # the running B x stays exact
    assert _chi_square_against(pts, w, draws) > 1e-4


@pytest.mark.parametrize("grid", [False, True])
def test_pymc_posterior_matches_enumeration(grid):
    mech = _tiny()
    x = np.array([3, 1, 0, 2])
    rel = mech.publish(x, rng=11)
    model = noisy_measurements_model(rel, rng=0, grid=np.arange(4).reshape(2, 2) if grid else None)
    with model:
        idata = pm.sample(draws=1500, tune=300, chains=2, cores=1, random_seed=5, progressbar=False,
                          compute_convergence_checks=False)
    assert idata.sample_stats["lattice_local"].values.all()  # scored by the LinearQueries term
    pts = _fibre(6)
    logw, _ = _exact_posterior(mech, rel.y, pts)
    marg, mean = exact_marginals(pts, logw)
    post = idata.posterior["x"].values.reshape(-1, 4)
    assert np.all(post.sum(axis=1) == 6) and np.all(post >= 0)
    summ = az.summary(idata, var_names=["x"], kind="all")
    assert np.all(summ["r_hat"].to_numpy() < 1.05)
    for i in range(4):
        # 5 Monte Carlo standard errors for the mean; the marginal pmf within the TV tolerance
        # of posterior_helpers (4 sd per frequency at the chain's ESS)
        mcse = summ["mcse_mean"].to_numpy()[i]
        assert abs(post[:, i].mean() - mean[i]) < 5 * max(mcse, 1e-3)
        assert empirical_tv(post[:, i], marg[i]) < marginal_tv_tolerance(marg[i], summ["ess_bulk"].to_numpy()[i])


def test_moves_that_break_the_invariant_are_refused():
    from privinfer.pymc import lattice_latent

    inv = I.groups([0, 0, 1, 1], t=[4, 3])  # county totals fixed
    with pm.Model():
        with pytest.raises(ValueError, match="do not keep the invariant"):
            lattice_latent("x", inv, moves=PairMoves(np.array([0, 1, 0, 1])))  # transfers across counties
        lattice_latent("x", inv, moves=PairMoves(np.array([0, 0, 1, 1])))
    with pytest.raises(ValueError, match="cover every cell"):
        grid_moves(np.array([[0, 1], [2, 3]]), 5)


# ---------------------------------------------------------------------------------------------
# baselines
# ---------------------------------------------------------------------------------------------
def _dense_gls(B, v, y, C=None, t=None):
    W = np.diag(1 / v)
    K = B.T @ W @ B
    if C is None:
        return np.linalg.solve(K, B.T @ W @ y), np.diag(np.linalg.inv(K))
    c = C.shape[0]
    kkt = np.block([[K, C.T], [C, np.zeros((c, c))]])
    sol = np.linalg.solve(kkt, np.r_[B.T @ W @ y, t])
    Ki = np.linalg.inv(K)
    cov = Ki - Ki @ C.T @ np.linalg.inv(C @ Ki @ C.T) @ C @ Ki
    return sol[: B.shape[1]], np.diag(cov)


@pytest.mark.parametrize("case", ["hierarchy", "groups", "no-invariant", "no-single-cell-rows"])
def test_gls_equals_a_dense_solve(case):
    rng = np.random.default_rng(8)
    n = 12
    if case == "no-single-cell-rows":
        # overlapping pair sums and the margins of a 3 x 4 table: no diagonal part
        B = np.vstack([margin_query((3, 4), (0,)).toarray(), margin_query((3, 4), (1,)).toarray(),
                       np.eye(n)[:-1] + np.eye(n, k=1)[:-1]])
    else:
        B = np.vstack([np.eye(n), margin_query((3, 2, 2), (0,)).toarray(), margin_query((3, 2, 2), (1, 2)).toarray()])
    v = rng.uniform(0.5, 30.0, size=B.shape[0])
    x = rng.integers(0, 40, size=n)
    y = B @ x + rng.normal(0, np.sqrt(v))
    C = {"hierarchy": np.ones((1, n)), "groups": I.groups(np.repeat([0, 1, 2], 4)).matrix.toarray(),
         "no-invariant": None, "no-single-cell-rows": np.ones((1, n))}[case]
    t = None if C is None else C @ x
    est = gls(sp.csr_matrix(B), v, y, C, t, level=0.9)
    want_x, want_var = _dense_gls(B, v, y, C, t)
    np.testing.assert_allclose(est.x, want_x, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(est.se, np.sqrt(np.maximum(want_var, 0)), rtol=1e-8, atol=1e-9)
    z = stats.norm.ppf(0.95)
    np.testing.assert_allclose(est.upper - est.lower, 2 * z * est.se)
    if C is not None:
        np.testing.assert_allclose(C @ est.x, t, atol=1e-8)


def test_gls_of_a_release_and_topdown_style_post_processing():
    mech = county_sex_age_measurements(3, 2, 2, rho_detailed=0.05, rho_county=0.1, rho_state_sex_age=0.1)
    x = np.array([0, 3, 1, 40, 7, 0, 2, 5, 60, 1, 0, 9])
    rel = mech.publish(x, rng=2)
    est = gls_estimate(rel)
    B = mech.matrix.toarray()
    from privinfer.lattice.laws import discrete_gaussian_variance

    v = np.repeat([discrete_gaussian_variance(float(s)) for s in mech.sigmas], mech.sizes)
    want_x, _ = _dense_gls(B, v, rel.y.astype(float), np.ones((1, 12)), rel.t)
    np.testing.assert_allclose(est.x, want_x, rtol=1e-9, atol=1e-9)
    assert est.negative_lower.any()  # small cells: Gaussian intervals below zero
    td = topdown_style_estimate(rel, est, rng=0)
    assert td.dtype.kind == "i" and np.all(td >= 0) and td.sum() == rel.t[0]
    with pytest.raises(ValueError, match="keeps an invariant"):
        topdown_style_estimate(MeasurementRelease(_tiny(invariant=False), rel.y[:8]))
