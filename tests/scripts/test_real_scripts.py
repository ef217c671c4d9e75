"""Real scripts from well-known projects (fetched at test time, see tests/REAL_SCRIPTS.md):
every one loads under its own file name, lints without a false error, and a
representative subset answers through luapipe exactly as through redis-py's
``register_script``."""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import redis

from luapipe.errors import LuapipeError
from luapipe.scripts.lint import TARGETS, LintIssue, lint_scripts
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..real_scripts import PACKAGES, real_scripts

COUNTS = {"bullmq": 63, "limits": 6, "walrus": 11, "python-redis-lock": 4, "redis-py": 3}
#: luacheck's true findings on these scripts: unused names and one redefined local
WARNINGS = {"W211", "W212", "W213", "W411"}
#: keys built from ARGV (Dragonfly refuses them; checked by reading each script)
UNDECLARED_KEYS = {
    "changeDelay-4",
    "extendLocks-1",
    "moveJobFromActiveToWait-9",
    "relayAckInbox-1",
    "relayReadInbox-1",
    "relaySubscribe-1",
    "relayTrimInbox-1",
}


@pytest.fixture(scope="module")
def sample() -> Path:
    return real_scripts()


@pytest.fixture(scope="module")
def scripts(sample: Path) -> list[LuaScript]:
    return [s for pkg in PACKAGES for s in ScriptRegistry.from_directory(sample / pkg.project)]


def test_every_real_script_loads_under_its_file_name(sample: Path) -> None:
    for project, count in COUNTS.items():
        reg = ScriptRegistry.from_directory(sample / project)
        files = sorted(p.stem for p in (sample / project).glob("*.lua"))
        assert (len(reg), reg.names()) == (count, files), project
        assert reg.problems == ()
    assert (sample / "bullmq.LICENSE").read_text().count("MIT") >= 1


def _stem(issue: LintIssue) -> str:
    return Path(issue.location.split(":", 1)[0]).stem


def test_real_scripts_lint_without_a_false_error(scripts: list[LuaScript]) -> None:
    issues = lint_scripts(scripts)
    assert [str(i) for i in issues if i.severity == "error"] == []
    assert {i.code for i in issues} <= WARNINGS
    assert all(i.location.count(":") == 2 for i in issues)  # file:line:col


def test_real_scripts_on_every_target(scripts: list[LuaScript]) -> None:
    issues = lint_scripts(scripts, targets=list(TARGETS))
    errors = [i for i in issues if i.severity == "error"]
    assert {i.code for i in errors} == {"LP202"}
    assert all("dragonfly refuses it" in i.message for i in errors)
    assert {_stem(i) for i in errors} == UNDECLARED_KEYS
    assert {i.code for i in issues} <= WARNINGS | {"LP202"}
    redis_only = lint_scripts(scripts, targets=["redis-7.0", "redis-8.2", "valkey-8"])
    assert [str(i) for i in redis_only if i.severity == "error"] == []
    assert Counter(i.code for i in redis_only)["LP202"] == len(errors)  # cluster warnings


CALLS: list[tuple[str, str, list[list[Any]], list[str], list[Any]]] = [
    ("limits", "incr_expire", [], ["lim:a"], [60, 1]),
    ("limits", "acquire_moving_window", [], ["lim:mw"], [1700000000, 5, 60, 1]),
    (
        "limits",
        "moving_window",
        [["RPUSH", "lim:mw", 1700000003, 1700000002, 1700000001]],
        ["lim:mw"],
        [1700000002, 5],
    ),
    ("limits", "acquire_sliding_window", [], ["lim:prev", "lim:cur"], [10, 60, 1]),
    ("limits", "sliding_window", [], ["lim:prev", "lim:cur"], [60]),
    ("limits", "clear_keys", [["SET", "lim:1", "a"], ["SET", "lim:2", "b"]], ["lim:*"], []),
    ("walrus", "array_append", [], ["w:arr"], ["v"]),
    ("walrus", "array_extend", [["HSET", "w:arr", 0, "x"]], ["w:arr"], ["a", "b", "c"]),
    ("walrus", "array_get", [["HSET", "w:arr", 0, "a", 1, "b"]], ["w:arr"], [-1]),
    ("walrus", "array_pop", [["HSET", "w:arr", 0, "a", 1, "b"]], ["w:arr"], []),
    ("walrus", "array_remove", [["HSET", "w:arr", 0, "a", 1, "b", 2, "c"]], ["w:arr"], [0]),
    ("walrus", "array_set", [["HSET", "w:arr", 0, "a"]], ["w:arr"], [0, "z"]),
    ("walrus", "cas", [["SET", "w:k", "abc-1"]], ["w:k"], ["abc", "new"]),
    ("walrus", "lock_acquire", [], ["w:lock"], ["id1", 1000]),
    ("walrus", "lock_release", [["SET", "w:lock", "id1"]], ["w:lock", "w:ev"], ["id1"]),
    ("walrus", "rate_limit", [], ["w:rl"], [3, 1000, 1700000000]),
    (
        "walrus",
        "zset_score_filter",
        [["ZADD", "w:z", 1, "a", 5, "b", 20, "c"]],
        ["w:z", "w:dst"],
        [0, 10],
    ),
    ("bullmq", "isJobInList-1", [["RPUSH", "bull:q:wait", 1, 2, 3]], ["bull:q:wait"], ["2"]),
    (
        "bullmq",
        "getCounts-1",
        [["RPUSH", "bull:q:wait", 1, 2], ["ZADD", "bull:q:delayed", 1, 3]],
        ["bull:q:"],
        ["wait", "delayed", "completed", "active"],
    ),
    (
        "bullmq",
        "extendLock-2",
        [["SET", "bull:q:1:lock", "tok"], ["SADD", "bull:q:stalled", "1"]],
        ["bull:q:1:lock", "bull:q:stalled"],
        ["tok", 30000, "1"],
    ),
    (
        "bullmq",
        "releaseLock-1",
        [["SET", "bull:q:1:lock", "tok"]],
        ["bull:q:1:lock"],
        ["tok", 30000],
    ),
    (
        "bullmq",
        "getRateLimitTtl-2",
        [["SET", "bull:q:limiter", 5]],
        ["bull:q:limiter", "bull:q:meta"],
        ["0"],
    ),
    (
        "bullmq",
        "isMaxed-2",
        [["HSET", "bull:q:meta", "concurrency", 1], ["RPUSH", "bull:q:active", 1]],
        ["bull:q:meta", "bull:q:active"],
        [],
    ),
    (
        "bullmq",
        "getState-8",
        [["ZADD", "bull:q:completed", 1, "7"]],
        [
            "bull:q:completed",
            "bull:q:failed",
            "bull:q:delayed",
            "bull:q:active",
            "bull:q:wait",
            "bull:q:paused",
            "bull:q:waiting-children",
            "bull:q:prioritized",
        ],
        ["7"],
    ),
    (
        "bullmq",
        "addLog-2",
        [["HSET", "bull:q:7", "name", "x"]],
        ["bull:q:7", "bull:q:7:logs"],
        ["7", "hello", ""],
    ),
    (
        "bullmq",
        "getRanges-1",
        [["RPUSH", "bull:q:wait", 1, 2, 3], ["ZADD", "bull:q:completed", 1, "9"]],
        ["bull:q:"],
        [0, -1, 1, "wait", "completed"],
    ),
    (
        "bullmq",
        "drain-5",
        [["RPUSH", "bull:q:wait", 1], ["HSET", "bull:q:1", "data", "x"]],
        ["bull:q:wait", "bull:q:paused", "bull:q:delayed", "bull:q:prioritized", "bull:q:repeat"],
        ["bull:q:", "1"],
    ),
    (
        "bullmq",
        "obliterate-2",
        [
            ["HSET", "bull:q:meta", "paused", 1],
            ["RPUSH", "bull:q:wait", 1],
            ["HSET", "bull:q:1", "data", "x"],
        ],
        ["bull:q:meta", "bull:q:"],
        [1000, ""],
    ),
    ("redis-py", "Lock.LUA_RELEASE_SCRIPT", [["SET", "lk", "tok"]], ["lk"], ["tok"]),
    (
        "redis-py",
        "Lock.LUA_EXTEND_SCRIPT",
        [["SET", "lk", "tok", "PX", 100000]],
        ["lk"],
        ["tok", 5000, "0"],
    ),
    ("redis-py", "Lock.LUA_REACQUIRE_SCRIPT", [["SET", "lk", "tok"]], ["lk"], ["tok", 5000]),
    (
        "python-redis-lock",
        "UNLOCK_SCRIPT",
        [["SET", "lock:x", "id"]],
        ["lock:x", "lock-signal:x"],
        ["id", 1000],
    ),
    (
        "python-redis-lock",
        "EXTEND_SCRIPT",
        [["SET", "lock:x", "id", "EX", 100]],
        ["lock:x"],
        ["id", 30],
    ),
    (
        "python-redis-lock",
        "RESET_SCRIPT",
        [["SET", "lock:x", "id"]],
        ["lock:x", "lock-signal:x"],
        ["id", 1000],
    ),
    ("python-redis-lock", "RESET_ALL_SCRIPT", [["SET", "lock:x", "id"]], [], [1000]),
]


def _outcome(run: Any) -> tuple[str, Any]:
    try:
        return "reply", run()
    except (redis.ResponseError, LuapipeError) as exc:
        return "error", str(exc).split(" script: ")[0].split(": ")[-1]


@pytest.mark.parametrize(("project", "name", "setup", "keys", "args"), CALLS)
def test_calls_answer_as_with_redis_py(
    r: redis.Redis,
    sample: Path,
    project: str,
    name: str,
    setup: list[list[Any]],
    keys: list[str],
    args: list[Any],
) -> None:
    """The same call on the same data: the same reply (or error) and the same keys."""
    source = (sample / project / f"{name}.lua").read_bytes()
    outcomes = []
    for via in ("redis-py", "luapipe"):
        r.flushall()
        r.script_flush()
        for command in setup:
            r.execute_command(*command)
        if via == "redis-py":
            script = r.register_script(source)
            outcome = _outcome(partial(script, keys=keys, args=args))
        else:
            reg = ScriptRegistry.from_directory(sample / project)
            outcome = _outcome(partial(reg.call, r, name, keys=keys, args=args))
        outcomes.append((outcome, sorted(r.keys())))
    assert outcomes[0] == outcomes[1]
