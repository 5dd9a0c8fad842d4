"""Input checks shared by the reference models (clear errors, never confidential values)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

from privinfer.invariants import Invariant, split_group_totals

__all__ = ["ReleaseLike", "unpack_release", "cell_coords", "is_integer_mechanism", "check_mechanism", "check_release",
           "check_invariant", "resolve_t", "check_shape", "fixes_total", "integer_start", "positive_start"]


@runtime_checkable
class ReleaseLike(Protocol):
    """What the models read from a release (:class:`privinfer.workflow.Release` is one).

    Declared here, not imported, because the workflow sits above the models: released values
    ``y`` in cell order, the ``mechanism``, the ``invariant`` kept (with its values ``t``),
    the table ``shape`` (or ``None``) and one printable ``labels`` entry per cell (its ids).
    """

    y: np.ndarray
    mechanism: Any
    invariant: Any
    t: Any
    shape: Any
    labels: Any


def unpack_release(release, model: str, **given) -> tuple:
    """``(y, mechanism, invariant, t, shape)`` of a :class:`ReleaseLike` first argument.

    ``given`` holds the model's other arguments (mechanism, invariant, t, shape): with a
    release they must all be ``None`` -- the release carries them -- so a conflicting pair
    cannot be passed by mistake.
    """
    extra = sorted(k for k, v in given.items() if v is not None)
    if extra:
        raise TypeError(f"{model}: pass a Release alone, or the release values with {', '.join(extra)}; not both")
    return release.y, release.mechanism, release.invariant, release.t, release.shape


def cell_coords(cell_ids, n: int, dim: str = "cell") -> dict | None:
    """Model ``coords`` ``{dim: ids}`` for ``n`` cells (``None`` when no ids are given); ids must be
    ``n`` distinct labels."""
    if cell_ids is None:
        return None
    ids = [str(i) for i in cell_ids]
    if len(ids) != n:
        raise ValueError(f"cell_ids: {len(ids)} ids for {n} cells")
    if len(set(ids)) != n:
        raise ValueError("cell_ids: duplicate ids (each cell needs its own id)")
    return {dim: ids}


def is_integer_mechanism(mechanism) -> bool:
    """Whether the mechanism releases integers (its declared ``integer``)."""
    return bool(check_mechanism(mechanism).integer)


def check_mechanism(mechanism):
    """The mechanism, if it has the declared protocol (``n``, ``integer``, ``invariant``, ``logp``)."""
    try:
        mechanism.n, mechanism.integer, mechanism.invariant, mechanism.logp  # noqa: B018
    except AttributeError:
        raise TypeError("mechanism must be a privinfer mechanism (with n, integer, invariant, release and logp)") from None
    return mechanism


def check_shape(shape, ndim: int, what: str) -> tuple[int, ...]:
    """A tuple of ``ndim`` positive integer sizes."""
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(f"shape must be a tuple of {ndim} positive integers ({what})") from None
    if len(shape) != ndim or any(isinstance(s, bool) or not isinstance(s, (int, np.integer)) or s < 1
                                 for s in shape):
        raise ValueError(f"shape must be a tuple of {ndim} positive integers ({what}), got {shape}")
    return tuple(int(s) for s in shape)


def check_release(release, mechanism, n: int, *, shape=None) -> np.ndarray:
    """The release as a flat float/int64 vector of length ``n``.

    Accepts a vector of length ``n`` or, when ``shape`` is given, an array of that shape
    (flattened in C order).  Rejects non-finite entries, a mechanism of another length,
    and non-integer values for an integer mechanism.
    """
    y = np.asarray(release)
    if y.dtype.kind not in "biuf":
        raise TypeError("release must be a numeric array")
    if shape is not None and y.shape == tuple(shape):
        y = y.reshape(-1)
    if y.ndim != 1 or y.shape[0] != n:
        want = f"({n},)" if shape is None else f"({n},) or {tuple(shape)}"
        raise ValueError(f"release must have shape {want}, got {y.shape}")
    if not np.all(np.isfinite(y.astype(float))):
        raise ValueError("release contains non-finite entries (NaN or inf)")
    m_n = check_mechanism(mechanism).n
    if int(m_n) != n:
        raise ValueError(f"mechanism acts on {m_n} cells but the release has {n}")
    if is_integer_mechanism(mechanism):
        if np.any(y != np.round(y)):
            raise ValueError("the release of an integer mechanism must hold integers")
        return np.round(y).astype(np.int64)
    return y.astype(float)


def check_invariant(invariant, release) -> Invariant:
    """An :class:`Invariant` on as many cells as the (flattened) release."""
    if not isinstance(invariant, Invariant):
        raise TypeError("invariant must be a privinfer.invariants.Invariant")
    size = np.asarray(release).size
    if invariant.n != size:
        raise ValueError(f"the invariant constrains {invariant.n} cells but the release has {size}")
    return invariant


def resolve_t(invariant: Invariant, t, mechanism=None, release=None) -> np.ndarray:
    """The published invariant values.

    Order: ``t`` if given; else ``invariant.t``; else, when the mechanism keeps an invariant
    whose row space contains every row of ``invariant`` (so ``C y = C x`` for every
    release), ``C y`` read off the release.  Otherwise a ValueError asks for ``t``.
    """
    if t is not None:
        return invariant.with_t(t).t
    if invariant.t is not None:
        return np.asarray(invariant.t)
    inv_m = None if mechanism is None else check_mechanism(mechanism).invariant
    if inv_m is not None and release is not None and inv_m.n == invariant.n:
        C = invariant.matrix
        rows = C.toarray() if sp.issparse(C) else np.asarray(C)
        resid = inv_m.project_null(rows.astype(float))
        if np.max(np.abs(resid)) <= 1e-9 * max(1.0, np.max(np.abs(rows))):
            return invariant.with_t(invariant.of(np.asarray(release, dtype=float))).t
    raise ValueError(
        "no invariant values: pass t (the published totals), build the Invariant with t, or use a "
        "mechanism whose release keeps these totals"
    )


def fixes_total(invariant: Invariant) -> bool:
    """Whether ``C x = t`` determines ``sum(x)`` (the all-ones vector is in C's row space)."""
    ones = np.ones((1, invariant.n))
    return bool(np.max(np.abs(invariant.project_null(ones))) <= 1e-9 * np.sqrt(invariant.n))


def integer_start(release, invariant: Invariant, t) -> np.ndarray | None:
    """A non-negative integer point on the fibre near the release, or None.

    Totals/partitions: in each group, the group total split proportionally to the positive
    part of the release by largest remainders (exact, non-negative).  Other invariants: the
    rounded release if it is non-negative and on the fibre.  ``None`` lets
    :func:`privinfer.pymc.lattice_latent` find a feasible point itself.
    """
    y = np.asarray(release, dtype=float)
    t = np.round(np.asarray(t, dtype=float)).astype(np.int64)
    if invariant.partition is not None and np.all(t >= 0):
        return split_group_totals(invariant.partition.codes, t, y)
    r = np.round(y).astype(np.int64)
    if np.all(r >= 0) and invariant.satisfied_by(r.astype(float), t, atol=0.5):
        return r
    return None



def positive_start(release, invariant: Invariant, t) -> np.ndarray | None:
    """A strictly positive real point on the fibre near the release, or None.

    Totals/partitions with positive totals: each group total split in proportion to the
    release floored at 1 (so every cell is > 0).  Otherwise the release itself (projected
    onto the fibre by :func:`privinfer.pymc.affine_latent`) when it is positive.
    """
    y = np.asarray(release, dtype=float)
    t = np.asarray(t, dtype=float)
    if invariant.partition is not None and np.all(t > 0):
        codes = invariant.partition.codes
        w = np.maximum(y, 1.0)
        sums = np.bincount(codes, weights=w, minlength=len(t))
        return t[codes] * w / sums[codes]
    return y if np.all(y > 0) else None
