"""pytest plugin for projects that ship Redis Lua scripts (``pytest11`` entry point).

Fixtures, all prefixed ``luapipe_`` (table in examples/app/README.md): ``luapipe_server``
(a private redis-server per session, or ``--luapipe-url``), ``luapipe_redis`` (a client on
it, emptied per test), ``luapipe_fake`` (a fresh fakeredis server per test),
``luapipe_client`` / ``luapipe_async`` (the real server, or real and fake under
``@pytest.mark.luapipe_both``), ``luapipe_registry`` (your scripts: ini option
``luapipe_scripts_dir``, else ``[tool.luapipe] scripts_dir`` in pyproject.toml, else
``scripts_lua/``, else the bundled library), ``luapipe_runs`` (``with
luapipe_runs.expect(1):`` counts script runs on the real server) and ``luapipe_chaos``
(``flush_scripts()``, ``failover()`` between queueing and ``execute()``).

Without the entry point: ``pytest -p luapipe.pytest_plugin``.
"""

from __future__ import annotations

import contextlib
import tomllib
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from luapipe.bench.server import EmbeddedRedis, ServerProcess
from luapipe.errors import LuapipeError, printable_url
from luapipe.scripts.loader import discover
from luapipe.scripts.registry import ScriptRegistry, bundled_scripts_dir
from luapipe.scripts.script import LuaScript
from luapipe.wire.connect import url_problem

__all__ = ["Chaos", "RunCounts", "ScriptRuns", "find_scripts_dir", "is_active"]

BOTH = "luapipe_both"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("luapipe", "luapipe (Redis Lua scripts)")
    group.addoption(
        "--luapipe-url",
        default=None,
        help="use this Redis server for luapipe_server instead of starting a private one "
        "(it is FLUSHALLed before every test that uses it)",
    )
    parser.addini("luapipe_scripts_dir", "directory of *.lua scripts for luapipe_registry")


_ACTIVE: list[pytest.Config] = []  # the sessions this plugin is registered in


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{BOTH}: run the test on a real redis-server and on fakeredis"
    )
    url = config.getoption("--luapipe-url", None)
    problem = url_problem(url) if url else None
    if problem is not None:  # before a fixture parses it (urllib quotes a piece of it)
        raise pytest.UsageError(f"--luapipe-url {printable_url(url)}: {problem}")
    _ACTIVE.append(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    _ACTIVE[:] = [c for c in _ACTIVE if c is not config]


def is_active() -> bool:
    """Whether pytest loaded this plugin (entry point, ``-p`` or ``pytest_plugins``)."""
    return bool(_ACTIVE)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if not metafunc.definition.get_closest_marker(BOTH):
        return
    if "luapipe_backend" not in metafunc.fixturenames:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: @pytest.mark.{BOTH} needs a fixture that follows "
            "the backend: luapipe_client, luapipe_async or luapipe_backend"
        )
    metafunc.parametrize("luapipe_backend", ["real", "fake"], scope="function")


def find_scripts_dir(config: pytest.Config) -> Path:
    """The ini option, else ``[tool.luapipe] scripts_dir``, else ``scripts_lua/``, else bundled."""
    root = config.rootpath
    configured = config.getini("luapipe_scripts_dir")
    if configured:
        base = config.inipath.parent if config.inipath else root
        return (base / str(configured)).resolve()
    pyproject = root / "pyproject.toml"
    if pyproject.is_file():
        with pyproject.open("rb") as f:
            tool = tomllib.load(f).get("tool", {}).get("luapipe", {})
        if "scripts_dir" in tool:
            return (root / str(tool["scripts_dir"])).resolve()
    if (root / "scripts_lua").is_dir():
        return root / "scripts_lua"
    return bundled_scripts_dir()


# -- servers and clients ------------------------------------------------------------------
@pytest.fixture(scope="session")
def luapipe_embedded(request: pytest.FixtureRequest) -> Iterator[EmbeddedRedis | None]:
    """The private server's launcher (None with ``--luapipe-url``); stopped by its PID."""
    if request.config.getoption("--luapipe-url"):
        yield None
        return
    server = EmbeddedRedis()
    try:
        server.start()
    except LuapipeError as exc:
        pytest.fail(f"luapipe_server: {exc}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def luapipe_server(
    request: pytest.FixtureRequest, luapipe_embedded: EmbeddedRedis | None
) -> ServerProcess:
    """Where the real server listens (``.host``, ``.port``, ``.url``)."""
    if luapipe_embedded is None:
        url = str(request.config.getoption("--luapipe-url"))
        parsed = urllib.parse.urlsplit(url)
        return ServerProcess(parsed.hostname or "127.0.0.1", parsed.port or 6379, 0, "")
    assert luapipe_embedded.info is not None
    return luapipe_embedded.info


def _url(config: pytest.Config, server: ServerProcess) -> str:
    return str(config.getoption("--luapipe-url") or server.url)


@pytest.fixture
def luapipe_redis(
    request: pytest.FixtureRequest, luapipe_server: ServerProcess
) -> Iterator[redis.Redis]:
    """A sync client on the real server, emptied (keys, scripts, functions, INFO stats)."""
    client = redis.Redis.from_url(_url(request.config, luapipe_server))
    client.flushall()
    client.script_flush()
    client.function_flush()
    client.config_resetstat()
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def luapipe_fake_server() -> Any:
    """A fresh fakeredis server (Lua enabled, Redis 7.0 behaviour) for this test."""
    import fakeredis

    return fakeredis.FakeServer(version=(7, 0))


@pytest.fixture
def luapipe_fake(luapipe_fake_server: Any) -> Iterator[redis.Redis]:
    import fakeredis

    client = fakeredis.FakeRedis(server=luapipe_fake_server)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def luapipe_backend() -> str:
    """``real``; ``real`` then ``fake`` for tests marked ``luapipe_both``."""
    return "real"


@pytest.fixture
def luapipe_client(request: pytest.FixtureRequest, luapipe_backend: str) -> redis.Redis:
    name = "luapipe_redis" if luapipe_backend == "real" else "luapipe_fake"
    client: redis.Redis = request.getfixturevalue(name)
    return client


@pytest.fixture
def luapipe_async(
    request: pytest.FixtureRequest, luapipe_backend: str
) -> Callable[..., redis.asyncio.Redis]:
    """``make(**kwargs)`` -> a ``redis.asyncio`` client on this test's backend (same data as
    ``luapipe_client``). Build it inside the event loop that uses it; ``await c.aclose()``."""
    if luapipe_backend == "fake":
        import fakeredis

        server = request.getfixturevalue("luapipe_fake_server")
        request.getfixturevalue("luapipe_fake")
        return lambda **kw: fakeredis.FakeAsyncRedis(server=server, **kw)
    info: ServerProcess = request.getfixturevalue("luapipe_server")
    request.getfixturevalue("luapipe_redis")  # empties the server first
    return lambda **kw: redis.asyncio.Redis.from_url(_url(request.config, info), **kw)


# -- scripts --------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def luapipe_scripts_dir(request: pytest.FixtureRequest) -> Path:
    return find_scripts_dir(request.config)


@pytest.fixture(scope="session")
def _luapipe_scripts(luapipe_scripts_dir: Path) -> list[LuaScript]:
    scripts = discover(luapipe_scripts_dir)
    ScriptRegistry(scripts)  # compile once per session: a syntax error names file:line
    return scripts


@pytest.fixture
def luapipe_registry(_luapipe_scripts: list[LuaScript]) -> ScriptRegistry:
    """A registry of the project's scripts with nothing known cached (fresh per test)."""
    return ScriptRegistry(_luapipe_scripts, check=False)


# -- helpers ----------------------------------------------------------------------------------
SCRIPT_COMMANDS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


@dataclass(frozen=True)
class RunCounts:
    """INFO counters at one moment: calls per command, error replies per error code."""

    commands: dict[str, int]
    errors: dict[str, int]

    def script_runs(self) -> int:
        """Script and function executions, less those refused as NOSCRIPT (they did not run)."""
        refused = self.errors.get("NOSCRIPT", 0)
        return sum(self.commands.get(c, 0) for c in SCRIPT_COMMANDS) - refused


class ScriptRuns:
    """What the real server ran (INFO commandstats/errorstats deltas), all scripts together.
    A script's own error reply starting with NOSCRIPT counts as not run: check those cases on
    their effects."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client
        self.start = self.snapshot()

    def snapshot(self) -> RunCounts:
        stats = self.client.info("commandstats")
        errors = self.client.info("errorstats")
        commands = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
        codes = {k.removeprefix("errorstat_"): int(v["count"]) for k, v in errors.items()}
        return RunCounts(commands, codes)

    def calls(self, command: str, since: RunCounts | None = None) -> int:
        """How many times ``command`` ran (``"evalsha"``, ``"script|load"``) since ``since``."""
        base = since or self.start
        name = command.lower()
        return self.snapshot().commands.get(name, 0) - base.commands.get(name, 0)

    def scripts(self, since: RunCounts | None = None) -> int:
        """Scripts run since ``since`` (default: the start of the test)."""
        return self.snapshot().script_runs() - (since or self.start).script_runs()

    @contextlib.contextmanager
    def expect(self, runs: int) -> Iterator[None]:
        """Assert the block made the server run exactly ``runs`` scripts."""
        before = self.snapshot()
        yield
        got = self.scripts(before)
        assert got == runs, f"expected {runs} script run(s) on the server, it ran {got}"


class Chaos:
    """Break things between queueing and ``execute()``, the way production does."""

    def __init__(self, client: redis.Redis) -> None:
        self.client = client

    def flush_scripts(self) -> None:
        """SCRIPT FLUSH behind the registry's back (a restart or another deploy tool)."""
        self.client.script_flush()

    def failover(self) -> None:
        """Like a promoted replica: data kept, cache empty, other clients' connections dropped."""
        self.client.script_flush()
        with contextlib.suppress(redis.ResponseError):  # fakeredis has no CLIENT KILL
            self.client.client_kill_filter(_type="normal", skipme=True)


@pytest.fixture
def luapipe_runs(request: pytest.FixtureRequest, luapipe_backend: str) -> ScriptRuns:
    """Script runs on the real server (INFO commandstats); fakeredis has no such counters."""
    if luapipe_backend == "fake":
        pytest.skip("luapipe_runs counts on the real server only (fakeredis has no INFO stats)")
    client: redis.Redis = request.getfixturevalue("luapipe_redis")
    return ScriptRuns(client)


@pytest.fixture
def luapipe_chaos(luapipe_client: redis.Redis) -> Chaos:
    return Chaos(luapipe_client)
