"""Hierarchical GLS (two passes over the tree) against the dense constrained GLS solve."""

import numpy as np
import pytest
import scipy.sparse as sp

from census_helpers import random_frame
from privinfer.census import hierarchy_measurements
from privinfer.inference import HierarchicalGLS, gls, gls_estimate, hierarchical_gls
from privinfer.inference.hierarchical_gls import HierarchicalGLSEstimate, tree_applies
from privinfer.lattice.laws import discrete_gaussian_variance

QUERIES = {"total": (), "sex": ("sex",), "sex x age": ("sex", "age")}


def _dense(release):
    """Dense reference: the GLS estimate and the full constrained covariance."""
    m = release.mechanism
    v = np.repeat([discrete_gaussian_variance(float(s)) for s in m.sigmas], m.sizes)
    inv = release.invariant
    B = m.matrix.toarray()
    K = B.T @ (B / v[:, None])
    Ki = np.linalg.inv(K)
    if inv is None:
        Sigma = Ki
    else:
        C = inv.matrix.toarray() if sp.issparse(inv.matrix) else np.asarray(inv.matrix, float)
        Z = Ki @ C.T
        Sigma = Ki - Z @ np.linalg.solve(C @ Z, Z.T)
    est = gls(m.matrix, v, release.y, None if inv is None else inv.matrix, None if inv is None else release.t)
    return est, Sigma


CASES = [
    ("total", 0.01, ["county", "tract"]),
    (None, 0.02, ["county", "tract"]),
    ("county", 0.005, ["county", "tract"]),
    ("tract", 0.01, ["county", "tract"]),
    ("total", {("state", "total"): 0.02, ("county", "sex x age"): 0.01, ("tract", "total"): 0.004,
               ("tract", "sex x age"): 0.003}, ["county", "tract"]),
    ("total", 0.01, ["county", "tract", "group"]),
    ("tract", 0.01, ["county", "tract", "group"]),
    ("total", 0.01, ["county"]),
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("seed", [0, 1])
def test_equals_dense_solve(case, seed):
    """Values, per-cell variances and covariances of random linear functions agree with the
    dense solve to 1e-8 (both are exact; the difference is round-off)."""
    invariant, rho, geography = CASES[case]
    f = random_frame(seed, groups=2 if "group" in geography else 0)
    if geography == ["county"]:
        f = f.groupby(["county", "sex", "age"], as_index=False)["count"].sum()
    mech = hierarchy_measurements(f, geography=geography, attributes=["sex", "age"], queries=QUERIES, rho=rho,
                                  invariant=invariant)
    release = mech.publish(f["count"], rng=seed)
    assert tree_applies(mech)
    est = gls_estimate(release)
    assert isinstance(est, HierarchicalGLSEstimate)
    ref, Sigma = _dense(release)
    scale = max(1.0, np.abs(ref.x).max())
    np.testing.assert_allclose(est.x, ref.x, atol=1e-8 * scale)
    np.testing.assert_allclose(est.se ** 2, np.diag(Sigma).clip(0), atol=1e-8 * Sigma.max())
    np.testing.assert_allclose(est.lower, ref.lower, atol=1e-8 * scale)
    W = np.random.default_rng(seed).normal(size=(mech.n, 4))
    np.testing.assert_allclose(est.variance(W), W.T @ Sigma @ W, atol=1e-8 * np.abs(W.T @ Sigma @ W).max())
    Ws = sp.random(mech.n, 3, density=0.3, random_state=seed, format="csc")
    np.testing.assert_allclose(est.variance(Ws), (Ws.T @ Sigma @ Ws), atol=1e-8 * max(1, np.abs(Ws.T @ Sigma @ Ws).max()))
    # every unit's posterior covariance is the dense covariance of its attribute vector
    H = mech.hierarchy
    solver = est.solver
    for l in range(H.depth):
        A = H.query_matrix(l, H.attributes).toarray()  # unit x attribute-combination sums
        U = H.n_units(l)
        cov = solver.unit_covariance(l)
        dense = (A @ Sigma @ A.T).reshape(U, H.d, U, H.d)
        for u in range(U):
            np.testing.assert_allclose(cov[u], dense[u, :, u, :], atol=1e-8 * max(1.0, np.abs(dense).max()))
        np.testing.assert_allclose(est.unit_means[l].reshape(-1), A @ ref.x, atol=1e-8 * scale)


def test_invariant_is_kept_exactly():
    f = random_frame(5)
    for invariant in ("total", "county"):
        mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"], queries=QUERIES,
                                      rho=0.01, invariant=invariant)
        rel = mech.publish(f["count"], rng=3)
        est = gls_estimate(rel)
        assert np.allclose(rel.invariant.of(est.x), rel.t, atol=1e-8)
        # the fixed totals have variance 0
        C = rel.invariant.matrix
        assert np.allclose(np.diag(est.variance(C.T.tocsc())), 0.0, atol=1e-8)


def test_ratio_interval_matches_dense_delta_method():
    f = random_frame(7)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"], queries=QUERIES,
                                  rho=0.01)
    rel = mech.publish(f["count"], rng=2)
    est = hierarchical_gls(rel)
    _, Sigma = _dense(rel)
    H = mech.hierarchy
    leaf = H.leaf_unit
    old = np.asarray(f["age"] == "65+")
    U = H.n_units(H.depth - 1)
    den = sp.csc_matrix((np.ones(H.n), (np.arange(H.n), leaf)), shape=(H.n, U))
    num = sp.csc_matrix((old.astype(float), (np.arange(H.n), leaf)), shape=(H.n, U))
    r, lo, hi = est.ratio_interval(num, den)
    a, b = num.T @ est.x, den.T @ est.x
    Vaa = np.diag(num.T @ Sigma @ num)
    Vbb = np.diag(den.T @ Sigma @ den)
    Vab = np.diag(num.T @ Sigma @ den)
    rr = a / b
    se = np.sqrt((Vaa - 2 * rr * Vab + rr ** 2 * Vbb) / b ** 2)
    np.testing.assert_allclose(r, rr, rtol=1e-10)
    np.testing.assert_allclose((hi - lo) / 2, 1.6448536269514722 * se, rtol=1e-8)


def test_without_detailed_leaf_cells_the_dense_path_is_used():
    f = random_frame(2)
    rho = {("state", "sex x age"): 0.01, ("county", "sex x age"): 0.01, ("tract", "total"): 0.01}
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"], queries=QUERIES,
                                  rho=rho)
    assert not tree_applies(mech)
    with pytest.raises(ValueError, match="detailed cells of the lowest level"):
        HierarchicalGLS(mech)
    with pytest.raises(ValueError, match="do not identify every cell"):
        gls_estimate(mech.publish(f["count"], rng=1))


def test_bad_input():
    f = random_frame(3)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"], queries=QUERIES,
                                  rho=0.01)
    solver = HierarchicalGLS(mech)
    with pytest.raises(ValueError, match="shape"):
        solver.estimate(np.zeros(3), t=[1])
    with pytest.raises(ValueError, match="pass its published values t"):
        solver.estimate(np.zeros(mech.m))
    with pytest.raises(ValueError, match="level must lie"):
        solver.estimate(np.zeros(mech.m), t=[1], level=1.5)
    with pytest.raises(ValueError, match="rows"):
        solver.covariance_of(np.ones(3))
