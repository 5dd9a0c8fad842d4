"""Thin PyMC glue: mechanisms' likelihoods and invariant-constrained latents in a ``pm.Model``.

* :func:`observe` -- the exact likelihood of a release (auxiliary latents where needed), with
  pointwise terms for model comparison; :func:`add_augmented_log_likelihood` for releases
  whose likelihood is augmented.
* :func:`affine_latent` (alias :func:`constrained_vector`) -- continuous ``x`` on ``{C x = t}``.
* :func:`lattice_latent` -- integer ``x`` on ``{x in Z^n : C x = t}``, sampled with
  :class:`LatticeBlockGibbs` (the default: exact block draws per group where they apply),
  :class:`LatticeMetropolis` / :class:`LatticeGibbs` (step methods on the lattice engine).
* :func:`started` -- a free variable with a given starting point (a support point, so PyMC's
  graph rebuilds such as ``pm.compute_log_likelihood`` keep working).
* :func:`lattice_steps` -- one lattice step per integer latent, for ``pm.sample(step=...)``.
* :class:`MeasuredPairsGibbs` -- pair moves for a latent observed through noisy measurements,
  with a :class:`DirichletMultinomialCells` prior (assigned by ``pm.sample()`` to latents made
  with ``lattice_latent(..., sampler="measured_pairs")``).
* :class:`WalkGibbs` -- blocked Gibbs updates of the random-walk departures of many units of
  Dirichlet-multinomial cells and their step scales (assigned by ``pm.sample()`` to walks
  recorded with :func:`register_walk`); :func:`increments_from_steps`, a walk's raw increments
  from its steps.
* :class:`CellEffectsGibbs` -- exact updates of independent log-normal effects of
  Dirichlet-multinomial cells and their scale (assigned by ``pm.sample()`` to effects recorded
  with :func:`register_cell_effects`).
* :class:`Rescaled` -- a free coordinate divided by a constant (a transform chained after the
  default one): the same model, a better start for NUTS's identity mass matrix.
"""

from .measured import DirichletMultinomialCells, MeasuredPairsGibbs
from .latents import ConditionalPrior, affine_latent, constrained_vector, lattice_latent, prior_logp, started
from .observe import add_augmented_log_likelihood, observe, posterior_predictive_releases
from .precondition import Rescaled
from .walk import WalkGibbs, register_walk
from .cell_effects import CellEffectsGibbs, register_cell_effects
from .walk_kernel import increments_from_steps
from .steps import LatticeBlockGibbs, LatticeGibbs, LatticeMetropolis, lattice_steps, register_step_methods

register_step_methods()

__all__ = [
    "observe",
    "affine_latent",
    "constrained_vector",
    "lattice_latent",
    "prior_logp",
    "started",
    "ConditionalPrior",
    "posterior_predictive_releases",
    "add_augmented_log_likelihood",
    "lattice_steps",
    "LatticeBlockGibbs",
    "LatticeMetropolis",
    "LatticeGibbs",
    "MeasuredPairsGibbs",
    "DirichletMultinomialCells",
    "WalkGibbs",
    "register_walk",
    "CellEffectsGibbs",
    "register_cell_effects",
    "increments_from_steps",
    "Rescaled",
]
