"""luapipe's own tests on the plugin's fixtures (skipped unless pytest loaded the plugin:
its ``pytest11`` entry point, or ``-p luapipe.pytest_plugin``; ``tests/plugin/test_plugin.py``
also runs this file in an inner pytest with the plugin on)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis
import redis.asyncio

from luapipe import pytest_plugin

if not pytest_plugin.is_active():
    pytest.skip("the luapipe pytest plugin is not loaded", allow_module_level=True)

from luapipe.pytest_plugin import Chaos, ScriptRuns
from luapipe.scripts.registry import ScriptRegistry


@pytest.mark.luapipe_both
def test_both_backends(
    luapipe_client: redis.Redis, luapipe_registry: ScriptRegistry, luapipe_backend: str
) -> None:
    assert "check_and_decr" in luapipe_registry.names()
    luapipe_client.set("stock", 3)
    assert luapipe_registry.call(luapipe_client, "check_and_decr", keys=["stock"], args=[2]) == 1
    print(f"backend={luapipe_backend}")


def test_flush_between_queue_and_execute_runs_once(
    luapipe_redis: redis.Redis,
    luapipe_registry: ScriptRegistry,
    luapipe_runs: ScriptRuns,
    luapipe_chaos: Chaos,
) -> None:
    luapipe_redis.set("stock", 10)
    with luapipe_registry.pipeline(luapipe_redis) as p:
        p.call("check_and_decr", keys=["stock"], args=[1]).execute()
        p.call("check_and_decr", keys=["stock"], args=[1]).incr("plain")
        luapipe_chaos.flush_scripts()
        with luapipe_runs.expect(1):
            assert p.execute() == [8, 1]
    assert luapipe_runs.calls("script|load") == 1  # the flushed call came back as EVAL
    assert luapipe_runs.calls("eval") == 1


def test_failover_between_queue_and_execute_runs_once(
    luapipe_redis: redis.Redis,
    luapipe_registry: ScriptRegistry,
    luapipe_runs: ScriptRuns,
    luapipe_chaos: Chaos,
) -> None:
    luapipe_redis.set("stock", 10)
    with luapipe_registry.pipeline(luapipe_redis) as p:
        p.call("check_and_decr", keys=["stock"], args=[1]).execute()
        p.call("check_and_decr", keys=["stock"], args=[1])
        luapipe_chaos.failover()
        with luapipe_runs.expect(1):
            assert p.execute() == [8]


def test_the_helper_catches_a_double_run(
    luapipe_redis: redis.Redis, luapipe_runs: ScriptRuns
) -> None:
    liar = luapipe_redis.register_script(
        "redis.call('INCR', 'x') return redis.error_reply('NOSCRIPT fake')"
    )
    luapipe_redis.script_load(liar.script)
    with pytest.raises(redis.exceptions.NoScriptError):
        liar()
    assert luapipe_redis.get("x") == b"2"  # redis-py took the script's error for a miss
    with pytest.raises(AssertionError, match="expected 1 script run"), luapipe_runs.expect(1):
        luapipe_redis.eval("return 1", 0)
        luapipe_redis.eval("return 2", 0)


@pytest.mark.luapipe_both
def test_async_on_both(
    luapipe_async: Callable[..., redis.asyncio.Redis],
    luapipe_registry: ScriptRegistry,
    luapipe_client: redis.Redis,
) -> None:
    async def main() -> list[int]:
        c = luapipe_async()
        try:
            await c.set("stock", 5)
            return [
                await luapipe_registry.call(c, "check_and_decr", keys=["stock"], args=[2])
                for _ in range(3)
            ]
        finally:
            await c.aclose()

    assert asyncio.run(main()) == [3, 1, -1]
    assert luapipe_client.get("stock") == b"1"


@pytest.mark.luapipe_both
def test_run_counts_skip_on_fake(luapipe_backend: str, request: pytest.FixtureRequest) -> None:
    if luapipe_backend == "fake":
        with pytest.raises(pytest.skip.Exception, match="real server only"):
            request.getfixturevalue("luapipe_runs")
    else:
        assert request.getfixturevalue("luapipe_runs").scripts() == 0
