"""The auto-pipeline finds the keys of movable-key commands from the server's key specs
(no COMMAND GETKEYS round trip): the same keys the server finds, in every reply shape
redis-py gives the COMMAND table, and "ask the server" wherever the specs do not tell."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from luapipe.bench.server import ServerProcess
from luapipe.wire.autopipe.keyspecs import LOOKUP, NOT_MOVABLE, KeyFinder

#: commands whose keys the specs find, in the shapes that move them around
FOUND: list[tuple[Any, ...]] = [
    ("ZUNIONSTORE", "d", 2, "a", "b", "WEIGHTS", 1, 2),
    ("ZUNIONSTORE", "d", "1", "a"),
    ("zinterstore", "d", 1, "a", "AGGREGATE", "SUM"),
    ("ZDIFFSTORE", "d", 2, "a", "b"),
    ("ZINTER", 2, "a", "b", "WITHSCORES"),
    ("ZUNION", 3, "a", "b", "c"),
    ("ZDIFF", 1, "a"),
    ("ZINTERCARD", 2, "a", "b", "LIMIT", 5),
    ("SINTERCARD", 2, "s1", "s2", "LIMIT", 3),
    ("LMPOP", 2, "l1", "l2", "LEFT", "COUNT", 3),
    ("ZMPOP", 1, "z", "MIN"),
    ("BLMPOP", 0, 1, "l", "RIGHT"),
    ("BZMPOP", 1.5, 2, "z1", "z2", "MAX"),
    ("XREAD", "COUNT", 2, "STREAMS", "x1", "x2", "0", "0"),
    ("XREAD", "streams", "x", "$"),
    ("XREAD", "COUNT", 2, "STREAMS", "x1", "x2", "0"),  # odd: the server's own reading
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "x", "y", ">", ">"),
    ("XREADGROUP", "GROUP", "g", "c", "COUNT", 1, "NOACK", "STREAMS", "x", ">"),
    ("GEORADIUS", "g", 0, 0, 1, "km", "STORE", "dst"),
    ("GEORADIUS", "g", 0, 0, 1, "km", "WITHDIST"),
    ("GEORADIUSBYMEMBER", "g", "m", 1, "km", "STOREDIST", "dst"),
    ("FCALL", "f", 2, "k1", "k2", "arg"),
    ("FCALL_RO", "f", 1, b"k1"),
    ("EVAL_RO", "return 1", 1, "k"),
    ("EVALSHA_RO", "a" * 40, 2, "k", "j", "x"),
]
#: where only the server can say: the server runs the command's own code
ASKED: list[tuple[Any, ...]] = [
    ("SORT", "s", "STORE", "d"),  # Redis 7.0: SORT's BY/GET/STORE specs are "unknown"
    ("SORT_RO", "s", "BY", "w_*"),
    ("MIGRATE", "h", 1, "", 0, 5, "KEYS", "a", "b"),  # KEYS: an "incomplete" spec
    ("ZUNION", 0, "a"),  # a count of 0: the spec is invalid
    ("ZUNION", "x", "a"),  # not a number
    ("ZUNION", "01", "a"),  # not as the server reads numbers
    ("FCALL", "f", 0),  # no keys
    ("NOSUCHCOMMAND", "a"),  # not in the table: redis-py would re-read it
]


def _table(client: redis.Redis) -> dict[str, Any]:
    return {name.lower(): info for name, info in client.command().items()}


def _server_keys(client: redis.Redis, args: tuple[Any, ...]) -> list[bytes]:
    return [k if isinstance(k, bytes) else k.encode() for k in client.command_getkeys(*args)]


def _as_bytes(keys: list[Any]) -> list[bytes]:
    return [k if isinstance(k, bytes) else str(k).encode() for k in keys]


@pytest.mark.parametrize("decoded", [False, True], ids=["bytes", "decoded"])
def test_keys_from_the_specs_are_the_servers(
    real_variant: redis.Redis, redis_server: ServerProcess, decoded: bool
) -> None:
    client = real_variant
    if decoded:  # the same protocol and parser, replies decoded to str
        kwargs = client.connection_pool.connection_kwargs
        pool = redis.ConnectionPool(
            host=redis_server.host,
            port=redis_server.port,
            protocol=kwargs.get("protocol", 2),
            parser_class=kwargs["parser_class"],
            decode_responses=True,
        )
        client = redis.Redis(connection_pool=pool)
    finder = KeyFinder()
    table = _table(client)
    for args in FOUND:
        found = finder.keys(table, args)
        assert found is not LOOKUP, args
        assert _as_bytes(found) == _server_keys(client, args), args  # type: ignore[arg-type]
    for args in ASKED:
        assert finder.keys(table, args) is LOOKUP, args
    # redis-py's own rule, no I/O: fixed positions, EVAL/EVALSHA, a command without keys
    for args in [("GET", "k"), ("MSET", "a", 1), ("EVAL", "return 1", 1, "k"), ("PING",)]:
        assert finder.keys(table, args) is NOT_MOVABLE, args
    if decoded:
        client.close()


def test_a_server_without_key_specs_is_asked() -> None:
    """A table from a server before Redis 7 has no key specs: only it can say."""
    table = {"zunionstore": {"name": "zunionstore", "flags": ["write", "movablekeys"]}}
    assert KeyFinder().keys(table, ("ZUNIONSTORE", "d", 1, "a")) is LOOKUP
