"""One unit's profile moved against all its siblings, its cells carried along
(privinfer.pymc.walk_alone): exact invariance of the conditional law of (the unit's raw increment,
cells) checked against enumeration, and the choice of units."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import gammaln, softmax

import privinfer.pymc.walk_alone as walk_alone
from privinfer.pymc.walk_alone import alone_units, alone_update
from privinfer.pymc.walk_carry import carried_update, ellipse_update

from test_walk_carry import _assert_exact_draws, _draws_of, _enumerated

# The tiny law.  Three sibling units (one group), two cells each, two categories (one increment,
# coded 0/1): raw increments delta = (MEAN + b, MEAN - b/2 + C, MEAN - b/2 - C), each N(0, SIGMA^2),
# the centred ones eta = delta - MEAN, unit profiles base_u + [0, eta_u], Dirichlet-multinomial
# cells given the unit totals, the cells' total T = 6 published exactly, discrete Gaussian
# measurements of every cell, every unit total and both category sums.  The move of the first
# unit against both siblings changes b and the cells, nothing else (the raw mean and the
# siblings' contrast C stay), so it must leave the law of (b, x) given MEAN and C invariant; that
# law is enumerated: x over the fibre (462 points), b on a grid.
BASE = np.array([[0.2, -0.1], [0.0, 0.3], [-0.2, 0.1]])
MEAN, C = 0.1, 0.2
KAPPA, SIGMA, T = 4.0, 0.9, 6
MEAS = [[i] for i in range(6)] + [[0, 1], [2, 3], [4, 5], [0, 2, 4], [1, 3, 5]]
SD = np.r_[np.full(6, 1.3), np.full(5, 1.7)]
Y = np.array([1.0, 2.0, 2.0, 0.0, 1.0, 1.0, 3.0, 2.0, 2.0, 3.0, 3.0])
CARRY = np.array([0.9, 0.6, 0.8, 0.7, 0.5, 0.9])
ALPHA = 1e-3


def _matrix():
    B = np.zeros((len(MEAS), 6))
    for r, cells in enumerate(MEAS):
        B[r, cells] = 1.0
    return B


def _log_target(b, x):
    """log pi(b, x) up to a constant, vectorized over the grid ``b``."""
    delta = _raw(b)
    eta = delta - MEAN
    out = -(delta**2).sum(axis=1) / (2 * SIGMA**2)
    x = np.asarray(x)
    for u in range(3):
        th = BASE[u][None, :] + np.stack([np.zeros(b.size), eta[:, u]], axis=1)
        a = KAPPA * softmax(th, axis=1)
        xm = x[2 * u:2 * u + 2]
        N = xm.sum()
        out = out + gammaln(N + 1) + gammaln(KAPPA) - gammaln(N + KAPPA)
        out = out + (gammaln(xm + a) - gammaln(a) - gammaln(xm + 1)).sum(axis=1)
    res = Y - _matrix() @ x.astype(float)
    return out - (res**2 / (2 * SD**2)).sum()


def _raw(b):
    return np.stack([MEAN + b, MEAN - b / 2 + C, MEAN - b / 2 - C], axis=1)


def _exact():
    grid = np.linspace(-7, 7, 14001)
    fibre, w, px = _enumerated(6, T, grid, _log_target)
    return fibre, grid, w, px


def _exact_problem(n, seed):
    """``n`` exact draws of (b, x) as one problem of ``n`` groups of three units."""
    rng = np.random.default_rng(seed)
    fibre, grid, w, px = _exact()
    idx, b = _draws_of(n, rng, grid, w, px)
    B = sp.block_diag([sp.csr_matrix(_matrix())] * n, format="csc")
    B.sort_indices()
    delta = _raw(b)
    eta = (delta - MEAN).reshape(3 * n, 1).copy()
    cells = fibre[idx].reshape(-1).astype(np.int64).copy()
    y = np.tile(Y, n)
    st = dict(B=B, grid=np.arange(6 * n).reshape(3 * n, 2), eta=eta, delta=delta.reshape(3 * n, 1).copy(),
              base=np.tile(BASE, (n, 1)), cells=cells, res=y - B @ cells.astype(float), y=y,
              w=np.tile(1.0 / (2 * SD**2), n), groups=np.repeat(np.arange(n), 3), carry=np.tile(CARRY, n))
    return rng, fibre, grid, w, px, b, st


def _move(rng, st, units):
    return alone_update(rng, st["cells"], st["res"], units, grid=st["grid"], code=np.array([0, 1]), base=st["base"],
                        eta=st["eta"], delta=st["delta"], sigma=np.array([SIGMA]), kappa=KAPPA, groups=st["groups"],
                        carry=st["carry"], row_ptr=st["B"].indptr.astype(np.int64),
                        rows=st["B"].indices.astype(np.int64), w=st["w"], widths=0.5)


def test_a_unit_moved_alone_leaves_the_exact_law_invariant():
    # exact draws of (b, x) -> one move of every group's first unit -> still exact draws: b's
    # marginal (KS against the enumerated marginal), the cells' pmf over the fibre (chi-square)
    # and their dependence on b (chi-square of the points given b > 0), each at false-alarm rate
    # 1e-3 (the n = 3,000 groups are independent, so the tests' levels are exact)
    n = 3000
    rng, fibre, grid, w, px, b, st = _exact_problem(n, 3)
    x_before = st["cells"].copy()
    evals, moved = _move(rng, st, np.arange(0, 3 * n, 3))
    delta = st["delta"].reshape(n, 3)
    b_new = delta[:, 0] - MEAN
    cells = st["cells"].reshape(n, 6)
    # bookkeeping: the raw mean and the siblings' contrast stay, the centred ones are the raw ones centred,
    # the residuals follow the cells, every unit keeps its total, no cell below 0
    np.testing.assert_allclose(delta, _raw(b_new), atol=1e-12)
    np.testing.assert_allclose(st["eta"].reshape(n, 3), delta - delta.mean(axis=1, keepdims=True), atol=1e-12)
    np.testing.assert_allclose(st["res"], st["y"] - st["B"] @ st["cells"].astype(float))
    np.testing.assert_array_equal(cells.reshape(n, 3, 2).sum(axis=2), x_before.reshape(n, 3, 2).sum(axis=2))
    assert cells.min() >= 0 and evals > n and np.isfinite(moved).all()
    # it moves (b's posterior sd is about 0.9; measured 0.8 on average) and carries cells (their
    # integer shifts are mostly 0 at counts of 0-3: measured 10% of the groups)
    assert np.mean(np.abs(b_new - b)) > 0.4
    assert (cells != x_before.reshape(n, 6)).any(axis=1).mean() > 0.03
    _assert_exact_draws(fibre, grid, w, px, b_new, cells)


def test_a_move_that_misstates_the_siblings_share_is_detected(monkeypatch):
    # the same check on a kernel whose density moves the siblings as a pair move does (-Delta
    # each instead of -Delta/2) while the state moves them by -Delta/2: not the target, and the
    # check must say so
    def pair_share(*args, coefficients=None, **kwargs):
        return carried_update(*args, coefficients=-1.0, **kwargs)

    def pair_share_ellipse(*args, coefficients=None, **kwargs):
        return ellipse_update(*args, coefficients=-1.0, **kwargs)

    monkeypatch.setattr(walk_alone, "carried_update", pair_share)
    monkeypatch.setattr(walk_alone, "ellipse_update", pair_share_ellipse)
    n = 3000
    rng, fibre, grid, w, px, b, st = _exact_problem(n, 4)
    for _ in range(3):
        _move(rng, st, np.arange(0, 3 * n, 3))
    with pytest.raises(AssertionError):
        _assert_exact_draws(fibre, grid, w, px, st["delta"].reshape(n, 3)[:, 0] - MEAN, st["cells"].reshape(n, 6))


def test_alone_units_are_the_small_units_of_groups_of_three_or_more():
    groups = np.array([0, 0, 1, 1, 1, 2, 2, 2, 2])
    sizes = np.array([100.0, 5000, 900, 3000, 3100, 800, 4000, 3900, 2500])
    # median 3000: under 0.5 x 3000 are units 0, 2, 5; unit 0 is in a group of two
    np.testing.assert_array_equal(alone_units(groups, sizes, 0.5), [2, 5])
    np.testing.assert_array_equal(alone_units(groups, sizes, 0.0), np.zeros(0, dtype=np.int64))
    with pytest.raises(ValueError, match="^sizes must give one number per unit$"):
        alone_units(groups, sizes[:-1], 0.5)
    with pytest.raises(ValueError, match="^fraction must be a finite number >= 0$"):
        alone_units(groups, sizes, np.nan)


def test_carried_update_refuses_bad_coefficients_and_precisions():
    rng, fibre, grid, w, px, b, st = _exact_problem(4, 5)
    common = dict(grid=st["grid"][:2], code=np.array([0, 1]), base=st["base"][:2], eta=st["eta"][:2],
                  delta=st["delta"][:2], sigma=np.array([SIGMA]), kappa=KAPPA, carry=st["carry"],
                  row_ptr=st["B"].indptr.astype(np.int64), rows=st["B"].indices.astype(np.int64), w=st["w"])
    pairs = (np.array([0]), np.array([1]))
    with pytest.raises(ValueError, match="^coefficients must be finite$"):
        carried_update(rng, st["cells"], st["res"], pairs, coefficients=np.nan, **common)
    with pytest.raises(ValueError, match="^precisions must be 2 x 1 finite values >= 0$"):
        carried_update(rng, st["cells"], st["res"], pairs, precisions=-np.ones((2, 1)), **common)
    with pytest.raises(ValueError, match="not both"):
        carried_update(rng, st["cells"], st["res"], pairs, precisions=np.ones((2, 1)), mix=np.ones(2), **common)


def tract_walk_step(option: str, message: str):
    """The small tract model (``test_walk_collapse._tract_model``), its tracts' walk and a
    ``WalkGibbs`` of it with ``option=100`` (every unit the option allows), after checking that
    the counties' walk does not take the option by default, that asking it to is an error starting
    with ``message``, and that bad fractions give one-line errors."""
    from privinfer.pymc import WalkGibbs
    from test_walk_collapse import _tract_model

    model, rel = _tract_model()
    tract_walk = [model["step_scale_age"], model["step_tract_age"]]
    county_walk = [model["step_scale_county_age"], model["step_county_age"]]
    with model:
        assert getattr(WalkGibbs(vars=county_walk), f"_{option}").size == 0
        with pytest.raises(ValueError, match=f"^{message}"):
            WalkGibbs(vars=county_walk, **{option: 0.5})
        for bad in (-1.0, np.nan):
            with pytest.raises(ValueError, match=f"^{option} must be"):
                WalkGibbs(vars=tract_walk, **{option: bad})
        step = WalkGibbs(vars=tract_walk, rng=np.random.default_rng(1), **{option: 100.0})
    return model, rel, tract_walk, step


def steps_keep_the_tracts(model, rel, step, point, stat: str, n: int = 10, check=None):
    """``n`` steps from ``point``: every tract keeps its total and the cells stay on the lattice
    (``check(old, new)`` too, when given); returns the new point and the sum of the sample
    statistic ``stat``."""
    tract = rel.mechanism.hierarchy.leaf_unit
    x0 = np.asarray(point["x"]).copy()
    total = 0.0
    for _ in range(n):
        new, stats = step.step(point)
        x = np.asarray(new["x"])
        assert x.min() >= 0
        np.testing.assert_array_equal(np.bincount(tract, weights=x), np.bincount(tract, weights=x0))
        if check is not None:
            check(point, new)
        total += stats[0][stat]
        point = new
    return point, total


def sampled_stat(model, tract_walk, option: str, stat: str) -> float:
    """The mean of the sample statistic ``stat`` over a short ``pm.sample`` run of the tracts' walk
    with ``option=100``."""
    import pymc as pm

    from privinfer.pymc import WalkGibbs

    with model:
        idata = pm.sample(draws=20, tune=10, chains=1, step=[WalkGibbs(vars=tract_walk, **{option: 100.0})],
                          random_seed=4, progressbar=False, compute_convergence_checks=False)
    return float(idata.sample_stats[stat].mean())


def test_walk_gibbs_moves_units_alone_where_the_walk_allows_it():
    # the tracts' walk (sizes, carry fractions, sibling groups, one row per tract) takes the move;
    # the counties' walk (its units span their tracts' rows) does not, and asking is an error; a
    # step with every unit of a group of three or more moved keeps every tract's total and the
    # cells on the lattice
    model, rel, tract_walk, step = tract_walk_step("alone", "alone needs the walk")
    info = step.info
    J = np.bincount(info.groups)[info.groups]
    np.testing.assert_array_equal(step._alone, np.flatnonzero(J >= 3))
    assert step._alone.size > 0
    widths = step.alone_width.copy()
    _, evals = steps_keep_the_tracts(model, rel, step, model.initial_point(), "walk_alone_evals")
    assert evals > 0 and not np.array_equal(step.alone_width, widths)      # moved, and tuned in warm-up
    assert sampled_stat(model, tract_walk, "alone", "walk_alone_evals") > 0
