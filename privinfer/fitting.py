"""Fit a reference model to a release read from disk (the job of ``privinfer fit``).

The release CSV and its metadata sidecar (:mod:`privinfer.release_files`) give the released
values ``y``, the invariant ``C x = t`` with its published ``t``, and the mechanism, whose
exact likelihood ``p(y | x)`` enters the model.  Models (:mod:`privinfer.models`):

``county``
    :func:`~privinfer.models.county_population_model` -- counts within a total or within
    groups (``--invariant total`` or ``groups:COLUMN`` releases).
``contingency``
    :func:`~privinfer.models.contingency_table_model` -- a two-way table with its row and
    column totals kept (``--invariant margins`` or ``margins:ROW,COL`` releases).

Integer latents are sampled with :func:`privinfer.pymc.lattice_steps` (LatticeMetropolis),
continuous parameters with NUTS.  Outputs: ``posterior.nc`` (``arviz.to_netcdf``),
``cells.csv`` (per released cell: labels, release, posterior mean, sd and 90% interval),
``summary.csv`` / ``summary.txt`` (``arviz.summary`` of the model's free parameters and
named deterministics).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .release_files import Release, ReleaseFileError, read_release

__all__ = ["FitResult", "fit_release", "build_model"]

#: Posterior interval probability of ``cells.csv``.
INTERVAL = 0.9


def build_model(release: Release, model: str):
    """The ``pm.Model`` of ``model`` ("county" or "contingency") for ``release``."""
    from .models import contingency_table_model, county_population_model

    if not release.metadata.get("transparent", True):
        raise ReleaseFileError(
            f"mechanism {release.metadata['mechanism'].get('name')} is not transparent (its noise law "
            "depends on the data), so no exact likelihood exists to fit a model with"
        )
    kind = release.table.spec.kind
    if release.invariant is None:
        raise ReleaseFileError(
            "the reference models condition on published totals, but this release keeps no invariant "
            "(it was made with --invariant none)"
        )
    if model == "county":
        if kind not in ("total", "groups"):
            raise ReleaseFileError("--model county needs a release made with --invariant total or groups:COLUMN "
                                   "(use --model contingency for a two-way table)")
        return county_population_model(release.y, release.mechanism, release.invariant, release.t)
    if model == "contingency":
        if kind != "margins":
            raise ReleaseFileError("--model contingency needs a two-way table released with --invariant margins "
                                   "or margins:ROW,COL")
        return contingency_table_model(release.y, release.mechanism, release.table.shape,
                                       release.invariant, release.t)
    raise ReleaseFileError(f"unknown model '{model}' (choose county or contingency)")


@dataclass
class FitResult:
    """What ``privinfer fit`` produced: the posterior, per-cell summaries and the files written."""

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

    def text(self) -> str:
        pct = int(round(100 * INTERVAL))
        L = [f"model {self.model}: posterior of the {len(self.release)} confidential cells (seed {self.seed})"]
        w = max([len(s) for s in self.cell_labels] + [4])
        L.append(f"{'cell':<{w}}  {'release':>10}  {'post. mean':>10}  {'sd':>8}  {f'{pct}% interval':>21}")
        for lab, y, m, s, lo, hi in zip(self.cell_labels, self.release, self.mean, self.sd, self.lower, self.upper):
            L.append(f"{lab:<{w}}  {y:>10.6g}  {m:>10.2f}  {s:>8.2f}  {f'[{lo:.6g}, {hi:.6g}]':>21}")
        L.append(f"max R-hat {self.rhat_max:.3f}, min bulk ESS {self.ess_bulk_min:.0f}"
                 + ("  (R-hat above 1.01: run longer with --draws/--tune)" if self.rhat_max > 1.01 else ""))
        for k, p in self.files.items():
            L.append(f"{k}: {p}")
        return "\n".join(L)


def _cell_labels(release: Release) -> list[str]:
    tab = release.table
    if tab.shape is not None:
        return [f"{r} / {c}" for r in tab.row_labels for c in tab.col_labels]
    if tab.label_rows and tab.label_rows[0]:
        return [" / ".join(lab) for lab in tab.label_rows]
    return [f"cell {i + 1}" for i in range(tab.n)]


def fit_release(csv_path, *, metadata=None, model: str = "county", draws: int = 1000, tune: int = 1000,
                chains: int = 2, cores: int = 1, seed: int | None = None, output="privinfer-output/fit",
                progressbar: bool = True, echo=None) -> FitResult:
    """Read a release, build ``model``, sample, and write the outputs to ``output``."""
    import arviz as az
    import pymc as pm

    from .pymc import lattice_steps

    say = echo or (lambda *a, **k: None)
    rel = read_release(csv_path, metadata)
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    seed = int(seed)
    pm_model = build_model(rel, model)
    say(f"fitting the {model} model to {rel.table.n} released cells "
        f"({rel.metadata['mechanism']['name']}, invariant {rel.table.spec}); seed {seed}")
    with pm_model:
        steps = lattice_steps(pm_model)
        idata = pm.sample(draws=draws, tune=tune, chains=chains, cores=cores, step=steps or None,
                          random_seed=seed, progressbar=progressbar, compute_convergence_checks=False)

    xd = idata.posterior["x"].values.reshape(-1, rel.table.n)
    a = (1 - INTERVAL) / 2
    lo = np.quantile(xd, a, axis=0, method="inverted_cdf")
    hi = np.quantile(xd, 1 - a, axis=0, method="inverted_cdf")
    free = [v.name for v in pm_model.free_RVs]
    names = [n for n in free if n in idata.posterior] + [
        n for n in ("x", "log_odds_ratio") if n in idata.posterior and n not in free]
    summ = az.summary(idata, var_names=names)
    rhat = summ["r_hat"].to_numpy(dtype=float)
    ess = summ["ess_bulk"].to_numpy(dtype=float)
    labels = _cell_labels(rel)
    result = FitResult(model, seed, labels, rel.y, xd.mean(0), xd.std(0), lo, hi,
                       float(np.nanmax(rhat)) if np.any(np.isfinite(rhat)) else float("nan"),
                       float(np.nanmin(ess)) if np.any(np.isfinite(ess)) else float("nan"),
                       idata=idata, summary=summ)
    if output is not None:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        nc = out / "posterior.nc"
        az.to_netcdf(idata, str(nc))
        cells = out / "cells.csv"
        with open(cells, "w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            pct = int(round(100 * INTERVAL))
            w.writerow(["cell", "release", "posterior_mean", "posterior_sd", f"lower_{pct}", f"upper_{pct}"])
            for row in zip(labels, rel.y, result.mean, result.sd, lo, hi):
                w.writerow([row[0]] + [repr(float(v)) for v in row[1:]])
        sc = out / "summary.csv"
        summ.to_csv(sc)
        st = out / "summary.txt"
        st.write_text(summ.to_string() + "\n", encoding="utf-8")
        result.files = {"posterior": nc, "cells": cells, "summary": sc, "summary text": st}
    return result
