"""Job 2 on the command line: ``luapipe generate`` and ``luapipe verify``."""

from __future__ import annotations

import sys

import click
import redis

from luapipe.cli import _common as common

__all__ = ["COMMANDS"]


@click.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
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
@click.argument("specs", nargs=-1, required=True)
@click.option(
    "--url",
    default=None,
    callback=common.checked_url(),
    help="Redis URL [default: a private embedded server; REDIS_URL is not used].",
)
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
    """The Redis Function libraries luapipe generates (the function form of a spec)."""


@functions.command("gc")
@click.argument("specs", nargs=-1)
@common.url_option
@click.option("--dry-run", is_flag=True, help="Say what would be deleted; delete nothing.")
@common.json_option
def functions_gc(specs: tuple[str, ...], url: str | None, dry_run: bool, as_json: bool) -> None:
    """Delete old generated libraries (luapipe_<op>_<hash>) on every primary, keeping the
    current version of each SPEC|NAME. A team's own libraries are never touched."""
    from luapipe.operations.catalogue import spec_paths
    from luapipe.operations.generate import library_name
    from luapipe.operations.libraries import collect_generated
    from luapipe.operations.spec import load_operations

    keep = [library_name(op) for op in load_operations(spec_paths(specs))] if specs else []
    found = collect_generated(common.client(url), keep, dry_run=dry_run)
    if as_json:
        common.emit_json([c.as_dict() for c in found])
        return
    verb = "would delete" if dry_run else "deleted"
    for c in found:
        gone = ", ".join(c.deleted) or "nothing"
        others = f"{c.others} other {'library' if c.others == 1 else 'libraries'}"
        click.echo(
            f"{c.node}: {verb} {gone}; kept {common.plural(len(c.kept), 'current version')}; "
            f"left {others} alone (not luapipe's)"
        )


COMMANDS = (generate, verify_cmd, functions)
