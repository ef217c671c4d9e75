"""ScriptPipeline: script calls and any redis-py command, sent in one round trip.

::

    with reg.pipeline(client) as pipe:          # transaction=False: not atomic
        pipe.call("rate_limit_fixed", keys=["rl:a"], args=[10, 60])
        pipe.incr("hits")                       # any redis-py command method
        results = pipe.execute()                # one list, in queue order

Unlike redis-py's ``Pipeline`` with a ``Script`` it never sends ``SCRIPT EXISTS``: scripts
not yet known on the node are loaded inline, ahead of the batch, in the same write. If the
cache was flushed meanwhile, only the failed script calls are loaded and re-sent (so in a
non-transactional pipeline those calls run after the rest of the batch: the batch was
never atomic). With ``transaction=True`` the batch is wrapped in MULTI/EXEC and scripts go
as EVAL, so a flushed cache can never cause a partial commit; nothing is re-run after EXEC.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

import redis
from redis.commands.core import CoreCommands

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    CrossSlotError,
    ServerError,
    redis_class_of_reply,
)
from luapipe.scripts.protocol import Entry, EntryQueue, Redirect, ScriptCall, exec_item, raise_first
from luapipe.scripts.registry import CLUSTER_HINT, REDIRECT_ATTEMPTS
from luapipe.wire import routing as cluster
from luapipe.wire import sync as transport

if TYPE_CHECKING:
    from luapipe.scripts.registry import ScriptRegistry

__all__ = ["ScriptPipeline", "redirects_refused"]


def redirects_refused(results: list[Any]) -> list[Any]:
    """Results of a plain (non-cluster) client: a redirect means it talks to a cluster node,
    which only a cluster client can follow; the entry did not run. Sync and asyncio alike."""
    return [
        ServerError(
            f"{r}: this server is a cluster node; {CLUSTER_HINT}",
            like=redis_class_of_reply(str(r)),
        )
        if isinstance(r, Redirect)
        else r
        for r in results
    ]


class ScriptPipeline(EntryQueue, CoreCommands):
    """Queue script calls (:meth:`call`) and redis-py commands; :meth:`execute` sends them."""

    def __init__(
        self, registry: ScriptRegistry, client: redis.Redis, *, transaction: bool = False
    ) -> None:
        super().__init__(registry, client, transaction=transaction)

    def execute(self, raise_on_error: bool = True) -> list[Any]:
        """Send everything queued; results in queue order (errors raised or in their slots).

        On a cluster, entries are grouped by the node owning their slot: one round trip per
        node in steady state; entries answered with a redirect (they did not run) are routed
        again after the slot map is refreshed.
        """
        entries = self._take()
        if not entries:
            return []
        if cluster.is_cluster(self.client):
            results = self._execute_cluster(entries)
        else:
            results = redirects_refused(self._execute_node(self.client, entries))
        if raise_on_error:
            raise_first(results)
        return results

    def _execute_node(
        self, client: redis.Redis, entries: list[Entry], *, asking: bool = False
    ) -> list[Any]:
        with transport.session(client) as s:
            plan = self.registry.plan(entries, s.address, transaction=self.transaction)
            batch = plan.start()
            while batch:
                batch = plan.feed(s.execute(batch, asking=asking))
            self.last_round_trips += s.round_trips
            self.last_reloads += plan.reloads
        results = plan.results
        if self.transaction:
            results = [exec_item(client, e, r) for e, r in zip(entries, results, strict=True)]
        return results

    def _slot(self, entry: Entry) -> int | None:
        if isinstance(entry, ScriptCall):
            return cluster.slot_of(self.client, entry.keys)
        return cluster.command_slot(self.client, entry.args)

    def _execute_cluster(self, entries: list[Entry]) -> list[Any]:
        slots = [self._slot(e) for e in entries]  # CrossSlotError before anything is sent
        if self.transaction:
            distinct = sorted({s for s in slots if s is not None})
            if len(distinct) > 1:
                raise CrossSlotError(
                    f"transaction=True needs every key in one slot, got slots {distinct}; "
                    "use a common hash tag such as {user:42}"
                )
            slots = [distinct[0] if distinct else None] * len(entries)
        results: list[Any] = [None] * len(entries)
        pending = list(range(len(entries)))
        asks: dict[int, str] = {}  # entry -> the node an ASK named (its slot is migrating)
        for attempt in range(REDIRECT_ATTEMPTS):
            groups: dict[tuple[str, bool], tuple[redis.Redis, list[int]]] = {}
            for i in pending:
                asked = cluster.node_by_address(self.client, asks[i]) if i in asks else None
                name, node = asked or cluster.node_client(self.client, slots[i])
                groups.setdefault((name, asked is not None), (node, []))[1].append(i)
            for (_, asking), (node, idxs) in groups.items():
                try:
                    part = self._execute_node(node, [entries[i] for i in idxs], asking=asking)
                except ConnectionFailed as exc:  # nothing was sent to that node
                    part = [Redirect(str(exc))] * len(idxs)
                for i, r in zip(idxs, part, strict=True):
                    results[i] = r
            pending = [i for i in pending if isinstance(results[i], Redirect)]
            if not pending:
                return results
            asks = {i: a for i in pending if (a := results[i].ask) is not None}
            if len(asks) < len(pending):  # ASK goes on at once; other redirects wait for
                cluster.refresh_later(self.client, attempt)  # the new slot map
        for i in pending:
            results[i] = ServerError(f"no node would take this command: {results[i]}")
        return results

    def __enter__(self) -> ScriptPipeline:
        return self

    async def __aenter__(self) -> NoReturn:
        raise CallArgumentError(
            "this pipeline has a sync client: use `with reg.pipeline(client)`, "
            "or pass a redis.asyncio client for `async with`"
        )

    async def __aexit__(self, *exc: object) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.clear()
