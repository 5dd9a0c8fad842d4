r"""The collapsed pair move of :mod:`privinfer.pymc.walk_collapse`, compiled (Numba).

The same move as :func:`~privinfer.pymc.walk_collapse.collapsed_update` (read its module
docstring first): a t proposal of the pair's walk around the Gauss--Newton mode of its law with
the cells integrated out in a Gaussian approximation, the cells drawn given the new walk, one
exact Metropolis--Hastings test.  Two things differ, both in how the proposal is computed, so
the move stays exact (its test uses the exact target and the proposal's own probabilities):

The Gaussian algebra in the cells.  With :math:`D = \mathrm{diag}(1/(2w_r))`, the rows' covariance
:math:`S = B V B^\top + D` and :math:`P = B^\top D^{-1} B`, Woodbury's identity gives everything
the move reads through the pair's :math:`2d \times 2d` matrix :math:`M = V^{-1} + P`:

.. math:: B^\top S^{-1}(z - B\mu) = V^{-1} M^{-1} e,\quad
          B^\top S^{-1} B = V^{-1} - V^{-1} M^{-1} V^{-1},\quad
          \mu + V B^\top S^{-1}(z - B\mu) = \mu + M^{-1} e,\quad
          V - \mathrm{diag}(V B^\top S^{-1} B V) = \mathrm{diag}(M^{-1}),

:math:`e = B^\top D^{-1}(z - B\mu)`.  When every row holds one cell of a unit or one cell of
each (a tract's, its county's and the state's sex x age cells: cell ``i`` of one unit shares
rows only with cell ``i`` of the other), :math:`M` is a direct sum of 1 x 1 and 2 x 2 blocks
and the algebra costs :math:`O(d)`; a pair whose rows pair one cell with two others is handed
back to the reference implementation (the kernel returns its index).

The cells' proposal.  Instead of the tree sampler, each unit's cells given its total are drawn
one after the other, cell ``i`` from its separable weight times a Gaussian approximation of the
law of the sum of the cells still to come,

.. math:: q(x_i \mid R) \propto e^{\ell_i(x_i)}\,
          \exp\Big(-\frac{(R - x_i - m_{>i})^2}{2 s^2_{>i}}\Big),

:math:`R` the total left, :math:`m_{>i}, s^2_{>i}` the sums of the later cells' means and
variances under their own normalized weights; the last two cells exactly,
:math:`q(x_{d-1} \mid R) \propto e^{\ell_{d-1}(x_{d-1}) + \ell_d(R - x_{d-1})}`, the last one the
remainder.  Every factor is normalized over the values that keep the later cells inside their
windows, so :math:`\log q` is the sum of the factors' logs, computed by the same pass that draws
(:func:`_cells`).  The cells go in increasing order of their variance (the skewed small cells
first, while the remainder is a sum of many).  Each cell's weight :math:`\ell_i(v) =
\log\Gamma(v + \alpha_i) - \log\Gamma(v + 1) + b_i v - W_i v^2` is tabulated on its window by
its differences :math:`\log(v + \alpha_i) - \log(v + 1) + b_i - W_i(2v + 1)`, from its mode (by
ascent from the Gaussian approximation's mean) out to where it falls :data:`WINDOW_NATS` below.
Cost: about :math:`d` windows of the cells' posterior width, against four tree samplers' FFT
tables per move.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["compiled_collapsed_update", "collapsed_mode", "WINDOW_NATS"]

#: A cell's window ends where its weight falls this far (in nats) below its mode's.
WINDOW_NATS = 25.0
#: Floor of the remainder's variance in the cells' proposal (a sum of cells of one value each).
_V_REST = 0.25


@numba.njit(cache=True)
def _seed(seed):
    np.random.seed(seed)


@numba.njit(cache=True)
def _chol(H, L):
    """Cholesky factor of ``H`` into ``L`` (lower); False when not positive definite."""
    n = H.shape[0]
    for i in range(n):
        for j in range(i + 1):
            s = H[i, j]
            for k in range(j):
                s -= L[i, k] * L[j, k]
            if i == j:
                if not s > 0.0:
                    return False
                L[i, i] = math.sqrt(s)
            else:
                L[i, j] = s / L[j, j]
        for j in range(i + 1, n):
            L[i, j] = 0.0
    return True


@numba.njit(cache=True)
def _chol_solve(L, b, out):
    n = b.size
    for i in range(n):
        s = b[i]
        for k in range(i):
            s -= L[i, k] * out[k]
        out[i] = s / L[i, i]
    for i in range(n - 1, -1, -1):
        s = out[i]
        for k in range(i + 1, n):
            s -= L[k, i] * out[k]
        out[i] = s / L[i, i]


@numba.njit(cache=True)
def _softmax(theta, out):
    top = theta[0]
    for i in range(1, theta.size):
        top = max(top, theta[i])
    s = 0.0
    for i in range(theta.size):
        out[i] = math.exp(theta[i] - top)
        s += out[i]
    for i in range(theta.size):
        out[i] /= s


@numba.njit(cache=True)
def _profile(t, A, base_u, base_v, m, N, p, J, th, abar):
    """Shares ``p`` ``(2d,)`` and the means' Jacobian ``J`` ``(2d, K-1)`` at ``t``."""
    d, K1 = A.shape
    for sgn, off, bse in ((1.0, 0, base_u), (-1.0, d, base_v)):
        for i in range(d):
            s = bse[i]
            for k in range(K1):
                s += A[i, k] * (m[k] + sgn * t[k])
            th[i] = s
        _softmax(th, p[off:off + d])
        for k in range(K1):
            s = 0.0
            for i in range(d):
                s += p[off + i] * A[i, k]
            abar[k] = s
        n = N[0] if off == 0 else N[1]
        for i in range(d):
            for k in range(K1):
                J[off + i, k] = sgn * n * p[off + i] * (A[i, k] - abar[k])


@numba.njit(cache=True)
def _gaussian(t, A, base_u, base_v, m, N, kappa, v_floor, nR, ra, rb, zr, w2, Pd, Po, partner,
              p, J, mu, V, y, minv_d, minv_o, e, th, abar):
    """The Gaussian approximation at ``t`` (module docstring): shares, Jacobian, means ``mu``,
    variances ``V``, ``e``, ``y = M^{-1} e`` and ``M^{-1}``'s diagonal and partner entries."""
    d = A.shape[0]
    _profile(t, A, base_u, base_v, m, N, p, J, th, abar)
    for i in range(2 * d):
        n = N[0] if i < d else N[1]
        f = (n + kappa) / (1.0 + kappa)
        mu[i] = n * p[i]
        V[i] = max(n * p[i] * (1.0 - p[i]) * f, v_floor)
        e[i] = 0.0
    for k in range(nR):
        a, b = ra[k], rb[k]
        r = zr[k]
        if a >= 0:
            r -= mu[a]
        if b >= 0:
            r -= mu[b]
        r *= w2[k]
        if a >= 0:
            e[a] += r
        if b >= 0:
            e[b] += r
    for i in range(2 * d):
        j = partner[i]
        if j < 0:
            minv_d[i] = 1.0 / (1.0 / V[i] + Pd[i])
            minv_o[i] = 0.0
            y[i] = minv_d[i] * e[i]
        elif j > i:
            m11 = 1.0 / V[i] + Pd[i]
            m22 = 1.0 / V[j] + Pd[j]
            m12 = Po[i]
            det = m11 * m22 - m12 * m12
            minv_d[i] = m22 / det
            minv_d[j] = m11 / det
            minv_o[i] = -m12 / det
            minv_o[j] = -m12 / det
            y[i] = minv_d[i] * e[i] + minv_o[i] * e[j]
            y[j] = minv_o[j] * e[i] + minv_d[j] * e[j]


@numba.njit(cache=True)
def _mode(A, base_u, base_v, m, mraw, pu, pv, N, kappa, v_floor, nR, ra, rb, zr, w2, Pd, Po, partner, max_newton,
          max_step, tol, wk):
    """Gauss--Newton mode ``t`` and precision ``H`` of the pair's walk, from 0 (as the
    reference's :meth:`~privinfer.pymc.walk_collapse._Pair.mode`)."""
    p, J, mu, V, y, minv_d, minv_o, e, th, abar, G, step, H, L, q = wk
    d, K1 = A.shape
    t = np.zeros(K1)
    for k in range(K1):
        for j in range(K1):
            H[k, j] = 0.0
        H[k, k] = pu[k] + pv[k]
    for _ in range(max_newton):
        _gaussian(t, A, base_u, base_v, m, N, kappa, v_floor, nR, ra, rb, zr, w2, Pd, Po, partner,
                  p, J, mu, V, y, minv_d, minv_o, e, th, abar)
        for k in range(K1):
            G[k] = -(mraw[k] + t[k]) * pu[k] + (mraw[k] - t[k]) * pv[k]
            for j in range(K1):
                H[k, j] = 0.0
            H[k, k] = pu[k] + pv[k]
        for i in range(2 * d):
            g = y[i] / V[i]                                   # B' S^-1 (z - B mu) = V^-1 M^-1 e
            qd = 1.0 / V[i] - minv_d[i] / (V[i] * V[i])      # B' S^-1 B = V^-1 - V^-1 M^-1 V^-1
            jp = partner[i]
            qo = 0.0 if jp < 0 else -minv_o[i] / (V[i] * V[jp])
            for k in range(K1):
                G[k] += J[i, k] * g
                q[k] = qd * J[i, k] + (qo * J[jp, k] if jp >= 0 else 0.0)
            for k in range(K1):
                for j in range(K1):
                    H[k, j] += J[i, k] * q[j]
        if not _chol(H, L):
            break
        _chol_solve(L, G, step)
        dec = 0.0
        for k in range(K1):
            dec += G[k] * step[k]
        if not np.isfinite(dec):
            break
        if dec > max_step * max_step:
            for k in range(K1):
                step[k] *= max_step / math.sqrt(dec)
        for k in range(K1):
            t[k] += step[k]
        if dec < tol:
            break
    return t


@numba.njit(cache=True)
def _iround(v):
    if not np.isfinite(v) or v < 0.0:
        return 0
    return int(math.floor(min(v, 9.0e18) + 0.5))


@numba.njit(cache=True)
def _window(alpha, b, W, N, start, nats):
    """A cell's window ``(lo, hi, mode)``: ascent from ``start`` to the weight's mode, then out
    to where it falls ``nats`` below (module docstring)."""
    v = min(max(start, 0), N)
    while v < N and math.log(v + alpha) - math.log(v + 1.0) + b - W * (2.0 * v + 1.0) > 0.0:
        v += 1
    while v > 0 and math.log(v - 1.0 + alpha) - math.log(v) + b - W * (2.0 * v - 1.0) < 0.0:
        v -= 1
    mode = v
    hi, val = mode, 0.0
    while hi < N:
        val += math.log(hi + alpha) - math.log(hi + 1.0) + b - W * (2.0 * hi + 1.0)
        if val < -nats:
            break
        hi += 1
    lo, val = mode, 0.0
    while lo > 0:
        val -= math.log(lo - 1.0 + alpha) - math.log(lo) + b - W * (2.0 * lo - 1.0)
        if val < -nats:
            break
        lo -= 1
    return lo, hi, mode


@numba.njit(cache=True)
def _tables(alpha, b, W, N, start, nats):
    """Every cell's window and log weight table (relative to its mode): ``lo, hi, ptr, tab`` and
    the normalized weights' means and variances."""
    d = alpha.size
    lo = np.empty(d, dtype=np.int64)
    hi = np.empty(d, dtype=np.int64)
    md = np.empty(d, dtype=np.int64)
    ptr = np.zeros(d + 1, dtype=np.int64)
    for i in range(d):
        lo[i], hi[i], md[i] = _window(alpha[i], b[i], W[i], N, start[i], nats)
        ptr[i + 1] = ptr[i] + hi[i] - lo[i] + 1
    tab = np.empty(ptr[d])
    mean = np.empty(d)
    var = np.empty(d)
    for i in range(d):
        a, bb, ww = alpha[i], b[i], W[i]
        o = ptr[i] - lo[i]
        tab[o + md[i]] = 0.0
        val = 0.0
        for v in range(md[i], hi[i]):
            val += math.log(v + a) - math.log(v + 1.0) + bb - ww * (2.0 * v + 1.0)
            tab[o + v + 1] = val
        val = 0.0
        for v in range(md[i], lo[i], -1):
            val -= math.log(v - 1.0 + a) - math.log(v) + bb - ww * (2.0 * v - 1.0)
            tab[o + v - 1] = val
        z = s1 = s2 = 0.0
        for v in range(lo[i], hi[i] + 1):
            pw = math.exp(tab[o + v])
            z += pw
            s1 += pw * v
            s2 += pw * v * v
        mean[i] = s1 / z
        var[i] = max(s2 / z - mean[i] * mean[i], 0.0)
    return lo, hi, ptr, tab, mean, var


@numba.njit(cache=True)
def _cells(alpha, b, W, N, start, nats, x, draw):
    """The unit's cells given their total ``N`` (module docstring): drawn into ``x`` when
    ``draw``, else ``x`` scored.  Returns ``log q`` (-inf: ``x`` outside the proposal's
    support, or no draw possible)."""
    d = alpha.size
    if N < 0:
        return -np.inf
    lo, hi, ptr, tab, mean, var = _tables(alpha, b, W, N, start, nats)
    order = np.argsort(var, kind="mergesort")
    msuf = np.zeros(d + 1)
    vsuf = np.zeros(d + 1)
    losuf = np.zeros(d + 1, dtype=np.int64)
    hisuf = np.zeros(d + 1, dtype=np.int64)
    for k in range(d - 1, -1, -1):
        i = order[k]
        msuf[k] = msuf[k + 1] + mean[i]
        vsuf[k] = vsuf[k + 1] + var[i]
        losuf[k] = losuf[k + 1] + lo[i]
        hisuf[k] = hisuf[k + 1] + hi[i]
    R = N
    lq = 0.0
    buf = np.empty(max(ptr[d], 1))
    for k in range(d):
        i = order[k]
        oi = ptr[i] - lo[i]
        if k == d - 1:               # the last cell: the remainder
            if R < lo[i] or R > hi[i]:
                return -np.inf
            if draw:
                x[i] = R
            elif x[i] != R:
                return -np.inf
            break
        vmin = max(lo[i], R - hisuf[k + 1])
        vmax = min(hi[i], R - losuf[k + 1])
        if vmin > vmax:
            return -np.inf
        n = vmax - vmin + 1
        top = -np.inf
        if k == d - 2:               # the last two cells exactly
            j = order[k + 1]
            oj = ptr[j] - lo[j]
            for c in range(n):
                v = vmin + c
                buf[c] = tab[oi + v] + tab[oj + R - v]
                top = max(top, buf[c])
        else:
            m_rest, v_rest = msuf[k + 1], max(vsuf[k + 1], _V_REST)
            for c in range(n):
                v = vmin + c
                r = R - v - m_rest
                buf[c] = tab[oi + v] - 0.5 * r * r / v_rest
                top = max(top, buf[c])
        z = 0.0
        for c in range(n):
            buf[c] = math.exp(buf[c] - top)
            z += buf[c]
        if draw:
            u = np.random.random() * z
            c = 0
            acc = buf[0]
            while acc < u and c < n - 1:
                c += 1
                acc += buf[c]
            x[i] = vmin + c
        elif x[i] < vmin or x[i] > vmax:
            return -np.inf
        c = x[i] - vmin
        if buf[c] <= 0.0:
            return -np.inf
        lq += math.log(buf[c] / z)
        R -= x[i]
    return lq


@numba.njit(cache=True)
def _unit_laws(t, A, base_u, base_v, m, N, kappa, v_floor, nR, ra, rb, zr, w2, w1, Pd, Po, partner, wk,
               second, nats, xu_out, xv_out):
    """The cells' proposal at ``t`` (reference: :meth:`~privinfer.pymc.walk_collapse._Pair.samplers`):
    the second unit's cells from their approximate marginals, then the first's given them, from
    their exact rows.  ``second`` True: draw both into ``xu_out, xv_out``; False: score
    ``xu_out, xv_out``.  Returns ``log q``."""
    p, J, mu, V, y, minv_d, minv_o, e, th, abar, _, _, _, _, _ = wk
    d = A.shape[0]
    _gaussian(t, A, base_u, base_v, m, N, kappa, v_floor, nR, ra, rb, zr, w2, Pd, Po, partner,
              p, J, mu, V, y, minv_d, minv_o, e, th, abar)
    alpha = np.empty(d)
    b = np.empty(d)
    W = np.empty(d)
    start = np.empty(d, dtype=np.int64)
    lq = 0.0
    for unit in range(2):
        off = d if unit == 0 else 0      # the second unit (v) first
        n = np.int64(N[1] if unit == 0 else N[0])
        tilt = math.log(max(n, 0.5) / (max(n, 0.5) + kappa))
        if unit == 0:
            for i in range(d):
                c = off + i
                post = mu[c] + y[c]
                vr = min(max(minv_d[c], 1e-12), V[c])
                lam = max(1.0 / vr - 1.0 / V[c], 1e-12)
                alpha[i] = kappa * p[c]
                W[i] = 0.5 * lam
                b[i] = tilt + (post / vr - mu[c] / V[c])
                start[i] = _iround(post)
        else:
            for i in range(d):
                alpha[i] = kappa * p[i]
                W[i] = 0.0
                b[i] = tilt
                start[i] = _iround(mu[i] + y[i])
            for k in range(nR):             # the exact rows of u's cells, v's new cells held
                a = ra[k]
                if a < 0:
                    continue
                c = zr[k] - (xv_out[rb[k] - d] if rb[k] >= 0 else 0.0)
                W[a] += w1[k]
                b[a] += 2.0 * w1[k] * c
        target = xv_out if unit == 0 else xu_out
        lq += _cells(alpha, b, W, n, start, nats, target, second)
        if not np.isfinite(lq):
            return -np.inf
    return lq


@numba.njit(cache=True)
def _log_target(t, A, base_u, base_v, m, mraw, pu, pv, kappa, nR, ra, rb, zr, w1, xu, xv, p, th):
    d, K1 = A.shape
    out = 0.0
    for k in range(K1):
        out -= 0.5 * ((mraw[k] + t[k]) ** 2 * pu[k] + (mraw[k] - t[k]) ** 2 * pv[k])
    for off, sgn, bse, xx in ((0, 1.0, base_u, xu), (d, -1.0, base_v, xv)):
        for i in range(d):
            s = bse[i]
            for k in range(K1):
                s += A[i, k] * (m[k] + sgn * t[k])
            th[i] = s
        _softmax(th, p[off:off + d])
        for i in range(d):
            a = kappa * p[off + i]
            out += math.lgamma(xx[i] + a) - math.lgamma(a) - math.lgamma(xx[i] + 1.0)
    for k in range(nR):
        r = zr[k]
        if ra[k] >= 0:
            r -= xu[ra[k]]
        if rb[k] >= 0:
            r -= xv[rb[k] - d]
        out -= w1[k] * r * r
    return out


@numba.njit(cache=True)
def _t_logpdf(v, mu, L, nu, z):
    n = v.size
    for i in range(n):                    # z = L' (v - mu)
        s = 0.0
        for k in range(i, n):
            s += L[k, i] * (v[k] - mu[k])
        z[i] = s
    q = 0.0
    for i in range(n):
        q += z[i] * z[i]
    return -0.5 * (nu + n) * math.log1p(q / nu)


@numba.njit(cache=True)
def _pair_rows(u, v, grid, tptr, trows, tpos, w, x, res, slot, rid, ra, rb, zr, w1, w2, Pd, Po, partner, xu, xv):
    """The pair's rows (``rid``; each with its cell of ``u`` in ``ra``, 0..d-1, and of ``v`` in
    ``rb``, d..2d-1, -1 none), their held values ``zr`` (the row less the held cells) and weights,
    the diagonal ``Pd`` and partner entries ``Po`` of :math:`P = B^\\top D^{-1} B`, the cells'
    ``partner`` and their current values ``xu, xv``.  Returns ``(nR, ok)``, ``ok`` False when a
    cell shares rows with two cells of the other unit."""
    d = grid.shape[1]
    nR = 0
    for unit, off in ((u, 0), (v, d)):
        for e in range(tptr[unit], tptr[unit + 1]):
            r = trows[e]
            if slot[r] < 0:
                slot[r] = nR
                rid[nR] = r
                ra[nR] = -1
                rb[nR] = -1
                nR += 1
            if off == 0:
                ra[slot[r]] = tpos[e]
            else:
                rb[slot[r]] = tpos[e] + d
    for k in range(nR):
        slot[rid[k]] = -1
    for i in range(2 * d):
        Pd[i] = 0.0
        Po[i] = 0.0
        partner[i] = -1
    ok = True
    for i in range(d):
        xu[i] = x[grid[u, i]]
        xv[i] = x[grid[v, i]]
    for k in range(nR):
        r = rid[k]
        a, b = ra[k], rb[k]
        w1[k] = w[r]
        w2[k] = 2.0 * w[r]
        zr[k] = res[r] + (xu[a] if a >= 0 else 0) + (xv[b - d] if b >= 0 else 0)
        if a >= 0:
            Pd[a] += w2[k]
        if b >= 0:
            Pd[b] += w2[k]
        if a >= 0 and b >= 0:
            if partner[a] < 0 and partner[b] < 0:
                partner[a] = b
                partner[b] = a
            elif partner[a] != b or partner[b] != a:
                ok = False
            Po[a] += w2[k]
            Po[b] += w2[k]
    return nR, ok


@numba.njit(cache=True)
def _collapsed(pu_all, pv_all, grid, A, base, eta, delta, prec, kappa, w, tptr, trows, tpos, x, res, nu, v_floor,
               max_newton, max_step, tol, nats, start):
    """The collapsed move of pairs ``start, start+1, ...`` in turn.  Returns (accepted, the index
    of the first pair the kernel cannot take or the number of pairs)."""
    U, d = grid.shape
    K1 = A.shape[1]
    nrow = res.size
    slot = np.full(nrow, -1, dtype=np.int64)
    cap = 1
    for q in range(start, pu_all.size):
        cap = max(cap, tptr[pu_all[q] + 1] - tptr[pu_all[q]] + tptr[pv_all[q] + 1] - tptr[pv_all[q]])
    rid = np.empty(cap, dtype=np.int64)
    ra = np.empty(cap, dtype=np.int64)
    rb = np.empty(cap, dtype=np.int64)
    zr = np.empty(cap)
    w1 = np.empty(cap)
    w2 = np.empty(cap)
    Pd = np.empty(2 * d)
    Po = np.empty(2 * d)
    partner = np.empty(2 * d, dtype=np.int64)
    wk = (np.empty(2 * d), np.empty((2 * d, K1)), np.empty(2 * d), np.empty(2 * d), np.empty(2 * d),
          np.empty(2 * d), np.empty(2 * d), np.empty(2 * d), np.empty(d), np.empty(K1), np.empty(K1), np.empty(K1),
          np.empty((K1, K1)), np.empty((K1, K1)), np.empty(K1))
    p, th = wk[0], wk[8]
    H, L, zbuf = wk[12], wk[13], wk[14]
    m = np.empty(K1)
    t0 = np.empty(K1)
    mraw = np.empty(K1)
    tnew = np.empty(K1)
    xu = np.empty(d, dtype=np.int64)
    xv = np.empty(d, dtype=np.int64)
    xu_new = np.empty(d, dtype=np.int64)
    xv_new = np.empty(d, dtype=np.int64)
    N = np.empty(2, dtype=np.int64)
    accepted = 0
    for q in range(start, pu_all.size):
        u, v = pu_all[q], pv_all[q]
        nR, ok = _pair_rows(u, v, grid, tptr, trows, tpos, w, x, res, slot, rid, ra, rb, zr, w1, w2, Pd, Po,
                            partner, xu, xv)
        if not ok:
            return accepted, q
        N[0] = 0
        N[1] = 0
        for i in range(d):
            N[0] += xu[i]
            N[1] += xv[i]
        for k in range(K1):
            m[k] = 0.5 * (eta[u, k] + eta[v, k])
            t0[k] = 0.5 * (eta[u, k] - eta[v, k])
            mraw[k] = 0.5 * (delta[u, k] + delta[v, k])
        bu, bv, pu, pv = base[u], base[v], prec[u], prec[v]
        Nf = N.astype(np.float64)
        tm = _mode(A, bu, bv, m, mraw, pu, pv, Nf, kappa, v_floor, nR, ra, rb, zr, w2, Pd, Po, partner,
                   max_newton, max_step, tol, wk)
        if not _chol(H, L):
            continue
        for k in range(K1):
            zbuf[k] = np.random.standard_normal()
        scale = 1.0 / math.sqrt(np.random.gamma(0.5 * nu, 2.0) / nu)
        for i in range(K1 - 1, -1, -1):      # t' = mode + L'^-1 z scale
            s = zbuf[i] * scale
            for k in range(i + 1, K1):
                s -= L[k, i] * tnew[k]
            tnew[i] = s / L[i, i]
        for k in range(K1):
            tnew[k] += tm[k]
        lq_new = _unit_laws(tnew, A, bu, bv, m, Nf, kappa, v_floor, nR, ra, rb, zr, w2, w1, Pd, Po, partner, wk,
                            True, nats, xu_new, xv_new)
        if not np.isfinite(lq_new):
            continue
        lq_old = _unit_laws(t0, A, bu, bv, m, Nf, kappa, v_floor, nR, ra, rb, zr, w2, w1, Pd, Po, partner, wk,
                            False, nats, xu, xv)
        log_r = (_log_target(tnew, A, bu, bv, m, mraw, pu, pv, kappa, nR, ra, rb, zr, w1, xu_new, xv_new, p, th)
                 - _log_target(t0, A, bu, bv, m, mraw, pu, pv, kappa, nR, ra, rb, zr, w1, xu, xv, p, th)
                 + _t_logpdf(t0, tm, L, nu, zbuf) - _t_logpdf(tnew, tm, L, nu, zbuf) + lq_old - lq_new)
        if math.log(np.random.random()) < log_r:
            accepted += 1
            for k in range(K1):
                eta[u, k] = m[k] + tnew[k]
                eta[v, k] = m[k] - tnew[k]
                delta[u, k] = mraw[k] + tnew[k]
                delta[v, k] = mraw[k] - tnew[k]
            for i in range(d):
                x[grid[u, i]] = xu_new[i]
                x[grid[v, i]] = xv_new[i]
            for k in range(nR):
                r = zr[k]
                if ra[k] >= 0:
                    r -= xu_new[ra[k]]
                if rb[k] >= 0:
                    r -= xv_new[rb[k] - d]
                res[rid[k]] = r
    return accepted, pu_all.size


def compiled_collapsed_update(rng, x, res, pu, pv, start, *, grid, A, base, eta, delta, prec, kappa, w, table,
                              nu, v_floor, max_newton, max_step, tol, nats=WINDOW_NATS):
    """The compiled move of pairs ``pu[start:], pv[start:]`` (module docstring; arguments as
    :func:`~privinfer.pymc.walk_collapse.collapsed_update`'s, ``A`` the walk's offsets ``(d, K-1)``
    and ``prec`` the raw increments' prior precisions ``(U, K-1)``), ``x``, ``res``, ``eta`` and
    ``delta`` in place.  Returns (accepted, the index of the first pair whose rows the kernel
    cannot take, or ``pu.size``)."""
    _seed(int(rng.integers(2**63 - 1)))
    acc, stop = _collapsed(np.asarray(pu, dtype=np.int64), np.asarray(pv, dtype=np.int64), grid,
                           np.ascontiguousarray(A, dtype=float), base, eta, delta, np.ascontiguousarray(prec, float),
                           float(kappa), np.asarray(w, dtype=float), table.ptr, table.rows, table.pos, x, res,
                           float(nu), float(v_floor), int(max_newton), float(max_step), float(tol), float(nats),
                           int(start))
    return int(acc), int(stop)


@numba.njit(cache=True)
def _one_mode(u, v, grid, A, base, eta, delta, prec, kappa, w, tptr, trows, tpos, x, res, v_floor, max_newton,
              max_step, tol):
    d = grid.shape[1]
    K1 = A.shape[1]
    cap = tptr[u + 1] - tptr[u] + tptr[v + 1] - tptr[v]
    rid, ra, rb = np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64), np.empty(cap, dtype=np.int64)
    zr, w1, w2 = np.empty(cap), np.empty(cap), np.empty(cap)
    Pd, Po, partner = np.empty(2 * d), np.empty(2 * d), np.empty(2 * d, dtype=np.int64)
    xu, xv = np.empty(d, dtype=np.int64), np.empty(d, dtype=np.int64)
    nR, ok = _pair_rows(u, v, grid, tptr, trows, tpos, w, x, res, np.full(res.size, -1, dtype=np.int64), rid, ra,
                        rb, zr, w1, w2, Pd, Po, partner, xu, xv)
    wk = (np.empty(2 * d), np.empty((2 * d, K1)), np.empty(2 * d), np.empty(2 * d), np.empty(2 * d),
          np.empty(2 * d), np.empty(2 * d), np.empty(2 * d), np.empty(d), np.empty(K1), np.empty(K1), np.empty(K1),
          np.empty((K1, K1)), np.empty((K1, K1)), np.empty(K1))
    if not ok:
        return False, np.zeros(K1), wk[12]
    N = np.array([xu.sum(), xv.sum()], dtype=np.float64)
    m = 0.5 * (eta[u] + eta[v])
    mraw = 0.5 * (delta[u] + delta[v])
    t = _mode(A, base[u], base[v], m, mraw, prec[u], prec[v], N, kappa, v_floor, nR, ra, rb, zr, w2, Pd, Po,
              partner, max_newton, max_step, tol, wk)
    return True, t, wk[12]


def collapsed_mode(u, v, x, res, *, grid, table, A, base, eta, delta, prec, kappa, w, v_floor, max_newton, max_step,
                   tol):
    """The compiled Gauss--Newton mode and precision ``(t, H)`` of pair ``(u, v)``'s walk (module
    docstring; the reference's :meth:`~privinfer.pymc.walk_collapse._Pair.mode`), or None when the
    pair's rows pair a cell with two cells of the other unit."""
    ok, t, H = _one_mode(int(u), int(v), np.asarray(grid, dtype=np.int64), np.ascontiguousarray(A, dtype=float),
                         np.asarray(base, dtype=float), eta, delta, np.ascontiguousarray(prec, dtype=float),
                         float(kappa), np.asarray(w, dtype=float), table.ptr, table.rows, table.pos,
                         np.asarray(x, dtype=np.int64), np.asarray(res, dtype=float), float(v_floor), int(max_newton),
                         float(max_step), float(tol))
    return (t, H.copy()) if ok else None
