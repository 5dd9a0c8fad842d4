r"""Semi-DP release of a 2x2 contingency table that keeps its one-way margins exactly.

Cho and Awan, Semi-DP paper, Sec. 5.3 (semi-private UMPU testing), with Def. 12
(f-semi-DP), Thm 16 (``a(t) <= p + 1``), Examples 5 and 7 and Thm 37.  For a table with cells
``(x11, x12, x21, x22)`` the release is ``y = x + N (1, -1, -1, 1)``, ``N ~ F`` a canonical
noise distribution of ``f`` (:mod:`privinfer.mechanisms.canonical_noise`,
:mod:`privinfer.mechanisms.tulap`): the one-way margins are unchanged and ``y11 = x11 + N`` is
the statistic ``U`` of Theorem 37, from which :mod:`privinfer.inference.odds_ratio` computes
the UMPU p-value.

Tables with the same margins differ by ``k (1, -1, -1, 1)`` and moving one unit needs two
record replacements, so between tables at Hamming distance ``<= a(t) <= 3`` the cell
``x11`` changes by at most 1: the sensitivity space is ``{0, +-(1, -1, -1, 1)}``
(Example 7) and the release is ``(D_t, A_{a(t)}, f)``-DP.  The likelihood lives on the line
``x + R (1, -1, -1, 1)/2``; in the orthonormal coordinate ``s = 2N`` its density is
``p_F(s/2)/2`` (see :class:`SemiPrivateTwoByTwo`).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import as_array, namespace, where
from .._rng import as_generator
from .._validation import check_finite_array
from .base import Guarantee, Mechanism
from .canonical_noise import noise_description

__all__ = ["TWO_BY_TWO_DIRECTION", "SemiPrivateTwoByTwo"]


#: direction of the sensitivity space of a 2x2 table with fixed one-way margins
#: (Semi-DP paper, Example 7): cells ordered (x11, x12, x21, x22).
TWO_BY_TWO_DIRECTION = np.array([1.0, -1.0, -1.0, 1.0])


class SemiPrivateTwoByTwo(Mechanism):
    r"""Semi-DP release of a 2x2 table that keeps its one-way margins exactly.

    ``y = x + N (1, -1, -1, 1)`` with ``N ~ F`` a CND of ``f`` (cells ordered
    ``(x11, x12, x21, x22)``).  The one-way margins ``t = (x11+x12, x21+x22, x11+x21, x12+x22)``
    are unchanged, and ``y11 = x11 + N`` is the statistic ``U`` of Theorem 37 (Cho and Awan,
    Sec. 5.3), from which :func:`privinfer.inference.semi_private_odds_ratio_test` computes the
    UMPU p-value.

    Privacy: tables with the same margins differ by ``k (1, -1, -1, 1)``, and moving one unit
    needs two record replacements, so between tables at Hamming distance ``<= a(t) <= 3``
    (Theorem 16 with ``p = 2`` features; Example 5 shows ``a(t) = 3`` is attained) ``x11``
    changes by at most 1: the sensitivity space is ``{0, +-(1, -1, -1, 1)}`` (Example 7), and
    the release is ``(D_t, A_{a(t)}, f)``-DP (f-semi-DP, Def. 12).

    Likelihood: the law of ``y`` lives on the line ``x + R (1,-1,-1,1)/2``; in the orthonormal
    coordinate ``s = (y - x).(1,-1,-1,1)/2 = 2N`` its density is ``p_F(s/2)/2``.  ``logp``
    returns ``log p_F(y11 - x11) - log 2`` when the margins of ``y`` and ``x`` agree (and the
    off-diagonal moves match) and ``-inf`` otherwise -- the exact density w.r.t. 1-d Lebesgue
    measure on that line (nothing dropped).

    Parameters
    ----------
    noise
        a Tulap (``Tulap.from_privacy(eps, delta)``), GaussianCanonicalNoise or CanonicalNoise.
    a_t
        the semi-adjacent parameter ``a(t)`` (default 3, the bound of Theorem 16 for two
        binary features); it labels the guarantee and sets the naive comparison ``f^{o a(t)}``.
    atol
        tolerance for the margin check in ``logp``.
    """

    integer = False
    logp_constant_dropped = ""

    def __init__(self, noise, a_t: int = 3, atol: float = 1e-8):
        noise_description(noise)  # type check
        if not isinstance(a_t, numbers.Integral) or isinstance(a_t, bool) or not 1 <= a_t <= 3:
            raise ValueError("a_t must be an integer in {1, 2, 3} (Theorem 16: a(t) <= p + 1 = 3)")
        self.noise = noise
        self.a_t = int(a_t)
        self.atol = float(atol)

    @property
    def n(self) -> int:
        return 4

    @property
    def invariant(self):
        """One-way margins of the 2x2 table: rows ``(t1., t2., t.1, t.2)`` of ``C``."""
        from ..invariants import margins

        return margins((2, 2), [(0,), (1,)])

    @property
    def guarantee(self) -> Guarantee:
        definition, params = noise_description(self.noise)
        return Guarantee(
            f"f-semi-DP (Semi-DP with {definition})",
            {**params, "a_t": self.a_t},
            "datasets with the same one-way margins at Hamming distance <= a(t); invariant: one-way margins",
            "Cho and Awan, Semi-DP paper, Def. 12, Thm 16, Example 7, Thm 37",
        )

    def _check_table(self, x, name="x"):
        arr = check_finite_array(x, name)
        if arr.ndim == 0 or arr.shape[-1] != 4:
            raise ValueError(f"{name} must have shape (..., 4) (cells x11, x12, x21, x22), got {arr.shape}")
        return arr

    def release(self, x, rng=None):
        x = self._check_table(x)
        n = self.noise.sample(x.shape[:-1], rng=as_generator(rng))
        return x + np.asarray(n)[..., None] * TWO_BY_TWO_DIRECTION

    def logp(self, y, x):
        xp = namespace(y, x)
        y = as_array(y, xp)
        x = as_array(x, xp)
        e = y - x
        d = e[..., 0]
        # e must equal d (1, -1, -1, 1): three residuals
        resid = xp.abs(e[..., 1] + d) + xp.abs(e[..., 2] + d) + xp.abs(e[..., 3] - d)
        val = self.noise.logp(d) - math.log(2.0)
        return where(resid <= self.atol * (1.0 + xp.abs(d)), val, -np.inf, xp)
