r"""Where the census model's chains start: the top level's log profile, the overdispersion and
the middle levels' departures from the GLS estimate (:mod:`privinfer.census.model`'s docstring
says why PyMC's defaults matter).  Starting values for a sampler, not priors: the model's laws do not
depend on them.
"""

from __future__ import annotations

import numpy as np

from ..pymc.dm_rows import scatter_rows

__all__ = ["start_profile", "start_overdispersion", "start_departures"]


def start_profile(hier, est) -> np.ndarray:
    r"""The top level's log profile's starting value: the log of the GLS estimates pooled over the
    whole frame (1/2 added), less its mean (the profile is zero-sum).  PyMC would start it at 0,
    a flat profile over the attribute combinations, and the first updates of the walks then
    carry the whole file's age profile: on all Kentucky tracts the walks of the four counties
    of one tract ran away in the warm-up's first iterations (increments up to 9 against a
    posterior within 0.5), with cells at 0 in one chain for 300 iterations.  On 8 counties and
    those four, starting the overdispersion near its posterior alone did not stop it (increments
    up to 6.5); starting the profile here too did (within 0.8)."""
    pooled = np.bincount(np.asarray(hier.combination, dtype=np.int64), weights=np.maximum(np.asarray(est.x, float), 0),
                         minlength=hier.d)
    logs = np.log(pooled + 0.5)
    return logs - logs.mean()


def start_overdispersion(hier, est, axis) -> float:
    r"""A starting value of the overdispersion :math:`\phi` by the method of moments (a start for
    the sampler, not a prior).  Within every category ``c`` of ``axis`` (every age group; the
    whole unit when there is no such axis or its categories hold one cell each), the
    Dirichlet-multinomial splits a lowest-level unit's category total ``A`` among the category's
    ``m`` cells as a Dirichlet-multinomial of concentration :math:`\beta = \kappa P_c`
    (:math:`P_c = A/N`), so with the shares ``q`` of the same split in the unit's siblings
    (their pooled GLS estimates, the unit itself left out)

    .. math:: E\sum_{i \in c} \frac{(x_i - q_i A)^2}{q_i} \approx \Big(1 + \frac{A}{A'}\Big)
              \Big[A (m - 1)\frac{A + \beta}{1 + \beta} + \nu_c\Big],

    :math:`A'` the siblings' category total (the error of their shares) and :math:`\nu_c` the
    GLS noise of the left side from the estimates' standard errors (covariances left out).
    Summed over the units and categories with siblings, the right side decreases in
    :math:`\kappa` from :math:`\sum A^2(m - 1)` to the multinomial's :math:`\sum A(m - 1)`;
    bisection in :math:`\log\kappa` solves it, and :math:`\phi = \kappa^{-1/2}` is clipped
    to ``[1e-4, 1]`` (0.3, the prior's scale, when no unit has siblings).  Why: PyMC would start
    :math:`\phi` at that scale (:math:`\kappa = 11`), where the cells barely inform the walks;
    on all Kentucky tracts (posterior :math:`\kappa \approx 5{,}400`) the warm-up spent about
    100 iterations getting there, the free coordinate's rescaling (the model's coordinate scales)
    fitting the posterior, not the way from so far."""
    grid = hier.leaf_order()
    xh = np.maximum(np.asarray(est.x, float)[grid], 0.0)
    v = np.asarray(est.se, float)[grid] ** 2
    U, d = grid.shape
    cat = np.zeros(d, dtype=np.int64) if axis is None else np.unravel_index(np.arange(d), hier.shape)[axis]
    if np.bincount(cat).max() < 2:
        cat = np.zeros(d, dtype=np.int64)
    K = int(cat.max()) + 1
    par = hier.leaf_ancestors(hier.depth - 2) if hier.depth >= 3 else np.zeros(U, dtype=np.int64)
    pooled = scatter_rows(xh, par, int(par.max()) + 1)
    rest = pooled[par] - xh
    by_cat = np.zeros((K, d))
    by_cat[cat, np.arange(d)] = 1.0
    A, A_rest, V = xh @ by_cat.T, rest @ by_cat.T, v @ by_cat.T             # (U, K)
    with np.errstate(invalid="ignore", divide="ignore"):
        q = rest / A_rest[:, cat]
        T = (((xh - q * A[:, cat]) ** 2) / q) @ by_cat.T
        noise = ((v * (1 - q) ** 2 + q**2 * (V[:, cat] - v)) / q) @ by_cat.T
    m = by_cat.sum(axis=1)[None, :]
    ok = np.isfinite(T) & np.isfinite(noise) & (A_rest > 0) & (A > 0) & (m >= 2)
    if not ok.any():
        return 0.3
    P = (A / np.maximum(xh.sum(axis=1), 1.0)[:, None])[ok]
    A, m = A[ok], np.broadcast_to(m, ok.shape)[ok]
    target = (T[ok] / (1.0 + A / A_rest[ok]) - noise[ok]).sum()

    def excess(log_kappa):
        beta = np.exp(log_kappa) * P
        return (A * (m - 1) * (A + beta) / (1 + beta)).sum() - target

    lo, hi = np.log(1.0), np.log(1e8)
    if excess(hi) >= 0:
        return 1e-4
    if excess(lo) <= 0:
        return 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
    return float(np.clip(np.exp(-0.5 * lo), 1e-4, 1.0))


def start_departures(counts, var, parent, columns, K: int):
    r"""Starting values of a middle level's departure scales :math:`\tau_k` and standardized
    departures :math:`z` ``(U, K, m)`` in the form with a walk along one attribute (``K``
    categories; ``m`` combinations of the other attributes, over which ``z`` sums to zero), by the
    method of moments on the units' GLS tables: ``counts`` ``(U, d)`` (positive) with their log
    counts' sampling variances ``var``, ``parent`` ``(U,)`` the units' parents, ``columns``
    ``(d,)`` each attribute combination's position ``k * m + j`` in ``z``'s last two axes.  Under the model the contrasts :math:`c_{u,k,j} = \log n_{u,k,j} -
    \frac1m\sum_{j'}\log n_{u,k,j'}` vary between siblings with variance :math:`t_k =
    \tau_k^2 (1 - 1/m)` around their parent's, each observed with noise of variance about
    :math:`s_{u,k,j} = (1 - 1/m)\,v_{u,k,j}` (``v`` the log counts' variance); the units
    differ in size by orders of magnitude, so :math:`t_k` is the DerSimonian--Laird estimate
    (weights :math:`w = 1/s`, sibling groups' weighted means :math:`\bar c_g`)

    .. math:: \hat t_k = \max\Big(\frac{\sum_{j}\sum_u w\,(c - \bar c_g)^2 - m\sum_g (n_g - 1)}
              {\sum_j\sum_g \big(\sum_{u \in g} w - \sum_{u \in g} w^2 / \sum_{u \in g} w\big)},
              \ 10^{-4}(1 - 1/m)\Big),\qquad
              z = \frac{c - \bar c_g}{\hat\tau_k}\,\frac{\hat t_k}{\hat t_k + s}

    (the contrasts shrunk by their reliability, then centred over ``j``).  Why: PyMC would start
    every :math:`\tau_k` at the prior's scale and ``z`` at 0; on all Kentucky tracts (posterior
    :math:`\tau_k` about 0.005-0.1 for the counties' sex contrasts) NUTS spent its first 50
    iterations travelling from there, at tree depths of 7."""
    U, d = counts.shape
    m = d // K
    parent = np.asarray(parent, dtype=np.int64)
    size = np.bincount(parent)
    if m < 2 or not (size > 1).any():
        return np.full(K, 1.0), np.zeros((U, K, m))
    logs = np.zeros((U, K * m))
    s = np.zeros((U, K * m))
    logs[:, columns] = np.log(counts)
    s[:, columns] = (1.0 - 1.0 / m) * np.asarray(var, dtype=float)
    logs = logs.reshape(U, K, m)
    s = s.reshape(U, K, m)
    c = (logs - logs.mean(axis=2, keepdims=True)).reshape(U, -1)
    w = 1.0 / s.reshape(U, -1)
    sw = scatter_rows(w, parent, size.size)
    c = c - (scatter_rows(w * c, parent, size.size) / sw)[parent]          # less the weighted sibling mean
    q = (w * c**2).reshape(U, K, m).sum(axis=(0, 2))
    den = (sw - scatter_rows(w**2, parent, size.size) / sw).reshape(-1, K, m).sum(axis=(0, 2))
    t = np.maximum((q - m * (size - 1).sum()) / den, 1e-4 * (1.0 - 1.0 / m))
    tau = np.sqrt(t / (1.0 - 1.0 / m))
    c = c.reshape(U, K, m)
    z = c / tau[None, :, None] * (t[None, :, None] / (t[None, :, None] + s))
    return tau, z - z.mean(axis=2, keepdims=True)
