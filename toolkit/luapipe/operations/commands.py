"""The Redis commands a spec may use: reads with their reply types, and writes.

A read's ``reply`` is one of ``str?``, ``int``, ``int?``, ``float?``, ``bool``, ``list[str]``;
``family`` is the key type it expects (used to build random keyspaces in ``verify``). A
write's reply (:data:`WRITE_REPLIES`), when the spec names it: ``int``, ``bool`` (a 1/0
reply, or SET's OK/nil), ``float`` (a number Redis sends as text) or ``str?``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["READS", "WRITES", "WRITE_REPLIES", "ReadCommand", "write_reply"]


@dataclass(frozen=True)
class ReadCommand:
    nargs: int
    reply: str
    family: str  # string hash zset list set any


READS: dict[str, ReadCommand] = {
    "GET": ReadCommand(0, "str?", "string"),
    "STRLEN": ReadCommand(0, "int", "string"),
    "HGET": ReadCommand(1, "str?", "hash"),
    "HGETALL": ReadCommand(0, "list[str]", "hash"),
    "HEXISTS": ReadCommand(1, "bool", "hash"),
    "HLEN": ReadCommand(0, "int", "hash"),
    "ZSCORE": ReadCommand(1, "float?", "zset"),
    "ZRANK": ReadCommand(1, "int?", "zset"),
    "ZREVRANK": ReadCommand(1, "int?", "zset"),
    "ZRANGE": ReadCommand(2, "list[str]", "zset"),
    "ZREVRANGE": ReadCommand(2, "list[str]", "zset"),
    "ZRANGEBYSCORE": ReadCommand(2, "list[str]", "zset"),
    "ZCARD": ReadCommand(0, "int", "zset"),
    "ZCOUNT": ReadCommand(2, "int", "zset"),
    "LRANGE": ReadCommand(2, "list[str]", "list"),
    "LLEN": ReadCommand(0, "int", "list"),
    "LINDEX": ReadCommand(1, "str?", "list"),
    "SISMEMBER": ReadCommand(1, "bool", "set"),
    "SCARD": ReadCommand(0, "int", "set"),
    "EXISTS": ReadCommand(0, "bool", "any"),
    "TTL": ReadCommand(0, "int", "any"),
    "PTTL": ReadCommand(0, "int", "any"),
}

#: write command -> key family. Commands with a random effect (SPOP) or a second key
#: (RENAME, SMOVE, LMOVE) are left out: the forms could not agree, or the key would
#: escape KEYS.
WRITES: dict[str, str] = {
    "SET": "string",
    "SETNX": "string",
    "GETSET": "string",
    "GETDEL": "string",
    "SETRANGE": "string",
    "SETEX": "string",
    "PSETEX": "string",
    "INCR": "string",
    "INCRBY": "string",
    "DECR": "string",
    "DECRBY": "string",
    "INCRBYFLOAT": "string",
    "APPEND": "string",
    "HSET": "hash",
    "HSETNX": "hash",
    "HMSET": "hash",
    "HDEL": "hash",
    "HINCRBY": "hash",
    "HINCRBYFLOAT": "hash",
    "ZADD": "zset",
    "ZINCRBY": "zset",
    "ZREM": "zset",
    "ZREMRANGEBYRANK": "zset",
    "ZREMRANGEBYSCORE": "zset",
    "ZREMRANGEBYLEX": "zset",
    "ZPOPMIN": "zset",
    "ZPOPMAX": "zset",
    "LPUSH": "list",
    "RPUSH": "list",
    "LPUSHX": "list",
    "RPUSHX": "list",
    "LSET": "list",
    "LPOP": "list",
    "RPOP": "list",
    "LTRIM": "list",
    "LREM": "list",
    "SADD": "set",
    "SREM": "set",
    "DEL": "any",
    "UNLINK": "any",
    "EXPIRE": "any",
    "PEXPIRE": "any",
    "EXPIREAT": "any",
    "PEXPIREAT": "any",
    "PERSIST": "any",
}

#: what a named write's reply is (see the module docstring), or why it cannot be named
WRITE_REPLIES: dict[str, str] = {
    "SET": "bool",
    "SETNX": "bool",
    "GETSET": "str?",
    "GETDEL": "str?",
    "SETRANGE": "int",
    "INCR": "int",
    "INCRBY": "int",
    "DECR": "int",
    "DECRBY": "int",
    "INCRBYFLOAT": "float",
    "APPEND": "int",
    "HSET": "int",
    "HSETNX": "bool",
    "HDEL": "int",
    "HINCRBY": "int",
    "HINCRBYFLOAT": "float",
    "ZADD": "int",
    "ZINCRBY": "float",
    "ZREM": "int",
    "ZREMRANGEBYRANK": "int",
    "ZREMRANGEBYSCORE": "int",
    "ZREMRANGEBYLEX": "int",
    "LPUSH": "int",
    "RPUSH": "int",
    "LPUSHX": "int",
    "RPUSHX": "int",
    "LPOP": "str?",
    "RPOP": "str?",
    "LREM": "int",
    "SADD": "int",
    "SREM": "int",
    "DEL": "int",
    "UNLINK": "int",
    "EXPIRE": "bool",
    "PEXPIRE": "bool",
    "EXPIREAT": "bool",
    "PEXPIREAT": "bool",
    "PERSIST": "bool",
}
_STATUS = "replies OK (a status) or an error: there is nothing to name"
_UNNAMED = {
    **dict.fromkeys(("SETEX", "PSETEX", "HMSET", "LSET", "LTRIM"), _STATUS),
    **dict.fromkeys(
        ("ZPOPMIN", "ZPOPMAX"),
        "replies members and scores, which a name cannot hold yet (read them with "
        "ZRANGE ... before the write)",
    ),
}
_ZADD_OPTIONS = frozenset({"NX", "XX", "GT", "LT", "CH"})


def write_reply(cmd: str, args: list[tuple[str | None, str]]) -> tuple[str | None, str]:
    """(the reply kind of ``cmd`` named, "") or (None, why it cannot be named). ``args`` are
    the command's arguments after the key: (the literal string, or None when computed, and
    the argument's type kind). Options that change the reply's type must be literals."""
    if cmd in _UNNAMED:
        return None, f"{cmd} {_UNNAMED[cmd]}"
    words = [(lit.upper() if lit is not None else None, kind) for lit, kind in args]
    if cmd == "SET":
        for word, kind in words[1:]:
            if kind == "str" and word is None:
                return None, (
                    "a named SET takes its options as literals (GET would change the reply)"
                )
            if word == "GET":
                return None, "a named SET cannot take GET (name a GETSET, or read before)"
    if cmd == "ZADD":
        for word, kind in words:
            if word in _ZADD_OPTIONS:
                continue
            if word == "INCR" or (kind == "str" and word is None):
                return None, (
                    "a named ZADD takes its options as literals, and not INCR (name a ZINCRBY)"
                )
            break
    if cmd in ("LPOP", "RPOP") and args:
        return None, f"a named {cmd} takes no count (its reply would be a list or nil)"
    return WRITE_REPLIES[cmd], ""
