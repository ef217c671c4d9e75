"""Generated forms under faults, on real servers, with exact counts read from the server.

Three catalogue operations whose effect is countable run in every form:

- ``incr_many`` (3 counters, +1 each): every counter equals the calls that ran;
- ``reserve_stock`` (qty 1 from a large stock): ``start - stock`` is the calls that ran, and
  each reply's "units left" steps by exactly one between two calls;
- ``transfer`` (1 from src to dst): ``dst`` is the calls that ran; ``src + dst`` is conserved.

"ran" is always read from the server; "made" counts the caller's calls. A call ends in
success, :class:`OutcomeUnknown` (it may have run; it was not re-sent) or
:class:`ConnectionFailed` (nothing was sent). So for every counter:
``ok <= ran <= ok + unknown``; ``ran - ok - unknown > 0`` would be a duplicate execution.
Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.errors import ConnectionFailed, LuapipeError, OutcomeUnknown
from luapipe.operations.operation import FORMS, Operation
from luapipe.operations.spec import load_operation

from ..conftest import EXAMPLES_DIR

START = 1_000_000
OPS: dict[str, Operation] = {
    n: load_operation(EXAMPLES_DIR / "operations" / f"{n}.toml")
    for n in ("incr_many", "reserve_stock", "transfer")
}
ATOMIC = ("transaction", "script", "function")


def _call(op: str, form: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Keys and args of one call; every (operation, form) has keys of its own."""
    p = f"{{f}}:{op}:{form}"  # one hash tag, like the script form's dynamic keys want
    if op == "incr_many":
        return {"counters": [f"{p}:a", f"{p}:b", f"{p}:c"]}, {"by": 1}
    if op == "reserve_stock":
        return {"stock": f"{p}:stock"}, {"qty": 1}
    return {"src": f"{p}:src", "dst": f"{p}:dst"}, {"amount": 1}


def _seed(client: redis.Redis) -> None:
    for form in FORMS:
        client.set(_call("reserve_stock", form)[0]["stock"], START)
        client.set(_call("transfer", form)[0]["src"], START)


def _ran(client: redis.Redis, op: str, form: str) -> dict[str, int]:
    """Per effect, how many calls ran (from the server's keys)."""
    keys = _call(op, form)[0]

    def val(k: str) -> int:
        return int(client.get(k) or 0)

    if op == "incr_many":
        return {k[-1]: val(k) for k in keys["counters"]}
    if op == "reserve_stock":
        return {"stock": START - val(keys["stock"])}
    return {"src": START - val(keys["src"]), "dst": val(keys["dst"])}


def _invariant_holds(client: redis.Redis, op: str, form: str) -> bool:
    ran = _ran(client, op, form)
    if op == "reserve_stock":
        return int(client.get(_call(op, form)[0]["stock"]) or 0) >= 0
    return len(set(ran.values())) == 1  # counters move together; src + dst conserved


@dataclass
class Tally:
    made: int = 0
    ok: int = 0
    unknown: int = 0
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    lefts: list[int | None] = field(default_factory=list)  # reserve_stock: units left, or gap


def _attempt(client: redis.Redis, op: str, form: str, tally: Tally) -> None:
    keys, args = _call(op, form)
    tally.made += 1
    try:
        reply = OPS[op].run(client, form, keys=keys, args=args)
    except OutcomeUnknown:
        tally.unknown += 1
        tally.lefts.append(None)
        return
    except ConnectionFailed:
        tally.refused += 1
        return
    except LuapipeError as exc:
        tally.errors.append(f"{type(exc).__name__}: {exc}")
        return
    tally.ok += 1
    if op == "reserve_stock":
        assert reply[0] == 1
        tally.lefts.append(int(reply[1]))


def _step_duplicates(lefts: list[int | None]) -> int:
    """Calls that ran beyond those the caller saw or could not see: between two successful
    reserve_stock replies "left" drops by 1, plus 1 per "outcome unknown" call at most."""
    dup, prev, unknown = 0, None, 0
    for left in lefts:
        if left is None:
            unknown += 1
            continue
        if prev is not None:
            dup += max(0, prev - left - 1 - unknown)
        prev, unknown = left, 0
    return dup


def _report(title: str, client: redis.Redis, tallies: dict[tuple[str, str], Tally]) -> int:
    """Print the figures; returns the number of duplicate executions found."""
    print(f"\n{title}")
    print(f"  {'operation/form':28} made   ok unknown refused  ran  dups errors")
    total_dups = total_ran = 0
    for (op, form), t in sorted(tallies.items()):
        ran = _ran(client, op, form)
        total_ran += max(ran.values())
        dups = max(max(0, v - t.ok - t.unknown) for v in ran.values())
        dups = max(dups, _step_duplicates(t.lefts))
        total_dups += dups
        print(
            f"  {op + '/' + form:28} {t.made:4} {t.ok:4} {t.unknown:7} {t.refused:7} "
            f"{max(ran.values()):4} {dups:5} {len(t.errors):6}"
        )
    made = sum(t.made for t in tallies.values())
    errors = sum(len(t.errors) for t in tallies.values())
    unknown = sum(t.unknown for t in tallies.values())
    refused = sum(t.refused for t in tallies.values())
    print(
        f"  total: {made} calls made, {total_ran} ran (server counters), {unknown} outcome "
        f"unknown, {refused} refused (not sent), "
        f"{total_dups} duplicates, {errors} other errors surfaced"
    )
    return total_dups


def _assert_at_most_once(client: redis.Redis, tallies: dict[tuple[str, str], Tally]) -> None:
    for (op, form), t in tallies.items():
        ran = _ran(client, op, form)
        assert t.errors == [], (op, form, t.errors[:3])
        for effect, n in ran.items():
            # every call that returned ran; nothing ran that the caller did not send once
            assert t.ok <= n <= t.ok + t.unknown, (op, form, effect, n, t)
        assert _step_duplicates(t.lefts) == 0, (op, form)
        if form in ATOMIC:
            assert _invariant_holds(client, op, form), (op, form, ran)


# -- flush storms ---------------------------------------------------------------------


class Flusher(threading.Thread):
    """Another connection emptying the script cache or the function library every 2 ms."""

    def __init__(self, server: ServerProcess, what: str) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis(host=server.host, port=server.port)
        self.what = what
        self.stop = threading.Event()
        self.flushes = 0

    def run(self) -> None:
        while not self.stop.is_set():
            if self.what == "script":
                self.client.script_flush()
            else:
                self.client.function_flush()
            self.flushes += 1
            time.sleep(0.002)


@pytest.mark.parametrize("what", ["script", "function"])
def test_flush_storm_every_form_runs_each_call_exactly_once(
    r: redis.Redis, redis_server: ServerProcess, what: str
) -> None:
    _seed(r)
    tallies = {(op, form): Tally() for op in OPS for form in FORMS}
    flusher = Flusher(redis_server, what)
    flusher.start()
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            for op, form in tallies:
                _attempt(r, op, form, tallies[op, form])
    finally:
        flusher.stop.set()
        flusher.join()
        flusher.client.close()
    dups = _report(f"{what.upper()} FLUSH storm: {flusher.flushes} flushes", r, tallies)
    assert flusher.flushes > 100
    assert dups == 0
    for (op, form), t in tallies.items():
        assert t.errors == [] and t.unknown == t.refused == 0, (op, form, t.errors[:3])
        ran = _ran(r, op, form)
        assert set(ran.values()) == {t.made}, (op, form, ran, t.made)  # exactly once each
        assert _invariant_holds(r, op, form)
        if op == "reserve_stock":
            assert t.lefts == list(range(START - 1, START - 1 - t.made, -1))


# -- restart, CLIENT KILL, timeout ------------------------------------------------------


@pytest.fixture
def durable() -> Iterator[EmbeddedRedis]:
    """A private server whose data survives a restart (AOF, fsync always), so the counters
    of calls before and after the restart add up on the restarted server."""
    server = EmbeddedRedis(["--appendonly", "yes", "--appendfsync", "always"])
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_restart_mid_run_in_flight_calls_are_unknown_never_resent(
    durable: EmbeddedRedis,
) -> None:
    info = durable.info
    assert info is not None
    client = redis.Redis(host=info.host, port=info.port, socket_timeout=5)
    _seed(client)
    tallies = {(op, form): Tally() for op in OPS for form in FORMS}
    restarter = threading.Timer(0.5, durable.restart)
    restarter.start()
    after = 0
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (restarter.is_alive() or after < 20):
            done = not restarter.is_alive()
            for op, form in tallies:
                _attempt(client, op, form, tallies[op, form])
            after += done
    finally:
        restarter.join()
    try:
        dups = _report("server restart mid-run (AOF keeps the counters)", client, tallies)
        _assert_at_most_once(client, tallies)
        assert dups == 0
        assert after >= 20  # calls after the restart succeed (reconnect, reload the script)
        assert all(t.ok > t.unknown + t.refused for t in tallies.values())
    finally:
        client.close()


@pytest.fixture(scope="module")
def debuggable() -> Iterator[ServerProcess]:
    """A private server that accepts DEBUG SLEEP (a server busy for longer than a timeout)."""
    server = EmbeddedRedis(["--enable-debug-command", "yes"])
    try:
        yield server.start()
    finally:
        server.stop()


class Killer(threading.Thread):
    """Kills the connections named ``victim`` every few ms; every other time it first pauses
    writes, so a call that already reached the server dies in flight (it then never runs)."""

    def __init__(self, server: ServerProcess) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis(host=server.host, port=server.port, decode_responses=True)
        self.stop = threading.Event()
        self.kills = 0

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            victims = [c["id"] for c in self.client.client_list() if c["name"] == "victim"]
            if n % 2:
                self.client.client_pause(20, all=False)
                time.sleep(0.005)
            for cid in victims:
                self.kills += int(self.client.client_kill_filter(_id=cid))
            self.client.client_unpause()
            time.sleep(0.003)


def test_client_kill_mid_call_is_unknown_never_resent(debuggable: ServerProcess) -> None:
    admin = redis.Redis(host=debuggable.host, port=debuggable.port)
    admin.flushall()
    _seed(admin)
    victim = redis.Redis(host=debuggable.host, port=debuggable.port, client_name="victim")
    tallies = {(op, form): Tally() for op in OPS for form in FORMS}
    killer = Killer(debuggable)
    killer.start()
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            for op, form in tallies:
                _attempt(victim, op, form, tallies[op, form])
    finally:
        killer.stop.set()
        killer.join()
        killer.client.close()
    try:
        # after the storm every form works again (a fresh connection, nothing re-sent)
        for (op, form), t in tallies.items():
            ok = t.ok
            _attempt(victim, op, form, t)
            assert t.ok == ok + 1, (op, form, t.errors[-1:])
        dups = _report(f"CLIENT KILL storm: {killer.kills} connections killed", admin, tallies)
        _assert_at_most_once(admin, tallies)
        assert dups == 0
        assert killer.kills > 20
        assert sum(t.unknown for t in tallies.values()) > 0  # some kills landed mid-call
    finally:
        victim.close()
        admin.close()


def _debug_sleep(server: ServerProcess, seconds: float) -> None:
    """Keep the whole server busy for ``seconds`` (another connection)."""
    client = redis.Redis(host=server.host, port=server.port)
    try:
        client.execute_command("DEBUG", "SLEEP", seconds)  # type: ignore[no-untyped-call]
    finally:
        client.close()


def _wait_busy(server: ServerProcess) -> None:
    """Return once the server stops answering (the DEBUG SLEEP has begun)."""
    probe = redis.Redis(
        host=server.host, port=server.port, socket_timeout=0.05, retry=Retry(NoBackoff(), 0)
    )
    try:
        for _ in range(200):
            try:
                probe.ping()
            except redis.TimeoutError:
                return
            time.sleep(0.01)
        raise AssertionError("the server never became busy")
    finally:
        probe.close()


@pytest.mark.parametrize("form", FORMS)
def test_timeout_shorter_than_a_slow_call_never_runs_it_twice(
    debuggable: ServerProcess, form: str
) -> None:
    """The server is busy (DEBUG SLEEP 0.6 s) when the call arrives; the caller gives up after
    0.15 s with "outcome unknown"; the server then runs what it received, once."""
    admin = redis.Redis(host=debuggable.host, port=debuggable.port)
    admin.flushall()
    impatient = redis.Redis(host=debuggable.host, port=debuggable.port, socket_timeout=0.15)
    keys, args = _call("incr_many", form)
    op = OPS["incr_many"]
    op.run(impatient, form, keys=keys, args=args)  # warm: script/function loaded, connected
    sleeper = threading.Thread(target=_debug_sleep, args=(debuggable, 0.6))
    sleeper.start()
    _wait_busy(debuggable)
    try:
        with pytest.raises(OutcomeUnknown, match="outcome unknown"):
            op.run(impatient, form, keys=keys, args=args)
    finally:
        sleeper.join()
    admin.ping()
    time.sleep(0.05)  # the server handles the request it got during the sleep
    ran = _ran(admin, "incr_many", form)
    # The first round trip ran once after the caller gave up, and nothing was re-sent; the
    # naive form sends one INCRBY per round trip, so only the first counter moved.
    first_trip = {"a": 2, "b": 1, "c": 1} if form == "naive" else {"a": 2, "b": 2, "c": 2}
    print(f"\ntimeout ({form}): 2 calls made (1 outcome unknown), counters {ran}")
    assert ran == first_trip
    op.run(impatient, form, keys=keys, args=args)  # the client works afterwards
    assert _ran(admin, "incr_many", form) == {k: v + 1 for k, v in first_trip.items()}
    impatient.close()
    admin.close()


def test_connection_killed_between_watch_and_exec_does_not_commit_unwatched(
    debuggable: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WATCH + GET, then the connection is killed and another client empties the stock: the
    EXEC must not commit what was computed from the stale read (stock would go below 0)."""
    from luapipe.wire import sync as transport

    admin = redis.Redis(host=debuggable.host, port=debuggable.port, decode_responses=True)
    admin.flushall()
    stock = _call("reserve_stock", "transaction")[0]["stock"]
    admin.set(stock, 1)
    victim = redis.Redis(host=debuggable.host, port=debuggable.port, client_name="victim")
    real_execute = transport.Session.execute

    def execute(self: transport.Session, commands: Any, **kw: Any) -> list[Any]:
        replies = real_execute(self, commands, **kw)
        head = commands[0][0]
        if (head.decode() if isinstance(head, bytes) else str(head)).upper() == "WATCH":
            for c in admin.client_list():
                if c["name"] == "victim":
                    admin.client_kill_filter(_id=c["id"])
            admin.set(stock, 0)  # another client takes the last unit meanwhile
        return replies

    monkeypatch.setattr(transport.Session, "execute", execute)
    try:
        # the WATCH round trip ran and the session lost its connection: never a silent
        # reconnect (EXEC would commit unwatched), never "nothing ran" (ConnectionFailed)
        with pytest.raises(OutcomeUnknown, match="outcome is unknown"):
            OPS["reserve_stock"].run(victim, "transaction", keys={"stock": stock}, args={"qty": 1})
        left = int(admin.get(stock) or 0)
        print(f"\nkill between WATCH and EXEC: stock now {left}")
        assert left == 0  # the other client's take stands, nothing below zero
    finally:
        victim.close()
        admin.close()


def test_connection_killed_after_a_write_of_a_naive_call_is_outcome_unknown(
    debuggable: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    from luapipe.wire import sync as transport

    admin = redis.Redis(host=debuggable.host, port=debuggable.port, decode_responses=True)
    admin.flushall()
    keys = {"src": "naive:src", "dst": "naive:dst"}
    admin.set(keys["src"], 10)
    victim = redis.Redis(host=debuggable.host, port=debuggable.port, client_name="victim")
    real_execute = transport.Session.execute

    def execute(self: transport.Session, commands: Any, **kw: Any) -> list[Any]:
        replies = real_execute(self, commands, **kw)
        head = commands[0][0]
        if (head.decode() if isinstance(head, bytes) else str(head)).upper() == "DECRBY":
            for c in admin.client_list():
                if c["name"] == "victim":
                    admin.client_kill_filter(_id=c["id"])
        return replies

    monkeypatch.setattr(transport.Session, "execute", execute)
    try:
        with pytest.raises(OutcomeUnknown):
            OPS["transfer"].run(victim, "naive", keys=keys, args={"amount": 1})
    finally:
        print(
            f"\nkill after DECRBY: src {admin.get(keys['src'])!r}, dst {admin.get(keys['dst'])!r}"
        )
        victim.close()
        admin.close()
