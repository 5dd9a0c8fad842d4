"""Exact updates of log-normal cell effects (privinfer.pymc.cell_effects): the block update's
stationary law against quadrature, and plain pm.sample() assigning the step."""

import numpy as np
import pymc as pm
import pytest
from pymc.sampling.mcmc import assign_step_methods
from scipy import special, stats

from privinfer.pymc import CellEffectsGibbs, WalkGibbs
from privinfer.pymc.cell_effects import block_update

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
