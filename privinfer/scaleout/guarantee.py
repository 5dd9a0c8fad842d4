r"""The guarantee of a release drawn group by group: the per-group mechanism's.

Groups are disjoint sets of cells and their noises are independent.  Two arguments give the
guarantee of the whole release from those of the per-group mechanisms :math:`M_k` (one per
group size :math:`k`):

* *Parallel composition* (McSherry 2009, "Privacy Integrated Queries", Thm 4): neighbours
  that differ in the cells of one group only are distinguished by that group's release
  alone, so the whole release satisfies the weakest per-group guarantee -- the largest
  :math:`\epsilon` (and :math:`\delta`, :math:`\rho`) over the group sizes present.
* *Additive norms*: for the l1 generalized Laplace, the generalized Gaussian, the double
  geometric and the discrete Gaussian the density is
  :math:`\prod_g e^{-\phi(e_g)} = e^{-\phi(e)}` with :math:`\phi = \epsilon\|\cdot\|_1/\Delta`
  or :math:`\|\cdot\|_2^2/(2\sigma^2)`, which adds over groups: the joint law *is* the
  mechanism on the groups invariant (or on all cells), so its metric statement
  (privacy loss at most :math:`\epsilon\|x - x'\|_1/\Delta`, resp. :math:`\rho`-zCDP for
  :math:`\|x - x'\|_2 \le \Delta`) holds for every pair with equal group totals, not only for
  pairs differing in one group.  The l2 generalized Laplace
  (:math:`\|e\|_2` does not add) has the parallel-composition statement only.

A group drawn by a Markov chain (the l2 generalized Laplace) has an
:math:`(\epsilon, \delta > 0)` guarantee, and the whole release then states the largest of
those :math:`\delta`; ``delta = 0`` only when every group was drawn exactly.
"""

from __future__ import annotations

from ..guarantees import Guarantee, typed_guarantee
from .groups import is_exact, sampler_method

__all__ = ["frame_guarantee"]

_NUMBERS = ("epsilon", "delta", "rho", "mu")


def _additive(name: str, options) -> bool:
    return not (name == "generalized-laplace" and (options.get("norm") or "l1") == "l2")


def frame_guarantee(group_mechanism, mechanisms: dict, n_groups: int) -> Guarantee:
    """The guarantee of a release whose groups were drawn by ``mechanisms`` (size -> mechanism
    or ``None`` for one-cell groups) of ``group_mechanism`` (module docstring)."""
    drawn = [m for m in mechanisms.values() if m is not None]
    if not drawn:  # every group is one cell: published exactly; the guarantee is vacuous but stated
        drawn = [group_mechanism.for_size(2)]
    gs = [m.guarantee for m in drawn]
    exact = all(is_exact(m) for m in drawn)
    kinds = {g.kind for g in gs}
    first = gs[0]
    params = {k: v for k, v in first.parameters.items() if k not in _NUMBERS}
    if kinds <= {"pure", "approx"} or "other" in kinds:
        if "other" in kinds or any(float(g.parameters.get("delta", 0.0)) >= 1.0 for g in gs):
            kind = None  # some group has no bound below delta = 1
        else:
            kind = "pure" if kinds == {"pure"} else "approx"
        params["epsilon"] = max(float(g.parameters["epsilon"]) for g in gs)
        params["delta"] = max(float(g.parameters.get("delta", 0.0)) for g in gs)
        if kind is None:
            params["delta"] = 1.0
    elif kinds == {"zcdp"}:
        kind = "zcdp"
        params["rho"] = max(float(g.parameters["rho"]) for g in gs)
        params["delta"] = max(float(g.parameters.get("delta", 0.0)) for g in gs)
    else:
        raise TypeError(f"cannot state one guarantee for groups with guarantees of kinds {sorted(kinds)}")
    sampler = sorted({sampler_method(m) for m in drawn})
    params.update({"exact": exact, "groups": int(n_groups), "group_sizes_drawn": len(drawn)})
    if sampler:
        params["sampler"] = ", ".join(sampler)
    if _additive(group_mechanism.name, group_mechanism.options):
        how = ("each group drawn independently from its own stream; the noise density is a product over "
               "groups of a norm that adds, so the release has the law of the mechanism on the groups "
               + ("invariant" if group_mechanism.keeps_totals else "cells")
               + " and the statement holds for every such pair")
    else:
        how = ("each group drawn independently from its own stream; parallel composition over disjoint "
               "groups: the statement holds for pairs that differ within one group")
    relation = f"{first.relation}; {how}" if first.relation else how
    reference = f"{first.reference}; parallel composition: McSherry 2009, Thm 4"
    definition = f"{first.definition}, released group by group"
    return typed_guarantee(kind, definition, params, relation, reference)
