"""Bad command-line input gets a clear answer before anything starts, never a traceback or a
hang; and the small promises of the listing commands (stdout, columns, plurals)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner, Result

from luapipe.bench.server import ServerProcess
from luapipe.cli import main
from luapipe.scripts.registry import bundled_scripts_dir

from ..conftest import SCRIPTS_DIR

#: a server nobody listens on: validation must answer before connecting or starting one
NOWHERE = "redis://127.0.0.1:1/0"


def _usage_error(res: Result, *fragments: str) -> None:
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    error = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(error) == 1 and error[0].startswith("error: "), res.output
    for fragment in fragments:
        assert fragment in error[0], error[0]


def _one_line_error(res: Result, *fragments: str) -> None:
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert res.exit_code == 1, res.output
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


BAD_NUMBERS = [
    (["--duration", "nan"], ["'--duration'", "finite number > 0", "nan"]),
    (["--duration", "inf"], ["'--duration'", "finite"]),
    (["--duration", "0"], ["'--duration'", "> 0"]),
    (["--duration", "-1"], ["'--duration'", "> 0"]),
    (["--warmup", "-1"], ["'--warmup'", ">= 0"]),
    (["--warmup", "nan"], ["'--warmup'", "finite"]),
    (["--rate", "-5"], ["'--rate'", "> 0"]),
    (["--rate", "0"], ["'--rate'", "> 0"]),
    (["--rate", "nan"], ["'--rate'", "finite"]),
    (["--rtt", "inf"], ["'--rtt'", "from 0 to 1000 ms"]),
    (["--rtt", "nan"], ["'--rtt'", "from 0 to 1000 ms"]),
    (["--rtt", "-1"], ["'--rtt'", "from 0 to 1000 ms"]),
    (["--rtt", "0,,1"], ["'--rtt'", "empty item"]),
    (["--rtt", "x"], ["'--rtt'", "not a number"]),
    (["--clients", "1.5"], ["'--clients'", "whole number >= 1", "'1.5'"]),
    (["--clients", "0"], ["'--clients'", "whole number >= 1", "'0'"]),
    (["--clients", "1,,2"], ["'--clients'", "empty item"]),
    (["--rounds", "0"], ["'--rounds'", "x>=1"]),
    (["--batch", "0"], ["'--batch'", "x>=1"]),
    (["--contention", "bogus"], ["'--contention'", "hot, spread or zipf:S", "'bogus'"]),
    (["--contention", "zipf:x"], ["'--contention'", "S > 0", "'x'"]),
    (["--contention", "zipf:-1"], ["'--contention'", "S > 0", "'-1'"]),
    (["--contention", "zipf:nan"], ["'--contention'", "S > 0"]),
]


@pytest.mark.parametrize(
    ("args", "fragments"), BAD_NUMBERS, ids=[" ".join(a) for a, _ in BAD_NUMBERS]
)
def test_bench_refuses_nonsense_numbers(args: list[str], fragments: list[str]) -> None:
    _usage_error(CliRunner().invoke(main, ["bench", "ping", "--url", NOWHERE, *args]), *fragments)


def test_demo_refuses_a_nonsense_duration() -> None:
    _usage_error(CliRunner().invoke(main, ["demo", "--url", NOWHERE, "--duration", "nan"]))


def test_report_of_a_binary_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "results.json"
    bad.write_bytes(b'{"records": [\xff\xfe]}')
    _one_line_error(CliRunner().invoke(main, ["report", str(bad)]), str(bad), "not UTF-8")


def test_cluster_flag_on_a_single_server_is_one_line(redis_server: ServerProcess) -> None:
    args = ["--cluster", "scripts", "status", "--url", redis_server.url]
    _one_line_error(CliRunner().invoke(main, args), redis_server.address)


def test_open_loop_with_too_few_samples_recommends_nothing(
    redis_server: ServerProcess, tmp_path: Path
) -> None:
    out = tmp_path / "r.json"
    args = ["bench", "ping", "--url", redis_server.url, "--rate", "0.5", "--duration", "0.2"]
    res = CliRunner().invoke(
        main, [*args, "--rounds", "1", "--warmup", "0.02", "--no-bystander", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "too few samples" in res.output
    data = json.loads(out.read_text())
    assert [r["form"] for r in data["recommendations"]] == [None]
    for rec in data["records"]:  # one call in a 0.2 s window: ~5 ops/s, not one call's speed
        assert rec["ops"] <= 2 and rec["ops_per_sec"] <= 11, rec["ops_per_sec"]


# --- scripts lint / list / status, deploy ---------------------------------------------------


@pytest.fixture
def long_names(tmp_path: Path) -> Path:
    d = tmp_path / "scripts_lua"
    d.mkdir()
    (d / "a.lua").write_text("-- @key k\nreturn redis.call('GET', KEYS[1])\n")
    (d / "a_rather_long_script_name_indeed.lua").write_text("-- @key k\nreturn 1\n")
    return d


def _sha_column(lines: list[str], after: str = "") -> set[int]:
    """Where the 12-character SHA starts on each line."""
    return {ln.index(" ", ln.index(after) + len(after) if after else 0) for ln in lines}


def test_list_and_status_columns_fit_long_names(long_names: Path, r: redis.Redis) -> None:
    res = CliRunner().invoke(main, ["scripts", "list", "--dir", str(long_names)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) == 2 and len({ln.index(" keys:") for ln in lines}) == 1, res.output
    assert all(" " + ln.split()[1] + "  keys:" in ln for ln in lines)
    url = r.connection_pool.connection_kwargs
    target = f"redis://{url['host']}:{url['port']}/0"
    res = CliRunner().invoke(main, ["scripts", "status", "--dir", str(long_names), "--url", target])
    lines = res.output.splitlines()
    assert len(lines) == 2 and len({ln.index(" MISSING") for ln in lines}) == 1, res.output


def test_lint_summary_is_on_stdout_and_singular(long_names: Path) -> None:
    (long_names / "b.lua").write_text("-- @key k\nreturn redis.call('GET', KEYS[2])\n")
    res = CliRunner().invoke(main, ["scripts", "lint", "--dir", str(long_names)])
    assert res.exit_code == 1
    assert res.stdout.splitlines()[-1] == "3 scripts, 1 error, 0 warnings", res.stdout
    assert "1 errors" not in res.stdout and "1 error" not in res.stderr


def test_deploy_without_a_scripts_directory_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, redis_server: ServerProcess
) -> None:
    monkeypatch.chdir(tmp_path)
    bundled = bundled_scripts_dir()
    before = sorted(p.name for p in bundled.iterdir())
    for extra in ([], ["--check"]):
        res = CliRunner().invoke(main, ["deploy", "--url", redis_server.url, *extra])
        _one_line_error(res, "--dir", "./scripts_lua")
    assert sorted(p.name for p in bundled.iterdir()) == before  # no lock file written there
    listed = CliRunner().invoke(main, ["scripts", "list"])  # the bundled library still lists
    assert listed.exit_code == 0 and "rate_limit_fixed" in listed.output


def test_deploy_finds_scripts_lua_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, r: redis.Redis, redis_server: ServerProcess
) -> None:
    shutil.copytree(SCRIPTS_DIR, tmp_path / "scripts_lua", ignore=shutil.ignore_patterns("*.json"))
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(main, ["deploy", "--url", redis_server.url])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "scripts_lua" / "luapipe.lock.json").exists()
