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


COMMANDS = (generate, verify_cmd)
