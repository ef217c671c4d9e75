"""One test body, two flavours: the ``driver`` fixture (tests/conftest.py) runs a test with
sync clients and with ``redis.asyncio`` clients, so a drift between the two paths is a
failing test by default.

A body builds its clients through the driver and passes whatever luapipe returns through
:meth:`Driver.run`: the value itself for the sync flavour, awaited for asyncio::

    def test_x(driver: Driver, redis_server: ServerProcess) -> None:
        client = driver.redis(redis_server.port, socket_timeout=0.25)
        assert driver.run(reg.call(client, "counted", keys=["k"], args=[1])) == 1
        pipe = reg.pipeline(client)          # no `with` needed in either flavour
        pipe.call("counted", keys=["k"], args=[1]).incr("plain")
        assert driver.run(pipe.execute()) == [2, 1]

Also here: the fault tools those bodies use, all deterministic (no sleeps that a slow
machine could outrun): :func:`stopped` freezes a server with SIGSTOP until the block ends,
:func:`drained` waits until the server has read everything a closed client sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import luapipe

__all__ = [
    "AsyncDriver",
    "Driver",
    "SyncDriver",
    "drained",
    "kill_named",
    "stopped",
    "unwritable_size",
    "warmed",
]

HOST = "127.0.0.1"


class Driver:
    """Builds clients of one flavour and runs what luapipe returns for them."""

    name = ""

    def redis(self, port: int, **kw: Any) -> Any:
        """A plain client on ``HOST:port`` (``redis.Redis`` or ``redis.asyncio.Redis``)."""
        raise NotImplementedError

    def cluster(self, port: int, **kw: Any) -> Any:
        """A cluster client whose startup node is ``HOST:port``."""
        raise NotImplementedError

    def run(self, value: Any) -> Any:
        """The result of a luapipe call made with one of this driver's clients."""
        raise NotImplementedError

    def close(self, client: Any) -> None:
        """Close ``client`` now (its connections are closed on the server's side too)."""
        raise NotImplementedError

    def close_all(self) -> None:
        raise NotImplementedError


class SyncDriver(Driver):
    name = "sync"

    def __init__(self) -> None:
        self._clients: list[Any] = []

    def redis(self, port: int, **kw: Any) -> redis.Redis:
        client = redis.Redis(host=HOST, port=port, **kw)
        self._clients.append(client)
        return client

    def cluster(self, port: int, **kw: Any) -> redis.cluster.RedisCluster:
        client = redis.cluster.RedisCluster(host=HOST, port=port, **kw)
        self._clients.append(client)
        return client

    def run(self, value: Any) -> Any:
        if inspect.isawaitable(value):  # a sync client got the asyncio API: a drift
            if inspect.iscoroutine(value):
                value.close()
            raise TypeError(f"a sync client got an awaitable: {value!r}")
        return value

    def close(self, client: Any) -> None:
        client.close()
        if client in self._clients:
            self._clients.remove(client)

    def close_all(self) -> None:
        for client in self._clients:
            client.close()
        self._clients = []


class AsyncDriver(Driver):
    """Every client lives on one event loop owned by the driver (one per test)."""

    name = "asyncio"

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._clients: list[Any] = []

    def _made(self, make: Any) -> Any:
        async def build() -> Any:  # inside the loop: redis-py binds to the running loop
            return make()

        client = self.loop.run_until_complete(build())
        self._clients.append(client)
        return client

    def redis(self, port: int, **kw: Any) -> redis.asyncio.Redis:
        client: redis.asyncio.Redis = self._made(
            lambda: redis.asyncio.Redis(host=HOST, port=port, **kw)
        )
        return client

    def cluster(self, port: int, **kw: Any) -> redis.asyncio.cluster.RedisCluster:
        client: redis.asyncio.cluster.RedisCluster = self._made(
            lambda: redis.asyncio.cluster.RedisCluster(host=HOST, port=port, **kw)
        )
        return client

    def run(self, value: Any) -> Any:
        if not inspect.isawaitable(value):  # an asyncio client got a sync answer: a drift
            raise TypeError(f"an asyncio client got a plain value: {value!r}")
        return self.loop.run_until_complete(_awaited(value))

    def close(self, client: Any) -> None:
        self.loop.run_until_complete(client.aclose())
        if client in self._clients:
            self._clients.remove(client)

    def close_all(self) -> None:
        try:
            for client in self._clients:
                self.loop.run_until_complete(client.aclose())
            self._clients = []
        finally:
            self.loop.close()


async def _awaited(value: Any) -> Any:
    return await value


# -- faults -----------------------------------------------------------------------------------


def warmed(driver: Driver, call: Callable[[], Any], *, attempts: int = 5) -> Any:
    """``driver.run(call())`` until it succeeds: the warm-up before a fault (connections
    opened, slot map and scripts loaded). It must touch nothing the test counts: on a busy
    machine a short ``socket_timeout`` can cut a warm-up short, and it is simply tried again."""
    for attempt in range(attempts):
        try:
            return driver.run(call())
        except (luapipe.LuapipeError, redis.RedisError, OSError):
            if attempt == attempts - 1:
                raise
            time.sleep(0.1)
    raise AssertionError("unreachable")


def _state(pid: int) -> str:
    """The process state letter from /proc (R, S, T...)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 2]


@contextlib.contextmanager
def stopped(pid: int, *, at_most: float = 1.5) -> Iterator[None]:
    """Freeze the server process ``pid`` (SIGSTOP) for the block: it reads nothing and
    answers nothing, while the kernel still accepts connections and buffers what is sent,
    so a request written meanwhile runs once the block ends (SIGCONT). The block starts
    once the process is really stopped. A watchdog resumes it after ``at_most`` seconds,
    so a bug that loops while it is frozen cannot stall a cluster node past its node
    timeout (2 s); a single server can take a longer ``at_most``."""
    os.kill(pid, signal.SIGSTOP)
    watchdog = threading.Timer(at_most, os.kill, (pid, signal.SIGCONT))
    watchdog.start()
    try:
        deadline = time.monotonic() + 5
        while _state(pid) != "T":
            assert time.monotonic() < deadline, f"process {pid} did not stop"
            time.sleep(0.001)
        yield
    finally:
        watchdog.cancel()
        os.kill(pid, signal.SIGCONT)


def _named(admin: redis.Redis, name: str) -> list[int]:
    return [int(c["id"]) for c in admin.client_list() if c.get("name") == name]


def drained(admin: redis.Redis, name: str, *, within: float = 10.0) -> None:
    """Wait until the server no longer lists a connection named ``name``. A client closes
    its socket after whatever it wrote; the server frees the connection only once it has
    read (and run) everything before the close, so afterwards every effect is visible."""
    deadline = time.monotonic() + within
    while _named(admin, name):
        assert time.monotonic() < deadline, f"connections named {name!r} never went away"
        time.sleep(0.005)


def kill_named(admin: redis.Redis, name: str) -> int:
    """CLIENT KILL every connection named ``name`` (the server closes their sockets while
    the client is idle); returns how many, once they are gone."""
    ids = _named(admin, name)
    for cid in ids:
        admin.client_kill_filter(_id=cid)
    drained(admin, name)
    return len(ids)


def _sysctl_max(path: str) -> int:
    try:
        return int(Path(path).read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return 64 << 20


def unwritable_size() -> int:
    """More bytes than the kernel can buffer on one loopback connection whose reader is
    frozen (the largest send buffer plus the largest receive window), so writing them to a
    stopped server must time out halfway."""
    return (
        _sysctl_max("/proc/sys/net/ipv4/tcp_wmem")
        + _sysctl_max("/proc/sys/net/ipv4/tcp_rmem")
        + (1 << 20)
    )
