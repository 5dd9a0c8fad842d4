"""Distributed privatization with a common seed (Subspace DP full paper, Alg. 4)."""

import numpy as np
import pytest

from privinfer import invariants as I
from privinfer.mechanisms import (
    CorrelatedGaussian,
    ExtendedLaplace,
    KNorm,
    ProjectedGaussian,
    ProjectedLaplace,
    local_release,
    one_way_margins_sensitivity_space,
    release_distributed,
)

INV = I.margins((3, 4), [(0,), (1,)])


def _mechs():
    return [
        ProjectedGaussian(INV, 1.0, 1e-6, 1.0),
        ProjectedLaplace(INV, 0.5, 2.0),
        ExtendedLaplace(INV, scale=1.0),
        KNorm(one_way_margins_sensitivity_space((3, 4), a=2), 1.0),
        CorrelatedGaussian(np.eye(12), INV, 1.0, 1e-6),
    ]


@pytest.mark.parametrize("mech", _mechs(), ids=lambda m: type(m).__name__)
def test_distributed_equals_centralized(mech):
    x = np.arange(12.0) ** 2
    rng = np.random.default_rng(0)
    perm = rng.permutation(12)
    parts = [(perm[:2], x[perm[:2]]), (perm[2:7], x[perm[2:7]]), (perm[7:], x[perm[7:]])]
    y = release_distributed(mech, parts, seed=123)
    np.testing.assert_array_equal(y, mech.release(x, rng=123))
    assert INV.satisfied_by(y, INV.of(x))
    # an agent's output depends only on its own cells and the seed
    other = x.copy()
    other[perm[2:]] += 1000.0
    np.testing.assert_array_equal(local_release(mech, perm[:2], x[perm[:2]], 123), y[perm[:2]])
    assert np.array_equal(release_distributed(mech, [(perm[:2], other[perm[:2]]), (perm[2:], other[perm[2:]])], 123)[perm[:2]],
                          y[perm[:2]])
    # a different seed gives different noise
    assert not np.array_equal(release_distributed(mech, parts, seed=124), y)


def test_bad_partitions_and_mechanisms():
    mech = ProjectedGaussian(INV, sigma=1.0)
    x = np.ones(12)
    idx = np.arange(12)
    with pytest.raises(ValueError, match="partition"):
        release_distributed(mech, [(idx[:6], x[:6]), (idx[5:], x[5:])], 1)
    with pytest.raises(ValueError, match="partition"):
        release_distributed(mech, [(idx[:6], x[:6])], 1)
    with pytest.raises(ValueError, match="one value per cell"):
        release_distributed(mech, [(idx, x[:5])], 1)
    with pytest.raises(ValueError, match="cells"):
        local_release(mech, np.array([0, 12]), np.ones(2), 1)
    with pytest.raises(TypeError, match="seed"):
        release_distributed(mech, [(idx, x)], np.random.default_rng(1))

    class NotAdditive:
        n = 12

        def release(self, x, rng=None):
            return x

    with pytest.raises(TypeError, match="not additive"):
        release_distributed(NotAdditive(), [(idx, x)], 1)


def test_distributed_lattice_release_uses_the_exact_sampler():
    # generalized Laplace on state totals: the shared noise is the exact sampler's draw, so the
    # agents' assembled release equals the centralized exact release and states delta = 0
    from privinfer.mechanisms import GeneralizedLaplace

    labels = np.array(["a"] * 4 + ["b"] * 3 + ["c"])
    inv = I.groups(labels)
    mech = GeneralizedLaplace(inv, 0.5)
    assert mech.exact and mech.guarantee["delta"] == 0.0
    x = np.arange(8) * 10 + 3
    parts = [(np.arange(0, 3), x[:3]), (np.arange(3, 8), x[3:])]
    y = release_distributed(mech, parts, seed=7)
    np.testing.assert_array_equal(y, mech.release(x, rng=7))
    np.testing.assert_array_equal(np.bincount(inv.partition.codes, weights=y), inv.of(x))
    assert y[7] == x[7]  # a group of one cell is published by the invariant: no noise
