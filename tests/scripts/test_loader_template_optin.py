"""Templating is opt-in (``-- @template`` in the header): every other file is sent byte for
byte, however much it looks like Jinja2 (``{{1}}`` is a Lua table of a table)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import redis

from luapipe.errors import ScriptError, ScriptSyntaxError
from luapipe.scripts.loader import discover, is_template, load_file
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import parse_header


@pytest.mark.parametrize(
    "body",
    [
        "return {{1}}\n",
        'local s = "{# x #}"\nreturn s\n',
        "local t = {{1, 2}, {3, 4}}\nreturn t[2][1]\n",
        "return '{% not jinja %}'\n",
        "-- {% include '_x.lua' %} is only a comment here\nreturn 1\n",
        "-- @key k\n-- the word @template in a description line is not the marker\nreturn {{1}}\n",
    ],
)
def test_lua_that_looks_like_jinja_is_sent_byte_for_byte(tmp_path: Path, body: str) -> None:
    p = tmp_path / "plain.lua"
    p.write_bytes(body.encode())
    reg = ScriptRegistry.from_directory(tmp_path)  # compiles: nothing is refused
    script = reg["plain"]
    assert script.source == body
    assert script.sha == hashlib.sha1(p.read_bytes()).hexdigest()
    assert not script.template and not is_template(body)


def test_one_lua_table_of_tables_does_not_block_the_directory(tmp_path: Path) -> None:
    (tmp_path / "a.lua").write_text("local t = {{1, 2}, {3, 4}}\nreturn t[2][1]\n")
    (tmp_path / "b.lua").write_text("return 2\n")
    assert [s.name for s in discover(tmp_path)] == ["a", "b"]


def test_plain_scripts_run_as_written(r: redis.Redis, tmp_path: Path) -> None:
    (tmp_path / "nested.lua").write_text("return {{1}}\n")
    (tmp_path / "text.lua").write_text('local s = "{# x #}"\nreturn s\n')
    reg = ScriptRegistry.from_directory(tmp_path)
    assert reg.call(r, "nested") == [[1]]
    assert reg.call(r, "text") in ("{# x #}", b"{# x #}")


def test_marker_opts_in_and_include_still_works(tmp_path: Path) -> None:
    (tmp_path / "_clamp.lua").write_text("local function clamp(v, lo, hi)\n  return v\nend\n")
    (tmp_path / "use.lua").write_text(
        "-- Uses a snippet.\n-- @template\n-- @key k\n"
        "{% include '_clamp.lua' %}\nreturn clamp({{ 1 + 1 }}, 0, 2)\n"
    )
    reg = ScriptRegistry.from_directory(tmp_path)
    s = reg["use"]
    assert reg.names() == ["use"]
    assert s.template
    assert "local function clamp" in s.source and "clamp(2, 0, 2)" in s.source
    assert s.sha == hashlib.sha1(s.source.encode()).hexdigest()
    assert [k.name for k in s.keys or ()] == ["k"]
    assert s.description == "Uses a snippet."
    assert s.source.splitlines()[7].startswith("return clamp")  # after the snippet's blank line
    assert s.file_line(8) == f"{tmp_path / 'use.lua'}:5"


def test_marker_alone_does_not_declare_keys_or_args(tmp_path: Path) -> None:
    (tmp_path / "t.lua").write_text("-- @template\nreturn {{ 40 + 2 }}\n")
    s = load_file(tmp_path / "t.lua")
    assert s.source == "-- @template\nreturn 42\n"
    assert s.keys is None and s.args is None  # still unchecked


def test_template_errors_name_the_line_only_when_opted_in(tmp_path: Path) -> None:
    (tmp_path / "t.lua").write_text("-- @template\nreturn 1\n{% if %}\n")
    with pytest.raises(ScriptSyntaxError, match=r"t\.lua:3: template error"):
        discover(tmp_path)


def test_jinja_in_a_plain_file_that_fails_to_compile_hints_at_the_marker(tmp_path: Path) -> None:
    (tmp_path / "_snip.lua").write_text("local a = 1\n")
    (tmp_path / "zz.lua").write_text("{% include '_snip.lua' %}\nreturn a\n")
    with pytest.raises(ScriptSyntaxError) as info:
        ScriptRegistry.from_directory(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'zz.lua'}:1: Lua syntax error")
    assert "-- @template" in message and "\n" not in message


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("-- @template extra\nreturn 1\n", r"t\.lua:1: @template takes nothing"),
        ("-- @template\n-- @template\nreturn 1\n", r"t\.lua:2: @template is declared twice"),
    ],
)
def test_bad_marker_lines(tmp_path: Path, body: str, message: str) -> None:
    (tmp_path / "t.lua").write_text(body)
    with pytest.raises(ScriptError, match=message):
        discover(tmp_path)


def test_marker_only_counts_in_the_header() -> None:
    assert parse_header("-- @template\nreturn 1\n").template
    assert parse_header("#!lua flags=no-writes\n-- @template\nreturn 1\n").template
    assert not parse_header("return 1\n-- @template\n").template
    assert not parse_header("-- see @template\nreturn 1\n").template
