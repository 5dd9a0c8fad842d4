"""Reading tables of counts from CSV and Parquet files, with one-line errors.

:func:`read_table` turns a file into a :class:`RawTable`: its header and its data cells as
text.  pandas reads them -- CSV with its Python parser, which tells a missing field from an
empty one and reports malformed rows; Parquet (recognized by its magic bytes) through
pyarrow, which the ``scale`` extra installs.  :func:`parse_counts` turns one column of text
into numbers.  Every problem raises a :class:`~privinfer.workflow.errors.ReleaseFileError`
naming the file, the data row and the column, never the value in the cell (it may be
confidential).

Hostile input
-------------
* bytes that are not text in the encoding (default UTF-8, with or without a byte-order mark;
  ``encoding="latin-1"`` reads Latin-1 files such as the Census Gazetteer files): the first
  cell holding them is named;
* NUL bytes (binary files), unbalanced or stray quotes, rows with more or fewer fields than
  the header, fields longer than the CSV parser's limit;
* an empty file, a header only, blank or duplicate column names;
* counts that are blank, not numbers (``NaN``, ``inf``, ``1_000`` and text included), not
  integers for an integer mechanism, negative, or beyond :data:`MAX_COUNT` = 2^52 in
  magnitude, and counts whose magnitudes add up beyond :data:`MAX_COUNT`: the published
  values ``t = C x`` are computed in double precision, which is exact for integers below
  2^53, and the factor 2 leaves room for the noise;
* very wide files: the header is checked in linear time and messages name at most a few
  columns, each cut to a readable length.

Data rows are numbered from 1 below the header, counting blank rows (which are skipped), so
"data row k" is line k + 1 of a file without quoted line breaks.  Leading blank lines are
dropped before the header.
"""

from __future__ import annotations

import codecs
import csv
import io
import math
import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path

import numpy as np

from .errors import ReleaseFileError

__all__ = ["RawTable", "read_table", "parse_counts", "holds_numbers", "quote_name", "list_names", "MAX_COUNT",
           "PARQUET_SUFFIXES"]

#: Largest magnitude of a count, and of the sum of the magnitudes of all counts (module docstring).
MAX_COUNT = 2**52
#: File name endings read as Parquet (a file starting with the Parquet magic bytes is too).
PARQUET_SUFFIXES = (".parquet", ".pq")

_PARQUET_MAGIC = b"PAR1"
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_NONFINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.ASCII | re.IGNORECASE)
_UNDECODED = re.compile("[\udc80-\udcff]")  # bytes kept by the surrogateescape error handler
_EXPECTED = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def quote_name(name, limit: int = 40) -> str:
    """``'name'`` for messages: whitespace collapsed, cut to ``limit`` characters."""
    s = re.sub(r"\s+", " ", str(name))
    s = _UNDECODED.sub("?", s)
    return "'" + (s if len(s) <= limit else s[: limit - 3] + "...") + "'"


def list_names(names, limit: int = 8) -> str:
    """Up to ``limit`` quoted names, then how many more."""
    names = list(names)
    shown = ", ".join(quote_name(n) for n in names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


@dataclass
class RawTable:
    """A table read from a file: ``header`` (column names) and ``cells`` (object array of
    stripped text, one row per non-blank data row); ``row_numbers[i]`` is the data row number
    of ``cells[i]`` (module docstring); ``name`` is the file name used in messages."""

    name: str
    header: list[str]
    cells: np.ndarray
    row_numbers: np.ndarray

    @property
    def n_rows(self) -> int:
        return int(self.cells.shape[0])

    def index(self, column: str, what: str = "") -> int:
        """Position of ``column`` in the header (a one-line error if it is not there)."""
        positions = self.__dict__.get("_positions")
        if positions is None:
            positions = self.__dict__["_positions"] = {h: j for j, h in enumerate(self.header)}
        try:
            return positions[column]
        except KeyError:
            raise ReleaseFileError(f"{self.name}: {what + ' ' if what else ''}column {quote_name(column)} not found "
                                   f"(columns: {list_names(self.header)})") from None

    def column(self, j: int) -> list[str]:
        """The cells of column ``j`` (text)."""
        return self.cells[:, j].tolist()

    def where(self, i: int, j: int) -> str:
        """``"FILE: data row K, column 'C'"`` for cell ``(i, j)``."""
        return f"{self.name}: data row {int(self.row_numbers[i])}, column {quote_name(self.header[j])}"


# =============================================================================================
# reading
# =============================================================================================
def read_table(path, *, encoding: str = "utf-8") -> RawTable:
    """Read the CSV or Parquet file ``path`` into a :class:`RawTable` (module docstring)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"file not found: {p}")
    if p.is_dir():
        raise ReleaseFileError(f"{p} is a directory, not a CSV file")
    data = p.read_bytes()
    name = p.name
    if not data.strip():
        raise ReleaseFileError(f"{name}: the file is empty")
    if data.startswith(_PARQUET_MAGIC) or p.suffix.lower() in PARQUET_SUFFIXES:
        header, rows = _parquet_rows(data, name)
    else:
        header, rows = _csv_rows(data, name, encoding)
    return _table(name, header, rows)


def _csv_rows(data: bytes, name: str, encoding: str):
    try:
        enc = codecs.lookup(encoding).name
    except LookupError:
        raise ReleaseFileError(f"unknown text encoding {quote_name(encoding)}") from None
    if enc == "utf-8":
        enc = "utf-8-sig"
    try:
        text, undecoded = data.decode(enc), False
    except UnicodeDecodeError:
        text, undecoded = data.decode(enc, errors="surrogateescape"), True
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = re.sub(r"\A(?:[ \t]*\n)+", "", text)
    rows = _tokenize(text, name)
    if undecoded or "\x00" in text:
        _name_bad_text(rows, name, encoding)
    return list(rows[0]), rows[1:]


def _tokenize(text: str, name: str) -> np.ndarray:
    """CSV records as an object array (str; ``None`` for a field missing from a short row)."""
    import pandas as pd

    try:
        frame = pd.read_csv(io.StringIO(text), header=None, dtype=object, keep_default_na=False,
                            skip_blank_lines=False, engine="python", sep=",", quotechar='"')
    except pd.errors.EmptyDataError:
        raise ReleaseFileError(f"{name}: the file is empty") from None
    except pd.errors.ParserError as exc:
        m = _EXPECTED.search(str(exc))
        if m:
            expected, line, saw = (int(g) for g in m.groups())
            raise ReleaseFileError(f"{name}: data row {line - 1} has {saw} fields, the header has {expected}") from None
        raise ReleaseFileError(f"{name}: not a valid CSV file ({_csv_problem(str(exc))})") from None
    return frame.to_numpy(dtype=object)


def _csv_problem(message: str) -> str:
    """A description of a CSV parser error that holds no text of the file."""
    if "end of data" in message or "EOF" in message:
        return "a quoted field is never closed"
    if "expected after" in message:
        return "a stray quote inside a field"
    if "field limit" in message:
        return f"a field is longer than {csv.field_size_limit()} characters"
    return "malformed quoting or separators"


def _name_bad_text(rows, name: str, encoding: str):
    """Name the first cell holding bytes that are not text in ``encoding``, or a NUL byte."""
    hint = ("not valid UTF-8 text (a Latin-1 file? read it with --encoding latin-1 or save it as UTF-8)"
            if codecs.lookup(encoding).name == "utf-8" else f"not valid {encoding} text")
    for i, row in enumerate(rows):
        for j, cell in enumerate(row):
            if cell is None:
                continue
            if "\x00" in cell:
                what = "holds a NUL byte (a binary file, or UTF-16 text? save it as UTF-8 CSV)"
            elif _UNDECODED.search(cell):
                what = f"is {hint}"
            else:
                continue
            if i == 0:
                raise ReleaseFileError(f"{name}: the header's column {j + 1} {what}")
            raise ReleaseFileError(f"{name}: data row {i}, column {quote_name(rows[0][j]) if j < len(rows[0]) else j + 1} "
                                   f"{what}")
    raise ReleaseFileError(f"{name}: {hint}")  # pragma: no cover - the bad bytes sit in some cell


def _parquet_rows(data: bytes, name: str):
    import pandas as pd

    try:
        import pyarrow  # noqa: F401 - pandas reads Parquet through it
    except ImportError:
        raise ReleaseFileError(f"{name}: reading Parquet files needs pyarrow "
                               "(pip install 'privinfer[scale]')") from None
    import pyarrow.lib

    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except (ValueError, OSError, TypeError, pyarrow.lib.ArrowException):
        raise ReleaseFileError(f"{name}: not a readable Parquet file") from None
    header = [str(c) for c in frame.columns]
    rows = np.empty(frame.shape, dtype=object)
    for j in range(frame.shape[1]):
        rows[:, j] = _parquet_text(frame.iloc[:, j])
    return header, rows


def _parquet_text(series) -> list[str]:
    """A Parquet column as text: integers exactly, floats by ``repr`` (so NaN and inf stay
    recognizable as such), missing values blank, bytes decoded as UTF-8."""
    import pandas as pd

    numeric = series.dtype.kind in "biufc"
    out = []
    for v in series.tolist():
        if v is None or v is pd.NA or v is pd.NaT or (not numeric and isinstance(v, float) and math.isnan(v)):
            out.append("")
        elif isinstance(v, bool):
            out.append(str(v))
        elif isinstance(v, int):
            out.append(str(v))
        elif isinstance(v, float):
            out.append(repr(v))
        elif isinstance(v, bytes):
            out.append(v.decode("utf-8", errors="surrogateescape"))
        else:
            out.append(str(v))
    return out


def _table(name: str, header, rows) -> RawTable:
    if any(h is None for h in header):
        raise ReleaseFileError(f"{name}: the header row has an empty column name")
    header = [str(h).strip() for h in header]
    if any(not h for h in header):
        raise ReleaseFileError(f"{name}: the header row has an empty column name")
    if any("\x00" in h or _UNDECODED.search(h) for h in header):
        raise ReleaseFileError(f"{name}: the header row is not valid text")
    seen: set[str] = set()
    dup: dict[str, None] = {}
    for h in header:
        if h in seen:
            dup[h] = None
        seen.add(h)
    if dup:
        raise ReleaseFileError(f"{name}: duplicate column name(s) {list_names(dup)}")
    width = len(header)
    rows = np.asarray(rows, dtype=object).reshape(-1, width)
    missing = np.frompyfunc(_is_missing, 1, 1)(rows).astype(bool)
    cells = np.frompyfunc(_stripped, 1, 1)(rows)
    blank = (cells == "").all(axis=1) if width else np.ones(rows.shape[0], dtype=bool)
    short = ~blank & missing.any(axis=1)
    if short.any():
        k = int(np.flatnonzero(short)[0])
        raise ReleaseFileError(f"{name}: data row {k + 1} has {width - int(missing[k].sum())} fields, "
                               f"the header has {width}")
    numbers = np.flatnonzero(~blank) + 1
    if numbers.size == 0:
        raise ReleaseFileError(f"{name}: no data rows below the header")
    return RawTable(name, header, cells[~blank], numbers.astype(np.int64))


def _is_missing(c) -> bool:
    return c is None


def _stripped(c) -> str:
    return "" if c is None else str(c).strip()


# =============================================================================================
# numbers
# =============================================================================================
def holds_numbers(cells) -> bool:
    """Whether any cell reads as a number (such a column may hold confidential counts)."""
    return any(_NUMBER.fullmatch(c) or _NONFINITE.fullmatch(c) for c in cells)


def parse_counts(table: RawTable, j: int, *, integer: bool, nonnegative: bool, limit: bool = True,
                 total_before: int | float = 0) -> np.ndarray:
    """Column ``j`` of ``table`` as numbers: ``int64`` when ``integer`` (exact; decimal
    notation such as ``1e3`` or ``12.0`` is accepted when it denotes an integer), else
    ``float64``.  ``nonnegative`` rejects negative values (counts); ``limit`` applies the
    :data:`MAX_COUNT` bounds (module docstring), counting ``total_before`` (the magnitudes of
    the counts in columns read before) into the sum.  Messages name the data row and the column."""
    cells = table.column(j)
    out = np.empty(len(cells), dtype=np.int64 if integer else float)
    total: int | float = total_before
    for i, s in enumerate(cells):
        v = _number(s, table, i, j, integer)
        if nonnegative and v < 0:
            raise ReleaseFileError(f"{table.where(i, j)} is a negative count")
        if limit:
            if abs(v) > MAX_COUNT:
                raise ReleaseFileError(f"{table.where(i, j)} is too large (counts are limited to 2^52 in magnitude)")
            total += abs(v)
            if total > MAX_COUNT:
                raise ReleaseFileError(f"{table.where(i, j)}: the counts up to this row add up to more than 2^52 "
                                       "(sums must stay exact in double precision)")
        out[i] = v
    return out


def _number(s: str, table: RawTable, i: int, j: int, integer: bool):
    if not s:
        raise ReleaseFileError(f"{table.where(i, j)} is blank")
    if _INTEGER.fullmatch(s):
        v = int(s)
        if abs(v) > 2**63 - 1:
            raise ReleaseFileError(f"{table.where(i, j)} is too large (beyond 64-bit integers)")
        return v if integer else float(v)
    if _NUMBER.fullmatch(s):
        if integer:
            try:
                d = Decimal(s)
            except InvalidOperation:  # pragma: no cover - the pattern only lets numbers through
                raise ReleaseFileError(f"{table.where(i, j)} is not a number") from None
            if d.is_zero():
                return 0
            if abs(d.adjusted()) > 30:
                raise ReleaseFileError(f"{table.where(i, j)} is too large (beyond 64-bit integers)"
                                       if d.adjusted() > 0 else
                                       f"{table.where(i, j)} is not an integer count "
                                       "(the mechanism releases integer counts)")
            if d != d.to_integral_value():
                raise ReleaseFileError(f"{table.where(i, j)} is not an integer count "
                                       "(the mechanism releases integer counts)")
            v = int(d)
            if abs(v) > 2**63 - 1:
                raise ReleaseFileError(f"{table.where(i, j)} is too large (beyond 64-bit integers)")
            return v
        v = float(s)
        if not math.isfinite(v):
            raise ReleaseFileError(f"{table.where(i, j)} is too large (not a finite double)")
        return v
    if _NONFINITE.fullmatch(s):
        raise ReleaseFileError(f"{table.where(i, j)} is not a finite number")
    raise ReleaseFileError(f"{table.where(i, j)} is not a number")
