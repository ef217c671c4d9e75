"""Errors fit both worlds (luapipe.errors' table): each failure is provoked for real, once
through luapipe and once through redis-py's ``register_script``, and the two exceptions are
compared: every redis-py class the redis-py one is an instance of, luapipe's is too (so a
handler written for redis-py fires), and luapipe's is a ConnectionError or TimeoutError only
where redis-py's is (so a retry handler never re-sends what redis-py would not)."""

from __future__ import annotations

import contextlib
import pickle
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.cluster
import redis.exceptions as rex
from redis._parsers import _HiredisParser, _RESP2Parser
from redis.backoff import NoBackoff
from redis.retry import Retry

import luapipe
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis, ServerProcess, free_port
from luapipe.errors import (
    AuthenticationFailed,
    BusyError,
    CallArgumentError,
    ConnectionFailed,
    CrossSlotError,
    LuapipeError,
    OutcomeUnknown,
    PermissionDenied,
    ReadOnlyError,
    ScriptRuntimeError,
    ServerError,
    mask_url,
    translate,
)
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from .conftest import EXAMPLES_DIR
from .helpers import SPIN

#: every redis-py class a register_script user might catch
CATCHABLE = (
    rex.RedisError,
    rex.ResponseError,
    rex.ConnectionError,
    rex.TimeoutError,
    rex.AuthenticationError,
    rex.BusyLoadingError,
    rex.InvalidResponse,
    rex.DataError,
    rex.NoScriptError,
    rex.ReadOnlyError,
    rex.OutOfMemoryError,
    rex.NoPermissionError,
    rex.ExecAbortError,
    rex.WatchError,
    rex.MovedError,
    rex.ClusterCrossSlotError,
    rex.RedisClusterException,
)
#: classes a retry handler keys on: luapipe's may not be one where redis-py's is not
EXACT = (rex.ConnectionError, rex.TimeoutError)

SOURCES = {
    "boom": "local x = 1\nreturn error('boom')\n",
    "wrongtype": "redis.call('SET', KEYS[1], 'x')\nreturn redis.call('INCR', KEYS[1])\n",
    "own_noscript": "return redis.error_reply('NOSCRIPT not really')\n",
    "setter": "redis.call('SET', KEYS[1], 'x')\nreturn 1\n",
    "spin": "redis.call('INCR', KEYS[1])\n" + SPIN,
    "hold": SPIN,  # read-only: SCRIPT KILL stops it
    "echo": "return ARGV[1]\n",
    "deep": "local t = {} local c = t\n"
    "for i = 1, tonumber(ARGV[1]) do local n = {} c[1] = n c = n end\nreturn t\n",
}


@dataclass
class Env:
    server: ServerProcess
    admin: redis.Redis
    reg: ScriptRegistry

    def client(self, **kw: Any) -> redis.Redis:
        """A client with redis-py's retries off (so register_script runs a script once)."""
        kw.setdefault("retry", Retry(NoBackoff(), 0))
        return redis.Redis(host=self.server.host, port=self.server.port, **kw)

    def both(
        self, name: str, client: redis.Redis, keys: list[Any], args: list[Any]
    ) -> tuple[BaseException, BaseException]:
        """(luapipe's exception, redis-py's) for the same call on the same kind of client."""
        ours = _raised(lambda: self.reg.call(client, name, keys=keys, args=args))
        script = client.register_script(SOURCES[name])
        return ours, _raised(lambda: script(keys=keys, args=args))


def _raised(fn: Callable[[], Any]) -> BaseException:
    try:
        fn()
    except BaseException as exc:
        return exc
    pytest.fail("no exception")


def _wait_idle(admin: redis.Redis) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            admin.ping()
            return
        except rex.ResponseError:
            time.sleep(0.02)
    pytest.fail("the server stayed busy")


def _wait_busy(admin: redis.Redis) -> None:
    """Until the slow script started by another thread holds the server (BUSY)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            admin.ping()
        except rex.ResponseError as exc:
            if str(exc).startswith("BUSY"):
                return
        time.sleep(0.01)
    pytest.fail("the server never got busy")


@pytest.fixture
def env(r: redis.Redis, redis_server: ServerProcess) -> Iterator[Env]:
    reg = ScriptRegistry([LuaScript.from_source(n, s) for n, s in SOURCES.items()])
    yield Env(redis_server, r, reg)
    _wait_idle(r)


# -- the cases: each returns (luapipe's exception, redis-py's) -----------------------------
def case_script_error(env: Env) -> tuple[BaseException, BaseException]:
    return env.both("boom", env.client(), [], [])


def case_failed_redis_call(env: Env) -> tuple[BaseException, BaseException]:
    return env.both("wrongtype", env.client(), ["k"], [])


def case_own_noscript_reply(env: Env) -> tuple[BaseException, BaseException]:
    return env.both("own_noscript", env.client(), [], [])


def case_out_of_memory(env: Env) -> tuple[BaseException, BaseException]:
    env.admin.config_set("maxmemory-policy", "noeviction")
    env.admin.config_set("maxmemory", 1)
    try:
        return env.both("setter", env.client(), ["k"], [])
    finally:
        env.admin.config_set("maxmemory", 0)


@contextlib.contextmanager
def _busy(env: Env) -> Iterator[None]:
    """The server held by a slow read-only script from another thread (so every other
    command gets BUSY) until the block ends, then that script is killed."""
    env.admin.config_set("busy-reply-threshold", 50)
    env.reg.load(env.admin)

    def hold() -> None:
        with contextlib.suppress(LuapipeError):  # killed
            env.reg.call(env.client(), "hold", args=[10_000])

    runner = threading.Thread(target=hold)
    runner.start()
    try:
        _wait_busy(env.admin)
        yield
    finally:
        env.admin.script_kill()
        runner.join()


def case_busy(env: Env) -> tuple[BaseException, BaseException]:
    with _busy(env):
        return env.both("echo", env.client(), [], ["x"])


def case_busy_transaction(env: Env) -> tuple[BaseException, BaseException]:
    client = env.client()

    def ours() -> Any:
        with env.reg.pipeline(client, transaction=True) as tx:
            return tx.call("echo", args=["x"]).set("a", 1).execute()

    def theirs() -> Any:
        pipe = client.pipeline(transaction=True)
        client.register_script(SOURCES["echo"])(args=["x"], client=pipe)
        return pipe.set("a", 1).execute()

    with _busy(env):
        return _raised(ours), _raised(theirs)


def test_busy_at_a_transaction_names_busy_once(env: Env) -> None:
    ours, _ = case_busy_transaction(env)
    # the server's own BUSY line, whose wording names the engine ("Redis is busy", "Valkey
    # is busy"), once, after EXECABORT's
    assert re.fullmatch(
        r"transaction aborted, nothing was applied: EXECABORT Transaction discarded because "
        r"of: BUSY \w+ is busy running a script\. You can only call SCRIPT KILL or SHUTDOWN "
        r"NOSAVE\.",
        str(ours),
    ), str(ours)


def case_permission_denied(env: Env) -> tuple[BaseException, BaseException]:
    env.admin.execute_command("ACL", "SETUSER", "nosc", "on", ">pw", "~*", "+@all", "-evalsha")
    try:
        return env.both("echo", env.client(username="nosc", password="pw"), [], ["x"])
    finally:
        env.admin.execute_command("ACL", "DELUSER", "nosc")


def case_wrong_password(env: Env) -> tuple[BaseException, BaseException]:
    env.admin.execute_command("ACL", "SETUSER", "someone", "on", ">right", "~*", "+@all")
    try:
        return env.both("echo", env.client(username="someone", password="wrong"), [], ["x"])
    finally:
        env.admin.execute_command("ACL", "DELUSER", "someone")


def case_connection_refused(env: Env) -> tuple[BaseException, BaseException]:
    client = redis.Redis(port=free_port(), retry=Retry(NoBackoff(), 0))
    return env.both("echo", client, [], ["x"])


def case_connect_timeout(env: Env) -> tuple[BaseException, BaseException]:
    """A server that accepts the connection and never answers its hand-shake."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        client = redis.Redis(
            port=silent.getsockname()[1], socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
        )
        return env.both("echo", client, [], ["x"])


def case_timeout_after_sending(env: Env) -> tuple[BaseException, BaseException]:
    env.reg.load(env.admin)
    client = env.client(socket_timeout=0.1)
    client.ping()  # connected: the timeout comes after sending
    ours = _raised(lambda: env.reg.call(client, "spin", keys=["n"], args=[300]))
    _wait_idle(env.admin)
    client.ping()
    theirs = _raised(lambda: client.register_script(SOURCES["spin"])(keys=["n"], args=[300]))
    _wait_idle(env.admin)
    assert env.admin.get("n") == b"2"  # each side ran it once: nothing re-sent it
    return ours, theirs


def case_connection_lost_after_sending(env: Env) -> tuple[BaseException, BaseException]:
    """The call reached the server (held by CLIENT PAUSE) and its connection is killed."""
    env.reg.load(env.admin)
    ours = _killed_while_waiting(env, lambda c: env.reg.call(c, "setter", keys=["k"]))
    theirs = _killed_while_waiting(env, lambda c: c.register_script(SOURCES["setter"])(keys=["k"]))
    return ours, theirs


def _killed_while_waiting(env: Env, call: Callable[[redis.Redis], Any]) -> BaseException:
    victim = env.client()
    victim_id = victim.client_id()
    env.admin.client_pause(1000, all=False)
    killer = threading.Timer(0.2, lambda: env.admin.client_kill_filter(_id=victim_id))
    killer.start()
    try:
        return _raised(lambda: call(victim))
    finally:
        killer.join()
        env.admin.client_unpause()


def case_bad_value(env: Env) -> tuple[BaseException, BaseException]:
    return env.both("echo", env.client(), [], [None])


def case_reply_too_deep(env: Env) -> tuple[BaseException, BaseException]:
    pool = redis.ConnectionPool(
        host=env.server.host, port=env.server.port, parser_class=_HiredisParser
    )
    return env.both("deep", redis.Redis(connection_pool=pool), [], [3000])


CASES: dict[str, tuple[Callable[[Env], tuple[BaseException, BaseException]], type]] = {
    "script error()": (case_script_error, ScriptRuntimeError),
    "failed redis.call": (case_failed_redis_call, ScriptRuntimeError),
    "own NOSCRIPT error reply": (case_own_noscript_reply, ScriptRuntimeError),
    "OOM inside a script": (case_out_of_memory, ScriptRuntimeError),
    "BUSY": (case_busy, BusyError),
    "BUSY at a transaction": (case_busy_transaction, BusyError),
    "NOPERM": (case_permission_denied, PermissionDenied),
    "wrong password": (case_wrong_password, AuthenticationFailed),
    "connection refused": (case_connection_refused, ConnectionFailed),
    "connect timeout": (case_connect_timeout, ConnectionFailed),
    "timeout after sending": (case_timeout_after_sending, OutcomeUnknown),
    "connection lost after sending": (case_connection_lost_after_sending, OutcomeUnknown),
    "bad value (None)": (case_bad_value, CallArgumentError),
    "reply nested too deep": (case_reply_too_deep, OutcomeUnknown),
}


def assert_same_world(ours: BaseException, theirs: BaseException, cls: type) -> None:
    assert isinstance(ours, cls), repr(ours)
    assert isinstance(ours, LuapipeError)
    assert len(str(ours).splitlines()) == 1, str(ours)
    for c in CATCHABLE:
        if isinstance(theirs, c):
            assert isinstance(ours, c), f"{ours!r} is not a {c.__name__} like {theirs!r}"
    for c in EXACT:
        assert isinstance(ours, c) == isinstance(theirs, c), f"{c.__name__}: {ours!r} {theirs!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_luapipe_errors_are_what_register_script_raises(env: Env, name: str) -> None:
    provoke, cls = CASES[name]
    ours, theirs = provoke(env)
    assert_same_world(ours, theirs, cls)


@pytest.fixture(scope="module")
def replica(redis_server: ServerProcess) -> Iterator[redis.Redis]:
    server = EmbeddedRedis(["--replicaof", redis_server.host, str(redis_server.port)])
    info = server.start()
    client = redis.Redis(host=info.host, port=info.port, retry=Retry(NoBackoff(), 0))
    deadline = time.monotonic() + 10
    while client.info("replication").get("master_link_status") != "up":
        assert time.monotonic() < deadline, "replica did not sync"
        time.sleep(0.05)
    try:
        yield client
    finally:
        client.close()
        server.stop()


@pytest.mark.parametrize("flagged", [False, True])
def test_a_write_on_a_replica_is_read_only_error(
    env: Env, replica: redis.Redis, flagged: bool
) -> None:
    """Inside a running script (a file:line, and a ScriptRuntimeError too) or refused before
    it runs (a ``#!lua`` script without no-writes): ReadOnlyError, as the README says."""
    source = ("#!lua\n" if flagged else "") + SOURCES["setter"]
    reg = ScriptRegistry([LuaScript.from_source("setter", source, path="s/setter.lua")])
    ours = _raised(lambda: reg.call(replica, "setter", keys=["k"]))
    theirs = _raised(lambda: replica.register_script(source)(keys=["k"]))
    assert_same_world(ours, theirs, ReadOnlyError)
    assert isinstance(ours, ScriptRuntimeError) != flagged
    assert str(ours).startswith("s/setter.lua:" if not flagged else "read-only replica")


def test_cluster_failures_are_what_the_cluster_client_raises(
    env: Env, cluster: EmbeddedCluster, rc: redis.cluster.RedisCluster
) -> None:
    # keys in two slots: redis-py's cluster client refuses before sending, and so do we
    script = LuaScript.from_source("two", "return KEYS[1]\n")
    reg = ScriptRegistry([script])
    ours = _raised(lambda: reg.call(rc, "two", keys=["a", "b"]))
    theirs = _raised(lambda: rc.register_script(script.source)(keys=["a", "b"]))
    assert_same_world(ours, theirs, CrossSlotError)
    # a plain client on a node that does not own the key: MOVED
    node = redis.Redis(port=cluster.ports[0], retry=Retry(NoBackoff(), 0))
    key = next(k for k in (f"k{i}" for i in range(100)) if rc.keyslot(k) > 5461)
    ours = _raised(lambda: reg.call(node, "two", keys=[key]))
    theirs = _raised(lambda: node.register_script(script.source)(keys=[key]))
    assert_same_world(ours, theirs, ServerError)
    assert "cluster client" in str(ours)


def test_errors_that_do_not_come_from_redis_are_not_redis_errors(env: Env) -> None:
    reg = ScriptRegistry([LuaScript.from_source("one", "-- @key k\nreturn 1\n")])
    client = env.client()
    for bad in (
        lambda: reg.call(client, "one", keys=[]),  # a count the header refuses
        lambda: reg.call(client, "nope"),
        lambda: reg.call("redis://:pw@127.0.0.1:6379/0", "one", keys=["k"]),  # not a client
        lambda: luapipe.parse_operation("name = 'x'\n", path="x.toml"),
    ):
        err = _raised(bad)
        assert isinstance(err, LuapipeError), repr(err)
        assert not isinstance(err, rex.RedisError), repr(err)
        assert len(str(err).splitlines()) >= 1 and "pw@" not in str(err)


def test_python_parser_recursion_is_outcome_unknown(env: Env) -> None:
    """redis-py's pure-Python parser recurses per level: a RecursionError there (redis-py
    lets it escape) is OutcomeUnknown, and the connection is dropped, not reused."""
    pool = redis.ConnectionPool(
        host=env.server.host, port=env.server.port, parser_class=_RESP2Parser
    )
    client = redis.Redis(connection_pool=pool)
    err = _raised(lambda: env.reg.call(client, "deep", args=[3000]))
    assert isinstance(err, OutcomeUnknown) and isinstance(err, rex.InvalidResponse)
    assert "nested deeper" in str(err)
    assert env.reg.call(client, "echo", args=["after"]) == b"after"  # a clean connection


def test_plain_commands_with_bad_values_in_a_pipeline(env: Env) -> None:
    with env.reg.pipeline(env.client()) as pipe:  # refused when queued (issue 16)
        err = _raised(lambda: pipe.set("k", None))  # type: ignore[arg-type]
    assert isinstance(err, CallArgumentError) and isinstance(err, rex.DataError)
    assert env.admin.exists("k") == 0


def test_kill_with_an_asyncio_client_is_awaitable(env: Env) -> None:
    import asyncio

    import redis.asyncio

    async def main() -> list[str]:
        client = redis.asyncio.Redis(host=env.server.host, port=env.server.port)
        try:
            return await env.reg.kill(client)
        finally:
            await client.aclose()

    assert asyncio.run(main()) == []  # no script running


def test_errors_pickle_with_both_classes() -> None:
    err = translate(rex.ResponseError("READONLY You can't write against a read only replica."))
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err) and isinstance(back, rex.ReadOnlyError)
    assert str(back) == str(err)


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        ("redis://:wrong@secret-tail@host:6379/0", "redis://:***@host:6379/0"),
        ("at rediss://alice:p@ss/w?rd@db.example:6380/1: refused", "at rediss://alice:***@db"),
        ("redis://justapassword@host", "redis://***@host"),
        ("redis://host:6379/0 and unix:///tmp/redis.sock", "redis://host:6379/0 and unix"),
    ],
)
def test_mask_url_hides_the_whole_password(text: str, masked: str) -> None:
    out = mask_url(text)
    assert masked in out
    for secret in ("secret", "wrong", "p@ss", "rd@", "justapassword"):
        assert secret not in out


def test_every_message_is_masked_when_the_error_is_made() -> None:
    for err in (
        LuapipeError("at redis://:wrong@secret-tail@h:1"),
        ConnectionFailed("at redis://u:wrong@secret-tail@h:1", like=rex.TimeoutError),
        translate(OSError("redis://:wrong@secret-tail@h:1 refused"), where="x"),
    ):
        assert "secret" not in str(err) and "wrong" not in str(err), str(err)


def test_fakeredis_failures_are_luapipe_errors_with_the_line(fake: redis.Redis) -> None:
    """fakeredis does not say the line of a failed redis.call: the one line it can come
    from is named, or the candidates; redis.call() without arguments (fakeredis raises a
    TypeError) is a one-line LuapipeError."""
    reg = ScriptRegistry(
        [
            LuaScript.from_source("one", "local x = 1\nreturn redis.call('INCR', KEYS[1])\n"),
            LuaScript.from_source(
                "two", "redis.call('SET', KEYS[1], 'x')\nreturn redis.call('INCR', KEYS[1])\n"
            ),
            LuaScript.from_source("none", "local x = 1\nreturn redis.call()\n"),
        ]
    )
    fake.set("s", "abc")
    err = _raised(lambda: reg.call(fake, "one", keys=["s"]))
    assert isinstance(err, ScriptRuntimeError) and str(err).startswith("one:2: script one failed")
    err = _raised(lambda: reg.call(fake, "two", keys=["s"]))
    assert isinstance(err, ScriptRuntimeError) and "one of lines 1, 2" in str(err)
    err = _raised(lambda: reg.call(fake, "none"))
    assert isinstance(err, LuapipeError) and len(str(err).splitlines()) == 1
    assert "TypeError" in str(err)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_bad_input_is_a_luapipe_error_through_both_drivers(env: Env, driver: str) -> None:
    """The same failures through the sync and the asyncio paths."""
    import asyncio

    import redis.asyncio

    def call(client_kw: dict[str, Any], name: str, args: list[Any]) -> BaseException:
        if driver == "sync":
            pool = redis.ConnectionPool(host=env.server.host, port=env.server.port, **client_kw)
            return _raised(lambda: env.reg.call(redis.Redis(connection_pool=pool), name, args=args))

        async def main() -> Any:
            pool = redis.asyncio.ConnectionPool(
                host=env.server.host, port=env.server.port, **client_kw
            )
            client = redis.asyncio.Redis(connection_pool=pool)
            try:
                return await env.reg.call(client, name, args=args)
            finally:
                await client.aclose()

        return _raised(lambda: asyncio.run(main()))

    err = call({}, "echo", [None])
    assert isinstance(err, CallArgumentError) and isinstance(err, rex.DataError)
    from redis._parsers import _AsyncHiredisParser

    parser = _HiredisParser if driver == "sync" else _AsyncHiredisParser
    err = call({"parser_class": parser}, "deep", [3000])
    assert isinstance(err, OutcomeUnknown) and isinstance(err, rex.InvalidResponse), repr(err)
    err = _raised(lambda: env.reg.call(f"redis://{env.server.host}:{env.server.port}", "echo"))
    assert isinstance(err, CallArgumentError) and "redis.Redis.from_url" in str(err)


def test_functions_without_an_asyncio_twin_say_so(env: Env, tmp_path: Path) -> None:
    """deploy and verify take a sync client: an asyncio one or a URL is one line, with no
    never-awaited coroutine left behind."""
    import warnings

    import redis.asyncio

    op = luapipe.load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")
    aclient = redis.asyncio.Redis(host=env.server.host, port=env.server.port)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a never-awaited coroutine fails the test
        for bad in (
            lambda: luapipe.deploy(env.reg, aclient, tmp_path / "lock.json"),  # type: ignore[arg-type]
            lambda: luapipe.verify(op, aclient, cases=1),  # type: ignore[arg-type]
            lambda: luapipe.verify(op, "redis://127.0.0.1:6379", cases=1),  # type: ignore[arg-type]
        ):
            err = _raised(bad)
            assert isinstance(err, CallArgumentError) and "client" in str(err), repr(err)
    assert not (tmp_path / "lock.json").exists()


def test_a_nil_command_argument_fails_alike_in_every_form(env: Env) -> None:
    """A spec whose read passes nil: Lua refuses it ("command arguments must be strings or
    integers"), Python forms refuse it before sending (CallArgumentError + DataError; it
    used to escape verify as a bare DataError traceback): the same failure in every form."""
    spec = (EXAMPLES_DIR / "operations" / "cas_update.toml").read_text()
    spec = spec.replace('args = ["field"]', 'args = ["nil"]', 1)
    assert 'args = ["nil"]' in spec
    op = luapipe.parse_operation(spec, path="nil_arg.toml")
    report = luapipe.verify(op, env.admin, cases=3, seed=7)
    assert report.ok, report.summary()
    args = {"field": "a", "expected": "a", "new": "b"}
    err = _raised(lambda: op.run(env.admin, "naive", keys={"record": "r"}, args=args))
    assert isinstance(err, CallArgumentError) and isinstance(err, rex.DataError)
