"""Parquet and CSV through pandas and Dask, and the job of ``privinfer release --workers``.

:func:`read_frame` / :func:`write_frame` choose the format by suffix (``.parquet`` / ``.pq``
or a directory: Parquet; ``.csv``: CSV) and let the DataFrame libraries do the reading and
writing.  CSV cells are read as text (as ``privinfer release`` reads them), so label columns
are written back exactly as they were and the count checks see what the file holds.

:func:`release_file` is what the command line runs for large inputs: it starts a
``LocalCluster`` of ``workers`` processes or connects to the Dask scheduler at ``scheduler``
(a multi-machine cluster: ``tcp://host:8786``), reads the input lazily in blocks and releases
it with :func:`~privinfer.scaleout.release_frame` (invariant ``groups:COLUMN``).  It follows
the rules of every ``privinfer release`` (:func:`privinfer.workflow.release.release_counts_file`):

* *columns*: the release holds the label columns -- the group column and the identifying
  columns chosen as :mod:`privinfer.workflow.files` chooses them (default: every other id
  column -- no number in it, zero-padded codes such as ``01001`` across all partitions, or an
  id name such as ``GEOID`` or ``*_id``, :func:`~privinfer.workflow.table_io.is_id_column`;
  ``id_column`` / ``--id``; ``keep`` / ``--keep``), in input order -- then the released
  counts; CSV cells are read as text, so codes keep their leading zeros; a column left out
  because it holds numbers is listed in the sidecar (``not_copied``); blank and duplicate ids
  are refused, naming the data rows (a distributed count of row hashes finds repeated ids
  without gathering them);
* *errors*: the workflow's one-line messages, never a value (:mod:`.survey`); CSV text in
  ``encoding`` (``--encoding``), bytes that do not decode refused;
* *files*: existing outputs are refused before anything is read unless ``force``
  (``--force``); the release (a CSV file, or a Parquet folder of part files) and its sidecar
  are written to temporary names beside their targets and moved into place together
  (:mod:`privinfer.workflow.atomic`), so an interrupted run leaves no partial output;
* *ledger*: the release is accounted in the privacy-loss ledger (default beside the output,
  ``--ledger``), its budget (``--budget``, ``--budget-scope``) checked before any noise is
  drawn, with the fingerprint ``privinfer release`` computes for the same counts; the sidecar
  records the entry's id (``ledger_entry``).

The sidecar holds the mechanism, its guarantee and the published group totals -- never the
input nor the seed.  Rows are numbered as the frame reader delivers them: blank lines, which
it skips, are not counted (``privinfer release`` counts them).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..workflow.atomic import commit_staged, refuse_existing, stage, stage_path
from ..workflow.errors import ReleaseFileError
from ..workflow.files import DEFAULT_IDS_HINT, InvariantSpec, duplicate_ids, format_metadata
from ..workflow.ledger import Ledger, as_ledger
from ..workflow.table_io import (CodeSurvey, blank_text, cell_where, first_blank, holds_numbers, id_name,
                                 missing_column, quote_name, survey_codes, text_encoding, undecodable_text)
from .frames import FrameRelease, is_dask_frame, release_frame
from .groups import GroupMechanism

__all__ = ["read_frame", "write_frame", "dask_client", "release_file", "command_release", "SIDECAR_FORMAT"]

#: Format tag of the sidecar of a release written by :func:`release_file`.
SIDECAR_FORMAT = "privinfer-frame-release/1"

#: Block size of Dask's CSV reader (bytes per partition).
CSV_BLOCKSIZE = "64MB"


def _kind(path: Path) -> str:
    if path.suffix.lower() in (".parquet", ".pq") or path.is_dir():
        return "parquet"
    if path.suffix.lower() == ".csv":
        return "csv"
    raise ReleaseFileError(f"{path.name}: cannot tell the format (use a .csv or .parquet name)")


def read_frame(path, *, dask: bool = False, columns=None, encoding: str = "utf-8"):
    """Read a CSV (cells as text, in ``encoding``) or Parquet file as a pandas frame, or a Dask
    frame if ``dask``."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"file not found: {p}")
    kind = _kind(p)
    enc = text_encoding(encoding)
    if dask:
        import dask.dataframe as dd

        if kind == "csv":
            return dd.read_csv(str(p), dtype=str, keep_default_na=False, usecols=columns, blocksize=CSV_BLOCKSIZE,
                               encoding=enc)
        return dd.read_parquet(str(p), columns=columns)
    if kind == "csv":
        return pd.read_csv(p, dtype=str, keep_default_na=False, usecols=columns, encoding=enc)
    return pd.read_parquet(p, columns=columns)


def write_frame(frame, path, *, format: str | None = None) -> Path:
    """Write ``frame`` (pandas or Dask) to ``path``: one CSV file, or Parquet (a directory of
    part files for a Dask frame); the index is not written.  ``format`` (``"csv"`` or
    ``"parquet"``) overrides the choice by suffix.  This writes in place: :func:`release_file`
    writes its outputs completely or not at all."""
    p = Path(path)
    kind = format or (_kind(p) if p.exists() else ("parquet" if p.suffix.lower() in (".parquet", ".pq") else _kind(p)))
    if is_dask_frame(frame):
        if kind == "csv":
            frame.to_csv(str(p), single_file=True, index=False)
        else:
            frame.to_parquet(str(p), write_index=False)
    elif kind == "csv":
        frame.to_csv(p, index=False)
    else:
        frame.to_parquet(p, index=False)
    return p


@contextlib.contextmanager
def dask_client(workers: int | None = None, scheduler: str | None = None, *, memory_limit="auto"):
    """A ``distributed.Client``: on a new ``LocalCluster`` of ``workers`` processes (one thread
    each), or connected to the scheduler at ``scheduler``; closed on exit."""
    from dask.distributed import Client, LocalCluster

    if (workers is None) == (scheduler is None):
        raise ValueError("give either workers (a local cluster) or scheduler (an address), not both")
    if scheduler is not None:
        with Client(scheduler) as client:
            yield client
        return
    if int(workers) != workers or workers < 1:
        raise ValueError("workers must be a positive integer")
    with LocalCluster(n_workers=int(workers), threads_per_worker=1, processes=True, memory_limit=memory_limit,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        yield client


def _json_number(v):
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if hasattr(v, "item"):
        return v.item()
    return v


def sidecar(rel: FrameRelease, source: str, label_columns, not_copied=()) -> dict:
    """The JSON sidecar of a frame release (module docstring): no input value, no seed."""
    from importlib.metadata import version as _version

    version = _version("privinfer")
    g = rel.guarantee
    totals = None
    if rel.totals is not None:
        totals = {"groups": [_json_number(k) for k in rel.totals.index],
                  "t": [int(v) for v in rel.totals.to_numpy()]}
    meta = {
        "format": SIDECAR_FORMAT,
        "value_column": rel.value,
        "group_column": rel.group,
        "label_columns": list(label_columns),
        "not_copied": list(not_copied),
        "n": int(rel.sizes.sum()),
        "integer": True,
        "mechanism": {"name": rel.mechanism, "parameters": {k: _json_number(v) for k, v in rel.options.items()}},
        "guarantee": {"kind": g.kind, "definition": g.definition,
                      "parameters": {k: _json_number(v) for k, v in g.parameters.items()},
                      "relation": g.relation, "reference": g.reference},
        "invariant": {"spec": f"groups:{rel.group}" if rel.totals is not None else "none", "totals": totals},
        "sampler": rel.sampler,
        "provenance": {"privinfer_version": version, "source": source,
                       "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()},
    }
    if rel.ledger_entry is not None:
        meta["ledger_entry"] = rel.ledger_entry
    return meta


def _strip_text(block: pd.DataFrame) -> pd.DataFrame:
    """Text cells without surrounding whitespace (as ``privinfer release`` reads them)."""
    out = block.copy()
    for c in out.columns:
        if out[c].dtype == object or isinstance(out[c].dtype, pd.StringDtype):
            out[c] = out[c].str.strip()
    return out


def _label_survey(block: pd.DataFrame, candidates, id_column) -> dict:
    """One partition: its length, which ``candidates`` hold numbers (with the
    :class:`~privinfer.workflow.table_io.CodeSurvey` of each, to tell zero-padded codes over
    the whole column), its first blank id."""
    numbers = [c for c in candidates if holds_numbers(block[c])]
    return {"n": len(block), "numbers": numbers, "codes": {c: survey_codes(block[c]) for c in candidates},
            "blank_id": first_blank(block[id_column]) if id_column is not None else None}


def _not_ids(candidates, surveys) -> set:
    """The ``candidates`` that are not id columns (:func:`~privinfer.workflow.table_io.is_id_column`
    on the whole column, from the partitions' surveys): numbers in some partition, an ordinary
    name, and not zero-padded codes over all partitions together."""
    numbers = {c for s in surveys for c in s["numbers"]}
    out = set()
    for c in numbers:
        codes = CodeSurvey()
        for s in surveys:
            codes = codes | s["codes"][c]
        if not (id_name(c) or codes.zero_padded):
            out.add(c)
    return out


def _row_hashes(block: pd.DataFrame) -> pd.Series:
    return pd.util.hash_pandas_object(block, index=False)


def _rows_with(block: pd.DataFrame, wanted: np.ndarray):
    pos = np.flatnonzero(np.isin(_row_hashes(block).to_numpy(), wanted))
    return pos, list(block.iloc[pos].itertuples(index=False, name=None))


def _first_duplicate(frame, cols, lengths):
    """Data rows ``(k, i)`` (1-based, k < i, i smallest) whose labels in ``cols`` are equal,
    or ``None``: row hashes counted on the cluster, then the few rows with a repeated hash
    compared exactly."""
    import dask

    keys = frame[list(cols)]
    hashes = keys.map_partitions(_row_hashes, meta=pd.Series(dtype="uint64"))
    counts = hashes.value_counts(split_out=max(1, keys.npartitions // 4))
    repeated = counts[counts > 1].compute()
    if len(repeated) == 0:
        return None
    wanted = np.asarray(repeated.index, dtype=np.uint64)
    found = dask.compute(*[dask.delayed(_rows_with)(p, wanted) for p in keys.to_delayed()])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    first: dict = {}
    rows = sorted((int(offsets[p]) + int(i), key) for p, (pos, tuples) in enumerate(found)
                  for i, key in zip(pos, tuples))
    for r, key in rows:
        k = first.setdefault(key, r)
        if k != r:
            return k + 1, r + 1
    return None


def _label_columns(frame, src, value, group, keep, id_column):
    """The label columns of the release (input order), the columns left out, and the checks
    of the identifying columns (the rules of :func:`privinfer.workflow.files.read_counts`)."""
    import dask

    name = src.name
    cols = [str(c) for c in frame.columns]
    if value not in cols:
        raise ReleaseFileError(missing_column(name, value, cols, "count"))
    if group not in cols:
        raise ReleaseFileError(missing_column(name, group, cols, "label"))
    if group == value:
        raise ReleaseFileError(f"{name}: column {quote_name(group)} cannot be both the counts and a label")
    named = list(dict.fromkeys(list(keep or ()) + ([id_column] if id_column is not None else [])))
    for c in named:
        if c not in cols:
            raise ReleaseFileError(missing_column(name, c, cols, "--id" if c == id_column else "--keep"))
        if c == value:
            raise ReleaseFileError(f"{name}: column {quote_name(c)} cannot be both the counts and an id")
    default = keep is None and id_column is None
    candidates = [c for c in cols if c not in (value, group)] if default else []
    parts = frame.to_delayed()
    surveys = dask.compute(*[dask.delayed(_label_survey, pure=True)(p, candidates, id_column) for p in parts])
    lengths = [s["n"] for s in surveys]
    if id_column is not None:
        offset = 0
        for s in surveys:
            if s["blank_id"] is not None:
                raise ReleaseFileError(cell_where(name, offset + s["blank_id"] + 1, id_column) + blank_text("an id"))
            offset += s["n"]
    numbers = _not_ids(candidates, surveys)
    not_copied = [c for c in candidates if c in numbers]
    extra = [c for c in candidates if c not in numbers] if default else [c for c in named if c != group]
    labels = [c for c in cols if c == group or c in extra]
    if id_column is not None:
        dup = _first_duplicate(frame, [id_column], lengths)
        if dup is not None:
            raise ReleaseFileError(duplicate_ids(name, dup[0], dup[1], [id_column]))
    if extra:
        dup = _first_duplicate(frame, labels, lengths)
        if dup is not None:
            raise ReleaseFileError(duplicate_ids(name, dup[0], dup[1], labels, DEFAULT_IDS_HINT))
    return labels, not_copied


def release_file(input, output, *, invariant: str, mechanism: str = "generalized-laplace", column=None, keep=None,
                 id_column=None, metadata=None, seed=None, workers: int | None = None, scheduler: str | None = None,
                 force: bool = False, ledger=True, budget=None, budget_scope=None, encoding: str = "utf-8",
                 **options) -> tuple[FrameRelease, Path, Path]:
    """Release a large CSV or Parquet file of counts on a Dask cluster (module docstring).

    ``invariant`` must be ``groups:COLUMN``; ``column`` is the count column (default: the
    last column); ``keep`` / ``id_column`` choose the identifying columns; ``workers`` starts
    a local cluster, ``scheduler`` connects to one.  ``force`` replaces existing outputs;
    ``ledger``: ``True`` for the ledger beside the output, a path or
    :class:`~privinfer.workflow.ledger.Ledger`, or ``None``; ``budget`` and ``budget_scope``
    as in :func:`privinfer.workflow.make_release`; ``encoding``: the text encoding of a CSV
    input.  Returns the release and the paths of the released file and its sidecar.
    """
    spec = InvariantSpec.parse(invariant)
    if spec.kind != "groups":
        raise ReleaseFileError("a release on a Dask cluster (--workers/--scheduler) draws group by group: "
                               "pass --invariant groups:COLUMN")
    group = spec.columns[0]
    GroupMechanism(mechanism, options)  # option errors before any file is touched
    text_encoding(encoding)
    src, dst = Path(input), Path(output)
    meta_path = Path(metadata) if metadata else dst.with_suffix(".json")
    if dst.resolve() == src.resolve() or meta_path.resolve() == src.resolve():
        raise ReleaseFileError("the output would overwrite the input file")
    if dst.resolve() == meta_path.resolve():
        raise ReleaseFileError("the release and its metadata would be the same file")
    kind = _kind(dst)
    book = Ledger.beside(dst) if ledger is True else (None if ledger in (None, False) else as_ledger(ledger))
    if book is not None and book.path.resolve() in (dst.resolve(), meta_path.resolve(), src.resolve()):
        raise ReleaseFileError("the ledger would overwrite the input or an output file")
    if dst.is_dir() and kind == "parquet":
        if not force:
            refuse_existing([dst], overwrite=False)
    else:
        refuse_existing([dst], overwrite=force)
    refuse_existing([meta_path], overwrite=force)
    if not src.exists():
        raise FileNotFoundError(f"file not found: {src}")
    with dask_client(workers, scheduler):
        try:
            frame = read_frame(src, dask=True, encoding=encoding)
            frame = frame.map_partitions(_strip_text, meta=frame._meta)
            cols = [str(c) for c in frame.columns]
            value = column if column is not None else cols[-1]
            labels, not_copied = _label_columns(frame, src, value, group, keep, id_column)
            frame = frame[labels + [value]]
            rel = release_frame(frame, value=value, group=group, mechanism=mechanism, seed=seed, ledger=book,
                                budget=budget, budget_scope=budget_scope, source=src.name, output=dst, **options)
            out = stage_path(dst, overwrite=force, directory=kind == "parquet" and is_dask_frame(rel.frame))
            try:
                write_frame(rel.frame, out.temp, format=kind)
                out.sync()
                side = stage(meta_path, format_metadata(sidecar(rel, src.name, labels, not_copied)).encode(),
                             overwrite=force)
            except BaseException:
                out.discard()
                raise
            commit_staged([out, side])
        except UnicodeDecodeError:
            raise ReleaseFileError(f"{src.name}: {undecodable_text(encoding)}") from None
        except pd.errors.ParserError:
            raise ReleaseFileError(f"{src.name}: not a valid CSV file (a data row has more fields than the header, "
                                   "or malformed quoting)") from None
    return rel, dst, meta_path


def command_release(args, echo=print) -> int:
    """``privinfer release`` with ``--workers N`` or ``--scheduler ADDRESS``: :func:`release_file`
    with the command's options, and its report."""
    from ..workflow.codec import PARAMETERS
    from ..workflow.ledger import entry_report
    from ..workflow.table_io import list_names

    rel, dst, meta_path = release_file(
        args.input, args.output, invariant=args.invariant, mechanism=args.mechanism, column=args.column,
        keep=args.keep or None, id_column=args.id, metadata=args.metadata, seed=args.seed, workers=args.workers,
        scheduler=args.scheduler, force=args.force, ledger=args.ledger if args.ledger is not None else True,
        budget=args.budget, budget_scope=args.budget_scope, encoding=args.encoding,
        **{k: getattr(args, k) for k in PARAMETERS})
    where = f"{args.workers} local worker(s)" if args.workers is not None else f"the Dask cluster at {args.scheduler}"
    kept = f" ({len(rel.totals)} group totals kept exactly)" if rel.totals is not None else ""
    echo(f"released {int(rel.sizes.sum())} cells in {len(rel.sizes)} groups with {rel.mechanism} on {where}{kept}")
    g = rel.guarantee
    echo(f"guarantee: {g.definition} {g.parameter_text()}")
    meta = json.loads(Path(meta_path).read_text(encoding="utf-8"))
    echo("label columns: " + list_names(meta["label_columns"]))
    if meta["not_copied"]:
        echo("not copied (columns holding numbers; name an id column with --id): " + list_names(meta["not_copied"]))
    echo(entry_report(args.ledger, dst, rel.ledger_entry))
    echo(f"wrote {dst} and {meta_path}")
    return 0
