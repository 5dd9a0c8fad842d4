r"""The demo: a private release of the delinquent-children table and honest inference on it.

:func:`run_demo` is the main job of ``privinfer demo``, built on the workflow spine
(:func:`~privinfer.workflow.make_release` and :func:`~privinfer.workflow.fit`):

1. **Curator.**  The 4 x 4 delinquent-children table (FCSM 2005; Integer subspace DP,
   Dharangutte et al. 2023, Sec. 6 and App. E.3) is released with the generalized Laplace
   mechanism on the lattice of its row and column margins
   (:class:`~privinfer.mechanisms.GeneralizedLaplace`, l1 norm, Def. 9 / Thm 10): the release
   is an integer table with exactly the published margins ``t``.
2. **Analyst.**  :func:`privinfer.models.contingency_table_model` -- multinomial cells with
   log-linear probabilities, the margins conditioned on exactly, the exact likelihood of the
   release -- is fitted with PyMC: :class:`~privinfer.pymc.LatticeGibbs` (exact
   conditional draws along each 2 x 2 lattice move; it mixes several times faster than the
   Metropolis moves on this table) for the
   integer table (moves on the margins' lattice) and NUTS for the log-linear parameters.
3. **Report** (:class:`DemoReport`): truth vs posterior mean and 90% interval per cell,
   R-hat and bulk ESS, the fraction of lattice moves that changed the table, the posterior of the log odds
   ratios, and the coverage check.

Coverage check
--------------
The 90% intervals are equal-tailed posterior intervals ``[q_0.05, q_0.95]`` of the integer
cells (``inverted_cdf`` quantiles, so each has posterior probability at least 0.9).  If the
posterior is calibrated, each true cell lies inside its interval with probability about 0.9,
so about ``0.9 * 16 = 14.4`` of the 16 cells should (binomial sd ``sqrt(16 * 0.9 * 0.1) = 1.2``
if the cells were independent; they are not -- the margins tie them together -- so this is a
rough yardstick, not a test).  The report states the count and :attr:`DemoReport.coverage`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fitting import INTERVAL, equal_tailed_interval

__all__ = ["DemoReport", "run_demo", "DEFAULT_EPSILON", "DEFAULT_DRAWS", "DEFAULT_TUNE", "INTERVAL",
           "coverage_tail_probability", "sample_log_odds_ratios", "equal_tailed_interval"]

#: Privacy loss of the demo's release (per unit of l1 distance between tables with the same margins).
DEFAULT_EPSILON = 0.5
#: Default draws and tuning iterations per chain (2 chains): about a minute on a laptop, and
#: enough for R-hat near 1.01 and a bulk ESS of a few hundred for most cells.
DEFAULT_DRAWS = 2000
DEFAULT_TUNE = 1000


def sample_log_odds_ratios(table: np.ndarray) -> np.ndarray:
    r"""Log odds ratios of a table relative to its first row and column:
    :math:`\log\frac{x_{ij}x_{00}}{x_{i0}x_{0j}}`, shape (r-1, c-1) (``nan`` if a cell involved is 0)."""
    x = np.asarray(table, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        lx = np.log(x)
        out = lx[1:, 1:] + lx[0, 0] - lx[1:, :1] - lx[:1, 1:]
    out[~np.isfinite(out)] = np.nan
    return out


def coverage_tail_probability(k: int, n: int, prob: float = INTERVAL) -> float:
    """``P(Bin(n, prob) <= k)``: how surprising ``k`` covered cells out of ``n`` would be for
    calibrated, independent intervals."""
    from scipy import stats

    return float(stats.binom.cdf(k, n, prob))


@dataclass
class DemoReport:
    """Everything the demo reports (arrays are 4 x 4 tables unless stated).

    Attributes
    ----------
    truth, release
        the confidential table and its private release.
    mean, lower, upper
        posterior mean and equal-tailed ``interval`` bounds per cell.
    log_odds_ratio_mean, log_odds_ratio_lower, log_odds_ratio_upper
        (3, 3) posterior summary
        of the model's log odds ratios ``gamma`` (relative to the first row and column).
    truth_log_odds_ratio
        (3, 3) sample log odds ratios of the true table (for comparison;
        the model's ``gamma`` are the log odds ratios of the cell probabilities).
    rhat_max, ess_bulk_min
        worst R-hat and smallest bulk ESS over the cells and ``gamma``.
    lattice_acceptance
        fraction of the lattice sampler's moves that changed the table, after tuning.
    divergences
        NUTS divergences after tuning.
    """

    seed: int
    epsilon: float
    guarantee: str
    burn_in: int | None
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    truth: np.ndarray
    release: np.ndarray
    margins: np.ndarray
    mean: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    log_odds_ratio_mean: np.ndarray
    log_odds_ratio_lower: np.ndarray
    log_odds_ratio_upper: np.ndarray
    truth_log_odds_ratio: np.ndarray
    rhat_max: float
    ess_bulk_min: float
    lattice_acceptance: float
    divergences: int
    draws: int
    tune: int
    chains: int
    elapsed_seconds: float
    figure: Path | None = None
    report_file: Path | None = None
    interval: float = INTERVAL
    idata: object = field(default=None, repr=False)

    @property
    def inside(self) -> np.ndarray:
        """Whether each true cell lies in its posterior interval (bounds included)."""
        return (self.lower <= self.truth) & (self.truth <= self.upper)

    @property
    def n_inside(self) -> int:
        return int(self.inside.sum())

    @property
    def n_cells(self) -> int:
        return int(self.truth.size)

    @property
    def coverage(self) -> float:
        """Fraction of true cells inside their intervals (nominal: ``interval``)."""
        return self.n_inside / self.n_cells

    @property
    def margins_kept(self) -> bool:
        """The release has exactly the true row and column totals."""
        return bool(np.array_equal(self.release.sum(1), self.truth.sum(1))
                    and np.array_equal(self.release.sum(0), self.truth.sum(0)))

    def text(self) -> str:
        """The printed report."""
        pct = int(round(100 * self.interval))
        L = []
        L.append("privinfer demo: delinquent children by county x education of household head (FCSM 2005)")
        L.append(f"release : generalized Laplace on the margins' lattice, epsilon = {self.epsilon:g}"
                 + (f" (sampler burn-in {self.burn_in} sweeps, coupling-certified)" if self.burn_in else ""))
        L.append(f"          guarantee: {self.guarantee}")
        L.append(f"          row and column totals kept exactly: {'yes' if self.margins_kept else 'NO'}")
        L.append(f"model   : contingency_table_model (multinomial, log-linear), "
                 f"{self.chains} chains x {self.draws} draws (tune {self.tune}), seed {self.seed}")
        L.append("")
        w = max(len(r) for r in self.rows)
        L.append(f"{'county':<{w}}  {'education':<9}  {'truth':>5}  {'release':>7}  {'post. mean':>10}  "
                 f"{f'{pct}% interval':>13}  in")
        for i, r in enumerate(self.rows):
            for j, c in enumerate(self.columns):
                iv = f"[{self.lower[i, j]:g}, {self.upper[i, j]:g}]"
                L.append(f"{r:<{w}}  {c:<9}  {self.truth[i, j]:>5d}  {self.release[i, j]:>7d}  "
                         f"{self.mean[i, j]:>10.1f}  {iv:>13}  {'yes' if self.inside[i, j] else 'NO'}")
        L.append("")
        p_low = coverage_tail_probability(self.n_inside, self.n_cells, self.interval)
        L.append(f"coverage: {self.n_inside} of {self.n_cells} true cells inside their {pct}% intervals "
                 f"({100 * self.coverage:.0f}%; nominal {pct}%, i.e. about {self.interval * self.n_cells:.1f} "
                 f"+/- {np.sqrt(self.n_cells * self.interval * (1 - self.interval)):.1f}; "
                 f"P(Bin({self.n_cells}, {self.interval:g}) <= {self.n_inside}) = {p_low:.2f})")
        L.append(f"sampler : max R-hat {self.rhat_max:.3f}, min bulk ESS {self.ess_bulk_min:.0f}, "
                 f"lattice moves that changed the table {self.lattice_acceptance:.2f}, NUTS divergences {self.divergences}")
        if self.rhat_max > 1.01:
            L.append("          note: R-hat above 1.01 -- run longer (--draws) for reliable numbers")
        L.append("")
        L.append(f"association: log odds ratio of cell (county, education) vs ({self.rows[0]}, {self.columns[0]}); "
                 f"posterior mean [{pct}% interval] (true table's sample log odds ratio)")
        for i, r in enumerate(self.rows[1:]):
            for j, c in enumerate(self.columns[1:]):
                tl = self.truth_log_odds_ratio[i, j]
                L.append(f"  {r:<{w}} {c:<9}  {self.log_odds_ratio_mean[i, j]:+6.2f} "
                         f"[{self.log_odds_ratio_lower[i, j]:+6.2f}, {self.log_odds_ratio_upper[i, j]:+6.2f}]"
                         f"  ({tl:+.2f})")
        L.append("")
        if self.figure is not None:
            L.append(f"figure  : {self.figure}")
        if self.report_file is not None:
            L.append(f"report  : {self.report_file}")
        L.append(f"time    : {self.elapsed_seconds:.0f} s; reproduce with: privinfer demo --seed {self.seed}"
                 + (f" --epsilon {self.epsilon:g}" if self.epsilon != DEFAULT_EPSILON else "")
                 + (f" --draws {self.draws}" if self.draws != DEFAULT_DRAWS else "")
                 + (f" --tune {self.tune}" if self.tune != DEFAULT_TUNE else "")
                 + (f" --chains {self.chains}" if self.chains != 2 else ""))
        return "\n".join(L)


def _figure(report: DemoReport, path: Path) -> Path:
    """Two panels: per-cell truth / release / posterior interval; log odds ratios."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(14, 5.6), layout="constrained")
    ax, bx = fig.subplots(1, 2, width_ratios=[16, 10])
    k = np.arange(report.n_cells)
    pct = int(round(100 * report.interval))
    mean, lo, hi = report.mean.ravel(), report.lower.ravel(), report.upper.ravel()
    ax.errorbar(k, mean, yerr=[mean - lo, hi - mean], fmt="o", color="tab:blue", capsize=3,
                label=f"posterior mean and {pct}% interval")
    ax.plot(k, report.release.ravel(), "x", color="tab:orange", ms=8, mew=2, label="private release")
    ax.plot(k, report.truth.ravel(), "s", mfc="none", mec="black", ms=8, label="true count")
    labels = [f"{r}\n{c}" for r in report.rows for c in report.columns]
    ax.set_xticks(k, labels, fontsize=8)
    for b in range(1, len(report.rows)):
        ax.axvline(b * len(report.columns) - 0.5, color="0.85", lw=1)
    ax.set_ylabel("delinquent children (count)")
    ax.set_title(f"Cells: {report.n_inside} of {report.n_cells} true counts inside the {pct}% intervals "
                 f"(epsilon = {report.epsilon:g}, margins kept exactly)", fontsize=10)
    ax.legend(fontsize=9, loc="upper right")

    j = np.arange(report.log_odds_ratio_mean.size)
    m = report.log_odds_ratio_mean.ravel()
    bx.errorbar(j, m, yerr=[m - report.log_odds_ratio_lower.ravel(), report.log_odds_ratio_upper.ravel() - m],
                fmt="o", color="tab:blue", capsize=3, label=f"posterior mean and {pct}% interval")
    bx.plot(j, report.truth_log_odds_ratio.ravel(), "s", mfc="none", mec="black", ms=8,
            label="true table (sample log odds ratio)")
    bx.axhline(0.0, color="0.6", lw=1, ls="--")
    bx.set_xticks(j, [f"{r}\n{c}" for r in report.rows[1:] for c in report.columns[1:]], fontsize=8,
                  rotation=30, ha="right", rotation_mode="anchor")
    bx.set_ylabel(f"log odds ratio vs ({report.rows[0]}, {report.columns[0]})")
    bx.set_title("Association: posterior of the log odds ratios", fontsize=10)
    bx.legend(fontsize=9, loc="upper center", bbox_to_anchor=(0.5, -0.22), ncol=1)
    fig.suptitle("privinfer demo: private release of the delinquent-children table and its posterior", fontsize=12)
    fig.savefig(path, dpi=150)
    return path


def run_demo(draws: int = DEFAULT_DRAWS, tune: int = DEFAULT_TUNE, chains: int = 2, cores: int = 1, seed: int | None = None,
             output="privinfer-output/demo", epsilon: float | None = None, progressbar: bool = True,
             echo=None) -> DemoReport:
    """Release the delinquent-children table, fit the contingency model, and report.

    Parameters
    ----------
    draws, tune, chains, cores
        passed to ``pm.sample``.
    seed
        one seed for everything (release and sampler); ``None`` draws one from OS entropy
        (it is in the report, so a run can be repeated).
    output
        folder for ``demo.png`` and ``report.txt`` (created); ``None`` saves nothing.
    epsilon
        privacy loss of the release (default :data:`DEFAULT_EPSILON`).
    progressbar
        show PyMC's progress bar.
    echo
        a ``print``-like callable for progress messages (``None``: silent).
    """
    from .. import datasets
    from .. import invariants as I
    from ..mechanisms import GeneralizedLaplace
    from ..pymc import lattice_steps
    from ..pymc import LatticeGibbs
    from .fitting import fit
    from .release import make_release

    say = echo or (lambda *a, **k: None)
    t0 = time.perf_counter()
    eps = DEFAULT_EPSILON if epsilon is None else epsilon
    if seed is None:
        seed = int(np.random.SeedSequence().entropy % (2**63))
    seed = int(seed)
    release_seq, sample_seq = np.random.SeedSequence(seed).spawn(2)

    truth = datasets.delinquent_children()
    shape = truth.shape
    mech = GeneralizedLaplace(I.margins(shape, [(0,), (1,)]), eps, norm="l1")
    say(f"seed {seed}: releasing the 4 x 4 table with the generalized Laplace mechanism (epsilon = {eps:g}) ...")
    # make_release checks that the release keeps the margins, exactly
    rel = make_release(truth, mech, rng=np.random.default_rng(release_seq),
                       ids=(datasets.DELINQUENT_COUNTIES, datasets.DELINQUENT_EDUCATION), source="FCSM 2005")
    y, t = rel.y, rel.t

    say("fitting the contingency-table model (LatticeGibbs for the cells, NUTS for the log-linear terms) ...")
    result = fit(rel, "contingency", draws=draws, tune=tune, chains=chains, cores=cores,
                 seed=int(sample_seq.generate_state(1, np.uint64)[0] % (2**63)), progressbar=progressbar,
                 step=lambda model: lattice_steps(model, step_class=LatticeGibbs))
    idata = result.idata

    g = result.draws("log_odds_ratio")
    glo, ghi = equal_tailed_interval(g)
    # cells fixed by the data (all draws equal) have undefined R-hat/ESS: those rows are ignored
    rhat_max, ess_min = result.diagnostics("x", "log_odds_ratio")
    ss = idata.sample_stats
    acc = float(ss["lattice_accept"].mean()) if "lattice_accept" in ss else float("nan")
    div = int(ss["diverging"].sum()) if "diverging" in ss else 0

    report = DemoReport(
        seed=seed, epsilon=float(eps), guarantee=f"{mech.guarantee.definition} ({mech.guarantee.reference})",
        burn_in=mech.certificate.burn_in if mech.certificate is not None else None,
        rows=tuple(datasets.DELINQUENT_COUNTIES), columns=tuple(datasets.DELINQUENT_EDUCATION),
        truth=truth, release=y.reshape(shape), margins=t,
        mean=result.mean.reshape(shape), lower=result.lower.reshape(shape), upper=result.upper.reshape(shape),
        log_odds_ratio_mean=g.mean(axis=0), log_odds_ratio_lower=glo, log_odds_ratio_upper=ghi,
        truth_log_odds_ratio=sample_log_odds_ratios(truth),
        rhat_max=rhat_max, ess_bulk_min=ess_min,
        lattice_acceptance=acc, divergences=div, draws=int(draws), tune=int(tune), chains=int(chains),
        elapsed_seconds=0.0, idata=idata,
    )
    if output is not None:
        out = Path(output)
        out.mkdir(parents=True, exist_ok=True)
        report.figure = _figure(report, out / "demo.png")
        report.report_file = out / "report.txt"
    report.elapsed_seconds = time.perf_counter() - t0
    if report.report_file is not None:
        report.report_file.write_text(report.text() + "\n", encoding="utf-8")
    return report
