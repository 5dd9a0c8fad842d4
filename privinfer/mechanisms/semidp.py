r"""Semi-DP mechanisms built on the sensitivity space of invariant-conforming pairs
(Cho and Awan, Formal Privacy Guarantees with Invariant Statistics, Sec. 4-5).

Under Semi-DP the protected pairs are datasets in :math:`D_t` (same invariant value t)
within Hamming distance a(t) (the semi-adjacent parameter, see
:func:`privinfer.accounting.semi_adjacent_parameter`).  Their query differences form the
sensitivity space :math:`S = S_{Semi}`, typically rank deficient: its span
:math:`\mathcal S` (dimension s) is the only place noise is needed (Prop. 26).

Gaussian mechanism (Alg. 1, Prop. 28)
    :math:`y = x + N`, :math:`N \sim N_d(0, (\Delta_2(S)/\mu)^2 P_S)` with :math:`P_S` the
    orthogonal projection onto span(S); (D_t, A_{a(t)}, G_mu)-DP.  In orthonormal
    coordinates ``z = B^T (y - x)`` of span(S) (``B`` d x s) the law is
    :math:`N(0, \sigma^2 I_s)`, :math:`\sigma = \Delta_2/\mu`:
    :math:`\log p = -\|z\|^2/(2\sigma^2) - \tfrac s2 \log(2\pi\sigma^2)` when
    ``y - x`` lies in span(S) (else -inf); exact.
Optimal K-norm mechanism (Alg. 2/3, Thm 31)
    K = conv(S) (S is symmetric: (X, X') and (X', X) are both adjacent, so we add -S), a
    norm ball of span(S) (Lemma 29) with :math:`\Delta_K = 1` (Prop. 30).  In coordinates
    z, the noise density is

    .. math:: f(z) = \frac{\exp(-\epsilon\|z\|_K)}{\Gamma(s+1)\,\epsilon^{-s}\,\mathrm{vol}_s(K)},

    since :math:`\int e^{-\epsilon\|z\|_K}dz = \int_0^\infty e^{-\epsilon\rho}\,
    d\,\mathrm{vol}(\rho K) = \mathrm{vol}(K)\, s\,\Gamma(s)\,\epsilon^{-s}`.  Sampling
    (Hardt and Talwar 2010): radius :math:`\rho \sim \mathrm{Gamma}(s+1, \text{rate } \epsilon)`
    times a uniform point of K; the uniform point is drawn exactly by rejection from the box
    :math:`\prod_i [-c_i, c_i]`, :math:`c_i = \max_{v\in S}|z_i(v)|`, which contains K
    because every point of K is a convex combination of points of :math:`\pm S`, each inside
    the box.  ``vol_s(K)`` is the exact polytope volume (Qhull in s-dim coordinates) and the
    gauge is :math:`\|z\|_K = \max_f a_f^T z / h_f` over the facets
    :math:`\{a_f^T z \le h_f\}` of K.

Contingency tables with one-way margins (Sec. 5.1): :func:`one_way_margins_sensitivity_space`.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy import special
from scipy.spatial import ConvexHull

from .._backend import namespace
from .._rng import as_generator
from .._validation import check_epsilon, check_finite_array, check_positive
from ..invariants import Invariant
from ..guarantees import typed_guarantee
from .base import AdditiveMechanism
from .subspace import NullSpaceGaussian

__all__ = ["SemiDPGaussian", "KNorm", "one_way_margins_sensitivity_space", "one_way_margins_l2_sensitivity",
           "span_basis"]

_SEMI_RELATION = "datasets in D_t (same invariant t) at Hamming distance <= a(t)"


def span_basis(vectors, rtol: float = 1e-10) -> np.ndarray:
    """Orthonormal basis (columns) of the span of the rows of ``vectors`` (SVD, relative tol)."""
    V = check_finite_array(vectors, "sensitivity vectors", ndim=2)
    if V.shape[0] == 0:
        raise ValueError("sensitivity vectors: need at least one vector")
    _, s, Vt = np.linalg.svd(V, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        raise ValueError("sensitivity vectors are all zero: nothing to protect (a(t) = 0)")
    k = int(np.count_nonzero(s > rtol * s[0] * max(V.shape)))
    return Vt[:k].T


def _complement_invariant(B: np.ndarray) -> Invariant | None:
    """Invariant whose null space is span(B): rows = orthonormal complement of span(B)."""
    d, s = B.shape
    if s == d:
        return None
    # complement: the leading left singular vectors of I - B B^T (eigenvalue 1, multiplicity d - s)
    U, _, _ = np.linalg.svd(np.eye(d) - B @ B.T)
    return Invariant(U[:, : d - s].T)


def _resolve_space(space, invariant):
    """Returns (basis B or None, invariant, vectors or None)."""
    if isinstance(space, Invariant):
        if invariant is not None and invariant is not space:
            raise ValueError("give the invariant once (as the first argument or invariant=)")
        if space.null_dim == 0:
            raise ValueError("the invariant has full rank: nothing to protect")
        return None, space, None
    V = check_finite_array(space, "sensitivity vectors", ndim=2)
    B = span_basis(V)
    if invariant is not None:
        if not isinstance(invariant, Invariant):
            raise TypeError("invariant must be a privinfer.invariants.Invariant")
        if invariant.n != V.shape[1]:
            raise ValueError(f"sensitivity vectors have length {V.shape[1]} but the invariant has n = {invariant.n}")
        CV = invariant.of(V)
        if np.max(np.abs(CV)) > 1e-9 * max(1.0, float(np.max(np.abs(V)))):
            raise ValueError("sensitivity vectors must satisfy C v = 0 (differences of invariant-conforming data)")
        if B.shape[1] == invariant.null_dim:
            return B, invariant, V
    return B, _complement_invariant(B), V


class SemiDPGaussian(NullSpaceGaussian):
    r"""Semi-DP Gaussian mechanism (Cho and Awan, Alg. 1, Prop. 28).

    ``SemiDPGaussian(space, mu, sensitivity=None, a=None, invariant=None)``

    ``space`` is either the sensitivity vectors S (rows; their span is where noise goes and
    :math:`\Delta_2(S) = \max\|v\|_2` unless ``sensitivity`` is given) or an
    :class:`~privinfer.invariants.Invariant` whose null space is span(S) (then
    ``sensitivity`` = :math:`\Delta_2(S)` is required).  Noise
    :math:`N(0, (\Delta_2/\mu)^2 P_S)`; ``a`` (semi-adjacent parameter, optional) is recorded
    in the guarantee.  The kept invariant is the given one, or, for vectors alone, the
    orthogonal complement of span(S) (``P_{S^perp} y = P_{S^perp} x`` exactly).
    ``logp`` exact (see module docstring).
    """

    def __init__(self, space, mu, *, sensitivity=None, a=None, invariant=None):
        B, inv, V = _resolve_space(space, invariant)
        self.mu = check_positive(mu, "mu")
        if sensitivity is None:
            if V is None:
                raise ValueError("SemiDPGaussian with an invariant needs sensitivity= (Delta_2 of the sensitivity space)")
            sensitivity = float(np.max(np.linalg.norm(V, axis=1)))
        self.sensitivity = check_positive(sensitivity, "sensitivity")
        if V is not None and self.sensitivity < np.max(np.linalg.norm(V, axis=1)) * (1 - 1e-12):
            raise ValueError("sensitivity is smaller than the largest sensitivity vector's l2 norm")
        self.a = a
        self._basis = B
        sigma = self.sensitivity / self.mu
        if inv is None:  # span(S) is everything: no invariant, plain spherical Gaussian
            self._full = V.shape[1]
            self._inv = None
            self.sigma = sigma
        else:
            self._full = None
            super().__init__(inv, sigma)

    # full-rank sensitivity space: no invariant ------------------------------------------
    @property
    def invariant(self):
        return self._inv

    @property
    def n(self):
        return self._full if self._full is not None else self._inv.n

    @property
    def dim(self):
        return self._full if self._full is not None else self._inv.null_dim

    @property
    def projection_matrix(self) -> np.ndarray:
        """Dense ``P_S`` (d x d), e.g. Example 8: ``(1/4) v v^T`` with ``v = (1,-1,-1,1)``."""
        if self._full is not None:
            return np.eye(self._full)
        return self._inv.project_null(np.eye(self.n))

    def sample_noise(self, size=(), rng=None):
        if self._full is None:
            return super().sample_noise(size, rng)
        rng = as_generator(rng)
        return self.sigma * rng.standard_normal(tuple(size) + (self._full,))

    def _null_sq_norm(self, e, xp):
        if self._full is not None:
            return xp.sum(e * e, axis=-1)
        return super()._null_sq_norm(e, xp)

    @property
    def guarantee(self):
        params = {"mu": self.mu, "sensitivity": self.sensitivity, "sigma": self.sigma, "dim": self.dim}
        if self.a is not None:
            params["a"] = self.a
        return typed_guarantee("gdp", "Semi-DP (mu-GDP)", params, _SEMI_RELATION,
                         "Cho and Awan, Semi-DP, Alg. 1, Prop. 28")


class KNorm(AdditiveMechanism):
    r"""Optimal K-norm mechanism on span(S) with K = conv(S u -S) (Cho and Awan, Alg. 2/3, Thm 31).

    ``KNorm(sensitivity_vectors, epsilon, a=None, invariant=None)``: f_{eps,0}-semi DP
    (eps-DP on D_t with adjacency A_{a(t)}).  Exact sampler and exactly normalized ``logp``
    (module docstring).  ``acceptance_rate`` = vol(K)/vol(box) of the rejection step.
    """

    def __init__(self, sensitivity_vectors, epsilon, *, a=None, invariant=None, max_batches: int = 10_000):
        if isinstance(sensitivity_vectors, Invariant):
            raise TypeError("KNorm needs the sensitivity vectors themselves (K = conv(S))")
        B, inv, V = _resolve_space(sensitivity_vectors, invariant)
        self.epsilon = check_epsilon(epsilon)
        self.a = a
        self._inv = inv
        self._d = V.shape[1]
        self.basis = B
        s = B.shape[1]
        self.s = s
        Z = V @ B
        Z = np.vstack([Z, -Z])
        self.box = np.max(np.abs(Z), axis=0)
        if s == 1:
            self._G = np.array([[1.0 / self.box[0]], [-1.0 / self.box[0]]])
            self.volume = 2.0 * self.box[0]
        else:
            hull = ConvexHull(Z)
            A, b = hull.equations[:, :-1], hull.equations[:, -1]
            if np.any(b >= 0):
                raise ValueError("conv(S) does not contain 0 in its interior within span(S)")
            self._G = A / (-b)[:, None]  # ||z||_K = max_f G_f . z
            self.volume = float(hull.volume)
        self.acceptance_rate = self.volume / float(np.prod(2.0 * self.box))
        self._max_batches = int(max_batches)
        self._log_norm = special.gammaln(s + 1) - s * np.log(self.epsilon) + np.log(self.volume)

    @property
    def invariant(self):
        return self._inv

    @property
    def n(self):
        return self._d

    @property
    def guarantee(self):
        params = {"epsilon": self.epsilon, "dim": self.s, "K_volume": self.volume}
        if self.a is not None:
            params["a"] = self.a
        return typed_guarantee("pure", "Semi-DP (f_{eps,0}, i.e. eps-DP on D_t)", params, _SEMI_RELATION,
                         "Cho and Awan, Semi-DP, Alg. 2-3, Thm 31")

    def norm(self, z, xp=np):
        """Gauge ``||z||_K`` of coordinates z (last axis s)."""
        return xp.max(xp.dot(z, self._G.T), axis=-1)

    def in_K(self, z) -> np.ndarray:
        return np.max(np.asarray(z) @ self._G.T, axis=-1) <= 1.0

    def sample_uniform_K(self, k: int, rng) -> np.ndarray:
        """k exact uniform points of K (s-dim coordinates) by rejection from the box."""
        out = np.empty((k, self.s))
        filled = 0
        batch = max(64, int(2 * k / max(self.acceptance_rate, 1e-6)))
        for _ in range(self._max_batches):
            U = rng.uniform(-1.0, 1.0, (batch, self.s)) * self.box
            acc = U[self.in_K(U)]
            take = min(len(acc), k - filled)
            out[filled : filled + take] = acc[:take]
            filled += take
            if filled == k:
                return out
        raise RuntimeError("K-norm rejection sampler did not finish (acceptance rate "
                           f"{self.acceptance_rate:.2e}); the sensitivity space is too high-dimensional")

    def sample_noise(self, size=(), rng=None):
        rng = as_generator(rng)
        size = tuple(size)
        k = int(np.prod(size)) if size else 1
        radius = rng.gamma(self.s + 1, 1.0 / self.epsilon, size=k)
        u = self.sample_uniform_K(k, rng)
        e = (radius[:, None] * u) @ self.basis.T
        return e.reshape(size + (self._d,))

    def _density(self, e, xp):
        """``-eps ||B^T e||_K - log(Gamma(s+1) eps^-s vol(K))`` (on the support)."""
        return -self.epsilon * self.norm(xp.dot(e, self.basis), xp) - self._log_norm

    def noise_logp(self, e):
        xp = namespace(e)
        if xp is np:
            e = np.asarray(e, dtype=float)
            ok = self.noise_in_support(e)
            return self.where_in_support(ok, self._density(np.where(np.isfinite(e), e, 0.0), np))
        return self._density(e, xp)

    def logp(self, y, x):
        """Exact ``log p(y | x)`` w.r.t. s-dim Lebesgue measure on ``x + span(S)``.

        NumPy: -inf where :meth:`in_support` is false: off the subspace, i.e. off the kept
        invariant (the orthogonal complement of span(S)), tolerance relative to the scale of
        x and y."""
        xp = namespace(y, x)
        if xp is np:
            y = np.asarray(y, dtype=float)
            x = np.asarray(x, dtype=float)
            ok = self.in_support(y, x)
            e = y - x
            return self.where_in_support(ok, self._density(np.where(np.isfinite(e), e, 0.0), np))
        return self._density(y - x, xp)


def one_way_margins_sensitivity_space(shape, a: int = 3) -> np.ndarray:
    r"""Sensitivity space of an r x c table with both one-way margins invariant (Sec. 5.1).

    Returns the nonzero differences ``phi(X) - phi(X')`` (rows, C-order vectorized) of
    invariant-conforming tables reachable by changing at most ``a`` records, assuming the
    counts are large enough for every pattern (the worst case over t).  One changed record
    moves a unit between two cells, so a margin-preserving integer difference D needs
    exactly ``||D||_1 / 2`` changes.  For a = 2 or 3 these are the 2 x 2 swaps
    :math:`v_{ijkl}` of Prop. 32 (two changes); for a >= 3 and r, c >= 3 also the
    3-cycles ``e_{i1 j1} - e_{i1 j2} + e_{i2 j2} - e_{i2 j3} + e_{i3 j3} - e_{i3 j1}``
    (three changes; l2 norm sqrt(6)), which Prop. 32 of the paper omits.

    Completeness for a <= 3: D decomposes into alternating cycles of the bipartite row/column
    graph; positive mass <= 3 allows one 4-cycle or one 6-cycle (entries of size 2 would need
    mass >= 4), and a cycle through a repeated row cancels down to a shorter one.  So every
    D is the difference of two permutation patterns on k <= a distinct rows and columns,
    which is what is enumerated.
    """
    r, c = (int(v) for v in shape)
    if r < 1 or c < 1:
        raise ValueError(f"shape must hold two positive sizes, got {shape}")
    if isinstance(a, bool) or int(a) != a or a < 0 or a > 3:
        raise ValueError(f"a must be an integer in 0..3 (exact enumeration), got {a!r}")
    out = set()
    for k in range(2, min(int(a), r, c) + 1):
        for rows in itertools.combinations(range(r), k):
            for cols in itertools.combinations(range(c), k):
                for p in itertools.permutations(range(k)):
                    for q in itertools.permutations(range(k)):
                        if p == q:
                            continue
                        D = np.zeros((r, c), dtype=np.int64)
                        for i in range(k):
                            D[rows[i], cols[p[i]]] += 1
                            D[rows[i], cols[q[i]]] -= 1
                        if np.abs(D).sum() <= 2 * a and D.any():
                            out.add(tuple(D.ravel().tolist()))
    if not out:
        return np.zeros((0, r * c), dtype=np.int64)
    return np.array(sorted(out), dtype=np.int64)


def one_way_margins_l2_sensitivity(shape, a: int = 3) -> float:
    r""":math:`\Delta_2(S_{Semi})` for an r x c table with one-way margins invariant, without
    enumerating: 0 if a < 2 or min(r, c) < 2; 2 (a 2 x 2 swap) if a = 2 or min(r, c) = 2;
    sqrt(6) (a 3-cycle) if a >= 3 and r, c >= 3 (see :func:`one_way_margins_sensitivity_space`;
    Sec. 5.1 of the paper states 2 for all r, c)."""
    r, c = (int(v) for v in shape)
    if r < 1 or c < 1:
        raise ValueError(f"shape must hold two positive sizes, got {shape}")
    if isinstance(a, bool) or int(a) != a or a < 0 or a > 3:
        raise ValueError(f"a must be an integer in 0..3, got {a!r}")
    k = min(int(a), r, c)
    return float(np.sqrt(2 * k)) if k >= 2 else 0.0
