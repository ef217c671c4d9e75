"""ScriptRegistry: a named set of Lua scripts, loaded and called safely on a Redis server.

::

    reg = ScriptRegistry.from_directory("scripts_lua")
    reg.load(client)                                     # {name: sha}
    reg.call(client, "rate_limit_fixed", keys=["rl:alice"], args=[10, 60])
    with reg.pipeline(client) as pipe:
        pipe.call("cas", keys=["k"], args=["old", "new"])
        pipe.incr("hits")
        results = pipe.execute()

Calls use EVALSHA (EVALSHA_RO for ``no-writes`` scripts) and recover from the server's
exact NOSCRIPT reply by loading and re-sending once; nothing is re-sent after a timeout or
a dropped connection (see :mod:`luapipe.transport`).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import redis
import redis.asyncio

from luapipe import transport
from luapipe.core import (
    MAX_ROUNDS,
    KnownScripts,
    Plan,
    ScriptCall,
    check_loaded,
    load_command,
    script_error,
    script_result,
)
from luapipe.errors import DuplicateScriptError, LuapipeError, ServerError, UnknownScriptError
from luapipe.lint import compile_check
from luapipe.loader import discover
from luapipe.script import LuaScript, Value

if TYPE_CHECKING:
    from luapipe.pipeline import ScriptPipeline

__all__ = ["NodeStatus", "ScriptRegistry", "ScriptState", "bundled_scripts_dir"]


@dataclass(frozen=True)
class ScriptState:
    name: str
    sha: str
    loaded: bool


@dataclass(frozen=True)
class NodeStatus:
    """Which scripts one node has cached."""

    node: str
    scripts: tuple[ScriptState, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.scripts if not s.loaded)


def bundled_scripts_dir() -> Path:
    """The starter library: inside the installed wheel, or ``scripts_lua/`` of a checkout."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "scripts_lua", here.parent.parent / "scripts_lua"):
        if candidate.is_dir():
            return candidate
    raise LuapipeError("the bundled scripts_lua directory is missing from this installation")


class ScriptRegistry:
    """Scripts by name. Construction compiles every script, so a syntax error (file:line)
    is raised before anything reaches a server."""

    def __init__(self, scripts: Iterable[LuaScript], *, check: bool = True) -> None:
        self._scripts: dict[str, LuaScript] = {}
        for s in scripts:
            if s.name in self._scripts:
                first = self._scripts[s.name]
                raise DuplicateScriptError(
                    f"duplicate script name {s.name!r}: {first.path or '?'} and {s.path or '?'}"
                )
            self._scripts[s.name] = s
        if check:
            compile_check(self._scripts.values())
        self.known = KnownScripts()

    @classmethod
    def from_directory(cls, directory: str | Path | None = None) -> ScriptRegistry:
        """Every top-level ``*.lua`` in ``directory`` (default: the bundled library)."""
        return cls(discover(directory if directory is not None else bundled_scripts_dir()))

    # -- the collection -------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self._scripts)

    def __getitem__(self, name: str) -> LuaScript:
        try:
            return self._scripts[name]
        except KeyError:
            close = difflib.get_close_matches(name, self._scripts, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise UnknownScriptError(f"unknown script {name!r}{hint}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._scripts

    def __iter__(self) -> Iterator[LuaScript]:
        return iter(self._scripts[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._scripts)

    # -- the server -----------------------------------------------------------------------
    def load(self, client: redis.Redis) -> dict[str, str]:
        """SCRIPT LOAD every script in one round trip; returns {name: sha}."""
        scripts = list(self)
        with transport.session(client) as s:
            replies = s.execute([("SCRIPT", "LOAD", sc.source) for sc in scripts])
            for sc, reply in zip(scripts, replies, strict=True):
                err = check_loaded(sc, reply)
                if err is not None:
                    raise err
                self.known.add(s.address, sc.sha)
        return {sc.name: sc.sha for sc in scripts}

    def status(self, client: redis.Redis) -> list[NodeStatus]:
        """SCRIPT EXISTS for every script, per node."""
        scripts = list(self)
        with transport.session(client) as s:
            if not scripts:
                return [NodeStatus(s.address, ())]
            (reply,) = s.execute([("SCRIPT", "EXISTS", *[sc.sha for sc in scripts])])
            flags = transport.raise_for(reply)
            states = tuple(
                ScriptState(sc.name, sc.sha, bool(f)) for sc, f in zip(scripts, flags, strict=True)
            )
            return [NodeStatus(s.address, states)]

    def flush(self, client: redis.Redis) -> list[str]:
        """SCRIPT FLUSH (every script of every application on that server); returns nodes."""
        with transport.session(client) as s:
            transport.raise_for(s.execute([("SCRIPT", "FLUSH")])[0])
            self.known.forget(s.address)
            return [s.address]

    def call(
        self,
        client: redis.Redis,
        name: str,
        keys: Sequence[Value] = (),
        args: Sequence[Value] = (),
    ) -> Any:
        """Run one script: one round trip in steady state; NOSCRIPT -> load, retry once.

        With a ``redis.asyncio`` client this returns a coroutine (``await reg.call(...)``).
        """
        if is_async_client(client):
            from luapipe.aio import call_async

            return call_async(self, client, name, keys, args)
        script = self[name]
        script.check_call(keys, args)
        call = ScriptCall(script, tuple(keys), tuple(args))
        with transport.session(client) as s:
            node = s.address
            if self.known.has(node, script.sha):
                verb = "EVALSHA_RO" if script.read_only else "EVALSHA"
                reply = s.send_one((verb, script.sha, len(keys), *keys, *args))
                if reply.__class__ is not transport.ReplyError:
                    return reply
                if not reply.is_noscript:
                    raise script_error(script, reply.text)
                self.known.discard(node, script.sha)
            for _ in range(MAX_ROUNDS):  # NOSCRIPT means it did not run: re-sending is safe
                load_reply, reply = s.execute([load_command(script), call.evalsha()])
                err = check_loaded(script, load_reply)
                if err is not None:
                    raise err
                if not (isinstance(reply, transport.ReplyError) and reply.is_noscript):
                    self.known.add(node, script.sha)
                    return _raise_or_return(script_result(script, reply))
            raise ServerError(
                f"NOSCRIPT persisted after {MAX_ROUNDS} loads on {node} (is another client "
                f"flushing the script cache?); script {name!r} did not run"
            )

    def pipeline(self, client: redis.Redis, *, transaction: bool = False) -> ScriptPipeline:
        """A pipeline that takes script calls and any redis-py command; see ScriptPipeline.

        With a ``redis.asyncio`` client: ``async with reg.pipeline(aclient) as p``.
        """
        if is_async_client(client):
            from luapipe.aio import AsyncScriptPipeline

            return cast("ScriptPipeline", AsyncScriptPipeline(self, client, transaction=transaction))
        from luapipe.pipeline import ScriptPipeline

        return ScriptPipeline(self, client, transaction=transaction)

    def plan(self, entries: Sequence[Any], node: str, *, transaction: bool) -> Plan:
        return Plan(entries, self.known, node, transaction=transaction)


def is_async_client(client: object) -> bool:
    """A ``redis.asyncio`` client (Redis or RedisCluster, fakeredis's async one too)."""
    return isinstance(client, redis.asyncio.Redis | redis.asyncio.RedisCluster)


def _raise_or_return(result: Any) -> Any:
    if isinstance(result, LuapipeError):
        raise result
    return result
