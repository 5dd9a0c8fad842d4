r"""Privacy accounting: (eps, delta)-DP, rho-zCDP, mu-GDP and their conversions.

Functions here are plain numpy/scipy (no PyMC).  Notation follows the papers:

* Gaussian constant (Subspace DP full paper, Lemma 13; Dwork and Roth 2014):
  :math:`c_{\epsilon,\delta} = \epsilon^{-1}\,(1 + \sqrt{1 + \ln(1/\delta)})`; the Gaussian
  mechanism with noise sd :math:`c_{\epsilon,\delta}\,\Delta_2` is (eps, delta)-DP.
* rho-zCDP -> (eps, delta) (Bun and Steinke 2016, Prop. 1.3):
  :math:`\epsilon = \rho + 2\sqrt{\rho \ln(1/\delta)}`.  This is the conversion the Census
  Bureau used to advertise the 2020 release (Semi-DP paper, Sec. 7).
* (eps, 0)-DP -> rho-zCDP: :math:`\rho = \epsilon^2/2` (Bun and Steinke 2016, Prop. 1.4).
* Group privacy for zCDP: a rho-zCDP mechanism is :math:`k^2 \rho`-zCDP for groups of size
  k (Bun and Steinke 2016, Prop. 1.9).  Under Semi-DP the group size is the semi-adjacent
  parameter :math:`a(t)` (Semi-DP paper, Sec. 3-4).
* mu-GDP (Dong, Roth and Su 2022): tradeoff :math:`G_\mu`, and
  :math:`\delta(\epsilon) = \Phi(-\epsilon/\mu + \mu/2) - e^{\epsilon}\Phi(-\epsilon/\mu - \mu/2)`.
* Linear Gaussian mechanism :math:`y = Bx + N(0, \Sigma)` (Common Mechanism paper, Def. 2.3,
  Lemma 2.4): privacy cost matrix :math:`B^T\Sigma^{-1}B`; with :math:`c` its largest diagonal
  entry (the worst single-record change for unit-vector neighbours),
  :math:`\delta(\epsilon) = \Phi(\sqrt c/2 - \epsilon/\sqrt c) - e^\epsilon\Phi(-\sqrt c/2 - \epsilon/\sqrt c)`,
  which is the mu-GDP curve with :math:`\mu = \sqrt c`, and rho-zCDP with :math:`\rho = c/2`.
"""

from __future__ import annotations

import numpy as np
from scipy import optimize, special

from ._validation import check_delta, check_epsilon, check_positive

__all__ = [
    "gaussian_constant",
    "gaussian_sigma",
    "zcdp_to_approx_dp",
    "zcdp_to_approx_dp_tight",
    "pure_dp_to_zcdp",
    "gaussian_zcdp",
    "zcdp_group",
    "gdp_delta",
    "gdp_epsilon",
    "gdp_from_zcdp",
    "cost_matrix_mu",
    "cost_matrix_rho",
    "analytic_gaussian_delta",
    "analytic_gaussian_epsilon",
    "semi_adjacent_parameter",
    "semi_adjacent_bound_one_way",
    "one_way_margin_tables",
]


def gaussian_constant(epsilon: float, delta: float) -> float:
    r"""Lemma 13 (Subspace DP, full paper): :math:`c = (1 + \sqrt{1 + \ln(1/\delta)})/\epsilon`."""
    eps = check_epsilon(epsilon)
    d = check_delta(delta)
    return (1.0 + np.sqrt(1.0 + np.log(1.0 / d))) / eps


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    r"""Noise sd of the classic Gaussian mechanism: :math:`c_{\epsilon,\delta}\,\Delta_2`."""
    return gaussian_constant(epsilon, delta) * check_positive(sensitivity, "sensitivity")


def zcdp_to_approx_dp(rho: float, delta: float) -> float:
    r"""Bun-Steinke (2016, Prop. 1.3): rho-zCDP implies (eps, delta)-DP with
    :math:`\epsilon = \rho + 2\sqrt{\rho\ln(1/\delta)}`."""
    r = check_positive(rho, "rho")
    d = check_delta(delta)
    return r + 2.0 * np.sqrt(r * np.log(1.0 / d))


def zcdp_to_approx_dp_tight(rho: float, delta: float) -> float:
    r"""Tighter conversion (Canonne, Kamath and Steinke 2020, Prop. 12):

    .. math:: \epsilon = \inf_{\alpha > 1} \rho\alpha + \frac{\ln(1/(\alpha\delta)) +
              (\alpha-1)\ln(1-1/\alpha)}{\alpha - 1}.
    """
    r = check_positive(rho, "rho")
    d = check_delta(delta)

    def f(log_am1):
        a = 1.0 + np.exp(log_am1)
        return r * a + (np.log(1.0 / (a * d)) + (a - 1.0) * np.log1p(-1.0 / a)) / (a - 1.0)

    res = optimize.minimize_scalar(f, bounds=(-20.0, 20.0), method="bounded", options={"xatol": 1e-10})
    return float(max(0.0, min(res.fun, zcdp_to_approx_dp(r, d))))


def pure_dp_to_zcdp(epsilon: float) -> float:
    r"""(eps, 0)-DP implies :math:`(\epsilon^2/2)`-zCDP (Bun-Steinke 2016, Prop. 1.4)."""
    eps = check_epsilon(epsilon)
    return 0.5 * eps * eps


def gaussian_zcdp(sigma: float, sensitivity: float) -> float:
    r"""Gaussian noise sd sigma on an l2-sensitivity Delta query is
    :math:`\Delta^2/(2\sigma^2)`-zCDP."""
    s = check_positive(sigma, "sigma")
    D = check_positive(sensitivity, "sensitivity")
    return D * D / (2.0 * s * s)


def zcdp_group(rho: float, k: float) -> float:
    r"""Group privacy for zCDP: :math:`k^2\rho` for groups of size k (Bun-Steinke, Prop. 1.9).

    Under Semi-DP, ``k`` is the semi-adjacent parameter a(t): e.g. the 2020 Census budget
    rho = 2.56 becomes 10.24 when a(t) = 2.
    """
    r = check_positive(rho, "rho")
    kk = check_positive(k, "group size")
    return kk * kk * r


def gdp_delta(mu: float, epsilon) -> np.ndarray | float:
    r"""mu-GDP -> delta(eps): :math:`\Phi(-\epsilon/\mu+\mu/2) - e^\epsilon\Phi(-\epsilon/\mu-\mu/2)`.

    Evaluated in log space so large ``eps`` does not overflow.
    """
    m = check_positive(mu, "mu")
    eps = np.asarray(epsilon, dtype=float)
    if np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ValueError("epsilon must be finite and >= 0")
    a = special.log_ndtr(-eps / m + m / 2.0)
    b = eps + special.log_ndtr(-eps / m - m / 2.0)
    out = np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
    return float(out) if out.ndim == 0 else out


def gdp_epsilon(mu: float, delta: float) -> float:
    """Smallest eps with :func:`gdp_delta` (mu, eps) <= delta (root of a decreasing curve)."""
    m = check_positive(mu, "mu")
    d = check_delta(delta)
    if gdp_delta(m, 0.0) <= d:
        return 0.0
    hi = 1.0
    while gdp_delta(m, hi) > d:
        hi *= 2.0
    return float(optimize.brentq(lambda e: gdp_delta(m, e) - d, 0.0, hi, xtol=1e-12, rtol=1e-12))


def gdp_from_zcdp(rho: float) -> float:
    r"""A Gaussian mechanism that is rho-zCDP is mu-GDP with :math:`\mu = \sqrt{2\rho}`."""
    return float(np.sqrt(2.0 * check_positive(rho, "rho")))


def _cost_c(cost) -> float:
    K = np.asarray(cost, dtype=float)
    if K.ndim != 2 or K.shape[0] != K.shape[1]:
        raise ValueError(f"privacy cost matrix must be square, got shape {K.shape}")
    if not np.all(np.isfinite(K)):
        raise ValueError("privacy cost matrix contains non-finite entries")
    c = float(np.max(np.diag(K)))
    if c <= 0:
        raise ValueError("privacy cost matrix has no positive diagonal entry (the mechanism releases nothing)")
    return c


def cost_matrix_mu(cost) -> float:
    r""":math:`\mu = \sqrt{\max_i K_{ii}}` for privacy cost matrix K (Common Mechanism, Lemma 2.4)."""
    return float(np.sqrt(_cost_c(cost)))


def cost_matrix_rho(cost) -> float:
    r""":math:`\rho = \max_i K_{ii}/2` (Common Mechanism, Sec. 2)."""
    return 0.5 * _cost_c(cost)


def analytic_gaussian_delta(cost, epsilon) -> np.ndarray | float:
    r"""Lemma 2.4 of the Common Mechanism paper (Balle-Wang analytic Gaussian):
    :math:`\delta(\epsilon) = \Phi(\sqrt c/2 - \epsilon/\sqrt c) - e^\epsilon\Phi(-\sqrt c/2 - \epsilon/\sqrt c)`
    with :math:`c = \max_i K_{ii}` of the privacy cost matrix ``cost``."""
    return gdp_delta(cost_matrix_mu(cost), epsilon)


def analytic_gaussian_epsilon(cost, delta: float) -> float:
    """Inverse of :func:`analytic_gaussian_delta` in eps."""
    return gdp_epsilon(cost_matrix_mu(cost), delta)




# ----------------------------------------------------------------------------------------
# Semi-adjacent parameter a(t) (Semi-DP paper, Sec. 3.3-3.4)
# ----------------------------------------------------------------------------------------


def semi_adjacent_bound_one_way(p: int) -> int:
    r"""Theorem 16 (Semi-DP paper): with the one-way margins of a p-way table invariant and the
    Hamming metric, :math:`a(t) \le p + 1` (attained when the target record shares no feature
    level with any present record, Example 5).  For a single feature (e.g. state population
    totals, p = 1) this gives a(t) = 2, the value used for the 2020 Census (Sec. 6.1)."""
    if isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"p (number of features) must be a positive integer, got {p!r}")
    return int(p) + 1


def one_way_margin_tables(margins) -> np.ndarray:
    """All nonnegative integer p-way tables with the given one-way margins.

    ``margins`` is a sequence of p count vectors (the level counts of each feature; all must
    sum to the same n).  Returns an array of shape ``(k, n_1, ..., n_p)`` listing every table
    (exhaustive search; meant for the small examples where a(t) is computed exactly).
    """
    ms = [np.asarray(m) for m in margins]
    if len(ms) == 0:
        raise ValueError("margins must hold at least one count vector")
    for m in ms:
        if m.ndim != 1 or m.size == 0 or m.dtype.kind not in "iu" and not np.all(m == np.round(m)):
            raise ValueError("each margin must be a non-empty 1-d vector of integer counts")
        if np.any(m < 0):
            raise ValueError("margins must be nonnegative counts")
    ms = [m.astype(np.int64) for m in ms]
    n = int(ms[0].sum())
    if any(int(m.sum()) != n for m in ms):
        raise ValueError("the one-way margins must all sum to the same total n (infeasible invariant)")
    shape = tuple(len(m) for m in ms)
    cells = list(np.ndindex(*shape))
    out = []
    table = np.zeros(shape, dtype=np.int64)
    rem = [m.copy() for m in ms]

    def rec(ci, left):
        # place counts cell by cell in lexicographic order with running remaining margins
        if left == 0:
            out.append(table.copy())
            return
        if ci == len(cells):
            return
        cell = cells[ci]
        cap = min(int(rem[j][cell[j]]) for j in range(len(shape)))
        for v in range(cap, -1, -1):
            table[cell] = v
            for j in range(len(shape)):
                rem[j][cell[j]] -= v
            rec(ci + 1, left - v)
            for j in range(len(shape)):
                rem[j][cell[j]] += v
        table[cell] = 0

    rec(0, n)
    if not out:
        raise ValueError("no table has these one-way margins (infeasible invariant)")
    return np.asarray(out)


def _semi_adjacent_from_histograms(H: np.ndarray, anchored: bool = True) -> int:
    r"""Exact a(t) (Hamming metric) for a statistic that depends on the data only through
    its histogram; ``H`` lists the histograms of D_t (one per row).

    Because D_t is closed under permuting records, D_t^i is the same for every i: the cells
    with a positive count in some row of H.  Two datasets X (X_i = x) and Y (Y_i = y),
    x != y, with histograms h, g can be aligned (a maximum matching of equal records among
    the other n - 1) so that they disagree in

    .. math:: D(h, x; g, y) = 1 + (n-1) - \sum_c \min(h_c - [c=x],\, g_c - [c=y])

    records, and no alignment does better.  Pairs x = y contribute 0.

    ``anchored=True`` (default): the worst case over the confidential dataset X* in D_t of
    the fewest changes to X* that turn one of its records x into any y in D_t^i while keeping
    the invariant, :math:`\max_{h}\max_{x: h_x\ge1}\max_{y}\min_{g: g_y\ge1} D(h,x;g,y)`.
    This is the reasoning of the proof of Theorem 16 and of Example 5 (a(t) = 3 for a 2x2
    table whose confidential data has x22 = 0), and the value the paper uses (Sec. 5.2).

    ``anchored=False``: Definition 13 read literally, with the infimum over both X and Y:
    :math:`\max_{x,y}\min_{h: h_x\ge1,\, g: g_y\ge1} D(h,x;g,y)`.  This can be smaller
    (for a 2x2 table with one-way margins it is 2 whenever D_t has two tables, since
    X may be chosen to hold a record at y already).
    """
    H = np.asarray(H, dtype=np.int64).reshape(len(H), -1)
    n = int(H[0].sum())
    support = np.flatnonzero(H.max(axis=0) > 0)
    best = 0
    for x in support:
        hx = H[H[:, x] >= 1].copy()
        hx[:, x] -= 1
        for y in support:
            if x == y:
                continue
            gy = H[H[:, y] >= 1].copy()
            gy[:, y] -= 1
            overlap = np.minimum(hx[:, None, :], gy[None, :, :]).sum(axis=-1)
            # rows: confidential histogram h; columns: candidate g
            if anchored:
                d = 1 + (n - 1) - int(overlap.max(axis=1).min())
            else:
                d = 1 + (n - 1) - int(overlap.max())
            best = max(best, d)
    return best


def semi_adjacent_parameter(t=None, *, p=None, histograms=None, anchored: bool = True) -> int:
    r"""Semi-adjacent parameter a(t) (Semi-DP paper, Definition 13; Hamming metric).

    .. math:: a(t) = \sup_i \sup_{x,y \in D_t^i} \inf\{d(X,Y): X,Y\in D_t, X_i=x, Y_i=y\}

    Exactly one of

    ``p``
        number of features of a table whose one-way margins are invariant: returns the
        Theorem 16 bound ``p + 1`` (the worst case over t; e.g. ``p=1`` -> 2, the state
        population totals of the 2020 Census, Sec. 6.1).
    ``t``
        the one-way margins themselves (sequence of p count vectors): exact a(t) by
        enumerating every table with these margins (small examples only; Example 5).
    ``histograms``
        an explicit list of the histograms making up D_t (rows; any statistic that depends on
        the data only through its histogram): exact a(t), e.g. Example 3 where
        T(X) = number of ones among three binary records.

    ``anchored`` selects between the paper's worked reading (worst case over the
    confidential dataset, default; reproduces Examples 3 and 5 and Theorem 16) and the
    literal infimum over both datasets of Definition 13 (see
    :func:`_semi_adjacent_from_histograms` for both searches).
    """
    given = [v is not None for v in (t, p, histograms)]
    if sum(given) != 1:
        raise ValueError("give exactly one of t (one-way margins), p (number of features) or histograms")
    if p is not None:
        return semi_adjacent_bound_one_way(p)
    if t is not None:
        return _semi_adjacent_from_histograms(one_way_margin_tables(t), anchored)
    H = np.asarray(histograms)
    if H.ndim < 2 or H.shape[0] == 0:
        raise ValueError("histograms must be a non-empty 2-d array (one histogram per row)")
    if not np.all(H == np.round(H)) or np.any(H < 0):
        raise ValueError("histograms must hold nonnegative integer counts")
    H = H.reshape(H.shape[0], -1)
    if len(set(H.sum(axis=1).tolist())) != 1:
        raise ValueError("every histogram in D_t must have the same number of records n")
    return _semi_adjacent_from_histograms(H, anchored)
