"""The :class:`Release` value object: what a curator publishes and an analyst fits.

``make_release`` (curator) checks the confidential counts, computes the published invariant
values ``t = C x``, draws the release and checks ``C y = t`` on it exactly.  ``Release.write``
saves the released values (CSV, with the label columns) and the JSON sidecar;
``read_release`` (analyst) reads both back, rebuilds the invariant and the mechanism, and
checks ``C y = t`` again, so a changed CSV or sidecar is rejected rather than fitted.

The sidecar (format ``privinfer-release/1``)::

    format, layout ("column" | "table"), value_columns, n, integer,
    mechanism {name, parameters} (command-line name and options),
    mechanism_spec (Mechanism.spec(): the mechanism with its invariant, for from_spec),
    guarantee {definition, parameters (epsilon, delta, exact, ...), relation, reference},
    logp_constant_dropped, transparent,
    invariant {spec, t, t_labels}, label_columns, table {shape, rows, columns} (two-way tables),
    sampler {exact, method, sweeps, coupling ...} (lattice mechanisms: how the noise was drawn),
    provenance {privinfer_version, created, source},
    ledger_entry (the id of the release's entry in the curator's privacy-loss ledger, if any)

It never holds the confidential input nor the seed.  The mechanism entry is written and read
by :mod:`privinfer.workflow.codec` only.

Safe files: ``Release.write`` writes the CSV and the sidecar completely or not at all and
refuses to overwrite either unless ``overwrite=True`` (``--force``); see :mod:`.atomic`.
Privacy accounting: ``make_release(..., ledger=...)`` checks the budget before any noise is
drawn and records the release; see :mod:`.ledger`.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..invariants import InfeasibleInvariantError, Invariant, InvariantKind
from . import codec
from . import files as F
from .atomic import refuse_existing, write_files
from .errors import LedgerError
from .files import METADATA_FORMAT, InvariantSpec, Layout, ReleaseFileError
from .ledger import Ledger, as_ledger
from .table_io import MAX_COUNT

__all__ = ["Release", "make_release", "read_release", "release_counts_file", "check_ids"]


def _keeps(invariant: Invariant, y, t, integer: bool) -> bool:
    """``C y = t``: exactly for integer releases, to floating point for real-valued ones."""
    if integer:
        return bool(invariant.satisfied_by(np.asarray(y, dtype=float), t, atol=0.0))
    return bool(invariant.satisfied_by(np.asarray(y, dtype=float), t))


def _same_constraints(a: Invariant, b: Invariant) -> bool:
    """Whether two invariants have the same constraint matrix, row for row."""
    if a.matrix.shape != b.matrix.shape:
        return False
    A, B = sp.csr_matrix(a.matrix), sp.csr_matrix(b.matrix)
    return (A != B).nnz == 0


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def _provenance(source) -> dict:
    # the installed distribution's version (as the Dask sidecar records it): importing the
    # package face for its __version__ would close an import circle through privinfer.workflow
    from importlib.metadata import version

    prov = {"privinfer_version": version("privinfer"), "created": _now()}
    if source is not None:
        prov["source"] = Path(source).name if isinstance(source, Path) else str(source)
    return prov


# =============================================================================================
# the value object
# =============================================================================================
@dataclass(frozen=True, eq=False)
class Release:
    """A published release: released values, the mechanism that made them, the invariant kept.

    Attributes
    ----------
    y
        released values in cell order (int64 for integer mechanisms).
    mechanism
        the mechanism object (transparent ones give the exact ``p(y | x)``).
    invariant
        the invariant ``C x = t`` kept exactly (with its ``t``), or ``None``.  Defaults
        to ``mechanism.invariant``.
    t
        the published invariant values (defaults to ``invariant.t``).
    shape
        table shape when the cells form a table (C order), else ``None``.  Defaults to the
        table shape of a ``margins`` invariant.
    ids
        cell labels (``n`` of them), or ``(row labels, column labels)`` for a two-way table.
    layout
        how the cells sit in a CSV file (set for releases of or read from files).
    mechanism_entry
        the sidecar's mechanism entry, when known (else derived on writing).
    provenance
        privinfer version, creation time, input file name.
    sampler
        the curator's certified sampler (burn-in, TV threshold, ...) as recorded in a
        sidecar; a mechanism rebuilt from a file has not run its chain, so it cannot say.
    ledger_entry
        the id of the release's entry in the curator's privacy-loss ledger.

    Notes
    -----
    Construction checks the lengths, integrality for integer mechanisms, and ``C y = t``
    (exactly for integer releases); a release that breaks its invariant cannot exist.
    """

    y: np.ndarray
    mechanism: Any
    invariant: Invariant | None = None
    t: np.ndarray | None = None
    shape: tuple | None = None
    ids: tuple | None = None
    layout: Layout | None = None
    mechanism_entry: dict | None = None
    provenance: dict = field(default_factory=dict)
    sampler: dict | None = None
    ledger_entry: str | None = None

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731 - frozen dataclass
        m = self.mechanism
        try:
            n, integer = int(m.n), bool(m.integer)
            m.logp  # noqa: B018 - the likelihood is part of the protocol
        except AttributeError:
            raise TypeError("mechanism must be a privinfer mechanism (with n, integer, release and logp)") from None
        y = np.asarray(self.y)
        if y.dtype.kind not in "biuf":
            raise TypeError("released values must be numeric")
        shape = self.shape
        if shape is None and y.ndim > 1:
            shape = y.shape
        y = y.reshape(-1)
        if y.size != n:
            raise ValueError(f"the release has {y.size} values but the mechanism acts on {n} cells")
        if not np.all(np.isfinite(y.astype(float))):
            raise ValueError("the release contains non-finite values (NaN or inf)")
        if integer:
            if np.any(y != np.round(y)):
                raise ValueError("the release of an integer mechanism must hold integers")
            y = np.round(y).astype(np.int64)
        else:
            y = y.astype(float)
        inv = self.invariant if self.invariant is not None else m.invariant
        t = self.t
        if inv is not None:
            if not isinstance(inv, Invariant):
                raise TypeError("invariant must be a privinfer.invariants.Invariant")
            if inv.n != n:
                raise ValueError(f"the invariant constrains {inv.n} cells but the release has {n}")
            if t is None:
                t = inv.t
            if t is None:
                raise ValueError("a release needs the published invariant values t")
            t = np.asarray(t)
            if integer and inv.is_integer:
                if np.any(t != np.round(t)):
                    raise ValueError("the invariant values t of an integer release must be integers")
                t = np.round(t).astype(np.int64)
            else:
                t = t.astype(float)
            inv = inv.with_t(t)
            if not _keeps(inv, y, t, integer and inv.is_integer):
                raise InfeasibleInvariantError("the release does not satisfy its invariant values t")
        elif t is not None:
            raise ValueError("invariant values t given without an invariant")
        if shape is None and inv is not None and inv.kind is InvariantKind.MARGINS:
            shape = tuple(inv.table_shape)
        if shape is not None:
            shape = tuple(int(s) for s in shape)
            if int(np.prod(shape)) != n:
                raise ValueError(f"table shape {shape} does not have {n} cells")
        if self.layout is not None and self.layout.n != n:
            raise ValueError(f"the layout has {self.layout.n} cells, the release {n}")
        check_ids(self.ids, n, shape)
        set_("y", y)
        set_("invariant", inv)
        set_("t", t)
        set_("shape", shape)
        set_("provenance", dict(self.provenance))

    # -- facts ----------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of released cells."""
        return int(self.y.size)

    @property
    def integer(self) -> bool:
        """Whether the release holds integers (the mechanism's ``integer``)."""
        return bool(self.mechanism.integer)

    @property
    def guarantee(self):
        """The mechanism's privacy guarantee."""
        return self.mechanism.guarantee

    @property
    def transparent(self) -> bool:
        """Whether the mechanism's noise law is public (an exact likelihood exists)."""
        return codec.is_transparent(self.mechanism)

    @property
    def mechanism_name(self) -> str:
        """The mechanism's name in the sidecar (``generalized-laplace``, ...), or its class name."""
        if self.mechanism_entry is not None:
            return str(self.mechanism_entry.get("name"))
        return type(self.mechanism).__name__

    @property
    def invariant_text(self) -> str:
        """The invariant in words: the file's ``--invariant`` text, else the invariant's kind."""
        layout = self._layout_or_none()
        if layout is not None:
            return str(layout.spec)
        return "none" if self.invariant is None else self.invariant.kind.value

    @property
    def description(self) -> dict:
        """Public description of the mechanism: guarantee, dropped constant, transparency, sampler."""
        return codec.describe_mechanism(self.mechanism)

    @property
    def labels(self) -> list[str]:
        """One printable label per cell: from the file's label columns or ``ids`` (as the CSV
        would hold them), else ``cell k``."""
        layout = self._layout_or_none()
        if layout is not None:
            return layout.cell_labels()
        if self.ids is not None and len(self.ids) == self.n:
            return [str(i) for i in self.ids]
        return [f"cell {i + 1}" for i in range(self.n)]

    def cell_ids(self) -> tuple[list[str], list[tuple[str, ...]]]:
        """The ids of the cells in cell order, ``(column names, one tuple per cell)``: the
        release file's label columns (see :meth:`Layout.cell_ids`), else ``"cell"`` numbered
        from 1 (or ``ids`` when the release cannot be laid out in a file)."""
        layout = self._layout_or_none()
        if layout is not None:
            return layout.cell_ids()
        return ["cell"], [(lab,) for lab in self.labels]

    # -- files ----------------------------------------------------------------------------
    def _layout_or_none(self) -> Layout | None:
        try:
            return self._layout()
        except ReleaseFileError:
            return None

    def _layout(self) -> Layout:
        """The CSV layout: the file's, or one derived from the invariant, shape and ids."""
        if self.layout is not None:
            return self.layout
        inv, n = self.invariant, self.n
        ids = None
        if self.ids is not None and not (self.shape is not None and len(self.shape) == 2 and len(self.ids) == 2):
            ids = [str(i) for i in self.ids]
            if len(ids) != n:
                raise ReleaseFileError(f"ids: {len(ids)} labels for {n} cells")
        cell = [[i] for i in ids] if ids is not None else [[] for _ in range(n)]
        head = ["cell"] if ids is not None else []
        if inv is None:
            return Layout(InvariantSpec("none"), ["value"], head + ["value"], cell)
        if inv.kind is InvariantKind.TOTAL:
            return Layout(InvariantSpec("total"), ["value"], head + ["value"], cell)
        if inv.kind is InvariantKind.GROUPS:
            groups = [str(v) for v in np.asarray(inv.partition.labels)[inv.partition.codes]]
            if not np.array_equal(np.unique(np.asarray(groups), return_inverse=True)[1].ravel(),
                                  inv.partition.codes):
                raise ReleaseFileError("the group labels do not sort the same way as text: relabel the "
                                       "groups (e.g. zero-padded) to write this release to a file")
            return Layout(InvariantSpec("groups", ("group",)), ["value"], ["group"] + head + ["value"],
                          [[g] + c for g, c in zip(groups, cell)], group_labels=groups)
        if (inv.kind is InvariantKind.MARGINS and len(inv.table_shape) == 2
                and [tuple(k) for k in inv.kept_margins] == [(0,), (1,)]):
            r, c = inv.table_shape
            if self.ids is not None and len(self.ids) == 2:
                rows, cols = [str(s) for s in self.ids[0]], [str(s) for s in self.ids[1]]
            else:
                rows, cols = [f"row {i + 1}" for i in range(r)], [f"column {j + 1}" for j in range(c)]
            if (len(rows), len(cols)) != (r, c) or len(set(rows)) != r or len(set(cols)) != c \
                    or "row" in cols or not all(rows) or not all(cols):
                raise ReleaseFileError(f"ids of a {r} x {c} table: {r} distinct row labels and {c} distinct "
                                       "column labels (not 'row')")
            return Layout(InvariantSpec("margins"), cols, ["row"] + cols, [[s] for s in rows], None, (r, c),
                          rows, cols)
        raise ReleaseFileError(
            f"an invariant of kind '{inv.kind.value}' cannot be recorded in a release file "
            "(total, groups, or the row and column totals of a two-way table)")

    def metadata(self) -> dict:
        """The sidecar (see the module docstring): everything public about the release."""
        layout = self._layout()
        inv = self.invariant
        rebuilt = F.build_invariant(layout)
        if (rebuilt is None) != (inv is None) or (inv is not None and not _same_constraints(rebuilt, inv)):
            raise ReleaseFileError("the release's invariant cannot be recorded in a release file "
                                   f"as '{layout.spec}'")
        if self.mechanism_entry is not None:
            entry, spec = codec.mechanism_to_json(self.mechanism, self.mechanism_entry.get("name"),
                                                  self.mechanism_entry.get("parameters"))
        else:
            entry, spec = codec.mechanism_to_json(self.mechanism)
        desc = self.description
        meta = {
            "format": METADATA_FORMAT,
            "layout": layout.layout_name,
            "value_columns": list(layout.value_columns),
            "n": self.n,
            "integer": self.integer,
            "mechanism": entry,
            "mechanism_spec": spec,
            "guarantee": desc["guarantee"],
            "logp_constant_dropped": desc["logp_constant_dropped"],
            "transparent": desc["transparent"],
            "invariant": {"spec": str(layout.spec)},
            "label_columns": layout.label_columns,
        }
        if layout.shape is not None:
            meta["table"] = {"shape": list(layout.shape), "rows": layout.row_labels, "columns": layout.col_labels}
        if inv is not None:
            meta["invariant"]["t"] = [int(v) for v in self.t] if self.integer else [float(v) for v in self.t]
            meta["invariant"]["t_labels"] = F.invariant_labels(layout, inv)
        sampler = desc.get("sampler", self.sampler)
        if sampler is not None:
            meta["sampler"] = sampler
        if self.provenance:
            meta["provenance"] = dict(self.provenance)
        if self.ledger_entry is not None:
            meta["ledger_entry"] = str(self.ledger_entry)
        return F.jsonable(meta)

    def write(self, path, metadata=None, *, overwrite: bool = False) -> tuple[Path, Path]:
        """Write the released values to the CSV ``path`` and the sidecar to ``metadata``
        (default: ``path`` with ``.json``).  Returns both paths.

        Both files are built in memory first and written completely or not at all (temporary
        files moved into place, :mod:`.atomic`), so a release that cannot be recorded, or an
        interrupted run, leaves no partial file.  An existing CSV or sidecar is refused with
        :class:`~privinfer.workflow.errors.OutputExistsError` unless ``overwrite``."""
        meta = self.metadata()
        csv_path = F.check_release_path(path)
        meta_path = Path(metadata) if metadata is not None else F.metadata_path_for(csv_path)
        if csv_path.resolve() == meta_path.resolve():
            raise ReleaseFileError("the release CSV and its metadata would be the same file")
        refuse_existing([csv_path, meta_path], overwrite=overwrite)
        text = F.format_values(self._layout(), self.y, integer=self.integer)
        write_files([(csv_path, text), (meta_path, F.format_metadata(meta))], overwrite=overwrite)
        return csv_path, meta_path


# =============================================================================================
# curator
# =============================================================================================
def make_release(x, mechanism, *, invariant=None, ids=None, rng=None, source=None, ledger=None, budget=None,
                 budget_scope=None, output=None, **options) -> Release:
    """Release the confidential counts ``x`` with ``mechanism`` and return the :class:`Release`.

    ``mechanism`` is a mechanism object (its own invariant is kept: ``invariant`` must be
    ``None`` or that same invariant), or a command-line name (``"generalized-laplace"``) with
    its parameters as keyword ``options`` (``epsilon=0.5``) and the ``invariant`` to keep.
    ``x`` is a vector or a table (its shape is kept); integer mechanisms need integer counts,
    and every count, and the sum of their magnitudes, must stay within 2^52 (``t = C x`` is
    computed in double precision).  ``t = C x`` is published exactly and checked on the
    release (an :class:`~privinfer.invariants.InfeasibleInvariantError` if it fails).  ``rng``:
    a seed or Generator for a reproducible release; ``None`` draws fresh OS entropy.
    ``source`` (e.g. the input file name) goes into the provenance; neither ``x`` nor the seed
    is recorded.

    Privacy accounting (:mod:`privinfer.workflow.ledger`): with a ``ledger`` (a
    :class:`~privinfer.workflow.ledger.Ledger` or a path), the release is checked against
    ``budget`` (a typed guarantee or text such as ``"epsilon=2"``; default: the budget
    recorded in the ledger) over ``budget_scope`` (``"input"``, the default, or ``"ledger"``)
    *before any noise is drawn* -- a :class:`~privinfer.workflow.errors.BudgetExceededError`
    leaves the ledger unchanged -- and then recorded with the keyed fingerprint of ``x``, the
    mechanism and its guarantee (and ``source``, ``output``); the entry's id is the release's
    ``ledger_entry``.
    """
    arr = np.asarray(x)
    if arr.dtype.kind not in "biuf":
        raise TypeError("x must be a numeric array of counts")
    shape = arr.shape if arr.ndim > 1 else None
    flat = arr.reshape(-1)
    entry = None
    if isinstance(mechanism, str):
        mech = codec.build_mechanism(mechanism, invariant, flat.size, **options)
        entry = codec.mechanism_to_json(mech, mechanism, options)[0]
    else:
        if options:
            raise TypeError(f"options {', '.join(sorted(options))} apply to a mechanism name, not a mechanism object")
        mech = mechanism
        if invariant is not None and (mech.invariant is None or not _same_constraints(invariant, mech.invariant)):
            raise ValueError("make_release keeps the mechanism's own invariant: build the mechanism on it "
                             "(or pass a mechanism name with invariant=)")
    if flat.size != mech.n:
        raise ValueError(f"x has {flat.size} cells but the mechanism acts on {mech.n}")
    check_ids(ids, flat.size, shape if shape is not None else getattr(mech.invariant, "table_shape", None))
    as_float = flat.astype(float)
    if not np.all(np.isfinite(as_float)):
        raise ValueError("x contains non-finite entries (NaN or inf)")
    if np.any(np.abs(as_float) > MAX_COUNT) or float(np.abs(as_float).sum()) > MAX_COUNT:
        raise ValueError("x is too large: every count, and the sum of their magnitudes, must stay within 2^52 "
                         "(the invariant values are computed in double precision)")
    if mech.integer:
        if np.any(as_float != np.round(as_float)):
            raise ValueError("x must hold integer counts for an integer mechanism")
        flat = np.round(as_float).astype(np.int64) if flat.dtype.kind == "f" else flat.astype(np.int64)
    if budget is not None and ledger is None:
        raise LedgerError("a budget needs a ledger to record the releases against it (ledger=PATH)")
    inv = mech.invariant
    t = None
    if inv is not None:
        t = inv.of(flat.astype(float))
        if mech.integer and inv.is_integer:
            t = np.round(t).astype(np.int64)
        inv = inv.with_t(t)
    ledger_entry = None
    if ledger is None:
        y = mech.release(flat, rng=rng)
        _check_kept(inv, y, t, mech)
    else:
        book = as_ledger(ledger)
        fingerprint = book.fingerprint(flat)
        with book.locked():
            guarantee = mech.guarantee
            book.check(fingerprint, guarantee, budget=budget, scope=budget_scope)  # before any noise is drawn
            y = mech.release(flat, rng=rng)
            _check_kept(inv, y, t, mech)
            try:
                spec = codec.mechanism_to_json(mech)[1]
            except ReleaseFileError:
                spec = None
            recorded = book.record(fingerprint, guarantee,
                                   mechanism=entry or {"name": getattr(mech, "spec_name", type(mech).__name__),
                                                               "parameters": {}},
                                   mechanism_spec=spec, source=None if source is None else str(source),
                                   output=None if output is None else Path(output).name, cells=int(flat.size),
                                   budget=budget, scope=budget_scope)
            ledger_entry = recorded.id
    return Release(y, mech, inv, t, shape=shape, ids=ids, mechanism_entry=entry, provenance=_provenance(source),
                   ledger_entry=ledger_entry)


def _first_repeat(labels) -> tuple[int, int] | None:
    seen = {}
    for k, v in enumerate(labels):
        if v in seen:
            return seen[v], k
        seen[v] = k
    return None


def check_ids(ids, n: int, shape=None) -> None:
    """Cell ids must identify the cells: ``n`` distinct, non-blank labels, or for a two-way
    table of ``shape`` (r, c) the pair ``(r row labels, c column labels)``, each distinct.
    One-line ``ValueError`` naming positions, never the labels (they may be confidential)."""
    if ids is None:
        return
    if isinstance(ids, (str, bytes)):
        raise ValueError("ids: a sequence of cell labels, not one string")
    ids = list(ids)
    parts = [("cell", ids)]
    if (shape is not None and len(shape) == 2 and len(ids) == 2 and n != 2
            and all(not isinstance(p, (str, bytes)) and hasattr(p, "__len__") for p in ids)):
        if (len(ids[0]), len(ids[1])) != tuple(shape):
            raise ValueError(f"ids of a {shape[0]} x {shape[1]} table: {shape[0]} row labels and {shape[1]} "
                             f"column labels, not {len(ids[0])} and {len(ids[1])}")
        parts = [("row", list(ids[0])), ("column", list(ids[1]))]
    elif len(ids) != n:
        raise ValueError(f"ids: {len(ids)} labels for {n} cells")
    for what, labels in parts:
        text = [str(v).strip() for v in labels]
        blank = next((k for k, v in enumerate(text) if not v), None)
        if blank is not None:
            raise ValueError(f"ids: the label of {what} {blank + 1} is blank")
        rep = _first_repeat(text)
        if rep is not None:
            raise ValueError(f"ids: {what}s {rep[0] + 1} and {rep[1] + 1} have the same label (ids must be unique)")


def _check_kept(inv, y, t, mech) -> None:
    """``C y = t`` on every release (exactly for integer releases)."""
    if inv is not None and not _keeps(inv, y, t, mech.integer and inv.is_integer):
        raise InfeasibleInvariantError("internal error: the release does not keep the invariant")


def release_counts_file(input, output, *, invariant="total", mechanism="generalized-laplace", column=None,
                        keep=None, id_column=None, metadata=None, rng=None, force=False, ledger=True, budget=None,
                        budget_scope=None, encoding="utf-8", **options) -> tuple[Release, Path, Path]:
    """Read counts from the CSV or Parquet file ``input``, release them, and write the release
    to the CSV ``output`` and its sidecar (the job of ``privinfer release``).

    ``invariant`` is the ``--invariant`` text (``total``, ``groups:COLUMN``, ``margins``,
    ``margins:ROW,COL``, ``none``), ``mechanism`` a command-line name with its ``options``.
    ``keep`` / ``id_column`` choose the columns copied to the release (default: every column
    without numbers; :mod:`.files`).  Existing outputs are refused unless ``force``, before
    anything is read.  ``ledger``: ``True`` for the ledger beside the output
    (:meth:`Ledger.beside`), a path or :class:`Ledger`, or ``None`` for none; ``budget`` and
    ``budget_scope`` as in :func:`make_release`.  Returns the release and the two paths written.
    """
    spec = InvariantSpec.parse(invariant)
    if mechanism not in codec.MECHANISMS:
        raise ReleaseFileError(f"unknown mechanism '{mechanism}' (choose from {', '.join(codec.MECHANISMS)})")
    info = codec.MECHANISMS[mechanism]
    if info.invariant == "none" and spec.kind != "none":
        raise ReleaseFileError(f"mechanism {mechanism} keeps no invariant: pass --invariant none")
    if info.invariant == "required" and spec.kind == "none":
        raise ReleaseFileError(f"mechanism {mechanism} keeps an invariant: choose --invariant total, "
                               "groups:COLUMN, margins or margins:ROW,COL")
    src, dst = Path(input), F.check_release_path(output)
    meta_path = Path(metadata) if metadata else F.metadata_path_for(dst)
    if dst.resolve() == src.resolve() or meta_path.resolve() == src.resolve():
        raise ReleaseFileError("the output would overwrite the input file")
    if dst.resolve() == meta_path.resolve():
        raise ReleaseFileError("the release CSV and its metadata would be the same file")
    book = Ledger.beside(dst) if ledger is True else (None if ledger in (None, False) else as_ledger(ledger))
    if book is not None and book.path.resolve() in (dst.resolve(), meta_path.resolve(), src.resolve()):
        raise ReleaseFileError("the ledger would overwrite the input or an output file")
    refuse_existing([dst, meta_path], overwrite=force)
    table = F.read_counts(src, spec, column, integer=info.integer, keep=keep, id_column=id_column,
                          encoding=encoding)
    inv = F.build_invariant(table.layout)
    rel = make_release(table.values, mechanism, invariant=inv, rng=rng, source=src.name, ledger=book, budget=budget,
                       budget_scope=budget_scope, output=dst, **options)
    rel = replace(rel, shape=table.layout.shape, layout=table.layout)
    csv_path, meta_path = rel.write(dst, meta_path, overwrite=force)
    return rel, csv_path, meta_path


# =============================================================================================
# analyst
# =============================================================================================
def read_release(path, metadata=None) -> Release:
    """Read a release CSV and its sidecar (default ``path`` with ``.json``); rebuild the
    invariant and the mechanism; check ``C y = t`` exactly (integer releases) or to floating
    point.  A changed CSV or sidecar raises a one-line error naming the problem."""
    meta = F.read_metadata(metadata if metadata is not None else F.metadata_path_for(path))
    spec = InvariantSpec.parse(meta["invariant"].get("spec", ""))
    integer = bool(meta["integer"])
    vcols = meta["value_columns"]
    if not isinstance(vcols, list) or not all(isinstance(c, str) for c in vcols):
        raise ReleaseFileError("metadata: 'value_columns' must be a list of column names")
    if meta["layout"] == "table":
        table = F.read_counts(path, spec, integer=integer, nonnegative=False, value_columns=vcols)
    else:
        if not vcols:
            raise ReleaseFileError("metadata lists no value column")
        keep = [c for c in meta.get("label_columns", []) if c not in spec.columns]
        table = F.read_counts(path, spec, vcols[0], integer=integer, nonnegative=False, keep=keep)
    name = Path(path).name
    if table.n != int(meta["n"]):
        raise ReleaseFileError(f"{name}: {table.n} released cells, the metadata says {meta['n']}")
    if "table" in meta and table.shape is not None and list(table.shape) != list(meta["table"]["shape"]):
        raise ReleaseFileError(f"{name}: table shape {table.shape} differs from the metadata's")
    inv = F.build_invariant(table.layout)
    t = None
    if inv is not None:
        if "t" not in meta["invariant"]:
            raise ReleaseFileError("metadata has no invariant values t")
        try:
            t = np.asarray(meta["invariant"]["t"], dtype=np.int64 if integer else float)
        except (TypeError, ValueError):
            raise ReleaseFileError("metadata: the invariant values t must be numbers") from None
        if t.shape != (inv.m,):
            raise ReleaseFileError(f"metadata has {t.size} invariant values, the release needs {inv.m}")
        inv = inv.with_t(t)
    y = table.values.astype(np.int64) if integer else table.values
    if inv is not None and not _keeps(inv, y, t, integer):
        raise InfeasibleInvariantError(
            "the release does not satisfy the invariant values t recorded in its metadata "
            "(the CSV or the metadata was changed)"
        )
    mech = codec.mechanism_from_json(meta["mechanism"], inv, table.n, meta.get("mechanism_spec"))
    if bool(mech.integer) != integer:
        raise ReleaseFileError("metadata: 'integer' does not match the mechanism")
    prov = meta.get("provenance", {})
    sampler = meta.get("sampler")
    entry_id = meta.get("ledger_entry")
    return Release(y, mech, inv, t, shape=table.shape, layout=table.layout, mechanism_entry=meta["mechanism"],
                   provenance=prov if isinstance(prov, dict) else {},
                   sampler=sampler if isinstance(sampler, dict) else None,
                   ledger_entry=str(entry_id) if entry_id is not None else None)
