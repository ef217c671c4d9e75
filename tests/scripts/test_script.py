"""LuaScript and the directory loader: headers, SHAs, templates, bad files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from luapipe.errors import CallArgumentError, ScriptError, ScriptSyntaxError
from luapipe.scripts.loader import discover, load_file
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..conftest import SCRIPTS_DIR


def test_plain_file_sha_is_sha1_of_its_bytes() -> None:
    for path in sorted(SCRIPTS_DIR.glob("*.lua")):
        script = load_file(path)
        assert script.sha == hashlib.sha1(path.read_bytes()).hexdigest(), path
        assert script.source.encode() == path.read_bytes()


def test_crlf_and_trailing_whitespace_are_kept(tmp_path: Path) -> None:
    p = tmp_path / "crlf.lua"
    p.write_bytes(b"return 1\r\n  ")
    assert load_file(p).sha == hashlib.sha1(b"return 1\r\n  ").hexdigest()


def test_header_declares_keys_args_flags_description() -> None:
    reg = ScriptRegistry.from_directory(SCRIPTS_DIR)
    s = reg["rate_limit_fixed"]
    assert [k.name for k in s.keys or ()] == ["counter"]
    assert [a.name for a in s.args or ()] == ["limit", "window"]
    assert s.description.startswith("Fixed-window rate limiter")
    assert reg["window_count"].flags == ("no-writes",)
    assert reg["window_count"].read_only
    assert reg["capped_push"].args is not None and reg["capped_push"].args[-1].variadic


def test_headerless_script_is_unchecked(tmp_path: Path) -> None:
    (tmp_path / "legacy.lua").write_text("return redis.call('GET', KEYS[1])\n")
    s = ScriptRegistry.from_directory(tmp_path)["legacy"]
    assert s.keys is None and s.args is None
    s.check_call(["a", "b"], [1, 2, 3])  # anything goes


def test_wrong_counts_are_refused_with_names() -> None:
    s = ScriptRegistry.from_directory(SCRIPTS_DIR)["rate_limit_fixed"]
    with pytest.raises(CallArgumentError, match=r"takes 1 key \(counter\), got 2$"):
        s.check_call(["a", "b"], [1, 2])
    with pytest.raises(CallArgumentError, match=r"takes 2 args \(limit, window\), got 1$"):
        s.check_call(["a"], [1])
    push = ScriptRegistry.from_directory(SCRIPTS_DIR)["capped_push"]
    push.check_call(["l"], [3, "a", "b", "c"])
    with pytest.raises(
        CallArgumentError, match=r"takes at least 2 args \(cap, values\.\.\.\), got 1"
    ):
        push.check_call(["l"], [3])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "empty"),
        (b"   \n", "empty"),
        (b"return '\xff\xfe'\n", r"bad\.lua:1: not valid UTF-8"),
        (b"#!lua flags=no-such-flag\nreturn 1\n", "unknown flag 'no-such-flag'"),
        (b"-- @key a\n-- @key a\nreturn 1\n", "declared twice"),
        (b"-- @frob x\nreturn 1\n", "unknown header tag @frob"),
        (b"\xef\xbb\xbf-- @key k\nreturn 1\n", r"bad\.lua:1: starts with a UTF-8 byte-order mark"),
    ],
)
def test_bad_script_files(tmp_path: Path, body: bytes, message: str) -> None:
    (tmp_path / "bad.lua").write_bytes(body)
    with pytest.raises(ScriptError, match=message):
        discover(tmp_path)


def test_syntax_error_names_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "broken.lua").write_text("-- @key k\nlocal x = 1\nlocal y = = 2\nreturn x\n")
    with pytest.raises(ScriptSyntaxError) as info:
        ScriptRegistry.from_directory(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 'broken.lua'}:3: Lua syntax error")
    assert info.value.line == 3


def test_syntax_error_next_to_a_non_ascii_character(tmp_path: Path) -> None:
    """Lua quotes half of a multi-byte character ("near '\\xe2'"): still one clean line."""
    (tmp_path / "smart.lua").write_text("-- @key k\nreturn redis.call(\u201cGET\u201d, KEYS[1])\n")
    with pytest.raises(ScriptSyntaxError) as info:
        ScriptRegistry.from_directory(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 'smart.lua'}:2: Lua syntax error")
    assert "\\xe2" in str(info.value) and "\n" not in str(info.value)


def test_shebang_line_counts_as_line_one(tmp_path: Path) -> None:
    (tmp_path / "ro.lua").write_text("#!lua flags=no-writes\nreturn = 1\n")
    with pytest.raises(ScriptSyntaxError, match=r"ro\.lua:2:"):
        ScriptRegistry.from_directory(tmp_path)


def test_template_include_and_line_mapping(tmp_path: Path) -> None:
    (tmp_path / "_clamp.lua").write_text("local function clamp(v, lo, hi)\n  return v\nend\n")
    (tmp_path / "use.lua").write_text(
        "-- @key k\n-- @template\n{% include '_clamp.lua' %}\nlocal v = clamp(1, 0, 2)\n"
        "return = v\n"
    )
    with pytest.raises(ScriptSyntaxError, match=r"use\.lua:5: Lua syntax error"):
        ScriptRegistry.from_directory(tmp_path)
    (tmp_path / "use.lua").write_text(
        "-- @key k\n-- @template\n{% include '_clamp.lua' %}\nreturn clamp(1, 0, 2)\n"
    )
    reg = ScriptRegistry.from_directory(tmp_path)
    assert reg.names() == ["use"]  # the snippet is not a script
    assert "local function clamp" in reg["use"].source
    assert reg["use"].source.splitlines()[6] == "return clamp(1, 0, 2)"
    assert reg["use"].file_line(7) == f"{tmp_path / 'use.lua'}:4"


def test_template_error_names_line(tmp_path: Path) -> None:
    (tmp_path / "t.lua").write_text("-- @template\nreturn 1\n{% if %}\n")
    with pytest.raises(ScriptSyntaxError, match=r"t\.lua:3: template error"):
        discover(tmp_path)


def test_duplicate_names_refused() -> None:
    a = LuaScript.from_source("same", "return 1", path="a/same.lua")
    b = LuaScript.from_source("same", "return 2", path="b/same.lua")
    with pytest.raises(ScriptError, match="duplicate script name 'same'"):
        ScriptRegistry([a, b])


@pytest.mark.parametrize("name", ["../etc", "a/b", "a\\b", "..", ".", "", "a b", "a\tb", "a\x00b"])
def test_script_names_cannot_be_paths(name: str) -> None:
    with pytest.raises(ScriptError, match="invalid script name"):
        LuaScript.from_source(name, "return 1")


def test_unknown_script_suggests_a_close_name() -> None:
    reg = ScriptRegistry.from_directory(SCRIPTS_DIR)
    with pytest.raises(ScriptError, match="did you mean 'rate_limit_fixed'"):
        reg["rate_limit_fixd"]


@pytest.mark.parametrize(
    ("filename", "why"),
    [
        ("bad name.lua", "whitespace (' ') is not allowed"),
        ("a..b.lua", "'..' is not allowed"),
        ("abc\n.lua", "whitespace ('\\n') is not allowed"),
        ("abc\x01.lua", "the control character '\\x01' is not allowed"),
    ],
)
def test_bad_file_names_name_the_file_and_the_problem(
    tmp_path: Path, filename: str, why: str
) -> None:
    (tmp_path / filename).write_text("return 1\n")
    with pytest.raises(ScriptError) as info:
        discover(tmp_path)
    message = str(info.value)
    shown = str(tmp_path / filename).replace("\n", "\\n").replace("\x01", "\\x01")
    assert message.startswith(f"{shown}: invalid script name "), message
    assert why in message
    assert "\n" not in message
