"""A team's own Python implementation of an operation, as a benchmark form.

The protocol: a function named ``"module:function"`` that takes a redis-py client and the
call's keys and args, positional, as the script gets them, and returns what the script
returns (so the bench can tell whether a call wrote, and the forms can be compared)::

    def take(client: redis.Redis, keys: list[str], args: list[str | int | float]) -> Any:
        ...

    async def take_async(client: redis.asyncio.Redis, keys, args) -> Any:   # asyncio
        ...

A plain function gets the benchmark's client (a ``redis.Redis``, or a
``redis.cluster.RedisCluster`` on a cluster); an ``async def`` gets a ``redis.asyncio.Redis``
on the same server, run on the worker's own event loop (the loop's cost per call is timed
with it, as an application pays it). Raise on an error: the bench counts it. The function
must not keep state between calls that another worker would need: workers are processes.

The module is imported from the current directory, the profile's directory, or wherever
Python finds it (an installed package).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio
from redis.asyncio.connection import Connection as AsyncConnection

from luapipe.bench.counting import Counts
from luapipe.errors import LuapipeError

__all__ = ["AsyncCaller", "PythonForm", "awaitable_error", "is_async_callable", "load_callable"]


@dataclass(frozen=True)
class PythonForm:
    """A form of a team's own: its name in the report, its ``module:function``, whether the
    team declares it atomic (no other client ever sees it half done), and whether it is an
    ``async def``."""

    name: str
    target: str
    atomic: bool
    is_async: bool = False

    def describe(self) -> dict[str, Any]:
        return {"call": self.target, "atomic": self.atomic, "async": self.is_async}


def load_callable(target: str, where: str, search: Path | None = None) -> Callable[..., Any]:
    """The function ``module:function`` names; ``where`` (``file:line``) starts an error."""
    module_name, _, attr = target.partition(":")
    if not module_name or not attr:
        raise LuapipeError(f"{where}: {target!r} must be written module:function")
    for folder in (Path.cwd(), search):
        if folder is not None and str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    _one_module_per_name(module_name.split(".")[0], search, where)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # an import error of the team's own module, whatever it is
        raise LuapipeError(
            f"{where}: cannot import {module_name!r} ({type(exc).__name__}: {exc}); it is "
            "looked for in the current directory, the profile's, and the installed packages"
        ) from None
    fn: Any = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)
    if not callable(fn):
        raise LuapipeError(f"{where}: {module_name} has no function {attr!r}")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn  # type: ignore[no-any-return]
    positional = [
        p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    varargs = any(p.kind == p.VAR_POSITIONAL for p in params.values())
    if len(positional) < 3 and not varargs:
        raise LuapipeError(
            f"{where}: {target} takes {len(positional)} arguments; a Python form takes "
            "(client, keys, args)"
        )
    required = [p for p in positional if p.default is p.empty]
    if len(required) > 3:
        raise LuapipeError(
            f"{where}: {target} needs {len(required)} arguments; a Python form is called with "
            "(client, keys, args)"
        )
    keywords = [p.name for p in params.values() if p.kind == p.KEYWORD_ONLY]
    needed = [k for k in keywords if params[k].default is params[k].empty]
    if needed:
        raise LuapipeError(
            f"{where}: {target} needs {'=, '.join(needed)}=; a Python form is called with "
            "(client, keys, args) only"
        )
    return fn  # type: ignore[no-any-return]


def _one_module_per_name(top: str, search: Path | None, where: str) -> None:
    """Python imports one module per name: a profile whose folder holds ``forms.py`` while
    another ``forms`` was imported already (another profile's) would get that one."""
    cached = sys.modules.get(top)
    was = getattr(cached, "__file__", None)
    if search is None or was is None:
        return
    for here in (search / f"{top}.py", search / top / "__init__.py"):
        if here.is_file():
            if here.resolve() != Path(was).resolve():
                raise LuapipeError(
                    f"{where}: {top!r} is {here} here, but {was} was imported under that name "
                    "already (another profile's): Python keeps one module per name, so this "
                    "profile would run that one; give one of them another name"
                )
            return


def is_async_callable(fn: Any) -> bool:
    """Whether a call of ``fn`` gives a coroutine to await: an ``async def`` (or a
    ``functools.partial`` of one), or an object whose ``__call__`` is an ``async def``."""
    found = (vars(k).get("__call__") for k in type(fn).__mro__)
    call = None if inspect.isroutine(fn) else next((c for c in found if c is not None), None)
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(call)


def awaitable_error(what: str, value: Any) -> LuapipeError | None:
    """The error for what a plain call returned when it is a coroutine (any awaitable): an
    ``async def`` behind a plain function (a decorator that is not async) was never run,
    only created. The coroutine is closed (no "never awaited" warning). None otherwise."""
    if not hasattr(type(value), "__await__"):
        return None
    close = getattr(value, "close", None)
    if callable(close):
        close()
    return LuapipeError(
        f"{what} returned a {type(value).__name__} without awaiting it (an async def behind "
        "a plain function, such as a decorator that is not async): its code never ran; make "
        "it an async def that awaits it"
    )


class _CountingAsyncConnection(AsyncConnection):
    """An asyncio connection that counts its writes (round trips) and commands."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writes = 0
        self.commands = 0

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        self.writes += 1
        await super().send_packed_command(command, check_health=check_health)

    def pack_command(self, *args: Any) -> list[bytes]:
        self.commands += 1  # pack_commands packs each command of a pipeline with it
        return super().pack_command(*args)


_KWARGS = ("host", "port", "db", "username", "password", "socket_timeout", "protocol")


class AsyncCaller:
    """Runs an ``async def`` form call by call on a loop of its own, with an asyncio client
    to the server the worker's sync client talks to (through the delay proxy, if any)."""

    def __init__(self, fn: Callable[..., Any], client: redis.Redis) -> None:
        kw = client.connection_pool.connection_kwargs
        settings = {k: kw[k] for k in _KWARGS if kw.get(k) is not None}
        self.loop = asyncio.new_event_loop()
        self.fn = fn

        async def make() -> redis.asyncio.Redis:
            pool = redis.asyncio.ConnectionPool(
                connection_class=_CountingAsyncConnection, **settings
            )
            return redis.asyncio.Redis(connection_pool=pool)

        self.client = self.loop.run_until_complete(make())
        self.loop.run_until_complete(self.client.ping())  # connected before the timed window

    def __call__(self, keys: list[Any], args: list[Any]) -> Any:
        return self.loop.run_until_complete(self.fn(self.client, keys, args))

    def counts(self) -> Counts:
        pool: Any = self.client.connection_pool
        conns = [
            *getattr(pool, "_available_connections", []),
            *getattr(pool, "_in_use_connections", []),
        ]
        return Counts(
            sum(getattr(c, "writes", 0) for c in conns),
            sum(getattr(c, "commands", 0) for c in conns),
        )

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()
