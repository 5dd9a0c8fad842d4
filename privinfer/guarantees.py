r"""Typed privacy guarantees: what a release really satisfies, with conversions and composition.

A :class:`Guarantee` names a definition, its parameters, the neighbouring relation (and
invariant) it holds for, and the result it rests on.  The typed kinds carry their own
arithmetic:

* :class:`PureDP` -- :math:`(\epsilon, 0)`: :math:`P(M(x)\in S) \le e^\epsilon P(M(x')\in S)`.
* :class:`ApproxDP` -- :math:`(\epsilon, \delta)`.
* :class:`ZCDP` -- :math:`\rho`-zCDP (Bun and Steinke 2016): Renyi divergences
  :math:`D_\alpha \le \rho\alpha` for all :math:`\alpha > 1`.
* :class:`GDP` -- :math:`\mu`-GDP (Dong, Roth and Su 2022): trade-off at least :math:`G_\mu`.

Conversions (:meth:`Guarantee.to_approx_dp`), all in :mod:`privinfer.accounting`:

* pure -> approx: :math:`(\epsilon, 0)` is :math:`(\epsilon, \delta)` for every :math:`\delta`;
* zCDP -> approx: :math:`\epsilon = \rho + 2\sqrt{\rho\ln(1/\delta)}` (Bun-Steinke Prop. 1.3);
* GDP -> approx: the smallest :math:`\epsilon` on the curve
  :math:`\delta(\epsilon) = \Phi(-\epsilon/\mu+\mu/2) - e^\epsilon\Phi(-\epsilon/\mu-\mu/2)`;
* pure -> zCDP: :math:`\rho = \epsilon^2/2` (Bun-Steinke Prop. 1.4); GDP -> zCDP:
  :math:`\rho = \mu^2/2` (the Renyi divergences of :math:`N(0,1)` and :math:`N(\mu,1)` are
  :math:`\alpha\mu^2/2`, and :math:`\mu`-GDP is post-processing of that pair).

Composition (:func:`compose`, several mechanisms on the same data, adaptively): pure adds
:math:`\epsilon`; approx adds :math:`\epsilon` and :math:`\delta` (basic composition); zCDP adds
:math:`\rho`; GDP adds :math:`\mu^2`.  Mixed kinds: without an approx member, every member is
converted to zCDP and the rhos add; with one, every non-approx member is converted to
:math:`(\epsilon_i, \delta/k)` at an equal share of the given ``delta`` (k such members) and
the results add.  Composition requires the members to share the neighbouring relation; it is
recorded as the list of the members' relations when they differ.

Release-level honesty: a guarantee states what the *released output* satisfies.  A release
drawn exactly from the mechanism's law gets its kind with ``delta = 0`` where that applies;
one drawn approximately (MCMC within total variation :math:`\eta`) is :class:`ApproxDP` with
the added :math:`\delta` -- see :mod:`privinfer.mechanisms.integer_subspace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from .accounting import gdp_epsilon, pure_dp_to_zcdp, zcdp_to_approx_dp
from ._validation import check_delta, check_epsilon, check_positive

__all__ = ["Guarantee", "PureDP", "ApproxDP", "ZCDP", "GDP", "compose", "typed_guarantee"]


@dataclass(frozen=True)
class Guarantee:
    """What privacy a mechanism's release gives.

    Attributes
    ----------
    definition
        e.g. ``"(eps, delta)-induced subspace DP"``, ``"(eps, 0)-induced integer subspace DP"``,
        ``"Semi-DP (mu-GDP)"``, ``"rho-zCDP"``, ``"(eps, delta)-DP"``.
    parameters
        the numbers of the definition, e.g. ``{"epsilon": 1.0, "delta": 1e-6}``.
    relation
        the neighbouring relation and subspace, e.g. ``"add/remove one record; invariant C x = t"``.
    reference
        paper and result the claim rests on.

    Notes
    -----
    Untyped guarantees support no arithmetic; the typed subclasses do.
    """

    definition: str
    parameters: Mapping[str, Any] = field(default_factory=dict)
    relation: str = ""
    reference: str = ""

    #: the kind of definition ("pure", "approx", "zcdp", "gdp"; "other" for untyped)
    kind = "other"

    def __getitem__(self, key):
        return self.parameters[key]

    def parameter_text(self) -> str:
        """``"epsilon=0.5, delta=0"``: the parameters that are set, as one line."""
        return ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                         for k, v in self.parameters.items() if v is not None)

    def __str__(self) -> str:  # pragma: no cover - cosmetic
        ps = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in self.parameters.items())
        s = f"{self.definition} ({ps})"
        if self.relation:
            s += f"; {self.relation}"
        if self.reference:
            s += f" [{self.reference}]"
        return s

    def to_approx_dp(self, delta: float | None = None) -> "ApproxDP":
        """The :math:`(\\epsilon, \\delta)` statement this guarantee implies (see module docstring)."""
        raise TypeError(f"a '{self.definition}' guarantee has no conversion to (eps, delta)-DP")

    def to_zcdp(self) -> "ZCDP":
        """The zCDP statement this guarantee implies (pure, zCDP and GDP only)."""
        raise TypeError(f"a '{self.definition}' guarantee has no conversion to zCDP")


def _init(self, definition, parameters, relation, reference):
    Guarantee.__init__(self, definition, parameters, relation, reference)


class PureDP(Guarantee):
    r""":math:`(\epsilon, 0)`-DP for the stated relation (parameters ``epsilon``, ``delta = 0``)."""

    kind = "pure"

    def __init__(self, epsilon, *, definition: str = "(eps, 0)-DP", relation: str = "", reference: str = "",
                 **details):
        eps = check_epsilon(epsilon)
        _init(self, definition, {"epsilon": eps, "delta": 0.0, **details}, relation, reference)

    @property
    def epsilon(self) -> float:
        return float(self.parameters["epsilon"])

    def to_approx_dp(self, delta=None):
        return ApproxDP(self.epsilon, 0.0, relation=self.relation, reference=self.reference)

    def to_zcdp(self):
        return ZCDP(pure_dp_to_zcdp(self.epsilon), relation=self.relation, reference="Bun and Steinke 2016, Prop. 1.4")


class ApproxDP(Guarantee):
    r""":math:`(\epsilon, \delta)`-DP (``delta`` in [0, 1); 0 only when nothing approximate entered)."""

    kind = "approx"

    def __init__(self, epsilon, delta, *, definition: str = "(eps, delta)-DP", relation: str = "",
                 reference: str = "", **details):
        eps = check_epsilon(epsilon)
        d = float(delta)
        if not (0.0 <= d < 1.0):
            raise ValueError(f"delta must lie in [0, 1) (got {d!r})")
        _init(self, definition, {"epsilon": eps, "delta": d, **details}, relation, reference)

    @property
    def epsilon(self) -> float:
        return float(self.parameters["epsilon"])

    @property
    def delta(self) -> float:
        return float(self.parameters["delta"])

    def to_approx_dp(self, delta=None):
        return ApproxDP(self.epsilon, self.delta, relation=self.relation, reference=self.reference)


class ZCDP(Guarantee):
    r""":math:`\rho`-zCDP (parameter ``rho``)."""

    kind = "zcdp"

    def __init__(self, rho, *, definition: str = "rho-zCDP", relation: str = "", reference: str = "", **details):
        r = check_positive(rho, "rho")
        _init(self, definition, {"rho": r, **details}, relation, reference)

    @property
    def rho(self) -> float:
        return float(self.parameters["rho"])

    def to_approx_dp(self, delta=None):
        if delta is None:
            raise ValueError("converting zCDP to (eps, delta)-DP needs a delta")
        d = check_delta(delta)
        return ApproxDP(zcdp_to_approx_dp(self.rho, d), d, relation=self.relation,
                        reference="Bun and Steinke 2016, Prop. 1.3")

    def to_zcdp(self):
        return ZCDP(self.rho, relation=self.relation, reference=self.reference)


class GDP(Guarantee):
    r""":math:`\mu`-GDP (parameter ``mu``)."""

    kind = "gdp"

    def __init__(self, mu, *, definition: str = "mu-GDP", relation: str = "", reference: str = "", **details):
        m = check_positive(mu, "mu")
        _init(self, definition, {"mu": m, **details}, relation, reference)

    @property
    def mu(self) -> float:
        return float(self.parameters["mu"])

    def to_approx_dp(self, delta=None):
        if delta is None:
            raise ValueError("converting GDP to (eps, delta)-DP needs a delta")
        d = check_delta(delta)
        return ApproxDP(max(gdp_epsilon(self.mu, d), np.finfo(float).tiny), d, relation=self.relation,
                        reference="Dong, Roth and Su 2022, Cor. 2.13")

    def to_zcdp(self):
        return ZCDP(self.mu**2 / 2.0, relation=self.relation, reference="mu-GDP implies (mu^2/2)-zCDP")


def _relation(gs) -> str:
    rels = list(dict.fromkeys(g.relation for g in gs))
    return rels[0] if len(rels) == 1 else " | ".join(rels)


def compose(*guarantees: Guarantee, delta: float | None = None) -> Guarantee:
    """The guarantee of running all ``guarantees``' mechanisms on the same data (module docstring)."""
    gs = list(guarantees)
    if not gs:
        raise ValueError("compose needs at least one guarantee")
    for g in gs:
        if type(g) not in (PureDP, ApproxDP, ZCDP, GDP):
            raise TypeError(f"cannot compose a '{g.definition}' guarantee (typed guarantees only)")
    rel = _relation(gs)
    ref = "basic composition"
    kinds = {g.kind for g in gs}
    if kinds == {"pure"}:
        return PureDP(sum(g.epsilon for g in gs), relation=rel, reference=ref)
    if kinds == {"gdp"}:
        return GDP(float(np.sqrt(sum(g.mu**2 for g in gs))), relation=rel,
                   reference="Dong, Roth and Su 2022, Cor. 3.3")
    if "approx" not in kinds:
        return ZCDP(sum(g.to_zcdp().rho for g in gs), relation=rel, reference="Bun and Steinke 2016, Lemma 2.3")
    others = [g for g in gs if g.kind != "approx"]
    if others and delta is None:
        raise ValueError("composing (eps, delta)-DP with zCDP/GDP guarantees needs a delta for the conversion")
    share = None if not others else check_delta(delta) / len(others)
    parts = [g.to_approx_dp(share) for g in gs]
    total_delta = sum(p.delta for p in parts)
    if total_delta >= 1.0:
        raise ValueError(f"the composed delta {total_delta:g} is not below 1")
    return ApproxDP(sum(p.epsilon for p in parts), total_delta, relation=rel, reference=ref)


def typed_guarantee(kind: str | None, definition: str, parameters: Mapping[str, Any], relation: str = "",
                    reference: str = "") -> Guarantee:
    """The guarantee of ``kind`` ("pure", "approx", "zcdp", "gdp"; ``None``: untyped) with the
    kind's numbers (``epsilon``/``delta``, ``rho``, ``mu``) read from ``parameters`` and the rest
    kept as details."""
    p = dict(parameters)
    common = {"definition": definition, "relation": relation, "reference": reference}
    if kind is None:
        return Guarantee(definition, p, relation, reference)
    if kind == "pure":
        p.pop("delta", None)
        return PureDP(p.pop("epsilon"), **common, **p)
    if kind == "approx":
        return ApproxDP(p.pop("epsilon"), p.pop("delta"), **common, **p)
    if kind == "zcdp":
        return ZCDP(p.pop("rho"), **common, **p)
    if kind == "gdp":
        return GDP(p.pop("mu"), **common, **p)
    raise ValueError(f"unknown guarantee kind {kind!r}")
