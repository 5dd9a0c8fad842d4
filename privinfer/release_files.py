"""Counts and release files (kept under this name; they live in :mod:`privinfer.workflow`).

:mod:`privinfer.workflow.files` reads counts tables (CSV or Parquet) and writes/reads the
release CSV and its sidecar; :mod:`privinfer.workflow.codec` builds mechanisms from names;
:mod:`privinfer.workflow.release` holds :class:`Release`, :func:`read_release` and
:func:`make_release`; :mod:`privinfer.workflow.ledger` the privacy-loss ledger.
"""

from .workflow.codec import MECHANISMS, build_mechanism  # noqa: F401
from .workflow.files import (  # noqa: F401
    METADATA_FORMAT,
    CountsTable,
    InvariantSpec,
    Layout,
    OutputExistsError,
    ReleaseFileError,
    build_invariant,
    invariant_labels,
    metadata_path_for,
    read_counts,
    read_metadata,
    write_metadata,
    write_values,
)
from .workflow.ledger import Ledger  # noqa: F401
from .workflow.release import Release, make_release, read_release  # noqa: F401

__all__ = ["ReleaseFileError", "OutputExistsError", "InvariantSpec", "Layout", "CountsTable", "MECHANISMS",
           "read_counts", "build_invariant", "build_mechanism", "write_metadata", "write_values", "read_metadata",
           "metadata_path_for", "Release", "make_release", "read_release", "Ledger"]
