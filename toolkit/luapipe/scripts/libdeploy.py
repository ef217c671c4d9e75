"""Deploy a directory's Function libraries, as I/O-free steps (sync and asyncio share them).

:func:`deploy_libraries_steps` reads every node (:mod:`luapipe.scripts.libstate`), then on
every primary loads a library only where its code differs from the file: ``FUNCTION
LOAD`` where it is missing, ``FUNCTION LOAD REPLACE`` where it differs, after keeping the
code it replaces in the node's rollback copy. All primaries go at once (one round trip
each); if any refuses, every change already made is put back (the previous code reloaded,
a new library deleted) and the error says where it failed and what was put back. Then
``WAIT`` on each changed primary that has replicas, and a second read checks that every
node, replicas included, has the file's code.

Only libraries of the directory (and, for ``--prune``, those the lock recorded) are ever
read or touched: servers are shared, other libraries are never drift.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from luapipe.errors import ConnectionFailed, LuapipeError, ScriptError, ServerError
from luapipe.scripts.drift import Drift
from luapipe.scripts.libdrift import as_loaded, library_drift, refused_detail, replaced_detail
from luapipe.scripts.libparse import parse_library
from luapipe.scripts.library import FunctionLibrary, library_sha
from luapipe.scripts.libstate import (
    NodeState,
    keeper_name,
    keeper_source,
    kept_code,
    kept_library,
    prunable,
    read_state_steps,
)
from luapipe.wire.replies import Command, ReplyError
from luapipe.wire.routing import Send, SendEach, Steps

__all__ = [
    "WAIT_MS",
    "Change",
    "LibraryOutcome",
    "check_libraries_steps",
    "deploy_libraries_steps",
    "rollback_libraries_steps",
]

#: how long a deploy waits for the replicas of a changed primary (``WAIT``)
WAIT_MS = 5000
_NOT_FOUND = "ERR Library not found"


@dataclass(frozen=True)
class Change:
    """One library on one node: its code ``before`` and ``after`` (None: absent)."""

    node: str
    library: str
    before: str | None
    after: str | None

    def command(self) -> Command:
        if self.after is None:
            return Command(("FUNCTION", "DELETE", self.library))
        # code read from a server may hold bytes that are not UTF-8: sent back as they were
        code = self.after.encode("utf-8", "surrogateescape")
        if self.before is None:
            return Command(("FUNCTION", "LOAD", code))
        return Command(("FUNCTION", "LOAD", "REPLACE", code))

    def undone(self) -> Change:
        return Change(self.node, self.library, self.after, self.before)

    @property
    def kept(self) -> str | None:
        """For a rollback copy: the library whose code it keeps."""
        return kept_library(self.library)

    def __str__(self) -> str:
        if self.kept is not None:
            if self.after is None:
                return f"{self.node}: deleted {self.library} (the rollback copy of {self.kept})"
            code = kept_code(self.after) or ""
            return (
                f"{self.node}: kept the code {self.kept} had ({library_sha(code)[:12]}) in "
                f"library {self.library}"
            )
        if self.after is None:
            return f"{self.node}: deleted {self.library}"
        if self.before is None:
            return f"{self.node}: loaded {self.library} {library_sha(self.after)[:12]} (new)"
        old, new = library_sha(self.before)[:12], library_sha(self.after)[:12]
        return f"{self.node}: replaced {self.library} {old} -> {new}"


@dataclass(frozen=True)
class LibraryOutcome:
    """What a deploy (or rollback) of libraries did: the changes made, the primaries and
    every node read, warnings (a function whose signature changed under its name), drift
    left afterwards (a replica that did not catch up), and what was refused (a rollback
    that would have left the shards on different versions)."""

    changes: tuple[Change, ...]
    nodes: tuple[str, ...]
    warnings: tuple[Drift, ...] = ()
    drift: tuple[Drift, ...] = ()
    notes: tuple[str, ...] = ()
    #: what was refused whole, one line each (a library a rollback left alone everywhere)
    refused: tuple[str, ...] = ()


# -- loading and putting back ---------------------------------------------------------
def _order(changes: list[Change]) -> list[Change]:
    """Deletes first, then rollback copies (kept before what they keep is replaced), then
    replacements, then new libraries: a function that moves from one of our libraries to
    another is free before it is taken."""

    def rank(c: Change) -> int:
        if c.after is None:
            return 0
        return 1 if c.kept is not None else 2 if c.before is not None else 3

    return sorted(changes, key=rank)


def _givers_first(
    changes: list[Change], state: NodeState, registers: Mapping[str, Iterable[str]]
) -> list[Change]:
    """A library that takes a function another changed library holds on the node goes
    after that one (a function moving between two of the directory's libraries: the server
    refuses a name still registered). ``registers``: the functions each library's new code
    registers. A cycle (two libraries swapping functions) keeps its order: the server
    refuses it, and the change is put back."""
    changing = {c.library for c in changes if c.after is not None}
    takes: dict[str, set[str]] = {}
    for c in changes:
        if c.after is not None and c.kept is None:
            owners = {state.owners.get(n.lower()) for n in registers.get(c.library, ())}
            takes[c.library] = {o for o in owners if o in changing and o != c.library}
    out: list[Change] = []
    waiting = list(changes)
    while waiting:
        done = {c.library for c in out}
        ready = [c for c in waiting if takes.get(c.library, set()) <= done]
        if not ready:  # a cycle
            return out + waiting
        out += ready
        waiting = [c for c in waiting if c not in ready]
    return out


def _refused(changes: Sequence[Change], replies: Sequence[object]) -> tuple[int, str] | None:
    for i, (change, reply) in enumerate(zip(changes, replies, strict=True)):
        if isinstance(reply, ReplyError):
            return i, f"{change.command().args[1].lower()} {change.library}: {reply.text}"
    return None


def apply_steps(plan: Mapping[str, list[Change]], what: str) -> Steps[list[Change]]:
    """Every node's changes at once (one round trip each); if a node refuses one, put
    back every node's changes and raise a :class:`ServerError` saying so."""
    nodes = [n for n in plan if plan[n]]
    if not nodes:
        return []
    answers = yield SendEach(tuple(Send([c.command() for c in plan[n]], n) for n in nodes))
    failed: dict[str, str] = {}
    applied: dict[str, list[Change]] = {}  # per node, the changes to put back on failure
    for node, answer in zip(nodes, answers, strict=True):
        if isinstance(answer, LuapipeError):
            failed[node] = str(answer)
            if not isinstance(answer, ConnectionFailed):  # it may have run: put it back too
                applied[node] = plan[node]
            continue
        refused = _refused(plan[node], answer)
        if refused is not None:
            failed[node] = refused[1]
        # only what the server did: a refused load of a library that appeared since the
        # read ("already exists") must not delete that library when putting back
        done = [c for c, reply in zip(plan[node], answer, strict=True)
                if not isinstance(reply, ReplyError)]  # fmt: skip
        if done:
            applied[node] = done
    if not failed:
        return [c for n in nodes for c in plan[n]]
    changed = list(applied)
    undo = {n: [c.undone() for c in reversed(applied[n])] for n in changed}
    back = yield SendEach(tuple(Send([c.command() for c in undo[n]], n) for n in changed))
    not_back: dict[str, str] = {}
    for node, answer in zip(changed, back, strict=True):
        if isinstance(answer, LuapipeError):
            not_back[node] = str(answer)
            continue
        for change, reply in zip(undo[node], answer, strict=True):
            if isinstance(reply, ReplyError) and not reply.text.startswith(_NOT_FOUND):
                not_back[node] = f"{change.library}: {reply.text}"
                break
    where = "; ".join(f"on {n}: {why}" for n, why in failed.items())
    message = f"{what} failed {where}"
    put_back = [n for n in changed if n not in not_back]
    if put_back:
        message += f"; put back the libraries it had changed on {', '.join(put_back)}"
    elif not not_back:
        message += "; nothing had been changed"
    for node, why in not_back.items():
        message += f"; could NOT put back {node} ({why}): check it with deploy --check"
    raise ServerError(message)


def _wait_steps(
    plan: Mapping[str, list[Change]], states: Sequence[NodeState]
) -> Steps[list[Drift]]:
    """``WAIT`` for the replicas of every changed primary (on the connection that wrote)."""
    counts = {s.node: s.replicas for s in states if s.replicas and plan.get(s.node)}
    if not counts:
        return []
    nodes = list(counts)
    sends = tuple(Send([Command(("WAIT", counts[n], WAIT_MS))], n) for n in nodes)
    answers = yield SendEach(sends)
    out = []
    for node, answer in zip(nodes, answers, strict=True):
        acked = answer[0] if isinstance(answer, list) else None
        if not isinstance(acked, int) or acked < counts[node]:
            shown = acked if isinstance(acked, int) else answer
            detail = f"{shown} of {counts[node]} replicas confirmed within {WAIT_MS} ms"
            out.append(Drift("unconfirmed", "replicas", node, detail))
    return out


def _names(libraries: Sequence[FunctionLibrary], extra: Iterable[str] = ()) -> list[str]:
    return list(dict.fromkeys([*(lib.name for lib in libraries), *extra]))


def _pruned(state: NodeState, prune: Mapping[str, str]) -> set[str]:
    """The ``prune`` libraries this deploy deletes on that node (only luapipe's own code)."""
    return {name for name, sha in prune.items() if prunable(state, name, sha)}


def _conflicts(
    libraries: Sequence[FunctionLibrary], states: Sequence[NodeState], prune: Mapping[str, str]
) -> list[Drift]:
    """Functions of ours another library owns on a primary, that this deploy would not
    free first (by replacing or pruning that library: then it is one of ours)."""
    out = []
    for state in states:
        if not state.primary:
            continue
        loaded = as_loaded(libraries, state)[0]
        ours = {lib.name: lib for lib in loaded}
        pruned = _pruned(state, prune)
        for lib in loaded:
            for f in lib.functions:
                owner = state.owners.get(f.name.lower())
                if owner is None or owner == lib.name or owner in pruned:
                    continue
                if owner in ours and ours[owner].function(f.name) is None:
                    continue  # it moves between two of our libraries
                detail = f"function of library {lib.name!r} is registered by library {owner!r}"
                out.append(Drift("taken", f.name, state.node, detail))
    return out


def _refuse_unloadable(libraries: Sequence[FunctionLibrary], states: Sequence[NodeState]) -> None:
    """A library a primary would refuse (its top level fails with that node's
    ``REDIS_VERSION``) refuses the deploy before anything is sent, naming every one."""
    found = [
        f"{s.node}: {refused_detail(exc, s.version)}"
        for s in states
        if s.primary
        for exc in as_loaded(libraries, s)[1].values()
    ]
    if found:
        raise ScriptError(f"nothing deployed: {'; '.join(found)}")


def _need_a_primary(states: Sequence[NodeState], what: str) -> None:
    """A URL naming a replica (of a server that is no cluster) reaches no primary: nothing
    could be loaded there, so say where to go instead of reporting success."""
    if states and not any(s.primary for s in states):
        s = states[0]
        raise ServerError(
            f"no library {what}: {s.node} is a replica (of {s.primary_of}); Function libraries "
            "are loaded on a primary and replicate: use the primary's URL"
        )


def _left(states: Sequence[NodeState], prune: Mapping[str, str]) -> list[Drift]:
    """The ``prune`` libraries left on a primary: another library has taken the name."""
    out = []
    for state in states:
        if not state.primary:
            continue
        for name, sha in prune.items():
            live = state.libraries.get(name)
            if live is not None and not prunable(state, name, sha):
                out.append(Drift("replaced", name, state.node, replaced_detail(live.sha, sha)))
    return out


def deploy_libraries_steps(
    libraries: Sequence[FunctionLibrary],
    *,
    prune: Mapping[str, str] | None = None,
    scripts: Steps[Any] | None = None,
) -> Steps[LibraryOutcome]:
    """Load every library where a primary lacks its code (and delete the ``prune`` ones:
    name -> the lock's sha1), keeping each replaced code in the node's rollback copy; then
    confirm every node.

    A ``prune`` library whose live code is not luapipe's (:func:`prunable`: another team
    loaded a library of that name since) is left as it is, a ``replaced`` warning.
    ``scripts``: the steps that load the directory's scripts, run once every node has
    been read and checked (a function name taken, a replica's URL refuse the deploy before
    anything is sent, scripts included) and before any library is changed."""
    prune = dict(prune or {})
    names = _names(libraries, prune)
    states = yield from read_state_steps(names)
    _need_a_primary(states, "deployed")
    _refuse_unloadable(libraries, states)
    conflicts = _conflicts(libraries, states, prune)
    if conflicts:
        listed = "; ".join(str(d) for d in conflicts)
        raise ServerError(f"nothing deployed: a function name is taken: {listed}")
    if scripts is not None:
        yield from scripts
    warnings = [d for d in library_drift(libraries, states) if d.kind == "signature"]
    warnings += _left(states, prune)
    plan: dict[str, list[Change]] = {}
    for state in states:
        if state.primary:
            changes = _order(_node_plan(libraries, state, prune))
            registers = {lib.name: lib.function_names for lib in as_loaded(libraries, state)[0]}
            plan[state.node] = _givers_first(changes, state, registers)
    done = yield from apply_steps(plan, "deploy")
    drift = yield from _wait_steps(plan, states)
    after = (yield from read_state_steps(names)) if done else states  # replicas too
    drift += [d for d in library_drift(libraries, after) if d.kind in ("missing", "differs")]
    nodes = tuple(s.node for s in states)
    return LibraryOutcome(tuple(done), nodes, tuple(warnings), tuple(drift))


def _node_plan(
    libraries: Sequence[FunctionLibrary], state: NodeState, prune: Mapping[str, str]
) -> list[Change]:
    changes = []
    for lib in libraries:
        live = state.libraries.get(lib.name)
        if live is None:
            changes.append(Change(state.node, lib.name, None, lib.source))
        elif live.code != lib.source:
            keeper = keeper_name(lib.name)
            kept = state.libraries.get(keeper)
            before = kept.code if kept else None
            copy = keeper_source(lib.name, live.code, lib.source)
            changes.append(Change(state.node, keeper, before, copy))
            changes.append(Change(state.node, lib.name, live.code, lib.source))
    for name in sorted(_pruned(state, prune)):
        for gone in (name, keeper_name(name)):
            live = state.libraries.get(gone)
            if live is not None:
                changes.append(Change(state.node, gone, live.code, None))
    return changes


def check_libraries_steps(
    libraries: Sequence[FunctionLibrary], stale: Mapping[str, str] | None = None
) -> Steps[tuple[list[Drift], tuple[str, ...]]]:
    """Every node's drift for ``libraries`` (and the ``stale`` libraries the lock recorded:
    name -> the lock's sha1); nothing is changed."""
    stale = dict(stale or {})
    states = yield from read_state_steps(_names(libraries, stale))
    return library_drift(libraries, states, stale), tuple(s.node for s in states)


def _registered(code: str, name: str, version: str) -> tuple[str, ...]:
    """The functions kept code registers on a node of ``version`` (none known if it no
    longer reads)."""
    try:
        return parse_library(code, path=name, version=version).function_names
    except ScriptError:
        return ()


def _kept(state: NodeState, library: str) -> str | None:
    """The code ``library``'s rollback copy on that node keeps (None: no usable copy)."""
    kept = state.libraries.get(keeper_name(library))
    return kept_code(kept.code) if kept is not None else None


def _without_copy(
    libraries: Sequence[FunctionLibrary], primaries: Sequence[NodeState]
) -> tuple[dict[str, list[str]], list[str]]:
    """Per library, the primaries that hold it but no usable rollback copy, when other
    primaries do hold one: rolling back only those would leave the shards on different
    versions, so the library is refused whole (one line each, naming those nodes)."""
    refused: dict[str, list[str]] = {}
    lines = []
    for lib in libraries:
        copy = {s.node: _kept(s, lib.name) is not None for s in primaries}
        lacking = [s.node for s in primaries if lib.name in s.libraries and not copy[s.node]]
        if lacking and any(copy.values()):
            refused[lib.name] = lacking
            having = [n for n, has in copy.items() if has]
            lines.append(
                f"not rolled back {lib.name}: no kept copy of its previous code on "
                f"{', '.join(lacking)} (joined or flushed since the deploy?) while "
                f"{', '.join(having)} {'has' if len(having) == 1 else 'have'} one; rolling "
                "back only those would leave the shards on different versions, so "
                f"{lib.name} is left as it is everywhere (deploy its previous file instead)"
            )
    return refused, lines


def rollback_libraries_steps(libraries: Sequence[FunctionLibrary]) -> Steps[LibraryOutcome]:
    """On every primary, load back the code each library had before the last deploy that
    replaced it (its rollback copy), keeping the current code as the copy in turn (so a
    second rollback undoes the first). Only ``libraries`` are touched.

    All or nothing per library: a library that some primary holds without a rollback copy
    while others have one is not rolled back anywhere (:attr:`LibraryOutcome.refused`
    says why); the directory's other libraries still are."""
    states = yield from read_state_steps(_names(libraries))
    _need_a_primary(states, "rolled back")
    primaries = [s for s in states if s.primary]
    refused, refusals = _without_copy(libraries, primaries)
    plan: dict[str, list[Change]] = {}
    notes = []
    registers: dict[str, tuple[str, ...]] = {}
    for state in primaries:
        changes = []
        for lib in libraries:
            if lib.name in refused:
                continue
            kept = state.libraries.get(keeper_name(lib.name))
            old = _kept(state, lib.name)
            if kept is None or old is None:
                notes.append(f"{state.node}: no previous code of {lib.name} kept; left as it is")
                continue
            live = state.libraries.get(lib.name)
            now = live.code if live is not None else None
            if now == old:
                notes.append(f"{state.node}: {lib.name} already runs the kept code")
                continue
            swap = keeper_source(lib.name, now, old) if now is not None else None
            changes.append(Change(state.node, kept.name, kept.code, swap))
            changes.append(Change(state.node, lib.name, now, old))
            registers[lib.name] = _registered(old, lib.name, state.version)
        plan[state.node] = _givers_first(_order(changes), state, registers)
    done = yield from apply_steps(plan, "rollback")
    drift = yield from _wait_steps(plan, states)
    nodes = tuple(s.node for s in states)
    return LibraryOutcome(tuple(done), nodes, (), tuple(drift), tuple(notes), tuple(refusals))
