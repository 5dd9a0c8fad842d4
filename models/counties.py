r"""County populations within a state whose total is published exactly.

The Census use case of Subspace DP (Gao, Gong, Yu 2022, Sec. 5.1) and Integer subspace DP
(Dharangutte et al. 2023, Sec. 6): county counts are privatized while each state's total is
an invariant.  The analyst's model puts a hierarchical prior on county sizes and conditions
on the invariant and the release.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from privinfer.pymc import affine_latent, lattice_latent, observe, started

from ._checks import (
    ReleaseLike,
    cell_coords,
    check_invariant,
    check_release,
    integer_start,
    is_integer_mechanism,
    positive_start,
    resolve_t,
    unpack_release,
)

__all__ = ["county_population_model"]


def county_population_model(release, mechanism=None, invariant=None, t=None, *, prior_mean=None,
                            cell_ids=None) -> pm.Model:
    r"""Hierarchical log-normal--Poisson model of county populations given a release.

    Generative story
    ----------------
    .. math::

        \mu \sim N(\log m_0, 2^2), \quad \sigma \sim N^+(0, 1), \quad
        \log\lambda_i \mid \mu, \sigma \sim N(\mu, \sigma^2),

        x_i \mid \lambda_i \sim \mathrm{Poisson}(\lambda_i) \ \text{independently}, \qquad
        t = C x \ \text{(published exactly)}, \qquad y \sim M(x),

    with :math:`m_0` = ``prior_mean`` (default: the mean of the release, which equals the
    mean county size implied by the state totals when the mechanism keeps them).  The
    posterior is :math:`p(\mu,\sigma,z)\prod_i \mathrm{Pois}(x_i;\lambda_i)\,1\{Cx=t\}\,p(y\mid x)`:
    the totals are data, so the prior is restricted to the fibre (not renormalized).

    The log-rates are *centred*: with county counts in the thousands to millions each
    :math:`\log\lambda_i` is pinned by its count to within about :math:`1/\sqrt{x_i}`, the
    regime where the centred form mixes and the non-centred one (:math:`\mu + \sigma z_i`)
    does not (on Nevada's 17 real counties the non-centred form gave R-hat 2.1 for ``mu``).

    Release
    -------
    ``release`` is a :class:`privinfer.workflow.Release` (it carries the released values, the
    mechanism, the invariant and ``t``; pass nothing else), or the released values with
    ``mechanism``, ``invariant`` and ``t`` given separately.

    Invariant and mechanism
    -----------------------
    ``invariant`` is usually ``invariants.total(n)`` (one state) or ``invariants.groups``
    (counties within several states, sharing :math:`\mu, \sigma`); ``t`` its values
    (default ``invariant.t``, else read off a release that keeps them).  ``mechanism`` is any
    privinfer mechanism on the n counties; its exact likelihood enters through
    :func:`privinfer.pymc.observe` as the observed variable ``"y"``.

    Parametrization
    ---------------
    * Integer mechanisms (``mechanism.integer``: double geometric, generalized Laplace on
      the lattice, ...): ``x`` is an int64 :func:`~privinfer.pymc.lattice_latent` with the
      Poisson prior above; sample it with :func:`privinfer.pymc.lattice_steps` (local
      LatticeMetropolis moves that keep the totals) and NUTS for ``mu, sigma, z``.
      Variables: ``mu``, ``sigma``, ``log_rate`` (n), ``x`` (n).
      The chain starts from the release's shares of each total (non-negative, on the fibre).
    * Real-valued mechanisms (projected/extended Gaussian or Laplace, ...): ``x`` is a
      continuous :func:`~privinfer.pymc.affine_latent` on ``{C x = t}`` (NUTS), with the
      Poisson--log-normal marginal of each count replaced by a log-normal,

      .. math:: x_i \mid \mu, \sigma \sim \mathrm{LogNormal}\big(\mu, \sqrt{\sigma^2 + 1/m_0}\big),

      i.e. :math:`z_i` integrated out and the Poisson scatter added on the log scale by the
      delta method (:math:`\mathrm{Var}(\log x \mid \lambda) \approx 1/\lambda`, evaluated
      at :math:`\lambda = m_0`).  Variables: ``mu``, ``sigma``, ``x_z`` (free coordinates),
      ``x`` (n), plus ``y_r`` for a projected-Laplace release (augmented likelihood).  The
      log-normal keeps ``x > 0``; the chain starts at the release's positive shares of each
      total (on the fibre), not at the least-norm point (every county at its state's mean),
      which can sit thousands of noise standard deviations from the data.

    Cell ids
    --------
    ``cell_ids`` (n distinct labels, e.g. county GEOIDs; default: a Release's ``labels``) become
    the coordinate ``"cell"`` of ``x``, ``log_rate`` and ``y`` in the model and in every
    InferenceData sampled from it.

    Raises
    ------
    TypeError / ValueError for a release of the wrong length or with non-finite entries, a
    mechanism or invariant of another size, non-integer releases of an integer mechanism,
    ``prior_mean <= 0`` or missing invariant values; ``InfeasibleInvariantError`` (from the
    glue) when ``t`` is inconsistent with a release that keeps the totals or has no
    non-negative integer solution.
    """
    y, mechanism, inv, t_val, cell_ids = _unpacked(release, mechanism, invariant, t, cell_ids)
    prior_mean = _checked_prior_mean(prior_mean, y)
    coords = cell_coords(cell_ids, inv.n)
    dims = None if coords is None else "cell"
    with pm.Model(coords=coords) as model:
        mu = pm.Normal("mu", np.log(prior_mean), 2.0)
        sigma = pm.HalfNormal("sigma", 1.0)
        x = _county_counts(y, mechanism, inv, t_val, mu, sigma, prior_mean, dims)
        observe("y", mechanism, x, observed=y, dims=dims if mechanism.m == inv.n else None)
    return model


def _unpacked(release, mechanism, invariant, t, cell_ids):
    """``(y, mechanism, invariant, t, cell_ids)``, checked: from a Release (its labels are the
    default cell ids) or from the released values with their mechanism and invariant."""
    if isinstance(release, ReleaseLike):
        if cell_ids is None:
            cell_ids = release.labels
        release, mechanism, invariant, t, _ = unpack_release(release, "county_population_model", mechanism=mechanism,
                                                             invariant=invariant, t=t)
    elif mechanism is None or invariant is None:
        raise TypeError("county_population_model(release, mechanism, invariant, t): give a Release, or the "
                        "released values with their mechanism and invariant")
    inv = check_invariant(invariant, release)
    y = check_release(release, mechanism, inv.n)
    return y, mechanism, inv, resolve_t(inv, t, mechanism, y), cell_ids


def _checked_prior_mean(prior_mean, y) -> float:
    """:math:`m_0`: ``prior_mean`` (a finite number > 0), by default the mean of the release
    (at least 1)."""
    if prior_mean is None:
        return max(float(np.mean(y)), 1.0)
    if not (np.isscalar(prior_mean) and np.isfinite(prior_mean) and prior_mean > 0):
        raise ValueError("prior_mean must be a finite number > 0")
    return float(prior_mean)


def _log_rates(mu, sigma, n: int, start, dims):
    r"""The centred log-rates :math:`\log\lambda_i \sim N(\mu, \sigma^2)` (``log_rate``), started at
    :math:`\log\max(x^{(0)}_i, 1/2)` for the counts' starting point :math:`x^{(0)}` (a support
    point, so PyMC's graph rebuilds work), or at PyMC's default start when there is none."""
    if start is None:
        return pm.Normal("log_rate", mu, sigma, shape=n, dims=dims)
    return started("log_rate", pm.Normal.dist(mu, sigma, shape=n), np.log(np.maximum(start, 0.5)), dims=dims)


def _county_counts(y, mechanism, inv, t_val, mu, sigma, prior_mean: float, dims):
    r"""The latent counts ``x`` on the fibre :math:`\{Cx = t\}` (in the model's context).

    Integer mechanisms: the centred log-rates :math:`\log\lambda_i \sim N(\mu, \sigma^2)`
    (``log_rate``, started at the log of the release's shares) and an int64 lattice latent with
    the Poisson prior.  Real-valued mechanisms: an affine latent with the log-normal
    :math:`\mathrm{LogNormal}(\mu, \sqrt{\sigma^2 + 1/m_0})` prior, started at the release's
    positive shares of each total.
    """
    if is_integer_mechanism(mechanism):
        start = integer_start(y, inv, t_val)
        log_rate = _log_rates(mu, sigma, inv.n, start, dims)
        return lattice_latent("x", inv, t_val, prior=pm.Poisson.dist(mu=pt.exp(log_rate)), initval=start, dims=dims)
    scale = pt.sqrt(sigma**2 + 1.0 / prior_mean)
    return affine_latent("x", inv, t_val, prior=pm.LogNormal.dist(mu=mu, sigma=scale, shape=inv.n),
                         initval=positive_start(y, inv, t_val), dims=dims)
