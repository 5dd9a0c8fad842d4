"""Prior and posterior predictive draws of models with lattice latents, cell ids as coords,
and calibration of the county model sampled by plain pm.sample() (block updates)."""

import itertools
import logging
import warnings

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats

from privinfer import invariants as I
from privinfer.mechanisms import GeneralizedLaplace
from privinfer.models import county_population_model
from privinfer.pymc import ConditionalPrior, lattice_latent, observe


def _compositions(T, k):
    for c in itertools.combinations(range(T + k - 1), k - 1):
        b = (-1,) + c + (T + k - 1,)
        yield tuple(b[i + 1] - b[i] - 1 for i in range(k))


def _chisquare_against(draws, pts, p, min_expected=5.0):
    """p-value of a chi-square test of draws (rows) against the law p on the points pts, the
    least likely points merged until every bin expects >= min_expected draws."""
    m = len(draws)
    index = {tuple(r): k for k, r in enumerate(pts)}
    counts = np.bincount([index[tuple(r)] for r in draws], minlength=len(pts))
    exp_c, obs_c, e, o = [], [], 0.0, 0
    for k in np.argsort(p)[::-1]:
        e += p[k] * m
        o += counts[k]
        if e >= min_expected:
            exp_c.append(e)
            obs_c.append(o)
            e, o = 0.0, 0
    exp_c[-1] += e
    obs_c[-1] += o
    return stats.chisquare(obs_c, exp_c).pvalue


@pytest.mark.parametrize("kind", ["flat", "poisson", "negative-binomial"])
def test_conditional_prior_draws_follow_the_restricted_prior(kind):
    # x | C x = t for groups {0, 1, 2} (total 7) and {3, 4} (total 4): draws against the
    # enumerated restricted prior, chi-square at alpha = 1e-3 (the test's size)
    codes = np.array([0, 0, 0, 1, 1])
    inv = I.groups(codes).with_t([7, 4])
    mu = np.array([1.0, 3.0, 2.0, 0.5, 4.0])
    if kind == "flat":
        prior, logpmf = None, lambda v: np.zeros(len(v))  # noqa: E731
    elif kind == "poisson":
        prior, logpmf = pm.Poisson.dist(mu=mu), lambda v: stats.poisson.logpmf(v, mu).sum(1)  # noqa: E731
    else:
        # PyMC NegativeBinomial(mu, alpha) = scipy nbinom(n=alpha, p=alpha/(alpha+mu))
        alpha = 2.0
        prior = pm.NegativeBinomial.dist(mu=mu, alpha=alpha)
        logpmf = lambda v: stats.nbinom.logpmf(v, alpha, alpha / (alpha + mu)).sum(1)  # noqa: E731
    draw = ConditionalPrior(inv, inv.t, prior, nonnegative=True)
    assert draw.kind == {"flat": "flat", "poisson": "poisson", "negative-binomial": "cells"}[kind]
    params = [p.eval() for p in draw.params]
    rng = np.random.default_rng(7)
    xs = draw(*params, rng=rng, size=6000)
    assert xs.shape == (6000, 5) and xs.dtype == np.int64
    assert np.array_equal(np.stack([xs[:, :3].sum(1), xs[:, 3:].sum(1)], 1), np.broadcast_to([7, 4], (6000, 2)))
    pts = np.array([a + b for a in _compositions(7, 3) for b in _compositions(4, 2)])
    lw = logpmf(pts)
    p = np.exp(lw - np.logaddexp.reduce(lw))
    assert _chisquare_against(xs, pts, p) > 1e-3


def test_prior_predictive_needs_a_partition():
    inv = I.margins((2, 2), [(0,), (1,)]).with_t([3, 3, 3, 3])
    with pm.Model():
        lattice_latent("x", inv, prior=pm.Poisson.dist(mu=np.ones(4)))
        with pytest.raises(NotImplementedError, match="partition invariant"):
            pm.sample_prior_predictive(5, random_seed=1)


def _county_release(seed=1):
    codes = np.array(["a", "a", "b", "b", "b"])
    inv = I.groups(codes)
    x = np.array([30, 12, 50, 7, 20])
    inv = inv.with_t(inv.of(x))
    mech = GeneralizedLaplace(inv, epsilon=0.5)
    return x, inv, mech, mech.release(x, rng=np.random.default_rng(seed))


def test_prior_and_posterior_predictive_keep_the_invariant_and_carry_ids():
    x, inv, mech, y = _county_release()
    ids = ["01001", "01003", "02013", "02016", "02020"]
    model = county_population_model(y, mech, inv, cell_ids=ids)
    with model, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prior = pm.sample_prior_predictive(200, random_seed=3)
        idata = pm.sample(200, tune=200, chains=2, cores=1, random_seed=4, progressbar=False,
                          compute_convergence_checks=False)
        post = pm.sample_posterior_predictive(idata, random_seed=5, progressbar=False)
    # the prior is part of the lattice latent's own law (no Potential that predictive sampling
    # would ignore), so PyMC has nothing to warn about
    assert not [w for w in caught if "Potential" in str(w.message)]
    t = inv.t
    for draws in (prior.prior["x"], prior.prior_predictive["y"], idata.posterior["x"],
                  post.posterior_predictive["y"]):
        assert draws.dims[-1] == "cell" and list(draws["cell"].values) == ids
        v = draws.values.reshape(-1, 5)
        assert np.array_equal(inv.of(v), np.broadcast_to(t, (len(v), 2)))  # C x = t in every draw
    # prior draws of x given the totals vary (not a constant start value)
    assert len(np.unique(prior.prior["x"].values.reshape(-1, 5), axis=0)) > 50
    with pytest.raises(ValueError, match="duplicate ids"):
        county_population_model(y, mech, inv, cell_ids=["a", "b", "c", "d", "a"])
    with pytest.raises(ValueError, match="3 ids for 5 cells"):
        county_population_model(y, mech, inv, cell_ids=["a", "b", "c"])


@pytest.mark.slow
def test_sbc_county_model_with_block_updates():
    # Simulation-based calibration (Talts et al. 2018) of county_population_model as the
    # analyst runs it: plain pm.sample() (NUTS + LatticeBlockGibbs).  Truth from the model's
    # prior (prior_mean fixed, so the prior does not depend on the data), 2 states of 3
    # counties, GL release at eps = 0.3.  Ranks of x_0 and mu among thinned draws; chi-square
    # uniformity of each rank histogram (6 bins, 60 replicates: 10 expected per bin) at 0.005.
    logging.getLogger("pymc").setLevel(logging.ERROR)
    reps, bins = 60, 6
    codes = np.array([0, 0, 0, 1, 1, 1])
    rng = np.random.default_rng(14)
    ranks = {"x0": [], "mu": []}
    for rep in range(reps):
        mu = rng.normal(np.log(20.0), 2.0)
        sigma = abs(rng.normal(0.0, 1.0))
        lam = np.exp(rng.normal(mu, sigma, 6))
        x = rng.poisson(np.minimum(lam, 1e7))
        inv = I.groups(codes).with_t(np.bincount(codes, weights=x).astype(np.int64))
        mech = GeneralizedLaplace(inv, epsilon=0.3)
        y = mech.release(x, rng=rng)
        model = county_population_model(y, mech, inv, prior_mean=20.0)
        with model:
            idata = pm.sample(250, tune=200, chains=1, cores=1, random_seed=rep, progressbar=False,
                              compute_convergence_checks=False)
        assert bool(idata.sample_stats["lattice_block"].all())
        for key, truth, draws in (("x0", x[0], idata.posterior["x"].values[..., 0].ravel()),
                                  ("mu", mu, idata.posterior["mu"].values.ravel())):
            ess = float(az.ess(draws.astype(float)))
            kept = draws[:: max(1, int(np.ceil(len(draws) / max(ess, 1.0))))]
            # ties (integer x) broken at random: the fractional rank is Uniform(0,1) under calibration
            below = np.sum(kept < truth) + rng.integers(0, np.sum(kept == truth) + 1)
            ranks[key].append((below + rng.random()) / (len(kept) + 1))
    for key, r in ranks.items():
        counts = np.bincount(np.minimum((np.array(r) * bins).astype(int), bins - 1), minlength=bins)
        p = stats.chisquare(counts).pvalue
        print(f"SBC {key}: rank counts {counts.tolist()}, p = {p:.3f}")
        assert p > 0.005, f"SBC ranks of {key} not uniform: {counts}, p = {p:.3g}"


@pytest.mark.slow
def test_county_posterior_intervals_cover_the_truth():
    # Kentucky's 120 counties (2010 Census), state total kept, GL(l1) releases at eps = 0.192;
    # county_population_model sampled by plain pm.sample() (block updates for x).  Over 12
    # independent releases the central 90% intervals of x must cover the true counts at the
    # nominal rate: 1,440 intervals, binomial sd sqrt(0.9 * 0.1 / 1440) = 0.79%; the band is
    # 0.90 +- 3 sd = [0.876, 0.924] (the noise is independent across counties given the
    # total, so the intervals are nearly independent).
    from privinfer.datasets import state_county_populations

    logging.getLogger("pymc").setLevel(logging.ERROR)
    ky = state_county_populations("KY")
    x = np.asarray(ky.population, dtype=np.int64)
    inv = I.total(x.size).with_t([int(x.sum())])
    mech = GeneralizedLaplace(inv, epsilon=0.192)
    rng = np.random.default_rng(2010)
    covered = []
    for rep in range(12):
        y = mech.release(x, rng=rng)
        with county_population_model(y, mech, inv):
            idata = pm.sample(400, tune=200, chains=1, cores=1, random_seed=rep, progressbar=False,
                              compute_convergence_checks=False)
        draws = idata.posterior["x"].values.reshape(-1, x.size)
        lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
        covered.append((lo <= x) & (x <= hi))
    rate = float(np.mean(covered))
    print(f"90% interval coverage over {len(covered)} releases: {rate:.3f}")
    assert 0.876 <= rate <= 0.924, rate
