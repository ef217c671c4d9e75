"""What `make demo` runs and shows: the 1-client sweep and a contention slice where lost
updates appear, a table that fits 100 columns (``--wide`` for the rest), and a Makefile that
installs only what the demo needs."""

from __future__ import annotations

from typing import Any

from luapipe.cli.bench import demo_parts
from luapipe.report import render_table

from ..conftest import EXAMPLES_DIR
from ..report.sample import sample_result


def test_the_demo_has_a_contention_slice_where_updates_can_be_lost() -> None:
    (sweep, one), (hot, four) = demo_parts(0.6)
    assert [w.name for w in sweep] == ["update_token", "reserve_stock", "rate_limit"]
    assert one.clients == (1,) and one.rtts_ms == (0.0, 0.25, 1.0)
    assert one.rounds >= 6  # enough rounds for a 95% interval: the verdict can decide
    assert [w.name for w in hot] == ["reserve_stock", "rate_limit"]  # writes depend on reads
    assert four.clients == (4,) and all(w.contention == "hot" for w in hot)
    assert all({"naive", "pipelined"} <= set(w.forms) for w in hot)  # the racing forms run
    assert all(w.describe()["read_compute_write"] for w in hot)


def _result() -> dict[str, Any]:
    data = sample_result()
    for r in data["records"]:  # a long note of a real run: one 654-character line before
        r["invariant_detail"] = "invariant broken in 12 of 64 cases: " + "x " * 300
    return data


def test_the_table_fits_100_columns_with_notes_wrapped_and_wide_has_the_rest() -> None:
    data = _result()
    table = render_table(data)
    assert max(len(line) for line in table.splitlines()) <= 100
    assert "at 0.25 ms RTT (measured 0.255), 4 clients" in table  # a block per point
    assert "model ms" not in table and "byst p99" not in table and "--wide" in table
    wide = render_table(data, wide=True)
    header = wide.splitlines()[0]
    assert "model ms" in header and "byst p99" in header and "p99.9" in header
    assert len(header) > 100  # the rest, on request


def test_make_demo_installs_the_runtime_dependencies_not_the_test_extras() -> None:
    makefile = (EXAMPLES_DIR.parent / "Makefile").read_text()
    demo = makefile[makefile.index("\ndemo:") :].split("\n\n")[0]
    prerequisites = demo.splitlines()[1].split(":", 1)[1].split()
    assert "venv" not in prerequisites and "$(RUN_STAMP)" in prerequisites
    stamp = makefile[makefile.index("\n$(RUN_STAMP):") :].split("\n\n")[0]
    assert "pip install -q -e ." in stamp and "[test]" not in stamp


def test_what_would_decide_a_demo_cell_names_options_a_demo_user_can_pass() -> None:
    """The demo has no --rounds: "more rounds (--rounds 40)" sent a demo user to
    `luapipe demo --rounds 40`, "No such option". Every option the words name is the demo's
    own or is named with the command that takes it."""
    import re

    import click

    from luapipe.bench.verdict import recommend
    from luapipe.cli.bench import demo

    from ..bench.test_recommend import RCW, rec

    own = {o for p in demo.params if isinstance(p, click.Option) for o in p.opts}
    wide = [rec("script", [1.0, 1.3] * 10, **RCW), rec("function", [1.3, 1.0] * 10, **RCW)]
    few = [rec("script", [1.0, 1.3] * 2, **RCW), rec("function", [1.3, 1.0] * 2, **RCW)]
    for rows in (wide, few):
        (r,) = recommend(rows)
        assert r.status == "inconclusive" and r.would_decide
        for option in re.findall(r"(?<![\w-])--[a-z-]+", r.would_decide):
            named = f"luapipe bench {option}" in r.would_decide
            assert option in own or named, (option, r.would_decide)
        assert "luapipe bench --rounds" in r.would_decide
        assert "would decide it" in r.text or "needed before anything is decided" in r.text
        assert "95% would decide" not in r.text
