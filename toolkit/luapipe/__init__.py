"""luapipe: Redis Lua scripts vs pipelined commands — deploy, generate, verify, benchmark.

The public API (pinned by ``tests/test_api.py``; names are never renamed)::

    reg = luapipe.ScriptRegistry.from_directory("scripts_lua")
    reg.call(client, "rate_limit_fixed", keys=["rl:alice"], args=[10, 60])
    with reg.pipeline(client) as pipe: ...
"""

from __future__ import annotations

from luapipe.aio import AsyncScriptPipeline
from luapipe.bench.results import BenchResult
from luapipe.bench.runner import BenchConfig, run_bench
from luapipe.clustersafety import Safety, cluster_safety
from luapipe.deploy import DeployReport, Drift, deploy
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
    OutcomeUnknown,
    ReadOnlyError,
    ScriptError,
    ScriptRuntimeError,
    ScriptSyntaxError,
    ServerError,
    SpecError,
    TransactionAborted,
    UnknownScriptError,
)
from luapipe.forms import RunResult
from luapipe.generate import GeneratedFiles, generate_files
from luapipe.lint import LintIssue, lint_scripts
from luapipe.operation import Operation
from luapipe.pipeline import ScriptPipeline
from luapipe.recommend import Recommendation, recommend
from luapipe.registry import NodeStatus, ScriptRegistry, ScriptState
from luapipe.script import LuaScript, Param
from luapipe.spec import load_operation, load_operations, parse_operation
from luapipe.verify import Case, Mismatch, VerifyReport, verify

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
    "Operation",
    "OutcomeUnknown",
    "Param",
    "ReadOnlyError",
    "Recommendation",
    "RunResult",
    "Safety",
    "ScriptError",
    "ScriptPipeline",
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
__version__ = "0.1.0"
