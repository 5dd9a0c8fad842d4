"""Privacy mechanisms: every one offers ``release``, ``logp`` and ``guarantee``.

See :mod:`privinfer.mechanisms.base` for the protocol.
"""

from .base import AdditiveMechanism, Guarantee, Mechanism

__all__ = ["Mechanism", "AdditiveMechanism", "Guarantee"]
