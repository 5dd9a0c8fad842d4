"""From confidential counts to a published release to a fitted posterior, in one spine.

``files``    counts tables in CSV files, the release CSV and its JSON sidecar (no values in a
             :class:`~privinfer.workflow.files.Layout`)
``codec``    the one place mechanisms are built from names and (de)serialized for the sidecar
``release``  :class:`Release` (the value object), :func:`make_release` (curator),
             :func:`read_release` (analyst), ``Release.write``
``fitting``  :func:`fit` -- the reference model of a release sampled with PyMC (imported lazily),
             :class:`FitResult`
``demo``     the ``privinfer demo`` job built on the three above

Importing this package does not import PyMC: ``fit`` does when it runs.
"""

from .files import ReleaseFileError
from .fitting import FitResult, fit
from .release import Release, make_release, read_release

__all__ = ["Release", "make_release", "read_release", "fit", "FitResult", "ReleaseFileError"]
