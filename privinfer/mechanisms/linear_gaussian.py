r"""The linear Gaussian mechanism :math:`y = Bx + N(0, \Sigma)`.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Definition 2.3 and Lemma 2.4.

Shapes
------
``B`` is an ``m x n`` query matrix: the input ``x`` (the data vector of counts, one entry per
record type) has length ``n`` (the paper's ``d``), and the released vector ``y`` has length
``m`` (one noisy answer per query).  ``m`` may differ from ``n`` (and may be 0: the mechanism
that releases nothing, which arises as a residual when a common mechanism already carries all
of a target's information).  ``Sigma`` is ``m x m``, symmetric and *nonsingular*
(Definition 2.3).

Privacy (Lemma 2.4)
-------------------
The *privacy cost matrix* is :math:`K = B^T\Sigma^{-1}B` (``n x n``).  Neighbours differ by
:math:`\pm 1` in one cell ``i`` (add/remove one record of type ``t_i``), so the privacy loss
between :math:`N(Bx, \Sigma)` and :math:`N(B(x \pm e_i), \Sigma)` is that of a scalar Gaussian
shift with Mahalanobis length :math:`\sqrt{e_i^T K e_i} = \sqrt{K_{ii}}`.  Hence, with
:math:`c = \max_i K_{ii}`:

* rho-zCDP with :math:`\rho = c/2`; the personalized (per record type) parameter is
  :math:`\rho_i = K_{ii}/2`;
* mu-GDP with :math:`\mu = \sqrt c`, equivalently the analytic Gaussian curve
  :math:`\delta(\epsilon) = \Phi(\sqrt c/2 - \epsilon/\sqrt c) - e^\epsilon\Phi(-\sqrt c/2 - \epsilon/\sqrt c)`
  (Balle and Wang 2018), and personalized :math:`\delta_i(\epsilon)` with :math:`c_i = K_{ii}`.

Two linear Gaussian mechanisms with the same cost matrix are *equivalent* (each is a
post-processing of the other, Theorem 3.5 / Definition 3.6), so every privacy parameter is a
function of :math:`K` alone.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg

from .._backend import as_array, namespace
from .._rng import as_generator
from .._validation import check_finite_array, check_vector_length
from ..accounting import analytic_gaussian_epsilon, cost_matrix_mu, cost_matrix_rho, gdp_delta
from ..guarantees import typed_guarantee
from .base import Guarantee, Mechanism

__all__ = ["LinearGaussian"]

#: Relative tolerance below which a covariance eigenvalue counts as zero (singular Sigma).
_SINGULAR_RTOL = 1e-12


def _check_query_matrix(B) -> np.ndarray:
    Bm = check_finite_array(B, "B")
    if Bm.ndim == 1:
        Bm = Bm[None, :]
    if Bm.ndim != 2:
        raise ValueError(f"B must be a 2-D query matrix (m queries x n cells), got shape {Bm.shape}")
    if Bm.shape[1] == 0:
        raise ValueError("B must have at least one column (the data vector has length n >= 1)")
    return Bm


def _check_covariance(Sigma, m: int) -> np.ndarray:
    """Validate an ``m x m`` covariance: symmetric, positive definite (clear error otherwise).

    A scalar is read as the variance ``s`` of iid noise (``s I``); a vector of length ``m``
    as the diagonal of a diagonal covariance.
    """
    S = check_finite_array(Sigma, "Sigma")
    if S.ndim == 0:
        S = float(S) * np.eye(m)
    elif S.ndim == 1:
        if S.shape[0] != m:
            raise ValueError(f"Sigma given as a vector of variances must have length m={m}, got {S.shape[0]}")
        S = np.diag(S)
    elif S.ndim != 2 or S.shape != (m, m):
        raise ValueError(f"Sigma must have shape ({m}, {m}) to match B with m={m} rows, got {S.shape}")
    if m == 0:
        return np.zeros((0, 0))
    scale = float(np.max(np.abs(S)))
    if scale == 0.0:
        raise ValueError("Sigma is singular (the zero matrix); Definition 2.3 requires a nonsingular covariance")
    if not np.allclose(S, S.T, rtol=0.0, atol=1e-10 * scale):
        raise ValueError("Sigma must be symmetric")
    S = 0.5 * (S + S.T)
    w = np.linalg.eigvalsh(S)
    if w[0] < -_SINGULAR_RTOL * w[-1] or w[-1] <= 0:
        raise ValueError("Sigma is not positive semidefinite (it has a negative eigenvalue), so it is not a covariance matrix")
    if w[0] <= _SINGULAR_RTOL * w[-1]:
        raise ValueError(
            "Sigma is singular (numerically: smallest/largest eigenvalue <= "
            f"{_SINGULAR_RTOL:g}); the linear Gaussian mechanism requires a nonsingular covariance "
            "(Definition 2.3). Drop linearly dependent noisy answers or standardize instead."
        )
    return S


class LinearGaussian(Mechanism):
    r"""Linear Gaussian mechanism :math:`M(x) = Bx + N(0, \Sigma)` (Common Mechanism, Def. 2.3).

    Parameters
    ----------
    B
        ``(m, n)`` query matrix (a 1-D array is one query).  ``n`` is the length of the input
        data vector, ``m`` the length of the output.
    Sigma
        ``(m, m)`` symmetric positive definite noise covariance; a scalar means ``Sigma * I``
        (iid noise with that *variance*), a length-``m`` vector a diagonal covariance.

    Notes
    -----
    ``n`` (protocol attribute) is the **input** length; the released vector has length
    :attr:`m`.  ``release`` draws :math:`y = Bx + Lz` with :math:`\Sigma = LL^T` (Cholesky) and
    :math:`z \sim N(0, I_m)`.  ``logp`` is the exact Gaussian log density (no constant dropped):

    .. math:: \log p(y\mid x) = -\tfrac12 \|L^{-1}(y - Bx)\|^2 - \tfrac m2\log(2\pi) - \log|\det L|.

    There is no invariant (``invariant is None``); outputs are real (``integer = False``).
    """

    integer = False
    invariant = None
    logp_constant_dropped = ""

    def __init__(self, B, Sigma):
        Bm = _check_query_matrix(B)
        m = Bm.shape[0]
        S = _check_covariance(Sigma, m)
        self._B = Bm
        self._Sigma = S
        if m:
            L = np.linalg.cholesky(S)
            self._L = L
            self._Linv = linalg.solve_triangular(L, np.eye(m), lower=True)
            self._logdet = 2.0 * float(np.sum(np.log(np.diag(L))))
            WB = self._Linv @ Bm  # whitened queries Sigma^{-1/2}-like (L^{-1} B)
            K = WB.T @ WB
        else:
            self._L = self._Linv = np.zeros((0, 0))
            self._logdet = 0.0
            K = np.zeros((Bm.shape[1], Bm.shape[1]))
        self._K = 0.5 * (K + K.T)
        for a in (self._B, self._Sigma, self._L, self._Linv, self._K):
            a.setflags(write=False)

    # -- shapes --------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Length of the input data vector ``x`` (number of cells / record types)."""
        return self._B.shape[1]

    @property
    def m(self) -> int:
        """Length of the released vector ``y`` (number of noisy query answers)."""
        return self._B.shape[0]

    @property
    def B(self) -> np.ndarray:
        """The ``(m, n)`` query matrix (read-only)."""
        return self._B

    @property
    def Sigma(self) -> np.ndarray:
        """The ``(m, m)`` noise covariance (read-only)."""
        return self._Sigma

    # -- privacy -------------------------------------------------------------------------
    @property
    def cost_matrix(self) -> np.ndarray:
        r"""Privacy cost matrix :math:`B^T\Sigma^{-1}B` (``n x n``, Def. 2.3)."""
        return self._K

    @property
    def personalized_rho(self) -> np.ndarray:
        r"""Per-cell zCDP parameters :math:`\rho_i = K_{ii}/2` (Lemma 2.4, fourth item)."""
        return 0.5 * np.diag(self._K).copy()

    @property
    def rho(self) -> float:
        r"""zCDP parameter :math:`\rho = \max_i K_{ii}/2` (Lemma 2.4); 0 if nothing is released."""
        if not np.any(np.diag(self._K) > 0):
            return 0.0
        return cost_matrix_rho(self._K)

    @property
    def mu(self) -> float:
        r"""Gaussian DP parameter :math:`\mu = \sqrt{\max_i K_{ii}}`."""
        if not np.any(np.diag(self._K) > 0):
            return 0.0
        return cost_matrix_mu(self._K)

    def delta(self, epsilon):
        r"""Analytic curve :math:`\delta(\epsilon)` of Lemma 2.4 (vectorized in ``epsilon``)."""
        if self.mu == 0.0:
            eps = np.asarray(epsilon, dtype=float)
            if np.any(~np.isfinite(eps)) or np.any(eps < 0):
                raise ValueError("epsilon must be finite and >= 0")
            out = np.zeros_like(eps)
            return float(out) if out.ndim == 0 else out
        return gdp_delta(self.mu, epsilon)

    def epsilon(self, delta: float) -> float:
        """Smallest eps with :meth:`delta` (eps) <= ``delta``."""
        if self.mu == 0.0:
            return 0.0
        return analytic_gaussian_epsilon(self._K, delta)

    def personalized_delta(self, epsilon: float) -> np.ndarray:
        r"""Per-cell :math:`\delta_i(\epsilon)` with :math:`c_i = K_{ii}` (Lemma 2.4, second item)."""
        c = np.diag(self._K)
        return np.array([gdp_delta(float(np.sqrt(ci)), epsilon) if ci > 0 else 0.0 for ci in c])

    @property
    def guarantee(self) -> Guarantee:
        return typed_guarantee(
            "zcdp",
            definition="rho-zCDP",
            parameters={"rho": self.rho, "mu": self.mu},
            relation=(
                "add/remove one record (x changes by +-1 in one cell); also mu-GDP and "
                "(eps, delta(eps))-DP for every eps via the analytic Gaussian curve; "
                "per-cell parameters from the diagonal of the cost matrix"
            ),
            reference="Xiao, Wang, Zhang, Kifer - Common Mechanism, Def. 2.3 and Lemma 2.4",
        )

    # -- sampling and likelihood ---------------------------------------------------------
    def release(self, x, rng=None):
        """Draw ``B x + N(0, Sigma)``; ``x`` has shape ``(..., n)``, output ``(..., m)``."""
        x = check_vector_length(x, self.n, "x")
        rng = as_generator(rng)
        z = rng.standard_normal(x.shape[:-1] + (self.m,))
        return x @ self._B.T + z @ self._L.T

    def whiten(self, y, x):
        r"""Whitened residual :math:`L^{-1}(y - Bx)`, iid N(0, 1) under the mechanism (NumPy)."""
        y = check_vector_length(y, self.m, "y")
        x = check_vector_length(x, self.n, "x")
        return (y - x @ self._B.T) @ self._Linv.T

    def _residual(self, y, x):
        """The array namespace and the residual ``y - B x`` (inputs checked in NumPy)."""
        xp = namespace(y, x)
        if xp is np:
            y = check_vector_length(y, self.m, "y")
            x = check_vector_length(x, self.n, "x")
        else:
            y = as_array(y, xp)
            x = as_array(x, xp)
        return xp, y - xp.dot(x, self._B.T)

    def logp(self, y, x):
        """Exact log density of ``y`` given ``x`` (sums over the last axis; NumPy or PyTensor)."""
        xp, r = self._residual(y, x)
        z = xp.dot(r, self._Linv.T)
        const = -0.5 * self.m * np.log(2.0 * np.pi) - 0.5 * self._logdet
        return -0.5 * xp.sum(z * z, axis=-1) + const

    @property
    def loglik_factorization(self) -> str:
        """``"cell"`` (one term per released query) when ``Sigma`` is diagonal -- independent
        noise per query -- else ``"joint"``."""
        S = self._Sigma
        return "cell" if self.m and not np.any(S - np.diag(np.diag(S))) else "joint"

    def logp_terms(self, y, x):
        r"""Diagonal ``Sigma``: :math:`\log N(y_j; (Bx)_j, \Sigma_{jj})` per query (they sum to
        :meth:`logp`); otherwise the one joint term."""
        if self.loglik_factorization == "joint":
            return super().logp_terms(y, x)
        _, r = self._residual(y, x)
        var = np.diag(self._Sigma)
        return -0.5 * r * r / var - 0.5 * np.log(2.0 * np.pi * var)

    # -- combination ---------------------------------------------------------------------
    @classmethod
    def joint(cls, *mechanisms: "LinearGaussian") -> "LinearGaussian":
        r"""The mechanism :math:`(M_a, M_b, \dots)` that runs each on the same ``x`` with
        independent noise: stacked queries and block-diagonal covariance (Sec. 2; proof of
        Lemma 3.11).  Its cost matrix is the sum of the cost matrices."""
        if not mechanisms:
            raise ValueError("joint needs at least one mechanism")
        for M in mechanisms:
            if not isinstance(M, LinearGaussian):
                raise TypeError(f"joint expects LinearGaussian mechanisms, not {type(M).__name__}")
        ns = {M.n for M in mechanisms}
        if len(ns) != 1:
            raise ValueError(f"mechanisms act on data vectors of different lengths {sorted(ns)}")
        B = np.vstack([M.B for M in mechanisms])
        S = linalg.block_diag(*[M.Sigma for M in mechanisms]) if B.shape[0] else np.zeros((0, 0))
        return cls(B, S)

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"LinearGaussian(m={self.m}, n={self.n}, rho={self.rho:.6g})"
