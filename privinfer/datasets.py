"""Data sets: small published tables embedded here, loaders for files read from disk.

Files are never shipped with the package; loaders take a path, or read the directory named
by the ``PRIVINFER_DATA`` environment variable.
"""

from __future__ import annotations

import numpy as np

__all__ = ["delinquent_children", "DELINQUENT_COUNTIES", "DELINQUENT_EDUCATION"]

DELINQUENT_COUNTIES = ("Alpha", "Beta", "Gamma", "Delta")
DELINQUENT_EDUCATION = ("Low", "Medium", "High", "Very High")


def delinquent_children() -> np.ndarray:
    """Delinquent children by county (rows) and education of the household head (columns).

    FCSM (2005) Statistical Policy Working Paper 22, used in the integer subspace DP paper
    (Dharangutte, Gao, Gong, Yu 2023, Sec. 5).  Row totals 20, 55, 25, 35; column totals
    50, 35, 30, 20; grand total 135.  (The paper's text extraction prints 35 for Gamma's
    row total; its cells sum to 25 and the grand total 135 confirms 25.)
    Returns a fresh (4, 4) int64 array (rows in ``DELINQUENT_COUNTIES`` order, columns in
    ``DELINQUENT_EDUCATION`` order).
    """
    return np.array(
        [[15, 1, 3, 1], [20, 10, 10, 15], [3, 10, 10, 2], [12, 14, 7, 2]], dtype=np.int64
    )
