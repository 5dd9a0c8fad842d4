r"""Induced subspace DP mechanisms with Gaussian and Laplace noise (Gao, Gong and Yu,
Subspace Differential Privacy, full paper Sec. 3.3, Cor. 14, 15, 17, 18; Thm 22; Alg. 1).

Notation: invariant ``C x = t`` (``C`` m x n, rank r), null space ``N = ker C`` with
orthonormal basis ``Q_N`` (n x (n-r)) and projection ``P_N``, row space basis ``R``
(n x r).  Every mechanism here is additive, ``y = x + e`` with ``C e = 0``, so
``C y = C x`` exactly (to floating point) on every draw.

Projected Gaussian (Cor. 14)
    ``e = P_N g``, ``g ~ N(0, s^2 I_n)``, ``s = c_{eps,delta} Delta_2(A)``.  The law of ``e``
    is the degenerate Gaussian ``N(0, s^2 P_N)``; in the orthonormal coordinates
    ``w = Q_N^T e`` of N it is ``N(0, s^2 I_{n-r})``, so w.r.t. (n-r)-dimensional Lebesgue
    measure on the affine subspace ``x + N``

    .. math:: \log p(y\mid x) = -\frac{\|Q_N^T(y-x)\|^2}{2s^2} - \frac{n-r}{2}\log(2\pi s^2)
              \quad (C(y-x)=0;\ -\infty \text{ otherwise}).

    ``MSE = (n - r) s^2`` (Cor. 14).  Thm 22: the same law as ``x + g`` conditioned on
    ``C g = 0`` (Gaussian conditioning gives covariance ``s^2 (I - C^T(CC^T)^+C) = s^2 P_N``).
Extended Gaussian (Cor. 15, Alg. 1)
    ``e = Q_N w``, ``w ~ N(0, s^2 I_{n-r})`` with ``s = c_{eps,delta} Delta_2(Q_N^T A)``.
    ``Q_N w ~ N(0, s^2 Q_N Q_N^T) = N(0, s^2 P_N)``: the same law as a projected Gaussian
    with this smaller ``s`` (``Delta_2(Q_N^T A) <= Delta_2(A)``), so release and likelihood
    are shared; ``MSE = (n - r) s^2``.
Projected Laplace (Cor. 17)
    ``e = P_N g``, ``g_i ~ Lap(b)`` iid, ``b = Delta_1(A)/eps``.  No closed form density in
    general.  Augmentation: the orthogonal change of variables ``g -> (Q_N^T g, R^T g)``
    has unit Jacobian, so with ``r = R^T g`` the joint density of (``w = Q_N^T e``, ``r``) is
    ``prod_i Lap((y - x + R r)_i; b)`` and ``p(y | x) = \int prod_i Lap((y-x+Rr)_i) dr``
    (:meth:`ProjectedLaplace.augmented_logp`).  For one invariant row the integral is
    one-dimensional and piecewise exponential; :func:`projected_laplace_row_marginal_logp`
    evaluates it exactly.  For partition invariants (totals, group totals) it factorizes
    into one such integral per group (exact); for other invariants of rank 2 it is
    evaluated by quadrature with a stated tolerance (:class:`ProjectedLaplace`).
Extended Laplace (Cor. 18)
    ``e = Q_N w``, ``w_j ~ Lap(b)`` iid, ``b = Delta_1(Q_N^T A)/eps`` (depends on the basis
    ``Q_N``, fixed as ``invariant.null_basis()``);
    ``log p = -\|Q_N^T(y-x)\|_1/b - (n-r)\log(2b)`` on the subspace.

Every ``logp`` here is exact (no constant dropped).  NumPy inputs get the support check
(``-inf`` when ``C(y-x) != 0`` beyond a tolerance relative to the scale of x and y);
PyTensor inputs evaluate the density of the null-space component (the support is the
modeller's job, e.g. a latent constrained to ``{C x = t}``).
"""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp
from scipy import special

from .._backend import namespace
from .._rng import as_generator
from .._validation import check_positive
from ..invariants import Invariant
from ..guarantees import typed_guarantee
from .base import SUPPORT_RTOL, AdditiveMechanism, Augmentation, check_invariant, group_sums
from .classic import calibrated_scale, calibrated_sigma

__all__ = [
    "ProjectedGaussian",
    "ExtendedGaussian",
    "ProjectedLaplace",
    "ExtendedLaplace",
    "NullSpaceGaussian",
    "null_sensitivity",
    "projected_laplace_row_marginal_logp",
    "SUPPORT_RTOL",
    "NUMERICAL_MAX_RANK",
]

#: Largest invariant rank for which :meth:`ProjectedLaplace.logp` integrates numerically.
NUMERICAL_MAX_RANK = 2
#: Relative error tolerance of each level of the projected Laplace quadrature.
QUAD_EPSREL = 1e-10
#: Drop of the log integrand at the ends of each projected Laplace quadrature window: the
#: mass outside is at most ``exp(-drop) / (1 - exp(-drop))`` (< 1e-13) of the mass inside.
TRUNCATION_DROP = 30.0
#: Subinterval limit of each projected Laplace quadrature.
QUAD_LIMIT = 500


def _as_query(query, n) -> np.ndarray | sp.csr_matrix:
    if sp.issparse(query):
        A = sp.csr_matrix(query, dtype=float)
    else:
        A = np.asarray(query, dtype=float)
        if A.ndim == 1:
            A = A[:, None]
    if A.ndim != 2 or A.shape[0] != n:
        raise ValueError(f"query must be a matrix with {n} rows (one per released cell), got shape {A.shape}")
    if not np.all(np.isfinite(A.data if sp.issparse(A) else A)):
        raise ValueError("query contains non-finite entries")
    return A


def null_sensitivity(invariant: Invariant, query, p: int = 2, relation: str = "add-remove") -> float:
    r"""l_p sensitivity of the projected query :math:`A_N = Q_N^T A` (Cor. 15 / 18, Alg. 1 step 1).

    ``query`` is the n x d matrix A of a linear query on a histogram h in R^d (``A(x) = A h``).
    Neighbouring histograms differ by ``e_j`` (``relation="add-remove"``) or by ``e_j - e_l``
    (``"replace"``: one record changed, the paper's bounded DP, Def. 1), so

    * add-remove: :math:`\Delta_p = \max_j \|Q_N^T a_j\|_p`;
    * replace: :math:`\Delta_p = \max_{j \ne l} \|Q_N^T (a_j - a_l)\|_p`.

    For p = 2 the value does not depend on the basis (``||Q_N^T v|| = ||P_N v||``); for p = 1 it
    uses ``invariant.null_basis()``, the basis :class:`ExtendedLaplace` adds noise in.
    """
    inv = check_invariant(invariant)
    A = _as_query(query, inv.n)
    if p not in (1, 2):
        raise ValueError(f"p must be 1 or 2, got {p!r}")
    if relation not in ("add-remove", "replace"):
        raise ValueError(f"relation must be 'add-remove' or 'replace', got {relation!r}")
    Ad = A.toarray() if sp.issparse(A) else A
    if p == 2:
        AN = inv.project_null(Ad.T)  # (d, n): P_N a_j, same norms as Q_N^T a_j
    else:
        AN = Ad.T @ inv.null_basis()  # (d, n - r)
    if relation == "add-remove":
        return float(np.max(np.linalg.norm(AN, ord=p, axis=1)))
    best = 0.0
    for j in range(AN.shape[0]):  # O(d^2 (n-r)) over pairs, one row at a time
        diff = AN[j + 1 :] - AN[j]
        if diff.size:
            best = max(best, float(np.max(np.linalg.norm(diff, ord=p, axis=1))))
    return best


class _NullSpaceMechanism(AdditiveMechanism):
    """Shared parts: the invariant, the density on the support, orthonormal coordinates."""

    def __init__(self, invariant: Invariant):
        self._inv = check_invariant(invariant)

    @property
    def invariant(self):
        return self._inv

    @property
    def n(self):
        return self._inv.n

    @property
    def dim(self) -> int:
        """Dimension n - r of the subspace the noise lives in."""
        return self._inv.null_dim

    def _null_sq_norm(self, e, xp):
        r""":math:`\|Q_N^T e\|^2`, via the smaller of the two orthonormal bases
        (``|e|^2 - |R^T e|^2`` when r <= n - r)."""
        inv = self._inv
        if xp is np:
            return np.sum(inv.project_null(e) ** 2, axis=-1)
        if inv.rank <= inv.null_dim:
            R = inv.row_basis()
            return xp.sum(e * e, axis=-1) - xp.sum(xp.dot(e, R) ** 2, axis=-1)
        Q = inv.null_basis()
        return xp.sum(xp.dot(e, Q) ** 2, axis=-1)

    def _supported_noise(self, y, x):
        """The array namespace, the noise ``y - x`` (NumPy: non-finite entries zeroed) and, in
        NumPy, where :meth:`in_support` holds (``None`` in PyTensor)."""
        xp = namespace(y, x)
        if xp is not np:
            return xp, y - x, None
        y = np.asarray(y, dtype=float)
        x = np.asarray(x, dtype=float)
        return xp, np.where(np.isfinite(y - x), y - x, 0.0), self.in_support(y, x)

    def logp(self, y, x):
        """Exact log density; NumPy: ``-inf`` where :meth:`in_support` is false.  PyTensor: the
        density of the null-space component (the support is the model's constraint on x)."""
        xp, e, ok = self._supported_noise(y, x)
        d = self._density(e, xp)
        return d if ok is None else self.where_in_support(ok, d)

    def noise_logp(self, e):
        """Log density of the noise ``e`` itself (``logp(e, 0)``)."""
        xp = namespace(e)
        if xp is np:
            e = np.asarray(e, dtype=float)
            ok = self.noise_in_support(e)
            return self.where_in_support(ok, self._density(np.where(np.isfinite(e), e, 0.0), xp))
        return self._density(e, xp)

    # -- pointwise log-likelihood: one term per group of a partition invariant ------------
    def _splits_by_group(self) -> bool:
        """Whether :meth:`_group_density` gives the density's per-group terms (default: no)."""
        return False

    def _group_density(self, e, xp):
        """Per-group terms of the density for a partition invariant (last axis: groups)."""
        raise NotImplementedError

    @property
    def loglik_factorization(self) -> str:
        """``"group"`` when the invariant is a partition and the density splits by group (the
        noise of different groups is independent), else ``"joint"``."""
        inv = self.invariant
        if inv is not None and inv.partition is not None and self._splits_by_group():
            return "group"
        return "joint"

    def logp_terms(self, y, x):
        """One term per group (see :attr:`loglik_factorization`); NumPy: all ``-inf`` where
        :meth:`in_support` is false, as :meth:`logp`."""
        if self.loglik_factorization == "joint":
            return super().logp_terms(y, x)
        xp, e, ok = self._supported_noise(y, x)
        g = self._group_density(e, xp)
        return g if ok is None else np.where(np.asarray(ok)[..., None], g, -np.inf)

    def noise_logp_terms(self, e):
        """Per-group terms of :meth:`noise_logp` (``logp_terms(e, 0)``)."""
        return self.logp_terms(e, np.zeros(self.n) if namespace(e) is np else 0.0 * e)


# ----------------------------------------------------------------------------------------
# Gaussian
# ----------------------------------------------------------------------------------------
class NullSpaceGaussian(_NullSpaceMechanism):
    r"""``y = x + P_N g``, ``g ~ N(0, sigma^2 I)``: the degenerate Gaussian ``N(x, sigma^2 P_N)``
    (Subspace DP full paper, Cor. 14 and Thm 22), given its ``sigma``.

    The common base of :class:`ProjectedGaussian`, :class:`ExtendedGaussian` and
    :class:`~privinfer.mechanisms.semidp.SemiDPGaussian`, which differ only in how ``sigma``
    is calibrated and in their guarantee (abstract: subclasses define ``guarantee``)."""

    def __init__(self, invariant, sigma):
        super().__init__(invariant)
        self.sigma = check_positive(sigma, "sigma")

    @property
    def mean_squared_error(self) -> float:
        """``E ||y - x||^2 = (n - r) sigma^2`` (Cor. 14 / 15)."""
        return self.dim * self.sigma**2

    @property
    def covariance(self) -> np.ndarray:
        """Dense ``sigma^2 P_N`` (n x n; small problems only)."""
        return self.sigma**2 * self._inv.project_null(np.eye(self.n))

    def sample_noise(self, size=(), rng=None):
        rng = as_generator(rng)
        g = self.sigma * rng.standard_normal(tuple(size) + (self.n,))
        return self._inv.project_null(g)

    def _density(self, e, xp):
        s2 = self.sigma**2
        return -self._null_sq_norm(e, xp) / (2.0 * s2) - 0.5 * self.dim * np.log(2.0 * np.pi * s2)

    def _splits_by_group(self) -> bool:
        # subclasses that measure e against another subspace (Semi-DP) keep one joint term
        return type(self)._null_sq_norm is _NullSpaceMechanism._null_sq_norm

    def _group_density(self, e, xp):
        r"""For a partition invariant the null space is the product of the groups' sum-zero
        subspaces, so ``P_N e`` is ``e`` minus its group means and the density is a product of
        one Gaussian per group :math:`S_g` (dimension :math:`|S_g| - 1`):

        .. math:: l_g = -\frac{\sum_{i\in S_g} e_i^2 - (\sum_{i\in S_g} e_i)^2/|S_g|}{2s^2}
                  - \frac{|S_g| - 1}{2}\log(2\pi s^2),

        with :math:`\sum_g l_g` the joint ``_density``."""
        part = self._inv.partition
        k = part.n_groups
        sizes = np.asarray(part.sizes, dtype=float)
        sums = group_sums(e, part.codes, k, xp)
        squares = group_sums(e * e, part.codes, k, xp)
        s2 = self.sigma**2
        dims = np.where(sizes > 0, sizes - 1.0, 0.0)
        return -(squares - sums * sums / np.maximum(sizes, 1.0)) / (2.0 * s2) - 0.5 * dims * np.log(2.0 * np.pi * s2)


class ProjectedGaussian(NullSpaceGaussian):
    r"""Projected Gaussian mechanism (Subspace DP full paper, Cor. 14).

    ``y = x + P_N g`` with ``g ~ N(0, s^2 I_n)``, ``s = c_{eps,delta} Delta_2`` (Lemma 13) or
    ``sigma=s`` directly.  (eps, delta)-induced subspace DP for the invariant;
    ``MSE = (n - r) s^2``; unbiased (Cor. 21); equal in law to the unconstrained Gaussian
    conditioned on the invariant (Thm 22).  ``logp`` exact (see module docstring).
    """

    def __init__(self, invariant, epsilon=None, delta=None, sensitivity=None, *, sigma=None):
        s, self._params = calibrated_sigma(epsilon, delta, sensitivity, sigma, type(self).__name__)
        super().__init__(invariant, s)

    @property
    def guarantee(self):
        params = dict(self._params or {}, sigma=self.sigma)
        if self._params is None:
            params["rho_per_unit_sensitivity"] = 1.0 / (2 * self.sigma**2)
        return typed_guarantee(
            "approx" if self._params else None,
            "(eps, delta)-induced subspace DP" if self._params else "induced subspace zCDP per unit l2 sensitivity",
            params,
            f"one record changed (bounded DP); invariant C x = t kept exactly; DP on null space N "
            f"(dim {self.dim})",
            "Gao, Gong and Yu, Subspace DP (full paper), Cor. 14, Thm 10",
        )


class ExtendedGaussian(NullSpaceGaussian):
    r"""Extended Gaussian mechanism (Subspace DP full paper, Cor. 15, Alg. 1).

    ``y = A(x) + Q_N w``, ``w ~ N(0, s^2 I_{n-r})``, ``s = c_{eps,delta} Delta_2(Q_N^T A)``.
    The sensitivity of the projected query is given (``sensitivity=``) or computed from the
    query matrix (``query=``, n x d, and ``relation``; :func:`null_sensitivity`).  Or pass
    ``sigma=`` directly.  ``Q_N w`` has the law ``N(0, s^2 P_N)``; the release draws it as
    ``P_N g`` (same law, and never forms ``Q_N`` for large structured invariants).
    ``MSE = (n - r) s^2 <=`` that of the projected Gaussian.
    """

    def __init__(self, invariant, epsilon=None, delta=None, sensitivity=None, *, query=None,
                 relation="add-remove", sigma=None):
        inv = check_invariant(invariant)
        if query is not None:
            if sensitivity is not None or sigma is not None:
                raise ValueError("ExtendedGaussian: give query= or sensitivity= (or sigma=), not several")
            sensitivity = null_sensitivity(inv, query, p=2, relation=relation)
            if sensitivity <= 0:
                raise ValueError("the query has zero sensitivity in the null space (nothing to protect)")
        s, self._params = calibrated_sigma(epsilon, delta, sensitivity, sigma, "ExtendedGaussian")
        super().__init__(inv, s)

    @property
    def guarantee(self):
        return typed_guarantee(
            "approx" if self._params else None,
            "(eps, delta)-induced subspace DP" if self._params else "induced subspace zCDP per unit l2 sensitivity",
            dict(self._params or {}, sigma=self.sigma, sensitivity_of="Q_N^T A"),
            f"one record changed (bounded DP); invariant C x = t kept exactly; DP on null space N "
            f"(dim {self.dim})",
            "Gao, Gong and Yu, Subspace DP (full paper), Cor. 15, Alg. 1, Thm 12",
        )


# ----------------------------------------------------------------------------------------
# Laplace
# ----------------------------------------------------------------------------------------
def _log_phi(a):
    r"""``log((1 - e^{-a})/a)`` for real a (the value 0 at a = 0), stable for all a."""
    a = np.asarray(a, dtype=float)
    out = np.empty_like(a)
    small = np.abs(a) < 1e-6
    out[small] = -a[small] / 2.0 + a[small] ** 2 / 24.0
    pos = (~small) & (a > 0)
    ap = a[pos]
    out[pos] = np.log(-np.expm1(-ap)) - np.log(ap)
    neg = (~small) & (a < 0)
    an = -a[neg]
    out[neg] = an + np.log(-np.expm1(-an)) - np.log(an)
    return out


def projected_laplace_row_marginal_logp(d, u, scale) -> float:
    r"""Exact log density of a projected Laplace noise vector for a one-row invariant.

    With ``u`` the unit row-space vector and ``d = y - x`` (with ``u . d = 0``),

    .. math:: p(d) = \int_{-\infty}^{\infty} (2b)^{-n} \exp\Big(-\frac1b S(\rho)\Big)\,d\rho,
              \qquad S(\rho) = \sum_i |d_i + u_i \rho|.

    ``S`` is convex and piecewise linear with breakpoints :math:`\rho_i = -d_i/u_i`
    (``u_i != 0``); on each piece the integral of the exponential is closed form:
    between breakpoints :math:`\rho_k < \rho_{k+1}` with values :math:`S_k, S_{k+1}`,
    :math:`\int = L\,e^{-S_k/b}\,\varphi((S_{k+1}-S_k)/b)` with
    :math:`\varphi(a) = (1-e^{-a})/a`, and the two tails (slopes :math:`\mp U`,
    :math:`U = \sum_i |u_i|`) give :math:`e^{-S/b}\,b/U` each.  Summed in log space: exact up
    to floating point (no quadrature).  Density w.r.t. (n-1)-dim Lebesgue measure on the
    hyperplane ``u . d = 0`` (orthonormal coordinates).
    """
    d = np.asarray(d, dtype=float)
    u = np.asarray(u, dtype=float)
    b = float(scale)
    n = d.size
    nz = u != 0
    bp = np.sort(-d[nz] / u[nz])

    def S(rho):
        return np.sum(np.abs(d[None, :] + u[None, :] * np.asarray(rho)[:, None]), axis=1)

    Sv = S(bp)
    U = np.sum(np.abs(u))
    terms = [-Sv[0] / b + np.log(b / U), -Sv[-1] / b + np.log(b / U)]
    L = np.diff(bp)
    keep = L > 0
    if np.any(keep):
        Sk, Sk1, Lk = Sv[:-1][keep], Sv[1:][keep], L[keep]
        terms.extend((-Sk / b + np.log(Lk) + _log_phi((Sk1 - Sk) / b)).tolist())
    return float(-n * np.log(2.0 * b) + special.logsumexp(terms))


def _log_integral_1d(logf, c: float, step: float, kinks=()) -> float:
    r"""``log \int exp(logf(s)) ds`` for a log-concave ``f`` on the real line, to the stated tolerance.

    Window: from the centre ``c`` the half-widths ``a`` are doubled (from ``step``) until
    ``logf(c +- a) <= logf(c) - TRUNCATION_DROP``.  Log-concavity gives, for ``t >= a``,
    :math:`\log f(c+t) \le \log f(c) - k t/a` and, for ``t <= a``,
    :math:`\log f(c+t) \ge \log f(c) - k t/a` (``k`` the drop), so the mass beyond the
    window is at most :math:`e^{-k}/(1-e^{-k})` (< 1e-13 for k = 30) times the mass inside,
    whatever ``c``.  Inside, adaptive Gauss-Kronrod (``scipy.integrate.quad``, ``epsrel =
    QUAD_EPSREL``, breakpoint at ``c``); a ``RuntimeError`` if QUADPACK warns or its error
    estimate exceeds the tolerance.  ``kinks``: points where ``f`` is not smooth, passed to
    QUADPACK as breakpoints when they fall inside the window.
    """
    from scipy import integrate

    l0 = float(logf(c))
    if not np.isfinite(l0):
        raise RuntimeError("projected Laplace quadrature: the density vanishes at the centre")
    ends = []
    for sign in (-1.0, 1.0):
        a = step
        while logf(c + sign * a) > l0 - TRUNCATION_DROP:
            a *= 2.0
            if a > 1e12 * step:
                raise RuntimeError("projected Laplace quadrature: the integrand does not decay")
        ends.append(c + sign * a)
    with warnings.catch_warnings():
        warnings.simplefilter("error", integrate.IntegrationWarning)
        try:
            pts = [c] + [k for k in kinks if ends[0] < k < ends[1]]
            val, err = integrate.quad(lambda s: np.exp(logf(s) - l0), ends[0], ends[1], points=pts,
                                      limit=QUAD_LIMIT, epsabs=0.0, epsrel=QUAD_EPSREL)
        except integrate.IntegrationWarning as exc:
            raise RuntimeError(f"projected Laplace quadrature did not converge: {exc}") from None
    if not (val > 0 and np.isfinite(val)) or err > QUAD_EPSREL * val:
        raise RuntimeError("projected Laplace quadrature did not reach its tolerance")
    return l0 + float(np.log(val))


class ProjectedLaplace(_NullSpaceMechanism):
    r"""Projected Laplace mechanism (Subspace DP full paper, Cor. 17): (eps, 0)-induced subspace DP.

    ``y = x + P_N g``, ``g_i ~ Lap(b)`` iid, ``b = Delta_1(A)/eps`` (or ``scale=b``).

    Likelihood.  With ``R`` (n x r) an orthonormal basis of the row space of C and
    ``v = y - x`` (``C v = 0``), the density w.r.t. (n-r)-dimensional Lebesgue measure on the
    null space is (module docstring)

    .. math:: p(v) = \int_{\mathbb{R}^r} \prod_{i=1}^n \mathrm{Lap}(v_i + (R\rho)_i; b)\,d\rho .

    :meth:`logp` / :meth:`marginal_logp` (NumPy) evaluate it

    * **exactly for partition invariants** (``invariant.partition`` set: totals, group
      totals): the row space has the orthonormal basis ``u_g = 1_{S_g}/sqrt(|S_g|)``, one per
      group ``S_g``, with disjoint supports, so the integrand is a product over groups of
      functions of one ``rho_g`` each and the integral is the product of one-dimensional
      integrals, each the closed form :func:`projected_laplace_row_marginal_logp` on the
      group's cells (a change of orthonormal row basis has unit Jacobian);
    * **exactly for any invariant of rank 1** (the same closed form);
    * **numerically for rank 2** (:data:`NUMERICAL_MAX_RANK`): the second row coordinate of
      ``rho`` is integrated exactly by the closed form, the first by adaptive Gauss-Kronrod
      quadrature (``scipy.integrate.quad``) centred at an L1 minimizer of
      :math:`\|v + R\rho\|_1`, with breakpoints where the closed form changes pieces.  The
      integrand is log-concave (a product of Laplace densities), and so is its partial
      integral (Prekopa 1973), which bounds the mass outside the window rigorously by
      ``exp(-30) / (1 - exp(-30)) < 1e-13`` of the mass inside (:func:`_log_integral_1d`);
      the quadrature runs with ``epsrel = QUAD_EPSREL = 1e-10`` and raises ``RuntimeError``
      if QUADPACK warns or estimates a larger error.  So ``logp`` is accurate to about
      ``1e-10`` absolute (QUADPACK's error estimate, not a proof).  Rank 3 by nested
      quadrature would cost minutes per vector and is not offered;
    * otherwise ``NotImplementedError``: use :attr:`augmentation`.

    :attr:`augmentation` (also for PyMC, where ``logp`` is not symbolic): the joint log density
    :meth:`augmented_logp` ``(y, x, r)`` of the null-space coordinates of ``y - x`` and the
    latent row-space coordinates ``r = R^T g`` (``R = invariant.row_basis()``), exact, NumPy
    and PyTensor; ``log p(y|x) = log \int exp(augmented_logp(y, x, r)) dr``.
    """

    def __init__(self, invariant, epsilon=None, sensitivity=None, *, scale=None):
        super().__init__(invariant)
        self.scale, self._params = calibrated_scale(epsilon, sensitivity, scale, "ProjectedLaplace")

    @property
    def augmentation(self) -> Augmentation:
        return Augmentation(
            dim=self._inv.rank,
            logp=self.augmented_logp,
            description="r = R^T g, the row-space coordinates of the Laplace draw g "
                        "(R = invariant.row_basis()); flat prior on R^rank",
        )

    @property
    def guarantee(self):
        return typed_guarantee(
            "pure" if self._params else None,
            "(eps, 0)-induced subspace DP" if self._params else "(eps, 0)-induced subspace DP per unit l1 sensitivity",
            dict(self._params or {"epsilon": 1.0 / self.scale}, scale=self.scale),
            f"one record changed (bounded DP); invariant C x = t kept exactly; DP on null space N "
            f"(dim {self.dim})",
            "Gao, Gong and Yu, Subspace DP (full paper), Cor. 17, Thm 10",
        )

    @property
    def mean_squared_error(self) -> float:
        """``E ||P_N g||^2 = tr(P_N) 2 b^2 = (n - r) 2 b^2``."""
        return self.dim * 2.0 * self.scale**2

    def sample_noise(self, size=(), rng=None):
        rng = as_generator(rng)
        g = rng.laplace(0.0, self.scale, tuple(size) + (self.n,))
        return self._inv.project_null(g)

    def augmented_logp(self, y, x, r):
        r"""``sum_i log Lap((y - x + R r)_i; b)`` = joint density of (Q_N^T e, r); exact."""
        xp = namespace(y, x, r)
        R = self._inv.row_basis()
        if xp is np:
            y, x, r = (np.asarray(v, dtype=float) for v in (y, x, r))
            if r.shape[-1] != R.shape[1]:
                raise ValueError(f"r must have last axis {R.shape[1]} (the invariant's rank), got {r.shape}")
        g = (y - x) + xp.dot(r, R.T)
        return -xp.sum(xp.abs(g), axis=-1) / self.scale - self.n * np.log(2.0 * self.scale)

    @property
    def marginal_method(self) -> str:
        """How :meth:`logp` evaluates the density: ``"partition"`` or ``"rank-1"`` (exact),
        ``"quadrature"`` (rank 2, numerical) or ``"augmentation only"``."""
        inv = self._inv
        if inv.partition is not None:
            return "partition"
        if inv.rank == 1:
            return "rank-1"
        if inv.rank <= NUMERICAL_MAX_RANK:
            return "quadrature"
        return "augmentation only"

    def marginal_logp(self, y, x):
        """``log p(y | x)`` (NumPy; stacks allowed): exact for partition and rank-1 invariants,
        numerical for rank 2 (class docstring); ``-inf`` off the support."""
        if namespace(y, x) is not np:
            raise NotImplementedError("the projected Laplace marginal density is NumPy only; in a PyTensor graph "
                                      "use m.augmentation (augmented_logp with a latent r)")
        method = self.marginal_method
        if method == "augmentation only":
            raise NotImplementedError(
                f"the projected Laplace density has no closed form for an invariant of rank {self._inv.rank} "
                f"that is not a partition, and numerical integration is offered up to rank {NUMERICAL_MAX_RANK}; "
                "use m.augmentation (augmented_logp(y, x, r) with a latent r of length rank)"
            )
        y = np.asarray(y, dtype=float)
        x = np.asarray(x, dtype=float)
        ok = self.in_support(y, x)
        e = np.broadcast_to(y - x, np.broadcast_shapes(y.shape, x.shape))
        flat = e.reshape(-1, self.n)
        okf = np.broadcast_to(ok, e.shape[:-1]).reshape(-1)
        vals = np.full(flat.shape[0], -np.inf)
        rows = np.flatnonzero(okf)
        if rows.size:
            V = self._inv.project_null(flat[rows])
            if method == "partition":
                vals[rows] = self._partition_logp(V)
            elif method == "rank-1":
                u = self._inv.row_basis()[:, 0]
                vals[rows] = [projected_laplace_row_marginal_logp(v, u, self.scale) for v in V]
            else:
                vals[rows] = [self._quadrature_logp(v) for v in V]
        vals = vals.reshape(e.shape[:-1])
        return float(vals) if vals.ndim == 0 else vals

    def _partition_terms(self, V):
        """Per-group log marginals of the null-space vectors ``V`` (rows), shape (rows, groups)."""
        part = self._inv.partition
        order = np.argsort(part.codes, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(part.sizes)])
        out = np.zeros((V.shape[0], part.n_groups))
        for g in range(part.n_groups):
            cells = order[bounds[g]:bounds[g + 1]]
            if cells.size == 0:
                continue
            u = np.full(cells.size, 1.0 / np.sqrt(cells.size))
            out[:, g] = [projected_laplace_row_marginal_logp(v, u, self.scale) for v in V[:, cells]]
        return out

    def _partition_logp(self, V):
        return self._partition_terms(V).sum(axis=-1)

    def _splits_by_group(self) -> bool:
        # the marginal is a product of one closed-form integral per group (class docstring)
        return True

    def _group_density(self, e, xp):
        """Per-group log marginals (NumPy only: PyTensor graphs use :attr:`augmentation`)."""
        if xp is not np:
            raise NotImplementedError("the projected Laplace marginal density is NumPy only; in a PyTensor graph "
                                      "use m.augmentation (augmented_logp with a latent r)")
        e = np.asarray(e, dtype=float)
        flat = e.reshape(-1, self.n)
        V = self._inv.project_null(flat)
        return self._partition_terms(V).reshape(e.shape[:-1] + (self._inv.partition.n_groups,))

    def _quadrature_logp(self, v) -> float:
        from scipy.optimize import linprog

        R = self._inv.row_basis()
        n, r = R.shape
        b = self.scale
        # centre: an L1 minimizer rho* of S(rho) = ||v + R rho||_1 (min sum t, -t <= v + R rho <= t)
        eye = np.eye(n)
        res = linprog(np.concatenate([np.zeros(r), np.ones(n)]),
                      A_ub=np.block([[R, -eye], [-R, -eye]]), b_ub=np.concatenate([-v, v]),
                      bounds=[(None, None)] * r + [(0, None)] * n, method="highs")
        if not res.success:
            raise RuntimeError(f"projected Laplace quadrature: the L1 centring problem failed ({res.message})")
        center = res.x[:r]
        R_outer, u_last = R[:, :-1], R[:, -1]

        def inner_log(s):  # exact integral over the last row coordinate
            return projected_laplace_row_marginal_logp(v + R_outer @ s, u_last, b)

        # h(s) = exp(inner_log(s)) is smooth except where two breakpoints -w_i(s)/u_i of the
        # inner integral meet (w(s) = v + R_outer s), or where w_i(s) = 0 for u_i = 0
        a = R_outer[:, 0]
        tiny = 1e-12
        on = np.abs(u_last) > tiny
        kinks = list(-v[~on & (np.abs(a) > tiny)] / a[~on & (np.abs(a) > tiny)])
        p, q = v[on] / u_last[on], a[on] / u_last[on]  # breakpoint_i(s) = -(p_i + q_i s)
        dp, dq = p[:, None] - p[None, :], q[:, None] - q[None, :]
        iu = np.triu_indices(p.size, 1)
        sel = np.abs(dq[iu]) > tiny
        kinks += list(-dp[iu][sel] / dq[iu][sel])
        return _log_integral_1d(lambda s1: inner_log(np.array([s1])), center[0], b, sorted(kinks))

    def logp(self, y, x):
        return self.marginal_logp(y, x)

    def noise_logp(self, e):
        e = np.asarray(e, dtype=float)
        return self.marginal_logp(e, np.zeros_like(e))


class ExtendedLaplace(_NullSpaceMechanism):
    r"""Extended Laplace mechanism (Subspace DP full paper, Cor. 18): (eps, 0)-induced subspace DP.

    ``y = A(x) + Q_N w``, ``w_j ~ Lap(b)`` iid, ``b = Delta_1(Q_N^T A)/eps`` with ``Q_N =
    invariant.null_basis()`` (given as ``sensitivity=``, computed from ``query=``, or
    ``scale=b`` directly).  ``log p = -||Q_N^T (y - x)||_1 / b - (n - r) log(2b)``; exact.
    """

    def __init__(self, invariant, epsilon=None, sensitivity=None, *, query=None, relation="add-remove",
                 scale=None):
        inv = check_invariant(invariant)
        if query is not None:
            if sensitivity is not None or scale is not None:
                raise ValueError("ExtendedLaplace: give query= or sensitivity= (or scale=), not several")
            sensitivity = null_sensitivity(inv, query, p=1, relation=relation)
            if sensitivity <= 0:
                raise ValueError("the query has zero sensitivity in the null space (nothing to protect)")
        super().__init__(inv)
        self.scale, self._params = calibrated_scale(epsilon, sensitivity, scale, "ExtendedLaplace")
        self._Q = inv.null_basis()

    @property
    def guarantee(self):
        return typed_guarantee(
            "pure" if self._params else None,
            "(eps, 0)-induced subspace DP" if self._params else "(eps, 0)-induced subspace DP per unit l1 sensitivity",
            dict(self._params or {"epsilon": 1.0 / self.scale}, scale=self.scale, sensitivity_of="Q_N^T A"),
            f"one record changed (bounded DP); invariant C x = t kept exactly; DP on null space N "
            f"(dim {self.dim})",
            "Gao, Gong and Yu, Subspace DP (full paper), Cor. 18, Thm 12",
        )

    @property
    def null_basis(self) -> np.ndarray:
        return self._Q

    @property
    def mean_squared_error(self) -> float:
        return self.dim * 2.0 * self.scale**2

    def sample_noise(self, size=(), rng=None):
        rng = as_generator(rng)
        w = rng.laplace(0.0, self.scale, tuple(size) + (self.dim,))
        return w @ self._Q.T

    def _density(self, e, xp):
        w = xp.dot(e, self._Q)
        return -xp.sum(xp.abs(w), axis=-1) / self.scale - self.dim * np.log(2.0 * self.scale)
