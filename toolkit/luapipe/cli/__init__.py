"""The ``luapipe`` command: a thin click shell over the library.

Each command parses options, calls one library function and renders the result; the main
group (:class:`LuapipeGroup`) is the one place that turns a
:class:`~luapipe.errors.LuapipeError` into one line on stderr and exit code 1 (click's usage
errors exit 2), and an interrupt (Ctrl-C, SIGTERM, SIGHUP) into one line naming what it
stopped and exit code 130 (143, 129). The commands live by job: :mod:`.scripts` (scripts, deploy),
:mod:`.operations` (generate, verify), :mod:`.bench` (bench, report, demo). Only this
package imports click or prints.
"""

from __future__ import annotations

import select
import signal
import sys
import threading
from typing import Any

import click
import redis.exceptions

from luapipe._entry import NAMES, exit_interrupted
from luapipe.bench import running
from luapipe.cli import bench, operations, scripts
from luapipe.cli._common import CLUSTER_KEY, INTERRUPT, URL_KEY, BadUrl, fail
from luapipe.errors import LuapipeError, mask_url, printable_url, translate

__all__ = ["LuapipeGroup", "OneLineUsage", "main"]


class OneLineUsage(click.UsageError):
    """A usage error as one line, like every other error (exit code 2): click's own is
    three (``Usage: ...``, ``Try '... --help' for help.``, ``Error: ...``)."""

    def show(self, file: Any = None) -> None:
        where = f" (see {self.ctx.command_path} --help)" if self.ctx is not None else ""
        click.echo(f"error: {mask_url(self.format_message())}{where}", err=True)


def _one_line(exc: click.UsageError) -> click.UsageError:
    if isinstance(exc, OneLineUsage | BadUrl | click.exceptions.NoArgsIsHelpError):
        return exc  # one line already, or the help a bare group prints
    return OneLineUsage(exc.format_message(), ctx=exc.ctx)


class LuapipeGroup(click.Group):
    """The main group: every command's errors become one masked line and exit code 1
    (usage errors: 2), and an interrupt at any moment one line and exit code 130 (143)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        restore = _take_signals()
        try:
            return super().main(*args, **kwargs)
        finally:
            restore()

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # the main group's own options
            raise _one_line(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        _INTERRUPT["unwind"] = True  # a command runs: an interrupt stops what it started
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a command's options and arguments
            raise _one_line(exc) from None
        except KeyboardInterrupt:
            _interrupted()
        except LuapipeError as exc:
            fail(str(exc))
        except redis.exceptions.RedisClusterException as exc:  # not translated by the library
            url = ctx.meta.get(URL_KEY)
            where = printable_url(url) if url else "the server"
            fail(f"cannot use {where} as a Redis Cluster: {exc}")
        except redis.exceptions.RedisError as exc:  # a library path that did not translate
            url = ctx.meta.get(URL_KEY)
            fail(str(translate(exc, where=printable_url(url) if url else "", sent=True)))
        except BrokenPipeError as exc:
            if _stdout_gone():  # output piped into `head`
                sys.stderr.close()
                sys.exit(0)
            # another pipe or socket: a failure, never a silent exit 0
            fail(f"a pipe or connection luapipe was writing to was closed ({exc})")
        except OSError as exc:  # files the user named
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}")
        except MemoryError:  # a file or a value larger than this machine can hold
            fail("out of memory: a file or a value too large for this machine")
        finally:
            _INTERRUPT["unwind"] = False


def _stdout_gone() -> bool:
    """Whether stdout is a pipe whose reader has gone (``luapipe ... | head``), as opposed
    to a pipe or socket of luapipe's own (the delay proxy's control pipe...)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & (select.POLLERR | select.POLLHUP) for _, events in poller.poll(0))


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


_INTERRUPT = INTERRUPT


def _on_signal(signum: int, frame: Any) -> None:
    # A second signal must not cut the clean-up short (stopping the private server).
    for sig in NAMES:
        signal.signal(sig, signal.SIG_IGN)
    _INTERRUPT.update(signum=signum, running=running.now())
    if not _INTERRUPT.get("unwind"):  # parsing the command line, or exiting: click would
        exit_interrupted(signum)  # print "Aborted!" and exit 1 for a KeyboardInterrupt
    if running.defer_interrupt(lambda: _INTERRUPT.update(running=running.now())):
        return  # inside a fork: raised when it is done (what runs then is what it stops)
    raise KeyboardInterrupt


def _take_signals() -> Any:
    """SIGTERM (a CI cancel, ``timeout``) and SIGHUP (the terminal closed) unwind like
    Ctrl-C, so every context manager stops what it started: the private redis-server, the
    RTT proxy, the benchmark's workers; the handler notes what was running, for the one
    line :func:`_interrupted` prints. Returns what gives the previous handlers back
    (luapipe._entry's, for the interpreter's exit)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _INTERRUPT.clear()
    previous = {sig: signal.signal(sig, _on_signal) for sig in NAMES}
    return lambda: [signal.signal(sig, h) for sig, h in previous.items()]


def _interrupted() -> None:
    """One line naming what the interrupt stopped (everything it had started, unwound by
    then), and exit code 128 + the signal: 130 for Ctrl-C, 143 for SIGTERM, 129 for SIGHUP."""
    signum = _INTERRUPT.get("signum", signal.SIGINT)
    was = _INTERRUPT.get("running", [])
    left = running.now()  # still running after the clean-up: say so, never claim it stopped
    done = [w for w in was if w not in left]
    what = ""
    if done:
        what += f"; stopped {running.describe(done)}"
    if left:
        what += f"; could not stop {running.describe(left)}"
    exit_interrupted(signum, what)


for _command in (*scripts.COMMANDS, *operations.COMMANDS, *bench.COMMANDS):
    main.add_command(_command)
