"""ScriptPipeline and AsyncScriptPipeline: script calls and any redis-py command, sent in
one round trip per node.

::

    with reg.pipeline(client) as pipe:          # transaction=False: not atomic
        pipe.call("rate_limit_fixed", keys=["rl:a"], args=[10, 60])
        pipe.incr("hits")                       # any redis-py command method
        results = pipe.execute()                # one list, in queue order

    async with reg.pipeline(aclient) as p:      # the same on a redis.asyncio client
        p.call("rate_limit_fixed", keys=["rl:a"], args=[10, 60])
        results = await p.execute()

Unlike redis-py's ``Pipeline`` with a ``Script`` it never sends ``SCRIPT EXISTS``: scripts
not yet known on the node are loaded inline, ahead of the batch, in the same write. If the
cache was flushed meanwhile, only the failed script calls are loaded and re-sent (so in a
non-transactional pipeline those calls run after the rest of the batch: the batch was
never atomic). With ``transaction=True`` the batch is wrapped in MULTI/EXEC and scripts go
as EVAL, so a flushed cache can never cause a partial commit; nothing is re-run after EXEC.

Both pipelines run the same steps (:func:`luapipe.scripts.calls.execute_steps`): on a
cluster, entries are grouped by the node owning their slot (one round trip per node in
steady state, concurrent under asyncio); entries answered with a redirect (they did not
run) are routed again after the slot map is re-read. Only the driver differs.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from types import TracebackType
from typing import Any, NoReturn, Protocol, Self

from redis.commands.core import AsyncCoreCommands, CoreCommands

from luapipe.errors import CallArgumentError
from luapipe.scripts.calls import execute_steps
from luapipe.scripts.fcall import FunctionCall
from luapipe.scripts.protocol import (
    Entry,
    KnownScripts,
    ScriptCall,
    exec_item,
    raise_first,
)
from luapipe.scripts.script import LuaScript, call_values, check_values
from luapipe.wire import drivers
from luapipe.wire.clients import is_cluster, require_async_client
from luapipe.wire.policy import RetryPolicy
from luapipe.wire.replies import Command, Value
from luapipe.wire.routing import Steps

__all__ = ["AsyncScriptPipeline", "EntryQueue", "ScriptPipeline", "ScriptSource"]


_CONTROL = frozenset({"MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH"})


def _refuse_control(name: str) -> NoReturn:
    """Transaction control inside a pipeline would shift every reply after it (a partial
    commit, then results put in the wrong places): refused when queued."""
    raise CallArgumentError(
        f"{name} cannot be queued in a luapipe pipeline (the pipeline sends its own "
        "MULTI/EXEC): use reg.pipeline(client, transaction=True) for an atomic batch, or an "
        "operation's transaction form for WATCH-based optimistic locking"
    )


class ScriptSource(Protocol):
    """What a pipeline needs of a registry: scripts by name, the known-scripts hint and
    the retry policy."""

    known: KnownScripts
    policy: RetryPolicy

    def __getitem__(self, name: str) -> LuaScript: ...

    def function_call(
        self, name: str, keys: Sequence[Value], args: Sequence[Value]
    ) -> FunctionCall | None: ...


class EntryQueue:
    """The queueing half of the sync and async pipelines: script calls are checked as they
    are queued (before anything is sent); every redis-py command method lands in
    :meth:`execute_command` and is queued with its parse options."""

    def __init__(self, registry: ScriptSource, client: Any, *, transaction: bool) -> None:
        self.registry = registry
        self.client = client
        self.transaction = transaction
        self._entries: list[Entry] = []
        self._event_dispatcher: Any = None  # required by redis-py's command protocol; unused
        #: round trips and NOSCRIPT re-sends of the last execute (summed over cluster nodes)
        self.last_round_trips = 0
        self.last_reloads = 0

    def call(self, name: str, keys: Any = (), args: Any = ()) -> Self:
        """Queue a script or function call; counts are checked now, before anything is
        sent."""
        keys_t: tuple[Value, ...] = tuple(call_values(name, "keys", keys))
        args_t: tuple[Value, ...] = tuple(call_values(name, "args", args))
        fcall = self.registry.function_call(name, keys_t, args_t)
        if fcall is not None:
            self._entries.append(fcall)
            return self
        script = self.registry[name]
        script.check_call(keys_t, args_t)
        self._entries.append(ScriptCall(script, keys_t, args_t))
        return self

    def execute_command(self, *args: Any, **options: Any) -> Self:
        """What every redis-py command method calls: queue it with its parse options. A
        value redis-py cannot send (None, a bool...) is refused now, naming the command and
        the argument, and what was queued before it stays queued."""
        cmd = Command(tuple(args), dict(options), parse=True)
        if cmd.name in _CONTROL:
            _refuse_control(cmd.name)
        check_values(f"pipeline command {cmd.name}", "args", args[1:])
        self._entries.append(cmd)
        return self

    # redis-py's command mixins define these as silent stubs: refuse them instead.
    def watch(self, *names: Any) -> NoReturn:
        _refuse_control("WATCH")

    def unwatch(self) -> NoReturn:
        _refuse_control("UNWATCH")

    def multi(self) -> NoReturn:
        _refuse_control("MULTI")

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop everything queued (``reset`` is the Redis RESET command here)."""
        self._entries = []

    def _take(self) -> list[Entry]:
        """The queued entries, leaving the queue empty for the next batch."""
        entries, self._entries = self._entries, []
        self.last_round_trips = self.last_reloads = 0
        return entries


def _steps(queue: EntryQueue, entries: list[Entry]) -> Steps[tuple[list[Any], int]]:
    return execute_steps(
        entries,
        queue.registry.known,
        queue.registry.policy,
        transaction=queue.transaction,
        cluster=is_cluster(queue.client),
    )


class ScriptPipeline(EntryQueue, CoreCommands):
    """Queue script calls (:meth:`call`) and redis-py commands; :meth:`execute` sends them."""

    def __init__(self, registry: ScriptSource, client: Any, *, transaction: bool = False) -> None:
        super().__init__(registry, client, transaction=transaction)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send everything queued; results in queue order (errors raised or in their slots)."""
        entries = self._take()
        if not entries:
            return []
        driver = drivers.Driver(self.client)
        results, self.last_reloads = driver.run(_steps(self, entries))
        self.last_round_trips = driver.round_trips
        if self.transaction:
            parser = self.client
            if not hasattr(parser, "response_callbacks"):  # a cluster: any node's callbacks
                parser = parser.get_redis_connection(parser.get_default_node())
            results = [exec_item(parser, e, r) for e, r in zip(entries, results, strict=True)]
        if raise_on_error:
            raise_first(results)
        return results

    def __enter__(self) -> ScriptPipeline:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.clear()

    async def __aenter__(self) -> NoReturn:
        raise CallArgumentError(
            "this pipeline has a sync client: use `with reg.pipeline(client)`, "
            "or pass a redis.asyncio client for `async with`"
        )

    async def __aexit__(self, *exc: object) -> None:  # pragma: no cover - never entered
        return None


# redis-py's own async command mixins disagree on command_info's signature; mypy only
# notices once a class has a second base. Nothing here touches command_info.
class AsyncScriptPipeline(EntryQueue, AsyncCoreCommands):  # type: ignore[misc]
    """Queue script calls (:meth:`call`) and redis-py commands; ``await execute()``.

    Queueing is synchronous (``p.incr`` returns the pipeline); only :meth:`execute` awaits.
    """

    def __init__(self, registry: ScriptSource, client: Any, *, transaction: bool = False) -> None:
        require_async_client(client, "AsyncScriptPipeline", "reg.pipeline(client) with `with`")
        super().__init__(registry, client, transaction=transaction)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send everything queued; results in queue order (errors raised or in their slots)."""
        entries = self._take()
        if not entries:
            return []
        driver = drivers.AsyncDriver(self.client)
        results, self.last_reloads = await driver.run(_steps(self, entries))
        self.last_round_trips = driver.round_trips
        if self.transaction:
            results = [
                await _awaited(exec_item(self.client, e, r))
                for e, r in zip(entries, results, strict=True)
            ]
        if raise_on_error:
            raise_first(results)
        return results

    async def __aenter__(self) -> AsyncScriptPipeline:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.clear()

    def __enter__(self) -> NoReturn:
        raise CallArgumentError(
            "a pipeline on a redis.asyncio client is an async context manager: use "
            "`async with reg.pipeline(aclient) as p:` and `await p.execute()`"
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ always raises
        return None


async def _awaited(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
