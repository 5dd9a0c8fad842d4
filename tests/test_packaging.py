"""Every sub-package of the source tree is declared in pyproject.toml (so it ships)."""

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_all_subpackages_are_declared():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    declared = set(cfg["packages"])
    mapping = cfg["package-dir"]
    found = set()
    for name, rel in mapping.items():
        base = ROOT / rel
        for init in base.rglob("__init__.py"):
            parts = init.parent.relative_to(base).parts
            found.add(".".join((name,) + parts))
    assert found == declared


def test_models_and_case_studies_import_from_the_installed_package():
    import privinfer.case_studies
    import privinfer.models

    assert privinfer.models.__name__ == "privinfer.models"
    assert privinfer.case_studies.__name__ == "privinfer.case_studies"
