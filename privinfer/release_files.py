"""Counts in CSV files, released CSV files and their metadata sidecar.

These are the files of ``privinfer release`` and ``privinfer fit``.

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

Metadata sidecar (JSON, :func:`release_metadata`)
-------------------------------------------------
What an analyst needs to write the exact likelihood: the mechanism and its parameters, its
privacy guarantee, the invariant and its published values ``t``, and the layout of the
release.  It never holds the confidential input nor the random seed (the seed would let
anyone regenerate the noise and subtract it).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import invariants as I
from .invariants import InfeasibleInvariantError, Invariant

__all__ = [
    "ReleaseFileError",
    "InvariantSpec",
    "CountsTable",
    "MECHANISMS",
    "read_counts",
    "build_invariant",
    "build_mechanism",
    "write_release",
    "release_metadata",
    "write_metadata",
    "read_metadata",
    "metadata_path_for",
    "Release",
    "read_release",
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
# reading counts
# =============================================================================================
@dataclass
class CountsTable:
    """Counts read from a CSV file.

    ``values`` (length n) are in *cell order*: CSV row order for the column layout, C order of
    the (row label, column label) grid for two-way tables (``shape`` = (rows, columns); row and
    column categories in order of first appearance).  ``order[k]`` is the CSV position of cell
    k (column layout) so ``values = csv_values[order]``.
    """

    path: Path
    spec: InvariantSpec
    value_columns: list[str]
    values: np.ndarray
    out_header: list[str]
    label_rows: list[list[str]]  # per CSV data row, the kept label cells (out_header minus values)
    order: np.ndarray | None = None
    shape: tuple[int, int] | None = None
    row_labels: list[str] = field(default_factory=list)
    col_labels: list[str] = field(default_factory=list)
    group_labels: list[str] = field(default_factory=list)  # per cell, for groups

    @property
    def n(self) -> int:
        return int(self.values.size)


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
    """Read counts for ``spec`` (see module docstring for the layouts).

    ``integer`` requires integer values; ``nonnegative`` rejects negative values (counts; a
    release may hold negative values, so :func:`read_release` passes ``False``).
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
        return CountsTable(Path(path), spec, vcols, grid.ravel(), header, [[r[0]] for r in body],
                           None, grid.shape, row_labels, vcols)

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
    table = CountsTable(Path(path), spec, [vcol], vals, out_labels + [vcol],
                        [[r[j] for j in lj] for r in body])
    if spec.kind == "groups":
        g = [r[header.index(spec.columns[0])] for r in body]
        if any(not s for s in g):
            raise ReleaseFileError(f"{fname}: column '{spec.columns[0]}' has a blank group label")
        table.group_labels = g
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
        table.values = vals[order]
        table.order = order
        table.shape = (len(rows), len(cols))
        table.row_labels, table.col_labels = rows, cols
    return table


def build_invariant(table: CountsTable) -> Invariant | None:
    """The invariant of ``table.spec`` on the cells of ``table`` (no ``t``)."""
    spec = table.spec
    if spec.kind == "none":
        return None
    if spec.kind == "total":
        return I.total(table.n)
    if spec.kind == "groups":
        return I.groups(np.asarray(table.group_labels, dtype=object).astype(str))
    return I.margins(table.shape, [(0,), (1,)])


def invariant_labels(table: CountsTable, inv: Invariant | None) -> list[str]:
    """Names of the rows of C (what each published value of t totals)."""
    if inv is None:
        return []
    spec = table.spec
    if spec.kind == "total":
        return ["total"]
    if spec.kind == "groups":
        return [f"{spec.columns[0]}={g}" for g in inv.group_labels]
    return [f"row={r}" for r in table.row_labels] + [f"column={c}" for c in table.col_labels]


# =============================================================================================
# mechanisms
# =============================================================================================
@dataclass(frozen=True)
class MechanismInfo:
    """What a CLI mechanism name needs: integer input, an invariant, and which parameters."""

    integer: bool
    invariant: str  # "required" | "none"
    params: str     # human description of the parameters
    transparent: bool = True


MECHANISMS = {
    "generalized-laplace": MechanismInfo(True, "required", "--epsilon [--norm l1|l2] [--sensitivity]"),
    "generalized-gaussian": MechanismInfo(True, "required", "--sigma [--sensitivity]"),
    "projected-gaussian": MechanismInfo(False, "required", "--epsilon --delta [--sensitivity], or --sigma"),
    "extended-gaussian": MechanismInfo(False, "required", "--epsilon --delta [--sensitivity], or --sigma"),
    "projected-laplace": MechanismInfo(False, "required", "--epsilon [--sensitivity]"),
    "extended-laplace": MechanismInfo(False, "required", "--epsilon [--sensitivity]"),
    "double-geometric": MechanismInfo(True, "none", "--epsilon [--sensitivity]"),
    "discrete-gaussian": MechanismInfo(True, "none", "--sigma [--sensitivity]"),
    "topdown-baseline": MechanismInfo(True, "required", "--sigma (discrete Gaussian) or --epsilon (double geometric)",
                                      transparent=False),
}


def _need(name, **given):
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise ReleaseFileError(
            f"mechanism {name} needs {', '.join('--' + m for m in missing)} (parameters: {MECHANISMS[name].params})"
        )


def _forbid(name, **given):
    extra = [k for k, v in given.items() if v is not None]
    if extra:
        raise ReleaseFileError(
            f"mechanism {name} does not take {', '.join('--' + e for e in extra)} (parameters: {MECHANISMS[name].params})"
        )


def build_mechanism(name: str, invariant: Invariant | None, n: int, *, epsilon=None, delta=None, sigma=None,
                    sensitivity=None, norm=None):
    """The mechanism called ``name`` (a key of :data:`MECHANISMS`) on ``n`` cells.

    ``sensitivity`` defaults to 1 (adding or removing one record changes one count by 1).
    """
    from . import mechanisms as M

    if name not in MECHANISMS:
        raise ReleaseFileError(f"unknown mechanism '{name}' (choose from {', '.join(MECHANISMS)})")
    info = MECHANISMS[name]
    if info.invariant == "required" and invariant is None:
        raise ReleaseFileError(f"mechanism {name} keeps an invariant: choose --invariant total, groups:COLUMN or margins")
    if info.invariant == "none" and invariant is not None:
        raise ReleaseFileError(
            f"mechanism {name} adds noise to every cell and keeps no invariant: use --invariant none "
            "(or generalized-laplace / generalized-gaussian to keep one)"
        )
    if norm is not None and name != "generalized-laplace":
        raise ReleaseFileError("--norm applies to generalized-laplace only")
    sens = 1.0 if sensitivity is None else sensitivity
    if name == "generalized-laplace":
        _need(name, epsilon=epsilon)
        _forbid(name, delta=delta, sigma=sigma)
        return M.GeneralizedLaplace(invariant, epsilon, norm=norm or "l1", sensitivity=sens)
    if name == "generalized-gaussian":
        _need(name, sigma=sigma)
        _forbid(name, epsilon=epsilon, delta=delta)
        return M.GeneralizedGaussian(invariant, sigma, sensitivity=sens)
    if name in ("projected-gaussian", "extended-gaussian"):
        cls = M.ProjectedGaussian if name == "projected-gaussian" else M.ExtendedGaussian
        if sigma is not None:
            _forbid(name, epsilon=epsilon, delta=delta, sensitivity=sensitivity)
            return cls(invariant, sigma=sigma)
        _need(name, epsilon=epsilon, delta=delta)
        return cls(invariant, epsilon, delta, sens)
    if name in ("projected-laplace", "extended-laplace"):
        cls = M.ProjectedLaplace if name == "projected-laplace" else M.ExtendedLaplace
        _need(name, epsilon=epsilon)
        _forbid(name, delta=delta, sigma=sigma)
        return cls(invariant, epsilon, sens)
    if name == "double-geometric":
        _need(name, epsilon=epsilon)
        _forbid(name, delta=delta, sigma=sigma)
        return M.DoubleGeometric(n, epsilon, sensitivity=_integer_sensitivity(sens))
    if name == "discrete-gaussian":
        _need(name, sigma=sigma)
        _forbid(name, epsilon=epsilon, delta=delta)
        return M.DiscreteGaussian(n, sigma, sensitivity=sens)
    # topdown-baseline
    _forbid(name, delta=delta)
    if (epsilon is None) == (sigma is None):
        raise ReleaseFileError("mechanism topdown-baseline needs exactly one of --sigma and --epsilon")
    if sigma is not None:
        return M.TopDownBaseline(invariant, "discrete_gaussian", sigma, sensitivity=sens)
    from .mechanisms.discrete import as_rational

    scale = as_rational(_integer_sensitivity(sens), "sensitivity") / as_rational(epsilon, "epsilon")
    return M.TopDownBaseline(invariant, "double_geometric", scale, sensitivity=_integer_sensitivity(sens))


def _integer_sensitivity(s):
    if s != round(s) or s < 1:
        raise ReleaseFileError("the sensitivity of an integer mechanism must be a positive integer")
    return int(round(s))


# =============================================================================================
# writing the release
# =============================================================================================
def _fmt(v, integer: bool) -> str:
    return str(int(v)) if integer else repr(float(v))


def write_release(path, table: CountsTable, y, *, integer: bool) -> Path:
    """Write the released values ``y`` (cell order) in the layout of ``table``."""
    y = np.asarray(y)
    p = Path(path)
    if p.parent and not p.parent.exists():
        p.parent.mkdir(parents=True, exist_ok=True)
    with open(p, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(table.out_header)
        if table.spec.wide:
            grid = y.reshape(table.shape)
            for lab, row in zip(table.label_rows, grid):
                w.writerow(lab + [_fmt(v, integer) for v in row])
        else:
            csv_vals = np.empty_like(y)
            if table.order is None:
                csv_vals[:] = y
            else:
                csv_vals[table.order] = y
            for lab, v in zip(table.label_rows, csv_vals):
                w.writerow(lab + [_fmt(v, integer)])
    return p


def metadata_path_for(csv_path) -> Path:
    """Default sidecar of a release CSV: same name with ``.json`` (``release.csv`` -> ``release.json``)."""
    return Path(csv_path).with_suffix(".json")


def _jsonable(v):
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating, float)):
        return float(v)
    if isinstance(v, np.ndarray):
        return _jsonable(v.tolist())
    if v is None or isinstance(v, (int, str, bool)):
        return v
    return str(v)


def release_metadata(table: CountsTable, mechanism, mechanism_name: str, params: dict,
                     invariant: Invariant | None, t) -> dict:
    """The sidecar: everything public about the release (no input values, no seed)."""
    g = mechanism.guarantee
    meta = {
        "format": METADATA_FORMAT,
        "layout": "table" if table.spec.wide else "column",
        "value_columns": list(table.value_columns),
        "n": table.n,
        "integer": bool(getattr(mechanism, "integer", False)),
        "mechanism": {"name": mechanism_name,
                      "parameters": {k: v for k, v in params.items() if v is not None}},
        "guarantee": {"definition": g.definition, "parameters": dict(g.parameters),
                      "relation": g.relation, "reference": g.reference},
        "logp_constant_dropped": getattr(mechanism, "logp_constant_dropped", ""),
        "transparent": MECHANISMS[mechanism_name].transparent,
        "invariant": {"spec": str(table.spec)},
        "label_columns": [] if table.spec.wide else table.out_header[:-1],
    }
    if table.shape is not None:
        meta["table"] = {"shape": list(table.shape), "rows": table.row_labels, "columns": table.col_labels}
    if invariant is not None:
        tv = np.asarray(t)
        meta["invariant"]["t"] = [int(v) for v in tv] if meta["integer"] else [float(v) for v in tv]
        meta["invariant"]["t_labels"] = invariant_labels(table, invariant)
    cert = getattr(mechanism, "certificate", None)
    if cert is not None:
        meta["sampler"] = {"burn_in_sweeps": int(cert.burn_in), "tv_threshold": float(cert.threshold),
                           "lag": int(cert.lag), "coupling_replicates": int(cert.n_replicates)}
    return _jsonable(meta)


def write_metadata(path, meta: dict) -> Path:
    p = Path(path)
    p.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return p


def read_metadata(path) -> dict:
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
    return meta


# =============================================================================================
# reading a release back
# =============================================================================================
@dataclass
class Release:
    """A release read back with its metadata: ``y`` in cell order, the invariant with its
    published ``t``, and the rebuilt mechanism (its likelihood is exact)."""

    table: CountsTable
    y: np.ndarray
    invariant: Invariant | None
    t: np.ndarray | None
    mechanism: object
    metadata: dict


def read_release(csv_path, metadata_path=None) -> Release:
    """Read a release CSV and its sidecar; rebuild mechanism and invariant; check ``C y = t``."""
    meta = read_metadata(metadata_path if metadata_path is not None else metadata_path_for(csv_path))
    spec = InvariantSpec.parse(meta["invariant"].get("spec", ""))
    integer = bool(meta["integer"])
    vcols = meta["value_columns"]
    if meta["layout"] == "table":
        table = read_counts(csv_path, spec, integer=integer, nonnegative=False, value_columns=vcols)
    else:
        if not vcols:
            raise ReleaseFileError("metadata lists no value column")
        keep = [c for c in meta.get("label_columns", []) if c not in spec.columns]
        table = read_counts(csv_path, spec, vcols[0], integer=integer, nonnegative=False, keep=keep)
    if table.n != int(meta["n"]):
        raise ReleaseFileError(f"{Path(csv_path).name}: {table.n} released cells, the metadata says {meta['n']}")
    if "table" in meta and table.shape is not None and list(table.shape) != list(meta["table"]["shape"]):
        raise ReleaseFileError(f"{Path(csv_path).name}: table shape {table.shape} differs from the metadata's")
    inv = build_invariant(table)
    t = None
    if inv is not None:
        if "t" not in meta["invariant"]:
            raise ReleaseFileError("metadata has no invariant values t")
        t = np.asarray(meta["invariant"]["t"], dtype=np.int64 if integer else float)
        if t.shape != (inv.m,):
            raise ReleaseFileError(f"metadata has {t.size} invariant values, the release needs {inv.m}")
        inv = inv.with_t(t)
    y = table.values.astype(np.int64) if integer else table.values
    if inv is not None and not inv.satisfied_by(y.astype(float), t):
        raise InfeasibleInvariantError(
            "the release does not satisfy the invariant values t recorded in its metadata "
            "(the CSV or the metadata was changed)"
        )
    mp = meta["mechanism"]
    params = dict(mp.get("parameters", {}))
    allowed = {"epsilon", "delta", "sigma", "sensitivity", "norm"}
    unknown = set(params) - allowed
    if unknown:
        raise ReleaseFileError(f"metadata: unknown mechanism parameter(s) {', '.join(sorted(unknown))}")
    mech = build_mechanism(mp.get("name", ""), inv, table.n, **params)
    return Release(table, y, inv, t, mech, meta)
