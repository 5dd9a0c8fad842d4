"""Counts tables in CSV files, the CSV of a release, and the JSON metadata sidecar.

These are the files of ``privinfer release`` and ``privinfer fit``; :mod:`.release` turns them
into :class:`~privinfer.workflow.Release` values and back.

Input layouts
-------------
*Column* layout: one column of counts (``value_column``; default the last column), and
optionally label columns: the group column of ``groups:COLUMN``, the row and column label
columns of ``margins:ROW,COL`` (a two-way table in long form), and identifier columns the
curator chooses to keep (``keep``).

*Table* layout (``margins``): a two-way table in wide form; the first column holds the row
labels, every other column holds the counts of one column category.

The release CSV has the same layout, with the counts replaced by the released values, and
only the label columns (never another data column of the input: it may be confidential).
A :class:`Layout` records that mapping between cells and CSV rows without any value, so a
release can carry it while the confidential counts stay with the curator.

Metadata sidecar
----------------
What an analyst needs to write the exact likelihood: the mechanism and its parameters, its
privacy guarantee, the invariant and its published values ``t``, the layout of the release
and its provenance.  It never holds the confidential input nor the random seed (the seed
would let anyone regenerate the noise and subtract it).  :func:`read_metadata` checks its
format tag and required entries.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import invariants as I
from ..invariants import Invariant

__all__ = [
    "ReleaseFileError",
    "InvariantSpec",
    "Layout",
    "CountsTable",
    "METADATA_FORMAT",
    "read_counts",
    "build_invariant",
    "invariant_labels",
    "write_values",
    "metadata_path_for",
    "write_metadata",
    "read_metadata",
    "jsonable",
]

#: Format tag of the metadata sidecar.
METADATA_FORMAT = "privinfer-release/1"


class ReleaseFileError(ValueError):
    """A counts/release/metadata file or an option does not fit (the message names the problem,
    never a confidential value)."""


# =============================================================================================
# invariant specification
# =============================================================================================
@dataclass(frozen=True)
class InvariantSpec:
    """Parsed ``--invariant`` option.

    ``total`` (grand total), ``groups:COLUMN`` (totals of the groups named in COLUMN),
    ``margins`` (row and column totals of a wide two-way table), ``margins:ROW,COL`` (row and
    column totals of a long two-way table with label columns ROW and COL), ``none``.
    """

    kind: str
    columns: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "InvariantSpec":
        text = (text or "").strip()
        kind, _, arg = text.partition(":")
        kind = kind.strip().lower()
        cols = tuple(c.strip() for c in arg.split(",")) if arg else ()
        if kind in ("total", "none"):
            if cols:
                raise ReleaseFileError(f"invariant '{kind}' takes no column (got '{text}')")
            return cls(kind)
        if kind == "groups":
            if len(cols) != 1 or not cols[0]:
                raise ReleaseFileError("invariant 'groups' needs one column: groups:COLUMN")
            return cls(kind, cols)
        if kind == "margins":
            if cols and (len(cols) != 2 or not all(cols) or cols[0] == cols[1]):
                raise ReleaseFileError(
                    "invariant 'margins' takes no column (a wide table) or two label columns: margins:ROW,COL"
                )
            return cls(kind, cols)
        raise ReleaseFileError(
            f"unknown invariant '{text}': use total, groups:COLUMN, margins, margins:ROW,COL or none"
        )

    @property
    def wide(self) -> bool:
        """Table layout (wide two-way table)."""
        return self.kind == "margins" and not self.columns

    def __str__(self) -> str:
        return self.kind + (":" + ",".join(self.columns) if self.columns else "")


# =============================================================================================
# layout: cells <-> CSV rows, without values
# =============================================================================================
@dataclass
class Layout:
    """How the n cells of a release sit in a CSV file (no values).

    Cells are in *cell order*: CSV row order for the column layout, C order of the
    (row label, column label) grid for two-way tables (``shape`` = (rows, columns); row and
    column categories in order of first appearance).  ``order[k]`` is the CSV position of cell
    k for a long two-way table (``None``: the identity).  ``out_header`` is the header of the
    release CSV (label columns, then the value column(s)); ``label_rows`` holds, per CSV data
    row, its label cells.
    """

    spec: InvariantSpec
    value_columns: list[str]
    out_header: list[str]
    label_rows: list[list[str]]
    order: np.ndarray | None = None
    shape: tuple[int, int] | None = None
    row_labels: list[str] = field(default_factory=list)
    col_labels: list[str] = field(default_factory=list)
    group_labels: list[str] = field(default_factory=list)  # per cell, for groups

    @property
    def n(self) -> int:
        """Number of cells."""
        if self.shape is not None:
            return int(self.shape[0] * self.shape[1])
        return len(self.label_rows)

    @property
    def layout_name(self) -> str:
        """``"table"`` (wide two-way table) or ``"column"``."""
        return "table" if self.spec.wide else "column"

    @property
    def label_columns(self) -> list[str]:
        """Label columns of the column layout (none for a wide table)."""
        return [] if self.spec.wide else self.out_header[:-1]

    def cell_labels(self) -> list[str]:
        """One printable label per cell: ``"row / column"`` for two-way tables, the kept label
        columns joined by ``" / "`` otherwise, ``"cell k"`` when there is no label column."""
        if self.shape is not None:
            return [f"{r} / {c}" for r in self.row_labels for c in self.col_labels]
        if self.label_rows and self.label_rows[0]:
            return [" / ".join(lab) for lab in self.label_rows]
        return [f"cell {i + 1}" for i in range(self.n)]


@dataclass
class CountsTable:
    """Counts read from a CSV file: the file, its :class:`Layout` and the ``values`` in cell order.

    ``values`` are the curator's confidential counts (or, read back from a release, the
    released values); they never enter a :class:`Layout`.
    """

    path: Path
    layout: Layout
    values: np.ndarray

    @property
    def n(self) -> int:
        return int(self.values.size)

    @property
    def spec(self) -> InvariantSpec:
        return self.layout.spec

    @property
    def shape(self):
        return self.layout.shape


# =============================================================================================
# reading counts
# =============================================================================================
def _read_rows(path) -> tuple[list[str], list[list[str]]]:
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"file not found: {p}")
    if p.is_dir():
        raise ReleaseFileError(f"{p} is a directory, not a CSV file")
    try:
        with open(p, newline="", encoding="utf-8-sig") as fh:
            rows = list(csv.reader(fh))
    except UnicodeDecodeError:
        raise ReleaseFileError(f"{p.name}: cannot read the file as UTF-8 text (is it a CSV file?)") from None
    except csv.Error as exc:
        raise ReleaseFileError(f"{p.name}: not a valid CSV file ({exc})") from None
    rows = [r for r in rows if any(c.strip() for c in r)]
    if not rows:
        raise ReleaseFileError(f"{p.name}: the file is empty")
    header = [h.strip() for h in rows[0]]
    if any(not h for h in header):
        raise ReleaseFileError(f"{p.name}: the header row has an empty column name")
    dup = sorted({h for h in header if header.count(h) > 1})
    if dup:
        raise ReleaseFileError(f"{p.name}: duplicate column name(s) {', '.join(dup)}")
    body = rows[1:]
    if not body:
        raise ReleaseFileError(f"{p.name}: no data rows below the header")
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise ReleaseFileError(
                f"{p.name}: data row {i + 1} has {len(r)} fields, the header has {len(header)}"
            )
    return header, [[c.strip() for c in r] for r in body]


def _col(header, name, fname, what) -> int:
    if name not in header:
        raise ReleaseFileError(f"{fname}: {what} column '{name}' not found (columns: {', '.join(header)})")
    return header.index(name)


def _parse_values(cells, fname, column, *, integer, nonnegative) -> np.ndarray:
    """Numbers from CSV cells; the messages name row and column, never the value."""
    out = np.empty(len(cells), dtype=float)
    for i, s in enumerate(cells):
        if not s:
            raise ReleaseFileError(f"{fname}: column '{column}', data row {i + 1} is blank")
        try:
            v = float(s)
        except ValueError:
            raise ReleaseFileError(f"{fname}: column '{column}', data row {i + 1} is not a number") from None
        if not math.isfinite(v):
            raise ReleaseFileError(f"{fname}: column '{column}', data row {i + 1} is not a finite number")
        if integer and v != round(v):
            raise ReleaseFileError(
                f"{fname}: column '{column}', data row {i + 1} is not an integer count "
                "(the mechanism releases integer counts)"
            )
        if nonnegative and v < 0:
            raise ReleaseFileError(f"{fname}: column '{column}', data row {i + 1} is a negative count")
        out[i] = v
    return out


def _first_appearance(labels) -> list[str]:
    seen: dict[str, None] = {}
    for s in labels:
        seen.setdefault(s, None)
    return list(seen)


def read_counts(path, spec: InvariantSpec, value_column: str | None = None, *, integer: bool,
                nonnegative: bool = True, keep=(), value_columns=None) -> CountsTable:
    """Read counts for ``spec`` (see the module docstring for the layouts).

    ``integer`` requires integer values; ``nonnegative`` rejects negative values (counts; a
    release may hold negative values, so reading a release passes ``False``).
    ``value_columns`` (wide tables read back from a release) fixes the count columns.
    """
    header, body = _read_rows(path)
    fname = Path(path).name
    keep = list(dict.fromkeys(keep or ()))
    if spec.wide:
        if len(header) < 2:
            raise ReleaseFileError(f"{fname}: a wide table needs a row-label column and at least one count column")
        if value_column is not None or keep:
            raise ReleaseFileError("a wide table (--invariant margins) takes neither --column nor --keep")
        vcols = list(value_columns) if value_columns is not None else header[1:]
        for c in vcols:
            _col(header, c, fname, "count")
        if header[1:] != vcols:
            raise ReleaseFileError(f"{fname}: count columns {', '.join(header[1:])} differ from the expected "
                                   f"{', '.join(vcols)}")
        row_labels = [r[0] for r in body]
        if len(set(row_labels)) != len(row_labels) or any(not s for s in row_labels):
            raise ReleaseFileError(f"{fname}: the row labels (first column) must be non-empty and distinct")
        grid = np.column_stack([
            _parse_values([r[j] for r in body], fname, header[j], integer=integer, nonnegative=nonnegative)
            for j in range(1, len(header))
        ])
        layout = Layout(spec, vcols, header, [[r[0]] for r in body], None, grid.shape, row_labels, vcols)
        return CountsTable(Path(path), layout, grid.ravel())

    vcol = value_column if value_column is not None else (value_columns[0] if value_columns else header[-1])
    vj = _col(header, vcol, fname, "count")
    label_cols = list(spec.columns) if spec.kind in ("groups", "margins") else []
    for c in label_cols + keep:
        _col(header, c, fname, "label" if c in label_cols else "--keep")
        if c == vcol:
            raise ReleaseFileError(f"{fname}: column '{c}' cannot be both the counts and a label")
    lj = sorted({header.index(c) for c in keep + label_cols})  # input order
    out_labels = [header[j] for j in lj]
    vals = _parse_values([r[vj] for r in body], fname, vcol, integer=integer, nonnegative=nonnegative)
    layout = Layout(spec, [vcol], out_labels + [vcol], [[r[j] for j in lj] for r in body])
    if spec.kind == "groups":
        g = [r[header.index(spec.columns[0])] for r in body]
        if any(not s for s in g):
            raise ReleaseFileError(f"{fname}: column '{spec.columns[0]}' has a blank group label")
        layout.group_labels = g
    elif spec.kind == "margins":
        rl = [r[header.index(spec.columns[0])] for r in body]
        cl = [r[header.index(spec.columns[1])] for r in body]
        rows, cols = _first_appearance(rl), _first_appearance(cl)
        ri = {s: i for i, s in enumerate(rows)}
        ci = {s: j for j, s in enumerate(cols)}
        pos = np.array([ri[a] * len(cols) + ci[b] for a, b in zip(rl, cl)], dtype=np.int64)
        if len(body) != len(rows) * len(cols) or len(np.unique(pos)) != len(pos):
            raise ReleaseFileError(
                f"{fname}: columns '{spec.columns[0]}' and '{spec.columns[1]}' must list every "
                f"(row, column) pair of a {len(rows)} x {len(cols)} table exactly once"
            )
        order = np.empty(len(pos), dtype=np.int64)
        order[pos] = np.arange(len(pos))
        vals = vals[order]
        layout.order = order
        layout.shape = (len(rows), len(cols))
        layout.row_labels, layout.col_labels = rows, cols
    return CountsTable(Path(path), layout, vals)


def build_invariant(layout: Layout) -> Invariant | None:
    """The invariant of ``layout.spec`` on the cells of ``layout`` (no ``t``)."""
    spec = layout.spec
    if spec.kind == "none":
        return None
    if spec.kind == "total":
        return I.total(layout.n)
    if spec.kind == "groups":
        return I.groups(np.asarray(layout.group_labels, dtype=object).astype(str))
    return I.margins(layout.shape, [(0,), (1,)])


def invariant_labels(layout: Layout, inv: Invariant | None) -> list[str]:
    """Names of the rows of C (what each published value of t totals)."""
    if inv is None:
        return []
    spec = layout.spec
    if spec.kind == "total":
        return ["total"]
    if spec.kind == "groups":
        return [f"{spec.columns[0]}={g}" for g in inv.group_labels]
    return [f"row={r}" for r in layout.row_labels] + [f"column={c}" for c in layout.col_labels]


# =============================================================================================
# writing values and the sidecar
# =============================================================================================
def _fmt(v, integer: bool) -> str:
    return str(int(v)) if integer else repr(float(v))


def write_values(path, layout: Layout, y, *, integer: bool) -> Path:
    """Write the values ``y`` (cell order) to ``path`` in the CSV layout ``layout``."""
    y = np.asarray(y)
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(layout.out_header)
        if layout.spec.wide:
            grid = y.reshape(layout.shape)
            for lab, row in zip(layout.label_rows, grid):
                w.writerow(lab + [_fmt(v, integer) for v in row])
        else:
            csv_vals = np.empty_like(y)
            if layout.order is None:
                csv_vals[:] = y
            else:
                csv_vals[layout.order] = y
            for lab, v in zip(layout.label_rows, csv_vals):
                w.writerow(lab + [_fmt(v, integer)])
    return p


def metadata_path_for(csv_path) -> Path:
    """Default sidecar of a release CSV: same name with ``.json`` (``release.csv`` -> ``release.json``)."""
    return Path(csv_path).with_suffix(".json")


def jsonable(v):
    """``v`` with NumPy scalars and arrays turned into JSON types (other objects as strings)."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, np.ndarray):
        return jsonable(v.tolist())
    if v is None or isinstance(v, (int, str, bool)):
        return v
    return str(v)


def write_metadata(path, meta: dict) -> Path:
    """Write the sidecar ``meta`` as indented JSON."""
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return p


def read_metadata(path) -> dict:
    """Read a sidecar and check its format tag and required entries."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"metadata file not found: {p} (written by privinfer release beside the CSV; "
                                "or pass --metadata)")
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ReleaseFileError(f"{p.name}: not a JSON metadata file") from None
    if not isinstance(meta, dict) or meta.get("format") != METADATA_FORMAT:
        raise ReleaseFileError(f"{p.name}: not a privinfer release metadata file (format {METADATA_FORMAT})")
    for key in ("layout", "value_columns", "n", "integer", "mechanism", "invariant"):
        if key not in meta:
            raise ReleaseFileError(f"{p.name}: metadata has no '{key}' entry")
    if not isinstance(meta["invariant"], dict) or not isinstance(meta["mechanism"], dict):
        raise ReleaseFileError(f"{p.name}: metadata entries 'invariant' and 'mechanism' must be objects")
    return meta
