"""What the harness waits out: a BUSY reply is transient also inside redis-py's pipeline
error text (the harness resets keys in a pipeline; a busy server failed the whole run)."""

from __future__ import annotations

import pytest
import redis

from luapipe.bench.patience import transient


@pytest.mark.parametrize(
    ("text", "waited"),
    [
        ("BUSY Redis is busy running a script. You can only call SCRIPT KILL", True),
        (
            "Command # 1 (UNLINK {luapipe:bench:reserve_stock:14}:stock) of pipeline caused "
            "error: BUSY Redis is busy running a script. You can only call SCRIPT KILL",
            True,
        ),
        ("Command # 2 (GET k) of pipeline caused error: LOADING Redis is loading", True),
        ("Command # 1 (INCR k) of pipeline caused error: WRONGTYPE Operation against", False),
        ("ERR unknown command 'X'", False),
    ],
)
def test_a_busy_server_is_waited_out_whatever_the_text_starts_with(text: str, waited: bool) -> None:
    assert transient(redis.ResponseError(text)) is waited
