"""Per-model metadata the glue records for the lattice step methods.

A ``pm.Model`` carries a ``privinfer`` dict (attribute ``_privinfer``) with one
:class:`LatticeLatentInfo` per integer latent made by :func:`lattice_latent` and the list of
releases observed through :func:`observe` for each latent.  Step methods read it when they
are built (in the main process), so nothing here is global state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["CellEffectsInfo", "LatticeLatentInfo", "ObservedRelease", "WalkInfo", "model_registry"]


@dataclass
class ObservedRelease:
    name: str
    mechanism: object
    y: np.ndarray


@dataclass
class LatticeLatentInfo:
    name: str
    invariant: object
    t: np.ndarray
    prior: object  # a PyMC distribution (``.dist``) or None
    nonnegative: bool
    initval: np.ndarray
    releases: list = field(default_factory=list)
    #: the move set of the lattice step (None: the invariant's default, ``moves_for``)
    moves: object = None
    #: the prior's log-pmf is part of the latent's own log-density (else a Potential, if any)
    prior_in_logp: bool = False

    @property
    def point(self) -> np.ndarray:
        """A point of the latent's fibre (its initial value)."""
        return self.initval


@dataclass
class AffineLatentInfo:
    name: str
    invariant: object
    t: np.ndarray
    x0: np.ndarray
    releases: list = field(default_factory=list)
    #: the shared support point of the free coordinates ``z`` (``x = x0 + Q_N z``)
    start: object = None

    @property
    def point(self) -> np.ndarray:
        """A point of the latent's affine subspace (the least-norm one)."""
        return self.x0


@dataclass
class WalkInfo:
    """Random-walk departures of units whose cells are Dirichlet-multinomial
    (:func:`privinfer.pymc.register_walk`)."""
    scales: str               # the step scales' variable, (K-1,), scale / prior_scale ~ chi(prior_dof)
    increments: str           # the raw increments' variable, (U, K-1), N(0, scales^2)
    prior_scale: float
    base: object              # (R, d) tensor: the log profile every row departs from
    kappa: object             # scalar tensor: the Dirichlet concentration
    weights: object           # (U, K-1) tensor: non-centring exponents (0: centred)
    latent: str               # the lattice latent holding the cells
    grid: np.ndarray          # (R, d) cell indices of every row (R = U without members)
    code: np.ndarray          # (d,) category of every column of the grid
    groups: object = None     # (U,) sibling groups whose increments are centred (None: none)
    exponents: object = None  # (U, K-1) partial non-centring of the scale update (None: 1)
    carry: object = None      # (n,) carry fractions of the cells (None: no carried update)
    order: int = 1            # 1: random walk; 2: second-order (the increments change the slope)
    prior_dof: int = 1        # the step scales' prior: 1 half-normal, 2 Rayleigh
    spacing: object = None    # (K-1,) order 2: the categories' distances (None: all 1)
    members: object = None    # (R,) the unit of every row of grid (None: row u is unit u)
    carry_units: object = None  # (U,) bool: the units of the carried update (None: all)
    sizes: object = None      # (U,) fixed unit sizes: the carried update pairs near neighbours in size (None: uniform)
    mix: str = None           # (U,) the units' prior variance multipliers, InvGamma(mix_dof/2, mix_dof/2) (None: 1)
    mix_dof: float = None     # their prior's degrees of freedom (the walk's increments are multivariate t)
    lump: object = None       # (n,) bool: small cells the carried update moves by their quantiles (None: none)
    parent: str = None        # the raw increments of the walk of the units' parents (None: none)


@dataclass
class CellEffectsInfo:
    """Independent log-normal effects of Dirichlet-multinomial cells
    (:func:`privinfer.pymc.register_cell_effects`)."""
    effects: str              # the effects' variable, (U, d), N(0, scale^2)
    scale: str                # their scale's variable, HalfNormal(prior_scale)
    prior_scale: float
    eta: object               # (U, d) tensor: the units' log profiles without the effects
    kappa: object             # scalar tensor: the Dirichlet concentration
    latent: str               # the lattice latent holding the cells
    grid: np.ndarray          # (R, d) cell indices of every row (R = U without members)
    groups: object = None     # (U,) groups within which the effects enter centred (None: as they are)


def model_registry(model) -> dict:
    reg = getattr(model, "_privinfer", None)
    if reg is None:
        reg = {"lattice": {}, "affine": {}}
        model._privinfer = reg
    reg.setdefault("walks", {})
    reg.setdefault("cell_effects", {})
    return reg
