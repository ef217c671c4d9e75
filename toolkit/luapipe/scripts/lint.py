"""Check scripts without a server: compile, luacheck, the header, and portability.

- Compile errors (Lua 5.1 through lupa, as Redis compiles) name ``file:line`` (template
  lines are mapped back); a file that fails to compile and holds Jinja2 syntax without the
  ``-- @template`` opt-in gets a hint. A script that does not compile is not checked further.
- luacheck, with a standard describing the server's Lua environment
  (:mod:`luapipe.scripts.luacheck`): undefined globals read or written (errors: Redis
  refuses them at run time), unused variables and arguments, shadowing, unreachable code
  (warnings). Each finding is ``file:line:col`` with luacheck's code (``W113``).
- ``KEYS[n]``/``ARGV[n]`` beyond what the header declares (``LP101``), read from the Lua
  tokens, so comments and strings never count.
- Function libraries (``#!lua name=<library>`` files) the same way, with what is true of
  functions: no ``KEYS``/``ARGV`` globals (reading one inside a function body is an
  error; a callback's parameters may be named anything, ``KEYS`` included); a library
  that fails at load time (:mod:`luapipe.scripts.libparse`) is a finding naming its line.
- A field a Lua 5.1 table lacks, read only to test for it (``(table.unpack or unpack)(t)``,
  ``if table.unpack then``), is portable Lua and not reported; a call of it still is.
- With ``targets`` (``redis-7.0``, ``redis-7.4``, ``redis-8.2``, ``valkey-8``,
  ``dragonfly``): the environment of each target instead of the base one (a finding that
  holds on only some targets names them), a no-op ``replicate_commands`` (``LP201``) and keys
  not passed through ``KEYS`` (``LP202``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luapipe.errors import LuapipeError, ScriptSyntaxError
from luapipe.scripts.compiler import compile_check, compile_error, compile_problems, opt_in_hint
from luapipe.scripts.header import Signature
from luapipe.scripts.library import FunctionLibrary
from luapipe.scripts.loader import scan
from luapipe.scripts.luacheck import Finding, luacheck_path, run_luacheck
from luapipe.scripts.luaenv import BASE, TARGETS, library_env, why
from luapipe.scripts.luatokens import Tok, indexes, tokens
from luapipe.scripts.names import name_clashes
from luapipe.scripts.portability import portability
from luapipe.scripts.problems import ScriptProblem
from luapipe.scripts.script import LuaScript, one_line

__all__ = [
    "TARGETS",
    "LintIssue",
    "LintReport",
    "compile_check",
    "compile_problems",
    "lint_directory",
    "lint_libraries",
    "lint_scripts",
    "luac_available",
    "luacheck_available",
]

_UNDEFINED = re.compile(r"(?:variable|field) '(?P<name>[^']+)'(?: of global '(?P<glob>[^']+)')?")
SYNTAX = "LP001"
UNREADABLE = "LP002"
BEYOND_HEADER = "LP101"


@dataclass(frozen=True)
class LintIssue:
    """One finding: ``severity`` is "error" (will not load or run) or "warning";
    ``location`` is ``file:line`` or ``file:line:col``; ``code`` is luacheck's (``W211``)
    or luapipe's own (``LP...``)."""

    location: str
    severity: str
    message: str
    code: str = ""

    def as_dict(self) -> dict[str, str]:
        """The finding as ``scripts lint --json`` prints it."""
        return {
            "location": self.location,
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
        }

    def __str__(self) -> str:
        code = f" {self.code}" if self.code else ""
        return f"{self.location}: {self.severity}{code}: {self.message}"


def _severity(finding: Finding) -> str:
    """Syntax and globals (1xx) are errors: Redis refuses a new global and raises on a
    missing one. Everything else is a warning."""
    return "error" if finding.code.startswith("E") or finding.code[1] == "1" else "warning"


def _explained(finding: Finding) -> str:
    m = _UNDEFINED.search(finding.message)
    if finding.code in ("W113", "W143", "W111", "W142") and m is not None:
        name = f"{m['glob']}.{m['name']}" if m["glob"] else m["name"]
        reason = why(name)
        if reason:
            return f"{finding.message} ({reason})"
    return finding.message


def _keeps(finding: Finding) -> bool:
    """Redis lets a script write into its own ``KEYS``/``ARGV`` tables."""
    return not (finding.code == "W122" and finding.message.endswith(("'KEYS'", "'ARGV'")))


def _luacheck_issues(
    sources: Sequence[str], targets: Sequence[str], *, keys_argv: bool = True
) -> list[list[Any]]:
    """Per source: ``(line, col, severity, code, message)`` from luacheck, once per target
    (a finding that holds on only some of several targets names them)."""
    envs = {t: TARGETS[t].env for t in targets} or {"": BASE}
    if not keys_argv:  # a Function library
        envs = {t: library_env(env) for t, env in envs.items()}
    seen: list[dict[tuple[int, int, str, str], list[str]]] = [{} for _ in sources]
    for target, env in envs.items():
        for i, findings in enumerate(run_luacheck(sources, env, keys_argv=keys_argv)):
            for f in filter(_keeps, findings):
                seen[i].setdefault((f.line, f.col, f.code, _explained(f)), []).append(target)
    out: list[list[Any]] = []
    for per_source in seen:
        rows = []
        for (line, col, code, message), where in per_source.items():
            if len(where) < len(envs):
                message += f" (on {', '.join(where)})"
            severity = _severity(Finding(line, col, code, message))
            rows.append([line, col, severity, code, message])
        out.append(rows)
    return out


_TESTS = frozenset({"or", "and", "then", "==", "~=", ")"})


def _tested_only(row: list[Any], toks: list[Tok]) -> bool:
    """A missing field read only to test for it (W143 at ``table.unpack`` followed by
    ``or``, ``and``, ``then``, ``==``, ``~=``, or after ``not``): Lua 5.1 gives nil and the
    code falls back, so ``(table.unpack or unpack)(t)`` runs on every server. A missing
    *global* is different: Redis raises on reading one, tested or not."""
    if row[3] != "W143":
        return False
    at = next((i for i, t in enumerate(toks) if (t.line, t.col) == (row[0], row[1])), None)
    if at is None:
        return False
    end = at
    while end + 2 < len(toks) and toks[end + 1].text == "." and toks[end + 2].kind == "name":
        end += 2
    after = toks[end + 1].text if end + 1 < len(toks) else ""
    before = toks[at - 1].text if at > 0 else ""
    if after == ")":  # ``if (table.unpack) then``, ``f(table.unpack)``: only a test if ``(``
        return before == "(" and at > 1 and toks[at - 2].text in ("if", "elseif", "not")
    return after in _TESTS or before == "not"


def _beyond_header(script: LuaScript, toks: list[Any]) -> list[list[Any]]:
    rows = []
    for tok, n in indexes(toks):
        params = script.keys if tok.text == "KEYS" else script.args
        if params is None:
            continue
        most = Signature(params).maximum
        if most is not None and n > most:
            kind = "key" if tok.text == "KEYS" else "arg"
            declared = f"{most} @{kind}{'' if most == 1 else 's'}"
            rows.append(
                [
                    tok.line,
                    tok.col,
                    "error",
                    BEYOND_HEADER,
                    f"uses {tok.text}[{n}] but the header declares {declared}",
                ]
            )
    return rows


def lint_scripts(scripts: Iterable[LuaScript], *, targets: Sequence[str] = ()) -> list[LintIssue]:
    """Every finding for every script, in order; an empty list means clean.

    Needs luacheck (:class:`~luapipe.errors.EnvironmentProblem` without it); ``targets``
    are names of :data:`TARGETS`.
    """
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        raise LuapipeError(f"unknown target {unknown[0]!r}; known: {', '.join(TARGETS)}")
    scripts = list(scripts)
    issues: list[LintIssue] = []
    compiled = []
    for script in scripts:
        err = compile_error(script)
        if err is None:
            compiled.append(script)
        else:
            message = f"Lua syntax: {err[1]}{opt_in_hint(script)}"
            issues.append(LintIssue(script.file_line(err[0]), "error", message, SYNTAX))
    checked = _luacheck_issues([s.source for s in compiled], targets)
    for script, rows in zip(compiled, checked, strict=True):
        toks = tokens(script.source)
        rows = [r for r in rows if not _tested_only(r, toks)] + _beyond_header(script, toks)
        rows += [list(p) for p in portability(script.source, toks, targets)]
        for line, col, severity, code, message in sorted(rows, key=lambda r: (r[0], r[1])):
            location = f"{script.file_line(line)}:{col}"
            issues.append(LintIssue(location, severity, message, code))
    order = {s.path or s.name: i for i, s in enumerate(scripts)}
    return sorted(issues, key=lambda i: order.get(i.location.split(":", 1)[0], 0))


_NO_GLOBAL = (
    " (a library has no KEYS/ARGV globals: a function gets its keys and args as its "
    "callback's parameters, function(keys, args))"
)


def lint_libraries(
    libraries: Iterable[FunctionLibrary], *, targets: Sequence[str] = ()
) -> list[LintIssue]:
    """Every finding for every Function library (which :mod:`~luapipe.scripts.libparse`
    already compiled and loaded): luacheck without ``KEYS``/``ARGV`` globals, and the
    portability checks of ``targets``."""
    libraries = list(libraries)
    issues: list[LintIssue] = []
    checked = _luacheck_issues([lib.source for lib in libraries], targets, keys_argv=False)
    for lib, rows in zip(libraries, checked, strict=True):
        toks = tokens(lib.source)
        rows = [r for r in rows if not _tested_only(r, toks)]
        for row in rows:
            if row[3] in ("W113", "W111", "W112") and row[4].endswith(("'KEYS'", "'ARGV'")):
                row[4] += _NO_GLOBAL
        rows += [list(p) for p in portability(lib.source, toks, targets)]
        for line, col, severity, code, message in sorted(rows, key=lambda r: (r[0], r[1])):
            issues.append(LintIssue(f"{lib.file_line(line)}:{col}", severity, message, code))
    return issues


@dataclass(frozen=True)
class LintReport:
    """Every script file of a directory (``files``) and the findings, in file order."""

    files: int
    issues: tuple[LintIssue, ...]
    #: Function library files, broken ones included (counted apart from ``files``: the
    #: script files, broken ones included)
    libraries: int = 0

    @property
    def errors(self) -> int:
        return sum(1 for i in self.issues if i.severity == "error")

    @property
    def warnings(self) -> int:
        return len(self.issues) - self.errors


def _unreadable(problem: ScriptProblem) -> LintIssue:
    """A file that cannot be used (name, header, encoding, template, a library that fails
    at load time) as a finding: ``LP001`` for a library's Lua syntax error, as for a
    script's, ``LP002`` for the rest."""
    shown = one_line(problem.path)
    syntax = problem.library and isinstance(problem.error, ScriptSyntaxError)
    code = SYNTAX if syntax else UNREADABLE
    m = re.match(re.escape(shown) + r"(?::\d+)?: ", problem.message)
    if m is None:
        return LintIssue(shown, "error", problem.message, code)
    return LintIssue(m[0][:-2], "error", problem.message[m.end() :], code)


def lint_directory(directory: str | Path, *, targets: Sequence[str] = ()) -> LintReport:
    """Lint every script and library file of ``directory``: the files that cannot be read
    (or that clash by name) are findings too, so one run reports everything."""
    found = scan(directory)
    problems = [*found.problems, *name_clashes(found.scripts, found.libraries)]
    issues = [
        *map(_unreadable, problems),
        *lint_scripts(found.scripts, targets=targets),
        *lint_libraries(found.libraries, targets=targets),
    ]
    issues.sort(key=lambda i: i.location.split(":", 1)[0])
    broken = sum(1 for p in found.problems if p.library)
    files = len(found.scripts) + len(found.problems) - broken
    return LintReport(files, tuple(issues), len(found.libraries) + broken)


def luacheck_available() -> bool:
    return luacheck_path() is not None


def luac_available() -> bool:
    """Kept for callers of the old lint (globals are now checked by luacheck)."""
    return luacheck_available()
