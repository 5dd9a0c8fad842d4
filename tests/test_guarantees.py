"""Typed guarantees: conversions against the accounting formulas, composition rules, and the
kinds the lattice mechanisms state for exact and MCMC releases."""

import math

import numpy as np
import pytest
from scipy import stats

from privinfer import accounting
from privinfer import invariants as I
from privinfer.guarantees import GDP, ZCDP, ApproxDP, Guarantee, PureDP, compose
from privinfer.mechanisms import DiscreteGaussian, DoubleGeometric, GeneralizedGaussian, GeneralizedLaplace


def test_kinds_and_parameters():
    g = PureDP(0.5, relation="add/remove one", reference="Dwork et al.", sensitivity=1.0)
    assert g.kind == "pure" and g["epsilon"] == 0.5 and g["delta"] == 0.0 and g["sensitivity"] == 1.0
    assert isinstance(g, Guarantee) and g.relation == "add/remove one"
    assert ApproxDP(1.0, 1e-6).delta == 1e-6 and ZCDP(0.2).rho == 0.2 and GDP(1.5).mu == 1.5
    for bad in (lambda: PureDP(0.0), lambda: PureDP(-1), lambda: ApproxDP(1.0, 1.0), lambda: ApproxDP(1.0, -0.1),
                lambda: ZCDP(0.0), lambda: GDP(-2.0)):
        with pytest.raises(ValueError):
            bad()


def test_conversions_follow_the_accounting_formulas():
    d = 1e-6
    z = ZCDP(0.3).to_approx_dp(d)
    assert z.epsilon == pytest.approx(0.3 + 2 * math.sqrt(0.3 * math.log(1 / d))) and z.delta == d
    g = GDP(1.2).to_approx_dp(d)
    # the GDP curve at the converted epsilon gives back delta (root of a decreasing curve)
    assert accounting.gdp_delta(1.2, g.epsilon) == pytest.approx(d, rel=1e-6)
    direct = stats.norm.cdf(-g.epsilon / 1.2 + 0.6) - math.exp(g.epsilon) * stats.norm.cdf(-g.epsilon / 1.2 - 0.6)
    assert direct == pytest.approx(d, rel=1e-5)
    assert PureDP(0.4).to_zcdp().rho == pytest.approx(0.08)
    assert GDP(2.0).to_zcdp().rho == pytest.approx(2.0)
    assert PureDP(0.4).to_approx_dp().delta == 0.0
    with pytest.raises(ValueError, match="needs a delta"):
        ZCDP(0.3).to_approx_dp()
    with pytest.raises(TypeError):
        Guarantee("Semi-DP").to_approx_dp(1e-6)


def test_composition_rules():
    assert compose(PureDP(0.2), PureDP(0.3)).epsilon == pytest.approx(0.5)
    a = compose(ApproxDP(0.2, 1e-7), ApproxDP(0.3, 2e-7))
    assert a.kind == "approx" and a.epsilon == pytest.approx(0.5) and a.delta == pytest.approx(3e-7)
    assert compose(ZCDP(0.1), ZCDP(0.2)).rho == pytest.approx(0.3)
    assert compose(GDP(0.6), GDP(0.8)).mu == pytest.approx(1.0)
    mixed = compose(PureDP(0.2), ZCDP(0.1), GDP(1.0))  # no approx member: everything in zCDP
    assert mixed.kind == "zcdp" and mixed.rho == pytest.approx(0.02 + 0.1 + 0.5)
    m2 = compose(ApproxDP(0.5, 1e-7), ZCDP(0.1), delta=2e-6)  # zCDP converted at the whole delta share
    assert m2.kind == "approx" and m2.delta == pytest.approx(1e-7 + 2e-6)
    assert m2.epsilon == pytest.approx(0.5 + accounting.zcdp_to_approx_dp(0.1, 2e-6))
    with pytest.raises(ValueError, match="needs a delta"):
        compose(ApproxDP(0.5, 1e-7), ZCDP(0.1))
    with pytest.raises(TypeError):
        compose(PureDP(0.1), Guarantee("Semi-DP"))
    assert compose(PureDP(0.1, relation="r1"), PureDP(0.1, relation="r2")).relation == "r1 | r2"


def test_mechanisms_state_typed_guarantees():
    inv = I.groups(np.array(["a", "a", "b", "b", "b"]))
    assert isinstance(GeneralizedLaplace(inv, 0.5).guarantee, PureDP)
    g = GeneralizedGaussian(inv, 2.0).guarantee
    assert isinstance(g, ZCDP) and g.rho == pytest.approx(1 / 8) and g["delta"] == 0.0
    assert isinstance(DoubleGeometric(3, 0.5).guarantee, PureDP)
    assert isinstance(DiscreteGaussian(3, 2.0).guarantee, ZCDP)
    # MCMC with the coupling estimate: (eps, delta) with 0 < delta <= target on a tiny lattice
    m = GeneralizedLaplace(I.total(3), 1.0, norm="l2", n_coupling_replicates=20)
    m.certify_burn_in(np.random.default_rng(0))
    g = m.guarantee
    assert isinstance(g, ApproxDP) and 0 < g.delta <= 1e-6 and g.epsilon == 1.0
    # an explicit burn-in carries no estimate: the trivial delta = 1 is not an (eps, delta) claim
    g = GeneralizedLaplace(I.total(3), 1.0, norm="l2", burn_in=5).guarantee
    assert not isinstance(g, ApproxDP) and g["delta"] == 1.0
    # composing two exact national releases: epsilons add, delta stays 0
    c = compose(GeneralizedLaplace(inv, 0.5).guarantee, GeneralizedLaplace(inv, 0.25).guarantee)
    assert isinstance(c, PureDP) and c.epsilon == pytest.approx(0.75)


def test_subspace_and_classic_mechanisms_state_typed_guarantees():
    from privinfer.mechanisms import ExtendedLaplace, Gaussian, Laplace, LinearGaussian, ProjectedGaussian

    inv = I.total(4)
    assert isinstance(Laplace(4, 0.5, 1.0).guarantee, PureDP)
    g = Gaussian(4, 1.0, 1e-6, 1.0).guarantee
    assert isinstance(g, ApproxDP) and g.delta == 1e-6
    g = ProjectedGaussian(inv, 1.0, 1e-6, 1.0).guarantee
    assert isinstance(g, ApproxDP) and g.epsilon == 1.0
    assert isinstance(ExtendedLaplace(inv, 0.5, 1.0).guarantee, PureDP)
    # given only a noise scale there is no (eps, delta) claim: the guarantee stays untyped
    assert not isinstance(ProjectedGaussian(inv, sigma=2.0).guarantee, (ApproxDP, PureDP))
    assert isinstance(LinearGaussian(np.eye(3), np.eye(3)).guarantee, ZCDP)
