"""Running the forms: every protocol/parser, measured round trips, WATCH retries, FCALL_RO,
and concurrency (atomic forms keep invariants, naive and pipelined forms lose updates)."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from luapipe.bench.counting import counters, counting_client
from luapipe.bench.server import ServerProcess
from luapipe.errors import CallArgumentError, LuapipeError, TransactionAborted
from luapipe.operations import steps
from luapipe.operations.operation import Operation
from luapipe.operations.plan import bind, plan_of
from luapipe.operations.spec import load_operation
from luapipe.operations.verify import verify

from ..conftest import EXAMPLES_DIR
from ..helpers import interleaved

OPS = {p.stem: load_operation(p) for p in sorted((EXAMPLES_DIR / "operations").glob("*.toml"))}


def test_same_replies_through_every_protocol_and_parser(real_variant: redis.Redis) -> None:
    for op in OPS.values():
        report = verify(op, real_variant, cases=25, seed=7)
        assert report.ok, report.mismatch.describe() if report.mismatch else ""


@pytest.mark.parametrize("protocol", [2, 3])
def test_same_replies_with_decoded_responses(protocol: int, redis_server: ServerProcess) -> None:
    client = redis.Redis.from_url(redis_server.url, protocol=protocol, decode_responses=True)
    try:
        for op in OPS.values():
            report = verify(op, client, cases=25, seed=8)
            assert report.ok, report.mismatch.describe() if report.mismatch else ""
    finally:
        client.close()


def _clean_case(op: Operation, client: redis.Redis, seed: int) -> Any:
    """A case every form runs without an error (for timing-like measurements)."""
    rng = random.Random(seed)
    for i in range(200):
        case = op.sample_case(rng, f"rt{i}:")
        op.setup(client, case)
        try:
            op.run(client, "naive", keys=case.keys_dict, args=case.args_dict)
        except LuapipeError:
            continue
        return case
    raise AssertionError(f"no clean case for {op.name}")


def measure_round_trips(op: Operation, url: str, seed: int = 3) -> dict[str, int]:
    client = counting_client(url)
    try:
        case = _clean_case(op, client, seed)
        out = {}
        for form in op.forms:
            op.setup(client, case)
            op.run(client, form, keys=case.keys_dict, args=case.args_dict)  # loads script/fn
            op.setup(client, case)
            before = counters(client)
            op.run(client, form, keys=case.keys_dict, args=case.args_dict)
            out[form] = counters(client).minus(before).round_trips
        return out
    finally:
        client.close()


@pytest.mark.parametrize("name", sorted(OPS))
def test_round_trips_are_measured_as_documented(name: str, redis_server: ServerProcess) -> None:
    op = OPS[name]
    measured = measure_round_trips(op, redis_server.url)
    for form, trips in measured.items():
        expected = op.round_trips(form)
        if expected is not None:
            skipped_writes = form == "pipelined" and all(w.when for w in op.writes)
            assert trips == expected or (skipped_writes and trips == expected - 1), (form, measured)
    commands = len(op.reads) + len(op.writes)
    assert measured["naive"] >= min(commands, 1)
    if commands > 1 and not any(r.each for r in op.reads) and not any(w.each for w in op.writes):
        assert measured["naive"] >= measured["pipelined"]
    assert measured["script"] == measured["function"] == 1


def test_no_read_operation_is_one_round_trip_pipelined_and_in_a_transaction(
    redis_server: ServerProcess,
) -> None:
    measured = measure_round_trips(OPS["update_token"], redis_server.url)
    assert measured["pipelined"] == measured["transaction"] == 1
    assert measured["naive"] in (2, 5)  # one per command: HSET, ZADD (+3 with an item)


def test_read_only_operation_uses_fcall_ro_and_evalsha_ro(r: redis.Redis) -> None:
    op = OPS["fetch_feed"]
    r.config_resetstat()
    r.zadd("feed", {"a": 1, "b": 2})
    r.set("item:a", "A")
    for form in ("script", "function"):
        got = op.run(r, form, keys={"feed": "feed"}, args={"n": 5, "prefix": "item:"})
        assert got == [["b", "a"], ["", "A"]]
    stats = r.info("commandstats")
    assert stats["cmdstat_fcall_ro"]["calls"] >= 1 and stats["cmdstat_evalsha_ro"]["calls"] >= 1
    assert "cmdstat_fcall" not in stats and "cmdstat_evalsha" not in stats


def test_transaction_retries_when_a_watched_key_changes(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = OPS["reserve_stock"]
    r.set("stock", 5)
    real_compute = steps.compute
    other = redis.Redis(connection_pool=r.connection_pool)
    interfered = []

    def compute_with_a_concurrent_writer(plan: Any, env: Any) -> Any:
        if not interfered:  # another client changes the key between WATCH/GET and EXEC
            interfered.append(1)
            other.decrby("stock", 4)
        return real_compute(plan, env)

    monkeypatch.setattr(steps, "compute", compute_with_a_concurrent_writer)
    result = op.run_detailed(r, "transaction", keys={"stock": "stock"}, args={"qty": 2})
    assert result.retries == 1 and result.round_trips == 4
    assert result.value == [0, 1]  # the retry saw 1 left and refused: no oversell
    assert r.get("stock") == b"1"


def test_transaction_gives_up_after_bounded_retries(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    op = OPS["reserve_stock"]
    r.set("stock", 100)
    real_compute = steps.compute
    other = redis.Redis(connection_pool=r.connection_pool)

    def always_interfered(plan: Any, env: Any) -> Any:
        other.incr("stock")
        return real_compute(plan, env)

    monkeypatch.setattr(steps, "compute", always_interfered)
    with pytest.raises(TransactionAborted, match="WATCH failed 4 times"):
        op.run_detailed(r, "transaction", keys={"stock": "stock"}, args={"qty": 1}, max_retries=3)
    assert r.get("stock") == b"104"  # only the interfering increments landed


def test_bad_call_arguments_send_nothing(r: redis.Redis) -> None:
    op = OPS["reserve_stock"]
    r.config_resetstat()
    for keys, args in [
        ({"stock": "s"}, {"qty": "2"}),
        ({"stock": "s"}, {"qty": True}),
        ({"stok": "s"}, {"qty": 2}),
        ({"stock": "s"}, {"qty": 2**60}),
    ]:
        for form in op.forms:
            with pytest.raises(CallArgumentError):
                op.run(r, form, keys=keys, args=args)
    assert int(r.info("stats")["total_commands_processed"]) <= 2  # CONFIG RESETSTAT, INFO


# -- concurrency ------------------------------------------------------------------------


def _hammer(url: str, threads: int, work: Callable[[redis.Redis], None]) -> None:
    clients = [redis.Redis.from_url(url, protocol=2) for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def run(c: redis.Redis) -> None:
        barrier.wait()
        work(c)

    ts = [threading.Thread(target=run, args=(c,)) for c in clients]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for c in clients:
        c.close()


def _reserve_round(url: str, r: redis.Redis, form: str) -> tuple[int, int]:
    """Stock 20, 6 clients reserve 1 unit until refused: (units sold, stock left)."""
    op = OPS["reserve_stock"]
    r.set("stock", 20)
    sold = []

    def work(c: redis.Redis) -> None:
        while True:
            ok, _ = op.run(c, form, keys={"stock": "stock"}, args={"qty": 1})
            if not ok:
                return
            sold.append(1)

    _hammer(url, 6, work)
    return len(sold), int(r.get("stock") or 0)


@pytest.mark.parametrize("form", ["script", "function", "transaction"])
def test_atomic_forms_never_oversell(
    form: str, r: redis.Redis, redis_server: ServerProcess
) -> None:
    for _ in range(3):
        assert _reserve_round(redis_server.url, r, form) == (20, 0)


def _steps(op: Operation, form: str, keys: dict[str, Any], args: dict[str, Any]) -> Any:
    """The I/O-free steps of one call (the transaction form: one WATCH attempt)."""
    plan = plan_of(op)
    env = bind(plan, keys, args)
    if form == "transaction":
        return steps.transaction_steps(plan, env)
    return {"naive": steps.naive_steps, "pipelined": steps.pipelined_steps}[form](plan, env)


@pytest.mark.parametrize("form", ["naive", "pipelined"])
def test_non_atomic_forms_oversell(form: str, r: redis.Redis) -> None:
    """Two clients reserve the last unit, their round trips interleaved: both read 1 before
    either writes, so both sell it. The same interleaving every run, not a hope that threads
    meet."""
    r.set("stock", 1)
    calls = [_steps(OPS["reserve_stock"], form, {"stock": "stock"}, {"qty": 1}) for _ in "ab"]
    assert interleaved(r, calls) == [[1, 0], [1, 0]]  # both "reserved, 0 left"
    assert r.get("stock") == b"-1"  # two units sold out of one


def test_the_same_interleaving_aborts_the_second_transaction(r: redis.Redis) -> None:
    """WATCH turns the race above into a retry: the second EXEC is refused, nothing written
    (its retry would then see 0 left)."""
    r.set("stock", 1)
    keys, args = {"stock": "stock"}, {"qty": 1}
    calls = [_steps(OPS["reserve_stock"], "transaction", keys, args) for _ in "ab"]
    assert interleaved(r, calls) == [(True, [1, 0]), (False, None)]
    assert r.get("stock") == b"0"


def _transfer_round(url: str, r: redis.Redis, form: str, amount: int = 0) -> tuple[int, int]:
    """Balances 10 and 10; 6 clients move money both ways (amount 0: random 1..10)."""
    op = OPS["transfer"]
    r.mset({"acct:a": 10, "acct:b": 10})

    def work(c: redis.Redis) -> None:
        rng = random.Random(threading.get_ident())
        for _ in range(40):
            src, dst = ("acct:a", "acct:b") if rng.random() < 0.5 else ("acct:b", "acct:a")
            n = amount or rng.randint(1, 10)
            op.run(c, form, keys={"src": src, "dst": dst}, args={"amount": n})

    _hammer(url, 6, work)
    return int(r.get("acct:a") or 0), int(r.get("acct:b") or 0)


@pytest.mark.parametrize("form", ["script", "function", "transaction"])
def test_atomic_transfer_keeps_total_and_never_overdraws(
    form: str, r: redis.Redis, redis_server: ServerProcess
) -> None:
    a, b = _transfer_round(redis_server.url, r, form)
    assert a + b == 20 and a >= 0 and b >= 0
    assert (
        OPS["transfer"].check_invariant(
            r, keys={"src": "acct:a", "dst": "acct:b"}, args={"amount": 1}
        )
        == 20
    )


@pytest.mark.parametrize("form", ["naive", "pipelined"])
def test_non_atomic_transfers_overdraw(form: str, r: redis.Redis) -> None:
    """Two transfers of the whole balance, round trips interleaved: both see it covered."""
    r.mset({"acct:a": 10, "acct:b": 10})
    keys, args = {"src": "acct:a", "dst": "acct:b"}, {"amount": 10}
    calls = [_steps(OPS["transfer"], form, keys, args) for _ in "ab"]
    assert interleaved(r, calls) == [[1, 0], [1, 0]]
    a, b = int(r.get("acct:a") or 0), int(r.get("acct:b") or 0)
    assert (a, b) == (-10, 30)  # the total survives (increments), the "covered" check raced


def test_invariant_hook(r: redis.Redis) -> None:
    op = OPS["reserve_stock"]
    r.set("stock", -1)
    assert op.check_invariant(r, keys={"stock": "stock"}, args={"qty": 1}) is False
    assert Path(op.path).name == "reserve_stock.toml"


def forms_plan(op: Operation) -> Any:
    from luapipe.operations.plan import plan_of

    return plan_of(op)


def test_two_versions_of_a_function_run_side_by_side_and_survive_flushes(
    r: redis.Redis,
) -> None:
    """A changed spec is a new library and function (luapipe_<op>_<hash>): v1 and v2 both
    stay loaded, each runs its own code, neither replaces the other."""
    from luapipe.operations.spec import parse_operation

    text = (EXAMPLES_DIR / "operations" / "reserve_stock.toml").read_text()
    v1 = OPS["reserve_stock"]
    v2 = parse_operation(text.replace('ok = "available >= qty"', 'ok = "available > qty"'), "v2")
    keys = {"stock": "stock"}
    for _ in range(2):
        r.set("stock", 2)
        assert v1.run(r, "function", keys=keys, args={"qty": 2}) == [1, 0]
        r.set("stock", 2)
        assert v2.run(r, "function", keys=keys, args={"qty": 2}) == [0, 2]  # its own code
    libs = {lib[1].decode(): lib[5] for lib in r.function_list()}  # RESP2: flat lists
    names = {forms_plan(v).function_name for v in (v1, v2)}
    assert set(libs) == names and len(names) == 2
    assert {n: [f[1].decode() for f in fs] for n, fs in libs.items()} == {n: [n] for n in names}
    r.function_flush()
    r.script_flush()
    for form in ("function", "script"):
        r.set("stock", 5)
        assert v1.run(r, form, keys=keys, args={"qty": 2}) == [1, 3]  # reloaded, ran once
        assert r.get("stock") == b"3"


@pytest.mark.parametrize("form", OPS["transfer"].forms)
@pytest.mark.parametrize("balance", ["05", "-0", "007"])
def test_integers_are_read_as_redis_reads_them(r: redis.Redis, form: str, balance: str) -> None:
    """ "05" passed the integer check, then DECRBY refused it after INCRBY had run: half a
    transfer, even in the atomic forms. Refused up front now (NOTINT), nothing written."""
    r.mset({"src": balance, "dst": "0"})
    with pytest.raises(LuapipeError, match="NOTINT"):
        OPS["transfer"].run(r, form, keys={"src": "src", "dst": "dst"}, args={"amount": 1})
    assert r.mget("src", "dst") == [balance.encode(), b"0"]
