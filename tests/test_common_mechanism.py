"""The common mechanism (Xiao, Wang, Zhang, Kifer): answerability, common/residual/recreate,
the SDP for three or more mechanisms, SNR bounds and the nested (age bucketization) choice."""

import itertools

import numpy as np
import pytest
from scipy import linalg, stats

from privinfer import invariants
from privinfer.common import (
    DHC_AGE_EDGES,
    NestedSelection,
    answer_map,
    answerable,
    bucket_matrix,
    common_mechanism,
    equivalent,
    estimate,
    intersect_row_spaces,
    min_trace_upper_bound,
    query_noise_variance,
    recreate,
    residual,
    snr_bounds,
    standardize,
    stott_bound,
)
from privinfer.mechanisms import LinearGaussian

ONE = np.ones((1, 9))


def marginals(d, order):
    """Query matrix of all `order`-way marginals of d binary attributes (x in C order): the
    constraint matrix of the invariants core's ``margins``."""
    return invariants.margins((2,) * d, list(itertools.combinations(range(d), order))).matrix.toarray()


def example_3_12():
    B1 = np.kron(np.eye(3), np.ones((1, 3)))  # marginal on Att1
    B2 = np.kron(np.ones((1, 3)), np.eye(3))  # marginal on Att2
    return LinearGaussian(B1, 1.0), LinearGaussian(B2, 1.0)


def overlapping(seed, n=6, shared=3, extras=(1, 2, 1)):
    """Mechanisms with correlated noise whose query rows share a `shared`-dim subspace."""
    rng = np.random.default_rng(seed)
    G = rng.standard_normal((shared, n))
    out = []
    for e in extras:
        B = np.vstack([G, rng.standard_normal((e, n))])
        A = rng.standard_normal((B.shape[0], B.shape[0]))
        out.append(LinearGaussian(B, A @ A.T + np.eye(B.shape[0])))
    return out


def is_maximal(Mc, mechanisms, rng, t_rel=1e-6, trials=200):
    """No member of the family K_c + t v v^T (v a random unit vector of the intersection of
    the row spaces, t = t_rel * scale) is common to all the mechanisms."""
    Q = intersect_row_spaces(*mechanisms)
    scale = np.max(np.abs(Mc.cost_matrix))
    for _ in range(trials):
        v = Q @ rng.standard_normal(Q.shape[1])
        v /= np.linalg.norm(v)
        Kp = Mc.cost_matrix + t_rel * scale * np.outer(v, v)
        if all(np.linalg.eigvalsh(M.cost_matrix - Kp)[0] >= -1e-12 * scale for M in mechanisms):
            return False
    return True


# --------------------------------------------------------------------------------------
# paper examples
# --------------------------------------------------------------------------------------
def test_example_3_3_answerable_both_ways_with_the_papers_maps():
    Ma = LinearGaussian([[1, 1], [1, 0], [0, 1]], 2.0)
    Mb = LinearGaussian(np.eye(2), [[4 / 3, -2 / 3], [-2 / 3, 4 / 3]])
    assert equivalent(Ma, Mb) and answerable(Ma, Mb) and answerable(Mb, Ma)
    # Mb = [[1/3, 2/3, -1/3], [1/3, -1/3, 2/3]] Ma, with no extra noise
    A, C = answer_map(Ma, Mb)
    np.testing.assert_allclose(A, [[1 / 3, 2 / 3, -1 / 3], [1 / 3, -1 / 3, 2 / 3]], atol=1e-12)
    np.testing.assert_allclose(C, 0, atol=1e-12)
    # Ma = Ba Mb + sqrt(2/3) (1, -1, -1)^T N(0, 1)  (Remark 3.4: noise re-inflates the dependent row)
    A, C = answer_map(Mb, Ma)
    np.testing.assert_allclose(A, Ma.B, atol=1e-12)
    c = np.array([1.0, -1.0, -1.0])
    np.testing.assert_allclose(C @ C.T, 2 / 3 * np.outer(c, c), atol=1e-12)
    # Lemma 3.2 identities for both maps
    for src, tgt in ((Ma, Mb), (Mb, Ma)):
        A, C = answer_map(src, tgt)
        np.testing.assert_allclose(A @ src.B, tgt.B, atol=1e-12)
        np.testing.assert_allclose(A @ src.Sigma @ A.T + C @ C.T, tgt.Sigma, atol=1e-12)


def test_example_3_8_maximal_common_is_the_sum_with_variance_1_5():
    M1 = LinearGaussian([[1, 1, 1]], 1.0)
    M2 = LinearGaussian([[1, 1, 1], [1, 0, 0], [0, 1, 0], [0, 0, 1]], 2.0)
    M3 = LinearGaussian([[1, 1, 1]], 2.0)
    M4 = LinearGaussian([[1, 1, 1]], 1.5)
    for M in (M3, M4):
        assert answerable(M1, M) and answerable(M2, M)
    assert answerable(M4, M3) and not answerable(M3, M4)
    # the paper's post-processing M4 = [0.75, 0.25, 0.25, 0.25] M2 (Lemma 3.2 with C = 0)
    a = np.array([[0.75, 0.25, 0.25, 0.25]])
    np.testing.assert_allclose(a @ M2.B, M4.B)
    np.testing.assert_allclose(a @ M2.Sigma @ a.T, M4.Sigma)
    for method in ("closed_form", "sdp"):
        Mc = common_mechanism(M1, M2, method=method)
        assert equivalent(Mc, M4, rtol=1e-9)
    Mc = common_mechanism(M1, M2, basis=[1, 1, 1])
    np.testing.assert_allclose(Mc.Sigma, [[1.5]], rtol=1e-12)


def test_example_3_12_common_residuals_and_recreation_map():
    M1, M2 = example_3_12()
    Mc = common_mechanism(M1, M2, basis=ONE)
    np.testing.assert_allclose(Mc.Sigma, [[3.0]], rtol=1e-12)  # noisy total, variance 3
    assert equivalent(Mc, common_mechanism(M1, M2))  # default orthonormal basis: same mechanism
    assert equivalent(Mc, common_mechanism(M1, M2, method="sdp", basis=ONE), rtol=1e-9)
    R1p = LinearGaussian([[0, 0, 0, 1, 1, 1, -1, -1, -1], [-1, -1, -1, 1, 1, 1, 0, 0, 0]], [[2, 1], [1, 2]])
    R2p = LinearGaussian([[0, 1, -1, 0, 1, -1, 0, 1, -1], [-1, 1, 0, -1, 1, 0, -1, 1, 0]], [[2, 1], [1, 2]])
    for M, Rp in ((M1, R1p), (M2, R2p)):
        R = residual(M, Mc)
        assert R.m == 2 and equivalent(R, Rp)
        assert equivalent(LinearGaussian.joint(Mc, Rp), M)  # Lemma 3.11
    # The paper writes M1 = [[1/3,-2/3],[1/3,1/3],[-2/3,1/3]] M1' + [1/3, 1/3, -2/3]^T M*; the last
    # entry of the second vector is an extraction slip: B1 = A' B1' + a* 1^T forces a* = 1/3 (1,1,1).
    A, C = answer_map(LinearGaussian.joint(Mc, R1p), M1)
    np.testing.assert_allclose(A, [[1 / 3, 1 / 3, -2 / 3], [1 / 3, 1 / 3, 1 / 3], [1 / 3, -2 / 3, 1 / 3]], atol=1e-12)
    np.testing.assert_allclose(C, 0, atol=1e-12)


def test_answer_map_is_algorithm_4():
    """Algorithm 4's A_*, A' computed literally (pseudo-inverses) equal answer_map's blocks."""
    Mc_list = overlapping(0)
    M1 = Mc_list[0]
    Mc = common_mechanism(*Mc_list[:2])
    R = residual(M1, Mc)
    S_half = linalg.sqrtm(M1.Sigma).real
    W = M1.B.T @ np.linalg.inv(S_half)
    Wp = np.linalg.pinv(W)
    A_star = S_half @ Wp @ Mc.B.T @ np.linalg.inv(Mc.Sigma)
    A_res = S_half @ Wp @ R.B.T @ np.linalg.inv(R.Sigma)
    A, C = answer_map(LinearGaussian.joint(Mc, R), M1)
    np.testing.assert_allclose(A, np.hstack([A_star, A_res]), atol=1e-9)
    np.testing.assert_allclose(C, 0, atol=1e-9)  # M1's rows are independent: no top-up noise


# --------------------------------------------------------------------------------------
# decomposition properties
# --------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", [2, 3, 4])
def test_common_is_answerable_maximal_and_residuals_restore_the_cost(k):
    mechs = overlapping(10 + k, n=6, shared=3, extras=(1, 2, 1, 2)[:k])
    Mc = common_mechanism(*mechs)
    assert Mc.m == intersect_row_spaces(*mechs).shape[1] == 3
    rng = np.random.default_rng(k)
    for M in mechs:
        assert answerable(M, Mc)  # Def. 3.7 via Thm. 3.5
        R = residual(M, Mc)
        J = LinearGaussian.joint(Mc, R)
        np.testing.assert_allclose(J.cost_matrix, M.cost_matrix, atol=1e-9 * np.abs(M.cost_matrix).max())
        assert J.rho == pytest.approx(M.rho, rel=1e-9)
    assert is_maximal(Mc, mechs, rng)


def test_a_common_mechanism_that_is_not_maximal_fails_the_maximality_check():
    # sanity check of the test family itself: shrinking the common mechanism leaves room
    mechs = overlapping(20)
    Mc = common_mechanism(*mechs)
    smaller = LinearGaussian(Mc.B, 1.01 * Mc.Sigma)
    assert all(answerable(M, smaller) for M in mechs)
    assert not is_maximal(smaller, mechs, np.random.default_rng(0))


def test_sdp_with_a_redundant_mechanism_equals_stotts_closed_form():
    """If K3 >= K1, the third constraint is implied (P3 <= P1), so the SDP optimum for
    (M1, M2, M3) is Theorem 5.4's closed form for (M1, M2) (unique, see stott_bound)."""
    M1, M2, _ = overlapping(7)
    rng = np.random.default_rng(7)
    M3 = LinearGaussian.joint(M1, LinearGaussian(rng.standard_normal((1, 6)), 1.0))
    K2 = common_mechanism(M1, M2).cost_matrix
    K3 = common_mechanism(M1, M2, M3).cost_matrix
    # interior-point accuracy: certified relative gap ~1e-11; X converges at least like its
    # square root in degenerate directions, so 1e-5 relative is a safe bound here.
    np.testing.assert_allclose(K3, K2, atol=1e-5 * np.abs(K2).max())


def test_sdp_commuting_constraints_have_the_elementwise_max_solution():
    """P_i = V diag(d_i) V^T: min tr X s.t. X >= P_i is V diag(max_i d_i) V^T (trace bound
    X_jj >= max_i (P_i)_jj in the V basis, attained and unique)."""
    rng = np.random.default_rng(4)
    for s, k in ((4, 3), (6, 4)):
        V = np.linalg.qr(rng.standard_normal((s, s)))[0]
        d = rng.uniform(0, 2, size=(k, s))
        d[0, 0] = 0.0  # a rank-deficient constraint
        X, info = min_trace_upper_bound([(V * di) @ V.T for di in d], return_info=True)
        np.testing.assert_allclose(X, (V * d.max(0)) @ V.T, atol=1e-8)
        assert 0 <= info.gap < 1e-9 * info.lower_bound


def test_sdp_certificate_and_strict_feasibility_on_random_problems():
    rng = np.random.default_rng(9)
    for s, k in ((3, 3), (5, 4), (8, 5)):
        Ps = []
        for _ in range(k):
            G = rng.standard_normal((s, s // 2 + 1))
            Ps.append(G @ G.T)
        X, info = min_trace_upper_bound(Ps, return_info=True)
        assert info.gap >= -1e-9 and info.gap < 1e-9 * info.lower_bound
        assert np.trace(X) - info.lower_bound == pytest.approx(info.gap, abs=1e-9)
        for P in Ps:
            assert np.linalg.eigvalsh(X - P)[0] > 0
        # optimal value no worse than any pairwise Stott bound made feasible for all
        # (Stott of the first two is a lower bound on the optimum: fewer constraints)
        assert np.trace(stott_bound(Ps[0], Ps[1])) <= np.trace(X) + 1e-9


def test_two_mechanisms_sdp_matches_closed_form():
    M1, M2 = example_3_12()
    a = common_mechanism(M1, M2, method="closed_form")
    b = common_mechanism(M1, M2, method="sdp")
    np.testing.assert_allclose(a.cost_matrix, b.cost_matrix, atol=1e-9)
    X1, X2 = overlapping(3)[:2]
    a = common_mechanism(X1, X2, method="closed_form")
    b = common_mechanism(X1, X2, method="sdp")
    assert np.trace(b.Sigma) == pytest.approx(np.trace(a.Sigma), rel=1e-9)  # same optimal value


def test_standardize_is_equivalent_with_identity_noise_and_independent_rows():
    M = LinearGaussian([[1, 1, 0], [1, 0, 0], [0, 1, 0]], [[2.0, 0.5, 0], [0.5, 1.0, 0], [0, 0, 3.0]])
    S = standardize(M)
    assert S.m == 2 and np.linalg.matrix_rank(S.B) == 2
    np.testing.assert_array_equal(S.Sigma, np.eye(2))
    assert equivalent(S, M)


def test_disjoint_row_spaces_give_an_empty_common_mechanism():
    M1 = LinearGaussian([[1, 0, 0]], 1.0)
    M2 = LinearGaussian([[0, 1, 0], [0, 0, 1]], 1.0)
    Mc = common_mechanism(M1, M2)
    assert Mc.m == 0 and Mc.rho == 0.0
    R = residual(M1, Mc)
    assert equivalent(R, M1)
    out = recreate(np.zeros(0), R.release(np.array([5.0, 0, 0]), rng=0), M1, Mc, R)
    assert out.shape == (1,)


# --------------------------------------------------------------------------------------
# recreate: exactly the target's law
# --------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("which", ["dependent_rows", "correlated"])
def test_recreate_has_the_targets_mean_and_covariance(which):
    if which == "dependent_rows":
        # target with linearly dependent rows: the top-up noise of Thm 5.5 is needed
        target = LinearGaussian([[1, 1, 1, 0], [1, 0, 0, 0], [0, 1, 1, 0], [0, 0, 0, 1]], 2.0)
        other = LinearGaussian([[1, 1, 1, 1], [1, 0, 0, 0]], [1.0, 3.0])
    else:
        target, other, _ = overlapping(5, n=4, shared=2, extras=(1, 1, 1))
    Mc = common_mechanism(target, other)
    R = residual(target, Mc)
    assert LinearGaussian.joint(Mc, R).rho == pytest.approx(target.rho, rel=1e-9)  # privacy unchanged
    N = 40000
    x = np.array([7.0, 3.0, 12.0, 1.0])
    X = np.tile(x, (N, 1))
    rng = np.random.default_rng(123)
    out = recreate(Mc.release(X, rng=rng), R.release(X, rng=rng), target, Mc, R, rng=rng)
    S = target.Sigma
    # 5 standard errors: mean sd/sqrt(N); covariance entry sqrt((S_ii S_jj + S_ij^2)/N)
    assert np.all(np.abs(out.mean(0) - target.B @ x) < 5 * np.sqrt(np.diag(S) / N))
    se = np.sqrt((np.outer(np.diag(S), np.diag(S)) + S**2) / N)
    assert np.all(np.abs(np.cov(out.T) - S) < 5 * se)


def test_recreate_rejects_mismatched_pieces():
    M1, M2 = example_3_12()
    Mc = common_mechanism(M1, M2)
    R2 = residual(M2, Mc)
    with pytest.raises(ValueError, match="not equivalent to target"):
        recreate(np.zeros(1), np.zeros(2), M1, Mc, R2)
    R1 = residual(M1, Mc)
    with pytest.raises(ValueError, match=r"omega_residual must have shape \(\.\.\., 2\)"):
        recreate(np.zeros(1), np.zeros(3), M1, Mc, R1)
    with pytest.raises(ValueError, match="different batch shapes"):
        recreate(np.zeros((2, 1)), np.zeros((3, 2)), M1, Mc, R1)


# --------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------
def test_bad_input_clear_errors():
    M1, M2 = example_3_12()
    small = LinearGaussian(np.eye(2), 1.0)
    with pytest.raises(ValueError, match="different lengths"):
        common_mechanism(M1, small)
    with pytest.raises(ValueError, match="different lengths"):
        answerable(M1, small)
    with pytest.raises(TypeError, match="LinearGaussian"):
        common_mechanism(M1, np.eye(9))
    with pytest.raises(ValueError, match="exactly two"):
        common_mechanism(M1, M2, M1, method="closed_form")
    with pytest.raises(ValueError, match="method must be"):
        common_mechanism(M1, M2, method="magic")
    with pytest.raises(ValueError, match="lie in the intersection"):
        common_mechanism(M1, M2, basis=np.eye(9)[:1])
    with pytest.raises(ValueError, match="linearly independent rows"):
        common_mechanism(M1, M2, basis=np.vstack([ONE, ONE]))
    with pytest.raises(ValueError, match="not answerable from M"):
        residual(M1, LinearGaussian(ONE, 0.5))  # variance below 3: more than M1 knows
    with pytest.raises(ValueError, match="not answerable from source"):
        answer_map(M1, M2)
    with pytest.raises(ValueError, match="not answerable from the mechanism"):
        estimate(M1, np.zeros(3), np.eye(9)[:1])


# --------------------------------------------------------------------------------------
# decisions (Sec. 6.2) and the nested choice (Sec. 7.5.3)
# --------------------------------------------------------------------------------------
def test_one_way_vs_two_way_marginals_common_is_the_one_way_information():
    B1, B2 = marginals(4, 1), marginals(4, 2)
    M1, M2 = LinearGaussian(B1, 1.0), LinearGaussian(B2, 1.0)
    Mc = common_mechanism(M1, M2)
    assert Mc.m == np.linalg.matrix_rank(B1) == 5  # rowspace(B1) is inside rowspace(B2)
    for M in (M1, M2):
        assert answerable(M, Mc) and equivalent(LinearGaussian.joint(Mc, residual(M, Mc)), M)
    # the common mechanism's BLUE of B1 x is noisier than M1's own and than M2's
    v_c = query_noise_variance(Mc, B1)
    assert np.all(v_c >= query_noise_variance(M1, B1) - 1e-9)
    assert np.all(v_c >= query_noise_variance(M2, B1) - 1e-9)


def test_query_noise_variance_blue_vs_given_postprocessing():
    B2 = marginals(3, 2)
    M2 = LinearGaussian(B2, 2.0)
    B1 = marginals(3, 1)
    A = np.linalg.lstsq(B2.T, B1.T, rcond=None)[0].T  # some A with A B2 = B1
    A = np.round(A, 12)
    raw = query_noise_variance(M2, B1, A=A)
    np.testing.assert_allclose(raw, np.einsum("ij,jk,ik->i", A, M2.Sigma, A))
    blue = query_noise_variance(M2, B1)
    assert np.all(blue <= raw + 1e-12)  # Gauss-Markov
    with pytest.raises(ValueError, match="A B != queries"):
        query_noise_variance(M2, B1, A=np.zeros_like(A))


@pytest.mark.slow
def test_estimate_is_unbiased_and_snr_interval_covers_at_the_stated_rate():
    M1, M2 = example_3_12()
    Mc = common_mechanism(M1, M2)
    x = np.arange(1.0, 10.0)
    N = 20000
    w = Mc.release(np.tile(x, (N, 1)), rng=77)
    mean, cov = estimate(Mc, w, ONE)
    assert cov[0, 0] == pytest.approx(3.0, rel=1e-12)  # Example 3.12: variance 3
    assert abs(mean.mean() - x.sum()) < 5 * np.sqrt(3.0 / N)  # 5 standard errors
    b = snr_bounds(Mc, w, ONE, noise_variance=[1.0], z=2.0)
    cover = np.mean((b.lower[:, 0] <= x.sum()) & (x.sum() <= b.upper[:, 0]))
    p = 1 - 2 * stats.norm.sf(2.0)
    assert abs(cover - p) < 5 * np.sqrt(p * (1 - p) / N)  # binomial, 5 standard errors
    np.testing.assert_allclose(b.snr_lower, b.lower / 1.0)


def _age_mechanisms(rho=1 / 8):
    # each cell of a bucketization histogram is one bucket, so diag(K) = 1/sigma^2 and rho = 1/(2 sigma^2)
    return [LinearGaussian(bucket_matrix(DHC_AGE_EDGES[k], 2), 1 / (2 * rho)) for k in ("Total", "Age4", "Age9", "Age23")]


def test_bucket_matrix_nesting():
    Bs = [bucket_matrix(DHC_AGE_EDGES[k], 2) for k in ("Total", "Age4", "Age9", "Age23")]
    assert [B.shape for B in Bs] == [(2, 206), (8, 206), (18, 206), (46, 206)]
    for B in Bs:
        np.testing.assert_array_equal(B.sum(0), np.ones(206))  # a partition within each sex
    with pytest.raises(ValueError, match="increasing"):
        bucket_matrix([0, 5, 5, 10])


def test_nested_selection_chain_matches_the_joint_sdp_and_wastes_nothing():
    Ms = _age_mechanisms()
    plan = NestedSelection(Ms)
    # the pairwise chain equals the paper's joint SDP common mechanisms CM_1234 and CM_234
    for k in (0, 1):
        joint = common_mechanism(*Ms[k:])
        np.testing.assert_allclose(joint.cost_matrix, plan.commons[k].cost_matrix, atol=1e-9)
    for k in range(3):
        assert answerable(plan.commons[k + 1], plan.commons[k])  # CM_1234 <- CM_234 <- CM_34
        assert all(answerable(M, plan.commons[k]) for M in Ms[k:])
    for c, M in enumerate(Ms):
        # everything released on the way to choice c costs exactly M_c (zero waste)
        np.testing.assert_allclose(plan.path_cost_matrix(c), M.cost_matrix, atol=1e-9)


def test_nested_selection_runs_to_the_expected_bucketization():
    Ms = _age_mechanisms()
    plan = NestedSelection(Ms, fraction=0.5, snr=20.0)
    big = np.full(206, 2000.0)  # every Age23 cell has SNR >> 20
    r = plan.run(big, rng=1)
    assert r.choice == 3 and r.output.shape == (46,) and len(r.bounds) == 3
    r = plan.run(np.zeros(206), rng=1)  # nothing there: stop at Total
    assert r.choice == 0 and r.output.shape == (2,) and len(r.released) == 2
    # ~32 people per Age4 cell: Total passes for Age4 (SNR ~ 128/4) but Age4 cells derived
    # from Age9 (sd 2.8-3.5) have SNR ~ 10 < 20: stop at Age4
    x = np.zeros(206)
    for sex in range(2):
        for lo, hi in zip(DHC_AGE_EDGES["Age4"][:-1], DHC_AGE_EDGES["Age4"][1:]):
            x[sex * 103 + lo: sex * 103 + hi] = 32.0 / (hi - lo)
    r = plan.run(x, rng=2)
    assert r.choice == 1 and r.output.shape == (8,)
    labels = [lab for lab, _, _ in r.released]
    assert labels == ["common 0", "step residual 0", "final residual 1"]
    total_cost = sum(M.cost_matrix for _, M, _ in r.released)
    np.testing.assert_allclose(total_cost, Ms[1].cost_matrix, atol=1e-9)


def test_nested_selection_rejects_non_nested_analyses():
    M1, M2 = example_3_12()
    with pytest.raises(ValueError, match="not nested"):
        NestedSelection([M1, M2])
