"""Census-style hierarchies: geography x attribute tables given as pandas frames, their noisy
measurements (the 2020 Census design), and models and baselines that use the hierarchy.

* :func:`hierarchy_measurements` -- discrete Gaussian measurements of margins in every unit
  of every level, the frame's total (or one level's unit totals) published exactly;
* hierarchical GLS is :func:`privinfer.inference.gls_estimate` on such a release (two passes
  over the tree, :mod:`privinfer.inference.hierarchical_gls`);
* :func:`synthetic_tracts` -- a realistic county -> tract split of real county x sex x age
  counts; :func:`read_tract_table` -- a user's own tract table in the same frame.
"""

from .measurements import frame_counts, hierarchy_from_frame, hierarchy_measurements
from .tracts import AGE_GROUPS, SEXES, read_tract_table, synthetic_tracts, synthetic_tracts_from_counties

__all__ = ["hierarchy_measurements", "hierarchy_from_frame", "frame_counts", "synthetic_tracts",
           "synthetic_tracts_from_counties", "read_tract_table", "SEXES", "AGE_GROUPS"]
