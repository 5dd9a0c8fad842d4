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
   R-hat and bulk ESS, the fraction of lattice moves that changed the table, the association,
   and the coverage check.

Association: two estimands
--------------------------
The report shows two posteriors of log odds ratios (each cell against the first row and
column, as the model is parametrized), and says which is which:

* the *confidential table's* log odds ratios -- a finite-population quantity, the statistic
  of the table ``x`` itself with the Haldane--Anscombe correction (1/2 added to each of the
  four cells; :func:`privinfer.models.contingency.table_log_odds_ratios`), computed from the
  posterior draws of ``x`` (the model's ``table_log_odds_ratio``).  The true table has a
  value of it, and the report compares the two;
* the *model parameter* ``gamma`` (``log_odds_ratio``: log odds ratios of the cell
  probabilities).  No table reveals it exactly -- even a known ``gamma`` leaves the table's
  statistic spread by multinomial sampling -- so the true table's statistic is not a true
  value for it, and the report does not compare them.

Coverage check
--------------
The 90% intervals are equal-tailed posterior intervals ``[q_0.05, q_0.95]``
(``inverted_cdf`` quantiles: sample values, so an interval of a discrete quantity has
posterior probability at least 0.9).  If the posterior is calibrated, each true cell lies
inside its interval with probability about 0.9 (at least 0.9 for a discrete quantity), so
about ``0.9 * 16 = 14.4`` of the 16 cells should (binomial sd ``sqrt(16 * 0.9 * 0.1) = 1.2``
if the cells were independent; they are not -- the margins tie them together -- so this is a
rough yardstick, not a test), and about ``0.9 * 9 = 8.1`` of the 9 true table's log odds
ratios (also dependent: they share the reference row and column).  The report states both
counts, :attr:`DemoReport.coverage` and :attr:`DemoReport.table_log_odds_ratio_coverage`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .fitting import INTERVAL, equal_tailed_interval

__all__ = ["DemoReport", "run_demo", "DEFAULT_EPSILON", "DEFAULT_DRAWS", "DEFAULT_TUNE", "INTERVAL",
           "coverage_tail_probability", "equal_tailed_interval"]

#: Privacy loss of the demo's release (per unit of l1 distance between tables with the same margins).
DEFAULT_EPSILON = 0.5
#: Default draws and tuning iterations per chain (2 chains): about a minute on a laptop, and
#: enough for R-hat near 1.01 and a bulk ESS of a few hundred for most cells.
DEFAULT_DRAWS = 2000
DEFAULT_TUNE = 1000


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
    table_log_odds_ratio_mean, table_log_odds_ratio_lower, table_log_odds_ratio_upper
        (3, 3) posterior summary of the confidential table's log odds ratios (finite
        population; relative to the first row and column, 1/2 added to each of the four
        cells), from the draws of ``x``.
    truth_table_log_odds_ratio
        (3, 3) the same statistic of the true table: what those intervals should cover.
    log_odds_ratio_mean, log_odds_ratio_lower, log_odds_ratio_upper
        (3, 3) posterior summary of the model parameter ``gamma``, the log odds ratios of
        the cell probabilities (no true value to compare with).
    rhat_max, ess_bulk_min
        worst R-hat and smallest bulk ESS over the cells, ``gamma`` and the table's log
        odds ratios.
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
    table_log_odds_ratio_mean: np.ndarray
    table_log_odds_ratio_lower: np.ndarray
    table_log_odds_ratio_upper: np.ndarray
    truth_table_log_odds_ratio: np.ndarray
    log_odds_ratio_mean: np.ndarray
    log_odds_ratio_lower: np.ndarray
    log_odds_ratio_upper: np.ndarray
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
    def table_log_odds_ratio_inside(self) -> np.ndarray:
        """Whether each of the true table's log odds ratios lies in its posterior interval."""
        return ((self.table_log_odds_ratio_lower <= self.truth_table_log_odds_ratio)
                & (self.truth_table_log_odds_ratio <= self.table_log_odds_ratio_upper))

    @property
    def n_table_log_odds_ratio_inside(self) -> int:
        return int(self.table_log_odds_ratio_inside.sum())

    @property
    def table_log_odds_ratio_coverage(self) -> float:
        """Fraction of the true table's log odds ratios inside their intervals (nominal: ``interval``)."""
        return self.n_table_log_odds_ratio_inside / self.truth_table_log_odds_ratio.size

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
        L.extend(self._coverage_lines())
        L.append(f"sampler : max R-hat {self.rhat_max:.3f}, min bulk ESS {self.ess_bulk_min:.0f}, "
                 f"lattice moves that changed the table {self.lattice_acceptance:.2f}, NUTS divergences {self.divergences}")
        if self.rhat_max > 1.01:
            L.append("          note: R-hat above 1.01 -- run longer (--draws) for reliable numbers")
        L.append("")
        L.extend(self._association_lines(w))
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


    def _coverage_lines(self) -> list[str]:
        """The coverage check: true cells and true table's log odds ratios inside their intervals."""
        pct = int(round(100 * self.interval))
        n_lor = self.truth_table_log_odds_ratio.size
        k_lor = self.n_table_log_odds_ratio_inside
        p_low = coverage_tail_probability(self.n_inside, self.n_cells, self.interval)
        p_lor = coverage_tail_probability(k_lor, n_lor, self.interval)
        return [
            f"coverage: {self.n_inside} of {self.n_cells} true cells inside their {pct}% intervals "
            f"({100 * self.coverage:.0f}%; nominal {pct}%, i.e. about {self.interval * self.n_cells:.1f} "
            f"+/- {np.sqrt(self.n_cells * self.interval * (1 - self.interval)):.1f}; "
            f"P(Bin({self.n_cells}, {self.interval:g}) <= {self.n_inside}) = {p_low:.2f})",
            f"          {k_lor} of {n_lor} of the true table's log odds ratios inside their {pct}% intervals "
            f"({100 * self.table_log_odds_ratio_coverage:.0f}%; about {self.interval * n_lor:.1f} expected; "
            f"P(Bin({n_lor}, {self.interval:g}) <= {k_lor}) = {p_lor:.2f})",
        ]

    def _association_lines(self, w: int) -> list[str]:
        """Both log odds ratio posteriors per cell, each labelled with what it estimates."""
        pct = int(round(100 * self.interval))

        def summary(mean, lo, hi):
            return f"{mean:+.2f} [{lo:+.2f}, {hi:+.2f}]"

        rows = []
        for i, r in enumerate(self.rows[1:]):
            for j, c in enumerate(self.columns[1:]):
                rows.append((r, c,
                             summary(self.table_log_odds_ratio_mean[i, j], self.table_log_odds_ratio_lower[i, j],
                                     self.table_log_odds_ratio_upper[i, j]),
                             f"{self.truth_table_log_odds_ratio[i, j]:+.2f}",
                             "yes" if self.table_log_odds_ratio_inside[i, j] else "NO",
                             summary(self.log_odds_ratio_mean[i, j], self.log_odds_ratio_lower[i, j],
                                     self.log_odds_ratio_upper[i, j])))
        wt = max([len(x[2]) for x in rows] + [len("confidential table")])
        L = [f"association: log odds ratio of cell (county, education) vs ({self.rows[0]}, {self.columns[0]}); "
             f"posterior mean [{pct}% interval]",
             "  confidential table: the log odds ratio of the table itself (finite population; 0.5 added to each",
             "                      of the four cells), compared with the true table's value (truth, in)",
             "  model parameter   : gamma, the log odds ratio of the cell probabilities in the log-linear model;",
             "                      no finite table shows it exactly, so it has no true value to compare with",
             f"  {'':<{w}} {'':<9}  {'confidential table':<{wt}}  {'truth':>5}  in   model parameter"]
        for r, c, fp, truth, inside, par in rows:
            L.append(f"  {r:<{w}} {c:<9}  {fp:<{wt}}  {truth:>5}  {inside:<3}  {par}")
        return L


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
    m = report.table_log_odds_ratio_mean.ravel()
    bx.errorbar(j - 0.15, m, yerr=[m - report.table_log_odds_ratio_lower.ravel(),
                                   report.table_log_odds_ratio_upper.ravel() - m],
                fmt="o", color="tab:blue", capsize=3, label=f"confidential table's log odds ratio: posterior mean "
                f"and {pct}% interval")
    bx.plot(j - 0.15, report.truth_table_log_odds_ratio.ravel(), "s", mfc="none", mec="black", ms=8,
            label="true table's log odds ratio (0.5 added to each cell)")
    g = report.log_odds_ratio_mean.ravel()
    bx.errorbar(j + 0.15, g, yerr=[g - report.log_odds_ratio_lower.ravel(), report.log_odds_ratio_upper.ravel() - g],
                fmt="D", color="0.55", ms=4, capsize=2, label=f"model parameter gamma: posterior mean and {pct}% "
                "interval")
    bx.axhline(0.0, color="0.6", lw=1, ls="--")
    bx.set_xticks(j, [f"{r}\n{c}" for r in report.rows[1:] for c in report.columns[1:]], fontsize=8,
                  rotation=30, ha="right", rotation_mode="anchor")
    bx.set_ylabel(f"log odds ratio vs ({report.rows[0]}, {report.columns[0]})")
    bx.set_title(f"Association: {report.n_table_log_odds_ratio_inside} of {report.truth_table_log_odds_ratio.size} "
                 f"true table's log odds ratios inside the {pct}% intervals", fontsize=10)
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
    from ..models.contingency import table_log_odds_ratios
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
    lor = result.draws("table_log_odds_ratio")
    llo, lhi = equal_tailed_interval(lor)
    # cells fixed by the data (all draws equal) have undefined R-hat/ESS: those rows are ignored
    rhat_max, ess_min = result.diagnostics("x", "log_odds_ratio", "table_log_odds_ratio")
    ss = idata.sample_stats
    acc = float(ss["lattice_accept"].mean()) if "lattice_accept" in ss else float("nan")
    div = int(ss["diverging"].sum()) if "diverging" in ss else 0

    report = DemoReport(
        seed=seed, epsilon=float(eps), guarantee=f"{mech.guarantee.definition} ({mech.guarantee.reference})",
        burn_in=mech.certificate.burn_in if mech.certificate is not None else None,
        rows=tuple(datasets.DELINQUENT_COUNTIES), columns=tuple(datasets.DELINQUENT_EDUCATION),
        truth=truth, release=y.reshape(shape), margins=t,
        mean=result.mean.reshape(shape), lower=result.lower.reshape(shape), upper=result.upper.reshape(shape),
        table_log_odds_ratio_mean=lor.mean(axis=0), table_log_odds_ratio_lower=llo, table_log_odds_ratio_upper=lhi,
        truth_table_log_odds_ratio=table_log_odds_ratios(truth),
        log_odds_ratio_mean=g.mean(axis=0), log_odds_ratio_lower=glo, log_odds_ratio_upper=ghi,
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
