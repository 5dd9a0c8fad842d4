"""The one place where mechanisms are built from names and (de)serialized for the sidecar.

* :func:`build_mechanism` -- a mechanism from its command-line name and options
  (``generalized-laplace`` with ``epsilon=0.5``, ...), through the mechanism registry
  (:func:`privinfer.mechanisms.build`).
* :func:`mechanism_to_json` / :func:`mechanism_from_json` -- the sidecar's ``"mechanism"``
  entry ``{"name": ..., "parameters": {...}}`` (the command-line options, for people) and its
  ``"mechanism_spec"`` (:meth:`~privinfer.mechanisms.Mechanism.spec`, the mechanism with its
  invariant, for :func:`privinfer.mechanisms.from_spec`), and the mechanism rebuilt from them.
* :func:`describe_mechanism` -- the public description written beside it (guarantee, dropped
  likelihood constant, transparency, how the noise was sampled).

Every other module goes through these functions, so the encoding can change in one place.
"""

from __future__ import annotations

from .. import mechanisms as M
from ..invariants import Invariant
from .files import ReleaseFileError, jsonable

__all__ = ["MECHANISMS", "build_mechanism", "mechanism_to_json", "mechanism_from_json",
           "describe_mechanism", "is_transparent"]

#: The command-line mechanisms and what each declares (:func:`privinfer.mechanisms.cli_info`).
MECHANISMS = {name: M.cli_info(name) for name in M.cli_names()}

#: The options a command-line mechanism may take.
PARAMETERS = ("epsilon", "delta", "sigma", "sensitivity", "norm")


def build_mechanism(name: str, invariant: Invariant | None, n: int, *, epsilon=None, delta=None, sigma=None,
                    sensitivity=None, norm=None):
    """The mechanism called ``name`` (a key of :data:`MECHANISMS`) on ``n`` cells.

    ``sensitivity`` defaults to 1 (adding or removing one record changes one count by 1).
    Errors name the missing or superfluous option (``--epsilon``, ...).
    """
    try:
        return M.build(name, invariant, n, epsilon=epsilon, delta=delta, sigma=sigma,
                       sensitivity=sensitivity, norm=norm)
    except M.MechanismOptionError as exc:
        raise ReleaseFileError(str(exc)) from None


# =============================================================================================
# the sidecar entry
# =============================================================================================
def mechanism_to_json(mechanism, name: str | None = None, parameters: dict | None = None) -> tuple[dict, dict]:
    """``(entry, spec)`` for the sidecar: ``entry = {"name": NAME, "parameters": {...}}`` --
    the command-line name and options when the mechanism was built from them, else its registry
    name and no options -- and ``spec = mechanism.spec()``, from which it is rebuilt.

    A mechanism whose spec cannot be written (e.g. built with a custom move set) raises a
    :class:`ReleaseFileError` naming the argument, rather than a sidecar that describes
    another mechanism.
    """
    try:
        spec = mechanism.spec()
    except TypeError as exc:
        raise ReleaseFileError(f"this {type(mechanism).__name__} cannot be recorded in a release file: {exc}") from None
    if name is not None:
        params = {k: v for k, v in (parameters or {}).items() if v is not None}
        entry = {"name": name, "parameters": params}
    else:
        entry = {"name": mechanism.spec_name, "parameters": {}}
    return jsonable(entry), jsonable(spec)


def mechanism_from_json(entry: dict, invariant: Invariant | None, n: int, spec: dict | None = None):
    """The mechanism of a sidecar, on ``invariant`` (with its published ``t``) and ``n`` cells.

    With a ``spec`` the mechanism is :func:`privinfer.mechanisms.from_spec` of it; the entry
    must name the same mechanism, and command-line options recorded in it must rebuild the same
    spec (a changed entry or spec is refused).  Without a spec (older sidecars) it is built from the entry.
    The rebuilt mechanism must act on ``n`` cells and keep an invariant with the same
    constraint matrix as ``invariant``.  Problems raise :class:`ReleaseFileError`.
    """
    if not isinstance(entry, dict):
        raise ReleaseFileError("metadata: the 'mechanism' entry must be an object")
    params = entry.get("parameters", {})
    if not isinstance(params, dict):
        raise ReleaseFileError("metadata: the mechanism's 'parameters' must be an object")
    unknown = set(params) - set(PARAMETERS)
    if unknown:
        raise ReleaseFileError(f"metadata: unknown mechanism parameter(s) {', '.join(sorted(unknown))}")
    name = entry.get("name", "")
    if spec is None:
        return build_mechanism(name, invariant, n, **params)
    if not isinstance(spec, dict) or name != spec.get("mechanism"):
        if name not in MECHANISMS and name not in M.REGISTRY:
            raise ReleaseFileError(f"unknown mechanism '{name}' (choose from {', '.join(MECHANISMS)})")
        raise ReleaseFileError("metadata: the mechanism entry and the mechanism spec name different mechanisms")
    from_options = build_mechanism(name, invariant, n, **params) if params else None
    try:
        mech = M.from_spec(spec)
    except (ValueError, TypeError, KeyError) as exc:
        raise ReleaseFileError(f"metadata: the mechanism spec cannot be read ({exc})") from None
    if from_options is not None and _without_t(from_options.spec()) != _without_t(spec):
        raise ReleaseFileError("metadata: the mechanism entry and the mechanism spec describe different mechanisms")
    if mech.n != n:
        raise ReleaseFileError(f"metadata: the mechanism acts on {mech.n} cells, the release has {n}")
    mi = mech.invariant
    if (mi is None) != (invariant is None) or (mi is not None and not _same_matrix(mi, invariant)):
        raise ReleaseFileError("metadata: the mechanism's invariant differs from the release's invariant")
    return mech


def _without_t(spec: dict) -> dict:
    """A mechanism spec as JSON without its invariant's values ``t`` (they are recorded, and
    checked, with the release's invariant)."""
    out = dict(jsonable(spec))
    if isinstance(out.get("invariant"), dict):
        out["invariant"] = {k: v for k, v in out["invariant"].items() if k != "t"}
    return out


def _same_matrix(a: Invariant, b: Invariant) -> bool:
    import numpy as np
    import scipy.sparse as sp

    if a.shape != b.shape:
        return False
    A = a.matrix.toarray() if sp.issparse(a.matrix) else np.asarray(a.matrix)
    B = b.matrix.toarray() if sp.issparse(b.matrix) else np.asarray(b.matrix)
    return bool(np.array_equal(A, B))


def is_transparent(mechanism) -> bool:
    """Whether the noise law is public and independent of the data (so ``logp`` exists)."""
    return bool(mechanism.transparent)


def describe_mechanism(mechanism) -> dict:
    """The public description of a mechanism written to the sidecar: ``guarantee``,
    ``logp_constant_dropped``, ``transparent`` and, for mechanisms whose noise is drawn by a
    sampler with something to report (exact vs MCMC, burn-in, coupling), ``sampler``."""
    g = mechanism.guarantee
    out = {
        "guarantee": {"definition": g.definition, "parameters": dict(g.parameters),
                      "relation": g.relation, "reference": g.reference},
        "logp_constant_dropped": mechanism.logp_constant_dropped,
        "transparent": is_transparent(mechanism),
    }
    sampler = mechanism.sampler_description()
    if sampler is not None:
        out["sampler"] = sampler
    return jsonable(out)
