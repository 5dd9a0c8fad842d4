r"""The noise of one group, and the release of a block of rows whose groups are planned.

A group of :math:`k` cells gets the noise of the registry mechanism ``name`` built on
``invariants.total(k)`` (generalized Laplace / Gaussian: noise on :math:`\{e : \sum e = 0\}`,
drawn by the exact samplers of :mod:`privinfer.lattice.exact`) or on no invariant (double
geometric / discrete Gaussian: iid noise on the k cells).  The draw uses the group's own
stream (:mod:`.seeding`), so it is a function of the release seed, the group's key and
:math:`k` only.  The noise vector is laid on the group's rows in the input's row order; a
block (one partition) holding only part of a group takes its slice ``[offset, offset +
count)`` of the group's vector, which every block touching the group draws identically.

A group of one cell under a total-keeping mechanism gets no noise: its count is its published
total (the lattice :math:`\{e \in \mathbb{Z} : e = 0\}` is a point).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pandas as pd

from .. import invariants
from ..mechanisms import build, cli_info
from .seeding import group_generator
from .survey import block_counts

__all__ = ["FRAME_MECHANISMS", "GroupMechanism", "group_noise", "release_block", "sampler_method", "is_exact"]

#: The command-line mechanisms a frame release draws per group (integer, additive, exact on totals).
FRAME_MECHANISMS = ("generalized-laplace", "generalized-gaussian", "double-geometric", "discrete-gaussian")


@dataclass
class GroupMechanism:
    """The mechanism ``name`` with its command-line ``options``, built once per group size."""

    name: str
    options: Mapping = field(default_factory=dict)

    def __post_init__(self):
        if self.name not in FRAME_MECHANISMS:
            raise ValueError(f"mechanism '{self.name}' cannot release a frame by groups "
                             f"(choose from {', '.join(FRAME_MECHANISMS)})")
        self.options = {k: v for k, v in dict(self.options).items() if v is not None}
        self._by_size: dict[int, object] = {}
        self.for_size(2)  # option errors surface here, before any data is read

    @property
    def keeps_totals(self) -> bool:
        """Whether the mechanism keeps each group's total (generalized Laplace / Gaussian)."""
        return cli_info(self.name).needs_invariant

    def for_size(self, k: int):
        """The mechanism on a group of ``k`` cells (``None``: a one-cell group, no noise)."""
        k = int(k)
        if k not in self._by_size:
            if self.keeps_totals:
                self._by_size[k] = None if k == 1 else build(self.name, invariants.total(k), k, **self.options)
            else:
                self._by_size[k] = build(self.name, None, k, **self.options)
        return self._by_size[k]

    def for_sizes(self, sizes) -> dict[int, object]:
        return {int(k): self.for_size(k) for k in np.unique(np.asarray(sizes, dtype=np.int64))}


def group_noise(mechanism, root, key, k: int) -> np.ndarray:
    """The noise vector of group ``key`` (``k`` cells) drawn from its own stream.

    ``mechanism`` is :meth:`GroupMechanism.for_size` of ``k``; its ``sample_noise`` checks
    ``C e = 0`` exactly, and the sum is checked here again for total-keeping mechanisms.
    """
    if mechanism is None:
        return np.zeros(k, dtype=np.int64)
    e = np.asarray(mechanism.sample_noise(rng=group_generator(root, key)), dtype=np.int64).reshape(k)
    if mechanism.invariant is not None and int(e.sum()) != 0:
        raise RuntimeError("internal error: a group's noise does not sum to zero")
    return e


def release_block(block: pd.DataFrame, plan: Mapping, mechanisms: Mapping, root, value: str,
                  group: str) -> pd.DataFrame:
    """Release the rows of ``block`` (checked counts): ``plan[key] = (k, offset)`` gives each
    group's size and the position of the block's first row of it within the group; the other
    columns, the index and the row order are kept, the count column becomes int64."""
    x = block_counts(block, value)
    codes, uniques = pd.factorize(block[group], sort=False)
    counts = np.bincount(codes, minlength=len(uniques))
    order = np.argsort(codes, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    noise = np.zeros(len(block), dtype=np.int64)
    for j, key in enumerate(uniques):
        k, offset = plan[key]
        c = int(counts[j])
        if offset < 0 or offset + c > k:
            raise RuntimeError("internal error: a block's rows of a group do not fit the group's plan")
        e = group_noise(mechanisms[k], root, key, k)
        noise[order[starts[j]:starts[j] + c]] = e[offset:offset + c]
    out = block.copy()
    out[value] = x + noise
    return out


def sampler_method(mechanism) -> str:
    """How ``mechanism`` draws its noise: the lattice sampler's method, or the exact iid
    samplers (Canonne, Kamath, Steinke 2020) of the double geometric / discrete Gaussian."""
    d = mechanism.sampler_description()
    return d["method"] if d else "exact iid (Canonne, Kamath, Steinke 2020)"


def is_exact(mechanism) -> bool:
    """Whether ``mechanism`` draws its noise law exactly (the iid integer laws always do)."""
    return bool(getattr(mechanism, "exact", True))
