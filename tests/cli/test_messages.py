"""Messages a user reads: one line, the right line number, what redis-cli would print, a
question that names the server, and never a password (issue 11)."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.server import EmbeddedRedis, ServerProcess, free_port
from luapipe.cli import main
from luapipe.errors import ConnectionFailed, LuapipeError
from luapipe.wire.connect import client_from_url

#: a password holding a raw "@": everything before the LAST "@" is the password
SECRET = "wr0ng@secret-tail"


def _url(server: ServerProcess, password: str = "") -> str:
    auth = f":{password}@" if password else ""
    return f"redis://{auth}{server.host}:{server.port}/0"


def _one_error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert "Traceback" not in output
    return lines[0]


def test_a_lua_limit_without_a_line_names_the_line_it_is_reached(tmp_path: Path) -> None:
    """Lua 5.1 allows 32767 local declarations per function and says so without a line,
    followed by a stack traceback: the error is one line naming line 32768."""
    body = "".join(f"do local v{i} = {i} end\n" for i in range(32_800))
    (tmp_path / "big.lua").write_text("-- @key k\n" + body)
    url = "redis://127.0.0.1:1/0"  # never reached: the script is refused first
    res = CliRunner().invoke(main, ["scripts", "load", "--dir", str(tmp_path), "--url", url])
    assert res.exit_code == 1 and isinstance(res.exception, SystemExit)
    expected = f"error: {tmp_path / 'big.lua'}:32769: Lua syntax error: too many local variables"
    assert _one_error_line(res.output) == expected
    res = CliRunner().invoke(main, ["scripts", "lint", "--dir", str(tmp_path)])
    assert "big.lua:32769: error LP001: Lua syntax: too many local variables" in res.output


def test_call_prints_nil_as_redis_cli_does(
    r: redis.Redis, redis_server: ServerProcess, tmp_path: Path
) -> None:
    (tmp_path / "nothing.lua").write_text("return nil\n")
    (tmp_path / "holes.lua").write_text("return {1, false, 'a'}\n")
    base = ["scripts", "call", "--dir", str(tmp_path), "--url", _url(redis_server)]
    assert CliRunner().invoke(main, [*base, "nothing"]).output == "(nil)\n"
    assert CliRunner().invoke(main, [*base, "nothing", "--json"]).output == "null\n"
    assert CliRunner().invoke(main, [*base, "holes"]).output == '[1, null, "a"]\n'


def test_flush_asks_naming_the_server_and_needs_an_answer(
    r: redis.Redis, redis_server: ServerProcess
) -> None:
    r.script_load("return 1")
    url = _url(redis_server)
    res = CliRunner().invoke(main, ["scripts", "flush", "--url", url])
    assert res.exit_code == 1
    assert f"Flush every cached script (every application's) on {url}?" in res.stdout
    line = _one_error_line(res.stderr)
    assert "no answer" in line and "--yes" in line and url in line
    res = CliRunner().invoke(main, ["scripts", "flush", "--url", url], input="n\n")
    assert res.exit_code == 1 and "not flushed" in res.output
    assert r.script_exists("e0e1f9fabfc9d4800c877a703b823ac0578ff8db") == [True]
    res = CliRunner().invoke(main, ["scripts", "flush", "--url", url], input="y\n")
    assert res.exit_code == 0 and "flushed the script cache" in res.output
    assert r.script_exists("e0e1f9fabfc9d4800c877a703b823ac0578ff8db") == [False]


@pytest.fixture(scope="module")
def guarded() -> Iterator[ServerProcess]:
    """A server whose password is SECRET."""
    with EmbeddedRedis(["--requirepass", SECRET]) as server:
        yield server


def _secret_free(text: str) -> None:
    for part in ("wr0ng", "secret-tail", SECRET):
        assert part not in text, text


def test_no_password_reaches_a_library_error(guarded: ServerProcess) -> None:
    """client_from_url is the library path every URL goes through: its errors carry no
    password, whatever failed (the CLI masks again; this is the layer below)."""
    good = _url(guarded, SECRET)
    wrong = _url(guarded, "x@" + SECRET)
    refused = f"redis://:{SECRET}@127.0.0.1:{free_port()}/0"
    for url in (
        wrong,
        refused,
        f"redis://:{SECRET}@127.0.0.1:notaport/0",  # invalid URL
        good.replace("/0", "/99999"),  # DB index out of range
        good.replace("redis://", "rediss://"),  # TLS to a plain port
    ):
        with pytest.raises(LuapipeError) as info:
            client_from_url(url, timeout=0.5)
        assert len(str(info.value).splitlines()) == 1
        _secret_free(str(info.value))
        _secret_free(repr(info.value))
    with pytest.raises(ConnectionFailed):
        client_from_url(refused, timeout=0.5)


@pytest.mark.parametrize(
    "args",
    [
        ["scripts", "load"],
        ["scripts", "status"],
        ["scripts", "call", "rate_limit_fixed", "-k", "k", "-a", "1", "-a", "2"],
        ["scripts", "flush", "--yes"],
        ["scripts", "kill"],
        ["deploy", "--dir", "{dir}"],
        ["deploy", "--check", "--dir", "{dir}"],
        ["verify", "{spec}", "--cases", "1"],
    ],
)
@pytest.mark.parametrize("which", ["wrong password", "refused"])
def test_no_password_reaches_a_cli_message(
    guarded: ServerProcess, tmp_path: Path, args: list[str], which: str
) -> None:
    from ..conftest import EXAMPLES_DIR, SCRIPTS_DIR

    port = guarded.port if which == "wrong password" else free_port()
    url = f"redis://:x@{SECRET}@127.0.0.1:{port}/0"
    (tmp_path / "one.lua").write_text("return 1\n")
    filled = [
        a.format(dir=tmp_path, spec=EXAMPLES_DIR / "operations" / "reserve_stock.toml")
        for a in args
    ]
    if args[0] == "scripts" and args[1] != "flush" and args[1] != "kill":
        filled += ["--dir", str(SCRIPTS_DIR)]
    res = CliRunner().invoke(main, [*filled, "--url", url])
    assert res.exit_code == 1, res.output
    _one_error_line(res.stderr)
    _secret_free(res.stdout + res.stderr)


def test_the_readme_says_how_to_start_a_redis_and_it_works(tmp_path: Path) -> None:
    """The README's throw-away server line, run as written (on a free port, a private pid
    file): it starts a Redis the examples can use, listening on loopback only (it has no
    password), and its pid file stops that one."""
    import contextlib
    import os
    import shlex
    import signal
    import subprocess
    import time

    from ..conftest import ROOT

    readme = (ROOT / "README.md").read_text()
    assert "Python 3.11" in readme and "Redis 7.0" in readme
    line = next(x for x in readme.splitlines() if x.startswith("redis-server "))
    port, pidfile = free_port(), tmp_path / "demo.pid"
    words = [
        str(pidfile) if w.endswith(".pid") else str(port) if w == "6379" else w
        for w in shlex.split(line)
    ]
    subprocess.run([*words, "--dir", str(tmp_path)], check=True, capture_output=True)
    client = redis.Redis(port=port)
    pid = None
    try:
        deadline = time.monotonic() + 10
        while pid is None:  # the daemon writes its pid file a moment after it forks
            text = pidfile.read_text().strip() if pidfile.exists() else ""
            if text.isdigit():
                pid = int(text)
            else:
                assert time.monotonic() < deadline, "the README's server wrote no pid file"
                time.sleep(0.02)
        deadline = time.monotonic() + 10
        while True:
            try:
                assert client.ping()
                break
            except redis.ConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("bind") == {"bind": "127.0.0.1"}
    finally:
        client.close()
        if pid is None:  # no pid file: stop the server this test started through its port
            with contextlib.suppress(redis.RedisError):
                redis.Redis(port=port).shutdown(nosave=True)
        else:
            os.kill(pid, signal.SIGTERM)


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["scripts", "status", "--url", "redis://bob:S3cretPassw0rd/xyz@127.0.0.1:7702/0"],
            "error: invalid --url redis://bob:***@127.0.0.1:7702/0: the password holds '/', "
            "which ends that part of a URL early; write it percent-encoded (/ is %2F; "
            "urllib.parse.quote(password, safe='') encodes every character that needs it)",
        ),
        (
            ["deploy", "--url", "redis://:Hunter2Hunter2#frag@127.0.0.1:7702/0"],
            "error: invalid --url redis://:***@127.0.0.1:7702/0: the password holds '#'",
        ),
        (  # a raw "&" in a ?password=: the rest read as an option redis-py does not know
            ["scripts", "status", "--url", "redis://127.0.0.1:7702/0?password=x&Hunter2Hunter2=y"],
            "error: invalid --url redis://127.0.0.1:7702/0?password=***: redis-py does not know "
            "an option in the URL's query; a password holding & = # or a space goes "
            "percent-encoded in it (urllib.parse.quote(password, safe=''))",
        ),
        (
            ["bench", "--url", "redis://bob:S3cretPassw0rd/xyz@127.0.0.1:7702/0"],
            "error: invalid --url redis://bob:***@127.0.0.1:7702/0: the password holds '/'",
        ),
        (
            ["bench", "--url", "redis://127.0.0.1:99999/0"],
            "error: invalid --url redis://127.0.0.1:99999/0: the port is not a whole number "
            "from 0 to 65535",
        ),
        (
            ["demo", "--url", "unix:///tmp/redis.sock"],
            "error: invalid --url unix:///tmp/redis.sock: a Redis URL starts with redis:// "
            "(e.g. redis://127.0.0.1:6379/0)",
        ),
        (
            ["verify", "reserve_stock", "--url", "redis://h:1/0?sockettimeout=1"],
            "error: invalid --url redis://h:1/0?sockettimeout=1: redis-py does not know the "
            "option 'sockettimeout' in the URL's query",
        ),
    ],
)
def test_an_invalid_url_is_a_one_line_usage_error_that_says_how_to_write_it(
    args: list[str], said: str
) -> None:
    """The issue's own examples: urllib's text ("Port could not be cast to integer value
    as 'S3cretPassw0rd'") quoted the part of the password before its raw "/"; bench printed
    a traceback. Now exit code 2 in every command, checked before anything starts."""
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    assert _one_error_line(res.output).startswith(said), res.output
    assert "S3cret" not in res.output and "Hunter2" not in res.output


def test_an_invalid_redis_url_variable_is_a_usage_error_too(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main,
        ["scripts", "status", "--dir", str(tmp_path)],
        env={"REDIS_URL": "redis://:pa?ss@127.0.0.1:6379/0"},
    )
    assert res.exit_code == 2
    assert _one_error_line(res.output).startswith(
        "error: invalid $REDIS_URL redis://:***@127.0.0.1:6379/0: the password holds '?'"
    )


def test_an_argument_from_a_file_or_stdin(
    r: redis.Redis, redis_server: ServerProcess, tmp_path: Path
) -> None:
    """--arg-file PATH or - (stdin) after the -a arguments, byte for byte, as long as it
    is (a command line stops near 128 kB); -a @alice is still the string '@alice'."""
    (tmp_path / "lens.lua").write_text(
        "-- @key k\n-- @arg first\n-- @arg [rest...]\n"
        "return {ARGV[1], string.len(ARGV[#ARGV]), #ARGV}\n"
    )
    big = bytes(range(256)) * 1200  # 307,200 bytes, every byte value
    (tmp_path / "big.bin").write_bytes(big)
    base = ["scripts", "call", "lens", "--dir", str(tmp_path), "--url", _url(redis_server)]
    res = CliRunner().invoke(
        main, [*base, "-k", "k", "-a", "@alice", "--arg-file", str(tmp_path / "big.bin")]
    )
    assert res.exit_code == 0 and res.output == '["@alice", 307200, 2]\n', res.output
    res = CliRunner().invoke(main, [*base, "-k", "k", "-a", "x", "--arg-file", "-"], input=big)
    assert res.exit_code == 0 and res.output == '["x", 307200, 2]\n', res.output
    res = CliRunner().invoke(main, [*base, "-k", "k", "--arg-file", str(tmp_path / "none")])
    assert res.exit_code == 2 and "none" in res.output


def test_output_piped_into_head_ends_quietly_and_another_broken_pipe_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`luapipe scripts list | head -1` exits 0 without a word; but a BrokenPipeError from a
    pipe or socket of luapipe's own (the delay proxy's control pipe, once the proxy died)
    was taken for that too: exit 0, nothing printed, the run's result lost."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before luapipe writes its first line
    done = subprocess.run(
        [sys.executable, "-m", "luapipe", "scripts", "list"],
        stdout=write, stderr=subprocess.PIPE, text=True, cwd=tmp_path, timeout=60,
    )  # fmt: skip
    os.close(write)
    assert (done.returncode, done.stderr) == (0, "")

    import luapipe.scripts.registry

    def broken(*args: object, **kwargs: object) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(luapipe.scripts.registry.ScriptRegistry, "from_directory", broken)
    res = CliRunner().invoke(main, ["scripts", "list"])
    assert res.exit_code == 1, res.output
    assert res.output == (
        "error: a pipe or connection luapipe was writing to was closed ([Errno 32] Broken pipe)\n"
    )


def test_the_noauth_hint_writes_the_password_into_the_users_own_url(tmp_path: Path) -> None:
    """The hint said ``redis://:PASSWORD@host:port`` whatever the user gave: to someone on a
    unix socket (or TLS) it pointed at a URL of another kind. Now it is their URL, with
    the placeholder in its place: scheme, socket path or host, database and options kept."""
    from luapipe.errors import translate

    sock = tmp_path / "redis.sock"
    with EmbeddedRedis(["--requirepass", "s3cret-pw", "--unixsocket", str(sock)]):
        url = f"unix://{sock}?db=1"
        res = CliRunner().invoke(main, ["scripts", "status", "--url", url])
    line = _one_error_line(res.output)
    assert line.endswith(
        f"put it in the URL: unix://:PASSWORD@{sock}?db=1, or "
        f"unix://USER:PASSWORD@{sock}?db=1 for an ACL user"
    ), line
    assert "redis://" not in line
    noauth = redis.AuthenticationError("Authentication required.")
    noauth.status_code = "NOAUTH"  # as redis-py's parser leaves it
    for where, plain in [
        ("rediss://bob:***@db.example:6380/2", "rediss://:PASSWORD@db.example:6380/2"),
        ("10.0.0.7:6380", "redis://:PASSWORD@10.0.0.7:6380"),  # a transport's host:port
        ("", "redis://:PASSWORD@host:port"),
    ]:
        assert f"put it in the URL: {plain}, or " in str(translate(noauth, where=where)), where


def _bytes_read() -> int:
    """What this process has read so far, through any file (/proc/self/io's rchar)."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


@pytest.fixture(scope="module")
def small_bulk() -> Iterator[ServerProcess]:
    """A server whose proto-max-bulk-len is Redis's smallest, 1 MB."""
    with EmbeddedRedis(["--proto-max-bulk-len", "1mb"]) as server:
        yield server


def test_an_argument_file_is_read_no_further_than_the_server_takes(
    small_bulk: ServerProcess, tmp_path: Path
) -> None:
    """--arg-file read the whole file into memory first (/dev/zero: until memory ran out),
    and only then did the call refuse it. Now the server's proto-max-bulk-len bounds the
    read: a file known to be longer is refused unread, a stream once it gave one byte more;
    one line naming the argument, the file and the limit, nothing sent."""
    (tmp_path / "lens.lua").write_text("-- @key k\n-- @arg blob\nreturn string.len(ARGV[1])\n")
    base = ["scripts", "call", "lens", "--dir", str(tmp_path), "--url", _url(small_bulk), "-k"]
    limit = f"the proto-max-bulk-len of the server at {small_bulk.host}:{small_bulk.port} "
    limit += "(1,048,576 bytes); nothing was sent"
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as f:  # 64 MB that take no room on disk
        f.truncate(64 * 1024 * 1024)
    before = _bytes_read()
    res = CliRunner().invoke(main, [*base, "k", "--arg-file", str(huge)])
    assert _bytes_read() - before < 1024 * 1024  # refused unread
    assert _one_error_line(res.output).startswith(
        f"error: script 'lens': args[0] (blob) (--arg-file {huge}) is 67,108,864 bytes, "
        f"more than {limit}"
    )
    res = CliRunner().invoke(main, [*base, "k", "--arg-file", "/dev/zero"], catch_exceptions=False)
    assert _one_error_line(res.output).startswith(
        f"error: script 'lens': args[0] (blob) (--arg-file /dev/zero) is longer than {limit}"
    )
    stream = io.BytesIO(b"x" * (5 * 1024 * 1024))  # stdin: a pipe
    res = CliRunner().invoke(main, [*base, "k", "--arg-file", "-"], input=stream)
    assert " (--arg-file -) is longer than " in _one_error_line(res.output)
    assert stream.tell() <= 1024 * 1024 + 1  # read no further than the limit and a byte
    assert not redis.Redis(port=small_bulk.port).exists("k")
    fits = tmp_path / "fits.bin"
    fits.write_bytes(b"y" * (1024 * 1024))  # the limit itself is allowed
    res = CliRunner().invoke(main, [*base, "k", "--arg-file", str(fits)])
    assert (res.exit_code, res.output) == (0, "1048576\n")
    res = CliRunner().invoke(main, [*base, "k", "--arg-file", "-"], input=b"y" * (1024 * 1024))
    assert (res.exit_code, res.output) == (0, "1048576\n")


def test_stdin_is_read_for_one_option_only(small_bulk: ServerProcess, tmp_path: Path) -> None:
    (tmp_path / "one.lua").write_text("-- @key k\n-- @arg v\nreturn ARGV[1]\n")
    args = ["scripts", "call", "one", "--dir", str(tmp_path), "-k", "k", "--arg-file", "-"]
    stdin = _url(small_bulk) + "\nv\n"
    res = CliRunner().invoke(main, [*args, "--url-file", "-"], input=stdin, prog_name="luapipe")
    assert res.exit_code == 2
    assert _one_error_line(res.output) == (
        "error: --url-file - and --arg-file - both read stdin (see luapipe scripts call --help)"
    )


def test_a_unix_socket_that_hangs_up_gets_no_tls_hint(tmp_path: Path) -> None:
    """ "the server hung up at once: if that port speaks TLS, use rediss://" was said of a
    unix socket too, where there is no port and no TLS: a hint toward a URL of another
    kind, as NOAUTH's was."""
    import socket
    import threading

    path = tmp_path / "hangs-up.sock"
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        res = CliRunner().invoke(main, ["scripts", "status", "--url", f"unix://{path}"])
    finally:
        srv.close()
    assert _one_error_line(res.output) == (
        f"error: cannot connect to Redis at unix://{path}: the server closed the connection"
    )
