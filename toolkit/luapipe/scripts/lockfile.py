"""The deploy lock file: ``{"version": 1, "scripts": {name: sha}, "libraries": {name: sha}}``.

``libraries`` is optional: a lock written before Function libraries (or for a directory
without any) has none and reads as no libraries, and such a lock is written byte for byte
as before. A hand-edited or broken file is a one-line error naming its line.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from luapipe.errors import LockFileError

__all__ = ["LOCK_NAME", "LOCK_VERSION", "Lock", "read_lock", "read_lock_file", "write_lock"]

LOCK_NAME = "luapipe.lock.json"
LOCK_VERSION = 1
_SHA_CHARS = frozenset("0123456789abcdef")
_SHAPE = '{"version": 1, "scripts": {name: sha}}'
_LIBRARIES_SHAPE = '"libraries": {name: sha} (each library\'s code SHA)'


@dataclass(frozen=True)
class Lock:
    """What the lock records: script name -> SHA, library name -> SHA of its code."""

    scripts: dict[str, str]
    libraries: dict[str, str] = field(default_factory=dict)


def _line_of(text: str, key: str) -> int:
    """The line of the first ``"key":`` in the JSON text (as written or \\u-escaped), or 1."""
    for spelled in dict.fromkeys((json.dumps(key, ensure_ascii=False), json.dumps(key))):
        m = re.search(re.escape(spelled) + r"\s*:", text)
        if m is not None:
            return text.count("\n", 0, m.start()) + 1
    return 1


def _shas(path: Path, text: str, data: dict[str, Any], key: str, what: str) -> dict[str, str]:
    table = data.get(key)
    if not isinstance(table, dict):
        shape = _SHAPE if key == "scripts" else _LIBRARIES_SHAPE
        raise LockFileError(f"{path}:{_line_of(text, key)}: expected {shape}")
    for name, sha in table.items():
        if not (isinstance(sha, str) and len(sha) == 40 and set(sha) <= _SHA_CHARS):
            raise LockFileError(
                f"{path}:{_line_of(text, name)}: {what} {name!r}: {sha!r} is not a lower-case sha1"
            )
    return dict(table)


def read_lock_file(path: Path) -> Lock:
    """The whole lock; a hand-edited or broken file is a one-line error."""
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
    scripts = _shas(path, text, data, "scripts", "script")
    libraries = _shas(path, text, data, "libraries", "library") if "libraries" in data else {}
    return Lock(scripts, libraries)


def read_lock(path: Path) -> dict[str, str]:
    """The lock's scripts, {name: sha}."""
    return read_lock_file(path).scripts


def write_lock(path: Path, shas: dict[str, str], libraries: dict[str, str] | None = None) -> bool:
    """Write the lock (sorted, stable); returns False if it was already identical."""
    data: dict[str, Any] = {"version": LOCK_VERSION, "scripts": dict(sorted(shas.items()))}
    if libraries:
        data["libraries"] = dict(sorted(libraries.items()))
    text = json.dumps(data, indent=2) + "\n"
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
    return True
