"""Function library files: read as the server loads them, listed, linted, named uniquely.

Every shape is checked against a real server: what luapipe reads from a file (functions,
flags) is what ``FUNCTION LOAD`` + ``FUNCTION LIST`` give, and what luapipe refuses the
server refuses too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner

from luapipe.cli import main
from luapipe.errors import DuplicateScriptError, ScriptError, UnknownScriptError
from luapipe.scripts import libsandbox
from luapipe.scripts.libparse import parse_library
from luapipe.scripts.lint import lint_directory
from luapipe.scripts.registry import ScriptRegistry

#: library shapes the server accepts: (source, {function: flags})
SHAPES: dict[str, tuple[str, dict[str, list[str]]]] = {
    "positional": (
        "#!lua name=shape\nredis.register_function('s_a', function(keys, args) return 1 end)\n",
        {"s_a": []},
    ),
    "table with flags and description": (
        "#!lua name=shape\n"
        "redis.register_function{function_name = 's_ro', description = 'reads',\n"
        "  callback = function(keys) return redis.call('GET', keys[1]) end,\n"
        "  flags = {'allow-stale', 'no-writes'}}\n"
        "redis.register_function{function_name = 's_rw', callback = function() end}\n",
        {"s_ro": ["allow-stale", "no-writes"], "s_rw": []},
    ),
    "names computed at load time": (
        "#!lua name=shape\nlocal prefix = 's_'\n"
        "local function set(keys, args) return redis.call('SET', keys[1], args[1]) end\n"
        "redis.register_function(prefix .. 'set', set)\n"
        "redis.register_function(prefix .. ('get'):upper(), function() end)\n",
        {"s_set": [], "s_GET": []},
    ),
    "code under if redis then": (
        "#!lua name=shape\n"
        "if redis then\n  redis.register_function('s_yes', function() end)\nelse\n"
        "  redis.register_function('s_no', function() end)\nend\n"
        "if redis.REDIS_VERSION_NUM >= 0x070000 then\n"
        "  redis.register_function{function_name = 's_seven', callback = function() end,"
        " flags = {'no-cluster'}}\nend\n",
        {"s_yes": [], "s_seven": ["no-cluster"]},
    ),
    "every flag, a log line, upper-case engine": (
        "#!LUA name=shape\nredis.log(redis.LOG_NOTICE, 'loading shape')\n"
        "redis.register_function{function_name = 's_all', callback = function() end, flags ="
        " {'no-writes', 'allow-oom', 'allow-stale', 'no-cluster', 'allow-cross-slot-keys'}}\n",
        {"s_all": ["allow-cross-slot-keys", "allow-oom", "allow-stale", "no-cluster", "no-writes"]},
    ),
    "NAME= in another case, the name quoted (the server reads both)": (
        "#!lua NAME=\"shape\"\nredis.register_function('s_q', function() end)\n",
        {"s_q": []},
    ),
}

#: libraries the server refuses: (source, what luapipe's one line says, its line)
BROKEN: dict[str, tuple[str, str, int]] = {
    "redis.call at load time": (
        "#!lua name=bad\nlocal v = redis.call('GET', 'k')\n"
        "redis.register_function('b', function() end)\n",
        "redis.call cannot be used while the library loads",
        2,
    ),
    "KEYS at load time": (
        "#!lua name=bad\nlocal k = KEYS[1]\nredis.register_function('b', function() end)\n",
        "KEYS does not exist in a library",
        2,
    ),
    "a Lua error at load time": (
        "#!lua name=bad\nredis.register_function('b', function() end)\nlocal t = nil\n"
        "local x = t.field\n",
        "attempt to index local 't'",
        4,
    ),
    "string at load time": (
        "#!lua name=bad\nlocal n = string.format('%s', 'x')\n"
        "redis.register_function(n, function() end)\n",
        "'string' does not exist while a library loads",
        2,
    ),
    "a function registered twice": (
        "#!lua name=bad\nredis.register_function('b', function() end)\n\n"
        "redis.register_function('b', function() end)\n",
        "function 'b' is registered twice (lines 2 and 4)",
        4,
    ),
    "no function at all": ("#!lua name=bad\nlocal x = 1\n", "registers no function", 1),
    "an unknown flag": (
        "#!lua name=bad\n\nredis.register_function{function_name = 'b', callback = function() "
        "end, flags = {'no-write'}}\n",
        'unknown flag "no-write"',
        3,
    ),
    "a name the server refuses": (
        "#!lua name=bad\nredis.register_function('b-c', function() end)\n",
        "invalid function name",
        2,
    ),
    "a global written": (
        "#!lua name=bad\ncounter = 0\nredis.register_function('b', function() end)\n",
        "Attempt to modify a readonly table",
        2,
    ),
    "a syntax error": (
        "#!lua name=bad\nredis.register_function('b', function() end\n",
        "Lua syntax error",
        3,
    ),
    "an endless top level": (
        "#!lua name=bad\nlocal n = 0\nwhile true do n = n + 1 end\n",
        "ran for more than 1 s",
        3,
    ),
}


def _pairs(flat: list[Any]) -> dict[str, Any]:
    """A RESP2 ``[key, value, ...]`` reply as a dict with text keys."""
    return {k.decode(): v for k, v in zip(flat[0::2], flat[1::2], strict=True)}


def _listed(r: redis.Redis) -> dict[str, list[str]]:
    """{function: sorted flags} of every library on the server (FUNCTION LIST)."""
    out = {}
    for lib in r.function_list():
        for f in _pairs(lib)["functions"]:
            fn = _pairs(f)
            out[fn["name"].decode()] = sorted(x.decode() for x in fn["flags"])
    return out


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_functions_and_flags_are_those_the_server_lists(r: redis.Redis, shape: str) -> None:
    source, expected = SHAPES[shape]
    lib = parse_library(source, path="shape.lua")
    read = {f.name: sorted(f.flags) for f in lib.functions}
    assert read == expected
    r.function_load(source)
    assert _listed(r) == read
    listed = _pairs(r.function_list(withcode=True)[0])
    assert listed["library_code"].decode() == source  # sent byte for byte
    assert listed["library_name"].decode() == lib.name == "shape"
    assert lib.sha == hashlib.sha1(source.encode()).hexdigest()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_a_broken_library_is_one_line_naming_its_line_and_the_server_refuses_it_too(
    r: redis.Redis, case: str
) -> None:
    source, says, line = BROKEN[case]
    with pytest.raises(ScriptError) as caught:
        parse_library(source, path="bad.lua")
    message = str(caught.value)
    assert message.startswith(f"bad.lua:{line}: "), message
    assert says in message and "\n" not in message
    with pytest.raises(redis.ResponseError):
        r.function_load(source)
    assert r.function_list() == []


def test_header_blocks_give_keys_and_args_and_a_library_without_them_is_unchecked() -> None:
    lib = parse_library(
        "#!lua name=stock\n-- Stock reservations.\n\n"
        "-- @function reserve\n-- Take qty units if there are enough.\n"
        "-- @key stock   units left\n-- @arg qty     units to take\n-- @arg [why...] notes\n"
        "-- @return 1 if taken\n"
        "redis.register_function('reserve', function(keys, args) return 1 end)\n"
        "redis.register_function{function_name = 'peek', callback = function(keys) return 1 end,"
        " flags = {'no-writes'}, description = 'the units left'}\n",
        path="stock.lua",
    )
    reserve, peek = lib.functions
    assert lib.description == "Stock reservations."
    assert [p.display for p in reserve.keys or ()] == ["stock"]
    assert [p.display for p in reserve.args or ()] == ["qty", "[why...]"]
    assert (reserve.description, reserve.returns, reserve.line) == (
        "Take qty units if there are enough.",
        "1 if taken",
        10,
    )
    assert (peek.keys, peek.args, peek.flags, peek.description) == (
        None,
        None,
        ("no-writes",),
        "the units left",
    )
    assert reserve.checked and not peek.checked


@pytest.mark.parametrize(
    ("header", "says"),
    [
        ("-- @key k\n", "bad.lua:2: @key outside a '-- @function <name>' block"),
        ("-- @function nope\n-- @key k\n", "bad.lua:2: @function nope names no function"),
        ("-- @function f\n-- @color red\n", "bad.lua:3: unknown tag @color"),
        ("-- @function f\n-- @key [a]\n-- @key b\n", "bad.lua:4: @key b is required but"),
        ("-- @function f\n\n-- @function f\n", "bad.lua:4: @function f is declared twice"),
        ("", "bad.lua:1: unknown option 'flags=no-writes'"),
    ],
)
def test_a_bad_header_block_names_its_line(header: str, says: str) -> None:
    first = "#!lua name=bad flags=no-writes\n" if not header else "#!lua name=bad\n"
    source = first + header + "redis.register_function('f', function() end)\n"
    with pytest.raises(ScriptError, match="^" + says.replace("[", r"\[").replace("]", r"\]")):
        parse_library(source, path="bad.lua")


def _write(d: Path, files: dict[str, str]) -> Path:
    d.mkdir(exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text)
    return d


GOOD = "#!lua name=stock\n-- @function reserve\n-- @key stock\n-- @arg qty\n" + (
    "redis.register_function('reserve', function(keys, args) return 1 end)\n"
    "redis.register_function{function_name = 'peek', callback = function(keys) return 1 end,"
    " flags = {'no-writes'}}\n"
)


def test_the_registry_holds_libraries_beside_scripts(tmp_path: Path) -> None:
    d = _write(tmp_path / "s", {"stock.lua": GOOD, "hello.lua": "return 1\n"})
    reg = ScriptRegistry.from_directory(d)
    assert (reg.names(), reg.functions()) == (["hello"], ["peek", "reserve"])
    f, lib = reg.function("reserve")
    assert (f.name, lib.name, lib.path) == ("reserve", "stock", str(d / "stock.lua"))
    with pytest.raises(UnknownScriptError, match="is a function of library 'stock'"):
        reg["reserve"]
    with pytest.raises(UnknownScriptError, match="'hello' is a script, not a function"):
        reg.function("hello")
    with pytest.raises(UnknownScriptError, match="did you mean 'peek'"):
        reg.function("peak")
    # a call names a script or a function: a misspelt function is not an "unknown script"
    with pytest.raises(
        UnknownScriptError, match="unknown script or function 'reserv'; did you mean 'reserve'"
    ):
        reg.call(redis.Redis(port=1), "reserv", keys=["k"], args=[1])
    res = CliRunner().invoke(main, ["scripts", "call", "peak", "--dir", str(d)])
    assert res.output == "error: unknown script or function 'peak'; did you mean 'peek'?\n"
    assert reg.library("stock") is lib and [x.name for x in reg.libraries] == ["stock"]
    with pytest.raises(KeyError, match="unknown library 'hello'"):
        reg.library("hello")


def test_every_name_clash_is_named_in_one_error(tmp_path: Path) -> None:
    d = _write(
        tmp_path / "s",
        {
            "stock.lua": GOOD,
            "reserve.lua": "return 1\n",  # a script named like a function
            "other.lua": "#!lua name=other\nredis.register_function('peek', function() end)\n",
            "twin.lua": "#!lua name=stock\nredis.register_function('twin', function() end)\n",
        },
    )
    with pytest.raises(DuplicateScriptError) as caught:
        ScriptRegistry.from_directory(d)
    message = str(caught.value)
    assert message.startswith("3 names clash: ") and "\n" not in message
    assert f"duplicate name 'peek' (scripts and functions share one namespace): {d}/" in message
    assert "'reserve'" in message and f"{d / 'reserve.lua'} (script)" in message
    assert f"duplicate library name 'stock': {d / 'stock.lua'} and {d / 'twin.lua'}" in message
    lenient = ScriptRegistry.from_directory(d, strict=False)
    assert sorted(p.path for p in lenient.problems) == sorted(str(p) for p in d.glob("*.lua"))


def test_function_names_that_differ_only_in_case_are_one_name(
    tmp_path: Path, r: redis.Redis
) -> None:
    # The server's function names are case-insensitive: a second library registering 'FX'
    # beside 'fx' is refused ...
    r.function_load("#!lua name=one\nredis.register_function('fx', function() end)\n")
    with pytest.raises(redis.ResponseError, match="Function FX already exists"):
        r.function_load("#!lua name=two\nredis.register_function('FX', function() end)\n")
    # ... while Redis 7.0 loads ONE library registering both, then crashes (an assertion in
    # functionLibraryUnlink) when it is replaced or deleted: never load it here.
    source = (
        "#!lua name=cased\nredis.register_function('Fx', function() end)\n"
        "redis.register_function('fX', function() end)\n"
    )
    with pytest.raises(ScriptError) as caught:
        parse_library(source, path="cased.lua")
    message = str(caught.value)
    assert message.startswith("cased.lua:3: at load time: function 'fX' differs from 'Fx' (line 2)")
    assert "case-insensitive" in message and "\n" not in message
    d = _write(
        tmp_path / "s",
        {
            "one.lua": "#!lua name=one\nredis.register_function('fx', function() end)\n",
            "two.lua": "#!lua name=two\nredis.register_function('FX', function() end)\n",
        },
    )
    with pytest.raises(DuplicateScriptError) as clash:
        ScriptRegistry.from_directory(d)
    assert str(clash.value) == (
        "function names differ only in case (one name on the server): "
        f"{d / 'one.lua'} (function 'fx' of library 'one' at line 2) and "
        f"{d / 'two.lua'} (function 'FX' of library 'two' at line 2)"
    )


def test_a_broken_library_does_not_hide_the_good_files(tmp_path: Path, r: redis.Redis) -> None:
    d = _write(
        tmp_path / "s",
        {
            "stock.lua": GOOD,
            "hello.lua": "-- @key k\nreturn redis.call('INCR', KEYS[1])\n",
            "broken.lua": "#!lua name=broken\nredis.call('SET', 'k', 1)\n",
        },
    )
    runner = CliRunner()
    res = runner.invoke(main, ["scripts", "list", "--dir", str(d)])
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert lines[0].startswith("broken ") and f"BROKEN        {d / 'broken.lua'}:2: " in lines[0]
    assert lines[1].startswith("hello ") and "keys: k" in lines[1]
    assert lines[2].startswith("stock ") and "library, 2 functions" in lines[2]
    assert lines[3].split() == ["reserve", "keys:", "stock", "args:", "qty"]
    assert lines[4].split() == ["peek", "keys:", "unchecked", "args:", "unchecked", "[no-writes]"]
    rows = json.loads(runner.invoke(main, ["scripts", "list", "--dir", str(d), "--json"]).stdout)
    stock = next(row for row in rows if row["name"] == "stock")
    assert stock["kind"] == "library" and stock["problem"] is None
    assert [(f["name"], f["keys"], f["args"], f["flags"]) for f in stock["functions"]] == [
        ("reserve", ["stock"], ["qty"], []),
        ("peek", None, None, ["no-writes"]),
    ]
    url = f"redis://127.0.0.1:{r.connection_pool.connection_kwargs['port']}"
    res = runner.invoke(
        main, ["scripts", "call", "hello", "-k", "n", "--dir", str(d), "--url", url]
    )
    assert (res.exit_code, res.stdout) == (0, "1\n")
    res = runner.invoke(main, ["deploy", "--dir", str(d), "--url", url])
    assert res.exit_code == 1
    assert res.stderr.startswith(f"error: {d / 'broken.lua'}:2: at load time: redis.call cannot")
    assert res.stderr.count("\n") == 1
    assert r.function_list() == [] and not (d / "luapipe.lock.json").exists()


def _lint(d: Path) -> list[tuple[str, str, str]]:
    report = lint_directory(d)
    return [(i.location.split(str(d) + "/")[1], i.severity, i.code) for i in report.issues]


def test_lint_a_library_global_keys_is_an_error_callback_parameters_are_not(
    tmp_path: Path,
) -> None:
    d = _write(
        tmp_path / "s",
        {
            "lib.lua": "#!lua name=lib\n"
            "redis.register_function('named_like_globals', function(KEYS, ARGV)\n"
            "  return redis.call('SET', KEYS[1], ARGV[1])\nend)\n"
            "redis.register_function('reads_the_global', function(keys)\n"
            "  return redis.call('GET', KEYS[1] or keys[1])\nend)\n"
        },
    )
    assert _lint(d) == [("lib.lua:6:28", "error", "W113")]
    message = lint_directory(d).issues[0].message
    assert message.startswith("accessing undefined variable 'KEYS' (a library has no KEYS/ARGV")


def test_lint_the_guarded_unpack_is_portable_a_bare_table_unpack_is_not(tmp_path: Path) -> None:
    body = (
        "local t = {KEYS[1], ARGV[1]}\n"
        "local a, b = (table.unpack or unpack)(t)\n"
        "local u = table.unpack or unpack\n"
        "if table.unpack then a = 1 end\n"
        "if not table.unpack then b = 2 end\n"
        "return {a, b, u(t), table.unpack(t)}\n"
    )
    d = _write(tmp_path / "s", {"script.lua": body})
    assert _lint(d) == [("script.lua:6:21", "error", "W143")]  # the call, not the tests
    lib = "#!lua name=lib\nredis.register_function('f', function(KEYS, ARGV)\n" + body + "end)\n"
    d2 = _write(tmp_path / "l", {"lib.lua": lib})
    assert _lint(d2) == [("lib.lua:8:21", "error", "W143")]


def test_lint_reports_a_library_that_fails_at_load_time_and_name_clashes(tmp_path: Path) -> None:
    d = _write(
        tmp_path / "s",
        {
            "broken.lua": "#!lua name=broken\nlocal x = KEYS\n",
            "stock.lua": GOOD,
            "peek.lua": "return 1\n",
            "typo.lua": "#!lua name=typo\nredis.register_function('t', function() end\n",
        },
    )
    found = lint_directory(d)
    errors = [i for i in found.issues if i.severity == "error"]
    assert [(i.location.split("/")[-1], i.code) for i in errors] == [
        ("broken.lua:2", "LP002"),  # fails at load time: not a syntax error
        ("peek.lua", "LP002"),
        ("stock.lua", "LP002"),
        ("typo.lua:3", "LP001"),  # a library's syntax error is coded as a script's
    ]
    assert "duplicate name 'peek'" in errors[1].message
    res = CliRunner().invoke(main, ["scripts", "lint", "--dir", str(d)])
    # broken libraries count as libraries, not scripts
    assert res.stdout.splitlines()[-1] == "1 script, 3 libraries, 4 errors, 3 warnings"
    res = CliRunner().invoke(main, ["scripts", "list", "--dir", str(d)])
    assert res.stderr == "1 script and 3 libraries of 4 cannot be used\n"
    listed = json.loads(
        CliRunner().invoke(main, ["scripts", "list", "--json", "--dir", str(d)]).stdout
    )
    assert {row["name"]: row.get("kind") for row in listed if row["problem"]} == {
        "broken": "library",
        "peek": None,
        "stock": "library",
        "typo": "library",
    }


@pytest.mark.parametrize(
    ("body", "line"),
    [
        # a long loop: the line the loop allocates on
        ("local t, i = {}, 0\nwhile true do i = i + 1; t[i] = i end\n", 3),
        # a short one: ten string doublings past 64 MB (it said line 1, where the count
        # hook had last looked, or nothing ran the hook at all)
        ("local s = 'x'\n\nfor _ = 1, 40 do\n  s = s .. s\nend\n", 5),
        # in a helper the top level calls: the helper's line
        ("local t = {}\nlocal function fill(n)\n  for i = 1, n do\n    t[i] = {i}\n"
         "  end\nend\nfill(1e9)\n", 5),
        # in redis.log's arguments, built by the library: its line, not the harness's
        ("local s = 'x'\nfor _ = 1, 40 do\n  redis.log(redis.LOG_DEBUG, s)\n"
         "  s = s .. s\nend\n", 5),
    ],
)  # fmt: skip
def test_the_load_time_sandbox_is_bounded_in_memory_and_names_the_line_that_allocated(
    body: str, line: int
) -> None:
    source = f"#!lua name=big\n{body}redis.register_function('f', function() end)\n"
    with pytest.raises(ScriptError) as found:
        parse_library(source, path="big.lua")
    assert str(found.value) == (
        f"big.lua:{line}: at load time: the library's top level needs more than 64 MB"
    )


def test_out_of_memory_without_a_line_to_name_says_while_loading(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The line comes from a rerun with a line hook; if that rerun cannot tell (here: out
    of time first), the error names no line rather than a wrong one."""
    monkeypatch.setattr(libsandbox, "_TRACE_CPU_SECONDS", 0.0)
    source = "#!lua name=big\nlocal t, i = {}, 0\nwhile true do i = i + 1; t[i] = i end\n"
    with pytest.raises(ScriptError) as found:
        parse_library(source, path="big.lua")
    assert str(found.value) == (
        "big.lua: while loading: the library's top level needs more than 64 MB"
    )


@pytest.mark.parametrize(
    ("version", "name"),
    [
        ("7.0.0", "v_7_0_0_458752"),  # no server at hand: the oldest with Functions
        ("7.2.6", "v_7_2_6_459270"),  # what Redis 7.2.6 registers (observed)
        ("7.2.4", "v_7_2_4_459268"),  # Valkey 8.0.1: its redis_version and REDIS_VERSION
    ],
)
def test_the_sandbox_says_the_redis_version_it_is_given_as_the_server_does(
    version: str, name: str
) -> None:
    source = (
        "#!lua name=v\nlocal v, n = redis.REDIS_VERSION, redis.REDIS_VERSION_NUM\n"
        "redis.register_function('v_' .. v:gsub('%.', '_') .. '_' .. n, function() end)\n"
    )
    lib = parse_library(source, version=version)
    assert (lib.function_names, lib.version) == ((name,), version)
    assert libsandbox.version_num(version) == int(name.rsplit("_", 1)[1])
