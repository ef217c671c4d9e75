"""A value shown in a message is cut short (wire.values.shown): a key or argument of
megabytes made an error message of megabytes ("argument 'now' must be a int, got
'xxxx...'" of 2 MB, one line that fills a terminal and a log)."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

import luapipe
from luapipe.errors import CallArgumentError
from luapipe.scripts.registry import ScriptRegistry
from luapipe.wire.values import shown

ROOT = Path(__file__).resolve().parents[2]
BIG = "x" * (2 * 1024 * 1024)


def test_shown_cuts_a_long_value_to_its_width() -> None:
    assert shown("short") == "'short'"
    assert shown(BIG) == "'" + "x" * 36 + "..."
    assert shown(BIG.encode()) == "b'" + "x" * 35 + "..."
    assert shown({"k": BIG}) == "{'k': '" + "x" * 30 + "..."
    assert len(shown(list(range(10**5)))) == 40


def test_an_operations_type_error_does_not_repeat_a_big_value() -> None:
    op = luapipe.load_operation(ROOT / "examples/operations/update_token.toml")
    keys = {k: k for k in ("login", "recent", "viewed", "item_views")}
    with pytest.raises(CallArgumentError) as info:  # refused before any connection
        op.run(redis.Redis(port=1), "naive", keys=keys, args={"token": "t", "user": "u",
               "item": "", "now": BIG})  # fmt: skip
    assert (
        str(info.value)
        == "argument 'now' must be a int, got 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
    )


def test_a_bad_value_of_a_script_call_is_cut_short_too(tmp_path: Path) -> None:
    (tmp_path / "one.lua").write_text("-- @key k\n-- @arg v\nreturn 1\n")
    reg = ScriptRegistry.from_directory(tmp_path)
    with pytest.raises(CallArgumentError) as info:
        reg.call(redis.Redis(port=1), "one", keys=["k"], args=[{"v": BIG}])
    assert len(str(info.value)) < 200, len(str(info.value))
