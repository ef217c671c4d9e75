"""Arguments are checked before anything starts: no private redis-server for a bad name, a
bad spec, an option --anchors does not take, or an output nobody can write. Catalogue names
work for verify as for bench; generate writes next to the spec (or into --out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from luapipe.bench import server
from luapipe.cli import main

from ..conftest import EXAMPLES_DIR


@pytest.fixture
def no_server(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every private redis-server the command tries to start, refused and recorded."""
    started: list[str] = []

    class Refused(server.EmbeddedRedis):
        def __enter__(self) -> Any:
            started.append("EmbeddedRedis")
            raise AssertionError("a private redis-server was started")

    monkeypatch.setattr(server, "EmbeddedRedis", Refused)
    return started


def _bad_spec(tmp_path: Path) -> Path:
    spec = tmp_path / "bad.toml"
    spec.write_text((EXAMPLES_DIR / "operations" / "reserve_stock.toml").read_text() + "\n[[x")
    return spec


def _invoke(args: list[str]) -> Result:
    return CliRunner().invoke(main, args)


BEFORE_ANY_SERVER = [
    (["verify", "nope"], 1, "unknown operation 'nope': not a file, not in the catalogue"),
    (["verify", "reserve_stock", "nope", "nada"], 1, "unknown operation 'nope', 'nada'"),
    (["verify", "{bad}"], 1, "bad.toml:"),
    (["bench", "nope"], 1, "unknown operation 'nope'"),
    (["bench", "{bad}"], 1, "bad.toml:"),
    (["bench", "--contention", "zipf:0"], 2, "S > 0"),
    (["bench", "--anchors", "reserve_stock"], 2, "--anchors runs its own figures: drop"),
    (["bench", "--anchors", "--rtt", "1"], 2, "--rtt do not apply"),
    (["bench", "--json", "/proc/luapipe/r.json"], 1, "/proc/luapipe/r.json: cannot write it"),
    (["demo", "--out", "{bad}"], 2, "is a file"),
]


@pytest.mark.parametrize(("args", "code", "says"), BEFORE_ANY_SERVER)
def test_bad_arguments_are_refused_before_a_server_starts(
    no_server: list[str], tmp_path: Path, args: list[str], code: int, says: str
) -> None:
    bad = str(_bad_spec(tmp_path))
    res = _invoke([a.replace("{bad}", bad) for a in args])
    assert no_server == [], res.output
    assert res.exit_code == code, res.output
    assert says in res.output and "Traceback" not in res.output
    assert "started a private redis-server" not in res.output


def test_verify_takes_catalogue_names_as_bench_does() -> None:
    res = _invoke(["verify", "reserve_stock", "transfer", "--fake", "--cases", "20"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert len(lines) == 2 and all(" ok" in ln or "agree" in ln for ln in lines), lines
    assert lines[0].startswith("reserve_stock") and lines[1].startswith("transfer")


def test_generate_writes_next_to_the_spec_and_nothing_where_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    spec = specs / "reserve_stock.toml"
    spec.write_text((EXAMPLES_DIR / "operations" / "reserve_stock.toml").read_text())
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    res = _invoke(["generate", str(spec)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in specs.iterdir()) == [
        "op_reserve_stock.lua",
        "op_reserve_stock.py",
        "reserve_stock.toml",
    ]
    assert list(elsewhere.iterdir()) == []  # no examples/operations/generated here
    out = tmp_path / "out"
    res = _invoke(["generate", str(spec), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["op_reserve_stock.lua", "op_reserve_stock.py"]


def test_only_the_makefile_writes_into_the_checked_in_generated_directory() -> None:
    makefile = (EXAMPLES_DIR.parent / "Makefile").read_text()
    target = makefile[makefile.index("\ngenerate:") :].split("\n\n")[0]
    assert "--out scripts_lua" in target and "--py-out examples/operations/generated" in target
    defaults = [str(p.default) for p in main.commands["generate"].params]
    assert not any("generated" in d or "scripts_lua" in d for d in defaults), defaults
