r"""Local log-posterior differences for an integer latent in a PyMC model.

For a latent ``x`` made by :func:`privinfer.pymc.lattice_latent`, the model's log density
as a function of ``x`` (other variables fixed) is a sum of terms:

* the fibre indicator of ``x`` itself -- constant along lattice moves (``x >= 0`` is
  checked by the kernels);
* the prior Potential -- *local* when the prior is an elementwise PyMC distribution
  (``ndim_supp == 0``: Poisson, negative binomial, binomial, ...): its parameters are
  evaluated once per step (they depend only on the other variables) and the log-pmf is
  then scored on the touched cells only; a multinomial prior is local too when the
  invariant fixes the total (``log p = const + sum_i (x_i log p_i - log x_i!)``);
* each release observed through :func:`privinfer.pymc.observe` whose mechanism has a
  :class:`~privinfer.mechanisms.base.SeparableLogp` and whose invariant contains the
  latent's lattice (so its support indicator is constant along moves);
* anything else (user Potentials, non-separable likelihoods) -- evaluated by a compiled
  function of the whole ``x``, so the difference stays exact, just not local.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor
import pytensor.tensor as pt
try:
    from pytensor.graph.traversal import ancestors
except ImportError:  # older PyTensor
    from pytensor.graph.basic import ancestors
from pytensor.graph.replace import graph_replace
from scipy.special import gammaln

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
        """Log-pmf of cells ``idx`` taking values ``vals`` (shape (..., k)); sums over k.

        Poisson and multinomial cells are scored in NumPy (``x log mu - mu - log x!``, the
        same formula PyMC compiles, without the call overhead); other distributions through
        the compiled PyMC log-pmf.
        """
        vals = np.asarray(vals, dtype=np.int64)
        if self._log_p is not None:
            lp, mu = self._log_p[idx], self._mu[idx]
            with np.errstate(invalid="ignore"):
                c = np.where(vals > 0, vals * lp, 0.0) - mu - gammaln(vals + 1.0)
            c = np.where(vals >= 0, c, -np.inf)
            return c.sum(axis=-1)
        flat = vals.reshape(-1, len(idx))
        reps = flat.shape[0]
        ps = [np.tile(p[idx], reps) for p in self.params]
        out = self.cell_fn(flat.ravel(), *ps).reshape(flat.shape).sum(axis=1)
        return out.reshape(vals.shape[:-1])

    def cells_at(self, idx, vals):
        """Like :meth:`cells` with ``idx`` of the same shape as ``vals`` (batches of moves)."""
        vals = np.asarray(vals, dtype=np.int64)
        if self._log_p is not None:
            return self.cells(idx, vals)
        ps = [p[idx].ravel() for p in self.params]
        return self.cell_fn(vals.ravel(), *ps).reshape(vals.shape).sum(axis=-1)


class _ReleaseCells:
    def __init__(self, release, sep):
        self.y = np.asarray(release.y)
        self.cell = sep.cell
        self.outer = sep.outer
        self.S = None

    def refresh(self, x):
        if self.outer is not None:
            self.S = float(np.sum(self.cell(self.y - x)))

    def delta(self, idx, old, new):
        yi = self.y[idx]
        d_old = np.sum(self.cell(yi - old))
        d_new = np.sum(self.cell(yi - new), axis=-1)
        if self.outer is None:
            return d_new - d_old
        S_new = self.S + d_new - d_old
        return self.outer(S_new) - self.outer(self.S)

    def accept(self, idx, old, new):
        if self.outer is not None:
            yi = self.y[idx]
            self.S += float(np.sum(self.cell(yi - new)) - np.sum(self.cell(yi - old)))


class LocalPosterior:
    """``delta(idx, old, new)`` for the latent ``x`` of ``model`` (see module docstring).

    ``shared`` maps the model's other value variables to the shared variables PyMC sets
    before each step.  Call :meth:`refresh` with the current ``x`` at the start of every
    step and :meth:`accept` after every accepted move.
    """

    def __init__(self, model, x_rv, info, basis, shared):
        self.model = model
        xv = model.rvs_to_values[x_rv]
        n = info.invariant.n
        dense_B = basis.to_dense()
        sums_fixed = bool(np.all(dense_B.sum(axis=0) == 0))
        prior_name = f"{info.name}_prior"
        release_names = {r.name: r for r in info.releases}
        self.prior = None
        self.releases = []
        other_terms = []
        self.local_terms = []
        self.nonlocal_terms = []
        for var in list(model.free_RVs) + list(model.observed_RVs) + list(model.potentials):
            if var is x_rv:
                continue
            term = model.logp(vars=[var], sum=True)
            if xv not in ancestors([term]):
                continue
            name = var.name
            if name == prior_name and info.prior is not None:
                try:
                    self.prior = _PriorCells(model, info.prior, n, shared, sums_fixed)
                    self.local_terms.append(name)
                    continue
                except NotImplementedError:
                    pass
            if name in release_names:
                rel = release_names[name]
                sep = rel.mechanism.separable_logp() if hasattr(rel.mechanism, "separable_logp") else None
                inv_m = getattr(rel.mechanism, "invariant", None)
                if sep is not None and (inv_m is None or not np.any(np.abs(inv_m.of(dense_B.T.astype(float))) > 0)):
                    self.releases.append(_ReleaseCells(rel, sep))
                    self.local_terms.append(name)
                    continue
            other_terms.append(term)
            self.nonlocal_terms.append(name)
        self.other_fn = None
        if other_terms:
            total = pt.add(*other_terms) if len(other_terms) > 1 else other_terms[0]
            total = graph_replace(total, shared, strict=False)
            self.other_fn = _compile([xv], total)
        self._other_val = None
        self._x = None

    @property
    def is_local(self) -> bool:
        return self.other_fn is None

    @property
    def is_separable(self) -> bool:
        """True when the log posterior in ``x`` is a plain sum of per-cell terms, so moves on
        disjoint cells can be scored and accepted independently (in one batch)."""
        return self.other_fn is None and all(r.outer is None for r in self.releases)

    def delta_batch(self, idx, old, new):
        """Differences for a batch of moves on disjoint cells: ``idx``, ``old``, ``new`` of
        shape (P, k); returns (P,).  Valid only when :attr:`is_separable`."""
        out = np.zeros(len(idx))
        if self.prior is not None:
            out += self.prior.cells_at(idx, new) - self.prior.cells_at(idx, old)
        for r in self.releases:
            yi = r.y[idx]
            out += np.sum(r.cell(yi - new), axis=-1) - np.sum(r.cell(yi - old), axis=-1)
        return out

    def accept_batch(self, idx, new):
        self._x[idx] = new

    def refresh(self, x):
        self._x = np.array(x, dtype=np.int64, copy=True)
        if self.prior is not None:
            self.prior.refresh()
        for r in self.releases:
            r.refresh(self._x)
        if self.other_fn is not None:
            self._other_val = float(self.other_fn(self._x))

    def delta(self, idx, old, new):
        new = np.asarray(new, dtype=np.int64)
        out = np.zeros(new.shape[:-1])
        if self.prior is not None:
            both = self.prior.cells(idx, np.concatenate([np.reshape(old, (1, -1)), new.reshape(-1, len(idx))]))
            out = out + (both[1:].reshape(new.shape[:-1]) - both[0])
        for r in self.releases:
            out = out + r.delta(idx, old, new)
        if self.other_fn is not None:
            flat = new.reshape(-1, len(idx))
            vals = np.empty(flat.shape[0])
            for i, row in enumerate(flat):
                xn = self._x.copy()
                xn[idx] = row
                vals[i] = float(self.other_fn(xn))
            out = out + (vals.reshape(new.shape[:-1]) - self._other_val)
        return out

    def accept(self, idx, old, new):
        """Record an accepted move (keeps running statistics and the cached state)."""
        for r in self.releases:
            r.accept(idx, old, new)
        self._x[idx] = new
        if self.other_fn is not None:
            self._other_val = float(self.other_fn(self._x))
