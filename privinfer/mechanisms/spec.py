"""Mechanism specs: a mechanism's constructor arguments as JSON values, and back.

The format is in :mod:`privinfer.mechanisms.base` ("Spec format").  This module holds the
machinery and imports no mechanism, so the protocol (:meth:`Mechanism.spec`) can use it
without an import circle:

* :class:`SpecFormat` encodes and decodes constructor arguments: the JSON types themselves,
  NumPy arrays, SciPy sparse matrices, exact rationals and invariants here, and the value
  types defined beside the mechanisms (noise laws, tradeoff functions) through
  :class:`ValueCodec` entries; it turns a mechanism into its spec (:meth:`SpecFormat.spec_of`)
  and a spec into a mechanism (:meth:`SpecFormat.from_spec`), for the registered classes only.
* :mod:`privinfer.mechanisms.registry` imports every mechanism, builds the one format of the
  package (its classes and value codecs) and installs it here (:func:`install`) when it is
  imported -- which the package's ``__init__`` does, so importing any mechanism module
  installs it.  :func:`mechanism_spec` uses the installed format.

Imports go one way: ``base -> spec``, ``registry -> spec``, ``registry -> mechanisms -> base``.
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Mapping

import numpy as np
import scipy.sparse as sp

from .. import invariants as invariants_module
from ..invariants import Invariant

__all__ = ["MechanismSpecError", "ValueCodec", "SpecFormat", "install", "installed", "mechanism_spec"]


class MechanismSpecError(ValueError):
    """A mechanism spec cannot be turned into a mechanism (the message names the problem)."""


@dataclass(frozen=True)
class ValueCodec:
    """How one value type travels in a spec: as ``{tag: body}``.

    ``encode(value, where, nested)`` returns the JSON body (``nested(v, where)`` encodes a
    value inside it); ``decode(body, nested)`` rebuilds the value (``nested(v)`` decodes a
    value inside it) and raises :class:`MechanismSpecError` for a body it cannot rebuild.
    """

    tag: str
    type: type
    encode: Callable[[Any, str, Callable], Any]
    decode: Callable[[Any, Callable], Any]


@dataclass(frozen=True)
class SpecFormat:
    """The spec format of a set of mechanism classes (registry name -> class) and value codecs."""

    classes: Mapping[str, type]
    codecs: tuple[ValueCodec, ...] = ()

    # -- values -------------------------------------------------------------------------
    def encode(self, value, where: str, kept: Invariant | None):
        """``value`` (a constructor argument, named ``where`` in errors) as a JSON value;
        ``kept`` is the mechanism's invariant, written as ``{"$ref": "invariant"}``."""
        if kept is not None and value is kept:
            return {"$ref": "invariant"}
        if isinstance(value, Invariant):
            return {"$invariant": value.spec()}
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, np.bool_):
            return bool(value)
        if isinstance(value, numbers.Integral):
            return int(value)
        if isinstance(value, Fraction):
            return {"$fraction": [value.numerator, value.denominator]}
        if isinstance(value, numbers.Real):
            return float(value)
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufU":
                raise TypeError(f"spec(): argument {where} is an array of dtype {value.dtype}, which cannot be "
                                "serialized")
            return {"$array": value.tolist(), "dtype": str(value.dtype)}
        if sp.issparse(value):
            coo = sp.coo_matrix(value)
            return {"$sparse": {"shape": [int(s) for s in coo.shape], "row": coo.row.tolist(),
                                "col": coo.col.tolist(), "data": coo.data.astype(float).tolist()}}
        if isinstance(value, (list, tuple)):
            return [self.encode(v, f"{where}[{i}]", kept) for i, v in enumerate(value)]
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if not isinstance(k, str) or k.startswith("$"):
                    raise TypeError(f"spec(): argument {where} has a key {k!r} that cannot be serialized")
                out[k] = self.encode(v, f"{where}[{k!r}]", kept)
            return out
        for codec in self.codecs:
            if isinstance(value, codec.type):
                return {codec.tag: codec.encode(value, where, lambda v, w: self.encode(v, w, None))}
        raise TypeError(f"spec(): argument {where} of type {type(value).__name__} cannot be serialized")

    def decode(self, value, kept: Invariant | None):
        """The value a JSON value of :meth:`encode` stands for (``kept``: the spec's invariant)."""
        if isinstance(value, list):
            return [self.decode(v, kept) for v in value]
        if not isinstance(value, dict):
            return value
        tags = [k for k in value if k.startswith("$")]
        if not tags:
            return {k: self.decode(v, kept) for k, v in value.items()}
        tag = tags[0]
        body = value[tag]
        if tag == "$ref":
            if body != "invariant" or kept is None:
                raise MechanismSpecError("the spec refers to its invariant but has none")
            return kept
        if tag == "$invariant":
            return invariants_module.from_spec(body)
        if tag == "$fraction":
            return Fraction(int(body[0]), int(body[1]))
        if tag == "$array":
            return np.array(body, dtype=np.dtype(value.get("dtype", "float64")))
        if tag == "$sparse":
            return sp.csr_matrix((np.asarray(body["data"], dtype=float),
                                  (np.asarray(body["row"], dtype=np.int64), np.asarray(body["col"], dtype=np.int64))),
                                 shape=tuple(body["shape"]))
        for codec in self.codecs:
            if codec.tag == tag:
                return codec.decode(body, lambda v: self.decode(v, None))
        raise MechanismSpecError(f"unknown tag {tag!r} in a mechanism spec")

    # -- mechanisms ---------------------------------------------------------------------
    def spec_of(self, mechanism) -> dict:
        """The spec of ``mechanism`` (see :meth:`Mechanism.spec`): a ``TypeError`` for a class
        outside :attr:`classes`, an object not built by calling its class, or an argument that
        cannot be serialized (named)."""
        cls = type(mechanism)
        if self.classes.get(cls.spec_name) is not cls:
            raise TypeError(f"{cls.__name__} is not a registered mechanism class; spec() needs one of "
                            f"{', '.join(self.classes)}")
        recorded = mechanism.__dict__.get("_spec_arguments")
        if recorded is None or recorded[0] is not cls:
            raise TypeError(f"{cls.__name__}: the constructor arguments were not recorded (the object was not "
                            "built by calling its class), so it has no spec")
        arguments = recorded[1]
        kept = mechanism.invariant
        params = inspect.signature(cls.__init__).parameters
        out: dict[str, Any] = {}
        for name, value in arguments.items():
            kind = params[name].kind
            if kind is inspect.Parameter.VAR_KEYWORD:
                for k, v in value.items():
                    out[k] = self.encode(v, repr(k), kept)
            elif kind is inspect.Parameter.VAR_POSITIONAL:
                raise TypeError(f"{cls.__name__}: positional arguments *{name} cannot be serialized")
            else:
                out[name] = self.encode(value, repr(name), kept)
        return {"mechanism": cls.spec_name, "parameters": out, "invariant": None if kept is None else kept.spec()}

    def from_spec(self, spec: Mapping):
        """Rebuild a mechanism from ``spec`` (see :func:`privinfer.mechanisms.from_spec`)."""
        if not isinstance(spec, Mapping) or "mechanism" not in spec or "parameters" not in spec:
            raise MechanismSpecError("a mechanism spec is a mapping with 'mechanism', 'parameters' and 'invariant'")
        name = spec["mechanism"]
        if name not in self.classes:
            raise MechanismSpecError(f"unknown mechanism {name!r} (registered: {', '.join(self.classes)})")
        cls = self.classes[name]
        inv_spec = spec.get("invariant")
        kept = invariants_module.from_spec(inv_spec) if inv_spec is not None else None
        params = spec["parameters"]
        if not isinstance(params, Mapping):
            raise MechanismSpecError("the 'parameters' of a mechanism spec must be a mapping")
        mech = cls(**{k: self.decode(v, kept) for k, v in params.items()})
        got = mech.invariant
        if (got is None) != (kept is None):
            raise MechanismSpecError(f"the rebuilt {name} mechanism {'keeps no' if got is None else 'keeps an'} "
                                     "invariant, unlike its spec")
        if got is not None and (got.kind != kept.kind or got.shape != kept.shape):
            raise MechanismSpecError(f"the rebuilt {name} mechanism keeps a different invariant than its spec "
                                     "records")
        return mech


#: The package's format, once installed by the registry (module docstring).
_INSTALLED: list[SpecFormat] = []


def install(fmt: SpecFormat) -> SpecFormat:
    """Install the package's spec format (the registry does when it is imported; importing
    it again installs its new format in place of the old)."""
    _INSTALLED[:] = [fmt]
    return fmt


def installed() -> SpecFormat:
    """The package's spec format (installed when :mod:`privinfer.mechanisms` is imported)."""
    if not _INSTALLED:
        raise RuntimeError("no mechanism spec format: import privinfer.mechanisms (its registry installs it)")
    return _INSTALLED[0]


def mechanism_spec(mechanism) -> dict:
    """The spec of ``mechanism`` in the package's format (see :meth:`Mechanism.spec`)."""
    return installed().spec_of(mechanism)
