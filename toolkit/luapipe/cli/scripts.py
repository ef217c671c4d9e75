"""Job 1 on the command line: ``luapipe scripts list|lint|load|status|call|flush|kill`` and
``luapipe deploy``."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import click

from luapipe.cli import _common as common
from luapipe.errors import LuapipeError, printable_url
from luapipe.scripts.deploy import LOCK_NAME, DeployReport, Drift, deploy
from luapipe.scripts.lint import TARGETS, lint_directory
from luapipe.scripts.problems import counted
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import one_line
from luapipe.wire.connect import resolve_url
from luapipe.wire.limits import bulk_limit, refusal
from luapipe.wire.values import param_name

__all__ = ["COMMANDS"]


@click.group()
def scripts() -> None:
    """List, lint, load, inspect, call and flush Lua scripts."""


@scripts.command("list")
@common.dir_option
@common.json_option
def scripts_list(directory: str | None, as_json: bool) -> None:
    """List the scripts with their keys, args, flags and SHA, and each Function library
    with its functions (no server needed); a file that cannot be used is listed with its
    problem, and the exit code is then 1."""
    reg = common.registry(directory, strict=False)
    rows: list[dict[str, Any]] = [s.as_dict() for s in reg]
    rows += [
        {"kind": "library", "name": lib.name, **lib.as_dict(), "problem": None}
        for lib in reg.libraries
    ]
    rows += [p.as_dict() for p in reg.problems]
    rows.sort(key=lambda row: row["name"])
    if as_json:
        common.emit_json(rows)
    else:
        names = [row["name"] for row in rows]
        names += [f"  {f['name']}" for row in rows for f in _functions(row)]
        width = common.name_width(one_line(n) for n in names)
        for row in rows:
            click.echo(f"{one_line(row['name']):<{width}} {_list_text(row)}")
            for f in row.get("functions", ()):
                click.echo(f"{'  ' + one_line(f['name']):<{width}} {_signature_text(f)}")
            for f in row.get("later_functions", ()):
                text = f"{_signature_text(f)}  (newer servers only: under a version check)"
                click.echo(f"{'  ' + one_line(f['name']):<{width}} {text}")
        if reg.problems:
            click.echo(f"{counted(reg.problems)} of {len(rows)} cannot be used", err=True)
    if reg.problems:
        sys.exit(1)


def _list_text(row: dict[str, Any]) -> str:
    if row["problem"] is not None:
        return f"BROKEN        {row['problem']}"
    if row.get("kind") == "library":
        n, more = len(row["functions"]), len(row.get("later_functions", ()))
        later = f" (+{more} on newer servers)" if more else ""
        return f"{row['sha'][:12]}  library, {common.plural(n, 'function')}{later}"
    return f"{row['sha'][:12]}  {_signature_text(row)}"


def _functions(row: dict[str, Any]) -> list[dict[str, Any]]:
    return [*row.get("functions", ()), *row.get("later_functions", ())]


def _signature_text(row: dict[str, Any]) -> str:
    keys = "unchecked" if row["keys"] is None else ", ".join(row["keys"]) or "-"
    args = "unchecked" if row["args"] is None else ", ".join(row["args"]) or "-"
    flags = f"  [{', '.join(row['flags'])}]" if row["flags"] else ""
    return f"keys: {keys}  args: {args}{flags}"


@scripts.command("lint")
@common.dir_option
@click.option(
    "--target",
    "targets",
    multiple=True,
    type=click.Choice(list(TARGETS)),
    help="Also check portability to this server (repeat for several).",
)
@common.json_option
def scripts_lint(directory: str | None, targets: tuple[str, ...], as_json: bool) -> None:
    """Check every script without a server: compile, luacheck (undefined globals, unused
    names, shadowing, unreachable code), KEYS/ARGV against the header; exit 1 on errors."""
    report = lint_directory(
        Path(directory) if directory else common.registry_dir(), targets=targets
    )
    if as_json:
        common.emit_json([i.as_dict() for i in report.issues])
    else:
        for issue in report.issues:
            click.echo(str(issue))
        click.echo(
            f"{common.plural(report.files, 'script')}, {_libraries(report.libraries)}"
            f"{common.plural(report.errors, 'error')}, "
            f"{common.plural(report.warnings, 'warning')}"
        )
    if report.errors:
        sys.exit(1)


def _libraries(n: int) -> str:
    return "" if not n else f"{n} {'library' if n == 1 else 'libraries'}, "


@scripts.command("load")
@common.dir_option
@common.url_option
@common.json_option
def scripts_load(directory: str | None, url: str | None, as_json: bool) -> None:
    """SCRIPT LOAD every script; prints each name and SHA."""
    reg = common.registry(directory)
    shas = reg.load(common.client(url))
    if as_json:
        common.emit_json(shas)
        return
    width = common.name_width(shas)
    for name, sha in shas.items():
        click.echo(f"{name:<{width}} {sha}")


@scripts.command("status")
@common.dir_option
@common.url_option
@common.json_option
def scripts_status(directory: str | None, url: str | None, as_json: bool) -> None:
    """Which scripts each node has cached (exit 1 if any is missing)."""
    nodes = common.registry(directory).status(common.client(url))
    if as_json:
        common.emit_json([n.as_dict() for n in nodes])
    else:
        width = common.name_width(s.name for n in nodes for s in n.scripts)
        for n in nodes:
            for s in n.scripts:
                state = "loaded" if s.loaded else "MISSING"
                click.echo(f"{n.node}  {s.name:<{width}} {s.sha[:12]}  {state}")
    if any(n.missing for n in nodes):
        sys.exit(1)


@scripts.command("call")
@click.argument("name")
@click.option("--key", "-k", "keys", multiple=True, help="A key (repeat, in order).")
@click.option(
    "--arg", "-a", "args", multiple=True, help="An argument, as written (repeat, in order)."
)
@click.option(
    "--arg-file",
    "arg_files",
    multiple=True,
    type=click.Path(exists=True, dir_okay=False, allow_dash=True),
    help="An argument read from a file, byte for byte ('-' is stdin); after the --arg ones, "
    "in order (repeat). For values too long for a command line; at most the server's "
    "proto-max-bulk-len.",
)
@common.dir_option
@common.url_option
@common.json_option
def scripts_call(
    name: str,
    keys: tuple[str, ...],
    args: tuple[str, ...],
    arg_files: tuple[str, ...],
    directory: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Call script or function NAME with --key/--arg values and print its reply: (nil) for
    nil, lists and maps as JSON (with --json: always JSON, nil is null). A broken script
    elsewhere in the directory does not stop the call of a good one."""
    reg = common.registry(directory, strict=False)
    if "-" in arg_files and common.stdin_taken():
        raise click.UsageError(f"{common.stdin_taken()} and --arg-file - both read stdin")
    counted: list[str | bytes] = [*args, *(b"" for _ in arg_files)]  # before reading
    call = reg.function_call(name, keys, counted)  # a function's counts checked there
    if call is None:
        reg[name].check_call(keys, counted)  # before connecting
    who = f"function {call.function.name!r}" if call else f"script {name!r}"
    params = call.function.args if call else reg[name].args
    client = common.client(url)
    values: list[str | bytes] = list(args)
    if arg_files:  # each read no further than the server takes
        limit, node = bulk_limit(client)
        for path in arg_files:
            i = len(values)
            what = f"{who}: args[{i}]{param_name(params, i)} (--arg-file {path})"
            values.append(_read_bounded(path, limit, what, node))
    result = _plain(reg.call(client, name, keys=keys, args=values))
    click.echo(json.dumps(result) if as_json else _show(result))


def _read_bounded(path: str, limit: int, what: str, node: str) -> bytes:
    """The bytes of ``path`` (``-``: stdin), at most ``limit`` (``node``'s proto-max-bulk-len)
    of them: a file known to be longer is refused before it is read, and a stream (a pipe,
    /dev/zero) once it has given one byte more; ``what`` names the value in the refusal."""
    with click.open_file(path, "rb") as f:
        known = None
        with contextlib.suppress(OSError, ValueError, AttributeError):  # no file number
            st = os.fstat(f.fileno())
            known = st.st_size if stat.S_ISREG(st.st_mode) else None
        if known is not None and known > limit:
            raise refusal(what, known, node, limit)
        if known is not None:  # read at once: no second copy of a value near the limit
            whole: bytes = f.read(limit + 1)
            if len(whole) <= limit:
                return whole
            raise refusal(what, None, node, limit)  # it grew meanwhile
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = f.read(min(1 << 20, limit + 1 - size))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
    raise refusal(what, None, node, limit)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    """A reply as text: ``(nil)`` for nil, as redis-cli prints it; lists and maps as JSON
    (a nil inside is ``null``); anything else as it is."""
    if value is None:
        return "(nil)"
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


@scripts.command("flush")
@common.url_option
@click.option("--yes", is_flag=True, help="Do not ask: flush the whole script cache.")
def scripts_flush(url: str | None, yes: bool) -> None:
    """SCRIPT FLUSH: empties the server's whole script cache (every application's)."""
    client = common.client(url)  # a wrong URL fails before the question
    where = printable_url(resolve_url(url))
    if not yes:
        question = f"Flush every cached script (every application's) on {where}?"
        try:
            answer = click.confirm(question, default=False)
        except click.Abort:  # no terminal to answer (end of input), or Ctrl-C
            click.echo()  # end the question's line
            if common.interrupted():
                raise KeyboardInterrupt from None
            common.fail(f"not flushed: no answer to the question; pass --yes to flush {where}")
        if not answer:
            common.fail("not flushed (pass --yes to skip the question)")
    nodes = ScriptRegistry([]).flush(client)
    click.echo(f"flushed the script cache on {', '.join(nodes)}")


@scripts.command("kill")
@common.url_option
def scripts_kill(url: str | None) -> None:
    """SCRIPT KILL / FUNCTION KILL a runaway script or function that has not written (one
    that wrote is UNKILLABLE)."""
    killed = ScriptRegistry([]).kill(common.client(url))
    click.echo(
        f"killed the running script or function on {', '.join(killed)}"
        if killed
        else "no script or function running"
    )


@click.command("deploy")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Scripts directory [default: ./scripts_lua; without one, --dir is required].",
)
@common.url_option
@click.option(
    "--lock",
    "lock",
    type=click.Path(dir_okay=False),
    default=None,
    callback=common.finite_files,
    help=f"Lock file [default: <dir>/{LOCK_NAME}].",
)
@click.option("--check", is_flag=True, help="Only report drift (exit 1 if any); change nothing.")
@click.option(
    "--prune",
    is_flag=True,
    help="Also delete the Function libraries the lock recorded that --dir no longer has.",
)
@click.option(
    "--rollback",
    is_flag=True,
    help="Load back the code each library of --dir had before the last deploy replaced it.",
)
@common.json_option
def deploy_cmd(
    directory: str | None,
    url: str | None,
    lock: str | None,
    check: bool,
    prune: bool,
    rollback: bool,
    as_json: bool,
) -> None:
    """Load every script and Function library of --dir (default ./scripts_lua) on the
    server (every primary of a cluster) and write the lock file (name -> SHA)."""
    if sum((check, prune, rollback)) > 1:
        raise click.UsageError("--check, --prune and --rollback go one at a time")
    scripts_dir = _deploy_dir(directory)
    reg = ScriptRegistry.from_directory(scripts_dir)
    lock_path = Path(lock) if lock else scripts_dir / LOCK_NAME
    report = deploy(
        reg,
        common.client(url),
        lock_path,
        check=check,
        directory=scripts_dir,
        prune=prune,
        rollback=rollback,
    )
    if as_json:
        common.emit_json(report.as_dict())
    elif check:
        lines = _check_lines(report.drift)
        for line in lines:
            click.echo(line)
        scope = f"{_scope(report)}, nodes {', '.join(report.nodes)}"
        if report.ok:
            click.echo(f"no drift: {scope}")
        else:
            click.echo(f"drift: {common.plural(len(lines), 'difference')} ({scope})")
    else:
        _deploy_text(report, rollback)
    if not report.ok:
        sys.exit(1)


def _scope(report: DeployReport) -> str:
    scope = common.plural(len(report.scripts), "script")
    if report.libraries:
        n = len(report.libraries)
        scope += f", {n} {'library' if n == 1 else 'libraries'}"
    return scope


def _deploy_text(report: DeployReport, rollback: bool) -> None:
    if not rollback:
        width = common.name_width(name for name, _ in (*report.scripts, *report.libraries))
        for name, sha in report.scripts:
            click.echo(f"{name:<{width}} {sha}")
        for name, sha in report.libraries:
            click.echo(f"{name:<{width}} {sha}  library")
    for line in (*report.changes, *report.notes):
        click.echo(line)
    for warning in _grouped(report.warnings):
        click.echo(f"warning: {warning}", err=True)
    for d in report.drift:
        click.echo(str(d))
    for line in report.refused:
        click.echo(f"error: {line}", err=True)
    nodes = ", ".join(report.nodes)
    if rollback:
        names = ", ".join(report.changed_libraries) or "nothing"
        click.echo(f"rolled back {names} (nodes {nodes})")
        return
    state = "written" if report.lock_written else "unchanged"
    click.echo(f"deployed {_scope(report)} to {nodes}; lock {report.lock_path} {state}")


def _grouped(found: tuple[Drift, ...]) -> list[str]:
    """The same finding on several nodes, once: ``on 6 nodes`` instead of six lines."""
    nodes: dict[tuple[str, str, str], list[str]] = {}
    for d in found:
        nodes.setdefault((d.kind, d.name, d.detail), []).append(d.node)
    out = []
    for (kind, name, detail), where in nodes.items():
        on = where[0] if len(where) == 1 else f"{len(where)} nodes"
        out.append(str(Drift(kind, name, on, detail)))
    return out


def _check_lines(drift: tuple[Drift, ...]) -> list[str]:
    """``deploy --check``'s lines: one per finding and node, except a ``signature`` change
    (the same on every node holding the live code): once, ``on 6 nodes``, where it is first
    found, as ``deploy`` prints it. A node's state (missing, differs, taken...) keeps its
    own line: which node is what an operator acts on."""
    out: list[str] = []
    groups: dict[tuple[str, str], list[Drift]] = {}
    for d in drift:
        if d.kind != "signature":
            out.append(str(d))
            continue
        key = (d.name, d.detail)
        if key not in groups:
            groups[key] = []
            out.append("")  # its place, filled below
        groups[key].append(d)
    lines = iter(line for found in groups.values() for line in _grouped(tuple(found)))
    return [line or next(lines) for line in out]


def _deploy_dir(directory: str | None) -> Path:
    """--dir, else ./scripts_lua. Never the bundled library: its lock file would be written
    into the installed package, and a deploy pipeline must name what it deploys."""
    if directory is not None:
        return Path(directory)
    local = Path("scripts_lua")
    if local.is_dir():
        return local
    raise LuapipeError(
        "deploy needs a scripts directory: pass --dir DIR or run it where ./scripts_lua is "
        "(the bundled library is not deployed)"
    )


COMMANDS = (scripts, deploy_cmd)
