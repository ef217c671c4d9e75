"""``await op.run(aclient, form, ...)``: every catalogue operation in every form gives what
the sync form gives from the same state, at most once, with WATCH retries counted."""

from __future__ import annotations

import asyncio
import importlib.util
import random
import threading
import time
from collections.abc import Awaitable, Callable
from types import ModuleType
from typing import Any, TypeVar

import fakeredis
import pytest
import redis
import redis.asyncio

from luapipe.bench.server import ServerProcess
from luapipe.errors import (
    CallArgumentError,
    LuapipeError,
    OutcomeUnknown,
    TransactionAborted,
)
from luapipe.operations import steps
from luapipe.operations.operation import Operation
from luapipe.operations.plan import RunResult, plan_of
from luapipe.operations.run import run, run_async
from luapipe.operations.spec import load_operation
from luapipe.operations.verify import Case, dump, setup

from ..conftest import EXAMPLES_DIR
from ..helpers import SPIN, calls, reset_stats

T = TypeVar("T")
OPS = {p.stem: load_operation(p) for p in sorted((EXAMPLES_DIR / "operations").glob("*.toml"))}
STOCK = OPS["reserve_stock"]
# Holds the (single-threaded) server busy for ``ms``: commands sent meanwhile wait in order.
BUSY = SPIN


def arun(factory: Callable[[], Any], body: Callable[[Any], Awaitable[T]]) -> T:
    async def main() -> T:
        client = factory()
        try:
            return await body(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


def on_server(server: ServerProcess, **kw: Any) -> Callable[[], redis.asyncio.Redis]:
    return lambda: redis.asyncio.Redis(host=server.host, port=server.port, **kw)


def _result(res: RunResult) -> tuple[Any, ...]:
    return ("ok", res.value, res.round_trips, res.retries)


def _error(exc: LuapipeError) -> tuple[Any, ...]:
    return ("error", type(exc).__name__, str(exc))


def sync_outcome(op: Operation, client: redis.Redis, form: str, case: Case) -> tuple[Any, ...]:
    try:
        return _result(op.run_detailed(client, form, keys=case.keys_dict, args=case.args_dict))
    except LuapipeError as exc:
        return _error(exc)


async def async_outcome(
    op: Operation, client: redis.asyncio.Redis, form: str, case: Case
) -> tuple[Any, ...]:
    try:
        pending = op.run_detailed(client, form, keys=case.keys_dict, args=case.args_dict)
        return _result(await pending)
    except LuapipeError as exc:
        return _error(exc)


def compare_all(sync: redis.Redis, aclient: Any, cases: int) -> tuple[int, int]:
    """Every operation, form and case: sync then async from the same state; returns how
    many (op, form, case) runs agreed (replies, errors, round trips, retries, keyspace) and
    how many of those were errors (wrong types, overflow...)."""

    async def body(_: Any) -> tuple[int, int]:
        agreed = errors = 0
        for name, op in OPS.items():
            # Round trips are measured: a script or function that an earlier test flushed
            # costs the first call one more (NOSCRIPT, then EVAL). Start both flavours from
            # a warm cache, so the sync run does not pay for the async one.
            warm = op.sample_case(random.Random(name), "aio-warm:")
            for form in ("script", "function"):
                sync_outcome(op, sync, form, warm)
            rng = random.Random(name)
            for i in range(cases):
                case = op.sample_case(rng, f"aio{i}:{name}:")  # no other key in its dump
                for form in op.forms:
                    setup(sync, case)
                    want = sync_outcome(op, sync, form, case)
                    want_keys = dump(sync, case.namespace)
                    setup(sync, case)
                    got = await async_outcome(op, aclient, form, case)
                    assert (got, dump(sync, case.namespace)) == (want, want_keys), (name, form, i)
                    agreed += 1
                    errors += got[0] == "error"
        return agreed, errors

    return arun(lambda: aclient, body)


@pytest.mark.parametrize("protocol", [2, 3])
def test_every_operation_and_form_agrees_with_the_sync_form(
    protocol: int, redis_server: ServerProcess, r: redis.Redis
) -> None:
    sync = redis.Redis(host=redis_server.host, port=redis_server.port, protocol=protocol)
    try:
        agreed, errors = compare_all(sync, on_server(redis_server, protocol=protocol)(), cases=12)
    finally:
        sync.close()
    assert agreed == len(OPS) * 5 * 12 and 0 < errors < agreed / 2


def test_every_operation_and_form_agrees_on_fakeredis() -> None:
    server = fakeredis.FakeServer(version=(7, 0))
    sync = fakeredis.FakeRedis(server=server)
    agreed, _ = compare_all(sync, fakeredis.FakeAsyncRedis(server=server), cases=3)
    assert agreed == len(OPS) * 15


def test_round_trips_and_commands_match_the_sync_form(r: redis.Redis) -> None:
    kw: dict[str, Any] = {"keys": {"stock": "s"}, "args": {"qty": 2}}
    for f in ("script", "function"):  # measured: loaded once (the fixture flushed them)
        STOCK.run_detailed(r, f, **kw)
    r.set("s", 5)
    sync = [STOCK.run_detailed(r, f, **kw).round_trips for f in STOCK.forms]
    reset_stats(r)
    r.set("s", 5)

    async def body(a: redis.asyncio.Redis) -> list[int]:
        return [(await STOCK.run_detailed(a, f, **kw)).round_trips for f in STOCK.forms]

    assert arun(lambda: redis.asyncio.Redis(**_kw(r)), body) == sync == [2, 2, 2, 1, 1]
    # one GET per form (the script's and the function's own GET are counted too)
    assert (calls(r, "get"), calls(r, "watch"), calls(r, "exec")) == (5, 1, 1)
    assert (calls(r, "evalsha"), calls(r, "fcall"), calls(r, "function")) == (1, 1, 0)
    assert r.get("s") == b"1"  # 5 -2 naive, -2 pipelined; then 1 left: refused three times


def _kw(r: redis.Redis) -> dict[str, Any]:
    kw = r.connection_pool.connection_kwargs
    return {"host": kw["host"], "port": kw["port"]}


@pytest.fixture
def generated() -> ModuleType:
    path = EXAMPLES_DIR / "operations" / "generated" / "op_reserve_stock.py"
    spec = importlib.util.spec_from_file_location("op_reserve_stock_aio", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_module_async_twins(r: redis.Redis, generated: ModuleType) -> None:
    assert generated.script_async.__doc__.startswith("reserve_stock as script, awaited")
    r.set("stock:1", 10)

    async def body(a: redis.asyncio.Redis) -> list[Any]:
        return [
            await getattr(generated, f"{form}_async")(a, stock="stock:1", qty=3)
            for form in STOCK.forms
        ]

    assert arun(lambda: redis.asyncio.Redis(**_kw(r)), body) == [
        [1, 7],
        [1, 4],
        [1, 1],
        [0, 1],
        [0, 1],
    ]
    assert r.get("stock:1") == b"1"


def _one_line(exc: pytest.ExceptionInfo[Exception]) -> str:
    text = str(exc.value)
    assert "\n" not in text and isinstance(exc.value, LuapipeError)
    return text


def test_sync_and_async_clients_in_the_wrong_place(r: redis.Redis, generated: ModuleType) -> None:
    with pytest.raises(CallArgumentError) as exc:
        asyncio.run(generated.naive_async(r, stock="s", qty=1))
    assert "needs a redis.asyncio client" in _one_line(exc) and "naive" in _one_line(exc)
    with pytest.raises(CallArgumentError) as exc:
        asyncio.run(run_async(plan_of(STOCK), r, "script", {"stock": "s"}, {"qty": 1}))  # type: ignore[arg-type]
    assert "got redis.client.Redis" in _one_line(exc)

    async def body(a: redis.asyncio.Redis) -> str:
        with pytest.raises(CallArgumentError) as exc:
            generated.transaction(a, stock="s", qty=1)
        with pytest.raises(CallArgumentError):
            run(plan_of(STOCK), a, "script", {"stock": "s"}, {"qty": 1})  # type: ignore[arg-type]
        assert asyncio.iscoroutine(
            pending := STOCK.run(a, "naive", keys={"stock": "s"}, args={"qty": 1})
        )
        assert await pending == [0, 0]
        return _one_line(exc)

    text = arun(lambda: redis.asyncio.Redis(**_kw(r)), body)
    assert "needs a sync client" in text and "transaction_async" in text
    assert r.keys() == []  # nothing was sent by the refused calls


def test_argument_and_form_errors_before_anything_is_sent(r: redis.Redis) -> None:
    reset_stats(r)

    async def body(a: redis.asyncio.Redis) -> None:
        with pytest.raises(CallArgumentError, match="unknown form 'lua'"):
            await STOCK.run(a, "lua", keys={"stock": "s"}, args={"qty": 1})
        with pytest.raises(CallArgumentError, match="argument 'qty' must be a int"):
            await STOCK.run(a, "script", keys={"stock": "s"}, args={"qty": "2"})
        with pytest.raises(CallArgumentError, match="keys must be"):
            await STOCK.run(a, "transaction", keys={"stok": "s"}, args={"qty": 1})

    arun(lambda: redis.asyncio.Redis(**_kw(r)), body)
    assert calls(r, "evalsha") == calls(r, "watch") == calls(r, "eval") == 0


# -- at most once ---------------------------------------------------------------------------


def _busy_server(r: redis.Redis, ms: int) -> threading.Thread:
    """Keep the server busy for ``ms`` from another connection (started before returning)."""
    busy = redis.Redis(connection_pool=r.connection_pool)
    thread = threading.Thread(target=busy.eval, args=(BUSY, 0, ms))
    thread.start()
    time.sleep(0.05)
    return thread


def _settle(r: redis.Redis, thread: threading.Thread) -> None:
    thread.join()
    time.sleep(0.05)  # the timed-out request, still in the server's socket buffer, runs now


def test_script_form_timeout_is_outcome_unknown_and_ran_once(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    r.set("stock", 5)
    kw: dict[str, Any] = {"keys": {"stock": "stock"}}

    async def body(a: redis.asyncio.Redis) -> threading.Thread:
        await STOCK.run(a, "script", args={"qty": 0}, **kw)  # connected, loaded: one EVALSHA
        reset_stats(r)
        thread = _busy_server(r, 400)
        with pytest.raises(OutcomeUnknown, match="outcome unknown"):
            await STOCK.run(a, "script", args={"qty": 2}, **kw)
        return thread

    _settle(r, arun(on_server(redis_server, socket_timeout=0.1), body))
    assert calls(r, "evalsha") == 1 and calls(r, "eval") == 1  # (the EVAL is the busy one)
    assert r.get("stock") == b"3"  # it ran, once; never re-sent


def test_transaction_timeout_at_exec_is_outcome_unknown_and_committed_once(
    r: redis.Redis, redis_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    r.set("stock", 5)
    real_compute = steps.compute
    threads = []

    def compute_then_busy(plan: Any, env: Any) -> Any:  # after WATCH/GET, before MULTI/EXEC
        threads.append(_busy_server(r, 400))
        return real_compute(plan, env)

    monkeypatch.setattr(steps, "compute", compute_then_busy)
    reset_stats(r)

    async def body(a: redis.asyncio.Redis) -> None:
        with pytest.raises(OutcomeUnknown, match="outcome unknown"):
            await STOCK.run(a, "transaction", keys={"stock": "stock"}, args={"qty": 2})

    arun(on_server(redis_server, socket_timeout=0.1), body)
    _settle(r, threads[0])
    assert len(threads) == 1  # no second attempt
    assert (calls(r, "watch"), calls(r, "multi"), calls(r, "exec")) == (1, 1, 1)
    assert r.get("stock") == b"3"


def test_cancelled_script_form_is_not_resent(r: redis.Redis, redis_server: ServerProcess) -> None:
    """``asyncio.timeout`` around a call: cancelled after the write, it ran once, and the
    client's next call works on a fresh connection."""
    r.set("stock", 5)
    kw: dict[str, Any] = {"keys": {"stock": "stock"}}

    async def body(a: redis.asyncio.Redis) -> Any:
        await STOCK.run(a, "script", args={"qty": 0}, **kw)
        reset_stats(r)
        thread = _busy_server(r, 300)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.1):
                await STOCK.run(a, "script", args={"qty": 2}, **kw)
        _settle(r, thread)
        return await STOCK.run(a, "script", args={"qty": 0}, **kw)

    assert arun(on_server(redis_server), body) == [1, 3]
    assert calls(r, "evalsha") == 2 and r.get("stock") == b"3"


def test_connection_killed_between_watch_and_exec_never_commits_unwatched(
    r: redis.Redis, redis_server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WATCH + GET, then the connection is killed and another client takes the last unit:
    the async transaction must not reconnect and EXEC what it computed from the stale read."""
    r.set("stock", 1)
    real_compute = steps.compute

    def kill_then_compute(plan: Any, env: Any) -> Any:
        r.client_kill_filter(_type="normal", skipme=True)  # the async client's connection
        r.set("stock", 0)
        return real_compute(plan, env)

    monkeypatch.setattr(steps, "compute", kill_then_compute)

    async def body(a: redis.asyncio.Redis) -> None:
        with pytest.raises(OutcomeUnknown, match="outcome"):  # the WATCH round trip ran
            await STOCK.run(a, "transaction", keys={"stock": "stock"}, args={"qty": 1})
        monkeypatch.setattr(steps, "compute", real_compute)
        # the client recovers: a fresh connection, one clean attempt
        assert await STOCK.run(a, "transaction", keys={"stock": "stock"}, args={"qty": 1}) == [0, 0]

    reset_stats(r)
    arun(on_server(redis_server), body)
    assert r.get("stock") == b"0" and calls(r, "exec") == 1  # never below zero


# -- WATCH retries ----------------------------------------------------------------------------


def test_concurrent_async_transactions_count_their_retries(r: redis.Redis) -> None:
    r.set("stock", 1000)
    reset_stats(r)
    kw: dict[str, Any] = {"keys": {"stock": "stock"}, "args": {"qty": 1}}

    async def worker(a: redis.asyncio.Redis) -> list[Any]:
        return [await STOCK.run_detailed(a, "transaction", **kw) for _ in range(10)]

    async def body(a: redis.asyncio.Redis) -> list[Any]:
        done = await asyncio.gather(*(worker(a) for _ in range(8)))
        return [res for results in done for res in results]

    results = arun(lambda: redis.asyncio.Redis(**_kw(r)), body)
    retries = sum(res.retries for res in results)
    assert retries > 0 and all(res.value[0] == 1 for res in results)
    assert all(res.round_trips == 2 * (res.retries + 1) for res in results)
    assert calls(r, "exec") == len(results) + retries  # every attempt counted, none hidden
    assert r.get("stock") == b"920"  # 80 reservations, no lost update


def test_transaction_retries_then_gives_up(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    r.set("stock", 5)
    real_compute = steps.compute
    interfere = [1]  # how many more attempts another client spoils

    def spoiled(plan: Any, env: Any) -> Any:
        if interfere[0]:
            interfere[0] -= 1
            r.decrby("stock", 4)
        return real_compute(plan, env)

    monkeypatch.setattr(steps, "compute", spoiled)
    kw: dict[str, Any] = {"keys": {"stock": "stock"}, "args": {"qty": 2}}

    async def body(a: redis.asyncio.Redis) -> Any:
        first = await STOCK.run_detailed(a, "transaction", **kw)
        interfere[0] = 100
        with pytest.raises(TransactionAborted, match="WATCH failed 3 times"):
            await STOCK.run_detailed(a, "transaction", max_retries=2, **kw)
        return first

    first = arun(lambda: redis.asyncio.Redis(**_kw(r)), body)
    assert (first.value, first.retries, first.round_trips) == ([0, 1], 1, 4)
    assert int(r.get("stock") or 0) == 1 - 3 * 4  # only the other client wrote


# -- redis.asyncio.RedisCluster ---------------------------------------------------------------


@pytest.mark.cluster
def test_cluster_runs_every_form_and_refuses_cross_slot_atomic_forms() -> None:
    import redis.asyncio.cluster as acluster

    from luapipe.bench.cluster import EmbeddedCluster
    from luapipe.errors import CrossSlotError

    transfer = OPS["transfer"]
    nodes = EmbeddedCluster(primaries=3, replicas=0).start()
    try:
        sync = redis.cluster.RedisCluster(host="127.0.0.1", port=nodes.ports[0])
        sync.set("{acct}:a", 10)
        keys = {"src": "{acct}:a", "dst": "{acct}:b"}

        async def body(a: acluster.RedisCluster) -> list[Any]:
            out = [await transfer.run(a, "script", keys=keys, args={"amount": 4})]
            for form in ("naive", "pipelined", "transaction", "function"):
                out.append(await transfer.run(a, form, keys=keys, args={"amount": 1}))
            for form in ("script", "transaction", "function"):
                with pytest.raises(CrossSlotError):
                    await transfer.run(a, form, keys={"src": "a", "dst": "b"}, args={"amount": 1})
            return out

        got = arun(lambda: acluster.RedisCluster(host="127.0.0.1", port=nodes.ports[0]), body)
        assert got == [[1, 6], [1, 5], [1, 4], [1, 3], [1, 2]]  # moved 4, then 1 per form
        assert (sync.get("{acct}:a"), sync.get("{acct}:b")) == (b"2", b"8")
        assert transfer.run(sync, "script", keys=keys, args={"amount": 2}) == [1, 0]  # same script
        sync.close()
    finally:
        nodes.stop()
