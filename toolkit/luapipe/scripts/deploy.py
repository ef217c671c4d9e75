"""Deploy: load every script and Function library where it is needed; record them in a lock.

The lock file (``luapipe.lock.json`` next to the scripts, committed) is what a deploy
pipeline checks: ``check`` reports drift without changing anything —

- a script or library changed since the lock (its SHA differs), added, or removed;
- a node (server) that is missing a script of the lock;
- per node, for libraries (:mod:`luapipe.scripts.libdeploy`): a library missing (a new
  shard, a flushed node), code that differs from the file (changed by hand), a function
  of ours that another library owns, a library the lock recorded that the directory no
  longer has (``prune`` deletes only those, and only where their live code is luapipe's;
  another library that has taken the name is ``replaced``, left alone), and a function
  that kept its name but changed its keys, args or flags (callers of the live version
  would break).

``deploy`` keeps the code of every library it replaces in a rollback copy on the node
itself (:mod:`luapipe.scripts.libstate`); ``rollback`` loads it back, touching only this
directory's libraries. A deploy that fails on one node puts back the nodes it changed.

A directory with no scripts and no libraries is an error for both (a typo in ``--dir``
must fail the pipeline, not deploy or check nothing). The lock is ``{"version": 1,
"scripts": {name: sha}, "libraries": {name: sha}}``; ``libraries`` is written only when
there are some, so a lock written before them (or by a luapipe that knows none) stays
readable both ways. Another version, a missing one or a bad SHA is a one-line error
with its line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import redis

from luapipe.errors import ScriptError
from luapipe.scripts.calls import load_steps
from luapipe.scripts.drift import Drift
from luapipe.scripts.libdeploy import (
    LibraryOutcome,
    check_libraries_steps,
    deploy_libraries_steps,
    rollback_libraries_steps,
)
from luapipe.scripts.library import FunctionLibrary
from luapipe.scripts.lockfile import LOCK_NAME, Lock, read_lock, read_lock_file, write_lock
from luapipe.scripts.problems import problems_error
from luapipe.scripts.registry import ScriptRegistry
from luapipe.wire.clients import require_sync
from luapipe.wire.drivers import drive

__all__ = ["LOCK_NAME", "DeployReport", "Drift", "deploy", "read_lock", "write_lock"]


@dataclass(frozen=True)
class DeployReport:
    lock_path: str
    scripts: tuple[tuple[str, str], ...]  # (name, sha)
    nodes: tuple[str, ...]
    drift: tuple[Drift, ...] = ()
    lock_written: bool = False
    libraries: tuple[tuple[str, str], ...] = ()  # (name, sha of the code)
    #: what deploy (or rollback) changed on the servers, one line each
    changes: tuple[str, ...] = ()
    #: functions whose keys, args or flags changed under the same name (deploy goes on)
    warnings: tuple[Drift, ...] = ()
    notes: tuple[str, ...] = ()
    #: the libraries deploy (or rollback) changed on some node, by name
    changed_libraries: tuple[str, ...] = ()
    #: what was refused, one line each: a library that ``rollback`` left alone everywhere
    #: because a primary holding it has no rollback copy (the report is then not ok)
    refused: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.drift and not self.refused

    def as_dict(self) -> dict[str, Any]:
        """The report as ``deploy --json`` prints it."""
        return {
            "ok": self.ok,
            "lock": self.lock_path,
            "nodes": list(self.nodes),
            "scripts": dict(self.scripts),
            "libraries": dict(self.libraries),
            "changes": list(self.changes),
            "warnings": [d.as_dict() for d in self.warnings],
            "notes": list(self.notes),
            "changed_libraries": list(self.changed_libraries),
            "refused": list(self.refused),
            "drift": [d.as_dict() for d in self.drift],
        }


def _lock_drift(
    reg: ScriptRegistry, libraries: tuple[FunctionLibrary, ...], lock: Lock
) -> list[Drift]:
    drift: list[Drift] = []
    for kind, items, locked in (
        ("script", [(s.name, s.sha) for s in reg], lock.scripts),
        ("library", [(lib.name, lib.sha) for lib in libraries], lock.libraries),
    ):
        word = "" if kind == "script" else "library "
        for name, sha in items:
            if name not in locked:
                drift.append(Drift("added", name, detail=f"{word}not in the lock file"))
            elif locked[name] != sha:
                detail = f"{word}lock {locked[name][:12]}, file {sha[:12]}"
                drift.append(Drift("changed", name, detail=detail))
        names = {name for name, _ in items}
        drift.extend(
            Drift("removed", n, detail=f"in the lock, no such {kind}")
            for n in sorted(locked)
            if n not in names
        )
    return drift


def _report(
    lock_path: Path, reg: ScriptRegistry, nodes: list[str], outcome: LibraryOutcome | None
) -> DeployReport:
    """A deploy or rollback's report: what changed, where, what is left to look at."""
    if outcome is not None:
        nodes = list(dict.fromkeys([*nodes, *outcome.nodes]))
    return DeployReport(
        str(lock_path),
        tuple((s.name, s.sha) for s in reg),
        tuple(nodes),
        outcome.drift if outcome else (),
        libraries=tuple((lib.name, lib.sha) for lib in reg.libraries),
        changes=tuple(str(c) for c in outcome.changes) if outcome else (),
        warnings=outcome.warnings if outcome else (),
        notes=outcome.notes if outcome else (),
        refused=outcome.refused if outcome else (),
        changed_libraries=tuple(
            sorted({c.library for c in outcome.changes if c.kept is None}) if outcome else ()
        ),
    )


def deploy(
    reg: ScriptRegistry,
    client: redis.Redis,
    lock_path: Path,
    *,
    check: bool = False,
    directory: str | Path | None = None,
    prune: bool = False,
    rollback: bool = False,
) -> DeployReport:
    """Load every script and library and write the lock; with ``check``, only report drift.

    ``prune``: also delete, on every primary, the libraries the lock recorded that the
    directory no longer has (and only those). ``rollback``: load back, on every primary,
    the code each library of the directory had before the last deploy replaced it; the
    lock is left as it is. A library some primary holds without a rollback copy (a shard
    that joined after the deploy) is not rolled back anywhere: the report's ``refused``
    says so and it is not ``ok``; the directory's other libraries are rolled back.

    An empty registry raises :class:`ScriptError` naming ``directory`` (default: the lock
    file's directory) before anything is sent or written; so does a lenient registry with
    :attr:`~ScriptRegistry.problems` (all or nothing), naming every broken file. Every
    node's libraries are read and checked (a function name another library owns, a
    replica's URL) before anything is sent: the scripts are loaded after that check."""
    require_sync(client, "deploy")
    doing = (
        "nothing checked" if check else "nothing rolled back" if rollback else "nothing deployed"
    )
    refused = problems_error(reg.problems, refusing=doing)
    if refused is not None:
        raise refused
    where = Path(directory) if directory is not None else Path(lock_path).parent
    libraries = reg.libraries
    if not len(reg) and not libraries:
        raise ScriptError(
            f"{where}: no scripts to deploy (no *.lua files there; check the directory)"
        )
    if rollback:
        if not libraries:
            raise ScriptError(
                f"{where}: no Function library to roll back (scripts need no rollback: every "
                "version stays callable by its SHA)"
            )
        return _report(lock_path, reg, [], drive(rollback_libraries_steps(libraries), client))
    if check:
        lock = read_lock_file(lock_path)
        drift = _lock_drift(reg, libraries, lock)
        nodes = reg.status(client) if len(reg) else []
        for node in nodes:
            drift.extend(Drift("missing", name, node.node, "not loaded") for name in node.missing)
        names = [n.node for n in nodes]
        stale = {
            n: sha for n, sha in lock.libraries.items() if n not in {lib.name for lib in libraries}
        }
        if libraries or stale:
            found, lib_nodes = drive(check_libraries_steps(libraries, stale), client)
            drift += found
            names = list(dict.fromkeys([*names, *lib_nodes]))
        return replace(_report(lock_path, reg, names, None), drift=tuple(drift))
    lock = read_lock_file(lock_path) if lock_path.exists() else Lock({})  # refuse a broken one
    gone = {n: sha for n, sha in lock.libraries.items() if n not in {lib.name for lib in libraries}}
    scripts = load_steps(list(reg), reg.known, reg.problems) if len(reg) else None
    outcome = None
    if libraries or (prune and gone):  # libraries checked first, then scripts, then changes
        steps = deploy_libraries_steps(libraries, prune=gone if prune else {}, scripts=scripts)
        outcome = drive(steps, client)
    elif scripts is not None:
        drive(scripts, client)
    loaded = [n.node for n in reg.status(client)] if len(reg) else []
    kept = {} if prune else gone  # until --prune deletes them (or leaves another team's)
    shas = {s.name: s.sha for s in reg}
    written = write_lock(lock_path, shas, {**kept, **{lib.name: lib.sha for lib in libraries}})
    return replace(_report(lock_path, reg, loaded, outcome), lock_written=written)
