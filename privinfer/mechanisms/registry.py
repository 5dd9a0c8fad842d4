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
``logp``, ``guarantee`` and invariant (with its values ``t``).  The machinery lives in
:mod:`privinfer.mechanisms.spec`, which imports no mechanism; this module builds the package's
:data:`FORMAT` -- the registered classes and the codecs of the value types defined beside the
mechanisms -- and installs it there, so :meth:`Mechanism.spec` finds it.  Example::

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

from dataclasses import dataclass
from typing import Callable, Mapping

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
from .spec import MechanismSpecError, SpecFormat, ValueCodec, install
from .two_by_two import SemiPrivateTwoByTwo

__all__ = [
    "REGISTRY",
    "FORMAT",
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
# specs: the value types defined beside the mechanisms, and the package's format
# =============================================================================================
_TRADEOFFS = {"(eps, delta)-DP": eps_delta_tradeoff, "mu-GDP": gaussian_tradeoff}


def _encode_tradeoff(value: TradeoffFunction, where: str, nested):
    if value.name not in _TRADEOFFS:
        raise TypeError(f"spec(): argument {where} is a tradeoff function ({value.name}) not built by "
                        "eps_delta_tradeoff or gaussian_tradeoff, which cannot be serialized")
    return {"name": value.name, "parameters": nested(dict(value.parameters), where)}


def _decode_tradeoff(body, nested):
    if body["name"] not in _TRADEOFFS:
        raise MechanismSpecError(f"unknown tradeoff function {body['name']!r}")
    return _TRADEOFFS[body["name"]](**nested(body["parameters"]))


#: Value types of constructor arguments defined beside the mechanisms (the noise laws of the
#: canonical-noise mechanisms and their tradeoff functions), as :class:`~.spec.ValueCodec` entries.
_CODECS = (
    ValueCodec("$tulap", Tulap, lambda v, where, nested: {"m": float(v.m), "b": float(v.b), "q": float(v.q)},
               lambda body, nested: Tulap(body["m"], body["b"], body["q"])),
    ValueCodec("$gaussian-canonical-noise", GaussianCanonicalNoise, lambda v, where, nested: {"mu": float(v.mu)},
               lambda body, nested: GaussianCanonicalNoise(body["mu"])),
    ValueCodec("$tradeoff", TradeoffFunction, _encode_tradeoff, _decode_tradeoff),
    ValueCodec("$canonical-noise", CanonicalNoise,
               lambda v, where, nested: {"tradeoff": nested(v.tradeoff, where), "max_steps": int(v.max_steps)},
               lambda body, nested: CanonicalNoise(nested(body["tradeoff"]), max_steps=body["max_steps"])),
)

#: The spec format of the registered classes, installed for :meth:`Mechanism.spec` (:mod:`.spec`).
FORMAT = install(SpecFormat(REGISTRY, _CODECS))


def mechanism_spec(mechanism: Mechanism) -> dict:
    """The spec of ``mechanism`` (see :meth:`Mechanism.spec`)."""
    return FORMAT.spec_of(mechanism)


def from_spec(spec: Mapping) -> Mechanism:
    """Rebuild a mechanism from ``spec`` (a dict from :meth:`Mechanism.spec`, e.g. read from JSON).

    Raises :class:`MechanismSpecError` if the spec is malformed, names an unknown mechanism or
    if the rebuilt mechanism does not keep the invariant the spec records.
    """
    return FORMAT.from_spec(spec)


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
