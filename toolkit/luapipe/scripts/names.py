"""One namespace: script names and function names of a directory never clash.

A call names a script or a function, so the two share one namespace; function names are
also global on a server (two libraries cannot register the same one, whatever its case:
the server's function names are case-insensitive), and so are library names.
:func:`name_clashes` finds every name given twice in a directory, as one
:class:`~luapipe.scripts.problems.ScriptProblem` per file involved (each naming all the
clashes it is in); :func:`clash_error` is the one error naming them all.
"""

from __future__ import annotations

from collections.abc import Sequence

from luapipe.errors import DuplicateScriptError
from luapipe.scripts.library import FunctionLibrary
from luapipe.scripts.problems import ScriptProblem
from luapipe.scripts.script import LuaScript

__all__ = ["clash_error", "name_clashes"]

Clash = tuple[str, tuple[tuple[str, str], ...]]  # (name, ((file, what), ...))


def _clashes(scripts: Sequence[LuaScript], libraries: Sequence[FunctionLibrary]) -> list[Clash]:
    """Every name given twice in the directory: two scripts, a script and a function, two
    functions of different libraries (function names are global on a server), two
    libraries (library names are too)."""
    callable_by: dict[str, list[tuple[str, str]]] = {}
    for sc in scripts:
        callable_by.setdefault(sc.name, []).append((sc.path or sc.name, "script"))
    for lib in libraries:
        for f in (*lib.functions, *lib.later):
            where = f"{lib.path or lib.name}"
            what = f"function of library {lib.name!r} at line {f.line}"
            callable_by.setdefault(f.name, []).append((where, what))
    library_by: dict[str, list[tuple[str, str]]] = {}
    for lib in libraries:
        library_by.setdefault(lib.name, []).append((lib.path or lib.name, "library"))
    out = [(n, tuple(p)) for n, p in sorted(callable_by.items()) if len(p) > 1]
    # the server's function names are case-insensitive: 'Fx' and 'fx' are one name there
    folded: dict[str, dict[str, tuple[str, str]]] = {}
    for lib in libraries:
        for f in (*lib.functions, *lib.later):
            where = f"{lib.path or lib.name}"
            what = f"function {f.name!r} of library {lib.name!r} at line {f.line}"
            folded.setdefault(f.name.lower(), {}).setdefault(f.name, (where, what))
    out += [(f"case:{n}", tuple(v.values())) for n, v in sorted(folded.items()) if len(v) > 1]
    out += [(f"library:{n}", tuple(p)) for n, p in sorted(library_by.items()) if len(p) > 1]
    return out


def _clash_message(clashes: Sequence[Clash]) -> str:
    def one(name: str, places: tuple[tuple[str, str], ...]) -> str:
        paths = " and ".join(p for p, _ in places)
        if name.startswith("library:"):
            return f"duplicate library name {name[len('library:') :]!r}: {paths}"
        if name.startswith("case:"):
            shown = " and ".join(f"{path} ({what})" for path, what in places)
            return f"function names differ only in case (one name on the server): {shown}"
        if all(what == "script" for _, what in places):
            return f"duplicate script name {name!r}: {paths}"
        shown = " and ".join(f"{path} ({what})" for path, what in places)
        return f"duplicate name {name!r} (scripts and functions share one namespace): {shown}"

    listed = "; ".join(one(name, places) for name, places in clashes)
    return listed if len(clashes) == 1 else f"{len(clashes)} names clash: {listed}"


def _per_file(
    clashes: Sequence[Clash], scripts: Sequence[LuaScript], libraries: Sequence[FunctionLibrary]
) -> list[ScriptProblem]:
    """Each file in a clash, set aside with the clashes it is in (a lenient registry)."""
    names = {sc.path or sc.name: sc.name for sc in scripts}
    names.update((lib.path or lib.name, lib.name) for lib in libraries)
    by_file: dict[str, list[Clash]] = {}
    for clash in clashes:
        for path, _ in clash[1]:
            by_file.setdefault(path, []).append(clash)
    shelf = {lib.path or lib.name for lib in libraries}
    return [
        ScriptProblem.of(
            names[path],
            path,
            DuplicateScriptError(f"{path}: {_clash_message(c)}"),
            library=path in shelf,
        )
        for path, c in sorted(by_file.items())
    ]


def name_clashes(
    scripts: Sequence[LuaScript], libraries: Sequence[FunctionLibrary]
) -> list[ScriptProblem]:
    """Every file whose name (or one of whose function names) another file also gives."""
    return _per_file(_clashes(scripts, libraries), scripts, libraries)


def clash_error(
    scripts: Sequence[LuaScript], libraries: Sequence[FunctionLibrary]
) -> DuplicateScriptError | None:
    """One error naming every clash (None when there is none)."""
    clashes = _clashes(scripts, libraries)
    return DuplicateScriptError(_clash_message(clashes)) if clashes else None
