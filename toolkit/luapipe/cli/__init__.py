"""The ``luapipe`` command: a thin click shell over the library.

Each command parses options, calls one library function and renders the result; the main
group (:class:`LuapipeGroup`) is the one place that turns a
:class:`~luapipe.errors.LuapipeError` into one line on stderr and exit code 1 (click's usage
errors exit 2). The commands live by job: :mod:`.scripts` (scripts, deploy),
:mod:`.operations` (generate, verify), :mod:`.bench` (bench, report, demo). Only this
package imports click or prints.
"""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

import click
import redis.exceptions

from luapipe.cli import bench, operations, scripts
from luapipe.cli._common import CLUSTER_KEY, URL_KEY, fail
from luapipe.errors import LuapipeError

__all__ = ["LuapipeGroup", "main"]


class LuapipeGroup(click.Group):
    """The main group: every command's errors become one masked line and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except LuapipeError as exc:
            fail(str(exc))
        except redis.exceptions.RedisClusterException as exc:  # not translated by the library
            fail(f"cannot use {ctx.meta.get(URL_KEY, 'the server')} as a Redis Cluster: {exc}")
        except BrokenPipeError:  # output piped into `head`
            sys.stderr.close()
            sys.exit(0)
        except OSError as exc:  # files the user named
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}")


@click.group(cls=LuapipeGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="luapipe")
@click.option(
    "--cluster/--no-cluster",
    default=None,
    help="Treat --url as a Redis Cluster node, or as a single server [default: ask it].",
)
@click.pass_context
def main(ctx: click.Context, cluster: bool | None) -> None:
    """luapipe: Redis Lua scripts vs pipelines: deploy, generate, verify and benchmark."""
    ctx.meta[CLUSTER_KEY] = cluster
    _sigterm_like_ctrl_c(ctx)


def _on_sigterm(signum: int, frame: Any) -> None:
    # A second SIGTERM must not cut the clean-up short (stopping the private server).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _sigterm_like_ctrl_c(ctx: click.Context) -> None:
    """SIGTERM (a CI cancel, ``timeout``) unwinds like Ctrl-C, so every context manager stops
    what it started: the private redis-server, the RTT proxy, the benchmark's workers."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


for _command in (*scripts.COMMANDS, *operations.COMMANDS, *bench.COMMANDS):
    main.add_command(_command)
