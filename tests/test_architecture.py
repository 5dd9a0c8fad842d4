"""The layers of docs/architecture.md, checked on the source: who may import whom.

Every module of the package is parsed (nothing is imported), its imports of privinfer modules
and of PyMC are resolved to package-level units, and each edge must go to the same or a lower
layer.  A module imports other modules' public names only.  Between modules, imports form no
circle (an import inside a function counts like one at the top), and no module only
re-exports names of others.  No function is longer than :data:`MAX_FUNCTION_LINES` lines.
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
    "privinfer._rng": 0, "privinfer._backend": 0, "privinfer._validation": 0, "privinfer._special": 0,
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


# ----------------------------------------------------------------------------------------------
# import circles and re-export modules
# ----------------------------------------------------------------------------------------------
def _module_name(module: str) -> str:
    return module[: -len(".__init__")] if module.endswith(".__init__") else module


def _module_graph() -> dict[str, set[str]]:
    """Module -> the privinfer modules it imports, from every import statement of its source
    (at the top or inside a function).  ``from package import name`` goes to the submodule
    ``package.name`` when there is one, else to the package's ``__init__``; an import of a
    module outside the parsed sources (e.g. ``privinfer.case_studies``) is left out."""
    sources = list(_sources())
    modules = {_module_name(m) for _, m in sources}
    graph: dict[str, set[str]] = {}
    for path, module in sources:
        name = _module_name(module)
        edges = graph.setdefault(name, set())
        for target, names in _imports(path, module):
            if not target.startswith("privinfer"):
                continue
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            found = subs if subs and len(subs) == len(names) else subs + [target]
            for t in found:
                while t not in modules and "." in t:  # from privinfer import __version__
                    t = t.rsplit(".", 1)[0]
                if t in modules and t != name:
                    edges.add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def test_cycle_finder_finds_circles():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a", "e"}, "e": set(), "f": {"g"}, "g": {"f"}}
    assert sorted(_cycles(graph)) == [["a", "b", "c"], ["f", "g"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_module_graph_sees_imports_inside_functions():
    graph = _module_graph()
    # Mechanism.spec imports the spec machinery inside the method
    assert "privinfer.mechanisms.spec" in graph["privinfer.mechanisms.base"]
    # from . import files: the submodule; from ..mechanisms import Mechanism: the package
    assert "privinfer.mechanisms" in graph["privinfer.workflow.codec"] or \
        "privinfer.mechanisms.registry" in graph["privinfer.workflow.codec"]


def test_no_import_circles():
    circles = _cycles(_module_graph())
    assert not circles, "modules that import each other (directly or through others): " + \
        "; ".join(" <-> ".join(c) for c in circles)


def _only_reexports(tree: ast.Module) -> bool:
    """A module body of imports, ``__all__`` and a docstring only (nothing of its own)."""
    for i, node in enumerate(tree.body):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            continue
        targets = (node.targets if isinstance(node, ast.Assign) else
                   [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
        if targets and all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            continue
        return False
    return True


def test_reexport_detector():
    assert _only_reexports(ast.parse('"""Doc."""\nfrom .a import b  # noqa\n__all__ = ["b"]\n__all__ += ["c"]\n'))
    assert not _only_reexports(ast.parse('"""Doc."""\nfrom .a import b\n\ndef f():\n    return b\n'))
    assert not _only_reexports(ast.parse('from .a import b\nX = 1\n'))


def test_no_module_only_reexports():
    """Every name has one home: a module that only re-exports (package ``__init__`` files
    excepted, which gather their package's names) is a second address to keep in step."""
    bad = [str(path.relative_to(ROOT.parent)) for path, _ in _sources()
           if path.name != "__init__.py" and _only_reexports(ast.parse(path.read_text(encoding="utf-8")))]
    assert not bad, "modules that only re-export: " + ", ".join(bad)


# ----------------------------------------------------------------------------------------------
# function length
# ----------------------------------------------------------------------------------------------
#: Longest function allowed in privinfer/ and models/, in source lines from its first decorator
#: (or ``def``) to its last line, docstring included: beyond it, split it into named steps.
MAX_FUNCTION_LINES = 100


def _long_functions(tree: ast.Module, limit: int = MAX_FUNCTION_LINES):
    """``(qualified name, lines)`` of every function (methods and nested functions included)
    longer than ``limit`` lines."""
    out = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    lines = child.end_lineno - first + 1
                    if lines > limit:
                        out.append((name, lines))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return out


def test_long_function_detector():
    def body(indent):
        return "\n".join(" " * indent + f"x{i} = {i}" for i in range(99))

    src = (f"@decorator\ndef f():\n{body(4)}\n\nclass C:\n    def g(self):\n        def h():\n"
           f"{body(12)}\n{body(12)}\n{body(8)}\n")
    found = dict(_long_functions(ast.parse(src)))
    # f: decorator, def and 99 lines; C.g.h: def and 198 lines; C.g: def, h and 99 lines
    assert found == {"f": 101, "C.g.h": 199, "C.g": 299}
    assert _long_functions(ast.parse(f"def f():\n{body(4)}\n")) == []  # 100 lines: allowed


def test_no_function_longer_than_the_limit():
    bad = [f"{path.relative_to(ROOT.parent)}: {name} ({lines} lines)" for path, _ in _sources()
           for name, lines in _long_functions(ast.parse(path.read_text(encoding="utf-8")))]
    assert not bad, f"functions over {MAX_FUNCTION_LINES} lines (split them into named steps):\n" + "\n".join(bad)
