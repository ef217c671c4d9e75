"""Bad specs through `luapipe generate`, table-driven: each gives exit code 1, one line per
problem naming file:line and the field, no traceback, and nothing written (not even for the
good spec beside it). Expressions, unknown fields, type errors, undefined names, unsupported
operators, keys that were not declared, malformed TOML and bytes that are not UTF-8.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from luapipe.cli import main

from ..conftest import EXAMPLES_DIR

GOOD = """name = "reserve"
description = "Reserve qty units."
keys = ["stock"]
returns = ["if(ok, 1, 0)", "left"]

[args]
qty = { type = "int", min = 1, max = 5 }

[[reads]]
name = "available"
cmd = "GET"
key = "stock"
as = "int"
default = "0"

[let]
ok = "available >= qty"
left = "if(ok, available - qty, available)"

[[writes]]
cmd = "DECRBY"
key = "stock"
args = ["qty"]
when = "ok"

[invariant]
description = "stock never below zero"
check = "available >= 0"
"""


def sub(old: str, new: str) -> str:
    """GOOD with one change (the table's line numbers are GOOD's)."""
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


NOT_UTF8 = "<not utf-8>"

# case -> (spec text, [(line, field) of each problem, in order], text of the first)
CASES: dict[str, tuple[str, list[tuple[int, str]], str]] = {
    # malformed TOML
    "toml: unclosed array": (
        sub('keys = ["stock"]', 'keys = ["stock"'),
        [(4, "toml")],
        "Unclosed array",
    ),
    "toml: duplicate key": (
        sub('cmd = "DECRBY"', 'cmd = "DECRBY"\ncmd = "INCRBY"'),
        [(22, "toml")],
        "Cannot overwrite",
    ),
    "toml: bare string value": (sub('as = "int"', "as = int"), [(13, "toml")], "Invalid value"),
    "toml: error at the end of the file": (
        GOOD + "[extra]\nkey",
        [(30, "toml")],
        "Expected '='",
    ),
    "toml: unterminated string at the end": (
        GOOD + 'x = """abc\n\n',
        [(29, "toml")],
        "Unterminated string",
    ),
    "toml: not utf-8": (NOT_UTF8, [(2, "description")], "not valid UTF-8"),
    # unknown fields
    "unknown top-level field": (
        sub("returns = ", "retruns = "),
        [(4, "retruns"), (1, "returns")],
        "unknown field",
    ),
    "unknown field in a read": (
        sub('default = "0"', 'defualt = "0"'),
        [(9, "reads[1]"), (17, "let.ok"), (28, "invariant.check")],
        "unknown field(s) defualt",
    ),
    "unknown field in an arg": (
        sub("max = 5 }", "maxx = 5 }"),
        [(7, "args.qty")],
        "unknown field(s) maxx",
    ),
    "unknown field in a write": (
        sub('when = "ok"', 'if = "ok"'),
        [(20, "writes[1]")],
        "unknown field(s) if",
    ),
    "unknown field in the invariant": (
        sub('check = "available >= 0"', 'chek = "available >= 0"'),
        [(28, "invariant.chek"), (26, "invariant.check")],
        "unknown field",
    ),
    # type errors
    "name not a string": (sub('name = "reserve"', "name = 3"), [(1, "name")], "not a string"),
    "name not an identifier": (
        sub('name = "reserve"', 'name = "re serve"'),
        [(1, "name")],
        "not a valid name",
    ),
    "let name is a reserved word": (
        sub('left = "if(ok', 'not = "1"\nleft = "if(ok'),
        [(18, "let.not")],
        "'not' is a reserved word",
    ),
    "let name is a Python constant": (
        sub('left = "if(ok', 'None = "1"\nleft = "if(ok'),
        [(18, "let.None")],
        "'None' is a reserved word",
    ),
    "arg name is a Python keyword": (  # the generated module did not compile
        sub("max = 5 }", 'max = 5 }\nas = "int"'),
        [(8, "args.as")],
        "'as' is a Python keyword or a name the generated module uses",
    ),
    "arg name is the forms' client parameter": (
        sub("max = 5 }", 'max = 5 }\nclient = "str"'),
        [(8, "args.client")],
        "'client' is a Python keyword or a name the generated module uses",
    ),
    "keys not a list": (sub('keys = ["stock"]', 'keys = "stock"'), [(3, "keys")], "needs a list"),
    "unknown arg type": (
        sub('type = "int"', 'type = "integer"'),
        [(7, "args.qty")],
        "unknown type 'integer'",
    ),
    "min of the wrong type": (
        sub("min = 1", 'min = "1"'),
        [(7, "args.qty.min")],
        "must be a number",
    ),
    "reads not tables": (
        sub('keys = ["stock"]', 'keys = ["stock"]\nreads = ["GET stock"]').replace(
            '[[reads]]\nname = "available"\ncmd = "GET"\nkey = "stock"\nas = "int"\n'
            'default = "0"\n',
            "",
        ),
        [(4, "reads[1]"), (12, "let.ok"), (23, "invariant.check")],
        "must be a table",
    ),
    "write args not a list": (
        sub('args = ["qty"]', 'args = "qty"'),
        [(23, "writes[1].args")],
        "must be a list",
    ),
    "condition not a bool": (
        sub('when = "ok"', 'when = "qty"'),
        [(24, "writes[1].when")],
        "must be a bool",
    ),
    "default of the wrong type": (
        sub('default = "0"', "default = \"'none'\""),
        [(14, "reads[1].default")],
        "must be of type int",
    ),
    "nil value in a command": (
        sub('args = ["qty"]', 'args = ["if(ok, qty, nil)"]'),
        [(23, "writes[1].args")],
        "non-nil",
    ),
    "let not a table": (
        sub('keys = ["stock"]', 'keys = ["stock"]\nlet = ["ok"]').replace(
            '[let]\nok = "available >= qty"\nleft = "if(ok, available - qty, available)"\n', ""
        ),
        [(4, "let"), (22, "writes[1].when"), (5, "returns"), (5, "returns")],
        "must be a table",
    ),
    "description with a control char": (
        sub('description = "Reserve qty units."', 'description = "Reserve\\u0000"'),
        [(2, "description")],
        "control character",
    ),
    # undefined names
    "undefined name in a let": (
        sub('ok = "available >= qty"', 'ok = "avail >= qty"'),
        [(17, "let.ok")],
        "unknown name 'avail'",
    ),
    "undefined name in returns": (
        sub('returns = ["if(ok, 1, 0)", "left"]', 'returns = ["if(ok, 1, 0)", "lef"]'),
        [(4, "returns")],
        "unknown name 'lef'",
    ),
    "unknown function": (
        sub('left = "if(ok, available - qty, available)"', 'left = "pow(available, 2)"'),
        [(18, "let.left")],
        "unknown function 'pow'",
    ),
    # unsupported operators
    "power operator": (
        sub('ok = "available >= qty"', 'ok = "available ** 2 >= qty"'),
        [(17, "let.ok")],
        "unexpected '*'",
    ),
    "caret": (
        sub('ok = "available >= qty"', 'ok = "available ^ 2 >= qty"'),
        [(17, "let.ok")],
        "unexpected character '^'",
    ),
    "ternary": (
        sub(
            'left = "if(ok, available - qty, available)"',
            'left = "ok ? available - qty : available"',
        ),
        [(18, "let.left")],
        "unexpected character '?'",
    ),
    "assignment": (
        sub('ok = "available >= qty"', 'ok = "available = qty"'),
        [(17, "let.ok")],
        "unexpected character '='",
    ),
    "bitwise and": (
        sub('ok = "available >= qty"', 'ok = "(available & 1) == 0"'),
        [(17, "let.ok")],
        "unexpected character '&'",
    ),
    "attribute access": (
        sub('ok = "available >= qty"', 'ok = "available.real >= qty"'),
        [(17, "let.ok")],
        "unexpected character '.'",
    ),
    "chained comparison": (
        sub('ok = "available >= qty"', 'ok = "0 < qty <= available"'),
        [(17, "let.ok")],
        "do not chain",
    ),
    "nested too deep": (
        sub('ok = "available >= qty"', 'ok = "' + "(" * 50 + "available >= qty" + ")" * 50 + '"'),
        [(17, "let.ok")],
        "nested too deeply",
    ),
    # keys not declared
    "read of an undeclared key": (
        sub('key = "stock"\nas', 'key = "stok"\nas'),
        [(12, "reads[1].key")],
        "unknown name 'stok'",
    ),
    "write to an undeclared key": (
        sub('key = "stock"\nargs', 'key = "other"\nargs'),
        [(22, "writes[1].key")],
        "unknown name 'other'",
    ),
    "write naming a second key": (
        sub(
            'cmd = "DECRBY"\nkey = "stock"\nargs = ["qty"]',
            'cmd = "DEL"\nkey = "stock"\nargs = ["\'other:key\'"]',
        ),
        [(23, "writes[1].args")],
        "DEL takes 0",
    ),
    "key from a number": (
        sub('key = "stock"\nargs', 'key = "qty"\nargs'),
        [(22, "writes[1].key")],
        "a key must be a str",
    ),
    # commands
    "unknown write command": (
        sub('cmd = "DECRBY"', 'cmd = "EVAL"'),
        [(21, "writes[1].cmd")],
        "unknown write command 'EVAL'",
    ),
    "unknown read command": (
        sub('cmd = "GET"', 'cmd = "KEYS"'),
        [(11, "reads[1].cmd")],
        "unknown read command 'KEYS'",
    ),
    "write with too few args": (
        sub('args = ["qty"]', "args = []"),
        [(23, "writes[1].args")],
        "DECRBY takes 1",
    ),
    "read with an extra arg": (
        sub('cmd = "GET"\nkey = "stock"', 'cmd = "GET"\nkey = "stock"\nargs = ["qty"]'),
        [(13, "reads[1].args")],
        "GET takes 0",
    ),
    # free text that the generated script's header would read as a declaration
    "description injects header tags": (
        sub('description = "Reserve qty units."', 'description = "@key evil  injected\\n@arg x"'),
        [(2, "description")],
        "would be read as a header tag",
    ),
    "description line 2 injects a header tag": (
        sub('description = "Reserve qty units."', 'description = "Reserve.\\n  @template"'),
        [(2, "description")],
        "'@template'",
    ),
    "key doc injects a header tag": (
        sub('keys = ["stock"]', 'keys = [{ name = "stock", doc = "@arg extra x" }]'),
        [(3, "keys[1].doc")],
        "would be read as a header tag",
    ),
    "arg doc injects a header tag": (
        sub("max = 5 }", 'max = 5, doc = "units\\n@return 1" }'),
        [(7, "args.qty.doc")],
        "would be read as a header tag",
    ),
    "invariant description injects a header tag": (
        sub('description = "stock never below zero"', 'description = "@key k"'),
        [(27, "invariant.description")],
        "would be read as a header tag",
    ),
    "returns missing": (
        sub('returns = ["if(ok, 1, 0)", "left"]\n', ""),
        [(1, "returns")],
        "missing",
    ),
}


def _write(path: Path, text: str) -> None:
    if text == NOT_UTF8:  # a Latin-1 byte in the description
        path.write_bytes(GOOD.encode().replace(b"Reserve qty", b"R\xe9serve qty"))
    else:
        path.write_text(text)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_spec_is_one_line_per_problem_and_nothing_is_written(tmp_path: Path, case: str) -> None:
    text, expected, first = CASES[case]
    spec = tmp_path / "bad.toml"
    _write(spec, text)
    good = EXAMPLES_DIR / "operations" / "incr_many.toml"
    out = tmp_path / "out"
    res = CliRunner().invoke(
        main, ["generate", str(good), str(spec), "--out", str(out), "--py-out", str(out)]
    )
    assert res.exit_code == 1, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert "Traceback" not in res.output
    lines = res.output.strip().splitlines()
    assert lines[0].startswith("error: ")
    lines[0] = lines[0].removeprefix("error: ")
    where = [re.match(rf"{re.escape(str(spec))}:(\d+): ([^:]+): .+", line) for line in lines]
    assert all(where), lines  # every line: file:line: field: message
    assert [(int(m[1]), m[2]) for m in where if m] == expected
    assert first in lines[0]
    assert not out.exists()  # nothing written, not even the good spec's files


def test_a_huge_expression_is_not_echoed_whole(tmp_path: Path) -> None:
    spec = tmp_path / "deep.toml"
    deep = "(" * 500 + "1" + ")" * 500
    spec.write_text(sub('left = "if(ok, available - qty, available)"', f'left = "{deep}"'))
    res = CliRunner().invoke(main, ["generate", str(spec), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1
    (line,) = res.output.strip().splitlines()
    assert "nested too deeply" in line and "(1001 characters)" in line
    assert len(line) < 300, line


def test_the_table_base_spec_is_good(tmp_path: Path) -> None:
    spec = tmp_path / "good.toml"
    spec.write_text(GOOD)
    out = tmp_path / "out"
    res = CliRunner().invoke(main, ["generate", str(spec), "--out", str(out), "--py-out", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "op_reserve.lua").exists()
    print(f"\nbad specs tried through luapipe generate: {len(CASES)}")
