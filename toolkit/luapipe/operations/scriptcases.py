"""Random cases for a script (an initial keyspace, keys and args), as ``verify`` draws for a spec.

A script declares less than a spec: its header names its keys and args (with optional and
variadic ones) but no types, and a script without a header declares nothing. So:

- how many keys and args: from the header (an optional one is left out half the time, a
  variadic one is given 1 to 3 values), else from the highest literal ``KEYS[n]`` and
  ``ARGV[n]`` the code reads (and a few more where it also reads ``#KEYS``, ``ipairs(ARGV)``...);
- each key's type: from the commands the code runs on it (``redis.call('HGET', KEYS[1],
  ...)``, also through a local: ``local k = KEYS[1]``, or kept for later as luapipe's
  generated scripts do: ``{'HSET', v_login, ...}``), else a string; a key is missing a
  quarter of the time and of another type now and then, as in ``verify``;
- args: mostly small integers (most scripts parse numbers), with edge values (0, negatives,
  leading zeros), decimals, text and the empty string; never a large number, since a
  script may loop up to one of its args (the keys' values do hold 2^53 - 1 and the like).
"""

from __future__ import annotations

import functools
import random
from typing import Any

from luapipe.operations.casegen import FAMILIES, INT_EDGES, INT_TEXT_EDGES, TOKENS, Case, KeyState
from luapipe.scripts.header import Param
from luapipe.scripts.luatokens import Tok, tokens
from luapipe.scripts.script import LuaScript

__all__ = ["flat", "key_families", "script_case", "script_shape"]

_STRING_S = frozenset(
    {"set", "setex", "setnx", "setrange", "strlen", "substr", "setbit", "psetex", "sort"}
)


def _family(command: str) -> str | None:
    """The type a command expects its first key to hold (None: any, or a stream)."""
    c = command.lower()
    if c.startswith("h"):
        return "hash"
    if c.startswith("z"):
        return "zset"
    if c.startswith(("l", "rpush", "rpop", "blpop", "brpop", "blmove")) and c not in ("lcs",):
        return "list"
    if c.startswith("s") and c not in _STRING_S and not c.startswith("scan"):
        return "set"
    if c.startswith("x") or c in ("del", "exists", "expire", "pexpire", "ttl", "pttl", "type"):
        return None
    return "string"


def _key_index(expr: list[Tok], aliases: dict[str, int]) -> int | None:
    """``KEYS[n]`` (or a local bound to it) as the whole of an argument: n."""
    if len(expr) == 4 and expr[0].text == "KEYS" and expr[1].text == "[":
        try:
            return int(expr[2].text, 0)
        except ValueError:
            return None
    if len(expr) == 1 and expr[0].kind == "name":
        return aliases.get(expr[0].text)
    return None


@functools.lru_cache(maxsize=256)
def _families_of(source: str) -> tuple[tuple[int, str], ...]:
    return tuple(sorted(key_families(source).items()))


def key_families(source: str) -> dict[int, str]:
    """KEYS index -> the type the code treats that key as (first command seen wins)."""
    toks = tokens(source)
    aliases: dict[str, int] = {}
    for i in range(len(toks) - 5):
        a, eq = toks[i], toks[i + 1]
        if a.kind == "name" and eq.text == "=" and toks[i + 2].text == "KEYS":
            n = _key_index(toks[i + 2 : i + 6], {})
            if n is not None and (i + 6 >= len(toks) or toks[i + 6].text != "."):
                aliases.setdefault(a.text, n)
    found: dict[int, str] = {}
    for i in range(1, len(toks) - 2):
        opener, cmd, comma = toks[i - 1], toks[i], toks[i + 1]
        if cmd.kind != "string" or comma.text != "," or opener.text not in ("(", "{"):
            continue
        word = cmd.text.strip("'\"")
        called = opener.text == "(" and i >= 3 and toks[i - 2].text in ("call", "pcall")
        # redis.call('cmd', key...), or a command kept for later: {'HSET', key, ...}
        if not (called or (word.isalpha() and word.isupper())):
            continue
        arg: list[Tok] = []
        for t in toks[i + 2 :]:
            if t.text in (",", ")", "}"):
                break
            arg.append(t)
        n = _key_index(arg, aliases)
        family = _family(word)
        if n is not None and family is not None:
            found.setdefault(n, family)
    return found


def _literal_max(toks: list[Tok], table: str) -> tuple[int, bool]:
    """The highest literal index of ``table`` read, and whether it is also read whole."""
    top, whole = 0, False
    for i, t in enumerate(toks):
        if t.text != table or (i and toks[i - 1].text in (".", ":")):
            continue
        if i + 3 < len(toks) and toks[i + 1].text == "[" and toks[i + 3].text == "]":
            try:
                top = max(top, int(toks[i + 2].text, 0))
                continue
            except ValueError:
                pass
        whole = True
    return top, whole


@functools.lru_cache(maxsize=256)
def script_shape(script: LuaScript) -> tuple[tuple[Param, ...], tuple[Param, ...]]:
    """The keys and args a call passes: the header's, else what the code reads."""
    if script.keys is not None and script.args is not None:
        return script.keys, script.args
    source = script.source
    toks = tokens(source.split("\n", 1)[1] if source.startswith("#!") else source)
    shapes = []
    for table, stem in (("KEYS", "key"), ("ARGV", "arg")):
        top, whole = _literal_max(toks, table)
        params = [Param(f"{stem}{n}") for n in range(1, top + 1)]
        if whole:
            params.append(Param(f"more_{stem}s", variadic=True, optional=True))
        shapes.append(tuple(params))
    return shapes[0], shapes[1]


def _count(rng: random.Random, p: Param) -> int:
    if p.variadic:
        return rng.randint(0 if p.optional else 1, 3)
    return 0 if p.optional and rng.random() < 0.5 else 1


#: args that are numbers at the edges, but never large: a script may loop up to an arg
_ARG_EDGES = (0, -1, -7, 100, 1000, "007", " 1", "", "abc")


def _arg(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.55:
        return rng.randint(0, 20)
    if roll < 0.7:
        return rng.choice(_ARG_EDGES)
    if roll < 0.8:
        return rng.choice(("1.5", "-2.25", "0.1", "1e3"))
    return rng.choice(TOKENS)


def _value(rng: random.Random, family: str) -> tuple[Any, ...]:
    def num() -> str:
        roll = rng.random()
        if roll < 0.7:
            return str(rng.randint(0, 20))
        if roll < 0.85:
            return rng.choice(INT_TEXT_EDGES + tuple(str(x) for x in INT_EDGES))
        return rng.choice(TOKENS)

    n = rng.randint(1, 5)
    if family == "string":
        return (num(),)
    if family == "hash":
        return tuple({rng.choice(TOKENS): num() for _ in range(n)}.items())
    if family == "zset":
        members = {rng.choice(TOKENS): float(rng.randint(-5, 20)) for _ in range(n)}
        return tuple(members.items())
    if family == "list":
        return tuple(num() for _ in range(n))
    return tuple(sorted({num() for _ in range(n)}))


def script_case(
    script: LuaScript, rng: random.Random, namespace: str = "", *, seed: int = 0, index: int = 0
) -> Case:
    """A random case for ``script``: its keys under ``namespace``, args, a keyspace."""
    key_params, arg_params = script_shape(script)
    families = dict(_families_of(script.source))
    keys: list[tuple[str, Any]] = []
    state: list[KeyState] = []
    universe: list[str] = []
    position = 0
    for p in key_params:
        names = []
        count = _count(rng, p)
        if count == 0:  # positional: the optional ones after it are left out too
            break
        for j in range(count):
            position += 1
            key = f"{namespace}{p.name}" + (f":{j}" if p.variadic else "")
            names.append(key)
            universe.append(key)
            family = families.get(position, "string")
            roll = rng.random()
            if roll < 0.25:
                continue
            if roll < 0.3:
                family = rng.choice([f for f in FAMILIES if f != family])
            state.append(KeyState(key, family, _value(rng, family), rng.random() < 0.2))
        if names:
            keys.append((p.name, tuple(names) if p.variadic else names[0]))
    args: list[tuple[str, Any]] = []
    for p in arg_params:
        values = [_arg(rng) for _ in range(_count(rng, p))]
        if not values:
            break
        args.append((p.name, tuple(values) if p.variadic else values[0]))
    return Case(seed, index, namespace, tuple(keys), tuple(args), tuple(state), tuple(universe))


def flat(pairs: tuple[tuple[str, Any], ...]) -> list[Any]:
    """A case's keys or args as a call passes them: in order, variadic ones spread."""
    out: list[Any] = []
    for _, value in pairs:
        out.extend(value if isinstance(value, tuple) else (value,))
    return out
