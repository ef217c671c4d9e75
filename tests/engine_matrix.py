"""The engine matrix: which tests run on every engine, and which engine a test is on.

``make test-engines`` runs ``pytest -m engines`` once per engine (Debian's redis-server
7.0.15, Redis 7.2.6 and Valkey 8.0.1 built by ``make engines``), with ``LUAPIPE_REDIS_SERVER``
and ``LUAPIPE_REDIS_CLI`` naming its binaries; every fixture that starts a server (tests/
conftest.py, luapipe's pytest plugin, the bench launcher) takes them from there. ``make
test`` runs everything on the default engine only.

A test runs on every engine when its file matches a pattern of :data:`EVERY_ENGINE` (a
test id with ``::`` picks one test) or when it is marked ``@pytest.mark.engines``. To add
one: append its file here, or mark the test (or a module, ``pytestmark =
pytest.mark.engines``). The guarantee tests belong here; generation, specs, reports, the
CLI's messages and the benchmark's statistics do not depend on the engine and stay on the
default one (README "Servers tested").
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Any

#: (what it covers, patterns relative to the repository root)
EVERY_ENGINE: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "registry, NOSCRIPT recovery",
        (
            "tests/scripts/test_registry.py",
            "tests/scripts/test_promises.py",
            "tests/scripts/test_aio.py",
            "tests/wire/test_promises.py",
            "tests/wire/test_drivers.py",
        ),
    ),
    (
        "at most once",
        (
            "tests/wire/test_at_most_once.py",
            "tests/wire/test_faults.py",
            "tests/operations/test_fault_forms.py",
        ),
    ),
    (
        "pipelines and transactions",
        (
            "tests/scripts/test_pipeline.py",
            "tests/operations/test_aio_forms.py",
            "tests/operations/test_promises_forms.py",
        ),
    ),
    ("error classes", ("tests/test_errors.py", "tests/wire/test_refusals.py")),
    ("TLS and ACL", ("tests/cli/test_security.py",)),
    (
        "cluster",
        (
            "tests/scripts/test_cluster.py",
            "tests/scripts/test_cluster_calls.py",
            "tests/wire/test_cluster_migration.py",
        ),
    ),
    ("lint targets against their server", ("tests/scripts/test_lint_engines.py",)),
    (
        "Function libraries",
        (
            "tests/scripts/test_function*.py",
            "tests/scripts/test_librar*.py",
            "tests/scripts/test_fcall*.py",
            "tests/scripts/test_real_libraries.py",
        ),
    ),
    ("auto-pipeline", ("tests/wire/test_autopipe*.py",)),
    ("bench smoke test", ("tests/bench/test_bench.py::test_bench_command_end_to_end",)),
)

MARKER = "engines"


def on_every_engine(nodeid: str) -> bool:
    """Whether the test ``nodeid`` (``tests/x.py::test_y[param]``) is in the matrix."""
    path, _, rest = nodeid.partition("::")
    name = rest.split("[", 1)[0]
    for _what, patterns in EVERY_ENGINE:
        for pattern in patterns:
            file_pattern, _, test = pattern.partition("::")
            if fnmatch.fnmatch(path, file_pattern) and (not test or test == name):
                return True
    return False


@dataclass(frozen=True)
class Engine:
    """The server a client talks to: ``family`` "redis" or "valkey", and its version."""

    family: str
    version: tuple[int, ...]

    @property
    def name(self) -> str:
        return f"{self.family}-{'.'.join(map(str, self.version))}"


def engine_of(client: Any) -> Engine:
    """Which engine ``client`` (a redis-py client) is connected to, from ``INFO server``
    (Valkey 8 keeps ``redis_version:7.2.4`` and adds ``valkey_version``)."""
    info = client.info("server")
    family = str(info.get("server_name") or "redis")
    version = str(info.get("valkey_version") or info["redis_version"])
    return Engine(family, tuple(int(x) for x in version.split(".")))
