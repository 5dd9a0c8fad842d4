r"""Exact updates of independent log-normal effects of Dirichlet-multinomial cells.

A model registers, with :func:`register_cell_effects`, effects :math:`\epsilon_{u,i} \sim N(0,
\omega^2)` of the cells of many units (every tract's sex x age cells in
:func:`privinfer.census.hierarchy_model` with ``cell_effects=True``), :math:`\omega \sim
\mathrm{HalfNormal}(s)`, that enter the cells' law

.. math::
   x_u \mid N_u \sim \mathrm{DirMult}\big(N_u,\ \kappa\,\mathrm{softmax}(\eta_u + \epsilon_u)\big),

with :math:`\eta_u` everything else of unit ``u``'s log profile.  :class:`CellEffectsGibbs`
updates the effects and :math:`\omega` (``pm.sample()`` assigns it to them by itself).  Given
the cells and :math:`\eta`, the units' effects are independent, unit ``u``'s with the exact
conditional :math:`\prod_i \Gamma(x_{u,i} + \alpha_{u,i})/\Gamma(\alpha_{u,i}) \cdot N(\epsilon_{u,i}
\mid 0, \omega^2)`, :math:`\alpha_u = \kappa\,\mathrm{softmax}(\eta_u + \epsilon_u)`.  One
iteration:

1. the cells of every unit in a random order, cut in blocks of ``block`` cells; for each block
   ``B``, in every unit at once, an independence Metropolis--Hastings move: each effect of the
   block proposed from a Student t (4 degrees of freedom) at the Laplace approximation of
   :math:`x_i e - \hat\lambda\,e^{\eta_i + e} - e^2/(2\omega^2)` -- the Poisson form of the
   multinomial with the unit's rate :math:`\hat\lambda = \max(N_u, 1/2)/(Z_{-B} + \sum_{i \in B}
   e^{\eta_i})`, :math:`Z_{-B} = \sum_{j \notin B} e^{\eta_j + \epsilon_j}` -- which depends on
   nothing the move changes, so the proposal is a fixed density and the exact acceptance
   ratio (the Dirichlet-multinomial of the whole unit, :math:`O(d)`) keeps the conditional
   invariant;
2. :math:`\omega` drawn from its exact conditional given the effects (a generalized inverse
   Gaussian in :math:`\omega^2`, :func:`~privinfer.pymc.walk_kernel.scale_draw`), then
   :math:`\log\omega` slice sampled with :math:`\xi = \epsilon/\omega` held fixed -- the
   interweaving of Yu and Meng (2011): the centred draw moves :math:`\omega` when the effects
   are pinned down by their cells, the non-centred one when they are not (most cells: a
   tract's small cells barely inform their effect).

Effects centred within groups (``groups`` given at registration: the tracts of each county).
The units' laws then see :math:`\tilde\epsilon_u = \epsilon_u - \bar\epsilon_{g(u)}`, the
effects less their group's mean, so that a parent's departure and its children's mean effect
do not trade off; :math:`\tilde\epsilon` has the sum-to-zero normal law within every group,
and the group means, which no cell sees, keep their prior.  Step 1 becomes
:func:`pair_update` (moves of sibling pairs that keep the group means, then the means drawn
from their prior), and step 2's slice update evaluates the units' laws at the centred
effects.

Why not NUTS: one effect per cell is one more coordinate per cell, and on Kentucky's 49,818
tract cells NUTS over them had not finished 2 x 600 iterations in 36 minutes; these updates
cost a few passes over the cells per iteration.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
from pymc.blocking import DictToArrayBijection, RaveledVars
from pymc.logprob.transforms import LogTransform
from pymc.step_methods.arraystep import ArrayStepShared
from pymc.step_methods.compound import Competence

from .registry import CellEffectsInfo, model_registry
from .step_inputs import registered_inputs
from .walk_kernel import centred, refresh_group_means, scale_draw, sibling_pairs, slice_coordinate, unit_loglik

__all__ = ["CellEffectsGibbs", "register_cell_effects", "block_update", "pair_update", "scale_update"]

_TAG = "privinfer_cell_effects"
_T_DOF = 4.0
_NEWTON = 30


def register_cell_effects(*, effects, scale, prior_scale: float, eta, kappa, latent, grid, groups=None,
                          model=None):
    r"""Record cell effects (module docstring) so that ``pm.sample()`` samples them and their
    scale with :class:`CellEffectsGibbs`.

    ``effects``: the variable ``(U, d)``, ``pm.Normal(0, scale)``; ``scale``: the variable
    :math:`\omega`, ``pm.HalfNormal(sigma=prior_scale)`` (log transformed, PyMC's default);
    ``eta``, ``kappa``: tensors, the units' log profiles without the effects ``(U, d)`` and the
    Dirichlet concentration; ``latent``: the lattice latent of the cells; ``grid``: ``(U, d)``
    cell indices of every unit; ``groups``: ``(U,)`` group of every unit when the effects enter
    the model centred within groups (:func:`pair_update`), None when they enter as they are."""
    model = pm.modelcontext(model)
    grid = np.asarray(grid, dtype=np.int64)
    if grid.ndim != 2:
        raise ValueError("grid must be (units, d)")
    if not (np.isfinite(prior_scale) and prior_scale > 0):
        raise ValueError("prior_scale must be a finite number > 0")
    reg = model_registry(model)["cell_effects"]
    if reg:
        raise ValueError("a model holds at most one set of registered cell effects")
    if groups is not None:
        groups = np.asarray(groups, dtype=np.int64)
        if groups.shape != (grid.shape[0],) or groups.min(initial=0) < 0:
            raise ValueError("groups must hold one group number >= 0 per unit (row of grid)")
    info = CellEffectsInfo(effects=effects.name, scale=scale.name, prior_scale=float(prior_scale), eta=eta,
                           kappa=kappa, latent=latent.name, grid=grid, groups=groups)
    reg[effects.name] = info
    for v in (effects, scale):
        setattr(v.tag, _TAG, True)
    return info


def _laplace(x, a, inv_v):
    """Mode and curvature of :math:`x e - a e^{e} - e^2 \\cdot inv\\_v / 2` (strictly concave):
    safeguarded Newton from the larger of the two one-term modes' minimum."""
    e = np.minimum(np.log((x + 0.5) / a), x / inv_v)
    for _ in range(_NEWTON):
        ae = a * np.exp(e)
        g = x - ae - e * inv_v
        h = ae + inv_v
        step = np.clip(g / h, -2.0, 2.0)
        e = e + step
        if np.max(np.abs(step)) < 1e-8:
            break
    return e, 1.0 / (a * np.exp(e) + inv_v)


def _log_t(e, m, v):
    return -0.5 * (_T_DOF + 1.0) * np.log1p((e - m) ** 2 / (_T_DOF * v))


def _block_rates(eta, eff, B, N, at):
    r"""The Poisson form's :math:`\hat\lambda\,e^{\eta_i + a_i}` of every unit's block ``B``
    (rows of ``eta``, ``eff``: log profiles and the effects as they enter; ``N`` the unit totals)
    with the block's effects set to ``at``: :math:`\hat\lambda = \max(N, 1/2)/(Z_{-B} +
    \sum_{i \in B} e^{\eta_i + a_i})`, :math:`Z_{-B}` over the cells outside the block -- nothing
    a move of the block changes."""
    ez = np.exp(eta + eff)
    z_rest = ez.sum(1) - np.take_along_axis(ez, B, 1).sum(1)
    c = np.exp(np.take_along_axis(eta, B, 1) + at)
    return (np.maximum(N, 0.5) / (z_rest + c.sum(1)))[:, None] * c


def block_update(rng, X, eta, eps, omega: float, kappa: float, block: int = 6):
    """Step 1 of the module docstring on every unit: ``X``, ``eta``, ``eps`` ``(U, d)`` (cells,
    log profiles without the effects, effects).  Returns the new effects and the acceptance
    rate."""
    U, d = X.shape
    eps = np.array(eps, dtype=float)
    N = X.sum(axis=1)
    order = rng.permuted(np.tile(np.arange(d), (U, 1)), axis=1)
    cur = unit_loglik(X, eta + eps, kappa)
    inv_v = 1.0 / omega**2
    accepted = 0
    for start in range(0, d, block):
        B = order[:, start:start + block]
        m, v = _laplace(np.take_along_axis(X, B, 1), _block_rates(eta, eps, B, N, 0.0), inv_v)
        old = np.take_along_axis(eps, B, 1)
        new = m + np.sqrt(v) * rng.standard_t(_T_DOF, size=m.shape)
        prop = eps.copy()
        np.put_along_axis(prop, B, new, 1)
        val = unit_loglik(X, eta + prop, kappa)
        log_a = (val - cur - 0.5 * inv_v * ((new**2).sum(1) - (old**2).sum(1))
                 + _log_t(old, m, v).sum(1) - _log_t(new, m, v).sum(1))
        acc = np.log(rng.random(U)) < log_a
        eps[acc] = prop[acc]
        cur[acc] = val[acc]
        accepted += int(acc.sum())
    return eps, accepted / (U * len(range(0, d, block)))


def _laplace_pair(dx, a_u, a_v, inv_v):
    r"""Mode and curvature of :math:`dx\,t - a_u e^{t} - a_v e^{-t} - t^2 \cdot inv\_v`
    (strictly concave): safeguarded Newton from 0."""
    t = np.zeros_like(a_u)
    for _ in range(_NEWTON):
        eu, ev = a_u * np.exp(t), a_v * np.exp(-t)
        g = dx - eu + ev - 2.0 * t * inv_v
        step = np.clip(g / (eu + ev + 2.0 * inv_v), -2.0, 2.0)
        t = t + step
        if np.max(np.abs(step), initial=0.0) < 1e-8:
            break
    return t, 1.0 / (a_u * np.exp(t) + a_v * np.exp(-t) + 2.0 * inv_v)


def pair_update(rng, X, eta, eps, groups, omega: float, kappa: float, block: int = 6):
    r"""The effects' update when they enter centred within groups (the tracts of a county):
    unit ``u`` has :math:`\tilde\epsilon_u = \epsilon_u - \bar\epsilon_{g(u)}`, the free
    :math:`\epsilon \sim N(0, \omega^2)`.  Sibling units are matched at random
    (:func:`~privinfer.pymc.walk_kernel.sibling_pairs`); for every pair ``(u, v)`` and block ``B``
    of cells, :math:`(\epsilon_{u,B}, \epsilon_{v,B}) = (S/2 + t, S/2 - t)` is moved along
    ``t`` (the group means stay) by independence Metropolis--Hastings: ``t`` proposed from
    Student t's at the Laplace fit of the Poisson form :math:`(x_{u,i} - x_{v,i})\,t - A_{u,i}
    e^{t} - A_{v,i} e^{-t} - t^2/\omega^2`, :math:`A_{u,i} = \hat\lambda_u e^{\eta_{u,i} +
    \tilde\epsilon_{u,i}|_{t=0}}` with :math:`\hat\lambda_u` the rate of unit ``u`` at ``t = 0``
    in the block (nothing the move changes), accepted by the exact Dirichlet-multinomials of both
    units and the prior :math:`\propto e^{-\|\epsilon\|^2/(2\omega^2)}`; then the group means
    are drawn from their prior (:func:`~privinfer.pymc.walk_kernel.refresh_group_means`: the
    likelihood does not see them).  Returns the new free effects and the acceptance rate."""
    groups = np.asarray(groups, dtype=np.int64)
    U, d = X.shape
    eps = np.array(eps, dtype=float)
    u, v = sibling_pairs(rng, groups)
    N = X.sum(axis=1)
    inv_v = 1.0 / omega**2
    accepted = moves = 0
    if u.size:
        tilde = centred(eps, groups)
        cur = unit_loglik(X[u], eta[u] + tilde[u], kappa) + unit_loglik(X[v], eta[v] + tilde[v], kappa)
        order = rng.permuted(np.tile(np.arange(d), (u.size, 1)), axis=1)
        for start in range(0, d, block):
            B = order[:, start:start + block]
            take = lambda a, r: np.take_along_axis(a[r], B, 1)  # noqa: E731
            half = 0.5 * (take(tilde, u) - take(tilde, v))      # current t
            mid_u, mid_v = take(tilde, u) - half, take(tilde, v) + half   # the block at t = 0
            m, var = _laplace_pair(take(X, u) - take(X, v), _block_rates(eta[u], tilde[u], B, N[u], mid_u),
                                   _block_rates(eta[v], tilde[v], B, N[v], mid_v), inv_v)
            new = m + np.sqrt(var) * rng.standard_t(_T_DOF, size=m.shape)
            tu, tv = tilde[u], tilde[v]
            np.put_along_axis(tu, B, mid_u + new, 1)
            np.put_along_axis(tv, B, mid_v - new, 1)
            val = unit_loglik(X[u], eta[u] + tu, kappa) + unit_loglik(X[v], eta[v] + tv, kappa)
            # ||eps||^2 of the pair changes by 2 (new^2 - half^2) per cell (module docstring)
            log_a = (val - cur - inv_v * ((new**2).sum(1) - (half**2).sum(1))
                     + _log_t(half, m, var).sum(1) - _log_t(new, m, var).sum(1))
            acc = np.log(rng.random(u.size)) < log_a
            tilde[u[acc]], tilde[v[acc]] = tu[acc], tv[acc]
            cur[acc] = val[acc]
            accepted += int(acc.sum())
            moves += u.size
        eps = tilde                   # the group means are redrawn next
    eps = refresh_group_means(rng, eps, groups, np.full(d, omega))
    return eps, accepted / max(moves, 1)


def scale_update(rng, X, eta, eps, omega: float, kappa: float, prior_scale: float, width: float = 0.2, groups=None):
    r"""Step 2 of the module docstring: :math:`\omega`'s exact draw given the effects, then the
    slice update of :math:`\log\omega` with :math:`\xi = \epsilon/\omega` fixed (target: the
    half-normal prior in :math:`\log\omega`, its Jacobian included, times every unit's
    Dirichlet-multinomial; ``groups``: the effects enter centred within them, :func:`pair_update`).
    Returns :math:`\omega`, the effects and the slice's evaluations."""
    omega = float(scale_draw(rng, np.asarray(eps, float).reshape(-1, 1), prior_scale, 1)[0])
    xi = eps / omega
    xi_in = centred(xi, groups)
    s2 = prior_scale**2

    def target(lam):
        w = np.exp(lam[0])
        return float(unit_loglik(X, eta + w * xi_in, kappa).sum()) + lam[0] - w * w / (2.0 * s2)

    lam = np.array([np.log(omega)])
    lam, _, evals = slice_coordinate(rng, target, lam, 0, target(lam), width)
    omega = float(np.exp(lam[0]))
    return omega, omega * xi, evals + 1


def _effects_info(model, vars):
    reg = model_registry(model)["cell_effects"]
    if len(reg) != 1:
        raise ValueError("CellEffectsGibbs needs a model with cell effects registered by "
                         "privinfer.pymc.register_cell_effects")
    info = next(iter(reg.values()))
    want = {model.rvs_to_values[model[info.scale]], model.rvs_to_values[model[info.effects]]}
    if vars is not None and {model.rvs_to_values.get(v, v) for v in vars} != want:
        raise ValueError(f"CellEffectsGibbs updates the effects and their scale together "
                         f"('{info.effects}', '{info.scale}')")
    if not isinstance(model.rvs_to_transforms.get(model[info.scale]), LogTransform):
        raise ValueError(f"CellEffectsGibbs needs '{info.scale}' log-transformed (PyMC's default)")
    return info


class CellEffectsGibbs(ArrayStepShared):
    """Exact updates of registered cell effects and their scale (module docstring).

    ``block``: cells per block of the effects' moves (default 6); ``vars``, ``model``,
    ``initial_point``, ``rng``, ``blocked``, ``compile_kwargs`` as for PyMC step methods."""

    name = "cell_effects_gibbs"
    default_blocked = True
    stats_dtypes_shapes = {"cell_effects_accept": (np.float64, []), "cell_effects_scale_evals": (np.float64, [])}

    def __init__(self, vars=None, block: int = 6, model=None, initial_point=None, rng=None, blocked: bool = True,
                 compile_kwargs=None):
        model = pm.modelcontext(model)
        info = _effects_info(model, vars)
        if int(block) != block or block < 1:
            raise ValueError("block must be an integer >= 1")
        self.block = int(block)
        vars, shared, _, self._inputs_fn = registered_inputs(model, (info.scale, info.effects), (info.eta, info.kappa),
                                                             info.latent, initial_point, compile_kwargs)
        self._names = tuple(v.name for v in vars)
        self.info = info
        super().__init__(vars, shared, blocked=blocked, rng=rng)

    @classmethod
    def competence(cls, var, has_grad):
        """IDEAL for cell effects and their scale registered by :func:`register_cell_effects`,
        else INCOMPATIBLE."""
        if getattr(var.tag, _TAG, False):
            return Competence.IDEAL
        return Competence.INCOMPATIBLE

    def astep(self, q0: RaveledVars):
        point = DictToArrayBijection.rmap(q0)
        omega = float(np.exp(point[self._names[0]]))
        eps = np.array(point[self._names[1]], dtype=float)
        eta, kappa, x = self._inputs_fn()
        X = np.asarray(x, dtype=float)[self.info.grid]
        eta = np.asarray(eta, dtype=float)
        kappa = float(kappa)
        groups = self.info.groups
        if groups is None:
            eps, acc = block_update(self.rng, X, eta, eps, omega, kappa, self.block)
        else:
            eps, acc = pair_update(self.rng, X, eta, eps, groups, omega, kappa, self.block)
        omega, eps, evals = scale_update(self.rng, X, eta, eps, omega, kappa, self.info.prior_scale, groups=groups)
        point[self._names[0]] = np.log(omega)
        point[self._names[1]] = eps
        stats = {"cell_effects_accept": acc, "cell_effects_scale_evals": float(evals)}
        return DictToArrayBijection.map(point), [stats]
