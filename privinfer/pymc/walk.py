r"""Blocked Gibbs updates of random-walk departures over units of Dirichlet-multinomial cells.

A model registers, with :func:`register_walk`, a departure of many units along ``K`` ordered
categories (the age groups of every tract in :func:`privinfer.census.hierarchy_model`): raw
increments :math:`\delta_{u,k} \sim N(0, \sigma_k^2)`, centred within sibling groups or not,
the steps between neighbouring categories (``order`` 1) or their cumulative sums (``order`` 2,
a second-order walk; the kernels carry the map through the chain rule,
:func:`~privinfer.pymc.walk_kernel.slopes`), step scales :math:`\sigma_k \sim \mathrm{HalfNormal}(s)` or
:math:`\mathrm{Rayleigh}(s)` (a scaled chi with 1 or 2 degrees of freedom), and cells
:math:`x_u \mid N_u \sim \mathrm{DirMult}(N_u, \kappa\,\mathrm{softmax}(b_u + r_{u,c}))`
(:mod:`privinfer.pymc.walk_kernel` states the conditional).  :class:`WalkGibbs` updates the
increments and the step scales of such a walk; ``pm.sample()`` assigns it to them by itself.
A model may register several walks (a county's walk over the ages beside its tracts' walks):
a unit's walk may enter several rows of cells, each with its own base profile (``members``:
a county's departure enters each of its tracts' Dirichlet-multinomials), and ``pm.sample()``
then gets one :class:`WalkGibbs` per walk, each updating its walk given the others.
One iteration:

1. ``rounds`` times: a uniformly random matching of the units within each sibling group (every
   unit alone when the increments are not centred), and for every pair an independence
   Metropolis--Hastings move :math:`\delta_u \mathrel{+}= \Delta,\ \delta_v \mathrel{-}= \Delta`
   from the Laplace approximation of :math:`\Delta`'s exact conditional (a defensive t mixture;
   the acceptance uses the exact Dirichlet-multinomial, so the move leaves the posterior
   invariant);
2. when the walk was registered with carry fractions (``register_walk(carry=...)``), the
   carried update (:mod:`privinfer.pymc.walk_carry`): for a fresh matching of sibling pairs
   (among the registered ``carry_units`` only; with ``sizes``, a matching of near neighbours in
   size, :func:`~privinfer.pymc.walk_kernel.sized_pairs`) and ``carry_directions`` increments
   per pair (every one for a pair of two units under :data:`CARRY_SMALL` of the carried units'
   median size), the increments slice sampled with the cells
   carried along by a zero-sum integer shift that follows their conditional mean -- an exact
   update in ancillary lattice coordinates, which moves a tract's walk and cells together along
   directions (old against young) where alternating their updates is slow.  The step writes
   the moved cells into PyMC's point, so the cells' own step method sees them; then, for a
   walk registered with carry fractions, ``sizes`` and one row of cells per unit, every unit under
   ``alone`` (:data:`ALONE_SMALL`) of the median size in a group of three or more moved against
   several of its siblings at once, its and their cells carried along
   (:mod:`privinfer.pymc.walk_alone`: a small unit's profile otherwise moves only with a
   sibling's the other way or with all of them, its parent's), then the collapsed
   move (:mod:`privinfer.pymc.walk_collapse`) of a fresh matching by size, its pairs of two
   units under ``collapse`` of the median size (:data:`COLLAPSE_SMALL`: every pair): the pair's
   walk drawn from its law with the cells integrated out (a Gaussian approximation), both units'
   cells drawn given it by the tree sampler, one exact Metropolis--Hastings test.  Where the data
   pin a unit's walk least, the walk and its cells taking turns is slowest, and this move has no
   such lag; then, for such a walk registered with a ``parent`` walk (a county's under its
   tracts'), every unit under ``cousins`` (:data:`COUSINS_SMALL`) of the median size moved alone,
   its parent's walk taking up the change and a cousin's parent (a unit of another parent, drawn
   with weight :math:`1/J^2` by its number of siblings ``J``) giving it back, both units' cells
   carried along (:mod:`privinfer.pymc.walk_cousin`; the parent walk's raw increments written
   into PyMC's point);
3. every sibling group's mean raw increment redrawn from its exact conditional, the prior
   :math:`N(0, \sigma^2/J)` (the cells see the centred increments only); for a walk registered
   with ``mix`` (a Student-t walk: unit ``u``'s raw increments :math:`N(0, \sigma_k^2\lambda_u)`,
   :math:`\lambda_u \sim \mathrm{InvGamma}(\nu/2, \nu/2)`), the weighted conditional of
   :func:`~privinfer.pymc.walk_kernel.refresh_group_means`, then every :math:`\lambda_u` from its
   exact inverse-gamma conditional (:func:`~privinfer.pymc.walk_kernel.mix_draw`);
4. the step scales drawn from their exact conditional given the raw increments, a generalized
   inverse Gaussian (the centred update), then each :math:`\log\sigma_k` slice sampled with
   the increments carried along the Gaussian approximation of their conditional
   (``scale_update="transport"``, :func:`~privinfer.pymc.walk_kernel.scale_update_transport`:
   units the cells pin down stay, the others are rescaled, neighbouring increments move
   together; ``"unit_transport"``,
   :func:`~privinfer.pymc.walk_kernel.scale_update_unit_transport`, the same with one
   approximation per unit, for units of very different sizes, and the update of walks whose
   units span several rows of cells) or with :math:`\delta/\sigma^{w}`
   held fixed (``"noncentred"``, exponents ``w`` given to :func:`register_walk`, default 1):
   the interweaving of Yu and Meng (2011), which mixes whether the cells pin the increments
   down (large units) or not (small ones).  The slice sampling runs on a surrogate of its target
   (the cells' log likelihood replaced by the units' quadratic expansions) and each scale's
   proposal is accepted or refused by the exact target (delayed acceptance,
   :func:`~privinfer.pymc.walk_kernel.update_log_scales_corrected`; ``scale_surrogate``): one
   evaluation of the cells per scale instead of one per slice step, the same invariant law;
5. optionally (``scale_carry``), some log scales slice sampled once more with every unit's
   increments carried along the unit transport and every row's cells along them, by the
   zero-sum shift of the carried update (:func:`~privinfer.pymc.walk_carry.scale_update_carried`):
   given the cells a scale can move only as far as the pinned increments allow, given the
   cells' ancillary coordinates the increments are informed only as much as the measurements
   inform them.

Why.  Given the cells, the units' departures are conditionally independent (up to the
centring), each informed by thousands of people: a blocked update per unit pair costs a few
passes over the cells and lands close to an independent draw, while NUTS on the joint
posterior of all units' increments and their scales needs deep trajectories on a funnel whose
width the cells change every iteration.  The remaining continuous parameters (profiles,
departure scales of higher levels, the concentration) stay with NUTS.
"""

from __future__ import annotations

import math

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.distributions.continuous import WeibullBetaRV
from pymc.exceptions import NotConstantValueError
from pymc.logprob.transforms import LogTransform
from pymc.pytensorf import constant_fold
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence, CompoundStep, StepMethodState
from pymc.step_methods.state import dataclass_state
from pymc.util import get_random_generator
from pytensor.tensor.random.basic import HalfNormalRV, InvGammaRV

from ..lattice import MeasurementRows
from .measured import latent_measurements
from .registry import WalkInfo, model_registry
from .step_inputs import registered_inputs
from .walk_alone import alone_units, alone_update
from .walk_carry import CARRY_WIDTH, carried_update, ellipse_update, scale_update_carried
from .walk_carry import carry_directions as directions_of_carry
from .walk_collapse import collapse_rows, collapsed_update
from .walk_cousin import cousin_update, cousin_weights
from .walk_kernel import (SLICE_STEPS, SLICE_WIDTH, centred, checked_members, mix_draw, move_update,
                          refresh_group_means, scale_draw, scale_update_noncentred, scale_update_transport,
                          scale_update_unit_transport, sibling_pairs, sized_pairs)

__all__ = ["WalkGibbs", "register_walk", "scale_prior", "mix_prior", "carried_pairs", "collapsed_pairs",
           "CARRY_DIRECTIONS", "CARRY_SMALL", "COLLAPSE_SMALL", "ALONE_SMALL", "COUSINS_SMALL", "ELLIPSES",
           "SCALE_SURROGATE", "SCALE_CARRY"]

_TAG = "privinfer_walk"

#: Directions of the carried update per sibling pair and iteration (:class:`WalkGibbs`'s
#: ``carry_directions``), drawn at random among the increments.  All Kentucky tracts, 2 x (200 +
#: 400), default chain seed, the collapsed move on every pair (``collapse`` 100), one machine, one
#: run each: 1, 8 and all 22 directions took 946 s, 1,021 s and 1,798 s; the tracts' shares 65+
#: median bulk ESS 293, 352 and 386 (min 8, 29, 15), the cells' median 596, 614 and 629, the cells
#: of tracts above the median size min 133, 236 and 169.  The cells' min (11, 51, 16) is each time
#: the 780-person tract 21111008800's, whose pairs with its small neighbours take every direction
#: whatever the setting; 8 gave 48 and 51 on two machines, and with one run of 1 and of all the
#: runs' spread and the settings' effect on that tract are not told apart.  The short runs' ratio
#: (1 direction 1.9 times cheaper over 2 x (30 + 30)) is the first iterations' wide slices, not
#: the steady state's.  Since the elliptical slice updates move a pair's whole walk
#: (:data:`ELLIPSES`), 2 directions and three matchings of ellipses against 8 and one: chain seed
#: 7, the cells above R-hat 1.01 1,673 against 1,715, the shares 65+ median bulk ESS 311 against
#: 307, 734 s against 819 s (the 819 s run shared the machine with a minute of tests); with the
#: scales' block correction too (:data:`SCALE_SURROGATE`), chain seed 11, back to back: 1,668
#: against 1,775 cells above 1.01, shares 65+ median 315 against 308, under 18 340 against 353,
#: max R-hat 1.048 both, min bulk ESS 53 against 47, 635 s against 708 s.
CARRY_DIRECTIONS = 2

#: A walk registered with ``sizes``: its carried update moves a pair along every direction, not
#: :data:`CARRY_DIRECTIONS`, when both units have under this fraction of the median size of the
#: carried units.  The data pin a small unit's walk least, so its walk and cells move together
#: the most and alternating their updates is slowest there (on all Kentucky tracts the slowest
#: cells are in tracts of about 800 people; 0.65 x the median tract's 3,870 people is 2,500,
#: 12% of the tracts are under it).  A pair's move is as wide as its larger unit allows, so a
#: small unit paired with a large one gets the usual count.  Two more matchings by size per
#: iteration for the units under half the median (34 Kentucky tracts), 2 x (200 + 400): the
#: tracts' shares under 18 min bulk ESS 48 and 35 against 12 and 20 (default chain seed and seed
#: 11), but the cells' max R-hat 1.093 and 1.099 against 1.083 and 1.086, the shares 65+ min 16
#: and 8 against 10 and 12, and 12% more time; left out.
CARRY_SMALL = 0.65

#: A walk registered with ``sizes`` and carry fractions, one row of cells per unit: the
#: collapsed move (:mod:`privinfer.pymc.walk_collapse`) moves every pair of a matching by size
#: whose units both have under this fraction of the median unit's size (module docstring,
#: step 2).  All Kentucky tracts, 2 x (200 + 400), default chain seed, against no collapsed move
#: in the same conditions (alone on the machine): about 6 pairs per iteration (34 tracts under
#: half the median), accepted 0.56; the cells' min bulk ESS 37 against 23 (max R-hat 1.060
#: against 1.057, cells above 1.05: 3 against 6), the tracts' shares 65+ min ESS 25 against 18
#: and under 18 43 against 25, the parameters' max R-hat 1.079 against 1.096; 787 s against
#: 676 s (about 20 ms per pair move).  Chain seed 11: the cells of tracts under half the median
#: max R-hat 1.054 and min bulk ESS 42 against 1.089 and 22 (the 780-person 21111008800 no longer
#: the slowest), all cells 1.076 / 21 against 1.089 / 22 (the slowest now 21049000600, 0.5-1
#: times the median, which the move does not reach), shares 65+ min ESS 8 against 20 (a tract
#: the move does not reach either: run-to-run spread), under 18 52 against 29, the parameters'
#: max R-hat 1.155 against 1.089 (step_scale_age; 1.079 against 1.096 on the default seed).  At
#: 0.65 the matching gives about 37 pairs per iteration.  Compiled
#: (:mod:`privinfer.pymc.collapse_kernel`, about 0.6 ms a pair), every pair of the matching
#: (``collapse`` 100, about 540 pairs), default chain seed: the cells' max R-hat 1.050 and min
#: bulk ESS 48, none above 1.05, the shares 65+ min ESS 36 and under 18 42, the parameters' max
#: R-hat 1.148 (``step_scale_age``), for about 1.27 times the time of no collapsed move (the
#: move's share of a chain's time in a sampling profile, 21%); one chain seed, so left at 0.5.
#: The same setting again on another machine: max R-hat 1.050, min bulk ESS 51, one cell above
#: 1.05, the shares 65+ min ESS 29 (median 352) and under 18 70 (412), the parameters' max R-hat
#: 1,021 s (other numbers of the carried update's directions: :data:`CARRY_DIRECTIONS`).  Still
#: one chain seed and no baseline run on that machine.  Since the ellipses and the scales' block
#: correction made the rest cheaper (:data:`ELLIPSES`, :data:`SCALE_SURROGATE`), every pair of the
#: matching (``inf``) against 0.5: Kentucky's first 40 counties (354 tracts), 2 x (200 + 400),
#: chain seeds 7 and 11, each against 0.5 on the same seed: accepted 0.56 both; the cells above
#: R-hat 1.01 305 and 300 against 654 and 719, their bulk ESS at the 1% quantile 322 and 320
#: against 235 and 226, at the 0.1% quantile 224 and 217 against 169 and 144, median 614 and 613
#: against 533 and 532, the cells aged 18 to 29 (the slowest ages) at their 1% quantile 303 and
#: 302 against 201 and 191, for 202 s and 208 s against 170 s and 165 s: 12-20% more ESS per
#: second at those quantiles.  All Kentucky tracts, chain seed 11, against 0.5 with the same
#: defaults an earlier day on the same kind of machine: the cells above R-hat 1.01 838 against
#: 1,696, max R-hat 1.028 against 1.050, min bulk ESS 81 against 63 (now all in the 780-person
#: tract 21111008800; the tracts above half the median size min 140 against 63), median 623
#: against 544; the tracts' shares 65+ median bulk ESS 409 against 315, under 18 438 against 343;
#: the parameters' max R-hat 1.055 against 1.086; the bulk ESS per draw at the cells' 0.1% and 1%
#: quantiles 0.263 and 0.413 against 0.203 and 0.308; RMSE and coverage unchanged; 789 s against
#: 649 s (1.31 s per iteration against 1.08 s: about 0.4 ms for each of some 540 pairs).  Per
#: second of sampling, the slow quantiles gain 7-10%, the bulk of the cells more.  Tried with it
#: and left out: one round of ellipses instead of three and one round of the pair moves instead
#: of two (first 40 counties, chain seed 7): no cheaper, slower tails (cells above 1.01 354 and 367
#: against 305).
COLLAPSE_SMALL = math.inf

#: A walk registered with ``sizes``, carry fractions and sibling groups, one row of cells per unit:
#: every unit under this fraction of the median unit's size in a group of three or more is moved
#: against up to :data:`~privinfer.pymc.walk_alone.SIBLINGS` of its siblings once per iteration
#: (:mod:`privinfer.pymc.walk_alone`; module docstring, step 2), along :data:`CARRY_DIRECTIONS`
#: directions; 0: off (the default).  Kentucky's first 40 counties (354 tracts, 2 x (200 + 400)),
#: 0.65 against off, chain seeds 7 and 11: the cells' min bulk ESS 36 and 57 against 10 and 20,
#: max R-hat 1.050 and 1.034 against 1.166 and 1.084 (the slowest each time the old-age cells of
#: Murray's campus tract 21035000600), the county profiles' min ESS 37 and 41 against 9 and 15,
#: the tracts' step scales' min ESS 23 and 23 against 41 and 44; 1.29 times the time.  All
#: Kentucky tracts, default chain seed, one run: the county profiles' min ESS per class of county
#: size 36-62 against 22-44, but the cells' min 9 against 56 (max R-hat 1.156 against 1.052, 20
#: of the 21 cells above 1.05 in the 780-person tract 21111008800, whose min ESS ranged 11-51
#: over earlier runs of one setting) and the tracts above half the median 40 and 69 against 56
#: and 105, in 812 s against 714 s.  Chain seed 11, both on one machine: the cells' max R-hat
#: 1.046 against 1.091, min ESS 44 against 16 (the default's slowest in Fayette's tract
#: 21067000900), the county profiles' min ESS 25-67 against 22-56, in 779 s against 646 s.  One
#: seed each way on the whole state: off until more chain seeds tell the runs' spread from the
#: move's effect.
ALONE_SMALL = 0.0

#: A walk registered with ``sizes``, carry fractions, sibling groups and a ``parent`` walk, one row
#: of cells per unit: every unit under this fraction of the median unit's size in a group of two or
#: more is moved alone once per iteration, its parent's walk taking up the change and a cousin's
#: parent giving it back (:mod:`privinfer.pymc.walk_cousin`; module docstring, step 2), along
#: :data:`CARRY_DIRECTIONS` directions; 0: off.  Kentucky's first 40 counties (354 tracts, 2 x
#: (200 + 400)), 0.65 against off, chain seeds 7 and 11: the cells' min bulk ESS 63 and 78 against
#: 10 and 20, max R-hat 1.040 and 1.039 against 1.166 and 1.084, cells above 1.01 700 and 694
#: against 798 and 762, the county profiles' min ESS 85 and 55 against 9 and 15, the tracts' step
#: scales' 48 and 50 against 41 and 44, in 1.08-1.10 times the time (the move against siblings,
#: :data:`ALONE_SMALL`: 36 and 57, 1.29 times).  All Kentucky tracts, the same two chain seeds,
#: every run on one machine: the cells' max R-hat 1.052 and 1.043 against 1.052 and 1.091, min
#: bulk ESS 40 and 45 against 56 and 16, cells above 1.01 1,847 and 1,812 against 1,928 and 2,073;
#: the slowest cells on the default seed no longer move with their county's profile (the
#: correlation of their 20-draw means with it -0.16 to 0.38 against 0.70-0.83; on seed 11 two of
#: the five slowest still 0.70 and 0.72); 2,860 of the move's density
#: evaluations per iteration beside the carried update's 16,350; sampling 712 and 731 s against
#: 714 and 643 s.  The default since then.
COUSINS_SMALL = 0.65

#: The warm-up's exponential average of the log step scales, the reference of the scale
#: update's surrogate (``WalkGibbs(scale_surrogate=True)``), weighs each new iteration by at
#: least this much (the plain mean over the first ``1/REF_WEIGHT`` iterations).  On 40 Kentucky
#: counties a reference 0.3 off in every log scale left the correction's sd at 0.017 (0.015 at
#: the current scales), one 1.0 off at 0.33.
REF_WEIGHT = 0.1

#: The scales' second update's surrogate (``WalkGibbs(scale_surrogate=None)``): True, one
#: exact correction per scale; ``"block"``, one of the whole move (two exact evaluations of all
#: cells per iteration instead of 23); False, none.  All Kentucky tracts, one chain each, side by
#: side in time (with :data:`ELLIPSES` 3, :data:`CARRY_DIRECTIONS` 2 and one round of pair moves):
#: the scales' update 114 ms per iteration against 182 ms (the rest is the surrogate's slice steps,
#: mostly the transport of every unit's increments), the whole move accepted 0.93-0.96 against
#: 0.99 per scale; 2 x (200 + 400), chain seed 7: 615 s against 734 s, the cells above R-hat
#: 1.01 1,720 against 1,673, the shares 65+ median bulk ESS 311 both, the tracts' step scales'
#: median 87 against 85; the cells' min bulk ESS 16 against 60 (one small tract's children,
#: 21019000200, the slowest of seed 11 in earlier runs; seed 11 with it: 53).
SCALE_SURROGATE = "block"

#: :class:`WalkGibbs` follows the carried update of a walk with one row of cells per unit with one
#: elliptical slice update of every sibling pair's whole move (a fresh matching), and every move
#: of a unit against its siblings or a cousin with one of its move
#: (:func:`~privinfer.pymc.walk_carry.ellipse_update`): all increments at once, as far as the
#: prior and the data allow together, at about 11 evaluations per pair.  All Kentucky tracts,
#: 2 x (200 + 400), chain seeds 7 and 11, against without: cells above R-hat 1.01 1,665 and
#: 1,630 against 1,847 and 1,812; the tracts' shares 65+ median bulk ESS 309 and 312 against 274
#: and 277, under 18 346 and 351 against 321 and 330; the parameters' max R-hat 1.087 and 1.075
#: against 1.093 and 1.190 (min ESS 17 and 22 against 15 and 8); sampling 771 s against 758 s
#: (seed 7, side by side in time).  The extremes went both ways: the cells' max R-hat 1.035 and
#: 1.068 against 1.052 and 1.043, min bulk ESS 71 and 26 against 40 and 45 (seed 11's worst, one
#: tract's children: 21019000200), within the spread of one chain's windows of the same length
#: (min ESS 37-83).  An integer: that many matchings of ellipses after the carried update (the
#: moves against siblings or a cousin keep one); 3 since the carried update takes 2 directions
#: per pair (:data:`CARRY_DIRECTIONS`, measurements there): an ellipse costs about 11 evaluations
#: per pair, a direction's slice about 5.
ELLIPSES = 3

#: Log step scales per iteration that :class:`WalkGibbs` also updates with the increments and
#: the cells carried along (``scale_carry``; module docstring, step 5), drawn at random; off by
#: default, since it cost more than it gained on Kentucky's tracts (``WalkGibbs``).
SCALE_CARRY = 0


def register_walk(*, scales, increments, prior_scale: float, base, kappa, weights, latent, grid, code,
                  groups=None, exponents=None, carry=None, order: int = 1, spacing=None, members=None,
                  carry_units=None, sizes=None, mix=None, lump=None, parent=None, model=None) -> WalkInfo:
    r"""Record a random-walk departure (module docstring) so that ``pm.sample()`` samples its
    step scales and increments with :class:`WalkGibbs`.

    Parameters
    ----------
    scales
        the step scales, a variable of shape ``(K-1,)``, log transformed (PyMC's default), with
        the prior ``pm.HalfNormal(sigma=prior_scale)`` or the Rayleigh
        ``pm.Weibull(alpha=2, beta=prior_scale * sqrt(2))`` (:func:`scale_prior`).
    increments
        the raw increments, ``Normal(0, scales ** (1 - weights))`` (with ``mix``:
        ``Normal(0, scales ** (1 - weights) * sqrt(mix[:, None]))``), shape ``(U, K-1)``; the
        departure of unit ``u`` is the cumulative sum of ``scales ** weights * increments``
        (centred within ``groups`` when given), 0 for the first category.  :class:`WalkGibbs`
        requires ``weights == 0`` (the centred parametrization).
    base, kappa, latent
        tensors: ``(R, d)`` log profiles the rows of cells depart from and the Dirichlet
        concentration; the lattice latent holding the cells (:func:`~privinfer.pymc.lattice_latent`).
    grid, code
        ``(R, d)`` cell indices of every row (each a Dirichlet-multinomial); ``(d,)`` category of every column.
    members
        ``(R,)`` the unit (0..U-1) of every row of ``grid``: a unit's departure enters all its
        rows (a county's walk, each of its tracts' cells, with each tract's own base); every unit
        needs a row.  None (default): ``R = U``, row ``u`` is unit ``u``.  :class:`WalkGibbs`
        updates such a walk's scales by the unit transport (or ``"noncentred"``); its carried
        update moves a unit's walk with the cells of all its rows.
    groups
        ``(U,)`` sibling group of every unit (the increments are centred within groups), or None.
    exponents
        ``(U, K-1)`` constants in [0, 1]: the partial non-centring of the scales' second update
        (:func:`~privinfer.pymc.walk_kernel.scale_update_noncentred`), ideally
        :math:`1/(1 + \sigma^2 I)`, ``I`` the information about each increment; None: 1.
    carry
        ``(n,)`` carry fractions in [0, 1] of the latent's cells, ideally :math:`v_m/(v_m + v_p)`
        (the cell's measurement variance against its prior variance): :class:`WalkGibbs` then
        also moves the increments with the cells carried along
        (:mod:`privinfer.pymc.walk_carry`; the latent must be observed through one
        :class:`~privinfer.mechanisms.NoisyMeasurements` release with 0/1 queries).  None: no
        carried update.
    carry_units
        ``(U,)`` booleans: the units the carried update moves (paired among themselves within
        their sibling groups; a fixed subset, so every update stays exact), for walks whose
        units differ in how much the carried update is worth against its cost (a county of two
        tracts against one of 190).  None: every unit.  Needs ``carry``.
    sizes
        ``(U,)`` fixed positive sizes (estimated totals): the carried update pairs near neighbours
        in size, moving small units' pairs along every direction.  None: uniform.  Needs ``carry``.
    order
        1 (default): the increments are the steps between neighbouring categories (a random
        walk); 2: their cumulative sums are (a second-order random walk, whose increments
        change the slope: a tract older than its county at every age past 40 departs by one
        increment, not by one per age group).
    spacing
        order 2 only: ``(K-1,)`` positive distances between neighbouring categories (e.g. between
        the age groups' midpoints, in units of their mean): the cumulative sums are then slopes
        per unit of distance, each step their product with its distance, so a walk whose slope
        never changes is linear in age rather than in the groups' index.  None: all 1.
    mix
        prior variance multipliers :math:`\lambda_u`, ``(U,)`` (or ``(U, K-1)``: per increment),
        prior ``pm.InverseGamma(alpha=nu/2, beta=nu/2)`` (log transformed): t increments
        (:mod:`~privinfer.pymc.walk_kernel`, "Mixed prior variances"), drawn exactly by
        :class:`WalkGibbs` (its ``"transport"`` then ``"unit_transport"``).  None: all 1.
    lump
        ``(n,)`` booleans, fixed: the small cells the carried update moves by their quantiles
        (:mod:`privinfer.pymc.walk_carry`, "Small cells").  None: none.  Needs ``carry``.
    parent
        the raw increments of the parents' walk (registered too; a county's under its tracts'): its
        unit ``g`` the parent of group ``g``, its departures in ``base`` with the same ``code``, order
        and spacing, for ``WalkGibbs(cousins=...)``.  None: none.  Needs ``groups``.
    """
    model = pm.modelcontext(model)
    grid = np.asarray(grid, dtype=np.int64)
    code = np.asarray(code, dtype=np.int64)
    K1 = int(scales.type.shape[0]) if scales.type.shape[0] is not None else None
    U = _n_units(increments)
    if grid.ndim != 2 or code.shape != (grid.shape[1],):
        raise ValueError("grid must be (rows, d) and code (d,)")
    members = checked_members(members, grid.shape[0], U)
    if K1 is None or code.min() != 0 or code.max() != K1:
        raise ValueError("code must take every category 0..K-1 (K - 1 = the number of step scales)")
    exponents = _checked_exponents(exponents, U, K1)
    spacing = _checked_spacing(order, spacing, K1)
    groups, carry, carry_units, sizes = _checked_units(groups, carry, carry_units, sizes, U, grid.size)
    mix_dof, lump = None if mix is None else _checked_mix_var(mix, U, K1), _checked_lump(lump, carry, grid.size)
    parent = _checked_parent(parent, groups, increments)
    dof, scale = scale_prior(scales)
    if not np.isclose(scale, float(prior_scale), rtol=1e-9, atol=0.0):
        raise ValueError(f"prior_scale={float(prior_scale):g} differs from the scale {scale:g} of the prior of "
                         f"'{scales.name}'")
    info = WalkInfo(scales=scales.name, increments=increments.name, prior_scale=scale, prior_dof=dof, base=base,
                    kappa=kappa, weights=weights, latent=latent.name, grid=grid, code=code,
                    groups=groups, exponents=exponents, carry=carry, order=int(order),
                    spacing=spacing, members=members, carry_units=carry_units, sizes=sizes,
                    mix=None if mix is None else mix.name, mix_dof=mix_dof, lump=lump,
                    parent=parent)
    _record(model, info, [scales, increments] + ([] if mix is None else [mix]))
    return info


def _checked_parent(parent, groups, increments):
    """``register_walk``'s ``parent``: None or another walk's increments, with ``groups``; its name."""
    if parent is not None and (groups is None or parent is increments):
        raise ValueError("parent needs sibling groups (groups=...) and must be another walk's increments")
    return None if parent is None else parent.name


def _checked_exponents(exponents, U: int, K1: int):
    """``register_walk``'s ``exponents``: None or a ``(U, K1)`` float array in [0, 1], or a one-line error."""
    if exponents is None:
        return None
    exponents = np.asarray(exponents, dtype=float)
    if exponents.shape != (U, K1) or np.any((exponents < 0) | (exponents > 1)):
        raise ValueError("exponents must be a (units, K-1) array in [0, 1]")
    return exponents


def _record(model, info: WalkInfo, variables) -> None:
    """The walk ``info`` in the model's registry, its ``variables`` tagged for :class:`WalkGibbs`;
    a variable that already belongs to a registered walk is an error."""
    reg = model_registry(model)["walks"]
    taken = {name for w in reg.values() for name in _walk_vars(w)}
    if any(v.name in taken for v in variables) or info.increments in reg:
        raise ValueError(f"'{info.increments}', '{info.scales}' or the mix already belongs to a registered walk")
    reg[info.increments] = info
    for v in variables:
        setattr(v.tag, _TAG, True)


def _checked_spacing(order, spacing, K1: int):
    """``register_walk``'s ``order`` (1 or 2) and ``spacing`` (``(K-1,)`` positive, order 2
    only) checked; the spacing as floats."""
    if order not in (1, 2):
        raise ValueError("order must be 1 (random walk) or 2 (second-order random walk)")
    if spacing is not None:
        spacing = np.asarray(spacing, dtype=float)
        if order != 2 or spacing.shape != (K1,) or not np.all(np.isfinite(spacing) & (spacing > 0)):
            raise ValueError(f"spacing must be {K1} positive distances, for a walk of order 2")
    return spacing


def _checked_units(groups, carry, carry_units, sizes, U: int, n: int):
    """``register_walk``'s ``groups`` (int ``(U,)``), ``carry`` (``(n,)`` in [0, 1]),
    ``carry_units`` (bool ``(U,)``) and ``sizes`` (positive ``(U,)``; both with ``carry``
    only), or one-line errors."""
    if groups is not None:
        groups = np.asarray(groups, dtype=np.int64)
        if groups.shape != (U,):
            raise ValueError("groups must give one sibling group per unit")
    if carry is not None:
        carry = np.asarray(carry, dtype=float)
        if carry.shape != (n,) or not np.all((carry >= 0) & (carry <= 1)):
            raise ValueError(f"carry must hold {n} fractions in [0, 1], one per cell")
    if carry_units is not None:
        carry_units = np.asarray(carry_units)
        if carry is None:
            raise ValueError("carry_units needs carry fractions (carry=...)")
        if carry_units.shape != (U,) or carry_units.dtype != bool:
            raise ValueError(f"carry_units must be {U} booleans, one per unit")
    if sizes is not None:
        sizes = np.asarray(sizes, dtype=float)
        if carry is None:
            raise ValueError("sizes needs carry fractions (carry=...): they shape the carried update")
        if sizes.shape != (U,) or not np.all(np.isfinite(sizes) & (sizes > 0)):
            raise ValueError(f"sizes must be {U} finite positive numbers, one per unit")
    return groups, carry, carry_units, sizes


def _checked_lump(lump, carry, n: int):
    """``register_walk``'s ``lump``: ``(n,)`` booleans, with ``carry`` only, or a one-line error."""
    if lump is None:
        return None
    lump = np.asarray(lump)
    if carry is None:
        raise ValueError("lump needs carry fractions (carry=...): it shapes the carried update")
    if lump.shape != (n,) or lump.dtype != bool:
        raise ValueError(f"lump must be {n} booleans, one per cell")
    return lump


def _n_units(increments) -> int:
    """The number of units of a walk's increments ``(U, K-1)``, from their static shape."""
    U = increments.type.shape[0]
    if U is None:
        raise ValueError(f"the increments '{increments.name}' need a static shape (units, K-1)")
    return int(U)


def scale_prior(scales) -> tuple[int, float]:
    r"""The degrees of freedom :math:`\nu` and scale ``s`` of a walk's step-scale prior,
    :math:`\sigma / s \sim \chi_\nu` (:mod:`~privinfer.pymc.walk_kernel`): ``pm.HalfNormal(sigma=s)``
    is :math:`\nu = 1`, the Rayleigh ``pm.Weibull(alpha=2, beta=s * sqrt(2))`` is :math:`\nu = 2`
    (density :math:`(\sigma/s^2)\,e^{-\sigma^2/(2s^2)}`).  Any other prior, or parameters that
    are not one constant, is an error: :class:`WalkGibbs`'s exact draws are written for these."""
    node = getattr(scales, "owner", None)
    op = getattr(node, "op", None)
    if isinstance(op, HalfNormalRV):
        loc, s = node.inputs[-2:]
        dof, fixed = 1, loc
    elif isinstance(op, WeibullBetaRV):
        alpha, s = node.inputs[-2:]
        dof, fixed = 2, alpha
    else:
        raise ValueError(f"the step scales '{getattr(scales, 'name', scales)}' need a HalfNormal or Rayleigh "
                         "(Weibull with alpha=2) prior")
    try:
        fixed, s = (np.unique(np.asarray(v, dtype=float)) for v in constant_fold([fixed, s]))
    except NotConstantValueError:
        raise ValueError(f"the prior of the step scales '{scales.name}' must have constant parameters") from None
    want = 0.0 if dof == 1 else 2.0
    if fixed.size != 1 or s.size != 1 or fixed[0] != want or not s[0] > 0:
        raise ValueError(f"the step scales '{scales.name}' need one positive prior scale and "
                         + ("loc 0" if dof == 1 else "Weibull alpha = 2 (the Rayleigh)"))
    return dof, float(s[0]) / (1.0 if dof == 1 else np.sqrt(2.0))


def _checked_mix_var(mix, U: int, K1: int) -> float:
    """``register_walk``'s ``mix``: its prior's degrees of freedom, or a one-line error."""
    if tuple(mix.type.shape) not in ((U,), (U, K1)):
        raise ValueError(f"mix '{mix.name}' must have the static shape ({U},): one multiplier per unit, or "
                         f"({U}, {K1}): one per unit and increment")
    return mix_prior(mix)


def mix_prior(mix) -> float:
    r"""The degrees of freedom :math:`\nu` of a walk's variance multipliers' prior
    ``pm.InverseGamma(alpha=nu/2, beta=nu/2)`` (:func:`register_walk`'s ``mix``); any other
    prior, or parameters that are not one such constant, is an error: :class:`WalkGibbs`'s exact
    draw is written for it."""
    node = getattr(mix, "owner", None)
    if not isinstance(getattr(node, "op", None), InvGammaRV):
        raise ValueError(f"the variance multipliers '{getattr(mix, 'name', mix)}' need an InverseGamma(nu/2, nu/2) "
                         "prior")
    try:
        alpha, beta = (np.unique(np.asarray(v, dtype=float)) for v in constant_fold(node.inputs[-2:]))
    except NotConstantValueError:
        raise ValueError(f"the prior of the variance multipliers '{mix.name}' must have constant parameters") from None
    if alpha.size != 1 or beta.size != 1 or not (np.isfinite(alpha[0]) and alpha[0] > 0) or alpha[0] != beta[0]:
        raise ValueError(f"the variance multipliers '{mix.name}' need InverseGamma(alpha=nu/2, beta=nu/2): one "
                         "positive constant for both")
    return 2.0 * float(alpha[0])


def carried_pairs(rng, info: WalkInfo, U: int, n_dirs: int, per_pair=CARRY_DIRECTIONS):
    """The carried update's pairs ``(u, v)`` and how many of the ``n_dirs`` directions each
    draws (module docstring, step 2), for the walk ``info`` of ``U`` units: a random matching
    of sibling units among ``info.carry_units`` (None: all), uniform or, with ``info.sizes``,
    of near neighbours in size (:func:`~privinfer.pymc.walk_kernel.sized_pairs`; ``groups`` None:
    every unit alone, ``v = -1``); ``per_pair`` directions (None: all), every direction for a
    pair of two units under :data:`CARRY_SMALL` of the carried units' median size.
    The choice never depends on the chain's state, so the update stays exact."""
    idx = np.arange(U) if info.carry_units is None else np.flatnonzero(info.carry_units)
    k = n_dirs if per_pair is None else min(int(per_pair), n_dirs)
    if info.groups is None:
        pairs = idx, np.full(idx.size, -1, dtype=np.int64)
    else:
        groups = info.groups[idx]
        u, v = sibling_pairs(rng, groups) if info.sizes is None else sized_pairs(rng, groups, info.sizes[idx])
        pairs = idx[u], idx[v]
    if info.sizes is None:
        return pairs, k
    u, v = pairs
    larger = np.where(v < 0, info.sizes[u], np.maximum(info.sizes[u], info.sizes[np.maximum(v, 0)]))
    return pairs, np.where(larger < CARRY_SMALL * np.median(info.sizes[idx]), n_dirs, k)


def collapsed_pairs(rng, info: WalkInfo, fraction: float):
    """The collapsed move's pairs ``(u, v)``: a matching of near neighbours in size within the
    sibling groups (:func:`~privinfer.pymc.walk_kernel.sized_pairs`), the pairs whose units both
    have under ``fraction`` of the median size (``inf``: every pair).  The choice never depends on
    the chain's state (the sizes are fixed), so the move stays exact."""
    u, v = sized_pairs(rng, info.groups, info.sizes)
    if fraction == math.inf:
        return u, v
    keep = np.maximum(info.sizes[u], info.sizes[v]) < fraction * np.median(info.sizes)
    return u[keep], v[keep]


def _walks(model, vars):
    """The registered walks whose step scales and increments are ``vars`` (value variables or
    random variables; None: every registered walk), in registration order."""
    reg = model_registry(model)["walks"]
    if not reg:
        raise ValueError("WalkGibbs needs a model with a walk registered by privinfer.pymc.register_walk")
    pairs = [(info, {model.rvs_to_values[model[name]] for name in _walk_vars(info)}) for info in reg.values()]
    if vars is None:
        return [info for info, _ in pairs]
    got = {model.rvs_to_values.get(v, v) for v in (vars if isinstance(vars, (list, tuple)) else [vars])}
    chosen = [(info, want) for info, want in pairs if want <= got]
    if not chosen or set().union(*(want for _, want in chosen)) != got:
        names = "; ".join(", ".join(f"'{n}'" for n in _walk_vars(info)) for info, _ in pairs)
        raise ValueError(f"WalkGibbs updates each walk's step scales and increments (and mix) together ({names})")
    return [info for info, _ in chosen]


def _walk_vars(info: WalkInfo) -> tuple:
    """The names of the variables :class:`WalkGibbs` updates for the walk ``info``."""
    return (info.scales, info.increments) + (() if info.mix is None else (info.mix,))


def _walk_info(model, vars):
    infos = _walks(model, vars)
    if len(infos) != 1:
        raise ValueError("one WalkGibbs updates one walk (WalkGibbs(vars=...) of several returns one per walk)")
    info = infos[0]
    for name in (info.scales,) + (() if info.mix is None else (info.mix,)):
        if not isinstance(model.rvs_to_transforms.get(model[name]), LogTransform):
            raise ValueError(f"WalkGibbs needs '{name}' log-transformed (PyMC's default for positive priors)")
    return info


def resolve_scale_update(scale_update: str, info: WalkInfo) -> str:
    """The scales' second update :class:`WalkGibbs` runs for a walk when asked for
    ``scale_update``: ``"transport"`` becomes ``"unit_transport"`` for a walk registered with
    ``members`` (the transport's one mean information matrix is per row, not per unit) and
    ``"noncentred"`` for one registered with members and non-centring ``exponents`` (which
    only the non-centred update uses), and ``"unit_transport"`` for one registered with ``mix``
    (the transport's contrasts need equal prior variances within a group); an explicit transport
    with exponents is an error."""
    if scale_update not in ("transport", "unit_transport", "noncentred"):
        raise ValueError("scale_update must be 'transport', 'unit_transport' or 'noncentred'")
    if info.mix is not None and info.members is None and info.exponents is None and scale_update == "transport":
        scale_update = "unit_transport"
    if info.members is not None and scale_update == "transport":
        scale_update = "unit_transport" if info.exponents is None else "noncentred"
    if scale_update != "noncentred" and info.exponents is not None:
        raise ValueError("the walk's non-centring exponents apply to scale_update='noncentred' only")
    return scale_update


@dataclass_state
class WalkGibbsState(StepMethodState):
    width: np.ndarray
    carry_width: np.ndarray
    carry_scale_width: np.ndarray
    alone_width: np.ndarray
    cousin_width: np.ndarray
    scale_ref: np.ndarray
    tune: bool
    n_tunes: float


class WalkGibbs(ArrayStepShared):
    r"""Blocked Gibbs updates of a registered walk's increments and step scales (module
    docstring).

    Parameters
    ----------
    vars
        the walk's step scales and increments (default: the model's registered walk).
    rounds
        random matchings (pair moves of every unit) per iteration (default 2).
    carry_directions
        increments per sibling pair and iteration in the carried update (drawn at random;
        ``None``: all), default :data:`CARRY_DIRECTIONS` (all for the pairs of small units of a
        walk registered with ``sizes``, :data:`CARRY_SMALL`); the update runs when the walk was
        registered with carry fractions.  On 12 Kentucky counties (94 tracts, 2 x (300 + 600)
        iterations), the tracts' share aged 65+ had a bulk ESS of median 123 (min 20) of 1,200
        draws without the carried update, 296 (43) with 8 directions and 376 (101) with all 22;
        the run took 110 s, 132 s and (on a loaded machine) 186 s.
    scale_update
        the scales' second update: ``"transport"`` (default; ``"unit_transport"`` for a walk
        registered with ``members``, ``"noncentred"`` if also with ``exponents``),
        ``"unit_transport"`` or ``"noncentred"`` (module
        docstring).  On 12 Kentucky counties' 94 tracts, at a posterior draw with everything
        else held, transport gave the 22 step scales a bulk ESS of min 319 / median 736 per
        1,200 iterations against 19 / 222, at the same number of evaluations (about 120 per
        iteration), with the first-order walk.  With today's default model (a second-order walk
        in age) and the same setting, transport gives min 3 / median 97 while the carried update
        moves the cells, and min 238 / median 314 with the cells held: the scales' slow mode is
        the cells', which hold the increments while the scales move.
    slice_steps
        the limit ``m`` of every slice update's stepping out (the scales' and the carried
        update's; :func:`~privinfer.pymc.walk_kernel.slice_coordinate`), default
        :data:`~privinfer.pymc.walk_kernel.SLICE_STEPS`.  1 places one tuned width at random
        around the current point and only shrinks it: fewer evaluations, but where a scale's
        conditional is wider than its tuned width it moves less.  At a posterior point of 12
        Kentucky counties (94 tracts) with everything else held, over 1,200 iterations, the
        tracts' 22 step scales had a bulk ESS of median 32 with 1 against 97 with 40 (33 against
        117 evaluations per iteration, 103 s against 142 s); the counties' 77 against 106 (30
        against 117).
    scale_surrogate
        True: the scales' second update slice samples a quadratic surrogate of its
        target and corrects each scale's proposal by the exact target (module docstring, step
        4); ``"block"``: all scales' slice updates on the surrogate, in a random order, then one
        correction of the whole move (:func:`~privinfer.pymc.walk_kernel.update_log_scales_corrected`
        with ``block``: two exact evaluations instead of one per scale); False: it slice samples
        the exact target.  All leave the same law invariant; None (default):
        :data:`SCALE_SURROGATE`.  The
        surrogate expands the cells' log likelihood at the increments of reference log scales
        (``reference`` of :func:`~privinfer.pymc.walk_kernel.scale_update_transport`): during
        warm-up a running mean of the log scales (the mean of the first ten iterations, then an
        exponential average with weight 0.1), afterwards a constant of the chain.
    scale_carry
        how many log step scales, drawn at random each iteration, are then also updated with
        every unit's increments and cells carried along (module docstring, step 5), for a walk
        registered with carry fractions; default :data:`SCALE_CARRY` (0: none).  On 40 Kentucky
        counties (354 tracts, 2 x (100 + 200)) all 22 gave the tracts' step scales a bulk ESS of
        min 32 / median 67 against 15 / 66 without, for 38% more CPU time: the scales' slow mode
        is not only the cells holding the increments.
    collapse
        the collapsed move's threshold (module docstring, step 2): pairs of units both under this
        fraction of the median size (``math.inf``: every pair of the matching); None (default):
        :data:`COLLAPSE_SMALL` for a walk registered with carry fractions, ``sizes``, sibling
        groups and one row of cells per unit whose measurement rows hold one, all or none of a
        unit's cells, else off; 0: off.
    alone
        the units moved against several of their siblings (module docstring, step 2;
        :mod:`privinfer.pymc.walk_alone`): those under this fraction of the median size in sibling
        groups of three or more, for a walk registered with carry fractions, ``sizes`` and sibling
        groups, one row of cells per unit and no ``mix``; None (default): :data:`ALONE_SMALL`
        where the walk allows the move, else off; 0: off.
    cousins
        the units moved alone, their parent's walk taking up the change and a cousin's parent
        giving it back (module docstring, step 2; :mod:`privinfer.pymc.walk_cousin`): those under
        this fraction of the median size in sibling groups of two or more whose parent has a
        sibling, for a walk registered with carry fractions, ``sizes``, sibling groups and a
        ``parent`` walk, one row of cells per unit and no ``mix``; None (default):
        :data:`COUSINS_SMALL` where the walk allows the move, else off; 0: off.
    ellipses
        whether the carried update (sibling pairs) and every move against siblings or a cousin
        are followed by an elliptical slice update of each pair's whole move
        (:func:`~privinfer.pymc.walk_carry.ellipse_update`); an integer: that many matchings of
        sibling pairs after the carried update (True: one; 0 or False: off); None (default):
        :data:`ELLIPSES` for a walk registered with carry fractions, ``sizes``, sibling groups, one
        row of cells per unit and no ``mix``, else off.
    model, initial_point, rng, blocked, compile_kwargs
        as for PyMC step methods.

    Notes
    -----
    Starting point.  The first warm-up iteration moves every unit's increments to the mode of
    their conditional (the scoring's end, no Metropolis--Hastings test): ``pm.sample()`` starts
    from jittered increments (uniform in [-1, 1]), for a second-order walk profiles off by tens
    on the log scale, and where the concentration's starting value is small the exact moves
    from there are mostly rejected while the cells drift toward that profile (on all Kentucky
    tracts a county of one tract stayed in such a state for a whole chain).  Warm-up draws are
    discarded; every later iteration is exact.

    Tuning.  During warm-up only (``pm.sample``'s ``tune`` iterations), each log scale's slice
    width, and each direction's slice width in the carried update, is set to a multiple of the
    running mean of its moves' sizes (from :data:`~privinfer.pymc.walk_kernel.SLICE_WIDTH` and
    :data:`~privinfer.pymc.walk_carry.CARRY_WIDTH`); afterwards the widths are constants of the
    chain, which keeps every iteration an exact update.  With stepping out the multiple is 2, so
    that stepping out and shrinking take few evaluations.  Without (``slice_steps`` 1) it is 4:
    a width far above the slice gives nearly the exact one-dimensional conditional, whose moves
    average :math:`2s/\sqrt\pi \approx 1.13s` for a Gaussian of sd ``s``, so the width settles
    near :math:`4.5s`, which cuts a slice at the level :math:`f - E`, :math:`E \sim
    \mathrm{Exp}(1)`, half-width :math:`s\sqrt{2E}`, with probability below
    :math:`P(E > 2.5) = 0.08` even if placed badly, and shrinks to it in about two
    evaluations; a width below the slice gives moves near a third of it and grows, slowly once
    the running mean spans many iterations.
    """

    name = "walk_gibbs"
    _state_class = WalkGibbsState
    default_blocked = True
    stats_dtypes_shapes = {"walk_accept": (np.float64, []), "walk_scale_evals": (np.float64, []),
                           "walk_scale_accept": (np.float64, []), "walk_carry_evals": (np.float64, []),
                           "walk_collapse_accept": (np.float64, []), "walk_alone_evals": (np.float64, []),
                           "walk_cousin_evals": (np.float64, [])}

    def __new__(cls, *args, **kwargs):
        """One step method per walk: the variables of several registered walks (``pm.sample()``
        hands :class:`WalkGibbs` all of them) give a :class:`~pymc.step_methods.CompoundStep`
        of one :class:`WalkGibbs` per walk, each with its own random generator."""
        model = pm.modelcontext(kwargs.get("model"))
        vars = kwargs["vars"] if "vars" in kwargs else (args[0] if args else None)
        infos = _walks(model, vars)
        if len(infos) == 1:
            return super().__new__(cls, *args, **kwargs)
        rest = {k: v for k, v in kwargs.items() if k not in ("vars", "rng")}
        rngs = get_random_generator(kwargs.get("rng")).spawn(len(infos))
        return CompoundStep([cls([model[n] for n in _walk_vars(info)], *args[1:], rng=r, **rest)
                             for info, r in zip(infos, rngs)])

    def __init__(self, vars=None, rounds: int = 2, scale_update: str = "transport", carry_directions=CARRY_DIRECTIONS,
                 slice_steps: int = SLICE_STEPS, scale_surrogate=None, scale_carry: int = SCALE_CARRY,
                 collapse=None, alone=None, cousins=None, ellipses=None, model=None, initial_point=None, rng=None,
                 blocked: bool = True, compile_kwargs=None):
        model = pm.modelcontext(model)
        info = _walk_info(model, vars)
        if int(rounds) != rounds or rounds < 1:
            raise ValueError("rounds must be an integer >= 1")
        self.rounds = int(rounds)
        self.scale_update = resolve_scale_update(scale_update, info)
        if carry_directions is not None and (int(carry_directions) != carry_directions or carry_directions < 1):
            raise ValueError("carry_directions must be None (all) or an integer >= 1")
        self.carry_directions = None if carry_directions is None else int(carry_directions)
        if int(slice_steps) != slice_steps or slice_steps < 1:
            raise ValueError("slice_steps must be an integer >= 1")
        self.slice_steps = int(slice_steps)
        scale_surrogate = SCALE_SURROGATE if scale_surrogate is None else scale_surrogate
        if not (isinstance(scale_surrogate, (bool, np.bool_)) or (isinstance(scale_surrogate, str)
                                                                   and scale_surrogate == "block")):
            raise ValueError("scale_surrogate must be None, True, False or 'block'")
        self.scale_surrogate = scale_surrogate if isinstance(scale_surrogate, str) else bool(scale_surrogate)
        if int(scale_carry) != scale_carry or scale_carry < 0:
            raise ValueError("scale_carry must be an integer >= 0")
        self._per_move = 4.0 if self.slice_steps == 1 else 2.0
        self.tune = True
        self.n_tunes = 0.0
        if initial_point is None:
            initial_point = model.initial_point()
        vars, shared, (w,), self._inputs_fn = registered_inputs(
            model, _walk_vars(info), (info.base, info.kappa), info.latent, initial_point,
            compile_kwargs, checked=(info.weights,))
        scales_v, inc_v = vars[:2]
        self._names = (scales_v.name, inc_v.name)
        self._mix_name = vars[2].name if info.mix is not None else None
        self.info = info
        if np.any(np.asarray(w.eval()) != 0):
            raise ValueError("WalkGibbs needs the centred parametrization of the increments (non-centring weights 0)")
        K1 = int(np.asarray(initial_point[scales_v.name]).size)
        self.width = np.full(K1, SLICE_WIDTH)
        self.scale_ref = np.array(initial_point[scales_v.name], dtype=float).reshape(K1)
        if scale_carry and info.carry is None:
            raise ValueError(f"scale_carry needs the walk '{info.increments}' registered with carry fractions (carry=...)")
        self.scale_carry = min(int(scale_carry), K1)
        self.carry_scale_width = np.full(K1, SLICE_WIDTH)
        self._carry_dirs = directions_of_carry(K1, info.order)
        self.carry_width = np.full(self._carry_dirs.shape[0], CARRY_WIDTH)
        self._latent_name = model.rvs_to_values[model[info.latent]].name
        self._rows = self._y = self._moving = None
        if info.carry is not None:
            mech, self._y = latent_measurements(model, info.latent, "WalkGibbs (carried update)")
            self._rows = MeasurementRows(mech.matrix, mech.row_sigma)
            # the moves that carry cells keep every row of the grid's total, so the sums holding
            # all or none of each row's cells (a tract's, its county's, the state's total) never
            # change under them: their kernels visit only the rest
            disjoint = np.unique(info.grid).size == info.grid.size
            self._moving = (self._rows.moving_rows(info.grid) if disjoint
                            else (self._rows.row_ptr, self._rows.rows))
        self.collapse, self._collapse_rows = self._checked_collapse(collapse)
        self._alone = self._checked_alone(alone)
        self.alone_width = np.full(self._carry_dirs.shape[0], CARRY_WIDTH)
        self._cousins, self._parent = self._checked_cousins(cousins, model)
        self.cousin_width = np.full(self._carry_dirs.shape[0], CARRY_WIDTH)
        if ellipses is not None and not (isinstance(ellipses, (bool, np.bool_))
                                         or (isinstance(ellipses, (int, np.integer)) and ellipses >= 0)):
            raise ValueError("ellipses must be None, True, False or a number of matchings >= 0")
        if ellipses is None:
            fits = self._carries_one_row_per_unit() and info.mix is None
            self.ellipse_rounds = int(ELLIPSES) if fits else 0
        else:
            self.ellipse_rounds = int(ellipses) if info.carry is not None else 0
        self._cells_out = None
        self._parent_now = None
        super().__init__(vars, shared, blocked=blocked, rng=rng)

    @property
    def ellipses(self) -> bool:
        """Whether the moves are followed by elliptical slice updates (``ellipse_rounds`` > 0)."""
        return self.ellipse_rounds > 0

    def _carries_one_row_per_unit(self) -> bool:
        """Whether the walk was registered with carry fractions, ``sizes`` and sibling groups, one
        row of cells per unit (no ``members``): what the collapsed move and the move of a unit
        against its siblings need."""
        info = self.info
        return info.carry is not None and info.members is None and info.groups is not None and info.sizes is not None

    def _checked_collapse(self, collapse):
        """``collapse`` (None: :data:`COLLAPSE_SMALL` where the walk allows the move, else 0) and
        the rows of every unit (:func:`~privinfer.pymc.walk_collapse.collapse_rows`); a one-line
        error for a fraction asked of a walk that does not allow it."""
        info = self.info
        fits = self._carries_one_row_per_unit()
        if collapse is not None and not collapse >= 0:
            raise ValueError("collapse must be None or a fraction of the median unit size >= 0 (inf: every pair)")
        if collapse == 0 or (collapse is None and not fits):
            return 0.0, None
        if not fits:
            raise ValueError(f"collapse needs the walk '{info.increments}' registered with carry fractions, sizes and "
                             "sibling groups, one row of cells per unit (no members)")
        try:
            rows = collapse_rows(info.grid, self._rows.row_ptr, self._rows.rows, self._rows.m)
        except ValueError:
            if collapse is not None:
                raise
            return 0.0, None        # rows holding part of a unit's cells: the move does not apply
        return (COLLAPSE_SMALL if collapse is None else float(collapse)), rows

    def reset_tuning(self):
        self.width = np.full(self.width.size, SLICE_WIDTH)
        self.carry_width = np.full(self.carry_width.size, CARRY_WIDTH)
        self.alone_width = np.full(self.alone_width.size, CARRY_WIDTH)
        self.cousin_width = np.full(self.cousin_width.size, CARRY_WIDTH)
        self.carry_scale_width = np.full(self.width.size, SLICE_WIDTH)
        self.n_tunes = 0.0

    def _running_mean(self, width, moved, initial: float):
        """A slice width's warm-up value after one more iteration: the running mean over
        ``n_tunes + 1`` iterations of the moves' sizes ``moved`` times the tuning multiple (class
        docstring), each clipped to ``[1e-3, 2 x multiple x initial]``; non-finite sizes (no
        move made) count as the current width."""
        moved = np.where(np.isfinite(moved), np.clip(self._per_move * moved, 1e-3, 2 * self._per_move * initial),
                         width)
        return (width * self.n_tunes + moved) / (self.n_tunes + 1.0)

    def step(self, point):
        """PyMC's step, then the cells moved by the carried update (and the parent walk's raw
        increments moved by the move against cousins) written into the point."""
        if self._parent is not None:
            _, scales_name, inc_name = self._parent
            self._parent_now = (np.exp(np.asarray(point[scales_name], dtype=float)),
                                np.array(point[inc_name], dtype=float))
        new_point, stats = super().step(point)
        if self._cells_out is not None:
            new_point[self._latent_name] = self._cells_out.astype(np.asarray(point[self._latent_name]).dtype)
            self._cells_out = None
        if self._parent is not None:
            new_point[self._parent[2]] = self._parent_now[1].astype(np.asarray(point[self._parent[2]]).dtype)
            self._parent_now = None
        return new_point, stats

    @classmethod
    def competence(cls, var, has_grad):
        """IDEAL for the step scales and increments of a walk registered by
        :func:`register_walk`, else INCOMPATIBLE."""
        if getattr(var.tag, _TAG, False):
            return Competence.IDEAL
        return Competence.INCOMPATIBLE

    def _carried(self, cells, res, base, eta, delta, sigma, kappa, mix) -> int:
        """The carried update (module docstring, step 2) of ``cells``, ``res``, ``eta`` and
        ``delta`` in place; its warm-up tuning.  Returns its density evaluations."""
        info = self.info
        rows = self._rows
        pairs, per_pair = carried_pairs(self.rng, info, delta.shape[0], self._carry_dirs.shape[0],
                                        self.carry_directions)
        evals, moved = carried_update(self.rng, cells, res, pairs, grid=info.grid, code=info.code, base=base, eta=eta,
                                      delta=delta, sigma=sigma, kappa=kappa, carry=info.carry, row_ptr=self._moving[0],
                                      rows=self._moving[1], w=rows.w, directions=self._carry_dirs, widths=self.carry_width,
                                      walk_order=info.order, spacing=info.spacing, per_pair=per_pair,
                                      steps=self.slice_steps, members=info.members, mix=mix, lump=info.lump)
        if self.tune:
            self.carry_width = self._running_mean(self.carry_width, moved, CARRY_WIDTH)
        for _ in range(self.ellipse_rounds if info.groups is not None else 0):
            (pu, pv), _ = carried_pairs(self.rng, info, delta.shape[0], 1, None)
            evals += ellipse_update(self.rng, cells, res, (pu, pv), grid=info.grid, code=info.code, base=base, eta=eta,
                                    delta=delta, sigma=sigma, kappa=kappa, carry=info.carry, row_ptr=self._moving[0],
                                    rows=self._moving[1], w=rows.w, walk_order=info.order, spacing=info.spacing,
                                    members=info.members, mix=mix, lump=info.lump)
        return evals

    def _checked_alone(self, alone):
        """The units :func:`~privinfer.pymc.walk_alone.alone_update` moves (``alone``: a fraction of
        the median unit size; None: :data:`ALONE_SMALL` where the walk allows the move, else none);
        a one-line error for a fraction asked of a walk that does not allow it."""
        info = self.info
        fits = self._carries_one_row_per_unit() and info.mix is None
        if alone is not None and not (np.isfinite(alone) and alone >= 0):
            raise ValueError("alone must be None or a fraction of the median unit size >= 0")
        if alone == 0 or (alone is None and (not fits or not ALONE_SMALL)):
            return np.zeros(0, dtype=np.int64)
        if not fits:
            raise ValueError(f"alone needs the walk '{info.increments}' registered with carry fractions, sizes and "
                             "sibling groups, one row of cells per unit (no members, no mix)")
        return alone_units(info.groups, info.sizes, ALONE_SMALL if alone is None else float(alone))

    def _moved_alone(self, cells, res, base, eta, delta, sigma, kappa) -> int:
        """Every unit of :meth:`_checked_alone` moved against its siblings with its cells carried
        along (:mod:`privinfer.pymc.walk_alone`), ``cells``, ``res``, ``eta`` and ``delta`` in
        place; its warm-up tuning.  Returns its density evaluations."""
        if not self._alone.size:
            return 0
        info = self.info
        rows = self._rows
        k = None if self.carry_directions is None else min(self.carry_directions, self._carry_dirs.shape[0])
        evals, moved = alone_update(self.rng, cells, res, self.rng.permutation(self._alone), grid=info.grid,
                                    code=info.code, base=base, eta=eta, delta=delta, sigma=sigma, kappa=kappa,
                                    groups=info.groups, carry=info.carry, row_ptr=self._moving[0], rows=self._moving[1],
                                    w=rows.w, directions=self._carry_dirs, widths=self.alone_width, per_unit=k,
                                    walk_order=info.order, spacing=info.spacing, steps=self.slice_steps,
                                    lump=info.lump, ellipse=self.ellipses)
        if self.tune:
            self.alone_width = self._running_mean(self.alone_width, moved, CARRY_WIDTH)
        return evals

    def _checked_cousins(self, cousins, model):
        """The units :func:`~privinfer.pymc.walk_cousin.cousin_update` moves (``cousins``: a
        fraction of the median unit size; None: :data:`COUSINS_SMALL` where the walk allows the
        move, else none) and the parent walk ``(info, scales' value name, increments' value
        name)`` (None without the move); a one-line error for a fraction asked of a walk that does
        not allow it, or a parent walk that does not match."""
        info = self.info
        none = np.zeros(0, dtype=np.int64), None
        if cousins is not None and not (np.isfinite(cousins) and cousins >= 0):
            raise ValueError("cousins must be None or a fraction of the median unit size >= 0")
        fits = self._carries_one_row_per_unit() and info.mix is None and info.parent is not None
        if cousins == 0 or (cousins is None and (not fits or not COUSINS_SMALL)):
            return none
        if not fits:
            raise ValueError(f"cousins needs the walk '{info.increments}' registered with carry fractions, sizes, "
                             "sibling groups and a parent walk, one row of cells per unit (no members, no mix)")
        parent = model_registry(model)["walks"].get(info.parent)
        if parent is None:
            raise ValueError(f"the parent walk '{info.parent}' of '{info.increments}' is not registered")
        G = _n_units(model[parent.increments])
        same = (np.array_equal(parent.code, info.code) and parent.order == info.order
                and (parent.spacing is None) == (info.spacing is None)
                and (info.spacing is None or np.allclose(parent.spacing, info.spacing)))
        weights = parent.weights.eval() if hasattr(parent.weights, "eval") else parent.weights
        if parent.mix is not None or not same or G <= int(info.groups.max()) or np.any(np.asarray(weights) != 0):
            raise ValueError(f"the parent walk '{info.parent}' must share the code, order and spacing of "
                             f"'{info.increments}', have one unit per group, no mix and centred increments")
        units = alone_units(info.groups, info.sizes, COUSINS_SMALL if cousins is None else float(cousins), least=2)
        units = units[cousin_weights(info.groups, parent.groups)[units] > 0]
        if not units.size:
            return none
        return units, (parent, model.rvs_to_values[model[parent.scales]].name,
                       model.rvs_to_values[model[parent.increments]].name)

    def _moved_cousins(self, cells, res, base, eta, delta, sigma, kappa) -> int:
        """Every unit of :meth:`_checked_cousins` moved alone against a cousin, its parent's walk
        taking up the change (:mod:`privinfer.pymc.walk_cousin`): ``cells``, ``res``, ``base``,
        ``eta``, ``delta`` and the parent walk's raw increments (written into the point by
        :meth:`step`) in place; its warm-up tuning.  Returns its density evaluations."""
        if not self._cousins.size:
            return 0
        info = self.info
        rows = self._rows
        parent_sigma, parent_delta = self._parent_now
        k = None if self.carry_directions is None else min(self.carry_directions, self._carry_dirs.shape[0])
        evals, moved = cousin_update(self.rng, cells, res, self.rng.permutation(self._cousins), grid=info.grid,
                                     code=info.code, base=base, eta=eta, delta=delta, sigma=sigma, kappa=kappa,
                                     groups=info.groups, parent_delta=parent_delta, parent_sigma=parent_sigma,
                                     parent_groups=self._parent[0].groups, carry=info.carry, row_ptr=self._moving[0],
                                     rows=self._moving[1], w=rows.w, directions=self._carry_dirs, widths=self.cousin_width,
                                     per_unit=k, walk_order=info.order, spacing=info.spacing, steps=self.slice_steps,
                                     lump=info.lump, ellipse=self.ellipses)
        if self.tune:
            self.cousin_width = self._running_mean(self.cousin_width, moved, CARRY_WIDTH)
        return evals

    def _collapsed(self, cells, res, base, eta, delta, sigma, kappa, mix) -> float:
        """The collapsed move (module docstring, step 2) of ``cells``, ``res``, ``eta`` and
        ``delta`` in place.  Returns its acceptance rate (nan: no pair)."""
        if not self.collapse:
            return float("nan")
        info = self.info
        pairs = collapsed_pairs(self.rng, info, self.collapse)
        acc, n = collapsed_update(self.rng, cells, res, pairs, grid=info.grid, code=info.code, base=base, eta=eta,
                                  delta=delta, sigma=sigma, kappa=kappa, w=self._rows.w, table=self._collapse_rows,
                                  walk_order=info.order, spacing=info.spacing, mix=mix)
        return acc / n if n else float("nan")

    def _scales(self, X, base, delta, sigma, kappa, mix):
        """The scales' second update (module docstring, step 4) with the cells ``X`` held."""
        info = self.info
        common = dict(width=self.width, order=info.order, prior_dof=info.prior_dof, spacing=info.spacing,
                      steps=self.slice_steps, corrected=self.scale_surrogate, reference=self.scale_ref, mix=mix)
        args = (self.rng, X, base, delta, info.groups, sigma, kappa, info.code, info.prior_scale)
        if self.scale_update == "unit_transport":
            return scale_update_unit_transport(*args, members=info.members, **common)
        if self.scale_update == "transport":
            return scale_update_transport(*args, **common)
        return scale_update_noncentred(*args, exponents=info.exponents, members=info.members, **common)

    def _scales_carried(self, cells, res, base, delta, sigma, kappa, mix):
        """``scale_carry`` log scales, drawn at random, updated with the increments and the cells
        carried along (module docstring, step 5); ``cells`` and ``res`` in place.  Returns the
        scales, the raw increments and the evaluations."""
        info = self.info
        coords = self.rng.choice(sigma.size, size=self.scale_carry, replace=False)
        before = np.log(sigma)
        sigma, delta, evals = scale_update_carried(
            self.rng, cells, res, base, delta, info.groups, sigma, kappa, grid=info.grid, code=info.code,
            carry=info.carry, row_ptr=self._moving[0], rows=self._moving[1], w=self._rows.w,
            prior_scale=info.prior_scale, prior_dof=info.prior_dof, width=self.carry_scale_width, order=info.order,
            spacing=info.spacing, members=info.members, steps=self.slice_steps, coords=coords, mix=mix)
        if self.tune:
            moved = np.full(sigma.size, np.nan)
            moved[coords] = np.abs(np.log(sigma) - before)[coords]
            self.carry_scale_width = self._running_mean(self.carry_scale_width, moved, SLICE_WIDTH)
        return sigma, delta, evals

    def astep(self, q0: RaveledVars):
        point = DictToArrayBijection.rmap(q0)
        sigma = np.exp(point[self._names[0]])
        delta = np.array(point[self._names[1]], dtype=float)
        mix = None if self._mix_name is None else np.exp(np.asarray(point[self._mix_name], dtype=float))
        base, kappa, x = self._inputs_fn()
        info = self.info
        X = np.asarray(x, dtype=float)[info.grid]
        base = np.array(base, dtype=float)          # a copy: the move against cousins shifts its rows
        kappa = float(kappa)
        groups = info.groups
        eta = centred(delta, groups)
        accepted, moves = 0, 0
        for _ in range(self.rounds):
            if groups is None:
                parts = [(np.arange(delta.shape[0]), 1.0)]
            else:
                u, v = sibling_pairs(self.rng, groups)
                parts = [(u, 1.0), (v, -1.0)]
            acc = move_update(self.rng, X, base, eta, delta, parts, sigma, kappa, info.code, info.order, info.spacing,
                              info.members, mode=self.tune and self.n_tunes == 0, mix=mix)
            accepted += int(acc.sum())
            moves += acc.size
        carry_evals, alone_evals, cousin_evals, cells, collapse_acc = 0, 0, 0, None, float("nan")
        if self._rows is not None:
            cells = np.array(x, dtype=np.int64)
            res = self._rows.residuals(cells, self._y)
            self._cells_out = cells
            carry_evals = self._carried(cells, res, base, eta, delta, sigma, kappa, mix)
            alone_evals = self._moved_alone(cells, res, base, eta, delta, sigma, kappa)
            collapse_acc = self._collapsed(cells, res, base, eta, delta, sigma, kappa, mix)
            cousin_evals = self._moved_cousins(cells, res, base, eta, delta, sigma, kappa)
            X = cells.astype(float)[info.grid]
        if groups is not None:
            delta = refresh_group_means(self.rng, delta, groups, sigma, mix)
        if mix is not None:
            mix = mix_draw(self.rng, delta, sigma, info.mix_dof, per_increment=mix.ndim == 2)
        sigma = scale_draw(self.rng, delta, info.prior_scale, info.prior_dof, mix)
        before = np.log(sigma)
        sigma, delta, evals, scale_acc = self._scales(X, base, delta, sigma, kappa, mix)
        if self.tune:
            self.width = self._running_mean(self.width, np.abs(np.log(sigma) - before), SLICE_WIDTH)
            self.scale_ref = self.scale_ref + max(1.0 / (self.n_tunes + 1.0), REF_WEIGHT) * (np.log(sigma)
                                                                                             - self.scale_ref)
        if self.scale_carry:
            sigma, delta, n = self._scales_carried(cells, res, base, delta, sigma, kappa, mix)
            carry_evals += n
        if self.tune:
            self.n_tunes += 1.0
        point[self._names[0]] = np.log(sigma)
        point[self._names[1]] = delta
        if mix is not None:
            point[self._mix_name] = np.log(mix)
        stats = {"walk_accept": accepted / moves if moves else float("nan"), "walk_scale_evals": float(evals),
                 "walk_scale_accept": scale_acc / sigma.size, "walk_carry_evals": float(carry_evals),
                 "walk_collapse_accept": collapse_acc, "walk_alone_evals": float(alone_evals),
                 "walk_cousin_evals": float(cousin_evals)}
        return DictToArrayBijection.map(point), [stats]
