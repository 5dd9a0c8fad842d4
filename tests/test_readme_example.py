"""The README's tour runs as written (with fewer draws), and its command lines parse."""

import pathlib
import re
import shlex

import numpy as np
import pytest

from privinfer import cli

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


@pytest.mark.slow
def test_readme_python_example_runs(capsys):
    (code,) = blocks("python")
    # fewer draws; no progress bar (rich keeps a console bound to an earlier test's captured,
    # since closed, stdout)
    small = code.replace("draws=1000, tune=1000", "draws=100, tune=100").replace(
        "random_seed=7)", "random_seed=7, progressbar=False)")
    assert small.count("draws=100, tune=100") == 1 and small.count("progressbar=False") == 1, (
        "the README example's pm.sample call changed: update this test")
    ns = {"__name__": "readme_example"}
    exec(compile(small, str(README), "exec"), ns)
    inv, t, y, idata = ns["inv"], ns["t"], ns["y"], ns["idata"]
    assert np.array_equal(inv.of(y), t) and y.dtype.kind == "i"
    x = idata.posterior["x"].values.reshape(-1, 16)
    assert np.array_equal(inv.of(x), np.broadcast_to(t, (x.shape[0], t.size)))  # every draw keeps the margins
    assert idata.posterior["log_odds_ratio"].shape[-2:] == (3, 3)
    assert "log_odds_ratio[0, 0]" in capsys.readouterr().out  # the ArviZ summary was printed


def test_readme_command_lines_parse():
    lines = []
    for block in blocks("bash"):
        text = re.sub(r"\\\n", " ", block)
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("privinfer"):
                lines.append(line)
    assert any(ln.split()[:2] == ["privinfer", "demo"] for ln in lines)
    assert {"release", "fit", "case-study"} <= {ln.split()[1] for ln in lines if len(ln.split()) > 1}
    parser = cli.build_parser()
    for ln in lines:
        args = parser.parse_args(shlex.split(ln)[1:])  # exits with status 2 on an unknown option
        assert args.command in cli.COMMANDS


@pytest.mark.slow
def test_readme_workflow_lines_run(tmp_path, monkeypatch):
    import privinfer
    from privinfer import datasets, invariants
    from privinfer.mechanisms import GeneralizedLaplace

    (code,) = [b for b in blocks("text") if "make_release" in b]
    small = code.replace("draws=1000, tune=1000, seed=7)", "draws=100, tune=100, seed=7, progressbar=False)")
    assert small.count("progressbar=False") == 1, "the README's fit call changed: update this test"
    monkeypatch.chdir(tmp_path)
    x = datasets.delinquent_children().ravel()
    ns = {"privinfer": privinfer, "x": x,
          "mechanism": GeneralizedLaplace(invariants.margins((4, 4), [(0,), (1,)]), epsilon=0.5)}
    exec(compile(small, str(README), "exec"), ns)
    assert (tmp_path / "release.csv").exists() and (tmp_path / "release.json").exists()
    release, result = ns["release"], ns["result"]
    assert release.shape == (4, 4) and np.array_equal(release.t, ns["mechanism"].invariant.of(x))
    draws = result.draws("x")
    assert np.all(release.invariant.of(draws) == release.t)  # every draw keeps the margins
