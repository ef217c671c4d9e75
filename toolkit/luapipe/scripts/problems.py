"""Scripts that cannot be used, collected so that one run reports all of them.

A directory with 63 scripts and three broken ones gets one error naming the three (each
with its reason), not three runs that each name the next one. The error is one line (the
problems joined by ``; ``), as every luapipe message is, so a deploy log or a CI summary
that keeps the first line of stderr keeps all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from luapipe.errors import ScriptError, ScriptSyntaxError

__all__ = ["ScriptProblem", "counted", "problems_error", "raise_problems"]


@dataclass(frozen=True)
class ScriptProblem:
    """A script file that cannot be used. ``message`` is one line naming ``file[:line]``;
    ``library``: the file is a Function library (``#!lua name=...``), not a script."""

    name: str
    path: str
    message: str
    line: int | None = None
    error: ScriptError = field(default_factory=lambda: ScriptError(""), repr=False, compare=False)
    library: bool = False

    @classmethod
    def of(
        cls, name: str, path: str, error: ScriptError, *, library: bool = False
    ) -> ScriptProblem:
        line = error.line if isinstance(error, ScriptSyntaxError) else None
        return cls(name, path, str(error), line, error, library)

    def as_dict(self) -> dict[str, str]:
        """The problem as ``scripts list --json`` prints it beside the usable scripts (a
        broken library with ``"kind": "library"``, as the usable ones)."""
        kind = {"kind": "library"} if self.library else {}
        return {**kind, "name": self.name, "path": self.path, "problem": self.message}

    def __str__(self) -> str:
        return self.message


def counted(problems: Iterable[ScriptProblem]) -> str:
    """``2 scripts``, ``1 library``, ``1 script and 2 libraries``: the broken files by kind."""
    found = list(problems)
    libraries = sum(1 for p in found if p.library)
    scripts = len(found) - libraries
    words = [f"{scripts} script{'' if scripts == 1 else 's'}"] if scripts or not libraries else []
    if libraries:
        words.append(f"{libraries} librar{'y' if libraries == 1 else 'ies'}")
    return " and ".join(words)


def problems_error(problems: Iterable[ScriptProblem], *, refusing: str = "") -> ScriptError | None:
    """None for no problem, the problem's own error for one, and one error listing every
    problem (sorted by file, joined by ``; `` on one line) for several.

    ``refusing`` (e.g. ``"nothing loaded"``) heads the message: what was refused because of
    the problems; the error then always counts them."""
    found = sorted(problems, key=lambda p: (p.path, p.line or 0))
    if not found:
        return None
    if len(found) == 1 and not refusing:
        return found[0].error
    listed = "; ".join(p.message for p in found)
    count = f"{counted(found)} cannot be used"
    message = f"{refusing}: {count}: {listed}" if refusing else f"{count}: {listed}"
    if all(isinstance(p.error, ScriptSyntaxError) for p in found):
        return ScriptSyntaxError(message, path=found[0].path, line=found[0].line)
    return ScriptError(message)


def raise_problems(problems: Iterable[ScriptProblem]) -> None:
    """Raise :func:`problems_error` of ``problems`` if there is one."""
    error = problems_error(problems)
    if error is not None:
        raise error
