r"""Read back a release written by ``privinfer release --workers`` / ``--scheduler``.

:func:`read_frame_release` is to :func:`~privinfer.scaleout.files.release_file` what
:func:`privinfer.workflow.read_release` is to ``privinfer release``: it reads the sidecar
(format ``privinfer-frame-release/1``; default: the release's path with ``.json``, where the
release command writes it), reads the released frame (a CSV file or a Parquet folder, through
:func:`~privinfer.scaleout.files.read_frame`) and rebuilds the
:class:`~privinfer.scaleout.FrameRelease`.  The released counts are read with the workflow's
checks (:func:`privinfer.workflow.table_io.check_counts`; negative counts allowed, as noise
makes them), one partition at a time for a Dask frame, with one-line errors naming the data
row and column, never a value.

The invariant is checked exactly: for a mechanism that keeps the group totals (generalized
Laplace / Gaussian), every group of the frame must add up to its published total
:math:`t_g` and the frame's groups must be the sidecar's -- a changed release or sidecar is
refused, naming the group by its position, never a value.  The published totals come back as
a Series indexed by the group keys *as the frame holds them* (JSON writes keys as strings or
numbers: a CSV release holds text, a Parquet one typed values), in order of first appearance,
so ``totals.loc[key]`` finds every group of the frame.  A release by a mechanism that keeps no
total (double geometric, discrete Gaussian) is read with ``totals = None``;
:func:`~privinfer.scaleout.fit_groups` refuses to fit it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from ..workflow.errors import ReleaseFileError
from ..workflow.files import metadata_path_for, read_sidecar
from ..workflow.table_io import check_counts, missing_column
from .files import SIDECAR_FORMAT, read_frame
from .frames import FrameRelease, is_dask_frame
from .groups import GroupMechanism
from .guarantee import frame_guarantee
from .survey import check_columns, raise_first_problem, survey_block

__all__ = ["read_frame_release", "frame_sidecar_path", "is_frame_release"]

#: Sidecar formats of the frame-release family (only ``SIDECAR_FORMAT`` is read).
_FAMILY = SIDECAR_FORMAT.rsplit("/", 1)[0] + "/"


def frame_sidecar_path(path, metadata=None) -> Path:
    """The sidecar of the release at ``path``: ``metadata``, else ``path`` with ``.json``
    (where :func:`~privinfer.scaleout.files.release_file` writes it)."""
    return Path(metadata) if metadata is not None else metadata_path_for(path)


def is_frame_release(path, metadata=None) -> bool:
    """Whether the sidecar of ``path`` (see :func:`frame_sidecar_path`) says it is a release made
    group by group on Dask (format ``privinfer-frame-release/...``); ``False`` when it is
    missing or not JSON (the ordinary reader then names the problem)."""
    p = frame_sidecar_path(path, metadata)
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and isinstance(meta.get("format"), str) and meta["format"].startswith(_FAMILY)


def _read_sidecar(p: Path) -> dict:
    meta = read_sidecar(p, SIDECAR_FORMAT,
                        ("value_column", "group_column", "label_columns", "n", "integer", "mechanism", "invariant"),
                        beside="release", wrong_format="not a metadata file of a release made on Dask in a format "
                        f"this version reads ({SIDECAR_FORMAT})")
    strings = [meta["value_column"], meta["group_column"]]
    labels = meta["label_columns"]
    if not all(isinstance(c, str) for c in strings) or not isinstance(labels, list) or \
            not all(isinstance(c, str) for c in labels):
        raise ReleaseFileError(f"{p.name}: metadata: the value, group and label columns must be column names")
    if meta["group_column"] not in labels or meta["value_column"] in labels:
        raise ReleaseFileError(f"{p.name}: metadata: the group column must be a label column and the value "
                               "column must not")
    if meta["integer"] is not True:
        raise ReleaseFileError(f"{p.name}: metadata: a release made on Dask holds integer counts ('integer': true)")
    if not isinstance(meta["n"], int) or isinstance(meta["n"], bool) or meta["n"] < 1:
        raise ReleaseFileError(f"{p.name}: metadata: 'n' must be a positive integer")
    mech, inv = meta["mechanism"], meta["invariant"]
    if not isinstance(mech, dict) or not isinstance(mech.get("name"), str) or \
            not isinstance(mech.get("parameters", {}), dict):
        raise ReleaseFileError(f"{p.name}: metadata: 'mechanism' must hold a name and parameters")
    if not isinstance(inv, dict):
        raise ReleaseFileError(f"{p.name}: metadata: 'invariant' must be an object")
    return meta


def _published(meta: dict, name: str, keeps: bool):
    """The sidecar's (keys, totals) lists, or ``None`` when the mechanism keeps no total."""
    inv, group = meta["invariant"], meta["group_column"]
    totals = inv.get("totals")
    if not keeps:
        if totals is not None or inv.get("spec") != "none":
            raise ReleaseFileError(f"{name}: metadata: mechanism {meta['mechanism']['name']} keeps no group totals, "
                                   "but the metadata lists some")
        return None
    if inv.get("spec") != f"groups:{group}":
        raise ReleaseFileError(f"{name}: metadata: the invariant must be groups:{group} (the group column)")
    if not isinstance(totals, dict) or not isinstance(totals.get("groups"), list) or \
            not isinstance(totals.get("t"), list) or len(totals["groups"]) != len(totals["t"]):
        raise ReleaseFileError(f"{name}: metadata: the published totals must be lists 'groups' and 't' of one "
                               "length")
    t = totals["t"]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in t):
        raise ReleaseFileError(f"{name}: metadata: the published totals must be integers")
    if not all(isinstance(k, (str, int, float)) for k in totals["groups"]):
        raise ReleaseFileError(f"{name}: metadata: the group keys must be strings or numbers")
    return totals["groups"], t


def _key_as(key, kind: str):
    """A sidecar key as the frame holds its keys (``kind``: ``"text"``, ``"int"``, ``"float"``,
    ``"bool"``); ``None`` when it cannot be one of them (the group sets then differ)."""
    if kind == "text":
        if isinstance(key, str):
            return key
        if isinstance(key, bool) or isinstance(key, int):
            return str(key)
        return repr(float(key))  # pandas writes a float key to CSV by repr
    if kind == "int":
        return int(key) if isinstance(key, int) and not isinstance(key, bool) else None
    if kind == "float":
        return float(key) if isinstance(key, (int, float)) and not isinstance(key, bool) else None
    if kind == "bool":
        return key if isinstance(key, bool) else None
    return None


def _key_kind(keys) -> str:
    kinds = set()
    for k in keys:
        if isinstance(k, (bool, np.bool_)):
            kinds.add("bool")
        elif isinstance(k, (int, np.integer)):
            kinds.add("int")
        elif isinstance(k, (float, np.floating)):
            kinds.add("float")
        else:
            kinds.add("text")
    return kinds.pop() if len(kinds) == 1 else "text"


def _as_counts(block: pd.DataFrame, value: str) -> pd.DataFrame:
    """A checked partition with its released counts as int64 (the survey's reading)."""
    chk = check_counts(block[value], integer=True, nonnegative=False)
    if chk.problem is not None:
        raise ReleaseFileError("the release changed while it was being read (a count that passed the checks no "
                               "longer does)")
    out = block.copy()
    out[value] = chk.values.astype(np.int64)
    return out


def read_frame_release(path, metadata=None, *, dask: bool = False) -> FrameRelease:
    """Read the release at ``path`` (CSV file or Parquet folder) written by ``privinfer release
    --workers`` / ``--scheduler`` and its sidecar (``metadata``; default ``path`` with ``.json``)
    as a :class:`~privinfer.scaleout.FrameRelease` (module docstring): ``frame`` holds the
    label columns and the released counts (int64) in the file's row order -- a pandas frame,
    or a lazy Dask frame if ``dask`` (the checks then run on the current Dask client).

    Checks, each a one-line :class:`~privinfer.workflow.ReleaseFileError` naming the problem
    and never a value: the sidecar's format and entries; the columns; every count an integer;
    the number of rows; and for a mechanism that keeps the group totals, every group of the
    frame adding up exactly to its published total and the same set of groups in the frame
    and the sidecar (groups named by position in order of first appearance).
    """
    src = Path(path)
    side = frame_sidecar_path(src, metadata)
    meta = _read_sidecar(side)
    name = src.name
    value, group, labels = meta["value_column"], meta["group_column"], list(meta["label_columns"])
    try:
        gm = GroupMechanism(meta["mechanism"]["name"], meta["mechanism"].get("parameters", {}))
    except (TypeError, ValueError) as exc:
        raise ReleaseFileError(f"{side.name}: metadata: {exc}") from None
    published = _published(meta, side.name, gm.keeps_totals)
    frame = read_frame(src, dask=dask)
    cols = [str(c) for c in frame.columns]
    for c in labels:
        if c not in cols:
            raise ReleaseFileError(missing_column(name, c, cols, "label"))
    check_columns(cols, value, group, name)
    frame = frame[labels + [value]]
    if dask:
        import dask as _dask

        parts = frame[[value, group]].to_delayed()
        surveys = list(_dask.compute(*[_dask.delayed(survey_block, pure=True)(p, value, group, nonnegative=False)
                                       for p in parts]))
        partition = lambda p: frame[value].get_partition(p).compute()  # noqa: E731 - error path only
    else:
        surveys = [survey_block(frame, value, group, nonnegative=False)]
        partition = lambda p: frame[value]  # noqa: E731
    raise_first_problem(surveys, partition, value, group, name, nonnegative=False)
    table = pd.concat([s["table"] for s in surveys], ignore_index=True)
    by_key = table.groupby("key", sort=False)
    sizes, sums = by_key["count"].sum(), by_key["sum"].sum()
    n = int(sizes.sum())
    if n != meta["n"]:
        raise ReleaseFileError(f"{name}: {n} released cells, the metadata says {meta['n']}")
    index = pd.Index(list(sizes.index), dtype=frame[group].dtype, name=group)
    sizes = pd.Series(sizes.to_numpy(dtype=np.int64), index=index, name="count")
    totals = None
    if published is not None:
        totals = _check_totals(published, index, sums.to_numpy(dtype=np.int64), name, side.name)
    if dask:
        from dask.dataframe.utils import make_meta

        meta_frame = make_meta(frame).copy()
        meta_frame[value] = meta_frame[value].astype(np.int64)
        frame = frame.map_partitions(_as_counts, value, meta=meta_frame)
    else:
        frame = _as_counts(frame, value)
    mechanisms = gm.for_sizes(sizes.to_numpy())
    sampler = meta.get("sampler")
    entry = meta.get("ledger_entry")
    return FrameRelease(frame, value, group, gm.name, dict(gm.options), frame_guarantee(gm, mechanisms, len(sizes)),
                        totals, sizes, sampler if isinstance(sampler, dict) else {}, 0,
                        str(entry) if entry is not None else None)


def _check_totals(published, index: pd.Index, sums: np.ndarray, name: str, side_name: str) -> pd.Series:
    """The published totals indexed like the frame's groups, after checking that the groups are
    the same and every group adds up to its total exactly."""
    keys, t = published
    kind = _key_kind(index)
    lookup: dict = {}
    for j, k in enumerate(keys):
        key = _key_as(k, kind)
        if key is None:
            raise ReleaseFileError(f"{side_name}: group {j + 1} of the published totals is not a key the group "
                                   f"column of {name} can hold (the release or its metadata was changed)")
        if key in lookup:
            raise ReleaseFileError(f"{side_name}: groups {lookup[key][0] + 1} and {j + 1} of the published totals are "
                                   "the same group")
        lookup[key] = (j, int(t[j]))
    frame_keys = [k.item() if hasattr(k, "item") else k for k in index]
    for i, k in enumerate(frame_keys):
        if k not in lookup:
            raise ReleaseFileError(f"{name}: group {i + 1} (in order of first appearance) has no published total in "
                                   f"{side_name} (the release or its metadata was changed)")
    if len(lookup) != len(frame_keys):
        present = set(frame_keys)
        j = min(j for key, (j, _) in lookup.items() if key not in present)
        raise ReleaseFileError(f"{side_name}: group {j + 1} of the published totals has no row in {name} "
                               "(the release or its metadata was changed)")
    out = np.array([lookup[k][1] for k in frame_keys], dtype=np.int64)
    bad = np.flatnonzero(out != sums)
    if bad.size:
        raise ReleaseFileError(f"{name}: the counts of group {int(bad[0]) + 1} (in order of first appearance) do not "
                               f"add up to its published total (the release or its metadata was changed)")
    return pd.Series(out, index=index, name="t")
