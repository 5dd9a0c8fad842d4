r"""Pair moves for integer cells measured by Gaussian-noise sums, with a Dirichlet-multinomial prior.

The target is the posterior of non-negative integer cells :math:`x` observed through sums
:math:`y_r = (Bx)_r + e_r` with discrete Gaussian noise :math:`e_r \sim \mathcal N_{\mathbb Z}(0,
\sigma_r^2)` (CKS 2020; the Census noisy measurements, :class:`~privinfer.mechanisms.NoisyMeasurements`
with 0/1 queries) and, optionally, a Dirichlet-multinomial prior on the cells of every unit
``u`` of a partition given the unit's total :math:`N_u = \sum_{i\in u} x_i`:

.. math:: \log \pi(x) = -\sum_r w_r (y_r - (Bx)_r)^2
          + \sum_u \Big[\log\Gamma(N_u + 1) - \log\Gamma(N_u + \kappa_u)\Big]
          + \sum_i \Big[\log\Gamma(x_i + \alpha_i) - \log\Gamma(x_i + 1)\Big] + \text{const},

:math:`w_r = 1/(2\sigma_r^2)` (the discrete Gaussian's normalizer does not depend on ``x``),
:math:`\kappa_u = \sum_{i \in u}\alpha_i`; the unit totals themselves are flat.

A move picks a cell ``i`` uniformly, a *family* of partner groups with fixed probabilities
and a partner ``j`` uniformly among the other cells of ``i``'s group in that family (so the
pair is chosen with the same probability from either end), and moves along the line
:math:`x + d(e_i - e_j)`, which keeps every sum containing both cells -- in particular the
invariant, when every family's groups lie inside its groups.  Along the line the measurement
term is exactly quadratic, :math:`-A d^2 + B d`, with
:math:`A = \sum_{r \in R_i \triangle R_j} w_r` and
:math:`B = 2(\sum_{R_i \setminus R_j} w_r u_r - \sum_{R_j \setminus R_i} w_r u_r)`, ``R_i`` the rows
holding cell ``i`` and :math:`u = y - Bx` the running residuals (rows holding both cells do
not change).  Its maximizer in absolute position, :math:`c = x_i + B/(2A)`, is the same
from every point of the line, so the proposal

.. math:: t = \mathrm{round}(c + s Z), \quad Z \sim N(0, 1), \quad s = \lambda/\sqrt{2A}

(``lambda`` = :data:`SPREAD`) is an independence proposal on the line, accepted with
probability :math:`\min\{1, \pi(x')\,q(x_i) / (\pi(x)\,q(t))\}`, ``q`` the exact mass of the
rounded normal at an integer (computed in log space to the far tails); proposals below zero are
rejected.  For two cells of one unit of the prior the proposal's Gaussian also holds the prior's
along the line: given their sum :math:`T = x_i + x_j` (the same at every point of the line) the
Dirichlet-multinomial's conditional of :math:`x_i` is the beta-binomial
:math:`\mathrm{BB}(T, \alpha_i, \alpha_j)` (the Dirichlet's aggregation property), with mean
:math:`m = T\alpha_i/(\alpha_i + \alpha_j)` and variance
:math:`v = T\alpha_i\alpha_j(\alpha_i + \alpha_j + T)/((\alpha_i + \alpha_j)^2(\alpha_i + \alpha_j + 1))`,
so the proposal is the product :math:`N(c', 1/P)`, :math:`P = 2A + 1/v`,
:math:`c' = (2Ac + m/v)/P`, and :math:`s = \lambda/\sqrt P`: still a function of the line alone,
an independence proposal on it.  For cells of two units, each cell's conditional given the rest
of its unit (:math:`R_u = N_u - x_i`, the same along the line) under the flat unit total is
:math:`\propto \Gamma(x + \alpha_i)/x! \cdot (R_u + x)!/\Gamma(R_u + x + \kappa_u)`, close to the
negative binomial :math:`\mathrm{NB}(\alpha_i, \rho)`, :math:`\rho = (R_u + 1)/(R_u + \kappa_u)`,
for cells small against their unit; its moments (mean :math:`\alpha_i\rho/(1 - \rho)`,
variance the mean over :math:`1 - \rho`) give the two cells' Gaussians along the line.  Where a
cell's measurements are loose against its prior (a small cell, 3 people measured with sd 14),
the measurement's Gaussian alone proposes jumps of about 7 and most are refused.  The prior
enters the target through the acceptance ratio.
The chain is reversible with respect to :math:`\pi` and, with a family of groups that connect
all cells of each invariant group, irreducible on the non-negative fibre.  When the line has no
Gaussian (``A = 0``, the two cells in the same rows, and no prior along it) the move is a
symmetric random walk.

The kernels are compiled with Numba (NumPy code, JIT-compiled to machine code); nothing
here depends on PyMC.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import scipy.sparse as sp

from .._special import lgamma_ratio_scalar

__all__ = ["MeasurementRows", "MeasuredPairs", "SPREAD", "SweepCounts", "measured_pair_sweeps", "rounded_normal_logmass"]

#: Proposal spread relative to the conditional's Gaussian scale along a line.
SPREAD = 1.3

_SQRT2 = math.sqrt(2.0)
_LOG_HALF = math.log(0.5)


@numba.njit(cache=True)
def _log_erfc(x):
    """log erfc(x), accurate in the far right tail (continued fraction of erfcx for x > 4)."""
    if x < 4.0:
        return math.log(math.erfc(x))
    # erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + 2/(x + ...)))))
    f = x
    for k in range(60, 0, -1):
        f = x + 0.5 * k / f
    return -x * x - 0.5 * math.log(math.pi) - math.log(f)


@numba.njit(cache=True)
def _log_upper(z):
    """log Q(z) = log P(Z > z) for a standard normal Z."""
    return _LOG_HALF + _log_erfc(z / _SQRT2)


@numba.njit(cache=True)
def _logmass(v, c, s):
    """log P(round(c + s Z) = v) = log(Phi((v + 1/2 - c)/s) - Phi((v - 1/2 - c)/s))."""
    a = (v - 0.5 - c) / s
    b = (v + 0.5 - c) / s
    if a < 0.0 and b > 0.0:  # the interval holds the centre: no cancellation
        return math.log(1.0 - math.exp(_log_upper(b)) - math.exp(_log_upper(-a)))
    if b <= 0.0:  # left tail: reflect
        a, b = -b, -a
    la = _log_upper(a)
    lb = _log_upper(b)
    return la + math.log1p(-math.exp(lb - la))


def rounded_normal_logmass(v, c, s) -> np.ndarray:
    """Exact log mass of ``round(c + s Z)`` at the integers ``v`` (vectorized, for checks)."""
    v = np.asarray(v, dtype=float)
    return np.array([_logmass(float(t), float(c), float(s)) for t in v.ravel()]).reshape(v.shape)


@numba.njit(cache=True)
def _seed(seed):
    np.random.seed(seed)


@numba.njit(cache=True)
def _line(i, j, row_ptr, rows, w, u):
    """(A, B) of the quadratic -A d^2 + B d of the measurement term along x + d(e_i - e_j)."""
    A = 0.0
    B = 0.0
    p, pe = row_ptr[i], row_ptr[i + 1]
    q, qe = row_ptr[j], row_ptr[j + 1]
    while p < pe or q < qe:
        if q >= qe or (p < pe and rows[p] < rows[q]):
            r = rows[p]
            A += w[r]
            B += 2.0 * w[r] * u[r]
            p += 1
        elif p >= pe or rows[q] < rows[p]:
            r = rows[q]
            A += w[r]
            B -= 2.0 * w[r] * u[r]
            q += 1
        else:  # a row holding both cells does not change
            p += 1
            q += 1
    return A, B


@numba.njit(cache=True)
def _apply(i, j, d, row_ptr, rows, u):
    p, pe = row_ptr[i], row_ptr[i + 1]
    q, qe = row_ptr[j], row_ptr[j + 1]
    while p < pe or q < qe:
        if q >= qe or (p < pe and rows[p] < rows[q]):
            u[rows[p]] -= d
            p += 1
        elif p >= pe or rows[q] < rows[p]:
            u[rows[q]] += d
            q += 1
        else:
            p += 1
            q += 1


@numba.njit(cache=True)
def _prior_delta(i, j, d, x, alpha, unit, kappa, N):
    """Change of the Dirichlet-multinomial log prior when x_i += d and x_j -= d."""
    xi, xj = x[i], x[j]
    # differences of log-gammas at large arguments (alpha = kappa p, kappa -> infinity as the
    # overdispersion vanishes) by Stirling's series: the direct difference loses digits
    out = (lgamma_ratio_scalar(xi + alpha[i], d)
           - math.lgamma(xi + d + 1.0) + math.lgamma(xi + 1.0)
           + lgamma_ratio_scalar(xj + alpha[j], -d)
           - math.lgamma(xj - d + 1.0) + math.lgamma(xj + 1.0))
    ui, uj = unit[i], unit[j]
    if ui != uj:
        Ni, Nj = N[ui], N[uj]
        out += (math.lgamma(Ni + d + 1.0) - math.lgamma(Ni + 1.0)
                - lgamma_ratio_scalar(Ni + kappa[ui], d)
                + math.lgamma(Nj - d + 1.0) - math.lgamma(Nj + 1.0)
                - lgamma_ratio_scalar(Nj + kappa[uj], -d))
    return out


@numba.njit(cache=True)
def _nb_moments(a, rest, kappa):
    """Mean and variance of the negative binomial NB(a, rho), rho = (rest + 1)/(rest + kappa): a
    cell's conditional given the rest of its unit under a flat unit total (module docstring);
    variance 0 where kappa <= 1."""
    if kappa <= 1.0:
        return 0.0, 0.0
    q = (kappa - 1.0) / (rest + kappa)          # 1 - rho
    mean = a * (1.0 - q) / q
    return mean, mean / q


@numba.njit(cache=True)
def _line_gaussian(A, B, xi, xj, i, j, has_prior, alpha, unit, kappa, N):
    """(precision, centre) of the proposal's Gaussian for ``x_i`` along the line through ``x``
    (module docstring): the measurement term's times the prior's approximation along it (for
    two cells of one unit their beta-binomial's moments, else two independent negative
    binomials); precision 0: none.  Every input is the same at every point of the line."""
    prec = 2.0 * A
    pc = 2.0 * A * xi + B              # precision x centre; 2A xi + B = 2A c, the same along the line
    if has_prior:
        T = float(xi + xj)
        a, b = alpha[i], alpha[j]
        if unit[i] == unit[j]:
            ab = a + b
            v = T * a * b * (ab + T) / (ab * ab * (ab + 1.0))
            if v > 0.0:
                prec += 1.0 / v
                pc += T * a / ab / v
        else:
            ui, uj = unit[i], unit[j]
            mi, vi = _nb_moments(a, float(N[ui] - xi), kappa[ui])
            mj, vj = _nb_moments(b, float(N[uj] - xj), kappa[uj])
            if vi > 0.0 and vj > 0.0:
                prec += 1.0 / vi + 1.0 / vj
                pc += mi / vi + (T - mj) / vj
    return prec, (pc / prec if prec > 0.0 else 0.0)


@numba.njit(cache=True)
def _sweeps(n_moves, x, u, row_ptr, rows, w, fam_cum, group_of, grp_ptr, grp_cells,
            has_prior, alpha, unit, kappa, N, spread):
    n = x.size
    n_fam = fam_cum.size
    proposed = 0
    accepted = 0
    moved = 0
    for _ in range(n_moves):
        i = np.random.randint(n)
        r = np.random.random()
        f = 0
        while f < n_fam - 1 and r >= fam_cum[f]:
            f += 1
        g = group_of[f, i]
        if g < 0:
            continue
        start, size = grp_ptr[g], grp_ptr[g + 1] - grp_ptr[g]
        if size < 2:
            continue
        k = np.random.randint(size - 1)
        j = grp_cells[start + k]
        if j == i:
            j = grp_cells[start + size - 1]
        proposed += 1
        A, B = _line(i, j, row_ptr, rows, w, u)
        xi = x[i]
        prec, c = _line_gaussian(A, B, xi, x[j], i, j, has_prior, alpha, unit, kappa, N)
        if prec > 0.0:
            s = spread / math.sqrt(prec)
            tv = math.floor(c + s * np.random.standard_normal() + 0.5)
            d = np.int64(tv) - xi
            log_q = 0.0
        else:  # same rows: a symmetric random walk on the non-zero steps
            step = 1 + np.int64(math.floor(-2.0 * math.log(1.0 - np.random.random())))
            d = step if np.random.random() < 0.5 else -step
            c = 0.0
            s = 1.0
        if d == 0:
            accepted += 1
            continue
        if xi + d < 0 or x[j] - d < 0:
            continue
        log_a = -A * d * d + B * d
        if prec > 0.0:
            log_a += _logmass(float(xi), c, s) - _logmass(float(xi + d), c, s)
        if has_prior:
            log_a += _prior_delta(i, j, d, x, alpha, unit, kappa, N)
        if log_a >= 0.0 or math.log(np.random.random()) < log_a:
            x[i] += d
            x[j] -= d
            _apply(i, j, d, row_ptr, rows, u)
            if has_prior and unit[i] != unit[j]:
                N[unit[i]] += d
                N[unit[j]] -= d
            accepted += 1
            moved += 1
    return proposed, accepted, moved


@dataclass
class SweepCounts:
    """Moves proposed, accepted (a zero step counts as accepted) and made in a call."""

    proposed: int
    accepted: int
    moved: int

    @property
    def acceptance(self) -> float:
        return self.accepted / self.proposed if self.proposed else float("nan")


class MeasurementRows:
    r"""The measurement term's structure: the rows holding every cell (``row_ptr``, ``rows``:
    the CSC pattern of the query matrix, sorted) and their weights :math:`w_r = 1/(2\sigma_r^2)`.

    Parameters
    ----------
    B
        ``(m, n)`` sparse 0/1 query matrix (rows: measured sums; columns: cells).
    sigma
        ``(m,)`` discrete Gaussian scale parameter of every row.
    """

    def __init__(self, B, sigma):
        B = sp.csc_matrix(B)
        m, n = B.shape
        sigma = np.asarray(sigma, dtype=float)
        if sigma.shape != (m,) or not np.all(np.isfinite(sigma)) or np.any(sigma <= 0):
            raise ValueError(f"sigma must hold {m} finite scales > 0")
        B.sort_indices()
        self.n, self.m = n, m
        self.row_ptr = B.indptr.astype(np.int64)
        self.rows = B.indices.astype(np.int64)
        self.B = B.tocsr()
        self.w = 1.0 / (2.0 * sigma**2)

    def residuals(self, x, y) -> np.ndarray:
        """``u = y - B x`` (float)."""
        return np.asarray(y, dtype=float) - self.B @ np.asarray(x, dtype=float)

    def moving_rows(self, blocks) -> tuple[np.ndarray, np.ndarray]:
        r"""The CSC pattern ``(row_ptr, rows)`` of the query matrix less the entries that a move
        keeping the total of every block of cells cannot change: ``blocks`` ``(R, d)`` cell
        indices, one block per row, disjoint.  A row holding every cell of a block changes by that
        block's total, 0 under such a move, so the row is left out of the block's cells (a row's
        residual :math:`y_r - (Bx)_r` updated through the entries kept stays exact); cells outside
        the blocks keep all their rows.  For a tract hierarchy with tract blocks this drops the
        tract, county and state totals from every cell: half of its rows."""
        blocks = np.asarray(blocks, dtype=np.int64)
        if blocks.ndim != 2 or blocks.size and (blocks.min() < 0 or blocks.max() >= self.n):
            raise ValueError(f"blocks must be an (R, d) array of cell indices below {self.n}")
        if np.bincount(blocks.ravel(), minlength=self.n).max(initial=0) > 1:
            raise ValueError("blocks must be disjoint: a cell is in two blocks")
        R, d = blocks.shape
        block_of = np.full(self.n, -1, dtype=np.int64)
        block_of[blocks.ravel()] = np.repeat(np.arange(R), d)
        col = np.repeat(np.arange(self.n), np.diff(self.row_ptr))
        b = block_of[col]
        inside = b >= 0
        # per entry, how many cells of its cell's block its row holds
        _, at, held = np.unique(self.rows[inside] * R + b[inside], return_inverse=True, return_counts=True)
        keep = ~inside
        keep[inside] = held[at] < d
        row_ptr = np.concatenate([[0], np.cumsum(np.bincount(col[keep], minlength=self.n))]).astype(np.int64)
        return row_ptr, np.ascontiguousarray(self.rows[keep])


class MeasuredPairs(MeasurementRows):
    r"""The static structure of the target (module docstring): measurement rows of every cell and
    their weights (:class:`MeasurementRows`), the families of partner groups, and the units of
    the Dirichlet-multinomial prior.

    Parameters
    ----------
    B
        ``(m, n)`` sparse 0/1 query matrix (rows: measured sums; columns: cells).
    sigma
        ``(m,)`` discrete Gaussian scale parameter of every row.
    families
        list of ``(codes, weight)``: ``codes`` (n,) int the partner group of every cell (``-1``
        no partner in this family), ``weight`` > 0 the family's probability (normalized).
        Each family's groups must lie inside the invariant's groups (the caller's duty: the
        moves keep the sums of those groups).
    unit
        ``(n,)`` int unit of every cell for the Dirichlet-multinomial prior (``None``: flat
        prior on the cells).
    """

    def __init__(self, B, sigma, families, unit=None):
        super().__init__(B, sigma)
        n = self.n
        if not families:
            raise ValueError("give at least one family of partner groups")
        weights = np.array([float(wt) for _, wt in families])
        if np.any(~np.isfinite(weights)) or np.any(weights <= 0):
            raise ValueError("family weights must be finite and > 0")
        self.fam_cum = np.cumsum(weights / weights.sum())
        group_of = np.full((len(families), n), -1, dtype=np.int64)
        ptrs, cells, offset = [np.zeros(1, dtype=np.int64)], [], 0
        for f, (codes, _) in enumerate(families):
            codes = np.asarray(codes, dtype=np.int64)
            if codes.shape != (n,):
                raise ValueError(f"family {f}: one group code per cell needed")
            ok = codes >= 0
            _, inverse = np.unique(codes[ok], return_inverse=True)
            g = np.full(n, -1, dtype=np.int64)
            g[ok] = inverse + offset
            group_of[f] = g
            order = np.flatnonzero(ok)[np.argsort(inverse, kind="stable")]
            sizes = np.bincount(inverse)
            ptrs.append(ptrs[-1][-1] + np.cumsum(sizes))
            cells.append(order)
            offset += sizes.size
        self.group_of = group_of
        self.grp_ptr = np.concatenate(ptrs).astype(np.int64)
        self.grp_cells = np.concatenate(cells).astype(np.int64) if cells else np.zeros(0, np.int64)
        if unit is None:
            self.unit = np.zeros(n, dtype=np.int64)
            self.n_units = 1
            self.has_prior = False
        else:
            unit = np.asarray(unit, dtype=np.int64)
            if unit.shape != (n,) or np.any(unit < 0):
                raise ValueError("unit must give a unit code >= 0 for every cell")
            self.unit = unit
            self.n_units = int(unit.max()) + 1 if n else 0
            self.has_prior = True

    def log_target(self, x, y, alpha=None) -> float:
        """:math:`\\log\\pi(x)` up to a constant (for checks)."""
        from scipy.special import gammaln

        x = np.asarray(x, dtype=np.int64)
        if np.any(x < 0):
            return -np.inf
        u = self.residuals(x, y)
        out = -float(np.sum(self.w * u**2))
        if self.has_prior:
            alpha = np.asarray(alpha, dtype=float)
            N = np.bincount(self.unit, weights=x, minlength=self.n_units)
            kappa = np.bincount(self.unit, weights=alpha, minlength=self.n_units)
            out += float(np.sum(gammaln(N + 1.0) - gammaln(N + kappa)))
            out += float(np.sum(gammaln(x + alpha) - gammaln(x + 1.0)))
        return out


def measured_pair_sweeps(rng, x, y, pairs: MeasuredPairs, *, alpha=None, sweeps: float = 1.0,
                         spread: float = SPREAD, u=None):
    """Run ``sweeps * n`` pair moves (module docstring) from ``x``; returns ``(x, u, counts)``.

    ``x`` (int64, n) is updated in place and returned, ``u`` the residuals ``y - Bx`` kept
    exactly in step (recomputed from ``x`` and ``y`` when not given); ``alpha`` (n,) > 0 the
    Dirichlet-multinomial parameters (required with a prior unit partition, ignored without).
    Randomness: one 63-bit seed drawn from ``rng`` (a ``numpy.random.Generator``) seeds the
    compiled kernel's generator, so a seeded ``rng`` reproduces the run.
    """
    x = np.asarray(x)
    if x.dtype != np.int64 or x.shape != (pairs.n,):
        raise ValueError(f"x must be an int64 vector of length {pairs.n}")
    if u is None:
        u = pairs.residuals(x, y)
    if pairs.has_prior:
        alpha = np.asarray(alpha, dtype=float)
        if alpha.shape != (pairs.n,) or not np.all(np.isfinite(alpha)) or np.any(alpha <= 0):
            raise ValueError("alpha must hold one finite value > 0 per cell")
        kappa = np.bincount(pairs.unit, weights=alpha, minlength=pairs.n_units)
        N = np.bincount(pairs.unit, weights=x, minlength=pairs.n_units).astype(np.int64)
    else:
        alpha = np.ones(pairs.n)
        kappa = np.ones(1)
        N = np.zeros(1, dtype=np.int64)
    if not (np.isfinite(spread) and spread > 0):
        raise ValueError("spread must be a finite number > 0")
    _seed(int(rng.integers(2**63 - 1)))
    n_moves = int(round(float(sweeps) * pairs.n))
    proposed, accepted, moved = _sweeps(n_moves, x, u, pairs.row_ptr, pairs.rows, pairs.w, pairs.fam_cum,
                                        pairs.group_of, pairs.grp_ptr, pairs.grp_cells, pairs.has_prior,
                                        alpha, pairs.unit, kappa, N, float(spread))
    return x, u, SweepCounts(int(proposed), int(accepted), int(moved))
