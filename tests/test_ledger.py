"""The privacy-loss ledger: composition rules, budgets refused before any noise, keyed
fingerprints that hold no data, and the ledger of ``privinfer release``."""

import json
import math
import os
import pathlib
import stat
import sys
import threading

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).parent))
from cli_helpers import run  # noqa: E402
from privinfer import invariants as I
from privinfer.guarantees import GDP, ZCDP, ApproxDP, Guarantee, PureDP
from privinfer.mechanisms import GeneralizedGaussian, GeneralizedLaplace
from privinfer.workflow import BudgetExceededError, Ledger, LedgerError, make_release, read_release
from privinfer.workflow.ledger import loss_against, parse_budget, within_budget

# distinctive confidential counts: their digits must never appear in the ledger
X = np.array([73194, 20417, 58831, 9066])
GROUPS = ["a", "a", "b", "b"]


def _mech(eps=1.0):
    return GeneralizedLaplace(I.groups(GROUPS), eps)


# ----------------------------------------------------------------------------------------------
# budgets and the composition rule (values from the closed forms, not from the code)
# ----------------------------------------------------------------------------------------------


def test_parse_budget():
    assert parse_budget("epsilon=2").kind == "pure" and parse_budget("eps=2").epsilon == 2.0
    b = parse_budget("epsilon=1, delta=1e-6")
    assert b.kind == "approx" and (b.epsilon, b.delta) == (1.0, 1e-6)
    assert parse_budget("rho=0.5").rho == 0.5 and parse_budget("mu=1.5").mu == 1.5
    for bad in ("2", "epsilon", "epsilon=-1", "epsilon=x", "rho=0.5,mu=1", "delta=1e-6", "epsilon=1,delta=2",
                "epsilon=1,epsilon=2", "sigma=3"):
        with pytest.raises(LedgerError):
            parse_budget(bad)


def test_pure_budget_adds_epsilons_and_refuses_other_kinds():
    loss = loss_against(PureDP(2.0), [PureDP(0.5), PureDP(0.7)])
    assert loss.kind == "pure" and loss.epsilon == pytest.approx(1.2, rel=1e-15)
    with pytest.raises(LedgerError, match="cannot hold a zCDP release"):
        loss_against(PureDP(2.0), [PureDP(0.5), ZCDP(0.1)])
    with pytest.raises(LedgerError, match="no typed privacy loss"):
        loss_against(PureDP(2.0), [Guarantee("rho-zCDP (of the noisy measurement)", {"rho": 0.1})])


def test_zcdp_budget_converts_pure_and_gdp():
    # pure eps -> eps^2/2 (Bun-Steinke Prop 1.4), GDP mu -> mu^2/2; the rhos add
    loss = loss_against(ZCDP(1.0), [PureDP(1.0), ZCDP(0.125), GDP(0.5)])
    assert loss.kind == "zcdp" and loss.rho == pytest.approx(0.5 + 0.125 + 0.125, rel=1e-15)
    with pytest.raises(LedgerError, match="cannot hold an \\(eps, delta\\)"):
        loss_against(ZCDP(1.0), [ApproxDP(0.5, 1e-7)])


def test_approx_budget_converts_the_concentrated_part_once_at_the_delta_left():
    budget = ApproxDP(5.0, 1e-6)
    loss = loss_against(budget, [PureDP(0.5), ApproxDP(0.3, 1e-7), ZCDP(0.1), GDP(0.2)])
    rho = 0.1 + 0.2**2 / 2
    left = 1e-6 - 1e-7
    eps = 0.5 + 0.3 + rho + 2 * math.sqrt(rho * math.log(1 / left))  # Bun-Steinke Prop 1.3
    assert loss.kind == "approx"
    assert loss.epsilon == pytest.approx(eps, rel=1e-12) and loss.delta == pytest.approx(1e-6, rel=1e-12)
    assert within_budget(loss, budget)
    # pure and approximate members only: epsilons and deltas add
    loss = loss_against(budget, [PureDP(1.0), ApproxDP(0.5, 2e-7)])
    assert (loss.epsilon, loss.delta) == (pytest.approx(1.5), pytest.approx(2e-7))
    # approximate members that use the whole delta leave none for the zCDP conversion
    with pytest.raises(BudgetExceededError, match="none is left"):
        loss_against(budget, [ApproxDP(0.5, 1e-6), ZCDP(0.1)])


def test_gdp_budget_adds_mu_squared():
    loss = loss_against(GDP(1.0), [GDP(0.6), GDP(0.8)])
    assert loss.mu == pytest.approx(1.0, rel=1e-15) and within_budget(loss, GDP(1.0))
    with pytest.raises(LedgerError):
        loss_against(GDP(1.0), [PureDP(0.1)])


def test_rounding_of_sums_does_not_refuse_an_exact_fit():
    loss = loss_against(PureDP(0.3), [PureDP(0.1), PureDP(0.2)])  # 0.30000000000000004
    assert within_budget(loss, PureDP(0.3))
    assert not within_budget(loss_against(PureDP(0.3), [PureDP(0.1), PureDP(0.2), PureDP(1e-6)]), PureDP(0.3))


# ----------------------------------------------------------------------------------------------
# the ledger with make_release
# ----------------------------------------------------------------------------------------------


def test_release_is_recorded_with_a_keyed_fingerprint_and_no_data(tmp_path):
    book = Ledger(tmp_path / "ledger.json")
    rel = make_release(X, _mech(0.5), rng=1, ledger=book, source="counts.csv", output=tmp_path / "rel.csv")
    (entry,) = book.entries()
    assert rel.ledger_entry == entry.id
    assert entry.fingerprint.startswith("hmac-sha256:") and len(entry.fingerprint) == len("hmac-sha256:") + 64
    assert entry.guarantee.kind == "pure" and entry.guarantee.epsilon == 0.5
    assert entry.mechanism_spec["mechanism"] == "generalized-laplace" and entry.cells == 4
    assert (entry.source, entry.output) == ("counts.csv", "rel.csv")
    text = book.path.read_text()
    for v in X:
        assert str(v) not in text
    # private files: the key (32 random bytes) and the ledger are readable by their owner only
    assert stat.S_IMODE(os.stat(book.key_path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(book.path).st_mode) == 0o600
    assert len(book.key_path.read_bytes()) == 32
    # the sidecar records the entry id, and reading the release back keeps it
    csv_path, meta_path = rel.write(tmp_path / "rel.csv")
    assert json.loads(meta_path.read_text())["ledger_entry"] == entry.id
    assert read_release(csv_path).ledger_entry == entry.id


def test_fingerprint_tells_inputs_apart_and_depends_on_the_key(tmp_path):
    a, b = Ledger(tmp_path / "a.json"), Ledger(tmp_path / "b.json")
    assert a.fingerprint(X) == a.fingerprint(X.astype(float)) == a.fingerprint(X.reshape(2, 2))
    assert a.fingerprint(X) != a.fingerprint(X + np.array([0, 0, 0, 1]))
    assert a.fingerprint(X) != b.fingerprint(X)  # another key
    assert a.fingerprint([0.5, 1.0]) != a.fingerprint([0.5, 1.5])


def test_second_release_over_budget_is_refused_before_any_noise_and_leaves_the_ledger(tmp_path):
    book = Ledger(tmp_path / "ledger.json")
    make_release(X, _mech(1.0), rng=1, ledger=book, budget="epsilon=1.5")
    before = book.path.read_bytes()
    mech = _mech(1.0)
    calls = []
    mech.release = lambda *a, **k: calls.append(a) or pytest.fail("noise was drawn")
    with pytest.raises(BudgetExceededError) as exc:
        make_release(X, mech, rng=2, ledger=book)  # the recorded budget applies
    msg = str(exc.value)
    assert "epsilon=2" in msg and "epsilon=1.5" in msg and "\n" not in msg
    assert not calls and book.path.read_bytes() == before
    # a release that fits is recorded; a different input has its own budget
    make_release(X, _mech(0.5), rng=3, ledger=book)
    make_release(X + 1, _mech(1.5), rng=4, ledger=book)
    assert len(book.entries()) == 3 and len(book.entries(book.fingerprint(X))) == 2
    with pytest.raises(BudgetExceededError):
        make_release(X, _mech(0.01), rng=5, ledger=book)
    # scope "ledger": every release in the ledger counts (1 + 0.5 + 1.5 = 3 already)
    with pytest.raises(BudgetExceededError, match="this ledger"):
        make_release(X + 2, _mech(0.1), rng=6, ledger=book, budget="epsilon=3", budget_scope="ledger")


def test_mixed_kinds_against_a_zcdp_budget(tmp_path):
    book = Ledger(tmp_path / "ledger.json")
    make_release(X, _mech(0.5), rng=1, ledger=book, budget="rho=0.3")  # rho 0.125
    make_release(X, GeneralizedGaussian(I.groups(GROUPS), sigma=2.0), rng=2, ledger=book)  # rho 0.125
    assert book.spent(book.fingerprint(X)).rho == pytest.approx(0.25)
    with pytest.raises(BudgetExceededError, match="rho=0.375"):
        make_release(X, _mech(0.5), rng=3, ledger=book)


def test_concurrent_releases_respect_the_budget(tmp_path):
    # six releases of epsilon 1 race for a budget of 3: the lock lets exactly three through
    book_path = tmp_path / "ledger.json"
    Ledger(book_path).fingerprint(X)  # create the key once
    outcomes = []

    def one(k):
        try:
            make_release(X, _mech(1.0), rng=k, ledger=Ledger(book_path), budget="epsilon=3")
            outcomes.append("ok")
        except BudgetExceededError:
            outcomes.append("refused")

    threads = [threading.Thread(target=one, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["ok"] * 3 + ["refused"] * 3
    assert len(Ledger(book_path).entries()) == 3


def test_untyped_guarantees_cannot_be_held_to_a_budget(tmp_path):
    from privinfer.mechanisms import build

    book = Ledger(tmp_path / "ledger.json")
    topdown = build("topdown-baseline", I.groups(GROUPS), 4, sigma=2.0)
    assert type(topdown.guarantee) is Guarantee  # untyped: no number that composes
    make_release(X, topdown, rng=1, ledger=book)  # recorded when no budget is set
    assert book.entries()[0].guarantee.kind == "other"
    with pytest.raises(LedgerError, match="no typed privacy loss"):
        make_release(X, _mech(0.1), rng=2, ledger=book, budget="epsilon=10")
    assert len(book.entries()) == 1


def test_ledger_problems_are_reported(tmp_path):
    book = Ledger(tmp_path / "ledger.json")
    with pytest.raises(LedgerError, match="needs a ledger"):
        make_release(X, _mech(), rng=1, budget="epsilon=1")
    make_release(X, _mech(), rng=1, ledger=book)
    good_key = book.key_path.read_bytes()
    # a replaced key no longer matches the ledger
    book.key_path.write_bytes(os.urandom(32))
    with pytest.raises(LedgerError, match="not the key"):
        make_release(X, _mech(), rng=1, ledger=book)
    # a missing key is not silently recreated
    book.key_path.unlink()
    with pytest.raises(LedgerError, match="missing"):
        make_release(X, _mech(), rng=1, ledger=book)
    book.key_path.write_bytes(good_key)
    os.chmod(book.key_path, 0o644)
    with pytest.raises(LedgerError, match="chmod 600"):
        make_release(X, _mech(), rng=1, ledger=book)
    os.chmod(book.key_path, 0o600)
    # a file that is not a ledger is reported and left alone
    other = tmp_path / "notes.json"
    other.write_text("{\"format\": \"something else\", \"entries\": []}")
    with pytest.raises(LedgerError, match="not a privinfer ledger"):
        make_release(X, _mech(), rng=1, ledger=other)
    assert json.loads(other.read_text())["format"] == "something else"
    assert len(book.entries()) == 1


# ----------------------------------------------------------------------------------------------
# the command line
# ----------------------------------------------------------------------------------------------




def test_cli_second_release_over_budget_is_refused(tmp_path, capsys):
    src = tmp_path / "in.csv"
    src.write_text("g,id,n\n" + "".join(f"{g},c{k},{v}\n" for k, (g, v) in enumerate(zip(GROUPS, X))))
    out = tmp_path / "out"
    rc, stdout, err = run(["release", src, out / "r1.csv", "--invariant", "groups:g", "--epsilon", "1",
                            "--budget", "epsilon=1.5", "--seed", "1"], capsys)
    assert rc == 0, err
    book = Ledger(out / "privinfer-ledger.json")  # the default: beside the outputs
    (entry,) = book.entries()
    assert json.loads((out / "r1.json").read_text())["ledger_entry"] == entry.id
    assert "epsilon=1 of the budget epsilon=1.5" in stdout
    before = book.path.read_bytes()
    rc, _, err = run(["release", src, out / "r2.csv", "--invariant", "groups:g", "--epsilon", "1", "--seed", "2"],
                      capsys)
    assert rc == 2 and err.startswith("privinfer: error: release refused") and len(err.strip().splitlines()) == 1
    assert book.path.read_bytes() == before
    assert not (out / "r2.csv").exists() and not (out / "r2.json").exists()
    # a ledger elsewhere starts afresh; a bad budget is a one-line option error
    rc, _, err = run(["release", src, out / "r3.csv", "--invariant", "groups:g", "--epsilon", "1",
                       "--ledger", tmp_path / "other.json"], capsys)
    assert rc == 0, err
    assert len(Ledger(tmp_path / "other.json").entries()) == 1 and len(book.entries()) == 1
    rc, _, err = run(["release", src, out / "r4.csv", "--epsilon", "1", "--budget", "lots"], capsys)
    assert rc == 2 and "budget 'lots'" in err
