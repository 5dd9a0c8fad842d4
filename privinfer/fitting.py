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

__all__ = ["FitResult", "fit_release", "build_model", "start_near_release"]

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


def start_near_release(model, y) -> dict:
    r"""Start continuous latents on ``{C x = t}`` at the release instead of the least-norm point.

    For each :func:`~privinfer.pymc.affine_latent` ``x = x0 + Q_N z`` on as many cells as the
    release, the candidate starts are ``x0 + lambda Q_N Q_N^T (y - x0)`` for
    ``lambda = 1, 0.9, 0.5, 0.25, 0.1`` (``lambda = 1``: the orthogonal projection of the release
    onto the fibre -- the release itself when the mechanism keeps the invariant); the first
    with a finite model log-density is set as the initial value of ``z``.  When counts differ by
    orders of magnitude the least-norm point (every cell at its group mean) can sit thousands of
    noise standard deviations from the release, where NUTS cannot adapt.  Returns the starts set.
    """
    from .pymc.registry import model_registry

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
                model.set_initval(model[zname], lam * z_full)
                starts[zname] = lam * z_full
                break
    return starts


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
    start_near_release(pm_model, rel.y)
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
