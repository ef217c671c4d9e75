"""What the runner times: a :class:`Workload` gives one callable per form.

The runner only needs this small interface, so hand-written workloads (PING, Redis in
Action's ``update_token``) and generated operations (see ``bench/opworkload.py``) look alike:

- ``reset(client)``: fresh state before each timed slice, by deleting the workload's own
  keys (all under ``luapipe:bench:``, see ``bench/benchkeys.py``; never FLUSHDB);
- ``prepare(client, form)``: load scripts/functions before the timed window;
- ``op_fn(client, form, worker, seed)``: a callable ``f(i) -> retries`` doing ``batch``
  logical operations, raising on an error (the runner counts it and carries on);
- ``check_invariant(client, ops_done)``: ``(ok, detail)`` on the keyspace after a slice.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from luapipe.bench.benchkeys import delete_matching, key, patterns
from luapipe.operations.libraries import LibrarySnapshot, restore_library, snapshot_named

__all__ = [
    "ATOMIC_FORMS",
    "FORM_LABELS",
    "Counted",
    "KeyChooser",
    "OpFn",
    "PingWorkload",
    "UpdateTokenWorkload",
    "Workload",
    "zipf_exponent",
]

OpFn = Callable[[int], int]

#: forms whose effect other clients never see half-done (auto-pipelined ones too)
ATOMIC_FORMS = frozenset({"transaction", "script", "function", "auto script", "auto function"})
FORM_LABELS = {
    "naive": "naive (one call at a time)",
    "pipelined": "pipelined (one round trip, not atomic)",
    "transaction": "transaction (WATCH/MULTI/EXEC)",
    "script": "Lua script (EVALSHA)",
    "function": "Redis Function (FCALL)",
    "auto naive": "auto-pipelined commands, one at a time (shared writes)",
    "auto pipelined": "auto-pipelined commands, all at once (shared writes, not atomic)",
    "auto script": "auto-pipelined Lua script (EVAL through the registry)",
    "auto function": "auto-pipelined Redis Function (FCALL)",
}


class AsyncCounted:
    """The asyncio twin of :class:`Counted`: an awaitable call that counts its writes."""

    def __init__(self, fn: Callable[[int], Any], writes: int) -> None:
        self.fn, self.writes, self.wrote = fn, writes, 0

    async def __call__(self, i: int) -> int:
        retries = int(await self.fn(i))
        self.wrote += self.writes
        return retries


class Counted:
    """A workload's callable whose every call writes ``writes`` operations (0: read-only):
    the measured write share of a built-in workload."""

    def __init__(self, fn: OpFn, writes: int) -> None:
        self.fn, self.writes, self.wrote = fn, writes, 0

    def __call__(self, i: int) -> int:
        retries = self.fn(i)
        self.wrote += self.writes
        return retries


class Workload(Protocol):
    """What ``run_bench`` times: one operation in several forms. Implement it to bench any
    code of your own (``run_bench(url, [MyWorkload()], BenchConfig(...))``); the scripts,
    their Function twins and Python forms of ``luapipe bench x.lua`` are one
    (:class:`~luapipe.bench.scriptworkload.ScriptWorkload`).

    The runner calls, for each (RTT, clients) point: :meth:`reset` before every timed slice
    (and before the warm-up), :meth:`prepare` once per form, then in each worker (a forked
    process per client, or this thread for one) :meth:`op_fn` and the callable it returns,
    over and over for the slice's duration, and :meth:`check_invariant` after the slice.
    Round trips and commands are counted on the client the runner passes (a counting
    client: use it, not one of your own), server time from ``INFO commandstats``.

    Optional, read with ``getattr``:

    - ``atomic_forms``: the forms no other client ever sees half done (default:
      transaction, script, function); the verdict keeps a read-compute-write operation to
      these;
    - ``write_share_declared``: the share of calls meant to take the write path (0 to 1);
    - ``cleanup(client)``: after the run (put back what :meth:`prepare` loaded); the runner
      deletes every ``luapipe:bench:`` key itself;
    - ``cluster_skips(client) -> {form: reason}``: forms that cannot run on that cluster;
    - ``not_timed``: ``{form: reason}`` of forms it leaves out here (not in ``forms``); the
      results list them as skipped, with the reason, as they list ``cluster_skips``;
    - on the callable :meth:`op_fn` returns: ``wrote`` (calls whose reply said they wrote,
      or None), ``counts()`` (a :class:`~luapipe.bench.counting.Counts` of a client of its
      own, e.g. an asyncio one) and ``close()`` (called when the slice ends);
    - ``op_fn_async(client, form, worker, seed)``: the asyncio twin of :meth:`op_fn`, for
      ``--tasks N`` (``BenchConfig(tasks=N)``): an async callable, ``await f(i) ->
      retries``; ``client`` is a ``redis.asyncio`` client (an auto-pipeline over one for
      the ``auto`` forms). Without it, ``tasks`` above 1 is refused ("has no asyncio calls");
    - ``state``: a dict in which :meth:`check_invariant` puts ``"checked": (broken,
      checked)``, the cases it found broken out of those it checked (the results' ``FAIL
      n/m`` and lost updates); without it a failed check counts as 1 broken of 1;
    - ``contention``: how its keys are drawn, as the results name it (default "spread").
    """

    @property
    def name(self) -> str:
        """The operation's name in the results (one record per form and point)."""
        ...

    @property
    def forms(self) -> tuple[str, ...]:
        """The forms to time, in order (a round starts one form later each time)."""
        ...

    @property
    def batch(self) -> int:
        """Logical operations per call of the :meth:`op_fn` callable (usually 1)."""
        ...

    def describe(self) -> dict[str, Any]:
        """What the results' manifest says of it (JSON-able); ``read_compute_write`` (bool)
        tells the verdict whether its writes depend on its reads."""
        ...

    def reset(self, client: redis.Redis) -> None:
        """A fresh state before a slice: delete your own keys (all under
        ``luapipe:bench:``; never FLUSHDB: ``--url`` may name a server with data) and write
        the initial state."""
        ...

    def prepare(self, client: redis.Redis, form: str) -> None:
        """Before a form's first slice: load what it needs (a script, a library)."""
        ...

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        """The callable a worker times: ``f(i) -> WATCH retries`` does ``batch`` logical
        operations with ``client`` and raises on an error (counted, the loop goes on).
        ``worker`` and ``seed`` seed its random draws."""
        ...

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        """``(ok, detail)`` on the keyspace after a slice of ``ops_done`` operations: a form
        that broke it lost updates (set ``state["checked"] = (broken, checked)`` on the
        workload to report how many of your cases broke)."""
        ...


def _auto(client: Any) -> bool:
    return bool(getattr(type(client), "luapipe_autopipeline", False))


_REGISTRY: list[Any] = []


def _update_token_registry() -> Any:
    """update_token as a registry script (what ``auto script`` calls through ``reg.call``)."""
    if not _REGISTRY:
        from luapipe.scripts.registry import ScriptRegistry
        from luapipe.scripts.script import LuaScript

        header = "".join(f"-- @key {k}\n" for k in ("login", "recent", "viewed", "views"))
        header += "".join(f"-- @arg {a}\n" for a in ("token", "user", "ts", "item"))
        _REGISTRY.append(
            ScriptRegistry([LuaScript.from_source("update_token", header + UPDATE_TOKEN_LUA)])
        )
    return _REGISTRY[0]


def zipf_exponent(contention: str) -> float | None:
    """The exponent S of ``zipf:S`` (None for ``hot`` and ``spread``); raises ValueError
    with a one-line message for anything else, S not a finite number > 0 included."""
    if contention in ("hot", "spread"):
        return None
    if contention.startswith("zipf:"):
        text = contention.split(":", 1)[1]
        try:
            s = float(text)
        except ValueError:
            s = math.nan
        if math.isfinite(s) and s > 0:
            return s
        raise ValueError(f"zipf:S needs a number S > 0, not {text!r} (e.g. zipf:1.1)")
    raise ValueError(f"contention must be hot, spread or zipf:S, not {contention!r}")


@dataclass(frozen=True)
class KeyChooser:
    """Which key an operation touches: ``hot`` (one), ``spread`` (uniform), ``zipf:S``."""

    contention: str = "spread"
    keys: int = 10_000
    _cdf: tuple[float, ...] = field(default=(), compare=False, repr=False)

    def __post_init__(self) -> None:
        s = zipf_exponent(self.contention)
        if s is not None:
            weights = [1.0 / (k**s) for k in range(1, self.keys + 1)]
            total, acc, cdf = sum(weights), 0.0, []
            for w in weights:
                acc += w / total
                cdf.append(acc)
            object.__setattr__(self, "_cdf", tuple(cdf))

    def pick(self, rng: random.Random) -> int:
        if self.contention == "hot":
            return 0
        if self._cdf:
            return min(bisect.bisect_left(self._cdf, rng.random()), self.keys - 1)
        return rng.randrange(self.keys)


@dataclass(frozen=True)
class PingWorkload:
    """``batch`` PINGs per call: one by one (naive) or in one pipeline (pipelined)."""

    batch: int = 1
    name: str = "ping"
    forms: tuple[str, ...] = ("naive", "pipelined")

    write_share_declared: float = 0.0

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "builtin",
            "commands": ["PING"],
            "batch": self.batch,
            "bench_profile": {"source": "builtin", "write_share": 0.0, "wrote": "never"},
        }

    def reset(self, client: redis.Redis) -> None:
        return None

    def prepare(self, client: redis.Redis, form: str) -> None:
        return None

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        n = self.batch
        if form == "naive":

            def naive(i: int) -> int:
                for _ in range(n):
                    client.ping()
                return 0

            return Counted(naive, 0)

        def pipelined(i: int) -> int:
            pipe = client.pipeline(transaction=False)
            for _ in range(n):
                pipe.ping()
            pipe.execute()
            return 0

        return Counted(pipelined, 0)

    def op_fn_async(self, client: Any, form: str, worker: int, seed: int) -> AsyncCounted:
        """The asyncio calls (``--tasks``): ``client`` is a ``redis.asyncio`` client or an
        auto-pipeline over one (whose ``pipelined`` issues the PINGs at once)."""
        n = self.batch

        async def naive(i: int) -> int:
            for _ in range(n):
                await client.ping()
            return 0

        async def pipelined(i: int) -> int:
            if _auto(client):
                await asyncio.gather(*(client.ping() for _ in range(n)))
                return 0
            pipe = client.pipeline(transaction=False)
            for _ in range(n):
                pipe.ping()
            await pipe.execute()
            return 0

        return AsyncCounted(naive if form == "naive" else pipelined, 0)

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        return True, "no state"


UPDATE_TOKEN_LUA = """
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[3], ARGV[4])
redis.call('ZREMRANGEBYRANK', KEYS[3], 0, -26)
redis.call('ZINCRBY', KEYS[4], -1, ARGV[4])
return 1
"""
BENCH_LIBRARY = "luapipe_bench"
#: a function name of our own: a user's library may well have an ``update_token``
BENCH_FUNCTION = "luapipe_bench_update_token"
UPDATE_TOKEN_LIBRARY = (
    f"#!lua name={BENCH_LIBRARY}\n"
    f"redis.register_function('{BENCH_FUNCTION}', function(KEYS, ARGV)\n"
    + UPDATE_TOKEN_LUA
    + "end)\n"
)


@dataclass(frozen=True)
class UpdateTokenWorkload:
    """Redis in Action 4.5 ``update_token``: HSET, ZADD, ZADD, ZREMRANGEBYRANK, ZINCRBY.

    Invariant: every call adds -1 to one item of ``viewed:``, so the scores of ``viewed:``
    sum to minus the number of calls; each ``viewed:<token>`` keeps at most 25 items. The
    keys live under the benchmark's prefix (``luapipe:bench:update_token:login:``...).
    """

    contention: str = "spread"
    tokens: int = 10_000
    items: int = 100
    name: str = "update_token"
    forms: tuple[str, ...] = ("naive", "pipelined", "transaction", "script", "function")
    batch: int = 1
    sha: str = field(default="", compare=False)
    #: the library as found before the function form first loaded it; put back by cleanup
    libraries: list[LibrarySnapshot | None] = field(default_factory=list, compare=False)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "builtin",
            "source": "Redis in Action 4.5",
            "commands": ["HSET", "ZADD", "ZADD", "ZREMRANGEBYRANK", "ZINCRBY"],
            "contention": self.contention,
            "tokens": self.tokens,
            "batch": self.batch,
            "lua": UPDATE_TOKEN_LUA.strip(),
            "read_compute_write": False,
            "bench_profile": {
                "source": "builtin",
                "description": "every call records a token and an item viewed (five writes)",
                "write_share": 1.0,
                "wrote": "always",
            },
        }

    @property
    def write_share_declared(self) -> float:
        return 1.0

    @property
    def key_names(self) -> tuple[str, str, str, str]:
        """``login:``, ``recent:``, ``viewed:`` and the prefix of ``viewed:<token>``, each
        under the benchmark's key prefix."""
        return (
            key(self.name, "login:"),
            key(self.name, "recent:"),
            key(self.name, "viewed:"),
            key(self.name, "viewed:tok"),
        )

    def reset(self, client: redis.Redis) -> None:
        """Delete this workload's keys (never anything else: no FLUSHDB)."""
        delete_matching(client, patterns(self.name))

    def prepare(self, client: redis.Redis, form: str) -> None:
        if form == "script":
            object.__setattr__(self, "sha", str(client.script_load(UPDATE_TOKEN_LUA)))
        elif form == "function":
            if not self.libraries:  # as found, before the first load
                self.libraries.append(snapshot_named(BENCH_LIBRARY, client))
            client.function_load(UPDATE_TOKEN_LIBRARY, replace=True)

    def cleanup(self, client: redis.Redis) -> None:
        """After the run: the function library as it was found (the runner deletes the
        keys)."""
        for snapshot in self.libraries:
            restore_library(snapshot)

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        """One call = ``batch`` update_tokens: one by one (naive), in one pipeline or MULTI
        (pipelined, transaction), or ``batch`` script/function calls in one pipeline."""
        rng = random.Random(seed * 1000 + worker)
        chooser = KeyChooser(self.contention, self.tokens)
        items, sha, n = self.items, self.sha, max(1, self.batch)
        login, recent, views, per_token = self.key_names

        def params(i: int) -> tuple[str, str, str, float, str]:
            k = chooser.pick(rng)
            return f"tok{k}", f"user{k}", f"item{i % items}", time.time(), f"{per_token}{k}"

        def five(target: Any, i: int) -> None:
            token, user, item, ts, viewed = params(i)
            target.hset(login, token, user)
            target.zadd(recent, {token: ts})
            target.zadd(viewed, {item: ts})
            target.zremrangebyrank(viewed, 0, -26)
            target.zincrby(views, -1, item)

        def scripted(target: Any, i: int) -> None:
            token, user, item, ts, viewed = params(i)
            keys = (login, recent, viewed, views)
            if form == "script":
                target.evalsha(sha, 4, *keys, token, user, ts, item)
            else:
                target.fcall(BENCH_FUNCTION, 4, *keys, token, user, ts, item)

        def call(i: int) -> int:
            if form == "naive":
                for j in range(n):
                    five(client, i * n + j)
            elif form in ("pipelined", "transaction"):
                pipe = client.pipeline(transaction=form == "transaction")
                for j in range(n):
                    five(pipe, i * n + j)
                pipe.execute()
            elif n == 1:
                scripted(client, i)
            else:
                pipe = client.pipeline(transaction=False)
                for j in range(n):
                    scripted(pipe, i * n + j)
                pipe.execute()
            return 0

        return Counted(call, n)

    def op_fn_async(self, client: Any, form: str, worker: int, seed: int) -> AsyncCounted:
        """The asyncio calls (``--tasks``), one update_token each; ``client`` is a
        ``redis.asyncio`` client or an auto-pipeline over one. Through an auto-pipeline,
        ``pipelined`` issues the five commands at once (one write, not atomic) and
        ``script`` is the registry's call (EVAL)."""
        rng = random.Random(seed * 1000 + worker)
        chooser = KeyChooser(self.contention, self.tokens)
        items, sha = self.items, self.sha
        login, recent, views, per_token = self.key_names
        auto = _auto(client)
        reg = _update_token_registry()

        def five(k: int, i: int) -> list[Callable[[], Any]]:
            ts, item = time.time(), f"item{i % items}"
            viewed = f"{per_token}{k}"
            return [
                lambda: client.hset(login, f"tok{k}", f"user{k}"),
                lambda: client.zadd(recent, {f"tok{k}": ts}),
                lambda: client.zadd(viewed, {item: ts}),
                lambda: client.zremrangebyrank(viewed, 0, -26),
                lambda: client.zincrby(views, -1, item),
            ]

        async def call(i: int) -> int:
            k = chooser.pick(rng)
            if form == "naive":
                for command in five(k, i):  # one by one: each awaited before the next
                    await command()
            elif form == "pipelined" and auto:
                await asyncio.gather(*(command() for command in five(k, i)))
            elif form in ("pipelined", "transaction"):
                pipe = client.pipeline(transaction=form == "transaction")
                ts, item = time.time(), f"item{i % items}"
                viewed = f"{per_token}{k}"
                pipe.hset(login, f"tok{k}", f"user{k}")
                pipe.zadd(recent, {f"tok{k}": ts})
                pipe.zadd(viewed, {item: ts})
                pipe.zremrangebyrank(viewed, 0, -26)
                pipe.zincrby(views, -1, item)
                await pipe.execute()
            else:
                keys = (login, recent, f"{per_token}{k}", views)
                args = (f"tok{k}", f"user{k}", time.time(), f"item{i % items}")
                if form == "function":
                    await client.fcall(BENCH_FUNCTION, 4, *keys, *args)
                elif auto:
                    await reg.call(client, "update_token", keys=keys, args=args)
                else:
                    await client.evalsha(sha, 4, *keys, *args)
            return 0

        return AsyncCounted(call, 1)

    def cluster_skips(self, client: Any) -> dict[str, str]:
        """Its keys are fixed names (Redis in Action): on a cluster they are in several slots,
        so the atomic forms cannot run."""
        from luapipe.operations.clustersafety import slot

        login, recent, views, per_token = self.key_names
        keys = (login, recent, f"{per_token}0", views)
        shown = "; ".join(f"{k} in slot {slot(k)}" for k in keys)
        why = f"CROSSSLOT: its keys are in {len({slot(k) for k in keys})} slots ({shown})"
        return {f: why for f in ("transaction", "script", "function") if f in self.forms}

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        login, recent, views, _ = self.key_names
        pairs: list[tuple[Any, Any]] = client.zrange(views, 0, -1, withscores=True)  # type: ignore[assignment]
        total = sum(float(score) for _, score in pairs)
        logins, seen = int(client.hlen(login)), int(client.zcard(recent))
        if round(total) != -ops_done:
            return False, f"viewed: scores sum to {total:g}, expected {-ops_done} (lost updates)"
        if logins != seen:
            return False, f"login: has {logins} tokens but recent: has {seen}"
        return True, f"{ops_done} calls all counted"
