"""``luapipe.verify`` compares everything the forms leave, not only what they reply.

Each test breaks one form in one way that the replies cannot show (tests/internals.py
swaps the plan that form runs) and requires verify to report it: other values written,
a key left without its expiry, a key written that no form should write. A checker that
compared only the replies, ignored TTLs, or dumped only the declared keys passes all
three forms as equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import pytest
import redis

import luapipe

from ..conftest import EXAMPLES_DIR
from ..internals import Plan, WriteStep, break_form


def _op(name: str) -> luapipe.Operation:
    return luapipe.load_operation(EXAMPLES_DIR / "operations" / f"{name}.toml")


def _mismatch(report: luapipe.VerifyReport) -> luapipe.Mismatch:
    assert not report.ok and report.mismatch is not None, report.summary()
    m = report.mismatch
    assert (m.form_a, m.form_b) == ("naive", "pipelined")  # the broken form, named
    assert m.outcome_a == m.outcome_b  # the replies agree: only the keyspace tells
    assert m.keyspace_a != m.keyspace_b
    assert "keyspace after naive" in m.describe()
    return m


def _writes(change: Callable[[WriteStep], tuple[WriteStep, ...]]) -> Callable[[Plan], Plan]:
    return lambda plan: replace(plan, writes=tuple(x for w in plan.writes for x in change(w)))


def test_other_values_written_behind_the_same_reply_are_a_mismatch(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reserve_stock's pipelined form takes one unit more than it reports."""
    overdraw = _writes(lambda w: (replace(w, args=(lambda e: str(e["qty"] + 1),)),))
    break_form(monkeypatch, "pipelined", overdraw)
    m = _mismatch(luapipe.verify(_op("reserve_stock"), r, cases=60, seed=3))
    assert {k[0] for k in m.keyspace_a} == {k[0] for k in m.keyspace_b}  # same keys, values
    assert r.dbsize() == 0


def test_a_key_left_without_its_expiry_is_a_mismatch(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rate_limit's pipelined form forgets the EXPIRE of a new window: same counter, same
    reply, but the key lives forever."""
    forget = _writes(lambda w: () if w.cmd == "EXPIRE" else (w,))
    break_form(monkeypatch, "pipelined", forget)
    m = _mismatch(luapipe.verify(_op("rate_limit"), r, cases=60, seed=3))
    without_ttl = [(k, t, v) for k, t, v, _ in m.keyspace_a]
    assert without_ttl == [(k, t, v) for k, t, v, _ in m.keyspace_b]  # only the expiry differs
    assert r.dbsize() == 0


def test_a_key_no_form_declares_is_a_mismatch(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """reserve_stock's pipelined form also writes a key beside the declared one: the dump
    covers every key under verify's namespace, not only the declared keys."""
    shadow = WriteStep("SET", lambda e: e["stock"] + ":shadow", (lambda e: "1",), None, None)
    break_form(monkeypatch, "pipelined", _writes(lambda w: (w, shadow)))
    m = _mismatch(luapipe.verify(_op("reserve_stock"), r, cases=60, seed=3))
    extra = {k[0] for k in m.keyspace_b} - {k[0] for k in m.keyspace_a}
    assert extra and all(k.endswith(":shadow") for k in extra)
    assert r.dbsize() == 0
