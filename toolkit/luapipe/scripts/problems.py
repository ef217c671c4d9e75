"""Scripts that cannot be used, collected so that one run reports all of them.

A directory with 63 scripts and three broken ones gets one error naming the three (each
with its reason), not three runs that each name the next one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from luapipe.errors import ScriptError, ScriptSyntaxError

__all__ = ["ScriptProblem", "raise_problems"]


@dataclass(frozen=True)
class ScriptProblem:
    """A script file that cannot be used. ``message`` is one line naming ``file[:line]``."""

    name: str
    path: str
    message: str
    line: int | None = None
    error: ScriptError = field(default_factory=lambda: ScriptError(""), repr=False, compare=False)

    @classmethod
    def of(cls, name: str, path: str, error: ScriptError) -> ScriptProblem:
        line = error.line if isinstance(error, ScriptSyntaxError) else None
        return cls(name, path, str(error), line, error)

    def as_dict(self) -> dict[str, str]:
        """The problem as ``scripts list --json`` prints it beside the usable scripts."""
        return {"name": self.name, "path": self.path, "problem": self.message}

    def __str__(self) -> str:
        return self.message


def raise_problems(problems: Iterable[ScriptProblem]) -> None:
    """Raise nothing for no problem, the problem's own error for one, and one error listing
    every problem (one line each, sorted by file) for several."""
    found = sorted(problems, key=lambda p: (p.path, p.line or 0))
    if not found:
        return
    if len(found) == 1:
        raise found[0].error
    lines = "\n".join(f"  {p.message}" for p in found)
    message = f"{len(found)} scripts cannot be used:\n{lines}"
    if all(isinstance(p.error, ScriptSyntaxError) for p in found):
        raise ScriptSyntaxError(message, path=found[0].path, line=found[0].line)
    raise ScriptError(message)
