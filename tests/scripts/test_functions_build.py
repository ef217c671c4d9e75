"""``luapipe functions build``: a directory of scripts as one versioned Function library.

What a user would notice: every script answers through its function exactly as through
EVALSHA (KEYS/ARGV as parameters, the code byte for byte, flags from the header), errors
name the script's own file:line, the scripts a function cannot run are listed with a
reason that is true on the server, and two versions of an application never run each
other's code."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from luapipe.errors import CallArgumentError, ScriptError, ScriptRuntimeError
from luapipe.operations.generate import generated_operation
from luapipe.operations.libraries import collect_generated
from luapipe.scripts.build import build_library
from luapipe.scripts.libparse import parse_library
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..drivers import Driver
from ..helpers import calls, reset_stats


def _script(name: str, text: str) -> LuaScript:
    return LuaScript.from_source(name, text, path=f"dir/{name}.lua")


def _libraries(r: redis.Redis) -> list[str]:
    """The names of the libraries on the server (RESP2 flat lists)."""
    return sorted(dict(zip(i[::2], i[1::2], strict=True))[b"library_name"].decode()
                  for i in r.function_list())  # fmt: skip


def _write(directory: Path, files: dict[str, str]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (directory / f"{name}.lua").write_text(text)
    return directory


SHAPES = {
    "count_keys": "-- @key [ks...]\nreturn #KEYS\n",
    "all_keys": "-- @key [ks...]\nlocal out = {}\n"
    "for _, k in ipairs(KEYS) do out[#out + 1] = k end\nreturn out\n",
    "alias": "-- @key k\n-- @arg [a...]\nlocal keys, argv = KEYS, ARGV\n"
    "return {keys[1], unpack(argv)}\n",
    "long_string": "local s = [[\n  two spaces\n\tand a tab]]\nreturn s\n",
    "no_newline": "return ARGV[1] -- a comment and no newline at the end",
    "nested": "local function f() return KEYS[1] .. ARGV[1] end\nreturn f()\n",
}


def test_keys_and_argv_are_the_callbacks_parameters_so_scripts_run_unchanged(
    tmp_path: Path, client: redis.Redis
) -> None:
    directory = _write(tmp_path / "s", SHAPES)
    plain = ScriptRegistry.from_directory(directory)
    built = ScriptRegistry.from_directory(directory, functions="app")
    cases = {
        "count_keys": (["a", "b", "c"], []),
        "all_keys": (["a", "b"], []),
        "alias": (["k"], ["x", "y"]),
        "long_string": ([], []),
        "no_newline": ([], ["v"]),
        "nested": (["k"], ["v"]),
    }
    for name, (keys, args) in cases.items():
        expected = plain.call(client, name, keys, args)
        assert built.call(client, name, keys, args) == expected, name
    assert built.call(client, "long_string") == b"  two spaces\n\tand a tab"
    assert built.built is not None and built.built.skipped == ()


def test_the_library_file_reads_back_as_built_keys_args_and_flags(scripts_dir: Path) -> None:
    reg = ScriptRegistry.from_directory(scripts_dir)
    built = build_library(list(reg), "app", path="out/app.lua")
    read = parse_library(built.source, path="out/app.lua")
    assert read.name == built.name
    assert [(f.name, f.keys, f.args, f.flags) for f in read.functions] == [
        (f.name, f.keys, f.args, f.flags) for f in built.functions
    ]
    by_script = dict(built.scripts)
    assert sorted(by_script) == reg.names()
    assert built.function_of("window_count").flags == ("no-writes",)  # type: ignore[union-attr]
    # a script without a #!lua line runs in Redis's compatibility mode: keys of other slots
    assert built.function_of("capped_push").flags == ("allow-cross-slot-keys",)  # type: ignore[union-attr]


def test_names_carry_the_code_hash_and_functions_gc_recognises_them(tmp_path: Path) -> None:
    one = [_script("hits", "-- @key k\nreturn redis.call('INCR', KEYS[1])\n")]
    two = [_script("hits", "-- @key k\nreturn redis.call('INCRBY', KEYS[1], 2)\n")]
    a, again, b = build_library(one, "app"), build_library(one, "app"), build_library(two, "app")
    assert a.name == again.name and a.source == again.source
    assert a.name != b.name and a.name.startswith("luapipe_app_")
    assert a.function_names == (f"{a.name}_hits",)
    assert generated_operation(a.name, a.source) == "app"  # the gc rule of generated forms
    edited = a.source.replace("INCR'", "DECR'")
    assert generated_operation(a.name, edited) is None  # same name, other code: not ours
    # the directory's location is not part of the code: the same scripts, the same names
    elsewhere = [LuaScript.from_source("hits", one[0].source, path="/abs/other/hits.lua")]
    assert build_library(elsewhere, "app").name == a.name


NOT_CONVERTED = {
    "via_g": ("return _G.KEYS[1]\n", "line 1 reads globals through _G"),
    "via_rawget": ("return rawget(_G, 'ARGV')[1]\n", "line 1 reads globals through _G"),
    "via_loadstring": ("return loadstring('return KEYS[1]')()\n", "line 1 compiles code"),
    "replicates": (
        "redis.replicate_commands()\nreturn 1\n",
        "line 1 uses redis.replicate_commands, which functions do not have",
    ),
    "debugs": ("redis.debug('x')\nreturn 1\n", "line 1 uses redis.debug"),
    "assigns": ("-- @key k\nKEYS = {'other'}\nreturn KEYS[1]\n", "line 2 assigns the global KEYS"),
    # the assignment's targets as a list, or a function statement: read from the bytecode
    "assigns_second": (
        "-- @key k\nlocal x\nx, KEYS = 1, {'other'}\nreturn KEYS[1]\n",
        "line 3 assigns the global KEYS",
    ),
    "assigns_first": ("KEYS, x = {'other'}, 1\nreturn KEYS[1]\n", "line 1 assigns the global KEYS"),
    "defines": ("function ARGV() return 1 end\nreturn 1\n", "line 1 assigns the global ARGV"),
    "vararg": ("return select('#', ...)\n", "line 1 does not compile as a function's body"),
}


def test_scripts_a_function_cannot_run_are_listed_with_the_reason() -> None:
    scripts = [_script(n, text) for n, (text, _) in NOT_CONVERTED.items()]
    scripts.append(_script("fine", "-- @key k\nreturn KEYS[1]\n"))
    scripts.append(_script("in_string", "return [[\n-- @key x\n]]\n"))
    scripts += [_script("a-b", "return 1\n"), _script("a_b", "return 2\n")]
    # function names are case-insensitive on the server: FCALL of one ran the other, and
    # Redis 7.0 crashed deleting the library (functions gc, deploy --prune, verify)
    scripts += [_script("Take", "return 1\n"), _script("take", "return 2\n")]
    built = build_library(scripts, "app")
    reasons = {u.name: u.reason for u in built.skipped}
    assert sorted(dict(built.scripts)) == ["Take", "a-b", "fine"]
    assert "would end in 'take', as 'Take''s does" in reasons["take"]
    for name, (_, reason) in NOT_CONVERTED.items():
        assert reason in reasons[name], (name, reasons[name])
    assert "inside a string" in reasons["in_string"]
    assert "would end in 'a_b', as 'a-b'" in reasons["a_b"]
    assert "--   - via_g: line 1 reads globals through _G" in built.source  # listed in the file too


#: they only look like an assignment of the global KEYS/ARGV: a table constructor's key,
#: a local of that name; they run alike as a script and as a function
CONVERTED = {
    "fields": "local t = {KEYS = KEYS[1], ARGV = #ARGV}\nreturn {t.KEYS, t.ARGV}\n",
    "shadowed": "local KEYS = {'x'}\nKEYS = {'y'}\nreturn KEYS[1]\n",
    # a local, a parameter, a field or a constructor's key named as a global reader
    "local_load": "local load = tonumber(ARGV[1]) or 0\nreturn load\n",
    "param_load": "local function f(load) return load end\nreturn f(KEYS[1])\n",
    "field_load": "local t = {load = 1, _G = 2}\nreturn t.load + t._G\n",
    "local_g": "local _G = {KEYS = {'x'}}\nreturn _G.KEYS[1]\n",
}


@pytest.mark.parametrize("name", sorted(CONVERTED))
def test_what_only_looks_like_assigning_keys_is_converted(name: str, r: redis.Redis) -> None:
    """`{KEYS = ...}` read as an assignment of the global KEYS, and `local load = ...` or
    `{load = 1}` as compiling code at run time: the script was left out."""
    built = build_library([_script(name, CONVERTED[name])], "app")
    assert built.skipped == () and dict(built.scripts).keys() == {name}
    r.function_load(built.source, replace=True)
    fn = dict(built.scripts)[name]
    assert r.fcall(fn, 1, "k", "a") == r.eval(CONVERTED[name], 1, "k", "a")


@pytest.mark.parametrize("name", sorted(NOT_CONVERTED))
def test_each_reason_is_true_on_the_server(name: str, r: redis.Redis) -> None:
    """The naive conversion (the body inside function(KEYS, ARGV)) answers otherwise than
    the script, or does not load: listing the script is not over-cautious."""
    text = NOT_CONVERTED[name][0].replace("-- @key k\n", "")
    try:
        as_script: object = r.eval(text, 1, "k", "a")
    except redis.ResponseError as exc:
        as_script = f"error {str(exc).split(':')[0]}"
    library = (
        f"#!lua name=naive\nredis.register_function('naive', function(KEYS, ARGV)\n{text}end)\n"
    )
    try:
        r.function_load(library, replace=True)
        as_function: object = r.fcall("naive", 1, "k", "a")
    except redis.ResponseError as exc:
        as_function = f"error {str(exc).split(':')[0]}"
    assert as_script != as_function


def test_a_functions_error_names_the_scripts_own_file_and_line(
    tmp_path: Path, r: redis.Redis
) -> None:
    directory = _write(
        tmp_path / "s",
        {
            "a_first": "-- @key k\nreturn 1\n",
            "boom": "-- @key k\nlocal x = 1\nlocal y = nil\nreturn x + y\n",
            "wrongtype": "-- @key k\nlocal n = 1\nreturn redis.call('INCR', KEYS[1])\n",
        },
    )
    built = ScriptRegistry.from_directory(directory, functions="app")
    plain = ScriptRegistry.from_directory(directory)
    r.hset("h", "f", "v")
    for name, keys, line in (("boom", ["k"], 4), ("wrongtype", ["h"], 3)):
        with pytest.raises(ScriptRuntimeError) as fn_err:
            built.call(r, name, keys)
        with pytest.raises(ScriptRuntimeError) as sc_err:
            plain.call(r, name, keys)
        where = f"{directory / name}.lua:{line}:"
        assert str(fn_err.value).startswith(where), str(fn_err.value)
        assert str(sc_err.value).startswith(where)


def test_a_template_is_built_from_its_rendered_code_with_the_templates_lines(
    tmp_path: Path, r: redis.Redis
) -> None:
    directory = _write(
        tmp_path / "t",
        {
            "clamped": "-- @template\n-- @key k\n{% include '_clamp.lua' %}\nreturn nil + 1\n",
            "_clamp": "local lo = 0\nlocal hi = 10\n",
        },
    )
    reg = ScriptRegistry.from_directory(directory, functions="app")
    assert reg.built is not None and dict(reg.built.scripts).keys() == {"clamped"}
    with pytest.raises(ScriptRuntimeError, match=r"clamped\.lua:4: attempt to perform"):
        reg.call(r, "clamped", ["k"])


def test_the_registry_calls_the_same_names_through_fcall(
    tmp_path: Path, driver: Driver, redis_server: object, r: redis.Redis
) -> None:
    directory = _write(
        tmp_path / "s",
        {
            "take": "-- @key k\n-- @arg n\nreturn redis.call('DECRBY', KEYS[1], ARGV[1])\n",
            "left": "#!lua flags=no-writes\n-- @key k\nreturn redis.call('GET', KEYS[1])\n",
            "old": "-- @key k\nredis.replicate_commands()\nreturn redis.call('INCR', KEYS[1])\n",
        },
    )
    reg = ScriptRegistry.from_directory(directory, functions="app")
    client = driver.redis(redis_server.port)  # type: ignore[attr-defined]
    r.set("stock", 10)
    reset_stats(r)
    assert driver.run(reg.call(client, "take", ["stock"], [3])) == 7
    assert driver.run(reg.call(client, "left", ["stock"])) == b"7"
    pipe = reg.pipeline(client)
    pipe.call("take", keys=["stock"], args=[1]).call("left", keys=["stock"])
    assert driver.run(pipe.execute()) == [6, b"6"]
    tx = reg.pipeline(client, transaction=True)
    tx.call("take", keys=["stock"], args=[1]).get("stock")
    assert driver.run(tx.execute()) == [5, b"5"]
    assert driver.run(reg.call(client, "old", ["n"])) == 1  # not converted: a script
    assert calls(r, "fcall") >= 3 and calls(r, "fcall_ro") == 2
    assert calls(r, "evalsha") + calls(r, "eval") == 1
    assert reg["take"].name == "take"  # still the script (its source, its header)
    assert [u.name for u in reg.built.skipped] == ["old"]  # type: ignore[union-attr]


def test_two_versions_side_by_side_never_run_each_others_code(
    tmp_path: Path, r: redis.Redis
) -> None:
    v1 = _write(tmp_path / "v1", {"price": "-- @key k\nreturn 100\n", "x": "return 0\n"})
    v2 = _write(tmp_path / "v2", {"price": "-- @key k\nreturn 120\n", "x": "return 0\n"})
    old = ScriptRegistry.from_directory(v1, functions="app")
    new = ScriptRegistry.from_directory(v2, functions="app")
    for _ in range(3):
        assert (old.call(r, "price", ["k"]), new.call(r, "price", ["k"])) == (100, 120)
    assert _libraries(r) == sorted([old.built.name, new.built.name])  # type: ignore[union-attr]
    # a team's library that merely looks like ours is never collected
    team = "luapipe_app_0123456789"
    r.function_load(f"#!lua name={team}\nredis.register_function('t', function() return 1 end)")
    found = collect_generated(r, keep=[new.built.name])  # type: ignore[union-attr]
    assert found[0].deleted == (old.built.name,)  # type: ignore[union-attr]
    assert _libraries(r) == sorted(
        [new.built.name, team]  # type: ignore[union-attr]
    )
    assert old.call(r, "price", ["k"]) == 100  # a process still on v1 loads it again


def test_no_script_to_build_is_one_error() -> None:
    with pytest.raises(
        ScriptError, match="no script can be built into library 'app': g: line 1 reads"
    ):
        build_library([_script("g", "return _G.x\n")], "app")
    with pytest.raises(ScriptError, match="invalid library name 'my-app'"):
        build_library([_script("g", "return 1\n")], "my-app")


def test_a_wrong_call_reads_the_same_with_functions_as_without(
    tmp_path: Path, driver: Driver, redis_server: object, r: redis.Redis
) -> None:
    """functions='app' is no change to the application's calls: a call with the wrong
    counts or a value redis-py cannot send said "function 'luapipe_app_<hash>_take' takes
    1 key", naming a function the application never named, where it said "script 'take'"."""
    directory = _write(
        tmp_path / "s", {"take": "-- @key k\n-- @arg n\nreturn redis.call('DECRBY', KEYS[1], 1)\n"}
    )
    scripts = ScriptRegistry.from_directory(directory)
    functions = ScriptRegistry.from_directory(directory, functions="app")
    client = driver.redis(redis_server.port)  # type: ignore[attr-defined]
    for keys, args in (([], [1]), (["k"], [1, 2]), (["k"], [None])):
        said = []
        for reg in (scripts, functions):
            with pytest.raises(CallArgumentError) as err:
                driver.run(reg.call(client, "take", keys, args))
            said.append(str(err.value))
            with pytest.raises(CallArgumentError) as err:
                reg.pipeline(client).call("take", keys, args)
            said.append(str(err.value))
        assert len(set(said)) == 1 and said[0].startswith("script 'take'"), said
    r.delete("k")
    assert driver.run(functions.call(client, "take", ["k"], [1])) == -1
