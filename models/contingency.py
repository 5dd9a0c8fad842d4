r"""Two-way contingency table with fixed one-way margins: posterior of the association.

The delinquent-children table of Integer subspace DP (Dharangutte et al. 2023, Sec. 6) and the
contingency tables of Semi-DP (Cho and Awan, Sec. 5) publish the row and column totals
exactly and privatize the cells.  The association between the two factors is measured by
the log odds ratios of the cell probabilities (the model parameter) and by the log odds
ratios of the confidential table itself (a finite-population quantity, computed from the
posterior draws of the table).
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from privinfer import invariants as _inv
from privinfer._backend import as_array, namespace
from privinfer.pymc import affine_latent, lattice_latent, observe

from ._checks import (
    ReleaseLike,
    check_invariant,
    check_release,
    check_shape,
    fixes_total,
    integer_start,
    is_integer_mechanism,
    resolve_t,
    unpack_release,
)

__all__ = ["contingency_table_model", "multinomial_gaussian_logp", "table_log_odds_ratios", "HALDANE_ANSCOMBE"]

#: Continuity correction of the finite-population log odds ratios: added to each of the four cells.
HALDANE_ANSCOMBE = 0.5


def table_log_odds_ratios(table, correction: float = HALDANE_ANSCOMBE):
    r"""Log odds ratios of r x c tables relative to their first row and column (NumPy or PyTensor).

    :math:`\ell_{ij} = \log\frac{(x_{ij} + a)(x_{00} + a)}{(x_{i0} + a)(x_{0j} + a)}` for
    :math:`i, j \ge 1`, ``a`` = ``correction`` (Haldane--Anscombe: 1/2 per cell, so zero
    cells give finite values); ``table`` has shape ``(..., r, c)``, the result ``(..., r-1, c-1)``.
    With ``correction=0`` a zero cell gives an infinite or ``nan`` ratio.
    """
    xp = namespace(table)
    x = as_array(table, xp) + correction
    if xp is np:
        with np.errstate(divide="ignore", invalid="ignore"):
            lx = np.log(x)
    else:
        lx = xp.log(x)
    return lx[..., 1:, 1:] + lx[..., :1, :1] - lx[..., 1:, :1] - lx[..., :1, 1:]


def multinomial_gaussian_logp(x, total, p):
    r"""Gaussian approximation to :math:`\mathrm{Multinomial}(N, p)` on ``{sum x = N}`` (PyTensor/NumPy).

    The multinomial has mean :math:`Np` and covariance :math:`N(\mathrm{diag}\,p - pp^T)`, of
    rank :math:`k-1` with null vector :math:`\mathbf 1`.  In the coordinates
    :math:`x_1..x_{k-1}` (the last is :math:`N - \sum_{i<k} x_i`) the covariance
    :math:`N(D - qq^T)` (:math:`q = p_{1..k-1}`, :math:`D = \mathrm{diag}\,q`) has inverse
    :math:`N^{-1}(D^{-1} + \mathbf 1\mathbf 1^T/p_k)` (Sherman--Morrison) and determinant
    :math:`N^{k-1}\prod_{i\le k} p_i`.  With :math:`d = x - Np` (so :math:`\sum_i d_i = 0` and
    :math:`\sum_{i<k} d_i = -d_k`) the quadratic form is Pearson's
    :math:`\sum_{i\le k} d_i^2/(Np_i)`, hence

    .. math:: \log \phi(x) = -\tfrac12\sum_i \frac{(x_i - Np_i)^2}{Np_i} - \tfrac12\sum_i\log p_i
              + \text{const}(N, k).

    The dropped constant depends on :math:`N` and :math:`k` only (not on :math:`p`), so the
    density is correctly normalized *as a function of p* on the hyperplane, which is what
    the posterior of ``p`` needs.
    """
    xp = namespace(x, p)
    d = x - total * p
    return -0.5 * xp.sum(d * d / (total * p)) - 0.5 * xp.sum(xp.log(p))


def contingency_table_model(release, mechanism=None, shape=None, invariant=None, t=None, *,
                            prior_scale=2.0) -> pm.Model:
    r"""Log-linear model of an r x c table with fixed margins, given a privatized release.

    Generative story
    ----------------
    With corner constraints (first row and first column are the reference),

    .. math::

        \alpha_i, \beta_j, \gamma_{ij} \sim N(0, s^2)\ (i, j \ge 1), \quad
        \alpha_0 = \beta_0 = \gamma_{0j} = \gamma_{i0} = 0, \quad
        p_{ij} = \frac{e^{\alpha_i + \beta_j + \gamma_{ij}}}{\sum_{kl} e^{\alpha_k + \beta_l + \gamma_{kl}}},

        x \mid p \sim \mathrm{Multinomial}(N, p), \qquad t = (\text{row totals}, \text{column totals})
        \ \text{published exactly}, \qquad y \sim M(x),

    ``s`` = ``prior_scale``.  The table ``x`` (length ``r*c``, C order, i.e. row-major) is
    the latent ``"x"``; the release is the observed ``"y"``.

    Association
    -----------
    Two estimands, both of shape (r-1, c-1) and relative to the first row and column:

    * ``"log_odds_ratio"`` -- the *model parameter*
      :math:`\gamma_{ij} = \log\frac{p_{ij}\,p_{00}}{p_{i0}\,p_{0j}}`, the log odds ratio of
      the cell probabilities (the :math:`\alpha, \beta` cancel): a property of the process
      that generated the table, which no finite table reveals exactly.
    * ``"table_log_odds_ratio"`` -- the *finite-population* log odds ratio of the confidential
      table ``x`` itself, with the Haldane--Anscombe correction (add
      :data:`HALDANE_ANSCOMBE` = 1/2 to each of the four cells, so empty cells give finite
      values):

      .. math:: \ell_{ij}(x) = \log\frac{(x_{ij} + \tfrac12)(x_{00} + \tfrac12)}
                {(x_{i0} + \tfrac12)(x_{0j} + \tfrac12)}.

      Its posterior (a function of the draws of ``x``) is what to compare with the same
      statistic of the true table -- when the model holds, its intervals cover that value at
      their nominal rate -- while :math:`\gamma` differs from the table's statistic by
      sampling variation even when :math:`\gamma` is known.  (For a real-valued latent, a
      draw with a cell below -1/2 gives ``nan``.)

    ``"p"`` (length ``r*c``) holds the cell probabilities.

    What the data identify
    ----------------------
    Given the margins, the conditional law of the table is the multivariate Fisher
    noncentral hypergeometric :math:`p(x \mid t, \gamma) \propto \prod_{ij} e^{\gamma_{ij}x_{ij}}/x_{ij}!`
    on the fibre: it depends on :math:`\gamma` only.  So the release informs the
    association (the interaction) alone, while :math:`\alpha, \beta` are informed by the
    published margins through the multinomial probability of ``t`` (which also carries a
    little information on :math:`\gamma`).  The model's joint is
    :math:`p(\alpha,\beta,\gamma)\,\mathrm{Mult}(x; N, p)\,1\{Cx = t\}\,p(y\mid x)` --
    the margins are data, the prior is restricted to the fibre, not renormalized.

    Release
    -------
    ``release`` is a :class:`privinfer.workflow.Release` of the table (it carries the released
    values, the mechanism, the table shape, the invariant and ``t``; pass nothing else), or the
    released values with ``mechanism``, ``shape`` and optionally ``invariant`` and ``t``.

    Invariant and mechanism
    -----------------------
    ``invariant`` defaults to ``invariants.margins(shape, [(0,), (1,)])``; any invariant that
    fixes the grand total works (the multinomial needs :math:`N`).  ``t`` defaults to
    ``invariant.t``, else is read off the release when the mechanism keeps these margins.

    * Integer mechanisms (``mechanism.integer``): ``x`` is an int64
      :func:`~privinfer.pymc.lattice_latent` with the exact multinomial prior.  Because the
      invariant fixes the total, :class:`~privinfer.pymc.LatticeMetropolis` scores that
      prior locally (only the cells a move touches).  Sample with
      ``pm.sample(step=privinfer.pymc.lattice_steps(model))`` (NUTS for the rest).  On the
      4 x 4 delinquent-children table with a generalized-Laplace release (eps = 0.5),
      ``lattice_steps(model, step_class=LatticeGibbs)`` (exact conditional moves along
      each 2 x 2 direction) gave about 5x the smallest cell ESS of the default Metropolis
      step at lower cost (min bulk ESS 101 vs 19 for 2 x 1000 draws).
    * Real-valued mechanisms: ``x`` is a continuous
      :func:`~privinfer.pymc.affine_latent` on the margins' affine subspace with the
      Gaussian approximation to the multinomial of :func:`multinomial_gaussian_logp`
      (not restricted to ``x >= 0``: adequate when the cells are not small).

    Raises
    ------
    ValueError for a shape that is not two positive sizes, a release or mechanism of another
    length, non-integer releases of an integer mechanism, an invariant that does not fix the
    total, ``prior_scale <= 0``, a table total of zero, or missing ``t``;
    ``InfeasibleInvariantError`` (glue) when ``t`` is inconsistent with a margin-keeping
    release or has no non-negative integer table.
    """
    y, mechanism, (r, c), inv, t_val, total = _checked_table(release, mechanism, shape, invariant, t, prior_scale)
    with pm.Model() as model:
        p = _log_linear_probabilities(r, c, prior_scale)
        x = _table_latent(y, mechanism, inv, t_val, total, p)
        pm.Deterministic("table_log_odds_ratio", table_log_odds_ratios(pt.cast(x, "float64").reshape((r, c))))
        observe("y", mechanism, x, observed=y)
    return model


def _checked_table(release, mechanism, shape, invariant, t, prior_scale):
    """``(y, mechanism, (r, c), invariant, t, N)``, checked: from a Release or from the released
    values with their mechanism and shape; the invariant (default: the row and column totals)
    must fix the table total ``N`` (the multinomial's size), which must be positive."""
    if isinstance(release, ReleaseLike):
        release, mechanism, invariant, t, shape = unpack_release(
            release, "contingency_table_model", mechanism=mechanism, shape=shape, invariant=invariant, t=t)
        if shape is None:
            raise ValueError("contingency_table_model: the release has no table shape")
    elif mechanism is None or shape is None:
        raise TypeError("contingency_table_model(release, mechanism, shape, ...): give a Release, or the "
                        "released values with their mechanism and the table shape")
    shape = check_shape(shape, 2, "rows, columns")
    if not (np.isscalar(prior_scale) and np.isfinite(prior_scale) and prior_scale > 0):
        raise ValueError("prior_scale must be a finite number > 0")
    inv = _inv.margins(shape, [(0,), (1,)]) if invariant is None else invariant
    y = check_release(release, mechanism, shape[0] * shape[1], shape=shape)
    inv = check_invariant(inv, y)
    if not fixes_total(inv):
        raise ValueError("the invariant must fix the table total (the multinomial prior needs N)")
    t_val = resolve_t(inv, t, mechanism, y)
    total = float(np.sum(inv.feasible_point(t_val)))
    if total <= 0.5:
        raise ValueError("the table total implied by the invariant values must be positive")
    return y, mechanism, shape, inv, t_val, total


def _log_linear_probabilities(r: int, c: int, prior_scale: float):
    r"""The log-linear parameters (in the model's context) and the cell probabilities ``p``.

    Free ``alpha`` (r-1), ``beta`` (c-1) and ``gamma`` ((r-1, c-1)), each :math:`N(0, s^2)`;
    the first row and column are the reference (:math:`\alpha_0 = \beta_0 = \gamma_{0j} =
    \gamma_{i0} = 0`); ``log_odds_ratio`` records :math:`\gamma` and ``p`` (length ``r*c``, C
    order) is :math:`\mathrm{softmax}(\alpha_i + \beta_j + \gamma_{ij})`.
    """
    alpha_free = pm.Normal("alpha", 0.0, prior_scale, shape=r - 1)
    beta_free = pm.Normal("beta", 0.0, prior_scale, shape=c - 1)
    gamma = pm.Normal("gamma", 0.0, prior_scale, shape=(r - 1, c - 1))
    alpha = pt.concatenate([pt.zeros(1), alpha_free])
    beta = pt.concatenate([pt.zeros(1), beta_free])
    inter = pt.zeros((r, c))
    inter = pt.set_subtensor(inter[1:, 1:], gamma)
    pm.Deterministic("log_odds_ratio", gamma)
    eta = (alpha[:, None] + beta[None, :] + inter).reshape((r * c,))
    return pm.Deterministic("p", pt.special.softmax(eta))


def _table_latent(y, mechanism, inv, t_val, total: float, p):
    """The latent table ``x`` on the fibre of the invariant (in the model's context): an int64
    lattice latent with the exact multinomial prior for an integer mechanism (started from the
    release's shares), else an affine latent with the Gaussian approximation
    :func:`multinomial_gaussian_logp`."""
    if is_integer_mechanism(mechanism):
        return lattice_latent("x", inv, t_val, prior=pm.Multinomial.dist(n=int(round(total)), p=p),
                              initval=integer_start(y, inv, t_val))
    return affine_latent("x", inv, t_val, prior=lambda xx: multinomial_gaussian_logp(xx, total, p))
