"""The figure ``privinfer fit`` writes beside its tables: posterior intervals against the
release, one panel per group of the invariant.

For every released cell ``k`` the panel shows the posterior of ``x_k - y_k`` (mean and
equal-tailed interval; the release is the zero line) against the released value ``y_k``.
Differences keep cells of very different sizes readable in one panel (a county of 1,000 and
one of 10^7 people), and show at a glance what the posterior does to the release: the
shift of its mean (towards the prior, away from impossible values such as negative counts)
and the width of its interval.

Groups are those of the invariant: the groups of a partition (``total`` is one group,
``groups:state`` one per state), the rows of a two-way table kept by its margins, else one
group of all cells.  At most :data:`MAX_PANELS` panels are drawn; with more groups, the
figure shows the groups with the most cells and says so in its title (the tables hold all).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..invariants import InvariantKind

__all__ = ["CellGroups", "cell_groups", "fit_figure", "plot_fit", "MAX_PANELS"]

#: Largest number of group panels in one figure.
MAX_PANELS = 16
#: Groups with at most this many cells show each cell by name (else by released value).
MAX_NAMED_CELLS = 12


def _num(v: float) -> str:
    return f"{int(v)}" if float(v).is_integer() else f"{v:.1f}"


@dataclass(frozen=True)
class CellGroups:
    """``codes[k]``: the group of cell ``k`` (0..g-1); ``labels[g]``: its printable label;
    ``kind``: what a group is (``"group"``, ``"row"``, ``"all cells"``)."""

    codes: np.ndarray
    labels: list[str]
    kind: str

    @property
    def n_groups(self) -> int:
        return len(self.labels)


def cell_groups(release) -> CellGroups:
    """The groups of the cells of ``release`` (a :class:`~privinfer.workflow.Release`) by its
    invariant: partition groups, rows of a two-way table, or one group."""
    inv, n = release.invariant, release.n
    if inv is not None and inv.partition is not None:
        p = inv.partition
        if inv.kind is InvariantKind.TOTAL or p.n_groups == 1:
            return CellGroups(np.zeros(n, dtype=np.int64), ["all cells (total kept)"], "all cells")
        return CellGroups(np.asarray(p.codes, dtype=np.int64), [str(v) for v in np.asarray(p.labels)], "group")
    shape = getattr(inv, "table_shape", None) if inv is not None else None
    if inv is not None and inv.kind is InvariantKind.MARGINS and shape is not None and len(shape) == 2:
        r, c = shape
        layout, ids = release.layout, release.ids
        if layout is not None and len(layout.row_labels) == r:
            rows = [str(v) for v in layout.row_labels]
        elif ids is not None and len(ids) == 2 and len(ids[0]) == r:
            rows = [str(v) for v in ids[0]]
        else:
            rows = [f"row {i + 1}" for i in range(r)]
        return CellGroups(np.repeat(np.arange(r), c), rows, "row")
    return CellGroups(np.zeros(n, dtype=np.int64), ["all cells"], "all cells")


def plot_fit(result, path, *, dpi: int = 120) -> Path:
    """Save :func:`fit_figure` of ``result`` to ``path`` (PNG); returns the path."""
    path = Path(path)
    fit_figure(result).savefig(path, dpi=dpi)
    return path


def fit_figure(result):
    """Draw ``result`` (a :class:`~privinfer.workflow.FitResult`) against its release: a
    :class:`matplotlib.figure.Figure` (not registered with pyplot).

    One panel per group (``result.groups``, from :func:`cell_groups`; one panel when unknown)
    with the posterior mean of ``x_k - y_k`` and its interval (probability
    ``result.interval``) for each cell: at a named position when the group has at most
    :data:`MAX_NAMED_CELLS` cells, else at its released value ``y_k`` (log axis when the values
    are positive and span more than two decades).
    """
    from matplotlib.figure import Figure

    y = np.asarray(result.release, dtype=float)
    groups = result.groups
    if groups is None:
        groups = CellGroups(np.zeros(y.size, dtype=np.int64), ["all cells"], "all cells")
    if y.shape != np.shape(result.mean) or groups.codes.shape != y.shape:
        raise ValueError(f"the fit has {np.size(result.mean)} cells, the release {y.size} and the groups "
                         f"{groups.codes.size}")
    sizes = np.bincount(groups.codes, minlength=groups.n_groups)
    shown = np.arange(groups.n_groups)
    if groups.n_groups > MAX_PANELS:
        shown = np.sort(np.argsort(-sizes, kind="stable")[:MAX_PANELS])
    k = len(shown)
    ncols = 1 if k == 1 else 2 if k <= 4 else 3 if k <= 9 else 4
    nrows = -(-k // ncols)
    fig = Figure(figsize=(4.2 * ncols + 1.5 * (ncols == 1), 3.0 * nrows + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(nrows, ncols, squeeze=False)).ravel()
    pct = int(round(100 * result.interval))
    mean = np.asarray(result.mean, dtype=float) - y
    lo = np.asarray(result.lower, dtype=float) - y
    hi = np.asarray(result.upper, dtype=float) - y
    for ax, g in zip(axes, shown):
        idx = np.flatnonzero(groups.codes == g)
        yy = y[idx]
        title = groups.labels[g] if groups.kind != "row" else f"row {groups.labels[g]}"
        if idx.size <= MAX_NAMED_CELLS:
            # few cells: one named position per cell, its released value under the name
            pos = np.arange(idx.size)
            prefix = f"{groups.labels[g]} / "
            names = [str(result.cell_labels[i]) for i in idx]
            names = [n[len(prefix):] if n.startswith(prefix) else n for n in names]
            ax.set_xticks(pos, [f"{n}\ny={_num(v)}" for n, v in zip(names, yy)], fontsize=7,
                          rotation=30 if idx.size > 6 else 0, ha="right" if idx.size > 6 else "center")
            ax.set_xlim(-0.6, idx.size - 0.4)
        else:
            pos = yy
            if np.all(yy > 0) and yy.max() > 100 * yy.min():
                ax.set_xscale("log")
            ax.set_xlabel("released value y", fontsize=8)
        ax.errorbar(pos, mean[idx], yerr=[mean[idx] - lo[idx], hi[idx] - mean[idx]], fmt="o", ms=3,
                    color="tab:blue", ecolor="tab:blue", elinewidth=0.8, alpha=0.8)
        ax.axhline(0.0, color="tab:orange", lw=1.2)
        ax.set_title(f"{title} ({idx.size} cells)", fontsize=9)
        ax.tick_params(axis="y", labelsize=8)
        ax.set_ylabel("posterior of x - y", fontsize=8)
    for ax in axes[k:]:
        ax.set_visible(False)
    note = "" if k == groups.n_groups else f"; the {k} largest of {groups.n_groups} groups shown"
    fig.suptitle(f"{result.model} model: posterior mean and {pct}% interval of x - y per cell "
                 f"(orange: the release){note}", fontsize=10)
    return fig
