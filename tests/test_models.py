"""Reference models: structure, invariants in every draw, and posteriors vs exact or simulated truth."""

import logging
import pathlib
import sys

import arviz as az
import numpy as np
import pymc as pm
import pytest
from scipy import stats
from scipy.special import gammaln, logsumexp

from privinfer import invariants as I
from privinfer.datasets import spatiotemporal_invariant, synthetic_spatiotemporal
from privinfer.invariants import InfeasibleInvariantError
from privinfer.mechanisms import LinearGaussian, ProjectedGaussian, ProjectedLaplace
from privinfer.mechanisms.discrete import DoubleGeometric
from privinfer.mechanisms.integer_subspace import GeneralizedLaplace
from privinfer.models import (
    contingency_table_model,
    county_population_model,
    nested_histogram_model,
    spatiotemporal_model,
)
from privinfer.models.contingency import HALDANE_ANSCOMBE, multinomial_gaussian_logp, table_log_odds_ratios
from privinfer.models.spatiotemporal import harmonic_basis
from privinfer.pymc import lattice_latent, lattice_steps, observe
from privinfer.pymc import LatticeBlockGibbs, LatticeGibbs, LatticeMetropolis

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from posterior_helpers import empirical_tv, marginal_tv_tolerance  # noqa: E402

logging.getLogger("pymc").setLevel(logging.ERROR)
SAMPLE = dict(cores=1, progressbar=False, compute_convergence_checks=False)
#: Dense mass-matrix adaptation (init="jitter+adapt_full") is PyMC's documented option for
#: correlated posteriors; PyMC labels it experimental with a UserWarning on every use.
DENSE_MASS = pytest.mark.filterwarnings("ignore:QuadPotentialFullAdapt is an experimental feature:UserWarning")


def _draws(idata, name):
    v = idata.posterior[name].values
    return v.reshape(-1, *v.shape[2:])


def _binomial_lower(n, p, z=4.0):
    """Lower limit ``n p - z sqrt(n p (1-p))`` of a Binomial(n, p) count (z sd)."""
    return n * p - z * np.sqrt(n * p * (1 - p))


def _coverage(draws, truth, level):
    lo, hi = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return int(np.sum((truth >= lo) & (truth <= hi)))


# ---------------------------------------------------------------------------------------
# lattice_steps
# ---------------------------------------------------------------------------------------
def test_lattice_steps_one_step_per_lattice_latent():
    with pm.Model() as model:
        a = lattice_latent("a", I.total(3), [6], prior=pm.Poisson.dist(mu=np.full(3, 2.0)))
        b = lattice_latent("b", I.total(2), [4], prior=pm.Poisson.dist(mu=np.full(2, 2.0)))
        pm.Normal("theta", 0.0, 1.0)
        observe("ya", DoubleGeometric(3, scale=1.0), a, observed=np.array([1, 2, 3]))
        observe("yb", DoubleGeometric(2, scale=1.0), b, observed=np.array([2, 2]))
    steps = lattice_steps(model)
    assert [type(s) for s in steps] == [LatticeBlockGibbs, LatticeBlockGibbs]  # the default: as pm.sample() picks
    assert all(s.uses_blocks for s in steps)  # totals, separable posteriors
    assert [type(s) for s in lattice_steps(model, step_class=LatticeMetropolis)] == [LatticeMetropolis] * 2
    assert [s.vars[0].name for s in steps] == ["a", "b"]
    gibbs = lattice_steps(model, step_class=LatticeGibbs, max_support=64)
    assert all(isinstance(s, LatticeGibbs) for s in gibbs)
    with pm.Model() as plain:
        pm.Normal("theta", 0.0, 1.0)
    assert lattice_steps(plain) == []
    with model:  # context model
        assert len(lattice_steps()) == 2


# ---------------------------------------------------------------------------------------
# county populations
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
def test_county_model_integer_groups_coverage():
    # 3 states x 20 counties drawn from the model's own log-normal-Poisson story
    # (mu = log 50, sigma = 0.8); double-geometric noise of scale 5 (eps = 0.2) on every
    # county; the state totals are the invariant.
    rng = np.random.default_rng(20260)
    labels = np.repeat([0, 1, 2], 20)
    inv = I.groups(labels)
    x = rng.poisson(np.exp(np.log(50.0) + 0.8 * rng.standard_normal(60)))
    mech = DoubleGeometric(60, scale=5.0)
    y = mech.release(x, rng=rng)
    t = inv.of(x)
    model = county_population_model(y, mech, inv, t)
    assert {"mu", "sigma", "log_rate", "x"} <= set(model.named_vars)
    assert model["x"].dtype == "int64" and model["log_rate"].type.shape == (60,)
    with model:
        steps = lattice_steps(model)
        assert len(steps) == 1 and steps[0].local.is_local
        idata = pm.sample(1000, tune=600, step=steps, chains=2, random_seed=3, **SAMPLE)
    xd = _draws(idata, "x")
    assert np.all(inv.of(xd) == t)  # every draw keeps every state total
    assert np.all(xd >= 0)
    assert float(az.rhat(idata, var_names=["mu", "sigma"]).to_array().max()) < 1.05
    # The truth was drawn from the model with hyperparameters well inside the prior, so
    # posterior intervals cover at about the nominal rate.  Across the 60 counties the
    # count of covered truths is about Binomial(60, level) (the counties share mu and
    # sigma, a small dependence): require it within 4 binomial sd of 60 * level, two-sided
    # for the 50% intervals (too wide and too narrow both fail), one-sided at 90%.
    c50, c90 = _coverage(xd, x, 0.5), _coverage(xd, x, 0.9)
    sd50 = 4 * np.sqrt(60 * 0.25)
    assert abs(c50 - 30) <= sd50, c50
    assert c90 >= _binomial_lower(60, 0.9), c90
    # the posterior pools information: it is closer to the truth than the release is
    # (RMSE ratio well below 1 for 60 counties; the release's per-county sd is 5 sqrt 2)
    post_rmse = np.sqrt(np.mean((xd.mean(0) - x) ** 2))
    assert post_rmse < np.sqrt(np.mean((y - x) ** 2))


@pytest.mark.slow
@DENSE_MASS
def test_county_model_real_valued_projected_laplace():
    # one state, 12 counties; projected Laplace release (keeps the total); continuous latent
    rng = np.random.default_rng(7)
    n = 12
    x = rng.poisson(np.exp(np.log(200.0) + 0.6 * rng.standard_normal(n))).astype(float)
    inv = I.total(n)
    mech = ProjectedLaplace(inv, scale=8.0)
    y = mech.release(x, rng=rng)
    model = county_population_model(y, mech, inv)  # t read off the release (it keeps it)
    assert {"mu", "sigma", "x", "x_z", "y_r"} <= set(model.named_vars)
    assert "z" not in model.named_vars  # log-normal marginal: z integrated out (docstring)
    assert lattice_steps(model) == []
    with model:
        idata = pm.sample(500, tune=500, chains=2, random_seed=5, target_accept=0.9, init="jitter+adapt_full",
                          **SAMPLE)
    xd = _draws(idata, "x")
    assert np.all(inv.satisfied_by(xd, [x.sum()]))
    assert np.all(xd > 0)
    # 90% intervals over 12 counties: covered count >= 4-sd binomial lower limit (6.8)
    assert _coverage(xd, x, 0.9) >= _binomial_lower(n, 0.9)


def test_county_model_bad_inputs():
    inv = I.total(4)
    dg = DoubleGeometric(4, scale=1.0)
    with pytest.raises(ValueError, match="invariant constrains 4 cells but the release has 3"):
        county_population_model(np.array([1, 2, 3]), dg, inv, [6])
    with pytest.raises(ValueError, match="mechanism acts on 5 cells"):
        county_population_model(np.array([1, 2, 3, 4]), DoubleGeometric(5, scale=1.0), inv, [10])
    with pytest.raises(ValueError, match="integer mechanism must hold integers"):
        county_population_model(np.array([1.5, 2, 3, 4]), dg, inv, [10])
    with pytest.raises(ValueError, match="non-finite"):
        county_population_model(np.array([1.0, np.nan, 3, 4]), dg, inv, [10])
    with pytest.raises(ValueError, match="no invariant values"):
        county_population_model(np.array([1, 2, 3, 4]), dg, inv)  # DG does not keep totals
    with pytest.raises(ValueError, match="prior_mean"):
        county_population_model(np.array([1, 2, 3, 4]), dg, inv, [10], prior_mean=0.0)
    with pytest.raises(TypeError, match="Invariant"):
        county_population_model(np.array([1, 2, 3, 4]), dg, np.ones((1, 4)), [10])
    with pytest.raises(InfeasibleInvariantError):
        county_population_model(np.array([1, 2, 3, 4]), dg, inv, [-3])  # no x >= 0 with total -3
    pg = ProjectedGaussian(inv, sigma=1.0)
    with pytest.raises(InfeasibleInvariantError, match="inconsistent"):
        county_population_model(np.array([1.0, 2.0, 3.0, 4.0]), pg, inv, [11.0])  # release sums to 10


# ---------------------------------------------------------------------------------------
# contingency table
# ---------------------------------------------------------------------------------------
def _exact_2x2(t, loglik, prior_scale):
    """Exact posterior of the log odds ratio gamma and of x11 in the 2x2 model.

    With p = softmax(0, b, a, a + b + g) over cells (00, 01, 10, 11) and margins
    t = (R0, R1, K0, K1), a table on the fibre is fixed by x11 and
    Mult(x; N, p) = N!/prod x! * exp(a R1 + b K1 + g x11) / Z(a, b, g)^N,
    Z = 1 + e^b + e^a + e^(a+b+g).  So
    p(g, x11 | t, y) ∝ N(g) I(g) * c(x11) e^(g x11) p(y | x(x11)),
    I(g) = ∫∫ N(a) N(b) exp(a R1 + b K1 - N log Z) da db  (2-d Riemann sum on a fine grid:
    the integrand is smooth with sd ~0.5, the step 0.05), c = 1/prod x!.
    Returns (g grid, normalized density of g, pmf of x11 over its support, support).
    """
    R0, R1, K0, K1 = (int(v) for v in t)
    N = R0 + R1
    s = np.arange(max(0, R1 + K1 - N), min(R1, K1) + 1)
    tables = np.stack([N - R1 - K1 + s, K1 - s, R1 - s, s], axis=1)
    logc = -gammaln(tables + 1.0).sum(axis=1)
    ll = np.array([loglik(tab) for tab in tables])
    ab = np.arange(-7.0, 7.0 + 1e-9, 0.05)
    A, Bm = np.meshgrid(ab, ab, indexing="ij")
    A, Bm = A.ravel(), Bm.ravel()
    base = -(A**2 + Bm**2) / (2 * prior_scale**2) + A * R1 + Bm * K1
    g = np.arange(-10.0, 10.0 + 1e-9, 0.025)
    logI = np.empty_like(g)
    for lo in range(0, len(g), 40):
        gg = g[lo:lo + 40, None]
        logZ = np.logaddexp(np.logaddexp(0.0, Bm), np.logaddexp(A, A + Bm + gg))
        logI[lo:lo + 40] = logsumexp(base - N * logZ, axis=1)
    joint = (-g**2 / (2 * prior_scale**2) + logI)[:, None] + logc + g[:, None] * s + ll
    joint -= joint.max()
    w = np.exp(joint)
    dens = w.sum(axis=1)
    dens /= np.trapezoid(dens, g)
    pmf = w.sum(axis=0)
    return g, dens, pmf / pmf.sum(), s


def _check_log_odds_ratio(idata, g, dens, pmf, support):
    gam = idata.posterior["log_odds_ratio"].values[..., 0, 0]  # (chain, draw)
    x11 = idata.posterior["x"].values[..., 3]
    assert float(az.rhat(gam)) < 1.05
    mean_exact = np.trapezoid(g * dens, g)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (dens[1:] + dens[:-1]) * np.diff(g))])
    # posterior mean within 5 Monte Carlo standard errors (ArviZ MCSE)
    assert abs(gam.mean() - mean_exact) < 5 * float(np.ravel(az.mcse(gam))[0]), (gam.mean(), mean_exact)
    # CDF at the exact 10/25/50/75/90% quantiles: the empirical frequency of an indicator
    # has sd sqrt(F(1-F)/ESS), ESS of that indicator chain from ArviZ; allow 5 sd
    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        gq = np.interp(q, cdf, g)
        ind = (gam <= gq).astype(float)
        ess = float(az.ess(ind))
        assert abs(ind.mean() - q) < 5 * np.sqrt(q * (1 - q) / ess), (q, ind.mean(), ess)
    # the whole marginal pmf of x11 within the TV tolerance of posterior_helpers (4 sd per cell)
    exact = {int(k): float(v) for k, v in zip(support, pmf)}
    tv = empirical_tv(x11.ravel(), exact)
    assert tv < marginal_tv_tolerance(exact, float(az.ess(x11.astype(float)))), tv


@pytest.mark.slow
@pytest.mark.parametrize("noise", ["double_geometric", "generalized_laplace"])
def test_contingency_2x2_log_odds_ratio_matches_exact_posterior(noise):
    # 2x2 table (N = 20) with a strong association (sample log OR = log(6*9/(2*3)) = 2.2)
    table = np.array([[6, 2], [3, 9]])
    inv = I.margins((2, 2), [(0,), (1,)])
    t = inv.of(table.ravel())
    prior_scale = 2.0
    if noise == "double_geometric":
        mech = DoubleGeometric(4, scale=1.5)  # noise on every cell; does not keep margins
        y = np.array([7, 1, 3, 11])  # a fixed release: table + (1, -1, 0, 2)
        kwargs = dict(t=t)
    else:
        mech = GeneralizedLaplace(inv.with_t(t), epsilon=1.0, burn_in=200)
        y = mech.release(table.ravel(), rng=np.random.default_rng(4))
        assert np.all(inv.of(y) == t)  # the release keeps the margins
        kwargs = {}  # t read off the release (the mechanism keeps exactly these margins)
    model = contingency_table_model(y, mech, (2, 2), inv, prior_scale=prior_scale, **kwargs)
    assert model["log_odds_ratio"].type.shape == (1, 1)
    with model:
        steps = lattice_steps(model)
        assert steps[0].local.is_local  # multinomial scored locally: the margins fix N
        idata = pm.sample(1500, tune=500, step=steps, chains=2, random_seed=8, **SAMPLE)
    xd = _draws(idata, "x")
    assert np.all(inv.of(xd) == t)

    def loglik(tab):
        return float(mech.logp(np.asarray(y), tab))

    g, dens, pmf, support = _exact_2x2(t, loglik, prior_scale)
    _check_log_odds_ratio(idata, g, dens, pmf, support)


def test_contingency_structure_and_log_odds_ratio_definition():
    r, c = 3, 4
    table = np.array([[5, 3, 2, 1], [2, 6, 4, 3], [1, 2, 7, 9]])
    inv = I.margins((r, c), [(0,), (1,)])
    mech = DoubleGeometric(r * c, scale=2.0)
    y = mech.release(table.ravel(), rng=1)
    model = contingency_table_model(y.reshape(r, c), mech, (r, c), t=inv.of(table.ravel()))
    assert model["log_odds_ratio"].type.shape == (r - 1, c - 1)
    assert model["p"].type.shape == (r * c,) and model["x"].type.shape == (r * c,)
    # at random parameter values, log_odds_ratio[i-1, j-1] = log(p_ij p_00 / (p_i0 p_0j))
    fn = model.compile_fn([model["p"], model["log_odds_ratio"]], inputs=[model["alpha"], model["beta"], model["gamma"]],
                          on_unused_input="ignore", point_fn=False)
    rng = np.random.default_rng(0)
    for _ in range(3):
        p, lor = fn(rng.normal(size=r - 1), rng.normal(size=c - 1), rng.normal(size=(r - 1, c - 1)))
        P = p.reshape(r, c)
        expect = np.log(P[1:, 1:] * P[0, 0] / (P[1:, :1] * P[:1, 1:]))
        np.testing.assert_allclose(lor, expect, rtol=1e-10)
        assert abs(p.sum() - 1) < 1e-12


def test_table_log_odds_ratios_with_the_haldane_anscombe_correction():
    # by hand: [[0, 3], [2, 5]] -> log((5 + 1/2)(0 + 1/2) / ((2 + 1/2)(3 + 1/2))) = log(2.75 / 8.75)
    np.testing.assert_allclose(table_log_odds_ratios(np.array([[0, 3], [2, 5]])), [[np.log(2.75 / 8.75)]],
                               rtol=1e-14)
    assert HALDANE_ANSCOMBE == 0.5
    # without the correction: the sample log odds ratio, infinite with an empty cell
    table = np.array([[5, 3, 2, 1], [2, 6, 4, 3], [1, 2, 7, 9]])
    np.testing.assert_allclose(table_log_odds_ratios(table, correction=0.0)[1, 2], np.log(9 * 5 / (1 * 1)),
                               rtol=1e-14)
    assert np.isinf(table_log_odds_ratios(np.array([[0, 3], [2, 5]]), correction=0.0)).all()
    # leading dimensions are draws: each table on its own
    draws = np.stack([table, table[::-1], table + 4])
    out = table_log_odds_ratios(draws)
    assert out.shape == (3, 2, 3)
    for k in range(3):
        np.testing.assert_allclose(out[k], table_log_odds_ratios(draws[k]), rtol=1e-14)


def test_model_records_the_confidential_tables_log_odds_ratios():
    r, c = 3, 4
    table = np.array([[5, 3, 2, 1], [2, 6, 4, 3], [1, 0, 7, 9]])
    inv = I.margins((r, c), [(0,), (1,)])
    mech = DoubleGeometric(r * c, scale=2.0)
    y = mech.release(table.ravel(), rng=1)
    model = contingency_table_model(y.reshape(r, c), mech, (r, c), t=inv.of(table.ravel()))
    assert model["table_log_odds_ratio"].type.shape == (r - 1, c - 1)
    assert "table_log_odds_ratio" in [v.name for v in model.deterministics]
    # a function of x alone: log((x_ij + 1/2)(x_00 + 1/2) / ((x_i0 + 1/2)(x_0j + 1/2)))
    fn = model.compile_fn(model["table_log_odds_ratio"], inputs=[model["x"]], on_unused_input="ignore",
                          point_fn=False)
    for tab in (table, table[:, ::-1], table + 3):
        x = tab.ravel().astype(np.int64)
        expect = np.log((tab[1:, 1:] + 0.5) * (tab[0, 0] + 0.5) / ((tab[1:, :1] + 0.5) * (tab[:1, 1:] + 0.5)))
        np.testing.assert_allclose(fn(x), expect, rtol=1e-12)


def test_multinomial_gaussian_logp_is_the_reduced_gaussian():
    # the Pearson form equals the N(N q, N(diag q - q q^T)) log density of the first k-1
    # cells up to a constant in (N, k) only: differences across p and x must agree
    N, k = 40.0, 4
    rng = np.random.default_rng(2)
    vals = []
    for _ in range(4):
        p = rng.dirichlet(np.ones(k))
        x = N * p + rng.normal(size=k)
        x[-1] = N - x[:-1].sum()
        q = p[:-1]
        ref = stats.multivariate_normal(N * q, N * (np.diag(q) - np.outer(q, q))).logpdf(x[:-1])
        vals.append(ref - multinomial_gaussian_logp(x, N, p))
    np.testing.assert_allclose(vals, vals[0], rtol=0, atol=1e-9)


@pytest.mark.slow
def test_contingency_real_valued_projected_gaussian():
    table = np.array([[30.0, 12.0, 8.0], [10.0, 25.0, 15.0]])
    inv = I.margins((2, 3), [(0,), (1,)])
    t = inv.of(table.ravel())
    mech = ProjectedGaussian(inv.with_t(t), sigma=2.0)
    y = mech.release(table.ravel(), rng=3)
    model = contingency_table_model(y, mech, (2, 3))  # default margins invariant, t from release
    assert lattice_steps(model) == []
    with model:
        idata = pm.sample(500, tune=500, chains=2, random_seed=2, **SAMPLE)
    xd = _draws(idata, "x")
    assert np.all(inv.satisfied_by(xd, t))
    lor = _draws(idata, "log_odds_ratio")
    assert lor.shape[1:] == (1, 2)
    # the data show a clear association (sample log ORs log(30*25/(12*10)) = 1.8 and
    # log(30*15/(8*10)) = 1.7): the posterior must put it well above zero (95% interval)
    assert np.all(np.quantile(lor, 0.025, axis=0) > 0)


def test_contingency_bad_inputs():
    dg = DoubleGeometric(4, scale=1.0)
    y = np.array([3, 1, 2, 4])
    t = [4, 6, 5, 5]
    with pytest.raises(ValueError, match="shape must be a tuple of 2"):
        contingency_table_model(y, dg, (4,), t=t)
    with pytest.raises(ValueError, match=r"release must have shape \(4,\) or \(2, 2\)"):
        contingency_table_model(y[:3], dg, (2, 2), t=t)
    with pytest.raises(ValueError, match="no invariant values"):
        contingency_table_model(y, dg, (2, 2))
    with pytest.raises(ValueError, match="fix the table total"):
        contingency_table_model(y, dg, (2, 2), I.counting([[0, 1]], 4), t=[4])
    with pytest.raises(ValueError, match="prior_scale"):
        contingency_table_model(y, dg, (2, 2), t=t, prior_scale=-1.0)
    with pytest.raises(InfeasibleInvariantError):
        contingency_table_model(y, dg, (2, 2), t=[4, 6, 5, 6])  # rows sum to 10, columns to 11


# ---------------------------------------------------------------------------------------
# spatio-temporal
# ---------------------------------------------------------------------------------------
def test_harmonic_basis_is_a_pure_interaction():
    for H, K in [(24, 2), (4, 1), (4, 3), (2, 1), (1, 1)]:
        Bh = harmonic_basis(H, K)
        assert np.allclose(Bh.sum(axis=0), 0.0)
        assert np.linalg.matrix_rank(Bh) == Bh.shape[1]  # no aliased or zero columns
    assert harmonic_basis(24, 2).shape == (24, 4) and harmonic_basis(4, 3).shape == (4, 3)


@pytest.mark.slow
@DENSE_MASS
def test_spatiotemporal_small_fit_keeps_margins():
    shape = (3, 4, 3)
    X = synthetic_spatiotemporal(rng=11, groups=3, hours=4, buildings=3, mean_count=8.0)
    inv = spatiotemporal_invariant(X)
    assert inv.rank == (4 + 3 - 1) * 3  # (H + G - 1) B
    mech = ProjectedGaussian(inv, sigma=2.0)
    y = mech.release(X.ravel().astype(float), rng=12)
    model = spatiotemporal_model(y.reshape(shape), mech, shape, inv)
    assert model["log_rate"].type.shape == (36,) and model["group_hour"].type.shape == (3, 2)
    assert model["x_z"].type.shape == (36 - inv.rank,)
    with model:
        idata = pm.sample(500, tune=500, chains=2, random_seed=13, init="jitter+adapt_full", **SAMPLE)
    xd = _draws(idata, "x")
    assert np.all(inv.satisfied_by(xd, inv.t))  # both margins kept in every draw
    assert float(az.rhat(idata, var_names=["x"]).to_array().max()) < 1.05
    # 90% intervals over 36 cells: covered count >= 4-sd lower limit of Binomial(36, 0.9) = 25.2
    assert _coverage(xd, X.ravel(), 0.9) >= _binomial_lower(36, 0.9)


def test_spatiotemporal_bad_inputs():
    shape = (2, 3, 2)
    inv = I.margins(shape, [(1, 2), (0, 2)])
    x = np.arange(12.0)
    inv = inv.with_t(inv.of(x))
    mech = ProjectedGaussian(inv, sigma=1.0)
    with pytest.raises(ValueError, match="real-valued mechanism"):
        spatiotemporal_model(x, DoubleGeometric(12, scale=1.0), shape, inv)
    with pytest.raises(ValueError, match="shape must be a tuple of 3"):
        spatiotemporal_model(x, mech, (12,), inv)
    with pytest.raises(ValueError, match="release must have shape"):
        spatiotemporal_model(x[:10], mech, shape, inv)
    with pytest.raises(ValueError, match="invariant constrains 6 cells"):
        spatiotemporal_model(x, mech, shape, I.total(6))


# ---------------------------------------------------------------------------------------
# nested histograms
# ---------------------------------------------------------------------------------------
@pytest.mark.slow
@DENSE_MASS
def test_nested_histograms_recover_smooth_age_by_sex():
    # sex x age (2 x 8): smooth truth; a coarse release (2-year buckets, sd 4) and a fine
    # release (every cell, sd 12), independent noise; published total kept exactly
    ages = np.arange(8)
    truth = np.concatenate([np.round(150 * np.exp(-((ages - 3) / 4.0) ** 2) + 20),
                            np.round(120 * np.exp(-((ages - 4) / 3.0) ** 2) + 30)])
    n = truth.size
    coarse = LinearGaussian(np.kron(np.eye(8), np.ones((1, 2))), 16.0 * np.eye(8))
    fine = LinearGaussian(np.eye(n), 144.0 * np.eye(n))
    rng = np.random.default_rng(31)
    releases = [(coarse, coarse.release(truth, rng=rng)), (fine, fine.release(truth, rng=rng))]
    model = nested_histogram_model(releases, n, total=truth.sum(), shape=(2, 8))
    assert {"roughness", "w", "log_x", "x", "y_0", "y_1"} <= set(model.named_vars)
    assert "level" not in model.named_vars  # the level cancels under a fixed total
    assert model["w"].type.shape == (2, 8)
    with model:
        idata = pm.sample(400, tune=400, chains=2, random_seed=4, init="jitter+adapt_full", **SAMPLE)
    xd = _draws(idata, "x")
    np.testing.assert_allclose(xd.sum(axis=1), truth.sum(), rtol=1e-12)  # total kept exactly
    assert np.all(xd > 0)
    assert float(az.rhat(idata, var_names=["x"]).to_array().max()) < 1.05
    mean, sd = xd.mean(0), xd.std(0)
    # calibrated posterior: |mean - truth| / sd is roughly standard normal per cell.  Every
    # cell within 4 sd (per-cell tail 6e-5), and the 90% intervals cover >= the 4-sd
    # binomial lower limit for 16 cells (9.6)
    assert np.all(np.abs(mean - truth) < 4 * sd), np.abs(mean - truth) / sd
    assert _coverage(xd, truth, 0.9) >= _binomial_lower(n, 0.9)
    # combining both releases beats the fine release alone
    assert np.sqrt(np.mean((mean - truth) ** 2)) < np.sqrt(np.mean((releases[1][1] - truth) ** 2))


def test_nested_histograms_bad_inputs_and_free_total():
    B = np.kron(np.eye(3), np.ones((1, 2)))
    m = LinearGaussian(B, np.eye(3))
    with pytest.raises(ValueError, match="at least one"):
        nested_histogram_model([], 6)
    with pytest.raises(ValueError, match="acts on 6 cells, not n_cells = 5"):
        nested_histogram_model([(m, np.ones(3))], 5)
    with pytest.raises(ValueError, match=r"y must have shape \(3,\)"):
        nested_histogram_model([(m, np.ones(6))], 6)
    with pytest.raises(ValueError, match="non-finite"):
        nested_histogram_model([(m, np.array([1.0, np.inf, 2.0]))], 6)
    with pytest.raises(TypeError, match="LinearGaussian"):
        nested_histogram_model([(DoubleGeometric(6, scale=1.0), np.ones(6))], 6)
    with pytest.raises(ValueError, match="does not have n_cells"):
        nested_histogram_model([(m, np.ones(3))], 6, shape=(2, 2))
    with pytest.raises(ValueError, match="total"):
        nested_histogram_model([(m, np.ones(3))], 6, total=-1.0)
    # without a total: x = exp(log_x), free; the model's log density is finite at the start
    model = nested_histogram_model([(m, np.array([10.0, 20.0, 30.0]))], 6)
    assert {"x", "level"} <= set(model.named_vars) and np.isfinite(model.compile_logp()(model.initial_point()))
