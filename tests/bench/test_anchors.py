"""`bench --anchors`: progress from its first step, and every published point timed long
enough that its verdict never ends in "too few samples"."""

from __future__ import annotations

import redis

from luapipe.bench.anchors import CALLS_PER_FORM, DURATION_S, anchor_duration_s, run_anchors
from luapipe.bench.runner import Progress
from luapipe.bench.server import ServerProcess
from luapipe.bench.verdict import MIN_CALLS, recommendations


def test_each_rtt_is_timed_long_enough_for_the_slowest_form() -> None:
    assert CALLS_PER_FORM > MIN_CALLS
    assert anchor_duration_s(0.271, DURATION_S) == DURATION_S  # short RTTs keep the default
    for rtt in (20.0, 48.0, 200.0):
        # naive update_token: 5 round trips a call, each at least the RTT
        assert anchor_duration_s(rtt, DURATION_S) / (5 * rtt / 1000) >= CALLS_PER_FORM


def test_anchors_report_progress_from_the_start_and_recommend_at_every_rtt(
    redis_server: ServerProcess,
) -> None:
    redis.Redis(host=redis_server.host, port=redis_server.port).flushall()
    seen: list[Progress] = []
    rep = run_anchors(
        redis_server.url,
        rtts_ms=(0.0, 4.0),  # RTT 0 needs no proxy: the test stays short
        duration_s=0.3,
        progress=seen.append,
        pings=300,
        harness_tries=1,
        accuracy_rtts=(),
    )
    first = seen[0]
    assert (first.done, "PINGs") == (0, first.label.split()[1])  # before the first PING
    assert [p.done for p in seen] == sorted(p.done for p in seen)  # never goes back
    assert all(p.done <= p.total for p in seen)
    assert seen[-1].done == seen[-1].total
    labels = [p.label for p in seen]
    assert "harness check 1 of 1" in labels
    assert any("rtt=4" in label for label in labels)
    records = rep.bench.as_dict()["records"]
    assert sorted({r["rtt_ms_nominal"] for r in records}) == [0.0, 4.0]
    assert all(r["calls"] >= MIN_CALLS for r in records), [(r["form"], r["calls"]) for r in records]
    recs = recommendations(records)
    assert len(recs) == 2 and all(x["form"] is not None for x in recs), [x["text"] for x in recs]
    assert any("4 ms" in n and "raised" in n for n in rep.bench.notes)  # says it ran longer
    assert rep.bench.manifest["spec"]["config"]["durations_s"]["4"] >= anchor_duration_s(4.0, 0.3)
    assert [c.rtt_ms_nominal for c in rep.bench.calibrations] == [0.0, 4.0]
