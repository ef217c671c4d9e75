"""Values and sizes are refused before anything is sent, naming the script (or command)
and the argument (issue 16): a bad type when the call is made or queued, an argument over
the server's proto-max-bulk-len before the write. Both flavours (the ``driver`` fixture)."""

from __future__ import annotations

import enum
from collections.abc import Iterator

import pytest
import redis

from luapipe import load_operation
from luapipe.bench.server import ServerProcess
from luapipe.errors import CallArgumentError, ConnectionFailed, OutcomeUnknown
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire.limits import DEFAULT_LIMIT, limit_steps
from luapipe.wire.replies import ReplyError

from ..conftest import EXAMPLES_DIR
from ..drivers import Driver, drained, stopped, warmed

STORE = LuaScript.from_source(
    "store",
    "-- @key k\n-- @arg value\n-- @arg [more...]\n"
    "redis.call('SET', KEYS[1], ARGV[1])\nreturn string.len(ARGV[1])\n",
)
MB = 1024 * 1024
TOKEN = load_operation(EXAMPLES_DIR / "operations" / "update_token.toml")
TOKEN_ARGS = {"token": "t", "user": "alice", "item": "", "now": 1}


@pytest.fixture
def small_bulk(r: redis.Redis) -> Iterator[redis.Redis]:
    """The shared server with proto-max-bulk-len at its minimum, 1 MB, for the test."""
    r.config_set("proto-max-bulk-len", MB)
    try:
        yield r
    finally:
        r.config_set("proto-max-bulk-len", DEFAULT_LIMIT)


@pytest.mark.parametrize(
    ("keys", "args", "where"),
    [
        (["k"], ["ok", None], "args[1] (more) is None (NoneType)"),
        (["k"], [True], "args[0] (value) is True (bool)"),
        ([{"a": 1}], ["v"], "keys[0] (k) is {'a': 1} (dict)"),
    ],
)
def test_a_bad_value_is_refused_naming_the_script_and_the_argument(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis, keys: list, args: list, where: str
) -> None:
    """redis-py's packer would refuse these too, but saying neither the script nor which
    value ("A tuple item must be str, int, float or bytes."): luapipe's check says both."""
    client = driver.redis(redis_server.port)
    reg = ScriptRegistry([STORE])
    with pytest.raises(CallArgumentError) as info:
        driver.run(reg.call(client, "store", keys=keys, args=args))
    assert f"script 'store': {where}" in str(info.value)
    assert isinstance(info.value, redis.DataError) and "nothing was sent" in str(info.value)
    assert r.dbsize() == 0


def test_a_pipeline_refuses_a_bad_value_when_it_is_queued(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis
) -> None:
    """Refused by pipe.set / pipe.call itself, not at execute(): what was queued before it
    stays queued and is sent."""
    client = driver.redis(redis_server.port)
    reg = ScriptRegistry([STORE])
    pipe = reg.pipeline(client)
    pipe.set("before", 1)
    with pytest.raises(CallArgumentError, match=r"pipeline command SET: args\[1\] is None"):
        pipe.set("bad", None)
    with pytest.raises(CallArgumentError, match=r"script 'store': args\[0\] \(value\) is None"):
        pipe.call("store", keys=["k"], args=[None])
    pipe.incr("after")
    assert driver.run(pipe.execute()) == [True, 1]
    assert r.get("before") == b"1" and r.exists("bad", "k") == 0


class Status(enum.IntEnum):
    OK = 1


def test_an_int_subclass_is_refused_when_queued_or_called(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis
) -> None:
    """An IntEnum is an int, but redis-py cannot send it: with hiredis the sync packer
    refuses it without naming anything ("A tuple item must be str, int, float or bytes."),
    at execute() for a pipeline, dropping what was queued; the asyncio encoder sends its
    repr, '<Status.OK: 1>'. Refused by name when called or queued, in both flavours."""
    client = driver.redis(redis_server.port)
    reg = ScriptRegistry([STORE])
    with pytest.raises(CallArgumentError, match=r"script 'store': args\[0\] \(value\) is <Sta"):
        driver.run(reg.call(client, "store", keys=["k"], args=[Status.OK]))
    pipe = reg.pipeline(client)
    pipe.set("before", 1)
    with pytest.raises(CallArgumentError, match=r"pipeline command SET: args\[1\] is <Status"):
        pipe.set("bad", Status.OK)
    pipe.incr("after")
    assert driver.run(pipe.execute()) == [True, 1]
    assert r.exists("k", "bad") == 0 and r.get("before") == b"1"
    assert driver.run(reg.call(client, "store", keys=["k"], args=[int(Status.OK)])) == 1


def test_a_big_value_of_a_str_or_bytes_subclass_is_refused_too(
    driver: Driver, redis_server: ServerProcess, small_bulk: redis.Redis
) -> None:
    """The cheap look for big values compared classes exactly: a str subclass of 1 MB
    went out unchecked and the server reset the connection."""

    class Text(str):
        pass

    class Blob(bytes):
        pass

    client = driver.redis(redis_server.port)
    reg = ScriptRegistry([STORE])
    for big in (Text("x" * (MB + 1)), Blob(b"x" * (MB + 1))):
        with pytest.raises(CallArgumentError, match=r"args\[0\] \(value\) is 1,048,577 bytes"):
            driver.run(reg.call(client, "store", keys=["k"], args=[big]))
        pipe = reg.pipeline(client)
        pipe.set("queued", 1).set("plain", big)
        with pytest.raises(CallArgumentError, match=r"pipeline command SET: args\[1\] is 1,"):
            driver.run(pipe.execute())
    assert small_bulk.exists("k", "queued", "plain") == 0


def test_an_argument_over_proto_max_bulk_len_is_refused_before_sending(
    driver: Driver, redis_server: ServerProcess, small_bulk: redis.Redis
) -> None:
    """The server would refuse it (a lone call: a protocol error; in a pipeline it resets
    the connection mid-write, and the batch's outcome was unknown): refused first, naming
    the argument, its size and the limit, in single calls, pipelines and transactions."""
    r = small_bulk
    client = driver.redis(redis_server.port)
    reg = ScriptRegistry([STORE])
    big = b"x" * (MB + 1)
    said = (
        rf"args\[0\] \(value\) is 1,048,577 bytes, more than the proto-max-bulk-len of the "
        rf"server at [\w.]+:{redis_server.port} \(1,048,576 bytes\); nothing was sent"
    )
    assert driver.run(reg.call(client, "store", keys=["warm"], args=["x"])) == 1  # cached now
    with pytest.raises(CallArgumentError, match="script 'store': " + said):
        driver.run(reg.call(client, "store", keys=["single"], args=[big]))
    for transaction in (False, True):
        pipe = reg.pipeline(client, transaction=transaction)
        pipe.set("queued", 1).call("store", keys=["piped"], args=[big])
        with pytest.raises(CallArgumentError, match="script 'store': " + said):
            driver.run(pipe.execute())
        pipe.set("queued", 1).set("plain", "a" * (MB + 1))
        with pytest.raises(CallArgumentError, match=r"pipeline command SET: args\[1\] is 1,"):
            driver.run(pipe.execute())
    assert r.exists("single", "piped", "queued", "plain") == 0  # nothing was sent
    # exactly the limit is allowed (the server refuses only a longer one); a str counts
    # its UTF-8 bytes
    exact = "é" * (MB // 2)
    assert driver.run(reg.call(client, "store", keys=["exact"], args=[exact])) == MB
    with pytest.raises(CallArgumentError, match=r"is 1,048,578 bytes"):
        driver.run(reg.call(client, "store", keys=["exact"], args=[exact + "é"]))


def test_every_form_of_an_operation_refuses_an_argument_over_the_limit(
    driver: Driver, redis_server: ServerProcess, small_bulk: redis.Redis
) -> None:
    """op.run's naive, pipelined and transaction forms sent the value and read the reset
    as "outcome unknown" (naive, pipelined) or "failed while sending" (transaction): the
    issue's own complaint about pipelines. Every form refuses it first, in the same words
    naming the operation and its argument (the function form named the generated library
    and no argument, the script form the generated script), and nothing is written."""
    client = driver.redis(redis_server.port)
    keys = {"login": "l", "recent": "r", "viewed": "v", "item_views": "iv"}
    big = "u" * (MB + 1)
    for form in TOKEN.forms:
        with pytest.raises(CallArgumentError) as info:
            driver.run(TOKEN.run(client, form, keys=keys, args={**TOKEN_ARGS, "user": big}))
        assert str(info.value) == (
            f"operation 'update_token' ({form} form): args[1] (user) is 1,048,577 bytes, more "
            f"than the proto-max-bulk-len of the server at 127.0.0.1:{redis_server.port} "
            "(1,048,576 bytes); nothing was sent (raise it with CONFIG SET proto-max-bulk-len, "
            "or send less)"
        )
        assert small_bulk.dbsize() == 0, form
    for form in TOKEN.forms:  # exactly the limit goes through
        args = {**TOKEN_ARGS, "user": "u" * MB}
        assert not driver.run(TOKEN.run(client, form, keys=keys, args=args))
        assert len(small_bulk.hget("l", "t") or b"") == MB, form
        small_bulk.delete("l")


def test_where_config_is_not_allowed_the_default_limit_applies(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis
) -> None:
    """An ACL user without CONFIG: the limit is Redis's default (512 MB), so a 2 MB value
    goes through (the server's own limit is the default too)."""
    r.acl_setuser(
        "noconfig", enabled=True, passwords=["+noconfig-pw"], keys=["~*"],
        commands=["+@all", "-config"],
    )  # fmt: skip
    try:
        client = driver.redis(redis_server.port, username="noconfig", password="noconfig-pw")
        reg = ScriptRegistry([STORE])
        value = b"y" * (2 * MB)
        assert driver.run(reg.call(client, "store", keys=["two"], args=[value])) == 2 * MB
        pipe = reg.pipeline(client)
        pipe.call("store", keys=["three"], args=[value])
        assert driver.run(pipe.execute()) == [2 * MB]
    finally:
        r.acl_deluser("noconfig")


def test_the_limit_from_each_reply_shape() -> None:
    """RESP2 list, RESP3 map, a refusal (NOPERM, a renamed CONFIG): the default."""
    for reply, expected in (
        ([b"proto-max-bulk-len", b"1048576"], MB),
        ({b"proto-max-bulk-len": b"2097152"}, 2 * MB),
        (ReplyError("NOPERM this user has no permissions to run the 'config|get' command"), None),
        (ReplyError("ERR unknown command 'CONFIG'"), None),
        ([], None),
    ):
        steps = limit_steps("h:1")
        next(steps)
        with pytest.raises(StopIteration) as done:
            steps.send([reply])
        assert done.value.value == (expected or DEFAULT_LIMIT)


def test_the_limit_is_remembered_and_read_again_before_refusing(
    driver: Driver, redis_server: ServerProcess, small_bulk: redis.Redis
) -> None:
    """Once read, a node's limit lets big values through without asking again; a value it
    would refuse is checked against a fresh reading (the limit was raised meanwhile)."""
    r = small_bulk
    client = driver.redis(redis_server.port)
    reg = ScriptRegistry([STORE])
    with pytest.raises(CallArgumentError, match=r"\(1,048,576 bytes\)"):
        driver.run(reg.call(client, "store", keys=["k"], args=[b"x" * (MB + 1)]))
    r.config_set("proto-max-bulk-len", 4 * MB)  # raised: the remembered 1 MB is stale
    r.config_resetstat()
    assert driver.run(reg.call(client, "store", keys=["k"], args=[b"x" * (2 * MB)])) == 2 * MB
    assert driver.run(reg.call(client, "store", keys=["k"], args=[b"y" * (3 * MB)])) == 3 * MB
    stats = r.info("commandstats")
    assert stats["cmdstat_config|get"]["calls"] == 1  # asked again once, then remembered


def test_no_answer_to_the_limit_question_means_nothing_ran(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis
) -> None:
    """The server freezes before answering CONFIG GET: the big request was never written,
    so it is ConnectionFailed (nothing ran), not OutcomeUnknown."""
    client = driver.redis(redis_server.port, socket_timeout=0.25, client_name="asker")
    reg = ScriptRegistry([STORE])
    warmed(driver, lambda: reg.call(client, "store", keys=["warm"], args=["x"]))
    with stopped(redis_server.pid, at_most=10), pytest.raises(ConnectionFailed) as caught:
        driver.run(reg.call(client, "store", keys=["big"], args=[b"x" * (2 * MB)]))
    assert not isinstance(caught.value, OutcomeUnknown)
    assert "did not answer CONFIG GET proto-max-bulk-len" in str(caught.value)
    assert "nothing ran" in str(caught.value) and isinstance(caught.value, redis.TimeoutError)
    driver.close(client)
    drained(r, "asker")
    assert r.exists("big") == 0
