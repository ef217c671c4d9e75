"""Portability checks for ``scripts lint --target``: what differs between servers beyond
the Lua environment itself (which :mod:`luapipe.scripts.luaenv` covers through luacheck).

- ``redis.replicate_commands()`` does nothing since Redis 7.0 (effects replication is the
  only mode): every target is 7.0 or later, so it is dead code.
- A key that does not come from ``KEYS``: a Redis Cluster routes a script by its declared
  keys only, so such a key works only if it happens to share their slot; Dragonfly refuses
  it outright unless the script opts in with ``--!df flags=allow-undeclared-keys``.
  Only keys certainly built from literals and ``ARGV`` are reported
  (:func:`luapipe.scripts.luatokens.key_arguments`).
"""

from __future__ import annotations

from collections.abc import Sequence

from luapipe.scripts.luaenv import TARGETS, words
from luapipe.scripts.luatokens import Origin, Tok, key_arguments

__all__ = ["KEY_FIRST", "Portability", "portability"]

#: Commands whose first argument is a key: ``COMMAND`` on Redis 7.0 (``first_key_pos`` 1,
#: not ``noscript``). Commands with keys elsewhere (EVAL, XREAD, BITOP...) are not checked.
KEY_FIRST = frozenset(
    words(
        "append bitcount bitfield bitfield_ro bitpos copy decr decrby del "
        "dump exists expire expireat expiretime geoadd geodist geohash geopos "
        "georadius georadius_ro georadiusbymember georadiusbymember_ro geosearch "
        "geosearchstore get getbit getdel getex getrange getset hdel hexists "
        "hget hgetall hincrby hincrbyfloat hkeys hlen hmget hmset hrandfield "
        "hscan hset hsetnx hstrlen hvals incr incrby incrbyfloat lcs lindex "
        "linsert llen lmove lpop lpos lpush lpushx lrange lrem lset ltrim "
        "mget move mset msetnx persist pexpire pexpireat pexpiretime pfadd "
        "pfcount pfmerge psetex pttl rename renamenx restore restore-asking "
        "rpop rpoplpush rpush rpushx sadd scard sdiff sdiffstore set setbit "
        "setex setnx setrange sinter sinterstore sismember smembers smismember "
        "smove sort sort_ro spop spublish srandmember srem sscan strlen "
        "substr sunion sunionstore touch ttl type unlink xack xadd "
        "xautoclaim xclaim xdel xlen xpending xrange xrevrange xsetid xtrim "
        "zadd zcard zcount zdiffstore zincrby zinterstore zlexcount zmscore "
        "zpopmax zpopmin zrandmember zrange zrangebylex zrangebyscore zrangestore "
        "zrank zrem zremrangebylex zremrangebyrank zremrangebyscore zrevrange "
        "zrevrangebylex zrevrangebyscore zrevrank zscan zscore zunionstore "
    )
)

NOOP = "LP201"
UNDECLARED_KEY = "LP202"

Portability = tuple[int, int, str, str, str]  # line, col, severity, code, message


def portability(source: str, toks: list[Tok], targets: Sequence[str]) -> list[Portability]:
    """Findings for ``targets`` (names in :data:`luaenv.TARGETS`), as
    ``(line, col, severity, code, message)``."""
    if not targets:
        return []
    found: list[Portability] = []
    for i, tok in enumerate(toks[:-2]):
        if (
            tok.text in ("redis", "server")
            and toks[i + 1].text == "."
            and (toks[i + 2].text == "replicate_commands")
        ):
            found.append(
                (
                    tok.line,
                    tok.col,
                    "warning",
                    NOOP,
                    f"{tok.text}.replicate_commands() does "
                    "nothing since Redis 7.0 (effects replication is the only mode): remove it",
                )
            )
    refusing = [t for t in targets if TARGETS[t].undeclared_keys == "error"]
    if "allow-undeclared-keys" in source:  # Dragonfly's opt-in: --!df flags=...
        refusing = []
    clustered = [t for t in targets if TARGETS[t].undeclared_keys == "warning"]
    for use in key_arguments(toks, KEY_FIRST):
        if use.origin is not Origin.UNDECLARED:
            continue
        if refusing:
            found.append(
                (
                    use.line,
                    use.col,
                    "error",
                    UNDECLARED_KEY,
                    f"{use.command.upper()}: key "
                    f"not passed through KEYS: {', '.join(refusing)} refuses it (pass it in KEYS, "
                    "or add the line '--!df flags=allow-undeclared-keys')",
                )
            )
        elif clustered:
            found.append(
                (
                    use.line,
                    use.col,
                    "warning",
                    UNDECLARED_KEY,
                    f"{use.command.upper()}: key "
                    "not passed through KEYS: a Redis Cluster cannot route it (it works only "
                    "in the slot of the declared keys)",
                )
            )
    return found
