"""The public API is a contract: sorted, complete, and every name importable."""

from __future__ import annotations

import luapipe
import luapipe.errors

PINNED = sorted(luapipe.__all__)


def test_all_is_sorted_and_unique() -> None:
    assert luapipe.__all__ == sorted(set(luapipe.__all__))


def test_every_exported_name_exists() -> None:
    for name in luapipe.__all__:
        assert getattr(luapipe, name) is not None, name


def test_design_names_are_exported() -> None:
    """The names DESIGN.md promises (add freely, rename never)."""
    promised = {"ScriptRegistry", "LuaScript", "LuapipeError"}
    assert promised <= set(luapipe.__all__)


def test_every_error_derives_from_the_root_and_is_exported() -> None:
    for name in luapipe.errors.__all__:
        obj = getattr(luapipe.errors, name)
        if isinstance(obj, type) and issubclass(obj, Exception):
            assert issubclass(obj, luapipe.LuapipeError), name
            assert name in luapipe.__all__, name


def test_registry_methods_exist() -> None:
    for method in ("from_directory", "names", "load", "status", "call", "pipeline"):
        assert callable(getattr(luapipe.ScriptRegistry, method))
