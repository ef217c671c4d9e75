"""Generate the Lua script, the Redis Function library and the Python module of an operation.

Output is deterministic (no dates, no absolute paths, sorted nothing that has an order of
its own), so regenerating an unchanged spec changes no byte. Values reach Lua only through
KEYS and ARGV; constants written in the spec are escaped literals.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

import jinja2

from luapipe.operations import luabody
from luapipe.operations.expr.compile import py_expr, py_wire
from luapipe.operations.expr.parse import Type
from luapipe.operations.model import Expr, OperationModel, Read, Write
from luapipe.scripts.versioned import VERSIONED_NAME, hole, versioned_base, versioned_name

__all__ = [
    "GENERATED_NAME",
    "function_name",
    "generated_operation",
    "library_name",
    "lua_body",
    "lua_library",
    "lua_script",
    "python_module",
]

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("luapipe.operations", "templates"),
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    trim_blocks=True,
    lstrip_blocks=True,
    autoescape=False,
)
_PY_TYPES = {"int": "int", "float": "float", "str": "str", "bool": "bool"}


def _safe_comment(text: str) -> str:
    """One-line comment text that is never a header declaration and never Jinja2.

    The spec checker already refuses text with a line starting with ``@`` (the header
    parser reads ``-- @key ...`` as a declaration); this is the second line of defence for
    an :class:`OperationModel` built without it: a leading ``@`` is put in parentheses. Jinja2
    markers are split too (generated files do not opt into templating, so they would not be
    rendered anyway, but the text stays plain for readers and tools)."""
    out = " ".join(text.split()).replace("\\", "/").replace('"', "'")
    for marker in ("{%", "{{", "{#"):
        out = out.replace(marker, marker[0] + " " + marker[1])
    if out.startswith("@"):
        out = f"({out})"
    return out


def lua_body(op: OperationModel) -> str:
    """The statements shared by the script and the function (KEYS/ARGV in, reply out)."""
    return luabody.lua_body(op)


#: a helper of the prelude: ``local function _name(`` starts its definition
_HELPER = re.compile(r"^local function (_[a-z]+)\(", re.MULTILINE)
_CALL = re.compile(r"(?<![\w.])(_[a-z]+)\(")


@functools.cache
def _helpers() -> dict[str, str]:
    """Each helper of the prelude template and its definition, in the template's order."""
    text = _ENV.get_template("prelude.lua.j2").render()
    starts = [(m.start(), m[1]) for m in _HELPER.finditer(text)]
    ends = [s for s, _ in starts[1:]] + [len(text)]
    return {name: text[start:end] for (start, name), end in zip(starts, ends, strict=True)}


def prelude(op: OperationModel | None = None) -> str:
    """The Lua helpers a generated script or library starts with: those ``op``'s body calls
    (and the helpers they call), in the template's order; every helper without ``op``.

    A script's top level runs on every EVALSHA, so each helper defined there is a closure
    built per call: only the ones used are defined. A library defines them once, at load."""
    helpers = _helpers()
    if op is None:
        return "".join(helpers.values())
    want: set[str] = set()
    todo = [n for n in _CALL.findall(lua_body(op)) if n in helpers]
    while todo:
        name = todo.pop()
        if name not in want:
            want.add(name)
            todo += [n for n in _CALL.findall(helpers[name]) if n in helpers]
    return "".join(text for name, text in helpers.items() if name in want)


#: stands for the prelude while a module's Lua is cut around it (never in generated text)
_PRELUDE_MARK = "\x00prelude\x00"


def _context(op: OperationModel, prelude_text: str | None = None) -> dict[str, object]:
    return {
        "op": op,
        "spec": _safe_comment(Path(op.path).name),
        "description": _safe_comment(op.description or op.name),
        "keys": [(k.name + ("..." if k.variadic else ""), _safe_comment(k.doc)) for k in op.keys],
        "args": [
            (
                a.name + ("..." if a.type.kind == "list" else ""),
                _safe_comment(f"({a.type}) {a.doc}"),
            )
            for a in op.args
        ],
        "returns": _safe_comment(", ".join(r.text for r in op.returns)),
        "prelude": prelude(op) if prelude_text is None else prelude_text,
        "body": lua_body(op),
    }


def lua_script(op: OperationModel, prelude_text: str | None = None) -> str:
    text = _ENV.get_template("script.lua.j2").render(**_context(op, prelude_text))
    assert not any(m in text for m in ("{%", "{{", "{#")), "generated Lua looks like a template"
    return text


# -- the function form's names ----------------------------------------------------------------
#
# Function names are global on a server, and a library is replaced only whole. So that two
# versions of a spec run side by side (a rolling deploy) without reloading each other's
# library, the library and its one function are both named ``luapipe_<op>_<hash>``: the
# hash is of the library's whole text with the name left out (``_hole``), so any change
# of the code (spec, prelude, template) is a new name, and the same code is the same name
# in every process. :func:`generated_operation` recognises such a library from its name
# and code alone: that is all ``luapipe functions gc`` ever deletes.

#: ``luapipe_<op>_<10 hex>``: the library (and function) name of a generated function form
#: (the rule is :mod:`luapipe.scripts.versioned`'s, shared with ``luapipe functions build``)
GENERATED_NAME = VERSIONED_NAME
_hole = hole


def _library_text(op: OperationModel, prelude_text: str | None, name: str) -> str:
    ctx = _context(op, prelude_text)
    ctx["body"] = "".join(
        f"    {line}\n" if line else "\n" for line in str(ctx["body"]).split("\n")[:-1]
    )
    return _ENV.get_template("library.lua.j2").render(**ctx, function_name=name, library_name=name)


_generated_name = versioned_name


def library_name(op: OperationModel) -> str:
    """The Redis Function library of the function form: ``luapipe_<op>_<hash of its code>``."""
    return _generated_name(op.name, _library_text(op, None, _hole(op.name)))


def function_name(op: OperationModel) -> str:
    """The function form's function: named as its library (function names are global, so
    two versions side by side need two names), never called by an old name."""
    return library_name(op)


def lua_library(op: OperationModel, prelude_text: str | None = None) -> str:
    hole = _hole(op.name)
    return _library_text(op, prelude_text, hole).replace(hole, library_name(op))


def generated_operation(library: str, code: str) -> str | None:
    """The operation whose function form ``library`` is (a library called ``library`` with
    ``code``), or None: a name of that shape whose hash is not that of its code is not
    luapipe's, whoever named it so."""
    return versioned_base(library, code)


def _py(e: Expr) -> str:
    return py_expr(e.node, e.types)


def _py_arg(e: Expr) -> str:
    code = _py(e)
    kind = e.type.kind
    return {
        "int": f"str({code})",
        "float": f"_rt.fmt({code})",
        "bool": f"('1' if {code} else '0')",
    }.get(kind, code)


def _py_read(r: Read) -> str:
    conv = {"int": "_rt.rint", "float": "_rt.rflt"}.get(r.conv or "", "")
    value = {
        "list[str]": f"[{conv}(_rt.text(x)) for x in _rt.flat(r)]"
        if conv
        else "[_rt.text(x) for x in _rt.flat(r)]",
        "bool": "(r in (1, True))",
        "float?": "_rt.score(r)",
        "int?": "r",
        "int": "r",
        "str?": f"{conv}(_rt.opt_text(r))" if conv else "_rt.opt_text(r)",
    }[r.reply]
    if r.default is not None:
        value = f"_rt.co({value}, {_py(r.default)})"
    args = "".join(f", lambda e: {_py_arg(a)}" for a in r.args)
    each = f"lambda e: {_py(r.each)}" if r.each else "None"
    return (
        f"_rt.ReadStep({r.name!r}, {r.level}, {r.cmd!r}, lambda e: {_py(r.key)}, "
        f"({args.lstrip(', ')}{',' if len(r.args) == 1 else ''}), {each}, lambda r, e: {value})"
    )


def _py_reply(w: Write) -> str:
    """A named write's reply ``r`` (no error) as its type, as the Lua side converts it."""
    if w.reply == "bool":
        return "(r is not None)" if w.cmd == "SET" else "(r in (1, True))"
    if w.reply == "float":
        return "_rt.score(r)"
    if w.reply == "str?":
        conv = {"int": "_rt.rint", "float": "_rt.rflt"}.get(w.conv or "", "")
        return f"{conv}(_rt.opt_text(r))" if conv else "_rt.opt_text(r)"
    return "_rt.ck(r)" if w.cmd in luabody.COUNTERS else "r"


def _py_type(t: Type) -> str:
    if t.kind == "list":
        assert t.elem is not None
        return f"list[{_PY_TYPES[t.elem.kind]}]"
    return _PY_TYPES[t.kind]


def _lines(text: str) -> str:
    if not text:
        return "''"
    parts = text.splitlines(keepends=True)
    return "(\n" + "".join(f"    {line!r}\n" for line in parts) + ")"


def _around_prelude(render: Callable[[str], str], used: str) -> str:
    """Python source for a Lua text that contains the prelude once: the text before it,
    ``PRELUDE``, the text after it (the module holds the prelude once for both)."""
    head, tail = render(_PRELUDE_MARK).split(_PRELUDE_MARK)
    assert head + used + tail == render(used)
    return f"{_lines(head)} + PRELUDE + {_lines(tail)}"


def python_module(op: OperationModel) -> str:
    ctx = _context(op)
    rets = [py_wire(_py(r), r.type) for r in op.returns]
    ctx.update(
        reads=[_py_read(r) for r in op.reads],
        lets=[f"({x.name!r}, lambda e: {_py(x.expr)})" for x in op.lets],
        writes=[
            f"_rt.WriteStep({w.cmd!r}, lambda e: {_py(w.key)}, ("
            + "".join(f"lambda e: {_py_arg(a)}, " for a in w.args).rstrip(" ")
            + f"), {'lambda e: ' + _py(w.when) if w.when else 'None'}, "
            + f"{'lambda e: ' + _py(w.each) if w.each else 'None'}"
            + (f", {w.name!r}, lambda r: {_py_reply(w)})" if w.name else ")")
            for w in op.writes
        ],
        ret="[" + ", ".join(rets) + "]" if op.returns_tuple else rets[0],
        sig_keys=[(k.name, "list[str]" if k.variadic else "str") for k in op.keys],
        sig_args=[(a.name, _py_type(a.type)) for a in op.args],
        prelude=_lines(prelude(op)),
        lua_script=_around_prelude(lambda text: lua_script(op, text), prelude(op)),
        lua_library=_around_prelude(lambda text: lua_library(op, text), prelude(op)),
        function_name=function_name(op),
        invariant=f"lambda e: {_py(op.invariant.check)}" if op.invariant else "None",
        round_trips={f: op.round_trips(f) for f in op.forms},
    )
    return _ENV.get_template("module.py.j2").render(**ctx)
