"""Where the ``luapipe`` command starts (its console script, and ``python -m luapipe``).

Its first act is to take Ctrl-C (SIGINT), SIGTERM and SIGHUP, before the command line's
modules are imported (~0.5 s, ~1 s on a busy machine): an interrupt then ends in one line
and exit code 130 (143 for SIGTERM, 129 for SIGHUP), never a traceback from inside an
import. Nothing has started by then, so there is nothing to stop. Once the command runs,
:mod:`luapipe.cli` takes the signals over (and hands them back when it is done, for the
interpreter's exit).

This module imports nothing of luapipe's at its top (``import luapipe`` itself is cheap:
its public names are imported on first use), and holds the words every interrupt line
shares.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

__all__ = ["NAMES", "exit_interrupted", "main"]

#: how a line names the signal that interrupted the command (SIGHUP: the terminal closed, or
#: ``kill -HUP``; by default it ended luapipe at once, leaving the private redis-server,
#: which ignores it, running)
NAMES: dict[int, str] = {
    signal.SIGINT: "Ctrl-C (SIGINT)",
    signal.SIGTERM: "SIGTERM",
    signal.SIGHUP: "SIGHUP",
}


def exit_interrupted(signum: int, what: str = "") -> Any:
    """Print ``error: interrupted by Ctrl-C (SIGINT)`` (then ``what``, e.g. ``; stopped the
    private redis-server (pid 12)``) on stderr and exit 128 + the signal."""
    for sig in NAMES:  # a second signal must not cut this line short
        signal.signal(sig, signal.SIG_IGN)
    name = NAMES.get(signum, f"signal {signum}")
    try:
        sys.stderr.write(f"error: interrupted by {name}{what}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: the exit code still says it
        pass
    sys.exit(128 + int(signum))


def _on_signal(signum: int, frame: Any) -> None:
    exit_interrupted(signum)


def main() -> None:
    """The ``luapipe`` command."""
    for sig in NAMES:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # as Python does for SIGINT
            signal.signal(sig, _on_signal)
    from luapipe.cli import main as command

    command(prog_name="luapipe")
