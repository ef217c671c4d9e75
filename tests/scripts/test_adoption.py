"""A team's existing scripts work unchanged: any file name, every broken file reported at
once, a lenient registry, and headers for optional and zero-or-more keys and args."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import redis

from luapipe.bench.server import ServerProcess
from luapipe.errors import CallArgumentError, ScriptError, ScriptSyntaxError, UnknownScriptError
from luapipe.scripts.deploy import LOCK_NAME, deploy
from luapipe.scripts.header import Param, Signature, parse_header
from luapipe.scripts.loader import discover, scan
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..drivers import Driver
from ..helpers import calls, reset_stats

REAL_WORLD_NAMES = ["addStandardJob-9", "moveToFinished-14", "1st_pass", "Lock.LUA_RELEASE", "café"]


def test_a_script_is_named_after_its_file_whatever_the_name(
    tmp_path: Path, client: redis.Redis
) -> None:
    for name in REAL_WORLD_NAMES:
        (tmp_path / f"{name}.lua").write_text("return redis.call('INCR', KEYS[1])\n")
    reg = ScriptRegistry.from_directory(tmp_path)
    assert reg.names() == sorted(REAL_WORLD_NAMES)
    for name in REAL_WORLD_NAMES:
        body = (tmp_path / f"{name}.lua").read_bytes()
        assert reg[name].sha == hashlib.sha1(body).hexdigest()
        assert reg.call(client, name, keys=[f"n:{name}"]) == 1


def test_every_bad_file_is_reported_in_one_error_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "good.lua").write_text("return 1\n")
    (tmp_path / "has space.lua").write_text("return 1\n")
    (tmp_path / "tab\there.lua").write_text("return 1\n")
    (tmp_path / "bad_header.lua").write_text("-- @frob x\nreturn 1\n")
    (tmp_path / "broken.lua").write_text("local x = = 1\n")
    with pytest.raises(ScriptError) as info:
        ScriptRegistry.from_directory(tmp_path)
    message = str(info.value)
    assert "\n" not in message  # one line, as every message
    assert message.startswith("4 scripts cannot be used: ")
    problems = message.removeprefix("4 scripts cannot be used: ").split("; ")
    assert problems[0].startswith(f"{tmp_path / 'bad_header.lua'}:1: unknown header tag @frob")
    assert problems[1].startswith(f"{tmp_path / 'broken.lua'}:1: Lua syntax error")
    assert problems[2].startswith(
        f"{tmp_path / 'has space.lua'}: invalid script name 'has space': whitespace"
    )
    assert "tab\\there.lua: invalid script name 'tab\\there': whitespace ('\\t')" in problems[3]
    assert len(problems) == 4


@pytest.mark.parametrize(
    ("file", "name", "reason"),
    [
        (".lua", "", "it is empty"),
        ("..lua", ".", "'.' is not allowed (it reads as a path)"),
        ("....lua", "...", "'..' is not allowed (it reads as a path)"),
    ],
)
def test_a_file_name_that_is_no_script_name_is_refused_with_its_reason(
    tmp_path: Path, file: str, name: str, reason: str
) -> None:
    (tmp_path / "good.lua").write_text("return 1\n")
    (tmp_path / file).write_text("return 1\n")
    reg = ScriptRegistry.from_directory(tmp_path, strict=False)
    assert reg.names() == ["good"]
    assert [(p.name, p.message) for p in reg.problems] == [
        (
            name,
            f"{tmp_path / file}: invalid script name {name!r}: {reason} (names may hold "
            "letters, digits, '_', '-' and '.')",
        )
    ]


def test_one_bad_file_keeps_its_own_error_class_and_line(tmp_path: Path) -> None:
    (tmp_path / "good.lua").write_text("return 1\n")
    (tmp_path / "broken.lua").write_text("-- @key k\n\nreturn = 1\n")
    with pytest.raises(ScriptSyntaxError) as info:
        ScriptRegistry.from_directory(tmp_path)
    assert info.value.line == 3 and "\n" not in str(info.value)


def test_a_lenient_registry_calls_the_good_scripts_and_reports_the_broken(
    tmp_path: Path, client: redis.Redis
) -> None:
    (tmp_path / "incr.lua").write_text("return redis.call('INCR', KEYS[1])\n")
    (tmp_path / "broken.lua").write_text("return = 1\n")
    (tmp_path / "bad name.lua").write_text("return 1\n")
    reg = ScriptRegistry.from_directory(tmp_path, strict=False)
    assert reg.names() == ["incr"]
    assert [(p.name, p.line) for p in reg.problems] == [("bad name", None), ("broken", 1)]
    assert str(reg.problems[1]).startswith(f"{tmp_path / 'broken.lua'}:1: Lua syntax error")
    assert reg.call(client, "incr", keys=["n"]) == 1
    with pytest.raises(ScriptError, match=r"script 'broken' cannot be used: .*broken\.lua:1"):
        reg.call(client, "broken")
    assert "broken" not in reg and len(reg) == 1


def _half_broken(tmp_path: Path) -> Path:
    (tmp_path / "incr.lua").write_text("return redis.call('INCR', KEYS[1])\n")
    (tmp_path / "addJob-9.lua").write_text("return 1\n")
    (tmp_path / "broken.lua").write_text("-- @key k\n\nreturn = 1\n")
    (tmp_path / "bad name.lua").write_text("return 1\n")
    return tmp_path


def test_a_lenient_registry_loads_nothing_while_a_script_is_broken(
    tmp_path: Path, driver: Driver, r: redis.Redis, redis_server: ServerProcess
) -> None:
    reg = ScriptRegistry.from_directory(_half_broken(tmp_path), strict=False)
    client = driver.redis(redis_server.port)
    with pytest.raises(ScriptError) as info:
        driver.run(reg.load(client))
    message = str(info.value)
    assert message == (
        f"nothing loaded: 2 scripts cannot be used: {tmp_path / 'bad name.lua'}: invalid "
        "script name 'bad name': whitespace (' ') is not allowed (names may hold letters, "
        f"digits, '_', '-' and '.'); {tmp_path / 'broken.lua'}:3: Lua syntax error: "
        "unexpected symbol near '='"
    )
    assert int(r.info("memory")["number_of_cached_scripts"]) == 0
    # the good scripts still work one by one (each loads only itself)
    assert driver.run(reg.call(client, "incr", keys=["n"])) == 1
    assert int(r.info("memory")["number_of_cached_scripts"]) == 1


def test_one_broken_script_is_enough_to_refuse_load_with_its_line(
    tmp_path: Path, driver: Driver, r: redis.Redis, redis_server: ServerProcess
) -> None:
    d = _half_broken(tmp_path)
    (d / "bad name.lua").unlink()
    reg = ScriptRegistry.from_directory(d, strict=False)
    with pytest.raises(ScriptSyntaxError) as info:
        driver.run(reg.load(driver.redis(redis_server.port)))
    assert str(info.value) == (
        f"nothing loaded: 1 script cannot be used: {d / 'broken.lua'}:3: Lua syntax error: "
        "unexpected symbol near '='"
    )
    assert (info.value.path, info.value.line) == (str(d / "broken.lua"), 3)
    assert int(r.info("memory")["number_of_cached_scripts"]) == 0


@pytest.mark.parametrize("check", [False, True])
def test_deploy_refuses_a_lenient_registry_with_problems(
    tmp_path: Path, r: redis.Redis, check: bool
) -> None:
    d = _half_broken(tmp_path)
    lock = d / LOCK_NAME
    if check:  # a lock written before the breakage: --check must not call broken ones removed
        lock.write_text('{"version": 1, "scripts": {}}\n')
    reg = ScriptRegistry.from_directory(d, strict=False)
    with pytest.raises(
        ScriptError, match=r"^nothing (deployed|checked): 2 scripts cannot be used: "
    ):
        deploy(reg, r, lock, check=check)
    assert int(r.info("memory")["number_of_cached_scripts"]) == 0
    assert lock.exists() == check


def test_a_lenient_registry_without_problems_is_an_ordinary_one(tmp_path: Path) -> None:
    (tmp_path / "a.lua").write_text("return 1\n")
    reg = ScriptRegistry.from_directory(tmp_path, strict=False)
    assert reg.names() == ["a"] and reg.problems == ()


def test_scan_reads_past_broken_files(tmp_path: Path) -> None:
    (tmp_path / "a.lua").write_bytes(b"return '\xff'\n")
    (tmp_path / "b.lua").write_text("return 2\n")
    found = scan(tmp_path)
    assert [s.name for s in found.scripts] == ["b"]
    assert [p.name for p in found.problems] == ["a"]
    with pytest.raises(ScriptError, match=r"a\.lua:1: not valid UTF-8"):
        discover(tmp_path)


# -- headers ---------------------------------------------------------------------------


def _sig(*lines: str) -> tuple[Signature, Signature]:
    header = parse_header("\n".join(lines) + "\nreturn 1\n")
    assert header.keys is not None and header.args is not None
    return Signature(header.keys), Signature(header.args)


@pytest.mark.parametrize(
    ("arg_lines", "accepted", "refused"),
    [
        (["-- @arg a"], [1], [0, 2]),
        (["-- @arg a", "-- @arg [b]"], [1, 2], [0, 3]),
        (["-- @arg [a]", "-- @arg [b]"], [0, 1, 2], [3]),
        (["-- @arg ids..."], [1, 2, 9], [0]),
        (["-- @arg [ids...]"], [0, 1, 9], []),
        (["-- @arg a", "-- @arg [rest...]"], [1, 5], [0]),
        (["-- @arg a", "-- @arg [b]", "-- @arg [rest...]"], [1, 2, 3, 7], [0]),
        ([], [0], [1]),
    ],
)
def test_arg_counts_follow_the_header(
    arg_lines: list[str], accepted: list[int], refused: list[int]
) -> None:
    _, args = _sig("-- @key k", *arg_lines)
    assert [n for n in accepted if args.accepts(n)] == accepted
    assert [n for n in refused if args.accepts(n)] == []


def test_keys_take_the_same_grammar() -> None:
    keys, _ = _sig("-- @key [lock]", "-- @key [ids...]")
    assert keys.minimum == 0 and keys.maximum is None
    assert keys.params == (Param("lock", optional=True), Param("ids", variadic=True, optional=True))
    assert [p.display for p in keys.params] == ["[lock]", "[ids...]"]


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["-- @arg [a]", "-- @arg b"], "@arg b is required but follows the optional [a]"),
        (["-- @arg a...", "-- @arg b"], "only the last @arg may be variadic"),
        (["-- @arg [a...]", "-- @arg [b]"], "only the last @arg may be variadic"),
        (["-- @key [k"], "@key needs a name"),
        (["-- @key k]"], "@key needs a name"),
        (["-- @arg [a]", "-- @arg [a]"], "@arg a is declared twice"),
    ],
)
def test_bad_signatures_name_the_line(lines: list[str], message: str) -> None:
    with pytest.raises(ScriptError, match=rf"^s\.lua:{len(lines)}: " + message.replace("[", r"\[")):
        parse_header("\n".join(lines) + "\nreturn 1\n", "s.lua")


@pytest.mark.parametrize(
    ("header", "keys", "args", "message"),
    [
        ("-- @key k", ["a"], [1], "script 's' takes no args, got 1"),
        ("-- @key k", [], [], "script 's' takes 1 key (k), got 0"),
        ("-- @key a\n-- @key b", ["a"], [], "script 's' takes 2 keys (a, b), got 1"),
        ("-- @key k\n-- @arg a\n-- @arg [b]", ["k"], [], "takes 1 to 2 args (a, [b]), got 0"),
        ("-- @key k\n-- @arg v...", ["k"], [], "takes at least 1 arg (v...), got 0"),
        ("-- @key [k...]\n-- @arg a", [], [], "takes 1 arg (a), got 0"),
    ],
)
def test_refusals_read_as_english(
    header: str, keys: list[str], args: list[int], message: str
) -> None:
    script = LuaScript.from_source("s", header + "\nreturn 1\n")
    with pytest.raises(CallArgumentError) as info:
        script.check_call(keys, args)
    assert str(info.value).endswith(message), str(info.value)
    assert "none args" not in str(info.value)


def test_optional_and_zero_or_more_calls_reach_the_server(r: redis.Redis, tmp_path: Path) -> None:
    (tmp_path / "purge.lua").write_text(
        "-- Delete the given ids of a set; with none, delete the set.\n"
        "-- @key set\n-- @arg [ids...]\n"
        "if #ARGV == 0 then return redis.call('DEL', KEYS[1]) end\n"
        "return redis.call('SREM', KEYS[1], unpack(ARGV))\n"
    )
    (tmp_path / "get_or.lua").write_text(
        "-- @key k\n-- @arg [default]\nreturn redis.call('GET', KEYS[1]) or ARGV[1] or 'none'\n"
    )
    reg = ScriptRegistry.from_directory(tmp_path)
    r.sadd("s", "a", "b", "c")
    assert reg.call(r, "purge", keys=["s"], args=["a"]) == 1
    assert reg.call(r, "purge", keys=["s"]) == 1
    assert not r.exists("s")
    assert reg.call(r, "get_or", keys=["k"]) == b"none"
    assert reg.call(r, "get_or", keys=["k"], args=["d"]) == b"d"
    reset_stats(r)
    with pytest.raises(CallArgumentError, match=r"takes 0 to 1 args \(\[default\]\), got 2$"):
        reg.call(r, "get_or", keys=["k"], args=["d", "extra"])
    assert calls(r, "evalsha") == 0 and calls(r, "eval") == 0


# -- keys and args as register_script code passes them ------------------------------------


def test_keys_and_args_as_register_script_takes_them(
    driver: Driver, r: redis.Redis, redis_server: ServerProcess
) -> None:
    """None is no values (redis-py's default); any iterable is its items; a str or bytes is
    refused, not sent character by character (b"ab" would send 97 and 98)."""
    reg = ScriptRegistry([LuaScript.from_source("echo", "return {#KEYS, #ARGV, ARGV[1]}\n")])
    client = driver.redis(redis_server.port)
    assert driver.run(reg.call(client, "echo", keys=None, args=None)) == [0, 0]
    assert driver.run(reg.call(client, "echo", keys=iter(["k"]), args={"x": 1})) == [1, 1, b"x"]
    reset_stats(r)
    for bad, shown in (("ab", "str 'ab'; write ['ab'] for one value"), (b"ab", "bytes b'ab'")):
        for how in ("call", "pipeline"):
            with pytest.raises(CallArgumentError) as info:
                if how == "call":
                    driver.run(reg.call(client, "echo", args=bad))
                else:
                    driver.run(reg.pipeline(client).call("echo", args=bad).execute())
            assert str(info.value).startswith(
                f"script 'echo': args must be a list of values, got {shown}"
            )
    with pytest.raises(
        CallArgumentError,
        match=r"^script 'echo': keys must be a list of values, got int 5; nothing was sent$",
    ):
        driver.run(reg.call(client, "echo", keys=5))
    with pytest.raises(UnknownScriptError, match="a script name is a str, got NoneType None"):
        driver.run(reg.call(client, None))  # type: ignore[arg-type]
    assert calls(r, "evalsha") == 0  # nothing refused was sent
