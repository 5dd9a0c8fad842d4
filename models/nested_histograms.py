r"""Nested histograms (e.g. age x sex) released through linear Gaussian mechanisms.

The common mechanism (Xiao, Wang, Zhang, Kifer, PVLDB) answers several nested analyses --
coarse and fine age bucketizations of an age-by-sex histogram -- with linear Gaussian
mechanisms :math:`y_k = B_k x + N(0, \Sigma_k)` (Def. 2.3): the common mechanism's output and
the residual mechanisms, or independent releases.  All of them are likelihoods for the same
histogram ``x``; the analyst combines them with a smoothness prior.
"""

from __future__ import annotations

import numpy as np
import pymc as pm
import pytensor.tensor as pt

from privinfer.mechanisms import LinearGaussian
from privinfer.pymc import observe

from ._checks import ReleaseLike

__all__ = ["nested_histogram_model", "check_linear_releases"]


def check_linear_releases(releases, n_cells: int):
    """Validate ``[(mechanism, y), ...]`` (or Releases): each mechanism acts on ``n_cells`` and ``y``
    has its output length."""
    if isinstance(n_cells, bool) or not isinstance(n_cells, (int, np.integer)) or n_cells < 1:
        raise ValueError(f"n_cells must be a positive integer, got {n_cells!r}")
    try:
        pairs = list(releases)
    except TypeError:
        raise TypeError("releases must be a list of (mechanism, y) pairs") from None
    if not pairs:
        raise ValueError("releases must hold at least one (mechanism, y) pair")
    out = []
    for k, pair in enumerate(pairs):
        if isinstance(pair, ReleaseLike):
            pair = (pair.mechanism, pair.y)
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise TypeError(f"releases[{k}] must be a (mechanism, y) pair")
        mech, y = pair
        if not isinstance(mech, LinearGaussian):
            raise TypeError(f"releases[{k}]: the mechanism must be a LinearGaussian (y = B x + noise)")
        if mech.n != n_cells:
            raise ValueError(f"releases[{k}]: the mechanism acts on {mech.n} cells, not n_cells = {n_cells}")
        y = np.asarray(y, dtype=float)
        if y.shape != (mech.m,):
            raise ValueError(f"releases[{k}]: y must have shape ({mech.m},) (the mechanism's output), got {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError(f"releases[{k}]: y contains non-finite entries")
        out.append((mech, y))
    return out


def _rough_mean(pairs, n_cells) -> float:
    """Mean cell count of the least-squares fit to all releases (to centre the prior level)."""
    B = np.vstack([m.B for m, _ in pairs])
    y = np.concatenate([y for _, y in pairs])
    x, *_ = np.linalg.lstsq(B, y, rcond=None)
    return float(np.mean(x))


def nested_histogram_model(releases, n_cells, *, total=None, shape=None) -> pm.Model:
    r"""Smooth non-negative histogram observed through several linear Gaussian releases.

    Generative story
    ----------------
    Cells are ordered along the last axis of ``shape`` (default ``(n_cells,)``; e.g.
    ``(2, A)`` for sex x age with ages adjacent).  For each leading index ``s`` (each sex)
    the log-counts follow a Gaussian random walk over adjacent cells,

    .. math::

        w_{s,1} \sim N(\ell, 1), \qquad w_{s,j+1} \mid w_{s,j} \sim N(w_{s,j}, \tau^2),
        \qquad \ell \sim N(\log m_0, 2^2), \quad \tau \sim N^+(0, 1),

    (``m_0`` is the mean of a least-squares fit to the releases, at least 1), and the counts
    are :math:`x = e^{w}` -- continuous and positive.  When ``total`` is given,
    :math:`x = \text{total}\cdot\mathrm{softmax}(w)`, which keeps the published total
    exactly; the level then cancels, so there is no :math:`\ell` and
    :math:`w_{s,1} \sim N(\log(\text{total}/n), 2^2)`.  The random walk is the smoothness
    prior: adjacent ages have similar log-counts, with the roughness :math:`\tau` learned
    from the data.  It is centred (``w`` itself is the free variable): releases of counts
    usually pin the log-counts down far more tightly than the prior, and a non-centred
    walk then has a badly conditioned posterior (NUTS needs tiny steps).

    Releases
    --------
    ``releases`` lists ``(mechanism, y)`` pairs (or :class:`privinfer.workflow.Release` values), each a
    :class:`~privinfer.mechanisms.LinearGaussian` on the ``n_cells`` cells (``y = B x +
    N(0, Sigma)``; ``y`` of length ``mechanism.m``) -- e.g. the common mechanism's output and
    its residual mechanisms, or several bucketizations.  Each enters with its exact
    Gaussian likelihood as the observed variables ``"y_0"``, ``"y_1"``, ... (through
    :func:`privinfer.pymc.observe`, so posterior predictive draws use each mechanism's
    ``release``).  The releases must be
    independent given ``x`` (different noise draws), as the product of likelihoods assumes.

    Variables: ``roughness``, ``level`` (without ``total``), ``w`` (shape ``shape`` as
    (leading, last)), deterministics ``log_x`` and ``x`` (length ``n_cells``, flattened in C
    order).  Sample with NUTS and a dense mass matrix,
    ``pm.sample(init="jitter+adapt_full")``: overlapping releases (a bucket sum known far
    better than its cells) correlate the log-counts, which a diagonal mass matrix handles
    with tiny steps (about 4x slower here).

    Raises
    ------
    ValueError / TypeError for an empty or malformed ``releases``, a mechanism on another
    number of cells, a ``y`` of the wrong length or with non-finite entries, ``shape`` not
    matching ``n_cells``, or ``total <= 0``.
    """
    pairs = check_linear_releases(releases, n_cells)
    n = int(n_cells)
    if shape is None:
        shape = (n,)
    shape = tuple(int(s) for s in np.atleast_1d(shape))
    if any(s < 1 for s in shape) or int(np.prod(shape)) != n:
        raise ValueError(f"shape {shape} does not have n_cells = {n} cells")
    lead = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    L = shape[-1]
    if total is not None:
        if not (np.isscalar(total) and np.isfinite(total) and total > 0):
            raise ValueError("total must be a finite number > 0")
        m0 = float(total) / n
    else:
        m0 = _rough_mean(pairs, n)
    m0 = max(m0, 1.0)

    with pm.Model() as model:
        tau = pm.HalfNormal("roughness", 1.0)
        if total is None:
            level = pm.Normal("level", np.log(m0), 2.0)
            init = pm.Normal.dist(level, 1.0)
        else:  # the common level cancels in the softmax: no level variable
            init = pm.Normal.dist(np.log(m0), 2.0)
        w = pm.GaussianRandomWalk("w", sigma=tau, init_dist=init, steps=L - 1, shape=(lead, L)).reshape((n,))
        log_x = pm.Deterministic("log_x", w if total is None else w - pt.logsumexp(w) + np.log(float(total)))
        x = pm.Deterministic("x", pt.exp(log_x))
        for k, (mech, y) in enumerate(pairs):
            observe(f"y_{k}", mech, x, observed=y)
    return model
