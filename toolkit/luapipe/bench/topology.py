"""One server or a Redis Cluster: the harness's clients, counters and skipped forms.

On a cluster the harness uses a ``redis.cluster.RedisCluster`` for the keyspace (reset,
invariants), sums ``INFO commandstats`` over the primaries, counts round trips on every
node's connections, and skips the forms that cannot run with a workload's keys (see
:mod:`luapipe.operations.clustersafety`), naming the reason.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit, urlunsplit

import redis
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from luapipe.bench.counting import CountingConnection, counting_client

__all__ = [
    "counting_cluster_client",
    "counting_for",
    "hostport",
    "is_cluster_server",
    "primaries",
    "retarget",
    "workload_skips",
]


def is_cluster_server(admin: redis.Redis) -> bool:
    """Whether the server at ``admin`` is a cluster node (``INFO cluster``)."""
    try:
        return str(admin.info("cluster").get("cluster_enabled", 0)) == "1"
    except redis.ResponseError:  # a server without the section
        return False


def counting_cluster_client(url: str, **kwargs: Any) -> redis.cluster.RedisCluster:
    """A cluster client whose node connections count writes and commands (no retries)."""
    kwargs.setdefault("socket_timeout", 30)
    return redis.cluster.RedisCluster.from_url(
        url, connection_class=CountingConnection, retry=Retry(NoBackoff(), 0), **kwargs
    )


def primaries(client: Any) -> list[redis.Redis]:
    """A client per primary of a cluster; ``[client]`` for one server."""
    if not isinstance(client, redis.cluster.RedisCluster):
        return [client]
    nodes = client.get_primaries()  # type: ignore[no-untyped-call]
    return [client.get_redis_connection(n) for n in nodes]


def workload_skips(workload: Any, admin: Any) -> dict[str, str]:
    """``{form: reason}`` of the workload's forms that are not timed: those it leaves out
    itself (its optional ``not_timed``), and on a cluster its ``cluster_skips``."""
    found = dict(getattr(workload, "not_timed", None) or {})
    skips = getattr(workload, "cluster_skips", None)
    if skips is not None and isinstance(admin, redis.cluster.RedisCluster):
        found.update(skips(admin))
    return found


def retarget(url: str, host: str, port: int) -> str:
    """``url`` with its host:port replaced (user, password and db kept)."""
    parts = urlsplit(url)
    auth = parts.netloc.rsplit("@", 1)[0] + "@" if "@" in parts.netloc else ""
    return urlunsplit(parts._replace(netloc=f"{auth}{host}:{port}"))


def hostport(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 6379


def counting_for(url: str, cluster: bool) -> Any:
    """The harness's in-process counting client (a cluster client on a cluster)."""
    if cluster:
        return counting_cluster_client(url, socket_timeout=60)
    return counting_client(url, socket_timeout=60)
