"""Argument checks shared by every module: each raises a clear error naming the problem.

Messages never contain confidential values (only shapes, names and public parameters).
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "check_epsilon",
    "check_delta",
    "check_positive",
    "check_finite_array",
    "check_vector_length",
    "check_integer_array",
]


def _is_real_scalar(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def check_positive(value, name: str) -> float:
    """Return ``float(value)`` if it is a finite real number > 0, else raise ValueError."""
    if not _is_real_scalar(value):
        raise TypeError(f"{name} must be a real number, not {type(value).__name__}")
    v = float(value)
    if not np.isfinite(v) or v <= 0:
        raise ValueError(f"{name} must be a finite number > 0 (got {v!r})")
    return v


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """Privacy-loss parameter: finite and > 0."""
    return check_positive(epsilon, name)


def check_delta(delta, name: str = "delta") -> float:
    """Failure probability of approximate DP: strictly inside (0, 1)."""
    if not _is_real_scalar(delta):
        raise TypeError(f"{name} must be a real number, not {type(delta).__name__}")
    d = float(delta)
    if not (0.0 < d < 1.0):
        raise ValueError(f"{name} must lie strictly between 0 and 1 (got {d!r})")
    return d


def check_finite_array(a, name: str, *, ndim=None) -> np.ndarray:
    """Convert to a float array and reject NaN/inf (the message names only the array)."""
    try:
        arr = np.asarray(a, dtype=float)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be numeric array-like") from exc
    if ndim is not None and arr.ndim not in (ndim if isinstance(ndim, tuple) else (ndim,)):
        raise ValueError(f"{name} must have ndim {ndim}, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains non-finite entries (NaN or inf)")
    return arr


def check_vector_length(a, n: int, name: str, *, allow_stack: bool = True) -> np.ndarray:
    """Finite float array whose last axis has length ``n`` (a vector or a stack of vectors)."""
    arr = check_finite_array(a, name)
    if arr.ndim == 0 or arr.shape[-1] != n or (not allow_stack and arr.ndim != 1):
        want = f"(..., {n})" if allow_stack else f"({n},)"
        raise ValueError(f"{name} must have shape {want}, got {arr.shape}")
    return arr


def check_integer_array(a, name: str) -> np.ndarray:
    """Return an int64 array if every entry is a finite integer value, else raise ValueError."""
    arr = np.asarray(a)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "b":
        raise TypeError(f"{name} must hold integer counts, not booleans")
    farr = check_finite_array(arr, name)
    if not np.all(farr == np.round(farr)):
        raise ValueError(f"{name} must hold integer values (found non-integer entries)")
    if np.any(np.abs(farr) > 2**62):
        raise OverflowError(f"{name} has entries too large for 64-bit integers")
    return farr.astype(np.int64)
