r"""Rescaled free coordinates: a variable's law unchanged, NUTS's starting geometry improved.

PyMC's NUTS starts its adaptation with the identity mass matrix and keeps it for the first
adaptation window (101 iterations;
:class:`pymc.step_methods.hmc.quadpotential.QuadPotentialDiagAdapt`).
When the posterior sds of the free coordinates span two orders of magnitude, its step size
falls to the smallest of them and every early trajectory runs to the maximum tree depth.
:class:`Rescaled`, chained after a variable's default transform (``pm.HalfNormal(...,
transform=Rescaled(h))`` applies ``log`` then ``/ h``), makes the free coordinate
:math:`u = T(\theta)/h` for a constant ``h`` of the order of :math:`T(\theta)`'s posterior sd.
The change of variables carries its Jacobian (:math:`\log h` per coordinate), so the model's
density in :math:`\theta` -- prior, posterior, draws -- is exactly the same for every ``h``;
only where NUTS's identity mass matrix fits changes (the diagonal preconditioning of Neal
2011, "MCMC using Hamiltonian dynamics", Sec. 4.1, fixed from the data instead of learned).
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pymc.logprob.transforms import Transform

__all__ = ["Rescaled"]


class Rescaled(Transform):
    """The free coordinate divided by a constant ``scale`` > 0 (a number, or an array
    broadcasting against the transformed value)."""

    name = "rescaled"

    def __init__(self, scale):
        scale = np.asarray(scale, dtype=float)
        if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            raise ValueError("Rescaled needs finite scales > 0")
        self.scale = scale

    def forward(self, value, *inputs):
        return value / self.scale

    def backward(self, value, *inputs):
        return value * self.scale

    def log_jac_det(self, value, *inputs):
        return pt.broadcast_to(np.log(self.scale), value.shape)
