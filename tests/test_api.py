"""The public API is a contract: sorted, complete, and every name importable."""

from __future__ import annotations

import luapipe
import luapipe.errors

PINNED = [
    "AsyncScriptPipeline",
    "AuthenticationFailed",
    "BenchConfig",
    "BenchResult",
    "BusyError",
    "CallArgumentError",
    "Case",
    "ConnectionFailed",
    "CrossSlotError",
    "DeployReport",
    "Drift",
    "DuplicateScriptError",
    "EnvironmentProblem",
    "GeneratedFiles",
    "LintIssue",
    "LockFileError",
    "LuaScript",
    "LuapipeError",
    "Mismatch",
    "NodeStatus",
    "Operation",
    "OutcomeUnknown",
    "Param",
    "ReadOnlyError",
    "Recommendation",
    "RetryPolicy",
    "RunResult",
    "Safety",
    "ScriptError",
    "ScriptPipeline",
    "ScriptProblem",
    "ScriptRegistry",
    "ScriptRuntimeError",
    "ScriptState",
    "ScriptSyntaxError",
    "ServerError",
    "SpecError",
    "TransactionAborted",
    "UnknownScriptError",
    "VerifyReport",
    "cluster_safety",
    "deploy",
    "generate_files",
    "lint_scripts",
    "load_operation",
    "load_operations",
    "parse_operation",
    "recommend",
    "run_bench",
    "verify",
]


def test_all_is_sorted_unique_and_pinned() -> None:
    """Adding a name means adding it here too; removing or renaming one breaks users."""
    assert luapipe.__all__ == sorted(set(luapipe.__all__))
    assert luapipe.__all__ == PINNED


def test_every_exported_name_exists() -> None:
    for name in luapipe.__all__:
        assert getattr(luapipe, name) is not None, name


def test_design_names_are_exported() -> None:
    """The names DESIGN.md promises (add freely, rename never)."""
    promised = {"ScriptRegistry", "LuaScript", "LuapipeError", "load_operation", "verify"}
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


def test_dissolved_asyncio_modules_keep_their_names_for_one_release() -> None:
    """``luapipe.aio`` (0.1) and ``luapipe.scripts.aio`` were dissolved into the one
    registry and pipeline; importing them still works, with a DeprecationWarning, and
    gives the names users imported from them."""
    import importlib
    import sys

    import pytest

    for old in ("luapipe.aio", "luapipe.scripts.aio", "luapipe.aio_pipeline"):
        sys.modules.pop(old, None)
        with pytest.warns(DeprecationWarning, match=f"{old} moved to"):
            module = importlib.import_module(old)
        assert module.AsyncScriptPipeline is luapipe.AsyncScriptPipeline
    module = importlib.import_module("luapipe.scripts.aio")
    for name in ("load_async", "status_async", "flush_async", "call_async"):
        assert callable(getattr(module, name))
