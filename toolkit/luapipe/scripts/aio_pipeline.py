"""AsyncScriptPipeline: the asyncio twin of :class:`luapipe.scripts.pipeline.ScriptPipeline`.

::

    async with reg.pipeline(aclient) as p:          # transaction=False: not atomic
        p.call("rate_limit_fixed", keys=["rl:a"], args=[10, 60])
        p.incr("hits")                              # any redis-py command method
        results = await p.execute()                 # one list, in queue order

Queueing is synchronous (``p.incr`` returns the pipeline); only :meth:`execute` awaits.
The batches come from the same :class:`luapipe.scripts.protocol.Plan` as the sync pipeline:
one round trip in steady state, no ``SCRIPT EXISTS``, only NOSCRIPT'd calls re-sent, EVAL inside
MULTI for ``transaction=True``, nothing re-run after EXEC.
"""

from __future__ import annotations

import inspect
from types import TracebackType
from typing import TYPE_CHECKING, Any

from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncCoreCommands

from luapipe.errors import CallArgumentError
from luapipe.scripts.aio import require_async_client, run_plan
from luapipe.scripts.pipeline import redirects_refused
from luapipe.scripts.protocol import EntryQueue, Plan, exec_item, raise_first
from luapipe.wire.aio import async_session

if TYPE_CHECKING:
    from luapipe.scripts.registry import ScriptRegistry

__all__ = ["AsyncScriptPipeline"]


# redis-py's own async command mixins disagree on command_info's signature; mypy only
# notices once a class has a second base. Nothing here touches command_info.
class AsyncScriptPipeline(EntryQueue, AsyncCoreCommands):  # type: ignore[misc]
    """Queue script calls (:meth:`call`) and redis-py commands; ``await execute()``."""

    def __init__(self, registry: ScriptRegistry, client: Any, *, transaction: bool = False) -> None:
        require_async_client(client, "AsyncScriptPipeline", "reg.pipeline(client) with `with`")
        super().__init__(registry, client, transaction=transaction)

    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send everything queued; results in queue order (errors raised or in their slots)."""
        entries = self._take()
        if not entries:
            return []
        if isinstance(self.client, RedisCluster):
            from luapipe.scripts.aio_cluster import cluster_pipeline

            results, self.last_round_trips, self.last_reloads = await cluster_pipeline(
                self.registry, self.client, entries, transaction=self.transaction
            )
        else:
            async with async_session(self.client) as s:
                plan: Plan = self.registry.plan(entries, s.address, transaction=self.transaction)
                await run_plan(plan, s)
                self.last_round_trips = s.round_trips
                self.last_reloads = plan.reloads
            results = redirects_refused(plan.results)
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

    def __enter__(self) -> AsyncScriptPipeline:
        raise CallArgumentError(
            "a pipeline on a redis.asyncio client is an async context manager: use "
            "`async with reg.pipeline(aclient) as p:` and `await p.execute()`"
        )

    def __exit__(self, *exc: object) -> None:  # pragma: no cover - __enter__ always raises
        return None


async def _awaited(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value
