"""Real Redis Function libraries from an open-source Python package, fetched at test time.

As :mod:`tests.real_scripts` does for scripts: each pinned wheel is downloaded from PyPI
(exact version, sha256 checked) into ``.cache/real-scripts/``, its ``#!lua name=`` file
is written to one directory per version, with the package's license text beside it.
Nothing of it is committed. Two versions of one library make a real upgrade: streaq
6.5.2 -> 7.2.0 changes ``publish_task``'s args under the same name.
"""

from __future__ import annotations

from pathlib import Path

from .real_scripts import CACHE, Package, _extract, _fetch

__all__ = ["LIBRARY_PACKAGES", "real_libraries"]

LIBRARY_PACKAGES = (
    Package(
        "streaq-6.5.2",
        "streaq",
        "6.5.2",
        "9d1a02d417f368ef973c86858168b68bf58004e5143d37472aa1e9f0db80b95b",
        "MIT",
        lua_dir="streaq/lua/",
    ),
    Package(
        "streaq-7.2.0",
        "streaq",
        "7.2.0",
        "9d246bc0a75960c089feb341ae49c3ce629ce9efa6748b3749a2ae5ca682f997",
        "MIT",
        lua_dir="streaq/lua/",
    ),
)


def real_libraries() -> Path:
    """A directory with one sub-directory per package version, each holding its library."""
    sample = CACHE / "libraries"
    done = sample / ".complete"
    pins = "".join(f"{p.name}=={p.version} {p.sha256}\n" for p in LIBRARY_PACKAGES)
    if not done.exists() or done.read_text() != pins:
        for pkg in LIBRARY_PACKAGES:
            _extract(pkg, _fetch(pkg), sample / pkg.project)
        done.write_text(pins)
    return sample
