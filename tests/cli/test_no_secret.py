"""No password in any output, whatever it holds (issue 16): a property test.

Passwords are generated (12+ characters, every third one of ``/ # ? % @ : [ ] ' " < >``, a
space or a non-ASCII letter, so any 6 of them in a row are distinctive) and put in URLs:
percent-encoded for a user that does not exist, for an ACL user whose password it is (the
commands then succeed), in the query (``?password=``), written raw (an invalid URL for most
of them), and for a closed port. Every command that takes ``--url`` (found by walking the
click group: a new command is covered without being listed) runs with each, in-process
(CliRunner: nothing is forked before a bad URL or a failed connection is refused),
through ``$REDIS_URL`` where the command reads it, and kept off the command line in turn:
``--url-file PATH``, ``--url-file -`` (stdin) and ``--url-env NAME`` (and the URL given to
those two by mistake, which they must not repeat). No run of 6
consecutive characters of the password may appear in its output, raw or encoded
(percent-encoding, repr, JSON, HTML), and each failure is one line with no traceback.

Where in-process would hide a leak, subprocesses: every command once through the real
interpreter (a traceback printed at interpreter level), and one benchmark run with the delay
proxy, forked workers and the bystander, writing JSON, CSV and HTML with error samples in
them, then ``luapipe report`` of that JSON; and benchmark runs given the URL by file and by
environment, whose command line, and every child process's (4 workers, the proxy, the
bystander), must not hold the password.
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import string
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from luapipe.bench.server import EmbeddedRedis, ServerProcess, free_port
from luapipe.errors import mask_url, printable_url

from .urlcommands import URL_FILE, WAYS, argv, asks, invoke, prepare, url_commands, uses_redis_url

COMMANDS = url_commands()
#: the characters a password may hold that a URL or a message could trip on
SPECIAL = "/#?%@:[]'\"<> "
NON_ASCII = "éüßΩ密🙂"
PLAIN = string.ascii_letters + string.digits
#: every one of them in one password, checked first
ALL_OF_THEM = "Ab/Cd#Ef?Gh%Ij@Kl:Mn[Op]Qr'St\"Uv<Wx>Yz 01é23密45🙂"
#: only those a URL takes raw (no / # ? [ ]): written raw it is a valid URL, so the failure
#: comes from the server, and the message around the URL is luapipe's
VALID_RAW = "ab cd'ef\"gh<ij>kl@mn:opé qr"
SERVER_PASSWORD = "the-server-password"
EXAMPLES = 5
#: the URL forms of one password (closed: a port nobody listens on)
FORMS = ("encoded, unknown user", "encoded, right password", "raw", "query", "closed")
#: the commands that read $REDIS_URL: the forms run through it too
ENV_FORMS = ("encoded, unknown user", "raw")
#: commands whose successful run takes a minute (demo's fixed tour): with the right password
#: they are left out here; their output is bench's, run in a subprocess below
SLOW = {"demo"}
#: the ways that keep the URL off the command line: each (form, command) runs with one of
#: them too, in turn
OFF_THE_LINE = WAYS[1:]
#: runs per example (URLs x commands twice: --url, and one way off the command line; plus
#: the $REDIS_URL runs)
RUNS_PER_EXAMPLE = (
    2 * (len(FORMS) * len(COMMANDS) - len(SLOW & set(COMMANDS)))
    + len(ENV_FORMS) * sum(uses_redis_url(c) for c in COMMANDS.values())
    + len(FORMS) * sum(asks(c) for c in COMMANDS.values())
)


def passwords() -> st.SearchStrategy[str]:
    """12 to 30 characters: two letters or digits, then one special or non-ASCII
    character, repeated, so that any 6 in a row hold at least two unusual ones."""
    chunk = st.tuples(
        st.sampled_from(PLAIN), st.sampled_from(PLAIN), st.sampled_from(SPECIAL + NON_ASCII)
    ).map("".join)
    return st.lists(chunk, min_size=4, max_size=10).map("".join)


def _forms_of(run: str) -> Iterator[str]:
    """``run`` as an output could hold it: raw, percent-encoded, repr, JSON, HTML."""
    yield run
    yield quote(run, safe="")
    yield quote(run)
    yield quote_plus(run)
    yield repr(run)[1:-1]
    yield repr(run.encode())[2:-1]
    yield json.dumps(run)[1:-1]
    yield json.dumps(run, ensure_ascii=False)[1:-1]
    yield html.escape(run)


def assert_no_secret(text: str, password: str, what: str) -> None:
    """No 6 consecutive characters of ``password`` in ``text``, in any of its forms."""
    for i in range(len(password) - 5):
        for form in _forms_of(password[i : i + 6]):
            assert form not in text, f"{what}: {form!r} (of the password) in:\n{text}"


def assert_one_line_failure(output: str, code: int, what: str) -> None:
    """No traceback, no click usage block; an error is one ``error:`` line, the last one.
    (Exit code 1 without an error line is a finding a command reports, such as verify's
    mismatch or a script status listing a missing script.)"""
    assert "Traceback" not in output, f"{what}:\n{output}"
    lines = output.splitlines()
    assert not any(ln.startswith(("Usage:", "Error:")) for ln in lines), f"{what}:\n{output}"
    errors = [ln for ln in lines if ln.startswith("error: ")]
    assert len(errors) <= 1, f"{what}: more than one error line:\n{output}"
    if errors:
        assert code != 0 and output.rstrip().endswith(errors[0]), f"{what}:\n{output}"
    if code == 2:
        assert errors, f"{what}: a usage error without its one line:\n{output}"


@pytest.fixture(scope="module")
def guarded() -> Iterator[ServerProcess]:
    """A server that needs a password (requirepass); the ACL users come per example."""
    with EmbeddedRedis(["--requirepass", SERVER_PASSWORD]) as server:
        yield server


def _admin(server: ServerProcess) -> redis.Redis:
    return redis.Redis(port=server.port, password=SERVER_PASSWORD)


def _urls(password: str, user: str, port: int) -> dict[str, str]:
    enc = quote(password, safe="")
    host = f"127.0.0.1:{port}"
    return {
        "encoded, unknown user": f"redis://nobody{user}:{enc}@{host}/0",
        "encoded, right password": f"redis://{user}:{enc}@{host}/0",
        "raw": f"redis://nobody{user}:{password}@{host}/0",
        "query": f"redis://{host}/0?password={enc}",
        "closed": f"redis://{user}:{enc}@127.0.0.1:{free_port()}/0",
    }


def test_the_walk_finds_every_command_with_a_url() -> None:
    assert {"scripts status", "deploy", "bench", "demo", "verify"} <= set(COMMANDS)
    assert "generate" not in COMMANDS and "report" not in COMMANDS
    assert uses_redis_url(COMMANDS["deploy"]) and not uses_redis_url(COMMANDS["bench"])


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same passwords on every run: a failure is reproducible
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(password=passwords(), user=st.text(string.ascii_lowercase, min_size=4, max_size=8))
@example(password=ALL_OF_THEM, user="alice")
@example(password=VALID_RAW, user="bob")
def test_no_command_prints_any_part_of_a_password(
    password: str, user: str, guarded: ServerProcess, tmp_path: Path
) -> None:
    prepare(tmp_path)
    urls = _urls(password, user, guarded.port)
    admin = _admin(guarded)
    # the right password opens an ACL user that may do everything but FCALL: the function
    # form of bench then fails, and its error samples reach the reports
    admin.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["~*"], commands=["+@all", "-fcall"]
    )
    try:
        for f, form in enumerate(FORMS):
            for c, (path, cmd) in enumerate(COMMANDS.items()):
                if form == "encoded, right password" and path in SLOW:
                    continue
                off = OFF_THE_LINE[(f + c) % len(OFF_THE_LINE)]
                runs = [(urls[form], None, True, "--url"), (urls[form], None, True, off)]
                if form in ENV_FORMS and uses_redis_url(cmd):
                    runs.append((None, {"REDIS_URL": urls[form]}, True, "--url"))
                if asks(cmd):  # and without --yes: the question names the server
                    runs.append((urls[form], None, False, "--url"))
                for url, env, yes, way in runs:
                    res = invoke(path, tmp_path, url, env, yes=yes, way=way)
                    what = f"`luapipe {path}` with the {form} URL" + (
                        " in $REDIS_URL" if env else f" ({way})"
                    )
                    what += "" if yes else " (asking)"
                    assert isinstance(res.exception, SystemExit | None), (what, res.exception)
                    assert_one_line_failure(res.output, res.exit_code, what)
                    assert_no_secret(res.output, password, what)
                    if form == "raw" and res.exit_code == 2 and not way.endswith(" URL"):
                        assert "percent-encoded" in res.output, (what, res.output)
        for written in tmp_path.rglob("*"):  # lock files, demo's reports...
            if written.is_file() and written.name != URL_FILE:  # (where the URL is kept)
                assert_no_secret(written.read_text(errors="replace"), password, str(written))
    finally:
        admin.acl_deluser(user)
        admin.close()


def test_the_count_of_runs() -> None:
    """What the property test covers, for the record: 5 generated passwords and two chosen
    ones, each in 5 URL forms, times every command with --url (11 with functions verify:
    55 runs, less demo with the right password), twice (--url, and in turn --url-file,
    --url-file - or --url-env: 108), plus 14 through $REDIS_URL and 5 of scripts flush
    without --yes: 127 per password, 889 in all; printed with -s)."""
    assert len(COMMANDS) >= 11 and RUNS_PER_EXAMPLE >= 127  # more with every new command
    total = (EXAMPLES + 2) * RUNS_PER_EXAMPLE
    print(f"{EXAMPLES + 2} passwords x {RUNS_PER_EXAMPLE} runs = {total}")


@settings(max_examples=200, deadline=None, derandomize=True)
@given(
    password=passwords(),
    user=st.text(string.ascii_lowercase, max_size=8),
    scheme=st.sampled_from(["redis", "rediss", "unix", "http"]),
    encode=st.booleans(),
    tail=st.sampled_from(["127.0.0.1:6379/0", "[::1]:6380", "/tmp/r.sock?db=1", "h", ""]),
)
def test_printable_url_never_shows_the_password(
    password: str, user: str, scheme: str, encode: bool, tail: str
) -> None:
    """The one function: the user shows, the password never, and the text is one line;
    mask_url finds it in free text (a message around it), a password holding a space
    included (it ends at the line's last "@", as printable_url reads it)."""
    secret = quote(password, safe="") if encode else password
    url = f"{scheme}://{user}:{secret}@{tail}"
    shown = printable_url(url)
    assert_no_secret(shown, password, url)
    assert len(shown.splitlines()) == 1 and shown.startswith(f"{scheme}://{user}:***@")
    assert printable_url(shown) == shown  # printed twice, the same
    query = printable_url(f"redis://{tail}?password={secret}&ssl_password={secret}")
    assert_no_secret(query, password, url)
    for printed in (shown, query):  # a message around a printed URL is left as it is
        assert mask_url(f"at {printed}: refused") == f"at {printed}: refused"
    assert_no_secret(mask_url(f"error: at '{url}': refused"), password, url)
    assert_no_secret(mask_url(f"at {url} (refused) ok\nnext {url}"), password, url)


def _luapipe(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    env.pop("REDIS_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "luapipe", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def test_no_secret_through_the_real_interpreter(guarded: ServerProcess, tmp_path: Path) -> None:
    """Every command as a user runs it (a traceback at interpreter level would show here),
    each with one of the failing forms in turn (a subprocess costs ~0.5 s)."""
    prepare(tmp_path)
    urls = _urls(ALL_OF_THEM, "alice", guarded.port)
    forms = ("raw", "encoded, unknown user", "closed", "query")
    for k, path in enumerate(sorted(COMMANDS)):
        form = forms[k % len(forms)]
        done = _luapipe(*argv(path, tmp_path, urls[form]), cwd=tmp_path)
        what = f"`luapipe {path}` with the {form} URL (subprocess)"
        assert done.returncode in (1, 2), (what, done.stdout, done.stderr)
        assert_one_line_failure(done.stderr, done.returncode, what)
        assert_no_secret(done.stdout + done.stderr, ALL_OF_THEM, what)


def test_the_results_manifest_holds_the_printable_url(guarded: ServerProcess) -> None:
    """run_bench's result names its server as printable_url shows it (a library user
    reading ``result.manifest`` gets no password, before any report masks it again)."""
    from luapipe.bench.manifest import build_manifest

    url = f"redis://alice:{quote(VALID_RAW, safe='')}@127.0.0.1:{guarded.port}/0"
    manifest = build_manifest(_admin(guarded), url, {})
    assert manifest["redis"]["url"] == f"redis://alice:***@127.0.0.1:{guarded.port}/0"


def test_a_url_given_where_a_client_is_expected_is_shown_masked() -> None:
    """The library's own message: the URL is made printable before it is cut to length (a
    cut URL loses its "@", and with it what says where the password ends)."""
    from luapipe.errors import CallArgumentError
    from luapipe.scripts.registry import ScriptRegistry

    url = f"redis://alice:{quote(ALL_OF_THEM, safe='')}@some.long.host.name.example:6379/0"
    for passed in (url, url.replace(quote(ALL_OF_THEM, safe=""), "VeryLongPlainPassword1234")):
        with pytest.raises(CallArgumentError) as info:
            ScriptRegistry([]).load(passed)  # type: ignore[call-overload]
        assert "redis://alice:***@some.long" in str(info.value)
        assert_no_secret(str(info.value), ALL_OF_THEM, "message")
        assert "LongPlain" not in str(info.value)


def test_run_bench_refuses_a_bad_url_before_connecting_and_says_nothing_ran(
    guarded: ServerProcess,
) -> None:
    """The library's run_bench takes a URL: a raw "/" in its password raised urllib's own
    ValueError, "Port could not be cast to integer value as 'S3cretPassw0rd'" (the issue's
    first leak, in any traceback); a refused connection read "lost after the request was
    sent; outcome unknown". Now the words of every command, and no piece of the password
    in the message, its repr or the traceback Python would print."""
    import traceback

    import luapipe
    from luapipe.bench.workloads import PingWorkload
    from luapipe.errors import ConnectionFailed, OutcomeUnknown

    config = luapipe.BenchConfig(duration_s=0.05, warmup_s=0, rounds=1, bystander=False)
    enc = quote(ALL_OF_THEM, safe="")
    cases = {
        f"redis://bob:{ALL_OF_THEM}@127.0.0.1:{guarded.port}/0": "the password holds",
        f"redis://bob:{enc}@127.0.0.1:{guarded.port}/0": "authentication failed at redis://bob",
        f"redis://bob:{enc}@127.0.0.1:{free_port()}/0": "cannot connect to Redis at redis://bob",
    }
    for url, said in cases.items():
        with pytest.raises(ConnectionFailed) as info:
            luapipe.run_bench(url, [PingWorkload()], config)
        assert not isinstance(info.value, OutcomeUnknown), info.value
        assert said in str(info.value), info.value
        printed = "".join(traceback.format_exception(info.value))
        for text in (str(info.value), repr(info.value), printed):
            assert_no_secret(text, ALL_OF_THEM, url)


def test_no_secret_in_a_benchmark_its_reports_and_error_samples(
    guarded: ServerProcess, tmp_path: Path
) -> None:
    """A real run as an ACL user whose password holds every special character: the delay
    proxy (the URL is retargeted at it), two forked workers per point, the bystander; the
    user may not FCALL, so the function form fails and its error samples are reported.
    Then ``luapipe report`` renders the JSON again."""
    user, password = "benchuser", ALL_OF_THEM
    admin = _admin(guarded)
    admin.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["~*"], commands=["+@all", "-fcall"]
    )
    try:
        url = f"redis://{user}:{quote(password, safe='')}@127.0.0.1:{guarded.port}/0"
        out = {kind: tmp_path / f"results.{kind}" for kind in ("json", "csv", "html")}
        done = _luapipe(
            "bench", "--url", url, "--rtt", "0,0.5", "--clients", "1,2", "--duration", "0.1",
            "--warmup", "0", "--rounds", "1", "--json", str(out["json"]),
            "--csv", str(out["csv"]), "--html", str(out["html"]), cwd=tmp_path, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        report = _luapipe(
            "report", str(out["json"]), "--html", str(tmp_path / "again.html"),
            "--csv", str(tmp_path / "again.csv"), cwd=tmp_path,
        )  # fmt: skip
        assert report.returncode == 0, report.stderr
    finally:
        admin.acl_deluser(user)
        admin.close()
    data = json.loads(out["json"].read_text())
    samples = [s for r in data["records"] if r["form"] == "function" for s in r["error_samples"]]
    assert samples and all("fcall" in s for s in samples), samples  # they are there
    assert (
        data["manifest"]["redis"]["url"]
        == printable_url(url)
        == (f"redis://{user}:***@127.0.0.1:{guarded.port}/0")
    )
    texts = {
        "stdout": done.stdout,
        "stderr": done.stderr,
        "report": report.stdout + report.stderr,
        **{p.name: p.read_text() for p in tmp_path.iterdir() if p.is_file()},
    }
    for name, text in texts.items():
        assert_no_secret(text, password, name)


def _descendants(pid: int) -> dict[int, str]:
    """{pid: command line} of every process below ``pid`` (children, their children...)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    below = {pid}
    while more := {p for p, pp in parent.items() if pp in below and p not in below}:
        below |= more
        for p in more:
            with contextlib.suppress(OSError):  # gone meanwhile
                found[p] = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return found


@pytest.mark.parametrize("way", ["--url-file", "--url-env"])
def test_a_url_kept_off_the_command_line_is_on_no_process_s(
    way: str, guarded: ServerProcess, tmp_path: Path
) -> None:
    """`ps` shows every process's command line to every user of the machine: given by
    --url-file or --url-env, the password is on none, neither luapipe's nor its children's
    (4 forked workers, the bystander probe, the delay proxy), and in none of its outputs."""
    user, password = "psuser", ALL_OF_THEM
    admin = _admin(guarded)
    admin.acl_setuser(user, enabled=True, passwords=[f"+{password}"], keys=["~*"],
                      commands=["+@all"])  # fmt: skip
    url = f"redis://{user}:{quote(password, safe='')}@127.0.0.1:{guarded.port}/0"
    env = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    if way == "--url-file":
        (tmp_path / "secret").mkdir()
        (tmp_path / "secret" / "redis.url").write_text(url + "\n")
        given = ["--url-file", str(tmp_path / "secret" / "redis.url")]
    else:
        env["STAGING_REDIS_URL"] = url
        given = ["--url-env", "STAGING_REDIS_URL"]
    out = [str(tmp_path / f"results.{kind}") for kind in ("json", "csv", "html")]
    cmd = [sys.executable, "-m", "luapipe", "bench", *given, "--clients", "4", "--rtt", "0,0.5",
           "--duration", "0.5", "--warmup", "0", "--rounds", "1",
           "--json", out[0], "--csv", out[1], "--html", out[2]]  # fmt: skip
    seen: set[tuple[int, str]] = set()  # (pid, command line) as each was seen
    most = 0
    try:
        proc = subprocess.Popen(
            cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        seen.add((proc.pid, Path(f"/proc/{proc.pid}/cmdline").read_text().replace("\0", " ")))
        while proc.poll() is None:
            now = _descendants(proc.pid)
            seen |= set(now.items())
            most = max(most, sum("bench" in c for c in now.values()))
            time.sleep(0.01)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        admin.acl_deluser(user)
        admin.close()
    assert proc.returncode == 0, stderr
    assert most >= 4, seen  # the 4 workers were seen running (each with luapipe's argv)
    assert any("rttproxy" in c for _, c in seen), seen
    for pid, line in seen:
        assert_no_secret(line, password, f"the command line of pid {pid}")
    texts = {"stdout": stdout, "stderr": stderr, **{p: Path(p).read_text() for p in out}}
    for name, text in texts.items():
        assert_no_secret(text, password, name)


def test_a_results_file_of_an_older_luapipe_is_shown_without_its_passwords(
    tmp_path: Path,
) -> None:
    """A results file written before issue 16 holds a password with a space or a quote as
    it was (the safety net stopped at the space): ``luapipe report`` printed it again, in
    the table, the HTML and the CSV. In free text a password now runs to the line's last
    "@", as printable_url reads a URL."""
    from ..report.test_report import record, result

    password = VALID_RAW  # spaces, quotes, < >, an "@" and a ":"
    data = result(record(errors=2, error_samples=[f"ERR at redis://bob:{password}@db:1 nope"]))
    data["manifest"]["redis"]["url"] = f"redis://alice:{password}@db.example:6379/0"
    (tmp_path / "old.json").write_text(json.dumps(data))
    done = _luapipe("report", "old.json", "--html", "old.html", "--csv", "old.csv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for name, text in {
        "output": done.stdout + done.stderr,
        "html": (tmp_path / "old.html").read_text(),
        "csv": (tmp_path / "old.csv").read_text(),
    }.items():
        assert_no_secret(text, password, name)
    assert "redis://alice:***@db.example:6379/0" in (tmp_path / "old.html").read_text()
