r"""The privacy-loss ledger: what was released from which confidential input, against a budget.

Every release made with a ledger (``make_release(..., ledger=...)``; ``privinfer release``
keeps one by default beside its outputs, ``--ledger PATH``) adds a :class:`LedgerEntry`:

* ``id`` -- a random identifier, also written to the release's sidecar (``ledger_entry``);
* ``time`` (UTC), ``source`` (input file name), ``output`` (release file name), ``cells``;
* ``fingerprint`` -- ``HMAC-SHA256(key, canonical encoding of the counts)``: it tells the
  releases of one input from those of others without holding the data.  The key, 32 bytes of
  OS entropy, sits beside the ledger (``NAME.key``, mode 0600); without it nobody can
  recompute a fingerprint or check a guessed input against one.  The canonical encoding is a
  header (format, type, number of cells) followed by the counts in cell order as
  little-endian int64 when every count is an integer -- so the same counts read as integers
  or as floats match -- and as float64 otherwise.  :func:`fingerprint_blocks` computes the
  same value from the counts in consecutive blocks (the partitions of a large input, in row
  order), holding one block at a time.
* ``mechanism`` (name and options), ``mechanism_spec`` (:meth:`Mechanism.spec`, ``None`` when
  the mechanism cannot state one) and ``guarantee`` (kind, definition, parameters, relation,
  reference).

Budget and composition
----------------------
A budget is a typed guarantee (:func:`parse_budget`: ``epsilon=E`` pure DP,
``epsilon=E,delta=D`` approximate DP, ``rho=R`` zCDP, ``mu=M`` GDP).  Before any noise is
drawn, the guarantees of the earlier releases of the same input (``scope="input"``; with
``scope="ledger"`` every entry of the ledger, for inputs about the same people) and of the
new release are composed in the budget's own terms (:func:`loss_against`, built on
:func:`privinfer.guarantees.compose` and the conversions of :mod:`privinfer.guarantees`):

* pure-DP budget: every member must be pure; the epsilons add;
* zCDP budget: every member is converted to zCDP (pure: :math:`\rho = \epsilon^2/2`, Bun and
  Steinke 2016, Prop. 1.4; GDP: :math:`\rho = \mu^2/2`) and the rhos add (Lemma 2.3); an
  :math:`(\epsilon, \delta)` member has no such conversion and is refused;
* :math:`(\epsilon, \delta)` budget: pure members add their epsilons; approximate members add
  epsilons and deltas (basic composition); zCDP and GDP members are composed in zCDP and
  converted once, at the delta the budget leaves over, :math:`\delta_B - \sum_i \delta_i`, by
  :math:`\epsilon = \rho + 2\sqrt{\rho \ln(1/\delta)}` (Bun and Steinke 2016, Prop. 1.3);
* GDP budget: every member must be GDP; the :math:`\mu^2` add (Dong, Roth and Su 2022, Cor. 3.3).

A release is refused (:class:`~privinfer.workflow.errors.BudgetExceededError`, before any
noise is drawn, the ledger unchanged) when the composed loss exceeds the budget -- a relative
slack of 1e-9 absorbs the rounding of sums such as 0.1 + 0.2 -- or when a member's guarantee is
untyped (it states no number that composes).  The composed loss holds for the neighbouring
datasets every member's relation admits: releases keeping different invariants compose for
datasets that agree on all of them.

The budget given with a release is recorded in the ledger and applies to later releases that
give none (a later budget replaces it).  Updates hold an exclusive lock (``flock`` on the key
file, where the platform has it) and replace the ledger file in one step (:mod:`.atomic`).
The ledger and its key belong to the curator: never publish them (with the key, a guessed
input can be checked against a fingerprint).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import hmac
import json
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..guarantees import GDP, ZCDP, ApproxDP, Guarantee, PureDP, compose, typed_guarantee
from .atomic import write_files
from .errors import BudgetExceededError, LedgerError, OutputExistsError

try:  # POSIX: exclusive locks on the key file
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - platforms without flock
    _fcntl = None

__all__ = ["Ledger", "LedgerEntry", "parse_budget", "budget_text", "loss_against", "within_budget",
           "fingerprint_counts", "canonical_counts", "canonical_header", "fingerprint_blocks", "as_ledger",
           "LEDGER_FORMAT", "DEFAULT_LEDGER_NAME", "SCOPES"]

#: Format tag of the ledger file.
LEDGER_FORMAT = "privinfer-ledger/1"
#: File name of the ledger ``privinfer release`` keeps beside its outputs.
DEFAULT_LEDGER_NAME = "privinfer-ledger.json"
#: What a budget bounds: the releases of one input, or every release in the ledger.
SCOPES = ("input", "ledger")

_TYPED = (PureDP, ApproxDP, ZCDP, GDP)
_KEY_BYTES = 32
_SLACK = 1e-9
_KIND_WORDS = {"pure": "(eps, 0)-DP", "approx": "(eps, delta)-DP", "zcdp": "zCDP", "gdp": "GDP", "other": "untyped"}


# =============================================================================================
# budgets and composition
# =============================================================================================
def parse_budget(text: str) -> Guarantee:
    """A budget from text: ``epsilon=E`` (pure DP), ``epsilon=E,delta=D`` (approximate DP),
    ``rho=R`` (zCDP) or ``mu=M`` (GDP); ``eps`` may stand for ``epsilon``."""
    parts = {}
    for item in str(text).replace(" ", "").split(","):
        key, sep, value = item.partition("=")
        key = {"eps": "epsilon"}.get(key.lower(), key.lower())
        if not sep or key not in ("epsilon", "delta", "rho", "mu") or key in parts:
            raise LedgerError(f"budget '{text}': write epsilon=E, epsilon=E,delta=D, rho=R or mu=M")
        try:
            parts[key] = float(value)
        except ValueError:
            raise LedgerError(f"budget '{text}': {key} must be a number") from None
    try:
        if set(parts) == {"epsilon"}:
            return PureDP(parts["epsilon"], definition="budget")
        if set(parts) == {"epsilon", "delta"}:
            if not 0.0 < parts["delta"] < 1.0:
                raise ValueError("delta must lie strictly between 0 and 1")
            return ApproxDP(parts["epsilon"], parts["delta"], definition="budget")
        if set(parts) == {"rho"}:
            return ZCDP(parts["rho"], definition="budget")
        if set(parts) == {"mu"}:
            return GDP(parts["mu"], definition="budget")
    except (ValueError, TypeError) as exc:
        raise LedgerError(f"budget '{text}': {exc}") from None
    raise LedgerError(f"budget '{text}': write epsilon=E, epsilon=E,delta=D, rho=R or mu=M")


def budget_text(g: Guarantee) -> str:
    """``epsilon=1``, ``epsilon=1, delta=1e-06``, ``rho=0.125`` or ``mu=1`` for a typed guarantee."""
    if g.kind == "pure":
        return f"epsilon={g.epsilon:.6g}"
    if g.kind == "approx":
        return f"epsilon={g.epsilon:.6g}, delta={g.delta:.3g}"
    if g.kind == "zcdp":
        return f"rho={g.rho:.6g}"
    if g.kind == "gdp":
        return f"mu={g.mu:.6g}"
    return g.definition


def loss_against(budget: Guarantee, guarantees) -> Guarantee:
    """The privacy loss of releasing with every one of ``guarantees``, in the terms of
    ``budget`` (the rule of the module docstring).  Raises :class:`LedgerError` when a member
    cannot be stated in those terms, :class:`BudgetExceededError` when (eps, delta) members
    already use the whole delta that zCDP members would need."""
    gs = list(guarantees)
    if type(budget) not in _TYPED:
        raise LedgerError("a budget is a typed guarantee (epsilon=..., rho=..., mu=...)")
    for g in gs:
        if type(g) not in _TYPED:
            raise LedgerError(f"a '{g.definition}' guarantee states no typed privacy loss, so it cannot be "
                              "composed against a budget")
    kinds = {g.kind for g in gs}
    words = _KIND_WORDS[budget.kind]
    if budget.kind in ("pure", "gdp"):
        if kinds - {budget.kind}:
            other = sorted(kinds - {budget.kind})[0]
            raise LedgerError(f"a {words} budget cannot hold a {_KIND_WORDS[other]} release (give the budget as "
                              f"{'rho=R or epsilon=E,delta=D' if budget.kind == 'pure' else 'rho=R'})")
        return compose(*gs)
    if budget.kind == "zcdp":
        if "approx" in kinds:
            raise LedgerError("a zCDP budget cannot hold an (eps, delta)-DP release (give the budget as "
                              "epsilon=E,delta=D)")
        return compose(*[g.to_zcdp() for g in gs])
    pure = [g for g in gs if g.kind == "pure"]
    approx = [g for g in gs if g.kind == "approx"]
    concentrated = [g.to_zcdp() for g in gs if g.kind in ("zcdp", "gdp")]
    eps = sum(g.epsilon for g in pure) + sum(g.epsilon for g in approx)
    delta = sum(g.delta for g in approx)
    if concentrated:
        left = budget.delta - delta
        if left <= 0.0:
            raise BudgetExceededError(f"the (eps, delta) releases already use the budget's delta "
                                      f"({budget.delta:.3g}): none is left to convert the zCDP releases")
        eps += compose(*concentrated).to_approx_dp(left).epsilon
        delta = budget.delta
    if delta >= 1.0:
        raise BudgetExceededError(f"the composed delta {delta:.3g} is not below 1")
    return ApproxDP(eps, delta, definition="composed loss", reference="basic composition; Bun and Steinke 2016, "
                    "Prop. 1.3 for the zCDP part")


def within_budget(loss: Guarantee, budget: Guarantee) -> bool:
    """Whether ``loss`` (from :func:`loss_against`) stays within ``budget`` (relative slack 1e-9)."""
    def le(a, b):
        return a <= b * (1.0 + _SLACK)

    if budget.kind == "pure":
        return le(loss.epsilon, budget.epsilon)
    if budget.kind == "zcdp":
        return le(loss.rho, budget.rho)
    if budget.kind == "gdp":
        return le(loss.mu, budget.mu)
    return le(loss.epsilon, budget.epsilon) and le(loss.delta, budget.delta)


# =============================================================================================
# fingerprints
# =============================================================================================
def canonical_counts(x) -> bytes:
    """The canonical encoding of counts (module docstring)."""
    flat = np.asarray(x).reshape(-1)
    if flat.dtype.kind not in "biuf":
        raise TypeError("counts must be numeric")
    as_float = flat.astype(float)
    if flat.dtype.kind in "biu" or (np.all(np.isfinite(as_float)) and np.all(as_float == np.round(as_float))
                                     and np.all(np.abs(as_float) < 2.0**63)):
        body, kind = np.ascontiguousarray(flat.astype("<i8")).tobytes(), "int64"
    else:
        body, kind = np.ascontiguousarray((as_float + 0.0).astype("<f8")).tobytes(), "float64"
    return canonical_header(kind, flat.size) + body


def canonical_header(kind: str, n: int) -> bytes:
    """The header of the canonical encoding of ``n`` counts stored as ``kind`` (``"int64"`` or
    ``"float64"``)."""
    if kind not in ("int64", "float64"):
        raise ValueError("kind must be 'int64' or 'float64'")
    return b"privinfer-counts/1\n" + kind.encode() + b"\n" + str(int(n)).encode() + b"\n"


def fingerprint_counts(key: bytes, x) -> str:
    """``"hmac-sha256:" + HMAC-SHA256(key, canonical encoding of x)`` in hex."""
    return "hmac-sha256:" + hmac.new(key, canonical_counts(x), hashlib.sha256).hexdigest()


def fingerprint_blocks(key: bytes, n: int, blocks) -> str:
    """:func:`fingerprint_counts` of ``n`` integer counts given as consecutive ``blocks`` (an
    iterable of integer arrays, in cell order), fed to the HMAC one block at a time.

    The value equals ``fingerprint_counts(key, concatenated blocks)``: integer counts are
    encoded as int64.  Raises ``TypeError`` for a block that is not of an integer type and
    ``ValueError`` when the blocks do not hold ``n`` counts together."""
    mac = hmac.new(key, canonical_header("int64", n), hashlib.sha256)
    seen = 0
    for block in blocks:
        b = np.asarray(block).reshape(-1)
        if b.dtype.kind not in "iu":
            raise TypeError("fingerprint_blocks takes integer counts")
        if b.dtype.kind == "u" and b.size and int(b.max()) > 2**63 - 1:
            raise ValueError("counts beyond int64 have no canonical encoding")
        mac.update(np.ascontiguousarray(b.astype("<i8")).tobytes())
        seen += b.size
    if seen != int(n):
        raise ValueError(f"the blocks hold {seen} counts, not {int(n)}")
    return "hmac-sha256:" + mac.hexdigest()


def _key_check(key: bytes) -> str:
    return hmac.new(key, b"privinfer-ledger key check", hashlib.sha256).hexdigest()[:16]


# =============================================================================================
# entries
# =============================================================================================
def _guarantee_json(g: Guarantee) -> dict:
    from .files import jsonable

    return jsonable({"kind": g.kind, "definition": g.definition, "parameters": dict(g.parameters),
                     "relation": g.relation, "reference": g.reference})


def _guarantee_from_json(d) -> Guarantee:
    kind = d.get("kind")
    return typed_guarantee(None if kind == "other" else kind, d.get("definition", ""), d.get("parameters", {}),
                           d.get("relation", ""), d.get("reference", ""))


@dataclass(frozen=True)
class LedgerEntry:
    """One recorded release (see the module docstring)."""

    id: str
    time: str
    fingerprint: str
    guarantee: Guarantee
    mechanism: dict
    mechanism_spec: dict | None = None
    source: str | None = None
    output: str | None = None
    cells: int | None = None

    def to_json(self) -> dict:
        from .files import jsonable

        return jsonable({"id": self.id, "time": self.time, "fingerprint": self.fingerprint,
                         "source": self.source, "output": self.output, "cells": self.cells,
                         "mechanism": self.mechanism, "mechanism_spec": self.mechanism_spec,
                         "guarantee": _guarantee_json(self.guarantee)})

    @classmethod
    def from_json(cls, d: dict) -> "LedgerEntry":
        return cls(str(d["id"]), str(d["time"]), str(d["fingerprint"]), _guarantee_from_json(d["guarantee"]),
                   dict(d.get("mechanism") or {}), d.get("mechanism_spec"), d.get("source"), d.get("output"),
                   d.get("cells"))


# =============================================================================================
# the ledger file
# =============================================================================================
class Ledger:
    """The ledger in the JSON file ``path``, with its key in ``path`` with suffix ``.key``.

    Reading it never creates anything; :meth:`fingerprint` creates the key on first use, and
    :meth:`record` writes the file.  See the module docstring for the rules.
    """

    def __init__(self, path):
        self.path = Path(path)
        self.key_path = self.path.with_suffix(".key") if self.path.suffix != ".key" else \
            self.path.with_name(self.path.name + ".key")

    def __repr__(self) -> str:  # pragma: no cover - cosmetic
        return f"Ledger({str(self.path)!r})"

    @classmethod
    def beside(cls, output) -> "Ledger":
        """The default ledger of an output file: :data:`DEFAULT_LEDGER_NAME` in its folder."""
        return cls(Path(output).parent / DEFAULT_LEDGER_NAME)

    # -- reading ---------------------------------------------------------------------------
    def _document(self) -> dict:
        if not self.path.exists():
            return {"format": LEDGER_FORMAT, "key_check": None, "budget": None, "entries": []}
        if self.path.is_dir():
            raise LedgerError(f"ledger {self.path} is a directory")
        try:
            doc = json.loads(self.path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise LedgerError(f"{self.path.name}: not a privinfer ledger (format {LEDGER_FORMAT})") from None
        if not isinstance(doc, dict) or doc.get("format") != LEDGER_FORMAT or not isinstance(doc.get("entries"), list):
            raise LedgerError(f"{self.path.name}: not a privinfer ledger (format {LEDGER_FORMAT})")
        return doc

    def entries(self, fingerprint: str | None = None) -> list[LedgerEntry]:
        """The recorded releases (of the input with ``fingerprint`` only, if given)."""
        out = []
        for k, d in enumerate(self._document()["entries"]):
            try:
                e = LedgerEntry.from_json(d)
            except (KeyError, TypeError, ValueError, AttributeError):
                raise LedgerError(f"{self.path.name}: entry {k + 1} is malformed") from None
            if fingerprint is None or e.fingerprint == fingerprint:
                out.append(e)
        return out

    def budget(self) -> tuple[Guarantee | None, str]:
        """The recorded budget (``None`` if none) and its scope."""
        doc = self._document()
        b = doc.get("budget")
        if b is None:
            return None, "input"
        try:
            g = _guarantee_from_json(b)
        except (KeyError, TypeError, ValueError, AttributeError):
            raise LedgerError(f"{self.path.name}: the recorded budget is malformed") from None
        scope = b.get("scope", "input")
        return g, scope if scope in SCOPES else "input"

    # -- the key ---------------------------------------------------------------------------
    def _key(self, create: bool) -> bytes | None:
        if not self.key_path.exists():
            if not create:
                return None
            if self.entries():
                raise LedgerError(f"the key of ledger {self.path.name} ({self.key_path.name}) is missing: without "
                                  "it no fingerprint can be matched (restore the key)")
            try:  # a complete key file or none; never replaces a key created meanwhile
                write_files([(self.key_path, secrets.token_bytes(_KEY_BYTES), 0o600)], overwrite=False)
            except OutputExistsError:
                pass
        if os.name == "posix" and self.key_path.stat().st_mode & 0o077:
            raise LedgerError(f"the ledger key {self.key_path} can be read by other users: chmod 600 it")
        key = self.key_path.read_bytes()
        if len(key) != _KEY_BYTES:
            raise LedgerError(f"the ledger key {self.key_path.name} is not a privinfer key ({_KEY_BYTES} bytes)")
        check = self._document().get("key_check")
        if check is not None and not hmac.compare_digest(str(check), _key_check(key)):
            raise LedgerError(f"the key {self.key_path.name} is not the key of ledger {self.path.name} "
                              "(was it replaced?)")
        return key

    def fingerprint(self, x) -> str:
        """The keyed fingerprint of the counts ``x`` (creates the key on first use)."""
        return fingerprint_counts(self._key(create=True), x)

    def fingerprint_blocks(self, n: int, blocks) -> str:
        """The keyed fingerprint of ``n`` integer counts given in consecutive blocks (equal to
        :meth:`fingerprint` of the whole vector; :func:`fingerprint_blocks`)."""
        return fingerprint_blocks(self._key(create=True), n, blocks)

    @contextlib.contextmanager
    def locked(self):
        """Hold the ledger's exclusive lock (on the key file) for a check-release-record step."""
        self._key(create=True)
        if _fcntl is None:  # pragma: no cover
            yield self
            return
        with open(self.key_path, "rb") as fh:
            _fcntl.flock(fh.fileno(), _fcntl.LOCK_EX)
            try:
                yield self
            finally:
                _fcntl.flock(fh.fileno(), _fcntl.LOCK_UN)

    # -- budget ----------------------------------------------------------------------------
    def _in_force(self, budget, scope):
        recorded, recorded_scope = self.budget()
        if budget is None:
            return recorded, (scope or recorded_scope)
        if isinstance(budget, str):
            budget = parse_budget(budget)
        return budget, (scope or "input")

    def spent(self, fingerprint: str | None = None, *, budget=None, scope: str | None = None,
              new: Guarantee | None = None):
        """The loss recorded (for ``fingerprint``'s input, or every entry with scope
        ``"ledger"``), plus ``new`` if given, in the terms of the budget in force; ``None``
        when there is no budget or nothing to compose."""
        budget, scope = self._in_force(budget, scope)
        if budget is None:
            return None
        fp = None if scope == "ledger" else fingerprint
        gs = [e.guarantee for e in self.entries(fp)] + ([new] if new is not None else [])
        return loss_against(budget, gs) if gs else None

    def check(self, fingerprint: str, guarantee: Guarantee, *, budget=None, scope: str | None = None):
        """Raise :class:`BudgetExceededError` if a release with ``guarantee`` of the input
        ``fingerprint`` would exceed the budget in force (given, else recorded); returns the
        loss it would bring the input to (``None`` without a budget)."""
        if scope is not None and scope not in SCOPES:
            raise LedgerError(f"budget scope must be one of {', '.join(SCOPES)}")
        budget, scope = self._in_force(budget, scope)
        if budget is None:
            return None
        before = self.spent(fingerprint, budget=budget, scope=scope)
        after = self.spent(fingerprint, budget=budget, scope=scope, new=guarantee)
        if not within_budget(after, budget):
            what = "this input" if scope == "input" else "this ledger"
            n = len(self.entries(None if scope == "ledger" else fingerprint))
            raise BudgetExceededError(
                f"release refused: it would bring the privacy loss of {what} to {budget_text(after)}, over the "
                f"budget {budget_text(budget)} (spent so far: {budget_text(before) if before else 'nothing'} in "
                f"{n} release{'s' if n != 1 else ''}; ledger {self.path.name})")
        return after

    # -- writing ---------------------------------------------------------------------------
    def record(self, fingerprint: str, guarantee: Guarantee, *, mechanism: dict, mechanism_spec: dict | None = None,
               source=None, output=None, cells: int | None = None, budget=None, scope: str | None = None) -> LedgerEntry:
        """Append an entry (and the budget, if one is given) and replace the ledger file."""
        key = self._key(create=True)
        doc = self._document()
        entry = LedgerEntry(secrets.token_hex(8), _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                            fingerprint, guarantee, mechanism, mechanism_spec,
                            None if source is None else str(source), None if output is None else str(output), cells)
        doc["entries"] = list(doc["entries"]) + [entry.to_json()]
        doc["key_check"] = _key_check(key)
        if budget is not None:
            g = parse_budget(budget) if isinstance(budget, str) else budget
            doc["budget"] = {**_guarantee_json(g), "scope": scope or "input"}
        write_files([(self.path, json.dumps(doc, indent=2) + "\n", 0o600)], overwrite=True)
        return entry


def as_ledger(ledger) -> Ledger:
    """A :class:`Ledger` from a ledger or a path."""
    return ledger if isinstance(ledger, Ledger) else Ledger(ledger)


def entry_report(ledger, output, entry_id: str) -> str:
    """One line on a release's ledger entry: the ledger's path and the privacy loss of that
    input so far against its budget (or how many releases of it there are, with no budget).
    ``ledger`` is the ledger path given by the user, or ``None`` for the one beside ``output``."""
    book = Ledger(ledger) if ledger is not None else Ledger.beside(output)
    (entry,) = [e for e in book.entries() if e.id == entry_id]
    budget, _ = book.budget()
    if budget is not None:
        return (f"ledger: entry {entry.id} in {book.path}; privacy loss so far "
                f"{budget_text(book.spent(entry.fingerprint))} of the budget {budget_text(budget)}")
    return (f"ledger: entry {entry.id} in {book.path}; {len(book.entries(entry.fingerprint))} release(s) of "
            "this input, no budget set (--budget)")
