"""Injection in every field of a spec: rejected naming the field, or carried only as data.

Each payload goes into each field of a small operation (read, let, write, returns,
invariant). Where a field holds code (a name, a command, an expression) the payload must be
a :class:`SpecError` naming that field. Where it holds text or a string literal it may be
accepted, and then it only travels as data: the generated Lua and Python hold it only inside
comments and string literals, and running the operation in every form on a real server does
not run it (a sentinel key survives: no FLUSHALL; no marker file: no shell command). Values
of the argument carry the payload too (ARGV, binary-safe).
tests/operations/test_spec.py has the first
injection test; this one covers every field.
"""

from __future__ import annotations

import copy
import io
import os
import re
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis

from luapipe.errors import SpecError
from luapipe.operations.operation import FORMS, Operation
from luapipe.operations.spec import load_operation, parse_operation

from .test_fuzz_spec import toml_doc

MARK = Path(f"/tmp/luapipe-injected-{os.getpid()}")
PAYLOADS = {
    "lua-quote": f"'); os.execute('touch {MARK}') --",
    "lua-long-string": "]]..redis.call('FLUSHALL')..[[",
    "lua-double-quote": '"); redis.call("FLUSHALL") --',
    "python": f"__import__('os').system('touch {MARK}')",
    "python-docstring": f'"""; __import__("os").system("touch {MARK}"); """',
    "newlines": "x\nredis.call('FLUSHALL')\n-- ",
    "jinja-expression": "{{ lipsum.__globals__['os'].system('touch " + str(MARK) + "') }}",
    "jinja-statement": "{% for x in range(3) %}{{ x }}{% endfor %}",
    "jinja-comment": "{# hidden #}",
    "nul": "a\x00b",
    "non-utf8": "caf\udce9",  # the byte 0xE9 alone (Latin-1 é), as surrogateescape decodes it
    "backslashes": "\\x41\\\\'\\",
}


def lit(text: str) -> str:
    """A string literal of the expression language holding ``text``."""
    esc = text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n").replace("\t", "\\t")
    return f"'{esc}'"


def base() -> dict[str, Any]:
    return {
        "name": "inj",
        "description": "injection probe",
        "keys": [{"name": "k", "doc": "the key"}],
        "args": {"v": {"type": "str", "doc": "a value"}},
        "reads": [{"name": "cur", "cmd": "GET", "key": "k", "default": "''"}],
        "let": {"out": "cur .. v"},
        "writes": [{"cmd": "SET", "key": "k", "args": ["out"]}],
        "returns": ["out", "'lit'"],
        "invariant": {"description": "always", "check": "len(cur) >= 0"},
    }


Put = Callable[[dict[str, Any], str], None]


def _set(path: tuple[Any, ...], wrap: Callable[[str], str] = str) -> Put:
    def put(d: dict[str, Any], p: str) -> None:
        node = d
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = wrap(p)

    return put


def _rename(section: str, old: str) -> Put:
    def put(d: dict[str, Any], p: str) -> None:
        d[section] = {(p if k == old else k): v for k, v in d[section].items()}

    return put


# field -> (how to put the payload there, the field named in the error, may hold data?)
FIELDS: dict[str, tuple[Put, str, bool]] = {
    "name": (_set(("name",)), "name", False),
    "description": (_set(("description",)), "description", True),
    "keys.name": (_set(("keys", 0, "name")), "keys", False),
    "keys.doc": (_set(("keys", 0, "doc")), "keys", True),
    "args.<name>": (_rename("args", "v"), "args", False),
    "args.doc": (_set(("args", "v", "doc")), "args.v", True),
    "args.type": (_set(("args", "v", "type")), "args.v", False),
    "reads.name": (_set(("reads", 0, "name")), "reads[1].name", False),
    "reads.cmd": (_set(("reads", 0, "cmd")), "reads[1].cmd", False),
    "reads.key": (_set(("reads", 0, "key")), "reads[1].key", False),
    "reads.default": (_set(("reads", 0, "default")), "reads[1].default", False),
    "reads.default literal": (_set(("reads", 0, "default"), lit), "reads[1].default", True),
    "let.<name>": (_rename("let", "out"), "let", False),
    "let expression": (_set(("let", "out")), "let.out", False),
    "let literal": (_set(("let", "out"), lambda p: f"{lit(p)} .. cur .. v"), "let.out", True),
    "writes.cmd": (_set(("writes", 0, "cmd")), "writes[1].cmd", False),
    "writes.key": (_set(("writes", 0, "key")), "writes[1].key", False),
    "writes.args": (_set(("writes", 0, "args", 0)), "writes[1].args", False),
    "writes.args literal": (_set(("writes", 0, "args", 0), lit), "writes[1].args", True),
    "returns": (_set(("returns", 1)), "returns", False),
    "returns literal": (_set(("returns", 1), lit), "returns", True),
    "invariant.check": (_set(("invariant", "check")), "invariant.check", False),
    "invariant.description": (_set(("invariant", "description")), "invariant.description", True),
}


def _lua_code_only(src: str) -> str:
    """Lua source without its comments and string literals (what could execute)."""
    out: list[str] = []
    i = 0
    while i < len(src):
        if src.startswith("--", i):
            m = re.compile(r"--\[(=*)\[").match(src, i)
            end = src.find(f"]{m[1]}]", i) if m else src.find("\n", i)
            i = len(src) if end < 0 else end + (len(m[1]) + 2 if m else 0)
        elif src[i] in "'\"":
            q, i = src[i], i + 1
            while i < len(src) and src[i] != q:
                i += 2 if src[i] == "\\" else 1
            i += 1
            out.append('""')
        elif m := re.compile(r"\[(=*)\[").match(src, i):
            end = src.find(f"]{m[1]}]", i)
            i = len(src) if end < 0 else end + len(m[1]) + 2
            out.append('""')
        else:
            out.append(src[i])
            i += 1
    return "".join(out)


def _python_names(src: str) -> set[str]:
    toks = tokenize.generate_tokens(io.StringIO(src).readline)
    return {t.string for t in toks if t.type == tokenize.NAME}


def _carried_as_data(op: Operation, r: redis.Redis, field: str, payload: str) -> None:
    code = _lua_code_only(op.lua_source) + _lua_code_only(op.function_source)
    for word in ("FLUSHALL", "os.execute", "__import__", "touch"):
        assert word not in code, word
    assert not any(m in op.lua_source for m in ("{{", "{%", "{#"))
    lines = op.lua_source.splitlines()  # one top-level return: the script's last line
    assert [line for line in lines if line.startswith("return ")] == [lines[-1]]
    names = _python_names(op.python_source)
    assert not names & {"__import__", "system", "FLUSHALL", "execute", "touch", "lipsum"}
    compile(op.python_source, "inj.py", "exec")
    r.set("sentinel", "still here")
    for form in FORMS:
        r.delete("inj:k")
        reply = op.run(r, form, keys={"k": "inj:k"}, args={"v": payload})
        assert r.get("sentinel") == b"still here", form  # no FLUSHALL
        assert r.dbsize() == 2, form
        doubled = field in ("let literal", "reads.default literal")  # out = literal .. v
        assert reply[0] == (payload * 2 if doubled else payload), (form, reply)
        assert reply[1] == (payload if field == "returns literal" else "lit"), (form, reply)
        stored = r.get("inj:k")
        assert isinstance(stored, bytes)
        written = stored.decode("utf-8", "surrogateescape")
        assert written == (payload if field == "writes.args literal" else reply[0]), form
    assert not MARK.exists()  # no shell command ran


@pytest.mark.parametrize("payload", sorted(PAYLOADS))
@pytest.mark.parametrize("field", sorted(FIELDS))
def test_payload_in_field_is_rejected_or_data(r: redis.Redis, field: str, payload: str) -> None:
    put, named, may_hold_data = FIELDS[field]
    doc = copy.deepcopy(base())
    put(doc, PAYLOADS[payload])
    text = toml_doc(doc)
    try:
        op = parse_operation(text, "inj.toml")
    except SpecError as exc:
        assert any(f": {named}" in p for p in exc.problems), exc.problems
        assert all(len(p.splitlines()) == 1 for p in exc.problems)
        return
    assert may_hold_data, f"{field} accepted code: {PAYLOADS[payload]!r}"
    _carried_as_data(op, r, field, PAYLOADS[payload])


@pytest.mark.parametrize(
    "payload",
    sorted(PAYLOADS),
)
def test_payload_as_an_argument_value_is_data_in_every_form(r: redis.Redis, payload: str) -> None:
    """Values travel as ARGV, binary-safe (the NUL and the lone 0xE9 byte round-trip)."""
    op = parse_operation(toml_doc(base()), "inj.toml")
    _carried_as_data(op, r, "args value", PAYLOADS[payload])
    assert r.get("inj:k") == PAYLOADS[payload].encode("utf-8", "surrogateescape")


@pytest.mark.parametrize("field", ["description", "keys.doc", "returns literal", "name"])
def test_non_utf8_bytes_in_a_spec_file_name_the_field(tmp_path: Path, field: str) -> None:
    """A file with a byte that is not UTF-8: one SpecError line naming the field's line."""
    put, named, _ = FIELDS[field]
    doc = copy.deepcopy(base())
    put(doc, "MARKER")
    raw = toml_doc(doc).encode().replace(b"MARKER", b"caf\xe9")
    spec = tmp_path / "inj.toml"
    spec.write_bytes(raw)
    with pytest.raises(SpecError) as info:
        load_operation(spec)
    (problem,) = info.value.problems
    line = raw[: raw.index(b"\xe9")].count(b"\n") + 1
    assert problem.startswith(f"{spec}:{line}: {named.rstrip('.')}")
    assert "not valid UTF-8" in problem
