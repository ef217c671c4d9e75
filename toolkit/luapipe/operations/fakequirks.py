"""What fakeredis gets wrong that ``verify`` must not report as the forms disagreeing.

**A Lua form's error can be another error's text.** fakeredis (2.40, on lupa 2.8 and Lua
5.1) hands the message of a ``redis.pcall`` error to Lua as a wrapped Python ``str`` (a
userdata; Redis gives a Lua string), and lupa's cache of wrapped objects can answer with the
wrapper of another live object: its ``PYREFST`` table is weak (its entries vanish when Lua
collects a wrapper, before that wrapper's finalizer frees its ``luaL_ref`` slot), and a
cache hit is not checked to wrap the object asked for (with Lua's collector stopped, or a
full collection before each call, it never happens). After a few hundred failed writes in
one fake server's Function runtime, a script or a function that returns a failed write's
error can read, and return, the text of an earlier one: ``WRONGTYPE`` for an ``ERR value is
not an integer`` or the reverse, while the client-side forms (no Lua) say what the server
said. It depends on the runtime's history, not on the case; the keyspace is unaffected.

So on a fake server, and only for a disagreement of that shape (two forms failed with
different errors, one of them a Lua form, and left the same keyspace), the case is run again
on a fresh fake server (a new Lua runtime, so no history), and counts as agreeing only when
every form agrees there. A difference the operation really has is there on the fresh
server too, and is reported; every other shape is reported as it is. On a real server none
of this applies.
"""

from __future__ import annotations

from typing import Any

__all__ = ["LUA_FORMS", "fresh_fake", "is_fake", "lua_error_mixup"]

#: the forms whose error text comes through fakeredis's Lua runtime
LUA_FORMS = frozenset({"script", "function"})


def is_fake(client: Any) -> bool:
    """Whether ``client`` talks to an in-process fakeredis server."""
    return type(client).__module__.startswith("fakeredis")


def lua_error_mixup(
    client: Any,
    forms: tuple[str, str],
    outcomes: tuple[tuple[str, Any], tuple[str, Any]],
    keyspaces: tuple[Any, Any],
) -> bool:
    """Whether a disagreement may be fakeredis's Lua error mix-up (see the module): a fake
    server, both forms failed with different errors, at least one of them a Lua form, the
    keyspaces after equal."""
    (kind_a, what_a), (kind_b, what_b) = outcomes
    return (
        is_fake(client)
        and kind_a == kind_b == "error"
        and what_a != what_b
        and bool(LUA_FORMS.intersection(forms))
        and keyspaces[0] == keyspaces[1]
    )


def fresh_fake(client: Any) -> Any | None:
    """A client of a new, empty fake server like ``client``'s (version, server type, RESP
    protocol, decoding); ``None`` when ``client``'s server cannot be read."""
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    server = kwargs.get("server")
    if server is None:
        return None
    import fakeredis  # only a fakeredis client gets here

    fresh = fakeredis.FakeServer(version=server.version, server_type=server.server_type)
    keep = ("protocol", "decode_responses", "lua_modules", "encoding", "encoding_errors")
    return type(client)(server=fresh, **{k: kwargs[k] for k in keep if k in kwargs})
