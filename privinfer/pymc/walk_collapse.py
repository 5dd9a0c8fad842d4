r"""A pair of sibling units' walks moved with their cells integrated out: the collapsed move
of :class:`~privinfer.pymc.WalkGibbs` (an exact Metropolis--Hastings update).

Why.  Given its cells a small unit's walk is pinned down by few people, and given the walk its
cells are pinned down by the Dirichlet-multinomial more tightly than the noisy measurements
pin them; updating the two in turn is the slow data-augmentation Gibbs sampler, slowest where
the measurements' variance is large against the cells' (a tract of 800 people: the share aged
65+ had a bulk ESS of 0.11 per iteration under the alternation of the model's walk moves and
cell pair moves, on the tract's conditional law; ``benchmarks/bench_collapsed_walk.py``).  A
move of the walk drawn from its law with the cells integrated out, the cells then drawn given
the new walk, has no such lag: 0.44 per iteration on the same law.

The move.  For sibling units ``u, v`` with centred increments :math:`\eta_u = m + t,\ \eta_v =
m - t` (raw :math:`\delta_u = \bar\delta + t,\ \delta_v = \bar\delta - t`; ``m`` and
:math:`\bar\delta` are kept, so no other unit's profile moves) and their totals :math:`N_u, N_v`
held:

1. :math:`t' \sim t_\nu(\hat t, H^{-1})` (``NU`` degrees of freedom), :math:`\hat t` the
   Gauss--Newton mode of the walk's law with the pair's cells integrated out in a Gaussian
   approximation: cells :math:`x \sim N(\mu(t), V(t))`, :math:`\mu = N\,\mathrm{softmax}(\theta)`,
   :math:`V = N p (1 - p)(N + \kappa)/(1 + \kappa)` (the Dirichlet-multinomial's moments), and
   every measurement row holding one cell of the pair (or one of each unit) Gaussian with the
   rest of its cells held, :math:`z_r = y_r - (\text{held cells})_r \sim N(B_r x, 1/(2w_r))`.
   With the rows' covariance :math:`S = B V B^\top + D` (:math:`D = \mathrm{diag}(1/(2w_r))`)
   the approximate log likelihood's gradient and information in the cells' means are
   :math:`B^\top S^{-1} (z - B\mu)` and :math:`B^\top S^{-1} B`,
   carried to ``t`` by the softmax's Jacobian.  The scoring starts at :math:`t = 0`, and
   :math:`z` and everything else it reads are the same before and after the move, so the
   proposal is an independence proposal given the held state;
2. the cells of both units given :math:`t'` and their totals, by the tree sampler
   (:class:`~privinfer.lattice.GroupSumSampler`), one unit after the other, from separable
   weights

   .. math:: \log\Gamma(x_i + \alpha_i) - \log x_i! + x_i\log\frac{N}{N + \kappa}
             - \tfrac12\lambda_i (x_i - m_i)^2 :

   the second unit's cells first, each with the Gaussian factor (:math:`\lambda_i, m_i`) that
   turns the Dirichlet-multinomial's moments into the cell's approximate posterior marginal
   (mean :math:`\mu + V B^\top S^{-1}(z - B\mu)`, variance :math:`V - \mathrm{diag}(V B^\top
   S^{-1} B V)`, the Gaussian approximation at the same walk); then the first unit's cells given
   those, each with the exact measurement term :math:`-\sum_{r \ni i} w_r (c_r - x_i)^2` of its
   rows, :math:`c_r` the row less its held cells and the second unit's new cell.  Drawing the
   two units' cells independently, from marginals, ignores their correlation through the rows
   holding one cell of each (a county's and the state's sex x age cells) and lost every proposal
   on two small Kentucky tracts; one after the other, 0.4 were accepted.  The tilt
   :math:`x_i \log(N/(N+\kappa))` is constant given the unit's total and only places the
   windows;
3. the joint Metropolis--Hastings test

   .. math:: \min\Big(1, \frac{\pi(t', x')\,t_\nu(t)\,q(x \mid t)}
                              {\pi(t, x)\,t_\nu(t')\,q(x' \mid t')}\Big),

   :math:`\pi` the exact target (the walk's Gaussian prior, both units' Dirichlet-multinomials
   and the exact measurement term :math:`-\sum_r w_r(y_r - (Bx)_r)^2`), :math:`q` the tree
   sampler's own probability of the cells (``log_q``).  With an exact cell sampler this is the
   Metropolis--Hastings test of the walk's marginal law; every approximation above (the
   Gaussian, the plug-in, the tables' truncation) only lowers the acceptance.

Compiled.  :func:`collapsed_update` runs the move by the compiled kernel of
:mod:`privinfer.pymc.collapse_kernel`: the same walk proposal (the Gaussian algebra through
Woodbury's identity, :math:`O(d)` when every row pairs cell ``i`` of one unit with cell ``i`` of
the other at most, as a tract's, its county's and the state's rows do) and a sequential cell
proposal in place of the tree sampler (each cell given a Gaussian approximation of the sum of the
cells after it, the last two exactly), with the same exact test; about 0.6 ms per pair on
Kentucky's tracts against about 20 ms for :class:`_Pair`, the reference kept for the pairs whose
rows the kernel cannot take (``compiled=False``: every pair).

Rows.  Every measurement row must hold exactly one cell of a unit, all of them (a unit's total,
or a sum over units: constant given the totals) or none; a row holding several but not all of a
unit's cells (a sex margin of a tract) is refused (:func:`collapse_rows`).  Pairs are updated one
after the other: units of one parent share measurement rows (and all units share the top
level's), so their moves are not independent.
"""

from __future__ import annotations

import numpy as np
from scipy.linalg import cho_factor, cho_solve
from scipy.special import gammaln, softmax
from threadpoolctl import threadpool_limits

from ..lattice import GroupSumSampler, GroupTree, unimodal_windows
from .collapse_kernel import compiled_collapsed_update
from .walk_kernel import MAX_NEWTON, MAX_STEP, prior_precisions, walk_offsets

__all__ = ["CollapseRows", "collapse_rows", "collapsed_update", "NU"]

#: Degrees of freedom of the walk's t proposal (the benchmark's: acceptance 0.55 on the
#: smallest Kentucky tracts' conditional laws).
NU = 8.0
#: The scoring stops once the Newton decrement is below this (in nats).
TOL = 1e-6
#: Floor of the Gaussian approximation's cell variance (a cell whose expected count is near 0).
V_FLOOR = 1e-2


class CollapseRows:
    """For every unit, the measurement rows that hold exactly one of its cells: ``ptr`` ``(U+1,)``,
    ``rows`` and ``pos`` (the cell's column in the unit's row of ``grid``), unit ``u``'s entries
    ``ptr[u]:ptr[u+1]`` (:func:`collapse_rows`)."""

    def __init__(self, ptr, rows, pos):
        self.ptr, self.rows, self.pos = ptr, rows, pos

    def of(self, u: int):
        s = slice(self.ptr[u], self.ptr[u + 1])
        return self.rows[s], self.pos[s]


def collapse_rows(grid, row_ptr, rows, n_rows: int) -> CollapseRows:
    """The rows of every unit (one row of ``grid`` ``(U, d)`` per unit) that hold exactly one of
    its cells, from the CSC pattern of the 0/1 query matrix (``row_ptr``, ``rows``); a one-line
    error when a row holds several but not all of a unit's cells (the collapsed move's weights
    are separable only without such rows)."""
    grid = np.asarray(grid, dtype=np.int64)
    U, d = grid.shape
    cell = grid.ravel()
    counts = np.diff(row_ptr)[cell]
    unit = np.repeat(np.repeat(np.arange(U), d), counts)
    pos = np.repeat(np.tile(np.arange(d), U), counts)
    starts = row_ptr[cell]
    offs = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    row = rows[np.repeat(starts, counts) + offs]
    key = unit * np.int64(n_rows) + row
    _, inv, held = np.unique(key, return_inverse=True, return_counts=True)
    n_held = held[inv]
    if np.any((n_held > 1) & (n_held < d)):
        raise ValueError("the collapsed walk move needs every measurement row to hold one, all or none of a unit's "
                         "cells; a row holds several but not all")
    one = n_held == 1
    order = np.argsort(unit[one], kind="stable")
    u1 = unit[one][order]
    ptr = np.concatenate([[0], np.cumsum(np.bincount(u1, minlength=U))]).astype(np.int64)
    return CollapseRows(ptr, row[one][order].astype(np.int64), pos[one][order].astype(np.int64))


class _Pair:
    """One pair's collapsed move: the Gaussian approximation, the proposals and the target."""

    def __init__(self, u, v, x, res, *, grid, table: CollapseRows, A, base, eta, delta, prec, kappa, w):
        self.u, self.v = u, v
        self.cells = np.concatenate([grid[u], grid[v]])
        d = grid.shape[1]
        self.d = d
        self.x = x[self.cells].astype(np.int64)
        self.N = np.array([self.x[:d].sum(), self.x[d:].sum()])
        ru, pu = table.of(u)
        rv, pv = table.of(v)
        R, inv = np.unique(np.concatenate([ru, rv]), return_inverse=True)
        self.R = R
        col = np.concatenate([pu, pv + d])
        B = np.zeros((R.size, 2 * d))
        B[inv, col] = 1.0
        self.B = B
        self.w = w[R]
        self.z = res[R] + B @ self.x                     # the rows less the held cells: unchanged by the move
        self.A, self.kappa = A, float(kappa)
        self.base = np.concatenate([base[u], base[v]])
        self.m = 0.5 * (eta[u] + eta[v])
        self.t0 = 0.5 * (eta[u] - eta[v])
        self.mraw = 0.5 * (delta[u] + delta[v])
        self.pu, self.pv = prec[u], prec[v]

    def profile(self, t):
        """Shares ``p`` ``(2d,)`` and the means' Jacobian ``d mu / d t`` ``(2d, K-1)``."""
        d, A = self.d, self.A
        pu = softmax(self.base[:d] + A @ (self.m + t))
        pv = softmax(self.base[d:] + A @ (self.m - t))
        Ju = self.N[0] * (pu[:, None] * A - np.outer(pu, pu @ A))
        Jv = -self.N[1] * (pv[:, None] * A - np.outer(pv, pv @ A))
        return np.concatenate([pu, pv]), np.vstack([Ju, Jv])

    def gaussian(self, t):
        """The Gaussian approximation at ``t``: the means ``mu``, variances ``V``, the factor of
        the rows' covariance :math:`S = B V B^\top + D`, the Jacobian and the shares."""
        p, J = self.profile(t)
        Nc = np.repeat(self.N.astype(float), self.d)
        mu = Nc * p
        f = (Nc + self.kappa) / (1.0 + self.kappa)
        V = np.maximum(Nc * p * (1.0 - p) * f, V_FLOOR)
        cf = cho_factor((self.B * V[None, :]) @ self.B.T + np.diag(0.5 / self.w), lower=True)
        return mu, V, cf, J, p

    def prior(self, t):
        return -0.5 * float(np.sum((self.mraw + t) ** 2 * self.pu + (self.mraw - t) ** 2 * self.pv))

    def mode(self):
        """Gauss--Newton mode and precision of ``t`` (module docstring, step 1), from 0."""
        t = np.zeros_like(self.m)
        prec0 = self.pu + self.pv
        H = np.diag(prec0)
        for _ in range(MAX_NEWTON):
            mu, _, cf, J, _ = self.gaussian(t)
            g = self.B.T @ cho_solve(cf, self.z - self.B @ mu)
            BJ = self.B @ J
            H = np.diag(prec0) + BJ.T @ cho_solve(cf, BJ)
            G = -(self.mraw + t) * self.pu + (self.mraw - t) * self.pv + J.T @ g
            step = np.linalg.solve(H, G)
            dec = float(G @ step)
            if not np.isfinite(dec):
                break
            if dec > MAX_STEP**2:
                step *= MAX_STEP / np.sqrt(dec)
            t = t + step
            if dec < TOL:
                break
        return t, H

    def _sampler(self, tree: GroupTree, alpha, W, S, N: int):
        """The tree sampler of one unit's cells with weights ``lgamma(v + alpha) - lgamma(v + 1) +
        v (tilt + 2 S) - W v^2`` given its total ``N``."""
        tilt = np.log(max(N, 0.5) / (max(N, 0.5) + self.kappa))

        def logp(i, v):
            v = np.asarray(v, dtype=float)
            return gammaln(v + alpha[i]) - gammaln(v + 1.0) + v * (tilt + 2.0 * S[i]) - W[i] * v * v

        lo, hi, _, _ = unimodal_windows(logp, alpha.size, lower=0, upper=N)
        return GroupSumSampler(tree, logp, lo, hi)

    def samplers(self, tree: GroupTree, t):
        """The proposal of the cells given ``t`` (module docstring, step 2): the second unit's
        sampler, and a function of its cells giving the first unit's sampler."""
        mu, V, cf, _, p = self.gaussian(t)
        d = self.d
        alpha = self.kappa * p
        post = mu + V * (self.B.T @ cho_solve(cf, self.z - self.B @ mu))
        BV = self.B * V[None, :]
        var = np.clip(V - np.sum(BV * cho_solve(cf, BV), axis=0), 1e-12, V)
        # the second unit's cells: each one's Gaussian factor its approximate posterior marginal
        # over its prior's moments
        lam = np.maximum(1.0 / var - 1.0 / V, 1e-12)[d:]
        second = self._sampler(tree, alpha[d:], 0.5 * lam, 0.5 * (post / var - mu / V)[d:], int(self.N[1]))
        Bu, Bv = self.B[:, :d], self.B[:, d:]
        W = Bu.T @ self.w

        def first(xv):
            return self._sampler(tree, alpha[:d], W, Bu.T @ (self.w * (self.z - Bv @ xv)), int(self.N[0]))

        return second, first

    def propose(self, rng, tree: GroupTree, t):
        """Cells drawn given ``t``: ``(x (2d,), log q, ok)``."""
        second, first = self.samplers(tree, t)
        xv, lqv, okv = second.sample(rng, self.N[1:])
        if not okv[0]:
            return None, -np.inf, False
        xu, lqu, oku = first(xv).sample(rng, self.N[:1])
        return np.concatenate([xu, xv]), float(lqv[0] + lqu[0]), bool(oku[0])

    def log_q(self, tree: GroupTree, t, x) -> float:
        """The proposal's log probability of the cells ``x`` given ``t``."""
        second, first = self.samplers(tree, t)
        d = self.d
        return float(second.log_q(x[d:])[0] + first(x[d:]).log_q(x[:d])[0])

    def log_target(self, t, x):
        """The exact log target of ``(t, x)`` up to a constant of the held state."""
        p, _ = self.profile(t)
        a = self.kappa * p
        r = self.z - self.B @ x
        return (self.prior(t) + float(np.sum(gammaln(x + a) - gammaln(a) - gammaln(x + 1.0)))
                - float(np.sum(self.w * r * r)))


def _t_logpdf(v, mu, L):
    z = L.T @ (v - mu)
    return -0.5 * (NU + mu.size) * np.log1p(z @ z / NU)


def _reference_move(rng, u, v, x, res, *, grid, table, A, base, eta, delta, prec, kappa, w, tree) -> bool:
    """One pair's collapsed move by :class:`_Pair` (the reference: the tree sampler's cell
    proposal, dense Gaussian algebra); returns whether it was accepted."""
    pair = _Pair(int(u), int(v), x, res, grid=grid, table=table, A=A, base=base, eta=eta, delta=delta,
                 prec=prec, kappa=kappa, w=w)
    mu, H = pair.mode()
    L = np.linalg.cholesky(H)
    z = rng.standard_normal(mu.size) / np.sqrt(rng.chisquare(NU) / NU)
    t_new = mu + np.linalg.solve(L.T, z)
    x_new, lq_new, ok = pair.propose(rng, tree, t_new)
    if not ok:
        return False
    lq_old = pair.log_q(tree, pair.t0, pair.x)
    log_r = (pair.log_target(t_new, x_new) - pair.log_target(pair.t0, pair.x) + _t_logpdf(pair.t0, mu, L)
             - _t_logpdf(t_new, mu, L) + lq_old - lq_new)
    if not np.log(rng.random()) < log_r:
        return False
    eta[u], eta[v] = pair.m + t_new, pair.m - t_new
    delta[u], delta[v] = pair.mraw + t_new, pair.mraw - t_new
    x[pair.cells] = x_new
    res[pair.R] = pair.z - pair.B @ x_new
    return True


def collapsed_update(rng, x, res, pairs, *, grid, code, base, eta, delta, sigma, kappa, w, table: CollapseRows,
                     walk_order: int = 1, spacing=None, mix=None, compiled: bool = True) -> tuple[int, int]:
    """One collapsed move (module docstring) of every pair ``(u, v)`` in ``pairs``, in turn.

    ``x`` (int64, n) and ``res = y - Bx`` are updated in place, and so are ``eta`` (the centred
    increments ``(U, K-1)``) and ``delta`` (the raw increments); ``grid`` ``(U, d)`` every unit's
    cells (one row per unit), ``code`` ``(d,)`` their categories, ``base`` ``(U, d)`` the units'
    base log profiles, ``sigma`` the step scales, ``mix`` the units' prior variance multipliers
    (None: 1), ``w`` the rows' weights :math:`1/(2\\sigma_r^2)`, ``table`` the rows of every unit
    (:func:`collapse_rows`), ``walk_order`` and ``spacing`` as for
    :func:`~privinfer.pymc.walk_kernel.slopes`.  ``compiled``: the pairs by the compiled kernel
    (:mod:`privinfer.pymc.collapse_kernel`: the same move with a sequential cell proposal, about
    40 times cheaper), each pair whose rows it cannot take by the reference; False: every pair
    by the reference (:class:`_Pair`, the tree sampler's cell proposal).  Both are exact.
    Returns the numbers of accepted and proposed moves."""
    grid = np.asarray(grid, dtype=np.int64)
    d = grid.shape[1]
    K1 = eta.shape[1]
    A = walk_offsets(np.eye(K1), np.asarray(code, dtype=np.int64), order=walk_order, spacing=spacing).T
    prec = prior_precisions(sigma, mix, eta.shape[0])
    tree = GroupTree(np.zeros(d, dtype=np.int64))
    base = np.asarray(base, dtype=float)
    accepted = 0
    pu_all, pv_all = (np.asarray(p, dtype=np.int64) for p in pairs)
    common = dict(grid=grid, table=table, A=A, base=base, eta=eta, delta=delta, prec=prec, kappa=kappa, w=w)
    # the pair's matrices are small (about 200 x 100): BLAS threads only contend with the other chains
    with threadpool_limits(1, user_api="blas"):
        start = 0
        while start < pu_all.size:
            if compiled:
                acc, stop = compiled_collapsed_update(rng, x, res, pu_all, pv_all, start, nu=NU, v_floor=V_FLOOR,
                                                      max_newton=MAX_NEWTON, max_step=MAX_STEP, tol=TOL, **common)
                accepted += acc
                if stop == pu_all.size:
                    break
            else:
                stop = start
            accepted += _reference_move(rng, pu_all[stop], pv_all[stop], x, res, tree=tree, **common)
            start = stop + 1
    return accepted, int(pu_all.size)
