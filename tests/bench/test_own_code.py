"""`luapipe bench` on a team's own code: an existing script, its Function twin, and the
team's Python implementations of the same operation (examples/token_bucket), on a real
redis-server: the forms run, their round trips and atomicity are what they are, the
invariant catches the racing Python forms and the verdict never picks one of them."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner, Result

from luapipe.bench.opworkload import resolve_workloads
from luapipe.bench.runner import BenchConfig, run_bench
from luapipe.bench.scriptprofile import load_profile
from luapipe.bench.scriptworkload import ScriptWorkload
from luapipe.bench.server import ServerProcess
from luapipe.cli import main
from luapipe.errors import LuapipeError, SpecError

from ..conftest import EXAMPLES_DIR

QUICK = BenchConfig(duration_s=0.3, warmup_s=0.05, rounds=2, bystander=False, patience_s=0.5)
BUCKET = EXAMPLES_DIR / "token_bucket"
INCR_CAPPED = """-- Add 1 to a counter unless it has reached its cap.
-- @key counter
-- @arg cap
-- @return {1 if added else 0, the counter}
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return {0, n} end
return {1, redis.call('INCR', KEYS[1])}
"""


@pytest.fixture
def url(redis_server: ServerProcess) -> str:
    redis.Redis(host=redis_server.host, port=redis_server.port).flushall()
    return redis_server.url


def _bench(*args: str) -> Result:
    quick = ["--duration", "0.3", "--rounds", "2", "--warmup", "0.05", "--no-bystander"]
    return CliRunner().invoke(main, ["bench", *args, *quick], catch_exceptions=False)


@pytest.fixture
def scripts(tmp_path: Path) -> Path:
    d = tmp_path / "scripts_lua"
    d.mkdir()
    (d / "incr_capped.lua").write_text(INCR_CAPPED)
    return d


def test_an_existing_script_benches_by_path_and_by_name_without_a_profile(
    url: str, scripts: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    by_path = _bench(
        str(scripts / "incr_capped.lua"), "--url", url, "--json", str(tmp_path / "a.json")
    )
    assert by_path.exit_code == 0, by_path.output
    rows = {r["form"]: r for r in json.loads((tmp_path / "a.json").read_text())["records"]}
    assert set(rows) == {"script", "function"}
    assert rows["script"]["round_trips_per_op"] == rows["function"]["round_trips_per_op"] == 1
    assert rows["script"]["errors"] == rows["function"]["errors"] == 0
    assert "recommendation: incr_capped at 0 ms RTT" in by_path.output
    monkeypatch.chdir(tmp_path)  # ./scripts_lua is where a NAME is looked for
    by_name = _bench("incr_capped", "--url", url)
    assert by_name.exit_code == 0, by_name.output
    assert "recommendation: incr_capped at 0 ms RTT" in by_name.output
    elsewhere = _bench("incr_capped", "--url", url, "--dir", str(tmp_path / "nowhere"))
    assert elsewhere.exit_code == 1 and "not a script of the scripts directory" in elsewhere.output


def test_the_team_forms_run_beside_the_script_with_their_own_round_trips(url: str) -> None:
    result = run_bench(url, resolve_workloads([str(BUCKET / "token_bucket.lua")]), QUICK)
    rows = {r.form: r for r in result.records}
    assert list(rows) == ["script", "function", "py_naive", "py_watch", "py_async"]
    assert {f: r.atomic for f, r in rows.items()} == {
        "script": True,
        "function": True,
        "py_naive": False,
        "py_watch": True,
        "py_async": False,
    }
    trips = {f: r.round_trips_per_op for f, r in rows.items()}
    assert trips["script"] == trips["function"] == 1
    assert trips["py_naive"] == trips["py_async"] == 2  # HMGET, then the writes (asyncio too)
    assert trips["py_watch"] == 3  # WATCH + HMGET, MULTI/EXEC... one round trip each
    for f, r in rows.items():
        assert r.errors == 0 and r.calls > 0 and r.invariant_ok, f
        assert r.write_share == 1.0, f  # every call took a token: the replies say so
        assert r.server_usec_per_op > 0, f
    described = result.manifest["spec"]["workloads"][0]
    assert described["kind"] == "script" and described["forms"]["py_async"]["async"] is True


def test_hot_contention_catches_the_racing_python_forms(url: str, tmp_path: Path) -> None:
    """Every client on one bucket of 20 tokens, renewed when it runs dry: the Python forms
    that read, then write, hand out tokens they do not have; the atomic ones never do.
    Asserted on counts, not on timing."""
    out = tmp_path / "hot.json"
    run = _bench(
        str(BUCKET / "token_bucket.lua"), "--url", url, "--contention", "hot",
        "--clients", "4", "--json", str(out), "--html", str(tmp_path / "hot.html"),
    )  # fmt: skip
    assert run.exit_code == 0, run.output
    page = (tmp_path / "hot.html").read_text()
    assert "Bench profile</b> (the script&#39;s bench profile):\nA bucket per user" in page
    data = json.loads(out.read_text())
    for r in data["records"]:
        assert r["invariant_cases"] > 2, r["form"]  # buckets were renewed: the boundary recurs
        if r["form"] in ("py_naive", "py_async"):
            assert not r["invariant_ok"] and r["lost_updates"] >= 1, r["form"]
        else:
            assert r["invariant_ok"] and r["lost_updates"] == 0, r["form"]
    for rec in data["recommendations"]:
        assert rec["form"] in ("script", "function", "py_watch", None)


def test_profile_problems_are_listed_with_file_and_line(tmp_path: Path) -> None:
    shutil.copy(BUCKET / "token_bucket.lua", tmp_path / "token_bucket.lua")
    profile = tmp_path / "token_bucket.bench.toml"
    profile.write_text(
        'wrote = "first"\n'
        'renew = "refused"\n'
        "[state]\n"
        'bucket = "10"\n'
        "[args]\n"
        "capacity = 5\n"
        "speed = 2\n"
        "[forms]\n"
        'script = { call = "x:y" }\n'
        'mine = { call = "no_such_module_here:take", atomic = "yes" }\n'
    )
    with pytest.raises(SpecError) as err:
        load_profile(profile)
    problems = err.value.problems
    expected = [
        ":1: wrote: must be",
        ':2: renew: "refused" needs to know from the reply',
        ":4: state.bucket: its commands use it as a hash, not a string",
        ":7: args.speed: unknown arg 'speed'",
        ":9: forms.script: 'script' cannot name a form of your own",
        ":10: forms.mine.atomic: must be true or false",
        ":10: forms.mine: cannot import 'no_such_module_here'",
    ]
    for fragment in expected:
        assert any(fragment in p for p in problems), (fragment, problems)
    assert all(p.startswith(str(profile)) for p in problems)


def test_a_python_form_must_take_client_keys_and_args(tmp_path: Path) -> None:
    shutil.copy(BUCKET / "token_bucket.lua", tmp_path / "token_bucket.lua")
    (tmp_path / "two_args.py").write_text("def take(client, keys):\n    return [1, 0]\n")
    profile = tmp_path / "token_bucket.bench.toml"
    profile.write_text('[forms]\nmine = "two_args:take"\n')
    with pytest.raises(
        SpecError, match=r"bench.toml:2: forms.mine: two_args:take takes 2 arguments"
    ):
        load_profile(profile)


def test_a_script_a_function_cannot_run_is_timed_alone(tmp_path: Path) -> None:
    script = tmp_path / "legacy.lua"
    script.write_text("-- @key k\nredis.replicate_commands()\nreturn redis.call('INCR', KEYS[1])\n")
    (w,) = resolve_workloads([str(script)])
    assert isinstance(w, ScriptWorkload) and w.forms == ("script",)
    assert "uses redis.replicate_commands" in w.describe()["function"]


def test_no_case_that_runs_asks_for_a_profile(url: str, tmp_path: Path) -> None:
    script = tmp_path / "always_fails.lua"
    script.write_text("-- @key k\nreturn redis.error_reply('ERR never')\n")
    with pytest.raises(LuapipeError, match=r"always_fails.bench.toml beside the script"):
        run_bench(url, resolve_workloads([str(script)]), QUICK)


def test_a_library_file_is_not_a_script_to_bench(tmp_path: Path) -> None:
    lib = tmp_path / "lib.lua"
    lib.write_text("#!lua name=lib\nredis.register_function('f', function() return 1 end)\n")
    with pytest.raises(LuapipeError, match="a Function library, not a script"):
        resolve_workloads([str(lib)])


def test_an_asyncio_pipeline_counts_each_command_once(redis_server: ServerProcess) -> None:
    """redis.asyncio packs a pipeline's commands one by one through pack_command: counting
    in pack_commands too counted a 2-command pipeline as 4 (cmd/op of --tasks forms)."""
    import asyncio

    import redis.asyncio

    from luapipe.bench import pyforms, tasks

    async def pipeline_of_two(connection_class: type) -> Any:
        pool = redis.asyncio.ConnectionPool(
            host=redis_server.host, port=redis_server.port, connection_class=connection_class
        )
        client = redis.asyncio.Redis(connection_pool=pool)
        await client.ping()
        conn = pool._available_connections[0]
        before = dict(tasks._COUNTS), getattr(conn, "commands", 0)
        pipe = client.pipeline(transaction=False)
        pipe.incr("luapipe:bench:t:a").incr("luapipe:bench:t:b")
        await pipe.execute()
        await client.aclose()
        shared = tasks._COUNTS["commands"] - before[0]["commands"]
        return shared, getattr(conn, "commands", 0) - before[1]

    assert asyncio.run(pipeline_of_two(tasks.CountingAsyncConnection))[0] == 2  # --tasks
    assert asyncio.run(pipeline_of_two(pyforms._CountingAsyncConnection))[1] == 2  # async def


def test_with_asyncio_tasks_only_what_runs_on_an_event_loop_is_timed() -> None:
    (w,) = resolve_workloads([str(BUCKET / "token_bucket.lua")], tasks=4)
    assert w.forms == ("script", "function", "py_async")
    assert w.describe()["not_timed"].startswith("py_naive, py_watch: a plain Python function")


class _Counter:
    """The smallest Workload the README describes: INCR, one by one or in a MULTI."""

    name = "hits"
    forms = ("naive", "mine")
    batch = 1
    atomic_forms = frozenset({"mine"})
    write_share_declared = 1.0

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "custom", "read_compute_write": False}

    def reset(self, client: redis.Redis) -> None:
        client.delete("luapipe:bench:hits:n")

    def prepare(self, client: redis.Redis, form: str) -> None:
        return None

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> Any:
        def call(i: int) -> int:
            if form == "naive":
                client.incr("luapipe:bench:hits:n")
            else:
                pipe = client.pipeline(transaction=True)
                pipe.incr("luapipe:bench:hits:n").expire("luapipe:bench:hits:n", 60)
                pipe.execute()
            return 0

        return call

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        n = int(client.get("luapipe:bench:hits:n") or 0)
        return n == ops_done, f"{n} hits for {ops_done} calls"


def test_a_workload_of_ones_own_runs_as_the_readme_says(url: str, tmp_path: Path) -> None:
    from luapipe.report import write_html

    result = run_bench(url, [_Counter()], QUICK)
    rows = {r.form: r for r in result.records}
    assert rows["naive"].round_trips_per_op == rows["mine"].round_trips_per_op == 1
    assert rows["mine"].commands_per_op == 4  # MULTI, INCR, EXPIRE, EXEC
    assert (rows["naive"].atomic, rows["mine"].atomic) == (False, True)
    assert all(r.invariant_ok and r.calls > 0 for r in rows.values())
    write_html(result.as_dict(), str(tmp_path / "hits.html"))
    assert "Operation: hits" in (tmp_path / "hits.html").read_text()


def test_the_profile_described_is_the_one_the_contention_draws() -> None:
    """--contention hot draws the profile's [hot] table: the manifest (and the report's
    "Bench profile" line) said the spread one's share, renewal and state instead."""
    (hot,) = resolve_workloads([str(BUCKET / "token_bucket.lua")], contention="hot")
    said = hot.describe()["bench_profile"]
    assert (said["write_share"], said["renew"]) == (0.9, "refused")
    assert said["state"] == {"bucket": "hash of 2"} and hot.write_share_declared == 0.9
    (spread,) = resolve_workloads([str(BUCKET / "token_bucket.lua")])
    assert (spread.describe()["bench_profile"]["write_share"], spread.write_share_declared) == (
        1.0,
        1.0,
    )
    assert spread.describe()["bench_profile"]["renew"] == "never"


def test_the_forms_left_untimed_are_skipped_with_the_reason_in_the_results(
    url: str, tmp_path: Path
) -> None:
    """README: a script a function cannot run "is timed alone, and the results say why";
    with --tasks the plain Python forms are not timed. The reason was only in the manifest:
    the table, the report and the verdict ('use script: the only form at stake that ran
    correctly') never said the function, or py_watch, was left out."""
    script = tmp_path / "legacy.lua"
    script.write_text("-- @key k\nredis.replicate_commands()\nreturn redis.call('INCR', KEYS[1])\n")
    run = _bench(str(script), "--url", url, "--json", str(tmp_path / "l.json"))
    assert run.exit_code == 0, run.output
    assert "skipped legacy function: line 2 uses redis.replicate_commands" in run.output
    data = json.loads((tmp_path / "l.json").read_text())
    assert [s["form"] for s in data["skipped"]] == ["function"]
    (rec,) = data["recommendations"]
    assert "function could not run here: line 2 uses redis.replicate_commands" in rec["text"]
    from luapipe.report import write_html

    write_html(data, str(tmp_path / "l.html"))
    page = (tmp_path / "l.html").read_text()
    assert '<h2 id="skipped">Skipped forms</h2>' in page and "or the run leaves them out" in page
    quick = BenchConfig(duration_s=0.2, warmup_s=0.05, rounds=1, bystander=False, tasks=2)
    result = run_bench(url, resolve_workloads([str(BUCKET / "token_bucket.lua")], tasks=2), quick)
    skipped = {s["form"]: s["reason"] for s in result.skipped}
    assert sorted(skipped) == ["py_naive", "py_watch"]
    assert skipped["py_watch"].startswith("a plain Python function is timed with --tasks 1")
    assert "py_watch" not in {r.form for r in result.records}


FAULTY_FORMS = """
import asyncio

def boom(client, keys, args):
    client.incr(keys[0])
    raise RuntimeError("boom in the team's code")

async def boom_async(client, keys, args):
    await client.incr(keys[0])
    raise KeyError("no such thing")
"""


@pytest.mark.parametrize("clients", ["1", "2"])
def test_a_python_form_that_raises_is_counted_and_the_loop_goes_on(
    url: str, tmp_path: Path, clients: str
) -> None:
    """README: "Raise on an error: it is counted, and the loop goes on." A team's own error
    (not redis-py's) ended the run with a traceback (one client) or lost the worker's slice
    (several)."""
    (tmp_path / "incr_capped.lua").write_text(INCR_CAPPED)
    module = f"faulty_{clients}"  # one module per name in a process (one per parameter)
    (tmp_path / f"{module}.py").write_text(FAULTY_FORMS)
    (tmp_path / "incr_capped.bench.toml").write_text(
        'wrote = "returns[1]"\n[args]\ncap = 1000000000\n'
        f'[forms]\nboom = "{module}:boom"\nboom_async = "{module}:boom_async"\n'
    )
    out = tmp_path / "r.json"
    run = _bench(str(tmp_path / "incr_capped.lua"), "--url", url, "--clients", clients,
                 "--json", str(out))  # fmt: skip
    assert run.exit_code == 0, run.output
    rows = {r["form"]: r for r in json.loads(out.read_text())["records"]}
    for form, raised in (("boom", "RuntimeError: boom"), ("boom_async", "KeyError")):
        assert rows[form]["calls"] == 0 and rows[form]["errors"] > 20, rows[form]  # each call
        assert raised in rows[form]["error_samples"][0], rows[form]["error_samples"]
    assert rows["script"]["errors"] == 0 and rows["script"]["calls"] > 0


def test_a_python_form_that_needs_more_than_client_keys_and_args_is_refused(
    tmp_path: Path,
) -> None:
    shutil.copy(BUCKET / "token_bucket.lua", tmp_path / "token_bucket.lua")
    (tmp_path / "four.py").write_text("def take(client, keys, args, clock):\n    return [1, 0]\n")
    profile = tmp_path / "token_bucket.bench.toml"
    profile.write_text('[forms]\nmine = "four:take"\n')
    with pytest.raises(SpecError, match=r"bench.toml:2: forms.mine: four:take needs 4 arguments"):
        load_profile(profile)
    (tmp_path / "kw.py").write_text("def take(client, keys, args, *, clock):\n    return [1, 0]\n")
    profile.write_text('[forms]\nmine = "kw:take"\n')
    with pytest.raises(SpecError, match=r"bench.toml:2: forms.mine: kw:take needs clock="):
        load_profile(profile)


def test_an_invariant_that_cannot_be_imported_names_its_field(tmp_path: Path) -> None:
    shutil.copy(BUCKET / "token_bucket.lua", tmp_path / "token_bucket.lua")
    profile = tmp_path / "token_bucket.bench.toml"
    profile.write_text('write_share = 1.0\ninvariant = "no_such_module_here:ok"\n')
    with pytest.raises(SpecError, match=r"bench.toml:2: invariant: cannot import"):
        load_profile(profile)


@pytest.mark.parametrize("clients", ["1", "2"])
def test_a_python_form_that_never_returns_stops_the_run(
    url: str, tmp_path: Path, clients: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A form stuck in the team's code (a lock never released, a sleep) hung the bench for
    good: nothing bounds a Python call (a script's is bounded by the server's BUSY)."""
    from luapipe.bench import loop

    monkeypatch.setattr(loop, "HUNG_AFTER_S", 1.0)
    (tmp_path / "incr_capped.lua").write_text(INCR_CAPPED)
    (tmp_path / f"stuck_{clients}.py").write_text(  # one module per name in a process
        "import time\n\ndef wait(client, keys, args):\n    time.sleep(3600)\n"
    )
    (tmp_path / "incr_capped.bench.toml").write_text(
        f'[args]\ncap = 1000000000\n[forms]\nstuck = "stuck_{clients}:wait"\n'
    )
    started = time.monotonic()
    run = _bench(str(tmp_path / "incr_capped.lua"), "--url", url, "--clients", clients)
    assert run.exit_code == 1, run.output
    assert "incr_capped stuck: a call was still running 1 s after its timed window" in run.output
    assert time.monotonic() - started < 30


def test_a_tasks_slice_longer_than_the_connect_wait_is_timed(
    url: str, scripts: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A --tasks worker answers with its result, not "ready": the parent waited for it only
    READY_TIMEOUT_S (30 s), so every slice of --duration 31 --rounds 1 was lost as 'worker
    did not connect within 30 s' (0 calls, 1 error per form)."""
    from luapipe.bench import loop

    monkeypatch.setattr(loop, "READY_TIMEOUT_S", 0.5)
    cfg = BenchConfig(duration_s=1.0, warmup_s=0.05, rounds=1, bystander=False, tasks=2)
    result = run_bench(url, resolve_workloads([str(scripts / "incr_capped.lua")], tasks=2), cfg)
    for r in result.records:
        assert r.errors == 0 and r.calls > 20, (r.form, r.errors, r.error_samples)


def test_a_script_named_as_a_catalogue_operation_is_pointed_out(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalogue comes first (README): a team's scripts_lua/reserve_stock.lua was never
    timed by `bench reserve_stock`, even with --dir, and nothing said so."""
    mine = tmp_path / "scripts_lua"
    mine.mkdir()
    (mine / "reserve_stock.lua").write_text(INCR_CAPPED)
    monkeypatch.chdir(tmp_path)
    run = _bench("reserve_stock", "--url", url, "--dir", str(mine))
    assert run.exit_code == 0, run.output
    assert (
        f"note: reserve_stock is the built-in or catalogue operation of that name; to bench "
        f"{mine / 'reserve_stock.lua'}"
        f", name its file: luapipe bench {mine / 'reserve_stock.lua'}"
    ) in " ".join(run.output.split())
    assert "reserve_stock at 0 ms RTT" in run.output  # the precedence itself is unchanged


HIDDEN_ASYNC_FORMS = """
import functools

async def incr(client, keys, args):
    return [1, await client.incr(keys[0])]

def logged(fn):  # a team's decorator that is not async itself
    @functools.wraps(fn)
    def wrapper(*a):
        return fn(*a)
    return wrapper

hidden = logged(incr)

class Counter:
    async def __call__(self, client, keys, args):
        return [1, await client.incr(keys[0])]

counter = Counter()
"""


def test_an_async_form_behind_a_plain_callable_is_not_timed_as_creating_coroutines(
    url: str, tmp_path: Path
) -> None:
    """A plain callable that returns a coroutine (an async def behind a decorator that is not
    async, or an object with an async __call__) was called with the sync client and its
    coroutine dropped unawaited: the table showed it 10x faster than the script, 0 round
    trips, no errors. The object is run as the async def it is; the hidden one fails each
    call, saying why."""
    (tmp_path / "incr_capped.lua").write_text(INCR_CAPPED)
    (tmp_path / "hidden_async_forms.py").write_text(HIDDEN_ASYNC_FORMS)
    (tmp_path / "incr_capped.bench.toml").write_text(
        'wrote = "returns[1]"\n[args]\ncap = 1000000000\n'
        '[forms]\nhidden = "hidden_async_forms:hidden"\ncounter = "hidden_async_forms:counter"\n'
    )
    out = tmp_path / "r.json"
    run = _bench(str(tmp_path / "incr_capped.lua"), "--url", url, "--json", str(out))
    assert run.exit_code == 0, run.output
    assert "never awaited" not in run.output
    rows = {r["form"]: r for r in json.loads(out.read_text())["records"]}
    assert rows["counter"]["errors"] == 0 and rows["counter"]["calls"] > 0
    assert rows["counter"]["round_trips_per_op"] == 1
    assert rows["hidden"]["calls"] == 0 and rows["hidden"]["errors"] > 0, rows["hidden"]
    assert (
        "form hidden returned a coroutine without awaiting it"
        in (rows["hidden"]["error_samples"][0])
    )


ASYNC_INVARIANT = """
import functools

async def in_range(client, keys, args):
    return int(await client.get(keys[0]) or 0) <= int(args[0])

def logged(fn):
    @functools.wraps(fn)
    def wrapper(*a):
        return fn(*a)
    return wrapper

hidden = logged(in_range)
"""


def test_an_async_invariant_is_refused_not_read_as_lost_updates(url: str, tmp_path: Path) -> None:
    """An async def invariant got the sync client and its coroutine was compared with the
    baseline's: every form, the script included, read FAIL 64/64 (lost updates) and the verdict
    said no form ran correctly. It is refused when the profile is read; one hidden behind a
    plain function stops the run with one line before anything is timed."""
    (tmp_path / "incr_capped.lua").write_text(INCR_CAPPED)
    (tmp_path / "async_invariant.py").write_text(ASYNC_INVARIANT)
    profile = tmp_path / "incr_capped.bench.toml"
    profile.write_text('invariant = "async_invariant:in_range"\n[args]\ncap = 1000000000\n')
    with pytest.raises(SpecError, match=r"bench.toml:1: invariant: async_invariant:in_range is "
                       r"an async def; the invariant is called between slices"):  # fmt: skip
        load_profile(profile)
    profile.write_text('invariant = "async_invariant:hidden"\n[args]\ncap = 1000000000\n')
    run = _bench(str(tmp_path / "incr_capped.lua"), "--url", url)
    assert run.exit_code == 1, run.output
    assert "error: invariant async_invariant:hidden returned a coroutine without awaiting" in (
        run.output
    )
    assert "FAIL" not in run.output


def test_a_profile_without_an_arg_every_call_needs_is_refused(tmp_path: Path) -> None:
    """A profile that left out args the header requires was accepted, and the whole run was
    spent on refused calls (err 13,298, 'no form at stake ran correctly'); so was one giving
    an arg after an optional one it left out (a call passes its args in order)."""
    shutil.copy(BUCKET / "token_bucket.lua", tmp_path / "token_bucket.lua")
    profile = tmp_path / "token_bucket.bench.toml"
    profile.write_text("write_share = 1.0\n[args]\ncapacity = 100\nrate = 10\n")
    with pytest.raises(SpecError) as err:
        load_profile(profile)
    assert err.value.problems == [
        f"{profile}:2: args: no value for now_ms, cost: every call passes the args the script "
        "takes (capacity, rate, now_ms, cost), each one not marked [optional]"
    ]
    (tmp_path / "opt.lua").write_text("-- @key k\n-- @arg [a]\n-- @arg [b]\nreturn 1\n")
    (tmp_path / "opt.bench.toml").write_text("[args]\nb = 1\n")
    with pytest.raises(SpecError, match=r"opt.bench.toml:2: args.b: given while \[a\] before"):
        load_profile(tmp_path / "opt.bench.toml")
    (tmp_path / "opt.bench.toml").write_text("[args]\na = 1\n")
    assert [a.name for a in load_profile(tmp_path / "opt.bench.toml").bench.spread.args] == ["a"]
    (tmp_path / "bare.lua").write_text("return redis.call('GET', KEYS[1]) or ARGV[1]\n")
    (tmp_path / "bare.bench.toml").write_text("write_share = 0.0\n")  # no header: unchecked
    assert load_profile(tmp_path / "bare.bench.toml").args[0].name == "arg1"


def test_two_scripts_of_one_name_are_refused_not_mixed_up(tmp_path: Path) -> None:
    """`bench v1/incr_capped.lua v2/incr_capped.lua` (an edited script against the old one)
    timed both under one name: one block with two 'script' and two 'function' rows, a
    verdict of 'function vs function', and both on the same bench keys."""
    for version in ("v1", "v2"):
        (tmp_path / version).mkdir()
        (tmp_path / version / "incr_capped.lua").write_text(INCR_CAPPED)
    v1, v2 = str(tmp_path / "v1" / "incr_capped.lua"), str(tmp_path / "v2" / "incr_capped.lua")
    with pytest.raises(LuapipeError, match=f"{v1} and {v2} are both timed as 'incr_capped'"):
        resolve_workloads([v1, v2])
    with pytest.raises(LuapipeError, match="reserve_stock is named twice"):
        resolve_workloads(["reserve_stock", "reserve_stock"])
    assert [w.name for w in resolve_workloads([v1, "reserve_stock"])] == [
        "incr_capped",
        "reserve_stock",
    ]


def test_two_profiles_with_a_module_of_one_name_are_refused(tmp_path: Path) -> None:
    """Python imports one module per name: a second profile whose folder holds its own
    forms.py got the first profile's forms module, and its form timed the other's code
    without a word (b's form, which raises on every call, ran a's, no errors)."""
    for version, body in (("a", "return [1, client.incr(keys[0])]"), ("b", "raise KeyError")):
        d = tmp_path / version
        d.mkdir()
        (d / "incr_capped.lua").write_text(INCR_CAPPED)
        (d / "same_name_forms.py").write_text(f"def take(client, keys, args):\n    {body}\n")
        (d / "incr_capped.bench.toml").write_text(
            '[args]\ncap = 1000000000\n[forms]\nmine = "same_name_forms:take"\n'
        )
    load_profile(tmp_path / "a" / "incr_capped.bench.toml")
    load_profile(tmp_path / "a" / "incr_capped.bench.toml")  # the same module: fine
    with pytest.raises(SpecError) as err:
        load_profile(tmp_path / "b" / "incr_capped.bench.toml")
    assert err.value.problems == [
        f"{tmp_path / 'b' / 'incr_capped.bench.toml'}:4: forms.mine: 'same_name_forms' is "
        f"{tmp_path / 'b' / 'same_name_forms.py'} here, but {tmp_path / 'a' / 'same_name_forms.py'}"
        " was imported under that name already (another profile's): Python keeps one module "
        "per name, so this profile would run that one; give one of them another name"
    ]


class _AsyncCounter(_Counter):
    """_Counter with the optional parts the README lists: asyncio calls for --tasks, and
    how many cases its invariant found broken."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}

    def op_fn_async(self, client: Any, form: str, worker: int, seed: int) -> Any:
        async def call(i: int) -> int:
            await client.incr("luapipe:bench:hits:n")
            return 0

        return call

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        self.state["checked"] = (1, 3)  # as if one case of three were found broken
        return False, "1 of 3 cases broken"


def test_a_workload_of_ones_own_with_asyncio_calls_runs_under_tasks(url: str) -> None:
    """The Workload protocol's optional op_fn_async (README): --tasks awaits it; and the
    invariant's own count of broken cases is what the results say (FAIL 1/3)."""
    quick = BenchConfig(duration_s=0.2, warmup_s=0.05, rounds=1, bystander=False, tasks=2)
    result = run_bench(url, [_AsyncCounter()], quick)
    for r in result.records:
        assert r.calls > 0 and r.errors == 0, (r.form, r.error_samples)
        assert (r.lost_updates, r.invariant_cases) == (1, 3), r.form
    with pytest.raises(LuapipeError, match="hits has no asyncio calls"):
        run_bench(url, [_Counter()], quick)


def test_a_script_that_does_not_compile_is_its_syntax_error(tmp_path: Path) -> None:
    """`bench broken.lua` started a server, drew cases, and said "no sampled case runs
    without an error; write a bench profile": the script's syntax error, file:line, is
    what a user must read, before any server starts."""
    script = tmp_path / "broken.lua"
    script.write_text("-- @key k\nreturn redis.call('GET', KEYS[1]\n")
    for target in (script, tmp_path / "broken.bench.toml"):
        (tmp_path / "broken.bench.toml").write_text("write_share = 0.0\n")
        with pytest.raises(LuapipeError, match=rf"{script}:3: Lua syntax error: '\)' expected"):
            resolve_workloads([str(target)])
