r"""The walk's increments moved together with the cells they govern: an exact update in
ancillary lattice coordinates (a kernel of :class:`~privinfer.pymc.WalkGibbs`).

Why.  Given the cells, a unit's walk is pinned down by thousands of people (a Poisson-like
spread of about :math:`\sqrt{Np}` per cell), and given the walk the cells are pinned down just
as tightly by the Dirichlet-multinomial, while the noisy measurements alone leave each cell
several times looser.  Alternating the two updates is then the slow data-augmentation Gibbs
sampler: the fraction of missing information, about :math:`v_m/(v_m + Np)` for a cell measured
with variance :math:`v_m`, is its lag-one autocorrelation along a smooth direction such as a
tract's share aged 65+ (measured: median bulk ESS 123 of 1,200 draws on 94 Kentucky tracts).

The coordinates.  For unit ``u`` with log profile :math:`\theta_u` and total :math:`N_u`, let

.. math:: c_i = r_i N_u\,\mathrm{softmax}(\theta_u)_i,\qquad
          \tilde c_i = c_i - r_i \frac{\sum_j c_j}{\sum_j r_j},\qquad
          h(\theta_u) = \mathrm{LR}(\tilde c),

``r_i \in [0, 1]`` a constant *carry fraction* per cell (ideally :math:`v_m/(v_m + v_p)`, the
weight of the prior mean in the cell's posterior mean, ``v_p`` the prior's variance), and LR
rounding to integers by largest remainders, which keeps the sum: :math:`\sum_i h_i = 0` exactly.
So :math:`h` is an integer vector near the shift of the cells' conditional mean, a function of
the profile alone, that leaves the unit's total unchanged.  The map :math:`(\delta, x) \mapsto
(\delta, \xi = x - h(\theta(\delta)))` is a bijection of the state space (a translation of the
lattice for every :math:`\delta`, volume one), so the target in :math:`(\delta, \xi)` is
:math:`\pi(\delta, \xi + h(\theta(\delta)))` and any exact update of :math:`\delta` given
:math:`\xi` is an exact update of the posterior: this one slice samples (Neal 2003), for a
pair of sibling units ``(u, v)`` and a direction :math:`D \in \mathbb R^{K-1}` of the
increments, the coefficient :math:`\Delta` of :math:`\delta_u + \Delta D,\ \delta_v - \Delta D`
(which keeps the siblings' mean increment, so no other unit's profile moves; a unit alone when
the increments are not centred; for a second-order walk the coordinate directions change the
slope from one age on), the cells following as :math:`x = \xi + h(\theta)`.  Its log
density holds the walk's Gaussian prior, the Dirichlet-multinomial of both units' cells and
the exact Gaussian measurement term :math:`-\sum_r w_r (y_r - (Bx)_r)^2`; a point with a
negative cell has density 0.  The lattice is the non-centred parametrization's ground
(Papaspiliopoulos, Roberts and Skold 2007) made integer: the cells' standardized departures
from their conditional mean stay put while the profile moves.

Units of several rows (``members``: a county's walk enters each of its tracts'
Dirichlet-multinomials, each tract with its own base profile :math:`b_m`).  Every row ``m`` of
unit ``u`` has its own coordinates :math:`\xi_m = x_m - h_m(b_m + r_u)`, with its own total, so
moving the unit's walk carries all its rows' cells at once, each row keeping its total; the
density holds every row's Dirichlet-multinomial.  Measured with the counties' walks of
:func:`privinfer.census.hierarchy_model` carried for every county: on 12 Kentucky counties (94
tracts, 2 x (300 + 600)) their step scales' max R-hat 1.051 with it against 1.090 without, in
the same time; on all 1,083 tracts (2 x (200 + 400)) 1.241 against 1.317, the tracts' shares
aged 65+ a min bulk ESS of 14 against 8, but 1,129 s against 977 s.  The model therefore
carries only the counties of at most four tracts (``register_walk(carry_units=...)``), where
the gain is and the cost is not: a few percent of the time.

A translation cannot follow a small count's law near zero (a Poisson's low quantiles barely
move with its mean), so a move that lowers a unit's expected count in cells at or near 0 pushes
them below 0 (density 0) and the slice stops there; the slowest tracts' shares on all Kentucky
tracts are those of young tracts whose 65+ cells touch 0.  Carrying a cell of expected count
:math:`\mu` by :math:`g(\mu) = \mu - c\log(1 + \mu/c)` instead of :math:`\mu` (rate
:math:`\mu/(\mu + c)`, ``c`` 3; still a function of the profile, so still exact), 2 x (200 +
400), default chain seed: those tracts' shares mixed no faster (median bulk ESS 102 and 74
against 124 and 73 for an expected 0.1-0.5 and 0.5 or more of their 65+ cells at 0), the cells'
max R-hat 1.099 against 1.083; left out.

Small cells (``lump``).  A row's cells in ``lump`` (at least two of them; the model's: a GLS
estimate under :data:`~privinfer.census.model.QUANTILE_CARRY`) are not translated one by one.
They form one category of the translation above -- their sum :math:`n_S` is carried like any
cell, with their mean carry fraction -- and within it they follow the Dirichlet-multinomial's
randomized quantile map (:mod:`privinfer.pymc.dm_quantile`): given :math:`n_S`, the cells are
:math:`\mathrm{DirMult}(n_S, \alpha_S)` (the Dirichlet's aggregation property), split along a
binary tree of beta-binomials, and each split's uniform :math:`U = F(k-1) + u\,p(k)` is held
while the profile moves, the cells being the tree's quantiles of the held uniforms.  With
:math:`u` uniform and drawn afresh at each pair's start, the map :math:`(x_S, u) \mapsto
(n_S, U)` has Jacobian :math:`\mathrm{DirMult}(x_S \mid n_S, \alpha_S)`, so in the
coordinates :math:`(\delta, \xi, U)` the target holds the Dirichlet-multinomial of the
categories only (the lump's term :math:`\log\Gamma(n_S + \sum_S\alpha_i) -
\log\Gamma(\sum_S\alpha_i) - \log n_S!`) and the small cells' own terms cancel: their
ancillary coordinates are the non-centred ones exactly, and a cell at 0 stays at 0 while its
expected count falls (the translation would push it below 0).  Measured on all Kentucky
tracts, 2 x (200 + 400), the cells with a GLS estimate under 20 (6,159 of 49,818) lumped, on
two chain seeds (default, 11) against the translation alone: the cells' max R-hat 1.054 and
1.081 against 1.083 and 1.086, min bulk ESS 34 and 25 against 20 and 21, cells with R-hat above
1.05 2 and 7 against 16 and 16; the shares 65+ of the tracts whose 65+ cells touch 0 (an
expected 0.1 or more of them at 0) min bulk ESS 45 and 39 against 10 and 13; RMSE and coverage
unchanged; a tract-walk iteration 0.91 s against 0.84 s (one core each, side by side, at one
posterior point).  With everything but the tracts' walk and the cells held (250 iterations
from a posterior draw) the same change was within the run's noise, as was a threshold of 50:
the gain is in how the cells and the walk move together over whole runs.

The kernel is compiled with Numba and runs the pairs in sequence (units of one parent share
measurement rows, so their updates are not independent).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from scipy.special import gammaln

from .._special import lgamma_ratio_scalar
from .dm_quantile import tree_cells, tree_uniforms
from .walk_kernel import (SLICE_STEPS, SLICE_WIDTH, centred, checked_members, prior_precisions,
                          scale_update_unit_transport)

__all__ = ["carry_shift", "carried_update", "ellipse_update", "carry_directions", "CarriedCells", "scale_update_carried", "CARRY_WIDTH",
           "CARRY_STEPS"]

#: Initial slice width of the carried update's coefficient :math:`\Delta` (each direction's
#: width is tuned during warm-up by :class:`~privinfer.pymc.WalkGibbs`).
CARRY_WIDTH = 0.2
#: The stepping out's limit ``m`` (Neal 2003, fig. 3; as
#: :data:`~privinfer.pymc.walk_kernel.SLICE_STEPS`, 1: none).
CARRY_STEPS = 40


@numba.njit(cache=True)
def _softmax_terms(theta, out):
    """exp(theta - max theta) into ``out``; returns their sum (softmax = out / sum)."""
    top = theta[0]
    for i in range(1, theta.size):
        if theta[i] > top:
            top = theta[i]
    s = 0.0
    for i in range(theta.size):
        out[i] = math.exp(theta[i] - top)
        s += out[i]
    return s


@numba.njit(cache=True)
def _kth_largest(a, k):
    """The ``k``-th largest (0-based) of ``a``, which is permuted in place (Wirth's selection,
    Wirth 1976, sec. 2.3.4: expected linear time, no allocation)."""
    lo = 0
    hi = a.size - 1
    while lo < hi:
        t = a[k]
        i = lo
        j = hi
        while True:
            while a[i] > t:
                i += 1
            while t > a[j]:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
            if i > j:
                break
        if j < k:
            lo = i
        if k < i:
            hi = j
    return a[k]


@numba.njit(cache=True)
def _shift(p, s, N, r, rsum, out, frac, sel):
    """h(theta) of one unit (module docstring) into ``out`` (int64), from its softmax terms ``p``
    and their sum ``s`` (:func:`_softmax_terms`); ``frac`` and ``sel`` scratch."""
    d = p.size
    tot = 0.0
    for i in range(d):
        frac[i] = r[i] * N * p[i] / s
        tot += frac[i]
    corr = tot / rsum if rsum > 0.0 else 0.0
    k = 0
    for i in range(d):
        v = frac[i] - r[i] * corr
        f = math.floor(v)
        out[i] = np.int64(f)
        frac[i] = v - f
        k -= np.int64(f)
    # largest remainders: +1 on the k cells with the largest fractional parts (0 <= k <= d since
    # the c~ sum to 0 up to rounding), ties to the lower index (the order of a stable sort)
    if k <= 0:
        return
    if k >= d:
        for i in range(d):
            out[i] += 1
        return
    for i in range(d):
        sel[i] = frac[i]
    t = _kth_largest(sel[:d], k - 1)
    ties = k
    for i in range(d):
        if frac[i] > t:
            ties -= 1
    for i in range(d):
        if frac[i] > t:
            out[i] += 1
        elif frac[i] == t and ties > 0:
            out[i] += 1
            ties -= 1


@numba.njit(cache=True)
def _profile(base_u, eta_u, sgn, Delta, D, code, worder, hs, theta, level):
    K1 = eta_u.size
    level[0] = 0.0
    slope = 0.0
    for a in range(K1):
        e = eta_u[a] + sgn * Delta * D[a]
        if worder == 2:         # second-order walk: the raw increments change the slope
            slope += e
            e = slope * hs[a]
        level[a + 1] = level[a] + e
    for i in range(base_u.size):
        theta[i] = base_u[i] + level[code[i]]


@numba.njit(cache=True)
def _cat_shift(m, theta, N, lay, wk):
    """Row ``m``'s softmax terms (``pbuf``, returns their sum), its categories' terms ``pc``
    and their shift ``hbuf`` (module docstring, "Small cells")."""
    cat_of, ncat, rc, rcs = lay[0], lay[1], lay[2], lay[3]
    pbuf, pc, hbuf, frac, sel = wk[0], wk[1], wk[2], wk[3], wk[8]
    nc = ncat[m]
    s = _softmax_terms(theta, pbuf)
    for j in range(nc):
        pc[j] = 0.0
    for i in range(theta.size):
        pc[cat_of[m, i]] += pbuf[i]
    _shift(pc[:nc], s, N, rc[m, :nc], rcs[m], hbuf[:nc], frac[:nc], sel)
    return s


@numba.njit(cache=True)
def _row_cells(m, theta, N, kappa, xi, lay, wk, lfact):
    """Row ``m``'s cells at the log profile ``theta`` into ``wk``'s ``xnew`` (module
    docstring); returns the Dirichlet-multinomial's log terms of its categories, -inf when a
    category is negative."""
    ncat, sidx, ns, U = lay[1], lay[4], lay[5], lay[6]
    pbuf, pc, hbuf, xcat, xnew, buf, stk = wk[0], wk[1], wk[2], wk[4], wk[5], wk[6], wk[7]
    nc = ncat[m]
    s = _cat_shift(m, theta, N, lay, wk)
    out = 0.0
    for j in range(nc):
        xv = xi[m, j] + hbuf[j]
        if xv < 0 or xv >= lfact.size:        # a category above the row's total: another is < 0
            return -np.inf
        out += lgamma_ratio_scalar(kappa * pc[j] / s, float(xv)) - lfact[xv]
        xcat[j] = xv
    cat_of = lay[0]
    for i in range(theta.size):
        xnew[i] = xcat[cat_of[m, i]]
    if ns[m] >= 2:
        for i in range(theta.size):
            pbuf[i] = kappa * pbuf[i] / s
        tree_cells(xcat[nc - 1], sidx[m], ns[m], pbuf, U[m], xnew, buf, stk)
    return out


@numba.njit(cache=True)
def _row_coords(m, cells, theta, N, kappa, x, xi, lay, wk):
    r"""Row ``m``'s ancillary coordinates at the current cells ``x`` and profile ``theta``:
    :math:`\xi_m` (per category) and the small cells' tree uniforms (fresh ``u``)."""
    cat_of, ncat, sidx, ns, U = lay[0], lay[1], lay[4], lay[5], lay[6]
    pbuf, hbuf, xcat, xnew, buf, stk = wk[0], wk[2], wk[4], wk[5], wk[6], wk[7]
    nc = ncat[m]
    s = _cat_shift(m, theta, N, lay, wk)
    for j in range(nc):
        xcat[j] = 0
    for i in range(cells.size):
        xnew[i] = x[cells[i]]
        xcat[cat_of[m, i]] += xnew[i]
    for j in range(nc):
        xi[m, j] = xcat[j] - hbuf[j]
    if ns[m] >= 2:
        for i in range(cells.size):
            pbuf[i] = kappa * pbuf[i] / s
        tree_uniforms(xnew, sidx[m], ns[m], pbuf, U[m], buf, stk)


@numba.njit(cache=True)
def _unit_terms(m, cells, theta, N, kappa, xi, lay, wk, x, row_ptr, rows, acc, mark, touched, n_touched, lfact):
    """Dirichlet-multinomial terms of row ``m`` at its cells for the profile ``theta``
    (:func:`_row_cells`); accumulates the cells' changes from ``x`` into the rows.  Returns
    (log terms, n_touched), -inf when a cell < 0."""
    out = _row_cells(m, theta, N, kappa, xi, lay, wk, lfact)
    if not np.isfinite(out):
        return -np.inf, n_touched
    xnew = wk[5]
    for i in range(cells.size):
        dx = xnew[i] - x[cells[i]]
        if dx != 0:
            c = cells[i]
            for p in range(row_ptr[c], row_ptr[c + 1]):
                rr = rows[p]
                if not mark[rr]:
                    mark[rr] = True
                    touched[n_touched] = rr
                    n_touched += 1
                acc[rr] += dx
    return out, n_touched


@numba.njit(cache=True)
def _log_density(Delta, D, u, v, ctx):
    """The pair's log density at ``Delta`` along ``D`` (module docstring); ``ctx`` the state
    and work buffers of :func:`_carried`."""
    (grid, code, worder, hs, base, eta, delta, inv_s2, kappa, N, unit_ptr, unit_rows, xi, x, res, row_ptr,
     rows, w, acc, mark, touched, theta, level, lay, wk, lfact, held, coef) = ctx
    K1 = D.size
    cv = coef[0]
    out = 0.0
    for a in range(K1):
        t = delta[u, a] + Delta * D[a]
        out -= 0.5 * inv_s2[u, a] * t * t
        if v >= 0:
            t = delta[v, a] + cv * Delta * D[a]
            out -= 0.5 * inv_s2[v, a] * t * t
    n_touched = 0
    for sgn, unit in ((1.0, u), (cv, v)):
        if unit < 0 or not np.isfinite(out):
            continue
        for q in range(unit_ptr[unit], unit_ptr[unit + 1]):
            m = unit_rows[q]
            _profile(base[m], eta[unit], sgn, Delta, D, code, worder, hs, theta, level)
            lm, n_touched = _unit_terms(m, grid[m], theta, float(N[m]), kappa, xi, lay, wk, x, row_ptr, rows, acc,
                                        mark, touched, n_touched, lfact)
            out += lm
            if not np.isfinite(out):
                break
    held[0] = out               # the density without the measurement term's change
    for j in range(n_touched):
        rr = touched[j]
        a = acc[rr]
        if np.isfinite(out):
            out -= w[rr] * ((res[rr] - a) ** 2 - res[rr] ** 2)
        acc[rr] = 0.0
        mark[rr] = False
    return out


@numba.njit(cache=True)
def _commit(Delta, D, u, v, ctx):
    """The pair moved to ``Delta`` along ``D``: cells (residuals along), centred and raw
    increments, in place."""
    (grid, code, worder, hs, base, eta, delta, inv_s2, kappa, N, unit_ptr, unit_rows, xi, x, res, row_ptr,
     rows, w, acc, mark, touched, theta, level, lay, wk, lfact, held, coef) = ctx
    for sgn, unit in ((1.0, u), (coef[0], v)):
        if unit < 0:
            continue
        for q in range(unit_ptr[unit], unit_ptr[unit + 1]):
            m = unit_rows[q]
            _profile(base[m], eta[unit], sgn, Delta, D, code, worder, hs, theta, level)
            _row_cells(m, theta, float(N[m]), kappa, xi, lay, wk, lfact)
            _move_cells(grid[m], wk[5], x, res, row_ptr, rows)
        for a in range(D.size):
            eta[unit, a] += sgn * Delta * D[a]
            delta[unit, a] += sgn * Delta * D[a]


@numba.njit(cache=True)
def _work(d, K1, nmax):
    """Work buffers: theta, level and ``wk`` = (pbuf, pc, hbuf, frac, xcat, xnew, buf, stk, sel)."""
    wk = (np.empty(d), np.empty(d), np.empty(d, dtype=np.int64), np.empty(d), np.empty(d, dtype=np.int64),
          np.empty(d, dtype=np.int64), np.empty(nmax + 1), np.empty((d + 2, 3), dtype=np.int64), np.empty(d))
    return np.empty(d), np.empty(K1 + 1), wk


@numba.njit(cache=True)
def _slice(f0, k, D, u, v, widths, steps, ctx):
    """One slice update (Neal 2003, stepping out and shrinkage) of the pair's coefficient along
    ``D``; returns (Delta, evaluations)."""
    evals = 0
    lev = f0 + math.log(np.random.random())
    wd = widths[k]
    left = -wd * np.random.random()
    right = left + wd
    n_left = int(steps * np.random.random()) if steps > 1 else 0
    for _ in range(n_left):
        evals += 1
        if _log_density(left, D, u, v, ctx) <= lev:
            break
        left -= wd
    for _ in range(steps - 1 - n_left):
        evals += 1
        if _log_density(right, D, u, v, ctx) <= lev:
            break
        right += wd
    while True:
        t = left + (right - left) * np.random.random()
        evals += 1
        ft = _log_density(t, D, u, v, ctx)
        if ft > lev:
            return t, evals
        if t < 0.0:
            left = t
        else:
            right = t


@numba.njit(cache=True)
def _pair_coords(u, v, D, ctx):
    """The ancillary coordinates of every row of both units at their current profiles (xi per
    category and the small cells' tree uniforms), into ``ctx``'s ``xi``."""
    (grid, code, worder, hs, base, eta, delta, inv_s2, kappa, N, unit_ptr, unit_rows, xi, x, res, row_ptr,
     rows, w, acc, mark, touched, theta, level, lay, wk, lfact, held, coef) = ctx
    for unit in (u, v):
        if unit < 0:
            continue
        for q in range(unit_ptr[unit], unit_ptr[unit + 1]):
            m = unit_rows[q]
            _profile(base[m], eta[unit], 1.0, 0.0, D, code, worder, hs, theta, level)
            _row_coords(m, grid[m], theta, float(N[m]), kappa, x, xi, lay, wk)


@numba.njit(cache=True)
def _carried(pu, pv, cvs, dirs, order, widths, steps, grid, code, worder, hs, base, eta, delta, inv_s2, kappa, N, lay,
             unit_ptr, unit_rows, x, res, row_ptr, rows, w, moved, used, lfact, acc, mark, touched):
    d = grid.shape[1]
    K1 = dirs.shape[1]
    theta, level, wk = _work(d, K1, lfact.size)
    xi = np.empty(grid.shape, dtype=np.int64)
    held = np.zeros(1)
    coef = np.full(1, -1.0)
    ctx = (grid, code, worder, hs, base, eta, delta, inv_s2, kappa, N, unit_ptr, unit_rows, xi, x, res,
           row_ptr, rows, w, acc, mark, touched, theta, level, lay, wk, lfact, held, coef)
    evals = 0
    for p in range(pu.size):
        u, v = pu[p], pv[p]
        coef[0] = cvs[p]
        f0 = 0.0
        for kk in range(order.shape[1]):
            k = order[p, kk]
            if k < 0:
                break
            D = dirs[k]
            if kk == 0:
                # the ancillary coordinates of every row of both units at the current profiles
                # (xi per category and the small cells' tree uniforms), and the pair's density
                # there; a move along a direction keeps them (the cells after it are a function of
                # them and the profile, bit for bit) and leaves the density at the new point as the
                # accepted point's without the measurement term's change (the residuals follow the
                # cells), so both are computed once per pair
                _pair_coords(u, v, D, ctx)
                f0 = _log_density(0.0, D, u, v, ctx)
                evals += 1
            t, n = _slice(f0, k, D, u, v, widths, steps, ctx)
            evals += n
            f0 = held[0]
            moved[k] += abs(t)
            used[k] += 1.0
            _commit(t, D, u, v, ctx)
    return evals


@numba.njit(cache=True)
def _ellipse(f0, mu, nu, D, u, v, ctx):
    """One elliptical slice update (Murray, Adams and MacKay 2010, fig. 2) of the pair's move
    ``D`` (from 0) under the Gaussian prior with mean ``mu`` whose draw less the mean is ``nu``;
    ``f0`` the log likelihood at 0.  Leaves the move in ``D``; returns the evaluations."""
    lev = f0 + math.log(np.random.random())
    th = 2.0 * math.pi * np.random.random()
    lo = th - 2.0 * math.pi
    hi = th
    evals = 0
    while True:
        c = math.cos(th)
        s = math.sin(th)
        for a in range(D.size):
            D[a] = -mu[a] * c + nu[a] * s + mu[a]
        evals += 1
        if _log_density(1.0, D, u, v, ctx) > lev:
            return evals
        if th < 0.0:
            lo = th
        else:
            hi = th
        th = lo + (hi - lo) * np.random.random()


@numba.njit(cache=True)
def _ellipses(pu, pv, cvs, mus, sds, grid, code, worder, hs, base, eta, delta, kappa, N, lay, unit_ptr, unit_rows, x,
              res, row_ptr, rows, w, lfact, acc, mark, touched):
    d = grid.shape[1]
    K1 = eta.shape[1]
    theta, level, wk = _work(d, K1, lfact.size)
    xi = np.empty(grid.shape, dtype=np.int64)
    held = np.zeros(1)
    coef = np.full(1, -1.0)
    no_prior = np.zeros(eta.shape)      # the density's prior term is the ellipse's
    ctx = (grid, code, worder, hs, base, eta, delta, no_prior, kappa, N, unit_ptr, unit_rows, xi, x, res,
           row_ptr, rows, w, acc, mark, touched, theta, level, lay, wk, lfact, held, coef)
    D = np.zeros(K1)
    nu = np.empty(K1)
    evals = 0
    for p in range(pu.size):
        u, v = pu[p], pv[p]
        coef[0] = cvs[p]
        for a in range(K1):
            D[a] = 0.0
            nu[a] = sds[p, a] * np.random.standard_normal()
        _pair_coords(u, v, D, ctx)
        evals += 1 + _ellipse(_log_density(0.0, D, u, v, ctx), mus[p], nu, D, u, v, ctx)
        _commit(1.0, D, u, v, ctx)
    return evals


_LOG_FACTORIALS = np.zeros(1)
_SCRATCH: dict = {}


def log_factorials(n: int) -> np.ndarray:
    r""":math:`\log k!` for ``k = 0..n``: a read-only view of one table kept between calls and
    grown as needed (its entries are ``gammaln(k + 1)`` whatever its length)."""
    global _LOG_FACTORIALS
    if _LOG_FACTORIALS.size <= n:
        table = gammaln(np.arange(max(n + 1, 2 * _LOG_FACTORIALS.size)) + 1.0)
        table.flags.writeable = False
        _LOG_FACTORIALS = table
    return _LOG_FACTORIALS[:n + 1]


def _row_scratch(m: int) -> tuple:
    """The kernel's per-measurement-row scratch ``(acc, mark, touched)`` for ``m`` rows, kept
    between calls: a call leaves ``acc`` at 0 and ``mark`` False (every evaluation clears the rows
    it touched), and they are cleared here should one ever have left them otherwise."""
    got = _SCRATCH.get(m)
    if got is None:
        got = _SCRATCH[m] = (np.zeros(m), np.zeros(m, dtype=np.bool_), np.empty(m, dtype=np.int64))
    elif got[1].any() or got[0].any():
        got[0][:] = 0.0
        got[1][:] = False
    return got


@numba.njit(cache=True)
def _seed(seed):
    np.random.seed(seed)


def carry_directions(K1: int, order: int = 1) -> np.ndarray:
    r"""The carried update's directions ``(k, K-1)`` in the raw increments: for a first-order
    walk the coordinates (each moves every category past one step against those before it: old
    against young, split at one age); for a second-order walk the same splits (raw directions
    :math:`e_a - e_{a+1}`, which change one step only) and the coordinates (a change of slope
    from one age on).

    Measured against each pair's own principal axes (the eigenvectors of a Gaussian
    approximation of the pair move's precision, :math:`2\Lambda + G_u + G_v` with :math:`G_u =
    J_u^\top \mathrm{diag}(1/(v + c)) J_u` from the units' base profiles, each scaled to unit
    sd), on all Kentucky tracts at a posterior draw with everything but the tracts' walk and the
    cells held, 250 iterations: the tracts' shares 65+ and under 18 had a bulk ESS of median 64
    and 75 with the principal axes against 79 and 97 with these, in the same time.  Ramps added
    to these (:math:`e_a - e_{a+w}`, ``w`` 3 and 6: the slope changed over several segments, a
    smooth rise from one age to another, which is how a young tract's posterior departs, measured
    by regressing its people under 18 on its increments), all Kentucky tracts, 2 x (200 + 400),
    default chain seed: the cells' max R-hat 1.159 against 1.083, min bulk ESS 11 against 20, the
    tracts' step scales' min bulk ESS 6 against 39, the shares under 18 min 29 against 12;
    left out.  Each unit's own slowest direction added (its first maximum autocorrelation factor
    -- the linear function of its centred increments with the largest lag-10 autocorrelation --
    from the warm-up's iterations 25-200, moved along the regression of the increments on it and
    fixed after the warm-up; on the 772-person tract 21111008800 such a function of 150 warm-up
    iterations had a correlation of 0.6-0.8 with its people 65+, whose bulk ESS was 9), default
    chain seed, with the small cells' quantile map: the cells' max R-hat 1.188 against 1.054, min
    bulk ESS 9 against 34 (that tract), 18% more evaluations; left out.  Why, measured at a
    posterior draw (one carried update repeated from the same state, per move the change of that
    tract's fitted people 65+, whose posterior sd is 28): along its slowest direction the update
    moves them by sd 8.9 with its partner (the second smallest tract of the county) and 13.5
    with the tract alone (not a valid move of centred increments; the partner's own conditional
    is what narrows the pair's), and along the split at 65 by 0.5 (the step scales at those ages
    are near 0.007: a tract's people 65+ move through the slopes of younger ages)."""
    eye = np.eye(K1)
    if order != 2:
        return eye
    split = eye - np.eye(K1, k=1)
    return np.vstack([split, eye])


def carry_shift(theta, N, r) -> np.ndarray:
    """:math:`h(\\theta)` of one unit (module docstring): the zero-sum integer shift of its
    cells, ``theta`` ``(d,)`` log profile, ``N`` the unit's total, ``r`` ``(d,)`` carry fractions."""
    theta = np.ascontiguousarray(theta, dtype=float)
    r = np.ascontiguousarray(r, dtype=float)
    out = np.empty(theta.size, dtype=np.int64)
    p = np.empty(theta.size)
    _shift(p, _softmax_terms(theta, p), float(N), r, float(r.sum()), out, np.empty(theta.size), np.empty(theta.size))
    return out


def _unit_rows(members, R: int, U: int):
    """Every unit's rows as CSR arrays ``(unit_ptr (U+1,), unit_rows (R,))``: the rows of unit
    ``u`` are ``unit_rows[unit_ptr[u]:unit_ptr[u+1]]``; ``members`` None: row ``u`` is unit ``u``
    (checked by :func:`~privinfer.pymc.walk_kernel.checked_members`)."""
    members = checked_members(members, R, U)
    if members is None:
        return np.arange(U + 1, dtype=np.int64), np.arange(U, dtype=np.int64)
    unit_rows = np.argsort(members, kind="stable").astype(np.int64)
    return np.concatenate([[0], np.cumsum(np.bincount(members, minlength=U))]).astype(np.int64), unit_rows


def carry_layout(grid, carry, lump=None) -> tuple:
    r"""Every row's categories for the carried update (module docstring, "Small cells"): the
    cells not in ``lump`` one by one, the row's cells in ``lump`` (``(n,)`` bool; None: none)
    as one category when there are at least two of them, its carry fraction their mean.
    Returns ``(cat_of (R, d), ncat (R,), rc (R, d), rcs (R,), sidx (R, d), ns (R,), U (R, d))``:
    each cell's category, the number of categories, their carry fractions (first ``ncat``) and
    their sum, the lumped cells' positions (first ``ns``) and room for their tree uniforms;
    ``grid`` ``(R, d)`` and ``carry`` ``(R, d)`` per row."""
    R, d = grid.shape
    carry = np.asarray(carry, dtype=float)
    small = np.zeros((R, d), dtype=bool) if lump is None else np.asarray(lump, dtype=bool)[grid]
    small &= (small.sum(axis=1) >= 2)[:, None]
    ns = small.sum(axis=1).astype(np.int64)
    nrest = d - ns
    lumped = ns > 0
    cat_of = np.where(small, nrest[:, None], np.cumsum(~small, axis=1) - 1).astype(np.int64)
    ncat = np.where(lumped, nrest + 1, d).astype(np.int64)
    order = np.argsort(small, axis=1, kind="stable")          # the row's other cells first, in order
    rc = np.take_along_axis(carry, order, axis=1)
    mean_small = (carry * small).sum(axis=1) / np.maximum(ns, 1)
    col = np.arange(d)[None, :]
    rc = np.where(lumped[:, None] & (col == nrest[:, None]), mean_small[:, None], rc)
    rc = np.ascontiguousarray(np.where(col < ncat[:, None], rc, 0.0))
    sidx = np.ascontiguousarray(np.argsort(~small, axis=1, kind="stable").astype(np.int64))
    return cat_of, ncat, rc, rc.sum(axis=1), sidx, ns, np.zeros((R, d))


def _pair_inputs(x, pairs, grid, delta, sigma, carry, members, mix, lump, spacing, coefficients, precisions):
    """The kernels' arrays for :func:`carried_update` and :func:`ellipse_update` (their
    arguments of the same names): ``(pu, pv, cvs, grid, unit_ptr, unit_rows, N, lay, hs,
    inv_s2)``, checked."""
    pu = np.ascontiguousarray(pairs[0], dtype=np.int64)
    pv = np.ascontiguousarray(pairs[1], dtype=np.int64)
    grid = np.ascontiguousarray(grid, dtype=np.int64)
    unit_ptr, unit_rows = _unit_rows(members, grid.shape[0], delta.shape[0])
    carry = np.ascontiguousarray(np.asarray(carry, dtype=float)[grid])
    N = np.asarray(x, dtype=np.int64)[grid].sum(axis=1)
    lay = carry_layout(grid, carry, lump)
    hs = np.ones(delta.shape[1]) if spacing is None else np.ascontiguousarray(spacing, dtype=float)
    if coefficients is None:
        cvs = np.full(pu.size, -1.0)
    else:
        cvs = np.ascontiguousarray(np.broadcast_to(np.asarray(coefficients, dtype=float), pu.shape))
        if not np.all(np.isfinite(cvs)):
            raise ValueError("coefficients must be finite")
    if precisions is None:
        inv_s2 = prior_precisions(sigma, mix, delta.shape[0])
    else:
        if mix is not None:
            raise ValueError("give the prior precisions or the variance multipliers (mix), not both")
        inv_s2 = np.ascontiguousarray(precisions, dtype=float)
        if inv_s2.shape != delta.shape or not np.all(np.isfinite(inv_s2) & (inv_s2 >= 0)):
            raise ValueError(f"precisions must be {delta.shape[0]} x {delta.shape[1]} finite values >= 0")
    return pu, pv, cvs, grid, unit_ptr, unit_rows, N, lay, hs, inv_s2


def carried_update(rng, x, res, pairs, *, grid, code, base, eta, delta, sigma, kappa, carry, row_ptr, rows, w,
                   directions=None, widths=CARRY_WIDTH, per_pair=None, walk_order: int = 1, spacing=None,
                   steps: int = CARRY_STEPS, members=None, mix=None, lump=None, coefficients=None, precisions=None):
    """One carried update (module docstring) of every pair in ``pairs`` along ``per_pair``
    directions (one count, or one per pair) drawn at random without replacement for each pair
    (default: all of them, in a random order; a choice independent of the state, so every update
    stays exact).

    ``x`` (int64, n) and ``res = y - Bx`` (float, m) are updated in place, and so are ``eta``
    (the centred increments, ``(U, K-1)``) and ``delta`` (the raw increments); ``pairs`` is
    ``(u, v)`` index arrays (``v = -1``: unit ``u`` alone, for increments that are not centred);
    ``base`` ``(U, d)`` the units' base log profiles; ``sigma`` ``(K-1,)`` the step scales;
    ``carry`` ``(n,)`` the carry fractions in [0, 1]; ``row_ptr, rows, w`` the measurement rows
    of every cell (CSC of the 0/1 query matrix) and their weights :math:`1/(2\\sigma_r^2)`;
    ``directions`` ``(k, K-1)`` (default: the coordinate directions, one increment at a time);
    ``widths`` the slice widths, one or one per direction, and ``steps`` the stepping out's limit
    (:func:`~privinfer.pymc.walk_kernel.slice_coordinate`); ``walk_order`` 2: the increments are
    the raw increments of a second-order walk (their cumulative sums are the steps between
    categories, :func:`~privinfer.pymc.walk_kernel.slopes`, times ``spacing`` when given);
    ``members`` ``(R,)`` the unit of every row of ``grid`` when a unit's walk enters several rows
    of cells (a county's walk, each of its tracts' cells; ``base``, ``grid`` and ``carry`` are
    then per row, every row's cells carried by its own shift, so each row keeps its total), None:
    row ``u`` is unit ``u``; ``mix`` ``(U,)`` the units' prior variance multipliers
    :math:`\\lambda_u` (raw increments :math:`N(0, \\sigma_k^2\\lambda_u)`,
    :func:`~privinfer.pymc.walk_kernel.mix_draw`; None: all 1); ``coefficients`` ``(P,)`` the
    second unit's share of each pair's move (its increments move by ``c * Delta * D``; None: -1,
    the pair's mean kept); ``precisions`` ``(U, K-1)`` the raw increments' prior precisions in
    place of :math:`1/(\\sigma_k^2\\lambda_u)` (0: no prior term; for moves whose raw increments do
    not move as their centred ones, :mod:`privinfer.pymc.walk_alone`).
    Returns the number of density evaluations and the mean ``|Delta|`` per direction over its
    updates (for tuning the widths)."""
    K1 = delta.shape[1]
    dirs = np.eye(K1) if directions is None else np.ascontiguousarray(directions, dtype=float)
    wd = np.ascontiguousarray(np.broadcast_to(np.asarray(widths, dtype=float), (dirs.shape[0],)))
    pu, pv, cvs, grid, unit_ptr, unit_rows, N, lay, hs, inv_s2 = _pair_inputs(
        x, pairs, grid, delta, sigma, carry, members, mix, lump, spacing, coefficients, precisions)
    k = np.broadcast_to(np.asarray(dirs.shape[0] if per_pair is None else per_pair), pu.shape)
    if k.size and (np.any(k != np.round(k)) or not 1 <= k.min() <= k.max() <= dirs.shape[0]):
        raise ValueError(f"per_pair must be integers between 1 and the number of directions ({dirs.shape[0]})")
    if int(steps) != steps or steps < 1:
        raise ValueError("steps must be an integer >= 1")
    order = np.argsort(rng.random((pu.size, dirs.shape[0])), axis=1)
    order = np.ascontiguousarray(np.where(np.arange(dirs.shape[0]) < k[:, None], order, -1)[:, :int(k.max(initial=1))])
    moved = np.zeros(dirs.shape[0])
    used = np.zeros(dirs.shape[0])
    _seed(int(rng.integers(2**63 - 1)))
    evals = _carried(pu, pv, cvs, dirs, order, wd, int(steps), grid, np.asarray(code, dtype=np.int64), int(walk_order),
                     hs, np.ascontiguousarray(base), eta, delta, inv_s2, float(kappa), N, lay, unit_ptr, unit_rows, x, res,
                     row_ptr, rows, w, moved, used, log_factorials(int(N.max(initial=0))), *_row_scratch(res.size))
    return int(evals), np.where(used > 0, moved / np.maximum(used, 1.0), np.nan)


def ellipse_update(rng, x, res, pairs, *, grid, code, base, eta, delta, sigma, kappa, carry, row_ptr, rows, w,
                   walk_order: int = 1, spacing=None, members=None, mix=None, lump=None, coefficients=None,
                   precisions=None) -> int:
    r"""One elliptical slice update (Murray, Adams and MacKay 2010) of every pair's whole move, all
    increments at once, with the cells carried (module docstring): unit ``u``'s raw increments
    move by :math:`m \in \mathbb R^{K-1}`, ``v``'s by :math:`c\,m`, in the ancillary lattice
    coordinates.  The walk's Gaussian prior of both units is, in :math:`m`, the Gaussian with
    precisions :math:`Q = P_u + c^2 P_v` and mean :math:`\mu = -(P_u\delta_u + c P_v\delta_v)/Q`
    (``P`` the raw increments' prior precisions, 0 for ``v = -1``), so :math:`m` is drawn on the
    ellipse through the current point :math:`m = 0` and a fresh prior draw, under the rest of the
    density (both units' Dirichlet-multinomials and the exact measurement term), by shrinking the
    angle's bracket: an exact update of :math:`m` given everything else, whatever the prior's
    correlation with the likelihood, with no width to tune.  Where a slice along one direction at
    a time moves a combination of increments (a tract's people 65+ move through the slopes of all
    younger ages) only as far as each direction's conditional allows, the ellipse moves them
    all, as far as the prior and the data do together.

    Arguments as for :func:`carried_update` (``pairs`` ``(u, v)``, ``coefficients`` ``c``
    (None: -1), ``precisions`` in place of the walk's, every one of a pair's :math:`Q` > 0).
    ``x``, ``res``, ``eta`` and ``delta`` are updated in place.  Returns the number of density
    evaluations."""
    pu, pv, cvs, grid, unit_ptr, unit_rows, N, lay, hs, inv_s2 = _pair_inputs(
        x, pairs, grid, delta, sigma, carry, members, mix, lump, spacing, coefficients, precisions)
    P_v = np.where((pv >= 0)[:, None], inv_s2[np.maximum(pv, 0)], 0.0)
    d_v = np.where((pv >= 0)[:, None], delta[np.maximum(pv, 0)], 0.0)
    Q = inv_s2[pu] + cvs[:, None] ** 2 * P_v
    if not np.all(Q > 0):
        raise ValueError("every pair's move needs a prior precision > 0 in every increment")
    mu = -(inv_s2[pu] * delta[pu] + cvs[:, None] * P_v * d_v) / Q
    _seed(int(rng.integers(2**63 - 1)))
    return int(_ellipses(pu, pv, cvs, np.ascontiguousarray(mu), np.ascontiguousarray(1.0 / np.sqrt(Q)), grid,
                         np.asarray(code, dtype=np.int64), int(walk_order), hs, np.ascontiguousarray(base), eta, delta,
                         float(kappa), N, lay, unit_ptr, unit_rows, x, res, row_ptr, rows, w,
                         log_factorials(int(N.max(initial=0))), *_row_scratch(res.size)))


@numba.njit(cache=True)
def _rows_shifts(eta, members, grid, code, worder, hs, base, N, r, rsum, out, theta, level, hbuf, frac, pbuf, sel):
    r"""The shift :math:`h_m(\theta_m(\eta))` of every row (module docstring) into ``out`` ``(R, d)``."""
    for m in range(grid.shape[0]):
        u = members[m]
        _profile(base[m], eta[u], 1.0, 0.0, eta[u], code, worder, hs, theta, level)
        _shift(pbuf, _softmax_terms(theta, pbuf), float(N[m]), r[m], rsum[m], hbuf, frac, sel)
        out[m] = hbuf


@numba.njit(cache=True)
def _rows_density(eta, members, grid, code, worder, hs, base, kappa, N, lay, xi, x, res, row_ptr, rows, w, acc,
                  mark, touched, lfact, theta, level, wk):
    r"""Every row's Dirichlet-multinomial at the cells :math:`\xi + h(\theta(\eta))` plus the
    change of the measurement term from the current cells ``x`` (residuals ``res``); -inf when
    a cell is negative.  ``theta, level, wk``: work buffers (:func:`_work`)."""
    out = 0.0
    n_touched = 0
    for m in range(grid.shape[0]):
        u = members[m]
        _profile(base[m], eta[u], 1.0, 0.0, eta[u], code, worder, hs, theta, level)
        lm, n_touched = _unit_terms(m, grid[m], theta, float(N[m]), kappa, xi, lay, wk, x, row_ptr, rows, acc, mark,
                                    touched, n_touched, lfact)
        out += lm
        if not np.isfinite(out):
            break
    for j in range(n_touched):
        rr = touched[j]
        if np.isfinite(out):
            out -= w[rr] * ((res[rr] - acc[rr]) ** 2 - res[rr] ** 2)
        acc[rr] = 0.0
        mark[rr] = False
    return out


@numba.njit(cache=True)
def _move_cells(cells, new, x, res, row_ptr, rows):
    """``x[cells] = new``, the residuals ``res = y - Bx`` updated along."""
    for i in range(cells.size):
        c = cells[i]
        dx = new[i] - x[c]
        if dx != 0:
            x[c] += dx
            for p in range(row_ptr[c], row_ptr[c + 1]):
                res[rows[p]] -= dx


class CarriedCells:
    r"""The cells of every row carried along a change of all units' increments at once, for an
    update of the step scales that moves the increments and the cells together
    (:func:`~privinfer.pymc.walk_kernel.scale_update_transport` with ``loglik=``).

    At the current centred increments :math:`\eta^0` every row's ancillary coordinates
    :math:`\xi_m = x_m - h_m(\theta_m(\eta^0))` (module docstring) are held; at other
    increments the cells are :math:`x(\eta) = \xi + h(\theta(\eta))`, every row keeping its
    total.  :meth:`loglik` is the part of the posterior that moves with them,

    .. math:: L(\eta) = \sum_m \log\mathrm{DirMult}(x_m(\eta) \mid N_m,
              \kappa\,\mathrm{softmax}(\theta_m(\eta))) - \sum_r w_r\big[(y_r - (Bx(\eta))_r)^2
              - (y_r - (Bx^0)_r)^2\big],

    (:math:`-\infty` when a cell is negative), and since :math:`\eta \mapsto (\eta, \xi)` is a
    translation of the lattice for every :math:`\eta`, an exact update of any coordinates of
    the increments (with their scales) given :math:`\xi` under the walk's prior times
    :math:`e^{L}` is an exact update of the posterior.  Given :math:`\xi` the cells inform
    the increments like the measurements do, not like the cells: about
    :math:`1/(v_m + v_p)` per cell against :math:`1/v_p` with the cells held (``v_m`` a cell's
    measurement variance, ``v_p`` the prior's), which is what lets a scale move all the units'
    increments at once.  :meth:`commit` writes the cells at the chosen increments into ``x``
    and ``res`` (in place).

    Parameters are those of :func:`carried_update`; ``eta`` ``(U, K-1)`` the current centred
    increments.  Every row's cells must be non-negative and sum to its total."""

    def __init__(self, x, res, eta, *, grid, code, base, kappa, carry, row_ptr, rows, w, walk_order: int = 1,
                 spacing=None, members=None):
        grid = np.ascontiguousarray(grid, dtype=np.int64)
        U, K1 = np.shape(eta)
        unit_of = checked_members(members, grid.shape[0], U)
        self.x, self.res = x, res
        self.members = np.arange(U, dtype=np.int64) if unit_of is None else np.asarray(unit_of, dtype=np.int64)
        carry = np.ascontiguousarray(np.asarray(carry, dtype=float)[grid])
        N = np.asarray(x, dtype=np.int64)[grid].sum(axis=1)
        self.fraction = carry
        hs = np.ones(K1) if spacing is None else np.ascontiguousarray(spacing, dtype=float)
        d = grid.shape[1]
        self._static = (self.members, grid, np.asarray(code, dtype=np.int64), int(walk_order), hs,
                        np.ascontiguousarray(base, dtype=float))
        self._rows = (N, carry, carry.sum(axis=1))
        self._layout = carry_layout(grid, carry)
        self._meas = (row_ptr, rows, w)
        self._kappa = float(kappa)
        self._lfact = log_factorials(int(N.max(initial=0)))
        self._density_work = _work(d, K1, self._lfact.size)
        self._work = (np.empty(d), np.empty(K1 + 1), np.empty(d, dtype=np.int64), np.empty(d), np.empty(d), np.empty(d))
        self._acc = (np.zeros(res.size), np.zeros(res.size, dtype=np.bool_), np.empty(res.size, dtype=np.int64))
        self.xi = np.asarray(x, dtype=np.int64)[grid] - self._shifts(eta)

    def _shifts(self, eta) -> np.ndarray:
        r"""Every row's shift :math:`h_m(\theta_m(\eta))` ``(R, d)``."""
        out = np.empty(self._static[1].shape, dtype=np.int64)
        _rows_shifts(np.ascontiguousarray(eta, dtype=float), *self._static, *self._rows, out, *self._work)
        return out

    def loglik(self, eta) -> float:
        r""":math:`L(\eta)` (class docstring) at centred increments ``eta`` ``(U, K-1)``."""
        eta = np.ascontiguousarray(eta, dtype=float)
        return float(_rows_density(eta, *self._static, self._kappa, self._rows[0], self._layout, self.xi, self.x,
                                   self.res, *self._meas, *self._acc, self._lfact, *self._density_work))

    def cells_at(self, eta) -> np.ndarray:
        r"""Every row's cells :math:`\xi_m + h_m(\theta_m(\eta))` ``(R, d)`` at the increments
        ``eta``, without moving the state (negative where no such cells exist)."""
        return self.xi + self._shifts(eta)

    def commit(self, eta) -> None:
        """The cells at the increments ``eta`` written into ``x``, the residuals updated."""
        grid = self._static[1]
        _move_cells(grid.ravel(), self.cells_at(eta).ravel(), self.x, self.res, *self._meas[:2])


def scale_update_carried(rng, x, res, base, delta, groups, sigma, kappa, *, grid, code, carry, row_ptr, rows, w,
                         prior_scale: float, prior_dof: int = 1, width=SLICE_WIDTH, order: int = 1, spacing=None,
                         members=None, steps: int = SLICE_STEPS, coords=None, mix=None):
    r"""The step scales' update with every unit's increments and every row's cells carried
    along: the coordinates ``coords`` of :math:`\lambda = \log\sigma` (default all; a choice
    that must not depend on the state) slice sampled in turn, holding the unit transport's
    coordinates of the raw increments
    (:func:`~privinfer.pymc.walk_kernel.scale_update_unit_transport`) and the cells' ancillary
    coordinates :math:`\xi` (:class:`CarriedCells`).  The map of the increments must be fixed
    during the update, so it is built from cells that do not move with them: every row's cells
    at its base profile, :math:`\xi_m + h_m(b_m)` (clipped at 0), each row's information
    weighted by the share of its people not carried, :math:`\sum_i x_i(1 - r_i)/\sum_i x_i`.
    The target is the walk's prior times :math:`e^{L}` (:meth:`CarriedCells.loglik`), so the
    update is exact whatever the map's quality.

    Why.  Given the cells, every unit's increments are pinned down, and a scale can move only as
    far as the spread of the pinned increments allows; the cells move only given the
    increments.  Holding :math:`\xi` instead, the increments are informed only about as much
    as the measurements inform them, so a scale moves all units' increments and their cells
    together.

    ``x`` (int64, n) and ``res = y - Bx`` are updated in place; the other arguments as for
    :func:`carried_update` and :func:`~privinfer.pymc.walk_kernel.scale_update_unit_transport`
    (``delta`` the raw increments, ``groups`` their sibling groups, ``mix`` the units' prior
    variance multipliers).  Returns the new scales and
    raw increments and the number of evaluations of the target."""
    carried = CarriedCells(x, res, centred(delta, groups), grid=grid, code=code, base=base, kappa=kappa, carry=carry,
                           row_ptr=row_ptr, rows=rows, w=w, walk_order=order, spacing=spacing, members=members)
    X = np.maximum(carried.cells_at(np.zeros_like(delta)), 0).astype(float)
    weight = (X * (1.0 - carried.fraction)).sum(axis=1) / np.maximum(X.sum(axis=1), 1.0)
    sigma, delta, evals, _ = scale_update_unit_transport(
        rng, X, base, delta, groups, sigma, kappa, code, prior_scale, width=width, order=order, prior_dof=prior_dof,
        spacing=spacing, members=members, steps=steps, loglik=carried.loglik, info_weight=weight, coords=coords,
        mix=mix)
    carried.commit(centred(delta, groups))
    return sigma, delta, evals
