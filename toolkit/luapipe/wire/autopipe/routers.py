"""Where the auto-pipeline's calls go, answered without I/O: the scheduler asks its router.

Each flavour gives the scheduler (:mod:`~luapipe.wire.autopipe.schedule`) a :class:`Router`
over the slot map its client keeps in memory: which node serves a slot, the nodes, and the
slot of a command's keys where it can be told without asking the server. One server is a
:class:`PlainRouter`; a cluster, a :class:`KeyRouter` (the key specs, the nodes) to which
each flavour adds only what its client does its own way: :meth:`KeyRouter.locate` and
redis-py's own rule for a command's slot (:meth:`KeyRouter.own_slot`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from luapipe.wire.autopipe.keyspecs import LOOKUP, NOT_MOVABLE, Found, KeyFinder, slot_of_keys
from luapipe.wire.routing import node_order

__all__ = ["KeyRouter", "PlainRouter", "Router", "address"]


class Router:
    """Where things are: answered without I/O by each flavour (the slot map in memory)."""

    def locate(self, slot: int | None, read_only: bool) -> str:
        raise NotImplementedError

    def nodes(self) -> list[str]:
        raise NotImplementedError

    def slots(self, commands: Sequence[Sequence[Any]]) -> list[int | None] | None:
        """The slot of each command's keys, or None where only the server can say (the
        caller's waiting code then asks it, while the call holds its place: the gate)."""
        return None


class PlainRouter(Router):
    """One server: every call goes to it, by its address (``name``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def locate(self, slot: int | None, read_only: bool) -> str:
        return self.name

    def nodes(self) -> list[str]:
        return [self.name]

    def slots(self, commands: Sequence[Sequence[Any]]) -> list[int | None] | None:
        return [None] * len(commands)


class KeyRouter(Router):
    """A cluster client's slot map (sync or asyncio): the nodes, and the slot of a
    command's keys from the key specs (:class:`~luapipe.wire.autopipe.keyspecs.KeyFinder`)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.finder = KeyFinder()

    def nodes(self) -> list[str]:
        found = [(n.name, n.server_type == "primary") for n in self.client.get_nodes()]
        return node_order(found)

    def slot(self, args: Sequence[Any]) -> int | Found | None:
        """The slot of a command's keys found without I/O (the key specs, or redis-py's
        own rule), or LOOKUP: only the server can say."""
        client = self.client
        found = self.finder.keys(client.commands_parser.commands, args)
        if found is LOOKUP:
            return LOOKUP
        if found is not NOT_MOVABLE:
            return slot_of_keys(args, found, client.keyslot)  # type: ignore[arg-type]
        return self.own_slot(args)

    def own_slot(self, args: Sequence[Any]) -> int | None:
        """redis-py's own rule, for a command whose keys it finds without I/O (fixed
        positions, EVAL, no keys)."""
        raise NotImplementedError

    def slots(self, commands: Sequence[Sequence[Any]]) -> list[int | None] | None:
        out: list[int | None] = []
        for args in commands:
            slot = self.slot(args)
            if slot is LOOKUP:
                return None
            out.append(slot)  # type: ignore[arg-type]
        return out


def address(kwargs: dict[str, Any]) -> str:
    """A server's address from its connection settings (a unix socket's path)."""
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
