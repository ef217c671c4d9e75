"""``luapipe functions build``: write a directory's scripts as one Function library file.

The file goes where ``--out`` says (a directory gets ``<library>.lua``; a path ending in
``.lua`` is the file), never into the scripts directory itself: there it would be deployed
and listed beside the very scripts it holds. An existing file is replaced only if it is a
library luapipe built (its name and hash match its code); anything else is left alone.
Nothing is written when the directory has a broken script, or when the text is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from luapipe.errors import ScriptError
from luapipe.scripts.build import BuiltLibrary, build_library, check_base
from luapipe.scripts.compiler import compile_problems
from luapipe.scripts.libparse import library_name_of
from luapipe.scripts.loader import scan
from luapipe.scripts.problems import problems_error
from luapipe.scripts.versioned import versioned_base

__all__ = ["BuildResult", "build_directory", "built_library_name", "output_path"]


@dataclass(frozen=True)
class BuildResult:
    """What ``functions build`` wrote: the file, the library, and whether it changed."""

    path: Path
    library: BuiltLibrary
    changed: bool


def output_path(directory: str | Path, base: str, out: str | Path) -> Path:
    """The file ``--out`` names: ``OUT/<base>.lua``, or OUT itself when it ends in ``.lua``;
    never in the scripts directory."""
    target = Path(out)
    path = target if target.suffix == ".lua" else target / f"{base}.lua"
    if path.is_dir():
        raise ScriptError(f"{path}: is a directory; --out names a directory or the .lua file")
    for parent in path.parents:  # the nearest that exists must be a directory
        if parent.exists():
            if not parent.is_dir():
                raise ScriptError(
                    f"{path}: cannot be written, {parent} is a file: --out names a directory "
                    f"(the library is written there as {base}.lua) or the .lua file"
                )
            break
    if path.parent.resolve() == Path(directory).resolve():
        raise ScriptError(
            f"{path}: the built library goes where --out says, never into the scripts "
            f"directory {directory} (it would be deployed beside the scripts it holds): "
            "choose another --out"
        )
    return path


def built_library_name(path: Path) -> str | None:
    """The library name of a file luapipe built (None: not one, or not a library)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    try:
        name = library_name_of(text.split("\n", 1)[0].rstrip("\r"), str(path))
    except ScriptError:
        return None
    return name if name is not None and versioned_base(name, text) is not None else None


def build_directory(directory: str | Path, base: str, out: str | Path) -> BuildResult:
    """Build every script of ``directory`` into library ``base``, written under ``out``."""
    check_base(base)
    path = output_path(directory, base, out)
    found = scan(directory)
    refused = problems_error(
        [*found.problems, *compile_problems(found.scripts)], refusing="nothing built"
    )
    if refused is not None:
        raise refused
    library = build_library(found.scripts, base, path=str(path))
    if path.exists():
        if path.read_text(encoding="utf-8", errors="replace") == library.source:
            return BuildResult(path, library, changed=False)
        if built_library_name(path) is None:
            raise ScriptError(
                f"{path}: exists and is not a library luapipe built; not overwritten "
                "(remove it, or choose another --out)"
            )
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(library.source, encoding="utf-8")
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)  # nothing half-written left behind
        raise ScriptError(f"{path}: cannot write the library: {exc.strerror or exc}") from None
    return BuildResult(path, library, changed=True)
