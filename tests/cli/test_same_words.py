"""One line, the same words for the same cause, in every command that takes ``--url``
(issue 16): a refused connection, a server that is not Redis, one that hangs up at once, no
password, a wrong one, an invalid URL (exit code 2). ACL refusals name the address and the
command. The commands are found by walking the click group (urlcommands.py)."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis, ServerProcess, free_port
from luapipe.cli import main

from .urlcommands import invoke, prepare, url_commands

COMMANDS = sorted(url_commands())


def _serve(answer: bytes | None) -> Iterator[int]:
    """A TCP server on a free port that answers ``answer`` to whatever it reads, or hangs
    up at once (``None``)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    srv.settimeout(0.1)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                if answer is not None:
                    conn.recv(4096)
                    conn.sendall(answer)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        yield int(srv.getsockname()[1])
    finally:
        stop.set()
        t.join()
        srv.close()


@pytest.fixture(scope="module")
def http_port() -> Iterator[int]:
    yield from _serve(b"HTTP/1.1 400 Bad Request\r\n\r\n")


@pytest.fixture(scope="module")
def hangup_port() -> Iterator[int]:
    yield from _serve(None)


@pytest.fixture(scope="module")
def guarded() -> Iterator[ServerProcess]:
    """A server that needs a password, with an ACL user that may only connect."""
    with EmbeddedRedis(["--requirepass", "the-server-password"]) as server:
        admin = redis.Redis(port=server.port, password="the-server-password")
        admin.acl_setuser(
            "pinger", enabled=True, passwords=["+pinger-pw"], keys=["~*"],
            commands=["-@all", "+ping", "+info", "+hello", "+auth", "+client"],
        )  # fmt: skip
        admin.close()
        yield server


def _lines(path: str, tmp_path: Path, url: str) -> tuple[int, str]:
    """The failure's one line (progress lines before it, such as demo's "benchmarking
    ...", are not part of it)."""
    prepare(tmp_path)
    res = invoke(path, tmp_path, url)
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error: ")]
    assert len(errors) == 1 and res.output.rstrip().endswith(errors[0]), (path, res.output)
    assert "Traceback" not in res.output and isinstance(res.exception, SystemExit), (path, res)
    return res.exit_code, errors[0]


@pytest.mark.parametrize(
    ("cause", "code", "said"),
    [
        ("refused", 1, "cannot connect to Redis at redis://127.0.0.1:{closed}/0: Error 111"),
        ("not redis", 1, "the server at redis://127.0.0.1:{http}/0 did not answer like Redis"),
        ("hangs up", 1, "if that port speaks TLS, use rediss://"),
        ("no password", 1, "the server needs a password and none was given (NOAUTH)"),
        ("wrong password", 1, "wrong user name or password, or the user is disabled (WRONGPASS)"),
        ("invalid url", 2, "invalid --url redis://:***@127.0.0.1:{guarded}/0: the password"),
    ],
)
def test_every_cause_reads_the_same_in_every_command(
    cause: str,
    code: int,
    said: str,
    tmp_path: Path,
    http_port: int,
    hangup_port: int,
    guarded: ServerProcess,
) -> None:
    ports = {"closed": free_port(), "http": http_port, "guarded": guarded.port}
    url = {
        "refused": "redis://127.0.0.1:{closed}/0",
        "not redis": "redis://127.0.0.1:{http}/0",
        "hangs up": f"redis://127.0.0.1:{hangup_port}/0",
        "no password": "redis://127.0.0.1:{guarded}/0",
        "wrong password": "redis://:not-the-password@127.0.0.1:{guarded}/0",
        "invalid url": "redis://:pass/word@127.0.0.1:{guarded}/0",
    }[cause].format(**ports)
    seen = {}
    for path in COMMANDS:
        exit_code, line = _lines(path, tmp_path, url)
        assert exit_code == code, (path, line)
        seen[path] = line
    assert said.format(**ports) in seen[COMMANDS[0]]
    assert len(set(seen.values())) == 1, seen  # word for word the same in every command


@pytest.mark.parametrize("path", COMMANDS)
def test_an_acl_refusal_names_the_address_and_the_command(
    path: str, tmp_path: Path, guarded: ServerProcess
) -> None:
    """The user may connect (PING) but run nothing else: each command says where it was
    refused and which command the user may not run."""
    url = f"redis://pinger:pinger-pw@127.0.0.1:{guarded.port}/0"
    code, line = _lines(path, tmp_path, url)
    assert code == 1
    assert f"permission denied at 127.0.0.1:{guarded.port}: the ACL user may not run " in line
    assert "(NOPERM " in line and "pinger-pw" not in line


def test_a_refusal_for_keys_names_the_command_the_server_did_not(
    tmp_path: Path, guarded: ServerProcess
) -> None:
    """NOPERM for a key does not name the command: luapipe names the one it sent."""
    admin = redis.Redis(port=guarded.port, password="the-server-password")
    admin.acl_setuser(
        "keyed", enabled=True, passwords=["+keyed-pw"], keys=["~allowed:*"], commands=["+@all"]
    )
    admin.close()
    prepare(tmp_path)
    url = f"redis://keyed:keyed-pw@127.0.0.1:{guarded.port}/0"
    res = invoke("scripts call", tmp_path, url)  # key "k": not allowed
    assert res.exit_code == 1
    # the server's own words differ: Redis 7.0 "this user has no permissions to access one
    # of the keys used as arguments", Redis 7.2 and Valkey 8 "No permissions to access a key"
    assert re.fullmatch(
        rf"error: permission denied at 127\.0\.0\.1:{guarded.port}: the ACL user may not run "
        r"EVALSHA on these keys or channels \(NOPERM (this user has no permissions to access "
        r"one of the keys used as arguments|No permissions to access a key)\)\n",
        res.output,
    ), res.output


@pytest.mark.parametrize("sent", [False, True])
def test_a_hang_up_reads_the_same_whenever_it_is_noticed(sent: bool) -> None:
    """redis-py says a hang-up two ways, depending on whether the close or the reset is
    read first (the hangs-up case above gets either): one cause, one text."""
    from luapipe.errors import translate

    said = {
        str(translate(redis.ConnectionError(text), where="127.0.0.1:6390", sent=sent))
        for text in (
            "Connection closed by server.",
            "Error while reading from 127.0.0.1:6390 : (104, 'Connection reset by peer')",
            "Error 32 while writing to socket. Broken pipe.",
        )
    }
    assert len(said) == 1, said
    assert "the server closed the connection" in said.pop()


def _every_command() -> list[tuple[str, click.Command]]:
    found = []

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        found.append((" ".join(path), cmd))
        if isinstance(cmd, click.Group):
            for name, sub in sorted(cmd.commands.items()):
                walk(sub, (*path, name))

    walk(main, ())
    return found


@pytest.mark.parametrize(("path", "cmd"), _every_command(), ids=lambda p: str(p) or "luapipe")
def test_a_usage_error_is_one_line_in_every_command(path: str, cmd: click.Command) -> None:
    """README: "Errors are one line on stderr ... (2 for usage errors)". click's own usage
    error was three (Usage:, Try '... --help', Error: ...), for an unknown option, a bad
    value, a missing argument or file: one line now, naming where the help is."""
    res = CliRunner().invoke(main, [*path.split(), "--no-such-option"], prog_name="luapipe")
    assert res.exit_code == 2, res.output
    help_of = f"luapipe {path}".strip()
    assert res.output == f"error: No such option '--no-such-option'. (see {help_of} --help)\n"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nosuch"], "error: No such command 'nosuch'. (see luapipe --help)"),
        (["scripts", "call"], "error: Missing argument 'NAME'. (see luapipe scripts call --help)"),
        (
            ["bench", "--rtt", "x"],
            "error: Invalid value for '--rtt': 'x' is not a number of milliseconds (see "
            "luapipe bench --help)",
        ),
        (
            ["scripts", "call", "one", "--arg-file", "/nonexistent/file"],
            "error: Invalid value for '--arg-file': File '/nonexistent/file' does not exist. "
            "(see luapipe scripts call --help)",
        ),
        (
            ["deploy", "--check", "--prune", "--dir", "."],
            "error: --check, --prune and --rollback go one at a time (see luapipe deploy --help)",
        ),
    ],
)
def test_other_usage_errors_are_one_line_too(args: list[str], said: str) -> None:
    res = CliRunner().invoke(main, args, prog_name="luapipe")
    assert (res.exit_code, res.output) == (2, said + "\n")


def test_verify_says_an_acl_refusal_instead_of_a_mismatch(
    tmp_path: Path, guarded: ServerProcess
) -> None:
    """A user who may run all but FUNCTION: verify reported "MISMATCH ... naive and
    function disagree ... function: error 'PermissionDenied'" (exit 1), as if the forms
    disagreed, naming neither the address nor the command. A refusal is not an outcome of
    the operation: it is the one line every command prints for it."""
    admin = redis.Redis(port=guarded.port, password="the-server-password")
    admin.acl_setuser(
        "nofunction", enabled=True, passwords=["+nofunction-pw"], keys=["~*"],
        commands=["+@all", "-function"],
    )  # fmt: skip
    admin.close()
    url = f"redis://nofunction:nofunction-pw@127.0.0.1:{guarded.port}/0"
    code, line = _lines("verify", tmp_path, url)
    assert code == 1
    assert line.startswith(
        f"error: permission denied at 127.0.0.1:{guarded.port}: the ACL user may not run "
        "FUNCTION LOAD (NOPERM"
    ), line


def test_a_node_that_stops_answering_verify_s_library_snapshot_is_named(
    redis_server: ServerProcess,
) -> None:
    """verify and bench read the function library on every primary first, with raw
    redis-py commands: a node that stopped answering surfaced as redis-py's bare
    TimeoutError, which the CLI reported at the URL it was given (a cluster's seed, not the
    node) as "timed out after the request was sent; outcome unknown". Now luapipe's error,
    naming the node, as every command names one it cannot reach."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    import luapipe
    from luapipe.operations.libraries import snapshot_library

    from ..conftest import EXAMPLES_DIR
    from ..drivers import stopped

    op = luapipe.load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    client = redis.Redis(
        host="127.0.0.1", port=redis_server.port, socket_timeout=0.25, retry=Retry(NoBackoff(), 0)
    )
    client.ping()
    with stopped(redis_server.pid, at_most=10), pytest.raises(luapipe.ConnectionFailed) as info:
        snapshot_library(op, client)
    assert str(info.value) == (
        f"cannot connect to Redis at 127.0.0.1:{redis_server.port}: Timeout reading from socket"
    )
    assert isinstance(info.value, redis.TimeoutError)
    client.close()


def test_an_acl_refusal_on_a_cluster_reads_the_same_in_every_command(
    cluster: EmbeddedCluster, tmp_path: Path
) -> None:
    """A user who may not run COMMAND (which redis-py's cluster client sends first): every
    command said "permission denied at redis://pinger:***@HOST:PORT/0" but bench, which
    checked the node alone and then met the refusal building its cluster client, said
    "permission denied at HOST:PORT"."""
    nodes = [redis.Redis(port=p) for p in cluster.ports]
    for node in nodes:
        node.acl_setuser(
            "pinger", enabled=True, passwords=["+pinger-pw"], keys=["~*"],
            commands=["-@all", "+ping", "+info", "+hello", "+auth", "+client", "+cluster"],
        )  # fmt: skip
    try:
        url = f"redis://pinger:pinger-pw@127.0.0.1:{cluster.ports[0]}/0"
        seen = {path: _lines(path, tmp_path, url) for path in COMMANDS}
    finally:
        for node in nodes:
            node.acl_deluser("pinger")
            node.close()
    assert len(set(seen.values())) == 1, seen
    code, line = seen[COMMANDS[0]]
    assert code == 1 and "permission denied at redis://pinger:***@127.0.0.1:" in line, line
    assert "may not run COMMAND" in line and "pinger-pw" not in line
