"""Hostile input to ``privinfer release``: each problem is one line naming the data row and
the column, exit status 2, no output written, and no confidential value echoed.

A sentinel confidential count sits in every file; it must not appear in any message, nor in
any output except the released counts' own cells.
"""

import csv
import io
import json
import pathlib
import sys
import time

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from cli_helpers import run  # noqa: E402

SENTINEL = "987654321987"  # a confidential count (< 2^52)
SECRET_NUMBER = "555444333222"  # a confidential count in a column that is not released




def csv_text(header, rows):
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue()


def assert_one_line_error(rc, out, err, *fragments):
    assert rc == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("privinfer: error: "), err
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    for secret in (SENTINEL, SECRET_NUMBER):
        assert secret not in err and secret not in out


ROWS = [["KY", "Adair", SENTINEL], ["KY", "Allen", "19956"], ["NV", "Clark", "1951269"], ["NV", "Douglas", "46997"]]


def with_cell(row, col, value, rows=ROWS):
    out = [list(r) for r in rows]
    out[row][col] = value
    return out


# name: (file content as bytes, extra options, fragments of the message)
HOSTILE = {
    "count 2^63": (with_cell(1, 2, str(2**63)), [], ["data row 2", "'n'", "too large"]),
    "count 10^20": (with_cell(2, 2, "100000000000000000000"), [], ["data row 3", "'n'", "too large"]),
    "count 1e20": (with_cell(2, 2, "1e20"), [], ["data row 3", "'n'", "too large"]),
    "count 2^53 + 1": (with_cell(3, 2, str(2**53 + 1)), [], ["data row 4", "'n'", "too large"]),
    "counts adding up beyond 2^52": (with_cell(1, 2, str(2**52 - 10**12), with_cell(2, 2, str(2**51))), [],
                                     ["data row 3", "'n'", "add up to more than 2^52"]),
    "NaN": (with_cell(1, 2, "NaN"), [], ["data row 2", "'n'", "not a finite number"]),
    "inf": (with_cell(2, 2, "inf"), [], ["data row 3", "'n'", "not a finite number"]),
    "-Infinity": (with_cell(2, 2, "-Infinity"), [], ["data row 3", "'n'", "not a finite number"]),
    "non-integer": (with_cell(1, 2, "2.5"), [], ["data row 2", "'n'", "not an integer"]),
    "non-integer that rounds to one in floating point": (with_cell(1, 2, "4503599627370496.5"), [],
                                                         ["data row 2", "not an integer"]),
    "negative": (with_cell(3, 2, "-3"), [], ["data row 4", "'n'", "negative"]),
    "text": (with_cell(1, 2, SENTINEL + "x"), [], ["data row 2", "'n'", "not a number"]),
    "digit separators": (with_cell(1, 2, "1_000"), [], ["data row 2", "'n'", "not a number"]),
    "blank count": (with_cell(1, 2, ""), [], ["data row 2", "'n'", "blank"]),
    "duplicate ids": (with_cell(2, 1, "Adair", with_cell(2, 0, "KY")), [],
                      ["data rows 1 and 3", "same id", "'state', 'county'"]),
    "duplicate --id": (with_cell(3, 1, "Allen"), ["--id", "county"], ["data rows 2 and 4", "same id", "'county'"]),
    "blank --id": (with_cell(3, 1, ""), ["--id", "county"], ["data row 4", "'county'", "blank"]),
    "empty group": (with_cell(2, 0, ""), ["--invariant", "groups:state"], ["data row 3", "'state'", "blank",
                                                                          "group"]),
}


def _file_bytes(rows):
    return csv_text(["state", "county", "n"], rows).encode()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_counts_and_ids(case, tmp_path, capsys):
    rows, extra, fragments = HOSTILE[case]
    src = tmp_path / "in.csv"
    src.write_bytes(_file_bytes(rows))
    rc, out, err = run(["release", src, tmp_path / "out.csv", "--epsilon", "1", "--seed", "1"] + extra, capsys)
    assert_one_line_error(rc, out, err, "in.csv", *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]  # no output, no ledger, no key


RAW = {
    "header only": (b"state,county,n\n", ["no data rows"]),
    "header only, blank rows": (b"state,county,n\n\n,,\n  \n", ["no data rows"]),
    "empty header name": (b"state,,n\nKY,Adair," + SENTINEL.encode() + b"\n", ["empty column name"]),
    "duplicate header": (b"n,county,n\n1,Adair," + SENTINEL.encode() + b"\n", ["duplicate column name", "'n'"]),
    "short row": (b"state,county,n\nKY,Adair," + SENTINEL.encode() + b"\nKY,2\n", ["data row 2 has 2 fields",
                                                                                  "header has 3"]),
    "long row": (b"state,county,n\nKY,Adair," + SENTINEL.encode() + b",7\n", ["data row 1 has 4 fields"]),
    "unbalanced quote": (b"state,county,n\nKY,\"Adair," + SENTINEL.encode() + b"\n", ["never closed"]),
    "NUL bytes": (b"state,county,n\nKY,Ad\x00air," + SENTINEL.encode() + b"\n", ["data row 1", "'county'", "NUL"]),
    "UTF-16": ("state,county,n\nKY,Adair,5\n".encode("utf-16"), ["NUL"]),
    "Latin-1": ("state,county,n\nKY,Adair," + SENTINEL + "\nNM,Do\u00f1a Ana,219561\n").encode("latin-1"),
    "arbitrary bytes": (bytes(range(256)) * 3, []),
}
RAW["Latin-1"] = (RAW["Latin-1"], ["data row 2", "'county'", "not valid UTF-8", "--encoding latin-1"])


@pytest.mark.parametrize("case", sorted(RAW))
def test_malformed_files(case, tmp_path, capsys):
    data, fragments = RAW[case]
    src = tmp_path / "in.csv"
    src.write_bytes(data)
    rc, out, err = run(["release", src, tmp_path / "out.csv", "--epsilon", "1", "--seed", "1"], capsys)
    assert_one_line_error(rc, out, err, "in.csv", *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_latin1_file_reads_with_its_encoding(tmp_path, capsys):
    src = tmp_path / "gazetteer.csv"
    src.write_bytes("state,county,n\nNM,Do\u00f1a Ana,219561\nNM,Eddy,62314\n".encode("latin-1"))
    rc, _, err = run(["release", src, tmp_path / "out.csv", "--encoding", "latin-1", "--epsilon", "1",
                      "--seed", "1"], capsys)
    assert rc == 0, err
    text = (tmp_path / "out.csv").read_text(encoding="utf-8")  # the release is UTF-8
    assert text.splitlines()[1].startswith("NM,Do\u00f1a Ana,")
    rc, out, err = run(["release", src, tmp_path / "o2.csv", "--encoding", "klingon", "--epsilon", "1"], capsys)
    assert_one_line_error(rc, out, err, "unknown text encoding")


def test_very_wide_files_are_fast_and_messages_short(tmp_path, capsys):
    # 30000 columns: linear-time checks, and an error lists a few column names only
    k = 30000
    header = [f"c{j}" for j in range(k)] + ["n"]
    src = tmp_path / "wide.csv"
    src.write_text(csv_text(header, [[f"v{j}" for j in range(k)] + [SENTINEL], ["w"] * k + ["7"]]))
    start = time.perf_counter()
    rc, out, err = run(["release", src, tmp_path / "out.csv", "--column", "count", "--epsilon", "1"], capsys)
    assert_one_line_error(rc, out, err, "'count' not found", "and 29993 more")
    assert len(err) < 400
    # released with every text column copied: the header of the release is the input's
    rc, out, err = run(["release", src, tmp_path / "out.csv", "--epsilon", "1", "--seed", "3"], capsys)
    assert rc == 0, err
    assert time.perf_counter() - start < 60  # generous: seconds on a laptop, quadratic checks take hours
    with open(tmp_path / "out.csv", newline="") as fh:
        got = next(csv.reader(fh))
    assert got == header
    assert len(max(out.splitlines(), key=len)) < 400


def _parquet(path, frame):
    frame.to_parquet(path)
    return path


@pytest.mark.parametrize("column,fragments", [
    (pd.array([5, -2, 7], dtype="int64"), ["data row 2", "'n'", "negative"]),
    (np.array([5.0, np.nan, 7.0]), ["data row 2", "'n'", "not a finite number"]),
    (np.array([5.0, 2.5, 7.0]), ["data row 2", "'n'", "not an integer"]),
    (np.array([5, 2**64 - 1, 7], dtype=np.uint64), ["data row 2", "'n'", "too large"]),
    (pd.array([5, None, 7], dtype="Int64"), ["data row 2", "'n'", "blank"]),
])
def test_hostile_parquet(column, fragments, tmp_path, capsys):
    src = _parquet(tmp_path / "in.parquet", pd.DataFrame({"id": ["a", "b", "c"], "n": column}))
    rc, out, err = run(["release", src, tmp_path / "out.csv", "--epsilon", "1"], capsys)
    assert_one_line_error(rc, out, err, "in.parquet", *fragments)


def test_parquet_problems(tmp_path, capsys, monkeypatch):
    fake = tmp_path / "fake.parquet"
    fake.write_bytes(b"PAR1 this is not parquet " + SENTINEL.encode())
    rc, out, err = run(["release", fake, tmp_path / "out.csv", "--epsilon", "1"], capsys)
    assert_one_line_error(rc, out, err, "fake.parquet", "not a readable Parquet file")
    # releases are written as CSV only
    src = _parquet(tmp_path / "in.parquet", pd.DataFrame({"id": ["a", "b"], "n": [3, 4]}))
    rc, out, err = run(["release", src, tmp_path / "out.parquet", "--epsilon", "1"], capsys)
    assert_one_line_error(rc, out, err, "give the output a .csv name")
    # without pyarrow the message says what to install
    import builtins

    real_import = builtins.__import__

    def no_pyarrow(name, *a, **k):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ImportError("No module named 'pyarrow'")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    rc, out, err = run(["release", src, tmp_path / "out.csv", "--epsilon", "1"], capsys)
    assert_one_line_error(rc, out, err, "needs pyarrow", "privinfer[scale]")


def test_sentinel_appears_only_in_its_released_cell(tmp_path, capsys):
    src = tmp_path / "in.csv"
    rows = [["KY", "Adair", SENTINEL, SECRET_NUMBER], ["KY", "Allen", "19956", "7"],
            ["NV", "Clark", "1951269", "8"], ["NV", "Douglas", "46997", "9"]]
    src.write_text(csv_text(["state", "county", "n", "households"], rows))
    out_dir = tmp_path / "out"
    rc, out, err = run(["release", src, out_dir / "rel.csv", "--column", "n", "--invariant", "groups:state",
                        "--epsilon", "1", "--seed", "11"], capsys)
    assert rc == 0, err
    assert SENTINEL not in out + err and SECRET_NUMBER not in out + err
    with open(out_dir / "rel.csv", newline="") as fh:
        released = list(csv.reader(fh))
    assert released[0] == ["state", "county", "n"]  # 'households' holds numbers: not copied
    # mask the released counts' own cells; nothing else may hold either secret
    masked = [r[:2] for r in released]
    assert SENTINEL not in json.dumps(masked) and SECRET_NUMBER not in json.dumps(released)
    for f in out_dir.iterdir():
        if f.name == "rel.csv":
            continue
        data = f.read_bytes()
        assert SENTINEL.encode() not in data and SECRET_NUMBER.encode() not in data, f.name
    # the group totals are kept exactly (and published; they are not the sentinel)
    assert int(released[1][2]) + int(released[2][2]) == int(SENTINEL) + 19956  # the group total, exactly
