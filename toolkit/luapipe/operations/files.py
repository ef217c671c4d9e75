"""Spec files in, generated files or reports out: what ``luapipe generate`` and ``luapipe
verify`` do with paths (every spec is loaded and checked before anything is written or run).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import redis

from luapipe.operations.operation import Operation
from luapipe.operations.spec import load_operations
from luapipe.operations.verify import VerifyReport, verify

__all__ = ["GeneratedFiles", "generate_files", "verify_files", "verify_operations", "write"]


@dataclass(frozen=True)
class GeneratedFiles:
    lua: Path
    python: Path
    changed: tuple[Path, ...]


def write(
    op: Operation, out: str | Path | None = None, py_out: str | Path | None = None
) -> GeneratedFiles:
    """Write ``op_<name>.lua`` into ``out`` (default: next to the spec) and ``op_<name>.py``
    into ``py_out`` (default ``out``); files whose content is unchanged are not touched."""
    lua_dir = Path(out) if out is not None else Path(op.path).parent
    lua_path = lua_dir / f"op_{op.name}.lua"
    py_path = Path(py_out if py_out is not None else lua_dir) / f"op_{op.name}.py"
    changed: list[Path] = []
    for path, text in ((lua_path, op.lua_source), (py_path, op.python_source)):
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(path)
    return GeneratedFiles(lua_path, py_path, tuple(changed))


def generate_files(
    paths: Sequence[str | Path], out: str | Path | None = None, py_out: str | Path | None = None
) -> list[GeneratedFiles]:
    """Check every spec first (nothing is written if any has a problem), then write each
    operation's files next to its spec, or into ``out`` (and ``py_out``)."""
    return [write(op, out, py_out) for op in load_operations(paths)]


def verify_operations(
    ops: Sequence[Operation], client: redis.Redis, *, cases: int = 200, seed: int = 1
) -> list[VerifyReport]:
    """Verify each loaded operation; a mismatch names the spec file it came from."""
    return [verify(op, client, cases=cases, seed=seed, spec=str(op.path)) for op in ops]


def verify_files(
    paths: Sequence[str | Path], client: redis.Redis, *, cases: int = 200, seed: int = 1
) -> list[VerifyReport]:
    """Load every spec first (all problems in one :class:`SpecError`), then verify each."""
    return verify_operations(load_operations(paths), client, cases=cases, seed=seed)
