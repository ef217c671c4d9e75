"""luapipe: Redis Lua scripts vs pipelined commands — deploy, generate, verify, benchmark.

The public API (pinned by ``tests/test_api.py``; names are never renamed)::

    reg = luapipe.ScriptRegistry.from_directory("scripts_lua")
    reg.call(client, "rate_limit_fixed", keys=["rl:alice"], args=[10, 60])
    with reg.pipeline(client) as pipe: ...
"""

from __future__ import annotations

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
    UnknownScriptError,
)
from luapipe.lint import LintIssue, lint_scripts
from luapipe.pipeline import ScriptPipeline
from luapipe.registry import NodeStatus, ScriptRegistry, ScriptState
from luapipe.script import LuaScript, Param

__all__ = [
    "AuthenticationFailed",
    "BusyError",
    "CallArgumentError",
    "ConnectionFailed",
    "CrossSlotError",
    "DeployReport",
    "Drift",
    "DuplicateScriptError",
    "EnvironmentProblem",
    "LintIssue",
    "LockFileError",
    "LuaScript",
    "LuapipeError",
    "NodeStatus",
    "OutcomeUnknown",
    "Param",
    "ReadOnlyError",
    "ScriptError",
    "ScriptPipeline",
    "ScriptRegistry",
    "ScriptRuntimeError",
    "ScriptState",
    "ScriptSyntaxError",
    "ServerError",
    "SpecError",
    "UnknownScriptError",
    "deploy",
    "lint_scripts",
]
__version__ = "0.1.0"
