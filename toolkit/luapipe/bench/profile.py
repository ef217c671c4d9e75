"""Benchmark cases from an operation's bench profile, and how each call draws its args.

A case is an initial keyspace in its own namespace (``{luapipe:bench:<op>:<i>}:``) plus keys
and arguments. With a ``[bench]`` table (see :mod:`luapipe.operations.benchprofile`) the
state is the declared one and arguments marked as ranges or samples are drawn anew for
every call; without one, :func:`default_case` samples a case as ``verify`` does but without
its deliberate edge cases (wrong types, non-numbers), and the workload keeps only cases whose
trial calls take the write path.

A *copy* of a case is the same state under another namespace
(``{luapipe:bench:<op>:<i>.<j>}:``): ``renew`` moves calls to a fresh copy (see
:class:`Copies`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from typing import Any

from luapipe.operations.benchprofile import ArgDraw, BenchDraw, flag_of
from luapipe.operations.casegen import Case, KeyState, sample_case

__all__ = [
    "DEFAULT_KEY_COUNT",
    "DEFAULT_WRITE_SHARE",
    "CallArgs",
    "copy_namespace",
    "default_case",
    "profile_case",
    "rebase",
    "wrote_in",
]

DEFAULT_KEY_COUNT = 5  # keys of a variadic key, unless the profile says otherwise
DEFAULT_WRITE_SHARE = 0.9  # what a profile-less operation aims for (if it writes at all)
_EDGE_TEXT = ("abc", "", "1.5", " 1", "x y", "é")


def copy_namespace(namespace: str, copy: str) -> str:
    """``{luapipe:bench:op:3}:`` -> ``{luapipe:bench:op:3.<copy>}:``."""
    return namespace[:-2] + f".{copy}" + "}:" if namespace.endswith("}:") else namespace + copy


def rebase(case: Case, namespace: str) -> Case:
    """``case`` with every key (and key-prefix argument) moved to ``namespace``."""
    old = case.namespace

    def move(v: Any) -> Any:
        if isinstance(v, str) and v.startswith(old):
            return namespace + v[len(old) :]
        if isinstance(v, tuple):
            return tuple(move(x) for x in v)
        return v

    return replace(
        case,
        namespace=namespace,
        keys=tuple((k, move(v)) for k, v in case.keys),
        args=tuple((k, move(v)) for k, v in case.args),
        state=tuple(replace(s, key=move(s.key)) for s in case.state),
        universe=tuple(move(u) for u in case.universe),
    )


def profile_case(op: Any, draw: BenchDraw, namespace: str, rng: random.Random) -> Case:
    """The declared initial state and keys in ``namespace``; arguments at a first draw."""
    counts = dict(draw.key_count)
    keys: list[tuple[str, Any]] = []
    for k in op.keys:
        if k.variadic:
            n = counts.get(k.name, DEFAULT_KEY_COUNT)
            keys.append((k.name, tuple(f"{namespace}{k.name}:{i}" for i in range(n))))
        else:
            keys.append((k.name, f"{namespace}{k.name}"))
    args = [(a.name, _first(op, a.name, draw, namespace, rng)) for a in op.args]
    named = dict(keys) | dict(args)
    state: list[KeyState] = []
    universe = [x for _, v in keys for x in (v if isinstance(v, tuple) else (v,))]
    for init in draw.state:
        if init.family == "prefix":
            for suffix, text in init.value:
                key = f"{named[init.name]}{suffix}"
                state.append(KeyState(key, "string", (text,)))
                universe.append(key)
            continue
        where = named[init.name]
        for key in where if isinstance(where, tuple) else (where,):
            state.append(KeyState(key, init.family, init.value))
    return Case(0, 0, namespace, tuple(keys), tuple(args), tuple(state), tuple(universe))


def _first(op: Any, name: str, draw: BenchDraw, namespace: str, rng: random.Random) -> Any:
    d = draw.arg(name)
    spec = next(a for a in op.args if a.name == name)
    if d is None:
        d = domain_draw(spec)
    v = d.draw(rng)
    v = tuple(v) if isinstance(v, list) else v
    return namespace + v if spec.key_prefix and isinstance(v, str) else v


def domain_draw(spec: Any) -> ArgDraw:
    """An argument the profile does not mention: drawn from its declared domain (samples,
    else min..max), else one plain value of its type."""
    kind = spec.type.kind
    if spec.samples:
        return ArgDraw(spec.name, kind, samples=tuple(spec.samples))
    if spec.min is not None and spec.max is not None and kind in ("int", "float"):
        return ArgDraw(spec.name, kind, lo=spec.min, hi=spec.max)
    plain = {"int": 1, "float": 1.0, "str": "x", "bool": True, "list": ("x",)}
    return ArgDraw(spec.name, kind, plain.get(kind, "x"))


@dataclass(frozen=True)
class CallArgs:
    """Per call: the arguments drawn anew (ranges, samples); the rest stay as the case's."""

    draws: tuple[tuple[ArgDraw, bool], ...]  # (draw, key_prefix)

    @classmethod
    def of(cls, op: Any, draw: BenchDraw | None) -> CallArgs:
        if draw is None:
            return cls(())
        out = []
        for spec in op.args:
            d = draw.arg(spec.name)
            if d is None:
                d = domain_draw(spec)
            if not d.fixed:
                out.append((d, bool(spec.key_prefix)))
        return cls(tuple(out))

    def apply(self, args: dict[str, Any], namespace: str, rng: random.Random) -> dict[str, Any]:
        if not self.draws:
            return args
        out = dict(args)
        for d, prefix in self.draws:
            v = d.draw(rng)
            out[d.name] = namespace + v if prefix and isinstance(v, str) else v
        return out


def default_case(op: Any, rng: random.Random, namespace: str, scale: int = 1) -> Case:
    """A ``verify``-style case without its deliberate edge cases: no key of the wrong type,
    no non-numeric or out-of-range text, nothing missing that a number is read from; ``scale``
    multiplies the numbers of the initial state (stock that does not run out)."""
    for _ in range(50):
        case = sample_case(op, rng, namespace)
        state = []
        for s in case.state:
            if s.type == "string" and s.value and s.value[0] in _EDGE_TEXT:
                break
            state.append(replace(s, value=tuple(_scaled(v, scale) for v in s.value), ttl=False))
        else:
            return replace(case, state=tuple(state))
    return case


def _scaled(v: Any, scale: int) -> Any:
    if scale == 1 or not isinstance(v, str):
        return v
    try:
        n = int(v)
    except ValueError:
        return v
    return str(abs(n) * scale if abs(n) * scale < 2**52 else n)


def wrote_in(flag: str | None, value: Any) -> bool | None:
    """Did the call whose reply is ``value`` take the write path? None when the reply
    cannot tell (see :func:`luapipe.operations.benchprofile.write_flag`)."""
    kind, index = flag_of(flag)
    if kind == "always":
        return True
    if kind == "never":
        return False
    if kind != "reply":
        return None
    if index is not None:
        value = value[index] if isinstance(value, list | tuple) and len(value) > index else None
    return bool(value == 1)
