"""``privinfer fit`` on a release made group by group on Dask (privinfer.scaleout.readback / fitfile).

One LocalCluster (1 worker process) serves the module: the releases are made on it and one
fit runs on it; the other fit runs in this process.  Fits are short (100 draws): the checks
are exact (totals kept by every draw, rows matched one by one), not statistical.
"""

import json
import re

import arviz as az
import numpy as np
import pandas as pd
import pytest

pytest.importorskip("dask.dataframe")  # the scale extra is part of the test install
from dask.distributed import Client, LocalCluster  # noqa: E402

from cli_helpers import run  # noqa: E402
from privinfer.scaleout import read_frame_release, release_file  # noqa: E402
from privinfer.workflow import ReleaseFileError  # noqa: E402
from privinfer.workflow.release import release_counts_file  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::UserWarning"), pytest.mark.filterwarnings("ignore::FutureWarning")]

#: groups of 4, 3 and 1 cells, rows interleaved so the file's row order is not the groups' order
STATE = [7, 12, 7, 3, 12, 7, 12, 7]
POP = [1200, 3000, 800, 77, 1500, 2500, 900, 600]
FIT = ["--draws", "100", "--tune", "100", "--chains", "2", "--seed", "5"]


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, memory_limit="1GiB",
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def releases(client, tmp_path_factory):
    """The same counts (integer group keys in a Parquet input) released on the cluster to a CSV
    file and to a Parquet folder."""
    d = tmp_path_factory.mktemp("frame-releases")
    src = d / "counts.parquet"
    pd.DataFrame({"name": [f"b{i}" for i in range(len(POP))], "state": STATE, "pop": POP}).to_parquet(src, index=False)
    out = {}
    for suffix in ("csv", "parquet"):
        _, dst, meta = release_file(src, d / f"release-{suffix}.{suffix}", invariant="groups:state", column="pop",
                                    seed=3, epsilon=0.2, scheduler=client.scheduler.address, ledger=None)
        out[suffix] = (dst, meta)
    return out


def _true_totals():
    return pd.Series(POP).groupby(pd.Series(STATE)).sum().to_dict()


def _check_fit(release_path, output, stdout):
    """The outputs of ``privinfer fit`` against the release file, row by row."""
    released = pd.read_csv(release_path, dtype=str) if release_path.suffix == ".csv" else \
        pd.read_parquet(release_path).astype(str)
    cells = pd.read_csv(output / "cells.csv", dtype=str)
    assert list(cells.columns) == ["name", "state", "release", "posterior_mean", "posterior_sd", "lower_90",
                                   "upper_90"]
    # the label columns and the released counts of the release file, in its row order
    assert cells["name"].tolist() == released["name"].tolist()
    assert cells["state"].tolist() == released["state"].tolist()
    y = released["pop"].astype(int).to_numpy()
    assert np.array_equal(cells["release"].astype(float).to_numpy(), y)
    # every posterior draw keeps each group's published total (the true total) exactly
    post = az.from_netcdf(output / "posterior.nc").posterior
    rows = post["data_row"].values - 1
    assert np.all(np.diff(rows) > 0)  # the sampled cells in the file's row order
    x = post["x"].values.reshape(-1, rows.size)
    totals = _true_totals()
    states = np.array(STATE)[rows]
    assert sorted(set(states)) == [7, 12]  # the one-cell group (3) is its total: not sampled
    for s in (7, 12):
        assert np.all(x[:, states == s].sum(axis=1) == totals[s])
    assert post["state"].values.tolist() == [str(v) for v in states]
    assert post["name"].values.tolist() == [f"b{r}" for r in rows]
    # cells.csv summarizes those draws, row by row; the one-cell group is exact
    mean = cells["posterior_mean"].astype(float).to_numpy()
    assert np.allclose(mean[rows], x.mean(axis=0))
    # each cell's posterior sits at its own release: the noise (generalized Laplace, eps = 0.2)
    # has sd about sqrt(2)/eps ~ 7 per cell, so |E[x_k | y] - y_k| stays far below 100, while two
    # cells of one group differ by 200 or more: a cell matched to another row's draws fails
    assert np.all(np.abs(mean - y) < 100)
    one = np.array(STATE) == 3
    assert mean[one].tolist() == [77.0] and cells["posterior_sd"].astype(float)[one].tolist() == [0.0]
    assert y[one].tolist() == [77]
    for name in ("fit.png", "summary.csv", "summary.txt"):
        assert (output / name).stat().st_size > 0
    assert "model county: posterior of the 8 confidential cells (seed 5)" in stdout
    assert "max R-hat" in stdout and f"cells: {output / 'cells.csv'}" in stdout


def test_read_frame_release_types_and_totals(releases):
    for suffix, dtype in (("csv", str), ("parquet", int)):
        dst, _ = releases[suffix]
        rel = read_frame_release(dst)
        frame = rel.frame
        assert list(frame.columns) == ["name", "state", "pop"] and frame["pop"].dtype == np.int64
        # totals indexed by the keys as the frame holds them, in order of first appearance
        keys = frame["state"].drop_duplicates().tolist()
        assert rel.totals.index.tolist() == keys and all(isinstance(k, dtype) for k in keys)
        assert rel.totals.index.dtype == frame["state"].dtype
        for k in keys:
            assert rel.totals.loc[k] == _true_totals()[int(k)] == frame.loc[frame["state"] == k, "pop"].sum()
        assert rel.sizes.tolist() == [4, 3, 1]
        assert rel.mechanism == "generalized-laplace" and rel.guarantee.epsilon == 0.2


def test_fit_csv_release_in_process(releases, tmp_path, capsys):
    dst, _ = releases["csv"]
    rc, out, err = run(["fit", dst, *FIT, "--output", tmp_path / "fit"], capsys)
    assert rc == 0, err
    _check_fit(dst, tmp_path / "fit", out)


def test_fit_parquet_release_on_the_cluster(client, releases, tmp_path, capsys):
    dst, _ = releases["parquet"]
    rc, out, err = run(["fit", dst, *FIT, "--output", tmp_path / "fit", "--scheduler", client.scheduler.address],
                       capsys)
    assert rc == 0, err
    _check_fit(dst, tmp_path / "fit", out)


def _one_line_error(argv, capsys):
    rc, out, err = run(argv, capsys)
    assert rc == 2 and err.startswith("privinfer: error: ") and err.count("\n") == 1, (rc, err)
    return err


def test_changed_files_and_wrong_options_are_refused(client, releases, tmp_path, capsys):
    dst, meta_path = releases["csv"]
    released = pd.read_csv(dst, dtype=str)
    meta = json.loads(meta_path.read_text())
    outdir = tmp_path / "never"
    # one released count changed: its group no longer adds up to its published total
    bad = released.copy()
    bad.loc[4, "pop"] = str(int(bad.loc[4, "pop"]) + 1)
    bad.to_csv(tmp_path / "tampered.csv", index=False)
    (tmp_path / "tampered.json").write_text(meta_path.read_text())
    err = _one_line_error(["fit", tmp_path / "tampered.csv", *FIT, "--output", outdir], capsys)
    # row 5 is in the second group to appear (12); the message names positions, never values
    assert "tampered.csv: the counts of group 2 (in order of first appearance) do not add up to its published total" \
        in err
    assert bad.loc[4, "pop"] not in err and str(_true_totals()[12]) not in err
    # a published total changed in the sidecar
    m = json.loads(json.dumps(meta))
    m["invariant"]["totals"]["t"][0] += 1
    (tmp_path / "t.json").write_text(json.dumps(m))
    err = _one_line_error(["fit", dst, "--metadata", tmp_path / "t.json", *FIT, "--output", outdir], capsys)
    assert "the counts of group 1 (in order of first appearance) do not add up" in err
    # a group dropped from the sidecar, a key changed, or a group added
    for change, words in ((lambda m: [m["invariant"]["totals"][k].pop() for k in ("groups", "t")],
                           "group 3 (in order of first appearance) has no published total in g.json"),
                          (lambda m: m["invariant"]["totals"]["groups"].__setitem__(1, 99),
                           "group 2 (in order of first appearance) has no published total in g.json"),
                          (lambda m: [m["invariant"]["totals"][k].append(v) for k, v in (("groups", 99), ("t", 0))],
                           "group 4 of the published totals has no row in release-csv.csv")):
        m = json.loads(json.dumps(meta))
        change(m)
        (tmp_path / "g.json").write_text(json.dumps(m))
        with pytest.raises(ReleaseFileError, match=re.escape(words)):
            read_frame_release(dst, tmp_path / "g.json")
    # a sidecar of another format: the ordinary release format, and an unknown version of this one
    for fmt, words in (("privinfer-frame-release/2", "not a metadata file of a release made on Dask in a format this "
                        "version reads (privinfer-frame-release/1)"),
                       ("privinfer-release/1", "metadata has no 'layout' entry")):
        (tmp_path / "f.json").write_text(json.dumps(dict(meta, format=fmt)))
        err = _one_line_error(["fit", dst, "--metadata", tmp_path / "f.json", *FIT, "--output", outdir], capsys)
        assert words in err
    with pytest.raises(ReleaseFileError, match="format this version reads"):
        read_frame_release(dst, tmp_path / "f.json")
    # the two-way table model does not apply per group
    err = _one_line_error(["fit", dst, "--model", "contingency", *FIT, "--output", outdir], capsys)
    assert "--model contingency fits a two-way table" in err
    # a mechanism keeping no total: read, but not fitted
    _, iid, _ = release_file(dst, tmp_path / "iid.csv", invariant="groups:state", column="pop", seed=1,
                             mechanism="double-geometric", epsilon=1.0, scheduler=client.scheduler.address,
                             ledger=None)
    rel = read_frame_release(iid)
    assert rel.totals is None and rel.sizes.tolist() == [4, 3, 1]
    err = _one_line_error(["fit", iid, *FIT, "--output", outdir], capsys)
    assert "mechanism double-geometric keeps no group totals" in err
    # an ordinary release is fitted in this process: --workers / --scheduler are refused
    counts = tmp_path / "counts.csv"
    pd.DataFrame({"state": STATE, "pop": POP}).to_csv(counts, index=False)
    release_counts_file(counts, tmp_path / "plain.csv", invariant="groups:state", epsilon=1.0, rng=1, ledger=None)
    err = _one_line_error(["fit", tmp_path / "plain.csv", *FIT, "--output", outdir, "--workers", "1"], capsys)
    assert "--workers/--scheduler fit a release made on Dask" in err
    assert not outdir.exists()
