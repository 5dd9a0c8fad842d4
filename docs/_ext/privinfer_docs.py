"""Sphinx helpers of the privinfer documentation.

* :func:`stage_case_studies` puts one notebook per case study into the source tree: the
  executed notebooks of a folder (shown as they are), or the studies themselves (executed
  by the build).
* ``.. mechanism-table::`` writes the table of every mechanism of the registry.  The
  guarantee, release, output and likelihood columns are computed at build time from the
  mechanisms themselves; the speed and use columns come from :data:`NOTES`, and the build
  fails if a registered mechanism has no entry there (or an entry names no mechanism).
* ``.. public-api:: MODULE`` writes the reference of a public module: a summary table of its
  ``__all__`` and the documentation of every name that no earlier module of
  :data:`API_MODULES` documents.
"""

from __future__ import annotations

import importlib
import json
import os
import pathlib
import re
import tempfile
from dataclasses import dataclass, field
from typing import Callable

from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.errors import ConfigError, ExtensionError
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

# =============================================================================================
# case studies
# =============================================================================================


def study_names() -> list[str]:
    """The case studies: every ``case_studies/NAME.py`` not starting with an underscore."""
    import privinfer.case_studies as cs

    folder = pathlib.Path(cs.__file__).parent
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


def _note_cell(name: str, executed_by: str):
    import nbformat

    return nbformat.v4.new_markdown_cell(
        f"*This page is the notebook of `case_studies/{name}.py`, {executed_by}. "
        f"Run it yourself with `privinfer case-study {name} --notebook` (an executed notebook; add "
        "`--full` for the full settings), or open the file in Jupyter with jupytext.*")


def _write_if_changed(path: pathlib.Path, text: str) -> None:
    # an unchanged page keeps its time stamp, so an incremental build does not read (or
    # execute) it again
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


def stage_case_studies(folder: pathlib.Path, executed: str | None) -> list[str]:
    """Write ``folder/NAME.ipynb`` for every case study.

    ``executed``: a folder holding ``NAME.ipynb`` executed notebooks (all of them; a missing
    one is an error), shown without running them again.  ``None``: the studies' sources,
    marked for execution by the build in small mode (``PRIVINFER_FULL=0`` unless set; outputs
    in a temporary folder unless ``PRIVINFER_OUTPUT`` is set).
    """
    import jupytext
    import nbformat
    import privinfer.case_studies as cs

    names = study_names()
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.ipynb"):
        if stale.stem not in names:
            stale.unlink()
    if executed is None:
        os.environ.setdefault("PRIVINFER_FULL", "0")
        os.environ.setdefault("PRIVINFER_OUTPUT", tempfile.mkdtemp(prefix="privinfer-docs-studies-"))
        os.environ.pop("MPLBACKEND", None)  # the kernel's inline backend shows the figures
    else:
        missing = [n for n in names if not (pathlib.Path(executed) / f"{n}.ipynb").exists()]
        if missing:
            raise ConfigError(f"PRIVINFER_EXECUTED_NOTEBOOKS={executed} has no executed notebook for "
                              f"{', '.join(missing)}")
    for name in names:
        if executed is None:
            nb = jupytext.read(pathlib.Path(cs.__file__).parent / f"{name}.py")
            nb.metadata["mystnb"] = {"execution_mode": "force"}
            how = "executed by the documentation build in small mode"
        else:
            nb = nbformat.read(pathlib.Path(executed) / f"{name}.ipynb", as_version=4)
            nb.metadata["mystnb"] = {"execution_mode": "off"}
            how = "executed before the documentation build (the tests run it in small mode)"
        nb.cells.insert(1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0, _note_cell(name, how))
        _write_if_changed(folder / f"{name}.ipynb", nbformat.writes(nb))
    return names


# =============================================================================================
# the mechanism table
# =============================================================================================


@dataclass(frozen=True)
class Note:
    """What the code cannot say about a mechanism: its family (table), speed and use."""

    family: str
    speed: str
    use: str
    #: overrides the computed output text
    output: str = ""


def _examples():
    """Constructors of small instances, by registry name (imports kept out of module load)."""
    import numpy as np

    from privinfer import invariants as I
    from privinfer import mechanisms as M
    from privinfer.common import common_mechanism

    B = np.array([[1.0, 0.0, 2.0, 0.5], [0.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 1.0]])
    space = M.one_way_margins_sensitivity_space((2, 3), a=2)
    return {
        "gaussian": [("epsilon, delta", lambda inv: M.Gaussian(4, 1.0, 1e-6, 1.0)),
                     ("sigma", lambda inv: M.Gaussian(4, sigma=2.0))],
        "laplace": [("", lambda inv: M.Laplace(4, 1.0, 1.0))],
        "double-geometric": [("", lambda inv: M.DoubleGeometric(4, 1.0))],
        "discrete-gaussian": [("", lambda inv: M.DiscreteGaussian(4, 1.5))],
        "generalized-laplace": [("l1", lambda inv: M.GeneralizedLaplace(inv, 1.0)),
                                ("l2", lambda inv: M.GeneralizedLaplace(inv, 1.0, norm="l2"))],
        "generalized-gaussian": [("", lambda inv: M.GeneralizedGaussian(inv, 1.5))],
        "projected-gaussian": [("epsilon, delta", lambda inv: M.ProjectedGaussian(I.total(4), 1.0, 1e-6, 1.0)),
                               ("sigma", lambda inv: M.ProjectedGaussian(I.total(4), sigma=1.0))],
        "extended-gaussian": [("epsilon, delta", lambda inv: M.ExtendedGaussian(I.total(4), 1.0, 1e-6, 1.0)),
                              ("sigma", lambda inv: M.ExtendedGaussian(I.total(4), sigma=1.0))],
        "projected-laplace": [("", lambda inv: M.ProjectedLaplace(I.total(4), 1.0, 1.0))],
        "extended-laplace": [("", lambda inv: M.ExtendedLaplace(I.total(4), 1.0, 1.0))],
        "correlated-gaussian": [("", lambda inv: M.CorrelatedGaussian(B, I.total(3), 1.0, 1e-6))],
        "semi-dp-gaussian": [("", lambda inv: M.SemiDPGaussian(space, 1.0))],
        "k-norm": [("", lambda inv: M.KNorm(space, 1.0))],
        "linear-gaussian": [("", lambda inv: M.LinearGaussian(B, np.diag([1.0, 2.0, 0.5])))],
        "noisy-measurements": [("", lambda inv: M.NoisyMeasurements(
            [np.eye(4), np.array([[1, 1, 0, 0], [0, 0, 1, 1]])], [1.5, 2.0], I.total(4)))],
        "topdown-baseline": [("discrete Gaussian", lambda inv: M.TopDownBaseline(I.total(4), "discrete_gaussian", 1.5)),
                             ("double geometric", lambda inv: M.TopDownBaseline(I.total(4), "double_geometric", 1.5))],
        "tulap": [("", lambda inv: M.TulapMechanism(3, 1.0, 1e-6))],
        "gaussian-canonical": [("", lambda inv: M.GaussianCanonicalMechanism(3, 1.0))],
        "canonical-noise": [("", lambda inv: M.CanonicalNoiseMechanism(3, M.eps_delta_tradeoff(1.0, 1e-6)))],
        "semi-private-two-by-two": [("", lambda inv: M.SemiPrivateTwoByTwo(M.Tulap.from_privacy(1.0, 1e-6)))],
        COMMON: [("", lambda inv: common_mechanism(M.LinearGaussian(np.eye(4), 1.0),
                                                   M.LinearGaussian(np.ones((1, 4)), 0.5)))],
    }


def _probe_invariants():
    """Invariants on which the lattice mechanisms state how they sample (``exact``)."""
    from privinfer import invariants as I

    return [
        ("a total", I.total(6)),
        ("group totals", I.groups(list("aabbbc"))),
        ("the margins of a 4 x 4 table", I.margins((4, 4), [(0,), (1,)])),
        ("two two-way margins of a 3 x 4 x 5 table", I.margins((3, 4, 5), [(0, 1), (1, 2)])),
    ]


#: the extra row: not a registered class but a function building a LinearGaussian
COMMON = "common mechanism"

FAMILIES = [
    ("integer", "Integer counts that keep an invariant exactly"),
    ("real", "Real values that keep an invariant exactly (subspace DP)"),
    ("semi", "Semi-DP: noise only in the sensitivity space"),
    ("census", "Census-style measurements"),
    ("linear", "Linear Gaussian releases and the common mechanism"),
    ("plain", "Every cell noisy, no invariant"),
    ("canonical", "Canonical noise (f-DP) and semi-private tests"),
    ("baseline", "Comparison baseline (not transparent)"),
]

B_EXACT = "``benchmarks/bench_exact_release.py``"
B_SCALE = "``benchmarks/bench_scaleout.py``"
B_LATTICE = "``benchmarks/bench_lattice_sampler.py``"
B_ST = "``benchmarks/bench_spatiotemporal.py``"
B_TOPDOWN = "``benchmarks/bench_topdown.py``"
B_COMMON = "``benchmarks/bench_common_mechanism.py``"
B_NM = "``benchmarks/bench_noisy_measurements.py``"
NOT_BENCHMARKED = "No benchmark; one vectorized draw of independent noise per cell."

#: Speed and use of every registry name (and the common mechanism).  Numbers: the benchmark
#: named, on this project's 2-core machine.
NOTES: dict[str, Note] = {
    "generalized-laplace": Note(
        "integer",
        f"Exact release of all 3,221 US counties keeping the 52 state totals: 7.2 ms, 0.28 x the "
        f"time of a naive floating-point rejection sampler; 320-450 ns per cell at 10^5-10^7 cells "
        f"({B_EXACT}).  On Dask: 342,000 cells/s on 2 workers, 1.65 x one worker ({B_SCALE}).  "
        f"The MCMC path spends most of its time certifying its burn-in by couplings ({B_LATTICE}).",
        "The default for counts whose totals (state, county, margins) must be published exactly: "
        "integer output, pure epsilon, exact sampling on totals and groups. Use the l2 norm only "
        "if you need its rotation-invariant noise: it is always sampled by MCMC."),
    "generalized-gaussian": Note(
        "integer",
        "Exact on partitions (one-dependent-cell rejection); no separate benchmark.",
        "Integer counts keeping an invariant when the budget is accounted in zCDP (many releases "
        "composed, the Census's own accounting): noise with lighter tails than the generalized "
        "Laplace at the same variance."),
    "projected-gaussian": Note(
        "real",
        f"6,720 cells with 740 independent margins kept: 0.14 ms per release with the structured "
        f"projection, 2.5 x faster than a general sparse invariant and 281 x faster than a dense "
        f"projection matrix ({B_ST}).",
        "Real-valued data, or counts where integrality does not matter, with any linear invariant; "
        "the fastest release here. Gaussian noise in the null space of C."),
    "extended-gaussian": Note(
        "real", f"Same release as the projected Gaussian (same law, smaller scale; {B_ST}).",
        "As the projected Gaussian, with the scale calibrated to the sensitivity of the query in "
        "the null space (never larger): less noise for the same guarantee."),
    "projected-laplace": Note(
        "real", NOT_BENCHMARKED + "  Its likelihood needs an augmentation latent (one per "
        "invariant row) in a PyMC model.",
        "Pure epsilon with real values and an invariant; the analyst's model is heavier "
        "(augmentation) than with the extended Laplace."),
    "extended-laplace": Note(
        "real", NOT_BENCHMARKED,
        "Pure epsilon with real values and an invariant, with a closed-form likelihood (Laplace "
        "noise on the coordinates of the null space)."),
    "correlated-gaussian": Note(
        "real", "No benchmark; builds its noise covariance once (an MVEE problem) at construction.",
        "Linear queries A h released with an invariant: correlated noise fitted to the query, "
        "smaller mean squared error than the extended Gaussian."),
    "semi-dp-gaussian": Note(
        "semi", NOT_BENCHMARKED,
        "Semi-DP (Cho and Awan): protects changes that keep the invariant, with Gaussian noise "
        "only along the sensitivity space; mu-GDP accounting."),
    "k-norm": Note(
        "semi", "No benchmark; rejection sampling from the unit ball of K (its acceptance rate is "
        "the attribute ``acceptance_rate``).",
        "Semi-DP with pure epsilon and the optimal K-norm noise for the sensitivity space."),
    "noisy-measurements": Note(
        "census",
        f"Release: exact discrete Gaussian draws.  Analysis of Kentucky (5,520 cells): exact "
        f"posterior in 125 s with 2 chains, min bulk ESS 798 ({B_NM}).",
        "Several queries (cells, county totals, a state table) measured with discrete Gaussian "
        "noise and a zCDP budget per query, the invariant published beside them: the 2020 "
        "Census design, analysed exactly.",
        output="integer measurements y_k = B_k x + e_k of every query; t = C x published exactly "
               "beside them (``publish``); exact likelihood"),
    "linear-gaussian": Note(
        "linear", f"Building the common mechanism of 4 nested histograms (206 cells) by the closed "
        f"form instead of the paper's SDP ({B_COMMON}).",
        "Any linear query B x with Gaussian noise of covariance Sigma; the building block of the "
        "common mechanism."),
    COMMON: Note(
        "linear", f"Closed form for two mechanisms, an SDP for more ({B_COMMON}).",
        "Choosing adaptively between several linear Gaussian analyses without wasting budget: "
        "release the common part first, then complete the chosen one "
        "(:func:`privinfer.common.common_mechanism`, :func:`~privinfer.common.residual`, "
        ":func:`~privinfer.common.recreate`)."),
    "gaussian": Note(
        "plain", NOT_BENCHMARKED,
        "Real values with no invariant; a baseline for the subspace mechanisms."),
    "laplace": Note(
        "plain", NOT_BENCHMARKED, "Real values with no invariant and pure epsilon; a baseline."),
    "double-geometric": Note(
        "plain", NOT_BENCHMARKED + "  Exact integer sampler.",
        "Integer counts with no invariant (every total noisy), pure epsilon: the discrete Laplace."),
    "discrete-gaussian": Note(
        "plain", NOT_BENCHMARKED + "  Exact integer sampler (Canonne, Kamath and Steinke 2020).",
        "Integer counts with no invariant, zCDP accounting."),
    "tulap": Note(
        "canonical", NOT_BENCHMARKED,
        "Tight (epsilon, delta)-DP noise whose privatized statistic gives uniformly most powerful "
        "tests (semi-private tests of a 2 x 2 table)."),
    "gaussian-canonical": Note(
        "canonical", NOT_BENCHMARKED, "mu-GDP with the canonical noise of the Gaussian trade-off."),
    "canonical-noise": Note(
        "canonical", "No benchmark; draws by the inverse CDF of the canonical noise distribution.",
        "f-DP for any symmetric trade-off function f, with the noise that is tight for it."),
    "semi-private-two-by-two": Note(
        "canonical", NOT_BENCHMARKED,
        "A 2 x 2 table whose one-way margins are published: one noisy cell, feeding the "
        "semi-private odds-ratio test (:func:`privinfer.inference.semi_private_odds_ratio_test`)."),
    "topdown-baseline": Note(
        "baseline",
        f"Projection of 3,143 counties onto their 51 state totals: 0.40 ms in closed form, 33 x "
        f"faster than the general dual Newton solver; a full release of the 14 x 24 x 20 "
        f"spatio-temporal design takes 8.6 s ({B_TOPDOWN}).",
        "Only to compare with: noise, then a non-negative projection onto the invariant and "
        "rounding, as the Census TopDown algorithm does.  Its law has no tractable likelihood, "
        "so no exact analysis is possible (``logp`` raises)."),
}


def _kind_text(g) -> str:
    return {"pure": "pure", "approx": "approximate", "zcdp": "zCDP", "gdp": "GDP"}.get(
        g.kind, "untyped: not composed by the ledger")


def _release_text(m) -> list[str]:
    """How the release is drawn, from the mechanism itself."""
    if hasattr(m, "exact") and hasattr(m, "target_delta"):
        return []  # lattice mechanisms: stated per invariant by the caller
    desc = m.sampler_description()
    if desc is None:
        return ["direct draw (no Markov chain): the guarantee has no sampler term"]
    if desc.get("exact"):
        return [f"exact: {desc.get('method', '')}"]
    return [f"{desc}"]


def _lattice_release(make) -> list[str]:
    """How a lattice mechanism draws on each probe invariant, grouped by method."""
    by_method: dict[str, list[str]] = {}
    target = None
    for label, inv in _probe_invariants():
        m = make(inv)
        target = m.target_delta
        method = f"exact ({m.exact_sampler.method}), delta = 0" if m.exact else "MCMC"
        by_method.setdefault(method, []).append(label)
    lines = [f"{method} on {', '.join(labels)}" for method, labels in by_method.items()]
    if "MCMC" in by_method:
        lines.append(f"MCMC: delta = (1 + e^eps) eta, eta estimated by couplings, so that delta <= {target:g} "
                     "(``target_delta``)")
    return lines


def _guarantee(m):
    """``m.guarantee``; an MCMC lattice mechanism first certifies its burn-in with a fixed seed
    (the page is the same at every build)."""
    import numpy as np

    if hasattr(m, "exact") and hasattr(m, "certify_burn_in") and not m.exact:
        m.certify_burn_in(rng=np.random.default_rng(0))
    return m.guarantee


def _output_text(m) -> str:
    parts = ["integer" if m.integer else "real"]
    if m.invariant is not None:
        parts.append("keeps C y = t " + ("exactly" if m.integer else "to floating point"))
    else:
        parts.append("no invariant")
    if not m.transparent:
        parts.append("no likelihood")
    elif m.augmentation is not None:
        parts.append("exact likelihood by augmentation")
    else:
        parts.append("exact likelihood")
    return "; ".join(parts)


def _cell(lines) -> list[str]:
    """A list-table cell: one paragraph per line (the first carries the bullet)."""
    out = []
    for i, line in enumerate(lines or ["--"]):
        out.append(("     - " if i == 0 else "       ") + line)
        out.append("")
    return out[:-1]


def mechanism_rows():
    """``{family: [(name, class_path, guarantee lines, release lines, output, speed, use)]}``."""
    from privinfer.mechanisms import REGISTRY

    examples = _examples()
    wanted = set(REGISTRY) | {COMMON}
    for what, keys in (("NOTES", set(NOTES)), ("the examples", set(examples))):
        if keys != wanted:
            raise ExtensionError(
                f"mechanism table: {what} in docs/_ext/privinfer_docs.py do not match the registry: missing "
                f"{sorted(wanted - keys)}, unknown {sorted(keys - wanted)}")
    rows: dict[str, list] = {f: [] for f, _ in FAMILIES}
    for name in [*REGISTRY, COMMON]:
        note = NOTES[name]
        guarantee, release, output = [], {}, ""
        for label, make in examples[name]:
            m = make(_probe_invariants()[0][1])
            if name != COMMON and type(m) is not REGISTRY[name]:
                raise ExtensionError(f"mechanism table: the example of {name} is a {type(m).__name__}")
            g = _guarantee(m)
            prefix = f"{label}: " if label else ""
            text = f"{prefix}{g.definition} ({_kind_text(g)})"
            if g.kind == "approx" and getattr(m, "exact", True) is False:
                text += f"; delta = {g['delta']:.1g} on {_probe_invariants()[0][0]} of {m.n} cells at epsilon = 1"
            guarantee.append(text)
            if hasattr(m, "exact") and hasattr(m, "target_delta"):
                release[label] = _lattice_release(lambda inv, make=make: make(inv))
            else:
                release[label] = _release_text(m)
            output = output or _output_text(m)
        if name == COMMON:
            target = "privinfer.common.common_mechanism"
        else:
            target = f"privinfer.mechanisms.{REGISTRY[name].__name__}"
        rows[note.family].append((name, target, guarantee, _merge_variants(release),
                                  note.output or output, note.speed, note.use))
    return rows


def _merge_variants(release: dict[str, list[str]]) -> list[str]:
    """One list of lines: shared lines once, the others prefixed by their variant's label."""
    variants = list(release.values())
    shared = [line for line in variants[0] if all(line in v for v in variants)]
    out = [f"{label}: {line}" for label, lines in release.items() for line in lines
           if line not in shared and label]
    return out + shared


def _escape(text: str) -> str:
    """Plain text for RST: literal asterisks and backslashes."""
    return text.replace("\\", "\\\\").replace("*", "\\*")


class MechanismTable(SphinxDirective):
    """``.. mechanism-table::``: one table per family of mechanisms (see module docstring)."""

    has_content = False

    def run(self):
        rows = mechanism_rows()
        lines: list[str] = []
        for family, title in FAMILIES:
            if not rows[family]:
                continue
            lines += [title, "-" * len(title), "",
                      ".. list-table::", "   :header-rows: 1", "   :widths: 11 17 22 12 19 19",
                      "   :class: mechanism-table", ""]
            lines += ["   * - Mechanism", "     - Guarantee", "     - Release", "     - Output",
                      "     - When to use", "     - Speed"]
            for name, target, guarantee, release, output, speed, use in rows[family]:
                func = target.endswith("common_mechanism")
                ref = f":func:`~{target}`" if func else f":class:`~{target}`"
                lines += [f"   * - ``{name}``", "", f"       {ref}"]
                lines += _cell([_escape(g) for g in guarantee])
                lines += _cell([_escape(r) for r in release])
                lines += _cell([_escape(output)])
                lines += _cell([use])
                lines += _cell([speed])
            lines.append("")
        node_list = []
        from docutils import nodes

        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source="mechanism-table"), container)
        node_list.extend(container.children)
        return node_list


# =============================================================================================
# public API pages
# =============================================================================================

#: Public modules, in the order of the reference; a name exported by several is documented
#: on the page of the first one (the others link to it).
API_MODULES = [
    "privinfer", "privinfer.invariants", "privinfer.guarantees", "privinfer.mechanisms",
    "privinfer.lattice", "privinfer.pymc", "privinfer.models", "privinfer.inference",
    "privinfer.workflow", "privinfer.scaleout", "privinfer.datasets", "privinfer.common",
    "privinfer.accounting",
]


def documented_at() -> dict[int, str]:
    """``id(object) -> full name`` where each public object is documented."""
    where: dict[int, str] = {}
    for modname in API_MODULES:
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if callable(obj) or isinstance(obj, type):
                where.setdefault(id(obj), f"{modname}.{name}")
    return where


def _doc_comment(modname: str, name: str, obj) -> list[str] | None:
    """The ``#:`` comment of ``name`` in the module that defines it (``modname`` or one of its
    submodules holding the same object), or None."""
    import sys

    from sphinx.pycode import ModuleAnalyzer

    candidates = [modname] + sorted(m for m in list(sys.modules) if m.startswith(modname + "."))
    for candidate in candidates:
        module = sys.modules.get(candidate)
        if module is None or getattr(module, name, None) is not obj:
            continue
        try:
            docs = ModuleAnalyzer.for_module(candidate).find_attr_docs()
        except Exception:  # noqa: BLE001 - a module without source: no comment to find
            continue
        if ("", name) in docs:
            return list(docs[("", name)])
    return None


class PublicApi(SphinxDirective):
    """``.. public-api:: MODULE``: the module docstring, a summary of ``__all__``, the members.

    Classes and functions are documented by autodoc on the page of the first module of
    :data:`API_MODULES` that exports them (an alias exported under a second name in the same
    module is documented under both); data by the ``#:`` comment where it is defined.
    """

    required_arguments = 1

    def run(self):
        modname = self.arguments[0]
        if modname not in API_MODULES:
            raise self.error(f"{modname} is not in API_MODULES of docs/_ext/privinfer_docs.py")
        mod = importlib.import_module(modname)
        where = documented_at()
        own, summary = [], []
        for name in mod.__all__:
            if name.startswith("__"):
                continue
            obj = getattr(mod, name)
            full = f"{modname}.{name}"
            if not (callable(obj) or isinstance(obj, type)):
                own.append(name)
                continue
            home = where[id(obj)]
            if home == full or home.rsplit(".", 1)[0] == modname:
                summary.append(name)
                own.append(name)
            else:
                summary.append(f"~{home}")
        lines = [f".. automodule:: {modname}", "   :no-members:", "", ".. currentmodule:: " + modname, ""]
        if summary:
            lines += [".. rubric:: Summary", "", ".. autosummary::", "   :nosignatures:", ""]
            lines += [f"   {item}" for item in summary] + [""]
        if own:
            lines += [".. rubric:: Reference", ""]
            for name in own:
                obj = getattr(mod, name)
                if isinstance(obj, type):
                    lines += [f".. autoclass:: {name}", "   :members:", ""]
                elif callable(obj):
                    lines += [f".. autofunction:: {name}", ""]
                else:
                    lines += [f".. py:data:: {name}", "   :no-index-entry:", ""]
                    comment = _doc_comment(modname, name, obj)
                    lines += [f"   {line}" for line in (comment or [f"``{obj!r}``"[:200]])] + [""]
        from docutils import nodes

        container = nodes.section()
        container.document = self.state.document
        nested_parse_with_titles(self.state, StringList(lines, source=f"public-api {modname}"), container)
        return container.children


_UNDERLINE = re.compile(r"^\s*([-=~^])\1{2,}\s*$")


def headings_to_rubrics(app, what, name, obj, options, lines):
    """Section headings in the docstring of a class, function or method become rubrics.

    Docstrings mark their parts with underlined headings (``Release`` over ``-------``); RST
    allows sections only at the top of a document, which a module docstring is and a
    function's is not.  Runs after napoleon, which has turned its own sections (Parameters,
    Returns, ...) into field lists.
    """
    if what == "module":
        return
    for i in range(len(lines) - 1):
        title = lines[i].strip()
        if (title and _UNDERLINE.match(lines[i + 1]) and len(lines[i + 1].strip()) >= len(title)
                and (i == 0 or not lines[i - 1].strip())):
            indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
            lines[i] = f"{indent}.. rubric:: {title}"
            lines[i + 1] = ""


#: Abbreviations of citations in the docstrings ("Def. 9", "Sec. 5.1", "et al. 2022"): a period
#: after one of them does not end the one-line summary of the API tables.
ABBREVIATIONS = ("Def", "Sec", "Alg", "Cor", "Prop", "Thm", "Lem", "Eq", "Eqs", "Fig", "Ex", "Rem", "App",
                 "e.g", "i.e", "et al", "cf", "vs", "resp")
_KEEP = "\ue000"  # a private-use character: not whitespace, so not a sentence end
_ABBREV_RE = re.compile(r"(?<![\w.])(" + "|".join(re.escape(a) for a in ABBREVIATIONS) + r")\. ")


def summary_keeping_abbreviations(extract):
    """Wrap autosummary's ``extract_summary`` (first sentence of a docstring) so that citations
    like "(Def. 9)" do not cut the sentence at "(Def."."""

    def extract_summary(doc, document):
        protected = [_ABBREV_RE.sub(lambda m: m.group(1) + "." + _KEEP, line) for line in doc]
        return extract(protected, document).replace(_KEEP, " ")

    return extract_summary


def setup(app):
    from sphinx.ext import autosummary

    if not getattr(autosummary.extract_summary, "_privinfer", False):
        autosummary.extract_summary = summary_keeping_abbreviations(autosummary.extract_summary)
        autosummary.extract_summary._privinfer = True
    app.connect("autodoc-process-docstring", headings_to_rubrics)
    app.add_directive("mechanism-table", MechanismTable)
    app.add_directive("public-api", PublicApi)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
