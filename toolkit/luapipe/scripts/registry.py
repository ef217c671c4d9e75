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
a dropped connection (see :mod:`luapipe.wire.sync`).
"""

from __future__ import annotations

import difflib
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, overload

import redis
import redis.asyncio
import redis.cluster

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    DuplicateScriptError,
    LuapipeError,
    ScriptError,
    ServerError,
    UnknownScriptError,
    redis_class_of_reply,
)
from luapipe.scripts.compiler import compile_problems
from luapipe.scripts.loader import scan
from luapipe.scripts.problems import ScriptProblem, raise_problems
from luapipe.scripts.protocol import (
    KnownScripts,
    Plan,
    ScriptCall,
    cached_by_eval,
    check_loaded,
    load_command,
    script_error,
    script_result,
)
from luapipe.scripts.script import LuaScript, Value
from luapipe.wire import routing as cluster
from luapipe.wire import sync as transport

if TYPE_CHECKING:
    from luapipe.scripts.aio_pipeline import AsyncScriptPipeline
    from luapipe.scripts.pipeline import ScriptPipeline

SyncClient: TypeAlias = "redis.Redis | redis.cluster.RedisCluster"
AsyncClient: TypeAlias = "redis.asyncio.Redis | redis.asyncio.RedisCluster"

__all__ = ["NodeStatus", "ScriptRegistry", "ScriptState", "bundled_scripts_dir"]

REDIRECT_ATTEMPTS = 8  # MOVED / failover retries for one call (each proven not to have run)
CLUSTER_HINT = "use a cluster client (redis.cluster.RedisCluster; the CLI detects clusters)"


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
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "scripts_lua", package.parent.parent / "scripts_lua"):
        if candidate.is_dir():
            return candidate
    raise LuapipeError("the bundled scripts_lua directory is missing from this installation")


class ScriptRegistry:
    """Scripts by name. Construction compiles every script, so a syntax error (file:line)
    is raised before anything reaches a server; every broken script is named at once.

    With ``strict=False`` the broken scripts are set aside instead: the others can be
    called, ``problems`` lists the broken ones, and calling one raises its problem.
    """

    def __init__(
        self,
        scripts: Iterable[LuaScript],
        *,
        check: bool = True,
        strict: bool = True,
        problems: Iterable[ScriptProblem] = (),
    ) -> None:
        self._scripts = _by_name(scripts)
        found = [*problems, *(compile_problems(self._scripts.values()) if check else ())]
        if strict:
            raise_problems(found)
        for problem in found:
            self._scripts.pop(problem.name, None)
        self._problems = tuple(sorted(found, key=lambda p: p.name))
        self.known = KnownScripts()

    @classmethod
    def from_directory(
        cls, directory: str | Path | None = None, *, strict: bool = True
    ) -> ScriptRegistry:
        """Every top-level ``*.lua`` in ``directory`` (default: the bundled library).

        ``strict=False``: a broken file (bad name, header or syntax) does not stop the
        others; see :attr:`problems`.
        """
        found = scan(directory if directory is not None else bundled_scripts_dir())
        return cls(found.scripts, strict=strict, problems=found.problems)

    @property
    def problems(self) -> tuple[ScriptProblem, ...]:
        """The scripts set aside by ``strict=False`` (sorted by name), each with its reason."""
        return self._problems

    # -- the collection -------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self._scripts)

    def __getitem__(self, name: str) -> LuaScript:
        try:
            return self._scripts[name]
        except KeyError:
            pass
        for problem in self._problems:
            if problem.name == name:
                raise ScriptError(f"script {name!r} cannot be used: {problem.message}")
        close = difflib.get_close_matches(name, self._scripts, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownScriptError(f"unknown script {name!r}{hint}")

    def __contains__(self, name: object) -> bool:
        return name in self._scripts

    def __iter__(self) -> Iterator[LuaScript]:
        return iter(self._scripts[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._scripts)

    # -- the server -----------------------------------------------------------------------
    @overload
    def load(self, client: AsyncClient) -> Coroutine[Any, Any, dict[str, str]]: ...
    @overload
    def load(self, client: SyncClient) -> dict[str, str]: ...
    def load(self, client: Any) -> Any:
        """SCRIPT LOAD every script on every node (one round trip each); {name: sha}.

        With a ``redis.asyncio`` client this returns a coroutine.
        """
        if is_async_client(client):
            from luapipe.scripts.aio import load_async

            return load_async(self, client)
        scripts = list(self)
        for _, node in cluster.all_nodes(client):
            with transport.session(node) as s:
                replies = s.execute([load_command(sc) for sc in scripts])
                for sc, reply in zip(scripts, replies, strict=True):
                    err = check_loaded(sc, reply)
                    if err is not None:
                        raise err
                    self.known.add(s.address, sc.sha)
        return {sc.name: sc.sha for sc in scripts}

    @overload
    def status(self, client: AsyncClient) -> Coroutine[Any, Any, list[NodeStatus]]: ...
    @overload
    def status(self, client: SyncClient) -> list[NodeStatus]: ...
    def status(self, client: Any) -> Any:
        """SCRIPT EXISTS for every script, per node (primaries first, then replicas)."""
        if is_async_client(client):
            from luapipe.scripts.aio import status_async

            return status_async(self, client)
        scripts = list(self)
        out: list[NodeStatus] = []
        for _, node in cluster.all_nodes(client):
            with transport.session(node) as s:
                states: tuple[ScriptState, ...] = ()
                if scripts:
                    (reply,) = s.execute([("SCRIPT", "EXISTS", *[sc.sha for sc in scripts])])
                    flags = transport.raise_for(reply)
                    states = tuple(
                        ScriptState(sc.name, sc.sha, bool(f))
                        for sc, f in zip(scripts, flags, strict=True)
                    )
                out.append(NodeStatus(s.address, states))
        return out

    @overload
    def flush(self, client: AsyncClient) -> Coroutine[Any, Any, list[str]]: ...
    @overload
    def flush(self, client: SyncClient) -> list[str]: ...
    def flush(self, client: Any) -> Any:
        """SCRIPT FLUSH on every node (every application's scripts); returns the nodes."""
        if is_async_client(client):
            from luapipe.scripts.aio import flush_async

            return flush_async(self, client)
        flushed = []
        for _, node in cluster.all_nodes(client):
            with transport.session(node) as s:
                transport.raise_for(s.execute([("SCRIPT", "FLUSH")])[0])
                self.known.forget(s.address)
                flushed.append(s.address)
        return flushed

    @overload
    def kill(self, client: AsyncClient) -> Coroutine[Any, Any, list[str]]: ...
    @overload
    def kill(self, client: SyncClient) -> list[str]: ...
    def kill(self, client: Any) -> Any:
        """SCRIPT KILL the script running on each node; returns the nodes where one was killed.

        A script that has already written cannot be stopped (Redis answers UNKILLABLE):
        that is raised as a :class:`ServerError` saying so, since only SHUTDOWN NOSAVE ends it.
        With a ``redis.asyncio`` client this returns a coroutine.
        """
        if is_async_client(client):
            from luapipe.scripts.aio import kill_async

            return kill_async(self, client)
        killed = []
        for _, node in cluster.all_nodes(client):
            with transport.session(node) as s:
                (reply,) = s.execute([("SCRIPT", "KILL")])
                if killed_by(reply, s.address):
                    killed.append(s.address)
        return killed

    @overload
    def call(
        self,
        client: AsyncClient,
        name: str,
        keys: Sequence[Value] = (),
        args: Sequence[Value] = (),
    ) -> Coroutine[Any, Any, Any]: ...
    @overload
    def call(
        self,
        client: SyncClient,
        name: str,
        keys: Sequence[Value] = (),
        args: Sequence[Value] = (),
    ) -> Any: ...
    def call(
        self,
        client: Any,
        name: str,
        keys: Sequence[Value] = (),
        args: Sequence[Value] = (),
    ) -> Any:
        """Run one script: one round trip in steady state; NOSCRIPT -> load, retry once.

        With a ``redis.asyncio`` client this returns a coroutine (``await reg.call(...)``).
        On a cluster the call goes to the primary owning its keys' slot; a redirect (slot
        moved, failover) refreshes the slot map and retries there: it had not run.
        """
        if is_async_client(client):
            from luapipe.scripts.aio import call_async

            return call_async(self, client, name, keys, args)
        script = self[name]
        script.check_call(keys, args)
        if not cluster.is_cluster(client):
            try:
                return self._call_node(client, script, keys, args)
            except cluster.Redirect as exc:
                raise ServerError(
                    f"{exc}: this server is a cluster node; {CLUSTER_HINT}",
                    like=redis_class_of_reply(str(exc)),
                ) from None

        def run(node: redis.Redis, asking: bool) -> Any:
            return self._call_node(node, script, keys, args, asking=asking)

        return cluster.on_slot_node(
            client,
            cluster.slot_of(client, keys),
            run,
            _did_not_run,
            attempts=REDIRECT_ATTEMPTS,
            what=f"script {name!r}",
            read_only=script.read_only,
        )

    def _call_node(
        self,
        client: redis.Redis,
        script: LuaScript,
        keys: Sequence[Value],
        args: Sequence[Value],
        *,
        asking: bool = False,
    ) -> Any:
        with transport.session(client) as s:
            node = s.address
            call = ScriptCall(script, tuple(keys), tuple(args))
            if self.known.has(node, script.sha):
                verb = "EVALSHA_RO" if script.read_only else "EVALSHA"
                cmd = (verb, script.sha, len(keys), *keys, *args)
                reply = s.execute([cmd], asking=True)[0] if asking else s.send_one(cmd)
                if reply.__class__ is not transport.ReplyError:
                    return reply
                if reply.is_redirect:
                    raise cluster.Redirect(reply.text)
                if not reply.is_noscript:
                    raise script_error(script, reply.text)
                self.known.discard(node, script.sha)
                # Once, as EVAL: a NOSCRIPT answer to it can only be the script's own error.
                (reply,) = s.execute([call.eval()], asking=asking)
                if isinstance(reply, transport.ReplyError) and reply.is_redirect:
                    raise cluster.Redirect(reply.text)
                if cached_by_eval(reply):
                    self.known.add(node, script.sha)
                return _raise_or_return(script_result(script, reply))
            plan = self.plan([call], node, transaction=False)  # SCRIPT LOAD + EVALSHA
            batch = plan.start()
            while batch:
                batch = plan.feed(s.execute(batch, asking=asking))
            result = plan.results[0]
            if isinstance(result, cluster.Redirect):
                raise result
            return _raise_or_return(result)

    @overload
    def pipeline(
        self, client: AsyncClient, *, transaction: bool = False
    ) -> AsyncScriptPipeline: ...
    @overload
    def pipeline(self, client: SyncClient, *, transaction: bool = False) -> ScriptPipeline: ...
    def pipeline(self, client: Any, *, transaction: bool = False) -> Any:
        """A pipeline that takes script calls and any redis-py command; see ScriptPipeline.

        With a ``redis.asyncio`` client: ``async with reg.pipeline(aclient) as p``.
        """
        if is_async_client(client):
            from luapipe.scripts.aio_pipeline import AsyncScriptPipeline as AsyncPipe

            return AsyncPipe(self, client, transaction=transaction)
        from luapipe.scripts.pipeline import ScriptPipeline

        return ScriptPipeline(self, client, transaction=transaction)

    def plan(self, entries: Sequence[Any], node: str, *, transaction: bool) -> Plan:
        return Plan(entries, self.known, node, transaction=transaction)


def _by_name(scripts: Iterable[LuaScript]) -> dict[str, LuaScript]:
    by_name: dict[str, LuaScript] = {}
    for s in scripts:
        if s.name in by_name:
            first = by_name[s.name]
            raise DuplicateScriptError(
                f"duplicate script name {s.name!r}: {first.path or '?'} and {s.path or '?'}"
            )
        by_name[s.name] = s
    return by_name


def is_async_client(client: object) -> bool:
    """A ``redis.asyncio`` client (Redis or RedisCluster, fakeredis's async one too); False
    for a sync one. Anything else (a URL string, a connection pool...) is a
    :class:`CallArgumentError`: every public method that takes a client asks this first."""
    if isinstance(client, redis.asyncio.Redis | redis.asyncio.RedisCluster):
        return True
    if isinstance(client, redis.Redis | redis.cluster.RedisCluster):
        return False
    shown = repr(client) if len(repr(client)) <= 60 else repr(client)[:57] + "..."
    hint = "; make one with redis.Redis.from_url(url)" if isinstance(client, str) else ""
    raise CallArgumentError(
        "expected a redis-py client (redis.Redis, redis.cluster.RedisCluster or their "
        f"redis.asyncio twins), got {type(client).__name__} {shown}{hint}"
    )


def require_sync(client: object, what: str) -> None:
    """A :class:`CallArgumentError` unless ``client`` is a sync redis-py client (for the
    functions that have no asyncio twin: deploy, verify)."""
    if is_async_client(client):
        raise CallArgumentError(
            f"{what} needs a sync client (redis.Redis or redis.cluster.RedisCluster), got "
            f"{type(client).__module__}.{type(client).__name__}"
        )


def killed_by(reply: Any, address: str) -> bool:
    """Whether SCRIPT KILL's ``reply`` killed a script (False: none was running); an
    UNKILLABLE or other error reply is raised."""
    if not isinstance(reply, transport.ReplyError):
        return True
    if reply.text.startswith("NOTBUSY"):
        return False
    if reply.text.startswith("UNKILLABLE"):
        raise ServerError(
            f"UNKILLABLE: the script running on {address} has already written "
            "and cannot be killed; wait for it (or SHUTDOWN NOSAVE, losing data)"
        )
    transport.raise_for(reply)
    return False


def _did_not_run(exc: Exception) -> str | None:
    """A redirect (its text) or a connection refused before sending (""): safe to retry."""
    if isinstance(exc, cluster.Redirect):
        return str(exc)
    return "" if isinstance(exc, ConnectionFailed) else None


def _raise_or_return(result: Any) -> Any:
    if isinstance(result, LuapipeError):
        raise result
    return result
