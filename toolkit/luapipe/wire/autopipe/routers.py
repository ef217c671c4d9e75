"""Where the auto-pipeline's calls go, answered without I/O: the scheduler asks its router.

Each flavour gives the scheduler (:mod:`~luapipe.wire.autopipe.schedule`) a :class:`Router`
over the slot map its client keeps in memory: which node serves a slot, the nodes, and the
slot of a command's keys where it can be told without asking the server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["Router"]


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
