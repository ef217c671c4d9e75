"""A private Redis Cluster on loopback: N primaries (and replicas), stopped by PID.

::

    with EmbeddedCluster(primaries=3, replicas=1) as cluster:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.ports[0])

Each node is an :class:`EmbeddedRedis` started with ``--cluster-enabled yes``; the cluster
is formed by ``redis-cli --cluster create`` and is ready when every node reports
``cluster_state:ok`` and agrees on the slot map.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

import redis

from luapipe.bench.server import EmbeddedRedis, find_redis_cli, find_redis_server
from luapipe.errors import EnvironmentProblem

__all__ = ["EmbeddedCluster"]


class EmbeddedCluster:
    """Start ``primaries`` x (1 + ``replicas``) nodes and form a cluster."""

    def __init__(self, primaries: int = 3, replicas: int = 0, *, node_timeout_ms: int = 2000):
        self.primaries = primaries
        self.replicas = replicas
        self.node_timeout_ms = node_timeout_ms
        self.directory = tempfile.mkdtemp(prefix="luapipe-cluster-")
        self.nodes: list[EmbeddedRedis] = []
        self.startup_seconds = 0.0

    @property
    def ports(self) -> list[int]:
        return [int(n.port) for n in self.nodes if n.port is not None]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def start(self) -> EmbeddedCluster:
        t0 = time.monotonic()
        find_redis_server()
        cli = find_redis_cli()
        try:
            for i in range(self.primaries * (1 + self.replicas)):
                node = EmbeddedRedis(
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        f"nodes-{i}.conf",
                        "--cluster-node-timeout",
                        str(self.node_timeout_ms),
                        "--cluster-require-full-coverage",
                        "no",
                    ],
                    directory=f"{self.directory}/n{i}",
                )
                Path(node.directory).mkdir(parents=True, exist_ok=True)
                node.start()
                self.nodes.append(node)
            addresses = [f"127.0.0.1:{p}" for p in self.ports]
            proc = subprocess.run(
                [cli, "--cluster", "create", *addresses, "--cluster-replicas",
                 str(self.replicas), "--cluster-yes"],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip
            if proc.returncode != 0:
                lines = (proc.stdout + proc.stderr).strip().splitlines()
                raise EnvironmentProblem(f"redis-cli --cluster create failed: {lines[-1:]}")
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        expected_replicas = self.primaries * self.replicas
        while time.monotonic() < deadline:
            if all(self._node_ok(p, expected_replicas) for p in self.ports):
                return
            time.sleep(0.05)
        raise EnvironmentProblem(f"cluster on ports {self.ports} not ready after {timeout:.0f} s")

    @staticmethod
    def _node_ok(port: int, expected_replicas: int) -> bool:
        with redis.Redis(port=port, socket_timeout=1) as c:
            try:
                if c.cluster("info")["cluster_state"] != "ok":
                    return False
                slots = c.execute_command("CLUSTER", "SLOTS")
                covered = sum(int(s[1]) - int(s[0]) + 1 for s in slots)
                replicas = sum(len(s) - 3 for s in slots)
                return covered == 16384 and replicas >= expected_replicas
            except redis.RedisError:
                return False

    def client(self, **kwargs: object) -> redis.cluster.RedisCluster:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.ports[0], **kwargs)  # type: ignore[arg-type]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nodes = []
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
