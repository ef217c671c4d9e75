"""A URL whose password stays off the command line (where ``ps`` shows it to every user of
the machine): ``--url-file PATH`` (its first line; ``-`` is stdin) and ``--url-env NAME``,
in every command that takes ``--url``, with the same checks and the same one-line errors.
The property test (test_no_secret.py) runs every command each way with generated
passwords; here each way works, and each mistake is one line naming the option."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from click.testing import CliRunner

from luapipe.bench.server import EmbeddedRedis, ServerProcess, free_port
from luapipe.cli import main

from .urlcommands import argv, invoke, prepare, url_commands

PASSWORD = "pa/ss#word with space"
COMMANDS = sorted(url_commands())


@pytest.fixture(scope="module")
def guarded() -> Iterator[ServerProcess]:
    with EmbeddedRedis(["--requirepass", PASSWORD]) as server:
        yield server


def _url(server: ServerProcess) -> str:
    return f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{server.port}/0"


@pytest.mark.parametrize("way", ["--url-file", "--url-file -", "--url-env"])
def test_each_way_reaches_the_server(way: str, guarded: ServerProcess, tmp_path: Path) -> None:
    prepare(tmp_path)
    res = invoke("scripts load", tmp_path, _url(guarded), way=way)
    assert res.exit_code == 0, res.output
    assert res.output.startswith("one "), res.output


@pytest.mark.parametrize("path", COMMANDS)
def test_every_command_takes_each_way(path: str) -> None:
    options = {o for p in url_commands()[path].params for o in getattr(p, "opts", [])}
    assert {"--url", "--url-file", "--url-env"} <= options, path


def _mistakes(tmp_path: Path) -> dict[str, tuple[list[str], str, str]]:
    """{what: (options, stdin, the one line)}"""
    (tmp_path / "empty.url").write_text("\n\nredis://127.0.0.1:6379/0\n")
    (tmp_path / "binary.url").write_bytes(b"\xff\xfe redis://\n")
    (tmp_path / "ok.url").write_text("redis://127.0.0.1:6379/0\n")
    missing = tmp_path / "missing.url"
    return {
        "missing": (
            ["--url-file", str(missing)],
            "",
            f"error: --url-file {missing}: cannot read it (No such file or directory)",
        ),
        "a directory": (
            ["--url-file", str(tmp_path)],
            "",
            f"error: --url-file {tmp_path}: cannot read it (Is a directory)",
        ),
        "empty first line": (
            ["--url-file", str(tmp_path / "empty.url")],
            "",
            f"error: --url-file {tmp_path / 'empty.url'}: its first line is empty; write the "
            "Redis URL there",
        ),
        "endless": (
            ["--url-file", "/dev/zero"],
            "",
            "error: --url-file /dev/zero: its first line is longer than 8,192 bytes; the file "
            "holds the Redis URL on its first line",
        ),
        "not text": (
            ["--url-file", str(tmp_path / "binary.url")],
            "",
            f"error: --url-file {tmp_path / 'binary.url'}: its first line is not UTF-8 text; "
            "write the Redis URL there",
        ),
        "empty stdin": (
            ["--url-file", "-"],
            "",
            "error: --url-file - (stdin): its first line is empty; write the Redis URL there",
        ),
        "two ways": (
            ["--url", "redis://127.0.0.1:1/0", "--url-file", str(tmp_path / "ok.url")],
            "",
            "error: --url and --url-file exclude each other: give the URL one way",
        ),
        "no such variable": (
            ["--url-env", "LUAPIPE_TEST_NO_SUCH_VARIABLE"],
            "",
            "error: --url-env LUAPIPE_TEST_NO_SUCH_VARIABLE: no such environment variable, or "
            "it is empty",
        ),
        "a URL for a path": (
            ["--url-file", "redis://:pa ss@h:1/0"],
            "",
            "error: --url-file takes the path of a file whose first line is the URL, not the "
            "URL (which --url-file keeps off the command line)",
        ),
        "a URL for a name": (
            ["--url-env", "redis://:pa ss@h:1/0"],
            "",
            "error: --url-env takes the name of an environment variable that holds the URL "
            "(such as REDIS_URL), not the URL or a value",
        ),
        "invalid URL": (
            ["--url-file", "-"],
            "redis://bob:S3cret/Passw0rd@127.0.0.1:1/0\n",
            "error: invalid URL in --url-file - (stdin) redis://bob:***@127.0.0.1:1/0: the "
            "password holds '/', which ends that part of a URL early; write it "
            "percent-encoded (/ is %2F; urllib.parse.quote(password, safe='') encodes every "
            "character that needs it)",
        ),
    }


@pytest.mark.parametrize("path", COMMANDS)
def test_a_mistake_is_one_line_and_a_usage_error_before_anything_starts(
    path: str, tmp_path: Path
) -> None:
    """Exit code 2 in every command, as for an invalid --url; bench, demo and verify start
    no private server first (they would say so on stderr)."""
    prepare(tmp_path)
    base = argv(path, tmp_path, None)
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        for what, (options, stdin, line) in _mistakes(tmp_path).items():
            env = {"LUAPIPE_TEST_NO_SUCH_VARIABLE": ""}
            res = CliRunner().invoke(main, [*base, *options], input=stdin, env=env)
            assert (res.exit_code, res.output) == (2, line + "\n"), (path, what)
    finally:
        os.chdir(here)


def test_the_reproduce_line_repeats_how_the_url_was_given(
    guarded: ServerProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """functions verify ends a mismatch with the command that reproduces it: with the URL
    in a file, that is ``--url-file PATH`` (a masked ``--url 'redis://:***@...'`` would not
    run), and nothing of the password."""
    import luapipe.operations.builtverify as builtverify
    from luapipe.errors import LuapipeError

    prepare(tmp_path)
    seen: list[str] = []

    def verify_built(*args: object, reproduce: str, **kwargs: object) -> None:
        seen.append(reproduce)
        raise LuapipeError("stopped here")

    monkeypatch.setattr(builtverify, "verify_built", verify_built)
    (tmp_path / "my url").write_text(_url(guarded) + "\n")
    for way, given in [
        ("--url-file", f"--url-file '{tmp_path / 'my url'}'"),
        ("--url-env", "--url-env LUAPIPE_TEST_URL"),
    ]:
        if way == "--url-file":
            options = ["--url-file", str(tmp_path / "my url")]
        else:
            options = ["--url-env", "LUAPIPE_TEST_URL"]
        command = ["functions", "verify", str(tmp_path / "scripts_lua"), "--library", "app"]
        res = CliRunner().invoke(
            main, [*command, *options], env={"LUAPIPE_TEST_URL": _url(guarded)}
        )
        assert res.output == "error: stopped here\n", res.output
        assert seen.pop() == (
            f"luapipe functions verify {tmp_path / 'scripts_lua'} --library app {given}"
        )


@pytest.mark.parametrize(
    "written", ["{url}", "{url}\r\n", "\ufeff{url}\r\n", "  {url}  \nsecond line\n"]
)
def test_a_closed_port_in_a_file_reads_as_on_the_command_line(written: str, tmp_path: Path) -> None:
    """Whatever a file's first line ends with (nothing, CRLF), a Windows editor's BOM or
    blanks around the URL: the same URL, the same words as --url."""
    url = f"redis://127.0.0.1:{free_port()}/0"
    (tmp_path / "r.url").write_text(written.format(url=url), encoding="utf-8")
    by_file = CliRunner().invoke(main, ["scripts", "status", "--url-file", str(tmp_path / "r.url")])
    by_option = CliRunner().invoke(main, ["scripts", "status", "--url", url])
    assert by_file.exit_code == by_option.exit_code == 1
    assert by_file.output == by_option.output
    assert by_file.output.startswith(f"error: cannot connect to Redis at {url}: ")
