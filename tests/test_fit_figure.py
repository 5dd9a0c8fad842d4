"""The figure of a fit: one panel per group of the invariant, posterior minus release."""

import numpy as np
import pytest

from privinfer import invariants
from privinfer.workflow import FitResult
from privinfer.workflow.figures import MAX_NAMED_CELLS, MAX_PANELS, CellGroups, cell_groups, fit_figure, plot_fit


class _Rel:
    """The attributes of a Release that cell_groups reads."""

    def __init__(self, inv, n, layout=None, ids=None):
        self.invariant, self.n, self.layout, self.ids = inv, n, layout, ids


def _result(y, groups, rng):
    y = np.asarray(y, dtype=float)
    mean = y + rng.normal(0, 2, y.size)
    return FitResult("county", 1, [f"c{i}" for i in range(y.size)], y, mean, np.ones(y.size), mean - 3,
                     mean + 4, 1.0, 400.0, groups=groups)


def test_groups_follow_the_invariant():
    g = cell_groups(_Rel(invariants.groups(["b", "a", "b", "c"]), 4))
    assert g.kind == "group" and g.n_groups == 3
    assert [g.labels[c] for c in g.codes] == ["b", "a", "b", "c"]
    t = cell_groups(_Rel(invariants.total(5), 5))
    assert t.n_groups == 1 and np.all(t.codes == 0)
    m = cell_groups(_Rel(invariants.margins((2, 3), [(0,), (1,)]), 6, ids=(["r1", "r2"], ["a", "b", "c"])))
    assert m.kind == "row" and m.labels == ["r1", "r2"] and list(m.codes) == [0, 0, 0, 1, 1, 1]
    assert cell_groups(_Rel(None, 3)).n_groups == 1


def test_one_panel_per_group_showing_posterior_minus_release(tmp_path):
    rng = np.random.default_rng(0)
    labels = ["KY", "NV", "CA"]
    codes = np.array([0, 0, 1, 2, 2, 2])
    res = _result([10, 2000, 50, 5, 7, 90000], CellGroups(codes, labels, "group"), rng)
    fig = fit_figure(res)
    axes = [a for a in fig.axes if a.get_visible()]
    assert len(axes) == 3
    for g, ax in enumerate(axes):
        assert ax.get_title().startswith(labels[g])
        idx = np.flatnonzero(codes == g)
        # the points are (position, mean_k - y_k); few cells: named positions carrying y_k
        xs, ys = ax.lines[0].get_data()
        np.testing.assert_allclose(xs, np.arange(idx.size))
        np.testing.assert_allclose(ys, res.mean[idx] - res.release[idx])
        assert [t.get_text() for t in ax.get_xticklabels()] == [f"c{i}\ny={int(res.release[i])}" for i in idx]
    path = plot_fit(res, tmp_path / "fit.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_large_groups_plot_cells_at_their_released_value():
    rng = np.random.default_rng(3)
    y = rng.integers(1, 10**6, MAX_NAMED_CELLS + 5)
    res = _result(y, CellGroups(np.zeros(y.size, dtype=np.int64), ["all cells"], "all cells"), rng)
    (ax,) = [a for a in fit_figure(res).axes if a.get_visible()]
    xs, ys = ax.lines[0].get_data()
    np.testing.assert_allclose(xs, y)
    np.testing.assert_allclose(ys, res.mean - y)
    assert ax.get_xscale() == ("log" if y.max() > 100 * y.min() else "linear")


def test_many_groups_show_the_largest_and_say_so():
    rng = np.random.default_rng(1)
    g = MAX_PANELS + 4
    sizes = np.arange(1, g + 1)
    codes = np.repeat(np.arange(g), sizes)
    res = _result(rng.integers(1, 100, codes.size), CellGroups(codes, [f"g{i}" for i in range(g)], "group"), rng)
    fig = fit_figure(res)
    titles = [a.get_title() for a in fig.axes if a.get_visible()]
    assert len(titles) == MAX_PANELS
    assert {t.split(" ")[0] for t in titles} == {f"g{i}" for i in range(4, g)}  # the largest groups
    assert f"{MAX_PANELS} largest of {g} groups" in fig._suptitle.get_text()


def test_mismatched_groups_are_refused():
    res = _result([1, 2, 3], CellGroups(np.zeros(2, dtype=np.int64), ["all"], "all cells"), np.random.default_rng(2))
    with pytest.raises(ValueError, match="groups"):
        fit_figure(res)
