"""The built-in catalogue of operation specs, and names resolved against it: ``verify``,
``bench`` and ``demo`` take a spec file or a catalogue name (``reserve_stock``) alike."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from luapipe.errors import LuapipeError

__all__ = ["catalogue_dir", "catalogue_names", "spec_path", "spec_paths"]


def catalogue_dir() -> Path:
    """The built-in catalogue: ``luapipe/catalogue`` in an installed wheel, else
    ``examples/operations`` of this checkout."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "catalogue"
    return installed if installed.is_dir() else package.parents[1] / "examples" / "operations"


def catalogue_names() -> list[str]:
    return sorted(p.stem for p in catalogue_dir().glob("*.toml"))


def spec_path(name: str) -> Path | None:
    """``name`` as a file if there is one, else the catalogue's ``<name>.toml``, else None."""
    path = Path(name)
    if path.exists():
        return path
    listed = catalogue_dir() / f"{name}.toml"
    return listed if listed.exists() else None


def spec_paths(names: Iterable[str]) -> list[Path]:
    """Every name as a spec file (see :func:`spec_path`); one error for the unknown ones."""
    names = list(names)
    unknown = [n for n in names if spec_path(n) is None]
    if unknown:
        which = ", ".join(repr(n) for n in unknown)
        raise LuapipeError(
            f"unknown operation {which}: not a file, not in the catalogue "
            f"({', '.join(catalogue_names())})"
        )
    return [p for p in map(spec_path, names) if p is not None]
