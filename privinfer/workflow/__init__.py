"""From confidential counts to a published release to a fitted posterior, in one spine.

``files``
    counts tables in CSV/Parquet files, the release CSV and its JSON sidecar (no
    values in a :class:`~privinfer.workflow.files.Layout`)
``table_io`` reading CSV (pandas) and Parquet (pyarrow) with one-line errors naming row and
             column, never a value
``atomic``
    complete files or none; no overwriting unless asked
``ledger``
    the privacy-loss ledger: keyed fingerprints of the inputs, guarantees, budgets
``codec``
    the one place mechanisms are built from names and (de)serialized for the sidecar
``release``
    :class:`Release` (the value object), :func:`make_release` (curator),
    :func:`read_release` (analyst), ``Release.write``
``fitting``
    :func:`fit` -- the reference model of a release sampled with PyMC (imported lazily),
    :class:`FitResult`
``demo``
    the ``privinfer demo`` job built on the three above

Importing this package does not import PyMC: ``fit`` does when it runs.
"""

from .errors import BudgetExceededError, LedgerError, OutputExistsError, ReleaseFileError
from .fitting import FitResult, fit
from .ledger import Ledger, parse_budget
from .release import Release, make_release, read_release

__all__ = ["Release", "make_release", "read_release", "fit", "FitResult", "ReleaseFileError", "OutputExistsError",
           "Ledger", "LedgerError", "BudgetExceededError", "parse_budget"]
