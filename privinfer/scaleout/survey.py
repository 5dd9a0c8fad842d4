r"""Pass 1 of a frame release: check every partition with the command line's rules, count its groups.

The checks are the workflow's (:func:`privinfer.workflow.table_io.check_counts`,
:func:`~privinfer.workflow.table_io.first_blank`), so a frame and a file read by
``privinfer release`` get the same one-line errors: ``FILE: data row K, column 'C' is ...``
(without ``FILE: `` for a frame that has no file name), never the value.  Rows are numbered
from 1 in the frame's row order across partitions.

Partitions are checked in parallel, each without knowing how many rows or how large a sum
come before it.  Each reports its length, whether it has a problem, the sum of the magnitudes
of its counts and its first blank group label.  The driver then finds the first partition
that has a problem, or whose counts take the running sum beyond 2^52, and checks that one
partition again with its row offset and the sum before it: the error names the same row, with
the same words, as one pass over the whole input would.  All counts are checked before any
group label, as the command line does.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..workflow.errors import ReleaseFileError
from ..workflow.table_io import MAX_COUNT, blank_text, cell_where, check_counts, first_blank, missing_column

__all__ = ["check_columns", "block_counts", "survey_block", "raise_first_problem"]


def check_columns(columns, value: str, group: str, source: str | None = None) -> None:
    """The count and group columns exist and differ (the message lists the columns, no values)."""
    cols = [str(c) for c in columns]
    for name, what in ((value, "count"), (group, "group")):
        if name not in cols:
            raise ReleaseFileError(missing_column(source, name, cols, what))
    if value == group:
        raise ReleaseFileError(f"{source + ': ' if source else ''}column '{value}' cannot be both the counts and "
                               "the groups")


def _check(series, nonnegative: bool = True):
    return check_counts(series, integer=True, nonnegative=nonnegative)


def block_counts(block: pd.DataFrame, value: str) -> np.ndarray:
    """The counts of a surveyed block as int64 (the same reading as the survey's)."""
    chk = _check(block[value])
    if chk.problem is not None:
        raise ReleaseFileError("the input changed while it was being released (a count that passed the checks "
                               "no longer does)")
    return chk.values


def _blank_group(s: pd.Series) -> int | None:
    missing = np.flatnonzero(s.isna().to_numpy(dtype=bool))
    blank = first_blank(s)
    hits = [int(i) for i in (missing[:1].tolist() + ([blank] if blank is not None else []))]
    return min(hits) if hits else None


def survey_block(block: pd.DataFrame, value: str, group: str, *, nonnegative: bool = True) -> dict:
    """One partition's part of pass 1: its length, whether its counts break a rule, the sum
    of their magnitudes, its first blank group label, and its rows and count sum per group.
    ``nonnegative=False`` reads released counts (noise may make them negative)."""
    chk = _check(block[value], nonnegative)
    out = {"n": len(block), "count_problem": chk.problem is not None, "magnitude": int(chk.magnitude),
           "blank_group": None, "table": None}
    if chk.problem is not None:
        return out
    out["blank_group"] = _blank_group(block[group])
    if out["blank_group"] is not None:
        return out
    codes, uniques = pd.factorize(block[group], sort=False)
    sums = np.zeros(len(uniques), dtype=np.int64)
    np.add.at(sums, codes, chk.values)
    out["table"] = pd.DataFrame({"key": uniques, "count": np.bincount(codes, minlength=len(uniques)), "sum": sums})
    return out


def raise_first_problem(surveys, partition, value: str, group: str, source: str | None = None, *,
                        nonnegative: bool = True) -> None:
    """Raise the first problem of the input whose partitions were surveyed as ``surveys``
    (with the same ``nonnegative``); ``partition(p)`` returns the count column of partition
    ``p`` (to check it again)."""
    offset, total = 0, 0
    for p, s in enumerate(surveys):
        if s["count_problem"] or total + s["magnitude"] > MAX_COUNT:
            chk = check_counts(partition(p), integer=True, nonnegative=nonnegative, total_before=total)
            chk.raise_problem(lambda i: cell_where(source, offset + i + 1, value))
            raise RuntimeError("internal error: a partition's problem was not found again")
        offset += s["n"]
        total += s["magnitude"]
    offset = 0
    for s in surveys:
        if s["blank_group"] is not None:
            raise ReleaseFileError(cell_where(source, offset + s["blank_group"] + 1, group) + blank_text("a group"))
        offset += s["n"]
