"""The one place where mechanisms are built from names and (de)serialized for the sidecar.

* :func:`build_mechanism` -- a mechanism from its command-line name and parameters
  (``generalized-laplace`` with ``epsilon=0.5``, ...).
* :func:`mechanism_to_json` / :func:`mechanism_from_json` -- the ``"mechanism"`` entry of the
  sidecar, ``{"name": ..., "parameters": {...}}``, and the mechanism rebuilt from it on the
  published invariant.
* :func:`describe_mechanism` -- the public description written beside it (guarantee, dropped
  likelihood constant, transparency, the curator's sampler certificate).

Every other module goes through these functions, so the encoding can change in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..invariants import Invariant
from .files import ReleaseFileError, jsonable

__all__ = ["MECHANISMS", "MechanismInfo", "build_mechanism", "mechanism_to_json", "mechanism_from_json",
           "describe_mechanism", "is_transparent"]


@dataclass(frozen=True)
class MechanismInfo:
    """What a command-line mechanism name needs: integer input, an invariant, which parameters."""

    integer: bool
    invariant: str  # "required" | "none"
    params: str     # human description of the parameters
    transparent: bool = True


MECHANISMS = {
    "generalized-laplace": MechanismInfo(True, "required", "--epsilon [--norm l1|l2] [--sensitivity]"),
    "generalized-gaussian": MechanismInfo(True, "required", "--sigma [--sensitivity]"),
    "projected-gaussian": MechanismInfo(False, "required", "--epsilon --delta [--sensitivity], or --sigma"),
    "extended-gaussian": MechanismInfo(False, "required", "--epsilon --delta [--sensitivity], or --sigma"),
    "projected-laplace": MechanismInfo(False, "required", "--epsilon [--sensitivity]"),
    "extended-laplace": MechanismInfo(False, "required", "--epsilon [--sensitivity]"),
    "double-geometric": MechanismInfo(True, "none", "--epsilon [--sensitivity]"),
    "discrete-gaussian": MechanismInfo(True, "none", "--sigma [--sensitivity]"),
    "topdown-baseline": MechanismInfo(True, "required", "--sigma (discrete Gaussian) or --epsilon (double geometric)",
                                      transparent=False),
}

#: The parameters a command-line mechanism may take.
PARAMETERS = ("epsilon", "delta", "sigma", "sensitivity", "norm")


def _need(name, **given):
    missing = [k for k, v in given.items() if v is None]
    if missing:
        raise ReleaseFileError(
            f"mechanism {name} needs {', '.join('--' + m for m in missing)} (parameters: {MECHANISMS[name].params})"
        )


def _forbid(name, **given):
    extra = [k for k, v in given.items() if v is not None]
    if extra:
        raise ReleaseFileError(
            f"mechanism {name} does not take {', '.join('--' + e for e in extra)} (parameters: {MECHANISMS[name].params})"
        )


def _integer_sensitivity(s):
    if s != round(s) or s < 1:
        raise ReleaseFileError("the sensitivity of an integer mechanism must be a positive integer")
    return int(round(s))


def build_mechanism(name: str, invariant: Invariant | None, n: int, *, epsilon=None, delta=None, sigma=None,
                    sensitivity=None, norm=None):
    """The mechanism called ``name`` (a key of :data:`MECHANISMS`) on ``n`` cells.

    ``sensitivity`` defaults to 1 (adding or removing one record changes one count by 1).
    Errors name the missing or superfluous option (``--epsilon``, ...).
    """
    from .. import mechanisms as M

    if name not in MECHANISMS:
        raise ReleaseFileError(f"unknown mechanism '{name}' (choose from {', '.join(MECHANISMS)})")
    info = MECHANISMS[name]
    if info.invariant == "required" and invariant is None:
        raise ReleaseFileError(f"mechanism {name} keeps an invariant: choose --invariant total, groups:COLUMN or margins")
    if info.invariant == "none" and invariant is not None:
        raise ReleaseFileError(
            f"mechanism {name} adds noise to every cell and keeps no invariant: use --invariant none "
            "(or generalized-laplace / generalized-gaussian to keep one)"
        )
    if norm is not None and name != "generalized-laplace":
        raise ReleaseFileError("--norm applies to generalized-laplace only")
    sens = 1.0 if sensitivity is None else sensitivity
    if name == "generalized-laplace":
        _need(name, epsilon=epsilon)
        _forbid(name, delta=delta, sigma=sigma)
        return M.GeneralizedLaplace(invariant, epsilon, norm=norm or "l1", sensitivity=sens)
    if name == "generalized-gaussian":
        _need(name, sigma=sigma)
        _forbid(name, epsilon=epsilon, delta=delta)
        return M.GeneralizedGaussian(invariant, sigma, sensitivity=sens)
    if name in ("projected-gaussian", "extended-gaussian"):
        cls = M.ProjectedGaussian if name == "projected-gaussian" else M.ExtendedGaussian
        if sigma is not None:
            _forbid(name, epsilon=epsilon, delta=delta, sensitivity=sensitivity)
            return cls(invariant, sigma=sigma)
        _need(name, epsilon=epsilon, delta=delta)
        return cls(invariant, epsilon, delta, sens)
    if name in ("projected-laplace", "extended-laplace"):
        cls = M.ProjectedLaplace if name == "projected-laplace" else M.ExtendedLaplace
        _need(name, epsilon=epsilon)
        _forbid(name, delta=delta, sigma=sigma)
        return cls(invariant, epsilon, sens)
    if name == "double-geometric":
        _need(name, epsilon=epsilon)
        _forbid(name, delta=delta, sigma=sigma)
        return M.DoubleGeometric(n, epsilon, sensitivity=_integer_sensitivity(sens))
    if name == "discrete-gaussian":
        _need(name, sigma=sigma)
        _forbid(name, epsilon=epsilon, delta=delta)
        return M.DiscreteGaussian(n, sigma, sensitivity=sens)
    # topdown-baseline
    _forbid(name, delta=delta)
    if (epsilon is None) == (sigma is None):
        raise ReleaseFileError("mechanism topdown-baseline needs exactly one of --sigma and --epsilon")
    if sigma is not None:
        return M.TopDownBaseline(invariant, "discrete_gaussian", sigma, sensitivity=sens)
    from ..mechanisms.discrete import as_rational

    scale = as_rational(_integer_sensitivity(sens), "sensitivity") / as_rational(epsilon, "epsilon")
    return M.TopDownBaseline(invariant, "double_geometric", scale, sensitivity=_integer_sensitivity(sens))


# =============================================================================================
# the sidecar entry
# =============================================================================================
def _name_of(mechanism) -> str | None:
    from .. import mechanisms as M

    names = {M.GeneralizedLaplace: "generalized-laplace", M.GeneralizedGaussian: "generalized-gaussian",
             M.ProjectedGaussian: "projected-gaussian", M.ExtendedGaussian: "extended-gaussian",
             M.ProjectedLaplace: "projected-laplace", M.ExtendedLaplace: "extended-laplace",
             M.DoubleGeometric: "double-geometric", M.DiscreteGaussian: "discrete-gaussian",
             M.TopDownBaseline: "topdown-baseline"}
    return names.get(type(mechanism))


def _same(a, b) -> bool:
    """Same class and the same guarantee (definition, parameters, relation): for the mechanisms
    of :data:`MECHANISMS` the likelihood is a function of these only."""
    ga, gb = a.guarantee, b.guarantee
    return (type(a) is type(b) and a.n == b.n and ga.definition == gb.definition
            and ga.relation == gb.relation and jsonable(dict(ga.parameters)) == jsonable(dict(gb.parameters)))


def mechanism_to_json(mechanism, name: str | None = None, parameters: dict | None = None) -> dict:
    """The sidecar's ``"mechanism"`` entry: ``{"name": NAME, "parameters": {...}}``.

    With ``name`` (and ``parameters``, the options it was built with) the entry records them as
    given.  Without, the name and parameters are read off the mechanism object (its class and
    its guarantee) and checked: the mechanism rebuilt from them must have the same class and
    the same guarantee, else a :class:`ReleaseFileError` says it cannot be recorded (rather
    than write a sidecar that describes another mechanism).
    """
    if name is not None:
        params = {k: v for k, v in (parameters or {}).items() if v is not None}
        return jsonable({"name": name, "parameters": params})
    guess = _name_of(mechanism)
    if guess is None:
        raise ReleaseFileError(
            f"a {type(mechanism).__name__} release cannot be recorded in a release file (mechanisms: "
            f"{', '.join(MECHANISMS)})")
    g = dict(mechanism.guarantee.parameters)
    known = {k: g[k] for k in PARAMETERS if k in g}
    if getattr(mechanism, "norm", None) is not None:
        known["norm"] = mechanism.norm
    candidates = [known, {k: v for k, v in known.items() if k != "sigma"},
                  {k: v for k, v in known.items() if k in ("sigma",)},
                  {k: v for k, v in known.items() if k != "epsilon"}]
    for params in candidates:
        try:
            rebuilt = build_mechanism(guess, mechanism.invariant, mechanism.n, **params)
        except (ValueError, TypeError):
            continue
        if _same(rebuilt, mechanism):
            return jsonable({"name": guess, "parameters": params})
    raise ReleaseFileError(
        f"this {type(mechanism).__name__} cannot be recorded in a release file: no parameters of "
        f"'{guess}' ({MECHANISMS[guess].params}) rebuild the same mechanism")


def mechanism_from_json(entry: dict, invariant: Invariant | None, n: int):
    """The mechanism of a sidecar's ``"mechanism"`` entry, on ``invariant`` (with its published
    ``t``) and ``n`` cells.  Unknown names or parameters raise :class:`ReleaseFileError`."""
    if not isinstance(entry, dict):
        raise ReleaseFileError("metadata: the 'mechanism' entry must be an object")
    params = entry.get("parameters", {})
    if not isinstance(params, dict):
        raise ReleaseFileError("metadata: the mechanism's 'parameters' must be an object")
    unknown = set(params) - set(PARAMETERS)
    if unknown:
        raise ReleaseFileError(f"metadata: unknown mechanism parameter(s) {', '.join(sorted(unknown))}")
    return build_mechanism(entry.get("name", ""), invariant, n, **params)


def is_transparent(mechanism) -> bool:
    """Whether the noise law is public and independent of the data (so ``logp`` exists)."""
    return bool(getattr(mechanism, "transparent", True))


def describe_mechanism(mechanism) -> dict:
    """The public description of a mechanism written to the sidecar: ``guarantee``,
    ``logp_constant_dropped``, ``transparent`` and, for mechanisms sampled by a certified
    chain, ``sampler`` (burn-in, TV threshold, lag, coupling replicates)."""
    g = mechanism.guarantee
    out = {
        "guarantee": {"definition": g.definition, "parameters": dict(g.parameters),
                      "relation": g.relation, "reference": g.reference},
        "logp_constant_dropped": mechanism.logp_constant_dropped,
        "transparent": is_transparent(mechanism),
    }
    cert = getattr(mechanism, "certificate", None)
    if cert is not None:
        out["sampler"] = {"burn_in_sweeps": int(cert.burn_in), "tv_threshold": float(cert.threshold),
                          "lag": int(cert.lag), "coupling_replicates": int(cert.n_replicates)}
    return jsonable(out)
