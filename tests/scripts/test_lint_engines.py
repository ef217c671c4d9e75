"""``scripts lint --target`` checked against the engine it names, where the matrix has one.

For every name a script can reach (every global and library field of every target's
environment, and a few that no target has), a probe script uses it; the probes are linted
for the target and run on the server:

- what the lint calls an error fails on the server, and what it passes runs there;
- the one exception is a rule that comes from a later release of the same line (the
  CVE-2025-46818 fix blocks ``getfenv`` from Redis 7.2.11 and Valkey 8.0.6; Redis 7.2.6 and
  Valkey 8.0.1 still have it): its finding must name that release.

Runs on every engine of ``make test-engines``: Debian's 7.0.15 and Redis 7.2.6 check
``redis-7.0``, Valkey 8.0.1 checks ``valkey-8.0`` and ``valkey-8``. ``redis-7.4``,
``redis-8.2`` and ``dragonfly`` have no server here: they are written from documentation.
"""

from __future__ import annotations

import re

import pytest
import redis

from luapipe.scripts.lint import lint_scripts
from luapipe.scripts.luaenv import BASE, TARGETS
from luapipe.scripts.script import LuaScript

from ..engine_matrix import Engine, engine_of

#: names no target has (the server has none of them either)
ABSENT = ("print", "require", "io", "os.time", "os.execute", "dofile", "table.pack", "loadfile")

#: per engine: the targets it checks, and for each the names its lint refuses that this
#: older release still has, with the later release the finding must name (a pattern: the
#: message lists releases, "Valkey 7.2.11, 8.0.6, 8.1.4")
CHECKS: dict[tuple[str, tuple[int, int]], dict[str, tuple[frozenset[str], str]]] = {
    ("redis", (7, 0)): {"redis-7.0": (frozenset(), "")},
    ("redis", (7, 2)): {
        "redis-7.0": (frozenset({"getfenv", "setfenv", "newproxy"}), r"Redis [\d., ]*\b7\.2\.11\b"),
    },
    ("valkey", (8, 0)): {
        "valkey-8.0": (frozenset(), ""),
        "valkey-8": (frozenset({"getfenv", "setfenv", "newproxy"}), r"Valkey [\d., ]*\b8\.0\.6\b"),
    },
}


def _names() -> list[str]:
    """Every global and ``global.field`` any target (or the base) knows, and ABSENT."""
    found: set[str] = set(ABSENT)
    for env in [BASE, *(t.env for t in TARGETS.values())]:
        for glob, fields in env.items():
            found.add(glob)
            found.update(f"{glob}.{f}" for f in fields)
    return sorted(found)


def _probe(name: str) -> str:
    """A script that fails where ``name`` is missing (a missing global raises on reading; a
    missing field of a library table reads as nil)."""
    missing = "return redis.error_reply('ERR missing')"
    return f"local v = {name}\nif v == nil then {missing} end\nreturn 1\n"


def _checks(engine: Engine) -> dict[str, tuple[frozenset[str], str]]:
    checks = CHECKS.get((engine.family, engine.version[:2]))
    if checks is None:
        pytest.skip(f"no lint target is checked against {engine.name}")
    return checks


def test_every_target_of_this_engine_agrees_with_it(r: redis.Redis) -> None:
    engine = engine_of(r)
    names = _names()
    scripts = [LuaScript.from_source(f"p{i}", _probe(n)) for i, n in enumerate(names)]
    runs = {}
    for name, script in zip(names, scripts, strict=True):
        try:
            runs[name] = r.eval(script.source, 0) == 1
        except redis.ResponseError:
            runs[name] = False
    for target, (later, release) in _checks(engine).items():
        issues = lint_scripts(scripts, targets=[target])
        refused = {}
        for issue in issues:  # warnings (a no-op replicate_commands) do not fail
            if issue.severity == "error":
                name = names[int(issue.location.split(":")[0][1:].removesuffix(".lua"))]
                refused[name] = issue.message
        wrongly_passed = sorted(n for n in names if n not in refused and not runs[n])
        assert wrongly_passed == [], f"{target} passes what fails on {engine.name}"
        runs_anyway = {n for n in refused if runs[n]}
        assert runs_anyway == set(later), f"{target} refuses what runs on {engine.name}"
        for n in runs_anyway:
            assert re.search(release, refused[n]), (target, n, refused[n])


def test_the_base_standard_is_what_unpatched_redis_7_exposes(r: redis.Redis) -> None:
    """Without a target, lint knows what EVAL exposes on Redis 7 before the CVE-2025-46818
    fix: every global and library field a script sees on Redis 7.x is in it, and it has
    nothing beyond that but what the fix removes."""
    engine = engine_of(r)
    if engine.family != "redis" or engine.version[0] != 7:
        pytest.skip(f"the base standard describes Redis 7, not {engine.name}")
    listing = (
        "local out = {} for k, v in pairs(_G) do "
        "if type(v) == 'table' and k ~= '_G' and k ~= 'KEYS' and k ~= 'ARGV' then "
        "for f in pairs(v) do out[#out + 1] = k .. '.' .. f end "
        "elseif k ~= '__redis__err__handler' and k ~= 'KEYS' and k ~= 'ARGV' then "
        "out[#out + 1] = k end end return out"
    )
    live = {x.decode() for x in r.eval(listing, 0)}
    ours = {f"{g}.{f}" if f else g for g, fields in BASE.items() for f in (fields or ("",))}
    assert live - ours == set()
    assert ours - live <= {"getfenv", "setfenv", "newproxy"}


def test_the_targets_are_the_documented_ones() -> None:
    assert set(TARGETS) == {
        "redis-7.0",
        "redis-7.4",
        "redis-8.2",
        "valkey-8.0",
        "valkey-8",
        "dragonfly",
    }
