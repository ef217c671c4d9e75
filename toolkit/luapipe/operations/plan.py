"""The data a generated module hands to the form runners, a call's environment, and reply
normalisation.

A :class:`Plan` holds the compiled Python of one operation (its expressions as lambdas over an
environment dict) plus its generated Lua; :func:`plan_of` compiles it once per operation;
:func:`bind` checks a call's keys and args into its environment (nothing is sent on error);
replies are normalised so RESP2/RESP3 and ``decode_responses`` give the same Python values.
"""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias, TypeVar

import redis.exceptions as rex

from luapipe.errors import CallArgumentError, TransactionAborted
from luapipe.operations import prelude
from luapipe.wire.replies import ReplyError, full_error_text, raise_for
from luapipe.wire.values import shown

__all__ = [
    "Cmd",
    "Plan",
    "ReadStep",
    "RunResult",
    "TransactionAborted",
    "Batches",
    "Generated",
    "WriteStep",
    "bind",
    "check",
    "enc",
    "encode",
    "flat",
    "opt_text",
    "plan_of",
    "score",
    "to_wire",
    "wire",
]

Env = dict[str, Any]
Fn = Callable[[Env], Any]
Cmd = tuple[Any, ...]
T = TypeVar("T")
#: One form's work on one node as an I/O-free generator: it yields a batch of commands (one
#: round trip), is sent the replies (error replies as
#: :class:`~luapipe.wire.replies.ReplyError` in their slots) and returns its result.
#: :mod:`luapipe.operations.run` turns batches into requests for the drivers.
Batches: TypeAlias = Generator[list[Cmd], list[Any], T]
Steps: TypeAlias = Generator[
    list[Cmd], list[Any], T
]  # the name the cluster forms still use (until they run on the table)


@dataclass(frozen=True)
class ReadStep:
    name: str
    level: int
    cmd: str
    key: Fn
    args: tuple[Fn, ...]
    each: Fn | None
    convert: Callable[[Any, Env], Any]


@dataclass(frozen=True)
class WriteStep:
    """One write; a named one binds its reply, converted, to ``name`` for the returns."""

    cmd: str
    key: Fn
    args: tuple[Fn, ...]
    when: Fn | None
    each: Fn | None
    name: str | None = None
    convert: Callable[[Any], Any] | None = None


@dataclass(frozen=True)
class Plan:
    name: str
    keys: tuple[tuple[str, bool], ...]
    args: tuple[tuple[str, str], ...]
    reads: tuple[ReadStep, ...]
    lets: tuple[tuple[str, Fn], ...]
    writes: tuple[WriteStep, ...]
    returns: Fn
    lua_script: str
    lua_library: str
    function_name: str
    read_only: bool
    invariant: Fn | None = None
    #: the returns use a write's reply: computed after the writes (else before any is sent)
    late_returns: bool = False

    @property
    def levels(self) -> int:
        return max((r.level + 1 for r in self.reads), default=0)


@dataclass(frozen=True)
class RunResult:
    """One call: the reply, round trips and commands sent, WATCH retries."""

    value: Any
    form: str
    round_trips: int
    retries: int = 0


# -- reply normalisation (RESP2/RESP3, decoded or not) ------------------------------------


def flat(reply: Any) -> list[Any]:
    if reply is None:
        return []
    if isinstance(reply, dict):
        return [x for kv in reply.items() for x in kv]
    return list(reply)


def score(reply: Any) -> float | None:
    if reply is None:
        return None
    return float(reply) if isinstance(reply, float) else float(prelude.text(reply))


def opt_text(reply: Any) -> str | None:
    return None if reply is None else prelude.text(reply)


def wire(reply: Any) -> Any:
    """A script/function reply as the Python forms return it."""
    if isinstance(reply, list):
        return [wire(x) for x in reply]
    if reply is False:
        return None
    if reply is True:
        return 1
    if isinstance(reply, bytes | str):
        return prelude.text(reply)
    return reply


def check(reply: Any) -> Any:
    if isinstance(reply, rex.ResponseError):
        reply = ReplyError(full_error_text(reply))
    return raise_for(reply)


def enc(v: Any) -> Any:
    return v.encode("utf-8", "surrogateescape") if isinstance(v, str) else v


def encode(cmds: Sequence[Cmd]) -> list[Cmd]:
    """Commands as sent: every str as UTF-8 (surrogates kept) bytes."""
    return [tuple(enc(x) for x in c) for c in cmds]


# -- arguments ---------------------------------------------------------------------------


def to_wire(v: Any) -> list[str]:
    if isinstance(v, list):
        return [x for item in v for x in to_wire(item)]
    if isinstance(v, bool):
        return ["1" if v else "0"]
    if isinstance(v, float):
        return [prelude.fmt(v)]
    return [str(v)]


# -- a call's environment ------------------------------------------------------------


def _arg_value(name: str, kind: str, v: Any) -> Any:
    ok = {
        "int": isinstance(v, int) and not isinstance(v, bool) and abs(v) < prelude.LIMIT,
        "float": isinstance(v, int | float)
        and not isinstance(v, bool)
        and v == v
        and abs(v) != float("inf"),
        "str": isinstance(v, str),
        "bool": isinstance(v, bool),
    }
    if kind.startswith("list["):
        if not isinstance(v, list | tuple) or not v:
            raise CallArgumentError(f"argument {name!r} must be a non-empty {kind}")
        return [_arg_value(name, kind[5:-1], x) for x in v]
    if not ok[kind]:
        raise CallArgumentError(f"argument {name!r} must be a {kind}, got {shown(v)}")
    return float(v) if kind == "float" else v


def bind(plan: Plan, keys: Mapping[str, Any], args: Mapping[str, Any]) -> Env:
    """The environment of a call; checks names and types (nothing sent on error)."""
    want_k, want_a = {k for k, _ in plan.keys}, {a for a, _ in plan.args}
    if set(keys) != want_k:
        raise CallArgumentError(f"{plan.name}: keys must be {sorted(want_k)}, got {sorted(keys)}")
    if set(args) != want_a:
        raise CallArgumentError(f"{plan.name}: args must be {sorted(want_a)}, got {sorted(args)}")
    env: Env = {}
    for k, variadic in plan.keys:
        v = keys[k]
        if (
            variadic != isinstance(v, list | tuple)
            or (variadic and not v)
            or not all(isinstance(x, str) for x in (v if variadic else [v]))
        ):
            raise CallArgumentError(
                f"key {k!r} must be {'a non-empty list of str' if variadic else 'a str'}"
            )
        env[k] = list(v) if variadic else v
    for a, kind in plan.args:
        env[a] = _arg_value(a, kind, args[a])
    return env


# -- the plan of an operation ------------------------------------------------------------


class Generated(Protocol):
    """What :func:`plan_of` needs of an operation: its name and generated Python."""

    @property
    def name(self) -> str: ...

    @property
    def python_source(self) -> str: ...


_LOCK = threading.Lock()
_PLANS: dict[str, Plan] = {}


def plan_of(op: Generated) -> Plan:
    """The Plan of the generated module, compiled once (text generated from the checked AST)."""
    src = op.python_source
    with _LOCK:
        plan = _PLANS.get(src)
    if plan is None:
        module = types.ModuleType(f"luapipe_generated_op_{op.name}")
        exec(compile(src, f"<op_{op.name}.py>", "exec"), module.__dict__)
        plan = module.PLAN
        with _LOCK:
            _PLANS[src] = plan
    assert isinstance(plan, Plan)
    return plan
