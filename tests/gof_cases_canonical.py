"""GoF registry entries for the canonical-noise mechanisms (Tulap, Lemma 36 CND, Gaussian CND).

All are continuous.  For the additive mechanisms on R^n the noise lives on all of R^n and
``coords`` is the identity.  :class:`SemiPrivateTwoByTwo` moves along the unit vector
``v = (1, -1, -1, 1)/2``; its coordinate is ``e . v`` and its ``logp`` is the density in it.
"""

import numpy as np
from gof import GofCase

from privinfer.mechanisms import (
    CanonicalNoiseMechanism,
    GaussianCanonicalMechanism,
    SemiPrivateTwoByTwo,
    Tulap,
    TulapMechanism,
    gaussian_tradeoff,
)


def _identity(e):
    return np.asarray(e, dtype=float).reshape(len(e), -1)


_V = np.array([1.0, -1.0, -1.0, 1.0]) / 2.0

CASES = [
    GofCase("tulap-eps1", TulapMechanism(1, epsilon=1.0), np.array([3.0]), "continuous", coords=_identity),
    GofCase(
        "tulap-eps0.5-delta0.1-sens2",
        TulapMechanism(1, epsilon=0.5, delta=0.1, sensitivity=2.0),
        np.array([-1.0]),
        "continuous",
        coords=_identity,
    ),
    GofCase("tulap-2d", TulapMechanism(2, epsilon=1.5, delta=0.01), np.array([0.0, 4.0]), "continuous", coords=_identity),
    GofCase("gaussian-cnd-mu1", GaussianCanonicalMechanism(1, mu=1.0), np.array([2.0]), "continuous", coords=_identity),
    GofCase(
        "lemma36-cnd-gdp0.8",
        CanonicalNoiseMechanism(1, gaussian_tradeoff(0.8)),
        np.array([0.0]),
        "continuous",
        coords=_identity,
        n_draws=2000,
    ),
    GofCase(
        "semi-private-2x2-tulap",
        SemiPrivateTwoByTwo(Tulap.from_privacy(1.0, 0.02)),
        np.array([7.0, 3.0, 2.0, 8.0]),
        "continuous",
        coords=lambda e: np.asarray(e, dtype=float) @ _V[:, None],
    ),
]
