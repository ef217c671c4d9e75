"""The I/O-free steps and their combinators, answered by a script instead of a server.

These pin the retry decisions that both drivers share: what counts as "did not run", what
is sent again and where, and that nothing which may have run is ever re-sent.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis.exceptions as rex

from luapipe.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    LuapipeError,
    OutcomeUnknown,
    ServerError,
)
from luapipe.scripts.calls import execute_steps
from luapipe.scripts.protocol import KnownScripts
from luapipe.wire.policy import DEFAULT, RetryPolicy, did_not_run, policy_of
from luapipe.wire.replies import Command, Redirect, ReplyError, raise_for
from luapipe.wire.routing import (
    Locate,
    LocateMany,
    Refresh,
    Send,
    SendEach,
    SlotsOf,
    Steps,
    gather,
    on_slot_node,
    routed,
    slot_of,
)

Answer = Callable[[Any], Any]


def run(steps: Steps[Any], answer: Answer) -> tuple[Any, list[Any]]:
    """Drive ``steps`` like the drivers do: answers sent in, luapipe errors thrown in."""
    seen: list[Any] = []
    try:
        request = next(steps)
        while True:
            seen.append(request)
            try:
                reply = answer(request)
            except LuapipeError as exc:
                request = steps.throw(exc)
            else:
                request = steps.send(reply)
    except StopIteration as done:
        return done.value, seen


MOVED = ReplyError("MOVED 3999 127.0.0.1:7002")
ASK = ReplyError("ASK 3999 127.0.0.1:7003")


def test_redirects_are_typed_from_the_server_reply_only() -> None:
    assert Redirect.of(MOVED) == Redirect("MOVED", "127.0.0.1:7002", MOVED.text)
    assert Redirect.of(ASK) == Redirect("ASK", "127.0.0.1:7003", ASK.text)
    assert Redirect.of(ASK).ask == "127.0.0.1:7003" and Redirect.of(MOVED).ask is None  # type: ignore[union-attr]
    assert Redirect.of(ReplyError("TRYAGAIN Multiple keys request during rehashing")).kind == (  # type: ignore[union-attr]
        "TRYAGAIN"
    )
    assert Redirect.of(ReplyError("CLUSTERDOWN The cluster is down")).kind == "CLUSTERDOWN"  # type: ignore[union-attr]
    # a script's own error that mentions MOVED, and a plain value, are not redirects
    assert Redirect.of(ReplyError("ERR user_script:1: MOVED 1 a:1 script: x")) is None
    assert Redirect.of("MOVED 3999 127.0.0.1:7002") is None


def test_did_not_run_is_typed_never_read_from_a_message() -> None:
    redirect = Redirect.of(MOVED)
    assert did_not_run(MOVED) == redirect
    with pytest.raises(ServerError) as raised:
        raise_for(MOVED)
    assert did_not_run(raised.value) == redirect  # the error carries the reply it was
    # the same text in a luapipe message proves nothing: a script may say anything
    assert did_not_run(ServerError("MOVED 3999 127.0.0.1:7002")) is None
    assert did_not_run(ServerError("function f failed: MOVED 3999 127.0.0.1:7002")) is None
    refused = ConnectionFailed("cannot connect")
    assert did_not_run(refused) is refused
    assert did_not_run(AuthenticationFailed("WRONGPASS")) is not None  # refused before sending
    assert did_not_run(OutcomeUnknown("timed out after the request was sent")) is None
    assert did_not_run(ReplyError("NOSCRIPT No matching script")) is None
    assert did_not_run(42) is None


def test_retry_policy_is_one_frozen_value() -> None:
    assert (DEFAULT.redirects, DEFAULT.watch_retries) == (8, 20)
    assert [DEFAULT.refresh_delay(n) for n in (0, 1, 2, 9)] == [0.05, 0.1, 0.2, 1.0]
    assert all(0 <= DEFAULT.watch_delay(n) <= 0.05 for n in range(30))
    assert policy_of(3).watch_retries == 3 and policy_of(3).redirects == 8
    assert policy_of(None) is DEFAULT
    with pytest.raises(AttributeError):
        DEFAULT.redirects = 1  # type: ignore[misc]


def _attempt(node: str, asking: bool) -> Steps[Any]:
    (reply,) = yield Send([("INCR", "k")], node, asking)
    return Redirect.of(reply) or reply


def test_on_slot_node_follows_moved_after_refreshing_and_ask_at_once() -> None:
    script = iter([MOVED, ASK, 7])
    owner = iter(["127.0.0.1:7001", "127.0.0.1:7002"])

    def answer(request: Any) -> Any:
        if isinstance(request, Locate):
            return next(owner)
        if isinstance(request, Send):
            return [next(script)]
        return None

    value, seen = run(on_slot_node(_attempt, 3999, DEFAULT, what="x"), answer)
    assert value == 7
    sends = [(r.node, r.asking) for r in seen if isinstance(r, Send)]
    assert sends == [("127.0.0.1:7001", False), ("127.0.0.1:7002", False), ("127.0.0.1:7003", True)]
    refreshes = [r for r in seen if isinstance(r, Refresh)]
    assert [r.cause.kind for r in refreshes] == ["MOVED", "ASK"]  # type: ignore[union-attr]
    assert refreshes[0].delay == DEFAULT.refresh_delay(0) and refreshes[1].delay == 0


def test_on_slot_node_retries_a_refused_connection_but_never_an_unknown_outcome() -> None:
    failures: list[LuapipeError] = [ConnectionFailed("refused")]

    def answer(request: Any) -> Any:
        if isinstance(request, Locate):
            return "n:1"
        if isinstance(request, Send):
            if failures:
                raise failures.pop()
            return [1]
        return None

    value, seen = run(on_slot_node(_attempt, 1, DEFAULT, what="x"), answer)
    assert value == 1 and sum(isinstance(r, Send) for r in seen) == 2

    sent: list[Any] = []

    def unknown(request: Any) -> Any:
        if isinstance(request, Send):
            sent.append(request)
            raise OutcomeUnknown("timed out after sending")
        return "n:1"

    with pytest.raises(OutcomeUnknown):
        run(on_slot_node(_attempt, 1, DEFAULT, what="x"), unknown)
    assert len(sent) == 1  # never re-sent


def test_on_slot_node_gives_up_after_the_policy_s_attempts() -> None:
    sent: list[Any] = []

    def answer(request: Any) -> Any:
        if isinstance(request, Send):
            sent.append(request)
            return [MOVED]
        return "n:1" if isinstance(request, Locate) else None

    with pytest.raises(ConnectionFailed) as info:
        run(on_slot_node(_attempt, 1, RetryPolicy(redirects=3), what="x"), answer)
    assert len(sent) == 3
    # every attempt proved it did not run: a ConnectionFailed (code that retries on it may
    # send it again), naming the slot, the attempts and the last cause
    assert not isinstance(info.value, ServerError)
    assert isinstance(info.value, rex.ConnectionError) and isinstance(info.value, rex.ClusterError)
    assert str(info.value) == (
        "no node would take x (slot 1) after 3 attempts; it did not run "
        "(the last: MOVED 3999 127.0.0.1:7002)"
    )


def test_routed_gives_up_on_what_no_node_takes_as_connection_failed() -> None:
    """A command refused on every round (here a connection refused before sending) gets a
    ConnectionFailed in its place; the one that ran keeps its reply."""
    slot_b = slot_of(["{b}y"])

    def answer(request: Any) -> Any:
        if isinstance(request, LocateMany):
            return ["b:2" if s == slot_b else "a:1" for s in request.slots]
        if isinstance(request, SendEach):
            return [
                ConnectionFailed("cannot connect to Redis at b:2: refused")
                if p.node == "b:2"
                else ["ok"]
                for p in request.parts
            ]
        return None

    batch = [("GET", "{a}x"), ("GET", "{b}y")]
    with pytest.raises(ConnectionFailed) as info:
        run(routed(batch, RetryPolicy(redirects=2), cluster=True), answer)
    assert isinstance(info.value, rex.ConnectionError)
    assert str(info.value) == (
        f"no node would take this command (slot {slot_b}) after 2 attempts; it did not run "
        "(the last: cannot connect to Redis at b:2: refused)"
    )


def test_gather_keeps_each_part_s_outcome() -> None:
    def part(node: str) -> Steps[Any]:
        (reply,) = yield Send([("GET", node)], node)
        return reply

    def answer(request: Any) -> Any:
        assert isinstance(request, SendEach)
        return [OutcomeUnknown("lost"), ["b"], ConnectionFailed("refused")]

    out, seen = run(gather({"a": part("a"), "b": part("b"), "c": part("c")}), answer)
    assert isinstance(out["a"], OutcomeUnknown) and out["b"] == "b"
    assert isinstance(out["c"], ConnectionFailed)
    assert len(seen) == 1  # one write per node, in one round


def test_pipeline_resends_only_what_did_not_run() -> None:
    """Entry 1 was answered MOVED: only it goes again (to the new owner); entries 0 and 2
    ran and are never re-sent."""
    entries = [Command(("INCR", f"k{i}"), parse=False) for i in range(3)]
    owners = {0: "a:1", 1: "a:1", 2: "b:2"}
    moved_once = [True]
    sent: list[tuple[str, list[Any]]] = []

    def answer(request: Any) -> Any:
        if isinstance(request, SlotsOf):
            return list(range(len(request.commands)))
        if isinstance(request, LocateMany):
            if not moved_once[0]:
                return ["b:2" for _ in request.slots]  # the new map: slot 1 moved to b
            return [owners[s] for s in request.slots]  # type: ignore[index]
        if isinstance(request, SendEach):
            out = []
            for part in request.parts:
                sent.append((part.node, [c.args[1] for c in part.batch]))  # type: ignore[union-attr]
                replies = []
                for c in part.batch:
                    if c.args[1] == "k1" and moved_once[0]:  # type: ignore[union-attr]
                        replies.append(ReplyError("MOVED 1 127.0.0.1:2"))
                    else:
                        replies.append(1)
                out.append(replies)
            return out
        if isinstance(request, Refresh):
            moved_once[0] = False
        return None

    (results, reloads), _ = run(
        execute_steps(entries, KnownScripts(), DEFAULT, transaction=False, cluster=True), answer
    )
    assert results == [1, 1, 1] and reloads == 0
    assert sent == [("a:1", ["k0", "k1"]), ("b:2", ["k2"]), ("b:2", ["k1"])]


def test_pipeline_part_that_may_have_run_raises_after_the_others_and_resends_nothing() -> None:
    entries = [Command(("INCR", f"k{i}")) for i in range(2)]
    sent: list[str] = []

    def answer(request: Any) -> Any:
        if isinstance(request, SlotsOf):
            return [0, 1]
        if isinstance(request, LocateMany):
            return ["a:1", "b:2"][: len(request.slots)]
        if isinstance(request, SendEach):
            sent.extend(p.node for p in request.parts)
            return [OutcomeUnknown("lost after sending"), [1]]
        return None

    steps = execute_steps(entries, KnownScripts(), DEFAULT, transaction=False, cluster=True)
    with pytest.raises(OutcomeUnknown):
        run(steps, answer)
    assert sent == ["a:1", "b:2"]


def test_routed_splits_per_node_and_resends_only_redirected_commands() -> None:
    batch = [("GET", "{a}x"), ("GET", "{b}y"), ("GET", "{a}z")]
    slot_a, slot_b = slot_of(["{a}x"]), slot_of(["{b}y"])
    first = [True]
    sent: list[tuple[str, bool, list[str]]] = []

    def answer(request: Any) -> Any:
        if isinstance(request, LocateMany):
            return ["a:1" if s == slot_a else "b:2" for s in request.slots]
        if isinstance(request, SendEach):
            out = []
            for p in request.parts:
                sent.append((p.node, p.asking, [c[1] for c in p.batch]))
                if p.node == "b:2" and first[0]:
                    first[0] = False
                    out.append([ReplyError(f"ASK {slot_b} 127.0.0.1:9")])
                else:
                    out.append([f"v{c[1]}" for c in p.batch])
            return out
        return None

    replies, _ = run(routed(batch, DEFAULT, cluster=True), answer)
    assert replies == ["v{a}x", "v{b}y", "v{a}z"]
    assert sent == [
        ("a:1", False, ["{a}x", "{a}z"]),
        ("b:2", False, ["{b}y"]),
        ("127.0.0.1:9", True, ["{b}y"]),
    ]


def test_slot_of_needs_no_client_and_refuses_cross_slot_keys() -> None:
    assert slot_of([]) is None
    assert slot_of(["{user1}:a", b"{user1}:b"]) == slot_of(["user1"])
    assert slot_of(["foo"]) == 12182  # the CRC16 slot Redis gives "foo"
    with pytest.raises(LuapipeError, match="must share a cluster slot"):
        slot_of(["a", "b"])
