"""The Redis commands a spec may use: reads with their reply types, and writes.

A read's ``reply`` is one of ``str?``, ``int``, ``int?``, ``float?``, ``bool``, ``list[str]``;
``family`` is the key type it expects (used to build random keyspaces in ``verify``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["READS", "WRITES", "ReadCommand"]


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
