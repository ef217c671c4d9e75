"""The pytest plugin, used the way a project would: an inner pytest run on a tmp project."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from luapipe.pytest_plugin import RunCounts

ROOT = Path(__file__).resolve().parents[2]

COUNTER_LUA = "-- @key counter\nreturn redis.call('INCR', KEYS[1])\n"
FIXTURE_TESTS = Path(__file__).with_name("test_plugin_fixtures.py")
COUNTER_TEST = """
def test_counter(luapipe_client, luapipe_registry):
    assert luapipe_registry.names() == ["counter"]
    assert luapipe_registry.call(luapipe_client, "counter", keys=["k"]) == 1
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


def write_counter_project(tmp_path: Path, pyproject: str, scripts: str) -> Path:
    (tmp_path / scripts).mkdir()
    (tmp_path / scripts / "counter.lua").write_text(COUNTER_LUA)
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent(pyproject))
    (tmp_path / "test_counter.py").write_text(COUNTER_TEST)
    return tmp_path


def test_plugin_fixtures_in_a_project(tmp_path: Path) -> None:
    """tests/plugin/test_plugin_fixtures.py in a project that points at luapipe's scripts."""
    (tmp_path / "pyproject.toml").write_text(
        f'[tool.luapipe]\nscripts_dir = "{ROOT / "scripts_lua"}"\n'
    )
    shutil.copy(FIXTURE_TESTS, tmp_path / "test_fixtures.py")
    done = inner_pytest(tmp_path, "-q", "-s", "-rs")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "9 passed" in done.stdout
    assert "backend=real" in done.stdout and "backend=fake" in done.stdout


def test_pyproject_scripts_dir(tmp_path: Path) -> None:
    write_counter_project(tmp_path, '[tool.luapipe]\nscripts_dir = "lua"\n', "lua")
    done = inner_pytest(tmp_path, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_ini_option_overrides_pyproject(tmp_path: Path) -> None:
    write_counter_project(
        tmp_path,
        '[tool.luapipe]\nscripts_dir = "nowhere"\n'
        '[tool.pytest.ini_options]\nluapipe_scripts_dir = "custom"\n',
        "custom",
    )
    done = inner_pytest(tmp_path, "-q")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_marker_is_registered(tmp_path: Path) -> None:
    done = inner_pytest(tmp_path, "--markers")
    assert "@pytest.mark.luapipe_both" in done.stdout


def test_marker_without_a_backend_fixture_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "test_x.py").write_text(
        "import pytest\n@pytest.mark.luapipe_both\ndef test_x(luapipe_redis):\n    pass\n"
    )
    done = inner_pytest(tmp_path, "-q")
    assert done.returncode != 0
    assert "needs a fixture that follows the backend" in done.stdout + done.stderr


def test_an_invalid_luapipe_url_is_one_usage_line_without_the_password(tmp_path: Path) -> None:
    """--luapipe-url with a raw "/" in its password: the fixture parsed it and pytest's
    traceback printed urllib's frame, netloc='bob:S3cretPassw0rd', and its message, "Port
    could not be cast to integer value as 'S3cretPassw0rd'" (issue 16). Now a usage error
    before any test runs, the URL shown as every luapipe message shows it."""
    (tmp_path / "test_x.py").write_text("def test_x(luapipe_redis):\n    pass\n")
    url = "redis://bob:S3cretPassw0rd/xyz@127.0.0.1:7702/0"
    done = inner_pytest(tmp_path, "-q", "--luapipe-url", url)
    out = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, out
    assert "--luapipe-url redis://bob:***@127.0.0.1:7702/0: the password holds '/'" in out
    assert "S3cret" not in out and "Passw0rd" not in out and "Traceback" not in out


def test_example_app_tests_pass_with_the_plugin() -> None:
    app = ROOT / "examples" / "app"
    if not (app / "tests").is_dir():
        pytest.skip("examples/app has no tests")
    done = inner_pytest(app, "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_run_counts_exclude_noscript_refusals() -> None:
    counts = RunCounts({"evalsha": 5, "eval": 2, "get": 9}, {"NOSCRIPT": 3})
    assert counts.script_runs() == 4
