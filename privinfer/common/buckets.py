r"""Histograms over bucketizations: query matrices of coarse histograms of a fine one.

Xiao, Wang, Zhang and Kifer, *Answering Private Linear Queries Adaptively using the Common
Mechanism* (PVLDB), Sec. 7.5 (Census application: age/gender histograms).  A bucketization
of ``0..n-1`` by edges ``e_0 = 0 < e_1 < ... < e_k = n`` is the query matrix whose row ``j``
sums the cells ``[e_j, e_{j+1})``; coarser bucketizations are linear combinations of finer
ones, which makes the analyses nested (Sec. 6.2).  :data:`DHC_AGE_EDGES` holds the age
buckets of the 2020 DHC sex-by-age tables (Sec. 7.5.1).
"""

from __future__ import annotations

import numpy as np

__all__ = ["DHC_AGE_EDGES", "bucket_matrix"]


#: Age bucket edges of the 2020 DHC sex-by-age tables (Sec. 7.5.1), over ages 0..102.
DHC_AGE_EDGES = {
    "Total": (0, 103),
    "Age4": (0, 18, 45, 65, 103),
    "Age9": (0, 5, 18, 25, 35, 45, 55, 65, 75, 103),
    "Age23": (0, 5, 10, 15, 18, 20, 21, 22, 25, 30, 35, 40, 45, 50, 55, 60, 62, 65, 67, 70, 75, 80, 85, 103),
}


def bucket_matrix(edges, groups: int = 1) -> np.ndarray:
    """Query matrix of a histogram over buckets ``[edges[j], edges[j+1])`` of ``0..edges[-1]-1``.

    With ``groups > 1`` the data vector is group-major (e.g. sex-by-age: ``x[g * n + a]``) and
    the result is ``kron(I_groups, bucket rows)``: one histogram per group.
    """
    e = np.asarray(edges)
    if e.ndim != 1 or len(e) < 2 or e[0] != 0 or np.any(np.diff(e) <= 0) or not np.all(e == np.round(e)):
        raise ValueError("edges must be increasing integers starting at 0")
    n = int(e[-1])
    B = np.zeros((len(e) - 1, n))
    for j in range(len(e) - 1):
        B[j, int(e[j]): int(e[j + 1])] = 1.0
    if not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError("groups must be a positive integer")
    return np.kron(np.eye(groups), B)
