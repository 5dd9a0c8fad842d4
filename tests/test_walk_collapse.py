"""The walk's collapsed pair move (privinfer.pymc.walk_collapse): exact invariance of the joint
posterior of (increment, cells) checked against enumeration, its bookkeeping and its refusals."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privinfer.pymc.walk_collapse import collapse_rows, collapsed_update

from test_walk_carry import (KAPPA, M, SIGMA, SYSTEMS, _assert_exact_draws, _exact_draws, _grid, _marginal_cdf,
                             _replicated)

ALPHA = 1e-3   # each test's false-alarm rate: the samples are independent, so KS and chi-square are exact


def _collapse(rng, st, sigma=SIGMA, mix=None, compiled=True):
    table = collapse_rows(st["grid"], st["B"].indptr.astype(np.int64), st["B"].indices.astype(np.int64),
                          st["B"].shape[0])
    return collapsed_update(rng, st["cells"], st["res"], st["pairs"], grid=st["grid"], code=st["code"],
                            base=st["base"], eta=st["eta"], delta=st["delta"], sigma=np.array([sigma]), kappa=KAPPA,
                            w=st["w"], table=table, mix=mix, compiled=compiled)


def _exact_pairs(n, seed, sysm=SYSTEMS["rows"]):
    """``n`` exact draws of the tiny system's (s, x) as one problem of ``n`` pairs."""
    rng = np.random.default_rng(seed)
    fibre, grid, w, px, idx, s = _exact_draws(n, rng, sysm)
    return rng, fibre, grid, w, px, s, _replicated(fibre[idx], s, sysm)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "reference"])
def test_collapsed_move_leaves_the_joint_posterior_of_increment_and_cells_invariant(compiled):
    # The tiny system of test_walk_carry ("rows"): two sibling units of two cells, the centred
    # increments s and -s, measured every cell, both unit totals (rows holding all of a unit's
    # cells) and both category sums (rows holding one cell of each unit: the second unit's cells
    # are drawn from their approximate marginals, the first's given them).  Exact draws of (s, x)
    # -> one collapsed move of each -> still exact draws: s's marginal (KS against the
    # enumerated marginal), the cells' pmf over the fibre (chi-square) and their dependence on s
    # (chi-square of the points given s > 0).  n = 3,000 pairs, by the compiled kernel (its
    # sequential cell proposal) and by the reference (the tree sampler's), each on its own.
    n = 3000
    sysm = SYSTEMS["rows"]
    rng, fibre, grid, w, px, s, st = _exact_pairs(n, 11)
    x_before = st["cells"].copy()
    accepted, proposed = _collapse(rng, st, compiled=compiled)
    assert proposed == n
    c = _grid(sysm).size
    cells = st["cells"].reshape(n, c)
    s_new = st["eta"].reshape(n, 2)[:, 0]
    # bookkeeping: the pair keeps its sums, the residuals follow the cells, the units keep their totals
    assert np.allclose(st["eta"].reshape(n, 2).sum(axis=1), 0.0)
    assert np.allclose(st["delta"].reshape(n, 2).sum(axis=1), 2 * M)
    assert np.allclose(st["res"], st["y"] - st["B"] @ st["cells"].astype(float))
    assert np.array_equal(cells.reshape(n, 2, 2).sum(axis=2), x_before.reshape(n, 2, 2).sum(axis=2))
    assert cells.min() >= 0
    # it moves, and far: an independence proposal from the collapsed law (s's sd is 0.5)
    assert accepted / proposed > 0.5
    assert np.mean(np.abs(s_new - s)) > 0.3
    assert (cells != x_before.reshape(n, c)).any(axis=1).mean() > 0.3
    _assert_exact_draws(fibre, grid, w, px, s_new, cells)


def test_a_wrong_target_is_detected():
    # the same check must fail when the move targets another law: here a step scale twice the
    # true one (the prior of s wider), so the test above can fail
    n = 3000
    rng, fibre, grid, w, px, s, st = _exact_pairs(n, 12)
    for _ in range(3):
        _collapse(rng, st, sigma=2 * SIGMA)
    s_new = st["eta"].reshape(n, 2)[:, 0]
    cdf = _marginal_cdf(w, px)
    assert stats.kstest(s_new, lambda v: np.interp(v, grid, cdf)).pvalue < ALPHA


def test_rows_holding_part_of_a_unit_are_refused():
    # the "three" system measures cells 1, 2, 4, 5 together: two of each unit's three cells
    st = _exact_pairs(2, 1, SYSTEMS["three"])[-1]
    with pytest.raises(ValueError, match="several but not all"):
        collapse_rows(st["grid"], st["B"].indptr.astype(np.int64), st["B"].indices.astype(np.int64), st["B"].shape[0])


def _tract_model(queries=None, seed=3):
    from census_helpers import random_frame
    from privinfer.census import hierarchy_measurements, hierarchy_model

    f = random_frame(seed, counties=3, max_tracts=4)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                  queries=queries or {"total": (), "sex_age": ("sex", "age")}, rho=0.05)
    rel = mech.publish(f["count"], rng=seed)
    return hierarchy_model(rel, smooth="age", walk_steps="gibbs", smooth_levels="all"), rel


def test_walk_gibbs_runs_the_collapsed_move_where_the_walk_allows_it():
    import pymc as pm

    from privinfer.pymc import WalkGibbs
    from privinfer.pymc.walk import COLLAPSE_SMALL

    model, rel = _tract_model()
    tract_walk = ["step_scale_age", "step_tract_age"]
    with model:
        assert WalkGibbs(vars=[model[n] for n in tract_walk]).collapse == COLLAPSE_SMALL
        # the counties' walk enters its tracts' rows (members): no collapsed move, and asking is an error
        county_walk = [model["step_scale_county_age"], model["step_county_age"]]
        assert WalkGibbs(vars=county_walk).collapse == 0.0
        with pytest.raises(ValueError, match="^collapse needs the walk"):
            WalkGibbs(vars=county_walk, collapse=0.5)
        for bad in (-1.0, np.nan):
            with pytest.raises(ValueError, match="^collapse must be"):
                WalkGibbs(vars=[model[n] for n in tract_walk], collapse=bad)
        # every pair of the matching moved (an infinite threshold): the draws keep the invariant
        # and the cells stay the lattice's, and the move is taken
        step = WalkGibbs(vars=[model[n] for n in tract_walk], collapse=np.inf)
        idata = pm.sample(draws=30, tune=10, chains=1, step=[step], random_seed=4, progressbar=False,
                          compute_convergence_checks=False)
    x = idata.posterior["x"].values.reshape(-1, idata.posterior["x"].shape[-1])
    assert np.all(x >= 0)
    assert np.all(x.sum(axis=1) == x[0].sum())
    acc = idata.sample_stats["walk_collapse_accept"].values
    acc = acc[np.isfinite(acc)]
    assert acc.size > 0 and acc.mean() > 0.05


def test_a_margin_of_part_of_a_tract_turns_the_collapsed_move_off():
    from privinfer.pymc import WalkGibbs

    model, _ = _tract_model({"total": (), "sex": ("sex",), "sex_age": ("sex", "age")})
    tract_walk = ["step_scale_age", "step_tract_age"]
    with model:
        assert WalkGibbs(vars=[model[n] for n in tract_walk]).collapse == 0.0
        with pytest.raises(ValueError, match="several but not all"):
            WalkGibbs(vars=[model[n] for n in tract_walk], collapse=0.5)


def test_collapsed_pairs_take_every_pair_of_the_matching_under_an_infinite_threshold():
    # the default threshold (COLLAPSE_SMALL = inf) keeps every pair of the size matching, even
    # where the median size is 0 (inf x 0 would be nan and keep none); a finite threshold keeps
    # only the pairs whose larger unit is under it, from the same matching (same generator state)
    from types import SimpleNamespace

    from privinfer.pymc.walk import COLLAPSE_SMALL, collapsed_pairs
    from privinfer.pymc.walk_kernel import sized_pairs

    assert COLLAPSE_SMALL == np.inf
    groups = np.repeat(np.arange(4), [2, 3, 5, 6])
    for sizes in (np.arange(1.0, 17.0), np.zeros(16)):
        info = SimpleNamespace(groups=groups, sizes=sizes)
        u, v = collapsed_pairs(np.random.default_rng(3), info, np.inf)
        eu, ev = sized_pairs(np.random.default_rng(3), groups, sizes)
        np.testing.assert_array_equal(u, eu)
        np.testing.assert_array_equal(v, ev)
        assert u.size == 7          # 1 + 1 + 2 + 3 pairs, whatever the pattern drawn
    info = SimpleNamespace(groups=groups, sizes=np.arange(1.0, 17.0))
    u, v = collapsed_pairs(np.random.default_rng(3), info, 1.0)
    eu, ev = sized_pairs(np.random.default_rng(3), groups, info.sizes)
    keep = np.maximum(info.sizes[eu], info.sizes[ev]) < np.median(info.sizes)
    assert 0 < keep.sum() < eu.size
    np.testing.assert_array_equal(u, eu[keep])
    np.testing.assert_array_equal(v, ev[keep])
