"""Invariants core: subspaces, projections, integer lattices, feasible points, errors."""

import itertools

import numpy as np
import pytest
import scipy.sparse as sp

from privinfer import invariants as I
from privinfer.invariants import InfeasibleInvariantError, Invariant


def _random_rank_deficient(rng, m, n, r, sparse=False, integer=False):
    if integer:
        A = rng.integers(-2, 3, size=(r, n))
        M = rng.integers(-1, 2, size=(m, r))
        C = M @ A
    else:
        C = rng.standard_normal((m, r)) @ rng.standard_normal((r, n))
    return sp.csr_matrix(C) if sparse else C


def _all_invariants():
    rng = np.random.default_rng(0)
    out = {
        "dense-full": Invariant(rng.standard_normal((3, 8))),
        "dense-deficient": Invariant(_random_rank_deficient(rng, 5, 9, 3)),
        "sparse-deficient": Invariant(_random_rank_deficient(rng, 6, 10, 4, sparse=True)),
        "duplicate-rows": Invariant(np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1]])),
        "total": I.total(7),
        "groups": I.groups(["b", "a", "a", "c", "b", "c", "c", "a"]),
        "margins-2way": I.margins((3, 4), [(0,), (1,)]),
        "margins-3way": I.margins((2, 3, 4), [(0, 1), (1, 2)]),
        "margins-3way-all2": I.margins((3, 3, 2), [(0, 1), (0, 2), (1, 2)]),
        "counting": I.counting([[0, 1, 2, 3], [2, 3, 4, 5], [1, 3, 5, 6]], 8),
        "stack": I.stack(I.total(6), I.groups([0, 0, 1, 1, 2, 2])),
    }
    return out


INVS = _all_invariants()


def _dense(C):
    return C.toarray() if sp.issparse(C) else np.asarray(C)


@pytest.mark.parametrize("name", list(INVS))
def test_subspace_geometry(name):
    inv = INVS[name]
    C = _dense(inv.matrix)
    assert inv.rank == np.linalg.matrix_rank(C)
    Q = inv.null_basis()
    R = inv.row_basis()
    assert Q.shape == (inv.n, inv.n - inv.rank)
    assert R.shape == (inv.n, inv.rank)
    np.testing.assert_allclose(C @ Q, 0, atol=1e-10)
    np.testing.assert_allclose(Q.T @ Q, np.eye(Q.shape[1]), atol=1e-10)
    np.testing.assert_allclose(R.T @ R, np.eye(R.shape[1]), atol=1e-10)
    np.testing.assert_allclose(Q.T @ R, 0, atol=1e-10)
    rng = np.random.default_rng(1)
    V = rng.standard_normal((5, inv.n))
    pn, pr = inv.project_null(V), inv.project_row(V)
    np.testing.assert_allclose(pn + pr, V, atol=1e-12)
    np.testing.assert_allclose(inv.project_null(pn), pn, atol=1e-10)  # idempotent
    np.testing.assert_allclose(inv.project_row(pr), pr, atol=1e-10)
    np.testing.assert_allclose(inv.project_null(pr), 0, atol=1e-10)  # complementary
    np.testing.assert_allclose(pn, V @ Q @ Q.T, atol=1e-10)  # P_N = Q Q^T
    np.testing.assert_allclose(C @ pn.T, 0, atol=1e-10)
    # one vector works too
    np.testing.assert_allclose(inv.project_null(V[0]), pn[0])
    np.testing.assert_allclose(inv.of(V), V @ C.T)


def _kernel_vectors_independently(C, rng, k=20, box=3):
    """Integer kernel vectors found without the basis: rational null space scaled to integers."""
    import sympy

    M = sympy.Matrix(C.astype(int).tolist())
    ns = M.nullspace()
    vecs = []
    for v in ns:
        den = sympy.ilcm(*[sympy.fraction(x)[1] for x in v])
        vecs.append(np.array([int(x * den) for x in v], dtype=np.int64))
    out = list(vecs)
    for _ in range(k):
        coef = rng.integers(-box, box + 1, size=len(vecs))
        out.append(sum(c * v for c, v in zip(coef, vecs)))
    return out


@pytest.mark.parametrize("name", [k for k, v in INVS.items() if v.is_integer])
def test_lattice_basis_generates_integer_kernel(name):
    inv = INVS[name]
    C = _dense(inv.matrix).astype(np.int64)
    B = inv.lattice_basis()
    assert B.dtype == np.int64
    assert B.shape == (inv.n, inv.n - inv.rank)
    assert not np.any(C @ B)
    assert np.linalg.matrix_rank(B.astype(float)) == B.shape[1]
    # every integer kernel vector has integer coordinates in B (B generates the lattice)
    for e in _kernel_vectors_independently(C, np.random.default_rng(2)):
        z, *_ = np.linalg.lstsq(B.astype(float), e.astype(float), rcond=None)
        np.testing.assert_allclose(B @ np.round(z), e, atol=1e-8)
        np.testing.assert_allclose(z, np.round(z), atol=1e-8)


def test_lattice_determinant_matches_smith_invariants():
    # The kernel lattice of C is saturated (Z^n intersected with a subspace), so the gcd of
    # the maximal minors of B is 1: check via the Smith form of B.
    import sympy
    from sympy.matrices.normalforms import smith_normal_form

    rng = np.random.default_rng(3)
    for _ in range(5):
        C = _random_rank_deficient(rng, 4, 7, 3, integer=True)
        inv = Invariant(C)
        B = inv.lattice_basis()
        S = smith_normal_form(sympy.Matrix(B.tolist()), domain=sympy.ZZ)
        diag = [abs(S[i, i]) for i in range(min(S.shape))]
        assert all(d == 1 for d in diag)
        assert not np.any(np.round(C).astype(int) @ B)


def test_structured_lattice_moves_are_short_and_sparse():
    B = I.margins((4, 5), [(0,), (1,)]).lattice_basis()
    assert B.shape == (20, 12)
    assert set(np.abs(B).sum(axis=0)) == {4}
    Bg = I.groups([0, 0, 0, 1, 1]).lattice_basis()
    assert set(np.abs(Bg).sum(axis=0)) == {2}
    Bc = I.counting([[0, 1, 2, 3, 4, 5, 6], [4, 5, 6, 7, 8, 9, 10], [0, 5, 6, 10, 11, 12, 13]], 14).lattice_basis()
    assert np.abs(Bc).max() <= 2 and np.abs(Bc).sum(axis=0).max() <= 6


def test_lll_reduces_a_skewed_basis_of_the_same_lattice():
    b = [[1, 0, 0, 1000], [0, 1, 0, 999], [0, 0, 1, 1001]]
    red = I.lll_reduce(b)
    B0, B1 = np.array(b).T, np.array(red).T
    # same lattice: each basis expresses the other with integer coefficients
    for X, Y in [(B0, B1), (B1, B0)]:
        z = np.linalg.lstsq(X.astype(float), Y.astype(float), rcond=None)[0]
        np.testing.assert_allclose(z, np.round(z), atol=1e-9)
        np.testing.assert_allclose(X @ np.round(z), Y, atol=1e-9)
    # orthogonality defect prod ||b_i|| / vol(L); LLL with delta = 0.99 guarantees
    # <= (1 / (delta - 1/4))^{d(d-1)/4} = 1.352^{1.5} ~ 1.57 for d = 3 (Lenstra-Lenstra-Lovasz 1982)
    vol = np.sqrt(np.linalg.det(B0.T @ B0.astype(float)))
    defect = lambda B: np.prod(np.linalg.norm(B, axis=0)) / vol  # noqa: E731
    assert defect(B1) <= (1 / (0.99 - 0.25)) ** 1.5 < 1e3 < defect(B0)


def test_exact_arithmetic_no_overflow():
    # entries near 2^40 would overflow int64 products inside a naive elimination
    big = 2**40 + 15
    C = np.array([[big, big + 1, 3 * big - 1, 7]], dtype=object)
    inv = Invariant(C.astype(float))
    B = inv.lattice_basis()
    Ci = [int(v) for v in C[0]]
    for j in range(B.shape[1]):
        assert sum(c * int(b) for c, b in zip(Ci, B[:, j])) == 0


@pytest.mark.parametrize("shape,keep", [((3, 4), [(0,), (1,)]), ((2, 3, 4), [(0, 1), (2,)]),
                                        ((2, 3, 2), [(0, 1), (1, 2), (0, 2)]), ((3, 2), [()])])
def test_margins_agree_with_axis_sums(shape, keep):
    inv = I.margins(shape, keep)
    x = np.random.default_rng(4).integers(0, 10, size=shape)
    want = []
    for K in keep:
        axes = tuple(a for a in range(len(shape)) if a not in K)
        want.append(x.sum(axis=axes).ravel() if axes else x.ravel())
    np.testing.assert_array_equal(inv.of(x.ravel()), np.concatenate(want))


def test_margin_rank_formula_matches_numeric_rank():
    for shape, keep in [((3, 4, 2), [(0, 1), (1, 2), (0, 2)]), ((2, 2, 2, 3), [(0, 1, 2), (3,)]),
                        ((4, 4), [(0,), (1,), ()])]:
        inv = I.margins(shape, keep)
        assert inv.rank == np.linalg.matrix_rank(inv.matrix.toarray())


def test_feasible_points():
    inv = I.margins((3, 3), [(0,), (1,)])
    x = np.array([3, 0, 1, 2, 2, 0, 4, 1, 1])
    t = inv.of(x)
    for integer, nonneg in itertools.product([False, True], repeat=2):
        p = inv.feasible_point(t, integer=integer, nonnegative=nonneg)
        assert inv.satisfied_by(p, t)
        if integer:
            assert np.issubdtype(p.dtype, np.integer)
        if nonneg:
            assert np.all(p >= 0)
    g = I.groups([0, 1, 1, 0, 2], t=[5, 3, 0])
    p = g.feasible_point(integer=True, nonnegative=True)
    assert g.satisfied_by(p, atol=0) and np.all(p >= 0)
    c = I.counting([[0, 1], [1, 2]], 3)
    assert c.satisfied_by(c.feasible_point([1, 1], integer=True), [1, 1])


def test_infeasible_points_raise():
    c = I.counting([[0, 1], [1, 2], [0, 1, 2]], 3)
    with pytest.raises(InfeasibleInvariantError):
        c.feasible_point([1, 1, 5], nonnegative=True)  # x1 = 1 - x0 ... total must be <= 2
    with pytest.raises(InfeasibleInvariantError, match="integer"):
        Invariant(np.array([[2, 2, 4]])).feasible_point([3], integer=True)
    with pytest.raises(InfeasibleInvariantError, match="integers"):
        I.total(3).feasible_point([2.5], integer=True)
    with pytest.raises(InfeasibleInvariantError, match="negative"):
        I.total(3).feasible_point([-1], nonnegative=True)


def test_inconsistent_t_raises():
    C = np.array([[1, 1, 0], [1, 1, 0], [0, 1, 1]])
    Invariant(C, t=[2, 2, 5])  # redundant but consistent
    with pytest.raises(InfeasibleInvariantError, match="inconsistent"):
        Invariant(C, t=[2, 3, 5])
    with pytest.raises(InfeasibleInvariantError):
        I.margins((2, 2), [(0,), (1,)], t=[1, 2, 2, 2])  # row total 3 != column total 4


@pytest.mark.parametrize("bad,match", [
    (np.array([[1.0, np.nan]]), "non-finite"),
    (np.ones((2, 2, 2)), "2-dimensional"),
    (np.zeros((0, 3)), "at least one row"),
])
def test_bad_matrix(bad, match):
    with pytest.raises(ValueError, match=match):
        Invariant(bad)


def test_bad_inputs():
    inv = I.total(4)
    with pytest.raises(ValueError, match=r"shape \(1,\)"):
        inv.with_t([1, 2])
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4\)"):
        inv.project_null(np.ones(3))
    with pytest.raises(ValueError, match="non-finite"):
        inv.project_null([1, 2, np.inf, 0])
    with pytest.raises(ValueError, match="integer constraint"):
        Invariant([[0.5, 1.0]]).lattice_basis()
    with pytest.raises(ValueError, match="axis"):
        I.margins((2, 2), [(2,)])
    with pytest.raises(ValueError, match="outside"):
        I.counting([[0, 5]], 3)
    with pytest.raises(ValueError, match="positive integer"):
        I.total(0)
    with pytest.raises(ValueError, match="no invariant values"):
        inv.satisfied_by(np.ones(4))


def test_satisfied_by_stack_and_tolerance():
    inv = I.total(3, t=[1e9])
    y = np.array([[3e8, 3e8, 4e8], [3e8, 3e8, 4e8 + 1.0]])
    y[0] += np.array([1e-3, -1e-3, 0.0]) * 1e-3
    np.testing.assert_array_equal(inv.satisfied_by(y), [True, False])


def test_groups_projection_scales_linearly_without_dense_matrices():
    n = 300_000
    labels = np.random.default_rng(5).integers(0, 3000, size=n)
    inv = I.groups(labels)
    v = np.random.default_rng(6).standard_normal(n)
    pn = inv.project_null(v)
    sums = np.bincount(inv.group_codes, weights=pn)
    np.testing.assert_allclose(sums, 0, atol=1e-8)
    with pytest.raises(MemoryError):
        inv.null_basis()


def test_structured_invariants_pickle_with_their_lattice_moves():
    # an invariant goes to Dask workers by pickle: its short moves must not be a local closure
    import pickle
    for inv in (I.groups(np.array(list("aabcbbcda"))), I.margins((3, 4), [(0,), (1,)])):
        back = pickle.loads(pickle.dumps(inv))
        B = inv.lattice_basis()
        assert np.array_equal(back.lattice_basis(), B)
        assert not np.any(inv.matrix @ B)        # moves keep the totals
