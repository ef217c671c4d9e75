"""One reading of error replies on every engine and on fakeredis (luapipe.wire.refusals).

The texts are the engines' own, recorded by tests/wire/engine_replies.py (Redis 7.0.15,
Redis 7.2.6, Valkey 8.0.1, fakeredis): each is read through :func:`refused` with the verb
luapipe sent, and through the errors a caller sees (``script_error`` for a script, the
function form's reply for a function). On each engine of the matrix the recording is
checked against what the server says now; on fakeredis always.
"""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import pytest
import redis

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.errors import (
    BusyError,
    ConnectionFailed,
    CrossSlotError,
    PermissionDenied,
    ReadOnlyError,
    ScriptRuntimeError,
    ScriptSyntaxError,
    ServerError,
    acl_words,
    translate,
)
from luapipe.scripts.fcall import FunctionCall
from luapipe.scripts.library import FunctionLibrary, LuaFunction
from luapipe.scripts.protocol import function_result, script_error
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript
from luapipe.wire.refusals import lua_error, refused
from luapipe.wire.replies import ReplyError

from ..engine_matrix import engine_of
from .engine_replies import (
    CASES,
    LIBRARY,
    SCRIPT_ERRORS,
    capture,
    capture_fake,
    normalized,
    recorded,
)

RECORDED = recorded()
ALL = [(engine, case) for engine, texts in sorted(RECORDED.items()) for case in sorted(texts)]


def test_every_engine_of_the_matrix_and_fakeredis_is_recorded() -> None:
    assert {"redis-7.0.15", "redis-7.2.6", "valkey-8.0.1"} <= set(RECORDED)
    assert any(e.startswith("fakeredis-") for e in RECORDED)
    for engine, texts in RECORDED.items():
        assert set(texts) <= set(CASES), engine
        if not engine.startswith("fakeredis"):
            assert set(texts) == set(CASES), f"{engine}: {sorted(set(CASES) - set(texts))}"


@pytest.mark.parametrize(("engine", "case"), ALL)
def test_each_recorded_reply_is_read_as_what_it_is(engine: str, case: str) -> None:
    text, want = RECORDED[engine][case], CASES[case]
    assert refused(text, want.verb) == (want.expected == "refused"), (engine, case, text)


def test_the_unknown_command_refusal_names_the_verb_that_was_sent() -> None:
    """fakeredis answers a script's own ``redis.call('FOO')`` with the same words a server
    without EVALSHA_RO answers the call itself: only the verb tells them apart."""
    text = "ERR unknown command 'evalsha_ro', with args beginning with: "
    assert refused(text, "EVALSHA_RO") and refused(text)
    assert not refused(text, "EVALSHA")
    assert not refused("ERR unknown command 'foo', with args beginning with: ")
    assert not refused("ERR unknown command 'foo', with args beginning with: ", "EVAL")


def test_function_not_found_is_a_refusal_only_for_fcall() -> None:
    assert refused("ERR Function not found", "FCALL") and refused(
        "ERR Function not found", "fcall_ro"
    )
    assert not refused("ERR Function not found") and not refused("ERR Function not found", "EVAL")
    assert not refused("ERR Function not found here")


def test_noscript_is_a_refusal_only_for_evalsha() -> None:
    """EVAL is never answered NOSCRIPT by the server: there it is the script's own reply."""
    for text in ("NOSCRIPT No matching script. Please use EVAL.", "NOSCRIPT No matching script."):
        assert refused(text, "EVALSHA") and refused(text, "evalsha_ro")
        assert not refused(text, "EVAL") and not refused(text)
    assert not refused("NOSCRIPT not really", "EVALSHA")


def test_the_code_is_a_whole_word() -> None:
    """BUSYKEY (RESTORE onto an existing key) is not BUSY: it ran, and failed."""
    text = "BUSYKEY Target key name already exists."
    assert not refused(text, "EVAL")
    assert not isinstance(translate(redis.ResponseError(text)), BusyError)
    assert not isinstance(script_error(_script("x"), text), BusyError)


def test_the_lua_trailer_wins_over_any_code() -> None:
    """A redis.call that hit OOM, READONLY or NOPERM midway has run the lines before it."""
    for engine, texts in RECORDED.items():
        for case in ("oom_in_script", "readonly_in_script", "misconf_in_script"):
            if case in texts:
                assert lua_error(texts[case]) and not refused(texts[case], "EVAL"), engine


# -- what a caller sees ---------------------------------------------------------------------
def _script(case: str) -> LuaScript:
    """The recorded case's script, with a file name, so errors can name file:line."""
    source = SCRIPT_ERRORS.get(case, "local x = 1\nreturn redis.call('SET', KEYS[1], 'v')\n")
    return LuaScript.from_source(case, source, path=f"s/{case}.lua")


SCRIPT_CASES = [
    (engine, case)
    for engine, case in ALL
    if CASES[case].verb.startswith("EVAL") and case not in ("noscript", "noscript_ro")
]


@pytest.mark.parametrize(("engine", "case"), SCRIPT_CASES)
def test_a_script_s_own_error_names_its_file_and_line_on_every_engine(
    engine: str, case: str
) -> None:
    """Its own error is a ScriptRuntimeError (a ScriptSyntaxError if it did not compile)
    naming file:line where the reply gives a line, else the file and the lines it can come
    from (fakeredis); a refusal is never one (BusyError, ReadOnlyError, PermissionDenied,
    CrossSlotError, ConnectionFailed, or a plain ServerError)."""
    text = RECORDED[engine][case]
    err = script_error(_script(case), text)
    if CASES[case].expected == "refused":
        assert not isinstance(err, ScriptRuntimeError | ScriptSyntaxError), (case, err)
        assert isinstance(err, ServerError | ConnectionFailed), (case, err)
        return
    assert isinstance(err, ScriptRuntimeError | ScriptSyntaxError), (case, repr(err))
    message = str(err)
    assert message.startswith(f"s/{case}.lua"), message
    if "user_script:" in text or '[string "<python>"]:' in text:
        assert message.startswith(f"s/{case}.lua:"), message


@pytest.mark.parametrize(
    ("case", "cls"),
    [
        ("busy", BusyError),
        ("readonly", ReadOnlyError),
        ("noperm_command", PermissionDenied),
        ("noperm_key", PermissionDenied),
        ("crossslot", CrossSlotError),
        ("loading", ConnectionFailed),
        ("max_clients", ConnectionFailed),
    ],
)
def test_refusals_keep_their_class_on_every_engine(case: str, cls: type) -> None:
    for engine, texts in RECORDED.items():
        if case in texts:
            assert isinstance(script_error(_script(case), texts[case]), cls), engine


#: "Function not found" is read before function_result, from the first FCALL's reply; once
#: the library was loaded and the call sent again, it is the function's own reply
def test_a_refusal_for_a_key_reads_alike_on_every_engine() -> None:
    """Redis 7.0 says "no permissions to access one of the keys used as arguments", Redis
    7.2 and Valkey "No permissions to access a key": luapipe names the command it sent."""
    for engine, texts in RECORDED.items():
        if "noperm_key" in texts:
            said = acl_words(texts["noperm_key"], "evalsha")
            assert said.startswith("the ACL user may not run EVALSHA on these keys"), engine
        if "noperm_command" in texts:
            said = acl_words(texts["noperm_command"], "eval")
            assert said.startswith("the ACL user may not run EVALSHA ("), (engine, said)


FUNCTION_CASES = [
    (e, c) for e, c in ALL if CASES[c].verb.startswith("FCALL") and c != "function_not_found"
]
CAPLIB = FunctionLibrary.of(
    "caplib",
    LIBRARY,
    [LuaFunction(n, "caplib", line=line) for n, line in (("boom", 2), ("foo", 5), ("w", 8))],
    path="s/caplib.lua",
)


@pytest.mark.parametrize(("engine", "case"), FUNCTION_CASES)
def test_a_function_s_reply_reads_alike_on_every_engine(engine: str, case: str) -> None:
    """A refusal keeps its class (BUSY, NOPERM...); the function's own error is a
    ScriptRuntimeError naming the library's file:line where the reply gives one."""
    text = RECORDED[engine][case]
    name = {"function_error": "boom", "function_unknown_command": "foo"}.get(case, "w")
    function = CAPLIB.function(name)
    assert function is not None
    err = function_result(FunctionCall(function, CAPLIB, (), ()), ReplyError(text))
    if CASES[case].expected == "refused":
        assert not isinstance(err, ScriptRuntimeError | ScriptSyntaxError), (case, err)
        return
    assert isinstance(err, ScriptRuntimeError), (case, err)
    line = {"function_error": 3, "function_unknown_command": 6}[case]
    assert str(err).startswith(f"s/caplib.lua:{line}: "), str(err)


@pytest.mark.parametrize("flavour", ["sync", "asyncio"])
@pytest.mark.parametrize(
    "case",
    ["error", "runtime", "unknown_command_in_script", "call_without_arguments", "nil_argument",
     "not_allowed_in_script", "wrongtype"],
)  # fmt: skip
def test_on_fakeredis_a_script_s_own_error_names_its_file_and_line(flavour: str, case: str) -> None:
    """fakeredis words ``redis.call('FOO')`` as a server words an unknown EVALSHA_RO, and
    raises a Python TypeError for ``redis.call()``: both are the script's own error there
    too, at its line (the one line they can come from; the candidates when there are
    several), never a ServerError without a line or an OutcomeUnknown."""
    reg = ScriptRegistry([_script(case)])
    server = fakeredis.FakeServer(version=(7, 0))
    if flavour == "sync":
        err = _raised(lambda: reg.call(fakeredis.FakeRedis(server=server), case))
    else:

        async def call() -> Any:
            client = fakeredis.FakeAsyncRedis(server=server)
            try:
                return await reg.call(client, case)
            finally:
                await client.aclose()

        err = _raised(lambda: asyncio.run(call()))
    assert isinstance(err, ScriptRuntimeError), repr(err)
    where = "s/wrongtype.lua (the server did not say the line: one of lines 1, 2)"
    assert str(err).startswith(where if case == "wrongtype" else f"s/{case}.lua:2: "), str(err)


def _raised(fn: Any) -> BaseException:
    try:
        fn()
    except Exception as exc:
        return exc
    pytest.fail("no exception")


# -- the recording is what the engines say ---------------------------------------------------
def test_fakeredis_says_what_was_recorded() -> None:
    live = {k: normalized(v) for k, v in capture_fake().items() if v is not None}
    engine = live.pop("engine")
    if engine not in RECORDED:
        pytest.skip(f"{engine} not recorded: python -m tests.wire.engine_replies --fake")
    assert live == RECORDED[engine]


def test_this_engine_says_what_was_recorded(r: redis.Redis, cluster: EmbeddedCluster) -> None:
    engine = engine_of(r).name
    if engine not in RECORDED:
        pytest.skip(f"{engine} not recorded: python -m tests.wire.engine_replies")
    live = {k: normalized(v) for k, v in capture(cluster).items() if v is not None}
    live.pop("engine")
    assert live == RECORDED[engine]
