"""Generated output: golden files, determinism, the files in the repo are up to date, and
the generated Python module is importable and runs every form.

Refresh the golden files after an intended change with ``LUAPIPE_UPDATE_GOLDEN=1 pytest``.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner

from luapipe.cli import main
from luapipe.operations.spec import load_operation
from luapipe.scripts.registry import ScriptRegistry

from ..conftest import EXAMPLES_DIR, ROOT, SCRIPTS_DIR

GOLDEN = Path(__file__).parent / "golden"
OPS = EXAMPLES_DIR / "operations"
CATALOGUE = sorted(OPS.glob("*.toml"))


@pytest.mark.parametrize("name", ["reserve_stock", "fetch_feed", "incr_many"])
@pytest.mark.parametrize(
    ("attr", "suffix"),
    [("lua_source", ".lua"), ("function_source", ".function.lua"), ("python_source", ".py")],
)
def test_golden(name: str, attr: str, suffix: str) -> None:
    text = getattr(load_operation(OPS / f"{name}.toml"), attr)
    path = GOLDEN / f"op_{name}{suffix}.txt"
    if os.environ.get("LUAPIPE_UPDATE_GOLDEN"):
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert text == path.read_text(encoding="utf-8"), f"{path} differs (see module docstring)"


def test_generate_is_deterministic_and_idempotent(tmp_path: Path) -> None:
    args = [
        "generate",
        *map(str, CATALOGUE),
        "--out",
        str(tmp_path / "lua"),
        "--py-out",
        str(tmp_path / "py"),
    ]
    first = CliRunner().invoke(main, args)
    assert first.exit_code == 0, first.output
    assert first.output.count("(written)") == len(CATALOGUE)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.*")}
    mtimes = {p: p.stat().st_mtime_ns for p in before}
    second = CliRunner().invoke(main, args)
    assert second.exit_code == 0 and second.output.count("(unchanged)") == len(CATALOGUE)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.*")} == before
    assert {p: p.stat().st_mtime_ns for p in before} == mtimes


def test_checked_in_generated_files_are_up_to_date() -> None:
    for spec in CATALOGUE:
        op = load_operation(spec)
        lua = SCRIPTS_DIR / f"op_{op.name}.lua"
        py = OPS / "generated" / f"op_{op.name}.py"
        assert lua.read_text(encoding="utf-8") == op.lua_source, "run: make generate"
        assert py.read_text(encoding="utf-8") == op.python_source, "run: make generate"


def test_registry_loads_generated_scripts_with_their_headers() -> None:
    reg = ScriptRegistry.from_directory(SCRIPTS_DIR)
    assert [k.name for k in reg["op_transfer"].keys or ()] == ["src", "dst"]
    assert [a.name for a in reg["op_transfer"].args or ()] == ["amount"]
    assert reg["op_fetch_feed"].read_only and not reg["op_reserve_stock"].read_only
    assert reg["op_incr_many"].keys is not None and reg["op_incr_many"].keys[0].variadic


def test_generated_module_imports_and_runs_every_form(r: redis.Redis) -> None:
    path = OPS / "generated" / "op_reserve_stock.py"
    spec = importlib.util.spec_from_file_location("op_reserve_stock", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert "qty: int" in (ROOT / path).read_text()
    assert module.script.__doc__.startswith("reserve_stock as script:")
    r.set("stock:1", 10)
    results = [
        getattr(module, form)(r, stock="stock:1", qty=3)
        for form in ("naive", "pipelined", "transaction", "script", "function")
    ]
    assert results == [[1, 7], [1, 4], [1, 1], [0, 1], [0, 1]]
    assert r.get("stock:1") == b"1"


@pytest.mark.parametrize(
    "text",
    [
        "@key evil  injected\n@arg extra x",
        "  @template",
        "@return 1",
        "@arg extra",
    ],
)
def test_no_text_reaches_the_header_as_a_declaration(text: str) -> None:
    """Even an Operation built without the spec checker (which refuses such text) cannot
    add a @key/@arg/@return/@template line to the generated script's header."""
    import dataclasses

    from luapipe.scripts.script import parse_header

    op = load_operation(OPS / "transfer.toml")
    evil = dataclasses.replace(
        op,
        description=text,
        path=str(Path(op.path).with_name("x\n-- @key evil.toml")),
        keys=tuple(dataclasses.replace(k, doc=text) for k in op.keys),
        args=tuple(dataclasses.replace(a, doc=text) for a in op.args),
    )
    header = parse_header(evil.lua_source)
    assert [k.name for k in header.keys or ()] == [k.name for k in op.keys]
    assert [a.name for a in header.args or ()] == [a.name for a in op.args]
    assert not header.template
    assert evil.lua_source.splitlines()[0].startswith("-- ")
    assert "\n-- @key evil" not in evil.lua_source
