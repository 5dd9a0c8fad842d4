r"""A TopDown-style baseline: integer noise, then non-negative least squares onto the invariant,
then controlled rounding.  Released for comparison only -- it is **not transparent**.

The Census Bureau's TopDown algorithm (Abowd et al. 2022, "The 2020 Census Disclosure
Avoidance System TopDown Algorithm", Harvard Data Science Review; Table 1) works in two
phases at each geographic level:

1. *measurement*: add integer noise (discrete Gaussian, CKS 2020; earlier vintages used the
   double geometric) to the confidential counts, ``m = x + e``;
2. *estimation*: solve a constrained least-squares problem that imposes the invariants and
   non-negativity, then a controlled-rounding integer program that returns non-negative
   integers still meeting the (integer) invariants.

:class:`TopDownBaseline` implements one level of it for an invariant ``C x = t`` (integer C):

**Projection.**  :math:`z^* = \arg\min_z \tfrac12\|z - m\|_2^2` subject to :math:`C z = t,\ z \ge 0`
(:func:`nonnegative_projection`), computed exactly:

* totals and partition totals (``invariants.total`` / ``groups``): each group is projected onto
  the scaled simplex :math:`\{z \ge 0, \sum z = t_g\}` in closed form,
  :math:`z_i = \max(m_i - \tau_g, 0)` with :math:`\tau_g = (\sum_{j\le\rho} u_j - t_g)/\rho`,
  ``u`` the group's values sorted decreasingly and :math:`\rho` the largest ``j`` with
  :math:`u_j - (\sum_{k\le j} u_k - t_g)/j > 0` (Held, Wolfe, Crowder 1974; Duchi et al. 2008);
* any other C: through the dual.  The Lagrangian dual of the projection is the unconstrained
  convex problem :math:`\min_\mu \varphi(\mu) = \tfrac12\|(m + C^\top\mu)_+\|^2 - \mu^\top t`,
  whose gradient is :math:`C(m + C^\top\mu)_+ - t`.  For *any* :math:`\mu`, the point
  :math:`z = (m + C^\top\mu)_+` is non-negative, and with :math:`s = z - m - C^\top\mu = (m + C^\top\mu)_- \ge 0`
  it satisfies stationarity (:math:`z - m = C^\top\mu + s`) and complementarity
  (:math:`s_i z_i = 0`).  So :math:`z` is *the* projection as soon as :math:`C z = t`: the KKT
  conditions of this strictly convex QP then hold, and they are sufficient.  We minimize
  :math:`\varphi` by semismooth Newton (generalized Hessian :math:`C_A C_A^\top` over the cells
  with :math:`(m + C^\top\mu)_i > 0`, Armijo backtracking, gradient steps as fallback); because
  :math:`\varphi` is piecewise quadratic, once the positive set is right the Newton step lands on
  the minimizer, and the loop stops when :math:`\|C z - t\|_\infty \le 10^{-9}\max(1, \|t\|_\infty, \|m\|_\infty)`
  -- the KKT certificate, checked, not an iteration budget.

**Rounding** (totals exactly kept):

* partition totals: largest-remainder (Hamilton) rounding in each group: floor every cell and
  give the group's missing :math:`t_g - \sum\lfloor z_i\rfloor` units to the cells with the
  largest fractional parts (ties broken uniformly at random).  This is the L1-closest integer
  point with the same group totals among points within one unit of :math:`z`;
* any other integer C: controlled rounding by a 0/1 program (``scipy.optimize.milp``, HiGHS):
  :math:`x = \lfloor z\rfloor + b`, :math:`b \in \{0,1\}^n`, minimize
  :math:`\|x - z\|_1 = \sum_i r_i + \sum_i (1 - 2 r_i) b_i` (:math:`r = z - \lfloor z\rfloor`) subject to
  :math:`C b = t - C\lfloor z\rfloor`.  If no floor/ceiling rounding keeps the totals (it always
  exists for totally unimodular C such as two-way margins), the unrestricted integer program
  :math:`\min \|x - z\|_1` s.t. :math:`C x = t, x \ge 0` integer is solved instead.

Why this baseline is not transparent
------------------------------------
The released ``y = R(P(x + e, t))`` is a deterministic (up to tie-breaking) function of the
noisy measurement after an optimization.  Its law :math:`p(y \mid x)` is the push-forward of the
noise law through the projection and rounding maps: a sum over the preimage
:math:`\{e : R(P(x + e)) = y\}`, a polyhedral region whose shape depends on ``x`` (cells near
zero are clipped; non-negativity binds only for some ``x``), and the support of ``y`` itself
depends on ``x`` through ``t = C x`` and the clipping.  No closed form or tractable exact
likelihood exists, so :meth:`TopDownBaseline.logp` raises :class:`NonTransparentMechanismError`.
The errors are also biased: clipping at zero pushes small cells up and, the totals being fixed,
large cells down (Zhu, Van Hentenryck, Fioretto 2021; Dharangutte et al. 2023, Sec. 1 and
App. E; Gao, Gong, Yu 2022, Sec. 5.1).

Privacy: the measurement ``m`` carries the noise mechanism's guarantee (``(eps, 0)``-DP for the
double geometric, ``rho``-zCDP for the discrete Gaussian); the release is post-processing of
``m`` and of ``t``, and ``t`` is the same for neighbours that share the invariant, so the
guarantee holds between invariant-conforming neighbours (induced subspace DP, Gao-Gong-Yu
2022, Def. 3 and the post-processing property).
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.sparse as sp
from scipy import linalg as sla

from .._rng import as_generator
from .._validation import check_positive
from ..invariants import Invariant, InfeasibleInvariantError
from .base import Guarantee, Mechanism
from .discrete import DiscreteGaussian, DoubleGeometric

__all__ = [
    "NonTransparentMechanismError",
    "TopDownBaseline",
    "nonnegative_projection",
    "dual_newton_projection",
    "simplex_projection_groups",
    "largest_remainder_rounding",
    "controlled_rounding",
]

#: Largest number of constraint rows handled by the dense dual Newton solver.
MAX_DUAL_ROWS = 5000


class NonTransparentMechanismError(NotImplementedError):
    """The mechanism's output law has no tractable exact likelihood ``p(y | x)``."""


# ---------------------------------------------------------------------------------------------
# projection onto {z >= 0 : C z = t}
def simplex_projection_groups(m, codes, totals) -> np.ndarray:
    r"""Exact Euclidean projection of ``m`` onto :math:`\{z \ge 0: \sum_{i \in g} z_i = t_g\ \forall g\}`.

    ``codes[i]`` is the group (0..G-1) of cell i, ``totals[g] >= 0``.  Closed form per group
    (module docstring): :math:`z_i = \max(m_i - \tau_{g(i)}, 0)`.
    """
    m = np.asarray(m, dtype=float)
    codes = np.asarray(codes, dtype=np.int64)
    totals = np.asarray(totals, dtype=float)
    if np.any(totals < 0):
        raise InfeasibleInvariantError("no non-negative point: some group total is negative")
    order = np.lexsort((-m, codes))  # by group, then decreasing value
    c_sorted = codes[order]
    u = m[order]
    starts = np.searchsorted(c_sorted, np.arange(totals.size))
    csum = np.cumsum(u)
    before = np.concatenate([[0.0], csum])[starts]  # cumulative sum before each group
    gsum = csum - before[c_sorted]  # within-group cumulative sums
    j = np.arange(m.size) - starts[c_sorted] + 1
    cond = u - (gsum - totals[c_sorted]) / j > 0
    # rho_g = largest j in the group with cond true (cond holds on a prefix of the group)
    rho = np.zeros(totals.size, dtype=np.int64)
    np.maximum.at(rho, c_sorted, np.where(cond, j, 0))
    tau = np.full(totals.size, np.inf)  # no positive cell: total 0, every cell 0
    has = rho > 0
    last = starts[has] + rho[has] - 1
    tau[has] = (gsum[last] - totals[has]) / rho[has]
    return np.maximum(m - tau[codes], 0.0)


def dual_newton_projection(m, C, t, max_iter=500):
    """Projection onto {z >= 0, C z = t} by semismooth Newton on the dual (module docstring)."""
    C = sp.csr_matrix(C)
    k = C.shape[0]
    if k > MAX_DUAL_ROWS:
        raise ValueError(
            f"the general projection solves dense {k} x {k} systems; at most {MAX_DUAL_ROWS} "
            "constraint rows are supported (use groups/total invariants for large partitions)"
        )
    CT = C.T.tocsr()
    tol = 1e-9 * max(1.0, float(np.max(np.abs(t), initial=0.0)), float(np.max(np.abs(m), initial=0.0)))
    mu = np.zeros(k)

    def phi(mu_):
        w = m + CT @ mu_
        wp = np.maximum(w, 0.0)
        return 0.5 * float(wp @ wp) - float(mu_ @ t), wp

    f, z = phi(mu)
    for _ in range(max_iter):
        g = C @ z - t
        if np.max(np.abs(g)) <= tol:
            return z
        active = z > 0
        CA = C[:, active]
        H = (CA @ CA.T).toarray()
        d = sla.lstsq(H, -g, cond=1e-12, lapack_driver="gelsd")[0]
        slope = float(g @ d)
        if not np.isfinite(slope) or slope >= -1e-14 * float(g @ g):
            d, slope = -g, -float(g @ g)
        step = 1.0
        while True:
            f_new, z_new = phi(mu + step * d)
            if f_new <= f + 1e-4 * step * slope or step < 1e-12:
                break
            step *= 0.5
        mu = mu + step * d
        f, z = f_new, z_new
    raise RuntimeError(
        "non-negative projection did not reach the KKT certificate within the iteration limit"
    )


def nonnegative_projection(m, invariant: Invariant, t=None) -> np.ndarray:
    r"""Exact :math:`\arg\min\{\|z - m\|_2 : C z = t,\ z \ge 0\}` (see the module docstring).

    ``t`` defaults to ``invariant.t``.  Partition totals use the closed-form simplex
    projection; other invariants the dual semismooth Newton method with its KKT certificate.
    Raises :class:`InfeasibleInvariantError` if the set is empty (negative totals).
    """
    m = np.asarray(m, dtype=float)
    if m.shape != (invariant.n,):
        raise ValueError(f"m must have shape ({invariant.n},), got {m.shape}")
    t = invariant.t if t is None else np.asarray(t, dtype=float)
    if t is None:
        raise ValueError("no invariant values: pass t or build the Invariant with t")
    if invariant.partition is not None:
        return simplex_projection_groups(m, invariant.partition.codes, t)
    try:
        return dual_newton_projection(m, invariant.matrix, t)
    except RuntimeError:
        # an empty feasible set makes the dual unbounded; say so if that is the reason
        invariant.feasible_point(t, nonnegative=True)  # raises InfeasibleInvariantError
        raise


# ---------------------------------------------------------------------------------------------
# rounding that keeps integer totals
def largest_remainder_rounding(z, codes, totals, rng=None) -> np.ndarray:
    """Round ``z >= 0`` to integers with exact group totals (Hamilton / largest remainder).

    Each cell is floored; group g's deficit ``totals[g] - sum floor`` goes one unit each to its
    cells with the largest fractional parts; equal fractional parts are ordered uniformly at
    random (so two halves split a unit fairly).  Every output cell is the floor or the ceiling
    of ``z`` (up to floating-point fuzz of 1e-9).
    """
    rng = as_generator(rng)
    z = np.maximum(np.asarray(z, dtype=float), 0.0)
    codes = np.asarray(codes, dtype=np.int64)
    totals = np.asarray(totals)
    ti = np.round(totals).astype(np.int64)
    zf = np.floor(z + 1e-9)
    base = zf.astype(np.int64)
    frac = np.maximum(z - zf, 0.0)
    deficit = ti - np.bincount(codes, weights=base, minlength=ti.size).astype(np.int64)
    sizes = np.bincount(codes, minlength=ti.size)
    if np.any(deficit < 0) or np.any(deficit > sizes):
        raise RuntimeError("largest-remainder rounding: z does not match the group totals")
    order = np.lexsort((rng.random(z.size), -frac, codes))
    c_sorted = codes[order]
    starts = np.searchsorted(c_sorted, np.arange(ti.size))
    pos = np.arange(z.size) - starts[c_sorted]
    bump = np.zeros(z.size, dtype=np.int64)
    bump[order] = (pos < deficit[c_sorted]).astype(np.int64)
    return base + bump


def controlled_rounding(z, invariant: Invariant, t=None) -> np.ndarray:
    r"""Non-negative integers ``x`` with ``C x = t`` closest to ``z`` in L1 (integer C and t).

    First the floor/ceiling 0/1 program, then (if that is infeasible) the unrestricted integer
    program; both by ``scipy.optimize.milp`` (module docstring).  Exact: the result is checked
    in integer arithmetic.
    """
    from scipy.optimize import Bounds, LinearConstraint, milp

    if not invariant.is_integer:
        raise ValueError("controlled rounding needs an integer constraint matrix C")
    Cs = sp.csr_matrix(invariant.matrix, dtype=float)
    C = _IntegerProduct(Cs)
    t = invariant.t if t is None else np.asarray(t, dtype=float)
    ti = np.round(np.asarray(t, dtype=float)).astype(np.int64)
    z = np.maximum(np.asarray(z, dtype=float), 0.0)
    n = z.size
    zf = np.floor(z + 1e-9)
    r = np.maximum(z - zf, 0.0)
    base = zf.astype(np.int64)
    rhs = (ti - C @ base).astype(float)
    res = milp(1.0 - 2.0 * r, constraints=[LinearConstraint(Cs, rhs, rhs)],
               integrality=np.ones(n), bounds=Bounds(0.0, 1.0))
    if res.x is not None and res.success:
        x = base + np.round(res.x).astype(np.int64)
    else:
        # variables (x, u): min sum u, u >= x - z, u >= z - x, C x = t, x >= 0 integer
        eye = sp.identity(n, format="csr")
        A = sp.vstack([sp.hstack([Cs, sp.csr_matrix((Cs.shape[0], n))]),
                       sp.hstack([eye, -eye]), sp.hstack([-eye, -eye])]).tocsr()
        lo = np.concatenate([ti, np.full(n, -np.inf), np.full(n, -np.inf)])
        hi = np.concatenate([ti, z, -z])
        res = milp(np.concatenate([np.zeros(n), np.ones(n)]), constraints=[LinearConstraint(A, lo, hi)],
                   integrality=np.concatenate([np.ones(n), np.zeros(n)]), bounds=Bounds(0.0, np.inf))
        if res.x is None or not res.success:
            raise InfeasibleInvariantError("no non-negative integer point satisfies C x = t")
        x = np.round(res.x[:n]).astype(np.int64)
    if np.any(x < 0) or not np.array_equal(C @ x, ti):
        raise RuntimeError("controlled rounding returned a point that misses the invariant")
    return x


class _IntegerProduct:
    """``C @ v`` for integer sparse C and int64 v, exact: float products are exact below 2^53."""

    def __init__(self, Cs):
        self.Cs = Cs
        self.row_abs = np.asarray(abs(Cs).sum(axis=1)).ravel()

    def __matmul__(self, v):
        v = np.asarray(v, dtype=np.int64)
        if float(np.max(self.row_abs, initial=0.0)) * float(np.max(np.abs(v), initial=0)) >= 2.0**53:
            raise OverflowError("counts too large for exact invariant arithmetic")
        return np.rint(self.Cs @ v.astype(float)).astype(np.int64)


# ---------------------------------------------------------------------------------------------
_NOISES = {"discrete_gaussian": DiscreteGaussian, "double_geometric": DoubleGeometric}


class TopDownBaseline(Mechanism):
    r"""One level of a TopDown-style release: ``y = round(project(x + e, t))``, ``t = C x``.

    Parameters
    ----------
    invariant : Invariant
        Integer constraint matrix C; the release keeps ``C y = C x`` exactly (``t`` is taken
        from each ``x`` released).
    noise : {"discrete_gaussian", "double_geometric"}
        Measurement noise: :class:`~privinfer.mechanisms.discrete.DiscreteGaussian` with
        ``sigma = scale`` or :class:`~privinfer.mechanisms.discrete.DoubleGeometric` with
        ``b = scale``, i.i.d. on every cell.
    scale : float or Fraction
        The noise scale (held exactly, see :func:`privinfer.mechanisms.discrete.as_rational`).
    sensitivity : int
        Sensitivity of the counts for the guarantee (l2 for the discrete Gaussian, l1 for the
        double geometric); default 1.

    Notes
    -----
    Outputs are non-negative integer vectors satisfying the invariant exactly.  The mechanism
    is **not transparent** (module docstring): :meth:`logp` raises
    :class:`NonTransparentMechanismError`.  Use it to compare against the transparent
    mechanisms of this package, e.g. for its bias near zero.
    """

    integer = True
    transparent = False
    logp_constant_dropped = "no likelihood (not transparent)"
    spec_name = "topdown-baseline"

    def __init__(self, invariant: Invariant, noise: str = "discrete_gaussian", scale=None, *, sensitivity=1):
        if not isinstance(invariant, Invariant):
            raise TypeError("invariant must be a privinfer.invariants.Invariant")
        if not invariant.is_integer:
            raise ValueError("TopDownBaseline needs an integer constraint matrix C (integer totals)")
        if noise not in _NOISES:
            raise ValueError(f"noise must be one of {', '.join(sorted(_NOISES))}, got {noise!r}")
        if scale is None:
            raise ValueError("scale is required (sigma of the discrete Gaussian or b of the double geometric)")
        if isinstance(sensitivity, bool) or not isinstance(sensitivity, numbers.Real):
            raise TypeError("sensitivity must be a number")
        check_positive(float(sensitivity), "sensitivity")
        self._invariant = invariant
        self.noise = noise
        if noise == "discrete_gaussian":
            self.noise_mechanism = DiscreteGaussian(invariant.n, scale, sensitivity=sensitivity)
            self.scale = self.noise_mechanism.sigma
        else:
            self.noise_mechanism = DoubleGeometric(invariant.n, scale=scale, sensitivity=sensitivity)
            self.scale = self.noise_mechanism.scale

    @property
    def invariant(self) -> Invariant:
        return self._invariant

    @property
    def n(self) -> int:
        return self._invariant.n

    @property
    def guarantee(self) -> Guarantee:
        g = self.noise_mechanism.guarantee
        return Guarantee(
            f"{g.definition} (of the noisy measurement; the release post-processes it and t)",
            dict(g.parameters),
            "integer x, x' with C x = C x' and within the sensitivity; invariant C y = C x disclosed",
            "Abowd et al. 2022 (TopDown, Table 1); post-processing as in Gao, Gong, Yu 2022 (induced "
            "subspace DP); noise: " + g.reference,
        )

    # -- the two phases --------------------------------------------------------------------
    def measure(self, x, rng=None) -> np.ndarray:
        """Measurement phase: ``x + e`` with i.i.d. integer noise (same shape as ``x``)."""
        x = self._check_counts(x)
        rng = as_generator(rng)
        return x + self.noise_mechanism.sample_noise(x.shape[:-1], rng=rng)

    def estimate(self, m, t, rng=None) -> np.ndarray:
        """Estimation phase for one vector: exact non-negative projection, then rounding."""
        rng = as_generator(rng)
        inv = self._invariant
        z = nonnegative_projection(np.asarray(m, dtype=float), inv, t)
        if inv.partition is not None:
            return largest_remainder_rounding(z, inv.partition.codes, t, rng)
        return controlled_rounding(z, inv, t)

    def release(self, x, rng=None) -> np.ndarray:
        """``round(project(x + e, C x))``: non-negative integers with ``C y = C x`` exactly."""
        x = self._check_counts(x)
        rng = as_generator(rng)
        flat = x.reshape(-1, self.n)
        meas = self.measure(flat, rng)
        C = None
        if self._invariant.partition is None:
            C = _IntegerProduct(sp.csr_matrix(self._invariant.matrix, dtype=float))
        out = np.empty_like(flat)
        for i in range(flat.shape[0]):
            t = (C @ flat[i]) if C is not None else np.bincount(
                self._invariant.partition.codes, weights=flat[i], minlength=self._invariant.m).round().astype(np.int64)
            y = self.estimate(meas[i], t, rng)
            if C is not None and not np.array_equal(C @ y, t):
                raise RuntimeError("release misses the invariant")  # pragma: no cover - guarded above
            out[i] = y
        return out.reshape(x.shape)

    def logp(self, y, x):
        raise NonTransparentMechanismError(
            "TopDownBaseline has no exact likelihood: its output is an optimization (non-negative "
            "least squares and controlled rounding) applied to the noisy measurement, so p(y | x) is "
            "the noise law pushed through a data-dependent projection, with a support that depends "
            "on x; no tractable exact form exists. Use a transparent mechanism for inference."
        )

    def _check_counts(self, x) -> np.ndarray:
        x = self._check_x(x)
        if np.any(x < 0):
            raise ValueError("x must hold non-negative counts")
        return x
