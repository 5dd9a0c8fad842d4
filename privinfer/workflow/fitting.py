"""Fit a Bayesian model to a :class:`~privinfer.workflow.Release`: one implementation for the
``privinfer fit`` command, the demo and the case studies.

Models (:mod:`privinfer.models`), by name:

``county``
    :func:`~privinfer.models.county_population_model` -- counts within a total or within
    groups (releases keeping a total or group totals).
``contingency``
    :func:`~privinfer.models.contingency_table_model` -- a two-way table with its row and
    column totals kept.

or any callable ``model(release) -> pm.Model`` with a latent ``"x"`` of the released cells.
Integer latents are sampled with :func:`privinfer.pymc.lattice_steps` (LatticeMetropolis)
unless ``step`` says otherwise, continuous parameters with NUTS.  Outputs (``output=``):
``posterior.nc`` (``arviz.to_netcdf``), ``cells.csv`` (per released cell: its ids, release,
posterior mean, sd and 90% interval), ``summary.csv`` / ``summary.txt`` (``arviz.summary`` of
the model's free parameters and named deterministics), ``fit.png`` (posterior intervals
against the release, one panel per group: :mod:`privinfer.workflow.figures`).

Cell ids: the cells are identified as in the release file (:meth:`Release.cell_ids`: its
label columns, e.g. ``state`` and ``county``).  ``cells.csv`` starts with those columns, so it
joins back to the release and the input; in the posterior, the cell dimension of ``x`` (and
of the observed ``y``) is named ``cell``, indexed by the printable labels (``"KY / Adair"``)
and carries one coordinate per id column (:func:`label_cells`).

PyMC is imported inside the functions, so importing this module stays light.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .atomic import write_files
from .figures import CellGroups, cell_groups, plot_fit
from .files import ReleaseFileError
from .release import Release, read_release

__all__ = ["FitResult", "fit", "fit_release", "build_model", "start_near_release", "equal_tailed_interval",
           "label_cells", "MODELS", "INTERVAL", "CELL_DIM"]

#: Name of the cell dimension of ``x`` and ``y`` in the posterior.
CELL_DIM = "cell"

#: Posterior interval probability of the per-cell summaries.
INTERVAL = 0.9
#: Reference models available by name.
MODELS = ("county", "contingency")


def equal_tailed_interval(draws: np.ndarray, prob: float = INTERVAL, axis: int = 0):
    """Equal-tailed posterior interval ``[q_a, q_{1-a}]``, ``a = (1 - prob)/2``, along ``axis``.

    ``inverted_cdf`` quantiles are sample values, so intervals of integer draws are integer
    and contain at least ``prob`` of the draws.
    """
    a = (1.0 - prob) / 2.0
    lo = np.quantile(draws, a, axis=axis, method="inverted_cdf")
    hi = np.quantile(draws, 1.0 - a, axis=axis, method="inverted_cdf")
    return lo, hi


def build_model(release: Release, model="county"):
    """The ``pm.Model`` of ``model`` (``"county"``, ``"contingency"`` or a callable) for ``release``.

    The reference models condition on published totals and need the exact likelihood, so a
    non-transparent mechanism or a release without invariant is refused with a one-line error.
    """
    from ..models import contingency_table_model, county_population_model

    if not release.transparent:
        raise ReleaseFileError(
            f"mechanism {release.mechanism_name} is not transparent (its noise law "
            "depends on the data), so no exact likelihood exists to fit a model with"
        )
    if callable(model):
        return model(release)
    if release.invariant is None:
        raise ReleaseFileError(
            "the reference models condition on published totals, but this release keeps no invariant "
            "(it was made with --invariant none)"
        )
    if model == "county":
        if release.invariant.partition is None:
            raise ReleaseFileError("--model county needs a release made with --invariant total or groups:COLUMN "
                                   "(use --model contingency for a two-way table)")
        return county_population_model(release)
    if model == "contingency":
        if release.shape is None or len(release.shape) != 2:
            raise ReleaseFileError("--model contingency needs a two-way table released with --invariant margins "
                                   "or margins:ROW,COL")
        return contingency_table_model(release)
    raise ReleaseFileError(f"unknown model '{model}' (choose county or contingency)")


def start_near_release(model, y) -> dict:
    r"""Start continuous latents on ``{C x = t}`` at the release instead of the least-norm point.

    For each :func:`~privinfer.pymc.affine_latent` ``x = x0 + Q_N z`` on as many cells as the
    release, the candidate starts are ``x0 + lambda Q_N Q_N^T (y - x0)`` for
    ``lambda = 1, 0.9, 0.5, 0.25, 0.1`` (``lambda = 1``: the orthogonal projection of the release
    onto the fibre -- the release itself when the mechanism keeps the invariant); the first
    with a finite model log-density becomes the starting point (support point) of ``z``.  When counts differ by
    orders of magnitude the least-norm point (every cell at its group mean) can sit thousands of
    noise standard deviations from the release, where NUTS cannot adapt.  Returns the starts set.
    """
    from ..pymc.registry import model_registry

    y = np.asarray(y, dtype=float)
    starts = {}
    for name, info in model_registry(model)["affine"].items():
        zname = f"{name}_z"
        if zname not in model.named_vars or info.invariant.n != y.size:
            continue
        Q = info.invariant.null_basis()
        x0 = np.asarray(info.x0, dtype=float)
        z_full = Q.T @ (y - x0)
        logp = model.compile_logp()
        point = model.initial_point()
        for lam in (1.0, 0.9, 0.5, 0.25, 0.1):
            point[zname] = lam * z_full
            if np.isfinite(logp(point)):
                info.start.set_value(lam * z_full)  # the support point of z: no PyMC initval
                starts[zname] = lam * z_full
                break
    return starts


@dataclass
class FitResult:
    """A fitted model: the posterior (``idata``), per-cell summaries of the latent ``x`` and
    convergence diagnostics over the summarized variables, and the files written."""

    model: str
    seed: int
    cell_labels: list[str]
    release: np.ndarray
    mean: np.ndarray
    sd: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    rhat_max: float
    ess_bulk_min: float
    files: dict = field(default_factory=dict)
    idata: object = field(default=None, repr=False)
    summary: object = field(default=None, repr=False)
    interval: float = INTERVAL
    cell_ids: tuple | None = None  # (id column names, one tuple per cell), as Release.cell_ids()
    groups: CellGroups | None = None  # the cells' groups by the invariant (panels of the figure)

    def draws(self, name: str = "x") -> np.ndarray:
        """Posterior draws of ``name`` with chains stacked: shape ``(chains * draws,) + var shape``."""
        v = self.idata.posterior[name].values
        return v.reshape((-1,) + v.shape[2:])

    def diagnostics(self, *names: str) -> tuple[float, float]:
        """Worst R-hat and smallest bulk ESS over the summary rows of ``names`` (all rows if none);
        rows with undefined values (a cell fixed by the data) are ignored."""
        summ = self.summary
        if names:
            keep = [i for i in summ.index if i.split("[", 1)[0] in names]
            summ = summ.loc[keep]
        rhat = summ["r_hat"].to_numpy(dtype=float)
        ess = summ["ess_bulk"].to_numpy(dtype=float)
        return (float(np.nanmax(rhat)) if np.any(np.isfinite(rhat)) else float("nan"),
                float(np.nanmin(ess)) if np.any(np.isfinite(ess)) else float("nan"))

    def text(self) -> str:
        """Printable per-cell table and diagnostics."""
        pct = int(round(100 * self.interval))
        integer = np.asarray(self.release).dtype.kind in "iu"

        def num(v):
            return f"{int(v)}" if integer else f"{float(v):.1f}"

        L = [f"model {self.model}: posterior of the {len(self.release)} confidential cells (seed {self.seed})"]
        ivs = [f"[{num(lo)}, {num(hi)}]" for lo, hi in zip(self.lower, self.upper)]
        w = max([len(s) for s in self.cell_labels] + [4])
        wr = max([len(num(v)) for v in self.release] + [7])
        wm = max([len(f"{v:.1f}") for v in self.mean] + [10])
        wi = max([len(s) for s in ivs] + [12])
        L.append(f"{'cell':<{w}}  {'release':>{wr}}  {'post. mean':>{wm}}  {'sd':>8}  {f'{pct}% interval':>{wi}}")
        for lab, y, m, s, iv in zip(self.cell_labels, self.release, self.mean, self.sd, ivs):
            L.append(f"{lab:<{w}}  {num(y):>{wr}}  {m:>{wm}.1f}  {s:>8.2f}  {iv:>{wi}}")
        L.append(f"max R-hat {self.rhat_max:.3f}, min bulk ESS {self.ess_bulk_min:.0f}"
                 + ("  (R-hat above 1.01: run longer with --draws/--tune)" if self.rhat_max > 1.01 else ""))
        for k, p in self.files.items():
            L.append(f"{k}: {p}")
        return "\n".join(L)

    def cells_table(self) -> str:
        """``cells.csv``: the id columns of the cells (``cell_ids``; ``cell`` with the printable
        labels when unknown), then release, posterior mean and sd, and interval bounds.  An id
        column whose name clashes with a statistic's gets the suffix ``_id``."""
        import pandas as pd

        pct = int(round(100 * self.interval))
        stats = ["release", "posterior_mean", "posterior_sd", f"lower_{pct}", f"upper_{pct}"]
        names, rows = self.cell_ids if self.cell_ids is not None else (["cell"], [(c,) for c in self.cell_labels])
        names = [f"{n}_id" if n in stats else n for n in names]
        data = {n: [r[j] for r in rows] for j, n in enumerate(names)}
        for name, v in zip(stats, (self.release, self.mean, self.sd, self.lower, self.upper)):
            data[name] = [repr(float(a)) for a in v]
        buf = io.StringIO()
        pd.DataFrame(data, dtype=object).to_csv(buf, index=False, lineterminator="\n")
        return buf.getvalue()

    def write(self, output) -> dict:
        """Write ``posterior.nc``, ``cells.csv``, ``summary.csv``, ``summary.txt`` and ``fit.png``
        (:func:`~privinfer.workflow.figures.plot_fit`: posterior intervals against the release,
        per group) to the folder ``output`` (created); returns and records the paths."""
        import arviz as az

        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        nc = out / "posterior.nc"
        az.to_netcdf(self.idata, str(nc))
        cells = out / "cells.csv"
        write_files([(cells, self.cells_table())], overwrite=True)
        sc = out / "summary.csv"
        self.summary.to_csv(sc)
        st = out / "summary.txt"
        st.write_text(self.summary.to_string() + "\n", encoding="utf-8")
        figure = plot_fit(self, out / "fit.png")
        self.files = {"posterior": nc, "cells": cells, "summary": sc, "summary text": st, "figure": figure}
        return self.files


def fit(release: Release, model="county", *, draws: int = 1000, tune: int = 1000, chains: int = 2,
        cores: int = 1, seed: int | None = None, progressbar: bool = True, step=None, output=None,
        interval: float = INTERVAL, echo=None, **sample_options) -> FitResult:
    """Build ``model`` for ``release``, sample it with PyMC, and summarize the cells.

    Parameters
    ----------
    release
        the :class:`~privinfer.workflow.Release` (from ``make_release`` or ``read_release``).
    model
        ``"county"``, ``"contingency"``, or a callable ``model(release) -> pm.Model`` whose
        latent cells are the variable ``"x"``.
    draws, tune, chains, cores, progressbar
        passed to ``pm.sample``.
    seed
        sampler seed; ``None`` draws one from OS entropy (recorded in the result).
    step
        ``None`` -- :func:`privinfer.pymc.lattice_steps` for the integer latents, NUTS for
        the rest; or a callable ``step(model)`` returning the step methods (e.g.
        ``lambda m: lattice_steps(m, step_class=LatticeGibbs)``).
    output
        folder for ``posterior.nc``, ``cells.csv``, ``summary.csv``, ``summary.txt``
        ``fit.png`` (``None``: write nothing).
    interval
        probability of the per-cell equal-tailed intervals.
    echo
        a ``print``-like callable for a progress line (``None``: silent).
    sample_options
        further keywords of ``pm.sample`` (e.g. ``init="jitter+adapt_full"``).

    Notes
    -----
    Continuous latents start at the release projected on the fibre (:func:`start_near_release`).
    """
    import arviz as az
    import pymc as pm

    from ..pymc import lattice_steps

    if not isinstance(release, Release):
        raise TypeError("fit needs a privinfer Release (make_release or read_release)")
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    seed = int(seed)
    pm_model = build_model(release, model)
    if "x" not in pm_model.named_vars:
        raise ValueError("the model has no latent 'x' of the released cells")
    start_near_release(pm_model, release.y)
    model_name = model if isinstance(model, str) else getattr(model, "__name__", "custom")
    if echo is not None:
        echo(f"fitting the {model_name} model to {release.n} released cells "
             f"({release.mechanism_name}, invariant {release.invariant_text}); seed {seed}")
    with pm_model:
        steps = lattice_steps(pm_model) if step is None else step(pm_model)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, step=steps or None,
                          random_seed=seed, progressbar=progressbar, compute_convergence_checks=False,
                          **sample_options)

    idata = label_cells(idata, release)
    xd = idata.posterior["x"].values.reshape(-1, release.n)
    lo, hi = equal_tailed_interval(xd, interval)
    free = [v.name for v in pm_model.free_RVs]
    names = [n for n in free if n in idata.posterior] + [
        n for n in ("x", "log_odds_ratio") if n in idata.posterior and n not in free]
    summ = az.summary(idata, var_names=names)
    result = FitResult(model_name, seed, release.labels, release.y, xd.mean(0), xd.std(0), lo, hi,
                       float("nan"), float("nan"), idata=idata, summary=summ, interval=interval,
                       cell_ids=release.cell_ids(), groups=cell_groups(release))
    result.rhat_max, result.ess_bulk_min = result.diagnostics()
    if output is not None:
        result.write(output)
    return result


def label_cells(idata, release: Release):
    """``idata`` with the cells of ``x`` and ``y`` labelled by the release's ids.

    In every group holding ``x`` or ``y`` with a default, unnamed dimension of the release's
    length (``x_dim_0``), that dimension becomes :data:`CELL_DIM` indexed by the printable
    labels (``release.labels``; by number if they repeat) and gets one coordinate per id
    column of :meth:`Release.cell_ids` (prefixed ``id_`` if the name is taken).  Dimensions a
    model named itself are left alone.
    """
    labels = list(release.labels)
    names, rows = release.cell_ids()
    index = labels if len(set(labels)) == len(labels) else list(range(release.n))
    for group in idata.groups():
        ds = idata[group]
        if CELL_DIM in ds.dims:
            # the model named the cell dimension itself (with the release's labels): add the
            # id columns as coordinates along it
            if ds.sizes[CELL_DIM] != release.n:
                continue
            coords = {}
        else:
            targets = [v for v in ("x", "y") if v in ds.data_vars and ds[v].dims
                       and ds[v].dims[-1] == f"{v}_dim_0" and ds.sizes[f"{v}_dim_0"] == release.n]
            if not targets:
                continue
            renamed = {v: ds[v].drop_vars(f"{v}_dim_0", errors="ignore").rename({f"{v}_dim_0": CELL_DIM})
                       for v in targets}
            ds = ds.drop_vars(targets + [f"{v}_dim_0" for v in targets if f"{v}_dim_0" in ds.coords]).assign(renamed)
            coords = {CELL_DIM: index}
        for j, name in enumerate(names):
            key = name if name not in ds.variables and name not in ds.dims and name != CELL_DIM else f"id_{name}"
            if key in ds.variables or key in ds.dims or key in coords:
                continue
            coords[key] = (CELL_DIM, [r[j] for r in rows])
        idata[group] = ds.assign_coords(coords)
    return idata


def fit_release(csv_path, *, metadata=None, model: str = "county", draws: int = 1000, tune: int = 1000,
                chains: int = 2, cores: int = 1, seed: int | None = None, output="privinfer-output/fit",
                progressbar: bool = True, echo=None) -> FitResult:
    """Read a release from ``csv_path`` (and its sidecar) and :func:`fit` ``model`` to it."""
    rel = read_release(csv_path, metadata)
    return fit(rel, model, draws=draws, tune=tune, chains=chains, cores=cores, seed=seed,
               progressbar=progressbar, output=output, echo=echo)
