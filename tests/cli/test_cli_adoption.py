"""The CLI with a team's own scripts: every broken script listed (exit 1 at the end),
load and deploy all-or-nothing, lint on luacheck with --target, English summaries."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import redis
from click.testing import CliRunner, Result

from luapipe.bench.server import ServerProcess
from luapipe.cli import main

from ..conftest import SCRIPTS_DIR


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def _team_dir(tmp_path: Path) -> Path:
    d = tmp_path / "lua"
    d.mkdir()
    (d / "addJob-9.lua").write_text(
        "-- @key q\n-- @arg [id]\nreturn redis.call('LPUSH', KEYS[1], 1)\n"
    )
    (d / "1st.pass.lua").write_text("return 1\n")
    (d / "broken.lua").write_text("local x = = 1\n")
    (d / "bad name.lua").write_text("return 1\n")
    return d


def test_list_shows_every_script_marks_the_broken_and_exits_1(tmp_path: Path) -> None:
    d = _team_dir(tmp_path)
    res = run("scripts", "list", "--dir", str(d))
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert [ln.split("  ")[0].strip() for ln in lines] == [
        "1st.pass",
        "addJob-9",
        "bad name",
        "broken",
    ]
    assert "keys: q  args: [id]" in lines[1]
    assert f"BROKEN        {d / 'bad name.lua'}: invalid script name 'bad name'" in lines[2]
    assert f"BROKEN        {d / 'broken.lua'}:1: Lua syntax error" in lines[3]
    assert res.stderr == "2 scripts of 4 cannot be used\n"
    rows = json.loads(run("scripts", "list", "--dir", str(d), "--json").stdout)
    assert [(r["name"], r["problem"] is None) for r in rows] == [
        ("1st.pass", True),
        ("addJob-9", True),
        ("bad name", False),
        ("broken", False),
    ]


def test_list_escapes_a_control_character_in_the_name_column(tmp_path: Path) -> None:
    (tmp_path / "ok.lua").write_text("return 1\n")
    (tmp_path / "evil\x1b[2J.lua").write_text("return 1\n")  # would clear the terminal
    res = run("scripts", "list", "--dir", str(tmp_path))
    assert res.exit_code == 1 and "\x1b" not in res.stdout
    shown = "evil\\x1b[2J"
    assert res.stdout.splitlines()[0].startswith(f"{shown:<20} BROKEN ")


def test_list_of_good_scripts_exits_0(tmp_path: Path) -> None:
    d = _team_dir(tmp_path)
    (d / "broken.lua").unlink()
    (d / "bad name.lua").unlink()
    res = run("scripts", "list", "--dir", str(d))
    assert res.exit_code == 0 and res.stderr == ""


def test_load_and_deploy_stay_all_or_nothing(
    tmp_path: Path, r: redis.Redis, redis_server: ServerProcess
) -> None:
    d = _team_dir(tmp_path)
    url = f"redis://{redis_server.host}:{redis_server.port}/0"
    problems = (
        f"2 scripts cannot be used: {d / 'bad name.lua'}: invalid script name 'bad name': "
        "whitespace (' ') is not allowed (names may hold letters, digits, '_', '-' and '.'); "
        f"{d / 'broken.lua'}:1: Lua syntax error: unexpected symbol near '='"
    )
    for args in (["scripts", "load"], ["deploy"], ["deploy", "--check"]):
        res = run(*args, "--dir", str(d), "--url", url)
        assert (res.exit_code, res.stdout) == (1, "")
        assert res.stderr == f"error: {problems}\n"  # one line naming every broken file
    assert int(r.info("memory")["number_of_cached_scripts"]) == 0
    assert not (d / "luapipe.lock.json").exists()


def test_calls_of_good_scripts_with_odd_names(
    tmp_path: Path, r: redis.Redis, redis_server: ServerProcess
) -> None:
    d = _team_dir(tmp_path)  # with two broken scripts: they do not stop the good ones
    url = f"redis://{redis_server.host}:{redis_server.port}/0"
    res = run("scripts", "call", "addJob-9", "-k", "q", "--dir", str(d), "--url", url)
    assert (res.exit_code, res.stdout) == (0, "1\n")
    res = run("scripts", "call", "addJob-9", "-k", "q", "-a", "1", "-a", "2", "--dir", str(d))
    assert res.exit_code == 1
    assert "script 'addJob-9' takes 0 to 1 args ([id]), got 2" in res.stderr
    res = run("scripts", "call", "broken", "--dir", str(d), "--url", url)
    assert (res.exit_code, res.stdout) == (1, "")
    assert res.stderr == (
        f"error: script 'broken' cannot be used: {d / 'broken.lua'}:1: Lua syntax error: "
        "unexpected symbol near '='\n"
    )


def test_lint_reports_unreadable_files_and_luacheck_codes(tmp_path: Path) -> None:
    d = _team_dir(tmp_path)
    (d / "g.lua").write_text("local unused = 1\nreturn helper()\n")
    res = run("scripts", "lint", "--dir", str(d))
    assert res.exit_code == 1
    assert res.stdout.splitlines() == [
        f"{d / 'bad name.lua'}: error LP002: invalid script name 'bad name': whitespace (' ') "
        "is not allowed (names may hold letters, digits, '_', '-' and '.')",
        f"{d / 'broken.lua'}:1: error LP001: Lua syntax: unexpected symbol near '='",
        f"{d / 'g.lua'}:1:7: warning W211: unused variable 'unused'",
        f"{d / 'g.lua'}:2:8: error W113: accessing undefined variable 'helper'",
        "5 scripts, 3 errors, 1 warning",
    ]


def test_lint_targets(tmp_path: Path) -> None:
    (tmp_path / "k.lua").write_text("redis.call('SET', 'fixed:key', getfenv and 1 or 0)\n")
    # valkey-8.0 (8.0.0 to 8.0.5) still has getfenv; every other target has the CVE fix
    res = run("scripts", "lint", "--dir", str(tmp_path), "--target", "valkey-8.0")
    assert res.exit_code == 0
    assert "warning LP202: SET: key not passed through KEYS" in res.stdout
    res = run("scripts", "lint", "--dir", str(tmp_path), "--target", "redis-8.2", "--json")
    codes = {(i["severity"], i["code"]) for i in json.loads(res.stdout)}
    assert res.exit_code == 1 and codes == {("error", "W113"), ("warning", "LP202")}
    res = run("scripts", "lint", "--dir", str(tmp_path), "--target", "redis-9")
    assert res.exit_code == 2 and "'redis-9' is not one of" in res.stderr


def test_bundled_library_lints_without_errors() -> None:
    res = run("scripts", "lint", "--dir", str(SCRIPTS_DIR))
    assert res.exit_code == 0
    # no warning either: the generated op_transfer.lua no longer binds an unused read (W211)
    assert res.stdout.splitlines()[-1] == "17 scripts, 0 errors, 0 warnings"


def test_drift_summary_reads_as_english(
    tmp_path: Path, r: redis.Redis, redis_server: ServerProcess
) -> None:
    d = tmp_path / "lib"
    shutil.copytree(SCRIPTS_DIR, d, ignore=shutil.ignore_patterns("*.json", "op_*", "rate_*"))
    url = f"redis://{redis_server.host}:{redis_server.port}/0"
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.stdout.splitlines()[-1].startswith(f"deployed 5 scripts to {redis_server.address}")
    assert run("deploy", "--check", "--dir", str(d), "--url", url).stdout.splitlines()[-1] == (
        f"no drift: 5 scripts, nodes {redis_server.address}"
    )
    r.script_flush()
    res = run("deploy", "--check", "--dir", str(d), "--url", url)
    assert res.exit_code == 1
    assert res.stdout.splitlines()[-1] == (
        f"drift: 5 differences (5 scripts, nodes {redis_server.address})"
    )
    for extra in d.glob("*.lua"):
        if extra.stem != "capped_push":
            extra.unlink()
    (d / "luapipe.lock.json").unlink()
    res = run("deploy", "--dir", str(d), "--url", url)
    assert res.stdout.splitlines()[-1].startswith("deployed 1 script to ")
