"""The ``luapipe`` command: a thin click shell over the library.

Each command parses options, calls one library function, renders the result and turns a
:class:`~luapipe.errors.LuapipeError` into one line on stderr and exit code 1 (click's
usage errors exit 2). This is the only module that imports click or prints.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from luapipe.errors import LuapipeError, mask_url

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> None:
    click.echo(f"error: {mask_url(message)}", err=True)
    sys.exit(1)


def handle_errors(func: F) -> F:
    """Turn library errors into one masked line and exit code 1 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LuapipeError as exc:
            fail(str(exc))
        except OSError as exc:  # files the user named
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}")

    return wrapper  # type: ignore[return-value]


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="luapipe")
def main() -> None:
    """luapipe: Redis Lua scripts vs pipelines: deploy, generate, verify and benchmark."""


# === script commands (scripts, deploy) ===

# === generation commands (generate, verify) ===

# === bench commands (bench, report) ===
