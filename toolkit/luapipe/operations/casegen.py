"""Random cases for an operation: an initial keyspace plus keys and args (verify, bench).

Key types come from the commands that touch each key; values mix ordinary ones with edge
cases (0, negatives, 2^53 +- 1, non-numbers, empty strings, non-ASCII), keys are missing a
quarter of the time and hold the wrong type now and then.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from luapipe.operations.commands import READS, WRITES
from luapipe.operations.model import Expr, OperationModel
from luapipe.operations.prelude import fmt

__all__ = ["Case", "KeyState", "sample_case"]

TOKENS = ("a", "b", "c", "1", "2", "x y", "é")
INT_EDGES = (0, 1, -1, 2, 3, 5, 10, 100, -7, 2**53 - 1, -(2**53 - 1), 2**31)
INT_TEXT_EDGES = ("9007199254740992", "-9007199254740993", "abc", "", "1.5", "007", " 1")
FLOAT_EDGES = (0.0, 1.5, -2.25, 0.1, 1e-3, 1e15, -0.0, 3.0)
FAMILIES = ("string", "hash", "zset", "list", "set")


@dataclass(frozen=True)
class KeyState:
    """One key of an initial keyspace."""

    key: str
    type: str
    value: tuple[Any, ...]
    ttl: bool = False

    def commands(self) -> Iterator[tuple[Any, ...]]:
        v = self.value
        if self.type == "string":
            yield ("SET", self.key, v[0])
        elif self.type == "hash":
            yield ("HSET", self.key, *[x for pair in v for x in pair])
        elif self.type == "zset":
            yield ("ZADD", self.key, *[x for m, s in v for x in (fmt(s), m)])
        elif self.type == "list":
            yield ("RPUSH", self.key, *v)
        else:
            yield ("SADD", self.key, *v)
        if self.ttl:
            yield ("PEXPIRE", self.key, 3_600_000)


@dataclass(frozen=True)
class Case:
    """A reproducible case: ``index`` of ``seed``; ``universe`` = every key it may touch."""

    seed: int
    index: int
    namespace: str
    keys: tuple[tuple[str, Any], ...]
    args: tuple[tuple[str, Any], ...]
    state: tuple[KeyState, ...]
    universe: tuple[str, ...]

    @property
    def keys_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.keys}

    @property
    def args_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.args}

    def without(self, i: int) -> Case:
        return replace(self, state=self.state[:i] + self.state[i + 1 :])


def _int(rng: random.Random, lo: Any = None, hi: Any = None) -> int:
    """An int; within [lo, hi] when the spec declares that domain (edges of it included)."""
    if lo is not None and hi is not None:
        a, b = int(lo), int(hi)
        return rng.choice([a, b, rng.randint(a, b), rng.randint(a, b)])
    return rng.choice(INT_EDGES) if rng.random() < 0.5 else rng.randint(-20, 50)


def _scalar(rng: random.Random, kind: str, spec: Any, ns: str) -> Any:
    value = _raw_scalar(rng, kind, spec)
    # a key prefix stays in the namespace (on a cluster: its hash tag) whatever its value
    return ns + value if getattr(spec, "key_prefix", False) and isinstance(value, str) else value


def _raw_scalar(rng: random.Random, kind: str, spec: Any) -> Any:
    samples = getattr(spec, "samples", ())
    if samples and rng.random() < 0.9:
        return rng.choice(samples)
    if kind == "int":
        return _int(rng, getattr(spec, "min", None), getattr(spec, "max", None))
    if kind == "float":
        lo, hi = getattr(spec, "min", None), getattr(spec, "max", None)
        if lo is not None and hi is not None:
            return rng.choice([float(lo), float(hi), round(rng.uniform(lo, hi), 3)])
        return rng.choice(FLOAT_EDGES)
    if kind == "bool":
        return rng.random() < 0.5
    return rng.choice(TOKENS)


def _families(op: OperationModel) -> tuple[dict[str, str], dict[str, str]]:
    """Key name (static) or command position (dynamic) -> the family it is used as."""
    static: dict[str, str] = {}
    dynamic: dict[str, str] = {}
    steps: list[tuple[str, Expr, bool]] = [
        (READS[r.cmd].family, r.key, r.dynamic) for r in op.reads
    ]
    steps += [(WRITES[w.cmd], w.key, w.dynamic) for w in op.writes]
    for family, key, is_dynamic in steps:
        if family == "any":
            continue
        if is_dynamic:
            dynamic.setdefault(key.text, family)
        else:
            static.setdefault(key.text.strip(), family)
    return static, dynamic


def _int_like(op: OperationModel) -> bool:
    """Whether values should mostly be numbers: read as ints, counted, or a named write's
    reply converted to a number (edge values still come now and then)."""
    counters = ("INCR", "INCRBY", "DECR", "DECRBY", "HINCRBY", "INCRBYFLOAT", "HINCRBYFLOAT")
    return (
        any(r.conv == "int" for r in op.reads)
        or any(w.cmd in counters for w in op.writes)
        or any(w.conv is not None for w in op.writes)
    )


def _value(
    rng: random.Random, family: str, op: OperationModel, tokens: list[str]
) -> tuple[Any, ...]:
    def num() -> str:
        if _int_like(op) and rng.random() < 0.85:
            if rng.random() < 0.88:
                return str(_int(rng, 0, 20))
            return rng.choice(INT_TEXT_EDGES + tuple(str(x) for x in INT_EDGES))
        return rng.choice(tokens)

    n = rng.randint(0 if family == "string" else 1, 5)
    if family == "string":
        return (num(),)
    if family == "hash":
        return tuple({rng.choice(tokens): num() for _ in range(n)}.items())
    if family == "zset":
        members = {
            rng.choice(tokens): float(rng.choice([rng.randint(-5, 20), 1.5, 0.25]))
            for _ in range(n)
        }
        return tuple(members.items())
    if family == "list":
        return tuple(rng.choice(tokens) for _ in range(n))
    return tuple(sorted({rng.choice(tokens) for _ in range(n)}))


def _state(
    rng: random.Random, key: str, family: str, op: OperationModel, tokens: list[str]
) -> KeyState | None:
    roll = rng.random()
    if roll < 0.25:
        return None
    if roll < 0.3:
        family = rng.choice([f for f in FAMILIES if f != family])
    return KeyState(key, family, _value(rng, family, op, tokens), rng.random() < 0.2)


def sample_case(
    op: OperationModel, rng: random.Random, namespace: str = "", *, seed: int = 0, index: int = 0
) -> Case:
    """A random case for ``op``; keys are ``namespace + name`` (key-prefix args too)."""
    keys: list[tuple[str, Any]] = []
    names: dict[str, str] = {}
    for k in op.keys:
        if k.variadic:
            items = tuple(f"{namespace}{k.name}:{i}" for i in range(rng.randint(1, 4)))
            keys.append((k.name, items))
        else:
            keys.append((k.name, f"{namespace}{k.name}"))
            names[k.name] = f"{namespace}{k.name}"
    args: list[tuple[str, Any]] = []
    prefixes: list[str] = []
    tokens = list(TOKENS)
    for a in op.args:
        if a.type.kind == "list":
            assert a.type.elem is not None
            kind = a.type.elem.kind
            args.append(
                (a.name, tuple(_scalar(rng, kind, a, namespace) for _ in range(rng.randint(1, 4))))
            )
        else:
            args.append((a.name, _scalar(rng, a.type.kind, a, namespace)))
        if a.key_prefix:
            prefixes += [namespace + s for s in a.samples]
        elif a.type.kind == "str":
            tokens += [s for s in a.samples if s not in tokens]
    static, dynamic = _families(op)
    state: list[KeyState] = []
    universe: list[str] = []
    for k in op.keys:
        fam = static.get(k.name, "string")
        targets = dict(keys)[k.name]
        for key in targets if isinstance(targets, tuple) else (targets,):
            universe.append(key)
            ks = _state(rng, key, fam, op, tokens)
            if ks:
                state.append(ks)
    for fam in dynamic.values():
        for prefix in prefixes:
            for t in tokens:
                key = prefix + t
                if key in universe:
                    continue
                universe.append(key)
                ks = _state(rng, key, fam, op, tokens)
                if ks:
                    state.append(ks)
    return Case(seed, index, namespace, tuple(keys), tuple(args), tuple(state), tuple(universe))
