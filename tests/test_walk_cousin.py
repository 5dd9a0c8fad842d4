"""One unit's profile moved alone, its parent's walk taking up the change and a cousin's parent
giving it back (privinfer.pymc.walk_cousin): exact invariance of the conditional law of (the move's
coordinate, cells) checked against enumeration, the bookkeeping of both walks, and the cousins'
weights."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.special import gammaln, softmax

import privinfer.pymc.walk_cousin as walk_cousin
from privinfer.pymc.walk import ELLIPSES
from privinfer.pymc.walk_cousin import cousin_update, cousin_weights

from test_walk_alone import CARRY, SD, Y, _matrix, sampled_stat, steps_keep_the_tracts, tract_walk_step
from test_walk_carry import _assert_exact_draws, _draws_of, _enumerated

# The tiny law.  Two parents (one grandparent): the first with units 0 and 1, the second with
# unit 2 alone; two cells per unit, two categories (one increment, coded 0/1).  The parents' raw
# increments (PMEAN + c, PMEAN - c), N(0, PSIGMA^2), centred +-c; the units' raw increments
# (MEAN + b, MEAN - b) in the first parent and MEAN2 in the second (an only child: its centred
# increment is 0), N(0, SIGMA^2).  Unit profiles base_u + [0, parent's centred + own centred]:
# c + b, c - b and -c.  Dirichlet-multinomial cells given the unit totals, the cells' total T = 6
# published exactly, discrete Gaussian measurements of every cell, every unit total and both
# category sums (the measurements and carry fractions of test_walk_alone's law).  The move of
# unit 0 against its cousin 2 changes (b, c) by (a, a) and the cells, nothing else (the means and
# b - c stay), so it must leave the law of (t, x) given b - c = E invariant, t = c; that law is
# enumerated: x over the fibre (462 points), t on a grid.
BASE = np.array([[0.2, -0.1], [0.0, 0.3], [-0.2, 0.1]])
MEAN, MEAN2, PMEAN, E = 0.1, -0.3, 0.05, 0.4
KAPPA, SIGMA, PSIGMA, T = 4.0, 0.9, 0.6, 6


def _log_target(t, x):
    """log pi(t, x) given b - c = E, up to a constant, vectorized over the grid ``t``."""
    c, b = t, t + E
    out = -((MEAN + b) ** 2 + (MEAN - b) ** 2) / (2 * SIGMA**2) - ((PMEAN + c) ** 2 + (PMEAN - c) ** 2) / (2 * PSIGMA**2)
    x = np.asarray(x)
    for u, level in enumerate((c + b, c - b, -c)):
        th = BASE[u][None, :] + np.stack([np.zeros(np.size(t)), np.broadcast_to(level, np.shape(t))], axis=1)
        a = KAPPA * softmax(th, axis=1)
        xm = x[2 * u:2 * u + 2]
        N = xm.sum()
        out = out + gammaln(N + 1) + gammaln(KAPPA) - gammaln(N + KAPPA)
        out = out + (gammaln(xm + a) - gammaln(a) - gammaln(xm + 1)).sum(axis=1)
    res = Y - _matrix() @ x.astype(float)
    return out - (res**2 / (2 * SD**2)).sum()


def _exact_problem(n, seed):
    """``n`` exact draws of (t, x) as one problem: ``n`` grandparents of two parents each."""
    rng = np.random.default_rng(seed)
    grid = np.linspace(-6, 6, 12001)
    fibre, w, px = _enumerated(6, T, grid, _log_target)
    idx, t = _draws_of(n, rng, grid, w, px)
    c, b = t, t + E
    B = sp.block_diag([sp.csr_matrix(_matrix())] * n, format="csc")
    B.sort_indices()
    cells = fibre[idx].reshape(-1).astype(np.int64).copy()
    y = np.tile(Y, n)
    zero = np.zeros(n)
    eta = np.stack([b, -b, zero], axis=1).reshape(3 * n, 1)
    parent_level = np.stack([c, c, -c], axis=1).reshape(3 * n)
    base = np.tile(BASE, (n, 1))
    base[:, 1] += parent_level
    st = dict(B=B, grid=np.arange(6 * n).reshape(3 * n, 2), eta=eta.copy(), base=base,
              delta=np.stack([MEAN + b, MEAN - b, zero + MEAN2], axis=1).reshape(3 * n, 1).copy(),
              parent_delta=np.stack([PMEAN + c, PMEAN - c], axis=1).reshape(2 * n, 1).copy(),
              groups=np.repeat(np.arange(2 * n), [2, 1] * n), parent_groups=np.repeat(np.arange(n), 2),
              cells=cells, res=y - B @ cells.astype(float), y=y, w=np.tile(1.0 / (2 * SD**2), n),
              carry=np.tile(CARRY, n))
    return rng, fibre, grid, w, px, t, st


def _move(rng, st, units):
    return cousin_update(rng, st["cells"], st["res"], units, grid=st["grid"], code=np.array([0, 1]), base=st["base"],
                         eta=st["eta"], delta=st["delta"], sigma=np.array([SIGMA]), kappa=KAPPA, groups=st["groups"],
                         parent_delta=st["parent_delta"], parent_sigma=np.array([PSIGMA]),
                         parent_groups=st["parent_groups"], carry=st["carry"],
                         row_ptr=st["B"].indptr.astype(np.int64), rows=st["B"].indices.astype(np.int64), w=st["w"],
                         widths=0.5)


def test_a_unit_moved_against_a_cousin_leaves_the_exact_law_invariant():
    # exact draws of (t, x) -> one move of every grandparent's unit 0 against its cousin 2 -> still
    # exact draws: t's marginal (KS against the enumerated marginal), the cells' pmf over the fibre
    # (chi-square) and their dependence on t (chi-square of the points given t > 0), each at
    # false-alarm rate 1e-3 (the n = 3,000 grandparents are independent, so the levels are exact)
    n = 3000
    rng, fibre, grid, w, px, t, st = _exact_problem(n, 3)
    x_before = st["cells"].copy()
    evals, moved = _move(rng, st, np.arange(0, 3 * n, 3))
    pdelta = st["parent_delta"].reshape(n, 2)
    delta = st["delta"].reshape(n, 3)
    c_new = pdelta[:, 0] - PMEAN
    b_new = delta[:, 0] - MEAN
    cells = st["cells"].reshape(n, 6)
    # bookkeeping: every mean and b - c stay, the only child's raw increment too, the centred
    # increments are the raw ones centred, the base profiles hold the parents' new centred
    # increments, the residuals follow the cells, every unit keeps its total, no cell below 0
    np.testing.assert_allclose(pdelta[:, 1], PMEAN - c_new, atol=1e-12)
    np.testing.assert_allclose(delta[:, 1], MEAN - b_new, atol=1e-12)
    np.testing.assert_allclose(delta[:, 2], MEAN2, atol=1e-12)
    np.testing.assert_allclose(b_new - c_new, E, atol=1e-12)
    np.testing.assert_allclose(st["eta"].reshape(n, 3), np.stack([b_new, -b_new, 0 * b_new], axis=1), atol=1e-12)
    np.testing.assert_allclose(st["base"].reshape(n, 3, 2)[:, :, 1] - BASE[None, :, 1],
                               np.stack([c_new, c_new, -c_new], axis=1), atol=1e-12)
    np.testing.assert_allclose(st["res"], st["y"] - st["B"] @ st["cells"].astype(float))
    np.testing.assert_array_equal(cells.reshape(n, 3, 2).sum(axis=2), x_before.reshape(n, 3, 2).sum(axis=2))
    assert cells.min() >= 0 and evals > n and np.isfinite(moved).all()
    # it moves (t's posterior sd is about 0.4) and carries cells
    assert np.mean(np.abs(c_new - t)) > 0.15
    assert (cells != x_before.reshape(n, 6)).any(axis=1).mean() > 0.03
    _assert_exact_draws(fibre, grid, w, px, c_new, cells)


def test_a_move_that_drops_the_parents_prior_is_detected(monkeypatch):
    # the same check on a kernel whose density leaves out the parents' prior terms (their raw
    # increments move by +-a, so their Gaussian priors belong in the density of Delta) while the
    # state moves them: not the target, and one move must be seen (measured: KS p-value 1e-35).
    # Misstating the cousin's share instead (a pair move's -Delta for its -Delta/2) is a weak
    # signal on this law (the cousin's two cells hold about two people: chi-square p-value
    # 0.05 after two moves, 1e-4 after five), so the law's power is spent where it is strong.
    fold = walk_cousin._prior_fold

    def no_parents(delta, parent_delta, prec, parent_prec, *args):
        return fold(delta, parent_delta, prec, 0.0 * parent_prec, *args)

    monkeypatch.setattr(walk_cousin, "_prior_fold", no_parents)
    n = 3000
    rng, fibre, grid, w, px, t, st = _exact_problem(n, 4)
    _move(rng, st, np.arange(0, 3 * n, 3))
    with pytest.raises(AssertionError):
        _assert_exact_draws(fibre, grid, w, px, st["parent_delta"].reshape(n, 2)[:, 0] - PMEAN,
                            st["cells"].reshape(n, 6))


def test_cousin_weights_favour_units_with_few_siblings_under_a_shared_grandparent():
    groups = np.array([0, 0, 1, 2, 2, 2, 3])
    # parents 0, 1, 2 under grandparent 0; parent 3 alone under grandparent 1: no cousin
    np.testing.assert_allclose(cousin_weights(groups, np.array([0, 0, 0, 1])),
                               [1 / 4, 1 / 4, 1.0, 1 / 9, 1 / 9, 1 / 9, 0.0])
    np.testing.assert_allclose(cousin_weights(groups), [1 / 4, 1 / 4, 1.0, 1 / 9, 1 / 9, 1 / 9, 1.0])
    with pytest.raises(ValueError, match="^parent_groups must give one group to each of the 4 parents$"):
        cousin_weights(groups, np.array([0, 0, 0]))


def test_cousin_update_refuses_only_children_and_lone_parents():
    rng, fibre, grid, w, px, t, st = _exact_problem(2, 5)
    with pytest.raises(ValueError, match="^a unit moved against a cousin needs a sibling"):
        _move(rng, st, np.array([2]))
    st["parent_groups"] = np.arange(4)              # every parent alone under its grandparent
    with pytest.raises(ValueError, match="^a unit moved against a cousin needs a parent with a sibling$"):
        _move(rng, st, np.array([0]))
    st["parent_groups"] = np.repeat(np.arange(2), 2)
    st["parent_delta"] = st["parent_delta"][:3]
    with pytest.raises(ValueError, match="^parent_delta must be"):
        _move(rng, st, np.array([0]))


def test_walk_gibbs_moves_units_against_cousins_where_the_walk_allows_it():
    # the tracts' walk (registered with its counties' walk as parent) takes the move; the counties'
    # walk (no parent) does not, and asking is an error.  One unit's move through the step: only
    # that tract's and its cousin's profiles change, the base profiles the step holds afterwards
    # are the model's at the moved counties' walk, and the counties' raw mean stays.  Whole steps
    # keep every tract's total and the cells on the lattice, and write the counties' walk into
    # the point, its mean kept.
    from privinfer.pymc import WalkGibbs
    from privinfer.pymc.walk_kernel import centred, walk_offsets

    model, rel, tract_walk, step = tract_walk_step("cousins", "cousins needs the walk")
    info = step.info
    J = np.bincount(info.groups)[info.groups]
    np.testing.assert_array_equal(step._cousins, np.flatnonzero(J >= 2))
    assert step._cousins.size > 0 and step._parent[0].increments == "step_county_age"

    point = model.initial_point()
    for name, sv in step.shared.items():
        sv.set_value(point[name])
    base, kappa, x = step._inputs_fn()
    base = np.array(base, dtype=float)
    delta = np.array(point["step_tract_age"], dtype=float)
    eta = centred(delta, info.groups)
    cells = np.array(x, dtype=np.int64)
    res = step._rows.residuals(cells, step._y)
    profiles = base + walk_offsets(eta, info.code, info.order, info.spacing)
    step._parent_now = (np.exp(point["step_scale_county_age_log__"]), np.array(point["step_county_age"]))
    step._cousins = step._cousins[:1]
    assert step._moved_cousins(cells, res, base, eta, delta, np.exp(point["step_scale_age_log__"]), float(kappa)) > 0
    after = base + walk_offsets(eta, info.code, info.order, info.spacing)
    changed = np.flatnonzero(np.abs(after - profiles).max(axis=1) > 1e-12)
    assert changed.size == 2 and step._cousins[0] in changed
    moved_point = dict(point, step_county_age=step._parent_now[1])
    for name, sv in step.shared.items():
        sv.set_value(moved_point[name])
    np.testing.assert_allclose(base, np.asarray(step._inputs_fn()[0]), atol=1e-12)
    np.testing.assert_allclose(step._parent_now[1].mean(axis=0), np.asarray(point["step_county_age"]).mean(axis=0),
                               atol=1e-12)
    np.testing.assert_allclose(res, step._rows.residuals(cells, step._y), atol=1e-9)

    def county_walk_moved_its_mean_kept(old, new):
        assert not np.array_equal(new["step_county_age"], old["step_county_age"])
        np.testing.assert_allclose(new["step_county_age"].mean(axis=0), old["step_county_age"].mean(axis=0),
                                   atol=1e-12)

    step = WalkGibbs(vars=tract_walk, cousins=100.0, rng=np.random.default_rng(2), model=model)
    _, evals = steps_keep_the_tracts(model, rel, step, point, "walk_cousin_evals", check=county_walk_moved_its_mean_kept)
    assert evals > 0
    # the elliptical slice updates: on by default for the tracts' walk (one row per unit), off for
    # the counties' (several rows per unit), and whole steps without them keep the tracts too
    assert step.ellipses
    assert not WalkGibbs(vars=[model["step_scale_county_age"], model["step_county_age"]], model=model).ellipses
    step = WalkGibbs(vars=tract_walk, cousins=100.0, ellipses=False, rng=np.random.default_rng(2), model=model)
    assert not step.ellipses
    steps_keep_the_tracts(model, rel, step, point, "walk_cousin_evals", check=county_walk_moved_its_mean_kept)
    # a number of matchings: the carried update is followed by that many rounds of ellipses
    assert step.ellipse_rounds == 0
    assert WalkGibbs(vars=tract_walk, model=model).ellipse_rounds == int(ELLIPSES) >= 1
    step = WalkGibbs(vars=tract_walk, cousins=0.0, ellipses=3, rng=np.random.default_rng(2), model=model)
    assert step.ellipses and step.ellipse_rounds == 3
    steps_keep_the_tracts(model, rel, step, point, "walk_carry_evals")
    for bad in ("yes", -1, 1.5):
        with pytest.raises(ValueError, match="^ellipses must be None, True, False or a number of matchings >= 0$"):
            WalkGibbs(vars=tract_walk, ellipses=bad, model=model)
    assert sampled_stat(model, tract_walk, "cousins", "walk_cousin_evals") > 0


def test_a_parent_walk_must_be_another_walk_that_matches():
    # register_walk: a parent needs sibling groups and must be another walk's increments;
    # WalkGibbs: the parent walk must be registered, share the code, order and spacing, and be
    # centred (its prior is folded into the move's density as N(0, scales^2) raw increments)
    import dataclasses

    import pymc as pm

    from privinfer.pymc import WalkGibbs, register_walk
    from privinfer.pymc.registry import model_registry
    from test_walk_collapse import _tract_model

    with pm.Model():
        scales = pm.HalfNormal("s", 1.0, shape=(2,))
        inc = pm.Normal("d", 0.0, 1.0, shape=(2, 2))
        other = pm.Normal("p", 0.0, 1.0, shape=(1, 2))
        latent = pm.Normal("x", 0.0, 1.0, shape=(6,))
        kw = dict(scales=scales, increments=inc, prior_scale=1.0, base=np.zeros((2, 3)), kappa=1.0,
                  weights=np.zeros((2, 2)), latent=latent, grid=np.arange(6).reshape(2, 3), code=np.arange(3))
        with pytest.raises(ValueError, match="^parent needs sibling groups"):
            register_walk(**kw, parent=other)
        with pytest.raises(ValueError, match="^parent needs sibling groups"):
            register_walk(**kw, groups=np.array([0, 0]), parent=inc)
        assert register_walk(**kw, groups=np.array([0, 0]), parent=other).parent == "p"

    model, _ = _tract_model()
    walks = model_registry(model)["walks"]
    tract_walk = [model["step_scale_age"], model["step_tract_age"]]
    county = walks["step_county_age"]
    for changed in (dict(order=1), dict(weights=np.full((3, county.code.max()), 0.5))):
        walks["step_county_age"] = dataclasses.replace(county, **changed)
        with model, pytest.raises(ValueError, match="^the parent walk 'step_county_age' must share the code, order"):
            WalkGibbs(vars=tract_walk, cousins=0.5)
    walks["step_tract_age"] = dataclasses.replace(walks["step_tract_age"], parent="p")
    with model, pytest.raises(ValueError, match="^the parent walk 'p' of 'step_tract_age' is not registered$"):
        WalkGibbs(vars=tract_walk, cousins=0.5)
