"""The delay proxy: adds roughly the configured RTT, keeps byte streams intact and in order."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator

import pytest
import redis

from luapipe.bench.rttproxy import RttProxy, calibrate, measure_ping_rtt_us
from luapipe.bench.server import ServerProcess


@pytest.fixture
def proxy(redis_server: ServerProcess) -> Iterator[RttProxy]:
    p = RttProxy(redis_server.host, redis_server.port).start()
    try:
        yield p
    finally:
        p.stop()


def test_bytes_survive_unchanged_and_in_order(proxy: RttProxy) -> None:
    proxy.set_delay(0.5)
    c = redis.Redis(host=proxy.host, port=proxy.port, protocol=2)
    blob = os.urandom(3_000_000)  # larger than socket buffers: partial sends must work
    c.set("rttproxy:blob", blob)
    assert c.get("rttproxy:blob") == blob
    pipe = c.pipeline(transaction=False)
    for i in range(2000):
        pipe.echo(f"m{i}")
    assert pipe.execute() == [f"m{i}".encode() for i in range(2000)]
    c.close()


def test_connections_are_independent(proxy: RttProxy) -> None:
    proxy.set_delay(0.2)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            c = redis.Redis(host=proxy.host, port=proxy.port, protocol=2)
            for i in range(50):
                assert c.echo(f"{k}:{i}") == f"{k}:{i}".encode()
            c.close()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_adds_roughly_the_delay(proxy: RttProxy, redis_server: ServerProcess) -> None:
    direct = measure_ping_rtt_us(redis_server.host, redis_server.port, 50)
    proxy.set_delay(5.0)
    through = measure_ping_rtt_us(proxy.host, proxy.port, 20)
    added_ms = (through - direct) / 1000.0
    assert 4.0 < added_ms < 10.0  # generous: a behaviour check, not a speed target


def test_calibration_reports_nominal_measured_and_overhead(
    proxy: RttProxy, redis_server: ServerProcess
) -> None:
    cal = calibrate(proxy, redis_server.host, redis_server.port, 2.0)
    assert cal.rtt_ms_nominal == 2.0
    assert 1.0 < cal.rtt_ms_measured < 4.0
    assert cal.proxy_overhead_ms >= 0.0
    assert 0.0 <= cal.delay_ms_setting <= 2.0
    assert cal.error_pct is not None
    zero = calibrate(proxy, redis_server.host, redis_server.port, 0.0)
    assert zero.error_pct is None and zero.delay_ms_setting == 0.0


def test_stop_ends_exactly_its_process(redis_server: ServerProcess) -> None:
    p = RttProxy(redis_server.host, redis_server.port).start()
    pid = p.pid
    p.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    p.stop()  # idempotent
