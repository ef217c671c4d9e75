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

A ``#!lua name=<library>`` file of the directory is a Redis Function library
(:class:`~luapipe.scripts.library.FunctionLibrary`), held beside the scripts:
``reg.libraries`` lists them, ``reg.library(name)`` is one, ``reg.function(name)`` returns
``(LuaFunction, FunctionLibrary)`` for a function name (what a call sends, and what to load
where the function is missing), ``reg.functions()`` the function names, and ``reg[name]``
stays the :class:`LuaScript` of a script. Script and function names share
one namespace: a clash (two files, or a script and a function, or two libraries) is one
error naming every clash.

Every method takes a sync or a ``redis.asyncio`` client (plain or cluster; with an asyncio
one it returns a coroutine): the work is written once as steps (:mod:`luapipe.scripts.calls`)
and run by the sync or the asyncio driver. ``reg.call`` on a plain client keeps a flattened
fast path for the steady state (one EVALSHA), then carries on with the same steps.
"""

from __future__ import annotations

import difflib
from collections.abc import Coroutine, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, overload

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from luapipe.errors import DuplicateScriptError, LuapipeError, ScriptError, UnknownScriptError
from luapipe.scripts.build import BuiltLibrary, build_library
from luapipe.scripts.calls import (
    NodeStatus,
    ScriptState,
    again_if_not_run,
    call_steps,
    eval_steps,
    flush_steps,
    function_call_steps,
    kill_steps,
    load_steps,
    status_steps,
)
from luapipe.scripts.compiler import compile_problems
from luapipe.scripts.fcall import FunctionCall
from luapipe.scripts.library import FunctionLibrary, LuaFunction
from luapipe.scripts.loader import scan
from luapipe.scripts.names import clash_error, name_clashes
from luapipe.scripts.pipeline import AsyncScriptPipeline, ScriptPipeline
from luapipe.scripts.problems import ScriptProblem, raise_problems
from luapipe.scripts.protocol import KnownScripts, ScriptCall
from luapipe.scripts.script import LuaScript, Value, call_values
from luapipe.wire import aio, drivers, sync
from luapipe.wire.clients import (
    AsyncClient,
    SyncClient,
    is_async_client,
    require_async_client,
)
from luapipe.wire.limits import might_exceed
from luapipe.wire.policy import DEFAULT, RetryPolicy
from luapipe.wire.replies import ReplyError
from luapipe.wire.routing import Steps, slot_of

__all__ = [
    "AsyncClient",
    "AsyncScriptPipeline",
    "NodeStatus",
    "ScriptRegistry",
    "ScriptState",
    "SyncClient",
    "bundled_scripts_dir",
    "call_async",
    "flush_async",
    "is_async_client",
    "kill_async",
    "load_async",
    "status_async",
]


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
    ``policy``: how redirects and failovers are retried
    (:class:`~luapipe.wire.policy.RetryPolicy`).
    """

    def __init__(
        self,
        scripts: Iterable[LuaScript],
        *,
        check: bool = True,
        strict: bool = True,
        problems: Iterable[ScriptProblem] = (),
        policy: RetryPolicy = DEFAULT,
        libraries: Iterable[FunctionLibrary] = (),
        functions: str | None = None,
    ) -> None:
        scripts = list(scripts)
        libraries = list(libraries)
        clashes = name_clashes(scripts, libraries)
        refused = clash_error(scripts, libraries) if strict else None
        if refused is not None:
            raise refused
        clashing = {p.path for p in clashes}
        self._scripts = _by_name(s for s in scripts if (s.path or s.name) not in clashing)
        self._libraries = {
            lib.name: lib for lib in libraries if (lib.path or lib.name) not in clashing
        }
        found = [*problems, *clashes]
        found += compile_problems(self._scripts.values()) if check else ()
        if strict:
            raise_problems(found)
        for problem in found:
            self._scripts.pop(problem.name, None)
        #: function name -> (function, its library): what reg.call looks up first
        self._fns: dict[str, tuple[LuaFunction, FunctionLibrary]] = {
            f.name: (f, lib)
            for lib in self._libraries.values()
            for f in (*lib.functions, *lib.later)
        }
        self._built: BuiltLibrary | None = None
        if functions is not None:  # the scripts that can, called as the built functions
            built = self._built = build_library(self._scripts.values(), functions)
            pairs = zip(built.scripts, built.functions, strict=True)
            self._fns.update((script, (fn, built)) for (script, _), fn in pairs)
        self._problems = tuple(sorted(found, key=lambda p: p.name))
        self.known = KnownScripts()
        self.policy = policy
        #: an auto-pipeline's steps after a reply that is not a value, per (name, cluster)
        self._recovers: dict[tuple[str, bool], Any] = {}

    @classmethod
    def from_directory(
        cls,
        directory: str | Path | None = None,
        *,
        strict: bool = True,
        functions: str | None = None,
    ) -> ScriptRegistry:
        """Every top-level ``*.lua`` in ``directory`` (default: the bundled library).

        ``strict=False``: a broken file (bad name, header or syntax) does not stop the
        others; see :attr:`problems`.

        ``functions="app"``: the scripts run as the functions of one library built from
        them (``luapipe functions build DIR --library app`` writes the same library):
        ``reg.call(client, "rate_limit", ...)`` and pipelines send ``FCALL
        luapipe_app_<hash>_rate_limit`` instead of ``EVALSHA``, loading the library where
        it is missing. Scripts a function cannot run stay scripts (:attr:`built` lists
        them, with the reason).
        """
        found = scan(directory if directory is not None else bundled_scripts_dir())
        return cls(
            found.scripts,
            strict=strict,
            problems=found.problems,
            libraries=found.libraries,
            functions=functions,
        )

    @property
    def problems(self) -> tuple[ScriptProblem, ...]:
        """The scripts set aside by ``strict=False`` (sorted by name), each with its reason."""
        return self._problems

    @property
    def built(self) -> BuiltLibrary | None:
        """The library the scripts run as (``functions="app"``), or None: its name, the
        function of each script (``built.scripts``) and the scripts left out
        (``built.skipped``, each with the reason)."""
        return self._built

    # -- the collection -------------------------------------------------------------------
    def names(self) -> list[str]:
        return sorted(self._scripts)

    @property
    def libraries(self) -> tuple[FunctionLibrary, ...]:
        """The Function libraries of the directory, sorted by library name."""
        return tuple(self._libraries[n] for n in sorted(self._libraries))

    def library(self, name: str) -> FunctionLibrary:
        """The Function library called ``name`` (:class:`UnknownScriptError`, a KeyError,
        if the registry has none)."""
        try:
            return self._libraries[name]
        except (KeyError, TypeError):
            raise UnknownScriptError(f"unknown library {name!r}") from None

    def functions(self) -> list[str]:
        """The names called as functions, sorted: every function of the libraries and, with
        ``functions="app"``, the scripts that run as the built library's functions."""
        return sorted(self._fns)

    def function(self, name: str) -> tuple[LuaFunction, FunctionLibrary]:
        """The function ``name`` and the library that registers it (what to load when a
        node answers ``ERR Function not found``); :class:`UnknownScriptError` otherwise."""
        found = self._fns.get(name) if isinstance(name, str) else None
        if found is not None:
            return found
        for problem in self._problems:
            if problem.name == name:
                raise ScriptError(f"{name!r} cannot be used: {problem.message}")
        if name in self._scripts:
            raise UnknownScriptError(f"{name!r} is a script, not a function: reg[{name!r}]")
        close = difflib.get_close_matches(str(name), self._fns, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownScriptError(f"unknown function {name!r}{hint}")

    def __getitem__(self, name: str) -> LuaScript:
        try:
            return self._scripts[name]
        except KeyError:
            pass
        except TypeError:  # unhashable
            pass
        if not isinstance(name, str):
            raise UnknownScriptError(
                f"a script name is a str, got {type(name).__name__} {name!r:.40}"
            )
        for problem in self._problems:
            if problem.name == name:
                raise ScriptError(f"script {name!r} cannot be used: {problem.message}")
        if name in self._fns:
            library = self._fns[name][1].name
            raise UnknownScriptError(
                f"{name!r} is a function of library {library!r}, not a script: "
                f"reg.function({name!r})"
            )
        close = difflib.get_close_matches(name, [*self._scripts, *self._fns], n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        what = "script or function" if self._fns else "script"  # a call names either
        raise UnknownScriptError(f"unknown {what} {name!r}{hint}")

    def function_call(
        self, name: str, keys: Sequence[Value], args: Sequence[Value]
    ) -> FunctionCall | None:
        """A checked call of the function ``name`` (None: no function of that name)."""
        found = self._fns.get(name) if name.__class__ is str else None
        if found is None:
            return None
        fn, lib = self._checked(name, keys, args)
        return FunctionCall(fn, lib, tuple(keys), tuple(args))

    def _checked(
        self, name: str, keys: Sequence[Value], args: Sequence[Value]
    ) -> tuple[LuaFunction, FunctionLibrary]:
        """The function ``name`` and its library, the call checked; a script the built
        library holds is checked as that script (its words, as without ``functions=``)."""
        fn, lib = self._fns[name]
        (self._scripts[name] if lib is self._built else fn).check_call(keys, args)
        return fn, lib

    def __contains__(self, name: object) -> bool:
        return name in self._scripts

    def __iter__(self) -> Iterator[LuaScript]:
        return iter(self._scripts[n] for n in self.names())

    def __len__(self) -> int:
        return len(self._scripts)

    # -- the server -----------------------------------------------------------------------
    @staticmethod
    def _run(steps: Steps[Any], client: Any) -> Any:
        """Run ``steps`` with the driver of ``client``'s flavour (a coroutine for asyncio).
        An auto-pipeline's admin work (load, status, flush, kill) runs on its client: SCRIPT
        KILL must not wait behind the busy script's own write."""
        if getattr(type(client), "luapipe_autopipeline", False):
            client = client.client
        if is_async_client(client):
            return drivers.drive_async(steps, client)
        return drivers.drive(steps, client)

    @overload
    def load(self, client: AsyncClient) -> Coroutine[Any, Any, dict[str, str]]: ...
    @overload
    def load(self, client: SyncClient) -> dict[str, str]: ...
    def load(self, client: Any) -> Any:
        """SCRIPT LOAD every script on every node (one round trip each); {name: sha}.

        All or nothing: a lenient registry with :attr:`problems` loads nothing and raises
        one error naming every broken file. With a ``redis.asyncio`` client this returns a
        coroutine.
        """
        return self._run(load_steps(list(self), self.known, self._problems), client)

    @overload
    def status(self, client: AsyncClient) -> Coroutine[Any, Any, list[NodeStatus]]: ...
    @overload
    def status(self, client: SyncClient) -> list[NodeStatus]: ...
    def status(self, client: Any) -> Any:
        """SCRIPT EXISTS for every script, per node (primaries first, then replicas)."""
        return self._run(status_steps(list(self)), client)

    @overload
    def flush(self, client: AsyncClient) -> Coroutine[Any, Any, list[str]]: ...
    @overload
    def flush(self, client: SyncClient) -> list[str]: ...
    def flush(self, client: Any) -> Any:
        """SCRIPT FLUSH on every node (every application's scripts); returns the nodes."""
        return self._run(flush_steps(self.known), client)

    @overload
    def kill(self, client: AsyncClient) -> Coroutine[Any, Any, list[str]]: ...
    @overload
    def kill(self, client: SyncClient) -> list[str]: ...
    def kill(self, client: Any) -> Any:
        """SCRIPT KILL (FUNCTION KILL for a function) what runs on each node; returns the
        nodes where a script or function was killed.

        One that has already written cannot be stopped (Redis answers UNKILLABLE): that is
        raised as a :class:`ServerError` saying so, since only SHUTDOWN NOSAVE ends it.
        """
        return self._run(kill_steps(), client)

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
        """Run one script or function: one round trip in steady state.

        A script goes as EVALSHA (NOSCRIPT -> load, retry once); a function of a library
        as FCALL (FCALL_RO for ``no-writes``): on the exact "ERR Function not found" its
        library is loaded (never replaced) on the slot's primary and the call sent again,
        in one atomic round trip (see :mod:`luapipe.scripts.fcall`).

        With a ``redis.asyncio`` client this returns a coroutine (``await reg.call(...)``).
        On a cluster the call goes to the primary owning its keys' slot; a redirect (slot
        moved, failover) refreshes the slot map and retries there: it had not run.
        """
        kind = _KINDS.get(client.__class__)
        if kind is None:
            kind = _KINDS[client.__class__] = _kind_of(client)
        if keys.__class__ not in _SEQUENCES:
            keys = call_values(name, "keys", keys)
        if args.__class__ not in _SEQUENCES:
            args = call_values(name, "args", args)
        if kind >= _ASYNC:
            if kind == _AUTO:  # an auto-pipeline: the call shares its node's next write
                if might_exceed(args) or might_exceed(keys):  # a big value: sizes checked
                    return client.run(self._sized_auto_steps(client, name, keys, args))
                if client.luapipe_async:
                    return self._call_auto_async(client, name, keys, args)
                words, slot, read_only, recover, hold = self._auto_call(client, name, keys, args)
                return client.call(
                    words, slot=slot, read_only=read_only, recover=recover, hold=hold
                )
            return self._call_async(client, name, keys, args, kind)
        if self._fns and name.__class__ is str and name in self._fns:
            return self._fcall(client, name, keys, args, kind)
        script = self[name]
        script.check_call(keys, args)
        if kind == _SYNC_CLUSTER or might_exceed(args) or might_exceed(keys):
            call = ScriptCall(script, tuple(keys), tuple(args))  # a big value: sizes checked
            cluster = kind == _SYNC_CLUSTER
            return drivers.drive(call_steps(call, self.known, self.policy, cluster=cluster), client)
        with sync.session(client) as s:  # the fast path: one EVALSHA in steady state
            first = None
            if self.known.has(s.address, script.sha):
                verb = "EVALSHA_RO" if script.read_only else "EVALSHA"
                reply = s.send_one((verb, script.sha, len(keys), *keys, *args))
                if reply.__class__ is not ReplyError:
                    return reply
                first = (s.address, reply)
            call = ScriptCall(script, tuple(keys), tuple(args))
            steps = call_steps(call, self.known, self.policy, cluster=False, first=first)
            return drivers.Driver(client, s).run(steps)

    def _fcall(
        self, client: Any, name: str, keys: Sequence[Value], args: Sequence[Value], kind: int
    ) -> Any:
        fn, lib = self._checked(name, keys, args)
        if kind == _SYNC_CLUSTER or might_exceed(args) or might_exceed(keys):
            call = FunctionCall(fn, lib, tuple(keys), tuple(args))  # a big value: sizes checked
            cluster = kind == _SYNC_CLUSTER
            return drivers.drive(function_call_steps(call, self.policy, cluster=cluster), client)
        with sync.session(client) as s:  # the fast path: one FCALL in steady state
            reply = s.send_one(fn.fcall_args(keys, args))
            if reply.__class__ is not ReplyError:
                return reply
            call = FunctionCall(fn, lib, tuple(keys), tuple(args))
            steps = function_call_steps(call, self.policy, cluster=False, first=(s.address, reply))
            return drivers.Driver(client, s).run(steps)

    async def _fcall_async(self, client: Any, call: FunctionCall, kind: int) -> Any:
        big = might_exceed(call.args) or might_exceed(call.keys)
        if kind == _ASYNC_CLUSTER or client.single_connection_client or big:
            steps = function_call_steps(call, self.policy, cluster=kind == _ASYNC_CLUSTER)
            return await drivers.drive_async(steps, client)
        pool = client.connection_pool  # the fast path, as for scripts below
        conn = await aio.acquire(pool)
        s = aio.AsyncSession(client, conn)
        try:
            reply = await s.send_one(call.fcall_args())
            if reply.__class__ is not ReplyError:
                return reply
            steps = function_call_steps(call, self.policy, cluster=False, first=(s.address, reply))
            return await drivers.AsyncDriver(client, s).run(steps)
        finally:
            await s.close_if_dirty()
            await pool.release(conn)

    async def _call_async(
        self, client: Any, name: str, keys: Sequence[Value], args: Sequence[Value], kind: int
    ) -> Any:
        fcall = self.function_call(name, keys, args) if self._fns else None
        if fcall is not None:
            return await self._fcall_async(client, fcall, kind)
        script = self[name]
        script.check_call(keys, args)
        call = ScriptCall(script, tuple(keys), tuple(args))
        big = might_exceed(args) or might_exceed(keys)
        if kind == _ASYNC_CLUSTER or client.single_connection_client or big:
            steps = call_steps(call, self.known, self.policy, cluster=kind == _ASYNC_CLUSTER)
            return await drivers.drive_async(steps, client)
        # The fast path, flattened (no context manager): same steps as aio.async_session.
        pool = client.connection_pool
        conn = await aio.acquire(pool)
        s = aio.AsyncSession(client, conn)
        try:
            first = None
            if self.known.has(s.address, script.sha):
                reply = await s.send_one(call.evalsha_args())
                if reply.__class__ is not ReplyError:
                    return reply
                first = (s.address, reply)
            steps = call_steps(call, self.known, self.policy, cluster=False, first=first)
            return await drivers.AsyncDriver(client, s).run(steps)
        finally:
            await s.close_if_dirty()
            await pool.release(conn)

    def _auto_call(
        self, client: Any, name: str, keys: Sequence[Value], args: Sequence[Value]
    ) -> tuple[tuple[Any, ...], int | None, bool, Any, Any]:
        """What an auto-pipeline sends for this call, its slot, whether it is read-only,
        the steps that carry on after a reply that is not a value (or a failed write), and
        what those steps heal (the auto-pipeline holds later calls back from its write).

        A script goes as EVAL (a flushed cache cannot refuse it, so no later call
        overtakes it; :func:`~luapipe.scripts.calls.eval_steps`); a function as FCALL,
        healed as ``reg.call`` heals it (the auto-pipeline ends the write after an FCALL,
        so the heal still goes ahead of later calls)."""
        cluster = client.on_cluster
        fc = self.function_call(name, keys, args) if self._fns else None
        if fc is not None:
            hold = ("function", fc.function.name)
            slot = slot_of(fc.keys) if cluster else None
            return fc.fcall_args(), slot, fc.read_only, self._auto_recover(name, cluster), hold
        script = self[name]
        script.check_call(keys, args)
        read_only = script.read_only
        words = ("EVAL_RO" if read_only else "EVAL", script.source, len(keys), *keys, *args)
        slot = slot_of(keys) if cluster else None
        return words, slot, read_only, self._auto_recover(name, cluster), None

    def _sized_auto_steps(
        self, client: Any, name: str, keys: Sequence[Value], args: Sequence[Value]
    ) -> Steps[Any]:
        """An auto-pipelined call holding a value of 1 MB or more: the steps the client
        runs, which refuse a value over the node's proto-max-bulk-len before sending (sent,
        the server's protocol error would close the connection the other callers share)."""
        cluster = client.on_cluster
        fc = self.function_call(name, keys, args) if self._fns else None
        if fc is not None:
            return function_call_steps(fc, self.policy, cluster=cluster)
        script = self[name]
        script.check_call(keys, args)
        call = ScriptCall(script, tuple(keys), tuple(args))
        return call_steps(call, self.known, self.policy, cluster=cluster)

    def _auto_recover(self, name: str, cluster: bool) -> Any:
        """The steps after an auto-pipelined call of ``name`` whose first reply was not a
        value: one per name (the call's words rebuild its keys and args)."""
        found = self._recovers.get((name, cluster))
        if found is not None:
            return found
        policy = self.policy
        if name in self._fns:
            fn, lib = self._fns[name]

            def fn_recover(node: str | None, outcome: Any, words: tuple[Any, ...]) -> Steps[Any]:
                n = int(words[2])
                fc = FunctionCall(fn, lib, tuple(words[3 : 3 + n]), tuple(words[3 + n :]))
                if isinstance(outcome, LuapipeError):  # the write failed
                    return again_if_not_run(
                        outcome, function_call_steps(fc, policy, cluster=cluster), policy
                    )
                if cluster and fc.read_only and getattr(outcome, "is_function_not_found", False):
                    # it may have been a replica: heal on the slot's primary, from the start
                    return function_call_steps(fc, policy, cluster=cluster)
                first = (node or "", outcome)
                return function_call_steps(fc, policy, cluster=cluster, first=first)

            found = self._recovers[name, cluster] = fn_recover
            return found
        script = self[name]

        def recover(node: str | None, outcome: Any, words: tuple[Any, ...]) -> Steps[Any]:
            n = int(words[2])
            call = ScriptCall(script, tuple(words[3 : 3 + n]), tuple(words[3 + n :]))
            return eval_steps(call, policy, cluster=cluster, first=(node, outcome))

        found = self._recovers[name, cluster] = recover
        return found

    async def _call_auto_async(
        self, client: Any, name: str, keys: Sequence[Value], args: Sequence[Value]
    ) -> Any:
        words, slot, read_only, recover, hold = self._auto_call(client, name, keys, args)
        return await client.call(words, slot=slot, read_only=read_only, recover=recover, hold=hold)

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
        if getattr(type(client), "luapipe_autopipeline", False):
            client = client.client  # an explicit pipeline is its own round trip
        if is_async_client(client):
            return AsyncScriptPipeline(self, client, transaction=transaction)
        return ScriptPipeline(self, client, transaction=transaction)


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


_SYNC, _SYNC_CLUSTER, _ASYNC, _ASYNC_CLUSTER, _AUTO = range(5)
_SEQUENCES = frozenset({list, tuple})
_KINDS: dict[type, int] = {}


def _kind_of(client: object) -> int:
    """The kind of ``client`` (a CallArgumentError for anything but a redis-py client)."""
    if getattr(type(client), "luapipe_autopipeline", False):
        return _AUTO
    if is_async_client(client):
        return _ASYNC_CLUSTER if isinstance(client, redis.asyncio.cluster.RedisCluster) else _ASYNC
    return _SYNC_CLUSTER if isinstance(client, redis.cluster.RedisCluster) else _SYNC


# -- the asyncio names of luapipe 0.1 (``luapipe.scripts.aio``) ---------------------------
async def load_async(registry: ScriptRegistry, client: Any) -> dict[str, str]:
    """``await reg.load(aclient)``."""
    require_async_client(client, "load_async", "reg.load(client)")
    result: dict[str, str] = await registry.load(client)
    return result


async def status_async(registry: ScriptRegistry, client: Any) -> list[NodeStatus]:
    """``await reg.status(aclient)``."""
    require_async_client(client, "status_async", "reg.status(client)")
    result: list[NodeStatus] = await registry.status(client)
    return result


async def flush_async(registry: ScriptRegistry, client: Any) -> list[str]:
    """``await reg.flush(aclient)``."""
    require_async_client(client, "flush_async", "reg.flush(client)")
    result: list[str] = await registry.flush(client)
    return result


async def kill_async(registry: ScriptRegistry, client: Any) -> list[str]:
    """``await reg.kill(aclient)``."""
    require_async_client(client, "kill_async", "reg.kill(client)")
    result: list[str] = await registry.kill(client)
    return result


async def call_async(
    registry: ScriptRegistry,
    client: Any,
    name: str,
    keys: Sequence[Value] = (),
    args: Sequence[Value] = (),
) -> Any:
    """``await reg.call(aclient, ...)``."""
    require_async_client(client, "call_async", "reg.call(client, ...)")
    return await registry.call(client, name, keys, args)
