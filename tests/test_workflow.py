"""The release-to-fit spine: make_release -> Release.write -> read_release -> fit."""

import json
import sys

import numpy as np
import pytest

import privinfer
from privinfer import invariants as I
from privinfer.invariants import InfeasibleInvariantError
from privinfer.mechanisms import DoubleGeometric, GeneralizedLaplace, ProjectedGaussian
from privinfer.workflow import Release, ReleaseFileError, make_release, read_release

COUNTS = np.array([[15, 1, 3, 1], [20, 10, 10, 15], [3, 10, 10, 2], [12, 14, 7, 2]])


def test_import_privinfer_does_not_import_pymc():
    import subprocess

    code = ("import sys, privinfer; privinfer.Release; privinfer.make_release; privinfer.read_release; "
            "privinfer.fit; print('pymc' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
    assert privinfer.Release is Release and privinfer.read_release is read_release


def _logp_agrees(a, b, y, rng, integer):
    """Both mechanisms give the same log-likelihood of ``y`` at random points of its fibre."""
    inv = a.invariant
    for _ in range(5):
        if integer:
            B = inv.lattice_basis()
            x = y + B @ rng.integers(-3, 4, size=B.shape[1])
        else:
            x = y + inv.project_null(rng.normal(0, 3, size=y.size))
        assert np.isfinite(a.logp(y, x))
        assert a.logp(y, x) == pytest.approx(b.logp(y, x), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case", ["table", "groups", "total-real"])
def test_round_trip_keeps_values_invariant_ids_and_likelihood(case, tmp_path):
    rng = np.random.default_rng(5)
    if case == "table":
        rel = make_release(COUNTS, GeneralizedLaplace(I.margins((4, 4), [(0,), (1,)]), 0.5), rng=11,
                           ids=(["Alpha", "Beta", "Gamma", "Delta"], ["Low", "Medium", "High", "Very High"]))
    elif case == "groups":
        x = np.array([18656, 19956, 21421, 8249, 24877, 1951269, 46997])
        rel = make_release(x, "generalized-laplace", invariant=I.groups(["KY"] * 4 + ["NV"] * 3), epsilon=1.0,
                           rng=12, ids=["Adair", "Allen", "Anderson", "Ballard", "Churchill", "Clark", "Douglas"],
                           source="counties.csv")
    else:
        rel = make_release(np.array([5.0, 17.0, 2.0, 40.0]), ProjectedGaussian(I.total(4), sigma=2.0), rng=13)
    assert rel.invariant.satisfied_by(rel.y.astype(float), rel.t, atol=0.0 if rel.integer else None)
    csv_path, meta_path = rel.write(tmp_path / "rel.csv")
    back = read_release(csv_path)
    assert back.integer == rel.integer and back.y.dtype == rel.y.dtype
    np.testing.assert_array_equal(back.y, rel.y)
    np.testing.assert_array_equal(back.t, rel.t)
    assert back.labels == rel.labels and back.shape == rel.shape
    assert type(back.mechanism) is type(rel.mechanism)
    assert dict(back.guarantee.parameters) == dict(rel.guarantee.parameters)
    _logp_agrees(rel.mechanism, back.mechanism, rel.y, rng, rel.integer)
    meta = json.loads(meta_path.read_text())
    assert meta["provenance"]["privinfer_version"] == privinfer.__version__
    assert "seed" not in meta_path.read_text()
    if case == "groups":
        assert meta["provenance"]["source"] == "counties.csv"
        assert back.labels[0] == "KY / Adair" and meta["invariant"]["t_labels"] == ["group=KY", "group=NV"]
        # the confidential counts appear nowhere in the sidecar
        for v in (18656, 1951269):
            assert str(v) not in meta_path.read_text()
    # writing the read release again gives the same files
    again_csv, again_meta = back.write(tmp_path / "again.csv")
    assert again_csv.read_text() == csv_path.read_text()
    assert json.loads(again_meta.read_text()) == meta


def test_make_release_checks_its_input():
    gl = GeneralizedLaplace(I.total(3), 1.0)
    with pytest.raises(ValueError, match="integer counts"):
        make_release([1.5, 2, 3], gl, rng=1)
    with pytest.raises(ValueError, match="x has 4 cells but the mechanism acts on 3"):
        make_release([1, 2, 3, 4], gl, rng=1)
    with pytest.raises(ValueError, match="non-finite"):
        make_release([1.0, np.nan, 3.0], ProjectedGaussian(I.total(3), sigma=1.0), rng=1)
    with pytest.raises(ValueError, match="own invariant"):
        make_release([1, 2, 3], gl, invariant=I.groups([0, 0, 1]), rng=1)
    with pytest.raises(TypeError, match="mechanism name"):
        make_release([1, 2, 3], gl, epsilon=1.0)
    with pytest.raises(ValueError, match="needs --epsilon"):
        make_release([1, 2, 3], "generalized-laplace", invariant=I.total(3))


def test_release_refuses_values_off_the_invariant():
    gl = GeneralizedLaplace(I.total(3), 1.0)
    with pytest.raises(InfeasibleInvariantError, match="does not satisfy"):
        Release(np.array([1, 2, 4]), gl, t=[6])
    with pytest.raises(ValueError, match="invariant values t"):
        Release(np.array([1, 2, 3]), gl)  # no t: a release must carry the published totals
    with pytest.raises(ValueError, match="hold integers"):
        Release(np.array([1.5, 2, 2.5]), gl, t=[6])
    ok = Release(np.array([1, 2, 3]), gl, t=[6])
    assert ok.invariant.t.tolist() == [6]


def _one_line(exc):
    msg = str(exc.value)
    assert "\n" not in msg and msg
    return msg


def test_tampered_files_are_rejected(tmp_path):
    x = np.array([40, 12, 7, 25, 3])
    rel = make_release(x, "generalized-laplace", invariant=I.total(5), epsilon=1.0, rng=3,
                       ids=list("abcde"))
    csv_path, meta_path = rel.write(tmp_path / "rel.csv")
    good_csv, good_meta = csv_path.read_text(), meta_path.read_text()
    # a released value changed: the total no longer matches t
    lines = good_csv.splitlines()
    cell, value = lines[1].rsplit(",", 1)
    csv_path.write_text("\n".join([lines[0], f"{cell},{int(value) + 1}"] + lines[2:]) + "\n")
    with pytest.raises(InfeasibleInvariantError) as exc:
        read_release(csv_path)
    assert "does not satisfy the invariant" in _one_line(exc)
    csv_path.write_text(good_csv)
    # t changed in the sidecar
    meta = json.loads(good_meta)
    meta["invariant"]["t"] = [meta["invariant"]["t"][0] - 2]
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(InfeasibleInvariantError) as exc:
        read_release(csv_path)
    assert "does not satisfy the invariant" in _one_line(exc)
    # a row dropped from the CSV
    meta_path.write_text(good_meta)
    csv_path.write_text("\n".join(good_csv.splitlines()[:-1]) + "\n")
    with pytest.raises(ReleaseFileError) as exc:
        read_release(csv_path)
    assert "4 released cells, the metadata says 5" in _one_line(exc)
    csv_path.write_text(good_csv)
    # an unknown mechanism parameter, an unknown mechanism, a non-integer value
    for change, fragment in ((lambda m: m["mechanism"]["parameters"].update(scale=2), "unknown mechanism parameter"),
                             (lambda m: m["mechanism"].update(name="laplace-ish"), "unknown mechanism"),
                             (lambda m: m.update(format="other"), "not a privinfer release metadata file")):
        meta = json.loads(good_meta)
        change(meta)
        meta_path.write_text(json.dumps(meta))
        with pytest.raises(ReleaseFileError) as exc:
            read_release(csv_path)
        assert fragment in _one_line(exc)
    meta_path.write_text(good_meta)
    csv_path.write_text(good_csv.replace(lines[1], lines[1] + ".5"))
    with pytest.raises(ReleaseFileError) as exc:
        read_release(csv_path)
    assert "not an integer" in _one_line(exc)
    csv_path.write_text(good_csv)
    assert np.array_equal(read_release(csv_path).y, rel.y)


def test_releases_that_cannot_be_recorded_write_nothing(tmp_path):
    inv = I.counting([[0, 1], [1, 2]], 3)
    rel = make_release([3, 4, 5], GeneralizedLaplace(inv, 1.0), rng=2)
    with pytest.raises(ReleaseFileError, match="cannot be recorded"):
        rel.write(tmp_path / "rel.csv")
    assert not list(tmp_path.iterdir())
    # an integer mechanism without invariant, released keeping none
    dg = make_release([3, 4, 5], DoubleGeometric(3, 1.0), rng=2)
    csv_path, _ = dg.write(tmp_path / "dg.csv")
    assert read_release(csv_path).invariant is None


@pytest.mark.slow
def test_fit_small_contingency_release():
    rel = make_release(COUNTS, GeneralizedLaplace(I.margins((4, 4), [(0,), (1,)]), 0.5), rng=20)
    res = privinfer.fit(rel, "contingency", draws=150, tune=150, chains=2, seed=3, progressbar=False)
    x = res.draws("x")
    assert x.dtype.kind == "i" and x.shape == (300, 16)
    # every draw keeps the published margins exactly
    assert np.all(rel.invariant.of(x) == rel.t)
    assert np.all(x >= 0)
    # the per-cell summaries are those of the draws
    np.testing.assert_allclose(res.mean, x.mean(0))
    np.testing.assert_allclose(res.sd, x.std(0))
    assert np.all((res.lower <= res.mean) & (res.mean <= res.upper))
    inside = ((x >= res.lower) & (x <= res.upper)).mean(0)
    assert np.all(inside >= 0.9)  # inverted-cdf quantiles hold at least 90% of the draws
    assert np.isfinite(res.rhat_max) and res.ess_bulk_min > 0
    assert res.cell_labels == rel.labels and len(res.cell_labels) == 16
    assert res.idata.posterior["log_odds_ratio"].shape[-2:] == (3, 3)


def test_fit_refuses_unfittable_releases():
    dg = make_release([3, 4, 5], DoubleGeometric(3, 1.0), rng=2)
    with pytest.raises(ReleaseFileError, match="keeps no invariant"):
        privinfer.fit(dg, "county")
    tot = make_release([3, 4, 5], GeneralizedLaplace(I.total(3), 1.0), rng=2)
    with pytest.raises(ReleaseFileError, match="--model contingency"):
        privinfer.fit(tot, "contingency")
    with pytest.raises(TypeError, match="Release"):
        privinfer.fit(np.array([1, 2, 3]), "county")


def test_write_refuses_to_overwrite_unless_asked(tmp_path):
    from privinfer.workflow import OutputExistsError

    x = np.array([40, 12, 7, 25, 3])
    first = make_release(x, GeneralizedLaplace(I.total(5), 0.2), rng=1)
    second = make_release(x, GeneralizedLaplace(I.total(5), 0.2), rng=2)
    assert not np.array_equal(first.y, second.y)
    csv_path, meta_path = first.write(tmp_path / "rel.csv")
    before = (csv_path.read_bytes(), meta_path.read_bytes())
    with pytest.raises(OutputExistsError, match="rel.csv exists already"):
        second.write(tmp_path / "rel.csv")
    with pytest.raises(OutputExistsError, match="rel.json exists already"):
        second.write(tmp_path / "other.csv", tmp_path / "rel.json")
    assert (csv_path.read_bytes(), meta_path.read_bytes()) == before
    assert not (tmp_path / "other.csv").exists()
    second.write(tmp_path / "rel.csv", overwrite=True)
    np.testing.assert_array_equal(read_release(csv_path).y, second.y)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel.csv", "rel.json"]  # no temporary file left


@pytest.mark.parametrize("ids, shape, message", [
    (["a", "b", "a", "c"], None, "cells 1 and 3 have the same label"),
    (["a", "b", "c"], None, "3 labels for 4 cells"),
    (["a", " ", "b", "c"], None, "cell 2 is blank"),
    ((["r1", "r1"], ["c1", "c2"]), (2, 2), "rows 1 and 2 have the same label"),
    ((["r1", "r2"], ["c1"]), (2, 2), "2 row labels and 2 column labels, not 2 and 1"),
])
def test_ids_must_identify_the_cells(ids, shape, message):
    x = np.array([4, 7, 1, 9])
    inv = I.margins((2, 2), [(0,), (1,)]) if shape else I.total(4)
    secret = "a"  # a label is never echoed
    with pytest.raises(ValueError) as exc:
        make_release(x.reshape(shape) if shape else x, "generalized-laplace", invariant=inv, epsilon=1.0,
                     rng=1, ids=ids)
    msg = _one_line(exc)
    assert message in msg and f"'{secret}'" not in msg


def test_ids_are_checked_before_the_ledger_records_anything(tmp_path):
    book = tmp_path / "ledger.json"
    with pytest.raises(ValueError, match="same label"):
        make_release(np.array([1, 2, 3]), "generalized-laplace", invariant=I.total(3), epsilon=1.0,
                     ids=["a", "a", "b"], ledger=book, budget="epsilon=5")
    assert not book.exists()  # refused before the ledger was opened: no key, no entry
