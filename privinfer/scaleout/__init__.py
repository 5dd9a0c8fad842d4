"""Releases and fits beyond one machine: partitioned releases and per-group fits on Dask.

``seeding``
    one ``numpy.random.SeedSequence`` per group, from the seed and a hash of its key
``survey``
    pass 1: every partition checked with the workflow's count checks
    (:func:`privinfer.workflow.table_io.check_counts`), errors naming the global row
``groups``
    one group's noise (registry mechanism on the group's total, exact sampler) and
    the release of a block of rows
``guarantee``
    the guarantee of a release drawn group by group
``frames``
    :func:`release_frame` -- pandas or Dask DataFrame in, same kind out; accounted
    in a privacy-loss ledger (``ledger=``, ``budget=``) like every release
``fitting``
    :func:`fit_groups` -- models that factorize over groups, fitted on a Dask client
``files``
    Parquet and CSV through pandas / Dask; the ``privinfer release --workers`` job
    (ids, ledger, budget, no overwriting, complete files: the rules of every release)
``readback``
    :func:`read_frame_release` -- such a release and its sidecar read back as a
    :class:`FrameRelease`, every group checked against its published total
``fitfile``
    :func:`fit_frame_release` -- ``privinfer fit`` on such a release: one fit per group, the
    outputs of every fit with the cells in the release file's row order

Needs the ``scale`` extra (``pip install "privinfer[scale]"``: Dask, pandas, pyarrow).  Dask
itself is imported only when a Dask frame or client is used.
"""

from .frames import FrameRelease, is_dask_frame, release_frame
from .groups import FRAME_MECHANISMS
from .seeding import group_seed_sequence, key_words, root_seed

__all__ = ["release_frame", "FrameRelease", "FRAME_MECHANISMS", "fit_groups", "group_seed_sequence",
           "key_words", "root_seed", "is_dask_frame", "read_frame", "write_frame", "release_file", "read_frame_release",
           "fit_frame_release"]


def __getattr__(name):  # the fitting and file modules load PyMC / Dask pieces on first use
    if name == "fit_groups":
        from .fitting import fit_groups

        return fit_groups
    if name in ("read_frame", "write_frame", "release_file"):
        from . import files

        return getattr(files, name)
    if name == "read_frame_release":
        from .readback import read_frame_release

        return read_frame_release
    if name == "fit_frame_release":
        from .fitfile import fit_frame_release

        return fit_frame_release
    raise AttributeError(f"module 'privinfer.scaleout' has no attribute {name!r}")
