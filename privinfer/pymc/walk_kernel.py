r"""NumPy kernels of :class:`~privinfer.pymc.WalkGibbs`: blocked updates of the random-walk
departures of many units whose cells are Dirichlet-multinomial (the per-row terms below are
compiled in :mod:`privinfer.pymc.dm_rows`).

The conditional target.  Unit ``u`` has ``d`` cells with counts :math:`X_u` (total
:math:`N_u`), a base log profile :math:`b_u \in \mathbb R^d` and a departure along ``K``
ordered categories (the age groups): :math:`r_{u,0} = 0`, :math:`r_{u,k} = \sum_{j \le k}
\eta_{u,j}`; cell ``i`` of category :math:`c(i)` has the log profile :math:`b_{u,i} +
r_{u,c(i)}` and :math:`\alpha_u = \kappa\,\mathrm{softmax}(b_u + r_{u,c})`.  Given everything
else, the increments :math:`\eta` have the log density

.. math:: \sum_u \ell_u(\eta_u) - \sum_{u,k} \frac{\delta_{u,k}^2}{2\sigma_k^2},\qquad
          \ell_u = \sum_i \log\Gamma(X_{u,i} + \alpha_{u,i}) - \log\Gamma(\alpha_{u,i}),

with raw increments :math:`\delta_u \sim N(0, \mathrm{diag}\,\sigma^2)` and :math:`\eta = \delta`
(no centring) or :math:`\eta_u = \delta_u - \bar\delta_{g(u)}`, the mean over the units of
``u``'s sibling group (:math:`\Gamma(\kappa) / \Gamma(N_u + \kappa)` does not depend on
:math:`\eta` because :math:`\sum_i \alpha_{u,i} = \kappa`).

A second-order walk (``order=2`` throughout) has :math:`r_{u,k} = \sum_{j \le k} (M\eta_u)_j`
with :math:`M = \mathrm{diag}(h)\,C`, ``C`` the lower-triangular matrix of ones (the increments
change the slope) and ``h`` the categories' spacing (``spacing``: e.g. the distances between
the age groups' midpoints, so a walk whose slope never changes is linear in age, not in the
groups' index; all 1 by default); scores and information are then :math:`M^\top g` and
:math:`M^\top I M` and the empirical increments :math:`M^{-1}` of the first-order ones.

Units of several rows (``members``).  A walk may be shared by several rows of cells: a
county's departure enters each of its tracts' Dirichlet-multinomials, each with its own base
profile.  ``members`` ``(R,)`` gives the unit of every row of ``X`` and ``base`` (``(R, d)``);
:math:`\ell_u` is then the sum over the unit's rows, and so are its score and information
(None: one row per unit).

The moves.  A *move* adds :math:`s\Delta` (:math:`s = \pm 1`) to the increments of one unit
(no centring) or of two siblings (``+Delta`` and ``-Delta``, which keeps every group mean and so
every other unit's :math:`\eta`).  :math:`\Delta \in \mathbb R^{K-1}` is drawn from the Laplace
approximation of its exact conditional, :math:`N(m, Q^{-1})`: the mode ``m`` by Fisher scoring
(the Dirichlet-multinomial's information about the logits, :math:`n_u (\mathrm{diag}\,p -
pp^\top)` with :math:`n_u = N_u (1 + \kappa)/(N_u + \kappa)`, its variance inflation
removed, plus the prior precision), and accepted by the exact independence Metropolis--Hastings
ratio, so the kernel leaves the exact conditional invariant whatever the approximation's
quality (its acceptance rate measures that).  Moves on disjoint units are conditionally
independent and made at once.  In category space the information is
:math:`n_u (T_{\max(k,l)} - T_k T_l)` with :math:`T_k = \sum_{c > k} P_{u,c}` the tail sums of
the category shares :math:`P_{u,c} = \sum_{c(i) = c} p_{u,i}`.

:func:`scale_draw` is the exact conditional of the step scales given the raw increments.  The
scales' prior is a scaled chi with ``prior_dof`` = :math:`\nu` degrees of freedom,
:math:`\sigma_k / s \sim \chi_\nu`, density :math:`\propto \sigma^{\nu - 1} e^{-\sigma^2/(2s^2)}`
(:math:`\nu = 1` the half-normal, :math:`\nu = 2` the Rayleigh), i.e. :math:`\sigma_k^2 \sim
\mathrm{Gamma}(\nu/2,\ \mathrm{rate}\ 1/(2s^2))`; with ``U`` units, :math:`\sigma_k^2 \mid
\delta \sim \mathrm{GIG}(p = (\nu - U)/2,\ a = 1/s^2,\ b = \sum_u \delta_{u,k}^2)`, density
:math:`\propto v^{p-1} e^{-(a v + b/v)/2}`.  In :math:`\lambda_k = \log\sigma_k` the prior
with the log transform's Jacobian is :math:`\nu\lambda_k - e^{2\lambda_k}/(2s^2)`: where the
data cannot tell small scales apart, the posterior's left tail in :math:`\lambda_k` decays like
:math:`e^{\nu\lambda_k}`.

Mixed prior variances (a Student-t walk).  Every kernel takes ``mix``, the units' prior
variance multipliers :math:`\lambda_u` (``(U,)``, None: all 1): the raw increments are
:math:`\delta_{u,k} \mid \lambda_u \sim N(0, \sigma_k^2\lambda_u)` with
:math:`\lambda_u \sim \mathrm{InvGamma}(\nu_\lambda/2, \nu_\lambda/2)`, so that marginally each
unit's increments are multivariate t with :math:`\nu_\lambda` degrees of freedom: a unit whose
profile departs far from its parent's (a campus, a retirement community) gets a large
:math:`\lambda_u` instead of dragging the shared step scales up or being shrunk hard toward its
parent.  The prior term above becomes :math:`\sum_{u,k}\delta_{u,k}^2/(2\sigma_k^2\lambda_u)`;
the scales' conditional is the same GIG with :math:`b = \sum_u\delta_{u,k}^2/\lambda_u`; the group
mean's conditional is :math:`N(-\sum_u w_u\eta_u/W_g, \sigma^2/W_g)`, :math:`w_u = 1/\lambda_u`,
:math:`W_g = \sum_{u \in g} w_u` (:func:`refresh_group_means`); and :func:`mix_draw` draws
:math:`\lambda_u \mid \delta_u, \sigma \sim \mathrm{InvGamma}((\nu_\lambda + K - 1)/2,
(\nu_\lambda + \sum_k\delta_{u,k}^2/\sigma_k^2)/2)`, exactly (the normal scale mixture of
Andrews and Mallows 1974; Gelman et al. 2013, Bayesian Data Analysis, section 17.2).  ``mix``
may also be ``(U, K-1)``, one multiplier per unit and increment (each increment a t of its own):
the same formulas elementwise, with :math:`(\nu_\lambda + 1)/2` in :func:`mix_draw`.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, softmax
from scipy.stats import geninvgauss

from .dm_rows import rows_loglik, rows_quadratic, rows_score_info, rows_score_tails, scatter_rows
from .unit_gauss import transport, transport_coordinates

#: The proposals are a defensive mixture (Hesterberg 1995): the Laplace Gaussian with weight
#: ``1 - TAIL`` and a multivariate t with ``NU`` degrees of freedom (same centre and scale) with
#: weight ``TAIL``.  Near equilibrium nearly every draw is the Gaussian's (acceptance close to
#: 1 when the conditional is close to Gaussian); the t's tails bound the weight ratio of a state
#: far from the mode (a poor start, a shifted conditional), where a purely Gaussian
#: independence sampler sticks.
NU = 4.0
TAIL = 0.1
#: Scoring iterations toward each conditional's mode: at most MAX_NEWTON, until every Newton
#: decrement g' Q^{-1} g is below NEWTON_TOL (a proposal centred off the mode by a decrement
#: of 0.01 loses about 1% acceptance).
MAX_NEWTON = 12
NEWTON_TOL = 1e-2
#: Damping: each scoring step at most MAX_STEP long in the metric of the precision.  The
#: empirical start of a second-order walk (noisy second differences) lies far from the mode in
#: that metric when the step scales are small (prior precisions near 1e4): at 10, twelve damped
#: steps fell short and the pair moves' acceptance on 12 Kentucky counties was 0.05-0.19
#: (0.88 at 100, where the scoring converges from the same start).
MAX_STEP = 100.0
#: Backtracking: a scoring step into non-finite values is halved at most this many times.
MAX_HALVING = 30
#: Slice sampling of each log step scale: the interval's initial width, and the limit ``m`` of
#: Neal (2003, section 4.1 and fig. 3) on its length in widths when stepping out (the ``m - 1``
#: steps split at random between the two sides; ``m = 1``: no stepping out, the interval is one
#: width placed at random around the current point).  Every ``m`` leaves the target invariant.
SLICE_WIDTH = 0.5
SLICE_STEPS = 40

__all__ = ["empirical_increments", "increments_from_steps", "slopes", "walk_offsets", "unit_loglik", "unit_rows",
           "checked_members",
           "unit_score_info", "sibling_pairs", "sized_pairs", "laplace_mh", "move_update", "group_means",
           "refresh_group_means", "scale_draw", "scale_update_noncentred", "scale_update_transport",
           "centred", "slice_coordinate", "row_fits", "scale_update_unit_transport",
           "update_log_scales", "update_log_scales_corrected", "row_expansions", "row_tail_expansions", "gig_draw", "GIG_ROUNDS",
           "mix_draw", "prior_precisions", "checked_mix"]


def checked_mix(mix, U: int, K1: int | None = None):
    """The prior variance multipliers as floats, ``(U,)`` (one per unit) or, with ``K1`` given,
    also ``(U, K1)`` (one per unit and increment); None stays None; a one-line error unless
    finite and > 0."""
    if mix is None:
        return None
    mix = np.asarray(mix, dtype=float)
    if mix.shape not in ((U,), (U, K1)) or not np.all(np.isfinite(mix) & (mix > 0)):
        raise ValueError(f"mix must hold {U} finite positive variance multipliers, one per unit"
                         + ("" if K1 is None else f" (or {U} x {K1}, one per increment)"))
    return mix


def _mix_columns(mix):
    """Multipliers ``(U,)`` or ``(U, K-1)`` as ``(U, 1)`` or ``(U, K-1)``, for broadcasting."""
    return mix[:, None] if mix.ndim == 1 else mix


def prior_precisions(sigma, mix=None, U: int | None = None):
    r"""The raw increments' prior precisions :math:`1/(\sigma_k^2\lambda_u)` ``(U, K-1)``
    (module docstring; ``mix`` None: :math:`\lambda_u = 1`, ``U`` rows of ``1/sigma^2``, or
    ``(K-1,)`` when ``U`` is None too)."""
    p = 1.0 / np.asarray(sigma, dtype=float) ** 2
    if mix is None:
        return p if U is None else np.ascontiguousarray(np.broadcast_to(p, (int(U), p.size)))
    U = np.shape(mix)[0] if U is None and np.ndim(mix) >= 1 else U
    if U is None:
        raise ValueError("mix must be one variance multiplier per unit (or per unit and increment), an array")
    mix = checked_mix(mix, int(U), p.size)
    return np.ascontiguousarray(p[None, :] / _mix_columns(mix))


def mix_draw(rng, delta, sigma, dof: float, per_increment: bool = False):
    r"""The units' prior variance multipliers drawn from their exact conditional given the raw
    increments ``(U, K-1)`` and the step scales (module docstring):
    :math:`\lambda_u \sim \mathrm{InvGamma}((\nu + K - 1)/2, (\nu + \sum_k\delta_{u,k}^2/
    \sigma_k^2)/2)` with ``dof`` = :math:`\nu`, the prior :math:`\mathrm{InvGamma}(\nu/2, \nu/2)`
    (an inverse gamma is its rate over a unit-rate gamma draw).  ``per_increment``: one
    multiplier per unit and increment ``(U, K-1)``, :math:`\lambda_{u,k} \sim
    \mathrm{InvGamma}((\nu + 1)/2, (\nu + \delta_{u,k}^2/\sigma_k^2)/2)` (each increment a t of its
    own: a campus's steep rise at 18-24 need not free its walk at every other age)."""
    delta = np.asarray(delta, dtype=float)
    if not (np.isfinite(dof) and dof > 0):
        raise ValueError("dof must be a finite number > 0")
    q = (delta / np.asarray(sigma, dtype=float)[None, :]) ** 2
    if per_increment:
        return 0.5 * (dof + q) / rng.gamma(0.5 * (dof + 1.0), size=q.shape)
    return 0.5 * (dof + q.sum(axis=1)) / rng.gamma(0.5 * (dof + delta.shape[1]), size=delta.shape[0])


def slopes(eta, order: int = 1, spacing=None):
    """The walk's steps between neighbouring categories from its raw increments ``(U, K-1)``:
    the increments themselves (``order`` 1, a random walk) or their cumulative sums (``order``
    2, a second-order random walk: the raw increments change the slope), times ``spacing``
    ``(K-1,)`` when given (order 2: the categories' distances, so the cumulative sums are
    slopes per unit of distance; None: all 1)."""
    if order != 2:
        return eta
    s = np.cumsum(eta, axis=1)
    return s if spacing is None else s * spacing


def increments_from_steps(steps, order: int = 1, spacing=None):
    """The inverse of :func:`slopes`: the raw increments ``(U, K-1)`` of a walk whose steps
    between neighbouring categories are ``steps`` (``order`` 2: the steps divided by
    ``spacing`` and differenced once more, the first kept)."""
    steps = np.asarray(steps, dtype=float)
    if order != 2:
        return steps
    steps = steps if spacing is None else steps / spacing
    return np.concatenate([steps[:, :1], np.diff(steps, axis=1)], axis=1)


def walk_offsets(eta, code, order: int = 1, spacing=None):
    """Increments ``(U, K-1)`` -> the cells' offsets ``(U, d)``: :math:`r_{u, c(i)}`, ``r = [0,
    cumsum(slopes(eta, order, spacing))]``."""
    r = np.concatenate([np.zeros((eta.shape[0], 1)), np.cumsum(slopes(eta, order, spacing), axis=1)], axis=1)
    return r[:, code]


def unit_loglik(X, theta, kappa):
    r""":math:`\ell_u` of every unit (rows of ``X`` and ``theta``, ``(U, d)``)."""
    return rows_loglik(X, theta, kappa)


def unit_score_info(X, theta, kappa, code, K: int, order: int = 1, spacing=None):
    r"""Gradient of :math:`\ell_u` with respect to the unit's increments ``(U, K-1)`` and the
    Fisher-type information ``(U, K-1, K-1)`` (module docstring).  ``code`` ``(d,)``: the
    cells' categories ``0..K-1``; ``order`` 2: with respect to the raw increments of a
    second-order walk (:func:`slopes`, with its ``spacing``; gradient ``M^T g``, information
    ``M^T I M``)."""
    return rows_score_info(X, theta, kappa, code, K, order, spacing)


def empirical_increments(X, base, code, order: int = 1, spacing=None):
    r"""The increments that fit each unit's category totals exactly (the multinomial maximum
    likelihood estimate of the walk given the base profile, with 1/2 added to every count):
    :math:`\hat r_{u,c} = \log(C_{u,c}/B_{u,c})`, ``C`` the unit's counts and ``B`` its base
    shares summed over category ``c``, differenced over ``c`` (``order`` 2: the raw increments
    of a second-order walk, those steps differenced once more, the first kept).  ``(U, K-1)``."""
    K = int(np.max(code)) + 1
    onehot = np.eye(K)[np.asarray(code, dtype=np.int64)]
    C = X @ onehot + 0.5
    B = softmax(base, axis=1) @ onehot
    step = np.diff(np.log(C) - np.log(B), axis=1)
    return increments_from_steps(step, order, spacing)


def sibling_pairs(rng, groups):
    """A uniformly random matching of the units within each group: ``(u, v)`` index arrays
    (a group of odd size leaves one unit out)."""
    groups = np.asarray(groups, dtype=np.int64)
    order = np.lexsort((rng.random(groups.size), groups))
    rank, size = _group_ranks(groups[order])
    pos = np.flatnonzero((rank % 2 == 0) & (rank + 1 < size))
    return order[pos], order[pos + 1]


def _group_ranks(g):
    """Each unit's rank within its group and its group's size, for group labels ``g`` sorted
    so that every group's units are consecutive."""
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]]) if g.size else np.zeros(0, dtype=np.int64)
    n = np.diff(np.r_[first, g.size])
    return np.arange(g.size) - np.repeat(first, n), np.repeat(n, n)


def sized_pairs(rng, groups, sizes):
    r"""A matching of near neighbours in size within each group: ``(u, v)`` index arrays.  Each
    group's units sorted by ``sizes`` (ties by index), ranks ``0, 1, ...``, are paired by one of
    three patterns, drawn uniformly and independently per group: (0, 1), (2, 3), ...; (1, 2),
    (3, 4), ... and, in a group of even size, the smallest with the largest (the order read as a
    cycle, so a group of two is always paired); or across blocks of four, (0, 2), (1, 3), (4, 6),
    (5, 7), ... (a last block of two paired together, of three (0, 2)).  A group of odd size leaves
    out its largest unit under the first pattern and its smallest under the second.  Every unit's
    partner is at most two places away in size, except the ends' under the cycle, and the
    partners change from pattern to pattern, so the pairs' sums do not stay put.

    Why.  A pair move :math:`\delta_u + \Delta,\ \delta_v - \Delta` of centred increments is
    as wide as the *tighter* of the two units' conditionals: a tract of 800 people paired with
    one of 6,000 moves its departure by the larger tract's posterior spread, several times less
    than its own.  Under a uniform matching (:func:`sibling_pairs`) a small unit among many large
    siblings (a small tract in a county of 185) almost never meets a partner of its size.  The
    third pattern is for the smallest units, which need these moves most: with the first two
    alone, the smallest unit of a group of odd size is left out every other time and otherwise
    always meets the same partner (Kentucky's two smallest tracts, of 780 and 801 people in
    Jefferson County's 185, held the slowest cells of all 1,083 tracts); now it is paired two
    times in three, with the second or the third smallest.
    ``sizes`` must not depend on the chain's state (e.g. the units' estimated totals), so the
    matching is drawn independently of the state and every move made with it stays exact."""
    groups = np.asarray(groups, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=float)
    if sizes.shape != groups.shape:
        raise ValueError("sizes must give one number per unit")
    order = np.lexsort((np.arange(groups.size), sizes, groups))
    g = groups[order]
    pattern = rng.integers(3, size=int(g.max(initial=-1)) + 1)[g]
    rank, size = _group_ranks(g)
    neighbours = (pattern < 2) & ((rank + pattern) % 2 == 0) & (rank + 1 < size)
    wrap = (pattern == 1) & (rank == 0) & (size % 2 == 0)   # the ends, left out: paired together
    cross = (pattern == 2) & (rank % 4 < 2) & (rank + 2 < size)
    last_two = (pattern == 2) & (rank % 4 == 0) & (size - rank == 2)
    pos = [np.flatnonzero(neighbours | last_two), np.flatnonzero(wrap), np.flatnonzero(cross)]
    partner = [pos[0] + 1, pos[1] + size[pos[1]] - 1, pos[2] + 2]
    return order[np.concatenate(pos)], order[np.concatenate(partner)]


def group_means(delta, groups):
    """Each group's mean raw increment ``(G, K-1)`` and its number of units ``(G,)`` (0 and 0
    for a group number no unit has)."""
    J = np.bincount(groups).astype(float)
    sums = np.zeros((J.size, delta.shape[1]))
    np.add.at(sums, groups, delta)
    return sums / np.maximum(J, 1.0)[:, None], J


def centred(delta, groups):
    """Raw increments less their group means (``groups`` None: unchanged)."""
    if groups is None:
        return delta
    return delta - group_means(delta, groups)[0][groups]


def refresh_group_means(rng, delta, groups, sigma, mix=None):
    r"""Redraw each group's mean raw increment from its conditional, the prior
    :math:`N(0, \sigma^2/J_g)` (the likelihood depends on the centred increments only), keeping
    the centred increments.  With ``mix`` (the units' prior variance multipliers
    :math:`\lambda_u`, module docstring) the common shift ``c`` of a group's raw increments
    :math:`\delta_u = \eta_u + c` has the conditional :math:`N(-\sum_u w_u\eta_u/W_g,
    \sigma^2/W_g)`, :math:`w_u = 1/\lambda_u`, :math:`W_g = \sum_{u \in g} w_u` (all 1: the
    above, since the centred :math:`\eta` sum to 0)."""
    eta = centred(delta, groups)
    if mix is None:
        J = np.bincount(groups).astype(float)
        fresh = rng.standard_normal((J.size, delta.shape[1])) * sigma[None, :] / np.sqrt(J)[:, None]
        return eta + fresh[groups]
    wu = np.broadcast_to(1.0 / _mix_columns(checked_mix(mix, *delta.shape)), delta.shape)
    G = int(groups.max(initial=-1)) + 1
    W, pull = np.zeros((G, delta.shape[1])), np.zeros((G, delta.shape[1]))
    np.add.at(W, groups, wu)
    np.add.at(pull, groups, wu * eta)
    Wg = np.maximum(W, 1e-300)
    fresh = -pull / Wg + rng.standard_normal(pull.shape) * sigma[None, :] / np.sqrt(Wg)
    return eta + fresh[groups]


def _log_q(r2, k):
    """Log density of the defensive mixture proposal at squared Mahalanobis distance ``r2`` from
    its centre, up to the common ``log|Q|/2``: weight ``1 - TAIL`` on the Gaussian, ``TAIL`` on
    the multivariate t with ``NU`` degrees of freedom and the same scale matrix."""
    log_g = -0.5 * r2 - 0.5 * k * np.log(2.0 * np.pi)
    log_t = (gammaln(0.5 * (NU + k)) - gammaln(0.5 * NU) - 0.5 * k * np.log(NU * np.pi)
             - 0.5 * (NU + k) * np.log1p(r2 / NU))
    return np.logaddexp(np.log1p(-TAIL) + log_g, np.log(TAIL) + log_t)


def _finite(g, Q):
    return np.isfinite(g).all(axis=1) & np.isfinite(Q).all(axis=(1, 2))


def _score(score, D, rows):
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        return score(D, rows)


def _newton(score, D, iters: int, target=None):
    """Scoring iterations from ``D`` toward the modes, each move until its Newton decrement is
    below NEWTON_TOL (at most ``iters``; the moves still iterating are scored alone,
    ``score(D[rows], rows)``).  A step that lands where the gradient or precision is not finite
    (an overshoot into logits where the category shares underflow) is halved until it does
    not, at most MAX_HALVING times; with ``target`` (the moves' log densities, ``(n,)``), so is
    a step that lowers it (the Fisher-type information understates the curvature when the
    Dirichlet's concentration is small, and undamped scoring then climbs away from the mode).
    The moves whose gradient or precision is not finite (or not positive definite) at the end
    are flagged.  Every step is a function of ``D``, ``score`` and differences of ``target``
    only; ``target(D[rows], rows)`` evaluates the moves ``rows`` alone (``rows`` None: all), so
    the moves still iterating cost what they are, not what all the moves cost.  Returns the
    modes, the precisions there, their Cholesky factors and the flags of usable moves."""
    n, k = D.shape
    eye = np.eye(k)
    D = np.array(D, dtype=float)
    g, Q = _score(score, D, np.arange(n))
    active = _finite(g, Q)
    f = None
    if target is not None:
        with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
            f = target(D)
    for _ in range(iters):
        idx = np.flatnonzero(active)
        if idx.size == 0:
            break
        gi, Qi, Di = g[idx], Q[idx], D[idx]
        step = np.linalg.solve(Qi, gi[..., None])[..., 0]
        # damped: at most MAX_STEP in the metric of Q (the first steps from a far start)
        size = np.sqrt(np.maximum(np.einsum("mk,mk->m", gi, step), 0.0))
        step *= np.minimum(1.0, MAX_STEP / np.maximum(size, 1e-300))[:, None]
        if f is not None:
            step, f[idx] = _ascending(target, D, idx, step, f[idx])
        gi, Qi = _score(score, Di + step, idx)
        for _ in range(MAX_HALVING):
            over = ~_finite(gi, Qi)
            if not over.any():
                break
            step[over] *= 0.5
            g_half, Q_half = _score(score, Di[over] + step[over], idx[over])
            gi[over], Qi[over] = g_half, Q_half
        D[idx] = Di + step
        g[idx], Q[idx] = gi, Qi
        active[idx] = (size**2 >= NEWTON_TOL) & _finite(gi, Qi)
    ok = _finite(g, Q) & np.isfinite(D).all(axis=1)
    Q = np.where(ok[:, None, None], Q, eye)
    try:
        L = np.linalg.cholesky(Q)
    except np.linalg.LinAlgError:             # batched Cholesky raises for the whole batch
        L = np.empty_like(Q)
        for j in range(n):
            try:
                L[j] = np.linalg.cholesky(Q[j])
            except np.linalg.LinAlgError:
                ok[j] = False
                L[j] = eye
    return np.where(ok[:, None], D, 0.0), Q, L, ok


def _ascending(target, D, idx, step, f_old):
    """The scoring steps of the moves ``idx`` halved (at most MAX_HALVING times) until the
    target does not fall (a non-finite value counts as a fall); returns the steps and the
    target's values there.  ``target(D[idx], idx)`` evaluates the moves ``idx`` alone."""
    for _ in range(MAX_HALVING + 1):
        with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
            f_new = target(D[idx] + step, idx)
        fall = ~(f_new >= f_old)
        if not fall.any():
            break
        step[fall] *= 0.5
    return step, np.where(np.isfinite(f_new), f_new, f_old)


def laplace_mh(rng, target, score, start):
    r"""Independence Metropolis--Hastings for ``n`` independent ``k``-dimensional displacements
    ``D`` from the current state (``D = 0``).  The proposal: the conditional's mode ``m`` by
    damped scoring steps ``D += Q^{-1} g`` from ``start`` (``(g, Q) = score(D, rows)``, gradient
    and a positive definite precision of the moves ``rows`` at their displacements ``D``,
    ``(len(rows), k)``, ``(len(rows), k, k)``; a step that lowers ``target`` is halved), then the
    defensive mixture centred at ``m`` with precision ``Q(m)``.  ``start`` must not depend on the
    current state (only on what the move conditions on), so the proposal does not either and the
    exact ratio of ``target`` (the log target of every move, ``(n,)``; ``target(D[rows], rows)``
    of the moves ``rows`` alone) makes the move reversible however far the scoring got.  Moves
    whose scoring failed (non-finite values) are rejected.  Returns the accepted displacements
    (0 where rejected) and the acceptance indicators."""
    n_moves, k = start.shape
    D, Q, L, ok = _newton(score, np.array(start, dtype=float), MAX_NEWTON, target)
    z = rng.standard_normal((n_moves, k))
    r = np.where(rng.random(n_moves) < TAIL, np.sqrt(NU / rng.chisquare(NU, n_moves)), 1.0)
    prop = D + np.linalg.solve(np.swapaxes(L, 1, 2), (z * r[:, None])[..., None])[..., 0]
    back = np.einsum("mk,mkl,ml->m", D, Q, D)          # (0 - m)' Q (0 - m)
    fwd = (z**2).sum(axis=1) * r**2                    # (prop - m)' Q (prop - m)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):   # rejected below
        log_ratio = target(prop) - target(np.zeros_like(D)) + _log_q(back, k) - _log_q(fwd, k)
    accept = ok & (np.log(rng.random(n_moves)) < np.where(np.isfinite(log_ratio), log_ratio, -np.inf))
    return np.where(accept[:, None], prop, 0.0), accept


def _sum_rows(v, at, n: int):
    """Per-row values ``v`` summed into their moves ``at`` (``n`` moves; ``at`` None: one row
    per move, in order)."""
    if at is None:
        return v
    return scatter_rows(v, at, n)


def _rows_of(moves, at, n_moves: int):
    """The rows of the moves ``moves`` (None: all ``n_moves``, in order) among a part's rows
    (``at``: each row's move, None: row ``j`` is move ``j``) and each such row's position in
    ``moves`` (None: one row per move, in the order of ``moves``); ``(None, at)`` for all."""
    if moves is None:
        return None, at
    if at is None:
        return moves, None
    pos = np.full(n_moves, -1, dtype=np.int64)
    pos[moves] = np.arange(moves.size)
    sel = np.flatnonzero(pos[at] >= 0)
    return sel, pos[at[sel]]


def checked_members(members, R: int, U: int):
    """``members`` (the unit of each of ``R`` rows of cells, ``U`` units) as int64 ``(R,)``, None
    kept (then ``R`` must be ``U``: row ``u`` is unit ``u``), with one-line errors for a bad one."""
    if members is None:
        if U != R:
            raise ValueError(f"grid has {R} rows for {U} units: give members, the unit of every row")
        return None
    members = np.asarray(members)
    if (members.shape != (R,) or not np.issubdtype(members.dtype, np.integer)
            or np.any((members < 0) | (members >= U)) or np.unique(members).size != U):
        raise ValueError(f"members must give every row of grid its unit, 0..{U - 1}, each unit at least one row")
    return members.astype(np.int64)


def unit_rows(units, members, n_units: int):
    """The rows owned by ``units`` (``members`` ``(R,)``: every row's unit; None: row ``u`` is
    unit ``u``) and each row's position in ``units`` (None when every unit is its one row)."""
    units = np.asarray(units, dtype=np.int64)
    if members is None:
        return units, None
    pos = np.full(n_units, -1, dtype=np.int64)
    pos[units] = np.arange(units.size)
    at = pos[members]
    rows = np.flatnonzero(at >= 0)
    return rows, at[rows]


def row_fits(X, base, kappa, code, K1: int, order: int = 1, spacing=None):
    r"""Every row's quadratic approximation of its log likelihood in the walk's increments: the
    empirical increments :math:`\hat e_r` (:func:`empirical_increments`) and the information
    :math:`I_r` there (:func:`unit_score_info`, non-finite entries set to 0), so that
    :math:`\ell_r(\eta) \approx \ell_r(\hat e_r) - \tfrac12 (\eta - \hat e_r)^\top I_r (\eta - \hat e_r)`.
    ``K1``: the number of increments.  Returns ``(R, K1)`` and ``(R, K1, K1)``."""
    e_hat, _, info = row_expansions(X, base, kappa, code, K1, order, spacing)
    return e_hat, info


def row_expansions(X, base, kappa, code, K1: int, order: int = 1, spacing=None, at=None):
    r"""Every row's second-order expansion of its log likelihood in the walk's increments at
    :math:`a_r`, :math:`\ell_r(\eta) \approx \ell_r(a_r) + g_r^\top(\eta - a_r) - \tfrac12
    (\eta - a_r)^\top I_r (\eta - a_r)` (:func:`unit_score_info`'s score and information there,
    non-finite entries set to 0): at the rows' increments ``at`` ``(R, K1)``, or by default at
    the empirical increments :math:`\hat e_r` (:func:`row_fits`; they fit the row's category
    totals with 1/2 added to each, so they are near the row's maximum, not at it, and the score
    takes up the difference to first order).  Returns the points ``(R, K1)``, the scores
    ``(R, K1)`` and the information ``(R, K1, K1)``."""
    e_hat, theta = _expansion_point(X, base, code, order, spacing, at)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        score, info = unit_score_info(X, theta, kappa, code, K1 + 1, order, spacing)
    return e_hat, np.where(np.isfinite(score), score, 0.0), np.where(np.isfinite(info), info, 0.0)


def _expansion_point(X, base, code, order, spacing, at):
    """The rows' expansion points (``at``, or the empirical increments when None) and the log
    profiles there, for :func:`row_expansions` and :func:`row_tail_expansions`."""
    e_hat = empirical_increments(X, base, code, order, spacing) if at is None else np.asarray(at, dtype=float)
    return e_hat, base + walk_offsets(e_hat, code, order, spacing)


def row_tail_expansions(X, base, kappa, code, K1: int, order: int = 1, spacing=None, at=None):
    r""":func:`row_expansions` with each row's information in the factored form of
    :func:`~privinfer.pymc.dm_rows.rows_score_tails` (:math:`n_r` and the tail sums
    :math:`T_r`; a row with a non-finite one gets no information): the points, the scores
    ``(R, K1)``, :math:`n_r` ``(R,)`` and :math:`T_r` ``(R, K1)``, for
    :func:`~privinfer.pymc.dm_rows.rows_quadratic`."""
    e_hat, theta = _expansion_point(X, base, code, order, spacing, at)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        score, n_eff, tails = rows_score_tails(X, theta, kappa, code, K1 + 1, order, spacing)
    bad = ~(np.isfinite(n_eff) & np.isfinite(tails).all(axis=1))
    return (e_hat, np.where(np.isfinite(score), score, 0.0), np.where(bad, 0.0, n_eff),
            np.where(bad[:, None], 0.0, tails))


def _start(data, kappa, code, order, spacing=None):
    r"""The scoring's start: the mode of the move's conditional with each row's log likelihood
    replaced by its quadratic approximation at the row's empirical increments :math:`\hat e_p`
    (information :math:`I_p` there),

    .. math:: \Big(\sum_p I_p + n P\Big) D = \sum_p s_p I_p(\hat e_p - \eta_p) - P \sum_p s_p \delta_p,

    ``P = diag(1/sigma^2)`` (per unit with mixed prior variances: each part's own; ``n`` times
    ``P`` reads :math:`\sum_p P_p`), ``n`` parts (the first sum over the rows of every part's units).
    It is a function of what the move conditions on (the
    cells, the base profiles, the group means and a pair's sum of raw increments), not of the
    current state: in the moved unit's absolute increments :math:`a = \delta_u + D` the right
    side is :math:`I_u(\hat e_u + \bar\delta) + I_v(S - \bar\delta - \hat e_v) + P S - (\ldots) a`
    for a pair with sum ``S`` and group mean :math:`\bar\delta`.  Where the step scales are
    small the start is near the prior's mode, where they are large near the empirical
    increments (which alone lie far from the mode, in the precision's metric, when the
    prior precision is large)."""
    rhs, lhs = 0.0, 0.0
    for Xs, bs, es, ds, sg, at, pr in data:
        n, K1 = ds.shape
        e_hat, info = row_fits(Xs, bs, kappa, code, K1, order, spacing)
        rhs = rhs + sg * (_sum_rows(np.einsum("mkl,ml->mk", info, e_hat - es), at, n) - ds * pr)
        lhs = lhs + _sum_rows(info, at, n) + pr[:, :, None] * np.eye(K1)[None]
    return np.linalg.solve(lhs, rhs[..., None])[..., 0]


def move_update(rng, X, base, eta, delta, parts, sigma, kappa, code, order: int = 1, spacing=None, members=None,
                mode: bool = False, mix=None):
    r"""One independence Metropolis--Hastings update of every move (module docstring).

    ``parts``: ``[(units, sign), ...]``, equally long unit index arrays and signs: move ``j``
    adds ``sign * Delta_j`` to unit ``units[j]`` of every part (one part: single units; two
    parts with signs +1, -1: sibling pairs; no unit twice).  ``X``, ``base`` ``(R, d)``: the
    rows of cells, ``members`` ``(R,)`` the unit of each (None: ``R = U``, row ``u`` is unit
    ``u``); ``eta``, ``delta`` ``(U, K-1)``: centred and raw increments (updated in place);
    ``code`` ``(d,)`` the cells' categories.  Returns the acceptance indicators of the moves.
    ``mode``: every move goes to the mode of its conditional found by the scoring (where it
    converged) instead -- not a draw, a starting point (:class:`~privinfer.pymc.WalkGibbs`'s
    first warm-up iteration).  ``mix``: the units' prior variance multipliers (module docstring;
    None: all 1)."""
    n_moves = parts[0][0].size
    if n_moves == 0:
        return np.zeros(0, dtype=bool)
    K1 = eta.shape[1]
    prec = prior_precisions(sigma, mix, eta.shape[0])
    diag = np.arange(K1)
    data = []
    for u, sg in parts:
        rows, at = unit_rows(u, members, eta.shape[0])
        data.append((X[rows], base[rows], eta[u] if at is None else eta[u][at], delta[u], float(sg), at, prec[u]))

    def target(D, moves=None):
        out = np.zeros(D.shape[0])
        for Xs, bs, es, ds, sg, at, pr in data:
            sel, here = _rows_of(moves, at, n_moves)
            sh = sg * D
            if sel is not None:
                Xs, bs, es, ds, pr = Xs[sel], bs[sel], es[sel], ds[moves], pr[moves]
            theta = bs + walk_offsets(es + (sh if here is None else sh[here]), code, order, spacing)
            ll = unit_loglik(Xs, theta, kappa)
            prior = 0.5 * ((ds + sh) ** 2 * pr).sum(1)
            out += (ll if here is None else np.bincount(here, ll, minlength=out.size)) - prior
        return out

    def score(D, moves):
        g = np.zeros((moves.size, K1))
        Q = np.zeros((moves.size, K1, K1))
        for Xs, bs, es, ds, sg, at, pr in data:
            sel, here = _rows_of(moves, at, n_moves)
            sh = sg * D
            gu, iu = unit_score_info(Xs[sel], bs[sel] + walk_offsets(es[sel] + (sh if here is None else sh[here]),
                                                                     code, order, spacing),
                                     kappa, code, K1 + 1, order, spacing)
            g += sg * (_sum_rows(gu, here, moves.size) - (ds[moves] + sh) * pr[moves])
            Q += _sum_rows(iu, here, moves.size)
            Q[:, diag, diag] += pr[moves]
        return g, Q

    start = _start(data, kappa, code, order, spacing)
    if mode:
        step, _, _, accept = _newton(score, start, MAX_NEWTON, target)
    else:
        step, accept = laplace_mh(rng, target, score, start)
    for u, sg in parts:
        eta[u] += sg * step
        delta[u] += sg * step
    return accept


def scale_update_noncentred(rng, X, base, delta, groups, sigma, kappa, code, prior_scale: float, exponents=None,
                            width=SLICE_WIDTH, order: int = 1, prior_dof: int = 1, spacing=None, members=None,
                            steps: int = SLICE_STEPS, corrected: bool | str = False, reference=None, mix=None):
    r"""The step scales' update in (partially) non-centred coordinates: with exponents
    :math:`w_{u,k} \in [0, 1]` (default 1), the coordinates :math:`\tilde\epsilon_{u,k} =
    \delta_{u,k} / \sigma_k^{w_{u,k}}` held fixed and each :math:`\lambda_k = \log\sigma_k` in
    turn drawn by slice sampling (Neal 2003, :func:`slice_coordinate` with ``width`` and
    ``steps``) from its exact conditional in those coordinates,

    .. math:: F(\lambda) = -\frac{\lVert\sigma\rVert^2}{2 s^2} + \nu\sum_k \lambda_k
              + \sum_{u,k}\Big[(w_{u,k} - 1)\lambda_k - \frac{\delta_{u,k}^2}{2\sigma_k^2}\Big]
              + \sum_u \ell_u(\eta_u),\qquad \delta = \tilde\epsilon\,\sigma^{w},

    (the scaled-chi prior with ``prior_dof`` = :math:`\nu` and the log transform's Jacobian,
    module docstring; the increments' normal density with the
    Jacobian :math:`\sigma^{w}` of :math:`\tilde\epsilon \mapsto \delta`, the cells through the
    centred :math:`\eta`).  ``w = 1`` is the non-centred parametrization, ``w = 0`` the centred
    one; in between, the partially non-centred one of Papaspiliopoulos, Roberts and Skold (2007),
    whose exponents :math:`1/(1 + \sigma^2 I)` (``I`` the cells' information about the increment)
    make :math:`\tilde\epsilon` and :math:`\sigma` nearly independent, tract by tract -- some
    tracts pin their increments down, others do not.  Interleaved with the centred draw
    :func:`scale_draw` it makes the interweaving strategy of Yu and Meng (2011).  ``exponents``
    must not depend on the current scales or increments.  ``members``: the unit of every row of
    ``X`` and ``base`` (:func:`move_update`; None: one row per unit).  ``corrected``: the slice
    sampling runs on the surrogate of ``F`` with the cells' quadratic expansions
    (:func:`_surrogate`) and each coordinate's proposal is corrected to ``F``
    (:func:`update_log_scales_corrected`; the same invariant law, fewer evaluations of ``F``);
    ``reference``: log scales at which the map of the coordinates gives the increments to expand
    at (:func:`scale_update_transport`; None: the rows' empirical increments); ``mix``: the units'
    prior variance multipliers :math:`\lambda_u` (module docstring), which divide
    :math:`\delta_{u,k}^2/(2\sigma_k^2)` in ``F``.
    Returns the new scales and raw increments, the number of evaluations of ``F`` and the
    number of the ``K-1`` coordinates whose proposal was accepted (all, without ``corrected``)."""
    W = np.ones_like(delta) if exponents is None else np.broadcast_to(np.asarray(exponents, dtype=float), delta.shape)
    iw = _inverse_mix(mix, *delta.shape)
    eps = delta / sigma[None, :] ** W
    s2 = float(prior_scale) ** 2
    wsum = (W - 1.0).sum(axis=0)

    def target_with(loglik):
        def target(lam):
            sg = np.exp(lam)
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                d = eps * sg[None, :] ** W
                f = (loglik(centred(d, groups)) + _log_scale_prior(lam, s2, prior_dof)
                     + (wsum * lam).sum() - (d**2 * iw / (2 * sg[None, :] ** 2)).sum())
            return f if np.isfinite(f) else -np.inf
        return target

    lam, evals, accepted = _log_scale_moves(
        rng, target_with(_cells_loglik(X, base, kappa, code, order, spacing, members)),
        _surrogate(target_with, corrected, X, base, kappa, code, order, spacing, members, delta.shape, reference,
                   lambda ref: centred(eps * np.exp(ref)[None, :] ** W, groups)),
        np.log(sigma), width, steps, block=_block(corrected))
    sigma_new = np.exp(lam)
    return sigma_new, eps * sigma_new[None, :] ** W, evals, accepted


def update_log_scales(rng, target, lam, width=SLICE_WIDTH, steps: int = SLICE_STEPS, coords=None):
    """Every coordinate of the log step scales ``lam`` ``(K-1,)`` (or those in ``coords``, a
    choice that must not depend on the state), in random order, updated by
    slice sampling under the log density ``target`` (:func:`slice_coordinate` with ``width``,
    one or one per coordinate, and ``steps``): the second update of the scales'
    (:func:`scale_update_transport` and the others).  Returns the new point and the number of
    evaluations of ``target``."""
    lam = np.array(lam, dtype=float)
    f = target(lam)
    evals = 1
    widths = np.broadcast_to(np.asarray(width, dtype=float), lam.shape)
    for k in rng.permutation(lam.size if coords is None else np.asarray(coords, dtype=np.int64)):
        lam, f, n = slice_coordinate(rng, target, lam, k, f, widths[k], steps)
        evals += n
    return lam, evals


def update_log_scales_corrected(rng, target, surrogate, lam, width=SLICE_WIDTH, steps: int = SLICE_STEPS,
                                block: bool = False):
    r""":func:`update_log_scales` with the slice sampling run on a cheap ``surrogate`` of
    ``target`` and each coordinate's new point accepted by the Metropolis--Hastings test of the
    difference (delayed acceptance; Christen and Fox 2005): from :math:`\lambda`, the slice
    update of coordinate ``k`` under the surrogate :math:`S` proposes :math:`\lambda'`, accepted
    with probability :math:`\min\{1, \exp([F(\lambda') - S(\lambda')] - [F(\lambda) -
    S(\lambda)])\}`.  Slice sampling is reversible with respect to :math:`e^S` (Neal 2003), so
    :math:`e^{F(\lambda)} K_S(\lambda, d\lambda')\,\alpha = e^{S(\lambda)} K_S(\lambda,
    d\lambda') \min\{e^{F(\lambda) - S(\lambda)}, e^{F(\lambda') - S(\lambda')}\}` is
    symmetric: every coordinate's update leaves the exact ``target`` invariant whatever the
    surrogate, provided the surrogate is a fixed function during the update (it must not depend
    on ``lam``).  Its quality sets only the acceptance rate.  One evaluation of ``target`` per
    coordinate instead of one per slice step.

    ``block``: every coordinate's slice update under the surrogate, in a uniformly random order,
    then one test of the whole move, :math:`\min\{1, \exp([F(\lambda') - S(\lambda')] -
    [F(\lambda) - S(\lambda)])\}`: two evaluations of ``target`` per update, not one per
    coordinate.  The scan in a fixed order is not reversible, but its adjoint under :math:`e^S`
    is the scan in the reverse order (each coordinate's update is reversible), and a uniformly
    random order takes an order and its reverse with the same probability: the mixture over
    orders is reversible with respect to :math:`e^S`, and the test above makes it so with
    respect to :math:`e^F` (the argument of the single coordinate's test).  The log ratio of the
    test is the sum of the coordinates' ratios, so the whole move is refused more often than a
    single coordinate's.

    Returns the new point, the number of evaluations of ``target`` and the number of coordinates
    whose proposal was accepted (all or none with ``block``)."""
    lam = np.array(lam, dtype=float)
    f, s = target(lam), surrogate(lam)
    evals, accepted = 1, 0
    widths = np.broadcast_to(np.asarray(width, dtype=float), lam.shape)
    if block:
        new, s_new = lam, s
        for k in rng.permutation(lam.size):
            new, s_new, _ = slice_coordinate(rng, surrogate, new, k, s_new, widths[k], steps)
        f_new = target(new)
        if np.log(rng.random()) < (f_new - s_new) - (f - s):
            return new, 2, lam.size
        return lam, 2, 0
    for k in rng.permutation(lam.size):
        new, s_new, _ = slice_coordinate(rng, surrogate, lam, k, s, widths[k], steps)
        f_new = target(new)
        evals += 1
        if np.log(rng.random()) < (f_new - s_new) - (f - s):
            lam, f, s = new, f_new, s_new
            accepted += 1
    return lam, evals, accepted


def slice_coordinate(rng, target, lam, k, f, width: float = SLICE_WIDTH, steps: int = SLICE_STEPS):
    """One slice-sampling update (Neal 2003: stepping out from ``width`` at most ``steps - 1``
    times, split at random between the sides, then shrinkage) of coordinate ``k`` of ``lam``
    under the log density ``target`` (``f`` its value at ``lam``).  ``steps`` 1: the interval is
    ``width`` placed at random around ``lam[k]``, shrunk until a point lands in the slice (no
    evaluation spent on its ends).  Returns the new point, its log density and the number of
    evaluations."""
    level = f + np.log(rng.random())
    left = lam[k] - width * rng.random()
    right = left + width
    n_left = int(steps * rng.random()) if steps > 1 else 0
    evals = 0

    def at(v):
        t = lam.copy()
        t[k] = v
        return t

    for _ in range(n_left):
        evals += 1
        if target(at(left)) <= level:
            break
        left -= width
    for _ in range(steps - 1 - n_left):
        evals += 1
        if target(at(right)) <= level:
            break
        right += width
    while True:
        v = left + (right - left) * rng.random()
        fv = target(at(v))
        evals += 1
        if fv > level:
            return at(v), fv, evals
        if v < lam[k]:
            left = v
        else:
            right = v


def scale_update_transport(rng, X, base, delta, groups, sigma, kappa, code, prior_scale: float, width=SLICE_WIDTH,
                           order: int = 1, prior_dof: int = 1, spacing=None, steps: int = SLICE_STEPS,
                           corrected: bool | str = False, reference=None, mix=None):
    r"""The step scales' update along the increments' conditional: each :math:`\lambda_k =
    \log\sigma_k` in turn drawn by slice sampling with every unit's increments carried along the
    Gaussian approximation of their conditional given :math:`\sigma`.

    The approximation.  The cells inform unit ``u``'s centred increments :math:`\eta_u` like a
    Gaussian observation with mean :math:`e_u`, the unit's empirical fit
    (:func:`empirical_increments`), and precision :math:`\bar Q`, the units' mean Fisher-type
    information there (:func:`unit_score_info`; one matrix for all units keeps the update a
    few ``(K-1) x (K-1)`` operations, and lowest-level census units are drawn to similar sizes).
    A sibling group's centred increments :math:`\eta_g` (``J x (K-1)``, columns summing to 0)
    have the prior :math:`N(0, \sigma_k^2)` on ``J - 1`` orthonormal contrasts per column, so
    approximately

    .. math:: \eta_g \approx (C e_g)\,\bar Q P^{-1} + \Xi_g R^{-1},\qquad
              P = \bar Q + \mathrm{diag}(\sigma^{-2}) = R R^\top,

    ``C`` the centring, :math:`\Xi_g` centred and standard normal on its contrasts.  The
    coordinates.  Hold :math:`\Xi_g = (\eta_g - (C e_g)\bar Q P^{-1}) R` (centred, since the
    maps act on the columns and ``C`` on the rows) and :math:`\zeta_g = \bar\delta_g/\sigma` (the
    group's mean raw increment, informed by the prior only) fixed: a bijection for every
    :math:`\sigma`, with Jacobian :math:`|R|^{-(J_g-1)}\prod_k\sigma_k` per group.  Slice
    sampling :math:`\lambda_k` from

    .. math:: F(\lambda) = -\frac{\lVert\sigma\rVert^2}{2s^2} + \nu\sum_k\lambda_k
              - \sum_{u,k}\Big[\frac{\delta_{u,k}^2}{2\sigma_k^2} + \lambda_k\Big]
              - (U - G)\log|R| + G\sum_k \lambda_k + \sum_u\ell_u(\eta_u)

    (``U`` units in ``G`` groups; :math:`\nu` = ``prior_dof``, module docstring) is an exact
    Gibbs update in those coordinates whatever the approximation's quality.  When it is good, a
    change of :math:`\sigma_k` moves the increments the way their conditional does: where the
    cells pin them down they stay, where they do not they are rescaled (the data-driven partial
    non-centring of Papaspiliopoulos, Roberts and Skold 2007, with a location shift), and the
    neighbouring increments of a walk, which the cells identify only through their sums, move
    together -- ``F`` is then close to :math:`\sigma`'s marginal.  Without groups (no centring)
    :math:`\eta_u = e_u\bar Q P^{-1} + \Xi_u R^{-1}` with Jacobian :math:`|R|^{-U}`.  ``width``:
    the slice's initial width, one or one per scale (a constant of the chain;
    :class:`~privinfer.pymc.WalkGibbs` tunes it during warm-up only); ``steps``: the stepping
    out's limit (:func:`slice_coordinate`); ``corrected``: slice sampling on ``F`` with
    :math:`\sum_u\ell_u` replaced by the rows' quadratic expansions (:func:`row_tail_expansions`,
    :func:`~privinfer.pymc.dm_rows.rows_quadratic`), each proposal then accepted by the exact test of
    :func:`update_log_scales_corrected`: the same law, one evaluation of ``F`` per scale
    instead of one per slice step; ``reference``: log scales :math:`\lambda_0`, the
    expansions then at :math:`\eta(\lambda_0, \Xi)` (fixed while :math:`\Xi` is held; None:
    at the empirical increments, which the prior shrinks; 40 Kentucky counties: the
    correction's sd 0.017 with :math:`\lambda_0` 0.3 off the current scales, 0.31 without,
    99.6% and 89% accepted).  Returns the new scales and raw increments, the evaluations of ``F``
    and the accepted coordinates (all without ``corrected``); ``mix`` is refused (unequal variances)."""
    _refuse_mix(mix)
    U, K1 = delta.shape
    e, Q = row_fits(X, base, kappa, code, K1, order, spacing)
    Qbar = Q.mean(axis=0)
    s2 = float(prior_scale) ** 2
    if groups is None:
        G, contrasts, mean, gidx = 0, U, None, None
    else:
        gidx = np.asarray(groups, dtype=np.int64)
        mean, J = group_means(delta, gidx)
        G = int(np.count_nonzero(J))
        contrasts = U - G
        e = centred(e, gidx)

    def parts(lam):
        R = np.linalg.cholesky(Qbar + np.diag(np.exp(-2.0 * lam)))
        Rinv = np.linalg.inv(R)
        return Qbar @ Rinv.T @ Rinv, Rinv, R, np.log(np.diag(R)).sum()

    lam = np.log(np.asarray(sigma, dtype=float)).copy()
    eta = delta - mean[gidx] if mean is not None else np.array(delta, dtype=float)
    A, _, R, _ = parts(lam)
    xi = (eta - e @ A) @ R
    nu = (mean / np.exp(lam)[None, :])[gidx] if mean is not None else None    # zeta_g, per unit

    def state(lv):
        A, Rinv, _, logdet = parts(lv)
        et = e @ A + xi @ Rinv
        if nu is None:
            return et, et, -contrasts * logdet
        return et, et + nu * np.exp(lv)[None, :], -contrasts * logdet + G * lv.sum()

    def target_with(loglik):
        def target(lv):
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                try:
                    et, d, jac = state(lv)
                except np.linalg.LinAlgError:
                    return -np.inf
                sg = np.exp(lv)
                f = (loglik(et) + _log_scale_prior(lv, s2, prior_dof) - (d * d / (2 * sg * sg)[None, :]).sum()
                     - U * lv.sum() + jac)
            return f if np.isfinite(f) else -np.inf
        return target

    lam, evals, accepted = _log_scale_moves(rng, target_with(_cells_loglik(X, base, kappa, code, order, spacing)),
                                            _surrogate(target_with, corrected, X, base, kappa, code, order, spacing,
                                                       None, delta.shape, reference, lambda ref: state(ref)[0]),
                                            lam, width, steps, block=_block(corrected))
    return np.exp(lam), state(lam)[1], evals, accepted


def scale_update_unit_transport(rng, X, base, delta, groups, sigma, kappa, code, prior_scale: float,
                                width=SLICE_WIDTH, order: int = 1, prior_dof: int = 1, spacing=None, members=None,
                                steps: int = SLICE_STEPS, corrected: bool | str = False, reference=None, loglik=None,
                                info_weight=None, coords=None, mix=None):
    r"""The step scales' update along each unit's own Gaussian approximation of its raw
    increments' conditional: :func:`scale_update_transport` with one information matrix per unit
    instead of the units' mean, for units that differ in size by orders of magnitude (the
    counties of a state, whose walks enter all their tracts' cells: ``members``).

    The approximation.  Unit ``u``'s rows inform its increments like Gaussian observations: row
    ``r`` with mean :math:`\hat e_r` and precision :math:`I_r` (:func:`row_fits`), so
    :math:`\ell_u(\eta_u) \approx \eta_u^\top b_u - \tfrac12\eta_u^\top Q_u\eta_u`,
    :math:`Q_u = c_u\sum_r I_r`, :math:`b_u = c_u\sum_r I_r\hat e_r`, the sums over the unit's
    rows.  The cells see the centred increments :math:`\eta_u = \delta_u - \bar\delta_g`, whose
    ``J - 1`` contrasts per sibling group carry the information and whose mean does not; the
    factor :math:`c_u = 1 - 1/J_{g(u)}` spreads that loss over the group's units (an only child's
    cells say nothing about its raw increments: :math:`c_u = 0`; no groups: 1).  With the prior
    :math:`N(0, \sigma_k^2)`, unit by unit

    .. math:: \delta_u \approx m_u + \xi_u R_u^{-1},\qquad P_u = Q_u + \mathrm{diag}(\sigma^{-2})
              = R_u R_u^\top,\quad m_u = P_u^{-1} b_u,

    :math:`\xi_u` standard normal.  The coordinates.  Hold :math:`\xi_u = (\delta_u - m_u) R_u`
    fixed, a bijection for every :math:`\sigma` with Jacobian :math:`\prod_u |R_u|^{-1}`, and
    slice sample each :math:`\lambda_k = \log\sigma_k` (:func:`slice_coordinate`) from

    .. math:: F(\lambda) = -\frac{\lVert\sigma\rVert^2}{2s^2} + \nu\sum_k\lambda_k
              - \sum_{u,k}\Big[\frac{\delta_{u,k}^2}{2\sigma_k^2} + \lambda_k\Big]
              - \sum_u\log|R_u| + \sum_u\ell_u(\eta_u),

    an exact Gibbs update in those coordinates whatever the approximation's quality (the map
    depends on the cells and the base profiles only, which the update holds).  Where a unit's
    information is large against :math:`\sigma^{-2}` its increments stay when :math:`\sigma`
    moves, where it is small they are rescaled: the partial non-centring of Papaspiliopoulos,
    Roberts and Skold (2007), unit by unit and with the neighbouring increments that the cells
    identify only through their sums moving together.  Costs per evaluation of ``F``: ``U``
    Cholesky factorizations of ``(K-1) x (K-1)`` matrices and their triangular solves
    (:func:`~privinfer.pymc.unit_gauss.transport`) besides the cells' log likelihood.
    Arguments and returns as for :func:`scale_update_transport`, with ``members`` as for
    :func:`move_update`.  The cells carried along (``loglik``, a
    :meth:`~privinfer.pymc.walk_carry.CarriedCells.loglik` of the centred increments): ``F``'s
    cell term :math:`\sum_u\ell_u` is replaced by it, ``info_weight`` ``(R,)`` scales each
    row's information but not :math:`b_u` (a row's cells carried by fractions ``r`` inform its
    increments about :math:`1 - r` times as much; ``X`` then holds cells that do not move with
    the increments, e.g. :meth:`~privinfer.pymc.walk_carry.CarriedCells.cells_at` the base
    profiles, whose fit is about :math:`1 - r` times the increments, so that :math:`b_u` keeps
    the fit's scale) and ``corrected`` must be False; ``coords``: the coordinates to
    update (default all, in random order; a choice that must not depend on the state); ``mix``:
    the units' prior variance multipliers :math:`\lambda_u` (module docstring), the prior
    precision of unit ``u`` then :math:`\mathrm{diag}(\sigma^{-2})/\lambda_u` in :math:`P_u` and
    ``F`` (the Jacobian and the map per unit as before)."""
    U, K1 = delta.shape
    iw = _inverse_mix(mix, U, K1)
    e_hat, info = row_fits(X, base, kappa, code, K1, order, spacing)
    b = np.einsum("rkl,rl->rk", info, e_hat)
    if info_weight is not None:
        info = info * np.asarray(info_weight, dtype=float)[:, None, None]
    if members is not None:
        info, b = scatter_rows(info, members, U), scatter_rows(b, members, U)
    if groups is not None:
        gidx = np.asarray(groups, dtype=np.int64)
        c = 1.0 - 1.0 / np.bincount(gidx)[gidx]
        info, b = info * c[:, None, None], b * c[:, None]
    s2 = float(prior_scale) ** 2
    lam = np.log(np.asarray(sigma, dtype=float)).copy()
    xi = transport_coordinates(info, b, delta, np.exp(-2.0 * lam)[None, :] * iw)

    def state(lv):
        d, logdet = transport(info, b, xi, np.exp(-2.0 * lv)[None, :] * iw)
        return d, -logdet

    def target_with(loglik):
        def target(lv):
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                try:
                    d, jac = state(lv)
                except np.linalg.LinAlgError:
                    return -np.inf
                sg = np.exp(lv)
                f = (loglik(centred(d, groups)) + _log_scale_prior(lv, s2, prior_dof)
                     - (d * d * iw / (2 * sg * sg)[None, :]).sum() - U * lv.sum() + jac)
            return f if np.isfinite(f) else -np.inf
        return target

    if loglik is not None and corrected:
        raise ValueError("the scale update with the cells carried along (loglik=) has no surrogate: corrected=False")
    lam, evals, accepted = _log_scale_moves(
        rng, target_with(_cells_loglik(X, base, kappa, code, order, spacing, members) if loglik is None else loglik),
        _surrogate(target_with, corrected, X, base, kappa, code, order, spacing, members, delta.shape, reference,
                   lambda ref: centred(state(ref)[0], groups)),
        lam, width, steps, coords, block=_block(corrected))
    return np.exp(lam), state(lam)[0], evals, accepted


def _cells_loglik(X, base, kappa, code, order, spacing, members=None):
    r"""The cells' log likelihood :math:`\sum_r \ell_r` as a function of the (centred)
    increments ``(U, K1)`` (``members``: each row's unit; None: one row per unit): the cell term
    of every scale update's target."""
    def loglik(eta):
        off = walk_offsets(eta, code, order, spacing)
        return unit_loglik(X, base + (off if members is None else off[members]), kappa).sum()
    return loglik


def _surrogate(target_with, corrected: bool, X, base, kappa, code, order, spacing, members, shape, reference,
               increments_at):
    r"""A scale update's target with the cells' log likelihood replaced by its rows' quadratic
    expansions :math:`\sum_r g_r^\top d_r - \tfrac12 d_r^\top I_r d_r`, :math:`d_r = \eta_{u(r)} -
    a_r` (in the information's factored form: :func:`row_tail_expansions`,
    :func:`~privinfer.pymc.dm_rows.rows_quadratic`, one pass over the increments per row) at the
    units' centred increments :math:`a` = ``increments_at(reference)`` ``(U, K1)`` (the update's
    map of its held coordinates at the ``reference`` log scales; ``reference`` None: at the rows'
    empirical increments): ``target_with`` applied to that function; None unless ``corrected``
    (the reference is checked either way).  ``shape``: the raw increments' ``(U, K1)``."""
    K1 = shape[1]
    ref = _reference(reference, K1)
    if not corrected:
        return None
    at = None if ref is None else increments_at(ref)
    rows = None if at is None else (at if members is None else at[np.asarray(members, dtype=np.int64)])
    e_hat, score, n_eff, tails = row_tail_expansions(X, base, kappa, code, K1, order, spacing, rows)
    mem = np.arange(e_hat.shape[0]) if members is None else np.asarray(members, dtype=np.int64)
    h = np.ones(K1) if spacing is None else np.asarray(spacing, dtype=float)
    return target_with(lambda eta: rows_quadratic(eta, e_hat, score, n_eff, tails, order, h, mem))


def _block(corrected) -> bool:
    """Whether a scale update's ``corrected`` asks for one test of the whole move (``"block"``,
    :func:`update_log_scales_corrected`) rather than one per coordinate (True); a one-line error
    for anything else than False, True or ``"block"``."""
    if isinstance(corrected, str):
        if corrected != "block":
            raise ValueError("corrected must be False, True or 'block'")
        return True
    if not isinstance(corrected, (bool, np.bool_)):
        raise ValueError("corrected must be False, True or 'block'")
    return False


def _reference(reference, K1: int):
    """The surrogate's reference log scales ``(K1,)`` (finite), or None."""
    if reference is None:
        return None
    ref = np.asarray(reference, dtype=float)
    if ref.shape != (K1,) or not np.all(np.isfinite(ref)):
        raise ValueError(f"reference must be {K1} finite log scales")
    return ref


def _log_scale_moves(rng, target, surrogate, lam, width, steps, coords=None, block: bool = False):
    """The scale updates' slice moves of the log scales: on ``target`` itself
    (:func:`update_log_scales`; ``surrogate`` None, every coordinate's move counted as accepted)
    or on the surrogate with each coordinate's proposal corrected
    (:func:`update_log_scales_corrected`).  Returns the new point, the evaluations of ``target``
    and the accepted proposals (``coords``: the coordinates to update, None: all; the corrected
    update updates all; ``block``: the corrected update's one test of the whole move)."""
    if surrogate is None:
        lam, evals = update_log_scales(rng, target, lam, width, steps, coords)
        return lam, evals, lam.size if coords is None else len(coords)
    return update_log_scales_corrected(rng, target, surrogate, lam, width, steps, block=block)


def _refuse_mix(mix):
    """The error of :func:`scale_update_transport` for a walk with mixed prior variances."""
    if mix is not None:
        raise ValueError("scale_update_transport needs equal prior variances within a sibling group; "
                         "use scale_update_unit_transport for a walk with mixed variances (mix=...)")


def _inverse_mix(mix, U: int, K1: int):
    """``1/lambda`` as ``(U, 1)`` or ``(U, K1)`` (``mix`` None: 1.0)."""
    return 1.0 if mix is None else 1.0 / _mix_columns(checked_mix(mix, U, K1))


def _log_scale_prior(lam, s2: float, prior_dof: int = 1) -> float:
    r"""The step scales' log prior in :math:`\lambda = \log\sigma`, the log transform's Jacobian
    included, up to a constant: :math:`\nu\sum_k\lambda_k - \sum_k e^{2\lambda_k}/(2s^2)` for
    the scaled chi with ``prior_dof`` = :math:`\nu` degrees of freedom and ``s2`` =
    :math:`s^2` (module docstring); the prior term of both slice updates of the scales."""
    lam = np.asarray(lam, dtype=float)
    return prior_dof * lam.sum() - np.exp(2.0 * lam).sum() / (2.0 * s2)


def scale_draw(rng, delta, prior_scale: float, prior_dof: int = 1, mix=None):
    r"""The step scales' exact conditional draw given the raw increments ``(U, K-1)`` under the
    scaled-chi prior with ``prior_dof`` degrees of freedom (module docstring; ``mix``: the units'
    prior variance multipliers, :math:`b = \sum_u\delta_{u,k}^2/\lambda_u`)."""
    U = delta.shape[0]
    a = 1.0 / float(prior_scale) ** 2
    b = (delta**2 * _inverse_mix(mix, *delta.shape)).sum(axis=0)
    return np.sqrt(gig_draw(rng, (prior_dof - U) / 2.0, a, np.atleast_1d(b)))


#: Rounds of :func:`gig_draw`'s rejection sampler before the draws still refused are made by
#: SciPy's generator (which exact sampler ends the loop does not change the law).
GIG_ROUNDS = 20


def gig_draw(rng, p: float, a: float, b):
    r"""Independent draws from the generalized inverse Gaussian :math:`\mathrm{GIG}(p, a, b_j)`,
    density :math:`\propto x^{p-1} e^{-(a x + b_j/x)/2}` on :math:`x > 0`, one per entry of ``b``.

    For :math:`p < 0` (the step scales' conditional with more units than the prior's degrees of
    freedom) by rejection from the inverse gamma :math:`\mathrm{IG}(-p, b_j/2)`, density
    :math:`\propto x^{p-1} e^{-b_j/(2x)}`: a proposal :math:`x` is accepted with probability
    :math:`e^{-a x/2} \le 1`, the ratio of the two densities up to a constant, so an accepted
    draw has the GIG law exactly (von Neumann's rejection); its acceptance rate is
    :math:`E[e^{-a x/2}]` under the proposal, near 1 where the increments, not the prior, set
    the scale (:math:`a\,b_j/(-2p) \ll 1`).  Draws still refused after :data:`GIG_ROUNDS`
    rounds, and every draw for :math:`p \ge 0` or :math:`b_j \le 0`, are SciPy's
    (``scipy.stats.geninvgauss``, Hormann and Leydold 2014), an exact sampler of the same law:
    the mixture of the two is that law again.  Several hundred times faster than SciPy's
    generator alone for the Kentucky tracts' 22 scales."""
    b = np.asarray(b, dtype=float)
    out = np.empty(b.shape)
    todo = np.flatnonzero(b > 0) if p < 0 else np.zeros(0, dtype=np.int64)
    rest = np.setdiff1d(np.arange(b.size), todo)
    for _ in range(GIG_ROUNDS):
        if todo.size == 0:
            break
        x = 0.5 * b[todo] / rng.gamma(-p, size=todo.size)
        ok = rng.random(todo.size) < np.exp(-0.5 * a * x)
        out[todo[ok]] = x[ok]
        todo = todo[~ok]
    rest = np.concatenate([rest, todo])
    if rest.size:
        out[rest] = np.atleast_1d(geninvgauss.rvs(p, np.sqrt(a * b[rest]), scale=np.sqrt(b[rest] / a),
                                                  random_state=rng))
    return out
