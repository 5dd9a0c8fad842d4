r"""Exact Bayesian inference from a Census-style noisy measurement file.

The curator publishes discrete Gaussian measurements ``y_k = B_k x + e_k`` of several sparse
linear queries of the integer histogram ``x`` and the invariant values ``t = C x`` exactly
(:class:`privinfer.mechanisms.NoisyMeasurements`, :class:`~privinfer.mechanisms.MeasurementRelease`).
The analyst's posterior is

.. math:: p(x \mid y, t) \propto \pi(x)\,\mathbf 1\{Cx = t,\ x \ge 0,\ x \in \mathbb Z^n\}
          \prod_{k, r} \mathcal N_{\mathbb Z}(y_{k,r} - (B_k x)_r;\ \sigma_k^2),

exact: the likelihood is the mechanism's own log-pmf, integrality and non-negativity are
kept, and ``t`` is conditioned on exactly.
"""

from __future__ import annotations

import numpy as np
import pymc as pm

from privinfer.inference import gls_estimate, topdown_style_estimate
from privinfer.lattice import MoveCycle, PairMoves, RectangleMoves
from privinfer.mechanisms import MeasurementRelease
from privinfer.pymc import lattice_latent, observe

__all__ = ["noisy_measurements_model", "grid_moves"]


def grid_moves(grid, n: int) -> MoveCycle:
    """Moves for cells laid out on a two-way grid (e.g. county x sex-age group, ``grid[r, s]``
    the cell index): transfers within a row, transfers within a column and the rectangle
    moves of the grid (one matching, one matching, two matchings per sweep).  They keep the
    grand total; within-row and within-column transfers generate every zero-sum move of the
    grid, and the rectangle moves leave both margins unchanged, so they move the detailed
    cells without disturbing the well-measured totals."""
    grid = np.asarray(grid)
    rows = np.full(n, -1, dtype=np.int64)
    cols = np.full(n, -1, dtype=np.int64)
    rows[grid.ravel()] = np.repeat(np.arange(grid.shape[0]), grid.shape[1])
    cols[grid.ravel()] = np.tile(np.arange(grid.shape[1]), grid.shape[0])
    if np.any(rows < 0):
        raise ValueError("the grid must cover every cell")
    return MoveCycle([PairMoves(rows), PairMoves(cols), RectangleMoves(grid, n)], matchings=(1, 1, 2))


def noisy_measurements_model(release: MeasurementRelease, *, prior=None, grid=None, rng=None) -> pm.Model:
    r"""PyMC model of the histogram ``x`` given a noisy measurement release.

    Generative story
    ----------------
    :math:`x \sim \pi` restricted to the fibre :math:`\{x \in \mathbb Z^n_{\ge 0}: Cx = t\}`
    (``prior=None``: uniform on the fibre; or a PyMC distribution made with ``.dist(...)`` of
    shape ``(n,)``, e.g. ``pm.Poisson.dist(mu=rates)``), then
    :math:`y = (B_k x + e_k)_k` with independent discrete Gaussian noise.  The prior is
    restricted to the fibre, not renormalized (``t`` is data).  With the uniform prior the
    posterior is proper whenever the fibre is finite (an invariant fixing the total) or every
    cell is measured.

    Variables: ``x`` (int64, n) -- a :func:`~privinfer.pymc.lattice_latent` -- and the
    observed ``y``.  Plain ``pm.sample()`` samples ``x`` with the lattice step
    (:class:`~privinfer.pymc.LatticeMetropolis`): pair moves keep ``C x = t`` exactly, and
    the likelihood of a move is scored from the query rows its cells enter
    (:class:`~privinfer.lattice.LinearQueries`, running statistic ``B x``).

    ``grid``: optional (R, S) array of cell indices laying the cells out as a two-way table
    (county x sex-age group for :func:`~privinfer.mechanisms.county_sex_age_measurements`:
    ``np.arange(n).reshape(counties, sexes * ages)``); the lattice step then uses
    :func:`grid_moves`, which mix far faster when the totals of the grid's rows and columns
    are measured precisely.  It needs an invariant the grid moves keep (the grand total).

    The chain starts at the TopDown-style estimate (the GLS estimate projected onto the
    non-negative fibre and rounded keeping ``t``; ``rng`` breaks rounding ties), a
    non-negative integer point on the fibre.
    """
    if not isinstance(release, MeasurementRelease):
        raise TypeError(f"release must be a privinfer.mechanisms.MeasurementRelease, not {type(release).__name__}")
    inv = release.invariant
    if inv is None:
        raise ValueError("the lattice latent needs an invariant (e.g. the state total); the release has none")
    mech = release.mechanism
    start = topdown_style_estimate(release, gls_estimate(release), rng=rng)
    with pm.Model() as model:
        moves = None if grid is None else grid_moves(grid, mech.n)
        x = lattice_latent("x", inv, release.t, prior=prior, initval=np.asarray(start, dtype=np.int64), moves=moves)
        observe("y", mech, x, observed=release.y)
    return model
