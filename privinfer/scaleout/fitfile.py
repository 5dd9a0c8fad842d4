r"""``privinfer fit`` on a release made group by group on Dask: one fit per group, one result.

:func:`fit_frame_release` fits a model whose posterior factorizes over the groups (the county
model, one per group: :mod:`.fitting`) to a :class:`~privinfer.scaleout.FrameRelease` with
:func:`~privinfer.scaleout.fit_groups` -- in this process or on a Dask client -- and returns a
:class:`privinfer.workflow.FitResult` whose cells are the release's rows *in the release
file's order*, so it writes the outputs of every ``privinfer fit`` (``posterior.nc``,
``cells.csv``, ``summary.csv`` / ``summary.txt``, ``fit.png``) and prints its report.

Cells and rows.  :func:`~privinfer.scaleout.fit_groups` gathers the cells of the fitted groups
group after group (each group's cells in row order) with a ``cell_group`` coordinate; here
each gathered cell is matched explicitly to its row (the j-th cell of group g is the j-th row
of group g in the file) and the per-cell posterior variables are put back in the file's row
order, with a ``data_row`` coordinate (1-based data row of the release file) and one
coordinate per label column.  A group of one cell is published exactly by its total
(:math:`x = t_g`): it is not sampled, and its row in ``cells.csv`` holds the total with
posterior sd 0 (the posterior is a point mass); ``posterior.nc`` holds the sampled cells.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..workflow.errors import ReleaseFileError
from ..workflow.figures import CellGroups
from ..workflow.fitting import INTERVAL, FitResult, equal_tailed_interval
from ..workflow.table_io import cell_text
from .frames import FrameRelease, is_dask_frame

__all__ = ["fit_frame_release", "command_fit"]


def _refuse_model(model) -> None:
    if model == "contingency":
        raise ReleaseFileError("--model contingency fits a two-way table; a release made group by group on Dask is "
                               "fitted per group with --model county")
    if not callable(model) and model != "county":
        raise ReleaseFileError(f"unknown model '{model}' for a release made group by group (use county)")


def _refuse_without_totals(released: FrameRelease) -> None:
    if released.totals is None:
        raise ReleaseFileError(f"mechanism {released.mechanism} keeps no group totals: the per-group models condition "
                               "on published totals, so this release cannot be fitted")


def _row_of_cells(codes: np.ndarray, cell_group_codes: np.ndarray) -> np.ndarray:
    """``rows[j]``: the row (0-based) of gathered cell ``j``, matching the i-th gathered cell of
    a group to the i-th row of that group (both in row order within the group)."""
    rows = np.empty(cell_group_codes.size, dtype=np.int64)
    for g in np.unique(cell_group_codes):
        mine = np.flatnonzero(cell_group_codes == g)
        theirs = np.flatnonzero(codes == g)
        if mine.size != theirs.size:
            raise RuntimeError("internal error: a fitted group has a different number of cells than the release")
        rows[mine] = theirs
    return rows


def fit_frame_release(released: FrameRelease, model="county", *, client=None, draws: int = 1000, tune: int = 1000,
                      chains: int = 2, cores: int = 1, seed: int | None = None, output=None,
                      interval: float = INTERVAL, echo=None) -> FitResult:
    """Fit ``model`` per group to ``released`` (module docstring) and summarize the cells in row order.

    The frame's columns other than the counts identify the cells (a frame read by
    :func:`~privinfer.scaleout.readback.read_frame_release`: the release file's label columns).
    ``client``: a ``dask.distributed.Client`` (one task per group) or ``None`` (this process).
    ``seed``: the root of the groups' sampler seeds (:func:`~privinfer.scaleout.fit_groups`);
    ``None`` draws one from OS entropy (recorded in the result).  ``output``: the folder of
    the outputs (``None``: nothing written).  Refused with a one-line error: a mechanism that
    keeps no group totals, ``model="contingency"``.
    """
    import arviz as az

    from .fitting import fit_groups

    _refuse_model(model)
    _refuse_without_totals(released)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    seed = int(seed)
    labels = list(dict.fromkeys([c for c in released.frame.columns if c != released.value]))
    frame = released.frame[labels + [released.value]]
    if is_dask_frame(frame):
        frame = frame.compute()
    frame = frame.reset_index(drop=True)
    group, value = released.group, released.value
    y = frame[value].to_numpy(dtype=np.int64)
    codes, keys = frame[group].factorize(sort=False)
    codes = np.asarray(codes, dtype=np.int64)
    sizes = np.bincount(codes, minlength=len(keys))
    model_name = model if isinstance(model, str) else getattr(model, "__name__", "custom")
    if echo is not None:
        fitted = int((sizes > 1).sum())
        echo(f"fitting the {model_name} model to {y.size} released cells in {fitted} groups "
             f"({released.mechanism}, invariant groups:{group}, one fit per group); seed {seed}")
        single = int((sizes == 1).sum())
        if single:
            echo(f"{single} group(s) of one cell: published exactly by the group total (posterior sd 0, not sampled)")
    local = dataclasses.replace(released, frame=frame)
    idata = fit_groups(local, model=model, client=client, seed=seed, draws=draws, tune=tune, chains=chains,
                       cores=cores)
    post = idata.posterior
    key_code = {k.item() if hasattr(k, "item") else k: i for i, k in enumerate(keys)}
    cell_codes = np.array([key_code[k.item() if hasattr(k, "item") else k] for k in post["cell_group"].values],
                          dtype=np.int64)
    rows = _row_of_cells(codes, cell_codes)
    order = np.argsort(rows, kind="stable")
    rows = rows[order]
    ids = [cell_text(frame[c]) for c in labels]
    cell_labels = [" / ".join(parts) for parts in zip(*ids)]
    sampled = [cell_labels[r] for r in rows]
    coords = {"cell": sampled if len(set(cell_labels)) == len(cell_labels) else rows.tolist(),
              "data_row": ("cell", (rows + 1).tolist())}
    for c, col in zip(labels, ids):
        key = c if c not in post.variables and c not in ("cell", "data_row") else f"id_{c}"
        coords[key] = ("cell", [col[r] for r in rows])
    post = post.isel(cell=order).drop_vars([c for c in post["cell"].coords if c not in ("cell", "cell_group")])
    post = post.assign_coords(coords)
    idata = az.InferenceData(posterior=post)
    xd = post["x"].values.reshape(-1, rows.size)
    lo, hi = equal_tailed_interval(xd, interval)
    mean, sd = y.astype(float), np.zeros(y.size)
    lower, upper = y.copy(), y.copy()  # a one-cell group: x = t exactly
    mean[rows], sd[rows], lower[rows], upper[rows] = xd.mean(0), xd.std(0), lo, hi
    summary = az.summary(idata, var_names=list(post.data_vars))
    result = FitResult(model_name, seed, cell_labels, y, mean, sd, lower, upper, float("nan"), float("nan"),
                       idata=idata, summary=summary, interval=interval, cell_ids=(labels, list(zip(*ids))),
                       groups=CellGroups(codes, [str(k) for k in cell_text(keys.to_series())], "group"))
    result.rhat_max, result.ess_bulk_min = result.diagnostics()
    if output is not None:
        result.write(output)
    return result


def command_fit(args, echo=print) -> int:
    """``privinfer fit`` on a release made on Dask: :func:`~privinfer.scaleout.readback.read_frame_release`,
    then :func:`fit_frame_release` in this process, or on a local cluster of ``--workers N``
    processes or the cluster at ``--scheduler ADDRESS``; prints the report."""
    from .files import dask_client
    from .readback import read_frame_release

    _refuse_model(args.model)
    options = dict(draws=args.draws, tune=args.tune, chains=args.chains, cores=args.cores, seed=args.seed,
                   output=args.output, echo=echo)
    if args.workers is None and args.scheduler is None:
        released = read_frame_release(args.release, args.metadata)
        _refuse_without_totals(released)
        result = fit_frame_release(released, args.model, **options)
    else:
        with dask_client(args.workers, args.scheduler) as client:
            released = read_frame_release(args.release, args.metadata, dask=True)
            _refuse_without_totals(released)
            result = fit_frame_release(released, args.model, client=client, **options)
    echo(result.text())
    return 0
