r"""Latent confidential data constrained by an invariant, as PyMC variables.

The analyst's model is :math:`p(\theta)\,p(x\mid\theta)\,\mathbf 1\{Cx = t\}\,p(y\mid x)`:
the invariant values ``t`` are *data* (published exactly), so conditioning on them means
restricting the prior to the set ``{C x = t}`` without renormalizing it by
:math:`p(t \mid \theta)` -- the joint density evaluated on that set is the posterior kernel.

Continuous latent (:func:`affine_latent`)
    ``x = x0 + Q_N z`` with ``x0`` the least-norm solution of ``C x = t`` and ``Q_N`` an
    orthonormal null-space basis; ``z`` in ``R^{n-r}`` is free, so NUTS samples exactly on
    the affine subspace.  The prior on ``x`` enters as its density evaluated at ``x``.  No
    Jacobian is needed: ``z -> x0 + Q_N z`` is an isometry (``Q_N^T Q_N = I``), so Lebesgue
    measure in ``z`` *is* the (n-r)-dimensional surface measure on ``{C x = t}``, and the
    conditional density of ``x`` given ``C x = t`` w.r.t. surface measure is proportional
    to the prior density at ``x`` (the proportionality constant -- involving
    ``det(C C^T)^{-1/2}`` for full-row-rank C -- does not depend on theta).

Integer latent (:func:`lattice_latent`)
    ``x`` is an int64 vector on the fibre ``{x in Z^n : C x = t}`` (and ``x >= 0`` for
    counts).  Its own log-density is 0 on the fibre and ``-inf`` off it, the prior is added
    as a ``Potential``, and the step methods in :mod:`privinfer.pymc.steps`
    move along the lattice ``{e : C e = 0}`` so they never leave the fibre.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import scipy.sparse as sp

from ..invariants import InfeasibleInvariantError, Invariant
from ..lattice import GroupSumSampler, GroupTree, separable_cell_logp, unimodal_windows
from ..lattice import CellSum, LocalLogDensity
from .registry import AffineLatentInfo, LatticeLatentInfo, model_registry

__all__ = ["affine_latent", "lattice_latent", "constrained_vector", "prior_logp", "started", "ConditionalPrior"]


def _as_invariant(invariant, t) -> tuple[Invariant, np.ndarray]:
    if not isinstance(invariant, Invariant):
        raise TypeError("invariant must be a privinfer.invariants.Invariant")
    if t is None:
        if invariant.t is None:
            raise ValueError("no invariant values: pass t or build the Invariant with t")
        return invariant, invariant.t
    inv = invariant.with_t(t)
    return inv, inv.t


def prior_logp(prior, x):
    """Log prior density of ``x``: ``prior`` is a PyMC ``.dist`` variable or a callable."""
    if prior is None:
        return pt.constant(0.0)
    if callable(prior) and not isinstance(prior, pt.TensorVariable):
        return pt.sum(prior(x))
    return pt.sum(pm.logp(prior, x))


def affine_latent(name: str, invariant: Invariant, t=None, prior=None, *, initval=None, dims=None, model=None):
    """Continuous latent ``x`` on ``{C x = t}`` parametrized as ``x0 + Q_N z``.

    Parameters
    ----------
    name
        name of the deterministic ``x`` (the free coordinates are ``f"{name}_z"``).
    invariant, t
        the invariant and its published values (``t`` defaults to ``invariant.t``).
    prior
        a PyMC distribution made with ``.dist(...)`` (e.g. ``pm.Normal.dist(mu, sigma,
        shape=n)``) or a callable ``x -> logp``; its density at ``x`` is added as a Potential
        named ``f"{name}_prior"``.  ``None`` adds nothing (flat on the subspace).
    initval
        optional starting point for ``x`` (e.g. the release); it is projected onto
        ``{C x = t}`` and its coordinates ``Q_N^T (x - x0)`` become the *support point* of ``z``
        (where PyMC's ``initial_point`` starts; not a PyMC ``initval``, so PyMC's graph
        rebuilds -- ``pm.compute_log_likelihood``, ``pm.do``, ``pm.observe`` -- work).  By
        default ``x`` starts at the least-norm point ``x0`` (``z = 0``), which can be far from
        the data when cells differ by orders of magnitude.
    """
    model = pm.modelcontext(model)
    inv, t = _as_invariant(invariant, t)
    Q = inv.null_basis()
    x0 = inv.feasible_point(t)
    z0 = np.zeros(Q.shape[1])
    if initval is not None:
        start = np.asarray(initval, dtype=float)
        if start.shape != (inv.n,) or not np.all(np.isfinite(start)):
            raise ValueError(f"initval must be a finite vector of shape ({inv.n},)")
        z0 = Q.T @ (start - x0)  # coordinates of its projection onto the fibre
    z, z_start = _started_flat(f"{name}_z", z0)
    x = pm.Deterministic(name, pt.as_tensor_variable(x0) + pt.dot(pt.as_tensor_variable(Q), z), dims=dims)
    if prior is not None:
        pm.Potential(f"{name}_prior", prior_logp(prior, x))
    model_registry(model)["affine"][name] = AffineLatentInfo(name, inv, t, np.asarray(x0), start=z_start)
    return x


def _started_flat(name: str, start: np.ndarray):
    """A free real vector with a flat density (log-density 0, as ``pm.Flat``) whose support point
    is the shared value returned with it (``start.set_value`` moves the starting point)."""
    import pytensor

    z_start = pytensor.shared(np.asarray(start, dtype=float), name=f"{name}_start")

    n = int(np.size(start))

    def flat(size):  # a fixed size, so that the variable keeps its static shape (n,)
        return pm.Flat.dist(shape=(n,))

    def support_point(rv, size):
        return z_start if rv.ndim == 1 else pt.broadcast_to(z_start, rv.shape)

    z = pm.CustomDist(name, dist=flat, support_point=support_point, shape=(n,),
                      class_name="FlatStarted")
    return z, z_start


def started(name: str, dist, start, *, dims=None, model=None):
    """A free variable with the law of ``dist`` (a PyMC ``.dist(...)`` random variable) whose
    *support point* -- PyMC's default starting point -- is ``start``.

    The model's density is that of ``dist``; only where chains start changes.  Unlike
    ``initval=``, the model can still be rebuilt by PyMC's graph transforms
    (``pm.compute_log_likelihood``, ``idata_kwargs={"log_likelihood": True}``, ``pm.do``).
    """
    from pytensor.tensor.random.op import RandomVariable

    pm.modelcontext(model)
    node = getattr(dist, "owner", None)
    if node is None or not isinstance(node.op, RandomVariable):
        raise TypeError("started() needs a PyMC distribution made with .dist(...)")
    op = node.op
    params = list(op.dist_params(node))
    value = np.asarray(start, dtype=dist.dtype)
    if not np.all(np.isfinite(value)):
        raise ValueError(f"the starting point of '{name}' must be finite")
    shape = value.shape if value.ndim else None

    def law(*ps):  # the last argument is the size; the start's shape is kept static
        return op(*ps[:-1], size=shape if shape is not None else ps[-1])

    def support_point(rv, size, *ps):
        pt_start = pt.as_tensor_variable(value)
        return pt_start if rv.ndim == value.ndim else pt.broadcast_to(pt_start, rv.shape)

    return pm.CustomDist(name, *params, dist=law, support_point=support_point, shape=shape, dims=dims,
                         class_name=f"Started{type(op).__name__}")


#: Alias with the design notes' name.
constrained_vector = affine_latent


def _fibre_check(inv: Invariant, t: np.ndarray, nonnegative: bool):
    """Symbolic ``0`` on the fibre ``{C x = t (, x >= 0)}`` and ``-inf`` off it."""
    C = inv.matrix
    ti = np.round(t).astype(np.int64)

    def check(value):
        xv = pt.as_tensor_variable(value)
        if sp.issparse(C):
            import pytensor.sparse as ps

            Cx = ps.structured_dot(ps.as_sparse_variable(sp.csr_matrix(C, dtype=float)),
                                   pt.cast(xv, "float64")[:, None])[:, 0]
        else:
            Cx = pt.dot(pt.as_tensor_variable(C), pt.cast(xv, "float64"))
        ok = pt.all(pt.eq(pt.round(Cx), ti))
        if nonnegative:
            ok = ok & pt.all(pt.ge(xv, 0))
        return pt.switch(ok, 0.0, -np.inf)

    return check


def lattice_latent(name: str, invariant: Invariant, t=None, prior=None, *, nonnegative: bool = True,
                   initval=None, dims=None, moves=None, sampler=None, model=None):
    """Integer latent ``x`` on the fibre ``{x in Z^n : C x = t}`` (``x >= 0`` by default).

    Parameters
    ----------
    name
        name of the int64 vector variable.
    invariant, t
        integer invariant and its published integer values.
    prior
        a PyMC distribution made with ``.dist(...)`` of shape (n,) -- e.g.
        ``pm.Poisson.dist(mu=rates)`` (independent counts) or
        ``pm.Multinomial.dist(n=total, p=p)`` (a multinomial given the total) -- whose
        log-pmf at ``x`` is part of the variable's own log-density (its parameters are the
        variable's inputs), or a callable ``x -> logp`` added as the Potential
        ``f"{name}_prior"``.
    nonnegative
        restrict to ``x >= 0`` (counts).
    initval
        a starting point on the fibre; by default a non-negative integer point is found
        exactly (:meth:`Invariant.feasible_point`).  It becomes the variable's *support
        point* (the point PyMC's ``initial_point`` starts from), not a PyMC ``initval``, so
        the model can be rebuilt by PyMC's graph transforms (``pm.compute_log_likelihood``,
        ``idata_kwargs={"log_likelihood": True}``, ``pm.do``, ``pm.observe``).
    moves
        the move set of :class:`~privinfer.pymc.LatticeMetropolis` for this latent
        (:class:`~privinfer.lattice.PairMoves`, :class:`~privinfer.lattice.RectangleMoves` or
        a :class:`~privinfer.lattice.MoveCycle` of them), checked to keep ``C x``; default
        the invariant's own (:func:`~privinfer.lattice.moves_for`).  The multi-direction
        jumps along the invariant's lattice basis are made in any case.
    sampler
        ``None`` (the lattice steps of :mod:`privinfer.pymc.steps`), or the name of another
        step method's kind that ``pm.sample()`` should assign to this latent instead (e.g.
        ``"measured_pairs"``: :class:`~privinfer.pymc.MeasuredPairsGibbs`); the lattice steps
        stay usable by hand.

    Raises
    ------
    InfeasibleInvariantError
        if the fibre is empty (no (non-negative) integer point has ``C x = t``), or the
        initial value is off the fibre.
    ValueError
        if the prior gives probability zero to the initial point (pass ``initval`` inside
        the prior's support).

    Notes
    -----
    Plain ``pm.sample()`` samples ``x`` with :class:`privinfer.pymc.LatticeBlockGibbs` (its
    competence for this variable's op is IDEAL, so PyMC assigns it by itself; where block
    updates do not apply it makes the local moves of
    :class:`~privinfer.pymc.LatticeMetropolis`); pass
    ``step=lattice_steps(model, step_class=LatticeGibbs)`` for heat-bath moves.

    ``pm.sample_prior_predictive`` draws ``x`` from the prior restricted to the fibre
    (:class:`ConditionalPrior`), ``pm.sample_posterior_predictive`` releases from its draws.

    Nothing of size n x n is built: the fibre check is a sparse product ``C x``, and the
    starting point of a partition invariant is found group by group.
    """
    model = pm.modelcontext(model)
    inv, t = _as_invariant(invariant, t)
    _check_integer_invariant(inv, t)
    x0 = _starting_point(inv, t, initval, nonnegative)
    if moves is not None:
        _check_moves(inv, moves)
    draw = ConditionalPrior(inv, t, prior, nonnegative)
    x = _lattice_variable(name, inv, t, nonnegative, draw, x0, dims, sampler)
    if prior is not None:
        lp = prior_logp(prior, x)
        if not draw.in_logp:
            pm.Potential(f"{name}_prior", lp)
        _check_prior_support(model, lp, x, x0, name)
    model_registry(model)["lattice"][name] = LatticeLatentInfo(name, inv, np.asarray(t), prior, nonnegative, x0,
                                                               moves=moves, prior_in_logp=draw.in_logp)
    return x


def _check_integer_invariant(inv: Invariant, t: np.ndarray) -> None:
    """An integer latent needs an integer C and integer values t."""
    if not inv.is_integer:
        raise ValueError("lattice_latent needs an integer constraint matrix C (C has non-integer entries)")
    if np.any(t != np.round(t)):
        raise InfeasibleInvariantError("no integer point: the invariant values t are not integers")


def _starting_point(inv: Invariant, t: np.ndarray, initval, nonnegative: bool) -> np.ndarray:
    """The chain's starting point: ``initval`` checked to lie on the fibre, or a point found
    exactly by :meth:`Invariant.feasible_point`."""
    if initval is None:
        return np.asarray(inv.feasible_point(t, integer=True, nonnegative=nonnegative), dtype=np.int64)
    x0 = np.asarray(initval)
    if x0.shape != (inv.n,):
        raise ValueError(f"initval must have shape ({inv.n},), got {x0.shape}")
    if not np.all(np.isfinite(x0.astype(float))) or np.any(x0 != np.round(x0)):
        raise ValueError("initval must hold integer counts")
    x0 = np.round(x0).astype(np.int64)
    if not inv.satisfied_by(x0, t, atol=0.5):
        raise InfeasibleInvariantError("initval is off the fibre: C x0 != t")
    if nonnegative and np.any(x0 < 0):
        raise InfeasibleInvariantError("initval has negative entries but nonnegative=True")
    return x0


def _lattice_variable(name, inv: Invariant, t, nonnegative: bool, draw: "ConditionalPrior", x0, dims, sampler=None):
    """The ``CustomDist`` of the latent: log-density = fibre indicator (+ the prior's log-pmf when
    it is a PyMC distribution), random = :class:`ConditionalPrior`, support point = ``x0``."""
    check = _fibre_check(inv, t, nonnegative)
    params = draw.params
    start = np.asarray(x0, dtype=np.int64)

    def logp(value, *ps):
        # the fibre indicator, plus the prior's log-pmf when it is a PyMC distribution (its
        # parameters are this variable's inputs, so forward sampling sees the whole law)
        out = check(value)
        if draw.in_logp:
            out = out + draw.prior_logp(value, *ps)
        return out

    def support_point(rv, size, *ps):
        # PyMC's initial point starts here (a support point, not an initval: graph rebuilds work)
        pt_start = pt.as_tensor_variable(start)
        return pt_start if rv.ndim == 1 else pt.broadcast_to(pt_start, rv.shape)

    x = pm.CustomDist(
        name,
        *params,
        logp=logp,
        random=draw,
        support_point=support_point,
        signature=",".join(["(n)"] * len(params)) + "->(n)",
        dtype="int64",
        shape=(inv.n,),
        dims=dims,
        class_name="LatticeLatent",
    )
    # the variable's own op says what it is, so PyMC's step assignment (the competence of
    # LatticeMetropolis) recognizes it without looking at names; ``lattice_sampler`` names the
    # step kind that should take it instead (None: the lattice steps)
    type(x.owner.op).lattice_latent = True
    type(x.owner.op).lattice_sampler = sampler
    return x


def _check_moves(inv: Invariant, moves):
    """Raise unless every move of ``moves`` keeps ``C x`` (exact: integer C).

    Pair moves within a label group keep C iff C has equal columns on the group; rectangle
    moves iff every rectangle with corner (0, 0) of the grid does (the others are integer
    combinations of those)."""
    from ..lattice import MoveCycle, PairMoves, RectangleMoves

    C = sp.csc_matrix(inv.matrix, dtype=float)
    parts = moves.parts if isinstance(moves, MoveCycle) else [moves]
    for part in parts:
        if part.n != inv.n:
            raise ValueError(f"the moves act on {part.n} cells, the invariant on {inv.n}")
        if isinstance(part, PairMoves):
            order = np.argsort(part.codes, kind="stable")
            codes = part.codes[order]
            a, b = order[:-1][codes[1:] == codes[:-1]], order[1:][codes[1:] == codes[:-1]]
            D = C[:, a] - C[:, b]
        elif isinstance(part, RectangleMoves):
            g = part.grid
            D = C[:, g[1:, 1:].ravel()] - C[:, np.repeat(g[1:, 0], g.shape[1] - 1)] \
                - C[:, np.tile(g[0, 1:], g.shape[0] - 1)] + C[:, np.full((g.shape[0] - 1) * (g.shape[1] - 1), g[0, 0])]
        else:
            raise TypeError("moves must be PairMoves, RectangleMoves or a MoveCycle of them")
        if np.any(np.abs(sp.csc_matrix(D).data) > 0):
            raise ValueError("the moves do not keep the invariant C x = t")


def _check_prior_support(model, lp, x, x0, name):
    """Evaluate the prior at the initial point; -inf means no feasible start in its support."""
    from pytensor.graph.replace import graph_replace

    graph = model.replace_rvs_by_values([lp])[0]
    value = model.rvs_to_values[x]
    graph = graph_replace(graph, {value: pt.as_tensor_variable(x0)})
    inputs = [v for v in model.value_vars if v is not value]
    ip = model.initial_point()
    fn = model.compile_fn(graph, inputs=inputs, on_unused_input="ignore", point_fn=False)
    val = float(fn(*[ip[v.name] for v in inputs]))
    if not np.isfinite(val):
        raise ValueError(
            f"the prior of '{name}' gives probability zero to the feasible starting point; "
            "pass initval= a point on the fibre inside the prior's support (none was found)"
        )


class ConditionalPrior:
    r"""Draws of ``x`` from its prior restricted to the fibre ``{C x = t, x >= 0}``: the random
    generator of a lattice latent (prior predictive draws).

    For a partition invariant (a total, or totals of disjoint groups) the cells of each group
    are drawn given the group's total:

    * no prior (flat on the fibre): uniform compositions of ``t_g`` into the group's cells
      (stars and bars) -- exact;
    * independent Poisson cells: multinomial with probabilities :math:`\mu_i / \sum_{j\in g}
      \mu_j` (the Poisson law given its sum) -- exact;
    * a multinomial prior: multinomials per group with the group's renormalized
      probabilities (the multinomial given its group sums) -- exact;
    * any other elementwise prior (negative binomial, binomial, ...): the tree forward
      filtering / backward sampling of :class:`privinfer.lattice.GroupSumSampler` on windows
      36 nats deep (cells' log-pmfs must be unimodal); exact up to the dropped mass
      (:math:`e^{-36}` of each cell's mode per cell and table entries below ``1e-13`` of
      their maxima).

    Other invariants (margins of tables, general C) have no direct sampler of the
    restricted prior; a prior predictive draw then raises ``NotImplementedError`` (sample the
    model with no data instead).
    """

    LOG_DROP = 36.0

    def __init__(self, inv: Invariant, t, prior, nonnegative: bool):
        self.n = inv.n
        self.partition = inv.partition
        self.nonnegative = bool(nonnegative)
        self.t = np.round(np.asarray(t, dtype=float)).astype(np.int64)
        self.kind = "flat"
        self.params = [pt.zeros(inv.n)]
        self._cell_fn = None
        self._op = None
        if prior is None:
            return
        from pytensor.tensor.random.op import RandomVariable

        node = getattr(prior, "owner", None)  # None for a callable prior
        if node is None or not isinstance(node.op, RandomVariable):
            self.kind = "other"
            return
        op = node.op
        self._op = op
        params = list(op.dist_params(node))
        name = type(op).__name__
        if name == "PoissonRV":
            self.kind = "poisson"
        elif name == "MultinomialRV":
            self.kind = "multinomial"
        elif op.ndim_supp == 0:
            self.kind = "cells"
        else:
            self.kind = "other"
            return
        self.params = [pt.broadcast_to(pt.as_tensor_variable(p), (inv.n,)) for p in params]

    @property
    def in_logp(self) -> bool:
        """Whether the prior is a PyMC distribution rebuilt from :attr:`params` (then its
        log-pmf belongs to the latent's own log-density)."""
        return self.kind in ("poisson", "multinomial", "cells")

    def prior_logp(self, value, *params):
        """Symbolic prior log-pmf of ``value`` from the (broadcast) parameters."""
        if self.kind == "multinomial":
            rv = self._op(params[0][0], params[1])
        else:
            rv = self._op(*params)
        return pt.sum(pm.logp(rv, value))

    def _cells(self, params):
        if self._cell_fn is None:
            import pytensor

            xs = pt.lvector("xs")
            ps = [pt.vector(f"p{i}", dtype=p.dtype) for i, p in enumerate(self.params)]
            self._cell_fn = pytensor.function([xs, *ps], pm.logp(self._op(*ps), xs), on_unused_input="ignore")
        fn = self._cell_fn

        def cell(idx, v):
            v = np.asarray(v, dtype=np.int64)
            idx = np.broadcast_to(np.asarray(idx), v.shape)
            return np.asarray(fn(v.ravel(), *[np.asarray(p)[idx].ravel() for p in params])).reshape(v.shape)

        return cell

    def __call__(self, *params, rng=None, size=None):
        if self.partition is None:
            raise NotImplementedError(
                "prior predictive draws of a lattice latent need a partition invariant (a total or "
                "group totals); for margins or a general C sample the model without data instead")
        if self.kind == "other":
            raise NotImplementedError("prior predictive draws of a lattice latent need no prior, a Poisson, a "
                                      "multinomial or an elementwise prior")
        rng = np.random.default_rng(rng)
        params = [np.asarray(p) for p in params]
        lead = () if size is None else tuple(np.atleast_1d(size))
        lead = lead or params[0].shape[:-1]
        if not lead:
            return self._one(rng, [p.reshape(-1, self.n)[0] for p in params])
        flat = [np.broadcast_to(p, lead + (self.n,)).reshape(-1, self.n) for p in params]
        out = np.stack([self._one(rng, [f[k] for f in flat]) for k in range(flat[0].shape[0])])
        return out.reshape(lead + (self.n,))

    def _group_cells(self):
        codes = self.partition.codes
        return [np.flatnonzero(codes == g) for g in range(self.partition.n_groups)]

    def _one(self, rng, params) -> np.ndarray:
        x = np.zeros(self.n, dtype=np.int64)
        groups = self._group_cells()
        if self.kind == "flat":
            if not self.nonnegative:
                raise NotImplementedError("a flat prior on an unbounded fibre is improper: it has no prior predictive")
            for cells, T in zip(groups, self.t):
                k = cells.size
                bars = np.sort(rng.choice(int(T) + k - 1, size=k - 1, replace=False)) if k > 1 else np.array([], int)
                edges = np.concatenate([[-1], bars, [int(T) + k - 1]])
                x[cells] = np.diff(edges) - 1
            return x
        if self.kind in ("poisson", "multinomial"):
            w = np.asarray(params[-1], dtype=float)  # Poisson: mu; multinomial: p (after n)
            if self.kind == "multinomial" and int(np.asarray(params[0]).ravel()[0]) != int(self.t.sum()):
                raise InfeasibleInvariantError("the multinomial prior's total differs from the invariant's total: "
                                               "the fibre has prior probability zero")
            for cells, T in zip(groups, self.t):
                wg = w[cells]
                if wg.sum() <= 0:
                    if T == 0:
                        continue
                    raise InfeasibleInvariantError("the prior gives probability zero to a group's total")
                x[cells] = rng.multinomial(int(T), wg / wg.sum())
            return x
        # any other elementwise prior: group-sum sampler on the prior's cells
        cell = self._cells(params)
        density = LocalLogDensity([CellSum(cell)])
        cells_fn = separable_cell_logp(density)
        codes = self.partition.codes
        lower = 0 if self.nonnegative else None
        upper = self.t[codes] if self.nonnegative else None
        lo, hi, _, capped = unimodal_windows(cells_fn, self.n, lower, upper, log_drop=self.LOG_DROP,
                                             max_width=1 << 16)
        if capped:
            raise NotImplementedError("the prior's cells are too spread out for a direct draw given the totals")
        sampler = GroupSumSampler(GroupTree(codes), cells_fn, lo, hi)
        draw, _, ok = sampler.sample(rng, self.t)
        if not ok.all():
            raise InfeasibleInvariantError("a group total is outside the prior's support (up to e^-36)")
        return draw
