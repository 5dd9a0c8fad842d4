"""GoF registry entries for the linear Gaussian mechanism and for the common-mechanism
recreation (Common Mechanism paper, Def. 2.3 and Thm. 5.5).

Continuous cases.  The law of y = B x + N(0, Sigma) is full-dimensional on R^m (Sigma is
nonsingular), so the identity coordinates of R^m are orthonormal coordinates in which
exp(logp) is the density.  The harness passes e = y - x (which needs len(x) == m or
len(x) == 1); e differs from y by a constant shift, and nearest-neighbour distances are
shift invariant, so ``coords`` is the identity.
"""

import numpy as np
from gof import GofCase

from privinfer._rng import as_generator
from privinfer.common import common_mechanism, recreate, residual
from privinfer.mechanisms import LinearGaussian


def _identity(e):
    return np.asarray(e, dtype=float)


class _Recreated:
    """Draws ``recreate(common(x), residual(x))`` and scores them with the *target's* logp:
    the GoF test then checks that recreation has exactly the target's law."""

    def __init__(self, target, other):
        self.target = target
        self.common = common_mechanism(target, other)
        self.residual = residual(target, self.common)

    def release(self, x, rng=None):
        rng = as_generator(rng)
        wc = self.common.release(x, rng=rng)
        wr = self.residual.release(x, rng=rng)
        return recreate(wc, wr, self.target, self.common, self.residual, rng=rng)

    def logp(self, y, x):
        return self.target.logp(y, x)


# Example 3.3's M_b: identity queries, correlated noise (m = n = 2)
_ex33 = LinearGaussian(np.eye(2), [[4 / 3, -2 / 3], [-2 / 3, 4 / 3]])
# marginal-style queries with correlated noise (m = n = 3)
_marg = LinearGaussian([[1, 1, 0], [0, 1, 1], [1, 0, 1]], [[1.0, 0.4, 0.0], [0.4, 2.0, -0.3], [0.0, -0.3, 0.5]])
# one cell answered twice with correlated noise (n = 1, m = 2)
_twice = LinearGaussian([[1.0], [2.0]], [[1.0, 0.8], [0.8, 1.5]])
# recreation of a target whose rows are linearly dependent (needs the top-up noise of Thm 5.5)
_recreated = _Recreated(
    LinearGaussian([[1, 1, 0], [1, 0, 0], [0, 1, 0]], 2.0),
    LinearGaussian([[1, 1, 1], [1, 0, 0]], [1.0, 3.0]),
)

CASES = [
    GofCase("linear_gaussian/example_3_3", _ex33, np.array([3.0, -1.0]), "continuous", coords=_identity),
    GofCase("linear_gaussian/marginals_3d", _marg, np.array([5.0, 2.0, 7.0]), "continuous", coords=_identity),
    GofCase("linear_gaussian/n1_m2", _twice, np.array([4.0]), "continuous", coords=_identity),
    GofCase("common_mechanism/recreate_dependent_rows", _recreated, np.array([6.0, 2.0, 9.0]), "continuous",
            coords=_identity),
]
