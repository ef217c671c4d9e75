"""The pytest plugin, used the way a project would: an inner pytest run on a tmp project."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from luapipe.pytest_plugin import RunCounts

ROOT = Path(__file__).resolve().parent.parent

COUNTER_LUA = "-- @key counter\nreturn redis.call('INCR', KEYS[1])\n"

INNER_TESTS = """
import asyncio

import pytest
import redis


@pytest.mark.luapipe_both
def test_both_backends(luapipe_client, luapipe_registry, luapipe_backend):
    assert luapipe_registry.names() == ["counter"]
    assert luapipe_registry.call(luapipe_client, "counter", keys=["k"]) == 1
    print(f"backend={luapipe_backend}")


def test_flush_between_queue_and_execute_runs_once(
    luapipe_redis, luapipe_registry, luapipe_runs, luapipe_chaos
):
    with luapipe_registry.pipeline(luapipe_redis) as p:
        p.call("counter", keys=["k"]).execute()
        p.call("counter", keys=["k"]).incr("plain")
        luapipe_chaos.flush_scripts()
        with luapipe_runs.expect(1):
            assert p.execute() == [2, 1]
    assert luapipe_runs.calls("script|load") == 2


def test_failover_between_queue_and_execute_runs_once(
    luapipe_redis, luapipe_registry, luapipe_runs, luapipe_chaos
):
    with luapipe_registry.pipeline(luapipe_redis) as p:
        p.call("counter", keys=["k"]).execute()
        p.call("counter", keys=["k"])
        luapipe_chaos.failover()
        with luapipe_runs.expect(1):
            assert p.execute() == [2]


def test_the_helper_catches_a_double_run(luapipe_redis, luapipe_runs):
    liar = luapipe_redis.register_script("redis.call('INCR', 'x') "
                                         "return redis.error_reply('NOSCRIPT fake')")
    luapipe_redis.script_load(liar.script)
    with pytest.raises(redis.exceptions.NoScriptError):
        liar()
    assert luapipe_redis.get("x") == b"2"  # redis-py took the script's error for a miss
    with pytest.raises(AssertionError, match="expected 1 script run"):
        with luapipe_runs.expect(1):
            luapipe_redis.eval("return 1", 0)
            luapipe_redis.eval("return 2", 0)


@pytest.mark.luapipe_both
def test_async_on_both(luapipe_async, luapipe_registry, luapipe_client):
    async def main():
        c = luapipe_async()
        try:
            return [await luapipe_registry.call(c, "counter", keys=["k"]) for _ in range(3)]
        finally:
            await c.aclose()

    assert asyncio.run(main()) == [1, 2, 3]
    assert luapipe_client.get("k") == b"3"
"""


def plugin_args() -> list[str]:
    """``-p luapipe.pytest_plugin`` unless the installed entry point already loads it."""
    points = importlib.metadata.entry_points(group="pytest11")
    if any(ep.value == "luapipe.pytest_plugin" for ep in points):
        return []
    return ["-p", "luapipe.pytest_plugin"]


def inner_pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "toolkit"), env.get("PYTHONPATH", "")])
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugin_args(), "-p", "no:cacheprovider", *args],
        cwd=project,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def write_project(tmp_path: Path, pyproject: str, scripts: str = "lua") -> Path:
    (tmp_path / scripts).mkdir()
    (tmp_path / scripts / "counter.lua").write_text(COUNTER_LUA)
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    (tmp_path / "test_inner.py").write_text(INNER_TESTS)
    return tmp_path


def test_plugin_fixtures_in_a_project(tmp_path: Path) -> None:
    project = write_project(tmp_path, '[tool.luapipe]\nscripts_dir = "lua"\n')
    done = inner_pytest(project, "-q", "-s")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "7 passed" in done.stdout
    assert "backend=real" in done.stdout and "backend=fake" in done.stdout


def test_ini_option_overrides_pyproject(tmp_path: Path) -> None:
    project = write_project(
        tmp_path,
        '[tool.luapipe]\nscripts_dir = "nowhere"\n'
        '[tool.pytest.ini_options]\nluapipe_scripts_dir = "custom"\n',
        scripts="custom",
    )
    done = inner_pytest(project, "-q", "-k", "both_backends")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_marker_is_registered(tmp_path: Path) -> None:
    project = write_project(tmp_path, "")
    (project / "lua").rename(project / "scripts_lua")  # the default place
    done = inner_pytest(project, "--markers")
    assert "@pytest.mark.luapipe_both" in done.stdout


def test_example_app_tests_pass_with_the_plugin() -> None:
    app = ROOT / "examples" / "app"
    if not (app / "tests").is_dir():
        pytest.skip("examples/app has no tests")
    done = inner_pytest(app, "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_run_counts_exclude_noscript_refusals() -> None:
    counts = RunCounts({"evalsha": 5, "eval": 2, "get": 9}, {"NOSCRIPT": 3})
    assert counts.script_runs() == 4
