"""Counts tables in CSV and Parquet files, the CSV of a release, and the JSON metadata sidecar.

These are the files of ``privinfer release`` and ``privinfer fit``; :mod:`.release` turns them
into :class:`~privinfer.workflow.Release` values and back.  :mod:`.table_io` reads the files
(pandas; one-line errors naming the data row and column, never a value), :mod:`.atomic`
writes them (complete files only, no overwriting unless asked).

Input layouts
-------------
*Column* layout: one column of counts (``value_column``; default the last column), and
label columns: the group column of ``groups:COLUMN``, the row and column label columns of
``margins:ROW,COL`` (a two-way table in long form), and the columns that identify the cells:

* by default every other column that is an id column, in input order: a column that holds
  no number, a column of zero-padded codes (digit strings of one width with a leading zero
  somewhere, e.g. county FIPS ``01001``), or a column whose name says it holds ids
  (``geoid``, ``fips``, ``gisjoin``, ``id`` or ``*_id``, any case) -- :func:`~privinfer.workflow.table_io.is_id_column`.
  Cells are read as text, so such ids keep their leading zeros in the release.  Any other
  column with a number in it may hold confidential counts, so it is never copied unless
  named; the release records which columns were left out, :attr:`Layout.not_copied`;
* ``id_column`` (``--id``): that column (numbers allowed), instead of the default;
* ``keep`` (``--keep``): exactly these columns (with ``id_column`` if also given).

The invariant's label columns together with the identifying columns must tell every row
apart (duplicate ids are refused, naming the two data rows); an ``id_column`` must do so on
its own and may not be blank.

*Table* layout (``margins``): a two-way table in wide form; the first column holds the row
labels, every other column holds the counts of one column category.

The release CSV has the same layout, with the counts replaced by the released values, and
only the label columns.  A :class:`Layout` records that mapping between cells and CSV rows
without any value, so a release can carry it while the confidential counts stay with the
curator.

Metadata sidecar
----------------
What an analyst needs to write the exact likelihood: the mechanism and its parameters, its
privacy guarantee, the invariant and its published values ``t``, the layout of the release
and its provenance.  It never holds the confidential input nor the random seed (the seed
would let anyone regenerate the noise and subtract it).  :func:`read_metadata` checks its
format tag and required entries.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import invariants as I
from ..invariants import Invariant
from .atomic import write_files
from .errors import OutputExistsError, ReleaseFileError
from .table_io import (PARQUET_SUFFIXES, RawTable, blank_text, first_blank, is_id_column, list_names, parse_counts,
                       quote_name, read_table)

__all__ = [
    "ReleaseFileError",
    "OutputExistsError",
    "InvariantSpec",
    "Layout",
    "CountsTable",
    "METADATA_FORMAT",
    "read_counts",
    "build_invariant",
    "invariant_labels",
    "format_values",
    "format_metadata",
    "write_values",
    "metadata_path_for",
    "write_metadata",
    "read_metadata",
    "jsonable",
    "check_release_path",
    "duplicate_ids",
    "DEFAULT_IDS_HINT",
]

#: Format tag of the metadata sidecar.
METADATA_FORMAT = "privinfer-release/1"


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
    not_copied: list[str] = field(default_factory=list)  # input columns holding numbers (not ids), left out

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

    def cell_ids(self) -> tuple[list[str], list[tuple[str, ...]]]:
        """The ids of the cells, in cell order: ``(names, rows)`` with one tuple of label
        values per cell.  Column layout: the release's label columns; wide two-way table: the
        row-label column and ``"column"`` (the column category); no label column: ``"cell"``
        numbered from 1."""
        if self.spec.wide:
            row_name = self.out_header[0]
            col_name = "column" if row_name != "column" else "column category"
            return [row_name, col_name], [(r, c) for r in self.row_labels for c in self.col_labels]
        names = self.label_columns
        if not names:
            return ["cell"], [(str(i + 1),) for i in range(self.n)]
        rows = self.label_rows
        if self.order is not None:
            rows = [rows[int(k)] for k in self.order]
        return list(names), [tuple(r) for r in rows]


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
def _first_appearance(labels) -> list[str]:
    seen: dict[str, None] = {}
    for s in labels:
        seen.setdefault(s, None)
    return list(seen)


def _labels(table: RawTable, j: int, what: str) -> list[str]:
    """Column ``j`` as labels that may not be blank (``what`` says what each labels)."""
    cells = table.column(j)
    i = first_blank(cells)
    if i is not None:
        raise ReleaseFileError(table.where(i, j) + blank_text(what))
    return cells


#: Said when the default identifying columns (the id columns, module docstring) repeat a row's labels.
DEFAULT_IDS_HINT = " (name an id column with --id, or the columns to copy with --keep)"


def duplicate_ids(name: str | None, first_row: int, row: int, columns, hint: str = "") -> str:
    """The message for data rows ``first_row`` and ``row`` sharing their id in ``columns``."""
    return (f"{name + ': ' if name else ''}data rows {int(first_row)} and {int(row)} have the same id in column(s) "
            f"{list_names(columns)}; ids must be unique{hint}")


def _check_unique(table: RawTable, cols: list[int], hint: str) -> None:
    """The label tuples of the columns ``cols`` tell every data row apart (names the rows)."""
    first: dict[tuple, int] = {}
    columns = [table.column(j) for j in cols]
    for i, key in enumerate(zip(*columns)):
        k = first.setdefault(key, i)
        if k != i:
            raise ReleaseFileError(duplicate_ids(table.name, table.row_numbers[k], table.row_numbers[i],
                                                 [table.header[j] for j in cols], hint))


def read_counts(path, spec: InvariantSpec, value_column: str | None = None, *, integer: bool,
                nonnegative: bool = True, keep=None, id_column: str | None = None, value_columns=None,
                encoding: str = "utf-8") -> CountsTable:
    """Read counts for ``spec`` from a CSV or Parquet file (see the module docstring for the
    layouts and the columns copied).

    ``integer`` requires integer values; ``nonnegative`` rejects negative values (counts; a
    release may hold negative values, so reading a release passes ``False``).  ``keep``
    (``None``: the default rule) and ``id_column`` choose the identifying columns;
    ``value_columns`` (wide tables read back from a release) fixes the count columns;
    ``encoding`` is the text encoding of a CSV file.
    """
    table = read_table(path, encoding=encoding)
    fname, header = table.name, table.header
    if spec.wide:
        if len(header) < 2:
            raise ReleaseFileError(f"{fname}: a wide table needs a row-label column and at least one count column")
        if value_column is not None or keep or id_column is not None:
            raise ReleaseFileError("a wide table (--invariant margins) takes neither --column, --keep nor --id: "
                                   "its first column holds the row labels")
        vcols = list(value_columns) if value_columns is not None else header[1:]
        for c in vcols:
            table.index(c, "count")
        if header[1:] != vcols:
            raise ReleaseFileError(f"{fname}: count columns {list_names(header[1:])} differ from the expected "
                                   f"{list_names(vcols)}")
        row_labels = _labels(table, 0, "a row label")
        _check_unique(table, [0], "")
        cols, total = [], 0
        for j in range(1, len(header)):
            cols.append(parse_counts(table, j, integer=integer, nonnegative=nonnegative, total_before=total))
            total += float(np.abs(cols[-1]).sum()) if not integer else int(np.abs(cols[-1]).sum())
        grid = np.column_stack(cols)
        layout = Layout(spec, vcols, header, [[r] for r in row_labels], None, grid.shape, row_labels, vcols)
        return CountsTable(Path(path), layout, grid.ravel())

    vcol = value_column if value_column is not None else (value_columns[0] if value_columns else header[-1])
    vj = table.index(vcol, "count")
    label_cols = list(spec.columns) if spec.kind in ("groups", "margins") else []
    for c in label_cols:
        table.index(c, "label")
        if c == vcol:
            raise ReleaseFileError(f"{fname}: column {quote_name(c)} cannot be both the counts and a label")
    named = list(dict.fromkeys(list(keep or ()) + ([id_column] if id_column is not None else [])))
    for c in named:
        table.index(c, "--id" if c == id_column else "--keep")
        if c == vcol:
            raise ReleaseFileError(f"{fname}: column {quote_name(c)} cannot be both the counts and an id")
    not_copied: list[str] = []
    if keep is not None or id_column is not None:
        extra = [c for c in named if c not in label_cols]
    else:
        extra = []
        for j, h in enumerate(header):
            if j == vj or h in label_cols:
                continue
            (extra if is_id_column(h, table.column(j)) else not_copied).append(h)
    lj = sorted({table.index(c) for c in label_cols + extra})  # input order
    out_labels = [header[j] for j in lj]
    if id_column is not None:
        idj = table.index(id_column)
        _labels(table, idj, "an id")
        _check_unique(table, [idj], "")
    if extra:
        _check_unique(table, lj, DEFAULT_IDS_HINT)
    vals = parse_counts(table, vj, integer=integer, nonnegative=nonnegative)
    label_rows = table.cells[:, lj].tolist() if lj else [[] for _ in range(table.n_rows)]
    layout = Layout(spec, [vcol], out_labels + [vcol], label_rows, not_copied=not_copied)
    if spec.kind == "groups":
        layout.group_labels = _labels(table, table.index(spec.columns[0]), "a group")
    elif spec.kind == "margins":
        rl = _labels(table, table.index(spec.columns[0]), "a row label")
        cl = _labels(table, table.index(spec.columns[1]), "a column label")
        rows, cols = _first_appearance(rl), _first_appearance(cl)
        ri = {s: i for i, s in enumerate(rows)}
        ci = {s: j for j, s in enumerate(cols)}
        pos = np.array([ri[a] * len(cols) + ci[b] for a, b in zip(rl, cl)], dtype=np.int64)
        _check_unique(table, [table.index(c) for c in spec.columns], "")
        if len(rl) != len(rows) * len(cols):
            raise ReleaseFileError(
                f"{fname}: columns {quote_name(spec.columns[0])} and {quote_name(spec.columns[1])} must list every "
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


def check_release_path(path) -> Path:
    """A release is written as CSV: refuse a Parquet name rather than write CSV under it."""
    p = Path(path)
    if p.suffix.lower() in PARQUET_SUFFIXES:
        raise ReleaseFileError(f"{p.name}: releases are written as CSV; give the output a .csv name")
    return p


def format_values(layout: Layout, y, *, integer: bool) -> str:
    """The release CSV: the values ``y`` (cell order) in the layout ``layout`` (pandas)."""
    import pandas as pd

    y = np.asarray(y)
    if layout.spec.wide:
        grid = y.reshape(layout.shape)
        rows = [lab + [_fmt(v, integer) for v in row] for lab, row in zip(layout.label_rows, grid)]
    else:
        csv_vals = np.empty_like(y)
        if layout.order is None:
            csv_vals[:] = y
        else:
            csv_vals[layout.order] = y
        rows = [lab + [_fmt(v, integer)] for lab, v in zip(layout.label_rows, csv_vals)]
    buf = io.StringIO()
    frame = pd.DataFrame(rows, columns=range(len(layout.out_header)), dtype=object)
    frame.columns = layout.out_header
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def write_values(path, layout: Layout, y, *, integer: bool, overwrite: bool = False) -> Path:
    """Write the values ``y`` (cell order) to ``path`` in the CSV layout ``layout`` (a
    complete file or none; an existing file only with ``overwrite``)."""
    (p,) = write_files([(check_release_path(path), format_values(layout, y, integer=integer))], overwrite=overwrite)
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


def format_metadata(meta: dict) -> str:
    """The sidecar ``meta`` as indented JSON text."""
    return json.dumps(meta, indent=2) + "\n"


def write_metadata(path, meta: dict, *, overwrite: bool = False) -> Path:
    """Write the sidecar ``meta`` as indented JSON (a complete file or none)."""
    (p,) = write_files([(Path(path), format_metadata(meta))], overwrite=overwrite)
    return p


def read_sidecar(path, format_tag: str, required, *, beside: str, wrong_format: str) -> dict:
    """Read a JSON sidecar: it exists, is a JSON object whose ``format`` is ``format_tag``,
    and has every ``required`` entry; one-line errors otherwise (``beside``: what the release
    command writes it beside; ``wrong_format``: the message for another format)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"metadata file not found: {p} (written by privinfer release beside the {beside}; "
                                "or pass --metadata)")
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ReleaseFileError(f"{p.name}: not a JSON metadata file") from None
    if not isinstance(meta, dict) or meta.get("format") != format_tag:
        raise ReleaseFileError(f"{p.name}: {wrong_format}")
    for key in required:
        if key not in meta:
            raise ReleaseFileError(f"{p.name}: metadata has no '{key}' entry")
    return meta


def read_metadata(path) -> dict:
    """Read a sidecar and check its format tag and required entries."""
    p = Path(path)
    meta = read_sidecar(p, METADATA_FORMAT, ("layout", "value_columns", "n", "integer", "mechanism", "invariant"),
                        beside="CSV",
                        wrong_format=f"not a privinfer release metadata file (format {METADATA_FORMAT})")
    if not isinstance(meta["invariant"], dict) or not isinstance(meta["mechanism"], dict):
        raise ReleaseFileError(f"{p.name}: metadata entries 'invariant' and 'mechanism' must be objects")
    return meta
