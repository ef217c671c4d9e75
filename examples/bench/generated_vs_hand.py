"""Server time per call of each catalogue operation's generated Lua against a hand-written
reference of the same behaviour (examples/bench/reference_lua/<op>.lua), script and function.

    .venv/bin/python examples/bench/generated_vs_hand.py [--url redis://...] [--calls 3000]
        [--block 50] [--seed 1] [OP...]

Without --url it starts a private redis-server. Server time is read from ``INFO
commandstats`` (the ``usec`` of EVALSHA, or of FCALL for the function form) before and after
each block of calls, so the client's own time does not count. The generated script and its
reference run in alternating blocks (ABAB) on the same server, from the same state (each in
its own keys) with the same arguments, drawn from the spec's ``[bench]`` table; every block's
replies must be equal, or the run stops (the test tests/operations/test_reference_lua.py
checks the same on verify's random cases). The figure per side is the median over blocks of
server microseconds per call; the ratio (target: at most 1.1) is the median, over pairs of
adjacent blocks, of generated over hand-written: a block slowed by another process on a busy
machine moves one pair, not the figure. Exit status 1 when a ratio is above the target.

The function form is timed the same way: the generated Redis Function library against the
reference wrapped as a function (its text as the callback's body).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from luapipe.bench.profile import CallArgs, profile_case
from luapipe.bench.server import EmbeddedRedis
from luapipe.operations.casegen import Case
from luapipe.operations.keyspace import delete_namespace, setup
from luapipe.operations.libraries import restore_library, snapshot_named
from luapipe.operations.operation import Operation
from luapipe.operations.plan import bind, plan_of, wire
from luapipe.operations.spec import load_operation
from luapipe.operations.steps import split
from luapipe.operations.verify import error_code

ROOT = Path(__file__).resolve().parents[2]
SPECS = ROOT / "examples" / "operations"
REFERENCES = Path(__file__).resolve().parent / "reference_lua"
TARGET = 1.1


@dataclass(frozen=True)
class Side:
    """One implementation: how to call it with KEYS and ARGV, and its commandstats entry."""

    label: str
    call: Callable[[Sequence[Any], Sequence[Any]], Any]
    stat: str
    namespace: str


def _server_usec(client: redis.Redis, stat: str) -> tuple[int, int]:
    entry = client.info("commandstats").get(f"cmdstat_{stat}", {})
    return int(entry.get("usec", 0)), int(entry.get("calls", 0))


def _as_function(name: str, script: str, read_only: bool) -> str:
    """The reference script as a Function library: its body becomes the callback."""
    body = "\n".join(line for line in script.splitlines() if not line.startswith("#!"))
    flags = "\n  flags = {'no-writes'}," if read_only else ""
    return (
        f"#!lua name=luapipe_ref_{name}\n"
        f"redis.register_function{{\n  function_name = 'luapipe_ref_{name}',\n"
        f"  callback = function(KEYS, ARGV)\n{body}\n  end,{flags}\n}}\n"
    )


def _sides(client: redis.Redis, op: Operation, form: str) -> tuple[Side, Side]:
    reference = (REFERENCES / f"{op.name}.lua").read_text(encoding="utf-8")
    if form == "script":
        gen_sha = client.script_load(op.lua_source)
        ref_sha = client.script_load(reference)
        cmd = "EVALSHA_RO" if op.read_only else "EVALSHA"

        def evalsha(sha: str) -> Callable[[Sequence[Any], Sequence[Any]], Any]:
            return lambda keys, args: client.execute_command(cmd, sha, len(keys), *keys, *args)

        stat = cmd.lower()
        return (
            Side("generated", evalsha(gen_sha), stat, "g:"),
            Side("reference", evalsha(ref_sha), stat, "h:"),
        )
    client.function_load(op.function_source, replace=True)
    client.function_load(_as_function(op.name, reference, op.read_only), replace=True)
    gen_fn = op.function_source.split("function_name = '", 1)[1].split("'", 1)[0]
    cmd = "FCALL_RO" if op.read_only else "FCALL"

    def fcall(fn: str) -> Callable[[Sequence[Any], Sequence[Any]], Any]:
        return lambda keys, args: client.execute_command(cmd, fn, len(keys), *keys, *args)

    stat = cmd.lower()
    return (
        Side("generated", fcall(gen_fn), stat, "g:"),
        Side("reference", fcall(f"luapipe_ref_{op.name}"), stat, "h:"),
    )


def _renew_every(op: Operation) -> int | None:
    draw = op.bench.spread if op.bench is not None else None
    return draw.renew if draw is not None and isinstance(draw.renew, int) else None


def _block(
    client: redis.Redis, op: Operation, side: Side, calls: int, seed: int
) -> tuple[float, list[Any]]:
    """Server microseconds per call of one block, and its replies (errors as text)."""
    draw = op.bench.spread if op.bench is not None else None
    rng = random.Random(seed)
    case: Case = profile_case(op, draw, f"luapipe:bench:{side.namespace}", rng)
    draws = CallArgs.of(op, draw)
    plan = plan_of(op)
    every = _renew_every(op)
    setup(client, case)
    replies: list[Any] = []
    usec0, calls0 = _server_usec(client, side.stat)
    for i in range(calls):
        if every and i and i % every == 0:
            setup(client, case)  # not timed: commandstats counts it under its own commands
        args = draws.apply(case.args_dict, case.namespace, rng)
        keys, argv = split(plan, bind(plan, case.keys_dict, args))
        try:
            replies.append(wire(side.call(keys, argv)))
        except redis.ResponseError as exc:
            replies.append(("error", error_code(exc)))
    usec1, calls1 = _server_usec(client, side.stat)
    delete_namespace(client, case.namespace)
    done = calls1 - calls0
    if done != calls:
        raise SystemExit(f"{op.name}: {side.label}: {done} {side.stat} counted, {calls} sent")
    return (usec1 - usec0) / done, replies


def measure(
    client: redis.Redis, op: Operation, form: str, calls: int, block: int, seed: int
) -> tuple[float, float, float]:
    """Median server µs per call of the generated and the reference implementation; the
    function libraries are left as they were found."""
    if form == "function":
        libraries = [op.function_source.split("\n", 1)[0].split("name=", 1)[1]]
        libraries.append(f"luapipe_ref_{op.name}")
        snapshots = [snapshot_named(name, client) for name in libraries]
        try:
            return _measure(client, op, form, calls, block, seed)
        finally:
            for snapshot in snapshots:
                restore_library(snapshot)
    return _measure(client, op, form, calls, block, seed)


def _measure(
    client: redis.Redis, op: Operation, form: str, calls: int, block: int, seed: int
) -> tuple[float, float, float]:
    gen, ref = _sides(client, op, form)
    for side in (gen, ref):  # warm-up: the script cache, the allocator, the keys' encodings
        _block(client, op, side, min(block, 200), seed)
    per: dict[str, list[float]] = {"generated": [], "reference": []}
    for n in range(max(1, calls // block)):
        order = (gen, ref) if n % 2 == 0 else (ref, gen)
        seen = []
        for side in order:
            usec, replies = _block(client, op, side, block, seed + n)
            per[side.label].append(usec)
            seen.append(replies)
        if seen[0] != seen[1]:
            at = next(i for i, (a, b) in enumerate(zip(*seen, strict=True)) if a != b)
            raise SystemExit(
                f"{op.name} ({form}): the generated and the reference replies differ at call "
                f"{at} of block {n}: {seen[0][at]!r} != {seen[1][at]!r}"
            )
    pairs = zip(per["generated"], per["reference"], strict=True)
    ratio = statistics.median(g / h for g, h in pairs)
    return statistics.median(per["generated"]), statistics.median(per["reference"]), ratio


def run(client: redis.Redis, names: Sequence[str], calls: int, block: int, seed: int) -> bool:
    specs = sorted(SPECS.glob("*.toml"))
    ops = [load_operation(p) for p in specs]
    ops = [op for op in ops if not names or op.name in names]
    missing = [op.name for op in ops if not (REFERENCES / f"{op.name}.lua").exists()]
    if missing:
        raise SystemExit(f"no hand-written reference for: {', '.join(missing)}")
    print(
        f"server µs per call (median of {max(1, calls // block)} blocks of {block} calls "
        "each, interleaved); ratio: the median of generated / hand-written over adjacent blocks"
    )
    head = f"{'operation':<26} {'script':>7} {'hand':>7} {'ratio':>6}   "
    print(head + f"{'function':>8} {'hand':>7} {'ratio':>6}")
    worst = 0.0
    for op in ops:
        cells = []
        for form in ("script", "function"):
            gen, ref, ratio = measure(client, op, form, calls, block, seed)
            worst = max(worst, ratio)
            cells.append(f"{gen:7.2f} {ref:7.2f} {ratio:6.2f}")
        print(f"{op.name:<26} {cells[0]}   {cells[1].rjust(23)}")
    verdict = "within" if worst <= TARGET else "ABOVE"
    print(f"worst ratio {worst:.2f}: {verdict} the {TARGET}x target")
    return worst <= TARGET


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("ops", nargs="*", help="catalogue operations (default: all)")
    parser.add_argument("--url")
    parser.add_argument("--calls", type=int, default=3000, help="calls per side and form")
    parser.add_argument("--block", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1)
    opts = parser.parse_args()
    if opts.url:
        client = redis.Redis.from_url(opts.url)
        ok = run(client, opts.ops, opts.calls, opts.block, opts.seed)
    else:
        with EmbeddedRedis() as server:
            client = redis.Redis(host=server.host, port=server.port)
            print(f"redis-server {client.info('server')['redis_version']} on {server.address}")
            ok = run(client, opts.ops, opts.calls, opts.block, opts.seed)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
