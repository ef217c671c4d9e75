"""The retry policy is bounded (issue 16): counts are whole and not negative, waits finite,
and the backoff stays under its cap at any attempt (``2**1024`` used to overflow)."""

from __future__ import annotations

import math

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

import luapipe
from luapipe.errors import CallArgumentError
from luapipe.wire.policy import DEFAULT, RetryPolicy, policy_of

from ..conftest import EXAMPLES_DIR

STOCK = luapipe.load_operation(EXAMPLES_DIR / "operations" / "reserve_stock.toml")


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"watch_retries": -1}, "watch_retries (max_retries) must be a whole number >= 0, got -1"),
        ({"watch_retries": 2.5}, "watch_retries (max_retries) must be a whole number >= 0"),
        ({"watch_retries": True}, "watch_retries (max_retries) must be a whole number >= 0"),
        ({"redirects": 0}, "redirects must be a whole number >= 1, got 0"),
        ({"redirects": -3}, "redirects must be a whole number >= 1, got -3"),
        ({"refresh_cap": math.inf}, "refresh_cap must be a finite number of seconds >= 0"),
        ({"watch_base": -0.1}, "watch_base must be a finite number of seconds >= 0"),
        ({"refresh_base": math.nan}, "refresh_base must be a finite number of seconds >= 0"),
    ],
)
def test_a_policy_refuses_what_cannot_be_a_count_or_a_wait(
    fields: dict[str, object], said: str
) -> None:
    with pytest.raises(CallArgumentError, match=said.replace("(", r"\(").replace(")", r"\)")):
        RetryPolicy(**fields)  # type: ignore[arg-type]


def test_max_retries_refuses_a_negative_count_before_sending(r: redis.Redis) -> None:
    """``max_retries=-1`` used to send nothing and report "WATCH failed 0 times in a row"."""
    with pytest.raises(CallArgumentError, match="max_retries must be a whole number >= 0, got -1"):
        policy_of(-1)
    with pytest.raises(CallArgumentError, match="max_retries must be a whole number >= 0"):
        STOCK.run_detailed(r, "transaction", keys={"stock": "s"}, args={"qty": 1}, max_retries=-1)
    assert policy_of(0).watch_retries == 0 and policy_of(None) is DEFAULT
    assert r.dbsize() == 0


@given(
    attempt=st.one_of(st.integers(min_value=-5, max_value=5000), st.just(100_000), st.just(1024)),
    base=st.floats(min_value=0, max_value=10, allow_nan=False),
    cap=st.floats(min_value=0, max_value=10, allow_nan=False),
)
def test_the_backoff_is_capped_at_any_attempt(attempt: int, base: float, cap: float) -> None:
    policy = RetryPolicy(refresh_base=base, refresh_cap=cap, watch_base=base, watch_cap=cap)
    delay = policy.refresh_delay(attempt)
    assert 0 <= delay <= cap and math.isfinite(delay)
    assert 0 <= policy.watch_delay(attempt) <= cap
    assert policy.refresh_delay(attempt + 1) >= delay  # never shrinks as attempts go on
