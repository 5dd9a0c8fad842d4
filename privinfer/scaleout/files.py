"""Parquet and CSV through pandas and Dask, and the job of ``privinfer release --workers``.

:func:`read_frame` / :func:`write_frame` choose the format by suffix (``.parquet`` / ``.pq``
or a directory: Parquet; ``.csv``: CSV) and let the DataFrame libraries do the reading and
writing.  CSV cells are read as text (as ``privinfer release`` reads them), so label columns
are written back exactly as they were and the count checks see what the file holds.

:func:`release_file` is what the command line runs for large inputs: it starts a
``LocalCluster`` of ``workers`` processes or connects to the Dask scheduler at ``scheduler``
(a multi-machine cluster: ``tcp://host:8786``), reads the input lazily in blocks, releases it
with :func:`~privinfer.scaleout.release_frame` (invariant ``groups:COLUMN``), writes the
released frame (the label columns -- the group column and ``keep`` -- and the released
counts; no other input column, which may be confidential) and a JSON sidecar with the
mechanism, its guarantee and the published group totals -- never the input nor the seed.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
from pathlib import Path

import pandas as pd

from .checks import ReleaseFileError
from .frames import FrameRelease, is_dask_frame, release_frame

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


def read_frame(path, *, dask: bool = False, columns=None):
    """Read a CSV (cells as text) or Parquet file as a pandas frame, or a Dask frame if ``dask``."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"file not found: {p}")
    kind = _kind(p)
    if dask:
        import dask.dataframe as dd

        if kind == "csv":
            return dd.read_csv(str(p), dtype=str, keep_default_na=False, usecols=columns, blocksize=CSV_BLOCKSIZE)
        return dd.read_parquet(str(p), columns=columns)
    if kind == "csv":
        return pd.read_csv(p, dtype=str, keep_default_na=False, usecols=columns)
    return pd.read_parquet(p, columns=columns)


def write_frame(frame, path) -> Path:
    """Write ``frame`` (pandas or Dask) to ``path``: one CSV file, or Parquet (a directory of
    part files for a Dask frame); the index is not written."""
    p = Path(path)
    kind = _kind(p) if p.exists() else ("parquet" if p.suffix.lower() in (".parquet", ".pq") else _kind(p))
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


def sidecar(rel: FrameRelease, source: str, label_columns) -> dict:
    """The JSON sidecar of a frame release (module docstring): no input value, no seed."""
    from importlib.metadata import version as _version

    version = _version("privinfer")
    g = rel.guarantee
    totals = None
    if rel.totals is not None:
        totals = {"groups": [_json_number(k) for k in rel.totals.index],
                  "t": [int(v) for v in rel.totals.to_numpy()]}
    return {
        "format": SIDECAR_FORMAT,
        "value_column": rel.value,
        "group_column": rel.group,
        "label_columns": list(label_columns),
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


def release_file(input, output, *, invariant: str, mechanism: str = "generalized-laplace", column=None, keep=(),
                 metadata=None, seed=None, workers: int | None = None, scheduler: str | None = None,
                 **options) -> tuple[FrameRelease, Path, Path]:
    """Release a large CSV or Parquet file of counts on a Dask cluster (module docstring).

    ``invariant`` must be ``groups:COLUMN``; ``column`` is the count column (default: the
    last column); ``workers`` starts a local cluster, ``scheduler`` connects to one.
    Returns the release and the paths of the released file and its sidecar.
    """
    if not invariant.startswith("groups:") or not invariant[len("groups:"):].strip():
        raise ReleaseFileError("a release on a Dask cluster (--workers/--scheduler) draws group by group: "
                               "pass --invariant groups:COLUMN")
    group = invariant[len("groups:"):].strip()
    src, dst = Path(input), Path(output)
    meta_path = Path(metadata) if metadata else dst.with_suffix(".json")
    if dst.resolve() == src.resolve() or meta_path.resolve() == src.resolve():
        raise ReleaseFileError("the output would overwrite the input file")
    _kind(dst)
    with dask_client(workers, scheduler):
        frame = read_frame(src, dask=True)
        cols = [str(c) for c in frame.columns]
        value = column if column is not None else cols[-1]
        keep = list(dict.fromkeys(keep or ()))
        for c in keep:
            if c not in cols:
                raise ReleaseFileError(f"{src.name}: --keep column '{c}' not found (columns: {', '.join(cols)})")
        labels = [c for c in cols if c in set(keep) | {group}]
        if value in labels:
            raise ReleaseFileError(f"{src.name}: column '{value}' cannot be both the counts and a label")
        if group not in cols:
            raise ReleaseFileError(f"{src.name}: group column '{group}' not found (columns: {', '.join(cols)})")
        if value not in cols:
            raise ReleaseFileError(f"{src.name}: count column '{value}' not found (columns: {', '.join(cols)})")
        frame = frame[[c for c in cols if c in set(labels) | {value}]]
        rel = release_frame(frame, value=value, group=group, mechanism=mechanism, seed=seed, **options)
        write_frame(rel.frame, dst)
    meta_path.write_text(json.dumps(sidecar(rel, src.name, labels), indent=2) + "\n", encoding="utf-8")
    return rel, dst, meta_path


def command_release(args, echo=print) -> int:
    """``privinfer release`` with ``--workers N`` or ``--scheduler ADDRESS``: :func:`release_file`
    with the command's options, and its report."""
    rel, dst, meta_path = release_file(
        args.input, args.output, invariant=args.invariant, mechanism=args.mechanism, column=args.column,
        keep=args.keep, metadata=args.metadata, seed=args.seed, workers=args.workers, scheduler=args.scheduler,
        epsilon=args.epsilon, delta=args.delta, sigma=args.sigma, sensitivity=args.sensitivity, norm=args.norm)
    where = f"{args.workers} local worker(s)" if args.workers is not None else f"the Dask cluster at {args.scheduler}"
    kept = f" ({len(rel.totals)} group totals kept exactly)" if rel.totals is not None else ""
    echo(f"released {int(rel.sizes.sum())} cells in {len(rel.sizes)} groups with {rel.mechanism} on {where}{kept}")
    g = rel.guarantee
    echo(f"guarantee: {g.definition} " + ", ".join(
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in g.parameters.items() if v is not None))
    echo(f"wrote {dst} and {meta_path}")
    return 0
