"""What differs between a directory's Function libraries and what each node holds.

Per node: a library ``missing``, code that ``differs`` from the file, a function of ours
that another library owns (``taken``: function names are global), a library the lock
recorded and the directory dropped (``stale``; ``replaced`` when another library has taken
its name since), and a ``signature`` change: a function that
keeps its name but refuses a call its live version took (more required keys or args, fewer
allowed, a lost ``no-writes``/``allow-oom``/``allow-stale``/``allow-cross-slot-keys``, a gained
``no-cluster``), or that is gone. Keys and args of the live version are read from its own
``@function`` blocks (its code is on the node); names do not matter, counts do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from luapipe.errors import ScriptError
from luapipe.scripts.drift import Drift
from luapipe.scripts.header import Param, Signature
from luapipe.scripts.libparse import at_version, parse_library
from luapipe.scripts.library import FunctionLibrary
from luapipe.scripts.libstate import LiveLibrary, NodeState, prunable

__all__ = ["as_loaded", "library_drift", "refused_detail", "replaced_detail"]


#: flags whose removal refuses calls that worked (FCALL_RO, under OOM, on a stale replica,
#: across slots), and the flag whose addition does (no calls on a cluster)
_NEEDED_FLAGS = frozenset({"no-writes", "allow-oom", "allow-stale", "allow-cross-slot-keys"})
_REFUSING_FLAGS = frozenset({"no-cluster"})


def _narrower(before: tuple[Param, ...], after: tuple[Param, ...]) -> bool:
    """Whether some count of keys (or args) the old declaration accepted is refused now
    (names do not matter: keys and args are positional)."""
    old, new = Signature(before), Signature(after)
    if new.minimum > old.minimum:
        return True
    return new.maximum is not None and (old.maximum is None or new.maximum < old.maximum)


def _signature_drift(
    lib: FunctionLibrary,
    live: LiveLibrary,
    node: str,
    live_by_function: Mapping[str, LiveLibrary],
    ours: Mapping[str, str],
    version: str,
) -> list[Drift]:
    """A function that keeps its name but changes its keys, args or flags so that a call
    the live version takes is refused now (or that disappears): its callers would break.

    ``live_by_function``: the live library of the directory holding each function on the
    node, and ``ours``: the library of the directory whose file registers each function;
    a function that moves from one of the directory's libraries to another is compared
    with its live version there, and is not gone."""
    parsed: dict[str, FunctionLibrary | None] = {}

    def old_version(source: LiveLibrary) -> FunctionLibrary | None:
        if source.name not in parsed:
            try:
                parsed[source.name] = parse_library(
                    source.code, path=f"{node}:{source.name}", version=version
                )
            except ScriptError:
                parsed[source.name] = None
        return parsed[source.name]

    out = []
    advice = "callers of the live version would break; give the new version a new name"
    for f in lib.functions:
        source = live if live.flags(f.name) is not None else live_by_function.get(f.name)
        live_flags = source.flags(f.name) if source is not None else None
        if source is None or live_flags is None:
            continue  # a new function: nobody calls it yet
        changed = []
        lost = (set(live_flags) - set(f.flags)) & _NEEDED_FLAGS
        gained = (set(f.flags) - set(live_flags)) & _REFUSING_FLAGS
        if lost or gained:
            changed.append(f"flags [{', '.join(live_flags)}] -> [{', '.join(f.flags)}]")
        old = old_version(source)
        was = old.function(f.name) if old is not None else None
        if was is not None:
            for kind, before, after in (("keys", was.keys, f.keys), ("args", was.args, f.args)):
                if before is not None and after is not None and _narrower(before, after):
                    shown = [", ".join(p.display for p in ps) for ps in (before, after)]
                    changed.append(f"{kind} ({shown[0]}) -> ({shown[1]})")
        if changed:
            out.append(Drift("signature", f.name, node, f"{'; '.join(changed)}: {advice}"))
    for name, _ in live.functions:
        if lib.function(name) is None and name not in ours:
            detail = f"function of {lib.name!r} is gone from the file: {advice}"
            out.append(Drift("signature", name, node, detail))
    return out


def replaced_detail(live_sha: str, locked_sha: str) -> str:
    """Why ``--prune`` leaves a library the lock recorded: its live code is not ours."""
    return (
        f"in the lock, no longer in the directory, but its code there ({live_sha[:12]}) is "
        f"neither the lock's ({locked_sha[:12]}) nor one luapipe loaded: another library of "
        "that name, so deploy --prune leaves it and drops the name from the lock"
    )


def as_loaded(
    libraries: Sequence[FunctionLibrary], state: NodeState
) -> tuple[list[FunctionLibrary], dict[str, ScriptError]]:
    """``libraries`` as that node loads them (its top level run with the node's
    ``REDIS_VERSION``), and the error of each that node would refuse, by name."""
    loaded, refused = [], {}
    for lib in libraries:
        try:
            loaded.append(at_version(lib, state.version))
        except ScriptError as exc:
            refused[lib.name] = exc
            loaded.append(lib)
    return loaded, refused


def refused_detail(exc: ScriptError, version: str) -> str:
    """Why a node would refuse a library: the load-time error as its version reads it."""
    return f"a server with redis_version {version} refuses it: {exc}"


def library_drift(
    libraries: Sequence[FunctionLibrary],
    states: Sequence[NodeState],
    stale: Mapping[str, str] | None = None,
) -> list[Drift]:
    """Per node: a library missing, code that differs from the file (and functions whose
    signature changed), a function of ours another library owns, a library that node
    would refuse (``refused``: its top level fails with that node's ``REDIS_VERSION``),
    and a library the lock recorded that the directory no longer has (``stale``: name ->
    the lock's sha1) still loaded: ``stale`` where its code is luapipe's (``--prune``
    deletes it), ``replaced`` where another library has taken the name (``--prune`` leaves
    it). Functions and flags are those the node's own version registers."""
    out: list[Drift] = []
    stale = dict(stale or {})
    names = {lib.name for lib in libraries}
    for state in states:
        loaded, refused = as_loaded(libraries, state)
        ours = {f.name: lib.name for lib in loaded for f in lib.functions}
        live_by_function = {
            name: live
            for lib in loaded
            if (live := state.libraries.get(lib.name)) is not None
            for name, _ in live.functions
        }
        for lib in loaded:
            live = state.libraries.get(lib.name)
            if lib.name in refused:
                detail = refused_detail(refused[lib.name], state.version)
                out.append(Drift("refused", lib.name, state.node, detail))
            if live is None:
                out.append(Drift("missing", lib.name, state.node, "library not loaded"))
            elif live.code != lib.source:
                detail = f"library code {live.sha[:12]} there, {lib.sha[:12]} in the file"
                out.append(Drift("differs", lib.name, state.node, detail))
                if lib.name not in refused:
                    out.extend(
                        _signature_drift(
                            lib, live, state.node, live_by_function, ours, state.version
                        )
                    )
            for f in lib.functions if lib.name not in refused else ():
                owner = state.owners.get(f.name.lower())
                # a function moving from another of the directory's libraries is not taken:
                # deploy replaces that library first
                if owner is not None and owner != lib.name and owner not in names:
                    detail = f"function of library {lib.name!r} is registered by library {owner!r}"
                    out.append(Drift("taken", f.name, state.node, detail))
        for name, sha in stale.items():
            live = state.libraries.get(name)
            if live is None:
                continue
            if prunable(state, name, sha):
                detail = "in the lock, no longer in the directory: deploy --prune deletes it"
                out.append(Drift("stale", name, state.node, detail))
            else:
                out.append(Drift("replaced", name, state.node, replaced_detail(live.sha, sha)))
    return out
