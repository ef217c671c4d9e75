"""Deploy: load every script where it is needed and record name -> SHA in a lock file.

The lock file (``luapipe.lock.json`` next to the scripts, committed) is what a deploy
pipeline checks: ``check`` reports drift without changing anything —

- a script changed since the lock (its SHA differs), added, or removed;
- a node (server) that is missing a script of the lock.

A directory with no scripts is an error for both (a typo in ``--dir`` must fail the
pipeline, not deploy or check nothing). The lock is ``{"version": 1, "scripts": {name:
sha}}``; another version, a missing one or a bad SHA is a one-line error with its line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from luapipe.errors import LockFileError, ScriptError
from luapipe.scripts.problems import problems_error
from luapipe.scripts.registry import ScriptRegistry
from luapipe.wire.clients import require_sync

__all__ = ["LOCK_NAME", "DeployReport", "Drift", "deploy", "read_lock", "write_lock"]

LOCK_NAME = "luapipe.lock.json"
LOCK_VERSION = 1
_SHA_CHARS = frozenset("0123456789abcdef")
_SHAPE = '{"version": 1, "scripts": {name: sha}}'


def _line_of(text: str, key: str) -> int:
    """The line of the first ``"key":`` in the JSON text (as written or \\u-escaped), or 1."""
    for spelled in dict.fromkeys((json.dumps(key, ensure_ascii=False), json.dumps(key))):
        m = re.search(re.escape(spelled) + r"\s*:", text)
        if m is not None:
            return text.count("\n", 0, m.start()) + 1
    return 1


@dataclass(frozen=True)
class Drift:
    """One difference: ``kind`` is changed, added, removed or missing (on ``node``)."""

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


@dataclass(frozen=True)
class DeployReport:
    lock_path: str
    scripts: tuple[tuple[str, str], ...]  # (name, sha)
    nodes: tuple[str, ...]
    drift: tuple[Drift, ...] = ()
    lock_written: bool = False

    @property
    def ok(self) -> bool:
        return not self.drift

    def as_dict(self) -> dict[str, Any]:
        """The report as ``deploy --json`` prints it."""
        return {
            "ok": self.ok,
            "lock": self.lock_path,
            "nodes": list(self.nodes),
            "scripts": dict(self.scripts),
            "drift": [d.as_dict() for d in self.drift],
        }


def read_lock(path: Path) -> dict[str, str]:
    """The lock's {name: sha}; a hand-edited or broken file is a one-line error."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LockFileError(f"{path}: no lock file; run `luapipe deploy` first") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LockFileError(f"{path}: cannot read: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise LockFileError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise LockFileError(f"{path}:1: expected {_SHAPE}")
    if "version" not in data:
        raise LockFileError(f'{path}:1: no lock version (expected "version": {LOCK_VERSION})')
    version = data["version"]
    if type(version) is not int or version != LOCK_VERSION:  # not True, not 1.0
        shown = json.dumps(version)[:40]
        raise LockFileError(f"{path}:{_line_of(text, 'version')}: unsupported lock version {shown}")
    scripts = data.get("scripts")
    if not isinstance(scripts, dict):
        raise LockFileError(f"{path}:{_line_of(text, 'scripts')}: expected {_SHAPE}")
    for name, sha in scripts.items():
        if not (isinstance(sha, str) and len(sha) == 40 and set(sha) <= _SHA_CHARS):
            raise LockFileError(
                f"{path}:{_line_of(text, name)}: script {name!r}: {sha!r} is not a lower-case sha1"
            )
    return dict(scripts)


def write_lock(path: Path, shas: dict[str, str]) -> bool:
    """Write the lock (sorted, stable); returns False if it was already identical."""
    data = {"version": LOCK_VERSION, "scripts": dict(sorted(shas.items()))}
    text = json.dumps(data, indent=2) + "\n"
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True


def _lock_drift(reg: ScriptRegistry, lock: dict[str, str]) -> list[Drift]:
    drift: list[Drift] = []
    for script in reg:
        if script.name not in lock:
            drift.append(Drift("added", script.name, detail="not in the lock file"))
        elif lock[script.name] != script.sha:
            drift.append(
                Drift(
                    "changed",
                    script.name,
                    detail=f"lock {lock[script.name][:12]}, file {script.sha[:12]}",
                )
            )
    drift.extend(
        Drift("removed", n, detail="in the lock, no such script")
        for n in sorted(lock)
        if n not in reg
    )
    return drift


def deploy(
    reg: ScriptRegistry,
    client: redis.Redis,
    lock_path: Path,
    *,
    check: bool = False,
    directory: str | Path | None = None,
) -> DeployReport:
    """Load every script and write the lock; with ``check``, only report drift.

    An empty registry raises :class:`ScriptError` naming ``directory`` (default: the lock
    file's directory) before anything is sent or written; so does a lenient registry with
    :attr:`~ScriptRegistry.problems` (all or nothing), naming every broken file."""
    require_sync(client, "deploy")
    refused = problems_error(
        reg.problems, refusing="nothing checked" if check else "nothing deployed"
    )
    if refused is not None:
        raise refused
    if not len(reg):
        where = Path(directory) if directory is not None else Path(lock_path).parent
        raise ScriptError(
            f"{where}: no scripts to deploy (no *.lua files there; check the directory)"
        )
    shas = tuple((s.name, s.sha) for s in reg)
    if check:
        drift = _lock_drift(reg, read_lock(lock_path))
        nodes = reg.status(client)
        for node in nodes:
            drift.extend(Drift("missing", name, node.node, "not loaded") for name in node.missing)
        return DeployReport(str(lock_path), shas, tuple(n.node for n in nodes), tuple(drift))
    if lock_path.exists():
        read_lock(lock_path)  # refuse to overwrite a lock we cannot read: a human edited it
    reg.load(client)
    loaded = tuple(n.node for n in reg.status(client))
    written = write_lock(lock_path, dict(shas))
    return DeployReport(str(lock_path), shas, loaded, (), written)
