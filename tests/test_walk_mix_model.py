r"""A Student-t walk (the units' prior variance multipliers ``mix``,
:mod:`privinfer.pymc.walk_kernel`, "Mixed prior variances") through the PyMC glue:
:func:`~privinfer.pymc.register_walk` reads and checks the multipliers' prior, ``pm.sample()``
gives them to :class:`~privinfer.pymc.WalkGibbs`, ``hierarchy_model(walk_tails=nu)`` writes the
prior it states, and WalkGibbs's whole iteration leaves the joint prior of the scales,
increments and multipliers invariant when the cells carry no information (every unit empty)."""

import arviz as az
import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest
from pymc.sampling.mcmc import assign_step_methods
from scipy import special, stats

from census_helpers import random_frame
from privinfer.census import hierarchy_measurements, hierarchy_model
from privinfer.pymc import WalkGibbs, register_walk
from privinfer.pymc.registry import model_registry
from privinfer.pymc.walk import mix_prior

QUERIES = {"total": (), "sex_age": ("sex", "age")}


def _release(seed=3):
    f = random_frame(seed, counties=3, max_tracts=2)
    mech = hierarchy_measurements(f, geography=["county", "tract"], attributes=["sex", "age"],
                                  queries=QUERIES, rho=0.05)
    return f, mech.publish(f["count"], rng=seed)


def _walk_kw(U=2, K1=2, d=3):
    inc = pm.Normal("d", 0.0, 1.0, shape=(U, K1))
    latent = pm.Normal("x", 0.0, 1.0, shape=(U * d,))
    return dict(increments=inc, base=np.zeros((U, d)), kappa=1.0, weights=np.zeros((U, K1)), latent=latent,
                grid=np.arange(U * d).reshape(U, d), code=np.arange(d), prior_scale=0.3)


def test_mix_prior_reads_the_inverse_gamma_and_refuses_others():
    # WalkGibbs's exact draw of lambda_u is written for InvGamma(nu/2, nu/2): the degrees of
    # freedom are read from the variable, anything else is refused with a one-line error
    with pm.Model():
        assert mix_prior(pm.InverseGamma("m", alpha=2.5, beta=2.5, shape=(2,))) == pytest.approx(5.0)
        for name, bad in (("a", pm.InverseGamma("a", alpha=2.0, beta=3.0, shape=(2,))),
                          ("h", pm.HalfNormal("h", 1.0, shape=(2,)))):
            with pytest.raises(ValueError, match=f"^the variance multipliers '{name}' need"):
                mix_prior(bad)
        free = pm.HalfNormal("free", 1.0)
        with pytest.raises(ValueError, match="constant"):
            mix_prior(pm.InverseGamma("f", alpha=free, beta=free, shape=(2,)))
        kw = _walk_kw()
        scales = pm.Weibull("s", alpha=2.0, beta=0.3 * np.sqrt(2), shape=(2,))
        with pytest.raises(ValueError, match=r"^mix 'three' must have the static shape \(2,\)"):
            register_walk(scales=scales, mix=pm.InverseGamma("three", alpha=2.0, beta=2.0, shape=(3,)), **kw)
        info = register_walk(scales=scales, mix=pm.InverseGamma("mix", alpha=2.0, beta=2.0, shape=(2,)), **kw)
        assert (info.mix, info.mix_dof) == ("mix", 4.0)


def test_hierarchy_model_walk_tails_writes_the_prior_it_states():
    # step_tract_age[u, k] ~ N(0, step_scale_age[k]^2 * step_mix_tract[u]) and step_mix_tract[u]
    # ~ InvGamma(nu/2, nu/2): the model's log density of both at a random point equals SciPy's
    _, rel = _release()
    nu = 3.0
    model = hierarchy_model(rel, smooth="age", walk_steps="gibbs", walk_tails=nu, smooth_levels="lowest")
    info = next(iter(model_registry(model)["walks"].values()))
    assert (info.mix, info.mix_dof) == ("step_mix_tract", nu)
    rng = np.random.default_rng(1)
    point = {k: v + rng.normal(0, 0.4, np.shape(v)) if not k.startswith("x") else v
             for k, v in model.initial_point().items()}
    logp = model.compile_logp(vars=[model["step_tract_age"], model["step_mix_tract"]], jacobian=False, sum=False)
    got_inc, got_mix = logp(point)
    sigma = np.exp(point["step_scale_age_log__"])
    lam = np.exp(point["step_mix_tract_log__"])
    want_inc = stats.norm.logpdf(point["step_tract_age"], 0.0, sigma[None, :] * np.sqrt(lam)[:, None])
    np.testing.assert_allclose(got_inc, want_inc, rtol=1e-10)
    np.testing.assert_allclose(got_mix, stats.invgamma.logpdf(lam, nu / 2, scale=nu / 2), rtol=1e-10)
    _, selected = assign_step_methods(model, None, methods=pm.STEP_METHODS)
    walk = {model.rvs_to_values[model[n]] for n in ("step_scale_age", "step_tract_age", "step_mix_tract")}
    assert set(selected[WalkGibbs]) == walk and not walk & set(selected[pm.NUTS])
    with model:
        step = WalkGibbs(rng=np.random.default_rng(0))
        # the transport's contrasts need equal prior variances in a group: the unit transport
        assert step.scale_update == "unit_transport"
        with pytest.raises(ValueError, match="together"):
            WalkGibbs(vars=[model["step_scale_age"], model["step_tract_age"]])
    assert "step_mix_tract" not in hierarchy_model(rel, smooth="age", walk_steps="gibbs").named_vars
    inc_model = hierarchy_model(rel, smooth="age", walk_steps="gibbs", walk_tails=nu, walk_tails_by="increment",
                                smooth_levels="lowest")
    lam_k = np.exp(rng.normal(0, 0.5, inc_model["step_mix_tract"].type.shape))
    point = {**{k: v for k, v in point.items() if k != "step_mix_tract_log__"}, "step_mix_tract_log__": np.log(lam_k)}
    assert lam_k.shape == point["step_tract_age"].shape
    got_inc, got_mix = inc_model.compile_logp(vars=[inc_model["step_tract_age"], inc_model["step_mix_tract"]],
                                              jacobian=False, sum=False)(point)
    np.testing.assert_allclose(got_inc, stats.norm.logpdf(point["step_tract_age"], 0.0, sigma[None, :] * np.sqrt(lam_k)),
                               rtol=1e-10)
    np.testing.assert_allclose(got_mix, stats.invgamma.logpdf(lam_k, nu / 2, scale=nu / 2), rtol=1e-10)
    with pytest.raises(ValueError, match="^walk_tails_by must be 'unit' or 'increment'$"):
        hierarchy_model(rel, smooth="age", walk_tails=nu, walk_tails_by="tract")
    for bad in (0.0, -1.0, np.nan, "4", True, [4.0]):
        with pytest.raises(ValueError, match="^walk_tails must be None or a finite number > 0"):
            hierarchy_model(rel, smooth="age", walk_tails=bad)


def test_hierarchy_model_with_walk_tails_samples_and_keeps_the_invariant():
    f, rel = _release()
    with hierarchy_model(rel, smooth="age", walk_steps="gibbs", walk_tails=4.0):
        idata = pm.sample(60, tune=60, chains=1, cores=1, random_seed=5, progressbar=False,
                          compute_convergence_checks=False)
    x = idata.posterior["x"].values.reshape(-1, len(f))
    assert np.all(x.sum(axis=1) == f["count"].sum()) and x.min() >= 0
    lam = idata.posterior["step_mix_tract"].values[0]
    assert np.all(lam > 0) and np.all(np.diff(lam, axis=0) != 0)     # an exact draw every iteration
    assert idata.sample_stats["walk_carry_evals"].values.min() > 0


# --- WalkGibbs leaves the prior invariant when the cells say nothing --------------------------

NU, S, U, K1 = 4.0, 0.5, 6, 3


def _empty_walk_model(by: str):
    """Six units in two sibling groups, four categories, no people: the cells' log likelihood is
    0 whatever the increments (Gamma(0 + alpha) / Gamma(alpha) = 1), so the posterior of the
    scales, increments and multipliers is their prior.  No carried update (carry None): the cells
    stay empty.  ``by``: one multiplier per unit or per unit and increment."""
    d = K1 + 1
    with pm.Model() as model:
        scales = pm.Weibull("s", alpha=np.float64(2.0), beta=S * np.sqrt(2.0), shape=(K1,))
        mix = pm.InverseGamma("mix", alpha=NU / 2, beta=NU / 2, shape=(U,) if by == "unit" else (U, K1))
        root = pm.math.sqrt(mix)[:, None] if by == "unit" else pm.math.sqrt(mix)
        inc = pm.Normal("d", 0.0, scales[None, :] * root, shape=(U, K1))
        latent = pm.Normal("x", 0.0, 1.0, shape=(U * d,), initval=np.zeros(U * d))
        register_walk(scales=scales, increments=inc, prior_scale=S, base=pt.zeros((U, d)), kappa=pt.constant(1.0),
                      weights=pt.zeros((U, K1)), latent=latent, grid=np.arange(U * d).reshape(U, d),
                      code=np.arange(d), groups=np.repeat([0, 1], 3), mix=mix)
    return model


def _z(draws, exact):
    """(mean of ``draws`` - ``exact``) / its Monte Carlo standard error (ArviZ's, from the bulk
    ESS of the chain)."""
    mcse = float(np.asarray(az.mcse(np.asarray(draws, dtype=float)[None, :], method="mean")).reshape(()))
    return (np.mean(draws) - exact) / mcse


@pytest.mark.parametrize("by", ["unit", "increment"])
def test_walk_gibbs_leaves_the_prior_of_a_student_t_walk_invariant(by):
    # the walk's prior: sigma_k ~ Rayleigh(S), lambda_u ~ InvGamma(NU/2, NU/2), delta_uk ~
    # N(0, sigma_k^2 lambda_u); so E log sigma = log(S sqrt 2) - gamma_E / 2, E log lambda =
    # log(NU/2) - digamma(NU/2), and delta_uk / sigma_k = sqrt(lambda_u) z is Student t with NU
    # degrees of freedom (P(|t| > 2) = 2 sf_t(2)).  Every WalkGibbs update (pair moves, group
    # means, multipliers, scales, the unit transport of the scales) must leave this invariant;
    # one that dropped lambda from the scales' draw or the transport's prior would move E log
    # sigma by about half of E log lambda (0.27 / 2), over 10 standard errors at 4,000
    # iterations.  Each mean is checked at 4.5 Monte Carlo standard errors (ArviZ's, from the
    # chain's ESS): two-sided 7e-6 each, under 1e-4 for the eleven.
    model = _empty_walk_model(by)
    n = 4000
    with model:
        step = WalkGibbs(rng=np.random.default_rng(7))
    assert step.scale_update == "unit_transport"
    step.tune = False                     # the widths stay at their defaults: every iteration exact
    point = model.initial_point()
    log_s, log_m, tail = np.empty((n, K1)), np.empty((n, U)), np.empty((n, U, K1), dtype=bool)
    first = (slice(None),) if by == "unit" else (slice(None), 0)        # per increment: each unit's first
    for i in range(n):
        point, _ = step.step(point)
        log_s[i], log_m[i] = point["s_log__"], point["mix_log__"][first]
        tail[i] = np.abs(point["d"]) / np.exp(log_s[i])[None, :] > 2.0
    assert np.all(point["x"] == 0)
    e_log_s = np.log(S * np.sqrt(2.0)) - 0.5 * np.euler_gamma
    e_log_m = np.log(NU / 2) - special.digamma(NU / 2)
    p_tail = 2 * stats.t.sf(2.0, NU)
    zs = [_z(log_s[:, k], e_log_s) for k in range(K1)]
    zs += [_z(log_m[:, u], e_log_m) for u in range(U)]
    zs += [_z(tail[:, :3].mean(axis=(1, 2)), p_tail), _z(tail[:, 3:].mean(axis=(1, 2)), p_tail)]
    assert np.max(np.abs(zs)) < 4.5, np.round(zs, 2)
