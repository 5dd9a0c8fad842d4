"""Pointwise log-likelihoods for model comparison: every model builder supports
``pm.compute_log_likelihood`` (no PyMC initvals), the pointwise terms sum to the mechanism's
own likelihood, and ``az.loo`` / ``az.compare`` run on two county models of one release."""

import logging
import pathlib
import sys

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats

from privinfer import invariants as I
from privinfer.datasets import spatiotemporal_invariant, synthetic_spatiotemporal
from privinfer.mechanisms import (
    CorrelatedGaussian,
    ExtendedGaussian,
    ExtendedLaplace,
    Gaussian,
    Laplace,
    LinearGaussian,
    NoisyMeasurements,
    ProjectedGaussian,
    ProjectedLaplace,
    TulapMechanism,
)
from privinfer.mechanisms.discrete import DiscreteGaussian, DoubleGeometric
from privinfer.mechanisms.integer_subspace import GeneralizedGaussian, GeneralizedLaplace
from privinfer.models import (
    contingency_table_model,
    county_population_model,
    nested_histogram_model,
    noisy_measurements_model,
    spatiotemporal_model,
)
from privinfer.models._checks import integer_start, positive_start
from privinfer.pymc import add_augmented_log_likelihood, affine_latent, lattice_latent, observe

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from census_helpers import random_frame  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)
SAMPLE = dict(cores=1, progressbar=False, compute_convergence_checks=False)
#: The pointwise terms and the joint likelihood are the same sums taken in another order
#: (and, per group, |e_g|^2 - (sum e_g)^2/|g| in place of the projected norm), so they agree
#: to floating-point rounding: a relative 1e-9 leaves room for the cancellation in the group
#: form and fails at once for a dropped term or constant (each is >= 1e-3 of the total here).
RTOL = 1e-9

GROUPS = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2])


def _no_pymc_initvals(model):
    """No free variable carries a PyMC initval (they make graph rebuilds fail)."""
    return all(v is None for v in model.rvs_to_initial_values.values())


def _point_posterior(model, draws: int = 2):
    """A posterior of ``draws`` copies of the model's initial point (untransformed values and the
    deterministics): enough
    for ``pm.compute_log_likelihood`` to rebuild the model and evaluate it."""
    point = model.initial_point()
    rvs = list(model.free_RVs) + list(model.deterministics)
    graphs = model.replace_rvs_by_values(rvs)
    values = model.compile_fn(graphs, inputs=model.value_vars, on_unused_input="ignore", point_fn=False)(
        *[point[v.name] for v in model.value_vars])
    post = {rv.name: np.broadcast_to(np.asarray(v), (1, draws) + np.shape(v)).copy() for rv, v in zip(rvs, values)}
    return az.from_dict(posterior=post)


def _loglik_runs(model):
    idata = pm.compute_log_likelihood(_point_posterior(model), model=model, progressbar=False)
    for name in idata.log_likelihood.data_vars:
        assert np.all(np.isfinite(idata.log_likelihood[name].values)), name
    return idata


# ---------------------------------------------------------------------------------------
# the mechanisms' pointwise terms
# ---------------------------------------------------------------------------------------
def _mechanisms():
    n = GROUPS.size
    inv = I.groups(GROUPS)
    total = I.total(n)
    margins = I.margins((3, 3), [(0,), (1,)])
    rng = np.random.default_rng(0)
    A = rng.standard_normal((n, n))
    return [
        (Gaussian(n, sigma=2.0), "cell"),
        (Laplace(n, scale=1.5), "cell"),
        (DoubleGeometric(n, scale=2.0), "cell"),
        (DiscreteGaussian(n, sigma=2.0), "cell"),
        (TulapMechanism(n, epsilon=1.0), "cell"),
        (ProjectedGaussian(inv, sigma=2.0), "group"),
        (ExtendedGaussian(inv, sigma=1.5), "group"),
        (ProjectedLaplace(inv, scale=2.0), "group"),
        (ProjectedGaussian(margins, sigma=2.0), "joint"),  # not a partition: one joint term
        (ExtendedLaplace(total, scale=1.0), "joint"),
        (CorrelatedGaussian(np.eye(n), total, 1.0, 1e-5), "joint"),
        (LinearGaussian(np.kron(np.eye(3), np.ones((1, 3))), np.diag([1.0, 4.0, 9.0])), "cell"),
        (LinearGaussian(np.eye(n), A @ A.T + np.eye(n)), "joint"),
        (NoisyMeasurements([np.eye(n), np.ones((1, n))], [1.5, 3.0], total), "cell"),
        (GeneralizedLaplace(inv, epsilon=0.5), "group"),
        (GeneralizedLaplace(inv, epsilon=0.5, norm="l2"), "joint"),  # the l2 norm is not a sum over cells
        (GeneralizedGaussian(inv, sigma=2.0), "group"),
    ]


@pytest.mark.parametrize("mech,kind", _mechanisms(), ids=lambda v: type(v).__name__ if not isinstance(v, str) else v)
def test_pointwise_terms_sum_to_the_joint_likelihood(mech, kind):
    rng = np.random.default_rng(1)
    x = rng.integers(20, 60, mech.n)
    # two inputs on one fibre: a rectangle move of the 3 x 3 grid keeps the groups' totals and
    # both margins
    xs = np.stack([x, x + np.array([1, -1, 0, -1, 1, 0, 0, 0, 0])])
    y = mech.release(x, rng=rng)
    assert mech.loglik_factorization == kind
    terms = mech.logp_terms(y, xs)
    k = {"cell": mech.m, "joint": 1}.get(kind, len(set(GROUPS)))
    assert terms.shape == (2, k) and mech.n_loglik_terms == k
    assert np.all(np.isfinite(terms))
    np.testing.assert_allclose(terms.sum(axis=-1), mech.logp(y, xs), rtol=RTOL)
    codes = mech.loglik_codes()
    assert codes.shape == (mech.m,) and set(codes) == set(range(k))


def test_cell_terms_are_the_cells_densities():
    # independent noise: term i is the density of y_i alone (scipy's, written out separately)
    x = np.array([10.0, 20.0, 30.0, 40.0])
    y = np.array([11.5, 17.0, 30.25, 44.0])
    np.testing.assert_allclose(Gaussian(4, sigma=2.0).logp_terms(y, x), stats.norm.logpdf(y, x, 2.0), rtol=1e-12)
    np.testing.assert_allclose(Laplace(4, scale=3.0).logp_terms(y, x), stats.laplace.logpdf(y, x, 3.0), rtol=1e-12)


@pytest.mark.parametrize("cls,kw", [(ProjectedGaussian, {"sigma": 2.0}), (ProjectedLaplace, {"scale": 2.0})])
def test_group_terms_are_the_groups_own_likelihoods(cls, kw):
    # for a partition invariant, the term of group g is the likelihood of the same mechanism
    # on that group's cells alone with its total kept (the null space is a product of groups)
    rng = np.random.default_rng(2)
    mech = cls(I.groups(GROUPS), **kw)
    x = rng.integers(20, 60, GROUPS.size).astype(float)
    y = mech.release(x, rng=rng)
    terms = mech.logp_terms(y, x)
    for g in range(3):
        cells = np.flatnonzero(GROUPS == g)
        alone = cls(I.total(cells.size), **kw).logp(y[cells], x[cells])
        np.testing.assert_allclose(terms[g], alone, rtol=RTOL)


def test_terms_off_the_support_are_minus_infinity():
    mech = ProjectedGaussian(I.groups(GROUPS), sigma=1.0)
    x = np.arange(9.0)
    y = x + 1.0  # C (y - x) != 0: not a possible release
    assert np.all(mech.logp_terms(y, x) == -np.inf) and mech.logp(y, x) == -np.inf
    dg = DoubleGeometric(3, scale=1.0)
    assert np.sum(dg.logp_terms(np.array([1.5, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))) == -np.inf


# ---------------------------------------------------------------------------------------
# hand-written models: lattice_latent / affine_latent + observe
# ---------------------------------------------------------------------------------------
def _pymc_terms_match_numpy(idata, mech, y, x_name="x"):
    """The log-likelihood group's values are the mechanism's NumPy terms at every draw."""
    ll = idata.log_likelihood["y"].values
    xd = idata.posterior[x_name].values
    expected = mech.logp_terms(y, xd.reshape(-1, xd.shape[-1])).reshape(ll.shape)
    np.testing.assert_allclose(ll, expected, rtol=RTOL)
    np.testing.assert_allclose(ll.sum(axis=-1), mech.logp(y, xd), rtol=RTOL)


def test_hand_written_lattice_model_gives_cell_terms():
    rng = np.random.default_rng(3)
    inv = I.groups(GROUPS)
    x = rng.poisson(30, GROUPS.size)
    mech = DoubleGeometric(GROUPS.size, scale=2.0)
    y = mech.release(x, rng=rng)
    start = integer_start(y, inv, inv.of(x))
    with pm.Model() as model:
        xs = lattice_latent("x", inv, inv.of(x), prior=pm.Poisson.dist(mu=30.0, shape=GROUPS.size), initval=start)
        observe("y", mech, xs, observed=y)
        assert _no_pymc_initvals(model)
        np.testing.assert_array_equal(model.initial_point()["x"], start)  # privinfer's initval is the start
        idata = pm.sample(20, tune=10, chains=1, random_seed=1, idata_kwargs={"log_likelihood": True}, **SAMPLE)
    assert idata.log_likelihood["y"].shape[-1] == GROUPS.size  # one term per county
    _pymc_terms_match_numpy(idata, mech, y)


def test_hand_written_affine_model_gives_group_terms():
    rng = np.random.default_rng(4)
    inv = I.groups(GROUPS)
    x = rng.poisson(30, GROUPS.size).astype(float)
    mech = ProjectedGaussian(inv, sigma=2.0)
    y = mech.release(x, rng=rng)
    with pm.Model() as model:
        xs = affine_latent("x", inv, inv.of(x), prior=pm.Normal.dist(30.0, 10.0, shape=GROUPS.size), initval=y)
        observe("y", mech, xs, observed=y)
        assert _no_pymc_initvals(model)
        # the start is the release's projection onto the fibre (here the release itself)
        Q = inv.null_basis()
        np.testing.assert_allclose(model.initial_point()["x_z"], Q.T @ (y - inv.feasible_point(inv.of(x))))
        idata = pm.sample(20, tune=10, chains=1, random_seed=1, idata_kwargs={"log_likelihood": True}, **SAMPLE)
    assert idata.log_likelihood["y"].shape[-1] == 3  # one term per group (state)
    _pymc_terms_match_numpy(idata, mech, y)


# ---------------------------------------------------------------------------------------
# every model builder: compute_log_likelihood runs, no PyMC initval, the start unchanged
# ---------------------------------------------------------------------------------------
def _county_inputs(mech_cls, **kw):
    rng = np.random.default_rng(5)
    inv = I.groups(GROUPS)
    x = rng.poisson(np.exp(np.log(40.0) + 0.5 * rng.standard_normal(GROUPS.size)))
    mech = mech_cls(GROUPS.size, **kw) if mech_cls is DoubleGeometric else mech_cls(inv, **kw)
    y = mech.release(x if mech.integer else x.astype(float), rng=rng)
    return y, mech, inv, inv.of(x)


def test_county_model_integer_starts_at_the_release_shares():
    y, mech, inv, t = _county_inputs(DoubleGeometric, scale=2.0)
    model = county_population_model(y, mech, inv, t)
    assert _no_pymc_initvals(model)
    start = integer_start(y, inv, t)
    point = model.initial_point()
    np.testing.assert_array_equal(point["x"], start)
    np.testing.assert_allclose(point["log_rate"], np.log(np.maximum(start, 0.5)))
    _loglik_runs(model)


@pytest.mark.parametrize("cls,kw", [(ProjectedGaussian, {"sigma": 3.0}), (ProjectedLaplace, {"scale": 3.0})])
def test_county_model_real_valued_starts_at_the_release_shares(cls, kw):
    y, mech, inv, t = _county_inputs(cls, **kw)
    model = county_population_model(y, mech, inv, t)
    assert _no_pymc_initvals(model)
    Q, x0 = inv.null_basis(), inv.feasible_point(t)
    np.testing.assert_allclose(model.initial_point()["x_z"], Q.T @ (positive_start(y, inv, t) - x0), atol=1e-9)
    idata = pm.compute_log_likelihood(_point_posterior(model), model=model, progressbar=False)
    # the augmented (projected Laplace) likelihood has no observed variable (observe's docstring):
    # its terms come from the mechanism's NumPy marginal
    assert ("log_likelihood" in idata.groups()) == (mech.augmentation is None)
    idata = add_augmented_log_likelihood(idata, model)
    ll = idata.log_likelihood["y"].values
    assert ll.shape == (1, 2, 3) and np.all(np.isfinite(ll))  # one term per state
    xd = idata.posterior["x"].values
    np.testing.assert_allclose(ll.sum(axis=-1), mech.logp(y, xd), rtol=RTOL)


def test_contingency_model_log_likelihood():
    table = np.array([[12, 7], [5, 9]])
    inv = I.margins((2, 2), [(0,), (1,)])
    mech = DoubleGeometric(4, scale=1.0)
    y = mech.release(table.ravel(), rng=6)
    model = contingency_table_model(y.reshape(2, 2), mech, (2, 2), t=inv.of(table.ravel()))
    assert _no_pymc_initvals(model)
    _loglik_runs(model)


def test_spatiotemporal_model_log_likelihood():
    shape = (2, 3, 2)
    X = synthetic_spatiotemporal(rng=11, groups=2, hours=3, buildings=2, mean_count=8.0)
    inv = spatiotemporal_invariant(X)
    mech = ProjectedGaussian(inv, sigma=2.0)
    y = mech.release(X.ravel().astype(float), rng=12)
    model = spatiotemporal_model(y.reshape(shape), mech, shape, inv)
    assert _no_pymc_initvals(model)
    _loglik_runs(model)


def test_nested_histogram_model_log_likelihood():
    coarse = LinearGaussian(np.kron(np.eye(3), np.ones((1, 2))), 4.0 * np.eye(3))
    fine = LinearGaussian(np.eye(6), 9.0 * np.eye(6))
    truth = np.array([30.0, 35.0, 40.0, 38.0, 31.0, 25.0])
    releases = [(coarse, coarse.release(truth, rng=1)), (fine, fine.release(truth, rng=2))]
    for total in (truth.sum(), None):
        model = nested_histogram_model(releases, 6, total=total)
        assert _no_pymc_initvals(model)
        idata = _loglik_runs(model)
        assert idata.log_likelihood["y_0"].shape[-1] == 3 and idata.log_likelihood["y_1"].shape[-1] == 6


def test_noisy_measurements_model_log_likelihood():
    from privinfer.mechanisms.noisy_measurements import margin_query

    qs = [margin_query((2, 2), (0, 1)), margin_query((2, 2), (0,))]
    mech = NoisyMeasurements(qs, [1.5, 1.0], I.total(4))
    rel = mech.publish(np.array([3, 1, 0, 2]), rng=11)
    model = noisy_measurements_model(rel, rng=0)
    assert _no_pymc_initvals(model)
    idata = _loglik_runs(model)
    assert idata.log_likelihood["y"].shape[-1] == mech.m  # one term per measurement


def test_census_hierarchy_model_log_likelihood():
    from privinfer.census import hierarchy_measurements, hierarchy_model

    f = random_frame(3, counties=2, max_tracts=2)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                  queries={"total": (), "sex_age": ("sex", "age")}, rho=0.05)
    model = hierarchy_model(mech.publish(f["count"], rng=3))
    assert _no_pymc_initvals(model)
    _loglik_runs(model)


# ---------------------------------------------------------------------------------------
# LOO end to end: two county models with different priors, one release
# ---------------------------------------------------------------------------------------
def test_loo_and_compare_two_county_models():
    y, mech, inv, t = _county_inputs(DoubleGeometric, scale=2.0)
    idatas = {}
    for label, prior_mean in (("release mean", None), ("prior mean 1000", 1000.0)):
        model = county_population_model(y, mech, inv, t, prior_mean=prior_mean)
        with model:
            idatas[label] = pm.sample(150, tune=150, chains=2, random_seed=7,
                                      idata_kwargs={"log_likelihood": True}, **SAMPLE)
    for idata in idatas.values():
        loo = az.loo(idata, pointwise=True)
        assert loo.loo_i.shape == (GROUPS.size,) and np.all(np.isfinite(loo.loo_i.values))
        assert np.isfinite(loo.elpd_loo)
    table = az.compare(idatas)
    assert set(table.index) == set(idatas) and np.all(np.isfinite(table["elpd_loo"]))
    assert table["rank"].min() == 0


def test_start_near_release_moves_the_support_point():
    from privinfer.workflow.fitting import start_near_release

    y, mech, inv, t = _county_inputs(ProjectedGaussian, sigma=3.0)
    model = county_population_model(y, mech, inv, t)
    starts = start_near_release(model, y)
    np.testing.assert_allclose(model.initial_point()["x_z"], starts["x_z"])
    assert _no_pymc_initvals(model)
    _loglik_runs(model)
