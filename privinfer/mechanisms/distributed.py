r"""Distributed privatization with a common seed (Subspace DP full paper, Sec. 4, App. E, Alg. 4).

The cells ``{0, ..., n-1}`` are partitioned among agents; agent l observes only its own
cells ``x_l = x[K_l]``.  For an additive mechanism ``y = x + e`` the noise ``e`` does not
depend on x, so every agent can simulate the *same* ``e`` from a shared seed (footnote 3:
run the mechanism on the zero vector and subtract it) and release ``y_l = x_l + e[K_l]``
in isolation.  The assembled ``y`` equals the centralized release ``mech.release(x,
rng=seed)`` exactly (same generator, same draws), hence keeps the global invariant
``C y = C x`` although no agent sees ``t``.

The shared draw is the mechanism's own ``sample_noise``, so lattice mechanisms use their exact
sampler wherever one exists (:attr:`~privinfer.mechanisms.GeneralizedLaplace.exact`): every
agent then releases with the mechanism's exact law and guarantee (``delta = 0``).
"""

from __future__ import annotations

import numbers

import numpy as np

from .._validation import check_finite_array
from .base import AdditiveMechanism

__all__ = ["release_distributed", "local_release"]


def _check_seed(seed):
    if isinstance(seed, np.random.Generator):
        raise TypeError("the shared seed must be an integer or SeedSequence (a Generator's state cannot be "
                        "shared between agents without copying it)")
    if isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, np.random.SeedSequence)):
        raise TypeError(f"seed must be a non-negative integer or a numpy SeedSequence, not {type(seed).__name__}")
    if isinstance(seed, numbers.Integral) and seed < 0:
        raise ValueError("seed must be non-negative")
    return seed


def _check_additive(mech):
    if not isinstance(mech, AdditiveMechanism):
        raise TypeError(
            f"{type(mech).__name__} is not additive (not an AdditiveMechanism): its noise may depend on x, so agents "
            "cannot simulate it from a shared seed"
        )


def _fresh_seed(seed):
    # a SeedSequence must be re-spawned identically by every agent: copy its entropy
    if isinstance(seed, np.random.SeedSequence):
        return np.random.SeedSequence(seed.entropy, spawn_key=seed.spawn_key, pool_size=seed.pool_size)
    return int(seed)


def local_release(mech, cells, x_cells, seed) -> np.ndarray:
    """What one agent computes: ``x_cells + e[cells]`` with ``e`` simulated from the shared seed.

    ``cells``: the agent's cell indices (into 0..n-1); ``x_cells``: its confidential values
    at those cells, in the same order.  The agent never needs the other cells nor ``t``.
    """
    _check_additive(mech)
    seed = _check_seed(seed)
    idx = np.asarray(cells)
    if idx.ndim != 1 or idx.dtype.kind not in "iu":
        raise ValueError("cells must be a 1-d array of integer cell indices")
    if idx.size and (idx.min() < 0 or idx.max() >= mech.n):
        raise ValueError(f"cells must lie in 0..{mech.n - 1}")
    xv = check_finite_array(x_cells, "x_cells", ndim=1)
    if xv.shape != idx.shape:
        raise ValueError(f"x_cells must have one value per cell: {idx.size} cells, got shape {xv.shape}")
    if mech.integer and not np.all(xv == np.round(xv)):
        raise ValueError("x_cells must hold integer counts for an integer mechanism")
    # Footnote 3 of App. E: the agent runs the mechanism's noise generator with the common
    # seed; for an additive mechanism this is the noise of mech.release(x, rng=seed).
    e = np.asarray(mech.sample_noise((), rng=np.random.default_rng(_fresh_seed(seed))))
    out = xv + e[idx]
    return out.astype(e.dtype, copy=False) if mech.integer else out


def release_distributed(mech, parts, seed) -> np.ndarray:
    """Alg. 4: every agent privatizes its own cells with the shared seed; returns the assembled y.

    ``parts``: a sequence of ``(cells, x_cells)`` pairs, one per agent, whose ``cells`` form a
    partition of ``0..n-1``.  The result equals ``mech.release(x, rng=seed)`` for the
    assembled x (centralized release) and satisfies the invariant.
    """
    _check_additive(mech)
    seed = _check_seed(seed)
    n = mech.n
    seen = np.zeros(n, dtype=int)
    pieces = []
    for k, part in enumerate(parts):
        try:
            cells, x_cells = part
        except (TypeError, ValueError) as exc:
            raise ValueError(f"part {k} must be a (cells, x_cells) pair") from exc
        idx = np.asarray(cells)
        if idx.ndim != 1 or idx.dtype.kind not in "iu" or (idx.size and (idx.min() < 0 or idx.max() >= n)):
            raise ValueError(f"part {k}: cells must be a 1-d array of integer indices in 0..{n - 1}")
        np.add.at(seen, idx, 1)
        pieces.append((idx, local_release(mech, idx, x_cells, seed)))
    if np.any(seen != 1):
        missing = int(np.count_nonzero(seen == 0))
        dup = int(np.count_nonzero(seen > 1))
        raise ValueError(f"the agents' cells must partition 0..{n - 1}: {missing} cells unassigned, "
                         f"{dup} assigned more than once")
    y = None
    for idx, yl in pieces:
        if y is None:
            y = np.empty(n, dtype=yl.dtype)
        y[idx] = yl
    return y
