"""The registry of what a benchmark runs, as the interrupt handler meets it."""

from __future__ import annotations

import signal
import threading

from luapipe.bench import running


def test_an_interrupt_landing_while_something_registers_does_not_hang() -> None:
    """The handler asks running.now() on the main thread; a signal arriving while that
    thread is inside started()/stopped() (holding the registry's lock) waited on itself
    forever with a plain Lock: SIGTERM left the demo hanging instead of exiting 143."""
    seen: list[list[str]] = []
    mine = "the private redis-server (pid 424242)"  # beside the session's own servers

    def handler(signum: int, frame: object) -> None:
        seen.append(running.now())

    def registering() -> None:
        # running._lock held, as started() holds it when the signal lands
        with running.running(mine), running._lock:
            handler(signal.SIGTERM, None)

    worker = threading.Thread(target=registering, daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "the handler waited on the registry's own lock"
    assert len(seen) == 1 and seen[0][-1] == mine
    assert mine not in running.now()
