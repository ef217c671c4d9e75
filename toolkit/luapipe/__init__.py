"""luapipe: Redis Lua scripts vs pipelined commands — deploy, generate, verify, benchmark.

The public API (pinned by ``tests/test_api.py``; names are never renamed)::

    reg = luapipe.ScriptRegistry.from_directory("scripts_lua")
    reg.call(client, "rate_limit_fixed", keys=["rl:alice"], args=[10, 60])
    with reg.pipeline(client) as pipe: ...
    ap = luapipe.autopipeline(aclient)     # concurrent calls share round trips
"""

from __future__ import annotations

from luapipe import _moved
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

_moved.install()
