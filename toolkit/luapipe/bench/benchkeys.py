"""The benchmark's keys: all under one prefix, so a run never touches anyone else's data.

A benchmark may run against a server that holds real data (``luapipe bench --url``), so it
never flushes a database. Every key it writes starts with ``luapipe:bench:`` or, where a
form needs all keys of a call in one cluster slot, with the prefix inside the hash tag
(``{luapipe:bench:reserve_stock:3}:stock``). A workload resets by deleting its own keys
(SCAN MATCH on its prefix, on every primary), and the run deletes every benchmark key at its
end, also after an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

__all__ = ["PREFIX", "delete_matching", "delete_run_keys", "key", "patterns", "tagged"]

PREFIX = "luapipe:bench:"
_GLOB = re.compile(r"([*?\[\]\\])")


def key(*parts: str) -> str:
    """A plain benchmark key: ``luapipe:bench:<parts joined by ':'>``."""
    return PREFIX + ":".join(parts)


def tagged(group: str, index: int) -> str:
    """A key namespace whose keys share one slot: ``{luapipe:bench:<group>:<index>}:``."""
    return "{" + f"{PREFIX}{group}:{index}" + "}:"


def patterns(group: str = "") -> tuple[str, str]:
    """SCAN MATCH patterns for the plain and the tagged keys of ``group`` (all when empty).

    A tagged key is ``{luapipe:bench:<group>:<n>}:<rest>``: the pattern asks for the closing
    ``}:`` too, so a user's key that merely starts with ``{luapipe:bench:`` is left alone."""
    base = _GLOB.sub(r"\\\1", PREFIX + (f"{group}:" if group else ""))
    return base + "*", "{" + base + "*}:*"


def delete_matching(client: Any, globs: Iterable[str]) -> int:
    """Delete the keys matching ``globs`` on every primary (one UNLINK per key, so a cluster
    node never sees a cross-slot command); returns how many were deleted."""
    from luapipe.bench.topology import primaries

    deleted = 0
    for node in primaries(client):
        for glob in globs:
            batch: list[Any] = []
            for name in node.scan_iter(match=glob, count=1000):
                batch.append(name)
                if len(batch) >= 500:
                    deleted += _unlink(node, batch)
                    batch = []
            if batch:
                deleted += _unlink(node, batch)
    return deleted


def _unlink(node: Any, names: list[Any]) -> int:
    pipe = node.pipeline(transaction=False)
    for name in names:
        pipe.unlink(name)
    return sum(int(n) for n in pipe.execute())


def delete_run_keys(client: Any) -> int:
    """Delete every key a benchmark run wrote (workloads' and the bystander's)."""
    return delete_matching(client, patterns())
