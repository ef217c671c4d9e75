"""The reply of a write, named (``[[writes]] name = "length"``), in the returns: used,
returned and compared the same in every form.

Every form knows a write's reply only after its writes: the pipelined form after its write
batch, the transaction form after EXEC. So only the returns may use one, and the spec
refuses any other use with one line naming the file, the line and the field. The reply is
then computed after the writes (an error in it comes after they ran, in every form).
"""

from __future__ import annotations

import pytest
import redis

from luapipe.errors import LuapipeError, SpecError
from luapipe.operations.spec import load_operation, parse_operation
from luapipe.operations.verify import verify

from ..conftest import EXAMPLES_DIR

FORMS = ("naive", "pipelined", "transaction", "script", "function")

#: every kind of reply: a counter (checked against 2^53), SET NX as a bool, a float sent as
#: text, an optional string converted to an int, a nil under a false when, a list under each
REPLIES = """
name = "replies"
keys = ["counter", "flag", "board", "queue", "tags..."]
returns = [
  "after", "fresh", "total", "coalesce(popped, '-')", "old", "added",
  "if(is_nil(bumped), -1, if(coalesce(bumped, 0) > after, 1, 0))",
]

[args]
by = { type = "int", min = -3, max = 3 }
member = { type = "str", samples = ["a", "b"] }
again = "bool"

[[writes]]
name = "after"
cmd = "INCRBY"
key = "counter"
args = ["by"]

[[writes]]
name = "fresh"
cmd = "SET"
key = "flag"
args = ["'1'", "'NX'"]

[[writes]]
name = "total"
cmd = "ZINCRBY"
key = "board"
args = ["1.5", "member"]

[[writes]]
name = "popped"
cmd = "RPOP"
key = "queue"

[[writes]]
name = "old"
cmd = "GETSET"
key = "flag"
args = ["'2'"]
as = "int"

[[writes]]
name = "added"
each = "tags"
cmd = "SADD"
key = "it"
args = ["member"]

[[writes]]
name = "bumped"
cmd = "INCR"
key = "counter"
when = "again"
"""


def forms_for(client: redis.Redis) -> tuple[str, ...]:
    """Every form, but the function form on fakeredis: its Function runtime (2.40, on lupa)
    sometimes reads the message of a failed write's pcall back as another error's, so
    errors could not be compared there (the real server compares all five)."""
    fake = type(client).__module__.startswith("fakeredis")
    return tuple(f for f in FORMS if not (fake and f == "function"))


def _problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as info:
        parse_operation(text, "w.toml")
    assert all(len(p.splitlines()) == 1 for p in info.value.problems)
    return info.value.problems


def test_every_form_agrees_on_write_replies(client: redis.Redis) -> None:
    """verify on a real server and on fakeredis: replies, errors (WRONGTYPE, a counter past
    2^53, a GETSET of a non-integer) and the keys after agree in every form."""
    op = parse_operation(REPLIES, "replies.toml")
    report = verify(op, client, cases=400, seed=5, forms=forms_for(client))
    assert report.ok, report.mismatch.describe() if report.mismatch else ""
    assert 0 < report.errors_agreed < report.cases


def test_the_replies_as_each_form_returns_them(real_variant: redis.Redis) -> None:
    """RESP2 and RESP3, Python and hiredis parsers: the same values."""
    op = parse_operation(REPLIES, "replies.toml")
    keys = {"counter": "c", "flag": "f", "board": "b", "queue": "q", "tags": ["t1", "t2"]}
    for form in FORMS:
        real_variant.delete("c", "f", "b", "q", "t1", "t2")
        real_variant.set("c", 10)
        real_variant.rpush("q", "x", "y")
        real_variant.sadd("t2", "a")
        got = op.run(real_variant, form, keys=keys, args={"by": 2, "member": "a", "again": True})
        assert got == [12, 1, "1.5", "y", 1, [1, 0], 1], form
        got = op.run(real_variant, form, keys=keys, args={"by": 2, "member": "a", "again": False})
        # SET NX now finds the key (false, returned as 0); GETSET reads the 2 it wrote
        assert got == [15, 0, "3", "x", 2, [0, 0], -1], form


def test_the_catalogue_example_returns_from_lpush(r: redis.Redis) -> None:
    op = load_operation(EXAMPLES_DIR / "operations" / "capped_push.toml")
    for form in FORMS:
        r.delete("feed")
        got = [
            op.run(r, form, keys={"entries": "feed"}, args={"entry": "e", "cap": 2}) for _ in "abc"
        ]
        assert got == [[1, 0], [2, 0], [2, 1]], form
        assert r.llen("feed") == 2
    assert op.round_trips("pipelined") == op.round_trips("transaction") == 1


def test_the_reply_is_computed_after_the_writes_in_every_form(r: redis.Redis) -> None:
    """An error in a reply that uses a write's reply comes after every write ran."""
    op = parse_operation(
        """
name = "late"
keys = ["k", "log"]
returns = "n * 5000000000"
[[writes]]
name = "n"
cmd = "INCRBY"
key = "k"
args = ["1000000"]
[[writes]]
cmd = "RPUSH"
key = "log"
args = ["'ran'"]
""",
        "late.toml",
    )
    for form in FORMS:
        r.delete("k", "log")
        assert op.run(r, form, keys={"k": "k", "log": "log"}) == 5 * 10**15
        r.delete("log")
        with pytest.raises(LuapipeError, match="OVERFLOW"):
            op.run(r, form, keys={"k": "k", "log": "log"})  # 2e6 * 5e9 > 2^53
        assert r.lrange("log", 0, -1) == [b"ran"], form  # ...after every write ran


WRITE_THEN = """
name = "w"
keys = ["k"]
returns = "n"
[[writes]]
name = "n"
cmd = "RPUSH"
key = "k"
args = ["'x'"]
[[writes]]
cmd = "LTRIM"
key = "k"
args = ["0", "{arg}"]
when = "{when}"
"""


@pytest.mark.parametrize(
    ("when", "arg", "field", "line"),
    [
        ("n > 3", "9", "writes[2].when", 14),  # the "a later when"
        ("true", "n - 1", "writes[2].args", 13),
    ],
)
def test_a_later_write_may_not_use_a_reply(when: str, arg: str, field: str, line: int) -> None:
    problems = _problems(WRITE_THEN.format(when=when, arg=arg))
    assert problems == [
        f"w.toml:{line}: {field}: 'n' is the reply of writes[1]: only returns may use a write's "
        "reply (the pipelined form has it after its write batch, the transaction form after EXEC)"
    ]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ('[let]\nbig = "n > 1"\n', "let.big"),
        ('[[reads]]\nname = "r"\ncmd = "LINDEX"\nkey = "k"\nargs = ["n"]\n', "reads[1].args"),
        ('[invariant]\ncheck = "n >= 0"\n', "invariant.check"),
    ],
)
def test_reads_lets_and_the_invariant_may_not_use_a_reply(extra: str, field: str) -> None:
    text = 'name = "w"\nkeys = ["k"]\nreturns = "n"\n' + extra
    text += '[[writes]]\nname = "n"\ncmd = "RPUSH"\nkey = "k"\nargs = ["\'x\'"]\n'
    problems = _problems(text)
    assert len(problems) == 1 and f": {field}: 'n' is the reply of writes[1]:" in problems[0]


def _one_write(fields: str, returns: str = "n") -> str:
    head = f'name = "w"\nkeys = ["k", "ks..."]\nreturns = "{returns}"\n'
    return head + f'[args]\ns = "str"\n[[writes]]\n{fields}'


@pytest.mark.parametrize(
    ("fields", "returns", "want"),
    [
        ('name = "n"\ncmd = "LTRIM"\nkey = "k"\nargs = ["0", "1"]', "n",
         "w.toml:7: writes[1].name: LTRIM replies OK (a status) or an error: there is nothing"),
        ('name = "n"\ncmd = "ZPOPMIN"\nkey = "k"', "n",
         "w.toml:7: writes[1].name: ZPOPMIN replies members and scores"),
        ('name = "n"\ncmd = "SET"\nkey = "k"\nargs = ["\'v\'", "s"]', "n",
         "w.toml:7: writes[1].name: a named SET takes its options as literals"),
        ('name = "n"\ncmd = "SET"\nkey = "k"\nargs = ["\'v\'", "\'get\'"]', "n",
         "w.toml:7: writes[1].name: a named SET cannot take GET"),
        ('name = "n"\ncmd = "ZADD"\nkey = "k"\nargs = ["\'INCR\'", "1", "s"]', "n",
         "w.toml:7: writes[1].name: a named ZADD takes its options as literals, and not INCR"),
        ('name = "n"\ncmd = "ZADD"\nkey = "k"\nargs = ["\'NX\'", "s", "1", "s"]', "n",
         "w.toml:7: writes[1].name: a named ZADD takes its options as literals"),
        ('name = "n"\ncmd = "LPOP"\nkey = "k"\nargs = ["2"]', "n",
         "w.toml:7: writes[1].name: a named LPOP takes no count"),
        ('name = "n"\ncmd = "INCR"\nkey = "k"\nas = "int"', "n",
         "w.toml:10: writes[1].as: only a str reply converts, to 'int' or 'float' (INCR "),
        ('cmd = "INCR"\nkey = "k"\nas = "int"', "1",
         "w.toml:9: writes[1].as: converts a named write's reply"),
        ('name = "n"\neach = "ks"\ncmd = "INCR"\nkey = "it"\nwhen = "true"', "len(n)",
         "w.toml:7: writes[1].name: a named write with each replies a list, which cannot hold "
         "nil (the write has a when)"),
        ('name = "n"\neach = "ks"\ncmd = "LPOP"\nkey = "it"', "len(n)",
         "w.toml:7: writes[1].name: a named write with each replies a list, which cannot hold "
         "nil (LPOP may reply nil)"),
        ('name = "n"\ncmd = "INCR"\nkey = "k"', "1",
         "w.toml:7: writes[1].name: 'n' is never used: only returns may use a write's reply"),
        ('name = "s"\ncmd = "INCR"\nkey = "k"', "s",
         "w.toml:7: writes[1].name: name 's' is already used"),
    ],
)  # fmt: skip
def test_what_cannot_be_named_is_one_line_naming_the_field(
    fields: str, returns: str, want: str
) -> None:
    problems = _problems(_one_write(fields, returns))
    assert len(problems) == 1 and problems[0].startswith(want), problems


def test_a_when_makes_the_reply_optional_and_the_checker_says_so() -> None:
    problems = _problems(
        _one_write('name = "n"\ncmd = "INCR"\nkey = "k"\nwhen = "s == \'a\'"', "n + 1")
    )
    assert problems == [
        "w.toml:3: returns: '+' needs a number, got int? (use coalesce(x, default) for a value "
        "that may be nil) at column 1 in 'n + 1'"
    ]


def test_a_counter_past_2_53_fails_alike_after_the_writes(client: redis.Redis) -> None:
    """Redis counts to 2^63, Lua numbers are exact to 2^53: a named counter beyond is
    OVERFLOW in every form (the writes ran: they come first), never a rounded number."""
    op = parse_operation(REPLIES, "replies.toml")
    keys = {"counter": "c", "flag": "f", "board": "b", "queue": "q", "tags": ["t"]}
    for form in FORMS:
        client.set("c", 2**53 - 2)
        with pytest.raises(LuapipeError, match="OVERFLOW"):
            op.run(client, form, keys=keys, args={"by": 3, "member": "a", "again": False})
        assert client.get("c") == str(2**53 + 1).encode(), form
