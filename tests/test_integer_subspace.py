"""Generalized Laplace / Gaussian on integer lattices: invariants kept exactly, integer,
unbiased releases; exact logp off/on the lattice (NumPy and PyTensor); guarantees; the
delinquent-children table, the 14-record intersecting constraints, and a 100-county state."""

import numpy as np
import pytest

from privinfer import invariants
from privinfer.datasets import delinquent_children, intersecting_counting_example
from privinfer.mechanisms import GeneralizedGaussian, GeneralizedLaplace
from privinfer.lattice import BurnInCertificate


def _delinquent():
    x = delinquent_children().ravel()
    return x, invariants.margins((4, 4), [(0,), (1,)])


def _intersecting():
    x, subsets = intersecting_counting_example()
    return x, invariants.counting(subsets, 14)


def _check_release_and_unbiased(mech, x, N, rng):
    y = mech.release(np.tile(x, (N, 1)), rng=rng)
    C = mech.invariant.integer_matrix()
    assert y.dtype == np.int64 and y.shape == (N, x.size)
    np.testing.assert_array_equal(y @ C.T, np.tile(C @ x, (N, 1)))  # every release keeps C x
    e = y - x
    # cellwise unbiased: |mean| <= 5 standard errors sd/sqrt(N) per cell (noise chains are
    # independent; sd estimated from the draws)
    se = e.std(axis=0) / np.sqrt(N)
    assert np.all(np.abs(e.mean(axis=0)) <= 5 * se + 1e-12)
    return e


def test_delinquent_children_l1_release_is_exact():
    # l1 on a two-way table: free-cell rejection (exact), so no coupling is run and delta = 0
    x, inv = _delinquent()
    mech = GeneralizedLaplace(inv, 1.0, "l1")
    assert mech.exact and mech.exact_sampler.method == "free-cell-rejection"
    _check_release_and_unbiased(mech, x, 2000, np.random.default_rng(1))
    assert mech.certificate is None
    g = mech.guarantee
    assert g["delta"] == 0.0 and g["exact"] is True
    assert g.definition == "(eps, 0)-induced integer subspace DP"


@pytest.mark.slow
def test_delinquent_children_l2_release_is_mcmc_with_delta():
    x, inv = _delinquent()
    mech = GeneralizedLaplace(inv, 1.0, "l2", n_coupling_replicates=100)
    assert not mech.exact
    _check_release_and_unbiased(mech, x, 2000, np.random.default_rng(1))
    cert = mech.certificate
    assert isinstance(cert, BurnInCertificate)
    g = mech.guarantee
    # MCMC: delta = (1 + e^eps) eta > 0, eta = (2 eta0)^k with eta0 >= 1/R, boosted until
    # delta <= target_delta (1e-6); the burn-in is k times the certified sweeps
    assert g["exact"] is False and 0 < g["delta"] <= 1e-6
    assert g.definition == "(eps, delta)-induced integer subspace DP"
    k = mech.burn_in() // max(1, cert.burn_in)
    assert k >= 2 and g["delta"] == pytest.approx((1 + np.exp(1.0)) * (2 * max(cert.tv_bound(cert.burn_in), 0.01)) ** k)
    # TV bound curve: non-increasing and <= the threshold from the certified burn-in on
    t = np.arange(0, cert.burn_in + 10)
    curve = cert.tv_bound(t)
    assert np.all(np.diff(curve) <= 0) and curve[cert.burn_in] <= 0.01
    assert mech.certify_burn_in() is cert  # computed once, cached


@pytest.mark.slow
@pytest.mark.parametrize("norm", ["l1", "l2"])
def test_intersecting_constraints_releases(norm):
    x, inv = _intersecting()
    assert inv.null_dim == 11
    mech = GeneralizedLaplace(inv, 1.0, norm, n_coupling_replicates=100)
    _check_release_and_unbiased(mech, x, 2000, np.random.default_rng(2))


def test_generalized_gaussian_releases():
    x, inv = _intersecting()
    mech = GeneralizedGaussian(inv, 2.0, n_coupling_replicates=100)
    _check_release_and_unbiased(mech, x, 2000, np.random.default_rng(3))
    g = mech.guarantee
    assert g["rho"] == pytest.approx(1 / 8)


def test_logp_on_and_off_the_lattice_numpy_and_pytensor():
    import pytensor
    import pytensor.tensor as pt

    x, inv = _delinquent()
    B = inv.lattice_basis()
    on = x + B @ np.arange(-4, 5)
    off_sum = x.copy()
    off_sum[0] += 1  # breaks a margin
    off_int = x + 0.5 * B[:, 0]  # keeps margins but is not integer
    yv = pt.dvector("y")
    for mech in (GeneralizedLaplace(inv, 0.7, "l1", burn_in=1), GeneralizedLaplace(inv, 0.7, "l2", burn_in=1),
                 GeneralizedGaussian(inv, 1.9, burn_in=1)):
        e = (on - x).astype(float)
        want = {"l1": -0.7 * np.abs(e).sum(), "l2": -0.7 * np.sqrt((e * e).sum())}.get(
            getattr(mech, "norm", None), -(e * e).sum() / (2 * 1.9**2))
        assert mech.logp(on, x) == pytest.approx(want)
        assert mech.logp(off_sum, x) == -np.inf
        assert mech.logp(off_int, x) == -np.inf
        np.testing.assert_allclose(mech.logp(np.stack([on, off_sum]), x), [want, -np.inf])
        f = pytensor.function([yv], mech.logp(yv, x.astype(float)))
        assert f(on.astype(float)) == pytest.approx(want)
        assert f(off_sum.astype(float)) == -np.inf
        assert f(off_int) == -np.inf
        assert mech.logp_constant_dropped


def test_guarantee_and_explicit_burn_in():
    x, inv = _delinquent()
    m = GeneralizedLaplace(inv, 0.5, "l2", sensitivity=2, burn_in=7)
    g = m.guarantee
    # an explicit burn-in has no TV estimate: only the trivial bound eta <= 1, so delta = 1
    assert g.definition == "(eps, delta)-induced integer subspace DP"
    assert g["delta"] == 1.0 and g["exact"] is False
    assert g["epsilon"] == 0.5 and g["norm"] == "l2" and g["sensitivity"] == 2
    assert m.burn_in() == 7 and m.certificate is None  # explicit burn-in: no coupling run


def test_sampler_choice():
    x, inv = _delinquent()
    with pytest.raises(ValueError, match="no exact sampler"):
        GeneralizedLaplace(inv, 0.5, "l2", sampler="exact")
    with pytest.raises(ValueError, match="sampler"):
        GeneralizedLaplace(inv, 0.5, sampler="gibbs")
    m = GeneralizedLaplace(inv, 0.5, sampler="mcmc", burn_in=3)
    assert not m.exact and m.guarantee["delta"] > 0
    groups = invariants.groups(["a", "a", "b", "c", "c", "c"])
    for mech in (GeneralizedLaplace(groups, 0.3), GeneralizedGaussian(groups, 2.0)):
        assert mech.exact and mech.guarantee["delta"] == 0.0


def test_input_errors():
    x, inv = _delinquent()
    with pytest.raises(ValueError):
        GeneralizedLaplace(inv, 0.0)
    with pytest.raises(ValueError, match="norm"):
        GeneralizedLaplace(inv, 1.0, norm="linf")
    with pytest.raises(ValueError, match="integer"):
        GeneralizedLaplace(invariants.Invariant([[0.5, 1.0, 1.0]]), 1.0)
    with pytest.raises(TypeError):
        GeneralizedLaplace(np.ones((1, 3)), 1.0)
    m = GeneralizedLaplace(inv, 1.0, burn_in=2)
    with pytest.raises(ValueError, match="integer"):
        m.release(x + 0.5)
    with pytest.raises(ValueError, match="shape"):
        m.release(x[:5])
    with pytest.raises(ValueError):
        GeneralizedLaplace(inv, 1.0, burn_in=-1)


@pytest.mark.slow
def test_census_state_counties_certified_l1():
    # One state's ~100 counties with the state total kept; eps = 0.192 (l1).  Synthetic
    # populations stand in for county counts (the test needs no data files).  The burn-in is
    # certified by L-lag couplings, CI-sized: 8 replicates at a fixed lag of 4000 sweeps (no
    # pilot run), TV threshold 0.1 (with 8 replicates: no pair may still be apart).  The
    # certified burn-in is of order 10^4 sweeps here (see benchmarks/bench_lattice_sampler.py).
    rng = np.random.default_rng(11)
    x = rng.integers(100, 200_000, size=100)
    inv = invariants.total(100)
    mech = GeneralizedLaplace(inv, 0.192, "l1", sampler="mcmc", n_coupling_replicates=8, lag=4000,
                              tv_threshold=0.1, target_delta=0.6)
    y = mech.release(np.tile(x, (200, 1)), rng=rng)
    cert = mech.certificate
    assert cert.lag == 4000 and cert.n_replicates == 8
    # eta0 >= 1/8 (8 replicates), so (1 + e^0.192)(2 eta0) <= 0.6 needs k = 1 repeat
    assert not mech.exact and 0 < mech.guarantee["delta"] <= 0.6
    assert mech.burn_in() == cert.burn_in
    assert cert.burn_in > 0 and cert.tv_bound(cert.burn_in) <= 0.1
    np.testing.assert_array_equal(y.sum(axis=1), x.sum())
    e = y - x
    se = e.std(axis=0) / np.sqrt(200)
    assert np.all(np.abs(e.mean(axis=0)) <= 5 * se)
