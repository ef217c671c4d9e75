"""What every command shares: the one line for an error, JSON output, the common options,
the ``--url`` check (an invalid URL is a usage error, exit code 2, in every command), the
ways to give a URL without putting its password on the command line (``--url-file``,
``--url-env``), and the client built from it (the only place the CLI builds one)."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import stat
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NoReturn

import click
import redis

from luapipe.bench.runner import NO_TLS
from luapipe.errors import LuapipeError, mask_url, printable_url
from luapipe.scripts.registry import ScriptRegistry, bundled_scripts_dir
from luapipe.wire.connect import SCHEMES, client_from_url, resolve_url, url_problem

__all__ = [
    "CLUSTER_KEY",
    "TCP_SCHEMES",
    "URL_KEY",
    "BadUrl",
    "bench_server",
    "check_url",
    "checked_url",
    "client",
    "dir_option",
    "emit_json",
    "INTERRUPT",
    "fail",
    "finite_files",
    "interrupted",
    "json_option",
    "name_width",
    "plural",
    "registry",
    "registry_dir",
    "stdin_taken",
    "url_given",
    "url_option",
    "url_options",
]

CLUSTER_KEY = "luapipe.cluster"  # ctx.meta: --cluster/--no-cluster of the main group
URL_KEY = "luapipe.url"  # ctx.meta: the (masked on output) URL a command connected to
URL_GIVEN_KEY = "luapipe.url-given"  # ctx.meta: how the URL was given, as options to repeat
STDIN_KEY = "luapipe.stdin"  # ctx.meta: the option that read stdin already


#: the signal that interrupted the command, what was running when it arrived, and whether
#: a command runs ("unwind": the interrupt unwinds it; else nothing has started, or all has
#: ended, and the line is printed at once); filled by the main group's signal handler
INTERRUPT: dict[str, Any] = {}


def interrupted() -> bool:
    """Whether Ctrl-C or SIGTERM has arrived (a question click turned it into an Abort)."""
    return "signum" in INTERRUPT


def fail(message: str) -> NoReturn:
    """One masked line on stderr, exit code 1."""
    click.echo(f"error: {mask_url(message)}", err=True)
    sys.exit(1)


class BadUrl(click.UsageError):
    """An invalid ``--url`` (or ``$REDIS_URL``): a usage error (exit code 2) in every
    command, printed as one line like every other error."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {mask_url(self.format_message())}", err=True)


#: the schemes bench and demo take: plain TCP, as their PING probes and delay proxy speak
#: (not rediss://: see NO_TLS)
TCP_SCHEMES = ("redis://",)


def check_url(url: str, what: str = "--url", schemes: tuple[str, ...] = SCHEMES) -> str:
    """``url`` if redis-py can use it, else :class:`BadUrl` saying why (the URL shown by
    :func:`~luapipe.errors.printable_url`: no password, and no piece of one)."""
    problem = url_problem(url, schemes)
    if problem is not None and url.startswith("rediss://") and "rediss://" not in schemes:
        problem = NO_TLS
    if problem is not None:
        raise BadUrl(f"invalid {what} {printable_url(url)}: {problem}")
    return url


def checked_url(schemes: tuple[str, ...] = SCHEMES) -> Any:
    """A click callback for a ``--url`` option: checked when the options are parsed,
    before the command starts anything."""

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        return check_url(value, schemes=schemes) if value else value

    return callback


def finite_files(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """A click callback for paths luapipe reads whole (specs, results, a lock file): one that
    names a device or a pipe (/dev/zero, a FIFO) is a usage error, never a read that fills
    the memory. A name that is not a path (a catalogue operation) passes."""
    for path in value if isinstance(value, tuple) else (value,):
        try:
            mode = os.stat(path).st_mode if path else None
        except (OSError, ValueError):
            continue  # missing: said by the command, or not a path at all
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise click.BadParameter(
                f"{path} is not a regular file: luapipe reads it whole, and a device or a "
                "pipe may never end"
            )
    return value


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


def client(url: str | None) -> redis.Redis:
    """The client for ``--url`` (else ``$REDIS_URL``, else localhost), cluster or not."""
    ctx = click.get_current_context(silent=True)
    resolved = resolve_url(url)
    if not url:  # $REDIS_URL (the default is valid): checked as --url is
        check_url(resolved, "$REDIS_URL")
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
#: what --url-env takes: the name of an environment variable
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: the longest first line --url-file reads (a URL with TLS options is a few hundred bytes)
URL_FILE_LIMIT = 8192


def url_options(
    help: str = "Redis URL [default: $REDIS_URL or redis://127.0.0.1:6379/0].",
    schemes: tuple[str, ...] = SCHEMES,
) -> Callable[[Any], Any]:
    """``--url URL``, ``--url-file PATH`` and ``--url-env NAME``: one URL given one way, and
    checked before the command starts anything; the command gets it as ``url`` (None when
    none was given). The last two keep a password off the command line, where ``ps`` shows
    it to every user of the machine (and to the benchmark's forked workers' too)."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def command(*args: Any, url_file: str | None, url_env: str | None, **kwargs: Any) -> Any:
            kwargs["url"] = _one_url(kwargs.get("url"), url_file, url_env, schemes)
            return f(*args, **kwargs)

        options = (
            click.option("--url", default=None, callback=checked_url(schemes), help=help),
            click.option(
                "--url-file",
                metavar="PATH",
                default=None,
                help="Read the URL from the first line of PATH ('-': stdin) instead: its "
                "password stays off the command line, where ps shows it.",
            ),
            click.option(
                "--url-env",
                metavar="NAME",
                default=None,
                help="Read the URL from the environment variable NAME instead (e.g. "
                "REDIS_URL): its password stays off the command line.",
            ),
        )
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def _one_url(
    url: str | None, url_file: str | None, url_env: str | None, schemes: tuple[str, ...]
) -> str | None:
    ways = (("--url", url or None), ("--url-file", url_file), ("--url-env", url_env))
    given = [name for name, value in ways if value is not None]
    if len(given) > 1:
        raise BadUrl(f"{' and '.join(given)} exclude each other: give the URL one way")
    ctx = click.get_current_context()
    if url:
        ctx.meta[URL_GIVEN_KEY] = f"--url {shlex.quote(printable_url(url))}"
        return url
    if url_file is not None:
        if "://" in url_file:  # the URL itself, on the command line: never repeated
            raise BadUrl(
                "--url-file takes the path of a file whose first line is the URL, not the URL "
                "(which --url-file keeps off the command line)"
            )
        what = f"--url-file {url_file}" + (" (stdin)" if url_file == "-" else "")
        ctx.meta[URL_GIVEN_KEY] = f"--url-file {shlex.quote(url_file)}"
        if url_file == "-":
            ctx.meta[STDIN_KEY] = "--url-file -"
        return check_url(_first_line(url_file, what), f"URL in {what}", schemes)
    if url_env is not None:
        if not _ENV_NAME.fullmatch(url_env):  # a URL, or a value: never repeated
            raise BadUrl(
                "--url-env takes the name of an environment variable that holds the URL "
                "(such as REDIS_URL), not the URL or a value"
            )
        what = f"--url-env {url_env}"
        ctx.meta[URL_GIVEN_KEY] = f"--url-env {shlex.quote(url_env)}"
        value = os.environ.get(url_env, "").strip()
        if not value:
            raise BadUrl(f"{what}: no such environment variable, or it is empty")
        return check_url(value, f"URL in {what}", schemes)
    return url  # None, or "" (--url "": the default)


def _first_line(path: str, what: str) -> str:
    """The first line of ``path`` (``-``: stdin), without its line end and blanks: read no
    further than :data:`URL_FILE_LIMIT` bytes, and never shown (it holds a password)."""
    if path == "-" and sys.stdin.isatty():  # asked for, and not echoed to the screen
        try:
            raw = click.prompt("Redis URL", hide_input=True, err=True).encode()
        except click.Abort:  # end of input, or Ctrl-C
            if interrupted():
                raise KeyboardInterrupt from None
            raise BadUrl(f"{what}: no URL was typed") from None
        return _first_line_of(raw, what)
    try:
        if path == "-":
            raw = sys.stdin.buffer.readline(URL_FILE_LIMIT + 1)
        else:
            with open(path, "rb") as f:
                raw = f.readline(URL_FILE_LIMIT + 1)
    except OSError as exc:
        raise BadUrl(f"{what}: cannot read it ({exc.strerror or type(exc).__name__})") from None
    return _first_line_of(raw, what)


def _first_line_of(raw: bytes, what: str) -> str:
    if len(raw) > URL_FILE_LIMIT:
        raise BadUrl(
            f"{what}: its first line is longer than {URL_FILE_LIMIT:,} bytes; the file "
            "holds the Redis URL on its first line"
        )
    try:
        line = raw.decode("utf-8-sig").strip()  # a BOM (a Windows editor's) is not the URL
    except UnicodeDecodeError:
        raise BadUrl(
            f"{what}: its first line is not UTF-8 text; write the Redis URL there"
        ) from None
    if not line:
        raise BadUrl(f"{what}: its first line is empty; write the Redis URL there")
    return line


def stdin_taken() -> str:
    """The option that read stdin already (``--url-file -``), or ``""``."""
    ctx = click.get_current_context(silent=True)
    return str(ctx.meta.get(STDIN_KEY, "")) if ctx is not None else ""


def url_given() -> str:
    """How the command was given its URL, as options a user can repeat (``--url-file
    secrets.url``; ``--url`` with the URL as printable_url shows it); ``""`` if none was."""
    ctx = click.get_current_context(silent=True)
    return str(ctx.meta.get(URL_GIVEN_KEY, "")) if ctx is not None else ""


url_option = url_options()
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def bench_server(url: str | None) -> Any:
    """The server to benchmark: ``--url`` (connected to once first, so that a wrong
    password, a refused connection or a server that is not Redis reads as in every other
    command, before anything starts), else a private embedded redis-server.

    Never REDIS_URL: that names the server the other commands deploy to, often one with real
    data, and a benchmark or a verify run writes to the server it is given. A private server
    that stops on its own during the run is reported as such, with its exit status."""
    import contextlib

    from luapipe.bench.server import EmbeddedRedis

    if url:
        client_from_url(url).close()  # a cluster's client too: its refusals read the same
        return contextlib.nullcontext(url)

    @contextlib.contextmanager
    def embedded() -> Any:
        server = EmbeddedRedis()
        info = server.start()
        try:
            click.echo(
                f"started a private redis-server on {info.address} (pid {info.pid})", err=True
            )
            yield info.url
        except (LuapipeError, redis.RedisError, OSError):
            death = server.death()
            if death is None:
                raise
            raise LuapipeError(
                f"the private redis-server on {info.address} (pid {info.pid}) {death} during "
                "the run, which stopped there"
            ) from None
        finally:
            server.stop()

    return embedded()
