"""The documentation site builds with warnings as errors and holds what its readers look for.

One build (``sphinx-build -W --keep-going -b html``) into a temporary folder, with the case
studies' notebooks as executed by ``notebook_helpers.execute_study`` (shared with the case
studies' own tests), then checks on the HTML: the home and getting-started pages, the mechanism
table (every registry name, with the guarantees the code states), the API reference (the main
names, with their math rendered) and one page per case study with its figures.
"""

from __future__ import annotations

import html
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from notebook_helpers import STUDIES, execute_study

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MATH = 'class="math notranslate nohighlight"'


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> pathlib.Path:
    work = tmp_path_factory.mktemp("docs")
    notebooks = work / "executed"
    notebooks.mkdir()
    for name in STUDIES:
        shutil.copy(execute_study(name).path, notebooks / f"{name}.ipynb")
    env = dict(os.environ, PRIVINFER_EXECUTED_NOTEBOOKS=str(notebooks))
    out = work / "html"
    # run in the temporary folder: "python -m" puts the working folder first on sys.path, and
    # the source tree's privinfer/ must not shadow the installed package
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q",
                           str(DOCS), str(out)], cwd=work, env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, "sphinx-build failed:\n" + proc.stdout[-3000:] + proc.stderr[-6000:]
    return out


def page(site: pathlib.Path, name: str) -> str:
    path = site / name
    assert path.exists(), f"no page {name}"
    return path.read_text(encoding="utf-8")


def text(markup: str) -> str:
    """The words of a page: tags dropped, entities decoded, whitespace collapsed."""
    body = markup[markup.find("<article"):] if "<article" in markup else markup
    body = re.sub(r"</?(span|code|a|em|strong)\b[^>]*>", "", body)  # inline markup: no word break
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", body)))


def object_block(markup: str, anchor: str) -> str:
    """The HTML of the documented object whose id is ``anchor``, up to the next object of its
    module (its own members, ``anchor.NAME``, stay inside)."""
    start = markup.find(f'id="{anchor}"')
    assert start >= 0, f"{anchor} is not documented on this page"
    modname = anchor.rsplit(".", 1)[0]
    following = re.compile(rf'id="{re.escape(modname)}\.\w+"').search(markup, start + len(anchor) + 5)
    return markup[start:following.start() if following else len(markup)]


def test_home_and_getting_started(site):
    home = text(page(site, "index.html"))
    assert "curator" in home and "analyst" in home
    for link in ("getting-started/curator.html", "getting-started/analyst.html", "mechanisms.html",
                 "api/index.html", "case-studies/index.html", "architecture.html"):
        assert f'href="{link}' in page(site, "index.html"), f"the home page does not link {link}"

    curator = page(site, "getting-started/curator.html")
    words = text(curator)
    # the page's code ran during the build: its outputs are on the page
    from privinfer import invariants
    from privinfer.mechanisms import GeneralizedLaplace

    definition = GeneralizedLaplace(invariants.groups(["A", "A", "B"]), epsilon=0.5).guarantee.definition
    assert definition in words
    assert "release refused" in words  # the over-budget release, refused by the ledger
    assert "privinfer release" in words and "release_frame" in words
    assert "cell_output" in curator

    analyst = text(page(site, "getting-started/analyst.html"))
    for needle in ("logp", "LatticeBlockGibbs", "pm.sample", "privinfer fit", "az.summary",
                   "contingency_table_model"):  # the last one from the README's tour, included
        assert needle in analyst, f"the analyst's page does not mention {needle}"


def test_mechanism_table_lists_every_registered_mechanism(site):
    from privinfer.mechanisms import REGISTRY

    words = text(page(site, "mechanisms.html"))
    for name, cls in REGISTRY.items():
        assert name in words, f"the mechanism table has no row for {name}"
        assert cls.__name__ in words, f"the mechanism table does not name {cls.__name__}"
    assert "common mechanism" in words and "NoisyMeasurements" in words
    # the guarantee columns are the code's own statements
    from privinfer import invariants as I
    from privinfer.mechanisms import DiscreteGaussian, GeneralizedGaussian, ProjectedLaplace

    for m in (GeneralizedGaussian(I.total(4), 1.5), ProjectedLaplace(I.total(4), 1.0, 1.0), DiscreteGaussian(4, 1.5)):
        assert m.guarantee.definition in words, f"{type(m).__name__}'s guarantee is not in the table"
    assert "bench_exact_release.py" in words  # speeds cite their benchmark


@pytest.mark.parametrize("anchor, page_name", [
    ("privinfer.mechanisms.GeneralizedLaplace", "api/mechanisms.html"),
    ("privinfer.pymc.LatticeBlockGibbs", "api/pymc.html"),
    ("privinfer.make_release", "api/privinfer.html"),
    ("privinfer.scaleout.release_frame", "api/scaleout.html"),
    ("privinfer.invariants.Invariant", "api/invariants.html"),
    ("privinfer.guarantees.compose", "api/guarantees.html"),
])
def test_api_reference(site, anchor, page_name):
    import importlib

    markup = page(site, page_name)
    block = object_block(markup, anchor)
    modname, name = anchor.rsplit(".", 1)
    doc = getattr(importlib.import_module(modname), name).__doc__
    first_words = " ".join(doc.split()[:4]).replace("``", "")
    assert first_words[:20] in text(block), f"{anchor}: its docstring is not on the page"
    if ":math:" in doc or ".. math::" in doc:
        assert MATH in block, f"{anchor}: the docstring's math is not rendered"
    assert ":math:" not in text(markup), f"{page_name}: a :math: role was left unrendered"
    if MATH in markup:
        assert re.search(r'<script[^>]+mathjax', markup, re.I), f"{page_name} does not load MathJax"


def test_every_public_module_has_a_page(site):
    import importlib

    for modname in ("privinfer", "privinfer.invariants", "privinfer.guarantees", "privinfer.mechanisms",
                    "privinfer.lattice", "privinfer.pymc", "privinfer.models", "privinfer.inference",
                    "privinfer.workflow", "privinfer.scaleout", "privinfer.datasets"):
        short = modname.rsplit(".", 1)[-1]
        markup = page(site, f"api/{short}.html")
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            if name.startswith("__"):
                continue
            assert f'{modname}.{name}"' in markup or f'title="{modname}.{name}"' in markup or (
                re.search(rf'href="[^"]*#privinfer\.[\w.]*{re.escape(name)}"', markup)), (
                f"{modname}.{name} is neither documented nor linked on api/{short}.html")


@pytest.mark.parametrize("name", STUDIES)
def test_case_study_page_shows_its_figures(site, name):
    study = execute_study(name)
    markup = page(site, f"case-studies/notebooks/{name}.html")
    title = next(c.source for c in study.notebook.cells if c.cell_type == "markdown").splitlines()[0].lstrip("# ")
    assert html.escape(title, quote=False)[:40] in markup or title[:40] in text(markup)
    images = re.findall(r'<img[^>]+src="([^"]+\.png)"', markup)
    assert len(images) == len(study.outputs("image/png")), (
        f"{name}: {len(images)} images on the page, {len(study.outputs('image/png'))} in the notebook")
    if "matplotlib.use(" not in (pathlib.Path(__import__("privinfer.case_studies", fromlist=["x"]).__file__).parent
                                 / f"{name}.py").read_text():
        assert images, f"{name} shows its figures inline, but its page has none"
    for src in images:
        assert (site / "case-studies" / "notebooks" / src).resolve().exists(), f"{name}: missing image {src}"


@pytest.mark.slow
def test_analyst_page_code_runs(capsys):
    """The analyst's page shows its code without running it at build time (sampling takes too
    long): run it here, as written, with fewer draws."""
    import matplotlib

    matplotlib.use("Agg")
    source = (DOCS / "getting-started" / "analyst.md").read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"```python\n(.*?)```", source, flags=re.S))
    small = (code.replace("draws=1000, tune=1000", "draws=100, tune=100")
             .replace("random_seed=7)", "random_seed=7, progressbar=False)")
             .replace('idata_kwargs={"log_likelihood": True})', 'idata_kwargs={"log_likelihood": True}, progressbar=False)')
             .replace("pm.compute_log_likelihood(idata)", "pm.compute_log_likelihood(idata, progressbar=False)")
             .replace("random_seed=1)", "random_seed=1, progressbar=False)"))
    assert small.count("draws=100, tune=100") == 2 and small.count("progressbar=False") == 4, (
        "the analyst page's sampling calls changed: update this test")
    ns = {"__name__": "analyst_page"}
    exec(compile(small, "analyst.md", "exec"), ns)
    mechanism, y, x = ns["mechanism"], ns["y"], ns["x"]
    # the values the page states next to the code
    assert mechanism.logp(y, x) == -0.5 * abs(y - x).sum() == -6.0
    assert ns["predictive"].posterior_predictive["y"].shape[-1] == 8
    assert "x[a3]" in capsys.readouterr().out  # the ArviZ summary, with the cell ids
    # comparing models: one log-likelihood term per state, both fits ranked
    assert ns["idata"].log_likelihood["y"].shape[-1] == 3
    assert sorted(ns["comparison"]["rank"]) == [0, 1]
