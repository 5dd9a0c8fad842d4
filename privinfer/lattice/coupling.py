r"""L-lag couplings of the lattice sampler and total-variation bounds on its convergence.

Method: Biswas, Jacob and Vanetti (2019), "Estimating convergence of Markov chains with L-lag
couplings", as used by Dharangutte, Gao, Gong, Yu (2023), Sec. 4 and App. D.2 (Algorithms
2-3).

Coupled kernel (Algorithm 2).  Two chains X and Y run the Gibbs-within-Metropolis sweep of
:mod:`privinfer.lattice.kernels` with common randomness: the same coordinate order,
the same uniform :math:`U` in the accept step, and *maximally coupled* proposals.  At
coordinate j the proposals for the j-th lattice coordinate are
:math:`z^X_j + \zeta^X` and :math:`z^Y_j + \zeta^Y` with :math:`\zeta^\cdot` double geometric
of scale s, i.e. the laws :math:`p = q(\cdot - z^X_j)` and :math:`r = q(\cdot - z^Y_j)`.  The
maximal coupling (Thorisson's rejection construction, Jacob et al. 2020 Alg. 1):

1. draw :math:`P \sim p` and :math:`W \sim U(0, p(P))`; if :math:`W \le r(P)` return
   :math:`(P, P)`;
2. otherwise repeat: :math:`Q \sim r`, :math:`W' \sim U(0, r(Q))` until :math:`W' > p(Q)`;
   return :math:`(P, Q)`.

Marginally :math:`P \sim p` and :math:`Q \sim r`, and :math:`P = Q` with the largest possible
probability :math:`1 - \mathrm{TV}(p, r)`.  With :math:`q(k) \propto e^{-|k|/s}` the tests are
:math:`\log U \le (|P - z^X_j| - |P - z^Y_j|)/s` and
:math:`\log U' > (|Q - z^Y_j| - |Q - z^X_j|)/s`.  (These comparisons are done in floating
point, and NumPy's geometric draws are floating-point inversions; both affect only which
joint law couples the chains, by relative amounts of order 1e-16, not the marginal
Metropolis kernel's stationary law.)  Once :math:`z^X = z^Y` the two chains receive identical
proposals and uniforms, so they stay together forever (faithfulness).

Meeting times (Algorithm 3).  Start :math:`X_0, Y_0` from the same initial law
:math:`\pi_0` (here a point mass, by default :math:`e = 0`), advance X alone for L sweeps, then
move :math:`(X_t, Y_{t-L})` with the coupled kernel until
:math:`\tau^{(L)} = \inf\{t > L: X_t = Y_{t-L}\}`.

TV bound (Biswas et al. 2019, Thm 2.5).  For the marginal law :math:`\pi_t` of the chain after
t sweeps from :math:`\pi_0`,

.. math:: \mathrm{TV}(\pi_t, \pi) \le
          \mathbb{E}\Big[\max\Big(0, \Big\lceil\frac{\tau^{(L)} - L - t}{L}\Big\rceil\Big)\Big],

estimated by the average over independent replicates (:func:`tv_upper_bound`).  The bound is
non-increasing in t; :func:`iterations_to_threshold` returns the first t where the estimate is
at most a threshold.  It is a Monte Carlo estimate of an upper bound: with R replicates the
estimate at the returned t has standard error about :math:`\sqrt{\text{threshold}/R}`.

Time is counted in sweeps (one sweep = d coordinate proposals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .._rng import as_generator
from .kernels import (
    LatticeState,
    copy_state,
    init_state,
    matching_step_inplace,
    metropolis_step_inplace,
    resolve_jump_scales,
    scale_of_move,
    sweep_inplace,
)
from .laws import double_geometric_jumps
from .moves import LatticeMoves, PairMoves, as_moves

__all__ = [
    "maximal_coupling_double_geometric",
    "coupled_sweep",
    "sample_meeting_times",
    "tv_upper_bound",
    "iterations_to_threshold",
    "BurnInCertificate",
    "certify_burn_in",
]


def maximal_coupling_double_geometric(rng, cx, cy, scale):
    r"""Maximal coupling of :math:`cx + \zeta` and :math:`cy + \zeta'` with :math:`\zeta, \zeta'`
    double geometric of scale ``scale`` (vectorized over arrays ``cx``, ``cy`` of one shape).

    Returns ``(px, py)``: int64 arrays with ``px - cx`` and ``py - cy`` each double geometric
    and ``P(px == py) = 1 - TV`` (maximal).
    """
    cx = np.asarray(cx, dtype=np.int64)
    cy = np.asarray(cy, dtype=np.int64)
    s = float(scale)
    m = cx.shape
    px = cx + double_geometric_jumps(rng, s, m)
    log_u = np.log(rng.random(m))
    common = log_u <= (np.abs(px - cx) - np.abs(px - cy)) / s
    py = np.where(common, px, 0)
    pending = np.flatnonzero(~common.ravel())
    cxf, cyf, pyf = cx.ravel(), cy.ravel(), py.reshape(-1)
    while pending.size:
        cand = cyf[pending] + double_geometric_jumps(rng, s, (pending.size,))
        lu = np.log(rng.random(pending.size))
        ok = lu > (np.abs(cand - cyf[pending]) - np.abs(cand - cxf[pending])) / s
        pyf[pending[ok]] = cand[ok]
        pending = pending[~ok]
    return px, pyf.reshape(m)


def _coupling_shift(delta, val):
    r"""Per pair of chains, the jump difference :math:`c = \zeta^X - \zeta^Y` to aim for.

    After the move the touched discrepancy is :math:`\Delta + c\,v` (:math:`\Delta = e^X - e^Y`
    on the move's cells, v its entries).  Candidates: :math:`c = -\Delta_i/v_i` for cells with
    :math:`v_i = \pm1`; pick the one leaving the fewest disagreeing cells (ties: smallest
    :math:`|c|`); c = 0 when the chains agree on the move's cells.
    """
    unit = np.abs(val) == 1
    if not unit.any():
        return np.zeros(delta.shape[0], dtype=np.int64)
    cands = -(delta[:, unit] * val[unit])  # (m, u): v_i = +-1 so 1/v_i = v_i
    cands = np.concatenate([np.zeros((delta.shape[0], 1), dtype=np.int64), cands], axis=1)
    after = delta[:, None, :] + cands[:, :, None] * val[None, None, :]
    score = (after != 0).sum(axis=2) * (1 << 40) + np.abs(cands)
    best = np.argmin(score, axis=1)
    return cands[np.arange(delta.shape[0]), best]


def _coupled_matching_sweep_inplace(rng, X, Y, moves, target, scales):
    m = X.e.shape[0]
    val = np.array([1, -1], dtype=np.int64)
    for _ in range(moves.matchings_per_sweep):
        pairs = moves.matching(rng)  # common to both chains
        P = pairs.shape[0]
        delta = (X.e[:, pairs] - Y.e[:, pairs]).reshape(m * P, 2)
        c = _coupling_shift(delta, val)
        zx, uy = maximal_coupling_double_geometric(rng, np.zeros(m * P, dtype=np.int64), c, scales[0])
        zy = uy - c
        log_u = np.log(rng.random((m, P)))
        matching_step_inplace(X, pairs, zx.reshape(m, P), log_u, target)
        matching_step_inplace(Y, pairs, zy.reshape(m, P), log_u, target)
    return X, Y


def _coupled_sweep_inplace(rng, X: LatticeState, Y: LatticeState, moves, target, scales, order):
    if isinstance(moves, PairMoves) and target.separable:
        return _coupled_matching_sweep_inplace(rng, X, Y, moves, target, scales)
    sched = moves.schedule(rng, order)
    m = X.e.shape[0]
    fixed = isinstance(moves, LatticeMoves)
    for j in sched:
        idx, val = moves.move(j)
        c = _coupling_shift(X.e[:, idx] - Y.e[:, idx], val)
        s = scale_of_move(scales, j if fixed else 0)
        zx, uy = maximal_coupling_double_geometric(rng, np.zeros(m, dtype=np.int64), c, s)
        zy = uy - c
        log_u = np.log(rng.random(m))
        metropolis_step_inplace(X, idx, val, zx, log_u, target)
        metropolis_step_inplace(Y, idx, val, zy, log_u, target)
    return X, Y


def coupled_sweep(rng, state_x: LatticeState, state_y: LatticeState, moves, target, jump_scale=None,
                  order: str = "systematic"):
    r"""One sweep of the coupled kernel :math:`\bar P((X, Y), \cdot)` (Algorithm 2).

    ``(rng, state_x, state_y, moves, target, jump_scale, order) -> ((state_x, state_y), met)``
    where ``met[i]`` says chain pair i is now equal.  Each marginal is exactly one
    :func:`~privinfer.lattice.kernels.sweep`.
    """
    moves = as_moves(moves)
    X, Y = copy_state(state_x), copy_state(state_y)
    X, Y = _coupled_sweep_inplace(rng, X, Y, moves, target, resolve_jump_scales(jump_scale, moves, target), order)
    return (X, Y), np.all(X.e == Y.e, axis=1)


def _subset(st: LatticeState, keep) -> LatticeState:
    return LatticeState(st.e[keep], st.stat[keep])


def sample_meeting_times(rng, moves, target, lag: int, n_replicates: int, jump_scale=None,
                         order: str = "systematic", e0=None, max_sweeps: int = 100_000) -> np.ndarray:
    r"""Independent draws of the L-lag meeting time :math:`\tau^{(L)}` (Algorithm 3).

    All replicates run vectorized (they share the sweep's move schedule, which is part of
    the common randomness of each pair; the replicates' jumps and uniforms are independent).
    ``e0`` is the common initial lattice point (default 0).  Returns an int64 array of length
    ``n_replicates``; raises ``RuntimeError`` if some pair has not met after ``max_sweeps``.
    """
    rng = as_generator(rng)
    moves = as_moves(moves)
    lag = int(lag)
    if lag < 1:
        raise ValueError("lag must be an integer >= 1")
    R = int(n_replicates)
    if R < 1:
        raise ValueError("n_replicates must be >= 1")
    scales = resolve_jump_scales(jump_scale, moves, target)
    if e0 is None:
        e0 = np.zeros(moves.n, dtype=np.int64)
    X = init_state(e0, moves, target, R)
    Y = init_state(e0, moves, target, R)
    for _ in range(lag):
        X, _ = sweep_inplace(rng, X, moves, target, scales, order)
    tau = np.full(R, -1, dtype=np.int64)
    active = np.arange(R)
    t = lag
    while active.size:
        if t >= max_sweeps:
            raise RuntimeError(
                f"{active.size} of {R} coupled chains had not met after {max_sweeps} sweeps; "
                "increase max_sweeps or change the moves / jump scale"
            )
        t += 1
        X, Y = _coupled_sweep_inplace(rng, X, Y, moves, target, scales, order)
        met = np.all(X.e == Y.e, axis=1)
        if met.any():
            tau[active[met]] = t
            keep = ~met
            active = active[keep]
            X, Y = _subset(X, keep), _subset(Y, keep)
    return tau


def tv_upper_bound(meeting_times, lag: int, t):
    r"""Estimated :math:`\mathrm{TV}(\pi_t, \pi) \le \mathbb{E}[\max(0, \lceil(\tau - L - t)/L\rceil)]`
    (Biswas et al. 2019, Thm 2.5) averaged over the given meeting times; ``t`` scalar or array."""
    tau = np.asarray(meeting_times, dtype=np.int64)
    lag = int(lag)
    if lag < 1:
        raise ValueError("lag must be >= 1")
    if tau.ndim != 1 or tau.size == 0:
        raise ValueError("meeting_times must be a non-empty 1-d array")
    if np.any(tau <= lag):
        raise ValueError("meeting times must exceed the lag (tau > L by construction)")
    tt = np.asarray(t, dtype=np.int64)
    num = tau[:, None] - lag - tt.ravel()[None, :]
    k = np.maximum(0, -((-num) // lag))  # ceil for integers
    out = k.mean(axis=0)
    return out.reshape(tt.shape) if tt.ndim else float(out[0])


def iterations_to_threshold(meeting_times, lag: int, threshold: float = 0.01) -> int:
    """Smallest number of sweeps t >= 0 at which :func:`tv_upper_bound` is <= ``threshold``."""
    if not (0 <= threshold < 1):
        raise ValueError("threshold must lie in [0, 1)")
    tau = np.asarray(meeting_times, dtype=np.int64)
    tmax = max(0, int(tau.max()) - int(lag))  # the bound is exactly 0 from here on
    ts = np.arange(tmax + 1)
    b = tv_upper_bound(tau, lag, ts)
    return int(ts[np.argmax(b <= threshold)])


@dataclass(frozen=True)
class BurnInCertificate:
    """A coupling-certified burn-in: ``burn_in`` sweeps bring the estimated TV bound to at most
    ``threshold`` (from ``n_replicates`` meeting times at lag ``lag``)."""

    burn_in: int
    threshold: float
    lag: int
    meeting_times: np.ndarray = field(repr=False)

    @property
    def n_replicates(self) -> int:
        return int(self.meeting_times.size)

    def tv_bound(self, t):
        """Estimated TV upper bound after t sweeps."""
        return tv_upper_bound(self.meeting_times, self.lag, t)


def certify_burn_in(rng, moves, target, *, threshold: float = 0.01, lag: int | None = None,
                    n_replicates: int = 100, jump_scale=None, order: str = "systematic", e0=None,
                    max_sweeps: int = 100_000) -> BurnInCertificate:
    r"""Sample L-lag meeting times and return the sweeps needed for a TV bound <= ``threshold``.

    If ``lag`` is None it is chosen from a pilot run at L = 1 (``min(n_replicates, 32)``
    pairs): L = the 95% quantile of the pilot meeting times, so that most pairs meet within
    one lag and :math:`\lceil(\tau - L - t)/L\rceil \le 1`, which makes the bound essentially
    :math:`P(\tau - L > t)` (sharp; Biswas et al. 2019, Sec. 2.3 recommend increasing L until
    the bound is informative).
    """
    rng = as_generator(rng)
    moves = as_moves(moves)
    if lag is None:
        pilot = sample_meeting_times(rng, moves, target, 1, min(int(n_replicates), 32), jump_scale,
                                     order, e0, max_sweeps)
        lag = max(1, int(math.ceil(np.quantile(pilot, 0.95))))
    tau = sample_meeting_times(rng, moves, target, lag, n_replicates, jump_scale, order, e0, max_sweeps)
    return BurnInCertificate(iterations_to_threshold(tau, lag, threshold), float(threshold), int(lag), tau)
