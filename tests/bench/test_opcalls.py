"""One worker's calls of a generated operation, without a server: which case and copy each
call touches, the arguments drawn for it, and the writes counted from its reply."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from luapipe.bench.benchkeys import tagged
from luapipe.bench.opcalls import OpCalls
from luapipe.bench.profile import CallArgs, profile_case
from luapipe.bench.workloads import KeyChooser
from luapipe.operations.spec import load_operation

from ..conftest import EXAMPLES_DIR


@dataclass
class Reply:
    value: Any
    retries: int = 0


class Server:
    """Stands in for the operation: records each call, replies as told."""

    def __init__(self, wrote: bool = True) -> None:
        self.calls: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.wrote = wrote

    def __call__(self, client: Any, form: str, *, keys: Any, args: Any) -> Reply:
        self.calls.append((dict(keys), dict(args)))
        return Reply([1 if self.wrote else 0, 7])


def calls_of(name: str, *, contention: str = "spread", pool: int = 4, **kw: Any) -> OpCalls:
    op = load_operation(EXAMPLES_DIR / "operations" / f"{name}.toml")
    assert op.bench is not None
    draw = op.bench.for_contention(contention)
    rng = random.Random(1)
    cases = [profile_case(op, draw, tagged(name, i), rng) for i in range(pool)]
    defaults: dict[str, Any] = {
        "draws": CallArgs.of(op, draw),
        "renew": draw.renew,
        "frontier": [0] * pool,
        "copies": 1000,
        "worker": 3,
    }
    return OpCalls(op, None, "script", cases, KeyChooser(contention, pool), rng, **(defaults | kw))


def test_each_call_draws_its_arguments_from_the_profile() -> None:
    server = Server()
    calls = calls_of("reserve_stock", run=server)
    for i in range(300):
        calls(i)
    assert {a["qty"] for _, a in server.calls} == {1, 2, 3, 4, 5}  # qty = { min 1, max 5 }
    assert calls.wrote == 300


def test_replies_that_say_nothing_was_written_are_not_counted() -> None:
    calls = calls_of("reserve_stock", run=Server(wrote=False))
    for i in range(10):
        calls(i)
    assert calls.wrote == 0


def test_a_refused_call_moves_every_client_to_the_next_copy() -> None:
    """renew = "refused" (reserve_stock under hot contention): the frontier is shared."""
    server = Server(wrote=False)
    frontier = [0]
    calls = calls_of("reserve_stock", contention="hot", pool=1, run=server, frontier=frontier)
    calls(0)
    calls(1)
    assert frontier == [2]
    keys = [k["stock"] for k, _ in server.calls]
    base = "{luapipe:bench:reserve_stock:0"
    assert keys == [base + "}:stock", base + ".1}:stock"]
    other = calls_of("reserve_stock", contention="hot", pool=1, run=server, frontier=frontier)
    other(0)  # another client starts where the first one left off
    assert server.calls[-1][0]["stock"] == base + ".2}:stock"


def test_the_last_copy_is_kept_when_the_copies_run_out() -> None:
    frontier = [0]
    calls = calls_of("reserve_stock", contention="hot", pool=1, frontier=frontier, copies=3,
                     run=Server(wrote=False))  # fmt: skip
    for i in range(10):
        calls(i)
    assert frontier == [2]


def test_renew_every_call_gives_each_call_a_fresh_window() -> None:
    """rate_limit: renew = 1, each client its own copies (the first hit of a window)."""
    server = Server()
    calls = calls_of("rate_limit", pool=1, run=server)
    for i in range(3):
        calls(i)
    keys = [k["counter"] for k, _ in server.calls]
    assert keys == [f"{{luapipe:bench:rate_limit:0.w3.{j}}}:counter" for j in range(3)]
    assert {a["limit"] for _, a in server.calls} == {100}
