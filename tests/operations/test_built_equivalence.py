"""A built library gives the same replies and effects as its scripts: ``verify``'s machinery
(random keyspaces and args; reply or error and the whole keyspace compared) with the
script (EVALSHA) and its function (FCALL) as the two forms, on a real server and on
fakeredis, for the bundled scripts and the real scripts of tests/REAL_SCRIPTS.md."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

import luapipe.scripts.build as build_module
from luapipe.operations.builtverify import verify_built
from luapipe.operations.scriptcases import key_families, script_case, script_shape
from luapipe.scripts.registry import ScriptRegistry
from luapipe.scripts.script import LuaScript

from ..real_scripts import PACKAGES, real_scripts

BUNDLED_CASES = 100
REAL_CASES = 12


def _check(reg: ScriptRegistry, client: redis.Redis, cases: int) -> int:
    result = verify_built(reg, client, cases=cases, whole_keyspace=True)
    bad = [r.mismatch.describe() for r in result.reports if r.mismatch is not None]
    assert bad == [], "\n".join(bad)
    assert result.unconverted == ()
    assert all(r.cases == cases for r in result.reports)
    # the error paths agree too: some cases failed in both forms, not all
    assert 0 < sum(r.errors_agreed for r in result.reports) < result.cases
    return result.cases


def test_bundled_scripts_and_their_functions_agree(scripts_dir: Path, client: redis.Redis) -> None:
    reg = ScriptRegistry.from_directory(scripts_dir, functions="app")
    checked = _check(reg, client, BUNDLED_CASES)
    shebang = sum(s.source.startswith("#!") for s in reg)  # fakeredis refuses '#!lua'
    skipped_on_fake = shebang if "fake" in type(client).__module__ else 0
    assert checked == BUNDLED_CASES * (len(reg) - skipped_on_fake)


@pytest.fixture(scope="module")
def real_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 87 real scripts in one directory (their names do not clash)."""
    sample = real_scripts()
    out = tmp_path_factory.mktemp("real")
    for pkg in PACKAGES:
        for path in (sample / pkg.project).glob("*.lua"):
            (out / path.name).write_bytes(path.read_bytes())
    return out


def test_real_scripts_all_convert_and_agree(real_dir: Path, client: redis.Redis) -> None:
    reg = ScriptRegistry.from_directory(real_dir, functions="app")
    assert len(reg) == 87 and reg.built is not None and reg.built.skipped == ()
    # bullmq's names hold '-': the function names do not, the calls use the script's
    assert dict(reg.built.scripts)["addStandardJob-9"].endswith("_addStandardJob_9")
    assert _check(reg, client, REAL_CASES) == 87 * REAL_CASES


def test_a_function_that_does_otherwise_is_caught(
    scripts_dir: Path, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The proof can fail: a built function that keeps one item more than its script."""
    real_body = build_module.body_of

    def off_by_one(script: LuaScript) -> tuple[str, int]:
        body, first = real_body(script)
        return body.replace("cap - 1", "cap"), first

    monkeypatch.setattr(build_module, "body_of", off_by_one)
    reg = ScriptRegistry.from_directory(scripts_dir, functions="app")
    result = verify_built(reg, client, cases=50, names=["capped_push"], reproduce="again")
    assert not result.ok
    report = result.reports[0]
    assert report.mismatch is not None
    text = report.mismatch.describe()
    assert "script and function disagree" in text
    assert "reproduce: again --script capped_push --seed 1 --cases" in text


def test_a_function_that_writes_otherwise_with_the_same_reply_is_caught(
    tmp_path: Path, client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole keyspace is compared, not only the reply."""
    (tmp_path / "mark.lua").write_text("-- @key k\nredis.call('SET', KEYS[1], 'x')\nreturn 1\n")
    real_body = build_module.body_of
    monkeypatch.setattr(
        build_module,
        "body_of",
        lambda s: (real_body(s)[0].replace("'x'", "'y'"), real_body(s)[1]),
    )
    reg = ScriptRegistry.from_directory(tmp_path, functions="app")
    result = verify_built(reg, client, cases=3, whole_keyspace=True)
    mismatch = result.reports[0].mismatch
    assert mismatch is not None and mismatch.outcome_a == mismatch.outcome_b == ("ok", 1)


def test_an_error_on_another_line_is_a_mismatch(
    tmp_path: Path, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Errors are compared whole, file:line included: a built library whose lines map one
    off would name another line than the script does."""
    (tmp_path / "boom.lua").write_text("-- @key k\n-- @arg n\nreturn nil + ARGV[1]\n")
    real_build = build_module.build_library

    def shifted(*a: object, **kw: object) -> build_module.BuiltLibrary:
        lib = real_build(*a, **kw)  # type: ignore[arg-type]
        origins = tuple(None if o is None else (o[0], o[1] + 1) for o in lib.origins)
        return build_module.BuiltLibrary(**{**lib.__dict__, "origins": origins})

    monkeypatch.setattr("luapipe.scripts.registry.build_library", shifted)
    reg = ScriptRegistry.from_directory(tmp_path, functions="app")
    result = verify_built(reg, r, cases=5, whole_keyspace=True)
    assert not result.ok


def test_cases_follow_the_header_or_what_the_code_reads() -> None:
    import random

    declared = LuaScript.from_source(
        "d", "-- @key a\n-- @key [more...]\n-- @arg n\n-- @arg [opt]\nreturn 1\n"
    )
    keys, args = script_shape(declared)
    assert [p.display for p in keys] == ["a", "[more...]"]
    counts = set()
    rng = random.Random(1)
    for i in range(40):
        case = script_case(declared, rng, "ns:", index=i)
        names = dict(case.keys)
        assert names["a"] == "ns:a"
        counts.add((len(case.keys), len(case.args)))
    assert counts == {(1, 1), (1, 2), (2, 1), (2, 2)}
    bare = LuaScript.from_source(
        "b",
        "local h = KEYS[2]\nredis.call('HSET', h, 'f', ARGV[3])\n"
        "return redis.call('ZADD', KEYS[1], 1, 'm')\n",
    )
    keys, args = script_shape(bare)
    assert ([p.name for p in keys], [p.name for p in args]) == (
        ["key1", "key2"],
        ["arg1", "arg2", "arg3"],
    )
    assert key_families(bare.source) == {1: "zset", 2: "hash"}


def test_a_command_unknown_inside_the_script_agrees_on_both_servers(
    tmp_path: Path, client: redis.Redis
) -> None:
    """bullmq's reprocessJob-9 runs a command named by an arg: with 50 cases on fakeredis a
    case named '11', and the script's error (fakeredis: "ERR unknown command '11'", which
    luapipe reads as "the server does not know 11") and the function's ("ERR Unknown Redis
    command called from script") were a mismatch; they mean the same."""
    (tmp_path / "run.lua").write_text(
        "-- @key k\n-- @arg cmd\nreturn redis.call(ARGV[1], KEYS[1])\n"
    )
    reg = ScriptRegistry.from_directory(tmp_path, functions="app")
    result = verify_built(reg, client, cases=20, whole_keyspace=True)
    bad = [r.mismatch.describe() for r in result.reports if r.mismatch is not None]
    assert bad == [] and result.reports[0].errors_agreed > 5, bad
