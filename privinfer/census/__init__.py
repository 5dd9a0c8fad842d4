"""Census-style hierarchies: geography x attribute tables given as pandas frames, their noisy
measurements (the 2020 Census design), and models and baselines that use the hierarchy.

* :func:`hierarchy_measurements` -- discrete Gaussian measurements of margins in every unit
  of every level, the frame's total (or one level's unit totals) published exactly;
* hierarchical GLS is :func:`privinfer.inference.gls_estimate` on such a release (two passes
  over the tree, :mod:`privinfer.inference.hierarchical_gls`);
* :func:`hierarchy_model` -- a PyMC model of the cells with a prior that pools across units
  and levels (profiles per level, learned departures, Dirichlet-multinomial tracts), sampled by
  NUTS, :class:`~privinfer.pymc.WalkGibbs` (the tracts' age walks, from :data:`GIBBS_UNITS`
  tracts on) and :class:`~privinfer.pymc.MeasuredPairsGibbs`; :func:`start_point` its chains' start;
* :func:`unit_sums` -- weights of derived quantities (a tract's people aged 65+, its share
  aged 65+ with a second call), for :func:`derived_draws` / :func:`posterior_summary`,
  :func:`derived_summary` (with each quantity's R-hat and ESS) and for the GLS estimate's
  ``interval`` / ``ratio_interval``; :func:`unit_convergence` -- the cells' worst R-hat and ESS
  in every unit of a level, beside its size;
* :func:`synthetic_tracts` -- a realistic county -> tract split of real county x sex x age
  counts; :func:`read_tract_table` -- a user's own tract table in the same frame.
"""

from .measurements import frame_counts, hierarchy_from_frame, hierarchy_measurements
from .derived import derived_draws, derived_summary, posterior_summary, unit_convergence, unit_sums
from .model import GIBBS_UNITS, QUANTILE_CARRY, SMOOTH_LEVEL_UNITS, hierarchy_model, start_point
from .tracts import AGE_GROUPS, SEXES, read_tract_table, synthetic_tracts, synthetic_tracts_from_counties

__all__ = ["hierarchy_measurements", "hierarchy_from_frame", "frame_counts", "hierarchy_model", "start_point",
           "unit_sums", "derived_draws", "derived_summary", "unit_convergence", "posterior_summary", "synthetic_tracts",
           "synthetic_tracts_from_counties", "read_tract_table", "SEXES", "AGE_GROUPS", "GIBBS_UNITS",
           "SMOOTH_LEVEL_UNITS", "QUANTILE_CARRY"]
