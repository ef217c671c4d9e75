"""What a failed round trip means, on one server, sync and asyncio alike (``driver``).

- a write that fails halfway through a batch of several commands: those sent before may
  have run, so the caller hears OutcomeUnknown ("nothing ran" would invite a re-send);
- a connection the server closed while it sat idle: nothing was sent on it, so the call
  reconnects and runs (once), never OutcomeUnknown for a call that never ran.
"""

from __future__ import annotations

import pytest
import redis

import luapipe
from luapipe.bench.server import ServerProcess

from ..drivers import Driver, drained, kill_named, stopped, unwritable_size, warmed

#: counts its runs in KEYS[1]; ARGV[1] is ballast
PADDED = luapipe.LuaScript.from_source(
    "padded", "-- @key ran\n-- @arg pad\nreturn redis.call('INCR', KEYS[1])\n"
)


def test_a_failed_write_of_a_multi_command_batch_is_outcome_unknown(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess
) -> None:
    """[script call, SET big] to a frozen server: the call is in the kernel's buffers when the
    write of SET times out, and it runs when the server wakes."""
    reg = luapipe.ScriptRegistry([PADDED])
    client = driver.redis(redis_server.port, socket_timeout=0.25, client_name="victim")
    big = b"x" * unwritable_size()
    # warmed with the big value too: a value of 1 MB or more first asks the node's
    # proto-max-bulk-len, remembered from then on, so the frozen write is the request itself
    warmed(driver, lambda: reg.call(client, "padded", keys=["warm"], args=[big]))
    pipe = reg.pipeline(client)
    pipe.call("padded", keys=["ran"], args=["x"]).set("big", big)
    frozen = stopped(redis_server.pid, at_most=10)
    with frozen, pytest.raises(luapipe.OutcomeUnknown, match="outcome unknown"):
        driver.run(pipe.execute())
    driver.close(client)
    drained(r, "victim")
    assert r.get("ran") == b"1"  # it had run: "nothing ran" would have been a lie


@pytest.mark.parametrize("single", [True, False], ids=["single-connection", "pooled"])
def test_a_connection_closed_while_idle_is_a_clean_reconnect(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess, single: bool
) -> None:
    reg = luapipe.ScriptRegistry([PADDED])
    client = driver.redis(redis_server.port, single_connection_client=single, client_name="idle")
    assert driver.run(reg.call(client, "padded", keys=["ran"], args=["x"])) == 1
    assert kill_named(r, "idle") == 1  # the server closed its socket between two calls
    assert driver.run(reg.call(client, "padded", keys=["ran"], args=["x"])) == 2
    pipe = reg.pipeline(client)
    pipe.call("padded", keys=["ran"], args=["x"])
    assert kill_named(r, "idle") == 1
    assert driver.run(pipe.execute()) == [3]
    assert r.get("ran") == b"3"  # each call ran exactly once
