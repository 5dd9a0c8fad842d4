r"""Spatio-temporal counts (groups x hours x buildings) with margin invariants.

Subspace DP (Gao, Gong, Yu 2022, Sec. 5.2): person-hour counts of 14 groups of people in 20
buildings over 24 hours are released with the per-building-hour totals (margin over groups)
and the per-group-building totals (margin over hours) kept exactly, through the projected
Gaussian mechanism.  The analyst models the counts with a Poisson log-linear mean.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from privinfer.pymc import affine_latent, observe

from ._checks import (
    ReleaseLike,
    check_invariant,
    check_release,
    check_shape,
    is_integer_mechanism,
    resolve_t,
    unpack_release,
)

__all__ = ["spatiotemporal_model", "poisson_gaussian_logp", "harmonic_basis"]


def poisson_gaussian_logp(x, rate):
    r"""Gaussian approximation :math:`N(\lambda, \lambda)` to independent Poisson(:math:`\lambda`) counts.

    :math:`\log\phi = -\tfrac12\sum_i (x_i-\lambda_i)^2/\lambda_i - \tfrac12\sum_i\log\lambda_i`
    (the dropped :math:`-\tfrac n2\log 2\pi` does not depend on :math:`\lambda`).  It matches the
    Poisson's mean and variance; the posterior of ``x`` is continuous and may be slightly
    negative in cells whose rate is near zero.
    """
    d = x - rate
    return -0.5 * pt.sum(d * d / rate) - 0.5 * pt.sum(pt.log(rate))


def harmonic_basis(hours: int, n_harmonics: int) -> np.ndarray:
    r"""Columns :math:`\cos(2\pi k h/H), \sin(2\pi k h/H)`, :math:`k = 1..K`, ``h = 0..H-1``.

    Each column sums to zero over the hours (a pure interaction, no level).  Harmonics with
    :math:`2k > H` alias lower ones and are dropped, as is the identically zero
    :math:`\sin(\pi h)` when :math:`2k = H`.  Returns an (H, d) array (d may be 0).
    """
    h = np.arange(hours)
    cols = []
    for k in range(1, int(n_harmonics) + 1):
        if 2 * k > hours:
            break
        cols.append(np.cos(2 * np.pi * k * h / hours))
        if 2 * k < hours:
            cols.append(np.sin(2 * np.pi * k * h / hours))
    return np.column_stack(cols) if cols else np.zeros((hours, 0))


def _effect(name, size, sigma):
    """Zero-sum main effect (identified against the intercept); zeros for a single level."""
    if size == 1:
        return pt.zeros(1)
    return pm.ZeroSumNormal(name, sigma=sigma, shape=size)


def spatiotemporal_model(release, mechanism=None, shape=None, invariant=None, t=None, *,
                         n_harmonics: int = 1) -> pm.Model:
    r"""Poisson log-linear model of a (groups, hours, buildings) table given a release.

    Generative story
    ----------------
    For cell :math:`(g, h, b)` (flattened in C order, length ``G*H*B``):

    .. math::

        \log\lambda_{ghb} = c + a_g + \eta_h + \beta_b + \sum_{k=1}^{K}
            \big(u_{gk}\cos(2\pi k h/H) + v_{gk}\sin(2\pi k h/H)\big),

        x_{ghb} \mid \lambda \sim \mathrm{Poisson}(\lambda_{ghb}), \qquad t = Cx \ \text{exact}, \qquad
        y \sim M(x),

    with :math:`c \sim N(\log \bar x, 2^2)` (:math:`\bar x` the mean cell count implied by the
    margins), zero-sum main effects ``group`` :math:`a`, ``hour`` :math:`\eta`, ``building``
    :math:`\beta` with scale 1 each, and the group-hour interaction on a coarse harmonic
    basis (``n_harmonics`` = K daily harmonics, :func:`harmonic_basis`; coefficients ``u``
    and ``v`` ~ N(0, 1), stacked as ``group_hour`` of shape (G, d)).  Deterministic
    ``log_rate`` (length ``G*H*B``).

    With the paper's invariants (hours x buildings and groups x buildings margins fixed), the
    conditional law of ``x`` given ``t`` depends only on the group-hour interaction (and any
    three-way term): hour-building and group-building structure is absorbed by the margins,
    which is why only the group-hour interaction is modelled beyond main effects.

    Latent and prior
    ----------------
    ``x`` is continuous on ``{C x = t}`` (:func:`~privinfer.pymc.affine_latent`, sampled by
    NUTS) with the Gaussian approximation :math:`N(\lambda, \lambda)` to the Poisson
    (:func:`poisson_gaussian_logp`), evaluated on the fibre.  This is accurate for moderate
    counts; small cells may get some posterior mass below zero.

    Mechanism
    ---------
    A real-valued mechanism on the ``G*H*B`` cells -- the projected Gaussian
    (``ProjectedGaussian(invariant, ...)``) of the paper, or any other with an exact
    ``logp``; the likelihood enters through :func:`privinfer.pymc.observe` as ``"y"``.
    ``release`` may be flat or shaped (G, H, B).  ``t`` defaults to ``invariant.t``, else is
    read off a release that keeps the invariant.

    ``release`` may also be a :class:`privinfer.workflow.Release` of the (G, H, B) table (it
    carries the values, mechanism, shape, invariant and ``t``; pass nothing else).

    Sample with ``pm.sample(init="jitter+adapt_full")``: the log-linear effects and the
    fibre coordinates are correlated, and a dense mass matrix keeps NUTS's steps long.

    Raises
    ------
    ValueError for a shape that is not three positive sizes, a release/invariant/mechanism of
    another size, an integer mechanism (use a continuous release here), or missing ``t``;
    ``InfeasibleInvariantError`` (glue) when ``t`` is inconsistent with the release.
    """
    if isinstance(release, ReleaseLike):
        release, mechanism, invariant, t, shape = unpack_release(
            release, "spatiotemporal_model", mechanism=mechanism, shape=shape, invariant=invariant, t=t)
    if mechanism is None or shape is None or invariant is None:
        raise TypeError("spatiotemporal_model(release, mechanism, shape, invariant, ...): give a Release of a "
                        "3-way table, or the released values with their mechanism, shape and invariant")
    shape = check_shape(shape, 3, "groups, hours, buildings")
    G, H, B = shape
    n = G * H * B
    if is_integer_mechanism(mechanism):
        raise ValueError("spatiotemporal_model has a continuous latent: use a real-valued mechanism "
                         "(e.g. ProjectedGaussian); integer releases need a lattice latent")
    if isinstance(n_harmonics, bool) or not isinstance(n_harmonics, (int, np.integer)) or n_harmonics < 0:
        raise ValueError("n_harmonics must be a non-negative integer")
    y = check_release(release, mechanism, n, shape=shape)
    inv = check_invariant(invariant, y)
    t_val = resolve_t(inv, t, mechanism, y)
    x0 = inv.feasible_point(t_val)
    mean_cell = max(float(np.mean(x0)), 0.1)
    basis = harmonic_basis(H, n_harmonics)

    with pm.Model() as model:
        intercept = pm.Normal("intercept", np.log(mean_cell), 2.0)
        a = _effect("group", G, 1.0)
        eta = _effect("hour", H, 1.0)
        beta = _effect("building", B, 1.0)
        lr = intercept + a[:, None, None] + eta[None, :, None] + beta[None, None, :]
        if basis.shape[1] > 0 and G > 0:
            coef = pm.Normal("group_hour", 0.0, 1.0, shape=(G, basis.shape[1]))
            lr = lr + pt.dot(coef, pt.as_tensor_variable(basis.T))[:, :, None]
        log_rate = pm.Deterministic("log_rate", pt.broadcast_to(lr, shape).reshape((n,)))
        rate = pt.exp(log_rate)
        x = affine_latent("x", inv, t_val, prior=lambda xx: poisson_gaussian_logp(xx, rate))
        observe("y", mechanism, x, observed=y)
    return model
