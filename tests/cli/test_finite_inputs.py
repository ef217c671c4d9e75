"""Every file luapipe reads whole is finite: a device or a pipe named where a spec, a
results file or a lock file goes read until memory ran out and ended in a MemoryError
traceback (``luapipe report /dev/zero``). Now it is a usage error naming the file, before
anything is read; --arg-file and --url-file read no further than their bounds (their own
tests). And should memory run out anyway, that is one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from luapipe.cli import main

CLOSED = "redis://127.0.0.1:1/0"


@pytest.mark.parametrize(
    ("args", "param"),
    [
        (["report", "{x}"], "RESULTS"),
        (["generate", "{x}"], "SPECS..."),
        (["verify", "{x}", "--fake"], "SPECS..."),
        (["bench", "{x}"], "[SPECS]..."),
        (["functions", "gc", "{x}", "--url", CLOSED], "[SPECS]..."),
        (["deploy", "--dir", "scripts_lua", "--lock", "{x}", "--url", CLOSED], "--lock"),
    ],
)
@pytest.mark.parametrize("endless", ["/dev/zero", "fifo"])
def test_a_device_or_a_pipe_is_refused_before_it_is_read(
    args: list[str], param: str, endless: str, tmp_path: Path
) -> None:
    (tmp_path / "scripts_lua").mkdir()
    (tmp_path / "scripts_lua" / "one.lua").write_text("return 1\n")
    if endless == "fifo":
        endless = str(tmp_path / "fifo")
        os.mkfifo(endless)  # opening it to read would wait for a writer for ever
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = CliRunner().invoke(main, [a.format(x=endless) for a in args], prog_name="luapipe")
    finally:
        os.chdir(here)
    assert res.exit_code == 2, res.output
    assert res.output.startswith(
        f"error: Invalid value for '{param}': {endless} is not a regular file: luapipe reads "
        "it whole, and a device or a pipe may never end (see luapipe "
    ), res.output
    assert len(res.output.splitlines()) == 1


def test_running_out_of_memory_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import luapipe.report

    def load_results(path: str) -> None:
        raise MemoryError

    monkeypatch.setattr(luapipe.report, "load_results", load_results)
    (tmp_path / "r.json").write_text("{}")
    res = CliRunner().invoke(main, ["report", str(tmp_path / "r.json")])
    assert (res.exit_code, res.output) == (
        1,
        "error: out of memory: a file or a value too large for this machine\n",
    )
