"""A real Function library (streaq's, two released versions; fetched at test time, see
tests/REAL_SCRIPTS.md): read, listed and linted as the server loads it, and upgraded and
rolled back by deploy as a team would."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.cli import main
from luapipe.scripts.lint import lint_directory
from luapipe.scripts.registry import ScriptRegistry

from ..real_libraries import LIBRARY_PACKAGES, real_libraries
from .test_libraries import _listed
from .test_library_deploy import code_of

FUNCTIONS = [
    "create_groups",
    "fail_dependents",
    "publish_delayed_tasks",
    "publish_task",
    "read_streams",
    "update_dependents",
    "refresh_timeout",
    "schedule_cron_job",
]


@pytest.fixture(scope="module")
def sample() -> Path:
    return real_libraries()


@pytest.mark.parametrize("project", [p.project for p in LIBRARY_PACKAGES])
def test_a_real_library_reads_lints_and_lists_as_the_server_does(
    sample: Path, project: str, r: redis.Redis
) -> None:
    d = sample / project
    reg = ScriptRegistry.from_directory(d)
    (lib,) = reg.libraries
    assert (lib.name, [f.name for f in lib.functions], reg.problems) == ("streaq", FUNCTIONS, ())
    assert lint_directory(d).errors == 0
    r.function_load(lib.source)
    assert _listed(r) == {f.name: list(f.flags) for f in lib.functions}
    listed = CliRunner().invoke(main, ["scripts", "list", "--dir", str(d)]).stdout.splitlines()
    assert [ln.split()[0] for ln in listed] == ["streaq", *FUNCTIONS]
    assert (sample / f"{project}.LICENSE").read_text().startswith("MIT License")


def test_a_real_upgrade_is_found_deployed_and_rolled_back(
    sample: Path, r: redis.Redis, tmp_path: Path
) -> None:
    url = f"redis://127.0.0.1:{r.connection_pool.connection_kwargs['port']}"
    old, new = (sample / p.project for p in LIBRARY_PACKAGES)
    lock = str(tmp_path / "luapipe.lock.json")

    def deploy(d: Path, *flags: str) -> list[str]:
        res = CliRunner().invoke(
            main, ["deploy", *flags, "--dir", str(d), "--lock", lock, "--url", url]
        )
        assert res.exit_code == (1 if "--check" in flags else 0), res.output
        return res.stdout.splitlines()

    deploy(old)
    old_code, new_code = ((d / "streaq.lua").read_text() for d in (old, new))
    assert code_of(r, "streaq") == old_code
    checked = deploy(new, "--check")
    assert checked[0].startswith("changed: streaq (library lock ")
    assert checked[1].startswith("differs: streaq on 127.0.0.1:")
    deploy(new)
    assert code_of(r, "streaq") == new_code
    deploy(new, "--rollback")
    assert code_of(r, "streaq") == old_code
