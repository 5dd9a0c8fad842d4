"""GoF registry entries for the real-valued mechanisms under invariants.

Continuous cases with at most 3 intrinsic dimensions.  ``coords`` maps the noise ``e`` to
coordinates in an orthonormal basis of its support (the null space of the invariant, or
span(S) for Semi-DP), in which ``exp(logp)`` is the density.  The projected Laplace case uses
the exact one-row marginal (``marginal_logp``) as its ``logp`` override.
"""

import numpy as np
from gof import GofCase

from privinfer import invariants as I
from privinfer.mechanisms import (
    CorrelatedGaussian,
    ExtendedGaussian,
    ExtendedLaplace,
    Gaussian,
    KNorm,
    Laplace,
    ProjectedGaussian,
    ProjectedLaplace,
    SemiDPGaussian,
    one_way_margins_sensitivity_space,
)


def _identity(e):
    return np.asarray(e, dtype=float).reshape(len(e), -1)


def _in_basis(B):
    return lambda e: np.asarray(e, dtype=float) @ B


_TOTAL3 = I.total(3)
_ROW = I.Invariant([[1.0, 2.0, -1.0]])  # one row with unequal weights
_TOTAL4 = I.total(4)
_MARG22 = I.margins((2, 2), [(0,), (1,)])

_pl_total = ProjectedLaplace(_TOTAL3, 1.0, 1.0)
_pl_row = ProjectedLaplace(_ROW, scale=0.8)
_el = ExtendedLaplace(_TOTAL3, 1.0, query=np.eye(3))
_sd22 = SemiDPGaussian(one_way_margins_sensitivity_space((2, 2)), 1.0)
_kn22 = KNorm(one_way_margins_sensitivity_space((2, 2)), 1.0)
_plane = np.linalg.qr(np.random.default_rng(5).standard_normal((3, 2)))[0]
_kn_plane = KNorm(np.random.default_rng(6).standard_normal((6, 2)) @ _plane.T, 0.9)
# 3-dim K-norm: sensitivity vectors e_i - e_j on 4 cells (differences that keep the total)
_diffs = np.array([np.eye(4)[i] - np.eye(4)[j] for i in range(4) for j in range(i + 1, 4)])
_kn_total = KNorm(_diffs, 1.2, invariant=_TOTAL4)
_cg = CorrelatedGaussian(np.tril(np.ones((4, 4))), I.Invariant([[0.0, 0, 0, 1]]), 1.0, 1e-3)

CASES = [
    GofCase("classic-gaussian", Gaussian(2, 1.0, 1e-5, 1.0), np.array([1.0, -2.0]), "continuous", coords=_identity),
    GofCase("classic-laplace", Laplace(2, 0.5, 1.0), np.array([0.0, 5.0]), "continuous", coords=_identity),
    GofCase("projected-gaussian-total3", ProjectedGaussian(_TOTAL3, 1.0, 1e-5, 1.0), np.array([4.0, 1.0, 7.0]),
            "continuous", coords=_in_basis(_TOTAL3.null_basis())),
    GofCase("extended-gaussian-total4", ExtendedGaussian(_TOTAL4, 1.0, 1e-5, query=np.eye(4)),
            np.array([1.0, 2.0, 3.0, 4.0]), "continuous", coords=_in_basis(_TOTAL4.null_basis())),
    GofCase("projected-laplace-total3-marginal", _pl_total, np.array([10.0, 0.0, 2.0]), "continuous",
            coords=_in_basis(_TOTAL3.null_basis()), logp=_pl_total.marginal_logp),
    GofCase("projected-laplace-weighted-row-marginal", _pl_row, np.array([1.0, 1.0, 1.0]), "continuous",
            coords=_in_basis(_ROW.null_basis()), logp=_pl_row.marginal_logp),
    GofCase("extended-laplace-total3", _el, np.array([0.0, 3.0, 3.0]), "continuous",
            coords=_in_basis(_el.null_basis)),
    GofCase("semidp-gaussian-2x2", _sd22, np.array([5.0, 2.0, 1.0, 9.0]), "continuous",
            coords=_in_basis(_MARG22.null_basis())),
    GofCase("knorm-2x2-margins", _kn22, np.array([5.0, 2.0, 1.0, 9.0]), "continuous", coords=_in_basis(_kn22.basis)),
    GofCase("knorm-polygon-in-plane", _kn_plane, np.array([0.0, 1.0, 2.0]), "continuous",
            coords=_in_basis(_kn_plane.basis)),
    GofCase("knorm-3d-total4", _kn_total, np.array([3.0, 3.0, 1.0, 0.0]), "continuous",
            coords=_in_basis(_kn_total.basis)),
    GofCase("correlated-gaussian-prefix4", _cg, _cg.answer(np.array([1.0, 2.0, 0.0, 4.0])), "continuous",
            coords=_in_basis(_cg.invariant.null_basis())),
]
