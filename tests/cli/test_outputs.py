"""Output files are checked by creating them before any timing: a path nobody can write is
one line, exit 1, before a private redis-server starts; a missing directory is named, never
made; a parent that is a file is called a file."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from luapipe.cli import main

from .test_arguments_first import no_server  # noqa: F401  (a fixture)


def _bench(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, ["bench", "ping", "--duration", "0.1", *args])
    return res.exit_code, res.output


@pytest.mark.usefixtures("no_server")
def test_a_path_in_proc_is_refused_in_one_line_before_any_timing() -> None:
    code, out = _bench("--html", "/proc/x.html")
    assert code == 1 and out.count("\n") == 1, out
    assert out.startswith("error: /proc/x.html: cannot write it (No such file or directory: ")
    assert "/proc takes no new files" in out and "Traceback" not in out


@pytest.mark.usefixtures("no_server")
def test_a_missing_directory_is_named_and_never_made(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "r.json"
    code, out = _bench("--json", str(target))
    assert code == 1, out
    assert f"directory {target.parent} does not exist (create it first)" in out
    assert not (tmp_path / "new").exists()


@pytest.mark.usefixtures("no_server")
def test_a_parent_that_is_a_file_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    code, out = _bench("--csv", str(tmp_path / "notes.txt" / "r.csv"))
    assert code == 1, out
    assert f"{tmp_path / 'notes.txt'} is a file, not a directory" in out
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.usefixtures("no_server")
def test_the_demo_makes_its_folder_but_not_the_folders_above_it(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["demo", "--out", str(tmp_path / "a" / "demo-out")])
    assert res.exit_code == 1, res.output
    assert f"directory {tmp_path / 'a'} does not exist" in res.output
    assert not (tmp_path / "a").exists()


def test_a_run_that_fails_leaves_no_empty_output_behind(tmp_path: Path) -> None:
    """The files are created before the run; when it fails (here: no server at that
    address), the empty ones go again and a file the user already had stays."""
    mine = tmp_path / "kept.csv"
    mine.write_text("")
    args = ["bench", "ping", "--url", "redis://127.0.0.1:1/0", "--duration", "0.1"]
    res = CliRunner().invoke(main, [*args, "--json", str(tmp_path / "r.json"), "--csv", str(mine)])
    assert res.exit_code == 1, res.output
    assert not (tmp_path / "r.json").exists() and mine.exists()


@pytest.mark.usefixtures("no_server")
def test_a_refused_path_leaves_no_empty_file_of_the_paths_before_it(tmp_path: Path) -> None:
    """``--json r.json --html /proc/x.html``: r.json was created first, then /proc/x.html was
    refused; the run never started, so r.json must not stay behind as an empty file."""
    code, out = _bench("--json", str(tmp_path / "r.json"), "--csv", str(tmp_path / "r.csv"),
                       "--html", "/proc/x.html")  # fmt: skip
    assert code == 1 and out.startswith("error: /proc/x.html: cannot write it"), out
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_write_that_fails_midway_leaves_no_half_written_file(tmp_path: Path) -> None:
    """A full disk, as a file size limit of 64 KiB: the HTML report does not fit. The error
    names the file, no truncated report.html stays behind (a report the user already had is
    left as it was), and the CSV, which fit, is whole."""
    import json
    import resource
    import subprocess
    import sys

    from tests.report.sample import sample_result

    results = tmp_path / "results.json"
    results.write_text(json.dumps(sample_result()))
    old = tmp_path / "old.html"
    old.write_text("my last report")

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))

    for html in (tmp_path / "report.html", old):
        res = subprocess.run(
            [sys.executable, "-m", "luapipe", "report", str(results),
             "--csv", str(tmp_path / "r.csv"), "--html", str(html)],
            capture_output=True, text=True, preexec_fn=small_files, check=False,
        )  # fmt: skip
        assert res.returncode == 1, res.stderr
        assert res.stderr.splitlines()[-1] == f"error: {html}: cannot write it (File too large)"
        assert "Traceback" not in res.stderr
    assert not (tmp_path / "report.html").exists()
    assert old.read_text() == "my last report"
    assert (tmp_path / "r.csv").read_text().count("\n") == 1 + len(sample_result()["records"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.html", "r.csv", "results.json"]


@pytest.mark.usefixtures("no_server")
@pytest.mark.parametrize("option", ["--json", "--csv", "--html"])
def test_an_empty_output_path_is_refused_before_any_timing(option: str) -> None:
    """`--html "$OUT"` with OUT unset ran the whole benchmark and wrote nothing, silently."""
    code, out = _bench(option, "")
    assert code == 2, out
    assert f"Invalid value for '{option}': an empty path" in out


def test_an_interrupt_while_writing_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C between writing the report beside its path and renaming it over the path."""
    import os

    from luapipe.report.files import write_whole

    def interrupted(*args: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_whole(tmp_path / "report.html", "<html></html>")
    assert list(tmp_path.iterdir()) == []


def test_a_demo_that_fails_removes_the_folder_it_made(tmp_path: Path) -> None:
    """The demo makes its --out folder; a run that fails (no server at --url) left it behind,
    empty. A folder the user already had stays."""
    mine = tmp_path / "mine"
    mine.mkdir()
    for out in (tmp_path / "demo-out", mine):
        args = ["demo", "--out", str(out), "--url", "redis://127.0.0.1:1/0"]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert list(mine.iterdir()) == []
