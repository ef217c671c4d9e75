"""README.md documents the whole command line (as sqlite-utils' docs test does): every
command and subcommand, found by walking the click group, and every long option."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from luapipe.cli import main

from ..conftest import ROOT

README = (ROOT / "README.md").read_text()


def _commands(cmd: click.Command, path: tuple[str, ...]) -> Iterator[tuple[str, click.Command]]:
    yield " ".join(path), cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _commands(sub, (*path, name))


COMMANDS = dict(_commands(main, ("luapipe",)))


def test_the_walk_finds_nested_commands() -> None:
    assert {"luapipe", "luapipe scripts", "luapipe scripts list", "luapipe bench"} <= set(COMMANDS)


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_every_command_is_in_the_readme(path: str) -> None:
    assert re.search(rf"`{re.escape(path)}\b", README), f"README.md never shows `{path}`"


@pytest.mark.parametrize(
    ("path", "option"),
    sorted(
        (path, opt)
        for path, cmd in COMMANDS.items()
        for param in cmd.params
        if isinstance(param, click.Option)
        for opt in (*param.opts, *param.secondary_opts)
        if opt.startswith("--") and opt != "--help"
    ),
)
def test_every_long_option_is_in_the_readme(path: str, option: str) -> None:
    assert re.search(rf"{re.escape(option)}(?![\w-])", README), (
        f"README.md never mentions {option} (of `{path}`)"
    )
