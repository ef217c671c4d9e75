"""The bench profile of a team's own script: what a call's keys and args look like, and
the team's other implementations to time beside it.

A small TOML file, ``<script>.bench.toml`` beside the script (``luapipe bench
scripts_lua/token_bucket.lua`` finds it), or given itself (``luapipe bench
token_bucket.bench.toml``); its fields are those of a spec's ``[bench]`` table, for the
keys and args the script's header declares::

    script = "token_bucket.lua"        # default: the profile's name without .bench.toml
    description = "a bucket per user with tokens to spare: every call takes one"
    write_share = 1.0                  # the share of calls meant to write (0 to 1)
    wrote = "returns[1]"               # the reply element that is 1 when a call wrote
    renew = "never"                    # "never", "refused" (needs wrote) or N calls per copy
    read_compute_write = true          # its writes depend on its reads (default: true)
    invariant = "limits:bucket_ok"     # (client, keys, args) -> bool, or a number conserved
    [state]                            # a key's initial value, as in a spec's [bench.state]
    bucket = { hash = { tokens = "1000000", ts = "0" } }
    [args]                             # per call: a value, { min, max } or { samples }
    capacity = 1000000
    now = { min = 1, max = 1000 }
    [forms]                            # the team's own implementations (see bench/pyforms.py)
    python = { call = "limits:take", atomic = false }
    python_tx = { call = "limits:take_watch", atomic = true }
    [hot]                              # --contention hot: write_share, renew, state, args
    state = { bucket = { hash = { tokens = "30", ts = "0" } } }
    renew = "refused"

Without a profile, a script whose header declares its keys and args is still benchmarked
(``luapipe bench scripts_lua/x.lua``): with cases drawn as ``verify`` draws them, edge values
left out, kept where a trial call succeeds (see :mod:`luapipe.bench.scriptworkload`).

Problems are ``file:line: field: message``, all of them at once, as for a spec.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luapipe.bench.pyforms import PythonForm, is_async_callable, load_callable
from luapipe.errors import LuapipeError, SpecError
from luapipe.operations.benchprofile import FLAG, ArgDraw, BenchDraw, BenchProfile
from luapipe.operations.benchspec import BenchTable, merged_draw
from luapipe.operations.model import KeySpec
from luapipe.operations.scriptcases import key_families, script_shape
from luapipe.operations.specbuild import Builder
from luapipe.scripts.header import Param
from luapipe.scripts.loader import load_file
from luapipe.scripts.script import LuaScript

__all__ = ["PROFILE_SUFFIX", "ScriptProfile", "default_profile", "load_profile", "profile_of"]

PROFILE_SUFFIX = ".bench.toml"
#: names a Python form cannot take: the built-in forms' (the verdict knows them by name)
RESERVED_FORMS = ("naive", "pipelined", "transaction", "script", "function")
_FIELDS = (
    "script",
    "description",
    "write_share",
    "wrote",
    "renew",
    "read_compute_write",
    "invariant",
    "state",
    "args",
    "key_count",
    "forms",
    "hot",
)
_HOT = ("write_share", "renew", "state", "args", "key_count")


@dataclass(frozen=True)
class ScriptProfile:
    """A script and how to bench it. ``bench`` is None for the default (no profile file)."""

    script: LuaScript
    keys: tuple[Param, ...]
    args: tuple[Param, ...]
    bench: BenchProfile | None = None
    forms: tuple[PythonForm, ...] = ()
    invariant: str | None = None
    read_compute_write: bool = True
    path: str | None = None

    def describe(self, contention: str = "spread") -> dict[str, Any]:
        """What the results say of it, as drawn under ``contention`` (``hot``: the
        ``[hot]`` table over the rest)."""
        out: dict[str, Any] = {
            "source": "profile" if self.path else "default",
            "path": self.path,
            "description": self.bench.description
            if self.bench is not None
            else "no profile: cases drawn as verify draws them (no edge values) whose trial "
            "calls succeeded",
        }
        if self.bench is not None:
            d = self.bench.for_contention(contention)
            out.update(
                write_share=d.write_share,
                wrote=self.bench.wrote,
                renew=d.renew,
                state={s.name: s.describe() for s in d.state},
                args={a.name: a.describe() for a in d.args},
            )
        if self.invariant:
            out["invariant"] = self.invariant
        return out


def profile_of(script_path: Path) -> Path | None:
    """The profile beside a script (``x.lua`` -> ``x.bench.toml``), if there is one."""
    found = script_path.with_name(script_path.name[: -len(".lua")] + PROFILE_SUFFIX)
    return found if found.is_file() else None


def default_profile(script: LuaScript) -> ScriptProfile:
    """No profile: the header's keys and args (or those the code reads), default cases."""
    keys, args = script_shape(script)
    return ScriptProfile(script, keys, args)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _kind(v: Any) -> str | None:
    if isinstance(v, bool):
        return None  # a script gets strings: write 1/0 or "true"
    if isinstance(v, int):
        return "int" if abs(v) < 2**53 else None
    if isinstance(v, float):
        return "float" if math.isfinite(v) else None
    if isinstance(v, str):
        return "str"
    return None


def _arg_draw(b: Builder, field: str, p: Param, v: Any) -> ArgDraw | None:
    """One arg of the profile: a value, ``{min, max}`` or ``{samples}``; a variadic arg's
    value (each sample too) is a list."""

    def fits(x: Any) -> bool:
        if p.variadic:
            return isinstance(x, list) and bool(x) and all(_kind(y) for y in x)
        return _kind(x) is not None

    if not isinstance(v, dict):
        if fits(v):
            kind = "list" if p.variadic else str(_kind(v))
            return ArgDraw(p.name, kind, tuple(v) if isinstance(v, list) else v)
        want = "a non-empty list of numbers or strings" if p.variadic else "a number or a string"
        b.problem(field, f"{v!r}: {p.display} takes {want}")
        return None
    if set(v) == {"samples"} and isinstance(v["samples"], list) and v["samples"]:
        if all(fits(x) for x in v["samples"]):
            kind = "list" if p.variadic else str(_kind(v["samples"][0]))
            frozen = tuple(tuple(x) if isinstance(x, list) else x for x in v["samples"])
            return ArgDraw(p.name, kind, samples=frozen)
    elif set(v) == {"min", "max"} and not p.variadic:
        lo, hi = v["min"], v["max"]
        if _number(lo) and _number(hi) and lo <= hi:
            kind = "int" if isinstance(lo, int) and isinstance(hi, int) else "float"
            return ArgDraw(p.name, kind, lo=lo, hi=hi)
    b.problem(
        field,
        "must be a value, { min = ..., max = ... } (numbers, min <= max) or "
        "{ samples = [...] } (not empty)" + (" (a variadic arg: lists)" if p.variadic else ""),
    )
    return None


def _args(b: Builder, field: str, raw: Any, params: tuple[Param, ...]) -> tuple[ArgDraw, ...]:
    if not isinstance(raw, dict):
        b.problem(field, "must be a table: arg name = value, { min, max } or { samples }")
        return ()
    by_name = {p.name: p for p in params}
    out = []
    for name, v in raw.items():
        p = by_name.get(name)
        if p is None:
            known = ", ".join(p.display for p in params) or "none"
            b.problem(f"{field}.{name}", f"unknown arg {name!r} (the script's args: {known})")
            continue
        d = _arg_draw(b, f"{field}.{name}", p, v)
        if d is not None:
            out.append(d)
    return tuple(out)


def _every_call_arg(b: Builder, raw: Any, params: tuple[Param, ...]) -> None:
    """Each arg the header says a call must pass has a value, and none is given after an
    optional one that is not (a call passes its args in order): else every call of the run
    would be refused."""
    if not isinstance(raw, dict):
        return  # said already
    missing = [p.display for p in params if not p.optional and p.name not in raw]
    if missing:
        takes = ", ".join(p.display for p in params)
        b.problem(
            "args",
            f"no value for {', '.join(missing)}: every call passes the args the script takes "
            f"({takes}), each one not marked [optional]",
        )
    skipped = None
    for p in params:
        if p.name not in raw:
            skipped = skipped or p.display
        elif skipped is not None:
            b.problem(
                f"args.{p.name}",
                f"given while {skipped} before it is not: a call passes its args in order",
            )


def _families(script: LuaScript, keys: tuple[Param, ...]) -> dict[str, str]:
    """Key name -> the type the script's commands use it as (leading, single keys)."""
    found = key_families(script.source)
    out = {}
    for i, p in enumerate(keys, start=1):
        if p.variadic:
            break
        if i in found:
            out[p.name] = found[i]
    return out


def _draw(
    b: Builder, table: BenchTable, where: str, raw: dict[str, Any], flag: str | None,
    script: LuaScript, keys: tuple[Param, ...], args: tuple[Param, ...],
) -> BenchDraw:  # fmt: skip
    prefix = f"{where}." if where else ""
    share = table.share(f"{prefix}write_share", raw.get("write_share", 1.0), False)
    renew = table.renew(f"{prefix}renew", raw.get("renew", "never"), flag)
    state = table.state(f"{prefix}state", raw.get("state", {}), _families(script, keys))
    drawn = _args(b, f"{prefix}args", raw.get("args", {}), args)
    count = table.key_count(f"{prefix}key_count", raw.get("key_count", {}))
    return BenchDraw(share, renew, state, drawn, count)


def _wrote(b: Builder, raw: Any) -> str | None:
    if raw is None:
        return None
    if raw in ("always", "never") or (isinstance(raw, str) and FLAG.fullmatch(raw)):
        return str(raw)
    b.problem("wrote", f'must be "returns", "returns[N]", "always" or "never", not {raw!r}')
    return None


def _forms(b: Builder, raw: Any, search: Path) -> tuple[PythonForm, ...]:
    if not isinstance(raw, dict):
        b.problem("forms", 'must be a table: name = { call = "module:function", atomic = false }')
        return ()
    out = []
    for name, v in raw.items():
        field = f"forms.{name}"
        if name in RESERVED_FORMS or not name.replace("_", "a").isalnum():
            taken = ", ".join(RESERVED_FORMS)
            b.problem(field, f"{name!r} cannot name a form of your own (not {taken}; a-z, 0-9, _)")
            continue
        if isinstance(v, str):
            v = {"call": v}
        if not isinstance(v, dict) or not isinstance(v.get("call"), str):
            b.problem(field, 'must be { call = "module:function", atomic = true|false }')
            continue
        extra = sorted(set(v) - {"call", "atomic"})
        if extra:
            b.problem(f"{field}.{extra[0]}", "unknown field (known: atomic, call)")
        atomic = v.get("atomic", False)
        if not isinstance(atomic, bool):
            b.problem(f"{field}.atomic", "must be true or false")
            atomic = False
        where = f"{b.path}:{b.lines.get(field, 1)}: {field}"
        try:
            fn = load_callable(v["call"], where, search)
        except LuapipeError as exc:
            b.problems.append(str(exc))
            continue
        out.append(PythonForm(name, v["call"], atomic, is_async_callable(fn)))
    return tuple(out)


def load_profile(path: str | Path, script_path: Path | None = None) -> ScriptProfile:
    """Read and check a profile (and its script); every problem in one :class:`SpecError`."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise LuapipeError(f"{p}: cannot read it ({exc})") from None
    where = str(p)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        from luapipe.operations.spec import _toml_line

        raise SpecError([f"{where}:{_toml_line(text, exc)}: toml: {exc}"]) from None
    b = Builder(text, where)
    for extra in sorted(set(data) - set(_FIELDS)):
        b.problem(extra, f"unknown field (known: {', '.join(_FIELDS)})")
    named = data.get("script")
    if named is not None and not isinstance(named, str):
        b.problem("script", "must be the script's file, relative to the profile")
    default = p.name[: -len(PROFILE_SUFFIX)] + ".lua" if p.name.endswith(PROFILE_SUFFIX) else None
    script_file = script_path or (p.parent / named if isinstance(named, str) else None)
    script_file = script_file or (p.parent / default if default else None)
    if script_file is None or not script_file.is_file():
        shown = str(script_file) if script_file else "named (hint: script = 'x.lua')"
        b.problem("script", f"no script {shown}")
        raise SpecError(b.problems)
    script = load_file(script_file)
    keys, args = script_shape(script)
    table = BenchTable(b, [KeySpec(k.name, k.doc, k.variadic) for k in keys], ())
    flag = _wrote(b, data.get("wrote"))
    spread = _draw(b, table, "", data, flag, script, keys, args)
    if script.args is not None:  # the header's args: a call that lacks one is refused
        _every_call_arg(b, data.get("args", {}), args)
    hot = None
    if isinstance(data.get("hot"), dict):
        h = data["hot"]
        for extra in sorted(set(h) - set(_HOT)):
            b.problem(f"hot.{extra}", f"unknown field (known: {', '.join(_HOT)})")
        hot = merged_draw(spread, _draw(b, table, "hot", h, flag, script, keys, args), h)
    elif "hot" in data:
        b.problem("hot", "must be a table: [hot] with state, args, renew...")
    rcw = data.get("read_compute_write", True)
    if not isinstance(rcw, bool):
        b.problem("read_compute_write", "must be true or false")
        rcw = True
    invariant = data.get("invariant")
    if invariant is not None:
        if not isinstance(invariant, str):
            b.problem(
                "invariant", 'must be "module:function" (client, keys, args) -> bool or number'
            )
            invariant = None
        else:
            field = f"{where}:{b.lines.get('invariant', 1)}: invariant"
            try:
                check = load_callable(invariant, field, p.parent)
            except LuapipeError as exc:
                b.problems.append(str(exc))
            else:
                if is_async_callable(check):
                    b.problems.append(
                        f"{field}: {invariant} is an async def; the invariant is called "
                        "between slices with a redis.Redis (sync) client: write it as a plain "
                        "function"
                    )
    description = data.get("description", "")
    if not isinstance(description, str):
        b.problem("description", "must be a string")
        description = ""
    forms = _forms(b, data.get("forms", {}), p.parent)
    if b.problems:
        raise SpecError(b.problems)
    bench = BenchProfile(spread, hot, description, flag)
    return ScriptProfile(script, keys, args, bench, forms, invariant, rcw, where)
