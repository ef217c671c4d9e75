"""One difference between a deploy's files, its lock and what the servers hold."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Drift"]


@dataclass(frozen=True)
class Drift:
    """One difference. Scripts: ``kind`` is changed, added or removed (file against the
    lock) or missing (on ``node``). Libraries, per node: missing, differs (code changed by
    hand), taken (another library owns a function of ours), stale (the lock's, gone from
    the directory), replaced (the lock's, gone from the directory, and another library has
    taken its name since), signature (a function kept its name but changed keys, args or flags),
    unconfirmed (replicas that did not catch up)."""

    kind: str
    name: str
    node: str = ""
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"kind": self.kind, "name": self.name, "node": self.node, "detail": self.detail}

    def __str__(self) -> str:
        where = f" on {self.node}" if self.node else ""
        extra = f" ({self.detail})" if self.detail else ""
        return f"{self.kind}: {self.name}{where}{extra}"
