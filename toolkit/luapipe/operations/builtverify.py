"""Prove a built Function library does what its scripts do: same reply, same keyspace after.

``verify``'s machinery, with a script and its function as the two forms: per script, random
cases (:mod:`luapipe.operations.scriptcases`: an initial keyspace with missing keys, wrong
types and edge numbers, and random args), each run once through ``EVALSHA`` and once
through ``FCALL`` from the same state; the replies, or the errors, and the whole keyspace
after (typed values and TTL presence) must be equal. An error is compared whole, as the
caller reads it: its class and its message, ``file:line`` included, with only the callee's
name left out (``(script x)`` vs ``(function luapipe_app_<hash>_x, library ...)``), so a
function whose error named another line than its script's would be a mismatch (on
fakeredis, which words a script's errors and a function's differently, what the error
means: ``verify``'s error code). The first
mismatch is shrunk (keys of the initial state removed while it persists) and reported
with the command that reproduces it.

Keys live under a namespace (``whole_keyspace=True``, for a private server or fakeredis,
compares and empties the whole database instead: scripts that write keys their caller did
not pass are then covered too), and the built library is left on the server as it was
found.
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import redis

from luapipe.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    LuapipeError,
    OutcomeUnknown,
    PermissionDenied,
    ScriptRuntimeError,
)
from luapipe.operations.casegen import Case
from luapipe.operations.fakequirks import fresh_fake, is_fake, lua_error_mixup
from luapipe.operations.keyspace import delete_namespace, dump, setup
from luapipe.operations.libraries import restore_library, snapshot_named
from luapipe.operations.scriptcases import flat, script_case
from luapipe.operations.verify import Mismatch, VerifyReport, error_code, rechecked_note
from luapipe.scripts.build import BuiltLibrary, Unconverted
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire.clients import require_sync

__all__ = ["BuiltVerification", "verify_built"]

FORMS = ("script", "function")
_NOT_RUN = (ConnectionFailed, OutcomeUnknown, AuthenticationFailed)
#: fakeredis: "ERR unknown command '11'..." from a script, "ERR Unknown Redis command called
#: from script" from a function (Redis says the latter for both)
_UNKNOWN = re.compile(r"ERR unknown (?:redis )?command", re.IGNORECASE)
Outcome = tuple[str, Any]


@dataclass(frozen=True)
class _Mismatch(Mismatch):
    reproduce: str = ""

    def describe(self) -> str:
        lines = super().describe().split("\n")
        return "\n".join([*lines[:-1], f"  reproduce: {self.reproduce}"])


@dataclass(frozen=True)
class BuiltVerification:
    """The result of :func:`verify_built`: one report per script checked, the scripts the
    library does not hold (with the reason) and the scripts this server cannot run as
    scripts (fakeredis refuses a ``#!lua`` line)."""

    library: str
    reports: tuple[VerifyReport, ...]
    unconverted: tuple[Unconverted, ...]
    not_run: tuple[tuple[str, str], ...] = ()

    @property
    def ok(self) -> bool:
        """Every script checked agrees, and at least one was checked: a run that compared
        nothing (``--script`` naming a script left out of the library, or only ``#!lua``
        scripts on fakeredis) proves nothing, and is not a pass."""
        return bool(self.reports) and all(r.ok for r in self.reports)

    @property
    def cases(self) -> int:
        return sum(r.cases for r in self.reports)

    def summary(self) -> str:
        if not self.reports:
            return (
                f"{self.library}: NOTHING VERIFIED: no script was run both as a script and as "
                "its function (see the lines above)"
            )
        status = "ok" if self.ok else "MISMATCH"
        agreed = sum(r.errors_agreed for r in self.reports)
        return (
            f"{self.library}: {status}: {self.cases} cases over {len(self.reports)} "
            f"script{'' if len(self.reports) == 1 else 's'} "
            f"(script and function each), {agreed} failed identically in both"
            f"{rechecked_note(sum(r.rechecked for r in self.reports))}"
        )


class _Forms:
    """The two ways to call a script: EVALSHA (the scripts alone) and FCALL (built)."""

    def __init__(self, registry: ScriptRegistry, built: BuiltLibrary, *, fake: bool) -> None:
        self.scripts = ScriptRegistry(list(registry), check=False)
        self.functions = registry
        self.built = built
        self.fake = fake

    def run(self, client: Any, form: str, script: LuaScript, case: Case) -> Outcome:
        reg = self.scripts if form == "script" else self.functions
        try:
            return ("ok", reg.call(client, script.name, flat(case.keys), flat(case.args)))
        except _NOT_RUN:
            raise  # the server cannot be used (unreachable, a password, an ACL): stop there
        except LuapipeError as exc:
            if isinstance(exc, PermissionDenied) and not isinstance(exc, ScriptRuntimeError):
                raise  # the call itself was refused (EVALSHA, FCALL), not a command inside
            return ("error", self._error(exc, script))

    def _error(self, exc: LuapipeError, script: LuaScript) -> str:
        if self.fake:  # fakeredis words a script's errors and a function's differently
            code = error_code(exc)
            # a script's "ERR unknown command '11'" reads as the call's own command unknown
            unknown = _UNKNOWN.search(code) or str(exc).startswith("the server does not know")
            return "ERR unknown command" if unknown else code
        fn = self.built.function_of(script.name)
        text = str(exc).replace(f"script {script.name}", "<callee>")
        if fn is not None:
            text = text.replace(f"function {fn.name}, library {self.built.name}", "<callee>")
        return f"{type(exc).__name__}: {text}"


def _clean(client: Any, case: Case, whole: bool) -> None:
    if whole:
        client.flushdb()
    setup(client, case)


def _once(
    forms: _Forms, client: Any, form: str, script: LuaScript, case: Case, whole: bool
) -> tuple[Outcome, Any]:
    _clean(client, case, whole)
    outcome = forms.run(client, form, script, case)
    return outcome, dump(client, "" if whole else case.namespace)


#: how often a case that disagrees is run again before it counts as a mismatch
ATTEMPTS = 5


def _compare(
    forms: _Forms, client: Any, script: LuaScript, case: Case, whole: bool
) -> tuple[Mismatch | None, Outcome]:
    """Run the case both ways; a disagreement is run again, up to :data:`ATTEMPTS` times.

    What a call leaves can depend on the clock: a key set to expire in a few milliseconds
    may be gone (or half read) by the time it is dumped, a TTL read back may be a
    millisecond less. A real difference is there every time, the same; those are not."""
    seen = None
    for _ in range(ATTEMPTS):
        ref, ref_keys = _once(forms, client, "script", script, case, whole)
        out, keys = _once(forms, client, "function", script, case, whole)
        if out == ref and keys == ref_keys:
            return None, ref
        if seen is not None and seen != (ref, out, ref_keys, keys):
            return None, ref  # it changes from run to run: the clock, not the form
        seen = (ref, out, ref_keys, keys)
    return Mismatch(case, "script", "function", ref, out, ref_keys, keys), ref


def _checked(
    forms: _Forms, client: Any, script: LuaScript, case: Case, whole: bool
) -> tuple[Mismatch | None, Outcome, bool]:
    """:func:`_compare`, where a disagreement of the shape of fakeredis's Lua error mix-up
    counts only if it is there on a fresh fake server too
    (:mod:`luapipe.operations.fakequirks`); True when that excused it."""
    found, ref = _compare(forms, client, script, case, whole)
    if found is None or not lua_error_mixup(
        client, FORMS, (found.outcome_a, found.outcome_b), (found.keyspace_a, found.keyspace_b)
    ):
        return found, ref, False
    fresh = fresh_fake(client)
    if fresh is None:
        return found, ref, False
    try:
        again = _compare(forms, fresh, script, case, whole)[0]
    finally:
        fresh.close()
    return (found, ref, False) if again is not None else (None, ref, True)


def _shrink(forms: _Forms, client: Any, script: LuaScript, m: Mismatch, whole: bool) -> Mismatch:
    changed = True
    while changed:
        changed = False
        for i in range(len(m.case.state)):
            found = _checked(forms, client, script, m.case.without(i), whole)[0]
            if found is not None:
                m, changed = found, True
                break
    return m


def verify_built(
    registry: ScriptRegistry,
    client: redis.Redis,
    *,
    cases: int = 200,
    seed: int = 1,
    names: Iterable[str] | None = None,
    namespace: str | None = None,
    whole_keyspace: bool = False,
    reproduce: str = "",
) -> BuiltVerification:
    """Run ``cases`` random cases of every script the library of ``registry`` (made with
    ``functions="app"``) holds, as a script and as its function; never raises on a mismatch.

    ``names``: only these scripts. ``whole_keyspace``: compare (and empty) the whole
    database, for a server of its own; otherwise only keys under ``namespace`` are used.
    ``reproduce``: the command a mismatch report ends with (``--seed``/``--cases`` added).
    """
    require_sync(client, "verify_built")
    built = registry.built
    if built is None:
        raise LuapipeError("verify_built needs a registry made with functions='<library>'")
    wanted = set(names) if names is not None else None
    ns = "" if whole_keyspace else (namespace or f"luapipe:verify:{built.base}:{seed}:")
    forms = _Forms(registry, built, fake=is_fake(client))
    reports: list[VerifyReport] = []
    not_run: list[tuple[str, str]] = []
    snapshot = snapshot_named(built.name, client)
    failed = True
    try:
        for script_name, _ in built.scripts:
            if wanted is not None and script_name not in wanted:
                continue
            script = registry[script_name]
            if is_fake(client) and script.source.startswith("#!"):
                not_run.append((script_name, "fakeredis refuses a script's #!lua line"))
                continue
            reports.append(_verify_one(forms, client, script, cases, seed, ns, whole_keyspace))
        failed = False
    finally:
        cleanups = [partial(restore_library, snapshot)]
        if not whole_keyspace:
            cleanups.insert(0, partial(delete_namespace, client, ns))
        for cleanup in cleanups:
            try:
                cleanup()
            except redis.RedisError:
                if not failed:  # never hide the error that stopped verify behind this one
                    raise
    if reproduce:
        reports = [_with_reproduce(r, reproduce) for r in reports]
    unconverted = tuple(u for u in built.skipped if wanted is None or u.name in wanted)
    return BuiltVerification(built.name, tuple(reports), unconverted, tuple(not_run))


def _verify_one(
    forms: _Forms, client: Any, script: LuaScript, cases: int, seed: int, ns: str, whole: bool
) -> VerifyReport:
    rng = random.Random(f"{seed}:{script.name}")
    start = time.monotonic()
    errors = done = rechecked = 0
    mismatch = None
    for i in range(cases):
        case = script_case(script, rng, ns, seed=seed, index=i)
        found, ref, excused = _checked(forms, client, script, case, whole)
        done += 1
        rechecked += excused
        if found is not None:
            mismatch = _shrink(forms, client, script, found, whole)
            break
        errors += ref[0] == "error"
    return VerifyReport(
        script.name, FORMS, done, time.monotonic() - start, seed, errors, mismatch, (), rechecked
    )


def _with_reproduce(report: VerifyReport, command: str) -> VerifyReport:
    m = report.mismatch
    if m is None:
        return report
    line = f"{command} --script {report.operation} --seed {m.case.seed} --cases {m.case.index + 1}"
    return replace(report, mismatch=_Mismatch(**{**m.__dict__, "reproduce": line}))
