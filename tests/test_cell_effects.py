"""Exact updates of log-normal cell effects (privinfer.pymc.cell_effects): the block update's
stationary law against quadrature, and plain pm.sample() assigning the step."""

import numpy as np
import pymc as pm
import pytest
from pymc.sampling.mcmc import assign_step_methods
from scipy import special, stats

from privinfer.pymc import CellEffectsGibbs, WalkGibbs
from privinfer.pymc.cell_effects import block_update, pair_update, scale_update

X1 = np.array([7.0, 0.0, 3.0])
ETA1 = np.array([0.2, -1.5, -0.1])
KAPPA, OMEGA = 50.0, 0.6


def _exact_moments():
    """E[eps], E[eps^2] of one unit's effects under the exact conditional
    prod_i Gamma(x_i + a_i) / Gamma(a_i) N(eps_i | 0, omega^2), a = kappa softmax(eta + eps):
    the trapezoid rule on a 3-d grid over +-6 omega (the integrand is smooth and negligible
    beyond)."""
    g = np.linspace(-6 * OMEGA, 6 * OMEGA, 97)
    E = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    a = KAPPA * special.softmax(ETA1 + E, axis=1)
    logp = (special.gammaln(X1 + a) - special.gammaln(a)).sum(1) - (E**2).sum(1) / (2 * OMEGA**2)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    return w @ E, w @ E**2


@pytest.mark.parametrize("block", [1, 2, 3])
def test_block_update_leaves_the_exact_conditional_invariant(block):
    # 4,000 identical units, each an independent chain of 40 updates from eps = 0: their final
    # states are iid draws of the chain's law at step 40, which the exact conditional must match
    # (the update mixes in a few steps: acceptance is high and every block is proposed fresh).
    # z-scores of the means of eps and eps^2 over the units, Bonferroni over 6 at level 0.001.
    rng = np.random.default_rng(11 + block)
    U = 4000
    X, eta = np.tile(X1, (U, 1)), np.tile(ETA1, (U, 1))
    eps = np.zeros((U, 3))
    rates = []
    for _ in range(40):
        eps, acc = block_update(rng, X, eta, eps, OMEGA, KAPPA, block)
        rates.append(acc)
    m1, m2 = _exact_moments()
    z_crit = stats.norm.isf(0.001 / (2 * 6))
    sd1 = np.sqrt(m2 - m1**2)
    z1 = (eps.mean(0) - m1) / (sd1 / np.sqrt(U))
    z2 = ((eps**2).mean(0) - m2) / ((eps**2).std(0) / np.sqrt(U))
    assert np.all(np.abs(z1) < z_crit) and np.all(np.abs(z2) < z_crit), (z1, z2, m1, eps.mean(0))
    assert np.mean(rates) > 0.5                # the proposals fit: the update does move


X2 = np.array([2.0, 9.0, 1.0])
ETA2 = np.array([-0.4, 0.3, 0.0])


def _exact_pair_moments():
    """E[t], E[t^2] of t = (eps_u - eps_v) / 2 for two sibling units whose effects enter less
    their mean (unit u gets t, unit v gets -t): the exact conditional is prod over both units of
    their Dirichlet-multinomial times exp(-|t|^2 / omega^2) (|eps|^2 = |S|^2 / 2 + 2 |t|^2);
    the trapezoid rule on a 3-d grid over +-6 sd of t's prior (omega / sqrt 2)."""
    g = np.linspace(-6 * OMEGA / np.sqrt(2), 6 * OMEGA / np.sqrt(2), 97)
    T = np.stack(np.meshgrid(g, g, g, indexing="ij"), axis=-1).reshape(-1, 3)
    logp = -(T**2).sum(1) / OMEGA**2
    for x, eta, sign in ((X1, ETA1, 1.0), (X2, ETA2, -1.0)):
        a = KAPPA * special.softmax(eta + sign * T, axis=1)
        logp += (special.gammaln(x + a) - special.gammaln(a)).sum(1)
    w = np.exp(logp - logp.max())
    w /= w.sum()
    return w @ T, w @ T**2


@pytest.mark.parametrize("block", [1, 3])
def test_pair_update_leaves_the_exact_conditional_invariant(block):
    # 3,000 groups of two units (X1 and X2), each an independent chain of 40 updates from eps =
    # 0: t = (eps_u - eps_v) / 2 against quadrature, and the pair's mean effect against its prior
    # N(0, omega^2 / 2) (redrawn exactly).  z-scores of the means of t, t^2 and the mean effect
    # over the groups, Bonferroni over 9 at level 0.001.
    rng = np.random.default_rng(3 + block)
    G = 3000
    groups = np.repeat(np.arange(G), 2)
    X = np.tile(np.stack([X1, X2]), (G, 1))
    eta = np.tile(np.stack([ETA1, ETA2]), (G, 1))
    eps = np.zeros((2 * G, 3))
    rates = []
    for _ in range(40):
        eps, acc = pair_update(rng, X, eta, eps, groups, OMEGA, KAPPA, block)
        rates.append(acc)
    t = 0.5 * (eps[0::2] - eps[1::2])
    m1, m2 = _exact_pair_moments()
    z_crit = stats.norm.isf(0.001 / (2 * 9))
    z1 = (t.mean(0) - m1) / (np.sqrt(m2 - m1**2) / np.sqrt(G))
    z2 = ((t**2).mean(0) - m2) / ((t**2).std(0) / np.sqrt(G))
    mean = 0.5 * (eps[0::2] + eps[1::2])
    z3 = mean.mean(0) / (OMEGA / np.sqrt(2) / np.sqrt(G))
    assert np.all(np.abs(np.r_[z1, z2, z3]) < z_crit), (z1, z2, z3, m1, t.mean(0))
    assert np.mean(rates) > 0.5


def _exact_omega_mean(x1, x2, e1, e2, prior_scale):
    """E[omega] for one group of two units with two cells each, effects entering less their
    group mean (t for unit 1, -t for unit 2; t ~ N(0, omega^2 / 2) per cell), omega ~
    HalfNormal(prior_scale): Gauss-Hermite in t (t = omega u, 30 x 30 nodes), the trapezoid rule
    in omega over [0, 6 prior sd]."""
    u, w = special.roots_hermite(30)
    U1, U2 = np.meshgrid(u, u, indexing="ij")
    W = np.outer(w, w).ravel() / np.pi
    om = np.linspace(0.0, 6 * prior_scale, 401)[1:]
    T = om[:, None, None] * np.stack([U1.ravel(), U2.ravel()], axis=-1)[None]     # (omega, node, 2)
    loglik = 0.0
    for x, eta, sign in ((x1, e1, 1.0), (x2, e2, -1.0)):
        a = KAPPA * special.softmax(eta + sign * T, axis=-1)
        loglik = loglik + (special.gammaln(x + a) - special.gammaln(a)).sum(-1)
    logp = special.logsumexp(loglik + np.log(W), axis=1) + stats.halfnorm.logpdf(om, scale=prior_scale)
    p = np.exp(logp - logp.max())
    return float(p @ om / p.sum())


def test_scale_update_with_groups_leaves_the_exact_posterior_invariant():
    # omega's update (exact GIG draw given all the free effects, then the slice in log omega with
    # eps / omega fixed, the likelihood seeing eps less its group mean) alternated with the pair
    # update, on one group of two units: 400 independent chains of 30 iterations from the prior;
    # their final omegas against the exact posterior mean, z at the 0.001 level (two-sided).
    x1, x2, e1, e2 = X1[:2], X2[:2], ETA1[:2], ETA2[:2]
    X, eta, groups = np.stack([x1, x2]), np.stack([e1, e2]), np.array([0, 0])
    prior = 0.5
    rng = np.random.default_rng(17)
    finals = []
    for _ in range(400):
        omega = abs(rng.normal(0.0, prior))
        eps = rng.normal(0.0, omega, (2, 2))
        for _ in range(30):
            eps, _ = pair_update(rng, X, eta, eps, groups, omega, KAPPA, 2)
            omega, eps, _ = scale_update(rng, X, eta, eps, omega, KAPPA, prior, groups=groups)
        finals.append(omega)
    finals = np.array(finals)
    exact = _exact_omega_mean(x1, x2, e1, e2, prior)
    z = (finals.mean() - exact) / (finals.std() / np.sqrt(finals.size))
    assert abs(z) < stats.norm.isf(0.0005), (finals.mean(), exact)


def test_plain_sample_assigns_cell_effects_gibbs():
    from test_census_model import small_release
    from privinfer.census import hierarchy_model

    f, rel = small_release()
    model = hierarchy_model(rel, smooth="age", cell_effects=True, walk_steps="gibbs")
    _, selected = assign_step_methods(model, None, methods=pm.STEP_METHODS)
    effects = {model.rvs_to_values[model[n]] for n in ("cell_effect", "cell_effect_scale")}
    assert set(selected[CellEffectsGibbs]) == effects
    assert not effects & set(selected[pm.NUTS])
    assert WalkGibbs in selected
    with pytest.raises(ValueError, match="block"):
        CellEffectsGibbs(model=model, block=0)
