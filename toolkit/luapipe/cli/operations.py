"""Job 2 on the command line: ``luapipe generate``, ``luapipe verify`` and ``luapipe functions``."""

from __future__ import annotations

import sys
from pathlib import Path

import click
import redis

from luapipe.cli import _common as common

__all__ = ["COMMANDS"]


@click.command()
@click.argument(
    "specs",
    nargs=-1,
    required=True,
    type=click.Path(dir_okay=False),
    callback=common.finite_files,
)
@click.option(
    "--out",
    default=None,
    type=click.Path(file_okay=False),
    help="Where op_<name>.lua and op_<name>.py go [default: next to each spec]; a scripts "
    "directory (scripts_lua) makes the registry load the script.",
)
@click.option(
    "--py-out",
    default=None,
    type=click.Path(file_okay=False),
    help="Where the Python module op_<name>.py goes instead [default: as --out].",
)
def generate(specs: tuple[str, ...], out: str | None, py_out: str | None) -> None:
    """Generate every form of each operation SPEC (Lua script, Function, Python module)."""
    from luapipe.operations.files import generate_files

    for result in generate_files(specs, out, py_out):
        state = "written" if result.changed else "unchanged"
        click.echo(f"{result.lua}  {result.python}  ({state})")


@click.command("verify")
@click.argument("specs", nargs=-1, required=True, callback=common.finite_files)
@common.url_options("Redis URL [default: a private embedded server; REDIS_URL is not used].")
@click.option("--fake", is_flag=True, help="Use an in-process fakeredis server.")
@click.option("--cases", default=200, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=1, show_default=True, type=int)
def verify_cmd(specs: tuple[str, ...], url: str | None, fake: bool, cases: int, seed: int) -> None:
    """Prove the forms of each SPEC|NAME agree: same replies, same keyspace (exit 1 if not).

    A NAME is an operation of the built-in catalogue (e.g. reserve_stock), as for bench."""
    import contextlib

    from luapipe.operations.catalogue import spec_paths
    from luapipe.operations.files import verify_operations
    from luapipe.operations.spec import load_operations

    if fake and url:
        raise click.UsageError("--url and --fake exclude each other")
    ops = load_operations(spec_paths(specs))  # every spec checked before a server starts
    client: redis.Redis
    with contextlib.ExitStack() as stack:
        if fake:
            try:
                import fakeredis
            except ImportError:
                common.fail("--fake needs fakeredis: pip install 'fakeredis[lua]'")
            client = fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 0)), protocol=2)
        else:
            server_url = stack.enter_context(common.bench_server(url))
            client = common.client(server_url)
        reports = verify_operations(ops, client, cases=cases, seed=seed)
    for rep in reports:
        click.echo(rep.summary())
        if rep.mismatch is not None:
            click.echo(rep.mismatch.describe())
    if not all(rep.ok for rep in reports):
        sys.exit(1)


@click.group()
def functions() -> None:
    """The Redis Function libraries luapipe writes: scripts built into one library, and
    the function form of a spec."""


_LIBRARY = click.option(
    "--library",
    "base",
    required=True,
    help="The library's name; it is written luapipe_<NAME>_<hash of the code>.",
)


@functions.command("build")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@_LIBRARY
@click.option(
    "--out",
    required=True,
    type=click.Path(),
    help="A directory (the file is <NAME>.lua there) or a .lua file; never DIRECTORY.",
)
@common.json_option
def functions_build(directory: str, base: str, out: str, as_json: bool) -> None:
    """Build every script of DIRECTORY into one Function library: a function per script,
    with its keys, args and flags; the scripts a function cannot run are listed."""
    from luapipe.scripts.buildfiles import build_directory

    result = build_directory(directory, base, out)
    lib = result.library
    if as_json:
        common.emit_json({"path": str(result.path), "changed": result.changed, **lib.as_dict()})
        return
    state = "written" if result.changed else "unchanged"
    functions = common.plural(len(lib.functions), "function")
    click.echo(f"{result.path}: library {lib.name}, {functions} ({state})")
    width = common.name_width(s for s, _ in lib.scripts)
    for script, fn in lib.scripts:
        click.echo(f"  {script:<{width}} {fn}")
    for u in lib.skipped:
        click.echo(f"not converted: {u.name}: {u.reason}")


@functions.command("verify")
@click.argument("directory", type=click.Path(file_okay=False, exists=True))
@_LIBRARY
@common.url_options("Redis URL [default: a private embedded server; REDIS_URL is not used].")
@click.option("--fake", is_flag=True, help="Use an in-process fakeredis server.")
@click.option("--cases", default=200, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--script", "names", multiple=True, help="Only this script (repeatable).")
def functions_verify(
    directory: str,
    base: str,
    url: str | None,
    fake: bool,
    cases: int,
    seed: int,
    names: tuple[str, ...],
) -> None:
    """Prove the library built from DIRECTORY does what its scripts do: random keyspaces
    and args, each run as the script and as its function; same reply, same keyspace."""
    import contextlib
    import shlex

    from luapipe.operations.builtverify import verify_built
    from luapipe.scripts.registry import ScriptRegistry

    if fake and url:
        raise click.UsageError("--url and --fake exclude each other")
    reg = ScriptRegistry.from_directory(directory, functions=base)
    for name in names:
        reg[name]  # an unknown name is one error before a server starts
    where = "--fake" if fake else common.url_given()
    command = f"luapipe functions verify {shlex.quote(directory)} --library {base} {where}"
    with contextlib.ExitStack() as stack:
        if fake:
            client = _fake_client()
        else:
            client = common.client(stack.enter_context(common.bench_server(url)))
        result = verify_built(
            reg,
            client,
            cases=cases,
            seed=seed,
            names=names or None,
            whole_keyspace=url is None,
            reproduce=" ".join(command.split()),
        )
    for rep in result.reports:
        click.echo(rep.summary())
        if rep.mismatch is not None:
            click.echo(rep.mismatch.describe())
    for name, why in result.not_run:
        click.echo(f"not run: {name}: {why}")
    for u in result.unconverted:
        click.echo(f"not converted: {u.name}: {u.reason}")
    click.echo(result.summary())
    if not result.ok:
        sys.exit(1)


def _fake_client() -> redis.Redis:
    try:
        import fakeredis
    except ImportError:
        common.fail("--fake needs fakeredis: pip install 'fakeredis[lua]'")
    return fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 0)), protocol=2)


@functions.command("gc")
@click.argument("specs", nargs=-1, callback=common.finite_files)
@common.url_option
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@common.json_option
def functions_gc(specs: tuple[str, ...], url: str | None, dry_run: bool, as_json: bool) -> None:
    """Delete old luapipe libraries (luapipe_<name>_<hash>: generated, or built) on every
    primary: the older versions of each SPEC|NAME and of each built library FILE.lua (what
    functions build wrote), keeping the current one. Without arguments, every luapipe
    library goes. A team's own libraries, and other operations' or builds' libraries when
    names are given, are never touched."""
    from luapipe.operations.catalogue import spec_paths
    from luapipe.operations.generate import library_name
    from luapipe.operations.libraries import collect_generated
    from luapipe.operations.spec import load_operations
    from luapipe.scripts.versioned import VERSIONED_NAME

    for spec in specs:
        if Path(spec).is_dir():
            built = sorted(str(f) for f in Path(spec).glob("*.lua") if _is_built(f))
            hint = f" ({', '.join(built)})" if built else ""
            common.fail(f"{spec}: a directory; name the built library's file{hint}")
    files = [s for s in specs if s.endswith(".lua")]
    keep = [_built_name(f) for f in files]
    ops = [s for s in specs if not s.endswith(".lua")]
    keep += [library_name(op) for op in load_operations(spec_paths(ops))] if ops else []
    # named: only their older versions go, never another operation's or service's build
    only = {VERSIONED_NAME.match(k)["op"] for k in keep} if specs else None  # type: ignore[index]
    found = collect_generated(common.client(url), keep, dry_run=dry_run, only=only)
    if as_json:
        common.emit_json([c.as_dict() for c in found])
        return
    verb = "would delete" if dry_run else "deleted"
    for c in found:
        gone = ", ".join(c.deleted) or "nothing"
        others = f"{c.others} other {'library' if c.others == 1 else 'libraries'}"
        unnamed = f", {len(c.unnamed)} of luapipe's not named" if c.unnamed else ""
        click.echo(
            f"{c.node}: {verb} {gone}; kept {common.plural(len(c.kept), 'current version')}; "
            f"left {others} alone (not luapipe's){unnamed}"
        )


def _is_built(path: Path) -> bool:
    from luapipe.scripts.buildfiles import built_library_name

    return built_library_name(path) is not None


def _built_name(path: str) -> str:
    from luapipe.scripts.buildfiles import built_library_name

    if not Path(path).is_file():
        common.fail(f"{path}: no such file (the library luapipe functions build wrote)")
    name = built_library_name(Path(path))
    if name is None:
        common.fail(f"{path}: not a library built by luapipe functions build")
    return name


COMMANDS = (generate, verify_cmd, functions)
