"""The errors of the workflow: each is a ``ValueError`` with a one-line message that names the
problem (file, data row, column, option) and never a confidential value.  The command line
reports them as ``privinfer: error: ...`` with exit status 2.
"""

from __future__ import annotations

__all__ = ["ReleaseFileError", "OutputExistsError", "LedgerError", "BudgetExceededError"]


class ReleaseFileError(ValueError):
    """A counts/release/metadata file or an option does not fit (the message names the problem,
    never a confidential value)."""


class OutputExistsError(ReleaseFileError):
    """An output file exists already and overwriting was not asked for (``--force``)."""


class LedgerError(ValueError):
    """The privacy-loss ledger or its key cannot be used as it is (missing key, changed key,
    not a ledger file, a guarantee that cannot be composed against a budget)."""


class BudgetExceededError(LedgerError):
    """A release would take the privacy loss recorded in the ledger beyond the budget; it is
    refused before any noise is drawn and the ledger is left unchanged."""
