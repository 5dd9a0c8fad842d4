"""The result of a least-squares estimate of cells: point, standard errors, Gaussian intervals."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["GLSEstimate"]


@dataclass(frozen=True)
class GLSEstimate:
    """GLS point estimate ``x``, its standard errors ``se`` (square roots of the diagonal of
    the covariance) and the ``level`` Gaussian intervals ``[lower, upper]``."""

    x: np.ndarray
    se: np.ndarray
    level: float
    lower: np.ndarray
    upper: np.ndarray

    @property
    def negative_lower(self) -> np.ndarray:
        """Cells whose interval reaches below zero."""
        return self.lower < 0
