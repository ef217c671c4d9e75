"""The thread-safe auto-pipeline (a sync client shared by many threads) on a real server:
shared writes, exactly once, OutcomeUnknown after a lost write, re-send of what never left,
the bound, what needs a connection of its own."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import luapipe
from luapipe.bench.server import ServerProcess, free_port
from luapipe.errors import CallArgumentError, ConnectionFailed, OutcomeUnknown, ServerError
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire.autopipe.schedule import Call, Entry
from luapipe.wire.autopipe.threadlink import send_counted as _send

from ..drivers import kill_named, stopped
from ..helpers import SPIN

APPEND = LuaScript.from_source(
    "append", "-- @key log\n-- @arg item\nreturn redis.call('RPUSH', KEYS[1], ARGV[1])\n"
)


@pytest.fixture
def reg() -> ScriptRegistry:
    return ScriptRegistry([APPEND])


def in_threads(n: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(i)`` in ``n`` threads started together; each one's result or exception."""
    out: list[Any] = [None] * n
    start = threading.Barrier(n)

    def run(i: int) -> None:
        start.wait()
        try:
            out[i] = work(i)
        except Exception as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_threads_share_writes_and_each_call_runs_once(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    ap = luapipe.autopipeline(client)

    def work(i: int) -> list[Any]:
        return [reg.call(ap, "append", keys=[f"log{i}"], args=[j]) for j in range(50)] + [
            ap.incr("total") for _ in range(10)
        ]

    out = in_threads(16, work)
    ap.close()
    assert all(o[:50] == list(range(1, 51)) for o in out), out
    assert r.get("total") == b"160"
    for i in range(16):  # each thread's calls applied once each, in its order
        assert r.lrange(f"log{i}", 0, -1) == [str(j).encode() for j in range(50)]
    assert ap.writes < 16 * 60  # writes were shared


def test_threads_command_methods_return_what_the_client_returns(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    client = redis.Redis(host=redis_server.host, port=redis_server.port, decode_responses=True)
    ap = luapipe.autopipeline(client)

    def sequence(c: Any) -> list[Any]:
        out = [
            c.set("s", "v"),
            c.get("s"),
            c.hset("h", mapping={"a": 1}),
            c.hgetall("h"),
            c.zadd("z", {"x": 1.5}),
            c.zrange("z", 0, -1, withscores=True),
            c.set("s", "w", get=True),
        ]
        c.flushall()
        return out

    assert sequence(ap) == sequence(client)
    ap.close()


def test_threads_lost_write_is_outcome_unknown_and_never_resent(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    client = redis.Redis(host=redis_server.host, port=redis_server.port, socket_timeout=0.3)
    ap = luapipe.autopipeline(client)
    ap.ping()
    with stopped(redis_server.pid):
        out = in_threads(6, lambda i: reg.call(ap, "append", keys=["log"], args=[i]))
    # the calls of the write that timed out get OutcomeUnknown; calls queued behind it were
    # never written there: a new connection is tried (and times out too while the server
    # is frozen: ConnectionFailed, they did not run), never the lost write again
    lost = [i for i, o in enumerate(out) if isinstance(o, OutcomeUnknown)]
    refused = [i for i, o in enumerate(out) if isinstance(o, ConnectionFailed) and i not in lost]
    assert lost and len(lost) + len(refused) == 6, out
    assert ap.incr("after") == 1
    assert sorted(r.lrange("log", 0, -1)) == [str(i).encode() for i in lost]  # once each
    ap.close()


def test_threads_write_that_never_left_goes_out_on_a_new_connection(
    r: redis.Redis, reg: ScriptRegistry, redis_server: ServerProcess
) -> None:
    client = redis.Redis(host=redis_server.host, port=redis_server.port, client_name="apt")
    ap = luapipe.autopipeline(client)
    ap.ping()
    assert kill_named(r, "apt") == 1
    assert [reg.call(ap, "append", keys=["log"], args=[i]) for i in range(3)] == [1, 2, 3]
    ap.close()


def test_threads_connection_failed_when_nothing_listens() -> None:
    ap = luapipe.autopipeline(redis.Redis(host="127.0.0.1", port=free_port()))
    out = in_threads(4, lambda i: ap.incr("k"))
    assert all(isinstance(o, ConnectionFailed) and not isinstance(o, OutcomeUnknown) for o in out)


def test_threads_errors_stay_with_their_caller(r: redis.Redis, redis_server: ServerProcess) -> None:
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    ap = luapipe.autopipeline(client)
    r.set("str", "x")

    def work(i: int) -> Any:
        return ap.lpush("str", 1) if i == 0 else ap.incr(f"n{i}")

    out = in_threads(8, work)
    assert isinstance(out[0], ServerError) and "WRONGTYPE" in str(out[0])
    assert out[1:] == [1] * 7
    ap.close()


def test_threads_bound_waits(r: redis.Redis, redis_server: ServerProcess) -> None:
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    ap = luapipe.autopipeline(client, max_in_flight=1)
    out = in_threads(8, lambda i: ap.incr("n"))
    assert sorted(out) == list(range(1, 9))
    assert ap.writes == 8  # one call in flight at a time
    ap.close()


def test_threads_refuse_connection_state_and_block_on_their_own(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    ap = luapipe.autopipeline(client)
    with pytest.raises(CallArgumentError, match="nothing was sent"):
        ap.execute_command("SELECT", 2)

    def work(i: int) -> Any:
        if i == 0:
            return ap.blpop(["q"], timeout=2)
        threading.Event().wait(0.05)
        return ap.rpush("q", "x")

    assert in_threads(2, work) == [(b"q", b"x"), 1]
    ap.close()


class _Socket(socket.socket):
    """A socket that takes ``room`` bytes, then fails."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def send(self, data: Any, flags: int = 0) -> int:
        if self.room <= 0:
            raise ConnectionResetError("reset")
        n = min(self.room, len(data))
        self.room -= n
        return n


def test_a_write_cut_short_knows_which_calls_left_whole() -> None:
    entries = [Entry(Call(), "n", [("X",)], b"a" * 10) for _ in range(4)]
    with _Socket(25) as sock:  # two whole, the third cut: it cannot run
        whole, exc = _send(sock, entries)
    assert whole == 2 and isinstance(exc, ConnectionResetError)


def test_threads_close_fails_waiting_calls_and_closes_its_connection(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    """After close() the calls that waited for a place, or were queued behind the write in
    flight, get ConnectionFailed and do not run; the write in flight finishes and its
    connection is closed (they ran on a connection close() had left open)."""
    client = redis.Redis(host=redis_server.host, port=redis_server.port, client_name="apclose")
    ap = luapipe.autopipeline(client, max_in_flight=2)
    slow = "redis.call('INCR', KEYS[1])" + SPIN

    def work(i: int) -> Any:
        if i:
            time.sleep(0.05)  # behind the first one's write
        return ap.eval(slow, 1, "n", 300)

    closer = threading.Timer(0.15, ap.close)
    closer.start()
    out = in_threads(6, work)
    closer.join()
    assert out[0] == 1
    assert all(isinstance(o, ConnectionFailed) and "closed" in str(o) for o in out[1:]), out
    assert r.get("n") == b"1"
    deadline = time.monotonic() + 2
    while [c for c in r.client_list() if c.get("name") == "apclose"]:
        assert time.monotonic() < deadline, "the auto-pipeline's connection was left open"
        time.sleep(0.01)


@contextlib.contextmanager
def ctrl_c_after(seconds: float) -> Iterator[None]:
    """KeyboardInterrupt in this (the main) thread after ``seconds``, as Ctrl-C would."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt("Ctrl-C")

    old = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("where", ["driving the write", "queued behind it", "waiting a place"])
def test_threads_an_interrupted_caller_leaves_the_others_going(
    r: redis.Redis, redis_server: ServerProcess, where: str
) -> None:
    """Ctrl-C in a caller's thread (the one doing the node's I/O, one whose call waits in
    the queue, one waiting for a place) hands the link on: the other threads' calls and
    later calls go on (they all waited forever on a link owned by a thread that had left);
    an interrupted call that was never written does not run."""
    client = redis.Redis(host=redis_server.host, port=redis_server.port)
    ap = luapipe.autopipeline(client, max_in_flight=1 if where == "waiting a place" else 64)
    slow = "redis.call('INCR', KEYS[1])" + SPIN
    out: list[Any] = []

    def later() -> None:
        time.sleep(0.1)
        out.append(ap.incr("m"))

    others = [threading.Thread(target=later, daemon=True) for _ in range(3)]
    if where != "driving the write":
        others.append(threading.Thread(target=lambda: ap.eval(slow, 1, "ran", 300), daemon=True))
        others[-1].start()
        time.sleep(0.05)  # its thread drives the slow write
    for t in others[:3]:
        t.start()
    with pytest.raises(KeyboardInterrupt), ctrl_c_after(0.1):
        if where == "driving the write":
            ap.eval(slow, 1, "ran", 300)
        else:
            ap.incr("interrupted")
    for t in others:
        t.join(5)
    assert not any(t.is_alive() for t in others), "callers left waiting forever"
    assert sorted(out) == [1, 2, 3]
    assert ap.incr("m") == 4
    assert r.get("ran") == b"1" and r.get("interrupted") is None
    ap.close()
