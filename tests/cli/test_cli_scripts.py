"""`luapipe scripts ...` and `luapipe deploy` as a deploy pipeline runs them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.cli import main

from ..conftest import SCRIPTS_DIR


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def url(r: redis.Redis, redis_server: ServerProcess) -> str:
    return redis_server.url


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    d = tmp_path / "scripts_lua"
    shutil.copytree(SCRIPTS_DIR, d, ignore=shutil.ignore_patterns("*.json"))
    return d


@pytest.fixture(scope="module")
def locked() -> Iterator[ServerProcess]:
    server = EmbeddedRedis(["--requirepass", "s3cret-pw"])
    try:
        yield server.start()
    finally:
        server.stop()


def test_list_shows_every_script_with_keys_and_args(scripts: Path) -> None:
    res = run("scripts", "list", "--dir", str(scripts))
    assert res.exit_code == 0
    assert "rate_limit_fixed" in res.output and "keys: counter  args: limit, window" in res.output
    data = json.loads(run("scripts", "list", "--dir", str(scripts), "--json").output)
    assert {d["name"] for d in data} >= {"rate_limit_fixed", "capped_push", "window_count"}
    assert next(d for d in data if d["name"] == "window_count")["flags"] == ["no-writes"]


def test_load_prints_name_and_sha_matching_sha1sum(scripts: Path, url: str) -> None:
    res = run("scripts", "load", "--dir", str(scripts), "--url", url)
    assert res.exit_code == 0
    out = dict(line.split() for line in res.output.splitlines())
    sha1sum = subprocess.run(
        ["sha1sum", str(scripts / "capped_push.lua")], capture_output=True, text=True, check=True
    ).stdout.split()[0]
    assert out["capped_push"] == sha1sum


def test_load_sha_equals_redis_cli_script_load(scripts: Path, url: str, r: redis.Redis) -> None:
    port = url.rsplit(":", 1)[1].split("/")[0]
    cli = subprocess.run(
        ["redis-cli", "-p", port, "-x", "SCRIPT", "LOAD"],
        stdin=(scripts / "compare_and_set.lua").open("rb"),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    res = run("scripts", "load", "--dir", str(scripts), "--url", url, "--json")
    assert json.loads(res.output)["compare_and_set"] == cli


def test_status_exits_1_when_missing_then_0(scripts: Path, url: str) -> None:
    res = run("scripts", "status", "--dir", str(scripts), "--url", url)
    assert res.exit_code == 1 and "MISSING" in res.output
    run("scripts", "load", "--dir", str(scripts), "--url", url)
    res = run("scripts", "status", "--dir", str(scripts), "--url", url, "--json")
    assert res.exit_code == 0
    assert all(s["loaded"] for s in json.loads(res.output)[0]["scripts"])


def test_call_prints_reply(scripts: Path, url: str) -> None:
    args = ["scripts", "call", "rate_limit_fixed", "-k", "rl:x", "-a", "2", "-a", "60"]
    res = run(*args, "--dir", str(scripts), "--url", url, "--json")
    assert res.exit_code == 0 and json.loads(res.output)[:2] == [1, 1]


def test_flush_needs_confirmation(url: str, r: redis.Redis) -> None:
    sha = r.script_load("return 1")
    res = CliRunner().invoke(main, ["scripts", "flush", "--url", url], input="n\n")
    assert res.exit_code == 1 and r.script_exists(sha) == [True]
    assert run("scripts", "flush", "--url", url, "--yes").exit_code == 0
    assert r.script_exists(sha) == [False]


def test_deploy_writes_lock_and_check_finds_drift(scripts: Path, url: str, r: redis.Redis) -> None:
    res = run("deploy", "--dir", str(scripts), "--url", url)
    assert res.exit_code == 0 and "lock" in res.output
    lock = json.loads((scripts / "luapipe.lock.json").read_text())
    assert set(lock["scripts"]) == {p.stem for p in scripts.glob("*.lua")}
    assert run("deploy", "--dir", str(scripts), "--url", url, "--check").exit_code == 0
    # a script edited after the lock, and a server that lost its cache
    with (scripts / "capped_push.lua").open("a") as f:
        f.write("-- edited\n")
    r.script_flush()
    res = run("deploy", "--dir", str(scripts), "--url", url, "--check", "--json")
    assert res.exit_code == 1
    kinds = {(d["kind"], d["name"]) for d in json.loads(res.output)["drift"]}
    assert ("changed", "capped_push") in kinds and ("missing", "compare_and_set") in kinds
    assert r.script_exists(lock["scripts"]["compare_and_set"]) == [False]  # check changed nothing
    # deploy again fixes both
    assert run("deploy", "--dir", str(scripts), "--url", url).exit_code == 0
    assert run("deploy", "--dir", str(scripts), "--url", url, "--check").exit_code == 0


def test_lint_clean_library_and_broken_script(scripts: Path, url: str, r: redis.Redis) -> None:
    assert run("scripts", "lint", "--dir", str(scripts)).exit_code == 0
    (scripts / "zz_broken.lua").write_text("-- @key k\nlocal a = 1\nlocal b = = 2\n")
    res = run("scripts", "lint", "--dir", str(scripts))
    assert res.exit_code == 1
    assert f"{scripts / 'zz_broken.lua'}:3: error LP001: Lua syntax" in res.output
    one_line_error(run("scripts", "load", "--dir", str(scripts), "--url", url), "zz_broken.lua:3:")
    assert int(r.info("memory")["number_of_cached_scripts"]) == 0  # nothing was loaded


def test_lint_flags_undeclared_keys_and_globals(tmp_path: Path) -> None:
    (tmp_path / "g.lua").write_text("-- @key k\ncounter = 1\nreturn redis.call('GET', KEYS[2])\n")
    res = run("scripts", "lint", "--dir", str(tmp_path))
    assert res.exit_code == 1
    assert "g.lua:3:26: error LP101: uses KEYS[2] but the header declares 1 @key" in res.output
    assert "g.lua:2:1: error W111: setting non-standard global variable 'counter'" in res.output


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["scripts", "call", "nope"], ["unknown script 'nope'"]),
        (
            ["scripts", "call", "rate_limit_fixed", "-k", "a"],
            ["takes 2 args (limit, window), got 0"],
        ),
    ],
)
def test_bad_calls_fail_before_connecting(
    scripts: Path, args: list[str], fragments: list[str]
) -> None:
    one_line_error(run(*args, "--dir", str(scripts), "--url", "redis://127.0.0.1:1/0"), *fragments)


def test_unreachable_server_names_the_address(scripts: Path) -> None:
    one_line_error(
        run("scripts", "load", "--dir", str(scripts), "--url", "redis://127.0.0.1:1/0"),
        "cannot connect",
        "127.0.0.1:1",
    )


def test_wrong_password_is_masked(scripts: Path, locked: ServerProcess) -> None:
    url = f"redis://:not-the-pw@{locked.host}:{locked.port}/0"
    res = run("scripts", "load", "--dir", str(scripts), "--url", url)
    one_line_error(res, "authentication failed", f"{locked.host}:{locked.port}")
    assert "not-the-pw" not in res.output
    ok = run(
        "scripts", "status", "--dir", str(scripts), "--url", url.replace("not-the-pw", "s3cret-pw")
    )
    assert "s3cret-pw" not in ok.output and ok.exit_code == 1  # nothing loaded there yet


def test_redis_url_from_environment(scripts: Path, url: str) -> None:
    res = run("scripts", "load", "--dir", str(scripts), env={"REDIS_URL": url})
    assert res.exit_code == 0 and "capped_push" in res.output


def test_non_utf8_script_is_one_line_error(tmp_path: Path) -> None:
    (tmp_path / "bin.lua").write_bytes(b"return '\xff'\n")
    args = ["scripts", "load", "--dir", str(tmp_path), "--url", "redis://127.0.0.1:1/0"]
    one_line_error(run(*args), "bin.lua:1: not valid UTF-8")
    listed = run("scripts", "list", "--dir", str(tmp_path))  # listed, marked, exit 1
    assert listed.exit_code == 1 and "bin.lua:1: not valid UTF-8" in listed.stdout


def test_installed_console_script_has_no_traceback(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "luapipe"
    (tmp_path / "bad.lua").write_text("return = 1\n")
    proc = subprocess.run(
        [str(exe), "scripts", "load", "--dir", str(tmp_path), "--url", "redis://127.0.0.1:1"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert (
        proc.stderr.strip()
        == f"error: {tmp_path / 'bad.lua'}:1: Lua syntax error: unexpected symbol near '='"
    )


def test_committed_lock_file_matches_the_bundled_scripts() -> None:
    """scripts_lua/luapipe.lock.json is what `luapipe deploy --check` compares against:
    editing or generating a script without re-deploying shows up here first."""
    from luapipe.scripts.deploy import read_lock
    from luapipe.scripts.registry import ScriptRegistry

    lock = read_lock(SCRIPTS_DIR / "luapipe.lock.json")
    assert lock == {s.name: s.sha for s in ScriptRegistry.from_directory(SCRIPTS_DIR)}


def test_json_output_is_what_the_library_values_say(scripts: Path, url: str) -> None:
    """The CLI renders, the library decides: each --json document is the library value's
    ``as_dict()``, so a library user gets the same JSON as the command line."""
    from luapipe.scripts.deploy import deploy
    from luapipe.scripts.lint import lint_directory
    from luapipe.scripts.registry import ScriptRegistry

    (scripts / "broken.lua").write_text("return = 1\n")
    listed = json.loads(run("scripts", "list", "--dir", str(scripts), "--json").output)
    reg = ScriptRegistry.from_directory(scripts, strict=False)
    rows = [*(s.as_dict() for s in reg), *(p.as_dict() for p in reg.problems)]
    assert listed == sorted(rows, key=lambda row: row["name"])
    linted = json.loads(run("scripts", "lint", "--dir", str(scripts), "--json").output)
    assert linted == [i.as_dict() for i in lint_directory(scripts).issues]
    (scripts / "broken.lua").unlink()
    assert run("deploy", "--dir", str(scripts), "--url", url).exit_code == 0
    (scripts / "extra.lua").write_text("return 1\n")  # drift: added since the lock
    reg = ScriptRegistry.from_directory(scripts)
    client = redis.Redis.from_url(url)
    checked = json.loads(
        run("deploy", "--dir", str(scripts), "--url", url, "--check", "--json").output
    )
    lock = scripts / "luapipe.lock.json"
    assert checked == deploy(reg, client, lock, check=True, directory=scripts).as_dict()
    assert checked["drift"] and not checked["ok"]
    status = json.loads(
        run("scripts", "status", "--dir", str(scripts), "--url", url, "--json").output
    )
    assert status == [n.as_dict() for n in reg.status(client)]
    client.close()
