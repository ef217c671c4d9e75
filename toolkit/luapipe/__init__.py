"""luapipe: Redis Lua scripts vs pipelined commands — deploy, generate, verify, benchmark.

The public API (pinned by ``tests/test_api.py``; names are never renamed)::

    reg = luapipe.ScriptRegistry.from_directory("scripts_lua")
    reg.call(client, "rate_limit_fixed", keys=["rl:alice"], args=[10, 60])
    with reg.pipeline(client) as pipe: ...
    ap = luapipe.autopipeline(aclient)     # concurrent calls share round trips
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from luapipe import _moved

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use
    from luapipe.bench.results import BenchResult
    from luapipe.bench.runner import BenchConfig, run_bench
    from luapipe.bench.verdict import Recommendation, recommend
    from luapipe.errors import (
        AuthenticationFailed,
        BusyError,
        CallArgumentError,
        ConnectionFailed,
        CrossSlotError,
        DuplicateScriptError,
        EnvironmentProblem,
        LockFileError,
        LuapipeError,
        OpError,
        OutcomeUnknown,
        PermissionDenied,
        ReadOnlyError,
        ScriptError,
        ScriptRuntimeError,
        ScriptSyntaxError,
        ServerError,
        SpecError,
        TransactionAborted,
        UnknownScriptError,
    )
    from luapipe.operations.clustersafety import Safety, cluster_safety
    from luapipe.operations.files import GeneratedFiles, generate_files
    from luapipe.operations.operation import Operation
    from luapipe.operations.plan import RunResult
    from luapipe.operations.spec import load_operation, load_operations, parse_operation
    from luapipe.operations.verify import Case, Mismatch, VerifyReport, verify
    from luapipe.scripts.deploy import DeployReport, Drift, deploy
    from luapipe.scripts.lint import LintIssue, lint_scripts
    from luapipe.scripts.pipeline import AsyncScriptPipeline, ScriptPipeline
    from luapipe.scripts.problems import ScriptProblem
    from luapipe.scripts.registry import NodeStatus, ScriptRegistry, ScriptState
    from luapipe.scripts.script import LuaScript, Param
    from luapipe.wire.autopipe import autopipeline
    from luapipe.wire.policy import RetryPolicy

__all__ = [
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
    "OpError",
    "Operation",
    "OutcomeUnknown",
    "Param",
    "PermissionDenied",
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
    "autopipeline",
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
__version__ = "0.1.0"

#: where each public name lives: imported on first use (PEP 562), so that ``import luapipe``
#: costs nothing until a name is used. The ``luapipe`` command needs this: its first act is
#: to take Ctrl-C and SIGTERM (luapipe._entry), and every module of the package, that one
#: included, is imported after this file; importing the whole library here took ~0.4 s
#: (~1 s on a busy machine), in which Ctrl-C printed a traceback. A test keeps this table
#: and the imports above the same.
_WHERE = {
    "AsyncScriptPipeline": "luapipe.scripts.pipeline",
    "AuthenticationFailed": "luapipe.errors",
    "BenchConfig": "luapipe.bench.runner",
    "BenchResult": "luapipe.bench.results",
    "BusyError": "luapipe.errors",
    "CallArgumentError": "luapipe.errors",
    "Case": "luapipe.operations.verify",
    "ConnectionFailed": "luapipe.errors",
    "CrossSlotError": "luapipe.errors",
    "DeployReport": "luapipe.scripts.deploy",
    "Drift": "luapipe.scripts.deploy",
    "DuplicateScriptError": "luapipe.errors",
    "EnvironmentProblem": "luapipe.errors",
    "GeneratedFiles": "luapipe.operations.files",
    "LintIssue": "luapipe.scripts.lint",
    "LockFileError": "luapipe.errors",
    "LuaScript": "luapipe.scripts.script",
    "LuapipeError": "luapipe.errors",
    "Mismatch": "luapipe.operations.verify",
    "NodeStatus": "luapipe.scripts.registry",
    "OpError": "luapipe.errors",
    "Operation": "luapipe.operations.operation",
    "OutcomeUnknown": "luapipe.errors",
    "Param": "luapipe.scripts.script",
    "PermissionDenied": "luapipe.errors",
    "ReadOnlyError": "luapipe.errors",
    "Recommendation": "luapipe.bench.verdict",
    "RetryPolicy": "luapipe.wire.policy",
    "RunResult": "luapipe.operations.plan",
    "Safety": "luapipe.operations.clustersafety",
    "ScriptError": "luapipe.errors",
    "ScriptPipeline": "luapipe.scripts.pipeline",
    "ScriptProblem": "luapipe.scripts.problems",
    "ScriptRegistry": "luapipe.scripts.registry",
    "ScriptRuntimeError": "luapipe.errors",
    "ScriptState": "luapipe.scripts.registry",
    "ScriptSyntaxError": "luapipe.errors",
    "ServerError": "luapipe.errors",
    "SpecError": "luapipe.errors",
    "TransactionAborted": "luapipe.errors",
    "UnknownScriptError": "luapipe.errors",
    "VerifyReport": "luapipe.operations.verify",
    "autopipeline": "luapipe.wire.autopipe",
    "cluster_safety": "luapipe.operations.clustersafety",
    "deploy": "luapipe.scripts.deploy",
    "generate_files": "luapipe.operations.files",
    "lint_scripts": "luapipe.scripts.lint",
    "load_operation": "luapipe.operations.spec",
    "load_operations": "luapipe.operations.spec",
    "parse_operation": "luapipe.operations.spec",
    "recommend": "luapipe.bench.verdict",
    "run_bench": "luapipe.bench.runner",
    "verify": "luapipe.operations.verify",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


_moved.install()
