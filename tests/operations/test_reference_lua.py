"""The hand-written references of examples/bench/reference_lua/ behave as the generated
scripts they are timed against (examples/bench/generated_vs_hand.py): the same reply or
error, the same keys after, on verify's random cases (missing keys, wrong types, numbers at
2^53, non-numbers) and on arguments the Python forms never send (not integers, beyond 2^53).
So the benchmark compares two scripts that do the same work, checks included."""

from __future__ import annotations

import random
from typing import Any

import pytest
import redis

from luapipe.operations.casegen import sample_case
from luapipe.operations.keyspace import dump, setup
from luapipe.operations.plan import bind, plan_of, wire
from luapipe.operations.spec import load_operation
from luapipe.operations.steps import split
from luapipe.operations.verify import error_code

from ..conftest import EXAMPLES_DIR

REFERENCES = EXAMPLES_DIR / "bench" / "reference_lua"
OPS = {p.stem: load_operation(p) for p in sorted((EXAMPLES_DIR / "operations").glob("*.toml"))}
BAD_INTS = ("abc", "", "007", "-0", "1.5", "9007199254740992", "-9007199254740992", " 1")


def _run(r: redis.Redis, sha: str, keys: list[Any], args: list[Any]) -> tuple[str, Any]:
    try:
        return ("ok", wire(r.evalsha(sha, len(keys), *keys, *args)))
    except redis.ResponseError as exc:  # the same error, raised by error() or error_reply()
        code = error_code(exc)
        return ("error", (str(exc) if code == "ResponseError" else code).removeprefix("ERR "))


def test_every_catalogue_operation_has_a_reference() -> None:
    assert sorted(p.stem for p in REFERENCES.glob("*.lua")) == sorted(OPS)


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_reference_agrees_with_the_generated_script(r: redis.Redis, name: str) -> None:
    op = OPS[name]
    plan = plan_of(op)
    generated = r.script_load(op.lua_source)
    reference = r.script_load((REFERENCES / f"{name}.lua").read_text(encoding="utf-8"))
    rng = random.Random(7)
    ints = [i for i, a in enumerate(op.args) if a.type.kind == "int"]
    errors = 0
    for index in range(300):
        case = sample_case(op, rng, f"ref:{name}:", seed=7, index=index)
        keys, args = split(plan, bind(plan, case.keys_dict, case.args_dict))
        if ints and index % 5 == 0:  # a bad integer argument, as a direct caller may send
            args[rng.choice(ints)] = rng.choice(BAD_INTS).encode()
        seen = []
        for sha in (generated, reference):
            setup(r, case)
            seen.append((_run(r, sha, keys, args), dump(r, case.namespace)))
        assert seen[0] == seen[1], (index, case, args)
        errors += seen[0][0][0] == "error"
    assert 0 < errors < 300  # both paths were taken
