r"""Release the counts of a pandas or Dask DataFrame group by group, keeping every group's total.

:func:`release_frame` is the partitioned release: the frame's groups are independent pieces
of the invariant (``invariants.groups``: the lattice of noises is the product of one lattice
per group), so each group is drawn on its own, from its own stream (:mod:`.seeding`), by the
exact sampler of the registry mechanism on that group's total (:mod:`.groups`).  Its
guarantee is the per-group mechanism's (:mod:`.guarantee`).

Two passes over a Dask frame, neither of which moves rows between partitions:

1. *survey* (:mod:`.survey`) -- every partition checks its counts and groups with the
   command line's rules and words (:func:`privinfer.workflow.table_io.check_counts`: one-line
   errors naming the data row in the input's order and the column, never a value) and counts
   its rows and sums its counts per group; the driver gathers these small tables and computes
   each group's size :math:`k_g`, its published total, and for each partition the offset of
   its first row of each group within the group (partitions in order).
2. *release* -- every partition draws, for each group it touches, the group's whole noise
   vector (same stream, same vector in every partition) and adds the slice of its own rows.

So groups may span partitions without a shuffle, the output keeps the input's partitions,
index, divisions and row order, and a worker holds its partition plus the noise vectors of
its groups: memory is bounded by the partition size (and the largest group), not the data
size.  A group spanning p partitions is drawn p times; for data sorted or clustered by group
(census files are ordered by geography) that is a few groups per partition boundary.  For
scattered groups the redrawn cells are reported in ``FrameRelease.redrawn_cells``; sort the
data by group first if that is large.

Privacy accounting
------------------
With a ``ledger`` (:class:`privinfer.workflow.ledger.Ledger` or a path), a frame release is
accounted like every other release (:func:`privinfer.workflow.make_release`): between the two
passes, the keyed fingerprint of the counts is computed -- the same value ``make_release``
computes for the same counts in the same order, HMAC-SHA256 over their canonical int64
encoding, fed one partition at a time in row order
(:func:`~privinfer.workflow.ledger.fingerprint_blocks`, at most ``FINGERPRINT_WINDOW``
partitions in memory) -- then, holding the ledger's lock, the release's guarantee is checked
against the budget *before any noise is drawn* (a
:class:`~privinfer.workflow.errors.BudgetExceededError` leaves the ledger unchanged), the
release is made and the entry recorded; its id is ``FrameRelease.ledger_entry``.  A Dask
release stays lazy, but its noise is fixed when it is made (the root entropy is drawn once),
so computing the frame again publishes nothing new.

The release is identical for any number of partitions and workers with the same seed: the
noise of group g is a function of (seed, key of g, :math:`k_g`) laid on g's rows in input order.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..workflow.errors import LedgerError
from ..workflow.ledger import as_ledger
from .groups import GroupMechanism, is_exact, release_block, sampler_method
from .guarantee import frame_guarantee
from .seeding import root_seed
from .survey import block_counts, check_columns, raise_first_problem, survey_block

__all__ = ["FrameRelease", "release_frame", "is_dask_frame", "FINGERPRINT_WINDOW"]

#: Partitions computed together (and held by the driver) while the fingerprint is computed.
FINGERPRINT_WINDOW = 4


@dataclass(frozen=True)
class FrameRelease:
    """What :func:`release_frame` returns (the guarantee is returned here, not attached to the
    frame: a Dask DataFrame carries no metadata).

    Attributes
    ----------
    frame
        the released frame, the same kind as the input (lazy for Dask).
    value, group
        the count and group columns.
    mechanism, options
        the command-line mechanism name and its options.
    guarantee
        the per-group mechanism's guarantee (parallel composition over the groups).
    totals
        published group totals (a Series indexed by group key, first-appearance order),
        or ``None`` for mechanisms that keep no total (double geometric, discrete Gaussian).
    sizes
        cells per group (same index).
    sampler
        how the groups' noise was drawn (methods, exact or not).
    redrawn_cells
        cells drawn again because their group spans partitions (0 for pandas).
    ledger_entry
        the id of the release's entry in the privacy-loss ledger (``None``
        without a ledger).
    """

    frame: object
    value: str
    group: str
    mechanism: str
    options: dict
    guarantee: object
    totals: pd.Series | None
    sizes: pd.Series
    sampler: dict = field(default_factory=dict)
    redrawn_cells: int = 0
    ledger_entry: str | None = None


def is_dask_frame(frame) -> bool:
    """Whether ``frame`` is a Dask DataFrame (checked without importing Dask)."""
    return type(frame).__module__.split(".")[0] == "dask" and hasattr(frame, "to_delayed")


def _plan(surveys: list[dict], partition, value, group, source):
    """Raise the first problem (global row); else sizes, totals and per-partition plans."""
    raise_first_problem(surveys, partition, value, group, source)
    tables = [s["table"].assign(part=i) for i, s in enumerate(surveys)]
    table = pd.concat(tables, ignore_index=True)
    if table.empty:
        raise ValueError("the frame has no rows to release")
    by_key = table.groupby("key", sort=False)
    table["offset"] = by_key["count"].cumsum() - table["count"]
    sizes = by_key["count"].sum()
    totals = by_key["sum"].sum()
    table["size"] = table["key"].map(sizes).to_numpy(dtype=np.int64)
    plans = [{} for _ in surveys]
    for part, key, k, off in zip(table["part"].to_numpy(), table["key"], table["size"].to_numpy(),
                                 table["offset"].to_numpy()):
        plans[part][key] = (int(k), int(off))
    redrawn = int(table["size"].sum() - sizes.sum())
    return sizes, totals, plans, redrawn


def _result(gm, sizes, totals, frame, value, group, redrawn) -> tuple:
    mechanisms = gm.for_sizes(sizes.to_numpy())
    g = frame_guarantee(gm, mechanisms, len(sizes))
    drawn = [m for m in mechanisms.values() if m is not None]
    sampler = {"exact": all(is_exact(m) for m in drawn),
               "methods": sorted({sampler_method(m) for m in drawn}),
               "seeding": "one numpy SeedSequence per group from the seed and a hash of the group's key"}
    return mechanisms, g, sampler


def release_frame(frame, *, value: str, group: str, mechanism: str, seed=None, ledger=None, budget=None,
                  budget_scope=None, source=None, output=None, **mechanism_options) -> FrameRelease:
    r"""Release the counts ``frame[value]`` group by group (groups: ``frame[group]``).

    Parameters
    ----------
    frame
        a pandas or Dask DataFrame; groups may span partitions.
    value
        the column of non-negative integer counts.
    group
        the column of group keys (integers or strings); each group's total is kept
        exactly by ``generalized-laplace`` and ``generalized-gaussian`` (noise on
        :math:`\{e_g : \sum e_g = 0\}`, Dharangutte et al. 2023, Sec. 3); the groups of
        ``double-geometric`` and ``discrete-gaussian`` (iid noise, no total kept) are the
        units of seeding only.
    mechanism
        ``"generalized-laplace"``, ``"generalized-gaussian"``, ``"double-geometric"``
        or ``"discrete-gaussian"``, with its command-line options (``epsilon=``, ``sigma=``,
        ``sensitivity=``, ``norm=``) as ``mechanism_options``.
    seed
        an integer or ``SeedSequence``: group g's noise comes from
        ``SeedSequence(seed, spawn_key=hash(key_g))``, so the same seed gives the same release
        for any partitioning and any number of workers; ``None`` draws fresh OS entropy.
    ledger
        a :class:`~privinfer.workflow.ledger.Ledger` or the path of one, to account the
        release in (module docstring, "Privacy accounting"); ``None``: not accounted.
    budget, budget_scope
        as in :func:`privinfer.workflow.make_release` (a typed guarantee
        or text such as ``"epsilon=2"``; ``"input"`` or ``"ledger"``); checked before any
        noise is drawn.  A budget needs a ledger.
    source, output
        names recorded in the ledger entry (e.g. the input and output file
        names); ``source`` also prefixes the error messages, as a file name does.

    Returns
    -------
    :class:`FrameRelease`: ``frame`` is the same kind as the input with ``value`` replaced by
    the released int64 counts and every other column, the index and the row order kept (for
    Dask also the partitions and divisions); ``guarantee`` is the per-group mechanism's (a
    typed guarantee of :mod:`privinfer.guarantees`, ``delta = 0`` only when every group was
    drawn exactly); ``ledger_entry`` is the id of the ledger entry.  A Dask input is surveyed
    (one computation, on the current Dask scheduler or ``distributed`` client; with a ledger
    a second one computes the fingerprint) and the release itself stays lazy.
    """
    gm = GroupMechanism(mechanism, mechanism_options)
    root = root_seed(seed)
    if not (isinstance(frame, pd.DataFrame) or is_dask_frame(frame)):
        raise TypeError(f"frame must be a pandas or Dask DataFrame, not {type(frame).__name__}")
    if budget is not None and ledger is None:
        raise LedgerError("a budget needs a ledger to record the releases against it (ledger=PATH)")
    source = None if source is None else str(source)
    check_columns(frame.columns, value, group, source)
    dask_input = not isinstance(frame, pd.DataFrame)
    if dask_input:
        import dask

        columns = frame[[value, group]].to_delayed()
        surveys = list(dask.compute(*[dask.delayed(survey_block, pure=True)(p, value, group) for p in columns]))
        partition = lambda p: frame[value].get_partition(p).compute()  # noqa: E731 - error path only
    else:
        surveys = [survey_block(frame, value, group)]
        partition = lambda p: frame[value]  # noqa: E731
    sizes, totals, plans, redrawn = _plan(surveys, partition, value, group, source)
    mechanisms, g, sampler = _result(gm, sizes, totals, frame, value, group, redrawn)

    def draw():
        if dask_input:
            return _release_dask(frame, plans, mechanisms, root, value, group, sizes, redrawn)
        return release_block(frame, plans[0], mechanisms, root, value, group)

    entry_id = None
    if ledger is None:
        out = draw()
    else:
        book = as_ledger(ledger)
        n = int(sizes.sum())
        fingerprint = book.fingerprint_blocks(n, _count_blocks(frame, value))
        with book.locked():
            book.check(fingerprint, g, budget=budget, scope=budget_scope)  # before any noise is drawn
            out = draw()
            entry = book.record(fingerprint, g, mechanism={"name": gm.name, "parameters": dict(gm.options)},
                                mechanism_spec=None, source=source,
                                output=None if output is None else Path(output).name, cells=n, budget=budget,
                                scope=budget_scope)
            entry_id = entry.id
    return FrameRelease(out, value, group, gm.name, dict(gm.options), g,
                        totals if gm.keeps_totals else None, sizes, sampler, redrawn, entry_id)


def _count_blocks(frame, value):
    """The counts as int64 blocks in row order: the whole column of a pandas frame, or the
    partitions of a Dask frame, computed ``FINGERPRINT_WINDOW`` at a time."""
    if isinstance(frame, pd.DataFrame):
        yield block_counts(frame, value)
        return
    import dask

    parts = frame[[value]].to_delayed()
    for i in range(0, len(parts), FINGERPRINT_WINDOW):
        yield from dask.compute(*[dask.delayed(block_counts, pure=True)(p, value)
                                  for p in parts[i:i + FINGERPRINT_WINDOW]])


def _release_dask(frame, plans, mechanisms, root, value, group, sizes, redrawn):
    import dask
    import dask.dataframe as dd
    from dask.dataframe.utils import make_meta

    n = int(sizes.sum())
    if redrawn > n:
        warnings.warn(f"groups are scattered over the partitions: the noise of {n + redrawn} cells is drawn for "
                      f"{n} cells ({redrawn} drawn again by other partitions of their group); sorting the data by "
                      "group avoids that work", UserWarning, stacklevel=4)
    parts = frame.to_delayed()
    blocks = []
    for part, plan in zip(parts, plans):
        mine = {k: mechanisms[k] for k in {kk for kk, _ in plan.values()}}
        blocks.append(dask.delayed(release_block, pure=False)(part, plan, mine, root, value, group))
    meta = make_meta(frame).copy()
    meta[value] = meta[value].astype(np.int64)
    return dd.from_delayed(blocks, meta=meta, divisions=frame.divisions, verify_meta=False)
