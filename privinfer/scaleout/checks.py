"""Checks of the count and group columns of a frame, worded as ``privinfer release`` words them.

A problem is reported on one line naming the column and the data row (1-based, in the input's
row order), never the value: ``column 'count', data row 7 is a negative count``.  The rules are
those of the command line's CSV reader, in the same order for each row: blank, not a number,
not finite, not an integer count, negative.  A blank group label is refused the same way.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..workflow import ReleaseFileError

__all__ = ["ReleaseFileError", "check_columns", "first_problem", "raise_problem", "counts_of"]

_VALUE_RULES = (
    "is blank",
    "is not a number",
    "is not a finite number",
    "is not an integer count (the mechanism releases integer counts)",
    "is a negative count",
)


def check_columns(columns, value: str, group: str) -> None:
    """The count and group columns exist and differ (the message lists the columns, no values)."""
    cols = [str(c) for c in columns]
    for name, what in ((value, "count"), (group, "group")):
        if name not in cols:
            raise ReleaseFileError(f"{what} column '{name}' not found (columns: {', '.join(cols)})")
    if value == group:
        raise ReleaseFileError(f"column '{value}' cannot be both the counts and the groups")


def _blank_text(s: pd.Series) -> np.ndarray:
    if s.dtype.kind in "OSU" or isinstance(s.dtype, pd.StringDtype):
        txt = s.astype("string").str.strip()
        return (txt == "").fillna(False).to_numpy(dtype=bool)
    return np.zeros(len(s), dtype=bool)


def _value_codes(s: pd.Series) -> np.ndarray:
    """Per row: 0 if the count is fine, else 1 + the index of the first rule it breaks."""
    n = len(s)
    codes = np.zeros(n, dtype=np.int8)
    if pd.api.types.is_bool_dtype(s.dtype):
        codes[:] = 2  # true/false is not a number
        return codes
    missing = s.isna().to_numpy(dtype=bool) | _blank_text(s)
    if pd.api.types.is_integer_dtype(s.dtype) and not missing.any():
        codes[s.to_numpy() < 0] = 5
        return codes
    num = pd.to_numeric(s.where(~missing), errors="coerce")
    arr = num.to_numpy(dtype=float, na_value=np.nan)
    notnum = np.isnan(arr) & ~missing
    with np.errstate(invalid="ignore"):
        finite = np.isfinite(arr)
        nonfinite = ~finite & ~missing & ~notnum
        nonint = finite & (arr != np.round(arr))
        neg = finite & ~nonint & (arr < 0)
    for code, mask in ((5, neg), (4, nonint), (3, nonfinite), (2, notnum), (1, missing)):
        codes[mask] = code  # lower codes win: they are the earlier rules
    return codes


def first_problem(block: pd.DataFrame, value: str, group: str) -> tuple[int, str] | None:
    """``(row, message tail)`` of the first bad row of ``block`` (0-based within the block), or None."""
    codes = _value_codes(block[value])
    gbad = block[group].isna().to_numpy(dtype=bool) | _blank_text(block[group])
    bad_v = np.flatnonzero(codes)
    bad_g = np.flatnonzero(gbad)
    iv = int(bad_v[0]) if bad_v.size else None
    ig = int(bad_g[0]) if bad_g.size else None
    if iv is None and ig is None:
        return None
    if ig is None or (iv is not None and iv <= ig):
        return iv, f"column '{value}', data row {{row}} {_VALUE_RULES[codes[iv] - 1]}"
    return ig, f"column '{group}', data row {{row}} has a blank group label"


def raise_problem(problem: tuple[int, str], offset: int = 0) -> None:
    """Raise the one-line error of ``problem`` found ``offset`` rows into the input."""
    row, text = problem
    raise ReleaseFileError(text.format(row=offset + row + 1))


def counts_of(block: pd.DataFrame, value: str) -> np.ndarray:
    """The count column of a checked block as int64."""
    s = block[value]
    if pd.api.types.is_integer_dtype(s.dtype) and not s.isna().any():
        return s.to_numpy(dtype=np.int64)
    arr = pd.to_numeric(s).to_numpy(dtype=float)
    if np.any(np.abs(arr) > 2.0**53):
        raise ReleaseFileError(f"column '{value}' holds counts too large to read exactly as floating point numbers; "
                               "store them as integers")
    return arr.astype(np.int64)
