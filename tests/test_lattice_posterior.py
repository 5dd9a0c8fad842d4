"""Exact-posterior tests for integer latents sampled with LatticeMetropolis / LatticeGibbs."""

import sys
import pathlib

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats

from privinfer import invariants as I
from privinfer.invariants import InfeasibleInvariantError
from privinfer.mechanisms import GeneralizedLaplace
from privinfer.mechanisms.discrete import DoubleGeometric
from privinfer.pymc import lattice_latent, observe
from privinfer.pymc import LatticeBlockGibbs, LatticeGibbs, LatticeMetropolis, lattice_steps

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from posterior_helpers import empirical_tv, enumerate_fibre, exact_marginals, marginal_tv_tolerance  # noqa: E402


def _check_against_exact(idata, points, logw, name="x"):
    marg, mean = exact_marginals(points, logw)
    post = idata.posterior[name]
    draws = post.values.reshape(-1, post.shape[-1])
    summ = az.summary(idata, var_names=[name], kind="all")
    ess = summ["ess_bulk"].to_numpy()
    rhat = summ["r_hat"].to_numpy()
    assert np.all(rhat < 1.05), f"R-hat {rhat}"
    for i in range(points.shape[1]):
        # 5 Monte Carlo standard errors (MCSE from ArviZ's ESS) for the mean ...
        mcse = summ["mcse_mean"].to_numpy()[i]
        assert abs(draws[:, i].mean() - mean[i]) < 5 * max(mcse, 1e-3), (i, draws[:, i].mean(), mean[i], mcse)
        # ... and the whole marginal pmf within the TV tolerance of posterior_helpers
        tv = empirical_tv(draws[:, i], marg[i])
        assert tv < marginal_tv_tolerance(marg[i], ess[i]), (i, tv, ess[i])
    return summ


def _poisson_dg_logw(points, mu, y, scale):
    return (stats.poisson.logpmf(points, mu).sum(axis=1) - np.abs(y - points).sum(axis=1) / scale)


@pytest.mark.slow
@pytest.mark.parametrize("step_cls", [LatticeMetropolis, LatticeGibbs, LatticeBlockGibbs])
def test_counties_total_exact_posterior(step_cls):
    # 4 counties, total 15 fixed; Poisson prior with unequal means; double-geometric noise.
    inv = I.total(4)
    mu = np.array([2.0, 5.0, 3.0, 6.0])
    x_true = np.array([1, 6, 3, 5])
    y = x_true + np.array([2, -1, 0, -3])
    scale = 1.2
    mech = DoubleGeometric(4, scale=scale)
    with pm.Model():
        x = lattice_latent("x", inv, [15], prior=pm.Poisson.dist(mu=mu))
        observe("y", mech, x, observed=y)
        step = step_cls([x])
        assert step.local.is_local
        idata = pm.sample(3000, tune=500, step=[step], chains=3, cores=1, random_seed=11,
                          progressbar=False, compute_convergence_checks=False)
    pts = enumerate_fibre(inv, [15])
    assert len(pts) == 816  # C(18, 3) compositions of 15 into 4 parts
    summ = _check_against_exact(idata, pts, _poisson_dg_logw(pts, mu, y, scale))
    print(summ[["mean", "ess_bulk", "r_hat"]])
    assert np.all(idata.posterior["x"].values.sum(-1) == 15)


@pytest.mark.slow
def test_plain_pm_sample_assigns_the_lattice_step_and_matches_the_exact_posterior():
    # Without step=: PyMC must pick the lattice step (LatticeBlockGibbs: exact block draws of
    # the total's cells, the posterior being separable) for the lattice latent by itself (its
    # own samplers cannot move on the fibre) and NUTS for nothing else; same exact posterior
    # and tolerances as test_counties_total_exact_posterior.
    inv = I.total(4)
    mu = np.array([2.0, 5.0, 3.0, 6.0])
    y = np.array([3, 5, 3, 2])
    scale = 1.2
    with pm.Model() as model:
        x = lattice_latent("x", inv, [15], prior=pm.Poisson.dist(mu=mu))
        observe("y", DoubleGeometric(4, scale=scale), x, observed=y)
        idata = pm.sample(3000, tune=500, chains=3, cores=1, random_seed=12,
                          progressbar=False, compute_convergence_checks=False)
    assert "lattice_accept" in idata.sample_stats
    assert bool(idata.sample_stats["lattice_block"].all())  # block updates applied
    assert float(idata.sample_stats["lattice_block_accept"].mean()) > 0.99  # proposal ~ exact conditional
    assert len(np.unique(idata.posterior["x"].values.reshape(-1, 4), axis=0)) > 50  # the chain moves
    pts = enumerate_fibre(inv, [15])
    _check_against_exact(idata, pts, _poisson_dg_logw(pts, mu, y, scale))
    assert np.all(idata.posterior["x"].values.sum(-1) == 15)
    # step assignment by competence, not by names: two lattice latents get one step each
    from pymc.sampling.mcmc import assign_step_methods

    with model:
        lattice_latent("w", I.total(3), [4])
        _, selected = assign_step_methods(model, None, methods=pm.STEP_METHODS)
    assert set(selected) == {LatticeBlockGibbs}
    assert {v.name for v in selected[LatticeBlockGibbs]} == {"x", "w"}
    # lattice_steps gives the same step class by default; the others stay available
    assert [type(s) for s in lattice_steps(model)] == [LatticeBlockGibbs, LatticeBlockGibbs]
    assert [type(s) for s in lattice_steps(model, step_class=LatticeMetropolis)] == [LatticeMetropolis] * 2


@pytest.mark.slow
@pytest.mark.parametrize("noise", ["double-geometric", "generalized-laplace-l1", "generalized-laplace-l2"])
def test_two_way_table_multinomial_prior_exact_posterior(noise):
    # 2 x 3 table with fixed row and column totals (total 12), multinomial prior given the
    # total; noise: double geometric on every cell, or generalized Laplace on the margins'
    # lattice (l1: separable; l2: a function of the running squared norm)
    inv = I.margins((2, 3), [(0,), (1,)])
    x_true = np.array([3, 1, 2, 1, 3, 2])
    t = inv.of(x_true)
    p = np.array([0.25, 0.1, 0.15, 0.1, 0.25, 0.15])
    if noise == "double-geometric":
        mech = DoubleGeometric(6, scale=1.0)
        y = x_true + np.array([1, 0, -1, 0, 2, -1])
        noise_logw = lambda pts: -np.abs(y - pts).sum(axis=1)  # noqa: E731
    else:
        norm = noise[-2:]
        mech = GeneralizedLaplace(inv, epsilon=0.8, norm=norm)
        y = x_true + np.array([1, -2, 1, -1, 2, -1])  # a lattice vector: margins kept
        if norm == "l1":
            noise_logw = lambda pts: -0.8 * np.abs(y - pts).sum(axis=1)  # noqa: E731
        else:
            noise_logw = lambda pts: -0.8 * np.sqrt(((y - pts) ** 2).sum(axis=1))  # noqa: E731
    with pm.Model():
        x = lattice_latent("x", inv, t, prior=pm.Multinomial.dist(n=12, p=p))
        observe("y", mech, x, observed=y)
        step = LatticeMetropolis([x])
        assert step.local.is_local  # multinomial made local: the invariant fixes the total
        idata = pm.sample(3000, tune=500, step=[step], chains=3, cores=1, random_seed=5,
                          progressbar=False, compute_convergence_checks=False)
    pts = enumerate_fibre(inv, t)
    logw = stats.multinomial.logpmf(pts, 12, p) + noise_logw(pts)
    _check_against_exact(idata, pts, logw)
    draws = idata.posterior["x"].values.reshape(-1, 6)
    assert np.all(inv.of(draws) == t)  # invariant in every draw


def test_nonlocal_terms_fall_back_to_exact_full_evaluation():
    # a user Potential depending on x makes the target non-separable: the step must still
    # be exact (it evaluates that term on the whole x)
    inv = I.total(3)
    mu = np.array([2.0, 3.0, 4.0])
    with pm.Model() as model:
        x = lattice_latent("x", inv, [6], prior=pm.Poisson.dist(mu=mu))
        pm.Potential("pair", -0.3 * (x[0] - x[1]) ** 2)
        step = LatticeMetropolis([x])
        assert not step.local.is_local and step.local.nonlocal_terms == ["pair"]
        idata = pm.sample(3000, tune=300, step=[step], chains=2, cores=1, random_seed=3,
                          progressbar=False, compute_convergence_checks=False)
    pts = enumerate_fibre(inv, [6])
    logw = stats.poisson.logpmf(pts, mu).sum(axis=1) - 0.3 * (pts[:, 0] - pts[:, 1]) ** 2
    _check_against_exact(idata, pts, logw)
    assert model is not None


def test_reproducible_under_random_seed_and_stats_names():
    inv = I.total(4)
    kw = dict(draws=50, tune=20, chains=2, cores=1, progressbar=False, compute_convergence_checks=False)
    runs = []
    for _ in range(2):
        with pm.Model():
            x = lattice_latent("x", inv, [10], prior=pm.Poisson.dist(mu=np.full(4, 2.5)))
            observe("y", DoubleGeometric(4, scale=1.0), x, observed=np.array([2, 3, 1, 4]))
            idata = pm.sample(step=[LatticeMetropolis([x])], random_seed=42, **kw)
        runs.append(idata)
    np.testing.assert_array_equal(runs[0].posterior["x"].values, runs[1].posterior["x"].values)
    assert {"lattice_accept", "lattice_jump_scale", "lattice_multi_accept"} <= set(runs[0].sample_stats)


@pytest.mark.slow
def test_with_nuts_and_multiple_cores():
    # hierarchical rate sampled by NUTS next to the lattice step; 2 chains on 2 processes
    inv = I.total(5)
    y = np.array([4, 7, 2, 9, 3])
    with pm.Model():
        log_rate = pm.Normal("log_rate", np.log(5.0), 1.0)
        x = lattice_latent("x", inv, [25], prior=pm.Poisson.dist(mu=pm.math.exp(log_rate) * np.ones(5)))
        observe("y", DoubleGeometric(5, scale=1.0), x, observed=y)
        step = LatticeMetropolis([x])
        idata = pm.sample(300, tune=200, step=[step, pm.NUTS([log_rate])], chains=2, cores=2,
                          random_seed=7, progressbar=False, compute_convergence_checks=False)
    assert idata.posterior["x"].shape == (2, 300, 5)
    assert np.all(idata.posterior["x"].values.sum(-1) == 25)
    # both chains moved (the step pickled and ran in the worker processes)
    assert idata.sample_stats["lattice_accept"].mean() > 0.05
    assert "diverging" in idata.sample_stats and "lattice_accept" in idata.sample_stats


def test_bad_inputs_raise_before_sampling():
    inv = I.total(3)
    with pm.Model():
        with pytest.raises(InfeasibleInvariantError):
            lattice_latent("x", inv, [-2], prior=pm.Poisson.dist(mu=np.ones(3)))  # no x >= 0
    with pm.Model():
        with pytest.raises(InfeasibleInvariantError, match="off the fibre"):
            lattice_latent("x", inv, [5], prior=pm.Poisson.dist(mu=np.ones(3)), initval=[1, 1, 1])
    with pm.Model():
        with pytest.raises(ValueError, match="prior"):
            # binomial prior with n = 1 per cell cannot reach a total of 5 at the start found
            lattice_latent("x", inv, [5], prior=pm.Binomial.dist(n=1, p=0.5, shape=3))
    with pm.Model():
        x = lattice_latent("x", I.total(3), [5], prior=pm.Poisson.dist(mu=np.ones(3)))
        with pytest.raises(ValueError, match=r"shape \(3,\)"):
            observe("y", DoubleGeometric(3, scale=1.0), x, observed=np.array([1, 2]))
    with pm.Model():
        with pytest.raises(ValueError, match="integer"):
            lattice_latent("x", I.total(2), [3.5])


def test_set_rng_and_setup_chain_hooks_agree():
    # the same generator handed through either hook gives the same chain
    from pymc.blocking import DictToArrayBijection

    inv = I.total(4)
    outs = []
    for hook in ("set_rng", "setup_chain"):
        with pm.Model() as model:
            x = lattice_latent("x", inv, [10], prior=pm.Poisson.dist(mu=np.full(4, 2.5)))
            step = LatticeMetropolis([x])
        getattr(step, hook)(np.random.default_rng(123))
        q = DictToArrayBijection.map({"x": model.initial_point()["x"]})
        seq = []
        for _ in range(20):
            q, _ = step.astep(q)
            seq.append(q.data.copy())
        outs.append(np.array(seq))
    np.testing.assert_array_equal(outs[0], outs[1])
    assert np.all(outs[0].sum(axis=1) == 10)
