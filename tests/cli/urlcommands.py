"""Every command that takes ``--url``, found by walking the click group (as test_docs.py
does), with the arguments that make it run: a new command is covered by the tests that use
this without anyone listing it. One that needs arguments of its own gets an entry in
:data:`EXTRA` (until then its usage error fails those tests: three lines, not one)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import click
from click.testing import CliRunner, Result

from luapipe.cli import main

__all__ = [
    "EXTRA",
    "SCRIPT",
    "WAYS",
    "argv",
    "asks",
    "invoke",
    "prepare",
    "url_commands",
    "uses_redis_url",
]

#: the one script the scripts commands load and call (``scripts_lua/one.lua`` in the cwd)
SCRIPT = "-- @key k\n-- @arg [v]\nreturn redis.call('INCR', KEYS[1])\n"

#: arguments a command needs besides ``--url``; ``{dir}`` is the test's working directory
EXTRA: dict[str, list[str]] = {
    "scripts call": ["one", "-k", "k"],
    "scripts flush": ["--yes"],
    "verify": ["reserve_stock", "--cases", "1"],
    "functions verify": ["scripts_lua", "--library", "app", "--cases", "1"],
    "bench": ["--duration", "0.05", "--warmup", "0", "--rounds", "1", "--no-bystander"],
    "demo": ["--duration", "0.01", "--out", "{dir}/demo-out"],
}


def _walk(cmd: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _walk(sub, (*path, name))


def _url_option(cmd: click.Command) -> click.Option | None:
    for p in cmd.params:
        if isinstance(p, click.Option) and "--url" in p.opts:
            return p
    return None


def url_commands() -> dict[str, click.Command]:
    """``{"scripts status": command, ...}``: every command with a ``--url`` option."""
    return {path: cmd for path, cmd in _walk(main, ()) if path and _url_option(cmd)}


def uses_redis_url(cmd: click.Command) -> bool:
    """Whether the command falls back to ``$REDIS_URL`` (bench, demo, verify never do)."""
    option = _url_option(cmd)
    return (
        option is not None
        and "$REDIS_URL" in (option.help or "")
        and "not used" not in (option.help or "")
    )


def prepare(directory: Path) -> None:
    """The working directory the commands run in: ``scripts_lua/one.lua``."""
    (directory / "scripts_lua").mkdir(exist_ok=True)
    (directory / "scripts_lua" / "one.lua").write_text(SCRIPT)


#: the ways every command takes a URL: on the command line, or kept off it (a file, stdin,
#: an environment variable); and the mistake of giving those two the URL itself
WAYS = ("--url", "--url-file", "--url-file -", "--url-env", "--url-file URL", "--url-env URL")
#: where ``--url-file`` and ``--url-env`` find the URL
URL_FILE = "redis.url"
URL_ENV = "LUAPIPE_TEST_URL"


def argv(
    path: str, directory: Path, url: str | None, *, yes: bool = True, way: str = "--url"
) -> list[str]:
    """The command line; ``yes=False`` leaves out ``--yes`` (the command then asks);
    ``way`` says how the URL is given (``--url-file``: in ``directory``/redis.url, which
    :func:`invoke` writes; ``--url-env``: in $LUAPIPE_TEST_URL)."""
    extra = [a.format(dir=directory) for a in EXTRA.get(path, []) if yes or a != "--yes"]
    given = {
        "--url": ["--url", url],
        "--url-file": ["--url-file", str(directory / URL_FILE)],
        "--url-file -": ["--url-file", "-"],
        "--url-env": ["--url-env", URL_ENV],
        "--url-file URL": ["--url-file", url or ""],
        "--url-env URL": ["--url-env", url or ""],
    }[way]
    return [*path.split(), *extra, *(given if url is not None else [])]


def asks(cmd: click.Command) -> bool:
    """Whether the command asks a question unless given ``--yes`` (scripts flush)."""
    return any(isinstance(p, click.Option) and "--yes" in p.opts for p in cmd.params)


def invoke(
    path: str,
    directory: Path,
    url: str | None,
    env: dict[str, str] | None = None,
    *,
    yes: bool = True,
    way: str = "--url",
) -> Result:
    """Run ``luapipe PATH ... --url URL`` in-process, in ``directory`` (``url=None``: the
    URL comes from ``env``; ``way``: how the URL is given, one of :data:`WAYS`)."""
    here = os.getcwd()
    os.chdir(directory)
    stdin = None
    if url is not None and way == "--url-file":
        (directory / URL_FILE).write_text(url + "\n")
    elif url is not None and way == "--url-file -":
        stdin = url + "\n"
    elif url is not None and way == "--url-env":
        env = {**(env or {}), URL_ENV: url}
    try:
        command = argv(path, directory, url, yes=yes, way=way)
        return CliRunner().invoke(main, command, env=env, input=stdin)
    finally:
        os.chdir(here)
