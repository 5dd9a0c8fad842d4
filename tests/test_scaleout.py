"""privinfer.scaleout: releases and fits of pandas / Dask frames group by group on a Dask cluster.

One LocalCluster (2 worker processes, small memory) serves the whole module.
"""

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

dd = pytest.importorskip("dask.dataframe")  # the scale extra is part of the test install
from dask.distributed import Client, LocalCluster  # noqa: E402

from privinfer import invariants  # noqa: E402
from privinfer.cli import main  # noqa: E402
from privinfer.mechanisms import build  # noqa: E402
from privinfer.scaleout import fit_groups, read_frame, release_file, release_frame, write_frame  # noqa: E402
from privinfer.workflow import BudgetExceededError, Ledger, LedgerError, ReleaseFileError  # noqa: E402
from privinfer.workflow.release import release_counts_file  # noqa: E402
from privinfer.workflow.table_io import cell_text, check_counts, survey_codes  # noqa: E402

SCATTERED = "ignore:groups are scattered"


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit="1GiB",
                      dashboard_address=None) as cluster, Client(cluster) as c:
        yield c


def _frame(seed=0, n_groups=40):
    """Groups of 1..60 cells (one group of one cell), rows shuffled so groups span partitions."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 60, n_groups)
    sizes[0] = 1
    g = np.repeat([f"s{i:02d}" for i in range(n_groups)], sizes)
    perm = rng.permutation(g.size)
    return pd.DataFrame({"block": np.arange(g.size) * 7, "state": g[perm],
                         "note": [f"r{i}" for i in range(g.size)], "pop": rng.integers(0, 500, g.size)},
                        index=pd.RangeIndex(g.size) * 3)


@pytest.mark.filterwarnings(SCATTERED)
@pytest.mark.parametrize("mechanism,options", [("generalized-laplace", {"epsilon": 0.5}),
                                               ("generalized-gaussian", {"sigma": 3.0}),
                                               ("double-geometric", {"epsilon": 0.5})])
def test_same_release_for_any_partitioning_and_totals_kept(client, mechanism, options):
    # the generalized Gaussian's one-dependent-cell rejection costs about sqrt(k) tries per group
    df = _frame(n_groups=12 if mechanism == "generalized-gaussian" else 40)
    ref = release_frame(df, value="pop", group="state", mechanism=mechanism, seed=11, **options)
    for p in (1, 3, 7):
        ddf = dd.from_pandas(df, npartitions=p)
        rel = release_frame(ddf, value="pop", group="state", mechanism=mechanism, seed=11, **options)
        out = rel.frame.compute()
        # Dask stores the input's strings as its own string dtype: compare the values
        pd.testing.assert_frame_equal(out, ref.frame, check_dtype=False)
        assert out["pop"].dtype == np.int64
        assert rel.frame.npartitions == p and rel.frame.divisions == ddf.divisions
    out = ref.frame
    # other columns, index and row order kept; counts released as int64
    pd.testing.assert_frame_equal(out.drop(columns="pop"), df.drop(columns="pop"))
    assert out["pop"].dtype == np.int64
    assert (out["pop"] != df["pop"]).mean() > 0.3  # noise was added (scale >= 2: P(e_i = 0) < 0.5)
    true_totals = df.groupby("state", sort=False)["pop"].sum()
    if mechanism == "double-geometric":
        assert ref.totals is None  # iid noise keeps no total
    else:
        released = out.groupby("state", sort=False)["pop"].sum()
        pd.testing.assert_series_equal(released, true_totals, check_names=False)
        pd.testing.assert_series_equal(ref.totals, true_totals, check_names=False)
        one = df["state"] == "s00"  # a group of one cell is its published total
        assert out.loc[one, "pop"].tolist() == df.loc[one, "pop"].tolist()
    other = release_frame(df, value="pop", group="state", mechanism=mechanism, seed=12, **options).frame
    assert not other["pop"].equals(out["pop"])


def test_without_seed_two_releases_differ():
    df = _frame()
    a = release_frame(df, value="pop", group="state", mechanism="generalized-laplace", epsilon=0.5).frame
    b = release_frame(df, value="pop", group="state", mechanism="generalized-laplace", epsilon=0.5).frame
    assert not a["pop"].equals(b["pop"])


def _k3_pmf(eps, R):
    """Exact law of the generalized Laplace noise on total(3), by enumeration of (e1, e2) with
    e3 = -e1 - e2: p ∝ exp(-eps (|e1| + |e2| + |e1 + e2|)); mass beyond |e_i| <= R is below
    exp(-2 eps R) times a constant, negligible for the R used."""
    e1, e2 = np.meshgrid(np.arange(-R, R + 1), np.arange(-R, R + 1), indexing="ij")
    w = np.exp(-eps * (np.abs(e1) + np.abs(e2) + np.abs(e1 + e2)))
    return e1.ravel(), e2.ravel(), w.ravel() / w.sum()


def _bins(e1, e2, c=2):
    """Cell (e1, e2) clipped to [-c, c]^2: 25 bins."""
    return (np.clip(e1, -c, c) + c) * (2 * c + 1) + (np.clip(e2, -c, c) + c)


def test_noise_law_matches_the_exact_sampler(client):
    # 3000 groups of 3 cells on the cluster (3 partitions): the noises of different groups are
    # independent draws of the law on {e : e1 + e2 + e3 = 0}; the (e1, e2) pairs are compared
    # with (a) the exact law by enumeration (goodness of fit) and (b) 3000 draws of the
    # single-process exact sampler (homogeneity).  Each test has size alpha = 1e-3: the
    # threshold is the chi-square (1 - alpha) quantile with the test's degrees of freedom.
    eps, G, alpha = 0.7, 3000, 1e-3
    df = pd.DataFrame({"g": np.repeat(np.arange(G), 3), "x": np.full(3 * G, 50)})
    rel = release_frame(dd.from_pandas(df, npartitions=3), value="x", group="g", mechanism="generalized-laplace",
                        seed=2024, epsilon=eps)
    e = (rel.frame.compute()["x"].to_numpy() - 50).reshape(G, 3)
    assert np.all(e.sum(axis=1) == 0)
    got = np.bincount(_bins(e[:, 0], e[:, 1]), minlength=25)

    a1, a2, p = _k3_pmf(eps, 60)
    expected = np.bincount(_bins(a1, a2), weights=p, minlength=25) * G
    assert expected.min() > 5  # chi-square approximation valid in every bin
    stat = ((got - expected) ** 2 / expected).sum()
    assert stat < stats.chi2.ppf(1 - alpha, 24), stat

    m = build("generalized-laplace", invariants.total(3), 3, epsilon=eps)
    assert m.exact
    ref = m.sample_noise((G,), rng=np.random.default_rng(7))
    ref_counts = np.bincount(_bins(ref[:, 0], ref[:, 1]), minlength=25)
    _, pval, _, _ = stats.chi2_contingency(np.vstack([got, ref_counts]))
    assert pval > alpha, pval

    # the test has power: the same draws are rejected against the law of a different epsilon
    b1, b2, q = _k3_pmf(1.0, 60)
    wrong = np.bincount(_bins(b1, b2), weights=q, minlength=25) * G
    assert ((got - wrong) ** 2 / wrong).sum() > stats.chi2.ppf(1 - alpha, 24)


def _cli_error(path, **kw):
    """The one-line error of the command line's reader (normal path) on ``path``."""
    with pytest.raises(ReleaseFileError) as err:
        release_counts_file(path, path.parent / "normal-out.csv", invariant="groups:state", epsilon=1.0, ledger=None,
                            **kw)
    return str(err.value)


def _frame_error(frame, **kw):
    with pytest.raises(ReleaseFileError) as err:
        release_frame(frame, value="pop", group="state", mechanism="generalized-laplace", epsilon=1.0, **kw)
    assert "\n" not in str(err.value)
    return str(err.value)


@pytest.mark.parametrize("bad", ["abc", "-3", "", "2.5", "nan", "1e30", "99999999999999999999", "1_000"])
def test_bad_counts_give_the_command_line_errors(client, tmp_path, bad):
    # the frame release and the command line's reader use one implementation of the checks:
    # the messages are compared with the command line's own text, not with a copy of it
    rows = [f"s{i % 3},{i}" for i in range(12)]
    rows[7] = f"s1,{bad}"
    path = tmp_path / "counts.csv"
    path.write_text("state,pop\n" + "\n".join(rows) + "\n")
    expected = _cli_error(path)
    assert expected.startswith("counts.csv: data row 8, column 'pop' ")
    if bad:
        assert bad not in expected  # never the value
    for frame in (read_frame(path), dd.from_pandas(read_frame(path), npartitions=3)):
        assert _frame_error(frame, source="counts.csv") == expected
        assert _frame_error(frame) == expected[len("counts.csv: "):]  # a frame without a file name
    with pytest.raises(ReleaseFileError) as err:  # privinfer release --scheduler
        release_file(path, tmp_path / "out.csv", invariant="groups:state", epsilon=1.0,
                     scheduler=client.scheduler.address)
    assert str(err.value) == expected
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "out.json").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_count_errors_across_partitions_and_typed_columns(tmp_path):
    # the sum of the magnitudes passes 2^52 in the third partition: the message names the global row
    big = 2**50
    df = pd.DataFrame({"state": ["a", "b"] * 6, "pop": [big] * 12})
    path = tmp_path / "counts.csv"
    df.to_csv(path, index=False)
    expected = _cli_error(path)
    assert "data row 5, column 'pop': the counts up to this row add up to more than 2^52" in expected
    assert _frame_error(dd.from_pandas(df, npartitions=4), source="counts.csv") == expected
    assert _frame_error(df, source="counts.csv") == expected
    # typed Parquet columns (floats with NaN, fractions, negatives) read as the command line reads them
    for values in ([1.0, 2.0, np.nan, 4.0], [1.0, 2.5, 3.0, 4.0], [1, 2, -3, 4], [1.0, 2.0, 1e19, 4.0]):
        typed = pd.DataFrame({"state": ["a", "a", "b", "b"], "pop": values})
        pq = tmp_path / "typed.parquet"
        typed.to_parquet(pq, index=False)
        expected = _cli_error(pq)
        assert _frame_error(dd.read_parquet(str(pq)), source="typed.parquet") == expected


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.integers(-2**64, 2**64), st.floats(allow_nan=True, allow_infinity=True)),
                min_size=1, max_size=12),
       st.sampled_from(["int64", "uint64", "float64", "object"]), st.booleans(), st.booleans())
def test_typed_columns_read_as_their_text(values, dtype, integer, nonnegative):
    # a typed partition (Parquet, pandas) is checked as the text the command line would read
    if dtype in ("int64", "uint64"):
        lo, hi = (-2**63, 2**63 - 1) if dtype == "int64" else (0, 2**64 - 1)
        values = [int(v) for v in values if isinstance(v, int) and lo <= v <= hi] or [0]
    series = pd.Series(values, dtype=dtype if dtype != "float64" else float)
    typed = check_counts(series, integer=integer, nonnegative=nonnegative)
    text = check_counts(cell_text(series), integer=integer, nonnegative=nonnegative)
    assert typed.problem == text.problem
    assert typed.magnitude == text.magnitude
    stop = typed.problem[0] if typed.problem else len(values)
    assert typed.values[:stop].tolist() == text.values[:stop].tolist()


def test_bad_groups_columns_and_options():
    df = pd.DataFrame({"state": ["a", None, "b"], "pop": [1, 2, 3]})
    with pytest.raises(ReleaseFileError, match="^data row 2, column 'state' is blank \\(every cell needs a group\\)$"):
        release_frame(df, value="pop", group="state", mechanism="generalized-laplace", epsilon=1.0)
    with pytest.raises(ReleaseFileError, match="count column 'count' not found"):
        release_frame(df, value="count", group="state", mechanism="generalized-laplace", epsilon=1.0)
    with pytest.raises(ValueError, match="cannot release a frame by groups"):
        release_frame(df, value="pop", group="state", mechanism="projected-gaussian", sigma=1.0)
    with pytest.raises(ValueError, match="needs --epsilon"):
        release_frame(df, value="pop", group="state", mechanism="generalized-laplace")
    with pytest.raises(TypeError, match="not a Generator"):
        release_frame(df.dropna(), value="pop", group="state", mechanism="generalized-laplace", epsilon=1.0,
                      seed=np.random.default_rng(1))
    with pytest.raises(LedgerError, match="a budget needs a ledger"):
        release_frame(df.dropna(), value="pop", group="state", mechanism="generalized-laplace", epsilon=1.0,
                      budget="epsilon=1")


def test_guarantee_is_the_per_group_mechanisms():
    df = pd.DataFrame({"g": [1, 1, 1, 2, 2, 2, 2], "c": [3, 4, 5, 6, 7, 8, 9]})
    gl = release_frame(df, value="c", group="g", mechanism="generalized-laplace", seed=1, epsilon=0.5).guarantee
    assert gl.kind == "pure" and gl.epsilon == 0.5 and gl["delta"] == 0 and gl["exact"]
    gg = release_frame(df, value="c", group="g", mechanism="generalized-gaussian", seed=1, sigma=2.0).guarantee
    assert gg.kind == "zcdp" and gg.rho == pytest.approx(1 / 8) and gg["exact"]
    # the l2 generalized Laplace is drawn by a Markov chain per group: delta > 0, never claimed exact
    rel = release_frame(df, value="c", group="g", mechanism="generalized-laplace", seed=1, epsilon=1.0, norm="l2")
    g = rel.guarantee
    per_group = [build("generalized-laplace", invariants.total(k), k, epsilon=1.0, norm="l2") for k in (3, 4)]
    assert not g["exact"] and not rel.sampler["exact"] and g["delta"] > 0
    assert "parallel composition" in g.relation
    assert rel.frame.groupby("g")["c"].sum().tolist() == [12, 30]
    assert all(not m.exact for m in per_group)


def test_files_and_command_line_on_the_cluster(client, tmp_path):
    df = _frame(seed=3, n_groups=8)
    df["secret"] = np.arange(len(df))  # not a label: never written to the release
    src = tmp_path / "counts.parquet"
    write_frame(df, src)
    pd.testing.assert_frame_equal(read_frame(src), df.reset_index(drop=True))
    address = client.scheduler.address
    out = tmp_path / "release.csv"
    rel, dst, meta_path = release_file(src, out, invariant="groups:state", column="pop", keep=["block"], seed=5,
                                       scheduler=address, epsilon=0.5)
    got = pd.read_csv(dst)
    assert list(got.columns) == ["block", "state", "pop"]
    assert got["block"].tolist() == df["block"].tolist()
    meta = json.loads(meta_path.read_text())
    _, _, meta6 = release_file(src, tmp_path / "six.csv", invariant="groups:state", column="pop", keep=["block"],
                               seed=6, scheduler=address, epsilon=0.5)
    meta6 = json.loads(meta6.read_text())
    for m in (meta, meta6):
        m["provenance"].pop("created")
        m.pop("ledger_entry")
    assert meta == meta6  # the sidecar does not depend on the seed (never records it)
    assert meta["guarantee"]["parameters"]["epsilon"] == 0.5 and meta["guarantee"]["parameters"]["delta"] == 0
    totals = dict(zip(meta["invariant"]["totals"]["groups"], meta["invariant"]["totals"]["t"]))
    assert got.groupby("state")["pop"].sum().to_dict() == df.groupby("state")["pop"].sum().to_dict() == totals
    # the same release through a CSV input and the command line, written as Parquet
    csv_in = tmp_path / "counts.csv"
    write_frame(df, csv_in)
    status = main(["release", str(csv_in), str(tmp_path / "cli.parquet"), "--invariant", "groups:state",
                   "--column", "pop", "--keep", "block", "--epsilon", "0.5", "--seed", "5", "--scheduler", address])
    assert status == 0
    cli = pd.read_parquet(tmp_path / "cli.parquet")
    assert cli["pop"].tolist() == got["pop"].tolist()  # same seed, same groups: same release
    assert main(["release", str(csv_in), str(tmp_path / "x.csv"), "--invariant", "total", "--epsilon", "1",
                 "--scheduler", address]) == 2


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_fit_groups_on_the_cluster(client):
    df = pd.DataFrame({"state": ["A"] * 4 + ["B"] * 3, "pop": [1200, 800, 2500, 600, 3000, 1500, 900]})
    rel = release_frame(df, value="pop", group="state", mechanism="generalized-laplace", seed=3, epsilon=0.2)
    idata = fit_groups(rel, client=client, draws=100, tune=100, chains=1, seed=4)
    post = idata.posterior
    assert list(post["group"].values) == ["A", "B"]
    assert post["mu"].dims == ("group", "chain", "draw")
    assert post["x"].sizes["cell"] == 7
    x = post["x"].values.reshape(-1, 7)
    # every posterior draw keeps each state's published total exactly
    assert np.all(x[:, :4].sum(axis=1) == 5100) and np.all(x[:, 4:].sum(axis=1) == 5400)
    assert list(post["cell_group"].values) == ["A"] * 4 + ["B"] * 3
    # the only coordinates along the cells: their position and their group (no per-group labels
    # such as "cell 1".."cell 4" that would repeat across groups)
    assert set(post["x"].coords) - {"chain", "draw"} == {"cell", "cell_group"}


def _counts_csv(path, n_groups=5, seed=0):
    """A counts file with a numeric block id, a text name, the group, the counts, and a
    numeric column that is not a label (it may be confidential)."""
    rng = np.random.default_rng(seed)
    n = 12 * n_groups
    df = pd.DataFrame({"block": np.arange(n) * 10 + 1, "name": [f"b{i}" for i in range(n)],
                       "state": np.repeat([f"s{i}" for i in range(n_groups)], 12),
                       "secret": rng.integers(0, 9, n), "pop": rng.integers(0, 300, n)})
    df.to_csv(path, index=False)
    return df


def test_frame_release_is_accounted_like_make_release(client, tmp_path, monkeypatch):
    df = _counts_csv(tmp_path / "c.csv")
    book = Ledger(tmp_path / "book.json")
    rel = release_frame(dd.from_pandas(df, npartitions=4), value="pop", group="state",
                        mechanism="generalized-laplace", epsilon=0.5, seed=1, ledger=book, budget="epsilon=1",
                        source="c.csv", output="r.csv")
    (entry,) = book.entries()
    assert rel.ledger_entry == entry.id and entry.cells == len(df)
    # the fingerprint streamed over the partitions is the one make_release computes for the counts
    assert entry.fingerprint == book.fingerprint(df["pop"].to_numpy())
    assert entry.guarantee.kind == "pure" and entry.guarantee.epsilon == 0.5
    # the budget is checked before any noise is drawn: a refused release never reaches the sampler
    import privinfer.scaleout.frames as frames

    def no_noise(*args, **kwargs):
        raise AssertionError("noise drawn for a refused release")

    monkeypatch.setattr(frames, "release_block", no_noise)
    monkeypatch.setattr(frames, "_release_dask", no_noise)
    before = (tmp_path / "book.json").read_bytes()
    for frame in (df, dd.from_pandas(df, npartitions=3)):
        with pytest.raises(BudgetExceededError, match="over the budget epsilon=1"):
            release_frame(frame, value="pop", group="state", mechanism="generalized-laplace", epsilon=0.6,
                          ledger=book)
    assert (tmp_path / "book.json").read_bytes() == before  # the ledger is unchanged


def _cli(args, address):
    return main(["release", *map(str, args), "--scheduler", address])


def test_command_line_ledger_budget_force_on_the_cluster(client, tmp_path, capsys):
    address = client.scheduler.address
    src = tmp_path / "c.csv"
    df = _counts_csv(src)
    book = tmp_path / "book.json"
    common = ["--invariant", "groups:state", "--column", "pop", "--ledger", book]
    # one release through the normal path, one on the cluster: one ledger, one input, one fingerprint
    assert main(["release", *map(str, [src, tmp_path / "normal.csv", *common]), "--epsilon", "0.5",
                 "--budget", "epsilon=1"]) == 0
    assert _cli([src, tmp_path / "dask.csv", *common, "--epsilon", "0.5", "--seed", "3"], address) == 0
    normal, dask_entry = Ledger(book).entries()
    assert dask_entry.fingerprint == normal.fingerprint
    meta = json.loads((tmp_path / "dask.json").read_text())
    assert meta["ledger_entry"] == dask_entry.id and dask_entry.output == "dask.csv"
    assert f"ledger: entry {dask_entry.id}" in capsys.readouterr().out
    # the budget (recorded by the first release) is spent: refused before anything is written
    ledger_before = book.read_bytes()
    capsys.readouterr()
    assert _cli([src, tmp_path / "more.csv", *common, "--epsilon", "0.1"], address) == 2
    err = capsys.readouterr().err
    assert err.startswith("privinfer: error: release refused") and err.count("\n") == 1
    assert book.read_bytes() == ledger_before and not (tmp_path / "more.csv").exists()
    # no overwriting without --force (checked before anything is read or spent)
    released = (tmp_path / "dask.csv").read_bytes()
    assert _cli([src, tmp_path / "dask.csv", "--invariant", "groups:state", "--column", "pop", "--epsilon", "0.5"],
                address) == 2
    assert "exists already: pass --force" in capsys.readouterr().err
    assert (tmp_path / "dask.csv").read_bytes() == released
    assert not (tmp_path / "privinfer-ledger.json").exists()
    # --force replaces the release and its sidecar; the default ledger sits beside the output
    assert _cli([src, tmp_path / "dask.csv", "--invariant", "groups:state", "--column", "pop", "--epsilon", "0.5",
                 "--seed", "4", "--force"], address) == 0
    (entry,) = Ledger(tmp_path / "privinfer-ledger.json").entries()
    assert json.loads((tmp_path / "dask.json").read_text())["ledger_entry"] == entry.id
    assert (tmp_path / "dask.csv").read_bytes() != released
    # a Parquet folder output: refused when it exists, replaced with --force
    pq = tmp_path / "out.parquet"
    assert _cli([src, pq, *common[:4], "--epsilon", "0.5", "--ledger", tmp_path / "b2.json"], address) == 0
    assert _cli([src, pq, *common[:4], "--epsilon", "0.5", "--ledger", tmp_path / "b2.json"], address) == 2
    assert _cli([src, pq, *common[:4], "--epsilon", "0.5", "--ledger", tmp_path / "b2.json", "--force"], address) == 0
    assert pd.read_parquet(pq)["pop"].sum() == df["pop"].sum()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".") and not p.name.endswith(".key")]


def test_interrupted_write_leaves_no_output(client, tmp_path, monkeypatch):
    src = tmp_path / "c.csv"
    _counts_csv(src)
    import privinfer.scaleout.files as sf

    real = sf.write_frame

    def half_then_fail(frame, path, **kw):
        real(frame, path, **kw)  # the release is complete in the temporary file ...
        raise KeyboardInterrupt  # ... when the run is interrupted

    monkeypatch.setattr(sf, "write_frame", half_then_fail)
    with pytest.raises(KeyboardInterrupt):
        release_file(src, tmp_path / "r.csv", invariant="groups:state", column="pop", epsilon=0.5,
                     scheduler=client.scheduler.address)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.csv", "privinfer-ledger.json", "privinfer-ledger.key"]


def test_ids_and_columns_as_the_normal_path(client, tmp_path):
    address = client.scheduler.address
    src = tmp_path / "c.csv"
    df = _counts_csv(src)
    normal, _, _ = release_counts_file(src, tmp_path / "n.csv", invariant="groups:state", column="pop", epsilon=0.5,
                                       ledger=None)
    rel, dst, meta_path = release_file(src, tmp_path / "d.csv", invariant="groups:state", column="pop", epsilon=0.5,
                                       scheduler=address, ledger=None)
    # default: every column without numbers is copied; the numeric ones are listed as left out
    got = pd.read_csv(dst, dtype=str)
    assert list(got.columns) == pd.read_csv(tmp_path / "n.csv", nrows=0).columns.tolist() == ["name", "state", "pop"]
    meta = json.loads(meta_path.read_text())
    assert meta["not_copied"] == normal.layout.not_copied == ["block", "secret"]
    assert got["name"].tolist() == df["name"].tolist()
    # --id: that column (numbers allowed), with the group column
    _, dst, _ = release_file(src, tmp_path / "i.csv", invariant="groups:state", column="pop", epsilon=0.5,
                             id_column="block", scheduler=address, ledger=None)
    got = pd.read_csv(dst)
    assert list(got.columns) == ["block", "state", "pop"] and got["block"].tolist() == df["block"].tolist()
    # duplicate and blank ids: the normal path's messages, naming the data rows
    for change, kw in ((lambda d: d.assign(block=d["block"].where(d.index != 40, d["block"][17])),
                        {"id_column": "block"}),
                       (lambda d: d.assign(name=d["name"].where(d.index != 29, d["name"][5]), state="s0"), {}),
                       (lambda d: d.assign(block=d["block"].astype(str).where(d.index != 33, "")),
                        {"id_column": "block"})):
        bad = tmp_path / "bad.csv"
        change(df.copy()).to_csv(bad, index=False)
        with pytest.raises(ReleaseFileError) as expected:
            release_counts_file(bad, tmp_path / "x.csv", invariant="groups:state", column="pop", epsilon=0.5,
                                ledger=None, **kw)
        frame_kw = {"id_column": kw["id_column"]} if kw else {}
        with pytest.raises(ReleaseFileError) as err:
            release_file(bad, tmp_path / "y.csv", invariant="groups:state", column="pop", epsilon=0.5,
                         scheduler=address, ledger=None, **frame_kw)
        assert str(err.value) == str(expected.value)
        assert "data row" in str(err.value)


def test_encoding(client, tmp_path, capsys):
    address = client.scheduler.address
    src = tmp_path / "latin.csv"
    src.write_bytes("name,state,pop\n".encode() + "".join(f"Saint-Jos\u00e9 {i},s{i % 2},{i}\n" for i in range(8))
                    .encode("latin-1"))
    assert _cli([src, tmp_path / "r.csv", "--invariant", "groups:state", "--epsilon", "1"], address) == 2
    err = capsys.readouterr().err
    assert "latin.csv: not valid UTF-8 text (a Latin-1 file? read it with --encoding latin-1" in err
    assert err.count("\n") == 1
    assert _cli([src, tmp_path / "r.csv", "--invariant", "groups:state", "--epsilon", "1", "--encoding", "latin-1"],
                address) == 0
    assert pd.read_csv(tmp_path / "r.csv")["name"].tolist() == [f"Saint-Jos\u00e9 {i}" for i in range(8)]
    assert _cli([src, tmp_path / "q.csv", "--invariant", "groups:state", "--epsilon", "1", "--encoding", "klingon"],
                address) == 2
    assert "unknown text encoding 'klingon'" in capsys.readouterr().err


# Counties as the Census writes them (FIPS codes zero-padded to their width); the first rows hold
# no leading zero in 'county', so the first partition alone would read it as numbers.
FIPS_ROWS = [("01", "101", "01101", 229363, 86068), ("01", "103", "01103", 119490, 46027),
             ("01", "105", "01105", 10591, 3785), ("10", "001", "10001", 162310, 59900),
             ("10", "003", "10003", 538479, 202650), ("02", "013", "02013", 3141, 1113),
             ("02", "016", "02016", 5561, 1964)]


def test_zero_padded_codes_and_id_names_as_the_normal_path(client, tmp_path, monkeypatch):
    import privinfer.scaleout.files as files
    from privinfer.scaleout import read_frame_release

    address = client.scheduler.address
    src = tmp_path / "fips.csv"
    pd.DataFrame(FIPS_ROWS, columns=["state", "county", "geoid", "population", "households"]).astype(str) \
        .to_csv(src, index=False)
    monkeypatch.setattr(files, "CSV_BLOCKSIZE", 64)  # a few rows per partition
    parts = read_frame(src, dask=True)
    assert parts.npartitions >= 3
    # the rule must look at the whole column: its first partition alone holds no leading zero
    assert not survey_codes(parts.get_partition(0)["county"].compute()).zero_padded
    normal, _, _ = release_counts_file(src, tmp_path / "n.csv", invariant="groups:state", column="population",
                                       epsilon=0.5, ledger=None)
    ids = [r[:3] for r in FIPS_ROWS]
    assert normal.cell_ids() == (["state", "county", "geoid"], ids)
    for out in (tmp_path / "d.csv", tmp_path / "p.parquet"):
        rel, dst, meta_path = release_file(src, out, invariant="groups:state", column="population", epsilon=0.5,
                                           seed=1, scheduler=address, ledger=None)
        meta = json.loads(meta_path.read_text())
        # zero-padded codes over all partitions together are ids; households holds counts
        assert meta["label_columns"] == ["state", "county", "geoid"]
        assert meta["not_copied"] == normal.layout.not_copied == ["households"]
        got = read_frame(dst)  # CSV read as text; the Parquet columns were written as text
        assert list(got.columns) == ["state", "county", "geoid", "population"]
        assert list(zip(got["state"], got["county"], got["geoid"])) == ids
        back = read_frame_release(dst)
        assert list(zip(back.frame["county"], back.frame["geoid"])) == [r[1:3] for r in ids]
        assert list(back.totals.index) == ["01", "10", "02"]  # group keys keep their zeros too
