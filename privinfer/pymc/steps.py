r"""PyMC step methods for integer latents constrained by an invariant.

:class:`LatticeMetropolis` samples ``x`` made by :func:`privinfer.pymc.lattice_latent`;
:func:`lattice_steps` makes one step per such latent for ``pm.sample(step=...)``.
One PyMC iteration is

1. a Gibbs-within-Metropolis sweep over lattice moves -- random within-group pairs
   ``e_i - e_j`` for totals and partitions (scored in batches of disjoint pairs when the
   posterior is separable across cells), the short lattice basis ``b_1..b_d`` of
   ``{e in Z^n : C e = 0}`` otherwise -- with double-geometric jumps (Integer subspace DP,
   Sec. 4, Alg. 1, applied to the posterior), and
2. ``n_multi`` multi-direction jumps ``x + B k`` with sparse double-geometric ``k`` (makes
   the chain irreducible on the non-negative fibre),

all accepted by Metropolis with log-posterior differences computed from the touched cells
only where the model allows it (:class:`~privinfer.pymc.local_posterior.LocalPosterior`).
The kernels are those of the lattice engine (:mod:`privinfer.lattice.kernels`); this module
only wraps them as PyMC step methods.
Every proposal keeps ``C x = t`` exactly.  During tuning the jump scale is adapted
(Robbins-Monro on its log) toward an acceptance rate of 0.44, the optimum for
one-dimensional random-walk moves (Roberts and Rosenthal 2001).

:class:`LatticeGibbs` replaces step 1 by exact conditional draws along each direction
whenever the support along it is finite and small (heat bath), falling back to a
Metropolis move otherwise.

Both subclass PyMC's ``ArrayStepShared`` (imported from its submodule), compute nothing
with PyMC in ``astep`` beyond compiled functions, declare their sampling statistics with a
``lattice_`` prefix (no collision with NUTS's names), take their randomness from the
generator PyMC hands them (``set_rng``; ``setup_chain`` is accepted too), and pickle for
``cores > 1``.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.blocking import RaveledVars
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, StepMethodState
from pymc.step_methods.state import dataclass_state

from ..lattice import (
    GroupTree,
    LOG_DROP,
    LatticeMoves,
    block_kernel,
    LatticeState,
    direction_gibbs,
    moves_for,
    multi_direction_jump,
    sweep,
)
from ..lattice.kernels import metropolis_step_inplace
from ..lattice.laws import nonzero_double_geometric
from .cell_effects import CellEffectsGibbs
from .local_posterior import LocalPosterior
from .measured import MeasuredPairsGibbs
from .registry import model_registry
from .walk import WalkGibbs

__all__ = ["LatticeMetropolis", "LatticeGibbs", "LatticeBlockGibbs", "lattice_steps", "register_step_methods"]

#: Target acceptance rate of the single-direction moves during tuning.
TARGET_ACCEPT = 0.44


@dataclass_state
class LatticeMetropolisState(StepMethodState):
    log_scale: float
    tune: bool
    n_adapt: int
    multi_a: float


def _find_latent(model, vars):
    reg = model_registry(model)["lattice"]
    if len(vars) != 1:
        raise ValueError("LatticeMetropolis updates exactly one lattice latent; make one step per latent")
    value = vars[0]
    rv = model.values_to_rvs.get(value, None)
    if rv is None:
        rv = value
        value = model.rvs_to_values[rv]
    info = reg.get(rv.name)
    if info is None:
        raise ValueError(
            f"'{rv.name}' is not a lattice latent: create it with privinfer.pymc.lattice_latent"
        )
    return rv, value, info


class LatticeMetropolis(ArrayStepShared):
    """Metropolis on the lattice fibre of an integer latent (see module docstring).

    Parameters
    ----------
    vars
        the lattice latent (one variable).
    scale
        initial double-geometric jump scale (``P(zeta) ~ exp(-|zeta|/scale)``).
    tune
        adapt ``scale`` during PyMC's tuning phase.
    n_multi
        multi-direction jumps per iteration (0 disables them; only do that when
        the basis moves alone connect the fibre).
    order
        ``"random"`` (fresh permutation each sweep) or ``"systematic"``.
    model, rng, initial_point, blocked
        as for PyMC step methods.
    """

    name = "lattice_metropolis"
    #: several lattice latents assigned together get one step each (PyMC splits unblocked steps)
    default_blocked = False
    stats_dtypes_shapes = {
        "lattice_accept": (np.float64, []),
        "lattice_multi_accept": (np.float64, []),
        "lattice_jump_scale": (np.float64, []),
        "lattice_tune": (bool, []),
        "lattice_local": (bool, []),
    }
    _state_class = LatticeMetropolisState

    def __init__(self, vars=None, scale: float = 1.0, tune: bool = True, n_multi: int = 1,
                 order: str = "random", model=None, initial_point=None, rng=None, blocked: bool = False,
                 compile_kwargs=None):
        model = pm.modelcontext(model)
        if vars is None:
            vars = [v for v in model.value_vars if model.values_to_rvs[v].name in model_registry(model)["lattice"]]
        vars = [model.rvs_to_values.get(v, v) for v in vars]
        rv, value, info = _find_latent(model, vars)
        if initial_point is None:
            initial_point = model.initial_point()
        if not (np.isfinite(scale) and scale > 0):
            raise ValueError("scale must be a finite number > 0")
        if order not in ("random", "systematic"):
            raise ValueError("order must be 'random' or 'systematic'")
        self.info = info
        inv = info.invariant
        self.basis = LatticeMoves.from_matrix(inv.lattice_basis())
        # totals and partitions: random within-group pairs mix far faster than the chain
        # basis e_i - e_{i+1} (see PairMoves); otherwise sweep the short basis
        self.moves = info.moves if info.moves is not None else moves_for(inv, free_cells=False)
        self.lower = 0 if info.nonnegative else None
        self.order = order
        self.n_multi = int(n_multi)
        self.log_scale = float(np.log(scale))
        self.tune = bool(tune)
        self.n_adapt = 0
        d = self.basis.k
        # multi-direction jumps: about two directions move on average
        self.multi_a = float(min(0.5, 1.0 / max(d - 1, 1)))
        x0 = np.asarray(initial_point[value.name])
        if not info.invariant.satisfied_by(x0.astype(float), info.t, atol=0.5):
            raise ValueError(f"initial value of '{rv.name}' is off the fibre C x = t")
        shared = pm.make_shared_replacements(initial_point, [value], model)
        self.local = LocalPosterior(model, rv, info, self.basis, shared)
        super().__init__([value], shared, rng=rng)

    # -- PyMC hooks ------------------------------------------------------------------
    #: competence for lattice latents (LatticeBlockGibbs, IDEAL, is PyMC's default for them;
    #: it runs these moves itself wherever block updates do not apply)
    lattice_competence = Competence.PREFERRED

    @classmethod
    def competence(cls, var, has_grad):
        """IDEAL for a variable made by :func:`~privinfer.pymc.lattice_latent` (recognized by its
        op), INCOMPATIBLE otherwise -- so ``pm.sample()`` assigns this step to lattice latents
        by itself (PyMC's own samplers cannot move on the fibre ``C x = t``)."""
        op = getattr(var.owner, "op", None) if var.owner is not None else None
        if op is not None and getattr(type(op), "lattice_latent", False):
            if getattr(type(op), "lattice_sampler", None) is not None:
                # the latent asks for another step kind: still usable when chosen by hand
                return Competence.COMPATIBLE
            return cls.lattice_competence
        return Competence.INCOMPATIBLE

    def setup_chain(self, rng=None, *args, **kwargs):
        """Per-chain set-up hook of newer PyMC versions: seed, and restart tuning."""
        if rng is not None:
            self.set_rng(rng)

    def reset_tuning(self):
        self.n_adapt = 0

    def stop_tuning(self):
        self.tune = False

    # -- the step ----------------------------------------------------------------------
    def _sweep(self, state):
        scale = float(np.exp(self.log_scale))
        # separable posteriors under pair moves: two random matchings per sweep (about n moves)
        state, info = sweep(self.rng, state, self.moves, self.local.density, scale, self.order,
                            lower=self.lower, nonzero=True, matchings=2)
        rate = float(info.n_accepted[0]) / info.n_proposed if info.n_proposed else np.nan
        return state, rate

    def astep(self, q0: RaveledVars):
        x = np.asarray(q0.data, dtype=np.int64)
        self.local.refresh()
        density = self.local.density
        state = LatticeState(x[None, :].copy(), density.init_stat(x[None, :]))
        state, rate = self._sweep(state)
        multi = []
        for _ in range(self.n_multi):
            state, info = multi_direction_jump(self.rng, state, self.basis, density, self.multi_a, lower=self.lower)
            multi.append(info["accepted"])
        if self.tune and np.isfinite(rate):
            self.n_adapt += 1
            self.log_scale += (rate - TARGET_ACCEPT) / np.sqrt(self.n_adapt)
            self.log_scale = float(np.clip(self.log_scale, np.log(0.1), np.log(1e6)))
        stats = {
            "lattice_accept": float(rate) if np.isfinite(rate) else 0.0,
            "lattice_multi_accept": float(np.mean(multi)) if multi else np.nan,
            "lattice_jump_scale": float(np.exp(self.log_scale)),
            "lattice_tune": self.tune,
            "lattice_local": self.local.is_local,
        }
        return RaveledVars(state.e[0].astype(q0.data.dtype), q0.point_map_info), [stats]


class LatticeGibbs(LatticeMetropolis):
    """Exact conditional (heat-bath) updates along each lattice direction.

    Along ``b_j`` the non-negative fibre allows a finite interval of steps whenever
    ``b_j`` has entries of both signs (always the case when the invariant fixes a total);
    if that interval has at most ``max_support`` points, all are scored locally and the
    step is drawn from the exact conditional
    (:func:`~privinfer.lattice.kernels.direction_gibbs`).  Otherwise a Metropolis move is
    made along ``b_j``.  Multi-direction jumps are kept for irreducibility.
    """

    name = "lattice_gibbs"
    #: chosen by hand (``lattice_steps(model, step_class=LatticeGibbs)``); below LatticeMetropolis
    lattice_competence = Competence.COMPATIBLE

    def __init__(self, vars=None, max_support: int = 256, **kwargs):
        self.max_support = int(max_support)
        super().__init__(vars, **kwargs)

    def _sweep(self, state):
        ids = self.moves.schedule(self.rng, self.order)
        moved = total = 0
        scale = float(np.exp(self.log_scale))
        density = self.local.density
        for j in ids:
            idx, vals = self.moves.move(j)
            state, info = direction_gibbs(self.rng, state, idx, vals, density, lower=self.lower,
                                          max_support=self.max_support)
            if not info["exact"]:
                z = nonzero_double_geometric(self.rng, np.exp(-1.0 / scale), (1,))
                metropolis_step_inplace(state, idx, vals, z, np.log(self.rng.random(1)), density, self.lower)
                continue
            total += 1
            moved += info["moved"]
        return state, (moved / total if total else np.nan)


class LatticeBlockGibbs(LatticeMetropolis):
    r"""Exact block updates of whole groups, for separable posteriors under partition invariants.

    When the invariant is a partition (a total, or totals of disjoint groups) and the log
    posterior of ``x`` is a sum of per-cell terms (independent cell priors -- Poisson,
    negative binomial, ... -- and a separable noise density such as the double geometric,
    the l1 generalized Laplace or the discrete Gaussian), the cells of a group are
    independent given their sum.  Each iteration then

    1. draws every group's cells from their conditional law given the group total by
       forward filtering / backward sampling over partial sums on a binary tree (windows
       and tables truncated ``e^-log_drop`` below their maxima), accepted per group by an
       independence Metropolis--Hastings test that removes the truncation error
       (:func:`privinfer.lattice.block_kernel`; the acceptance rate, reported as
       ``lattice_block_accept``, is 1 up to the dropped mass), and
    2. makes one sweep of random within-group pair moves (one random matching;
       :class:`LatticeMetropolis`), which keeps the chain irreducible on the non-negative
       fibre whatever the windows.

    Draws keep ``C x = t`` exactly.  For any other invariant or a non-separable posterior
    the step is :class:`LatticeMetropolis` (``lattice_block`` is False in the sampling
    statistics).  This is the step ``pm.sample()`` assigns to lattice latents (competence
    IDEAL).

    Parameters
    ----------
    log_drop
        window depth in nats (default 18: cells' values below e^-18 ~ 1.5e-8 of their
        mode's mass are left out of the proposal; the test puts them back).
    max_width
        widest cell window (values); wider windows are cut around the mode (exact
        through the test, at a lower acceptance).
    **kwargs
        as for :class:`LatticeMetropolis`.
    """

    name = "lattice_block_gibbs"
    lattice_competence = Competence.IDEAL
    stats_dtypes_shapes = {
        **LatticeMetropolis.stats_dtypes_shapes,
        "lattice_block": (bool, []),
        "lattice_block_accept": (np.float64, []),
        "lattice_block_width": (np.int64, []),
    }

    def __init__(self, vars=None, log_drop: float = LOG_DROP, max_width: int = 4096, **kwargs):
        if not (np.isfinite(log_drop) and log_drop > 0):
            raise ValueError("log_drop must be a finite number > 0")
        if int(max_width) < 1:
            raise ValueError("max_width must be >= 1")
        self.log_drop = float(log_drop)
        self.max_width = int(max_width)
        super().__init__(vars, **kwargs)
        part = self.info.invariant.partition
        self.tree = GroupTree(part.codes) if part is not None and self.local.is_separable else None

    @property
    def uses_blocks(self) -> bool:
        """True when block updates apply (partition invariant, separable posterior)."""
        return self.tree is not None

    def astep(self, q0: RaveledVars):
        if self.tree is None:
            point, stats = super().astep(q0)
            stats[0].update({"lattice_block": False, "lattice_block_accept": np.nan, "lattice_block_width": 0})
            return point, stats
        x = np.asarray(q0.data, dtype=np.int64)
        self.local.refresh()
        density = self.local.density
        state = LatticeState(x[None, :].copy(), density.init_stat(x[None, :]))
        state, binfo = block_kernel(self.rng, state, self.tree, density, lower=self.lower,
                                    log_drop=self.log_drop, max_width=self.max_width)
        scale = float(np.exp(self.log_scale))
        state, info = sweep(self.rng, state, self.moves, density, scale, self.order, lower=self.lower,
                            nonzero=True, matchings=1)
        rate = float(info.n_accepted[0]) / info.n_proposed if info.n_proposed else np.nan
        if self.tune and np.isfinite(rate):
            self.n_adapt += 1
            self.log_scale += (rate - TARGET_ACCEPT) / np.sqrt(self.n_adapt)
            self.log_scale = float(np.clip(self.log_scale, np.log(0.1), np.log(1e6)))
        proposed = int(binfo.n_proposed[0])
        stats = {
            "lattice_accept": float(rate) if np.isfinite(rate) else 0.0,
            "lattice_multi_accept": np.nan,
            "lattice_jump_scale": float(np.exp(self.log_scale)),
            "lattice_tune": self.tune,
            "lattice_local": self.local.is_local,
            "lattice_block": True,
            "lattice_block_accept": float(binfo.n_accepted[0]) / proposed if proposed else np.nan,
            "lattice_block_width": int(binfo.width),
        }
        return RaveledVars(state.e[0].astype(q0.data.dtype), q0.point_map_info), [stats]


def lattice_steps(model=None, step_class=None, **kwargs) -> list:
    """One lattice step method per lattice latent of ``model`` (the context model if None).

    ``pm.sample(step=lattice_steps(model))`` samples each latent made by
    :func:`privinfer.pymc.lattice_latent` with its own step (lattice moves keep ``C x = t``
    exactly) and lets PyMC assign NUTS to the continuous variables.

    Parameters
    ----------
    model
        the ``pm.Model`` (default: the model on the context stack).
    step_class
        :class:`LatticeBlockGibbs` (default: the step ``pm.sample()`` assigns by
        itself), :class:`LatticeMetropolis` or :class:`LatticeGibbs`.
    **kwargs
        passed to every step (``scale``, ``n_multi``, ``order``, ...).

    Notes
    -----
    Returns an empty list for a model without lattice latents, so the call is always safe.
    """
    model = pm.modelcontext(model)
    step_class = LatticeBlockGibbs if step_class is None else step_class
    names = list(model_registry(model)["lattice"])
    return [step_class([model[name]], model=model, **kwargs) for name in names]


def register_step_methods() -> None:
    """Add the lattice step methods, :class:`~privinfer.pymc.WalkGibbs` and
    :class:`~privinfer.pymc.CellEffectsGibbs` to ``pymc.STEP_METHODS`` (PyMC's documented extension point:
    "other step methods can be added by appending to this list"), once.  Called when
    :mod:`privinfer.pymc` is imported, so ``pm.sample()`` assigns them to lattice latents."""
    for cls in (LatticeBlockGibbs, LatticeMetropolis, LatticeGibbs, MeasuredPairsGibbs):
        if cls not in pm.STEP_METHODS:
            pm.STEP_METHODS.append(cls)
    # WalkGibbs ties with NUTS (both IDEAL) on the variables it claims; PyMC keeps the first
    # of equally competent methods, so it goes before NUTS
    if WalkGibbs not in pm.STEP_METHODS:
        pm.STEP_METHODS.insert(0, WalkGibbs)
    # CellEffectsGibbs likewise, on the registered cell effects
    if CellEffectsGibbs not in pm.STEP_METHODS:
        pm.STEP_METHODS.insert(0, CellEffectsGibbs)
