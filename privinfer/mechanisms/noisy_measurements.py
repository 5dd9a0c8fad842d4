r"""Noisy measurements: many sparse linear queries of one histogram, each with discrete
Gaussian noise -- the design of the 2020 US Census disclosure avoidance system.

The Census Bureau's TopDown algorithm first takes *noisy measurements* of many linear
queries of the confidential histogram ``x`` (at the state, county, tract and block levels:
totals, sex x age, race, ...), each with discrete Gaussian noise of a published scale, and
publishes a few *invariants* (the state population) exactly; it then post-processes the
measurements (Abowd et al. 2022, "The 2020 Census Disclosure Avoidance System TopDown
Algorithm", Harvard Data Science Review, Sec. 5-7).  The Bureau has since published the
noisy measurement files themselves.  :class:`NoisyMeasurements` is that measurement step:

.. math:: y_k = B_k x + e_k, \qquad e_{k,r} \sim \mathcal N_{\mathbb Z}(0, \sigma_k^2)
          \text{ independently}, \qquad k = 1, \dots, K,

with ``B_k`` a sparse integer (typically 0/1) ``q_k x n`` query matrix over the ``n`` cells
of the histogram and :math:`\mathcal N_{\mathbb Z}` the discrete Gaussian (Canonne, Kamath,
Steinke 2020, Def. 1).  The release is the concatenation ``y = (y_1, ..., y_K)`` of length
``m = sum_k q_k``; it is an integer vector drawn exactly (CKS 2020, Algorithm 3, on exact
rational :math:`\sigma_k^2`; :func:`privinfer.lattice.laws.sample_discrete_gaussian`).

Likelihood
----------
:math:`\log p(y \mid x) = \sum_k \sum_r \log \mathcal N_{\mathbb Z}(y_{k,r} - (B_k x)_r; \sigma_k^2)`,
the exact normalized log-pmf
(:func:`privinfer.mechanisms.discrete.discrete_gaussian_logpmf`), ``-inf`` when ``y`` or
``x`` is not integer.  Nothing is dropped.

Privacy
-------
Under add/remove one person the histogram changes by :math:`\pm e_i` for one cell ``i``, so
query ``k`` moves by the column :math:`B_k e_i`.  Its l2 sensitivity is the largest column
norm, :math:`\Delta_k = \max_i \|B_k e_i\|_2` (:func:`l2_sensitivity`; for a 0/1 matrix whose
rows are disjoint cell sets -- a margin of a table -- :math:`\Delta_k = 1`).  The discrete
Gaussian with integer shift :math:`\Delta` has Renyi divergences at most
:math:`\alpha\Delta^2/(2\sigma^2)` (CKS 2020, Prop. 5 and Thm 4), independent coordinates
add, and zCDP composes additively (Bun and Steinke 2016, Lemma 2.3), so the release is

.. math:: \rho = \sum_k \frac{\Delta_k^2}{2\sigma_k^2}\text{-zCDP}

(:attr:`NoisyMeasurements.guarantee`, a :class:`~privinfer.guarantees.ZCDP`; its
:math:`(\epsilon, \delta)` statement is ``guarantee.to_approx_dp(delta)``,
:math:`\epsilon = \rho + 2\sqrt{\rho\ln(1/\delta)}`, Bun-Steinke Prop. 1.3).  The joint bound
:math:`\max_i \sum_k \|B_k e_i\|^2/(2\sigma_k^2)` (one person enters one cell of every query)
is never larger and is recorded as ``rho_joint``; they agree when every ``B_k`` is a margin.

Invariants (2020 Census semantics)
----------------------------------
The Bureau publishes the invariants' values ``t = C x`` (e.g. the state population)
*exactly, in addition to* the noisy measurements; the measurements themselves stay noisy --
the noisy state sex x age counts do not add up to the published state total.  Here
``invariant`` is that invariant: :meth:`NoisyMeasurements.release` returns the measurements
only, :meth:`NoisyMeasurements.publish` returns a :class:`MeasurementRelease` holding the
measurements and ``t = C x``, checked (integer, of the invariant's length, with a
non-negative integer point on the fibre ``{C x = t}``).  ``t`` is disclosed: the guarantee
covers the measurements, and neighbours that share ``t`` (one person moved between cells,
:math:`x' = x + e_i - e_j`) are protected by the same computation with the column
differences: :math:`\|B_k(e_i - e_j)\|^2 \le 2\|B_k e_i\|^2 + 2\|B_k e_j\|^2`, so at most
:math:`4\rho`, and :math:`2\rho` when every ``B_k`` is a margin (0/1 rows partitioning the
cells: the shift is 0 or two unit entries).
The analyst conditions on ``t`` exactly (:mod:`privinfer.pymc`: a lattice latent on the fibre
observed through this mechanism).

Unlike the mechanisms with ``m = n``, the support condition does not involve the invariant
(the measurements keep nothing): a release is possible for ``x`` iff ``y`` and ``x`` are
integer.  :meth:`local_logp` is written in the noise of the *queries*,
:math:`u = y - Bx` (length ``m``): one :class:`~privinfer.lattice.LinearQueries` term whose
``shifted(y, -1)`` is the log-likelihood as a function of ``x``, scored from the query rows
a move touches.

Building a hierarchy
--------------------
:func:`margin_query` makes the 0/1 matrix of a margin of a table with cells in C order;
:func:`table_measurements` a mechanism from margins and a zCDP budget ``rho`` per margin
(:math:`\sigma_k = \Delta_k/\sqrt{2\rho_k}`, rounded *up* to ``decimals`` places, so the
stated :math:`\rho` is at most the requested one); :func:`county_sex_age_measurements` the
Census hierarchy of one state: cells county x sex x age group, queries the detailed cells,
the county totals and the state sex x age table, the state total invariant.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import scipy.sparse as sp

from .._backend import namespace
from .._rng import as_generator
from .._validation import check_integer_array, check_positive, check_vector_length
from ..guarantees import ZCDP, Guarantee
from ..invariants import InfeasibleInvariantError, Invariant
from ..lattice import LinearQueries, LocalLogDensity
from ..lattice.laws import as_rational, discrete_gaussian_log_normalizer, sample_discrete_gaussian, size_tuple
from .base import Mechanism, integer_mask
from .discrete import discrete_gaussian_logpmf

__all__ = [
    "NoisyMeasurements",
    "MeasurementRelease",
    "margin_query",
    "l2_sensitivity",
    "table_measurements",
    "county_sex_age_measurements",
    "sigma_for_rho",
]


def l2_sensitivity(B) -> float:
    r""":math:`\Delta = \max_i \|B e_i\|_2`, the l2 sensitivity of ``x -> B x`` under add/remove
    one person (one cell changes by one): the largest column norm of ``B``."""
    B = sp.csc_matrix(B, dtype=float)
    col_sq = np.asarray(B.multiply(B).sum(axis=0)).ravel()
    return float(np.sqrt(col_sq.max())) if col_sq.size else 0.0


def margin_query(shape, keep) -> sp.csr_matrix:
    """The 0/1 query matrix of the margin ``keep`` (a tuple of kept axes) of a table of shape
    ``shape`` with cells in C order: one row per cell of the margin (C order over the kept
    axes), ``1`` for every table cell that adds to it.  ``keep = all axes`` is the identity
    (the detailed cells), ``keep = ()`` the grand total."""
    shape = tuple(int(s) for s in shape)
    if not shape or any(s < 1 for s in shape):
        raise ValueError(f"shape must be a non-empty tuple of positive sizes, got {shape}")
    keep = tuple(int(a) for a in keep)
    if len(set(keep)) != len(keep) or any(not 0 <= a < len(shape) for a in keep):
        raise ValueError(f"keep must list distinct axes of a {len(shape)}-way table, got {keep}")
    keep = tuple(sorted(keep))
    n = int(np.prod(shape))
    idx = np.unravel_index(np.arange(n), shape)
    if keep:
        rows = np.ravel_multi_index(tuple(idx[a] for a in keep), tuple(shape[a] for a in keep))
        q = int(np.prod([shape[a] for a in keep]))
    else:
        rows = np.zeros(n, dtype=np.int64)
        q = 1
    return sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(q, n))


def _check_query(B, k: int, n: int | None) -> sp.csr_matrix:
    if sp.issparse(B):
        M = sp.csr_matrix(B, dtype=float)
        data = M.data
    else:
        arr = np.asarray(B)
        if arr.dtype.kind not in "biuf":
            raise TypeError(f"query {k} must be a numeric matrix")
        if arr.ndim != 2:
            raise ValueError(f"query {k} must be a 2-D matrix (rows x cells), got shape {arr.shape}")
        M = sp.csr_matrix(arr.astype(float))
        data = M.data
    if M.shape[0] < 1 or M.shape[1] < 1:
        raise ValueError(f"query {k} has shape {M.shape}: it needs at least one row and one cell")
    if n is not None and M.shape[1] != n:
        raise ValueError(f"query {k} has {M.shape[1]} columns, the first query has {n}: all queries act on the same cells")
    if not np.all(np.isfinite(data)) or np.any(data != np.round(data)):
        raise ValueError(f"query {k} must have integer entries (integer answers of integer counts)")
    M.sum_duplicates()
    M.eliminate_zeros()
    if M.nnz == 0:
        raise ValueError(f"query {k} is the zero matrix")
    return M


class NoisyMeasurements(Mechanism):
    r"""Discrete Gaussian measurements of several sparse linear queries (module docstring).

    Parameters
    ----------
    queries
        list of matrices ``B_k`` (SciPy sparse or dense, ``q_k x n``, integer entries).
    sigmas
        one discrete Gaussian scale :math:`\sigma_k > 0` per query (floats are read as the
        decimal they print as, Fractions exactly; :math:`\sigma_k^2` is the exact rational
        used by the sampler and the likelihood).
    invariant
        an integer :class:`~privinfer.invariants.Invariant` on the ``n`` cells whose
        values are published exactly alongside the measurements (2020 Census: the state
        total), or ``None``.
    names
        optional names of the queries (e.g. ``"county total"``).

    Notes
    -----
    ``y = release(x)`` has length ``m = sum_k q_k``: ``y[slices[k]]`` are the measurements
    of query ``k``.
    """

    integer = True
    transparent = True
    logp_constant_dropped = ""

    def __init__(self, queries, sigmas, invariant=None, *, names=None):
        if isinstance(queries, (np.ndarray,)) or sp.issparse(queries):
            queries = [queries]
        queries = list(queries)
        if not queries:
            raise ValueError("NoisyMeasurements needs at least one query matrix")
        mats = []
        for k, B in enumerate(queries):
            mats.append(_check_query(B, k, mats[0].shape[1] if mats else None))
        if isinstance(sigmas, (numbers.Real, Fraction)):
            sigmas = [sigmas]
        sigmas = list(sigmas)
        if len(sigmas) != len(mats):
            raise ValueError(f"give one sigma per query: {len(mats)} queries, {len(sigmas)} sigmas")
        self._sigmas = tuple(as_rational(s, f"sigmas[{k}]") for k, s in enumerate(sigmas))
        if names is None:
            names = [f"query {k}" for k in range(len(mats))]
        names = [str(s) for s in names]
        if len(names) != len(mats):
            raise ValueError(f"give one name per query: {len(mats)} queries, {len(names)} names")
        self.names = tuple(names)
        self._n = int(mats[0].shape[1])
        if invariant is not None:
            if not isinstance(invariant, Invariant):
                raise TypeError(f"invariant must be a privinfer.invariants.Invariant, not {type(invariant).__name__}")
            if invariant.n != self._n:
                raise ValueError(f"the invariant constrains {invariant.n} cells, the queries act on {self._n}")
            if not invariant.is_integer:
                raise ValueError("the invariant of integer counts needs an integer constraint matrix C")
        self._invariant = invariant
        self.queries = tuple(mats)
        self.sizes = tuple(int(B.shape[0]) for B in mats)
        bounds = np.concatenate([[0], np.cumsum(self.sizes)])
        self.slices = tuple(slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]))
        self.matrix = sp.vstack(mats, format="csr")
        self.row_sigma = np.repeat([float(s) for s in self._sigmas], self.sizes)
        self.sensitivities = tuple(l2_sensitivity(B) for B in mats)

    # -- declared protocol -----------------------------------------------------------------
    @property
    def n(self) -> int:
        return self._n

    @property
    def m(self) -> int:
        return int(sum(self.sizes))

    @property
    def invariant(self):
        return self._invariant

    @property
    def sigmas(self) -> tuple:
        """The scales :math:`\\sigma_k` as exact rationals."""
        return self._sigmas

    @property
    def rho(self) -> float:
        r""":math:`\sum_k \Delta_k^2/(2\sigma_k^2)`."""
        return float(sum(d * d / (2.0 * float(s) ** 2) for d, s in zip(self.sensitivities, self._sigmas)))

    @property
    def rho_joint(self) -> float:
        r""":math:`\max_i \sum_k \|B_k e_i\|^2/(2\sigma_k^2)` (at most :attr:`rho`)."""
        M = self.matrix.multiply(self.matrix).tocsc()
        w = 1.0 / (2.0 * self.row_sigma**2)
        per_cell = np.asarray(M.T @ w).ravel()
        return float(per_cell.max())

    @property
    def guarantee(self) -> Guarantee:
        rel = "add/remove one person (one cell of the histogram changes by 1)"
        if self._invariant is not None:
            rel += "; the invariant values t = C x are published exactly and are not protected"
        return ZCDP(
            self.rho, definition="rho-zCDP", relation=rel,
            reference="Canonne, Kamath, Steinke 2020, Thm 4; Bun and Steinke 2016, Lemma 2.3 (composition)",
            sigmas=[float(s) for s in self._sigmas], sensitivities=list(self.sensitivities),
            rho_joint=self.rho_joint,
        )

    def sampler_description(self) -> dict:
        return {"exact": True, "method": "discrete Gaussian, Canonne-Kamath-Steinke 2020 Algorithm 3"}

    # -- release ---------------------------------------------------------------------------
    def _check_counts(self, x) -> np.ndarray:
        arr = check_vector_length(x, self.n, "x")
        arr = check_integer_array(arr, "x")
        if np.any(arr < 0):
            raise ValueError("x must hold non-negative counts")
        return np.round(arr).astype(np.int64)

    def answers(self, x) -> np.ndarray:
        """The exact query answers :math:`Bx` (integer), ``x`` of shape ``(n,)`` or ``(..., n)``."""
        x = np.asarray(x)
        flat = x.reshape(-1, self.n).astype(float)
        out = np.asarray((self.matrix @ flat.T).T)
        return np.round(out).astype(np.int64).reshape(x.shape[:-1] + (self.m,))

    def sample_noise(self, size=(), rng=None) -> np.ndarray:
        """Noise vectors of shape ``size + (m,)``: exact discrete Gaussian draws per query."""
        rng = as_generator(rng)
        size = size_tuple(size)
        parts = [sample_discrete_gaussian(None, size + (q,), rng, sigma2=s * s)
                 for q, s in zip(self.sizes, self._sigmas)]
        return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts], axis=-1)

    def release(self, x, rng=None) -> np.ndarray:
        """The integer measurements ``y = B x + e`` (``x``: non-negative integer counts)."""
        x = self._check_counts(x)
        rng = as_generator(rng)
        return self.answers(x) + self.sample_noise(x.shape[:-1], rng)

    def invariant_values(self, x) -> np.ndarray | None:
        """``t = C x`` (int64) for the counts ``x``, or ``None`` without an invariant."""
        if self._invariant is None:
            return None
        x = self._check_counts(x)
        return np.round(self._invariant.of(x.astype(float))).astype(np.int64)

    def publish(self, x, rng=None) -> "MeasurementRelease":
        """The published product: the measurements ``y`` and the exact invariant values ``t``."""
        x = self._check_counts(x)
        if x.ndim != 1:
            raise ValueError(f"publish takes one vector of counts of shape ({self.n},), got {x.shape}")
        return MeasurementRelease(self, self.release(x, rng=rng), self.invariant_values(x))

    def split(self, y) -> list:
        """``y`` cut into its queries' measurements (a list of arrays ``(..., q_k)``)."""
        y = np.asarray(y)
        if y.shape[-1:] != (self.m,):
            raise ValueError(f"y must have shape (..., {self.m}), got {y.shape}")
        return [y[..., s] for s in self.slices]

    # -- likelihood ------------------------------------------------------------------------
    def _answers_xp(self, x, xp):
        if xp is np:
            x = np.asarray(x, dtype=float)
            flat = x.reshape(-1, self.n)
            return np.asarray((self.matrix @ flat.T).T).reshape(x.shape[:-1] + (self.m,))
        import pytensor.sparse as ps

        B = ps.as_sparse_variable(self.matrix)
        xf = xp.cast(xp.as_tensor_variable(x), "float64")
        if xf.ndim == 1:
            return ps.structured_dot(B, xf[:, None])[:, 0]
        return ps.structured_dot(B, xf.T).T

    def logp(self, y, x):
        r""":math:`\sum_{k,r}\log\mathcal N_{\mathbb Z}(y_{k,r} - (B_k x)_r; \sigma_k^2)` (exact),
        ``-inf`` if ``y`` or ``x`` is not integer (NumPy or PyTensor)."""
        xp = namespace(y, x)
        if xp is np:
            y, x = self.checked_pair(y, x)
            u = y - self._answers_xp(x, np)
            total = sum(np.sum(discrete_gaussian_logpmf(u[..., sl], float(s)), axis=-1)
                        for sl, s in zip(self.slices, self._sigmas))
            ok = integer_mask(x) & np.all(np.isfinite(u), axis=-1)
            return self.where_in_support(ok, np.where(ok, total, 0.0))
        u = xp.cast(xp.as_tensor_variable(y), "float64") - self._answers_xp(x, xp)
        inv2 = xp.as_tensor_variable(1.0 / (2.0 * self.row_sigma**2))
        lz = sum(q * discrete_gaussian_log_normalizer(float(s)) for q, s in zip(self.sizes, self._sigmas))
        total = -xp.sum(u * u * inv2, axis=-1) - lz
        ok = xp.and_(integer_mask(u, xp), integer_mask(xp.as_tensor_variable(x), xp))
        return xp.switch(ok, total, -np.inf)

    #: independent noise per measurement: one log-likelihood term per released measurement
    loglik_factorization = "cell"

    def logp_terms(self, y, x):
        r"""One term per measurement, :math:`\log\mathcal N_{\mathbb Z}(y_{k,r} - (B_k x)_r;
        \sigma_k^2)` (length ``m``; they sum to :meth:`logp`), all ``-inf`` if ``y`` or ``x`` is
        not integer."""
        xp = namespace(y, x)
        if xp is np:
            y, x = self.checked_pair(y, x)
            u = y - self._answers_xp(x, np)
            terms = np.concatenate([discrete_gaussian_logpmf(u[..., sl], float(s))
                                    for sl, s in zip(self.slices, self._sigmas)], axis=-1)
            ok = integer_mask(x) & np.all(np.isfinite(u), axis=-1)
            return np.where(np.asarray(ok)[..., None], terms, -np.inf)
        lz = np.repeat([discrete_gaussian_log_normalizer(float(s)) for s in self._sigmas], self.sizes)
        inv2 = 1.0 / (2.0 * self.row_sigma**2)
        u = xp.cast(xp.as_tensor_variable(y), "float64") - self._answers_xp(x, xp)
        ok = xp.and_(integer_mask(u, xp), integer_mask(xp.as_tensor_variable(x), xp))
        return xp.switch(xp.shape_padright(ok), -u * u * xp.as_tensor_variable(inv2) - lz, -np.inf)

    def local_logp(self) -> LocalLogDensity:
        r"""The log-likelihood as one :class:`~privinfer.lattice.LinearQueries` term in the query
        noise :math:`u = y - Bx`: :math:`g(r, u_r) = -u_r^2/(2\sigma_{k(r)}^2)` (normalizers
        dropped); ``term.shifted(y, -1)`` is the log-likelihood in ``x`` up to a constant."""
        inv2 = 1.0 / (2.0 * self.row_sigma**2)

        def row(r, u):
            u = np.asarray(u, dtype=float)
            return -inv2[r] * u * u

        return LocalLogDensity([LinearQueries(self.matrix, row)])

    # -- support ---------------------------------------------------------------------------
    def in_support(self, y, x):
        """Whether ``y`` is a possible release of ``x``: both finite and integer (the discrete
        Gaussian charges every integer); the invariant constrains nothing here (module
        docstring).  One bool per vector of the stack; shapes are checked."""
        xp = namespace(y, x)
        if xp is not np:
            return xp.and_(integer_mask(y, xp), integer_mask(x, xp))
        y, x = self.checked_pair(y, x)
        fin_y, fin_x = np.isfinite(y), np.isfinite(x)
        ok_y = np.all(fin_y, axis=-1) & integer_mask(np.where(fin_y, y, 0.0))
        ok_x = np.all(fin_x, axis=-1) & integer_mask(np.where(fin_x, x, 0.0))
        ok = np.broadcast_to(ok_y, np.broadcast_shapes(ok_y.shape, ok_x.shape)) & ok_x
        return bool(ok) if np.ndim(ok) == 0 else np.array(ok)

    def noise_in_support(self, e, scale=None):
        """Whether the query noise ``e = y - B x`` (length ``m``) is finite and integer."""
        xp = namespace(e)
        if xp is not np:
            return integer_mask(e, xp)
        e = np.asarray(e, dtype=float)
        fin = np.isfinite(e)
        ok = np.all(fin, axis=-1) & integer_mask(np.where(fin, e, 0.0))
        return bool(ok) if np.ndim(ok) == 0 else ok


@dataclass(frozen=True)
class MeasurementRelease:
    """What is published: the noisy measurements ``y`` and the exact invariant values ``t``.

    Built by :meth:`NoisyMeasurements.publish`, or by an analyst from published files.
    Checked on construction: ``y`` holds ``m`` integers; ``t`` is ``None`` exactly when the
    mechanism has no invariant, otherwise integer with one value per row of ``C`` and a
    non-negative integer point on the fibre ``{x >= 0, C x = t}``.
    """

    mechanism: NoisyMeasurements
    y: np.ndarray
    t: np.ndarray | None = None

    def __post_init__(self):
        mech = self.mechanism
        if not isinstance(mech, NoisyMeasurements):
            raise TypeError(f"mechanism must be a NoisyMeasurements, not {type(mech).__name__}")
        y = np.asarray(self.y)
        if y.shape != (mech.m,):
            raise ValueError(f"the measurements must have shape ({mech.m},), got {y.shape}")
        if y.dtype.kind not in "biuf" or not np.all(np.isfinite(y.astype(float))) or np.any(y != np.round(y)):
            raise ValueError("the measurements must be finite integers")
        object.__setattr__(self, "y", np.round(y).astype(np.int64))
        inv = mech.invariant
        t = self.t
        if inv is None:
            if t is not None:
                raise ValueError("invariant values t given, but the mechanism has no invariant")
            return
        if t is None:
            raise ValueError("the mechanism has an invariant: the release needs its published values t")
        t = np.atleast_1d(np.asarray(t))
        if t.shape != (inv.m,):
            raise ValueError(f"the invariant values t must have shape ({inv.m},), got {t.shape}")
        if t.dtype.kind not in "biuf" or not np.all(np.isfinite(t.astype(float))) or np.any(t != np.round(t)):
            raise ValueError("the invariant values t must be finite integers")
        t = np.round(t).astype(np.int64)
        try:
            inv.feasible_point(t, integer=True, nonnegative=True)
        except InfeasibleInvariantError:
            raise InfeasibleInvariantError("no non-negative integer counts have the published invariant values t") from None
        object.__setattr__(self, "t", t)

    @property
    def invariant(self):
        """The mechanism's invariant with its published values (``None`` without one)."""
        inv = self.mechanism.invariant
        return None if inv is None else inv.with_t(self.t)

    def measurements(self, k) -> np.ndarray:
        """The measurements of query ``k`` (an index or a query name)."""
        mech = self.mechanism
        if isinstance(k, str):
            if k not in mech.names:
                raise KeyError(f"no query named {k!r} (queries: {', '.join(mech.names)})")
            k = mech.names.index(k)
        return self.y[mech.slices[k]]


# ---------------------------------------------------------------------------------------------
# builders
# ---------------------------------------------------------------------------------------------
def sigma_for_rho(rho, delta: float = 1.0, decimals: int = 2) -> Fraction:
    r"""The smallest :math:`\sigma` with ``decimals`` decimal places and
    :math:`\Delta^2/(2\sigma^2) \le \rho` (the discrete Gaussian scale that spends at most
    ``rho`` of zCDP on a query of l2 sensitivity ``delta``; CKS 2020, Thm 4), exact rational."""
    r = as_rational(rho, "rho")
    d2 = Fraction(delta * delta) if delta == round(delta) else Fraction(repr(delta * delta))
    scale = 10 ** int(decimals)
    k = max(1, math.ceil(math.sqrt(float(d2 / (2 * r))) * scale))
    while d2 / (2 * Fraction(k, scale) ** 2) > r:
        k += 1
    while k > 1 and d2 / (2 * Fraction(k - 1, scale) ** 2) <= r:
        k -= 1
    return Fraction(k, scale)


def table_measurements(shape, budget, *, invariant=None, decimals: int = 2, axis_names=None) -> NoisyMeasurements:
    r"""Noisy measurements of margins of a table with cells in C order.

    ``budget`` maps each measured margin (a tuple of kept axes; all axes = the detailed
    cells) to its zCDP budget :math:`\rho_k > 0`; the scale is
    :math:`\sigma_k = \Delta_k/\sqrt{2\rho_k}` (:math:`\Delta_k = 1` for a margin) rounded up
    to ``decimals`` places, so the mechanism's :math:`\rho \le \sum_k\rho_k`.  ``invariant``:
    as for :class:`NoisyMeasurements`.  ``axis_names`` name the queries (``"county x sex"``).
    """
    shape = tuple(int(s) for s in shape)
    items = list(budget.items()) if hasattr(budget, "items") else list(budget)
    if not items:
        raise ValueError("the budget must name at least one margin")
    names = list(axis_names) if axis_names is not None else [f"axis {a}" for a in range(len(shape))]
    if len(names) != len(shape):
        raise ValueError(f"give one axis name per axis of the {len(shape)}-way table")
    queries, sigmas, qnames = [], [], []
    for keep, rho in items:
        check_positive(float(rho), "rho")
        B = margin_query(shape, keep)
        queries.append(B)
        sigmas.append(sigma_for_rho(rho, l2_sensitivity(B), decimals))
        keep = tuple(sorted(int(a) for a in keep))
        qnames.append(" x ".join(names[a] for a in keep) if keep else "total")
    return NoisyMeasurements(queries, sigmas, invariant, names=qnames)


def county_sex_age_measurements(n_counties: int, n_sexes: int = 2, n_ages: int = 23, *, rho_detailed,
                                rho_county, rho_state_sex_age, state_total: bool = True,
                                decimals: int = 2) -> NoisyMeasurements:
    r"""The Census hierarchy of one state: cells county x sex x age group (C order, county
    slowest), queries

    * ``"county x sex x age"`` -- the detailed cells (budget ``rho_detailed``),
    * ``"county"`` -- the county totals (``rho_county``),
    * ``"sex x age"`` -- the state's sex x age table (``rho_state_sex_age``),

    and, with ``state_total``, the state population as the invariant
    (:func:`privinfer.invariants.total`), published exactly.  Total budget
    :math:`\rho \le` the sum of the three (see :func:`table_measurements`).
    """
    from ..invariants import total

    shape = (int(n_counties), int(n_sexes), int(n_ages))
    inv = total(int(np.prod(shape))) if state_total else None
    return table_measurements(shape, {(0, 1, 2): rho_detailed, (0,): rho_county, (1, 2): rho_state_sex_age},
                              invariant=inv, decimals=decimals, axis_names=("county", "sex", "age"))
