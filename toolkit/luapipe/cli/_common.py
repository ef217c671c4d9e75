"""What every command shares: the one line for an error, JSON output, the common options,
and the client built from ``--url`` (the only place the CLI builds one)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

import click
import redis

from luapipe.errors import mask_url
from luapipe.scripts.registry import ScriptRegistry, bundled_scripts_dir
from luapipe.wire.connect import client_from_url, resolve_url

__all__ = [
    "CLUSTER_KEY",
    "URL_KEY",
    "bench_server",
    "client",
    "dir_option",
    "emit_json",
    "fail",
    "json_option",
    "name_width",
    "plural",
    "registry",
    "registry_dir",
    "url_option",
]

CLUSTER_KEY = "luapipe.cluster"  # ctx.meta: --cluster/--no-cluster of the main group
URL_KEY = "luapipe.url"  # ctx.meta: the (masked on output) URL a command connected to


def fail(message: str) -> NoReturn:
    """One masked line on stderr, exit code 1."""
    click.echo(f"error: {mask_url(message)}", err=True)
    sys.exit(1)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def client(url: str | None) -> redis.Redis:
    """The client for ``--url`` (else ``$REDIS_URL``, else localhost), cluster or not."""
    ctx = click.get_current_context(silent=True)
    resolved = resolve_url(url)
    cluster = None
    if ctx is not None:
        cluster = ctx.meta.get(CLUSTER_KEY)
        ctx.meta[URL_KEY] = resolved
    return client_from_url(resolved, cluster=cluster)


def registry(directory: str | None, *, strict: bool = True) -> ScriptRegistry:
    """``--dir``, else ./scripts_lua, else the bundled library (``strict=False``: broken
    scripts are set aside in ``problems``)."""
    if directory is None:
        local = Path("scripts_lua")
        return ScriptRegistry.from_directory(local if local.is_dir() else None, strict=strict)
    return ScriptRegistry.from_directory(directory, strict=strict)


def registry_dir() -> Path:
    local = Path("scripts_lua")
    return local if local.is_dir() else bundled_scripts_dir()


def name_width(names: Iterable[str]) -> int:
    """The name column: as wide as the longest name (at least 20), so columns line up."""
    return max([20, *(len(n) for n in names)])


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Scripts directory [default: ./scripts_lua, else the bundled library].",
)
url_option = click.option(
    "--url", default=None, help="Redis URL [default: $REDIS_URL or redis://127.0.0.1:6379/0]."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def bench_server(url: str | None) -> Any:
    """The server to benchmark: ``--url``, else a private embedded redis-server.

    Never REDIS_URL: that names the server the other commands deploy to, often one with real
    data, and a benchmark or a verify run writes to the server it is given."""
    import contextlib

    from luapipe.bench.server import EmbeddedRedis

    if url:
        return contextlib.nullcontext(url)

    @contextlib.contextmanager
    def embedded() -> Any:
        with EmbeddedRedis() as server:
            click.echo(
                f"started a private redis-server on {server.address} (pid {server.pid})", err=True
            )
            yield server.url

    return embedded()
