"""AsyncScriptPipeline: the asyncio twin of :class:`luapipe.pipeline.ScriptPipeline`.

::

    async with reg.pipeline(aclient) as p:          # transaction=False: not atomic
        p.call("rate_limit_fixed", keys=["rl:a"], args=[10, 60])
        p.incr("hits")                              # any redis-py command method
        results = await p.execute()                 # one list, in queue order

Queueing is synchronous (``p.incr`` returns the pipeline); only :meth:`execute` awaits.
The batches come from the same :class:`luapipe.core.Plan` as the sync pipeline: one round
trip in steady state, no ``SCRIPT EXISTS``, only NOSCRIPT'd calls re-sent, EVAL inside
MULTI for ``transaction=True``, nothing re-run after EXEC.
"""

from __future__ import annotations

import inspect
from types import TracebackType
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncCoreCommands

from luapipe.aio import require_async_client, run_plan
from luapipe.aio_transport import async_session
from luapipe.core import Entry, Plan, ScriptCall
from luapipe.errors import CallArgumentError, LuapipeError
from luapipe.script import Value
from luapipe.transport import Command

if TYPE_CHECKING:
    from luapipe.registry import ScriptRegistry

__all__ = ["AsyncScriptPipeline"]


class AsyncScriptPipeline(AsyncCoreCommands):
    """Queue script calls (:meth:`call`) and redis-py commands; ``await execute()``."""

    def __init__(self, registry: ScriptRegistry, client: Any, *, transaction: bool = False) -> None:
        require_async_client(client, "AsyncScriptPipeline", "reg.pipeline(client) with `with`")
        self.registry = registry
        self.client = client
        self.transaction = transaction
        self._entries: list[Entry] = []
        self._event_dispatcher: Any = None  # required by redis-py's command protocol; unused
        #: round trips and NOSCRIPT re-sends of the last execute (summed over cluster nodes)
        self.last_round_trips = 0
        self.last_reloads = 0

    def call(self, name: str, keys: Any = (), args: Any = ()) -> AsyncScriptPipeline:
        """Queue a script call; counts are checked now, before anything is sent."""
        script = self.registry[name]
        keys_t: tuple[Value, ...] = tuple(keys)
        args_t: tuple[Value, ...] = tuple(args)
        script.check_call(keys_t, args_t)
        self._entries.append(ScriptCall(script, keys_t, args_t))
        return self

    def execute_command(self, *args: Any, **options: Any) -> AsyncScriptPipeline:
        """What every redis-py command method calls: queue it with its parse options."""
        self._entries.append(Command(tuple(args), dict(options), parse=True))
        return self

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        """Drop everything queued (``reset`` is the Redis RESET command here)."""
        self._entries = []

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send everything queued; results in queue order (errors raised or in their slots)."""
        entries, self._entries = self._entries, []
        if not entries:
            return []
        if isinstance(self.client, RedisCluster):
            from luapipe.aio_cluster import cluster_pipeline

            results, self.last_round_trips, self.last_reloads = await cluster_pipeline(
                self.registry, self.client, entries, transaction=self.transaction
            )
        else:
            async with async_session(self.client) as s:
                plan: Plan = self.registry.plan(entries, s.address, transaction=self.transaction)
                await run_plan(plan, s)
                self.last_round_trips = s.round_trips
                self.last_reloads = plan.reloads
            results = plan.results
        if self.transaction:
            results = [await self._callback(e, r) for e, r in zip(entries, results, strict=True)]
        if raise_on_error:
            for r in results:
                if isinstance(r, LuapipeError):
                    raise r
        return results

    async def _callback(self, entry: Entry, reply: Any) -> Any:
        """redis-py's response callback for a command's EXEC item (MULTI replies are raw)."""
        if not isinstance(entry, Command) or isinstance(reply, LuapipeError):
            return reply
        callback = self.client.response_callbacks.get(entry.name)
        if callback is None:
            return reply
        options = {k: v for k, v in entry.options.items() if k != "keys"}
        value = callback(reply, **options)
        return await value if inspect.isawaitable(value) else value

    async def __aenter__(self) -> AsyncScriptPipeline:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.clear()

    def __enter__(self) -> AsyncScriptPipeline:
        raise CallArgumentError(
            "a pipeline on a redis.asyncio client is an async context manager: use "
            "`async with reg.pipeline(aclient) as p:` and `await p.execute()`"
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ always raises
        return None
