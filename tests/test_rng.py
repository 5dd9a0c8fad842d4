import numpy as np
import pytest

from privinfer._rng import as_generator


def test_seed_reproducible_and_none_fresh():
    a = as_generator(5).integers(0, 2**62, 4)
    b = as_generator(5).integers(0, 2**62, 4)
    np.testing.assert_array_equal(a, b)
    c = as_generator(None).integers(0, 2**62, 4)
    d = as_generator(None).integers(0, 2**62, 4)
    assert not np.array_equal(c, d)  # OS entropy: collision probability ~ 2^-248
    g = np.random.default_rng(1)
    assert as_generator(g) is g


@pytest.mark.parametrize("bad", [-1, 1.5, "seed", np.random.RandomState(0)])
def test_bad_rng(bad):
    with pytest.raises((TypeError, ValueError)):
        as_generator(bad)
