r"""Local log-posterior differences for an integer latent in a PyMC model.

For a latent ``x`` made by :func:`privinfer.pymc.lattice_latent`, the model's log density
as a function of ``x`` (other variables fixed) is a sum of terms:

* the fibre indicator of ``x`` itself -- constant along lattice moves (``x >= 0`` is
  checked by the kernels);
* the prior (part of ``x``'s own log-density; a Potential for a callable prior) -- *local*
  when the prior is an elementwise PyMC distribution
  (``ndim_supp == 0``: Poisson, negative binomial, binomial, ...): its parameters are
  evaluated once per step (they depend only on the other variables) and the log-pmf is
  then scored on the touched cells only; a multinomial prior is local too when the
  invariant fixes the total (``log p = const + sum_i (x_i log p_i - log x_i!)``);
* each release observed through :func:`privinfer.pymc.observe` whose mechanism has a
  local log-density (``mechanism.local_logp()``, a
  :class:`~privinfer.lattice.LocalLogDensity` in the noise ``e = y - x``) and whose invariant
  contains the latent's lattice (so its support indicator is constant along moves); for
  measurements of other queries (``m != n``, e.g.
  :class:`~privinfer.mechanisms.NoisyMeasurements`) the density is written in the query
  noise ``u = y - Bx`` and its :class:`~privinfer.lattice.LinearQueries` term, shifted to
  ``x``, keeps the answers ``Bx`` as a running statistic (their support does not involve
  the invariant);
* anything else (user Potentials, other likelihoods) -- evaluated by a compiled function of
  the whole ``x``, so the difference stays exact, just not local.

:class:`LocalPosterior` assembles these terms into one
:class:`~privinfer.lattice.LocalLogDensity` over ``x`` (:attr:`LocalPosterior.density`), the
encoding every lattice kernel scores moves with.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import scipy.sparse as sp
import pytensor
import pytensor.tensor as pt
try:
    from pytensor.graph.traversal import ancestors
except ImportError:  # older PyTensor
    from pytensor.graph.basic import ancestors
from pytensor.graph.replace import graph_replace
from scipy.special import gammaln

from ..lattice import CellSum, LocalLogDensity, WholeVector

__all__ = ["LocalPosterior"]


def _compile(inputs, outputs):
    f = pytensor.function(inputs, outputs, on_unused_input="ignore", mode=pytensor.compile.mode.get_default_mode())
    f.trust_input = True
    return f


class _PriorCells:
    """Elementwise prior log-pmf on a subset of cells, parameters refreshed per step."""

    def __init__(self, model, prior, n, shared, x_sums_fixed):
        from pytensor.tensor.random.op import RandomVariable

        node = prior.owner
        if node is None or not isinstance(node.op, RandomVariable):
            raise NotImplementedError("prior is not a plain PyMC distribution")
        op = node.op
        params = list(op.dist_params(node))
        self.multinomial = False
        if op.ndim_supp == 1 and type(op).__name__ == "MultinomialRV":
            if not x_sums_fixed:
                raise NotImplementedError("a multinomial prior is local only when the invariant fixes the total")
            self.multinomial = True
            params = [params[1]]  # p
        elif op.ndim_supp != 0:
            raise NotImplementedError("prior is not elementwise")
        graphs = [pt.broadcast_to(p, (n,)) if p.ndim <= 1 else p for p in params]
        graphs = model.replace_rvs_by_values(graphs)
        graphs = [graph_replace(g, shared, strict=False) for g in graphs]
        self.param_fn = _compile([], graphs)
        xs = pt.lvector("xs")
        ps = [pt.vector(f"p{i}", dtype=g.dtype) for i, g in enumerate(graphs)]
        self.kind = "multinomial" if self.multinomial else type(op).__name__
        if self.multinomial:
            cell = pt.cast(xs, "float64") * pt.log(ps[0]) - pt.gammaln(pt.cast(xs, "float64") + 1.0)
            cell = pt.switch(pt.ge(xs, 0), cell, -np.inf)
        else:
            rv = op(*ps)
            cell = pm.logp(rv, xs)
        self.cell_fn = _compile([xs, *ps], cell)
        self.params = None
        self._log_p = None

    def refresh(self):
        self.params = [np.asarray(p) for p in self.param_fn()]
        if any(p.shape != self.params[0].shape for p in self.params):
            raise RuntimeError("prior parameters did not broadcast to the latent's shape")
        if self.kind in ("PoissonRV", "multinomial"):
            p = self.params[0].astype(float)
            with np.errstate(divide="ignore"):
                self._log_p = np.log(p)
            self._mu = p if self.kind == "PoissonRV" else np.zeros_like(p)

    def cells(self, idx, vals):
        """Per-cell prior log-pmf of cells ``idx`` taking values ``vals`` (``idx`` broadcasts
        against ``vals``): the :class:`~privinfer.lattice.CellSum` cell function.

        Poisson and multinomial cells are scored in NumPy (``x log mu - mu - log x!``, the
        same formula PyMC compiles, without the call overhead); other distributions through
        the compiled PyMC log-pmf.
        """
        vals = np.asarray(vals, dtype=np.int64)
        idx = np.broadcast_to(np.asarray(idx), vals.shape)
        if self._log_p is not None:
            lp, mu = self._log_p[idx], self._mu[idx]
            with np.errstate(invalid="ignore"):
                c = np.where(vals > 0, vals * lp, 0.0) - mu - gammaln(vals + 1.0)
            return np.where(vals >= 0, c, -np.inf)
        ps = [p[idx].ravel() for p in self.params]
        return np.asarray(self.cell_fn(vals.ravel(), *ps)).reshape(vals.shape)

    def grid(self, idx, start, width):
        """Per-cell prior log-pmf on runs of consecutive values (the CellSum ``grid``):
        Poisson and multinomial cells by the log-factorial recurrence, others via :meth:`cells`."""
        if self._log_p is None:
            return self.cells(idx[:, None], start[:, None] + np.arange(width))
        v, logfact = _log_factorial_runs(start, width)
        lp, mu = self._log_p[idx][:, None], self._mu[idx][:, None]
        with np.errstate(invalid="ignore"):
            c = np.where(v > 0, v * lp, 0.0) - mu - logfact
        return np.where(v >= 0, c, -np.inf)


def _log_factorial_runs(start, width):
    """``log v!`` for ``v = start[k] + j`` (``j < width``) by the recurrence
    ``log v! = log (v-1)! + log v`` from one ``gammaln`` per run (negative v: 0)."""
    v = start[:, None] + np.arange(width)
    vc = np.maximum(v, 0)
    steps = np.log(np.maximum(vc[:, 1:], 1).astype(float))
    out = np.empty(v.shape)
    out[:, 0] = gammaln(vc[:, 0] + 1.0)
    np.cumsum(steps, axis=1, out=out[:, 1:])
    out[:, 1:] += out[:, :1]
    return v, out


def _sparse_moves(basis) -> sp.csc_matrix:
    """The moves of a :class:`~privinfer.lattice.LatticeMoves` as the columns of a sparse matrix."""
    rows = np.concatenate(basis.indices)
    cols = np.repeat(np.arange(basis.k), [len(i) for i in basis.indices])
    vals = np.concatenate(basis.values).astype(float)
    return sp.csc_matrix((vals, (rows, cols)), shape=(basis.n, basis.k))


def _keeps_lattice(inv, moves) -> bool:
    """Whether every move ``b`` has ``C b = 0`` for the invariant ``inv`` (exact: integer entries)."""
    CB = sp.csr_matrix(inv.matrix, dtype=float) @ moves
    return not np.any(np.abs(CB.data) > 0)


class LocalPosterior:
    """The log posterior of the lattice latent ``x`` of ``model`` as a
    :class:`~privinfer.lattice.LocalLogDensity` (:attr:`density`), see module docstring.

    ``shared`` maps the model's other value variables to the shared variables PyMC sets
    before each step.  Call :meth:`refresh` at the start of every step: the prior's
    parameters depend on the other variables.
    """

    def __init__(self, model, x_rv, info, basis, shared):
        self.model = model
        xv = model.rvs_to_values[x_rv]
        n = info.invariant.n
        # the moves as a sparse n x d matrix (a dense basis of a large fibre would not fit)
        moves = _sparse_moves(basis)
        sums_fixed = bool(np.all(np.asarray(moves.sum(axis=0)).ravel() == 0))
        prior_name = f"{info.name}_prior"
        release_names = {r.name: r for r in info.releases}
        self.prior = None
        terms = []
        other_terms = []
        self.local_terms = []
        self.nonlocal_terms = []
        for var in list(model.free_RVs) + list(model.observed_RVs) + list(model.potentials):
            if var is x_rv:
                if info.prior is not None and info.prior_in_logp:
                    # the latent's own log-density: fibre indicator (constant along the moves)
                    # plus the prior, scored per cell where it is elementwise
                    try:
                        self.prior = _PriorCells(model, info.prior, n, shared, sums_fixed)
                        terms.append(CellSum(self.prior.cells, grid=self.prior.grid))
                        self.local_terms.append(info.name)
                    except NotImplementedError:
                        other_terms.append(model.logp(vars=[var], sum=True))
                        self.nonlocal_terms.append(info.name)
                continue
            term = model.logp(vars=[var], sum=True)
            if xv not in ancestors([term]):
                continue
            name = var.name
            if name == prior_name and info.prior is not None:
                try:
                    self.prior = _PriorCells(model, info.prior, n, shared, sums_fixed)
                    terms.append(CellSum(self.prior.cells, grid=self.prior.grid))
                    self.local_terms.append(name)
                    continue
                except NotImplementedError:
                    pass
            if name in release_names:
                rel = release_names[name]
                local = rel.mechanism.local_logp()
                inv_m = rel.mechanism.invariant
                if local is not None and local.is_local and (
                        inv_m is None or rel.mechanism.m != n or _keeps_lattice(inv_m, moves)):
                    terms.extend(t.shifted(rel.y, -1) for t in local.terms)
                    self.local_terms.append(name)
                    continue
            other_terms.append(term)
            self.nonlocal_terms.append(name)
        if other_terms:
            total = pt.add(*other_terms) if len(other_terms) > 1 else other_terms[0]
            total = graph_replace(total, shared, strict=False)
            fn = _compile([xv], total)
            terms.append(WholeVector(lambda v: float(fn(np.asarray(v, dtype=np.int64)))))
        self.density = LocalLogDensity(terms)

    @property
    def is_local(self) -> bool:
        return self.density.is_local

    @property
    def is_separable(self) -> bool:
        """True when the log posterior in ``x`` is a plain sum of per-cell terms."""
        return self.density.separable

    def refresh(self):
        """Re-read the prior's parameters (call before every step)."""
        if self.prior is not None:
            self.prior.refresh()
