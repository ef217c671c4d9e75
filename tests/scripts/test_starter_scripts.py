"""The bundled script library behaves as its headers say, on a real server."""

from __future__ import annotations

import time

import pytest
import redis

from luapipe.errors import ScriptRuntimeError
from luapipe.scripts.registry import ScriptRegistry

from ..conftest import SCRIPTS_DIR


@pytest.fixture(scope="module")
def reg() -> ScriptRegistry:
    return ScriptRegistry.from_directory(SCRIPTS_DIR)


def test_every_script_documents_keys_args_and_description(reg: ScriptRegistry) -> None:
    for s in reg:
        assert s.description, s.name
        assert s.keys is not None and s.args is not None, s.name
        assert s.returns, s.name


def test_rate_limit_fixed_window(r: redis.Redis, reg: ScriptRegistry) -> None:
    got = [reg.call(r, "rate_limit_fixed", keys=["rl"], args=[3, 60])[:2] for _ in range(5)]
    assert got == [[1, 1], [1, 2], [1, 3], [0, 4], [0, 5]]
    assert 0 < r.ttl("rl") <= 60
    r.persist("rl")  # a counter that lost its expiry gets it back
    reg.call(r, "rate_limit_fixed", keys=["rl"], args=[3, 60])
    assert r.ttl("rl") > 0


def test_rate_limit_sliding_window(r: redis.Redis, reg: ScriptRegistry) -> None:
    t = 1_000_000
    calls = [
        reg.call(r, "rate_limit_sliding", keys=["log"], args=[t + i, 1000, 2, f"m{i}"])
        for i in range(3)
    ]
    assert calls == [[1, 1], [1, 2], [0, 2]]  # the refused hit is not recorded
    later = reg.call(r, "rate_limit_sliding", keys=["log"], args=[t + 1000, 1000, 2, "m9"])
    assert later == [1, 2]  # the first hit slid out of the window
    assert reg.call(r, "window_count", keys=["log"], args=[t + 1000, 1000]) == 2


def test_check_and_decr(r: redis.Redis, reg: ScriptRegistry) -> None:
    r.set("stock", 5)
    assert reg.call(r, "check_and_decr", keys=["stock"], args=[3]) == 2
    assert reg.call(r, "check_and_decr", keys=["stock"], args=[3]) == -1
    assert r.get("stock") == b"2"
    assert reg.call(r, "check_and_decr", keys=["missing"], args=[1]) == -1
    with pytest.raises(ScriptRuntimeError, match="positive integer"):
        reg.call(r, "check_and_decr", keys=["stock"], args=[0])


def test_compare_and_set(r: redis.Redis, reg: ScriptRegistry) -> None:
    assert reg.call(r, "compare_and_set", keys=["k"], args=["x", "1"]) == 0  # absent != "x"
    assert reg.call(r, "compare_and_set", keys=["k"], args=["", "1"]) == 1  # create if absent
    assert reg.call(r, "compare_and_set", keys=["k"], args=["", "2"]) == 0
    assert reg.call(r, "compare_and_set", keys=["k"], args=["1", "2"]) == 1
    r.expire("k", 100)
    assert reg.call(r, "compare_and_set", keys=["k"], args=["2", "3"]) == 1
    assert r.get("k") == b"3" and r.ttl("k") > 0  # TTL kept


def test_capped_push(r: redis.Redis, reg: ScriptRegistry) -> None:
    assert reg.call(r, "capped_push", keys=["l"], args=[3, "a", "b"]) == 2
    assert reg.call(r, "capped_push", keys=["l"], args=[3, "c", "d"]) == 3
    assert r.lrange("l", 0, -1) == [b"d", b"c", b"b"]


def test_idempotent_incr(r: redis.Redis, reg: ScriptRegistry) -> None:
    first = reg.call(r, "idempotent_incr", keys=["n", "seen:req1"], args=[5, 60])
    retry = reg.call(r, "idempotent_incr", keys=["n", "seen:req1"], args=[5, 60])
    other = reg.call(r, "idempotent_incr", keys=["n", "seen:req2"], args=[5, 60])
    assert (first, retry, other) == ([5, 1], [5, 0], [10, 1])
    assert 0 < r.ttl("seen:req1") <= 60


def test_window_count_is_read_only_and_uses_evalsha_ro(r: redis.Redis, reg: ScriptRegistry) -> None:
    reg.load(r)
    r.config_resetstat()
    reg.call(r, "window_count", keys=["log"], args=[int(time.time() * 1000), 1000])
    assert "cmdstat_evalsha_ro" in r.info("commandstats")
