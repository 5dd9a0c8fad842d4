"""Semi-adjacent parameter a(t) (Semi-DP paper, Def. 13, Thm 16, Examples 3 and 5) and the
Census zCDP analysis (Sec. 6.1)."""

import itertools

import pytest

from privinfer import accounting as acc


def _brute_force(domain, n, T, t, anchored):
    """Definition 13 over raw datasets (ordered n-tuples of records), Hamming distance."""
    Dt = [X for X in itertools.product(domain, repeat=n) if T(X) == t]
    ham = lambda X, Y: sum(a != b for a, b in zip(X, Y))  # noqa: E731
    best = 0
    for i in range(n):
        Di = sorted({X[i] for X in Dt})
        for x in Di:
            for y in Di:
                if anchored:
                    val = max(min(ham(X, Y) for Y in Dt if Y[i] == y) for X in Dt if X[i] == x)
                else:
                    val = min(ham(X, Y) for X in Dt if X[i] == x for Y in Dt if Y[i] == y)
                best = max(best, val)
    return best


def _hist(X, domain):
    return tuple(sum(r == v for r in X) for v in domain)


def test_example3():
    # D = {0,1}^3, T = number of ones: t = 2 -> a = 2; t = 0 -> a = 0
    assert acc.semi_adjacent_parameter(histograms=[[1, 2]]) == 2
    assert acc.semi_adjacent_parameter(histograms=[[3, 0]]) == 0
    for t, want in ((2, 2), (0, 0)):
        assert _brute_force((0, 1), 3, sum, t, anchored=True) == want
        assert _brute_force((0, 1), 3, sum, t, anchored=False) == want


def test_example5_two_by_two_margins():
    # 2x2 table with one-way margins; confidential data x11 = 1, x12 = 1, x21 = 1, x22 = 0:
    # turning an (1,1) record into (2,2) takes three changes (Example 5), a(t) = 3 = p + 1
    t = [[2, 1], [2, 1]]
    assert acc.semi_adjacent_parameter(t) == 3
    assert acc.semi_adjacent_parameter(t) <= acc.semi_adjacent_parameter(p=2)
    # literal infimum over both datasets (Definition 13 as written) gives 2 here
    assert acc.semi_adjacent_parameter(t, anchored=False) == 2


@pytest.mark.parametrize("margins", [((2, 1), (2, 1)), ((1, 2), (2, 1)), ((2, 2), (3, 1)), ((1, 1), (1, 1)),
                                     ((1, 2, 1), (3, 1))])
def test_exact_search_matches_dataset_brute_force(margins):
    # independent check of the histogram search against Definition 13 over raw datasets
    r, c = len(margins[0]), len(margins[1])
    domain = [(i, j) for i in range(r) for j in range(c)]
    n = sum(margins[0])

    def T(X):
        return (tuple(sum(rec[0] == i for rec in X) for i in range(r)),
                tuple(sum(rec[1] == j for rec in X) for j in range(c)))

    t = (tuple(margins[0]), tuple(margins[1]))
    for anchored in (True, False):
        want = _brute_force(domain, n, T, t, anchored)
        assert acc.semi_adjacent_parameter([list(m) for m in margins], anchored=anchored) == want


def test_theorem16_bound_on_three_way_tables():
    # p = 3 binary features with small margins: a(t) <= p + 1 = 4 for every t enumerated
    vals = []
    for m1, m2, m3 in itertools.product(range(4), repeat=3):
        vals.append(acc.semi_adjacent_parameter([[m1, 3 - m1], [m2, 3 - m2], [m3, 3 - m3]]))
    assert max(vals) <= acc.semi_adjacent_parameter(p=3) == 4
    # single feature (p = 1, e.g. state totals): a = 2 when two levels are present
    assert acc.semi_adjacent_parameter([[5, 3, 0]]) == 2 == acc.semi_adjacent_parameter(p=1)


def test_census_semidp_zcdp():
    # Sec. 6.1: state totals invariant -> a(t) = 2; rho 2.56 -> 4 * 2.56 = 10.24; at delta = 1e-10
    # the advertised eps is 17.91528 and the Semi-DP one 40.95057 (Lemma 40)
    a = acc.semi_adjacent_parameter(p=1)
    rho_semi = acc.zcdp_group(2.56, a)
    assert rho_semi == pytest.approx(10.24)
    assert acc.zcdp_to_approx_dp(2.56, 1e-10) == pytest.approx(17.91528, abs=5e-6)
    assert acc.zcdp_to_approx_dp(rho_semi, 1e-10) == pytest.approx(40.95057, abs=5e-6)


def test_bad_input():
    with pytest.raises(ValueError, match="exactly one"):
        acc.semi_adjacent_parameter([[1, 1]], p=1)
    with pytest.raises(ValueError, match="same total"):
        acc.semi_adjacent_parameter([[1, 1], [3, 0]])
    with pytest.raises(ValueError, match="positive integer"):
        acc.semi_adjacent_parameter(p=0)
    with pytest.raises(ValueError, match="nonnegative"):
        acc.semi_adjacent_parameter(histograms=[[1, -1]])
    with pytest.raises(ValueError, match="same number"):
        acc.semi_adjacent_parameter(histograms=[[1, 1], [3, 0]])
