"""Prove the forms of an operation agree: same reply (or error) and same keyspace after.

Each case is a random initial keyspace (missing keys, wrong types, edge numbers, TTLs) plus
random keys and args. Every form runs from the same state; the reply and a typed dump of
the keyspace (TYPE + typed read + TTL presence, no DUMP) are compared. The first mismatch is
shrunk (keys removed while it persists) and reported as a reproducible case. Keys live
under a namespace prefix, so verify never touches other keys of the database, and the
function form's library (``luapipe_<name>``) is put back as it was afterwards, also after an
error: deleted if verify loaded it, its old code restored if verify replaced it.
"""

from __future__ import annotations

import random
import re
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import redis
from redis.exceptions import DataError

from luapipe.errors import ConnectionFailed, LuapipeError, OutcomeUnknown, PermissionDenied
from luapipe.operations.casegen import Case, KeyState, sample_case
from luapipe.operations.clustersafety import safety_for, skipped_forms
from luapipe.operations.fakequirks import fresh_fake, is_fake, lua_error_mixup
from luapipe.operations.keyspace import delete_namespace, dump, setup
from luapipe.operations.libraries import restore_library, snapshot_library
from luapipe.operations.operation import Operation
from luapipe.wire import routing as _cluster
from luapipe.wire.clients import require_sync

__all__ = ["Case", "KeyState", "Mismatch", "VerifyReport", "dump", "sample_case", "setup", "verify"]

_CODES = ("WRONGTYPE", "OVERFLOW", "FLOAT", "DIVZERO", "NOTINT", "NOTFLOAT", "EXECABORT")
#: a nil or a table passed to redis.call: Redis and fakeredis say "Lua redis lib command
#: arguments must be ...", Valkey 8 "Command arguments must be ..."
_BADARG = re.compile(r"(?:Lua redis lib c|\bC)ommand arguments must be strings or integers")
# the text after ERR, without the trailers that say where it ran (Redis 7's "script: <sha>,
# on @user_script:N.", luapipe's "(script op_x)" / "(function f)")
_ERR = re.compile(r"\bERR (?!user_)(.*?)(?:\s+script: .*|\s+\((?:script|function) [^()]*\))?$")


def error_code(exc: BaseException) -> str:
    """What an error means, independent of the form that raised it."""
    text = str(exc)
    if isinstance(exc, DataError) or _BADARG.search(text):
        return "BADARG"  # a nil (or a table) as a command argument: refused in every form
    for code in _CODES:
        if re.search(rf"\b{code}\b", text):
            return code
    m = _ERR.search(text)
    return f"ERR {m[1]}" if m else type(exc).__name__


Outcome = tuple[str, Any]
#: what the server or the network did, not the operation: raised, never compared (an ACL
#: refusal of one form read as the forms disagreeing)
_NOT_AN_OUTCOME = (PermissionDenied, ConnectionFailed, OutcomeUnknown)


@dataclass(frozen=True)
class Mismatch:
    """Two forms disagreed on one (shrunk) case."""

    case: Case
    form_a: str
    form_b: str
    outcome_a: Outcome
    outcome_b: Outcome
    keyspace_a: tuple[Any, ...]
    keyspace_b: tuple[Any, ...]
    spec: str = "<spec>"  # the spec file, for the command that reproduces the case

    def describe(self) -> str:
        lines = [
            f"case {self.case.index} (seed {self.case.seed}): {self.form_a} and {self.form_b} "
            "disagree",
            f"  keys: {dict(self.case.keys)}",
            f"  args: {dict(self.case.args)}",
            "  initial keyspace:" + ("" if self.case.state else " (empty)"),
        ]
        lines += [f"    {cmd}" for ks in self.case.state for cmd in ks.commands()]
        lines.append(f"  {self.form_a}: {self.outcome_a[0]} {self.outcome_a[1]!r}")
        lines.append(f"  {self.form_b}: {self.outcome_b[0]} {self.outcome_b[1]!r}")
        if self.keyspace_a != self.keyspace_b:
            lines.append(f"  keyspace after {self.form_a}: {self.keyspace_a}")
            lines.append(f"  keyspace after {self.form_b}: {self.keyspace_b}")
        lines.append(
            f"  reproduce: luapipe verify {shlex.quote(self.spec)} --seed {self.case.seed} "
            f"--cases {self.case.index + 1}"
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class VerifyReport:
    """The result of :func:`verify`; ``ok`` when every case agreed in every form."""

    operation: str
    forms: tuple[str, ...]
    cases: int
    seconds: float
    seed: int
    errors_agreed: int = 0
    mismatch: Mismatch | None = None
    skipped: tuple[str, ...] = field(default=())  # "form (why)": forms that could not run
    #: cases whose disagreement on fakeredis had the shape of its Lua error mix-up and that
    #: agreed in every form on a fresh fake server (:mod:`luapipe.operations.fakequirks`)
    rechecked: int = 0

    @property
    def ok(self) -> bool:
        return self.mismatch is None

    def summary(self) -> str:
        status = "ok" if self.ok else "MISMATCH"
        skipped = f"; skipped {', '.join(self.skipped)}" if self.skipped else ""
        return (
            f"{self.operation}: {status}: {self.cases} cases x {len(self.forms)} forms "
            f"({', '.join(self.forms)}) in {self.seconds:.1f}s, seed {self.seed}; "
            f"{self.errors_agreed} cases failed identically in every form{skipped}"
            f"{rechecked_note(self.rechecked)}"
        )


def rechecked_note(n: int) -> str:
    """What a summary says of the cases run again on a fresh fake server (none: nothing)."""
    if not n:
        return ""
    return (
        f"; {n} case{'' if n == 1 else 's'} agreed when run again on a fresh fakeredis "
        "(its Lua forms' errors had another error's text: a fakeredis/lupa defect)"
    )


def _run_one(op: Operation, client: redis.Redis, form: str, case: Case) -> tuple[Outcome, Any]:
    setup(client, case)
    try:
        result = op.run_detailed(client, form, keys=case.keys_dict, args=case.args_dict)
        outcome: Outcome = ("ok", result.value)
    except _NOT_AN_OUTCOME:
        raise
    except LuapipeError as exc:
        outcome = ("error", error_code(exc))
    return outcome, dump(client, case.namespace)


def _compare(
    op: Operation, client: redis.Redis, forms: tuple[str, ...], case: Case
) -> tuple[Mismatch | None, Outcome]:
    ref_form, (ref, ref_dump) = forms[0], _run_one(op, client, forms[0], case)
    for form in forms[1:]:
        out, ks = _run_one(op, client, form, case)
        if out != ref or ks != ref_dump:
            return Mismatch(case, ref_form, form, ref, out, ref_dump, ks), ref
    return None, ref


def _checked(
    op: Operation, client: redis.Redis, forms: tuple[str, ...], case: Case
) -> tuple[Mismatch | None, Outcome, bool]:
    """:func:`_compare`, where a disagreement of the shape of fakeredis's Lua error mix-up
    counts only if it is there on a fresh fake server too; True when that excused it."""
    found, ref = _compare(op, client, forms, case)
    if found is None or not lua_error_mixup(
        client,
        (found.form_a, found.form_b),
        (found.outcome_a, found.outcome_b),
        (found.keyspace_a, found.keyspace_b),
    ):
        return found, ref, False
    fresh = fresh_fake(client)
    if fresh is None:
        return found, ref, False
    try:
        again = _compare(op, fresh, forms, case)[0]
    finally:
        fresh.close()
    return (found, ref, False) if again is not None else (None, ref, True)


def _first_difference(
    op: Operation, client: redis.Redis, forms: tuple[str, ...], case: Case
) -> Mismatch | None:
    return _checked(op, client, forms, case)[0]


def _shrink(op: Operation, client: redis.Redis, forms: tuple[str, ...], m: Mismatch) -> Mismatch:
    changed = True
    while changed:
        changed = False
        for i in range(len(m.case.state)):
            smaller = m.case.without(i)
            found = _first_difference(op, client, forms, smaller)
            if found is not None:
                m, changed = found, True
                break
    return m


def verify(
    op: Operation,
    client: redis.Redis,
    cases: int = 200,
    seed: int = 1,
    forms: tuple[str, ...] | None = None,
    namespace: str | None = None,
    spec: str | None = None,
) -> VerifyReport:
    """Run ``cases`` random cases through every form; never raises on a mismatch, but
    raises what is no outcome of the operation (an ACL refusal, a lost connection).

    On a cluster the default namespace is one hash tag, so every form can run; forms that
    cannot run with the keys of some case (keys in several slots, computed keys without the
    tag) are skipped and named with the reason in ``skipped``. ``spec`` is the spec path a
    mismatch's "reproduce" line names (default: the operation's own path). The function
    library is left as verify found it (see the module docstring)."""
    require_sync(client, "verify")
    use = tuple(forms or op.forms)
    skipped: tuple[str, ...] = ()
    if is_fake(client) and op.read_only and "script" in use:
        # fakeredis rejects the '#!lua flags=no-writes' line a read-only script needs
        use, skipped = tuple(f for f in use if f != "script"), ("script (fakeredis: no #!lua)",)
    ns = namespace if namespace is not None else default_namespace(op, client, seed)
    rng = random.Random(seed)
    samples = [sample_case(op, rng, ns, seed=seed, index=i) for i in range(cases)]
    unsafe = skipped_forms([safety_for(op, client, c.keys_dict, c.args_dict) for c in samples])
    by_reason: dict[str, list[str]] = {}
    for f, why in unsafe.items():
        if f in use:
            by_reason.setdefault(why, []).append(f)
    skipped += tuple(f"{', '.join(fs)} ({why})" for why, fs in by_reason.items())
    use = tuple(f for f in use if f not in unsafe)
    start = time.monotonic()
    errors = 0
    done = 0
    rechecked = 0
    mismatch = None
    library = snapshot_library(op, client) if "function" in use else None
    failed = True
    try:
        for case in samples:
            found, ref, excused = _checked(op, client, use, case)
            done += 1
            rechecked += excused
            if found is not None:
                mismatch = _shrink(op, client, use, found)
                break
            errors += ref[0] == "error"
        failed = False
    finally:
        for cleanup in (partial(delete_namespace, client, ns), partial(restore_library, library)):
            try:
                cleanup()
            except redis.RedisError:
                if not failed:  # never hide the error that stopped verify behind this one
                    raise
    if mismatch is not None:
        where = spec if spec is not None else op.path
        mismatch = replace(mismatch, spec=where or "<spec>")
    return VerifyReport(
        op.name, use, done, time.monotonic() - start, seed, errors, mismatch, skipped, rechecked
    )


def default_namespace(op: Operation, client: Any, seed: int) -> str:
    """Where verify's keys live; on a cluster one hash tag, so every key shares a slot."""
    if _cluster.is_cluster(client):
        return f"luapipe:verify:{{{op.name}:{seed}}}:"
    return f"luapipe:verify:{op.name}:{seed}:"


def outcome_of(
    op: Operation, client: redis.Redis, form: str, keys: Mapping[str, Any], args: Mapping[str, Any]
) -> Outcome:
    try:
        return ("ok", op.run_detailed(client, form, keys=keys, args=args).value)
    except _NOT_AN_OUTCOME:
        raise
    except LuapipeError as exc:
        return ("error", error_code(exc))
