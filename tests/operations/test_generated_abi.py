"""Generated modules and the ABI they call (``luapipe.runtime``).

A module written by ``luapipe generate`` imports one luapipe module, ``luapipe.runtime``,
whose ``__all__`` is pinned (tests/test_api.py); every helper the compiler can emit is in
it; the Lua prelude is in each module once; the Lua text and SHA of every generated script
are those of the release before; each form takes the clients its annotations name (sync
and cluster; asyncio and asyncio cluster for the ``_async`` twins); and a module generated
by luapipe 0.1 still runs.
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
import types
import typing
import warnings
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
import redis.cluster

import luapipe
import luapipe.runtime
from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import ServerProcess
from luapipe.operations import generate
from luapipe.operations.expr import compile as compile_mod
from luapipe.operations.spec import load_operation
from luapipe.scripts.script import LuaScript

from ..conftest import EXAMPLES_DIR, SCRIPTS_DIR
from ..drivers import Driver

OPS = EXAMPLES_DIR / "operations"
CATALOGUE = {p.stem: load_operation(p) for p in sorted(OPS.glob("*.toml"))}
GOLDEN = Path(__file__).parent / "golden"
FORMS = ("naive", "pipelined", "transaction", "script", "function")

#: sha1 of scripts_lua/op_<name>.lua: the script's identity on every server (EVALSHA), so
#: regenerating must never change it by accident. A deliberate change (issue 18: the Lua as a
#: person writes it, no helper closure built per call) updates these and the lock file.
SCRIPT_SHAS = {
    "capped_push": "60459ac6978f4d89d93cc92b5c7d16c74b435c72",
    "cas_update": "a62f91ab7517240cdc037e0c7f519c7048f54c41",
    "fetch_feed": "6706d9d61b26f3fd90bb7169587b092d21c1b7a4",
    "incr_many": "26ad6819d8af1f68d11d3dbf5fd53d6d211e17e1",
    "leaderboard_submit": "4625b618b6985850db7bb58611d3e361af61cda5",
    "rate_limit": "281d7428561a7976c16b5ff1e08cbd522ed833bd",
    "reserve_stock": "2660da4cc9d4511788322edf1d7af9ecdd38e157",
    "sliding_window_rate_limit": "509aa90699bad01476e8dbe0f71c19106195cc46",
    "transfer": "babb5534c95f09a809b6c2d6009972135a1d026f",
    "update_token": "7a52b462767d690195af512fd123f365ff7e2e39",
}


def _module(name: str, text: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(text, f"<{name}>", "exec"), module.__dict__)
    return module


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_a_generated_module_imports_only_the_runtime(name: str) -> None:
    tree = ast.parse(CATALOGUE[name].python_source)
    luapipe_imports = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            luapipe_imports += [a.name for a in node.names if a.name.startswith("luapipe")]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("luapipe"):
            luapipe_imports += [f"{node.module}.{a.name}" for a in node.names]
    assert luapipe_imports == ["luapipe.runtime"]
    used = set(re.findall(r"\b_rt\.(\w+)", CATALOGUE[name].python_source))
    assert used <= set(luapipe.runtime.__all__), used - set(luapipe.runtime.__all__)


def test_every_helper_the_generator_can_emit_is_in_the_abi() -> None:
    """Whatever an expression compiles to, a generated module only calls pinned names."""
    emitted = set()
    for source in (compile_mod, generate):
        text = Path(str(source.__file__)).read_text(encoding="utf-8")
        emitted |= set(re.findall(r"_rt\.(\w+)", text))
    template = Path(str(generate.__file__)).parent / "templates" / "module.py.j2"
    emitted |= set(re.findall(r"_rt\.(\w+)", template.read_text(encoding="utf-8")))
    emitted |= {"div", "idiv", "imod"}  # compile.py builds "_rt.{name}" for / // %
    assert {"ck", "fmt", "run", "run_async", "Plan", "ReadStep"} <= emitted
    assert emitted <= set(luapipe.runtime.__all__), emitted - set(luapipe.runtime.__all__)


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_the_lua_prelude_is_in_each_module_once(name: str) -> None:
    op = CATALOGUE[name]
    prelude = generate.prelude(op)  # the helpers this operation uses (maybe none)
    if prelude:
        first = prelude.splitlines()[0]
        assert op.python_source.count(repr(first + "\n")) == 1
        assert op.lua_source.count(prelude) == op.function_source.count(prelude) == 1
    module = _module(f"op_{name}", op.python_source)
    assert prelude == module.PRELUDE
    assert op.lua_source == module.LUA_SCRIPT and op.function_source == module.LUA_LIBRARY


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_generated_scripts_keep_their_text_and_sha(name: str) -> None:
    op = CATALOGUE[name]
    on_disk = (SCRIPTS_DIR / f"op_{name}.lua").read_bytes()
    assert hashlib.sha1(on_disk).hexdigest() == SCRIPT_SHAS[name]
    assert op.lua_source.encode() == on_disk
    assert LuaScript.from_source(f"op_{name}", op.lua_source).sha == SCRIPT_SHAS[name]
    module = _module(f"op_{name}", op.python_source)
    assert hashlib.sha1(module.LUA_SCRIPT.encode()).hexdigest() == SCRIPT_SHAS[name]


@pytest.fixture(scope="module")
def reserve_stock() -> types.ModuleType:
    """The module as generated now (test_generate checks the checked-in copy is the same)."""
    return _module("op_reserve_stock_abi", CATALOGUE["reserve_stock"].python_source)


def test_annotations_name_the_clients_the_forms_take(reserve_stock: types.ModuleType) -> None:
    sync = redis.Redis | redis.cluster.RedisCluster
    aio = redis.asyncio.Redis | redis.asyncio.RedisCluster
    for form in FORMS:
        hints = typing.get_type_hints(getattr(reserve_stock, form))
        assert hints["client"] == sync, form
        hints = typing.get_type_hints(getattr(reserve_stock, f"{form}_async"))
        assert hints["aclient"] == aio, form


def _reserve_every_form(driver: Driver, client: Any, module: Any, key: str) -> list[Any]:
    suffix = "_async" if driver.name == "asyncio" else ""
    return [driver.run(getattr(module, form + suffix)(client, stock=key, qty=3)) for form in FORMS]


def test_every_generated_form_runs_on_a_single_server(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis, reserve_stock: types.ModuleType
) -> None:
    r.set("stock:abi", 10)
    client = driver.redis(redis_server.port)
    got = _reserve_every_form(driver, client, reserve_stock, "stock:abi")
    assert got == [[1, 7], [1, 4], [1, 1], [0, 1], [0, 1]]
    assert r.get("stock:abi") == b"1"


@pytest.mark.cluster
def test_every_generated_form_runs_on_a_cluster(
    driver: Driver,
    cluster: EmbeddedCluster,
    rc: redis.cluster.RedisCluster,
    reserve_stock: types.ModuleType,
) -> None:
    rc.set("{abi}:stock", 10)
    client = driver.cluster(cluster.ports[0])
    got = _reserve_every_form(driver, client, reserve_stock, "{abi}:stock")
    assert got == [[1, 7], [1, 4], [1, 1], [0, 1], [0, 1]]
    assert rc.get("{abi}:stock") == b"1"


def test_a_module_generated_by_luapipe_0_1_still_runs(
    driver: Driver, redis_server: ServerProcess, r: redis.Redis
) -> None:
    """Its ``from luapipe import forms as _f`` / ``aio_forms as _a`` resolve to the runtime,
    with a DeprecationWarning naming the new home (tests/operations/golden holds the module
    as luapipe 0.1 wrote it)."""
    for old in ("luapipe.forms", "luapipe.aio_forms"):  # imported afresh: warned again
        sys.modules.pop(old, None)
        if hasattr(luapipe, old.split(".")[1]):
            delattr(luapipe, old.split(".")[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = _module(
            "op_reserve_stock_v0_1", (GOLDEN / "v0_1_op_reserve_stock.py.txt").read_text()
        )
    said = sorted(str(w.message) for w in caught if w.category is DeprecationWarning)
    assert [s.split(" moved to ")[0] for s in said] == ["luapipe.aio_forms", "luapipe.forms"]
    assert all("luapipe.runtime" in s and "0.3.0" in s for s in said)
    # its own script: the one 0.1 generated (today's is another text, see SCRIPT_SHAS)
    assert "local function _run(cmds, ret)" in module.LUA_SCRIPT
    r.set("stock:v01", 10)
    client = driver.redis(redis_server.port)
    got = _reserve_every_form(driver, client, module, "stock:v01")
    assert got == [[1, 7], [1, 4], [1, 1], [0, 1], [0, 1]]
