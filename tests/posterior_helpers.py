"""Exact posteriors by enumerating small fibres, and MCMC-vs-exact comparisons."""

from __future__ import annotations

import itertools

import numpy as np
from scipy.special import logsumexp


def enumerate_fibre(inv, t):
    """All non-negative integer x with C x = t (C a 0/1 matrix covering every cell)."""
    C = inv.matrix.toarray() if hasattr(inv.matrix, "toarray") else np.asarray(inv.matrix)
    C = np.round(C).astype(int)
    t = np.round(np.asarray(t)).astype(int)
    n = C.shape[1]
    ub = [min(t[r] for r in range(C.shape[0]) if C[r, i]) for i in range(n)]
    out = []
    for x in itertools.product(*[range(u + 1) for u in ub]):
        if np.array_equal(C @ np.array(x), t):
            out.append(x)
    return np.array(out, dtype=np.int64)


def exact_marginals(points, logw):
    """Posterior marginal pmf of every cell: list of dict value -> prob, and the means."""
    w = np.exp(logw - logsumexp(logw))
    marg = []
    for i in range(points.shape[1]):
        vals = np.unique(points[:, i])
        marg.append({int(v): float(w[points[:, i] == v].sum()) for v in vals})
    return marg, w @ points


def marginal_tv_tolerance(p: dict, ess: float, z: float = 4.0) -> float:
    """Tolerance on TV(empirical, exact) for one cell's marginal.

    With ESS effective draws, each empirical frequency has sd ~ sqrt(p(1-p)/ESS); TV is half
    the sum of absolute deviations, so bounding every deviation by z sd gives
    0.5 * z * sum_k sqrt(p_k (1 - p_k) / ESS).
    """
    ps = np.array(list(p.values()))
    return 0.5 * z * float(np.sum(np.sqrt(ps * (1 - ps) / ess)))


def empirical_tv(draws: np.ndarray, p: dict) -> float:
    vals, counts = np.unique(draws, return_counts=True)
    emp = dict(zip(vals.tolist(), (counts / counts.sum()).tolist()))
    keys = set(emp) | set(p)
    return 0.5 * sum(abs(emp.get(k, 0.0) - p.get(k, 0.0)) for k in keys)
