r"""Framework-free lattice moves for *posterior* sampling of integer latent data.

The state is an integer vector ``x`` on the fibre ``{x in Z^n : C x = t, x >= 0}``; moves
add lattice vectors ``B k`` (``B`` the short basis of ``{e : C e = 0}`` from
:meth:`privinfer.invariants.Invariant.lattice_basis`), so the invariant holds exactly in
every state.  The target enters only through a *local* log-density difference: an object with

    ``target.delta(idx, old, new) -> l(x') - l(x)`` and ``target.accept(idx, old, new)``

where ``idx`` are the coordinates the move touches, ``old = x[idx]`` and ``new`` the
proposed values (``new`` may carry leading batch axes: one difference per row);
``accept`` is called after every accepted move so the target can update running
statistics (e.g. a squared norm).

Moves
-----
* :func:`direction_sweep` -- Gibbs-within-Metropolis over a set of lattice moves (the d
  basis directions, or random within-group pairs for totals; Integer subspace DP, Sec. 4,
  Alg. 1, applied to the posterior): ``x + zeta b_j`` with ``zeta``
  double geometric given ``zeta != 0``, :math:`q(\zeta) \propto a^{|\zeta|}` (symmetric, so
  the Metropolis ratio is the target ratio).
* :func:`multi_direction_jump` -- ``x + B k`` with independent double-geometric ``k_j``
  conditioned on ``k != 0`` (still symmetric: ``k -> -k`` preserves the event).  Every
  ``k in Z^d \ {0}`` has positive probability, so any two points of the (finite,
  non-negative) fibre communicate in one move: the chain is irreducible on ``{x >= 0}``
  even where single basis moves would get stuck at the boundary (a lattice basis need not
  be a Markov basis).
* :func:`direction_gibbs` -- exact conditional along one direction: with ``x >= 0`` the
  admissible ``zeta`` form a finite interval; all its points are scored with ``delta`` in
  one batch and ``zeta`` is drawn from the normalized conditional (heat bath).

Every kernel is ``f(rng, x, ...) -> (x_new, info)`` with the ``numpy.random.Generator``
passed in and ``x`` not modified.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

from .lattice_kernels import LatticeMoves

__all__ = [
    "direction_sweep",
    "multi_direction_jump",
    "direction_gibbs",
    "direction_range",
    "sparse_double_geometric",
    "nonzero_double_geometric",
    "pair_sweep_batched",
]


def direction_sweep(rng, x, moves, target, scale, *, order="random", nonnegative=True):
    """One Metropolis sweep over a set of lattice moves.

    ``moves`` follows the move-set protocol of :mod:`privinfer.samplers.lattice_kernels`
    (``LatticeMoves`` for a basis, ``PairMoves`` for totals/partitions): ``schedule(rng,
    order)`` lists the sweep's move ids and ``move(id) -> (idx, vals)``.  Each step proposes
    ``x + zeta * b`` with ``zeta`` non-zero double geometric of the given ``scale``.
    Returns ``(x_new, info)`` with ``info = {"accepted": int, "proposed": int}``.
    """
    x = np.array(x, dtype=np.int64, copy=True)
    ids = moves.schedule(rng, order)
    m = len(ids)
    zeta = nonzero_double_geometric(rng, np.exp(-1.0 / float(scale)), (m,))
    log_u = np.log(rng.random(m))
    acc = 0
    for k in range(m):
        idx, vals = moves.move(ids[k])
        old = x[idx]
        new = old + int(zeta[k]) * vals
        if nonnegative and np.any(new < 0):
            continue
        if log_u[k] < float(target.delta(idx, old, new)):
            target.accept(idx, old, new)
            x[idx] = new
            acc += 1
    return x, {"accepted": acc, "proposed": m}


def pair_sweep_batched(rng, x, moves, target, scale, *, rounds: int = 2, nonnegative=True):
    """Metropolis over random within-group transfers ``x_i += z, x_j -= z``, in batches.

    For a separable target (log density a sum of per-cell terms; ``target.is_separable``)
    moves on disjoint cells have independent acceptance ratios, so a whole random matching
    (``moves.matching(rng)`` of a :class:`~privinfer.samplers.lattice_kernels.PairMoves`)
    is proposed, scored and accepted at once (``target.delta_batch``): the composition of
    independent Metropolis kernels on disjoint coordinates, each reversible for the target.
    The pair selection is symmetric and ``z`` is non-zero double geometric, so each kernel
    is a symmetric-proposal Metropolis step.  ``rounds`` matchings per sweep (about n moves).
    """
    x = np.array(x, dtype=np.int64, copy=True)
    a = np.exp(-1.0 / float(scale))
    acc = prop = 0
    vals = np.array([1, -1], dtype=np.int64)
    for _ in range(rounds):
        pairs = moves.matching(rng)
        if len(pairs) == 0:
            break
        z = nonzero_double_geometric(rng, a, (len(pairs),))
        old = x[pairs]
        new = old + z[:, None] * vals
        ok = np.all(new >= 0, axis=1) if nonnegative else np.ones(len(pairs), bool)
        dl = np.full(len(pairs), -np.inf)
        if ok.any():
            dl[ok] = target.delta_batch(pairs[ok], old[ok], new[ok])
        accept = np.log(rng.random(len(pairs))) < dl
        if accept.any():
            x[pairs[accept]] = new[accept]
            target.accept_batch(pairs[accept], new[accept])
        acc += int(accept.sum())
        prop += len(pairs)
    return x, {"accepted": acc, "proposed": prop}


def nonzero_double_geometric(rng, a, size) -> np.ndarray:
    r"""Double geometric draws conditioned on being non-zero: :math:`P(k) \propto a^{|k|}`,
    :math:`k \ne 0` -- magnitude geometric on {1, 2, ...} with success :math:`1 - a`, fair
    sign.  Symmetric in law, so a Metropolis step with it needs only the target ratio, and
    no proposal is wasted on a null move."""
    a = np.broadcast_to(np.asarray(a, dtype=float), size)
    mags = rng.geometric(1.0 - a)
    signs = rng.integers(0, 2, size=size) * 2 - 1
    return (mags * signs).astype(np.int64)


def sparse_double_geometric(rng, d: int, a: float) -> np.ndarray:
    r"""``k in Z^d`` with iid double-geometric entries :math:`\propto a^{|k_j|}`, given ``k != 0``.

    Drawn sparsely: the non-zero pattern is Bernoulli(:math:`2a/(1+a)`) per entry (resampled
    if empty), magnitudes are geometric on {1, 2, ...} with success :math:`1-a`, signs fair.
    """
    q = 2.0 * a / (1.0 + a)
    while True:
        nnz = rng.binomial(d, q)
        if nnz > 0:
            break
    js = rng.choice(d, size=nnz, replace=False)
    k = np.zeros(d, dtype=np.int64)
    k[js] = nonzero_double_geometric(rng, a, (nnz,))
    return k


def multi_direction_jump(rng, x, basis: LatticeMoves, target, a: float, *, nonnegative=True):
    """Propose ``x + B k`` (see :func:`sparse_double_geometric`); Metropolis accept/reject."""
    x = np.array(x, dtype=np.int64, copy=True)
    k = sparse_double_geometric(rng, basis.k, a)
    js = np.flatnonzero(k)
    idx = np.unique(np.concatenate([basis.indices[j] for j in js]))
    step = np.zeros(basis.n, dtype=np.int64)
    for j in js:
        step[basis.indices[j]] += k[j] * basis.values[j]
    keep = step[idx] != 0
    idx = idx[keep]
    if idx.size == 0:  # the moves cancelled: a null move, accepted trivially
        return x, {"accepted": False, "n_directions": len(js)}
    old = x[idx]
    new = old + step[idx]
    if nonnegative and np.any(new < 0):
        return x, {"accepted": False, "n_directions": len(js)}
    ok = np.log(rng.random()) < float(target.delta(idx, old, new))
    if ok:
        target.accept(idx, old, new)
        x[idx] = new
    return x, {"accepted": bool(ok), "n_directions": len(js)}


def direction_range(x, idx, vals, nonnegative=True, bound=None):
    """Interval ``[lo, hi]`` of ``zeta`` keeping ``x[idx] + zeta * vals >= 0`` (or +-bound)."""
    lo, hi = -np.inf, np.inf
    if nonnegative:
        xs = x[idx]
        pos, neg = vals > 0, vals < 0
        if pos.any():
            lo = max(lo, float(np.max(np.ceil(-xs[pos] / vals[pos]))))
        if neg.any():
            hi = min(hi, float(np.min(np.floor(xs[neg] / -vals[neg]))))
    if bound is not None:
        lo, hi = max(lo, -bound), min(hi, bound)
    return lo, hi


def direction_gibbs(rng, x, idx, vals, target, *, nonnegative=True, max_support=256):
    """Exact conditional update along the move ``b`` (non-zeros ``vals`` at ``idx``) when its
    support is finite and small.

    Returns ``(x_new, info)``; ``info["exact"]`` is False when the support along ``b`` is
    unbounded or larger than ``max_support`` (then ``x`` is returned unchanged and the
    caller should use a Metropolis move instead).
    """
    lo, hi = direction_range(x, idx, vals, nonnegative)
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi - lo + 1 > max_support:
        return x, {"exact": False, "support": np.inf if not np.isfinite(hi - lo) else hi - lo + 1}
    zs = np.arange(int(lo), int(hi) + 1)
    old = x[idx]
    new = old[None, :] + zs[:, None] * vals[None, :]
    lw = np.asarray(target.delta(idx, old, new), dtype=float)
    lw = lw - logsumexp(lw)
    z = rng.choice(zs, p=np.exp(lw))
    x = np.array(x, dtype=np.int64, copy=True)
    if z != 0:
        target.accept(idx, old, old + z * vals)
        x[idx] = old + z * vals
    return x, {"exact": True, "support": len(zs), "moved": bool(z != 0)}
