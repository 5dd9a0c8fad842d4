"""The hierarchical model of a census hierarchy release (privinfer.census.hierarchy_model):
step assignment by plain pm.sample(), the invariant on every draw, and the posterior against
an exact computation (enumeration of the fibre, quadrature over the hyperparameters) on a
hierarchy of 2 tracts x 2 cells."""

import numpy as np
import pandas as pd
import pymc as pm
import pytest
from pymc.sampling.mcmc import assign_step_methods
from pymc.step_methods import CompoundStep
from scipy import special, stats

from census_helpers import random_frame
from privinfer.census import hierarchy_measurements, hierarchy_model, start_point
from privinfer.census.model import CARRY_ROWS, QUANTILE_CARRY
from privinfer.inference import gls_estimate
from privinfer.pymc import MeasuredPairsGibbs, WalkGibbs
from privinfer.pymc.walk import carried_pairs

QUERIES = {"total": (), "sex_age": ("sex", "age")}


def small_release(seed=3, rho=0.05):
    f = random_frame(seed, counties=3, max_tracts=2)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                  queries=QUERIES, rho=rho)
    return f, mech.publish(f["count"], rng=seed)


def test_plain_sample_assigns_the_pair_moves_to_the_cells():
    f, rel = small_release()
    model = hierarchy_model(rel)
    _, selected = assign_step_methods(model, None, methods=pm.STEP_METHODS)
    x_value = model.rvs_to_values[model["x"]]
    assert selected[MeasuredPairsGibbs] == [x_value]
    assert x_value not in selected.get(pm.NUTS, [])
    assert set(selected[pm.NUTS]) == {v for v in model.value_vars if v is not x_value}
    assert list(model.coords["cell"]) == list(rel.mechanism.cell_ids)


@pytest.mark.parametrize("smooth", [None, "age"])
def test_draws_keep_the_invariant_and_stay_non_negative(smooth):
    f, rel = small_release()
    model = hierarchy_model(rel, smooth=smooth, walk_steps="gibbs")
    with model:
        idata = pm.sample(150, tune=150, chains=1, cores=1, random_seed=4, progressbar=False,
                          compute_convergence_checks=False)
    x = idata.posterior["x"].values.reshape(-1, len(f))
    assert np.all(x.sum(axis=1) == f["count"].sum())
    assert x.min() >= 0
    acc = idata.sample_stats["lattice_accept"].values
    moved = idata.sample_stats["lattice_moved"].values
    assert np.all((acc > 0) & (acc <= 1)) and moved.mean() > 0.05  # the cells move
    if smooth:                                                         # and so does the walk
        assert idata.sample_stats["walk_accept"].values.mean() > 0.5
        # the scales' corrected proposals (a quadratic surrogate of the cells): mostly accepted;
        # a surrogate unrelated to the target would be refused nearly always
        assert idata.sample_stats["walk_scale_accept"].values.mean() > 0.5
        inc = idata.posterior["step_tract_age"].values[0]
        assert np.mean(np.any(np.diff(inc, axis=0) != 0, axis=(1, 2))) > 0.9
        scale = idata.posterior["step_scale_age"].values[0]
        assert np.all(np.diff(scale, axis=0) != 0)                     # exact draws every iteration
        assert idata.sample_stats["walk_carry_evals"].values.min() > 0  # the carried update ran


def test_start_point_is_on_the_fibre():
    f, rel = small_release()
    x0 = start_point(rel)
    assert x0.dtype == np.int64 and x0.min() >= 0 and x0.sum() == f["count"].sum()


def test_refuses_what_it_cannot_model():
    f = random_frame(1, counties=2, max_tracts=2)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                  queries=QUERIES, rho=0.05, invariant=None)
    with pytest.raises(ValueError, match="published totals"):
        hierarchy_model(mech.publish(f["count"], rng=0))
    with pytest.raises(TypeError, match="hierarchy measurements"):
        hierarchy_model(np.zeros(3))
    _, rel = small_release()
    with pytest.raises(ValueError, match="profile_scale"):
        hierarchy_model(rel, profile_scale=-1.0)


def test_plain_sample_assigns_walk_gibbs_to_the_walk():
    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", walk_steps="gibbs", smooth_levels="all")
    _, selected = assign_step_methods(model, None, methods=pm.STEP_METHODS)
    walk = {model.rvs_to_values[model[n]] for n in ("step_scale_age", "step_tract_age", "step_scale_county_age",
                                                    "step_county_age")}
    assert set(selected[WalkGibbs]) == walk
    assert not walk & set(selected[pm.NUTS])
    for steps in ("nuts", "auto"):     # a few tracts: NUTS (census.GIBBS_UNITS)
        nuts_model = hierarchy_model(rel, smooth="age", walk_steps=steps)
        _, selected = assign_step_methods(nuts_model, None, methods=pm.STEP_METHODS)
        assert WalkGibbs not in selected
    with pytest.raises(ValueError, match="walk_steps"):
        hierarchy_model(rel, walk_steps="slice")


def test_walk_gibbs_tunes_its_slice_widths_during_warm_up_only():
    from privinfer.pymc.walk_carry import CARRY_WIDTH
    from privinfer.pymc.walk_kernel import SLICE_WIDTH

    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", walk_steps="gibbs")
    with model:
        walk = WalkGibbs(vars=[model["step_scale_age"], model["step_tract_age"]])   # the tracts' walk
        pm.sample(draws=6, tune=8, chains=1, cores=1, step=[walk], random_seed=4, progressbar=False,
                  compute_convergence_checks=False)
    assert walk.n_tunes == 8 and not walk.tune
    assert walk.width.shape == (2,) and np.all(walk.width > 0) and np.all(walk.width != SLICE_WIDTH)
    frozen = walk.width.copy()
    point = model.initial_point()
    walk.step(point)                       # after warm-up the widths are constants of the chain
    np.testing.assert_array_equal(walk.width, frozen)
    # second-order walk over 3 age groups: 2 splits and 2 changes of slope
    assert walk.carry_width.shape == (4,) and np.all(walk.carry_width > 0) and np.all(walk.carry_width != CARRY_WIDTH)
    walk.reset_tuning()
    assert walk.n_tunes == 0 and np.all(walk.width == SLICE_WIDTH) and np.all(walk.carry_width == CARRY_WIDTH)


@pytest.mark.parametrize("quantile_carry", [None, 20.0, 1e9])
def test_walk_gibbs_carries_the_cells_and_keeps_every_tract_total(quantile_carry):
    # the carried update moves the cells with the walk: a WalkGibbs step returns new cells on
    # the fibre with every tract's total unchanged (the shifts sum to zero within a tract);
    # quantile_carry: no cell, the small ones, or every cell moved by the quantile map
    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", walk_steps="gibbs", quantile_carry=quantile_carry)
    tract = pd.factorize(f["tract"])[0]
    with model:
        walk = WalkGibbs(rng=np.random.default_rng(2))
    point = model.initial_point()
    x0 = np.asarray(point["x"]).copy()
    changed = 0
    for _ in range(20):
        new, stats = walk.step(point)
        x = np.asarray(new["x"])
        assert x.dtype == x0.dtype and x.min() >= 0 and x.sum() == x0.sum()
        np.testing.assert_array_equal(np.bincount(tract, weights=x), np.bincount(tract, weights=x0))
        changed += int(np.any(x != np.asarray(point["x"])))
        assert stats[0]["walk_carry_evals"] > 0
        point = new
    assert changed >= 10
    with model, pytest.raises(ValueError, match="carry_directions"):
        WalkGibbs(carry_directions=0)


def test_walk_gibbs_carries_the_cells_along_its_scales_when_asked():
    # scale_carry: after the usual updates, that many log scales are slice sampled again with
    # every tract's increments and cells carried along (exactness: tests/test_walk_carry.py);
    # the step keeps every tract's total, tunes that update's own widths during warm-up, and
    # refuses a count that is not a non-negative integer
    from privinfer.pymc.walk_kernel import SLICE_WIDTH

    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", walk_steps="gibbs")
    tract = pd.factorize(f["tract"])[0]
    with model:
        walk = WalkGibbs(vars=[model["step_scale_age"], model["step_tract_age"]], scale_carry=5,
                         rng=np.random.default_rng(5))
        for bad in (-1, 1.5):
            with pytest.raises(ValueError, match="^scale_carry must be an integer >= 0$"):
                WalkGibbs(scale_carry=bad)
    assert walk.scale_carry == 2                    # at most the walk's K - 1 = 2 scales
    point = model.initial_point()
    x0 = np.asarray(point["x"]).copy()
    for _ in range(10):
        point, _ = walk.step(point)
        x = np.asarray(point["x"])
        np.testing.assert_array_equal(np.bincount(tract, weights=x), np.bincount(tract, weights=x0))
        assert x.min() >= 0
    assert np.all(walk.carry_scale_width > 0) and np.all(walk.carry_scale_width != SLICE_WIDTH)
    walk.reset_tuning()
    assert np.all(walk.carry_scale_width == SLICE_WIDTH)


# the age groups "0-17", "18-64", "65+" span the years 0..17, 18..64 and 65.. (the open group
# placed 4 years above 65): midpoints 9, 41.5 and 69, in the hierarchy's order of the categories
MIDPOINTS = {"0-17": 9.0, "18-64": 41.5, "65+": 69.0}


@pytest.mark.parametrize("walk_order, positions, spacing", [(1, "auto", None), (2, "auto", "ages"),
                                                            (2, None, None), (2, (0.0, 1.0, 5.0), (1.0, 4.0))])
@pytest.mark.parametrize("walk_steps", ["gibbs", "nuts"])
def test_smooth_departures_enter_the_prior_as_written(walk_steps, walk_order, positions, spacing):
    # alpha of every cell = kappa softmax(theta_county + r_tract,age) with r the random walk
    # whose increments are step_scale^w * step (the partially non-centred increments, w the
    # model's data noncentering_age) less their mean over the county's tracts -- the steps
    # between age groups themselves (order 1) or their cumulative sums (order 2), times the
    # distances between the groups' positions over their mean -- recomputed here in NumPy at a
    # random point; WalkGibbs is given the same spacing
    from privinfer.pymc.registry import model_registry

    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", walk_steps=walk_steps, walk_order=walk_order,  # 3 age groups
                            smooth_positions=positions, smooth_levels="lowest")
    hier = rel.mechanism.hierarchy
    if spacing == "ages":
        spacing = np.abs(np.diff([MIDPOINTS[c] for c in hier.categories[list(hier.attributes).index("age")]]))
    h = np.ones(2) if spacing is None else np.asarray(spacing) / np.mean(spacing)
    assert "step_scale_age" not in hierarchy_model(rel).named_vars
    rng = np.random.default_rng(2)
    point = model.initial_point()
    for k, v in point.items():
        point[k] = v + rng.normal(0, 0.3, np.shape(v)) if not k.startswith("x") else v
    names = ["step_scale_age", "step_tract_age", "log_profile_county", "concentration", "log_profile_state",
             "scale_county", "departure_county"]
    graphs = model.replace_rvs_by_values([model_registry(model)["lattice"]["x"].prior.alpha]
                                         + [model[n] for n in names])
    fn = model.compile_fn(graphs, inputs=model.value_vars, on_unused_input="ignore")
    alpha, *rest = fn(point)
    vals = dict(zip(names, rest))
    # the counties' departures sum to zero under the state (one parent)
    z = vals["departure_county"] - vals["departure_county"].mean(axis=0)
    np.testing.assert_allclose(vals["log_profile_county"],
                               vals["log_profile_state"][None, :] + vals["scale_county"][None, :] * z, atol=1e-12)
    w = model["noncentering_age"].get_value()
    assert w.shape == vals["step_tract_age"].shape
    # WalkGibbs samples the centred increments (w = 0); NUTS the partly non-centred ones
    assert np.all(w == 0) if walk_steps == "gibbs" else np.all((w > 0) & (w <= 1))
    steps = vals["step_scale_age"][None, :] ** w * vals["step_tract_age"]
    par = np.asarray(hier.parent[-1])
    for c in np.unique(par):   # the tracts' increments sum to zero in each county
        steps[par == c] -= steps[par == c].mean(axis=0)
    if walk_order == 2:
        steps = np.cumsum(steps, axis=1) * h
    walk = np.concatenate([np.zeros((steps.shape[0], 1)), np.cumsum(steps, axis=1)], axis=1)
    age = np.unravel_index(np.arange(hier.d), hier.shape)[list(hier.attributes).index("age")]
    theta = vals["log_profile_county"][np.asarray(hier.parent[-1])] + walk[:, age]
    p = np.exp(theta - theta.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    expected = (vals["concentration"] * p).ravel()[hier.leaf_unit * hier.d + hier.combination]
    np.testing.assert_allclose(alpha, expected, rtol=1e-10)
    walks = model_registry(model)["walks"]
    if walk_steps == "gibbs":
        registered = next(iter(walks.values())).spacing
        np.testing.assert_allclose(np.ones(2) if registered is None else registered, h, rtol=1e-12)
    with pytest.raises(ValueError, match="smooth"):
        hierarchy_model(rel, smooth="colour")
    for bad in ((0.0, 2.0, 1.0), (0.0, 1.0), (0.0, np.nan, 1.0), "ages", [[0.0, 1.0, 2.0]]):
        with pytest.raises(ValueError, match="smooth_positions"):
            hierarchy_model(rel, smooth="age", smooth_positions=bad)
    with pytest.raises(ValueError, match="walk_order"):
        hierarchy_model(rel, walk_order=3)
    with pytest.raises(ValueError, match="cell_effects"):
        hierarchy_model(rel, cell_effects="yes")
    with pytest.raises(ValueError, match="cell_effect_prior"):
        hierarchy_model(rel, cell_effects=True, cell_effect_prior=-1.0)


# --- exact posterior on 2 tracts x 2 cells -------------------------------------------------

TINY = pd.DataFrame({"tract": ["a", "a", "b", "b"], "sex": ["m", "f", "m", "f"], "count": [4, 2, 1, 5]})
TOTAL = int(TINY["count"].sum())
PROFILE_SCALE = 3.0


def tiny_release():
    mech = hierarchy_measurements(TINY, geography=["tract"], attributes=["sex"],
                                  queries={"total": (), "sex": ("sex",)}, rho=0.1)
    return mech, mech.publish(TINY["count"], rng=21)


def _fibre(mech, y):
    """The fibre {x >= 0, sum x = 12} of 4 cells and the discrete Gaussian log likelihood of
    every measurement on it, up to a constant."""
    X = np.array([(i, j, k, TOTAL - i - j - k) for i in range(TOTAL + 1) for j in range(TOTAL + 1 - i)
                  for k in range(TOTAL + 1 - i - j)])
    B = mech.matrix.toarray()
    return X, -np.sum((y - X @ B.T) ** 2 / (2 * mech.row_sigma**2), axis=1)


def exact_posterior(mech, y):
    """p(x | y) over the fibre {x >= 0, sum x = 12}: the discrete Gaussian likelihood of every
    measurement times the prior of x integrated over the hyperparameters by the trapezoid rule
    on a fine grid.  The prior: theta = (a, -a) with a ~ N(0, s^2/2) (a zero-sum normal of
    two elements), kappa = 1/phi^2 with phi ~ HalfNormal(0.3), each tract's cells
    Dirichlet-multinomial (kappa softmax(theta)) given its total, the tract totals flat (no
    smooth departures: the one attribute has 2 categories)."""
    X, loglik = _fibre(mech, y)
    a = np.linspace(-9, 9, 361)                          # +-4.2 prior sd
    # log phi from 1e-4 (prior mass below: 3e-4; the multinomial limit) to 1.5 (5 prior sd)
    lphi = np.linspace(np.log(1e-4), np.log(1.5), 241)
    A, LP = np.meshgrid(a, lphi, indexing="ij")
    A, LP = A.ravel(), LP.ravel()
    K = np.exp(-2 * LP)
    log_w = (stats.norm.logpdf(A, 0, PROFILE_SCALE / np.sqrt(2))
             + stats.halfnorm.logpdf(np.exp(LP), scale=0.3) + LP)  # + LP: the density of log phi
    am, af = K * special.expit(2 * A), K * special.expit(-2 * A)
    # order of the cells: the mechanism's (its cells are the frame's rows)
    ids = list(mech.cell_ids)
    cm, cf = ids.index("a|m"), ids.index("a|f")
    dm, df = ids.index("b|m"), ids.index("b|f")

    def dirmult(xm, xf):  # (fibre, nodes)
        xm, xf = xm[:, None].astype(float), xf[:, None].astype(float)
        n = xm + xf
        return (special.gammaln(n + 1) + special.gammaln(K) - special.gammaln(n + K)
                + special.gammaln(xm + am) - special.gammaln(am) - special.gammaln(xm + 1)
                + special.gammaln(xf + af) - special.gammaln(af) - special.gammaln(xf + 1))

    lp = dirmult(X[:, cm], X[:, cf]) + dirmult(X[:, dm], X[:, df]) + log_w
    logprior = special.logsumexp(lp, axis=1)  # equal grid steps: the trapezoid's interior weights
    logpost = loglik + logprior
    p = np.exp(logpost - logpost.max())
    p /= p.sum()
    # the posterior mean of a, for the hyperparameter check
    post_nodes = special.softmax((lp + loglik[:, None]).ravel()).reshape(lp.shape).sum(0)
    return X, p, float(np.sum(post_nodes * A))


#: |MCMC mean - exact mean| in units of the Monte Carlo standard error sd / sqrt(ESS);
#: Bonferroni over the 4 cells and one hyperparameter at family-wise level 0.001
Z_CRIT = stats.norm.isf(0.001 / (2 * 5))


def _sample_and_check_cells(model, X, p, seed):
    """Sample the tiny model by plain pm.sample() and check every draw's total and the cells'
    posterior means against the exact ones (``X`` the fibre, ``p`` its probabilities)."""
    exact_mean = p @ X
    exact_sd = np.sqrt(p @ X**2 - exact_mean**2)
    with model:
        idata = pm.sample(2000, tune=1000, chains=2, cores=1, random_seed=seed, progressbar=False)
    x = idata.posterior["x"]
    assert np.all(x.values.sum(-1) == TOTAL)
    ess = np.asarray(pm.ess(idata, var_names=["x"])["x"])
    got = x.values.reshape(-1, 4).mean(0)
    z = (got - exact_mean) / (exact_sd / np.sqrt(ess))
    assert np.all(np.abs(z) < Z_CRIT), (got, exact_mean, z)
    return idata


def _check_mean(draws, ess, exact):
    """The posterior mean of one hyperparameter against its exact value, in Monte Carlo errors."""
    z = (draws.mean() - exact) / (draws.std() / np.sqrt(ess))
    assert abs(z) < Z_CRIT, (draws.mean(), exact)


def test_posterior_matches_the_exact_one_on_two_tracts():
    mech, rel = tiny_release()
    X, p, a_mean = exact_posterior(mech, np.asarray(rel.y, float))
    model = hierarchy_model(rel, profile_scale=PROFILE_SCALE)
    idata = _sample_and_check_cells(model, X, p, seed=8)
    m_idx = list(model.coords["combination"]).index("m")
    theta_m = idata.posterior["log_profile_state"].values[..., m_idx].ravel()
    ess_t = float(pm.ess(idata, var_names=["log_profile_state"])["log_profile_state"].values[m_idx])
    _check_mean(theta_m, ess_t, a_mean)


OVERDISPERSION = 0.05


def exact_posterior_with_cell_effects(mech, y):
    """As :func:`exact_posterior` with phi fixed at OVERDISPERSION and the cell effects: each
    cell's log profile gets eps ~ N(0, omega^2), omega ~ HalfNormal(0.3), entered less their
    mean over the two tracts (siblings under the state), so tract a's share of "m" is
    expit(2a + d) and tract b's expit(2a - d), d = ((eps_am - eps_bm) - (eps_af - eps_bf)) / 2
    ~ N(0, omega^2).  Given (a, omega) the pair of tracts is integrated over d by Gauss-Hermite
    (40 nodes: the integrand is smooth in d), then (a, omega) by the trapezoid rule (a over +-4.2
    prior sd, omega over [0, 1.5], 5 prior sd).  Returns the fibre, p(x | y) and the posterior
    mean of omega."""
    X, loglik = _fibre(mech, y)
    a = np.linspace(-9, 9, 181)
    om = np.linspace(0.0, 1.5, 151)
    t, wt = special.roots_hermite(40)
    kappa = 1.0 / OVERDISPERSION**2
    pairs = [(m, n - m) for n in range(TOTAL + 1) for m in range(n + 1)]
    index = {p: i for i, p in enumerate(pairs)}
    xm, xf = (np.array(c, dtype=float)[:, None, None] for c in zip(*pairs))

    def log_f(eta):
        # every pair's Dirichlet-multinomial at eta (a, omega): (pairs, 181, 151)
        am, af = kappa * special.expit(eta), kappa * special.expit(-eta)
        return (special.gammaln(xm + xf + 1) + special.gammaln(kappa) - special.gammaln(xm + xf + kappa)
                + special.gammaln(xm + am) - special.gammaln(am) - special.gammaln(xm + 1)
                + special.gammaln(xf + af) - special.gammaln(af) - special.gammaln(xf + 1))

    ids = list(mech.cell_ids)
    cm, cf, dm, df = (ids.index(c) for c in ("a|m", "a|f", "b|m", "b|f"))
    ia = np.array([index[(p, q)] for p, q in zip(X[:, cm], X[:, cf])])
    ib = np.array([index[(p, q)] for p, q in zip(X[:, dm], X[:, df])])
    lp = np.full((X.shape[0], a.size, om.size), -np.inf)
    for tk, wk in zip(t, wt):
        d = np.sqrt(2.0) * om[None, :] * tk                       # a node of d ~ N(0, omega^2)
        lp = np.logaddexp(lp, log_f(2 * a[:, None] + d)[ia] + log_f(2 * a[:, None] - d)[ib]
                          + np.log(wk / np.sqrt(np.pi)))
    log_w = (stats.norm.logpdf(a, 0, PROFILE_SCALE / np.sqrt(2))[:, None]
             + stats.halfnorm.logpdf(om, scale=0.3)[None, :])
    log_w[:, [0, -1]] += np.log(0.5)                     # the trapezoid's end weights in omega
    lp += log_w[None]                                    # (fibre, a, omega)
    logpost = loglik + special.logsumexp(lp, axis=(1, 2))
    p = np.exp(logpost - logpost.max())
    p /= p.sum()
    nodes = special.softmax(lp + loglik[:, None, None]).sum(axis=(0, 1))
    return X, p, float(np.sum(nodes * om))


def _check_cell_effects_enter_alpha(model, mech):
    # at a random point, every cell's alpha is kappa softmax(theta + eps - mean eps) over its
    # tract (the effects less their mean over the two tracts)
    from privinfer.pymc.registry import model_registry

    rng = np.random.default_rng(5)
    point = {k: v + rng.normal(0, 0.5, np.shape(v)) if not k.startswith("x") else v
             for k, v in model.initial_point().items()}
    names = ["log_profile_state", "cell_effect"]
    graphs = model.replace_rvs_by_values([model_registry(model)["lattice"]["x"].prior.alpha]
                                         + [model[n] for n in names])
    alpha, theta, eps = model.compile_fn(graphs, inputs=model.value_vars, on_unused_input="ignore")(point)
    eta = theta[None, :] + eps - eps.mean(0)                       # (tract, combination)
    expected = special.softmax(eta, axis=1) / OVERDISPERSION**2
    hier = mech.hierarchy
    np.testing.assert_allclose(alpha, expected.ravel()[hier.leaf_unit * hier.d + hier.combination], rtol=1e-10)


def test_cell_effects_posterior_matches_the_exact_one_on_two_tracts():
    mech, rel = tiny_release()
    X, p, omega_mean = exact_posterior_with_cell_effects(mech, np.asarray(rel.y, float))
    model = hierarchy_model(rel, profile_scale=PROFILE_SCALE, overdispersion=OVERDISPERSION, cell_effects=True)
    assert model.named_vars_to_dims["cell_effect"] == ("tract", "combination")
    _check_cell_effects_enter_alpha(model, mech)
    # the sampled posterior (weak on the effects' wiring here: the release barely informs them,
    # so the check above carries that; this one checks that NUTS and the cells' step agree with
    # the exact posterior they share)
    idata = _sample_and_check_cells(model, X, p, seed=9)
    ess_o = float(pm.ess(idata, var_names=["cell_effect_scale"])["cell_effect_scale"])
    _check_mean(idata.posterior["cell_effect_scale"].values.ravel(), ess_o, omega_mean)


def _random_point(model, seed):
    rng = np.random.default_rng(seed)
    point = model.initial_point()
    return {k: (v + rng.normal(0, 0.3, np.shape(v)) if not k.startswith("x") else v) for k, v in point.items()}


def _values(model, point, tensors):
    fn = model.compile_fn(model.replace_rvs_by_values(list(tensors)), inputs=model.value_vars,
                          on_unused_input="ignore")
    return fn(point)


def _walk(scale, raw, w, groups, h):
    """A second-order walk over 3 categories in NumPy: increments scale^w * raw less their group
    means, cumulative sums times the spacing h, then summed from 0."""
    inc = scale[None, :] ** w * raw
    for g in np.unique(groups):
        inc[groups == g] -= inc[groups == g].mean(axis=0)
    inc = np.cumsum(inc, axis=1) * h
    return np.concatenate([np.zeros((inc.shape[0], 1)), np.cumsum(inc, axis=1)], axis=1)


@pytest.mark.parametrize("walk_steps", ["gibbs", "nuts"])
def test_middle_levels_walk_enters_the_county_profiles_as_written(walk_steps):
    # smooth_levels="all": log_profile_county = state + scale_county[age] * (z less its mean over
    # the counties) + the county's own second-order walk over the ages, z zero-sum over the sexes
    # at every age (the sex contrasts: the walk carries the age profile); recomputed in NumPy at a
    # random point; the tracts' walk departs from those profiles as before
    f, rel = small_release()
    hier = rel.mechanism.hierarchy
    model = hierarchy_model(rel, smooth="age", smooth_levels="all", smooth_positions=(0.0, 1.0, 5.0),
                            walk_steps=walk_steps)
    assert "step_scale_county_age" not in hierarchy_model(rel, smooth="age", smooth_levels="lowest").named_vars
    point = _random_point(model, 6)
    names = ["log_profile_county", "log_profile_state", "scale_county", "departure_county", "step_scale_county_age",
             "step_county_age"]
    v = dict(zip(names, _values(model, point, [model[n] for n in names])))
    w = model["noncentering_county_age"].get_value()
    assert w.shape == v["step_county_age"].shape
    assert np.all(w == 0) if walk_steps == "gibbs" else np.all((w > 0) & (w <= 1))
    U = hier.n_units(1)
    walk = _walk(v["step_scale_county_age"], v["step_county_age"], w, np.zeros(U), np.array([1.0, 4.0]) / 2.5)
    sex, age = np.unravel_index(np.arange(hier.d), hier.shape)
    z = v["departure_county"]                                   # (county, age, sex)
    assert z.shape == (U, 3, 2)
    np.testing.assert_allclose(z.sum(axis=2), 0.0, atol=1e-12)  # zero-sum over the sexes
    z = (z - z.mean(axis=0))[:, age, sex]
    np.testing.assert_allclose(v["log_profile_county"],
                               v["log_profile_state"][None, :] + v["scale_county"][age][None, :] * z + walk[:, age],
                               atol=1e-12)
    with pytest.raises(ValueError, match="smooth_levels"):
        hierarchy_model(rel, smooth_levels="county")


def test_smooth_levels_auto_gives_counties_a_walk_from_enough_counties_on():
    from privinfer.census import SMOOTH_LEVEL_UNITS

    for counties in (SMOOTH_LEVEL_UNITS - 1, SMOOTH_LEVEL_UNITS):
        f = random_frame(5, counties=counties, max_tracts=1)
        mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                      queries=QUERIES, rho=0.05)
        model = hierarchy_model(mech.publish(f["count"], rng=5), smooth="age")
        assert ("step_county_age" in model.named_vars) == (counties >= SMOOTH_LEVEL_UNITS)


def test_middle_levels_walk_is_registered_with_what_it_departs_from():
    # WalkGibbs samples both walks; each is registered with a base that, plus its own offsets
    # (the county walk's repeated over each county's tracts: members), is the tracts' log profile
    from privinfer.pymc.registry import model_registry
    from privinfer.pymc.walk_kernel import centred, walk_offsets

    f, rel = small_release()
    hier = rel.mechanism.hierarchy
    model = hierarchy_model(rel, smooth="age", smooth_levels="all", walk_steps="gibbs")
    walks = model_registry(model)["walks"]
    assert set(walks) == {"step_tract_age", "step_county_age"}
    point = _random_point(model, 7)
    county = np.asarray(hier.parent[-1])
    tract_walk, county_walk = walks["step_tract_age"], walks["step_county_age"]
    assert tract_walk.members is None
    np.testing.assert_array_equal(county_walk.members, county)
    # the carried update of the counties with at most CARRY_ROWS tracts, with the tracts' fractions;
    # both walks' carried pairs matched by size: the units' GLS totals
    assert tract_walk.carry_units is None
    np.testing.assert_array_equal(county_walk.carry_units, np.bincount(county) <= CARRY_ROWS)
    np.testing.assert_array_equal(county_walk.carry, tract_walk.carry)
    tract_size = np.maximum(np.bincount(hier.leaf_unit, weights=gls_estimate(rel).x), 1.0)
    np.testing.assert_allclose(tract_walk.sizes, tract_size)
    np.testing.assert_allclose(county_walk.sizes, np.bincount(county, weights=tract_size))
    # the tracts' carried update moves their cells estimated under QUANTILE_CARRY by quantiles
    np.testing.assert_array_equal(tract_walk.lump, gls_estimate(rel).x < QUANTILE_CARRY)
    assert 0 < tract_walk.lump.sum() < tract_walk.lump.size and county_walk.lump is None
    off = hierarchy_model(rel, smooth="age", smooth_levels="all", walk_steps="gibbs", quantile_carry=None)
    assert model_registry(off)["walks"]["step_tract_age"].lump is None
    for bad in (0.0, -3.0, np.inf, "20", True, [20.0]):
        with pytest.raises(ValueError, match="^quantile_carry must be None or a finite count > 0$"):
            hierarchy_model(rel, smooth="age", walk_steps="gibbs", quantile_carry=bad)
    names = ["log_profile_county", "step_scale_age", "step_tract_age", "step_scale_county_age", "step_county_age"]
    v = dict(zip(names, _values(model, point, [model[n] for n in names])))
    b_tract, b_county = _values(model, point, [tract_walk.base, county_walk.base])
    h = tract_walk.spacing
    r_tract = walk_offsets(centred(v["step_tract_age"], county), tract_walk.code, 2, h)
    r_county = walk_offsets(centred(v["step_county_age"], np.zeros(hier.n_units(1), np.int64)), county_walk.code, 2, h)
    profile = v["log_profile_county"][county] + r_tract
    np.testing.assert_allclose(b_tract + r_tract, profile, atol=1e-12)
    np.testing.assert_allclose(b_county + r_county[county], profile, atol=1e-12)
    with model:
        _, selected = assign_step_methods(model, None, methods=pm.STEP_METHODS)
        assert len(selected[WalkGibbs]) == 4
        step = WalkGibbs(vars=selected[WalkGibbs], rng=np.random.default_rng(3))
    assert isinstance(step, CompoundStep) and [type(m) for m in step.methods] == [WalkGibbs, WalkGibbs]
    assert [m.scale_update for m in step.methods] == ["transport", "unit_transport"]


def test_counties_carried_update_pairs_the_small_counties_among_themselves(monkeypatch):
    # with CARRY_ROWS = 2, the counties of 1 or 2 tracts (of 8 counties of 1 to 4 tracts) are
    # the carried update's units: every matching pairs them only, as many pairs as they allow
    # (a matching by size leaves the smallest or the largest out when they are odd in number)
    import privinfer.census.model as census_model
    from privinfer.pymc.registry import model_registry

    monkeypatch.setattr(census_model, "CARRY_ROWS", 2)
    f = random_frame(5, counties=8, max_tracts=4)
    rel = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"], queries=QUERIES,
                                 rho=0.05).publish(f["count"], rng=5)
    model = hierarchy_model(rel, smooth="age", smooth_levels="all", walk_steps="gibbs")
    info = model_registry(model)["walks"]["step_county_age"]
    tracts = np.bincount(rel.mechanism.hierarchy.parent[-1])
    assert 2 <= np.sum(tracts <= 2) < tracts.size
    np.testing.assert_array_equal(info.carry_units, tracts <= 2)
    with model:
        step = WalkGibbs(vars=[model["step_scale_county_age"], model["step_county_age"]], rng=np.random.default_rng(4))
    small = np.flatnonzero(info.carry_units)
    for _ in range(20):
        (u, v), _ = carried_pairs(step.rng, info, tracts.size, 8)
        assert np.all(np.isin(np.r_[u, v], small)) and u.size == small.size // 2


def test_sampling_with_walks_at_two_levels_moves_both_and_keeps_the_invariant():
    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", smooth_levels="all", walk_steps="gibbs")
    with model:
        idata = pm.sample(draws=30, tune=20, chains=1, cores=1, random_seed=8, progressbar=False,
                          compute_convergence_checks=False)
    for name in ("step_county_age", "step_tract_age", "step_scale_county_age"):
        draws = idata.posterior[name].values[0]
        assert np.mean(np.any(np.diff(draws, axis=0) != 0, axis=tuple(range(1, draws.ndim)))) > 0.5
    # the pair moves' Laplace proposals are accepted most of the time (near 0.9 or more on such
    # releases); 3 counties give one county pair per round, so a single iteration's 2 moves can
    # both be refused: the mean over 30 iterations is tested, a broken proposal gives near 0
    assert np.all(idata.sample_stats["walk_accept"].values.mean(axis=(0, 1)) > 0.5)
    x = idata.posterior["x"].values.reshape(-1, len(f))
    np.testing.assert_array_equal(x.sum(axis=1), rel.t.sum())


def test_partly_non_centred_increments_keep_the_prior():
    # increments delta = sigma^w * step with step ~ N(0, sigma^(1-w)): delta / sigma must be
    # standard normal whatever w (in (0, 1], one per tract and step); KS test on prior draws
    # (1,000 draws x every tract and step, pooled; p > 0.001 fails with probability 0.001 under
    # a correct prior, while sd sigma^w instead of sigma^(1-w) would give sd sigma^(2w-1)
    # and fail at once unless every w were 1/2)
    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", walk_steps="nuts")
    w = model["noncentering_age"].get_value()
    assert np.all((w > 0) & (w <= 1))
    # exponents spread over (0, 1] (the data's own sit near 1 on this small, low-noise release)
    w = np.random.default_rng(4).uniform(0.02, 1.0, size=w.shape)
    model["noncentering_age"].set_value(w)
    scale, step = pm.draw([model["step_scale_age"], model["step_tract_age"]], draws=1000, random_seed=5)
    z = (scale[:, None, :] ** w * step) / scale[:, None, :]
    assert stats.kstest(z.ravel(), "norm").pvalue > 0.001


@pytest.mark.parametrize("walk_steps", ["gibbs", "nuts"])
def test_step_scales_have_the_rayleigh_prior(walk_steps):
    # the model's log density of the step scales (without the log transform's Jacobian) is
    # SciPy's Rayleigh with scale step_prior, and WalkGibbs is registered with that prior
    from privinfer.pymc.registry import model_registry

    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", walk_steps=walk_steps, step_prior=0.2)
    sigma = np.array([0.01, 0.15, 0.7])[: model["step_scale_age"].type.shape[0]]
    logp = model.compile_logp(vars=[model["step_scale_age"]], jacobian=False, sum=True)
    point = model.initial_point()
    point["step_scale_age_log__"] = np.log(sigma)
    np.testing.assert_allclose(logp(point), stats.rayleigh.logpdf(sigma, scale=0.2).sum(), rtol=1e-10)
    walks = model_registry(model)["walks"]
    if walk_steps == "gibbs":
        info = next(iter(walks.values()))
        assert info.prior_dof == 2 and info.prior_scale == pytest.approx(0.2, rel=1e-12)
    else:
        assert not walks


def test_fixed_overdispersion():
    f, rel = small_release()
    model = hierarchy_model(rel, overdispersion=0.05)
    assert "overdispersion" not in model.named_vars
    kappa = pm.draw(model["concentration"])
    np.testing.assert_allclose(kappa, 1 / 0.05**2)
    with pytest.raises(ValueError, match="overdispersion"):
        hierarchy_model(rel, overdispersion=0.0)
    with pytest.raises(ValueError, match="overdispersion"):
        hierarchy_model(rel, overdispersion="learned")


def test_overdispersion_auto_is_learned_alone_and_fixed_beside_cell_effects():
    from privinfer.census.model import CELL_EFFECTS_OVERDISPERSION

    f, rel = small_release()
    assert "overdispersion" in hierarchy_model(rel).named_vars
    assert "overdispersion" in hierarchy_model(rel, overdispersion=None, cell_effects=True).named_vars
    model = hierarchy_model(rel, cell_effects=True)
    assert "overdispersion" not in model.named_vars
    np.testing.assert_allclose(pm.draw(model["concentration"]), 1 / CELL_EFFECTS_OVERDISPERSION**2)


def _dirichlet_multinomial_frame(seed, kappa, counties=6, tracts=10, size=4000):
    """Tracts of ``size`` people whose 2 x 23 cells are Dirichlet-multinomial with concentration
    ``kappa`` around their county's profile, each tract also tilted old or young (an age walk,
    which the start's within-age splits must not read as overdispersion)."""
    rng = np.random.default_rng(seed)
    ages = np.arange(23)
    rows = []
    for c in range(counties):
        county = rng.dirichlet(np.full(46, 20.0))
        for t in range(tracts):
            tilt = np.exp(rng.normal(0.0, 0.03) * np.tile(ages, 2))
            p = county * tilt / (county * tilt).sum()
            x = rng.multinomial(size, rng.dirichlet(kappa * p))
            for j in range(46):
                rows.append((f"210{c:02d}", f"210{c:02d}{t:06d}", "male" if j < 23 else "female", f"a{j % 23:02d}", x[j]))
    return pd.DataFrame(rows, columns=["county", "tract", "sex", "age", "count"])


@pytest.mark.parametrize("rho, tol", [(1.0, 0.25), (0.0025, 0.4)])
def test_overdispersion_starts_near_a_known_concentration(rho, tol):
    from privinfer.census.model import _smooth_axis
    from privinfer.census.starts import start_overdispersion
    from privinfer.inference import gls_estimate

    kappa = 800.0
    f = _dirichlet_multinomial_frame(11, kappa)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"], queries=QUERIES,
                                  rho=rho)
    est = gls_estimate(mech.publish(f["count"], rng=11))
    hier = mech.hierarchy
    phi = start_overdispersion(hier, est, _smooth_axis(hier, "auto"))
    # 60 tracts x 23 age groups: the statistic is a sum of 1,380 terms of about one scaled
    # chi-square(1) each (relative sd sqrt(2/1380) = 3.8%); the excess factor (A + beta)/(1 + beta)
    # has log-derivative about -0.8 in log kappa here (A ~ 87, beta ~ 35), so log kappa's sd is
    # about 5%, and 0.25 is 5 sds.  At rho = 0.0025 (the census benchmark's) the GLS noise is
    # subtracted: about 1.5 times the Dirichlet-multinomial's variance per cell, it multiplies
    # the statistic's sd relative to the excess by about 2.5 (log kappa's sd about 12%): 0.4 is
    # 3.3 sds.
    assert abs(np.log(1.0 / phi**2 / kappa)) < tol


def test_chains_start_from_the_gls_estimate():
    from privinfer.census.model import _smooth_axis
    from privinfer.census.starts import start_overdispersion
    from privinfer.inference import gls_estimate

    f, rel = small_release()
    model = hierarchy_model(rel)
    est = gls_estimate(rel)
    hier = rel.mechanism.hierarchy
    assert all(v is None for v in model.rvs_to_initial_values.values())    # support points, not initvals
    pooled = np.bincount(hier.combination, weights=np.maximum(est.x, 0), minlength=hier.d)
    expected = np.log(pooled + 0.5) - np.log(pooled + 0.5).mean()
    point = model.initial_point()
    outs = model.replace_rvs_by_values([model["log_profile_state"], model["overdispersion"]])
    profile, phi = model.compile_fn(outs, inputs=model.value_vars, on_unused_input="ignore")(point)
    np.testing.assert_allclose(profile, expected, atol=1e-10)
    assert phi == pytest.approx(start_overdispersion(hier, est, _smooth_axis(hier, "auto")), rel=1e-10)


def _assert_same_log_densities(model, ref, seed, sd):
    """``model``'s log densities of ``ref``'s variables equal ``ref``'s at 3 random points of the
    free coordinates (normal with sd ``sd``), the transforms' Jacobians included."""
    mine = model.compile_logp(vars=[model[v.name] for v in ref.free_RVs], sum=False)
    theirs = ref.compile_logp(sum=False)
    rng = np.random.default_rng(seed)
    point = model.initial_point()
    for _ in range(3):
        p = {v.name: rng.normal(0.0, sd, np.shape(point[v.name])) for v in ref.value_vars}
        np.testing.assert_allclose([np.sum(v) for v in mine(dict(point, **p))], [np.sum(v) for v in theirs(p)],
                                   rtol=1e-12)


def test_started_variables_keep_their_laws():
    """The custom-distribution forms of the top profile and the overdispersion have the zero-sum
    normal's and the half-normal's log densities, Jacobians of their free coordinates included."""
    f, rel = small_release()
    model = hierarchy_model(rel)
    d = rel.mechanism.hierarchy.d
    rescaled = {name: model.rvs_to_transforms[model[name]].transform_list[-1]
                for name in ("log_profile_state", "overdispersion")}      # after the default transforms
    with pm.Model() as ref:
        pm.ZeroSumNormal("log_profile_state", sigma=3.0, shape=(d,), transform=rescaled["log_profile_state"])
        pm.HalfNormal("overdispersion", sigma=0.3, transform=rescaled["overdispersion"])
    _assert_same_log_densities(model, ref, 0, 3.0)


def test_departure_starts_recover_a_known_spread():
    # 400 units in 2 sibling groups, K = 5 categories x m = 2 sexes: sex contrasts with spread
    # tau_k between siblings, observed with log-count variances from 1e-4 to 1e-2 (units differing
    # in size 100-fold); DerSimonian-Laird on 400 units: where tau^2 dominates the noise, tau's
    # relative sd is about 1/sqrt(2 x 400) = 3.5%, about doubled where the noise is comparable
    # (tau = 0.05 against noise sds up to 0.07); 0.25 is over 3.5 sds
    from privinfer.census.starts import start_departures

    rng = np.random.default_rng(11)
    U, K, m = 400, 5, 2
    tau = np.array([0.05, 0.1, 0.2, 0.4, 0.08])
    parent = np.repeat([0, 1], U // 2)
    v = np.exp(rng.uniform(np.log(1e-4), np.log(1e-2), (U, K * m)))
    z = rng.normal(0.0, 1.0, (U, K, m))
    z -= z.mean(axis=2, keepdims=True)
    true = (tau[None, :, None] * z).reshape(U, K * m) + np.tile(rng.normal(0, 1, K * m), (2, 1))[parent]
    logs = true + rng.normal(0.0, np.sqrt(v))
    est_tau, z0 = start_departures(np.exp(logs), v, parent, np.arange(K * m), K)
    assert np.all(np.abs(np.log(est_tau / tau)) < 0.25)
    np.testing.assert_allclose(z0.sum(axis=2), 0.0, atol=1e-12)
    assert np.corrcoef(z0.ravel(), z.ravel())[0, 1] > 0.8       # the shrunk contrasts track the truth


def test_unit_tables_of_an_aggregated_level_use_the_sums_own_variances():
    # a county's cell is a sum of its tracts' cells: its GLS variance is the tree's, which the
    # sum of the cells' variances overstates (their covariances are negative under the county's
    # own measurements)
    from privinfer.census.model import _unit_tables
    from privinfer.inference import gls_estimate

    f, rel = small_release()
    hier = rel.mechanism.hierarchy
    est = gls_estimate(rel)
    n, s2 = _unit_tables(hier, 1, est)
    unit, comb = np.asarray(hier.unit_of_cell[1]), hier.combination
    for u, c in [(0, 0), (1, 3), (2, hier.d - 1)]:
        w = ((unit == u) & (comb == c)).astype(float)
        assert (s2[u, c] - 1 / n[u, c]) * n[u, c] ** 2 == pytest.approx(float(est.variance(w)), rel=1e-9)
    _, s2_leaf = _unit_tables(hier, hier.depth - 1, est)
    grid = hier.leaf_order()
    xh = np.maximum(est.x, 0.5)[grid]
    np.testing.assert_allclose((s2_leaf - 1 / xh) * xh**2, est.se[grid] ** 2, rtol=1e-9)


def test_middle_departures_start_from_the_gls_estimate_and_keep_their_laws():
    from privinfer.census.model import _smooth_axis, _unit_tables
    from privinfer.census.starts import start_departures
    from privinfer.inference import gls_estimate

    f, rel = small_release()
    hier = rel.mechanism.hierarchy
    model = hierarchy_model(rel, smooth="age", smooth_levels="all")
    est = gls_estimate(rel)
    n, s2 = _unit_tables(hier, 1, est)
    axis = _smooth_axis(hier, "age")
    K = hier.shape[axis]
    coords = np.unravel_index(np.arange(hier.d), hier.shape)
    columns = coords[axis] * (hier.d // K) + coords[1 - axis]      # (age, sex) layout of z's last axes
    tau, z = start_departures(n, s2, np.asarray(hier.parent[1]), columns, K)
    point = model.initial_point()
    outs = model.replace_rvs_by_values([model["scale_county"], model["departure_county"]])
    got_tau, got_z = model.compile_fn(outs, inputs=model.value_vars, on_unused_input="ignore")(point)
    np.testing.assert_allclose(got_tau, tau, rtol=1e-10)
    np.testing.assert_allclose(got_z, z, atol=1e-10)
    U, m = hier.n_units(1), hier.d // K
    rescaled = model.rvs_to_transforms[model["scale_county"]].transform_list[-1]
    with pm.Model() as ref:
        pm.HalfNormal("scale_county", sigma=1.0, shape=(K,), transform=rescaled)
        pm.ZeroSumNormal("departure_county", sigma=1.0, shape=(U, K, m))
    _assert_same_log_densities(model, ref, 1, 1.0)
