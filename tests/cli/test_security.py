"""TLS (rediss://) and a least-privilege ACL user, on a real redis-server."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.bench.server import EmbeddedRedis, free_port
from luapipe.cli import main
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

COUNTER = LuaScript.from_source("counted", "-- @key k\nreturn redis.call('INCR', KEYS[1])\n")

#: what luapipe sends (documented in README "Least-privilege ACL"), plus the script's own INCR
LUAPIPE_COMMANDS = (
    "+ping +info +evalsha +evalsha_ro +eval +eval_ro +multi +exec "
    "+script|load +script|exists +script|flush +script|kill"
)


@dataclass(frozen=True)
class TlsServer:
    plain_port: int
    tls_port: int
    ca: Path


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsServer]:
    d = tmp_path_factory.mktemp("tls")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl("req", "-x509", *ec, "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", "ca.key", "-out", "ca.crt", cwd=d)  # fmt: skip
    _openssl("req", *ec, "-subj", "/CN=127.0.0.1",
             "-keyout", "server.key", "-out", "server.csr", cwd=d)  # fmt: skip
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", "server.crt",
             cwd=d)  # fmt: skip
    tls_port = free_port()
    server = EmbeddedRedis(
        ["--tls-port", str(tls_port), "--tls-cert-file", str(d / "server.crt"),
         "--tls-key-file", str(d / "server.key"), "--tls-ca-cert-file", str(d / "ca.crt"),
         "--tls-auth-clients", "no"]
    )  # fmt: skip
    info = server.start()
    admin = redis.Redis(port=info.port)
    admin.acl_setuser(
        "deployer", enabled=True, passwords=["+deploy-pw"], keys=["~*"], commands=["-@all"]
    )
    admin.execute_command("ACL", "SETUSER", "deployer", *LUAPIPE_COMMANDS.split(), "+incr")
    admin.acl_setuser("reader", enabled=True, passwords=["+read-pw"], keys=["~*"],
                      commands=["-@all", "+ping", "+info", "+evalsha", "+get"])  # fmt: skip
    try:
        yield TlsServer(info.port, tls_port, d / "ca.crt")
    finally:
        admin.close()
        server.stop()


def _tls_url(s: TlsServer, user: str = "", pw: str = "") -> str:
    auth = f"{user}:{pw}@" if user or pw else ""
    return f"rediss://{auth}127.0.0.1:{s.tls_port}/0?ssl_ca_certs={s.ca}"


def test_tls_deploy_and_call(tls_server: TlsServer, tmp_path: Path) -> None:
    (tmp_path / "counted.lua").write_text(COUNTER.source)
    url = _tls_url(tls_server)
    res = CliRunner().invoke(main, ["deploy", "--dir", str(tmp_path), "--url", url])
    assert res.exit_code == 0, res.output
    client = redis.Redis.from_url(url)
    assert ScriptRegistry([COUNTER]).call(client, "counted", keys=["tls"]) == 1
    with ScriptRegistry([COUNTER]).pipeline(client) as pipe:
        assert pipe.call("counted", keys=["tls"]).execute() == [2]


def test_tls_to_a_plain_port_is_one_line(tls_server: TlsServer, tmp_path: Path) -> None:
    url = f"rediss://127.0.0.1:{tls_server.plain_port}/0?ssl_ca_certs={tls_server.ca}"
    res = CliRunner().invoke(main, ["scripts", "status", "--dir", str(tmp_path), "--url", url])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert f"127.0.0.1:{tls_server.plain_port}" in res.output and "Traceback" not in res.output
    assert "is TLS enabled on that port?" in res.output


def test_plain_client_to_the_tls_port_is_one_line(tls_server: TlsServer, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{tls_server.tls_port}/0"
    res = CliRunner().invoke(main, ["scripts", "status", "--dir", str(tmp_path), "--url", url])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert "if that port speaks TLS, use rediss://" in res.output


def test_a_certificate_that_fails_verification_says_so(
    tls_server: TlsServer, tmp_path: Path
) -> None:
    """Without the CA that signed the server's certificate: not "is TLS enabled?" but what
    failed and how to pass a CA."""
    url = f"rediss://127.0.0.1:{tls_server.tls_port}/0"
    res = CliRunner().invoke(main, ["scripts", "status", "--dir", str(tmp_path), "--url", url])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    expected = "certificate failed verification (self-signed certificate in certificate chain)"
    assert expected in res.output
    assert "ssl_ca_certs=" in res.output and "TLS enabled" not in res.output


def test_a_client_key_or_certificate_that_cannot_be_read_says_so(
    tls_server: TlsServer, tmp_path: Path
) -> None:
    """A missing ssl_keyfile, or an encrypted one with the wrong ssl_password, failed before
    any byte reached the server, and the hint asked "is TLS enabled on that port?"."""
    _openssl("pkcs8", "-topk8", "-in", str(tls_server.ca.with_name("server.key")),
             "-passout", "pass:Right/Key#Pass", "-out", "encrypted.key", cwd=tmp_path)  # fmt: skip
    crt = tls_server.ca.with_name("server.crt")
    for query in (
        f"&ssl_certfile={crt}&ssl_keyfile={tmp_path / 'none.key'}",
        f"&ssl_certfile={crt}&ssl_keyfile={tmp_path / 'encrypted.key'}&ssl_password=Wrong%2FKey",
    ):
        url = _tls_url(tls_server) + query
        res = CliRunner().invoke(main, ["scripts", "status", "--dir", str(tmp_path), "--url", url])
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1, res.output
        assert "TLS enabled" not in res.output and "Wrong" not in res.output, res.output
        assert "could not read a certificate or key file the URL names" in res.output


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Error 1 connecting to 127.0.0.2:6380. [SSL: CERTIFICATE_VERIFY_FAILED] certificate "
            "verify failed: IP address mismatch, certificate is not valid for '127.0.0.2'. "
            "(_ssl.c:1006).",
            "certificate is not for this host (IP address mismatch",
        ),
        (
            "Error while reading from 127.0.0.1:6380 : (1, '[SSL: "
            "TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required (_ssl.c:2580)')",
            "does it ask for a client certificate? add ?ssl_certfile=",
        ),
    ],
)
def test_other_tls_failures_get_their_own_hint(text: str, expected: str) -> None:
    """Failures a fixture server shows only sometimes (the TLS 1.3 alert races the first
    write) or needs a second address for: the hint from redis-py's real texts."""
    from luapipe.errors import translate
    from luapipe.wire.connect import _with_hint

    exc = redis.ConnectionError(text)
    url = "rediss://127.0.0.2:6380/0"
    err = _with_hint(translate(exc, where=url), exc, url)
    assert expected in str(err) and "TLS enabled" not in str(err)
    assert isinstance(err, redis.ConnectionError)


def test_least_privilege_acl_user_can_deploy_and_call(
    tls_server: TlsServer, tmp_path: Path
) -> None:
    (tmp_path / "counted.lua").write_text(COUNTER.source)
    url = _tls_url(tls_server, "deployer", "deploy-pw")
    for args in (["deploy"], ["deploy", "--check"], ["scripts", "status"]):
        res = CliRunner().invoke(main, [*args, "--dir", str(tmp_path), "--url", url])
        assert res.exit_code == 0, res.output
        assert "deploy-pw" not in res.output
    client = redis.Redis.from_url(url)
    reg = ScriptRegistry([COUNTER])
    assert reg.call(client, "counted", keys=["acl"]) == 1
    with reg.pipeline(client, transaction=True) as pipe:
        assert pipe.call("counted", keys=["acl"]).execute() == [2]


def test_bench_and_demo_refuse_tls_in_one_line_before_starting(
    tls_server: TlsServer, tmp_path: Path
) -> None:
    """The benchmark never worked over TLS: its counting connection took no ssl_* option (a
    traceback after the warm-ups), and its PING probes and delay calibration speak plain TCP
    (a reset retried for minutes, then "Connection reset by peer"). Refused up front, in
    the words of a usage error, until it does; the library's run_bench too."""
    import luapipe
    from luapipe.bench.workloads import PingWorkload

    url = _tls_url(tls_server, "deployer", "deploy-pw")
    for args in (
        ["bench", "--duration", "0.05", "--warmup", "0", "--rounds", "1", "--no-bystander"],
        ["demo", "--duration", "0.01", "--out", str(tmp_path / "demo")],
    ):
        res = CliRunner().invoke(main, [*args, "--url", url])
        assert res.exit_code == 2, res.output
        assert res.output == (
            f"error: invalid --url rediss://deployer:***@127.0.0.1:{tls_server.tls_port}/0"
            f"?ssl_ca_certs={tls_server.ca}: the benchmark measures plain TCP (its PING probes "
            "and delay proxy do not speak TLS): give it a redis:// URL of a port without TLS\n"
        )
    assert not (tmp_path / "demo").exists()
    config = luapipe.BenchConfig(duration_s=0.05, warmup_s=0, rounds=1, bystander=False)
    with pytest.raises(luapipe.LuapipeError, match="the benchmark measures plain TCP"):
        luapipe.run_bench(url, [PingWorkload()], config)


def test_user_without_script_load_gets_a_clear_error(tls_server: TlsServer, tmp_path: Path) -> None:
    (tmp_path / "counted.lua").write_text(COUNTER.source)
    url = _tls_url(tls_server, "reader", "read-pw")
    res = CliRunner().invoke(main, ["deploy", "--dir", str(tmp_path), "--url", url])
    assert res.exit_code == 1 and "read-pw" not in res.output
    assert "permission" in res.output.lower() and "NOPERM" in res.output


def test_no_password_and_forced_cluster_on_a_single_server_say_what_to_do(
    tmp_path: Path,
) -> None:
    with EmbeddedRedis(["--requirepass", "pw"]) as server:
        bare = f"redis://127.0.0.1:{server.port}/0"
        res = CliRunner().invoke(main, ["scripts", "status", "--dir", str(tmp_path), "--url", bare])
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
        assert "needs a password and none was given" in res.output
        good = f"redis://:pw@127.0.0.1:{server.port}/0"
        args = ["--cluster", "scripts", "status", "--dir", str(tmp_path), "--url", good]
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
        assert "Cluster mode is not enabled" in res.output and "drop --cluster" in res.output
        assert "pw" not in res.output.replace("pwd", "")


def test_a_refused_connection_set_up_names_the_server(tmp_path: Path) -> None:
    with EmbeddedRedis() as server:
        url = f"redis://127.0.0.1:{server.port}/99"
        res = CliRunner().invoke(main, ["scripts", "status", "--dir", str(tmp_path), "--url", url])
    assert res.exit_code == 1 and len(res.output.strip().splitlines()) == 1
    assert f"server at {url} refused the connection: ERR DB index is out of range" in res.output
