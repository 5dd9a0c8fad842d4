r"""Bayesian counterpart of the semi-private odds-ratio test: posterior of the log odds ratio.

Data: the public one-way margins ``t = (t1., t2., t.1, t.2)`` and the release
``U = x11 + N``, ``N ~ F`` (a canonical noise distribution; Cho and Awan, Sec. 5.3).
Parameter: ``psi = log w``, the log cross-product odds ratio.  Given ``t``,
``x11 ~ Hyper(t1., t2., t.1, e^psi)`` on the finite support ``L..U_max``, so the exact
likelihood marginalizes ``x11`` by a finite sum:

.. math::

    p(U \mid \psi, t) = \sum_{x=L}^{U_{max}} \frac{c_x e^{\psi x}}{\sum_k c_k e^{\psi k}}\, p_F(U - x),
    \qquad c_x = \binom{t_{1\cdot}}{x}\binom{t_{2\cdot}}{t_{\cdot 1}-x},

    \log p(U \mid \psi, t) = \operatorname{logsumexp}_x(\log c_x + \psi x + \log p_F(U - x))
        - \operatorname{logsumexp}_x(\log c_x + \psi x).

The noise terms ``log p_F(U - x)`` do not depend on ``psi``: they are computed once in NumPy
and enter the PyTensor graph as constants, so any CND (Tulap, Gaussian, Lemma 36) works.
Prior: ``psi ~ Normal(prior_mu, prior_sigma)``.  Margins are conditioned on (they are the
invariant), so only the conditional law of ``x11`` enters, exactly as in the frequentist test.

:func:`log_odds_ratio_log_likelihood` (NumPy, vectorized over ``psi``) and
:func:`log_odds_ratio_posterior_grid` (exact posterior on a grid, by quadrature) are the
numpy-testable math; :func:`semi_private_odds_ratio_model` is the thin PyMC glue.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from .._validation import check_finite_array, check_positive
from ..distributions import check_margins, log_base_weights
from .odds_ratio import release_statistic, resolve_noise

__all__ = [
    "likelihood_terms",
    "log_odds_ratio_log_likelihood",
    "log_odds_ratio_posterior_grid",
    "semi_private_odds_ratio_model",
]


def likelihood_terms(release, margins, noise):
    """``(support, log c_x, log p_F(U - x))``: the constants of the marginal likelihood.

    Raises ValueError if the release has zero likelihood for every ``x11`` in the support
    (possible only for a bounded-support noise such as Tulap with ``delta > 0``).
    """
    t1, t2, c1, _ = check_margins(margins)
    u = release_statistic(release, margins)
    support, lc = log_base_weights(t1, t2, c1)
    lnoise = np.asarray(noise.logpdf(u - support), dtype=float)
    if not np.any(np.isfinite(lnoise)):
        raise ValueError("the release is impossible under the noise law for every table with these margins")
    return support, lc, lnoise


def log_odds_ratio_log_likelihood(log_odds_ratio, release, margins, noise):
    """``log p(U | psi, t)`` for an array of ``psi`` values (NumPy; exact, nothing dropped)."""
    psi = check_finite_array(log_odds_ratio, "log_odds_ratio")
    support, lc, lnoise = likelihood_terms(release, margins, noise)
    a = lc[None, :] + psi.reshape(-1, 1) * support[None, :]
    out = special.logsumexp(a + lnoise[None, :], axis=1) - special.logsumexp(a, axis=1)
    return out.reshape(psi.shape)


def log_odds_ratio_posterior_grid(release, margins, noise, grid, *, prior_mu=0.0, prior_sigma=2.5):
    """Exact posterior of ``psi`` on an evenly spaced ``grid`` (trapezoid-normalized density).

    Returns ``(grid, density)``; ``density`` integrates to 1 by the trapezoid rule.
    """
    grid = check_finite_array(grid, "grid", ndim=1)
    prior_sigma = check_positive(prior_sigma, "prior_sigma")
    lp = log_odds_ratio_log_likelihood(grid, release, margins, noise) - 0.5 * ((grid - prior_mu) / prior_sigma) ** 2
    dens = np.exp(lp - lp.max())
    dens /= np.trapezoid(dens, grid)
    return grid, dens


def semi_private_odds_ratio_model(
    release, margins, *, noise=None, epsilon=None, delta=0.0, mu=None, prior_mu=0.0, prior_sigma=2.5
):
    """A ``pm.Model`` for the log odds ratio given the release and the margins.

    Variables: ``log_odds_ratio`` (Normal prior), ``odds_ratio`` (deterministic) and the
    potential ``release_loglik`` (the exact marginal likelihood of the module docstring).
    """
    import pymc as pm
    import pytensor.tensor as pt

    noise = resolve_noise(noise, epsilon=epsilon, delta=delta, mu=mu)
    prior_sigma = check_positive(prior_sigma, "prior_sigma")
    support, lc, lnoise = likelihood_terms(release, margins, noise)
    support_t = pt.as_tensor_variable(support.astype(float))
    lc_t = pt.as_tensor_variable(lc)
    lnoise_t = pt.as_tensor_variable(lnoise)
    with pm.Model() as model:
        psi = pm.Normal("log_odds_ratio", mu=float(prior_mu), sigma=prior_sigma)
        pm.Deterministic("odds_ratio", pt.exp(psi))
        a = lc_t + psi * support_t
        pm.Potential("release_loglik", pt.logsumexp(a + lnoise_t) - pt.logsumexp(a))
    return model
