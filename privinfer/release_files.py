"""Counts and release files (kept under this name; they live in :mod:`privinfer.workflow`).

:mod:`privinfer.workflow.files` reads counts tables and writes/reads the release CSV and its
sidecar; :mod:`privinfer.workflow.codec` builds mechanisms from names; :mod:`privinfer.workflow.release`
holds :class:`Release`, :func:`read_release` and :func:`make_release`.
"""

from .workflow.codec import MECHANISMS, build_mechanism  # noqa: F401
from .workflow.files import (  # noqa: F401
    METADATA_FORMAT,
    CountsTable,
    InvariantSpec,
    Layout,
    ReleaseFileError,
    build_invariant,
    invariant_labels,
    metadata_path_for,
    read_counts,
    read_metadata,
    write_metadata,
)
from .workflow.release import Release, make_release, read_release  # noqa: F401

__all__ = ["ReleaseFileError", "InvariantSpec", "Layout", "CountsTable", "MECHANISMS", "read_counts",
           "build_invariant", "build_mechanism", "write_metadata", "read_metadata", "metadata_path_for",
           "Release", "make_release", "read_release"]
