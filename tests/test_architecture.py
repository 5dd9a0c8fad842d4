"""The layers of docs/architecture.md, checked on the source: who may import whom.

Every module of the package is parsed (nothing is imported), its imports of privinfer modules
and of PyMC are resolved to package-level units, and each edge must go to the same or a lower
layer.  A module imports other modules' public names only.
"""

import ast
import pathlib
import subprocess
import sys

import pytest

import privinfer
import privinfer.models

ROOT = pathlib.Path(privinfer.__file__).parent
MODELS = pathlib.Path(privinfer.models.__file__).parent

#: layer of each unit (a top-level module or sub-package of privinfer); lower never imports higher
LAYERS = {
    "privinfer._rng": 0, "privinfer._backend": 0, "privinfer._validation": 0,
    "privinfer.invariants": 1, "privinfer.accounting": 1, "privinfer.distributions": 1,
    "privinfer.datasets": 1, "privinfer.guarantees": 1,
    "privinfer.lattice": 2,
    "privinfer.mechanisms": 3,
    "privinfer.common": 4, "privinfer.inference": 4,
    "privinfer.pymc": 5,
    "privinfer.models": 6,
    "privinfer.census": 6,  # frames -> hierarchy measurements (mechanism layer), hierarchy models (PyMC)
    "privinfer.workflow": 7,
    "privinfer.scaleout": 7,  # partitioned releases and per-group fits on Dask, beside the workflow
    # former module names kept as re-exports of the workflow / lattice / pymc layers
    "privinfer.fitting": 8, "privinfer.report": 8, "privinfer.release_files": 8, "privinfer.samplers": 8,
    "privinfer.cli": 9, "privinfer.case_studies": 9,
    "privinfer": 8,  # the package face: re-exports the workflow lazily
}
#: the only units that may import PyMC (``inference`` holds the Bayesian odds-ratio test)
PYMC_USERS = {"privinfer.pymc", "privinfer.models", "privinfer.census", "privinfer.workflow", "privinfer.inference",
              "privinfer.cli", "privinfer.case_studies"}


def _sources():
    for f in sorted(ROOT.rglob("*.py")):
        rel = f.relative_to(ROOT.parent).with_suffix("")
        yield f, ".".join(rel.parts)
    for f in sorted(MODELS.rglob("*.py")):
        rel = f.relative_to(MODELS).with_suffix("")
        yield f, ".".join(("privinfer", "models") + rel.parts)


def _unit(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def _imports(path: pathlib.Path, module: str):
    """(target module, imported names) for every import of the file."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    if module.endswith(".__init__"):
        package = module[: -len(".__init__")]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [a.name for a in node.names]
            if target == "privinfer":  # from .. import invariants: the names are modules
                for name in names:
                    yield f"privinfer.{name}", []
            else:
                yield target, names


def _edges():
    for path, module in _sources():
        src = _unit(module.replace(".__init__", ""))
        for target, names in _imports(path, module):
            yield path, src, target, names


def test_every_unit_has_a_layer():
    units = {_unit(m.replace(".__init__", "")) for _, m in _sources()} - {"privinfer"}
    assert units <= set(LAYERS), f"modules without a layer: {sorted(units - set(LAYERS))}"


def test_imports_go_down_the_layers():
    bad = []
    for path, src, target, _ in _edges():
        if target.startswith("privinfer."):
            dst = _unit(target)
            if dst != src and dst in LAYERS and LAYERS[dst] > LAYERS[src]:
                bad.append(f"{path.name}: {src} (layer {LAYERS[src]}) imports {dst} (layer {LAYERS[dst]})")
        if target.split(".")[0] == "pymc" and src not in PYMC_USERS:
            bad.append(f"{path.name}: {src} imports PyMC")
    assert not bad, "\n".join(bad)


def test_no_module_imports_a_private_name_of_another():
    bad = [f"{path.name}: from {target} import {n}" for path, _, target, names in _edges()
           for n in names if n.startswith("_") and not n.startswith("__")]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("module", ["privinfer.lattice", "privinfer.mechanisms", "privinfer"])
def test_lower_layers_do_not_load_pymc(module):
    code = f"import sys, {module}; print('pymc' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
