r"""A hierarchical prior for the cells of a Census-style hierarchy, fitted to its noisy measurements.

:func:`hierarchy_model` builds, from a release of
:class:`~privinfer.mechanisms.hierarchy.HierarchyMeasurements`, the PyMC model

.. math::
   \theta_0 &\sim \mathrm{ZeroSumNormal}(s_0), \qquad
   \theta_v = \theta_{\mathrm{pa}(v)} + \tau_l \odot (z_v - \bar z_{\mathrm{pa}(v)}) + r_{v,\mathrm{age}},\
   z_v \sim \mathrm{ZeroSumNormal}(1),
   \ \tau_l \sim \mathrm{HalfNormal}(s_\tau) \quad (\text{units } v \text{ of levels } 0 < l < L-1), \\
   \theta_u &= \theta_{\mathrm{pa}(u)} + r_{u,\mathrm{age}}, \quad
   r_{u,0} = 0,\ r_{u,a} = r_{u,a-1} + \sum_{b \le a}\big(\delta_{u,b} - \bar\delta_{\mathrm{pa}(u),b}\big),\
   \delta_{u,a} \sim N(0, \sigma_a^2),\ \sigma_a \sim \mathrm{Rayleigh}(s_\sigma)
   \quad (\text{lowest-level units } u), \\
   x_u \mid N_u &\sim \mathrm{DirMult}\big(N_u,\ \kappa\,\mathrm{softmax}(\theta_u)\big),
   \qquad \kappa = 1/\phi^2,\ \phi \sim \mathrm{HalfNormal}(0.3),

with :math:`r_v` a smooth departure of its own (the lowest units' kind below, with its own step
scales; ``z_v`` then zero-sum over the sexes at every age: below, "Smooth departures of the
middle levels"; ``smooth_levels="lowest"``: :math:`r_v = 0`, ``z_v`` over all combinations),
:math:`\bar z_p`, :math:`\bar\delta_{p,a}` the means over the children of ``p``: the
departures of one parent's children sum to zero, so a parent's log profile is the mean of its
children's and no direction of the likelihood trades a parent off against all its children (the
usual sum-to-zero identification of nested effects; it removes a ridge that slowed NUTS on
Kentucky's counties and tracts: with the cells held fixed, the state profile's ESS rose from 14
to 157 of 300 draws); an only child has no departure.  The unit totals :math:`N_u` are flat,
restricted to the published invariant :math:`Cx = t` and observed through the exact discrete
Gaussian likelihood of every measurement (:func:`privinfer.pymc.observe`). :math:`\theta_v \in
\mathbb R^d` is the log attribute profile of unit ``v`` (``d`` attribute combinations, e.g. sex
x age): the state's profile, each county's departure from it with one learned scale per
attribute combination (some age groups vary between counties far more than others), and each
tract's cells drawn around its county's profile: a smooth departure along the ordered attribute
(``smooth``: the age groups) -- a second-order random walk (``walk_order=2``, the default: each
increment changes the slope, so a tract older than its county at every age past 40 departs by
one increment; ``walk_order=1``: the increments are the steps themselves) whose scales are
learned from all tracts, so a tract can be old or young as a whole, its 65+ groups moving
together, as real tracts do; the slopes are per year of age, each step the slope times the
distance between the groups' midpoints (``smooth_positions``; the P12 groups are 1 to 5 years
wide, so a walk on the groups' index bends wherever the width changes; all 1,083 Kentucky
tracts: share 65+ RMSE 0.0107 against 0.0112 on the index, cells 0.656 / 0.398 of GLS against
0.662 / 0.404 on all cells / cells under 30, coverage unchanged; ``walk_tails``: Student-t
increments, a prior variance multiplier per tract or per tract and increment, off by default:
on all Kentucky tracts the campus tracts take multipliers in the thousands, their walks then
nearly free at some ages, and the cells mix more slowly at the benchmark's budget, max R-hat
1.6-1.9 against 1.08, for RMSE 0.646-0.647 / 0.378-0.383 against 0.651 / 0.388) --
and independent cell-level overdispersion :math:`\phi` (a Dirichlet-multinomial with
concentration :math:`\kappa`; :math:`\phi \to 0` is the multinomial; for :math:`\kappa \gg 1` a
cell's Dirichlet share :math:`\pi_i` has relative sd :math:`\sqrt{(1 - p_i)/(p_i(\kappa + 1))}
\approx \phi/\sqrt{p_i}`, e.g. :math:`6.8\,\phi` for a cell holding 1/46 of its tract).  This
is the Poisson log-linear hierarchy of small-area estimation (Fay-Herriot's pooling, on counts)
made exact for integer cells: the Dirichlet-multinomial is the Poisson-gamma (negative
binomial) model conditioned on the unit total, so the unit sizes need no model of their own --
the measurements pin them down.

Cell effects (``cell_effects=True``).  The Dirichlet-multinomial's departures are of the NB1
kind: a cell's relative excess sd :math:`\phi/\sqrt{p_i}` grows as its share :math:`p_i`
shrinks, so one :math:`\phi` cannot give a tract's small cells (its men aged 85+) and its large
ones departures of the same relative size.  The option adds to every lowest-level cell's log
profile an independent effect :math:`\epsilon_{u,i} \sim N(0, \omega^2)`, :math:`\omega \sim
\mathrm{HalfNormal}(s_\omega)`, less its mean over the unit's siblings (as the departures): a
Poisson-lognormal effect (relative excess variance :math:`e^{\omega^2} - 1` in every cell, the
NB2 kind) conditioned on the unit totals -- for
:math:`\phi \to 0` the logistic-normal multinomial (Aitchison and Shen 1980).  The two kinds
together make a ridge (12 Kentucky counties, both learned: the overdispersion's R-hat 1.19 with
NUTS, the effects' scale's 1.82 with the Gibbs step below), so with the effects on the
overdispersion is fixed by default at :data:`CELL_EFFECTS_OVERDISPERSION` (0.001: a cell of
share 1/46 gets a relative excess sd of 0.007 from it, against :math:`\omega` near 0.09 from
the effects), and the effects and :math:`\omega` are sampled by
:class:`~privinfer.pymc.CellEffectsGibbs` (exact moves of sibling tracts' effects in pairs and an
interwoven update of :math:`\omega`).  Off by default: on all 1,083 Kentucky tracts, 2 x (200 +
400) iterations, the cells under 30 are covered 0.885 by the randomized coverage (0.923
without), all cells 0.898 (0.909), the tracts' shares aged 65+ 0.861 (0.873), RMSE the same;
but NUTS's trees over the profiles and county departures reach depth 8 (5 without), the walk's
step scales mix worse (max R-hat 1.56) and the run takes 1,496 s against 769 s.

Smooth departures of the middle levels (``smooth_levels="all"``; the default from
:data:`SMOOTH_LEVEL_UNITS` counties on).  Each unit of a
middle level (a county) also departs from its parent along the ordered attribute by a
second-order walk of its own, with its own learned step scales, so that a county can be old or
young as a whole; its other departures are then only the contrasts that walk leaves (zero-sum
over the other attributes at every age: a county's sex ratios, one scale per age group), so the
two do not trade off.  :class:`~privinfer.pymc.WalkGibbs` samples each county's walk given its
tracts' cells (a unit of several rows: the county's walk enters each of its tracts'
Dirichlet-multinomials), NUTS the rest as before.  Why: with departures independent across the
attribute combinations (``smooth_levels="lowest"``), the prior pulls all of an old county's 65+
cells a little toward the state's profile, in the same direction -- harmless for one cell, but
it adds up over a sum of them.  All 1,083 Kentucky tracts, 2 x (200 + 400), same seeds,
``"all"`` against ``"lowest"``: the counties' people aged 65+ RMSE 39.5 against 51.0 (GLS
40.3), 90% coverage 0.85 against 0.66; under 18: 28.3 against 35.9 (GLS 28.5), 0.925 against
0.85; the counties' cells RMSE 11.4 against 12.1 (GLS 12.6); the tracts' shares aged 65+
covered 0.898 against 0.874, RMSE 0.0098 against 0.0107; cells 0.652 / 0.388 of GLS against
0.656 / 0.398 (all / under 30), their coverage unchanged; but 1,129 s against 769 s, and the
county walks' step scales mix slowly (max R-hat 1.37; the cells' 1.19 against 1.2).  Sums over
the ages of a county are no better than GLS's, and its people 65+ still undercovered (0.85):
take them from :meth:`~privinfer.inference.HierarchicalGLSEstimate.interval` when that matters.

The step scales' prior is the Rayleigh, density :math:`(\sigma/s_\sigma^2)\,e^{-\sigma^2/(2
s_\sigma^2)}` (``pm.Weibull(alpha=2, beta=s_sigma * sqrt(2))``; :math:`\sigma_a^2` exponential
with mean :math:`2 s_\sigma^2`): a boundary-avoiding prior for a group-level sd, density
:math:`\propto \sigma` at 0 (Chung, Rabe-Hesketh, Dorie, Gelman and Liu 2013).  No real
tract's age profile bends exactly like its county's, and with a half-normal's flat density at 0
the scales the data cannot tell apart from 0 (the second-order walk's increments at most ages
past 45: 0.005 or 0.0005?) keep a left tail in :math:`\log\sigma_a` that decays only like
:math:`\sigma_a` -- posterior sd about 1 for 11 of Kentucky's 22 scales, crossed slowly by any
local sampler.  Under the Rayleigh it decays like :math:`\sigma_a^2`.  On all 1,083 Kentucky
tracts, WalkGibbs alone for 300 iterations from one posterior draw: the posterior sd of those
log scales 0.4-0.7 against 0.9-1.3, the 22 scales' bulk ESS min 16 / median 36 against 3 / 27 of
200 draws.

Sampling (``walk_steps="gibbs"``, the default from :data:`GIBBS_UNITS` tracts on): the tracts'
walk increments and their step scales by :class:`~privinfer.pymc.WalkGibbs` -- given the cells,
the tracts' departures are conditionally independent up to their sum-to-zero constraint, so
pairs of sibling tracts are updated at once by independence Metropolis--Hastings moves from the
Laplace approximation of their exact conditional, then moved again with the cells carried along
(each cell shifted with its conditional mean by the weight :math:`v_m/(v_m + \hat x)` of the
prior in it, ``v_m`` its GLS variance; :mod:`privinfer.pymc.walk_carry`; a tract's cells
estimated under ``quantile_carry`` instead lumped, their sum shifted and the cells themselves
following the Dirichlet-multinomial's quantile map, so a cell at 0 stays at 0 as its expected
count falls), each small tract's profile moved alone against a cousin in another county, the
counties' walk taking up the change (the tracts' walk is registered with the counties' as its
``parent``; :mod:`privinfer.pymc.walk_cousin`: centred walks otherwise hold a small tract's
profile to its county's), and the step scales by
an exact generalized inverse Gaussian draw interwoven with a transport slice update (slice
sampled on the cells' quadratic expansions, each scale's proposal then accepted or refused by
the exact target: delayed acceptance, exact); NUTS for
the remaining continuous parameters (profiles, county scales, overdispersion), whose number no
longer grows with the tracts (the cell effects, when on, by
:class:`~privinfer.pymc.CellEffectsGibbs`); the top
profile's, the county scales' and the overdispersion's free coordinates are divided by rough
posterior sds from the GLS estimate (:class:`~privinfer.pymc.Rescaled`: the same model), so the
identity mass matrix NUTS keeps for its first 101 iterations fits (Kentucky's tracts: 85
leapfrog steps per iteration there instead of 240, 2 x 17,500 fewer in the warm-up).  The chains
start from the GLS estimate: the cells at :func:`start_point`, the top profile at the pooled
estimate's log (:func:`~privinfer.census.starts.start_profile`), the overdispersion at a
method-of-moments value (:func:`~privinfer.census.starts.start_overdispersion`) and the middle
levels' departures at a DerSimonian--Laird estimate
(:func:`~privinfer.census.starts.start_departures`) -- from PyMC's defaults (a flat profile,
:math:`\kappa = 11`) the walks of Kentucky's counties of one tract ran away in the warm-up's first
iterations.
``walk_steps="nuts"``: NUTS for every continuous parameter, the walk's increments partially
non-centred (Papaspiliopoulos, Roberts and Skold 2007: each increment between its centred and
non-centred form by how well the release determines it; the prior is the same for every
choice).  The cells by
:class:`~privinfer.pymc.MeasuredPairsGibbs` (``pm.sample()`` assigns it): pair moves within a
tract, between the same attribute cell of two tracts of one county, and anywhere in an
invariant group, with proposals that follow the exact Gaussian measurement term along each
move and the Dirichlet-multinomial's Gaussian approximation along it.  Nothing of size
n x n is built.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
from pymc.distributions.transforms import ZeroSumTransform, log

from ..inference import gls_estimate
from ..invariants import split_group_totals
from ..lattice import MoveCycle, PairMoves
from ..mechanisms.hierarchy import HierarchyMeasurements
from ..mechanisms.noisy_measurements import MeasurementRelease
from ..pymc import (DirichletMultinomialCells, Rescaled, increments_from_steps, lattice_latent, observe,
                    register_cell_effects, register_walk)
from .ages import category_midpoints
from .starts import start_departures, start_overdispersion, start_profile

__all__ = ["hierarchy_model", "start_point", "GIBBS_UNITS", "SMOOTH_LEVEL_UNITS", "CELL_EFFECTS_OVERDISPERSION",
           "QUANTILE_CARRY"]

#: ``hierarchy_model(walk_steps="auto")`` samples the walk with WalkGibbs from this many
#: lowest-level units on (NUTS below; see ``walk_steps``).  Measured on Kentucky tracts with the
#: second-order walk, 2 x (300 + 300) iterations: with 15 tracts (3 counties) WalkGibbs mixes
#: better (parameters' max R-hat 1.03 against 1.12, cells' 1.04 against 1.07, 1 divergence
#: against 34; 36 s against 33 s); with 94 tracts (12 counties) far better (1.05 against 1.61;
#: NUTS's trees reach depth 9 with 30 divergences; 75 s against 165 s); with all 1,083 tracts
#: NUTS's trajectories grow so long that 2 x 600 iterations did not finish in an hour.  Below 10
#: units the choice is not measured and NUTS is kept.
GIBBS_UNITS = 10

#: ``hierarchy_model(smooth_levels="auto")`` gives the middle levels' units smooth departures
#: of their own when every middle level has at least this many units (their step scales are
#: learned from those units' walks alone).  On Kentucky's first 4 counties (17 tracts, the case
#: study's small setting, 2 x (700 + 800)) the county walks left the cells' max R-hat at 1.079
#: and the county profiles' bulk ESS at 28; on 12 counties and on all 120 they mixed (module
#: docstring).
SMOOTH_LEVEL_UNITS = 10

#: A middle level's walk (the counties') moves in its carried update only the units with at
#: most this many lowest units (counties of at most 8 tracts: 89 of Kentucky's 120, 357 of its
#: 1,083 tracts), paired among themselves.  There the unit's walk and its few tracts' cells are
#: tied closely enough that alternating their updates is slow (a county of one tract has no
#: tract walk left after centring to carry its cells); carrying every county cost 15% more time
#: on all Kentucky tracts, most of it in counties of many tracts, whose walks many tracts' cells
#: and the county's own measurements pin down.  With 8 against 4, on all Kentucky tracts (two
#: pairs of runs, each pair on one chain seed): the bulk ESS of the county profiles in counties of
#: 5 to 8 tracts, min 35-43 and 5th percentile 106-113, against 15-26 and 74-88; their max R-hat
#: 1.06 against 1.08-1.13; 5% more time (577 against 549 s on one chain seed).
CARRY_ROWS = 8

#: The overdispersion :math:`\phi` fixed by ``overdispersion="auto"`` when the cell effects are
#: on (module docstring: learned beside them, the two make a ridge).
CELL_EFFECTS_OVERDISPERSION = 0.001

#: ``hierarchy_model(quantile_carry=...)``'s default: the lowest units' cells whose GLS estimate
#: is under this count are moved in the walk's carried update by the Dirichlet-multinomial's
#: quantile map (:mod:`privinfer.pymc.walk_carry`, "Small cells").  All Kentucky tracts, 2 x (200 +
#: 400), 50 against 20 (17,481 cells lumped against 6,159): cells max R-hat 1.045 / 1.108 against
#: 1.054 / 1.081 and min bulk ESS 39 / 13 against 34 / 25 (default chain seed / seed 11), and
#: 1,277 s against 1,162 s (seed 11, each alone): not better on both seeds, 10% dearer.
QUANTILE_CARRY = 20.0


def _checked(release):
    if not isinstance(release, MeasurementRelease) or not isinstance(release.mechanism, HierarchyMeasurements):
        raise TypeError("hierarchy_model needs a release of hierarchy measurements "
                        "(privinfer.census.hierarchy_measurements(...).publish(counts))")
    inv = release.invariant
    if inv is None or inv.partition is None:
        raise ValueError("hierarchy_model needs published totals: build the measurements with "
                         "invariant='total' or a geography level whose unit totals are exact")
    return release.mechanism, inv


def start_point(release, estimate=None) -> np.ndarray:
    """A non-negative integer point on the fibre near the (hierarchical) GLS estimate: in each
    invariant group, the group total split in proportion to the positive part of the estimate,
    rounded by largest remainders.  The chains' starting point.  ``estimate``: the release's
    GLS estimate when already at hand."""
    _, inv = _checked(release)
    est = gls_estimate(release) if estimate is None else estimate
    return split_group_totals(inv.partition.codes, np.asarray(release.t, dtype=np.int64), est.x)


def _overdispersion(hier, est, axis, fixed, h_phi: float):
    r"""The overdispersion :math:`\phi = 1/\sqrt\kappa` (a cell's share has relative sd about
    :math:`\phi/\sqrt p`): learned (``fixed`` None; a half-normal started at
    :func:`~privinfer.census.starts.start_overdispersion` -- its support point, not a PyMC
    ``initval``, which PyMC's graph rebuilds such as ``pm.compute_log_likelihood`` refuse) or the
    constant ``fixed``."""
    if fixed is not None:
        return pt.constant(float(fixed))
    start = start_overdispersion(hier, est, axis)
    return pm.CustomDist("overdispersion", 0.3, dist=lambda s, size: pm.HalfNormal.dist(sigma=s, size=size),
                         support_point=lambda rv, size, s: pt.as_tensor(start), default_transform=log,
                         transform=Rescaled(h_phi))


def _profiles(hier, profile_scale: float, scale_prior: float, h_top: float, h_scale: dict, est, middle=None):
    r"""The log profiles :math:`\theta` of the units of every level above the lowest (in the
    model's context); returns the lowest level's parents' profiles ``(U_{L-2}, d)`` (the
    state's, as one row, when the lowest level is the top) and the parts they are the sums of:
    ``[(level, departures, walk)]``, the top's ``(0, profile (1, d), None)`` first.  The top
    profile and the log scales are NUTS's coordinates divided by ``h_top`` and
    ``h_scale[level]``, rough posterior sds (:func:`_coordinate_scales`); the top profile's
    support point, where the chains start, is :func:`~privinfer.census.starts.start_profile` of the
    GLS estimate ``est`` (a zero-sum normal written as a custom distribution for that, its law
    unchanged).  ``middle``: None, or
    ``(axis, walk)`` with ``walk(level)`` a middle level's smooth departures along ``axis``
    (:func:`_smooth_departures`'s tuple): its departures are then the contrasts the walk
    leaves (:func:`_departures`)."""
    top = start_profile(hier, est)
    theta = pm.CustomDist(f"log_profile_{hier.levels[0]}", profile_scale,
                          dist=lambda s, size: pm.ZeroSumNormal.dist(sigma=s, shape=(hier.d,)),
                          support_point=lambda rv, size, s: pt.as_tensor(top), shape=(hier.d,),
                          dims="combination", default_transform=ZeroSumTransform([-1]), transform=Rescaled(h_top))
    theta = theta[None, :]
    parts = [(0, theta, None)]
    for l in range(1, hier.depth - 1):
        name = hier.levels[l]
        walk = None if middle is None else middle[1](l)
        dep = _departures(hier, l, scale_prior, h_scale[l], est, None if walk is None else middle[0])
        theta = theta[np.asarray(hier.parent[l], dtype=np.int64)]
        theta = theta + sum(t for t in (dep, None if walk is None else walk[0]) if t is not None)
        pm.Deterministic(f"log_profile_{name}", theta, dims=(name, "combination"))
        parts.append((l, dep, walk))
    return theta, parts


def _departures(hier, l: int, scale_prior: float, h: float, est, axis=None):
    r"""Level ``l``'s units' departures from their parents' profiles ``(U_l, d)``:
    :math:`\tau \odot (z_v - \bar z_{\mathrm{pa}(v)})`, ``z`` zero-sum over the attribute
    combinations, one scale per combination (module docstring).  With ``axis`` (the units also
    depart smoothly along that attribute, :func:`_smooth_departures`), only what that walk
    cannot give: ``z`` sums to zero over the other attributes' combinations within every
    category of ``axis`` (e.g. a county's sex contrasts at every age; its age profile is the
    walk's), one scale per category of ``axis``, both started at
    :func:`~privinfer.census.starts.start_departures` of the GLS estimate ``est`` (support points
    of custom distributions with the half-normal's and the zero-sum normal's laws); None when
    ``axis`` is the only attribute."""
    name, U = hier.levels[l], hier.n_units(l)
    par = np.asarray(hier.parent[l], dtype=np.int64)
    if axis is None:
        scale = pm.HalfNormal(f"scale_{name}", sigma=scale_prior, shape=(hier.d,), dims="combination",
                              transform=Rescaled(h))
        z = pm.ZeroSumNormal(f"departure_{name}", sigma=1.0, shape=(U, hier.d), dims=(name, "combination"))
        return scale[None, :] * _sibling_centred(z, par)
    K = hier.shape[axis]
    m = hier.d // K
    if m == 1:
        return None
    coords = np.unravel_index(np.arange(hier.d), hier.shape)
    rest = np.ravel_multi_index([c for i, c in enumerate(coords) if i != axis],
                                [k for i, k in enumerate(hier.shape) if i != axis])
    columns = coords[axis] * m + rest            # each combination's place in z's (K, m) axes
    n, s2 = _unit_tables(hier, l, est)
    tau0, z0 = start_departures(n, s2, par, columns, K)
    scale = pm.CustomDist(f"scale_{name}", scale_prior, dist=lambda s, size: pm.HalfNormal.dist(sigma=s, size=size),
                          support_point=lambda rv, size, s: pt.as_tensor(tau0), shape=(K,), default_transform=log,
                          transform=Rescaled(h))
    z = pm.CustomDist(f"departure_{name}", 1.0, dist=lambda s, size: pm.ZeroSumNormal.dist(sigma=s, shape=(U, K, m)),
                      support_point=lambda rv, size, s: pt.as_tensor(z0), shape=(U, K, m),
                      default_transform=ZeroSumTransform([-1]))                 # zero-sum over the last axis
    flat = z.reshape((U, K * m))[:, columns]
    return scale[coords[axis]][None, :] * _sibling_centred(flat, par)


def _leaf_sum(hier, parts, skip: int):
    """The lowest units' log profiles ``(U_leaf, d)`` from ``parts`` (:func:`_profiles`) without
    the walk of level ``skip``: what that walk departs from, above the lowest level."""
    out = 0.0
    for l, dep, walk in parts:
        anc = hier.leaf_ancestors(l)
        for t in (dep, None if walk is None or l == skip else walk[0]):
            if t is not None:
                out = out + t[anc]
    return out


def _coordinate_scales(hier, est):
    r"""Rough posterior sds of NUTS's free coordinates of the top log profile, of each middle
    level's log departure scales and of the log overdispersion, the constants of their
    :class:`~privinfer.pymc.Rescaled`
    transforms (any positive value gives the same model; these make the identity mass matrix NUTS
    starts from fit).  The top profile is about the mean of its children's log profiles, so its
    sd is about :math:`\sqrt{\mathrm{median}_k(\hat\tau_k^2 + \bar s^2_k)/U_1}`, with
    :math:`\hat\tau_k^2` the children's spread by the method of moments and :math:`\bar s^2_k`
    their log counts' mean sampling variance (:func:`_unit_tables`); a scale estimated from
    :math:`U_l` departures has :math:`\mathrm{sd}(\log\hat\tau) \approx 1/\sqrt{2(U_l - 1)}`
    (1, its prior's order, for a single unit); every one of the ``n`` cells carries its
    Dirichlet-multinomial's excess variance, so :math:`\log\phi` has sd of order
    :math:`2/\sqrt n`.  On Kentucky's tracts the posterior sds are 0.005-0.015, 0.07-0.15 and
    0.017 (these give 0.014, 0.065 and 0.009), against 0.1-1 for the counties' departures."""
    lvl = 1 if hier.depth >= 2 else 0
    n, s2 = _unit_tables(hier, lvl, est)
    logs = np.log(n) - np.log(n).mean(axis=1, keepdims=True)
    U = logs.shape[0]
    spread = _moment_spread(logs, s2) if U > 1 else np.zeros(hier.d)
    h_top = float(np.sqrt(np.median(spread + s2.mean(axis=0)) / U))
    h_scale = {l: 1.0 / np.sqrt(2.0 * (hier.n_units(l) - 1)) if hier.n_units(l) > 1 else 1.0
               for l in range(1, hier.depth - 1)}
    return h_top, h_scale, 2.0 / np.sqrt(max(hier.n, 4))


def _sibling_centred(dep, parent: np.ndarray):
    r"""Departures ``(U, k)`` minus the mean departure of each unit's siblings (the units of its
    parent): :math:`\tilde z_v = z_v - \bar z_{\mathrm{pa}(v)}`.  The children's departures
    then sum to zero under every parent, so the parent's profile is the mean log profile of its
    children and the likelihood has no direction along which a parent and all its children
    trade off (a ridge the sampler would have to walk); the sibling means of the raw ``z`` are
    left to their prior.  An only child gets no departure."""
    parent = np.asarray(parent, dtype=np.int64)
    P = int(parent.max()) + 1 if parent.size else 0
    size = np.bincount(parent, minlength=P).astype(float)
    sums = pt.inc_subtensor(pt.zeros((P, dep.shape[1]))[parent], dep)
    return dep - (sums / size[:, None])[parent]


def _moment_spread(est, s2):
    """The spread of effects between units by the method of moments, per column: the variance of
    their rough estimates ``est`` ``(units, k)`` less their mean sampling variance ``s2``, floored
    at 1e-4."""
    return np.maximum(est.var(axis=0) - s2.mean(axis=0), 1e-4)


def _noncentering_weights(dep, s2):
    r"""Exponents :math:`w = 1/(1 + \sigma^2 I)` of a partially non-centred parametrization
    (Papaspiliopoulos, Roberts and Skold 2007, Sec. 4): a normal effect
    :math:`\delta = \sigma^{w}\tilde\delta`, :math:`\tilde\delta \sim N(0, \sigma^{2(1-w)})` has
    the prior :math:`N(0, \sigma^2)` for every ``w`` (``w = 1`` non-centred, ``w = 0`` centred);
    for an effect observed with precision :math:`I` this ``w`` makes :math:`\tilde\delta`
    independent of :math:`\sigma` a posteriori.  ``dep`` ``(units, k)``: rough estimates of
    the effects with sampling variances ``s2``; :math:`\sigma^2` per column by the method of
    moments (floored at 1e-4)."""
    if dep.shape[0] > 1:
        spread = _moment_spread(dep, s2)
    else:
        spread = np.full(dep.shape[1], 1e-2)
    return 1.0 / (1.0 + spread[None, :] / s2)


def _unit_tables(hier, level: int, est, axis=None):
    """GLS estimates (positive part, at least 0.5) of the units' attribute tables at ``level``
    and their measurement variances, ``(U, d)``; summed over the
    other attributes when ``axis`` is given (``(U, K)``)."""
    xhat = np.maximum(np.asarray(est.x, float), 0.5)
    var = np.asarray(est.se, float) ** 2
    unit = np.asarray(hier.unit_of_cell[level], dtype=np.int64)
    if axis is None:
        k, col = hier.d, hier.combination
    else:
        k, col = hier.shape[axis], np.unravel_index(hier.combination, hier.shape)[axis]
    U = hier.n_units(level)
    idx = unit * k + col
    n = np.bincount(idx, weights=xhat, minlength=U * k).reshape(U, k)
    solver = getattr(est, "solver", None)
    if level < hier.depth - 1 and solver is not None:
        # a sum of cells: its own variance (the tree's unit covariances), not the sum of the cells'
        # variances, which leaves out their covariances (on Kentucky's counties, several times larger)
        cov = solver.unit_covariance(level)
        B = np.eye(hier.d) if axis is None else np.eye(k)[np.unravel_index(np.arange(hier.d), hier.shape)[axis]]
        v = np.einsum("uij,ik,jk->uk", cov, B, B)
    else:
        v = np.bincount(idx, weights=var, minlength=U * k).reshape(U, k)
    return n, 1.0 / n + v / n**2              # counts and the variances of their logs


def _walk_noncentering(hier, axis: int, est, order: int = 1, spacing=None, level=None) -> np.ndarray:
    """Exponents of the walk's increments: the estimated increments are the lowest-level (or
    ``level``'s) units' log ratios of neighbouring categories of ``axis`` minus their parents' (order 2:
    divided by the ``spacing`` and differenced once more, the first kept; sampling variances
    from the categories' log counts taken as independent)."""
    L = hier.depth - 1 if level is None else level
    n, s2 = _unit_tables(hier, L, est, axis)
    logr = np.diff(np.log(n), axis=1)
    if L >= 1:
        npar, _ = _unit_tables(hier, L - 1, est, axis)
        logr = logr - np.diff(np.log(npar), axis=1)[np.asarray(hier.parent[L], dtype=np.int64)]
    var = s2[:, 1:] + s2[:, :-1]
    if order == 2:
        logr = increments_from_steps(logr, order, spacing)
        h = np.ones(logr.shape[1]) if spacing is None else np.asarray(spacing, dtype=float)
        var = np.concatenate([var[:, :1] / h[0] ** 2, s2[:, 2:] / h[1:] ** 2
                              + s2[:, 1:-1] * (1 / h[1:] + 1 / h[:-1]) ** 2 + s2[:, :-2] / h[:-1] ** 2], axis=1)
    return _noncentering_weights(logr, var)


def _carry_fractions(est) -> np.ndarray:
    r"""Each cell's :math:`v_m/(v_m + v_p)`: its GLS variance against the multinomial variance
    of a count the size of its GLS estimate (at least 1) -- the weight of the prior's mean in
    the cell's posterior mean, how far the cell moves with its profile in the walk's carried
    update (:mod:`privinfer.pymc.walk_carry`)."""
    vm = np.asarray(est.se, dtype=float) ** 2
    return vm / (vm + np.maximum(np.asarray(est.x, dtype=float), 1.0))


def _moves(hier, inv):
    """Partner families: the cells of one lowest-level unit, and (when they stay inside the
    invariant's groups) the same attribute combination in the lowest units of one parent."""
    leaf = hier.leaf_unit
    parts = [PairMoves(leaf)]
    if hier.depth >= 2:
        par = np.asarray(hier.parent[-1], dtype=np.int64)[leaf]
        sib = par * hier.d + hier.combination
        codes = np.asarray(inv.partition.codes)
        pairs = np.unique(np.stack([sib, codes]), axis=1)
        if np.unique(pairs[0]).size == pairs.shape[1] and np.bincount(sib).max() > 1:
            parts.append(PairMoves(sib))
    return MoveCycle(parts)


def _smooth_axis(hier, smooth):
    """The attribute axis of the smooth departures (None: none)."""
    if smooth is None:
        return None
    if smooth == "auto":
        sizes = hier.shape
        if not sizes or max(sizes) < 4:
            return None
        return int(np.argmax(sizes))
    if smooth not in hier.attributes:
        raise ValueError(f"smooth must be 'auto', None or an attribute ({', '.join(hier.attributes)})")
    return list(hier.attributes).index(smooth)


def _smooth_departures(hier, axis: int, step_prior: float, est, centred: bool, order: int = 2, positions=None,
                       level=None, tails=None):
    r"""Each lowest-level unit's departure (``level``: each unit's of that middle level, variables
    ``step_scale_<level>_<attr>``, ``step_<level>_<attr>`` and ``noncentering_<level>_<attr>``)
    along the ordered categories of attribute ``axis`` (e.g. the age groups): a random walk from 0
    with one learned scale per step,
    :math:`r_{u,0} = 0,\ r_{u,a} = r_{u,a-1} + \delta_{u,a}`,
    :math:`\delta_{u,a} \sim N(0, \sigma_a^2)`, :math:`\sigma_a \sim \mathrm{Rayleigh}(s_\sigma)`
    (density :math:`(\sigma/s_\sigma^2) e^{-\sigma^2/(2 s_\sigma^2)}`; module docstring)
    (``order`` 1), or a second-order random walk (``order`` 2): the steps
    :math:`r_{u,a} - r_{u,a-1} = h_a \sum_{b \le a}\delta_{u,b}`, so each increment changes the slope
    (per unit of the categories' spacing :math:`h` from their ``positions``: :func:`_walk_spacing`),
    broadcast over the other attributes: ``(U_leaf, d)``.  The increments are partially
    non-centred (:func:`_noncentering_weights`): ``step_<leaf>_<attr>`` holds
    :math:`\tilde\epsilon_{u,a} \sim N(0, \sigma_a^{2(1-w_{u,a})})` and
    :math:`\delta_{u,a} = \sigma_a^{w_{u,a}} \tilde\epsilon_{u,a}`, with ``w`` the model's data
    ``noncentering_<attr>`` (``centred``: all 0, :math:`\delta_{u,a} = \tilde\epsilon_{u,a}`, the
    parametrization of :class:`~privinfer.pymc.WalkGibbs`).  ``tails`` (``(nu, "unit" or
    "increment")``, :math:`\nu > 0`): each unit's (or each of its increments') raw increments get a variance multiplier, :math:`N(0, \sigma_a^2\lambda_u)` with
    :math:`\lambda_u \sim \mathrm{InvGamma}(\nu/2, \nu/2)` (``step_mix_<level>``), so that a unit's
    increments are multivariate t (:mod:`~privinfer.pymc.walk_kernel`, "Mixed prior
    variances").  Returns the departures, the step scales, the raw increments, the exponents,
    each cell column's category, the spacing and the multipliers (None without ``tails``)."""
    K = hier.shape[axis]
    L = hier.depth - 1 if level is None else level
    name = hier.attributes[axis] if level is None else f"{hier.levels[L]}_{hier.attributes[axis]}"
    spacing = _walk_spacing(hier, axis, positions, order)
    U = hier.n_units(L)
    w = pm.Data(f"noncentering_{name}",
                np.zeros((U, K - 1)) if centred else _walk_noncentering(hier, axis, est, order, spacing, L))
    # alpha as float64: a Python 2.0 would become a float32 constant (log 2 in single precision)
    step = pm.Weibull(f"step_scale_{name}", alpha=np.float64(2.0), beta=step_prior * np.sqrt(2.0), shape=(K - 1,))
    mix = None
    sd = step[None, :] ** (1.0 - w)
    if tails is not None:
        half = np.float64(0.5 * float(tails[0]))
        per = tails[1] == "increment"
        mix = pm.InverseGamma(f"step_mix_{hier.levels[L]}", alpha=half, beta=half, shape=(U, K - 1) if per else (U,))
        sd = sd * (pt.sqrt(mix) if per else pt.sqrt(mix)[:, None])
    raw = pm.Normal(f"step_{hier.levels[L]}_{hier.attributes[axis]}", 0.0, sd, shape=(U, K - 1))
    inc = step[None, :] ** w * raw
    if order == 2:
        inc = pt.cumsum(inc, axis=1) * (1.0 if spacing is None else pt.constant(spacing)[None, :])
    if L >= 1:
        inc = _sibling_centred(inc, hier.parent[L])
    walk = pt.concatenate([pt.zeros((U, 1)), pt.cumsum(inc, axis=1)], axis=1)
    code = np.unravel_index(np.arange(hier.d), hier.shape)[axis]
    return walk[:, code], step, raw, w, code, spacing, mix


def _cell_effects(hier, prior_scale: float):
    r"""Independent log-normal effects of the lowest-level units' cells, ``(U_leaf, d)``:
    :math:`\epsilon_{u,i} \sim N(0, \omega^2)`, :math:`\omega \sim
    \mathrm{HalfNormal}(s_\omega)`, to be added to the units' log profiles (module docstring);
    returns the effects, :math:`\omega` and the effects as they enter: less their mean over the
    parent's units (:func:`_sibling_centred`, as the departures: otherwise a county's departure
    and its tracts' mean effects trade off).  :class:`~privinfer.pymc.CellEffectsGibbs` samples
    both."""
    leaf = hier.levels[-1]
    model = pm.modelcontext(None)
    if leaf not in model.coords:
        model.add_coord(leaf, [str(u) for u in hier.unit_labels[-1]])
    omega = pm.HalfNormal("cell_effect_scale", sigma=prior_scale)
    eps = pm.Normal("cell_effect", 0.0, omega, dims=(leaf, "combination"))
    par = _groups(hier)
    return eps, omega, eps if par is None else _sibling_centred(eps, par)


def _leaf_profiles(hier, theta, axis, est, centred: bool, walk_order: int, step_prior: float, effect_prior,
                   positions=None, tails=None):
    """The lowest level's parents' log profiles ``base``, the smooth departures (``walk``, None
    without ``axis``; its spacing from ``positions``, :func:`_walk_spacing`), the
    lowest units' log profiles without the cell effects ``eta`` and the cell effects with their
    scale (``eps``; None when ``effect_prior`` is None)."""
    par = _groups(hier)
    base = theta[np.zeros(hier.n_units(0), np.int64) if par is None else par]
    walk = None if axis is None else _smooth_departures(hier, axis, step_prior, est, centred, walk_order, positions,
                                                        tails=tails)
    eta = base if walk is None else base + walk[0]
    eps = None if effect_prior is None else _cell_effects(hier, effect_prior)
    return base, walk, eta, eps


def _walk_spacing(hier, axis, positions, order: int):
    r"""The second-order walk's spacing :math:`h` ``(K-1,)``: the distances between neighbouring
    categories' ``positions`` (strictly monotone, in the categories' order) divided by their
    mean (``"auto"``: the midpoints of age-group labels,
    :func:`~privinfer.census.ages.category_midpoints`, when the categories are age groups);
    None (all 1) for a first-order walk, without positions, or when ``"auto"`` finds none."""
    if axis is None or positions is None or order != 2:
        return None
    cats = hier.categories[axis]
    if isinstance(positions, str) and positions == "auto":
        positions = category_midpoints(cats)
        if positions is None:
            return None
    try:
        pos = np.asarray(positions, dtype=float)
    except (TypeError, ValueError):
        raise ValueError("smooth_positions must be 'auto', None or one number per category") from None
    h = np.diff(pos) if pos.ndim == 1 else np.zeros(0)
    if pos.shape != (len(cats),) or not np.all(np.isfinite(pos)) or not (np.all(h > 0) or np.all(h < 0)):
        raise ValueError(f"smooth_positions must be {len(cats)} finite, strictly monotone numbers, one per category "
                         f"of '{hier.attributes[axis]}' in its order")
    h = np.abs(h)
    return h / h.mean()


def _groups(hier):
    """The lowest units' parents (None for a one-level hierarchy)."""
    return np.asarray(hier.parent[-1], dtype=np.int64) if hier.depth >= 2 else None


def _positive_number(v) -> bool:
    """Whether ``v`` is a finite real number > 0 (not a string or a bool)."""
    return not isinstance(v, (str, bytes, bool)) and np.isscalar(v) and bool(np.isfinite(v)) and v > 0


def _checked_tails(walk_tails, by: str = "unit"):
    """``hierarchy_model``'s ``walk_tails`` (None or a finite number > 0) and ``walk_tails_by``
    (``"unit"`` or ``"increment"``) as :func:`_smooth_departures`'s ``tails``, else a one-line error."""
    if not (isinstance(by, str) and by in ("unit", "increment")):
        raise ValueError("walk_tails_by must be 'unit' or 'increment'")
    if walk_tails is not None and not _positive_number(walk_tails):
        raise ValueError("walk_tails must be None or a finite number > 0 (the degrees of freedom)")
    return None if walk_tails is None else (float(walk_tails), by)


def _checked_quantile_carry(quantile_carry):
    """``hierarchy_model``'s ``quantile_carry`` (None or a finite number > 0) as a float, else a
    one-line error."""
    if quantile_carry is None:
        return None
    if not _positive_number(quantile_carry):
        raise ValueError("quantile_carry must be None or a finite count > 0")
    return float(quantile_carry)


def _checked_options(hier, walk_steps, walk_order, cell_effects, **positive):
    """``walk_steps`` and ``overdispersion`` resolved (``"auto"``: ``"gibbs"`` from
    :data:`GIBBS_UNITS` lowest-level units on; None, or :data:`CELL_EFFECTS_OVERDISPERSION` with
    the cell effects); one-line errors for bad options (``positive``: numbers that must be finite
    and > 0, None allowed for ``overdispersion``)."""
    if walk_steps not in ("auto", "gibbs", "nuts"):
        raise ValueError("walk_steps must be 'auto', 'gibbs' or 'nuts'")
    if walk_order not in (1, 2):
        raise ValueError("walk_order must be 1 or 2")
    if not isinstance(cell_effects, (bool, np.bool_)):
        raise ValueError("cell_effects must be True or False")
    if isinstance(positive.get("overdispersion"), str) and positive["overdispersion"] == "auto":
        positive["overdispersion"] = CELL_EFFECTS_OVERDISPERSION if cell_effects else None
    for name, v in positive.items():
        if v is None and name == "overdispersion":
            continue
        if not _positive_number(v):
            raise ValueError(f"{name} must be a finite number > 0")
    if walk_steps == "auto":
        walk_steps = "gibbs" if hier.n_units(hier.depth - 1) >= GIBBS_UNITS else "nuts"
    return walk_steps, positive.get("overdispersion")


def _coords(mech):
    """The model's coordinates: the cells' ids, the attribute combinations and the units of the
    middle levels."""
    hier = mech.hierarchy
    ids = getattr(mech, "cell_ids", None)
    ids = hier.cell_ids() if ids is None else ids
    combos = [str(c) for c in hier.cell_ids()[hier.leaf_order()[0]]] if hier.n else []
    combos = [c.split("|", 1)[1] if "|" in c else c for c in combos]
    coords = {"cell": list(ids), "combination": combos}
    coords.update({hier.levels[l]: [str(u) for u in hier.unit_labels[l]] for l in range(1, hier.depth - 1)})
    return coords


def hierarchy_model(release, *, profile_scale: float = 3.0, scale_prior: float = 1.0, smooth="auto",
                    step_prior: float = 0.3, overdispersion="auto", walk_steps: str = "auto",
                    walk_order: int = 2, cell_effects: bool = False, cell_effect_prior: float = 0.3,
                    smooth_positions="auto", smooth_levels: str = "auto", walk_tails=None,
                    walk_tails_by: str = "unit", quantile_carry=QUANTILE_CARRY) -> pm.Model:
    """The hierarchical model of the cells ``x`` of a hierarchy release (module docstring).

    Parameters
    ----------
    release
        a :class:`~privinfer.mechanisms.noisy_measurements.MeasurementRelease` of
        :func:`~privinfer.census.hierarchy_measurements` (published totals required).
    profile_scale
        prior scale :math:`s_0` of the top level's log profile.
    scale_prior
        prior scale :math:`s_\\tau` of the departure scales.
    smooth
        the ordered attribute along which each lowest-level unit's profile departs smoothly
        from its parent's (a random walk over its categories with learned step scales: young
        and old tracts); ``"auto"`` (default) the attribute with the most categories when it
        has at least 4 (the age groups), ``None`` for none (the Dirichlet-multinomial alone,
        whose departures are independent across cells).
    smooth_positions
        the smooth attribute's categories' positions (monotone; the walk's slope is per unit of
        them); ``"auto"``: age groups' midpoints (:func:`~privinfer.census.ages.category_midpoints`).
    smooth_levels
        ``"all"``: every middle level's units depart smoothly too (a county old or young as a
        whole; module docstring); ``"lowest"``: only the lowest level's units; ``"auto"``
        (default): ``"all"`` from :data:`SMOOTH_LEVEL_UNITS` units in every middle level on.
    step_prior
        scale :math:`s_\\sigma` of the walk's step scales' Rayleigh prior (module docstring).
    walk_order
        2 (default): a second-order random walk (increments change the slope: a tract older
        than its county at every age past 40 is one increment; 12 Kentucky counties: shares
        aged 65+ pulled 1% of their departure toward the county, covered 0.87-0.89 at 90%,
        against 7% and 0.83 with order 1, same cell RMSE); 1: a first-order random walk.
    walk_tails, walk_tails_by
        None (default): normal increments; :math:`\\nu > 0`: t increments, a prior variance multiplier
        ``step_mix_<leaf level>`` ~ InvGamma(nu/2, nu/2) per lowest unit (``"unit"``) or per increment.
    quantile_carry
        cells estimated under this count move by their quantiles in the walk's carried update
        (module docstring, "Sampling"; default :data:`QUANTILE_CARRY`); None: translated.
    overdispersion
        ``None``: :math:`\\phi` learned, half-normal prior with scale 0.3; a number > 0:
        :math:`\\phi` fixed at it; ``"auto"`` (default): learned, or with ``cell_effects``
        fixed at :data:`CELL_EFFECTS_OVERDISPERSION`.
    cell_effects
        True: every lowest-level cell's log profile also gets an independent effect (``cell_effect``,
        less its siblings' mean; scale ``cell_effect_scale``; both by
        :class:`~privinfer.pymc.CellEffectsGibbs`; module docstring): departures whose relative size
        does not shrink with the cell's share.  Off by default.
    cell_effect_prior
        the scale :math:`s_\\omega` of :math:`\\omega`'s half-normal prior.
    walk_steps
        how ``pm.sample()`` updates the smooth departures: ``"gibbs"`` the centred increments
        and their step scales by :class:`~privinfer.pymc.WalkGibbs` (blocked Laplace-proposal
        moves per pair of sibling units, exact and interwoven updates of the scales);
        ``"nuts"``: partially non-centred increments, with the rest of the parameters by NUTS;
        ``"auto"`` (default): ``"gibbs"`` from :data:`GIBBS_UNITS` lowest-level units on,
        ``"nuts"`` below (the measurements behind the switch: :data:`GIBBS_UNITS`).

    Returns
    -------
    pm.Model
        the cells as the int64 variable ``x`` in the frame's row order (coordinate ``cell``:
        the cell ids ``"tract|sex|age"``), the parameters ``log_profile_<level>``,
        ``scale_<level>``, ``departure_<level>``, ``step_scale_<attribute>``,
        ``step_<leaf level>_<attribute>`` (``walk_tails``: ``step_mix_<leaf level>``), ``concentration``
        (``cell_effects``: ``cell_effect``, ``cell_effect_scale``), the observed measurements ``y``.
        ``pm.sample()`` assigns NUTS and :class:`~privinfer.pymc.MeasuredPairsGibbs` by itself.
    """
    mech, inv = _checked(release)
    walk_steps, overdispersion = _checked_options(
        mech.hierarchy, walk_steps, walk_order, cell_effects, profile_scale=profile_scale, scale_prior=scale_prior,
        step_prior=step_prior, cell_effect_prior=cell_effect_prior, overdispersion=overdispersion)
    hier = mech.hierarchy
    tails, quantile_carry = _checked_tails(walk_tails, walk_tails_by), _checked_quantile_carry(quantile_carry)
    axis = _smooth_axis(hier, smooth)
    est = gls_estimate(release)
    x0 = start_point(release, est)
    with pm.Model(coords=_coords(mech)) as model:
        h_top, h_scale, h_phi = _coordinate_scales(hier, est)
        middle = _middle(hier, axis, smooth_levels, est, walk_steps == "gibbs", walk_order, float(step_prior),
                         smooth_positions)
        theta, parts = _profiles(hier, float(profile_scale), float(scale_prior), h_top, h_scale, est, middle)
        kappa = pm.Deterministic("concentration", 1.0 / _overdispersion(hier, est, axis, overdispersion, h_phi) ** 2)
        base, walk, eta, eps = _leaf_profiles(hier, theta, axis, est, walk_steps == "gibbs", walk_order,
                                              float(step_prior), float(cell_effect_prior) if cell_effects else None,
                                              smooth_positions, tails)
        prior = _cells_prior(hier, kappa, eta if eps is None else eta + eps[2])
        x = lattice_latent("x", inv, release.t, prior=prior, initval=x0, moves=_moves(hier, inv),
                           sampler="measured_pairs", dims="cell")
        observe("y", mech, x, observed=release.y)
        if eps is not None:
            register_cell_effects(effects=eps[0], scale=eps[1], prior_scale=float(cell_effect_prior), eta=eta,
                                  kappa=kappa, latent=x, grid=hier.leaf_order(), groups=_groups(hier))
        if walk_steps == "gibbs":
            _register_walks(hier, parts, base, walk, eps, kappa, x, float(step_prior), walk_order, est,
                            quantile_carry)
    return model


def _cells_prior(hier, kappa, theta_leaf):
    """The cells' Dirichlet-multinomial prior given the lowest units' log profiles ``(U, d)``."""
    alpha_grid = kappa * pt.special.softmax(theta_leaf, axis=-1)
    alpha = alpha_grid.ravel()[hier.leaf_unit * hier.d + hier.combination]
    return DirichletMultinomialCells(alpha, hier.leaf_order())


def _middle(hier, axis, levels, est, centred: bool, order: int, step_prior: float, positions):
    """``(axis, walk)`` for :func:`_profiles` with ``levels="all"`` (``walk(level)``: that middle
    level's smooth departures, :func:`_smooth_departures`); None for ``"lowest"`` or without a
    smooth attribute; ``"auto"``: ``"all"`` from :data:`SMOOTH_LEVEL_UNITS` units in every middle
    level on."""
    if not (isinstance(levels, str) and levels in ("auto", "all", "lowest")):
        raise ValueError("smooth_levels must be 'auto', 'all' or 'lowest'")
    if levels == "auto":
        levels = "all" if all(hier.n_units(l) >= SMOOTH_LEVEL_UNITS for l in range(1, hier.depth - 1)) else "lowest"
    if axis is None or levels == "lowest":
        return None
    return axis, lambda l: _smooth_departures(hier, axis, step_prior, est, centred, order, positions, level=l)


def _register_walks(hier, parts, base, walk, eps, kappa, x, step_prior: float, order: int, est, quantile_carry=None):
    """Every smooth departure for :class:`~privinfer.pymc.WalkGibbs`: the lowest units' (departing
    from ``base``, their parents' profiles, plus the cell effects) and each middle level's
    (rows: the lowest units, each departing from its log profile without that walk,
    :func:`_leaf_sum`; members: the lowest units' ancestors at that level; the carried update for
    the units of at most :data:`CARRY_ROWS` lowest units only).  Every carried update pairs
    units of similar size (``sizes``: their GLS totals, fixed data); the lowest units' carried
    update moves the cells whose GLS estimate is under ``quantile_carry`` by their quantiles
    (``lump``, fixed data; None: none)."""
    effects = 0.0 if eps is None else eps[2]
    carry = _carry_fractions(est)
    leaf_sizes = np.maximum(np.bincount(hier.leaf_unit, weights=np.asarray(est.x, dtype=float),
                                        minlength=hier.n_units(hier.depth - 1)), 1.0)
    if walk is not None:
        _, step, raw, w, code, spacing, mix = walk
        above = [mid[2] for l, _, mid in parts if l == hier.depth - 2 and mid is not None]
        register_walk(scales=step, increments=raw, prior_scale=step_prior, base=base + effects, kappa=kappa,
                      weights=w, latent=x, grid=hier.leaf_order(), code=code, groups=_groups(hier),
                      carry=carry, order=order, spacing=spacing, sizes=leaf_sizes, mix=mix,
                      lump=None if quantile_carry is None else np.asarray(est.x, dtype=float) < quantile_carry,
                      parent=above[0] if above else None)
    tracts = walk[0] if walk is not None else 0.0
    for l, _, mid in parts:
        if mid is None:
            continue
        _, step, raw, w, code, spacing, _ = mid
        members = hier.leaf_ancestors(l)
        U = hier.n_units(l)
        register_walk(scales=step, increments=raw, prior_scale=step_prior,
                      base=_leaf_sum(hier, parts, l) + tracts + effects, kappa=kappa, weights=w, latent=x,
                      grid=hier.leaf_order(), code=code, groups=np.asarray(hier.parent[l], dtype=np.int64),
                      members=members, order=order, spacing=spacing, carry=carry,
                      carry_units=np.bincount(members, minlength=U) <= CARRY_ROWS,
                      sizes=np.bincount(members, weights=leaf_sizes, minlength=U))
