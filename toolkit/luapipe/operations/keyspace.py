"""A case's keys on the server: write its initial state (:func:`setup`), read every key
under a namespace back as typed values with TTL presence (:func:`dump`), delete them.

Used by ``verify`` (every form starts from the same state; the whole keyspace a form leaves
is compared, TTLs included) and by the benchmark's operation workloads.
"""

from __future__ import annotations

import re
from typing import Any

import redis

from luapipe.operations import prelude
from luapipe.operations.casegen import Case
from luapipe.operations.run import execute_routed
from luapipe.wire import routing as _cluster
from luapipe.wire import sync as transport

__all__ = ["delete_namespace", "dump", "setup"]


def setup(client: redis.Redis, case: Case) -> None:
    """Delete every key of ``case`` and write its initial state (one round trip; on a
    cluster one per node that holds its keys)."""
    if _cluster.is_cluster(client):
        cmds: list[tuple[Any, ...]] = [("DEL", k) for k in case.universe]
    else:
        cmds = [("DEL", *case.universe)] if case.universe else []
    for ks in case.state:
        cmds.extend(ks.commands())
    for reply in execute_routed(client, cmds)[0]:
        transport.raise_for(reply)


def dump(client: redis.Redis, namespace: str) -> tuple[tuple[str, str, Any, bool], ...]:
    """(key, type, value, has_ttl) for every key under ``namespace``, sorted."""
    names = sorted(
        prelude.text(k) for k in client.scan_iter(match=_glob(namespace) + "*", count=1000)
    )
    if not names:
        return ()
    pipe = client.pipeline(transaction=False)
    for k in names:
        pipe.type(k)
        pipe.pttl(k)
    meta = pipe.execute()
    pipe = client.pipeline(transaction=False)
    types = [prelude.text(t) for t in meta[0::2]]
    for k, t in zip(names, types, strict=True):
        if t == "string":
            pipe.get(k)
        elif t == "hash":
            pipe.hgetall(k)
        elif t == "zset":
            pipe.zrange(k, 0, -1, withscores=True)
        elif t == "list":
            pipe.lrange(k, 0, -1)
        elif t == "stream":
            pipe.xrange(k)
        else:
            pipe.smembers(k)
    values = pipe.execute()
    out = []
    for k, t, v, ttl in zip(names, types, values, meta[1::2], strict=True):
        out.append((k, t, _norm(t, v), int(ttl) >= 0))
    return tuple(out)


def delete_namespace(client: redis.Redis, namespace: str) -> None:
    keys = list(client.scan_iter(match=_glob(namespace) + "*", count=1000))
    if keys:
        client.delete(*keys)


def _glob(prefix: str) -> str:
    return re.sub(r"([*?\[\]\\])", r"\\\1", prefix)


def _norm(t: str, v: Any) -> Any:
    if t == "string":
        return prelude.text(v)
    if t == "hash":
        return tuple(sorted((prelude.text(a), prelude.text(b)) for a, b in v.items()))
    if t == "zset":
        return tuple((prelude.text(m), float(s)) for m, s in v)
    if t == "stream":  # entries without their IDs: an XADD * ID is the clock's
        return tuple(tuple(sorted((prelude.text(a), prelude.text(b)) for a, b in f.items()))
                     for _, f in v)  # fmt: skip
    if t == "set":
        return tuple(sorted(prelude.text(x) for x in v))
    return tuple(prelude.text(x) for x in v)
