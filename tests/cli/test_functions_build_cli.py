"""`luapipe functions build|verify|gc` as a deploy pipeline runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from luapipe.bench.server import ServerProcess
from luapipe.cli import main

from ..conftest import SCRIPTS_DIR


def run(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def one_line_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    d = tmp_path / "scripts_lua"
    shutil.copytree(SCRIPTS_DIR, d, ignore=shutil.ignore_patterns("*.json"))
    (d / "legacy.lua").write_text("-- @key k\nredis.replicate_commands()\nreturn 1\n")
    return d


def test_build_writes_the_library_where_out_says_and_lists_what_it_left(
    scripts: Path, tmp_path: Path
) -> None:
    out = tmp_path / "build"
    res = run("functions", "build", str(scripts), "--library", "app", "--out", str(out))
    assert res.exit_code == 0, res.output
    first = res.output.splitlines()[0]
    assert first.startswith(f"{out / 'app.lua'}: library luapipe_app_") and "(written)" in first
    assert f"{len(list(SCRIPTS_DIR.glob('*.lua')))} functions" in first  # all but legacy
    assert "not converted: legacy: line 2 uses redis.replicate_commands" in res.output
    text = (out / "app.lua").read_text()
    assert text.startswith("#!lua name=luapipe_app_")
    before = sorted(p.name for p in scripts.iterdir())
    again = run("functions", "build", str(scripts), "--library", "app", "--out", str(out))
    assert "(unchanged)" in again.output.splitlines()[0]
    assert sorted(p.name for p in scripts.iterdir()) == before  # nothing in the scripts dir
    data = json.loads(
        run(
            "functions", "build", str(scripts), "--library", "app", "--out", str(out), "--json"
        ).output
    )
    assert data["scripts"]["capped_push"] == f"{data['library']}_capped_push"
    assert data["skipped"][0]["name"] == "legacy"


def test_build_refuses_the_scripts_directory_a_foreign_file_and_broken_scripts(
    scripts: Path, tmp_path: Path
) -> None:
    into = run("functions", "build", str(scripts), "--library", "app", "--out", str(scripts))
    one_line_error(into, "never into the scripts directory")
    mine = tmp_path / "mine.lua"
    mine.write_text("#!lua name=mine\nredis.register_function('m', function() return 1 end)\n")
    foreign = run("functions", "build", str(scripts), "--library", "app", "--out", str(mine))
    one_line_error(foreign, "mine.lua: exists and is not a library luapipe built")
    assert mine.read_text().startswith("#!lua name=mine")
    (scripts / "oops.lua").write_text("-- @key k\nlocal a = = 1\n")
    broken = run("functions", "build", str(scripts), "--library", "app", "--out", str(tmp_path))
    one_line_error(broken, "oops.lua:2: Lua syntax error")
    assert not (tmp_path / "app.lua").exists()


def test_verify_proves_the_library_on_fakeredis_and_counts_the_cases(scripts: Path) -> None:
    res = run(
        "functions", "verify", str(scripts), "--library", "app", "--fake", "--cases", "20",
        "--script", "capped_push", "--script", "window_count", "--script", "legacy",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "capped_push: ok: 20 cases x 2 forms (script, function)" in res.output
    assert "not run: window_count: fakeredis refuses a script's #!lua line" in res.output
    assert "not converted: legacy" in res.output
    assert res.output.splitlines()[-1].startswith("luapipe_app_")
    assert ": ok: 20 cases over 1 script " in res.output.splitlines()[-1]


def test_gc_keeps_the_built_file_and_deletes_an_older_build(
    scripts: Path, tmp_path: Path, r: redis.Redis, redis_server: ServerProcess
) -> None:
    url = redis_server.url
    out = tmp_path / "out"
    assert (
        run("functions", "build", str(scripts), "--library", "app", "--out", str(out)).exit_code
        == 0
    )
    old = (out / "app.lua").read_text()
    r.function_load(old)
    (scripts / "capped_push.lua").write_text("-- @key l\nreturn 1\n")
    assert (
        run("functions", "build", str(scripts), "--library", "app", "--out", str(out)).exit_code
        == 0
    )
    new = (out / "app.lua").read_text()
    r.function_load(new)
    old_name = old.split("\n", 1)[0].split("=", 1)[1]
    res = run("functions", "gc", str(out / "app.lua"), "--url", url)
    assert res.exit_code == 0, res.output
    assert f"deleted {old_name}; kept 1 current version" in res.output
    not_built = tmp_path / "x.lua"
    not_built.write_text("return 1\n")
    one_line_error(run("functions", "gc", str(not_built), "--url", url), "not a library built")


def test_verify_that_compared_nothing_is_not_a_pass(scripts: Path) -> None:
    """`functions verify --script legacy` (a script left out of the library), or a directory
    of #!lua scripts on fakeredis, ran no case and printed 'ok: 0 cases over 0 scripts',
    exit 0: a deploy pipeline's proof that proved nothing."""
    for only in ("legacy", "window_count"):
        res = run("functions", "verify", str(scripts), "--library", "app", "--fake",
                  "--cases", "5", "--script", only)  # fmt: skip
        assert res.exit_code == 1, res.output
        last = res.output.splitlines()[-1]
        assert last.startswith("luapipe_app_") and ": NOTHING VERIFIED: no script was run" in last
        assert "ok" not in last


def test_out_that_cannot_be_written_is_one_line_naming_it(
    scripts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--out under a file said '<file>: File exists' (mkdir's words), and a place that
    refused the write named luapipe's own temporary file ('/sys/.app.lua.tmp: Permission
    denied'), which the user never named; the temporary file was left behind."""
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    for out in (a_file, a_file / "app.lua", a_file / "deeper"):
        res = run("functions", "build", str(scripts), "--library", "app", "--out", str(out))
        one_line_error(res, f"cannot be written, {a_file} is a file: --out names a directory")
        assert "File exists" not in res.output
    (tmp_path / "adir.lua").mkdir()
    res = run("functions", "build", str(scripts), "--library", "app",
              "--out", str(tmp_path / "adir.lua"))  # fmt: skip
    one_line_error(res, f"{tmp_path / 'adir.lua'}: is a directory")

    def refused(self: Path, target: object) -> None:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "replace", refused)
    out = tmp_path / "ro"
    res = run("functions", "build", str(scripts), "--library", "app", "--out", str(out))
    one_line_error(res, f"{out / 'app.lua'}: cannot write the library: Permission denied")
    assert ".tmp" not in res.output and list(out.iterdir()) == []


def test_gc_names_a_missing_file_and_a_directory_for_what_they_are(
    scripts: Path, tmp_path: Path, redis_server: ServerProcess
) -> None:
    """`functions gc buidl/app.lua` (a typo) said 'not a library built by luapipe functions
    build', and `functions gc build` (the directory deploy --dir takes) 'build:1: file:
    cannot read: Is a directory', read as a spec."""
    url = redis_server.url
    out = tmp_path / "build"
    assert (
        run("functions", "build", str(scripts), "--library", "app", "--out", str(out)).exit_code
        == 0
    )
    typo = tmp_path / "buidl" / "app.lua"
    one_line_error(run("functions", "gc", str(typo), "--url", url), f"{typo}: no such file")
    one_line_error(
        run("functions", "gc", str(out), "--url", url),
        f"{out}: a directory; name the built library's file ({out / 'app.lua'})",
    )
