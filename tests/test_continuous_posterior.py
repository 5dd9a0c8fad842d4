"""Continuous latents on {C x = t}: closed-form and quadrature posteriors vs NUTS."""

import numpy as np
import pymc as pm
import pytest

from privinfer import invariants as I
from privinfer.invariants import InfeasibleInvariantError
from privinfer.mechanisms.subspace import ProjectedGaussian, ProjectedLaplace
from privinfer.pymc import affine_latent, observe


def test_affine_latent_geometry_and_prior_density():
    inv = I.margins((2, 3), [(0,), (1,)])
    x_true = np.array([3.0, 1.0, 2.0, 1.0, 3.0, 2.0])
    t = inv.of(x_true)
    with pm.Model() as model:
        x = affine_latent("x", inv, t, prior=pm.Normal.dist(0.0, 10.0, shape=6))
    fn = model.compile_fn(model.replace_rvs_by_values([x])[0], inputs=model.value_vars, point_fn=True)
    rng = np.random.default_rng(0)
    for _ in range(5):
        z = rng.standard_normal(inv.null_dim) * 5
        xv = fn({"x_z": z})
        assert inv.satisfied_by(xv, t)
    # the potential is the prior log density at x (no Jacobian: Q_N is orthonormal)
    from scipy import stats
    lp = model.compile_logp()({"x_z": np.ones(inv.null_dim)})
    xv = fn({"x_z": np.ones(inv.null_dim)})
    assert lp == pytest.approx(stats.norm(0, 10).logpdf(xv).sum())


@pytest.mark.slow
def test_conjugate_gaussian_projected_gaussian_closed_form():
    # prior x ~ N(mu, tau^2 I) restricted to {C x = t}; release y = x + P_N g, g ~ N(0, s^2 I).
    # With x = x0 + Q z: prior on z is N(Q^T (mu - x0), tau^2 I) and the likelihood is
    # N(Q^T (y - x0); z, s^2 I) (projected Gaussian = degenerate Gaussian N(x, s^2 P_N)), so
    # z | y ~ N(m, v I) with v = 1/(1/tau^2 + 1/s^2), m = v (Q^T(mu-x0)/tau^2 + Q^T(y-x0)/s^2).
    inv = I.margins((3, 3), [(0,), (1,)])
    x_true = np.array([5.0, 2.0, 7.0, 1.0, 4.0, 3.0, 6.0, 2.0, 5.0])
    t = inv.of(x_true)
    tau, s = 3.0, 1.5
    mu = np.full(9, 4.0)
    mech = ProjectedGaussian(inv, sigma=s)
    y = mech.release(x_true, rng=1)
    Q = inv.null_basis()
    x0 = inv.feasible_point(t)
    v = 1.0 / (1 / tau**2 + 1 / s**2)
    m = v * (Q.T @ (mu - x0) / tau**2 + Q.T @ (y - x0) / s**2)
    mean_x = x0 + Q @ m
    cov_x = v * Q @ Q.T
    with pm.Model():
        x = affine_latent("x", inv, t, prior=pm.Normal.dist(mu, tau, shape=9))
        observe("y", mech, x, observed=y)
        idata = pm.sample(2000, tune=1000, chains=2, cores=1, random_seed=2, progressbar=False,
                          compute_convergence_checks=False)
    draws = idata.posterior["x"].values.reshape(-1, 9)
    assert np.all(inv.satisfied_by(draws, t))
    n_eff = 1500  # conservative ESS for 4000 NUTS draws of a Gaussian (ESS ~ N here)
    # means: 5 sd / sqrt(ESS); covariance entries: sd of a sample covariance is
    # sqrt((S_ii S_jj + S_ij^2) / N) for Gaussians -> 5 of those
    sd = np.sqrt(np.diag(cov_x))
    np.testing.assert_array_less(np.abs(draws.mean(0) - mean_x), 5 * sd / np.sqrt(n_eff))
    emp = np.cov(draws.T)
    tol = 5 * np.sqrt((np.outer(np.diag(cov_x), np.diag(cov_x)) + cov_x**2) / n_eff)
    np.testing.assert_array_less(np.abs(emp - cov_x), tol + 1e-12)


@pytest.mark.slow
def test_projected_laplace_augmentation_matches_exact_marginal():
    # two cells with a fixed total: x = x0 + q z (1-d); exact posterior of z by quadrature
    # with the exact one-row marginal density vs NUTS on the augmented model (latent r).
    inv = I.total(2)
    t = [10.0]
    mech = ProjectedLaplace(inv, scale=1.0)
    y = np.array([6.3, 3.7])
    prior_sd = 4.0
    q = inv.null_basis()[:, 0]
    x0 = inv.feasible_point(t)
    zs = np.linspace(-15, 15, 3001)
    xs = x0 + zs[:, None] * q
    logw = mech.marginal_logp(y, xs) - 0.5 * np.sum((xs - 5.0) ** 2, axis=1) / prior_sd**2
    w = np.exp(logw - logw.max())
    w /= w.sum()
    m = w @ zs
    sd = np.sqrt(w @ (zs - m) ** 2)
    with pm.Model():
        x = affine_latent("x", inv, t, prior=pm.Normal.dist(5.0, prior_sd, shape=2))
        observe("y", mech, x, observed=y)
        idata = pm.sample(2000, tune=1000, chains=2, cores=1, random_seed=4, progressbar=False,
                          compute_convergence_checks=False, target_accept=0.95)
    z = idata.posterior["x_z"].values.ravel()
    # NUTS on a Laplace-kinked target: allow ESS >= 500 of 4000 -> 5 sd/sqrt(500)
    assert abs(z.mean() - m) < 5 * sd / np.sqrt(500)
    assert abs(z.std() - sd) < 5 * sd / np.sqrt(2 * 500)


def test_observe_errors():
    inv = I.total(3)
    mech = ProjectedGaussian(inv, sigma=1.0)
    with pm.Model():
        x = affine_latent("x", inv, [6.0])
        with pytest.raises(InfeasibleInvariantError, match="inconsistent"):
            observe("y", mech, x, observed=np.array([1.0, 2.0, 4.0]))  # sums to 7, t = 6
        with pytest.raises(ValueError, match="shape"):
            observe("y2", mech, x, observed=np.array([1.0, 2.0]))
        with pytest.raises(ValueError, match="non-finite"):
            observe("y3", mech, x, observed=np.array([1.0, np.nan, 5.0]))


def test_observe_linear_gaussian_with_fewer_outputs_than_cells():
    # y = B x + N(0, Sigma) with B (2 x 4): the likelihood has length-2 observations and
    # posterior predictive draws come from the mechanism's release
    from privinfer.mechanisms import LinearGaussian

    B = np.array([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0]])
    mech = LinearGaussian(B, np.diag([0.5, 2.0]))
    y = np.array([3.0, 5.0])
    with pm.Model() as model:
        x = pm.Normal("x", 0.0, 10.0, shape=4)
        obs = observe("y", mech, x, observed=y)
    lp = model.compile_logp(vars=[obs])({"x": np.array([1.0, 1.5, 2.0, 2.5])})
    assert lp == pytest.approx(float(mech.logp(y, np.array([1.0, 1.5, 2.0, 2.5]))))
    with model:
        pp = pm.sample_prior_predictive(draws=5, random_seed=1)
    assert pp.prior_predictive["y"].shape == (1, 5, 2)
