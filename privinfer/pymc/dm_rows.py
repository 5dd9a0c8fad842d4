r"""Compiled per-row Dirichlet-multinomial terms of the walks' updates, one pass per row.

Row ``r`` has ``d`` cells with counts :math:`X_{r,i}`, log profile :math:`\theta_r` and
:math:`\alpha_r = \kappa\,\mathrm{softmax}(\theta_r)`.  :func:`rows_loglik` gives

.. math:: \ell_r = \sum_i \log\Gamma(X_{r,i} + \alpha_{r,i}) - \log\Gamma(\alpha_{r,i})

(:mod:`privinfer.pymc.walk_kernel`'s module docstring states the conditional it enters);
:func:`rows_score_info` its gradient with respect to the walk's increments and the Fisher-type
information, in category space (cells grouped by ``code``, ``K`` categories, tail sums
:math:`T_k = \sum_{c > k} P_{r,c}` of the category shares):

.. math:: g_k = \sum_{c > k} \sum_{c(i) = c} \big(a_i - p_i \textstyle\sum_j a_j\big),\quad
          a_i = \alpha_i\,(\psi(\alpha_i + X_i) - \psi(\alpha_i)),\qquad
          I_{kl} = n_r\,(T_{\max(k,l)} - T_k T_l),\quad n_r = N_r\frac{1 + \kappa}{N_r + \kappa},

and, for a second-order walk with spacing ``h``, :math:`M^\top g` and :math:`M^\top I M` with
:math:`M = \mathrm{diag}(h)\,C` (``C`` lower-triangular ones): the transpose's action is
``h`` times the vector, then reverse cumulative sums.  The same arithmetic as composing NumPy's
softmax, :func:`~privinfer._special.lgamma_ratio` and matrix products with one-hot matrices,
without the temporaries of the size of the cells and without a matrix product, whose BLAS
threads would compete with the other chains' processes.  Non-finite inputs (a sampler's trial
point) give non-finite outputs, as the NumPy composition does.
"""

from __future__ import annotations

import numba
import numpy as np

from .._special import digamma_diff_scalar, lgamma_ratio_scalar

__all__ = ["rows_loglik", "rows_score_info", "rows_score_tails", "rows_quadratic", "scatter_rows"]


@numba.njit(cache=True)
def _normalized(e, out):
    """``out = e / sum(e)`` (a row of exponentials: its softmax)."""
    s = 0.0
    for i in range(e.size):
        s += e[i]
    for i in range(e.size):
        out[i] = e[i] / s


@numba.njit(cache=True)
def _rows_loglik(X, e, kappa):
    R, d = e.shape
    out = np.empty(R)
    for r in range(R):
        s = 0.0
        for i in range(d):
            s += e[r, i]
        c = kappa / s
        acc = 0.0
        for i in range(d):
            acc += lgamma_ratio_scalar(c * e[r, i], X[r, i])
        out[r] = acc
    return out


@numba.njit(cache=True)
def _row_tails(X, e, kappa, code, K, p, gc, pc, grad):
    """One row's category-space gradient tails into ``grad`` ``(K-1,)`` and share tails
    :math:`T_k` into ``pc[1:]``; returns :math:`n_r` (module docstring).  ``p``, ``gc``, ``pc``:
    scratch of sizes ``d``, ``K``, ``K``."""
    _normalized(e, p)
    gc[:] = 0.0
    pc[:] = 0.0
    total_ag = 0.0
    N = 0.0
    for i in range(e.size):
        a = kappa * p[i]
        ag = a * digamma_diff_scalar(a, X[i])
        total_ag += ag
        gc[code[i]] += ag
        pc[code[i]] += p[i]
        N += X[i]
    for c in range(K):
        gc[c] -= pc[c] * total_ag
    g_tail = 0.0
    t_tail = 0.0
    for k in range(K - 2, -1, -1):        # tails: sum over categories c > k
        g_tail += gc[k + 1]
        t_tail += pc[k + 1]
        grad[k] = g_tail
        pc[k + 1] = t_tail                # pc[k + 1] now holds T_k
    return N * (1.0 + kappa) / (N + kappa)


@numba.njit(cache=True)
def _rows_score_info(X, e, kappa, code, K, order, spacing):
    R, d = e.shape
    K1 = K - 1
    grad = np.zeros((R, K1))
    info = np.zeros((R, K1, K1))
    p = np.empty(d)
    gc = np.empty(K)
    pc = np.empty(K)
    for r in range(R):
        n_eff = _row_tails(X[r], e[r], kappa, code, K, p, gc, pc, grad[r])
        for k in range(K1):
            Tk = pc[k + 1]
            for l in range(K1):
                Tl = pc[l + 1]
                info[r, k, l] = n_eff * (min(Tk, Tl) - Tk * Tl)
        if order == 2:
            _to_raw(grad[r], info[r], spacing)
    return grad, info


@numba.njit(cache=True)
def _rows_score_tails(X, e, kappa, code, K, order, spacing):
    R, d = e.shape
    K1 = K - 1
    grad = np.zeros((R, K1))
    tails = np.zeros((R, K1))
    n_eff = np.zeros(R)
    p = np.empty(d)
    gc = np.empty(K)
    pc = np.empty(K)
    for r in range(R):
        n_eff[r] = _row_tails(X[r], e[r], kappa, code, K, p, gc, pc, grad[r])
        tails[r] = pc[1:]
        if order == 2:
            _g_to_raw(grad[r], spacing)
    return grad, n_eff, tails


@numba.njit(cache=True)
def _g_to_raw(g, h):
    """In place: ``g -> M^T g`` (module docstring)."""
    for k in range(g.size):
        g[k] *= h[k]
    for k in range(g.size - 2, -1, -1):
        g[k] += g[k + 1]


@numba.njit(cache=True)
def _rows_quadratic(eta, members, at, grad, n_eff, tails, order, h):
    K1 = at.shape[1]
    total = 0.0
    for r in range(at.shape[0]):
        u = members[r]
        lin = 0.0
        cum = 0.0          # D_m: cumulative sum of v = M d
        slope = 0.0
        quad = 0.0
        dot = 0.0
        for k in range(K1):
            dk = eta[u, k] - at[r, k]
            lin += grad[r, k] * dk
            if order == 2:
                slope += dk
                v = h[k] * slope
            else:
                v = dk
            prev = cum * cum
            cum += v
            quad += tails[r, k] * (cum * cum - prev)
            dot += v * tails[r, k]
        total += lin - 0.5 * n_eff[r] * (quad - dot * dot)
    return total


@numba.njit(cache=True)
def _to_raw(g, Q, h):
    """In place: ``g -> M^T g`` and ``Q -> M^T Q M`` (module docstring)."""
    K1 = g.size
    _g_to_raw(g, h)
    for k in range(K1):
        for l in range(K1):
            Q[k, l] *= h[k] * h[l]
    for k in range(K1 - 2, -1, -1):
        for l in range(K1):
            Q[k, l] += Q[k + 1, l]
    for l in range(K1 - 2, -1, -1):
        for k in range(K1):
            Q[k, l] += Q[k, l + 1]


@numba.njit(cache=True)
def _scatter(out, at, v):
    for r in range(at.size):
        out[at[r]] += v[r]


def _exp_rows(theta):
    """``exp(theta - rowmax)``, NumPy's vectorized exponential (several times faster than a
    compiled loop's scalar one); non-finite rows stay non-finite."""
    theta = np.asarray(theta, dtype=float)
    with np.errstate(invalid="ignore", over="ignore"):
        return np.exp(theta - theta.max(axis=1, keepdims=True))


def rows_loglik(X, theta, kappa: float):
    r""":math:`\ell_r` of every row ``(R,)`` of ``X`` and ``theta`` ``(R, d)`` (module docstring)."""
    e = _exp_rows(theta)
    X = np.broadcast_to(np.asarray(X, dtype=float), e.shape)
    return _rows_loglik(X, e, float(kappa))


def rows_score_info(X, theta, kappa: float, code, K: int, order: int = 1, spacing=None):
    r"""The gradient ``(R, K-1)`` and information ``(R, K-1, K-1)`` of every row's :math:`\ell_r`
    with respect to its walk's increments (module docstring); ``code`` ``(d,)`` the cells'
    categories ``0..K-1``, ``order`` 2 with ``spacing`` ``(K-1,)`` (None: all 1) for the raw
    increments of a second-order walk."""
    e = _exp_rows(theta)
    X = np.broadcast_to(np.asarray(X, dtype=float), e.shape)
    h = np.ones(int(K) - 1) if spacing is None else np.asarray(spacing, dtype=float)
    return _rows_score_info(X, e, float(kappa), np.asarray(code, dtype=np.int64), int(K), int(order), h)


def rows_score_tails(X, theta, kappa: float, code, K: int, order: int = 1, spacing=None):
    r""":func:`rows_score_info` with the information in its factored form: the gradient
    ``(R, K-1)``, :math:`n_r` ``(R,)`` and the tail sums :math:`T_{r,k}` ``(R, K-1)``, from which
    :func:`rows_quadratic` evaluates the rows' quadratic forms in ``O(K)`` each instead of
    ``O(K^2)``."""
    e = _exp_rows(theta)
    X = np.broadcast_to(np.asarray(X, dtype=float), e.shape)
    h = np.ones(int(K) - 1) if spacing is None else np.asarray(spacing, dtype=float)
    return _rows_score_tails(X, e, float(kappa), np.asarray(code, dtype=np.int64), int(K), int(order), h)


def rows_quadratic(eta, at, grad, n_eff, tails, order: int = 1, spacing=None, members=None) -> float:
    r"""The rows' summed second-order expansions at the increments ``at`` ``(R, K-1)``,
    :math:`\sum_r g_r^\top d_r - \tfrac12 d_r^\top I_r d_r` with :math:`d_r = \eta_{u(r)} -
    a_r` (``members`` ``(R,)``: each row's unit, rows of ``eta`` ``(U, K-1)``; None: one row per
    unit), ``grad``, ``n_eff`` and ``tails`` those of :func:`rows_score_tails` there.  With
    :math:`v = M d` (``order`` 2, :math:`M = \mathrm{diag}(h)\,C`; ``order`` 1: :math:`v = d`) and
    :math:`D_m = \sum_{k \le m} v_k`, the information's form (module docstring) is

    .. math:: d^\top I d = n_r\Big(\sum_{k,l} v_k v_l T_{\max(k,l)} - (v^\top T)^2\Big)
              = n_r\Big(\sum_m T_m (D_m^2 - D_{m-1}^2) - (v^\top T)^2\Big),

    since the pairs with :math:`\max(k, l) = m` sum to :math:`D_m^2 - D_{m-1}^2`: one pass over
    the increments per row."""
    eta = np.ascontiguousarray(eta, dtype=float)
    at = np.ascontiguousarray(at, dtype=float)
    members = np.arange(at.shape[0]) if members is None else np.asarray(members, dtype=np.int64)
    h = np.ones(at.shape[1]) if spacing is None else np.asarray(spacing, dtype=float)
    return float(_rows_quadratic(eta, members, at, grad, n_eff, tails, int(order), h))


def scatter_rows(v, at, n: int):
    """Per-row values ``v`` ``(R, ...)`` summed into ``n`` bins by ``at`` ``(R,)`` (``np.add.at``'s
    result, without its per-element dispatch)."""
    v = np.ascontiguousarray(v, dtype=float)
    out = np.zeros((n,) + v.shape[1:])
    _scatter(out.reshape(n, -1), np.asarray(at, dtype=np.int64), v.reshape(v.shape[0], -1))
    return out
