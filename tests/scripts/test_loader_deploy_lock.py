"""Deploy refuses an empty scripts directory; the lock file's version and SHAs are checked
with the line they stand on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.cli import main
from luapipe.errors import LockFileError, LuapipeError
from luapipe.scripts.deploy import LOCK_NAME, deploy, read_lock, write_lock
from luapipe.scripts.registry import ScriptRegistry

from ..conftest import SCRIPTS_DIR


@pytest.mark.parametrize("check", [False, True])
def test_deploy_of_an_empty_directory_is_an_error(
    fake: redis.Redis, tmp_path: Path, check: bool
) -> None:
    empty = tmp_path / "scirpts_lua"  # a typo in --dir: exists, holds no scripts
    empty.mkdir()
    (empty / "notes.txt").write_text("not a script\n")
    reg = ScriptRegistry.from_directory(empty)
    with pytest.raises(LuapipeError) as info:
        deploy(reg, fake, empty / LOCK_NAME, check=check, directory=empty)
    message = str(info.value)
    assert message.startswith(f"{empty}: no scripts to deploy") and "\n" not in message
    assert not (empty / LOCK_NAME).exists()
    assert fake.script_exists("0" * 40) == [False]  # nothing reached the server


def test_deploy_of_an_empty_registry_names_the_lock_directory(
    fake: redis.Redis, tmp_path: Path
) -> None:
    with pytest.raises(LuapipeError, match=rf"^{tmp_path}: no scripts to deploy"):
        deploy(ScriptRegistry([]), fake, tmp_path / LOCK_NAME)


@pytest.mark.parametrize("check", [[], ["--check"]])
def test_cli_deploy_of_an_empty_directory_exits_1(
    fake: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: list[str]
) -> None:
    from luapipe.cli import _common

    monkeypatch.setattr(_common, "client", lambda url: fake)
    empty = tmp_path / "empty"
    empty.mkdir()
    res = CliRunner().invoke(main, ["deploy", "--dir", str(empty), *check])
    assert res.exit_code == 1, res.output
    assert res.output.strip().splitlines() == [
        f"error: {empty}: no scripts to deploy (no *.lua files there; check the directory)"
    ]


def test_deploy_still_works_with_scripts(fake: redis.Redis, tmp_path: Path) -> None:
    d = tmp_path / "scripts_lua"
    shutil.copytree(SCRIPTS_DIR, d, ignore=shutil.ignore_patterns("*.json", "op_*", "window*"))
    report = deploy(ScriptRegistry.from_directory(d), fake, d / LOCK_NAME)
    assert report.lock_written and len(report.scripts) == 6
    assert deploy(ScriptRegistry.from_directory(d), fake, d / LOCK_NAME, check=True).ok


def _lock(tmp_path: Path, text: str) -> Path:
    p = tmp_path / LOCK_NAME
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{\n  "version": 99,\n  "scripts": {}\n}\n', ":2: unsupported lock version 99"),
        ('{\n  "scripts": {},\n  "version": "1"\n}\n', ':3: unsupported lock version "1"'),
        ('{"version": true, "scripts": {}}', ":1: unsupported lock version true"),
        ('{"version": 1.0, "scripts": {}}', ":1: unsupported lock version 1.0"),
        ('{\n  "scripts": {}\n}\n', ':1: no lock version (expected "version": 1)'),
        ("[1]", ':1: expected {"version": 1, "scripts": {name: sha}}'),
        (
            '{\n  "version": 1,\n  "scripts": {\n    "a": "' + "0" * 40 + '",\n'
            '    "b": "ABC"\n  }\n}\n',
            ":5: script 'b': 'ABC' is not a lower-case sha1",
        ),
        (
            '{"version": 1, "scripts": {\n"caf\\u00e9": 7}}',
            ":2: script 'café': 7 is not a lower-case sha1",
        ),
    ],
)
def test_bad_lock_files_name_the_line(tmp_path: Path, text: str, message: str) -> None:
    p = _lock(tmp_path, text)
    with pytest.raises(LockFileError) as info:
        read_lock(p)
    assert str(info.value) == f"{p}{message}"


def test_written_lock_reads_back(tmp_path: Path) -> None:
    p = tmp_path / LOCK_NAME
    write_lock(p, {"b": "1" * 40, "a": "2" * 40})
    assert json.loads(p.read_text())["version"] == 1
    assert read_lock(p) == {"a": "2" * 40, "b": "1" * 40}
