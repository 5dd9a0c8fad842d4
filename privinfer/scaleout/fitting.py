r"""Fit models that factorize over groups, one group per task on a Dask client.

When every group has its own parameters and its own published total, the posterior
factorizes: :math:`p(\theta, x \mid y, t) = \prod_g p(\theta_g, x_g \mid y_g, t_g)` (the
likelihood :math:`p(y \mid x)` of a release drawn group by group is a product over groups,
:mod:`.groups`, and so are the priors and the invariant :math:`C x = t`).  Each factor is an
ordinary :func:`privinfer.workflow.fit` of the group's release -- the group's released counts,
the registry mechanism on ``invariants.total(k)`` with its total :math:`t_g` -- e.g. the
per-state county model :func:`privinfer.models.county_population_model`.  The groups are
fitted independently (on the client's workers when one is given, else in this process) and
gathered into one ``arviz.InferenceData``:

* per-cell variables (the latent counts ``x``, per-cell rates, ...: one dimension of the
  group's size) of every group concatenated along a ``cell`` dimension, in group order and,
  within a group, in the input's row order, with a ``cell_group`` coordinate naming each cell's
  group (groups differ in size, so a rectangular group x cell array would need padding);
* every other posterior variable stacked along a ``group`` dimension (``mu``, ``sigma``, ...).

The sampler seed of group g is derived from ``seed`` and the group's key like the release
noise (:mod:`.seeding`), so the fits do not depend on the number of workers.
"""

from __future__ import annotations

import numpy as np

from .. import invariants
from .frames import FrameRelease, is_dask_frame
from .groups import GroupMechanism
from .seeding import group_seed_sequence, root_seed

__all__ = ["group_release", "fit_one_group", "fit_groups"]


def group_release(released: FrameRelease, key, y):
    """The :class:`~privinfer.workflow.Release` of one group: its released counts ``y`` (input
    order), the registry mechanism on the group's total, and that published total."""
    from ..workflow import Release

    if released.totals is None:
        raise ValueError(f"mechanism {released.mechanism} keeps no group totals: the per-group models "
                         "condition on published totals")
    y = np.asarray(y, dtype=np.int64)
    k = y.size
    if k < 2:
        raise ValueError("a group of one cell is published exactly by its total: nothing to fit")
    mech = GroupMechanism(released.mechanism, released.options).for_size(k)
    inv = invariants.total(k)
    t = np.array([int(released.totals.loc[key])], dtype=np.int64)
    return Release(y, mech, inv.with_t(t), t)


def fit_one_group(released: FrameRelease, key, y, model, seed: int, fit_options: dict):
    """Fit ``model`` to one group; returns its posterior as an ``xarray.Dataset``."""
    from ..workflow import fit

    rel = group_release(released, key, y)
    result = fit(rel, model, seed=seed, progressbar=False, **fit_options)
    return result.idata.posterior


def _group_values(released: FrameRelease) -> dict:
    frame = released.frame[[released.group, released.value]]
    if is_dask_frame(frame):
        frame = frame.compute()
    return {key: block[released.value].to_numpy(dtype=np.int64)
            for key, block in frame.groupby(released.group, sort=False)}


def fit_groups(released: FrameRelease, *, model="county", client=None, groups=None, seed=None, draws: int = 1000,
               tune: int = 1000, chains: int = 2, **fit_options):
    """Fit ``model`` to every group of a :func:`~privinfer.scaleout.release_frame` result and
    gather one ``InferenceData`` (module docstring).

    ``client``: a ``dask.distributed.Client`` (one task per group) or ``None`` (in this process).
    ``groups``: the keys to fit (default: every group of more than one cell, in first-appearance
    order).  ``seed``: integer or ``None`` (OS entropy); group g's sampler seed comes from it
    and g's key.  Other options go to :func:`privinfer.workflow.fit` (``cores``, ``step``, ...).
    The released counts of the groups are gathered to this process (the fits, not the data,
    are the expensive part).
    """
    import arviz as az
    import xarray as xr

    if not isinstance(released, FrameRelease):
        raise TypeError("fit_groups needs the FrameRelease returned by release_frame")
    values = _group_values(released)
    keys = [k for k in values if values[k].size > 1] if groups is None else list(groups)
    missing = [k for k in keys if k not in values]
    if missing:
        raise ValueError(f"{len(missing)} requested group(s) are not in the release")
    if not keys:
        raise ValueError("no group of more than one cell to fit")
    root = root_seed(seed)
    seeds = {k: int(group_seed_sequence(root, k).generate_state(2, np.uint64)[0] % (2**63)) for k in keys}
    options = dict(draws=draws, tune=tune, chains=chains, **fit_options)
    if client is None:
        posts = [fit_one_group(released, k, values[k], model, seeds[k], options) for k in keys]
    else:
        light = FrameRelease(None, released.value, released.group, released.mechanism, released.options,
                             released.guarantee, released.totals.loc[keys] if released.totals is not None else None,
                             released.sizes.loc[keys], released.sampler)
        futures = [client.submit(fit_one_group, light, k, values[k], model, seeds[k], options, pure=False)
                   for k in keys]
        posts = client.gather(futures)
    per_cell: dict[str, list] = {}
    others = []
    for k, post in zip(keys, posts):
        size = values[k].size
        cell_vars = [v for v in post.data_vars
                     if [d for d in post[v].dims if d not in ("chain", "draw")] and
                     post[v].sizes[[d for d in post[v].dims if d not in ("chain", "draw")][0]] == size and
                     len(post[v].dims) == 3]
        for v in cell_vars:
            da = post[v]
            dim = [d for d in da.dims if d not in ("chain", "draw")][0]
            # the group's own cell labels (its Release has no ids: "cell 1".."cell k") would
            # repeat across groups: keep only the position and the group
            da = da.rename({dim: "cell"}).reset_coords(drop=True).drop_vars("cell", errors="ignore")
            per_cell.setdefault(v, []).append(
                da.assign_coords(cell_group=("cell", np.full(size, k, dtype=object))))
        rest = post.drop_vars(cell_vars)
        rest = rest.drop_vars([c for c in rest.coords if c not in ("chain", "draw")])
        others.append(rest.expand_dims(group=[k]))
    posterior = xr.concat(others, dim="group")
    for v, parts in per_cell.items():
        da = xr.concat(parts, dim="cell")
        posterior[v] = da.assign_coords(cell=np.arange(da.sizes["cell"]))
    posterior.attrs["groups_fitted"] = len(keys)
    return az.InferenceData(posterior=posterior)
