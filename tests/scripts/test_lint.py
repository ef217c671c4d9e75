"""scripts lint: luacheck with Redis's Lua environment, the header check on real tokens,
and --target portability. Every finding is file:line:col with a code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis

from luapipe.errors import EnvironmentProblem, LuapipeError, ScriptRuntimeError
from luapipe.scripts.lint import LintIssue, lint_scripts
from luapipe.scripts.loader import load_file
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript


def lint(source: str, *targets: str, name: str = "s") -> list[str]:
    script = LuaScript.from_source(name, source, path=f"{name}.lua")
    return [str(i) for i in lint_scripts([script], targets=targets)]


def test_a_clean_script_has_no_findings() -> None:
    assert lint("-- @key k\n-- @arg n\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])\n") == []


def test_an_undefined_global_function_is_an_error_before_it_fails_on_the_server(
    r: redis.Redis,
) -> None:
    source = "-- @key k\nlocal v = redis.call('GET', KEYS[1])\nreturn helper(v)\n"
    assert lint(source) == [
        "s.lua:3:8: error W113: accessing undefined variable 'helper'",
    ]
    reg = ScriptRegistry([LuaScript.from_source("s", source)])
    with pytest.raises(ScriptRuntimeError, match="nonexistent global variable 'helper'"):
        reg.call(r, "s", keys=["k"])


@pytest.mark.parametrize(
    ("source", "finding"),
    [
        ("counter = 1\nreturn counter\n", "s.lua:1:1: error W111: setting non-standard global"),
        ("string.pad = 1\nreturn 1\n", "s.lua:1:1: error W142: setting undefined field 'pad'"),
        ("KEYS = {}\nreturn 1\n", "s.lua:1:1: error W121: setting read-only global variable"),
        (
            "return redis.cal('GET', 'k')\n",
            "s.lua:1:8: error W143: accessing undefined field 'cal'",
        ),
        ("print('x')\nreturn 1\n", "s.lua:1:1: error W113: accessing undefined variable 'print'"),
        ("local x = 1\nreturn 2\n", "s.lua:1:7: warning W211: unused variable 'x'"),
        ("local function f(a, b) return a end\nreturn f(1)\n", "warning W212: unused argument 'b'"),
        (
            "for i, v in ipairs(KEYS) do redis.call('DEL', v) end\n",
            "W213: unused loop variable 'i'",
        ),
        ("local a = 1\nlocal a = 2\nreturn a\n", "s.lua:2:7: warning W411: variable 'a' was previ"),
        (
            "local x = 1\nif x then local x = 2 return x end\nreturn x\n",
            "s.lua:2:17: warning W421: shadowing definition of variable 'x'",
        ),
        ("while true do break end\ndo return 1 end\nreturn 2\n", "s.lua:3:1: warning W511"),
    ],
)
def test_luacheck_findings(source: str, finding: str) -> None:
    found = lint(source)
    assert any(f.startswith(finding) or finding in f for f in found), found


def test_keys_and_argv_may_be_extended_as_on_the_server() -> None:
    assert lint("KEYS[#KEYS + 1] = 'x'\nARGV[1] = 'y'\nreturn KEYS\n") == []


def test_names_starting_with_underscore_may_stay_unused() -> None:
    assert lint("local function _helper() end\nlocal _ok = 1\nreturn 1\n") == []


def test_inline_luacheck_options_work() -> None:
    assert lint("local x = 1 -- luacheck: ignore\nreturn 2\n") == []


def test_keys_in_comments_and_strings_are_not_code() -> None:
    source = (
        "-- @key wait\n-- @arg opts\n"
        "--[[\n  Input:\n    KEYS[1] 'wait'\n    KEYS[9] 'marker'\n    ARGV[4] opts\n]]\n"
        "--[==[ KEYS[7] ]==]\n"
        "local note = 'KEYS[5]' .. \"ARGV[6]\" .. [==[KEYS[8]]==]\n"
        "return {redis.call('LLEN', KEYS[1]), ARGV[1], note} -- KEYS[3]\n"
    )
    assert lint(source) == []


def test_keys_beyond_the_header_name_line_and_column() -> None:
    source = "-- @key k\n-- @arg [n]\nlocal a, t = KEYS[2], {}\nreturn {a, ARGV[2], t.KEYS[9]}\n"
    assert lint(source) == [
        "s.lua:3:14: error LP101: uses KEYS[2] but the header declares 1 @key",
        "s.lua:4:12: error LP101: uses ARGV[2] but the header declares 1 @arg",
    ]
    assert lint("-- @key k\n-- @arg [rest...]\nreturn ARGV[12]\n") == []


def test_template_lines_map_back_to_the_template(tmp_path: Path) -> None:
    (tmp_path / "_part.lua").write_text("local unused_one = 1\nlocal unused_two = 2\n")
    (tmp_path / "t.lua").write_text(
        "-- @template\n-- @key k\n{% include '_part.lua' %}\nlocal z = 3\nreturn 1\n"
    )
    issues = lint_scripts([load_file(tmp_path / "t.lua")])
    assert [i.location.split(":", 1)[1] for i in issues] == ["3:7", "3:7", "4:7"]


def test_a_syntax_error_is_one_finding_and_no_luacheck_noise() -> None:
    assert lint("local x = = 1\n") == [
        "s.lua:1: error LP001: Lua syntax: unexpected symbol near '='"
    ]


# -- targets -----------------------------------------------------------------------------


def test_without_a_target_the_base_environment_applies() -> None:
    assert lint("return getfenv and 1\n") == []
    assert lint("return server.call('PING')\n") == [
        "s.lua:1:8: error W113: accessing undefined variable 'server' "
        "(server.* exists only on Valkey: use redis.*)"
    ]


def test_insecure_functions_are_blocked_by_the_fix_and_the_finding_names_its_releases() -> None:
    """The CVE-2025-46818 fix reached every maintained line (and Debian's 7.0.15), so every
    target refuses getfenv but valkey-8.0 (8.0.0 to 8.0.5, which still has it), and the
    finding names the releases it comes from."""
    found = lint("return getfenv(1)\n", "redis-7.0", "redis-8.2", "valkey-8.0", "valkey-8")
    assert found == [
        "s.lua:1:8: error W113: accessing undefined variable 'getfenv' (blocked by the "
        "CVE-2025-46818 fix: Redis 7.2.11, 7.4.6, 8.0.4, 8.2.2 and backports (Debian 12's "
        "7.0.15); Valkey 7.2.11, 8.0.6, 8.1.4 unless lua-enable-insecure-api is yes) "
        "(on redis-7.0, redis-8.2, valkey-8)"
    ]
    assert lint("return getfenv(1)\n", "valkey-8.0") == []


def test_valkey_knows_server_and_redis_8_knows_os_clock() -> None:
    assert lint("return server.call('PING')\n", "valkey-8") == []
    assert lint("return tostring(os.clock())\n", "redis-8.2") == []
    assert lint("return {os.clock(), redis.VALKEY_VERSION}\n", "valkey-8.0", "valkey-8") == []
    assert (
        "os.clock exists from Redis 8.0 and on Valkey 8 only"
        in (lint("return os.clock()\n", "redis-7.4")[0])
    )
    assert "Valkey only" in lint("return redis.VALKEY_VERSION\n", "redis-7.0")[0]


def test_dragonfly_runs_lua_5_4_but_keeps_unpack() -> None:
    source = "local f = loadstring('return 1')\nreturn {unpack(KEYS), math.pow(2, 3), f}\n"
    found = lint(source, "dragonfly")
    assert found == [
        "s.lua:1:11: error W113: accessing undefined variable 'loadstring' "
        "(Lua 5.4 (Dragonfly) does not have it: use load)",
        "s.lua:2:23: error W143: accessing undefined field 'pow' of global 'math' "
        "(Lua 5.4 (Dragonfly) does not have it: use x ^ y)",
    ]
    assert lint("return table.unpack(KEYS)\n", "dragonfly") == []
    assert "Redis and Valkey run Lua 5.1" in lint("return table.unpack(KEYS)\n")[0]


def test_replicate_commands_is_dead_code_on_every_target() -> None:
    source = "redis.replicate_commands()\nreturn redis.call('INCR', KEYS[1])\n"
    assert lint(source) == []
    assert lint(source, "redis-7.0") == [
        "s.lua:1:1: warning LP201: redis.replicate_commands() does nothing since Redis 7.0 "
        "(effects replication is the only mode): remove it"
    ]


UNDECLARED = (
    "local rcall = redis.call\n"
    "local prefix = ARGV[1]\n"
    "local job = prefix .. ':' .. ARGV[2]\n"
    "rcall('HSET', job, 'state', 'done')\n"
    "redis.call('INCR', 'stats:total')\n"
    "redis.call('SADD', KEYS[1], job)\n"
    "local function touch(key) return redis.call('PEXPIRE', key, 10) end\n"
    "for _, k in ipairs(KEYS) do touch(k) end\n"
    "return redis.call('PUBLISH', 'events', job)\n"
)


def test_undeclared_keys_warn_for_a_cluster_and_fail_on_dragonfly() -> None:
    cluster = lint(UNDECLARED, "redis-7.0")
    assert [f.split(": ", 2)[:2] for f in cluster] == [
        ["s.lua:4:15", "warning LP202"],
        ["s.lua:5:20", "warning LP202"],
    ]
    assert "HSET: key not passed through KEYS: a Redis Cluster cannot route it" in cluster[0]
    dragonfly = lint(UNDECLARED, "redis-7.0", "dragonfly")
    assert [f.split(": ", 2)[1] for f in dragonfly] == ["error LP202", "error LP202"]
    assert "dragonfly refuses it" in dragonfly[0]
    opted_in = "--!df flags=allow-undeclared-keys\n" + UNDECLARED
    assert [f for f in lint(opted_in, "dragonfly") if "LP202" in f] == []
    assert lint(UNDECLARED) == []  # only with a target


def test_unknown_target_is_refused() -> None:
    with pytest.raises(LuapipeError, match=r"unknown target 'redis-9'; known: redis-7\.0"):
        lint("return 1\n", "redis-9")


def test_without_luacheck_lint_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda n: None if n == "luacheck" else real_which(n))
    with pytest.raises(EnvironmentProblem, match="apt-get install lua-check"):
        lint("return 1\n")


def test_lint_issue_reads_as_one_line() -> None:
    issue = LintIssue("a.lua:3:7", "warning", "unused variable 'x'", "W211")
    assert str(issue) == "a.lua:3:7: warning W211: unused variable 'x'"
