"""One call of a team's script in each of its forms, as :class:`~luapipe.bench.opcalls.OpCalls`
times it: the keys and args a case holds (by name) put in order, the call, its reply.

- ``script`` / ``function``: ``reg.call`` of the script's registry (EVALSHA) or of the one
  built with its Function twin (FCALL);
- a Python form: its function with the client, the keys and the args
  (:mod:`luapipe.bench.pyforms`); an ``async def`` runs on a loop of its own in the sync
  loop, or is awaited with ``--tasks``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from luapipe.bench.opcalls import OpCalls
from luapipe.bench.pyforms import AsyncCaller, PythonForm, awaitable_error, load_callable
from luapipe.errors import LuapipeError
from luapipe.scripts.header import Param
from luapipe.wire.routing import is_cluster

__all__ = ["Calls", "Flag", "Result", "Target", "async_runner", "positional", "sync_runner"]

Run = Callable[[Any, str, dict[str, Any], dict[str, Any]], Any]


@dataclass(frozen=True)
class Result:
    """What OpCalls reads of a call: its reply, and its WATCH retries (none seen here)."""

    value: Any
    retries: int = 0


@dataclass(frozen=True)
class Flag:
    """What OpCalls reads of an operation: how to tell from a reply that a call wrote."""

    wrote: str | None


class Calls(OpCalls):
    """OpCalls with the hooks an asyncio form needs in the sync loop: the counts of its own
    client, and closing it when the slice ends (see the ``Workload`` protocol)."""

    caller: AsyncCaller | None = None

    def counts(self) -> Any:
        return self.caller.counts() if self.caller is not None else None

    def close(self) -> None:
        if self.caller is not None:
            self.caller.close()


def positional(params: Sequence[Param], values: dict[str, Any]) -> list[Any]:
    """A case's keys or args (by name) as the call passes them: in the header's order,
    variadic ones spread, stopping at an optional one left out."""
    out: list[Any] = []
    for p in params:
        if p.name not in values:
            break
        v = values[p.name]
        out.extend(v if isinstance(v, list | tuple) else (v,))
    return out


@dataclass(frozen=True)
class Target:
    """What a form calls: the script (by its name) through ``registry``, or ``python``."""

    name: str
    keys: tuple[Param, ...]
    args: tuple[Param, ...]
    registry: Any = None
    python: PythonForm | None = None


#: what the bench's loops count as a failed call; a Python form's other errors join them
_COUNTED = (redis.RedisError, LuapipeError, OSError)


def _raised(form: str, exc: Exception) -> LuapipeError:
    """A Python form's own error (not redis-py's) as one the loops count: the README's
    "raise on an error: it is counted, and the loop goes on"."""
    return LuapipeError(f"form {form}: {type(exc).__name__}: {exc}")


def sync_runner(t: Target, client: Any) -> tuple[Run, AsyncCaller | None]:
    """The call of one form in the sync loop, and the asyncio caller it owns (if any)."""
    keys_of, args_of = t.keys, t.args
    if t.python is None:
        reg, name = t.registry, t.name

        def registered(c: Any, f: str, keys: dict[str, Any], args: dict[str, Any]) -> Result:
            return Result(reg.call(c, name, positional(keys_of, keys), positional(args_of, args)))

        return registered, None
    fn = load_callable(t.python.target, f"form {t.python.name}")
    if not t.python.is_async:

        def plain(c: Any, f: str, keys: dict[str, Any], args: dict[str, Any]) -> Result:
            try:
                value = fn(c, positional(keys_of, keys), positional(args_of, args))
            except _COUNTED:
                raise
            except Exception as exc:
                raise _raised(f, exc) from exc
            hidden = awaitable_error(f"form {f}", value)
            if hidden is not None:  # counted as a failed call, with the reason
                raise hidden
            return Result(value)

        return plain, None
    if is_cluster(client):
        raise LuapipeError(f"{t.python.name}: an asyncio Python form runs on a single server")
    caller = AsyncCaller(fn, client)

    def awaited(c: Any, f: str, keys: dict[str, Any], args: dict[str, Any]) -> Result:
        try:
            return Result(caller(positional(keys_of, keys), positional(args_of, args)))
        except _COUNTED:
            raise
        except Exception as exc:
            raise _raised(f, exc) from exc

    return awaited, caller


def async_runner(t: Target) -> Run:
    """The call of one form with ``--tasks`` (an awaitable): the script and its function
    through the registry, an ``async def`` form with the client itself; a plain function
    would block the event loop."""
    keys_of, args_of = t.keys, t.args
    if t.python is None:
        reg, name = t.registry, t.name

        async def registered(c: Any, f: str, keys: dict[str, Any], args: dict[str, Any]) -> Result:
            keys_l, args_l = positional(keys_of, keys), positional(args_of, args)
            return Result(await reg.call(c, name, keys_l, args_l))

        return registered
    if not t.python.is_async:
        raise LuapipeError(
            f"{t.python.name}: a plain Python function is timed with --tasks 1 (an async def "
            "runs with --tasks N)"
        )
    fn = load_callable(t.python.target, f"form {t.python.name}")

    async def awaited(c: Any, f: str, keys: dict[str, Any], args: dict[str, Any]) -> Result:
        try:
            return Result(await fn(c, positional(keys_of, keys), positional(args_of, args)))
        except _COUNTED:
            raise
        except Exception as exc:
            raise _raised(f, exc) from exc

    return awaited
