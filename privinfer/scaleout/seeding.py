r"""One random stream per group, derived from the release seed and the group's key alone.

The noise of a group must not depend on which partition or worker draws it, so its generator
is built from two things only: the *root* entropy of the release (the seed, or fresh OS
entropy drawn once by the caller) and a stable hash of the group's key:

.. math:: \text{stream}(g) = \text{SeedSequence}(\text{entropy}=\text{root},\
          \text{spawn\_key}=\text{root spawn key} + h(\text{key}_g)),

with :math:`h` the first 128 bits of BLAKE2b over a canonical encoding of the key (four 32-bit
words).  NumPy's ``SeedSequence`` mixes the entropy and the spawn key through its hash, so
streams of different keys are independent for all practical purposes (O'Neill 2015; the
``SeedSequence`` design), and the same key always gets the same stream, in any process.

Canonical keys: integers (Python or NumPy, and floats with an integral value, so ``5`` and
``5.0`` are one group as in pandas) hash as ``i:<decimal>``; other finite floats as
``f:<hex>``; strings as ``s:<utf-8>``.  Anything else (missing values, timestamps, tuples) is
refused: its text form would not be stable across libraries and versions.
"""

from __future__ import annotations

import hashlib
import math
import numbers

import numpy as np

__all__ = ["root_seed", "key_words", "group_seed_sequence", "group_generator"]


def root_seed(seed=None) -> tuple[int, tuple[int, ...]]:
    """``(entropy, spawn_key)`` of the release: from ``seed`` (a non-negative integer or a
    ``SeedSequence``), or fresh OS entropy when ``seed`` is ``None``.

    A ``Generator`` is refused: its state cannot be shared by the workers without copying it,
    and drawing from it on one machine would make the release depend on the partitioning.
    """
    if seed is None:
        return int(np.random.SeedSequence().entropy), ()
    if isinstance(seed, np.random.SeedSequence):
        return int(seed.entropy) if isinstance(seed.entropy, numbers.Integral) else seed.entropy, tuple(seed.spawn_key)
    if isinstance(seed, np.random.Generator):
        raise TypeError("seed must be a non-negative integer or a numpy SeedSequence, not a Generator "
                        "(every worker derives its groups' streams from the seed)")
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"seed must be a non-negative integer or a numpy SeedSequence, not {type(seed).__name__}")
    if seed < 0:
        raise ValueError("seed must be non-negative")
    return int(seed), ()


def _canonical(key) -> bytes:
    if isinstance(key, (bool, np.bool_)):
        raise TypeError("group keys must be integers or strings, not booleans")
    if isinstance(key, numbers.Integral):
        return b"i:" + str(int(key)).encode()
    if isinstance(key, numbers.Real):
        v = float(key)
        if not math.isfinite(v):
            raise ValueError("a group key is missing (NaN) or not finite")
        if v == int(v):
            return b"i:" + str(int(v)).encode()
        return b"f:" + v.hex().encode()
    if isinstance(key, str):
        return b"s:" + key.encode("utf-8")
    raise TypeError(f"group keys must be integers or strings, not {type(key).__name__}")


def key_words(key) -> tuple[int, int, int, int]:
    """The 128-bit stable hash of a group key as four 32-bit words (module docstring)."""
    d = hashlib.blake2b(_canonical(key), digest_size=16, person=b"privinfer-group").digest()
    return tuple(int.from_bytes(d[i:i + 4], "little") for i in range(0, 16, 4))


def group_seed_sequence(root: tuple, key) -> np.random.SeedSequence:
    """The ``SeedSequence`` of the group ``key`` under the release root ``(entropy, spawn_key)``."""
    entropy, spawn = root
    return np.random.SeedSequence(entropy, spawn_key=tuple(spawn) + key_words(key))


def group_generator(root: tuple, key) -> np.random.Generator:
    """A ``Generator`` (PCG64) on the group's stream."""
    return np.random.default_rng(group_seed_sequence(root, key))
