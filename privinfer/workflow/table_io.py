"""Reading tables of counts from CSV and Parquet files, with one-line errors.

:func:`read_table` turns a file into a :class:`RawTable`: its header and its data cells as
text.  pandas reads them -- CSV with its Python parser, which tells a missing field from an
empty one and reports malformed rows; Parquet (recognized by its magic bytes) through
pyarrow, which the ``scale`` extra installs.  :func:`parse_counts` turns one column of text
into numbers with the rules of :func:`check_counts`, which also checks a typed column (a
pandas partition of a larger input, whose rows are named by their global row numbers; see
:mod:`privinfer.scaleout`) the same way.  Every problem raises a :class:`~privinfer.workflow.errors.ReleaseFileError`
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
from decimal import Decimal
from pathlib import Path

import numpy as np

from .errors import ReleaseFileError

__all__ = ["RawTable", "read_table", "parse_counts", "holds_numbers", "id_name", "CodeSurvey", "survey_codes",
           "is_id_column", "quote_name", "list_names", "MAX_COUNT",
           "PARQUET_SUFFIXES", "CountCheck", "check_counts", "cell_text", "first_blank", "blank_text", "cell_where",
           "missing_column", "text_encoding", "undecodable_text"]

#: Largest magnitude of a count, and of the sum of the magnitudes of all counts (module docstring).
MAX_COUNT = 2**52
#: File name endings read as Parquet (a file starting with the Parquet magic bytes is too).
PARQUET_SUFFIXES = (".parquet", ".pq")

_PARQUET_MAGIC = b"PAR1"
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?", re.ASCII)
_INTEGER = re.compile(r"[+-]?\d+", re.ASCII)
_NONFINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.ASCII | re.IGNORECASE)
_DIGITS = re.compile(r"\d+", re.ASCII)
#: Column names (lower case) that say a column holds ids; so does a name ending in ``_id``.
_ID_NAMES = frozenset({"geoid", "fips", "gisjoin", "id"})
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
            raise ReleaseFileError(missing_column(self.name, column, self.header, what)) from None

    def column(self, j: int) -> list[str]:
        """The cells of column ``j`` (text)."""
        return self.cells[:, j].tolist()

    def where(self, i: int, j: int) -> str:
        """``"FILE: data row K, column 'C'"`` for cell ``(i, j)``."""
        return cell_where(self.name, int(self.row_numbers[i]), self.header[j])


def missing_column(name: str | None, column, header, what: str = "") -> str:
    """``"FILE: count column 'C' not found (columns: ...)"`` (no file name: no prefix)."""
    return (f"{name + ': ' if name else ''}{what + ' ' if what else ''}column {quote_name(column)} not found "
            f"(columns: {list_names(header)})")


def cell_where(name: str | None, row: int, column) -> str:
    """``"FILE: data row K, column 'C'"`` (``"data row K, column 'C'"`` without a file name):
    how every message names a cell."""
    return f"{name + ': ' if name else ''}data row {int(row)}, column {quote_name(column)}"


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


def text_encoding(encoding: str) -> str:
    """The codec that reads CSV text in ``encoding`` (UTF-8 with or without a byte-order
    mark for ``utf-8``); a one-line error for an unknown encoding."""
    try:
        enc = codecs.lookup(encoding).name
    except LookupError:
        raise ReleaseFileError(f"unknown text encoding {quote_name(encoding)}") from None
    return "utf-8-sig" if enc == "utf-8" else enc


def undecodable_text(encoding: str) -> str:
    """What is wrong with bytes that do not decode in ``encoding`` (with the fix for UTF-8)."""
    return ("not valid UTF-8 text (a Latin-1 file? read it with --encoding latin-1 or save it as UTF-8)"
            if codecs.lookup(encoding).name == "utf-8" else f"not valid {encoding} text")


def _csv_rows(data: bytes, name: str, encoding: str):
    enc = text_encoding(encoding)
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
    hint = undecodable_text(encoding)
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
        rows[:, j] = cell_text(frame.iloc[:, j])
    return header, rows


def cell_text(series) -> list[str]:
    """A typed column (Parquet, or any pandas Series) as the text of its cells: integers
    exactly, floats by ``repr`` (so NaN and inf stay recognizable as such), missing values
    blank, bytes decoded as UTF-8.  :func:`check_counts` and :func:`first_blank` read a typed
    column as if it were this text."""
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
#: What is wrong with a count, in the order the rules are applied to one cell (code -> message tail).
_TAILS = {
    1: " is blank",
    2: " is too large (beyond 64-bit integers)",
    3: " is not an integer count (the mechanism releases integer counts)",
    4: " is too large (not a finite double)",
    5: " is not a finite number",
    6: " is not a number",
    7: " is a negative count",
    8: " is too large (counts are limited to 2^52 in magnitude)",
}
_SUM_TAIL = ": the counts up to this row add up to more than 2^52 (sums must stay exact in double precision)"
_INT64_MAX = 2**63 - 1


def holds_numbers(cells) -> bool:
    """Whether any cell reads as a number (such a column may hold confidential counts).
    ``cells``: text, or a typed pandas Series read as :func:`cell_text` would write it."""
    import pandas as pd

    if isinstance(cells, pd.Series) and _numeric(cells):
        return len(cells) > 0
    return any(_NUMBER.fullmatch(c) or _NONFINITE.fullmatch(c) for c in _text(cells))


def id_name(name) -> bool:
    """Whether the column name ``name`` says the column holds ids: ``geoid``, ``fips``,
    ``gisjoin``, ``id`` or a name ending in ``_id`` (case-insensitive, surrounding spaces
    ignored)."""
    s = str(name).strip().lower()
    return s in _ID_NAMES or s.endswith("_id")


@dataclass(frozen=True)
class CodeSurvey:
    """What :func:`survey_codes` finds in a column (or a part of one), to tell zero-padded codes.

    digits : every non-blank cell is a string of ASCII digits (and the column is text, not a
        typed numeric column).
    widths : the lengths of the non-blank cells.
    leading_zero : some non-blank cell of two or more digits starts with ``0``.
    """

    digits: bool = True
    widths: frozenset = frozenset()
    leading_zero: bool = False

    def __or__(self, other: "CodeSurvey") -> "CodeSurvey":
        """The survey of two parts of one column together."""
        return CodeSurvey(self.digits and other.digits, self.widths | other.widths,
                          self.leading_zero or other.leading_zero)

    @property
    def zero_padded(self) -> bool:
        """Zero-padded codes (``01001``): digit strings of one width of at least 2, some with a
        leading zero -- a count written as text never looks like that."""
        return self.digits and self.leading_zero and len(self.widths) == 1 and min(self.widths) >= 2


def survey_codes(cells) -> CodeSurvey:
    """The :class:`CodeSurvey` of ``cells`` (text, or a typed pandas Series: a typed numeric
    column holds numbers, never codes -- its leading zeros are gone)."""
    import pandas as pd

    if isinstance(cells, pd.Series) and _numeric(cells):
        return CodeSurvey(digits=len(cells) == 0)
    t = [c for c in _text(cells) if c]
    digits = all(_DIGITS.fullmatch(c) for c in t)
    return CodeSurvey(digits, frozenset(len(c) for c in t) if digits else frozenset(),
                      digits and any(len(c) > 1 and c[0] == "0" for c in t))


def is_id_column(name, cells) -> bool:
    """Whether the default rule keeps column ``name`` (cells ``cells``) as an id of the cells:
    it holds no number, or its name says it holds ids (:func:`id_name`), or it holds
    zero-padded codes (:attr:`CodeSurvey.zero_padded`).  Any other column with a number in it
    may hold confidential counts and is copied only when named (``--id`` / ``--keep``)."""
    return id_name(name) or not holds_numbers(cells) or survey_codes(cells).zero_padded


def blank_text(what: str) -> str:
    """The message tail of a blank label cell (``what``: what every cell needs, e.g. ``a group``)."""
    return f" is blank (every cell needs {what})"


def first_blank(cells) -> int | None:
    """Position of the first blank cell (empty or whitespace text, missing value), or ``None``."""
    import pandas as pd

    if isinstance(cells, pd.Series) and _numeric(cells):
        return None
    hit = np.flatnonzero(np.fromiter((not c for c in _text(cells)), dtype=bool, count=len(cells)))
    return int(hit[0]) if hit.size else None


@dataclass(frozen=True)
class CountCheck:
    """The result of :func:`check_counts`.

    values : the counts (``int64`` for integer counts, else ``float64``); meaningful up to the
        first problem (entries from there on are unspecified).
    problem : ``(position, message tail)`` of the first problem, or ``None``; the message is
        ``where + tail`` with ``where`` naming the cell (:func:`cell_where`).
    magnitude : ``total_before`` plus the magnitudes of the counts before the first problem
        (of every count when there is none).
    """

    values: np.ndarray
    problem: tuple[int, str] | None
    magnitude: int | float

    def raise_problem(self, where) -> None:
        """Raise the :class:`ReleaseFileError` of the problem, if any; ``where(i)`` names cell ``i``."""
        if self.problem is not None:
            i, tail = self.problem
            raise ReleaseFileError(where(i) + tail)


def check_counts(cells, *, integer: bool, nonnegative: bool, limit: bool = True,
                 total_before: int | float = 0) -> CountCheck:
    """Read one column of counts and find its first problem, without raising (vectorized).

    ``cells`` is text (a list or object array of strings, as :func:`read_table` holds them;
    stripped here) or a typed pandas Series (a Parquet column, a frame's column), which reads
    as its :func:`cell_text`.  The rules, applied to each cell in this order: blank; not a
    number (``NaN``, ``inf`` and text such as ``1_000`` included); beyond 64-bit; not an
    integer for ``integer`` (decimal notation such as ``1e3`` or ``12.0`` is accepted when it
    denotes an integer); negative when ``nonnegative``; and with ``limit`` the
    :data:`MAX_COUNT` bounds on each count and on ``total_before`` plus the magnitudes of the
    counts up to it.  The first cell breaking a rule is the problem.  :func:`parse_counts`
    raises it for a file; a partitioned reader passes each part's ``total_before`` and names
    the cell with its global row number.
    """
    import pandas as pd

    s = cells if isinstance(cells, pd.Series) else pd.Series(
        cells if isinstance(cells, np.ndarray) and cells.dtype.kind in "iuf" else list(cells),
        dtype=None if isinstance(cells, np.ndarray) and cells.dtype.kind in "iuf" else object)
    if _numeric(s):
        arr = s.to_numpy()
        values, codes = _from_floats(arr.astype(np.float64), integer) if arr.dtype.kind == "f" else \
            _from_integers(arr, integer)
    else:
        values, codes = _from_text(_text(s), integer)
    if nonnegative:
        codes[(codes == 0) & (values < 0)] = 7
    if limit:
        codes[(codes == 0) & (np.abs(values) > MAX_COUNT)] = 8
    bad = np.flatnonzero(codes)
    stop = int(bad[0]) if bad.size else len(codes)
    mags = np.abs(values[:stop])
    problem = (stop, _TAILS[int(codes[stop])]) if stop < len(codes) else None
    if integer:
        if limit:  # every magnitude <= 2^52: the running sum is exact until it first passes MAX_COUNT
            run = np.cumsum(mags, dtype=np.int64)
            over = np.flatnonzero(run > MAX_COUNT - total_before)
            if over.size:
                return CountCheck(values, (int(over[0]), _SUM_TAIL), total_before + int(run[over[0]]))
            return CountCheck(values, problem, total_before + (int(run[-1]) if stop else 0))
        return CountCheck(values, problem, total_before + int(mags.astype(object).sum()))
    run = np.cumsum(np.concatenate([[float(total_before)], mags]))[1:]  # sequential, as a loop adds
    if limit:
        over = np.flatnonzero(run > MAX_COUNT)
        if over.size:
            return CountCheck(values, (int(over[0]), _SUM_TAIL), float(run[over[0]]))
    return CountCheck(values, problem, float(run[-1]) if stop else float(total_before))


def parse_counts(table: RawTable, j: int, *, integer: bool, nonnegative: bool, limit: bool = True,
                 total_before: int | float = 0) -> np.ndarray:
    """Column ``j`` of ``table`` as numbers: ``int64`` when ``integer`` (exact), else
    ``float64``; the rules of :func:`check_counts`, whose first problem is raised as a
    :class:`ReleaseFileError` naming the data row and the column."""
    check = check_counts(table.cells[:, j], integer=integer, nonnegative=nonnegative, limit=limit,
                         total_before=total_before)
    check.raise_problem(lambda i: table.where(i, j))
    return check.values


def _numeric(s) -> bool:
    """A Series of plain NumPy integers or floats (not booleans, not nullable extension types)."""
    return isinstance(s.dtype, np.dtype) and s.dtype.kind in "iuf"


def _text(cells) -> np.ndarray:
    """Cells as stripped text (object array); typed or missing values as :func:`cell_text`."""
    import pandas as pd

    if isinstance(cells, pd.Series):
        if isinstance(cells.dtype, pd.StringDtype):
            arr = cells.astype(object).where(cells.notna(), "").to_numpy(dtype=object)
        elif cells.dtype == object and pd.api.types.infer_dtype(cells, skipna=False) == "string":
            arr = cells.to_numpy(dtype=object)
        else:
            arr = np.array(cell_text(cells) + [None], dtype=object)[:-1]
    else:
        arr = np.array(list(cells) + [None], dtype=object)[:-1]
        if not all(isinstance(c, str) for c in arr):
            arr = np.array(cell_text(pd.Series(arr, dtype=object)) + [None], dtype=object)[:-1]
    return np.frompyfunc(str.strip, 1, 1)(arr) if arr.size else arr


def _matches(regex, cells) -> np.ndarray:
    return np.fromiter((regex.fullmatch(c) is not None for c in cells), dtype=bool, count=len(cells))


def _from_text(t: np.ndarray, integer: bool):
    n = len(t)
    values = np.zeros(n, dtype=np.int64 if integer else float)
    codes = np.zeros(n, dtype=np.int8)
    isint = _matches(_INTEGER, t)
    idx = np.flatnonzero(isint)
    if idx.size:
        lens = np.fromiter((len(c) for c in t[idx]), dtype=np.int64, count=idx.size)
        short = idx[lens <= 18]  # at most 18 digits: below 10^18 < 2^63
        values[short] = np.fromiter(map(int, t[short]), dtype=np.int64, count=short.size)
        for i in idx[lens > 18]:
            v = int(t[i])
            if abs(v) > _INT64_MAX:
                codes[i] = 2
            else:
                values[i] = v
    for i in np.flatnonzero(~isint):
        codes[i], values[i] = _number_code(t[i], integer)
    return values, codes


def _number_code(s: str, integer: bool):
    """``(code, value)`` of a cell that is not plain integer text (code 0: fine)."""
    if not s:
        return 1, 0
    if _NUMBER.fullmatch(s):
        if integer:
            d = Decimal(s)  # the pattern only lets numbers through
            if d.is_zero():
                return 0, 0
            if abs(d.adjusted()) > 30:
                return (2, 0) if d.adjusted() > 0 else (3, 0)
            if d != d.to_integral_value():
                return 3, 0
            v = int(d)
            return (2, 0) if abs(v) > _INT64_MAX else (0, v)
        v = float(s)
        return (0, v) if math.isfinite(v) else (4, 0.0)
    if _NONFINITE.fullmatch(s):
        return 5, 0
    return 6, 0


def _from_integers(arr: np.ndarray, integer: bool):
    codes = np.zeros(arr.size, dtype=np.int8)
    if arr.dtype.kind == "u" and arr.dtype.itemsize == 8:
        beyond = arr > np.uint64(_INT64_MAX)
    else:
        beyond = arr.astype(np.int64) == np.iinfo(np.int64).min
    codes[beyond] = 2
    values = np.where(beyond, 0, arr).astype(np.int64)
    return (values if integer else values.astype(float)), codes


def _from_floats(v: np.ndarray, integer: bool):
    """A float column read as the ``repr`` of each value (:func:`cell_text`)."""
    codes = np.zeros(v.size, dtype=np.int8)
    finite = np.isfinite(v)
    codes[~finite] = 5  # 'nan', 'inf', '-inf'
    if not integer:
        return np.where(finite, v, 0.0), codes
    w = np.where(finite, v, 0.0)
    codes[finite & (w != np.trunc(w))] = 3
    codes[finite & (np.abs(w) >= 2.0**63)] = 2
    values = np.where(codes == 0, w, 0.0)
    big = np.flatnonzero((codes == 0) & (np.abs(values) > 2.0**53))
    out = values.astype(np.int64)
    for i in big:  # integers beyond 2^53 read from their repr, as the text of the cell says
        out[i] = int(Decimal(repr(float(values[i]))))
    return out, codes
