"""The mechanism registry: specs (``spec()`` / :func:`from_spec`) and building by CLI name.

Every concrete mechanism class of :mod:`privinfer.mechanisms` has a registry name
(``Mechanism.spec_name``): the name of the ``privinfer release --mechanism`` option where the
command offers it (``generalized-laplace``, ``projected-gaussian``, ``topdown-baseline``,
...), otherwise the kebab-case form of the class name (``laplace``, ``linear-gaussian``,
``semi-dp-gaussian``, ``k-norm``, ``tulap``, ...).

Specs
-----
``mechanism.spec()`` returns ``{"mechanism": name, "parameters": {...}, "invariant": ...}``
(format in :mod:`privinfer.mechanisms.base`); :func:`from_spec` rebuilds the mechanism by
calling its constructor with the decoded parameters, so the rebuilt object has the same
``logp``, ``guarantee`` and invariant (with its values ``t``).  Example::

    >>> from privinfer import invariants as I
    >>> from privinfer.mechanisms import ProjectedGaussian
    >>> ProjectedGaussian(I.total(3), sigma=2.0).spec()
    {'mechanism': 'projected-gaussian', 'parameters': {'invariant': {'$ref': 'invariant'},
     'sigma': 2.0}, 'invariant': {'kind': 'total', 'n': 3}}

Building by CLI name
--------------------
:func:`build` ``(name, invariant, n, *, epsilon, delta, sigma, sensitivity, norm)`` makes the
mechanism a ``privinfer release`` option names.  Each CLI mechanism declares what it needs
(:class:`CliMechanism`): integer input, whether it keeps an invariant, transparency, the
option sets it accepts (:class:`OptionSet`: required and forbidden options) and a one-line
parameter description.  Wrong options raise :class:`MechanismOptionError` with a one-line
message; invalid values raise the constructors' own ``ValueError``.
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
from .base import Mechanism
from .canonical_noise import (
    CanonicalNoise,
    CanonicalNoiseMechanism,
    GaussianCanonicalMechanism,
    GaussianCanonicalNoise,
    TulapMechanism,
)
from .classic import Gaussian, Laplace
from ..lattice.laws import as_rational
from .correlated import CorrelatedGaussian
from .discrete import DiscreteGaussian, DoubleGeometric
from .integer_subspace import GeneralizedGaussian, GeneralizedLaplace
from .linear_gaussian import LinearGaussian
from .noisy_measurements import NoisyMeasurements
from .semidp import KNorm, SemiDPGaussian
from .subspace import ExtendedGaussian, ExtendedLaplace, ProjectedGaussian, ProjectedLaplace
from .topdown import TopDownBaseline
from .tradeoff import TradeoffFunction, eps_delta_tradeoff, gaussian_tradeoff
from .tulap import Tulap
from .two_by_two import SemiPrivateTwoByTwo

__all__ = [
    "REGISTRY",
    "MechanismSpecError",
    "MechanismOptionError",
    "OptionSet",
    "CliMechanism",
    "mechanism_spec",
    "from_spec",
    "build",
    "cli_names",
    "cli_info",
]


class MechanismSpecError(ValueError):
    """A mechanism spec cannot be turned into a mechanism (the message names the problem)."""


class MechanismOptionError(ValueError):
    """The options given for a CLI mechanism name do not fit it (one-line message)."""


_CLASSES = (
    Gaussian, Laplace,
    DoubleGeometric, DiscreteGaussian,
    GeneralizedLaplace, GeneralizedGaussian,
    ProjectedGaussian, ExtendedGaussian, ProjectedLaplace, ExtendedLaplace,
    CorrelatedGaussian,
    SemiDPGaussian, KNorm,
    LinearGaussian,
    NoisyMeasurements,
    TopDownBaseline,
    TulapMechanism, GaussianCanonicalMechanism, CanonicalNoiseMechanism, SemiPrivateTwoByTwo,
)


def _registry() -> dict[str, type]:
    reg: dict[str, type] = {}
    for cls in _CLASSES:
        if cls.spec_name in reg:
            raise RuntimeError(f"two mechanism classes share the registry name {cls.spec_name!r}")
        reg[cls.spec_name] = cls
    return reg


#: Registry name -> mechanism class (read-only by convention; built once at import).
REGISTRY: Mapping[str, type] = _registry()


# =============================================================================================
# encoding of constructor arguments
# =============================================================================================
_TRADEOFFS = {"(eps, delta)-DP": eps_delta_tradeoff, "mu-GDP": gaussian_tradeoff}


def _encode(value, where: str, kept):
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
            raise TypeError(f"spec(): argument {where} is an array of dtype {value.dtype}, which cannot be serialized")
        return {"$array": value.tolist(), "dtype": str(value.dtype)}
    if sp.issparse(value):
        coo = sp.coo_matrix(value)
        return {"$sparse": {"shape": [int(s) for s in coo.shape], "row": coo.row.tolist(),
                            "col": coo.col.tolist(), "data": coo.data.astype(float).tolist()}}
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{where}[{i}]", kept) for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or k.startswith("$"):
                raise TypeError(f"spec(): argument {where} has a key {k!r} that cannot be serialized")
            out[k] = _encode(v, f"{where}[{k!r}]", kept)
        return out
    if isinstance(value, Tulap):
        return {"$tulap": {"m": float(value.m), "b": float(value.b), "q": float(value.q)}}
    if isinstance(value, GaussianCanonicalNoise):
        return {"$gaussian-canonical-noise": {"mu": float(value.mu)}}
    if isinstance(value, TradeoffFunction):
        if value.name not in _TRADEOFFS:
            raise TypeError(f"spec(): argument {where} is a tradeoff function ({value.name}) not built by "
                            "eps_delta_tradeoff or gaussian_tradeoff, which cannot be serialized")
        return {"$tradeoff": {"name": value.name, "parameters": _encode(dict(value.parameters), where, None)}}
    if isinstance(value, CanonicalNoise):
        return {"$canonical-noise": {"tradeoff": _encode(value.tradeoff, where, None),
                                     "max_steps": int(value.max_steps)}}
    raise TypeError(f"spec(): argument {where} of type {type(value).__name__} cannot be serialized")


def _decode(value, kept: Invariant | None):
    if isinstance(value, list):
        return [_decode(v, kept) for v in value]
    if not isinstance(value, dict):
        return value
    tags = [k for k in value if k.startswith("$")]
    if not tags:
        return {k: _decode(v, kept) for k, v in value.items()}
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
    if tag == "$tulap":
        return Tulap(body["m"], body["b"], body["q"])
    if tag == "$gaussian-canonical-noise":
        return GaussianCanonicalNoise(body["mu"])
    if tag == "$tradeoff":
        if body["name"] not in _TRADEOFFS:
            raise MechanismSpecError(f"unknown tradeoff function {body['name']!r}")
        return _TRADEOFFS[body["name"]](**_decode(body["parameters"], None))
    if tag == "$canonical-noise":
        return CanonicalNoise(_decode(body["tradeoff"], None), max_steps=body["max_steps"])
    raise MechanismSpecError(f"unknown tag {tag!r} in a mechanism spec")


def mechanism_spec(mechanism: Mechanism) -> dict:
    """The spec of ``mechanism`` (see :meth:`Mechanism.spec`)."""
    cls = type(mechanism)
    if REGISTRY.get(cls.spec_name) is not cls:
        raise TypeError(f"{cls.__name__} is not a registered mechanism class; spec() needs one of "
                        f"{', '.join(REGISTRY)}")
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
                out[k] = _encode(v, repr(k), kept)
        elif kind is inspect.Parameter.VAR_POSITIONAL:
            raise TypeError(f"{cls.__name__}: positional arguments *{name} cannot be serialized")
        else:
            out[name] = _encode(value, repr(name), kept)
    return {"mechanism": cls.spec_name, "parameters": out, "invariant": None if kept is None else kept.spec()}


def from_spec(spec: Mapping) -> Mechanism:
    """Rebuild a mechanism from ``spec`` (a dict from :meth:`Mechanism.spec`, e.g. read from JSON).

    Raises :class:`MechanismSpecError` if the spec is malformed, names an unknown mechanism or
    if the rebuilt mechanism does not keep the invariant the spec records.
    """
    if not isinstance(spec, Mapping) or "mechanism" not in spec or "parameters" not in spec:
        raise MechanismSpecError("a mechanism spec is a mapping with 'mechanism', 'parameters' and 'invariant'")
    name = spec["mechanism"]
    if name not in REGISTRY:
        raise MechanismSpecError(f"unknown mechanism {name!r} (registered: {', '.join(REGISTRY)})")
    cls = REGISTRY[name]
    inv_spec = spec.get("invariant")
    kept = invariants_module.from_spec(inv_spec) if inv_spec is not None else None
    params = spec["parameters"]
    if not isinstance(params, Mapping):
        raise MechanismSpecError("the 'parameters' of a mechanism spec must be a mapping")
    mech = cls(**{k: _decode(v, kept) for k, v in params.items()})
    got = mech.invariant
    if (got is None) != (kept is None):
        raise MechanismSpecError(f"the rebuilt {name} mechanism {'keeps no' if got is None else 'keeps an'} "
                                 "invariant, unlike its spec")
    if got is not None and (got.kind != kept.kind or got.shape != kept.shape):
        raise MechanismSpecError(f"the rebuilt {name} mechanism keeps a different invariant than its spec records")
    return mech


# =============================================================================================
# building by CLI name
# =============================================================================================
_OPTIONS = ("epsilon", "delta", "sigma", "sensitivity", "norm")


@dataclass(frozen=True)
class OptionSet:
    """One accepted combination of options: applies when ``when`` (an option name) is given,
    or always if ``when`` is None; ``required`` must be given, ``forbidden`` must not be
    (checked in that order, as ``needs --x`` / ``does not take --x``)."""

    make: Callable[..., Mechanism]
    required: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    when: str | None = None


@dataclass(frozen=True)
class CliMechanism:
    """What a CLI mechanism name declares.

    ``integer``: takes and releases integer counts; ``needs_invariant``: keeps an invariant
    (True) or adds noise to every cell and takes none (False); ``transparent``: exact
    likelihood; ``params``: one line for ``privinfer release --help``; ``option_sets``: the
    accepted option combinations, the first applicable one is used; ``exactly_one``: options
    of which exactly one must be given (checked after the forbidden ones).
    """

    name: str
    cls: type
    integer: bool
    needs_invariant: bool
    params: str
    option_sets: tuple[OptionSet, ...]
    transparent: bool = True
    exactly_one: tuple[str, ...] = ()

    @property
    def invariant(self) -> str:
        """``"required"`` or ``"none"`` (the wording of the release metadata)."""
        return "required" if self.needs_invariant else "none"


def _integer_sensitivity(s):
    if s != round(s) or s < 1:
        raise MechanismOptionError("the sensitivity of an integer mechanism must be a positive integer")
    return int(round(s))


def _sens(o) -> float:
    """``--sensitivity`` defaults to 1 (adding or removing one record changes one count by 1)."""
    return 1.0 if o["sensitivity"] is None else o["sensitivity"]


def _topdown_double_geometric(inv, n, o):
    sens = _integer_sensitivity(_sens(o))
    scale = as_rational(sens, "sensitivity") / as_rational(o["epsilon"], "epsilon")
    return TopDownBaseline(inv, "double_geometric", scale, sensitivity=sens)


_GAUSS_PARAMS = "--epsilon --delta [--sensitivity], or --sigma"

_CLI = (
    CliMechanism("generalized-laplace", GeneralizedLaplace, True, True, "--epsilon [--norm l1|l2] [--sensitivity]", (
        OptionSet(lambda inv, n, o: GeneralizedLaplace(inv, o["epsilon"], norm=o["norm"] or "l1",
                                                       sensitivity=_sens(o)),
                  ("epsilon",), ("delta", "sigma")),)),
    CliMechanism("generalized-gaussian", GeneralizedGaussian, True, True, "--sigma [--sensitivity]", (
        OptionSet(lambda inv, n, o: GeneralizedGaussian(inv, o["sigma"], sensitivity=_sens(o)),
                  ("sigma",), ("epsilon", "delta")),)),
    CliMechanism("projected-gaussian", ProjectedGaussian, False, True, _GAUSS_PARAMS, (
        OptionSet(lambda inv, n, o: ProjectedGaussian(inv, sigma=o["sigma"]),
                  (), ("epsilon", "delta", "sensitivity"), when="sigma"),
        OptionSet(lambda inv, n, o: ProjectedGaussian(inv, o["epsilon"], o["delta"], _sens(o)),
                  ("epsilon", "delta")))),
    CliMechanism("extended-gaussian", ExtendedGaussian, False, True, _GAUSS_PARAMS, (
        OptionSet(lambda inv, n, o: ExtendedGaussian(inv, sigma=o["sigma"]),
                  (), ("epsilon", "delta", "sensitivity"), when="sigma"),
        OptionSet(lambda inv, n, o: ExtendedGaussian(inv, o["epsilon"], o["delta"], _sens(o)),
                  ("epsilon", "delta")))),
    CliMechanism("projected-laplace", ProjectedLaplace, False, True, "--epsilon [--sensitivity]", (
        OptionSet(lambda inv, n, o: ProjectedLaplace(inv, o["epsilon"], _sens(o)),
                  ("epsilon",), ("delta", "sigma")),)),
    CliMechanism("extended-laplace", ExtendedLaplace, False, True, "--epsilon [--sensitivity]", (
        OptionSet(lambda inv, n, o: ExtendedLaplace(inv, o["epsilon"], _sens(o)),
                  ("epsilon",), ("delta", "sigma")),)),
    CliMechanism("double-geometric", DoubleGeometric, True, False, "--epsilon [--sensitivity]", (
        OptionSet(lambda inv, n, o: DoubleGeometric(n, o["epsilon"], sensitivity=_integer_sensitivity(_sens(o))),
                  ("epsilon",), ("delta", "sigma")),)),
    CliMechanism("discrete-gaussian", DiscreteGaussian, True, False, "--sigma [--sensitivity]", (
        OptionSet(lambda inv, n, o: DiscreteGaussian(n, o["sigma"], sensitivity=_sens(o)),
                  ("sigma",), ("epsilon", "delta")),)),
    CliMechanism("topdown-baseline", TopDownBaseline, True, True,
                 "--sigma (discrete Gaussian) or --epsilon (double geometric)", (
                     OptionSet(lambda inv, n, o: TopDownBaseline(inv, "discrete_gaussian", o["sigma"],
                                                                 sensitivity=_sens(o)),
                               (), ("delta",), when="sigma"),
                     OptionSet(_topdown_double_geometric, (), ("delta",))),
                 transparent=False, exactly_one=("sigma", "epsilon")),
)

_CLI_BY_NAME = {c.name: c for c in _CLI}


def cli_names() -> list[str]:
    """The mechanism names of ``privinfer release --mechanism``, in the order of its help."""
    return [c.name for c in _CLI]


def cli_info(name: str) -> CliMechanism:
    """What the CLI mechanism ``name`` declares (see :class:`CliMechanism`)."""
    if name not in _CLI_BY_NAME:
        raise MechanismOptionError(f"unknown mechanism '{name}' (choose from {', '.join(cli_names())})")
    return _CLI_BY_NAME[name]


def _need(info: CliMechanism, names, given):
    missing = [k for k in names if given[k] is None]
    if missing:
        raise MechanismOptionError(
            f"mechanism {info.name} needs {', '.join('--' + m for m in missing)} (parameters: {info.params})"
        )


def _forbid(info: CliMechanism, names, given):
    extra = [k for k in names if given[k] is not None]
    if extra:
        raise MechanismOptionError(
            f"mechanism {info.name} does not take {', '.join('--' + e for e in extra)} (parameters: {info.params})"
        )


def build(name: str, invariant: Invariant | None, n: int, *, epsilon=None, delta=None, sigma=None,
          sensitivity=None, norm=None) -> Mechanism:
    """The mechanism called ``name`` (one of :func:`cli_names`) on ``n`` cells.

    ``sensitivity`` defaults to 1 (adding or removing one record changes one count by 1).
    Option errors raise :class:`MechanismOptionError` (one line, naming the option).
    """
    info = cli_info(name)
    if info.needs_invariant and invariant is None:
        raise MechanismOptionError(
            f"mechanism {name} keeps an invariant: choose --invariant total, groups:COLUMN or margins")
    if not info.needs_invariant and invariant is not None:
        raise MechanismOptionError(
            f"mechanism {name} adds noise to every cell and keeps no invariant: use --invariant none "
            "(or generalized-laplace / generalized-gaussian to keep one)"
        )
    given = {"epsilon": epsilon, "delta": delta, "sigma": sigma, "sensitivity": sensitivity, "norm": norm}
    if norm is not None and name != "generalized-laplace":
        raise MechanismOptionError("--norm applies to generalized-laplace only")
    for option_set in info.option_sets:
        if option_set.when is None or given[option_set.when] is not None:
            _need(info, option_set.required, given)
            _forbid(info, option_set.forbidden, given)
            if info.exactly_one and sum(given[k] is not None for k in info.exactly_one) != 1:
                raise MechanismOptionError(
                    f"mechanism {name} needs exactly one of {' and '.join('--' + k for k in info.exactly_one)}")
            return option_set.make(invariant, n, given)
    raise AssertionError(f"no option set of {name} applies")  # pragma: no cover - the last one always applies
