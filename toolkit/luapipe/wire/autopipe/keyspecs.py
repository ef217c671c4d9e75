"""Where a command's keys are, read from the server's key specs: no round trip per call.

redis-py finds the keys of a command whose keys move with its arguments (``movablekeys``:
ZUNIONSTORE, LMPOP, XREAD, FCALL, GEORADIUS ... STORE...) by asking the server
(``COMMAND GETKEYS``) on every call. In an auto-pipeline that round trip would come before
the call takes its place in the queue, so a call issued after it could run first. Redis 7
describes every command's keys in its ``COMMAND`` reply (the key specs: where the search
begins, an argument ``index`` or a ``keyword``; how the keys follow, a ``range`` or a
``keynum`` count), which redis-py's cluster client reads once per client (its
``commands_parser``). :class:`KeyFinder` applies them as the server does
(``getKeysUsingKeySpecs`` in its ``db.c``), without I/O.

Where the server itself does not trust its specs, it runs the command's own C code, and so
must we ask: :data:`LOOKUP` (a spec ``unknown``, ``incomplete`` or ``variable_flags``, as
SORT's BY/GET/STORE and MIGRATE's KEYS are on Redis 7.0; a count that is not a whole number
>= 1; a command the table does not know; a server before 7 without specs). The auto-pipeline
then asks the server while the call holds its place (see the scheduler's gate).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis.exceptions as rex

from luapipe.errors import translate
from luapipe.wire.routing import command_slot_error

__all__ = ["LOOKUP", "NOT_MOVABLE", "KeyFinder", "Found", "slot_of_keys"]


class Found(enum.Enum):
    #: redis-py's own rule finds the keys without I/O (fixed positions, EVAL, no keys)
    NOT_MOVABLE = "not movable"
    #: only the server can say (``COMMAND GETKEYS``)
    LOOKUP = "lookup"


NOT_MOVABLE = Found.NOT_MOVABLE
LOOKUP = Found.LOOKUP

#: commands redis-py finds the keys of itself, though the server calls them movable
_REDIS_PY_OWN = frozenset({"eval", "evalsha"})
#: what the server's string2ll accepts as a whole number
_WHOLE = re.compile(rb"-?(?:0|[1-9][0-9]*)\Z")


@dataclass(frozen=True, slots=True)
class _Spec:
    keyword: bytes | None  # None: begin_search is an index
    start: int  # the index, or the keyword's startfrom
    keynum: bool  # find_keys: keynum (else range)
    lastkey: int = 0
    limit: int = 0
    keynumidx: int = 0
    firstkey: int = 0
    step: int = 1
    incomplete: bool = False


class KeyFinder:
    """The keys of a command from redis-py's ``COMMAND`` table (``commands_parser.commands``),
    each command's specs compiled once."""

    __slots__ = ("_compiled",)

    def __init__(self) -> None:
        self._compiled: dict[str, tuple[Any, tuple[_Spec, ...] | None]] = {}

    def keys(self, table: Mapping[str, Any], args: Sequence[Any]) -> list[Any] | Found:
        """The keys of ``args`` (one command, its name first), :data:`NOT_MOVABLE` when
        redis-py's own rule finds them without I/O, or :data:`LOOKUP`."""
        if len(args) < 2:
            return NOT_MOVABLE  # redis-py: no keys, without asking
        head = args[0]
        if not isinstance(head, str):
            return LOOKUP
        name = head.lower()
        info = table.get(name)
        argv: Sequence[Any] = args
        if info is None:
            words = name.split()
            info = table.get(words[0]) if words else None
            if info is None:  # redis-py would re-read the table from the server
                return LOOKUP
            argv = (*words, *args[1:])
        if "movablekeys" not in _flags(info.get("flags")) or name in _REDIS_PY_OWN:
            return NOT_MOVABLE
        specs = self._specs(name, info)
        if specs is None:
            return LOOKUP
        found: list[Any] = []
        for spec in specs:
            positions = _apply(spec, argv)
            if positions is None:
                return LOOKUP
            found.extend(argv[i] for i in positions)
        return found

    def _specs(self, name: str, info: Mapping[str, Any]) -> tuple[_Spec, ...] | None:
        cached = self._compiled.get(name)
        if cached is not None and cached[0] is info:
            return cached[1]
        specs = _compile(info.get("key_specifications"))
        self._compiled[name] = (info, specs)
        return specs


def slot_of_keys(
    args: Sequence[Any], keys: Sequence[Any], keyslot: Callable[[Any], int]
) -> int | None:
    """The one slot of a command's ``keys`` (None without keys: any node), as redis-py's
    cluster client decides it; keys in several slots are a CrossSlotError, a key of a type
    it cannot send a CallArgumentError."""
    if not keys:
        return None
    try:
        slots = {keyslot(k) for k in keys}
    except rex.DataError as exc:
        raise translate(exc) from exc
    if len(slots) > 1:
        refused = rex.RedisClusterException(f"{args[0]} - all keys must map to the same key slot")
        return command_slot_error(args, refused)
    return slots.pop()


# -- the specs, as the server reads them ----------------------------------------------
def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _fields(value: Any) -> dict[str, Any]:
    """A map of the COMMAND reply (RESP3, or as redis-py shaped it), or a flat list of
    name/value pairs (RESP2 as the server sends it), with text names."""
    if isinstance(value, Mapping):
        return {_text(k): v for k, v in value.items()}
    if isinstance(value, list | tuple):
        return {_text(k): v for k, v in zip(value[::2], value[1::2], strict=False)}
    return {}


def _flags(value: Any) -> set[str]:
    return {_text(f).lower() for f in value or ()}


def _compile(raw: Any) -> tuple[_Spec, ...] | None:
    """The specs the server uses to find keys, or None where it would run the command's
    own code instead (and so only it can say)."""
    if not raw:
        return None  # no specs (a server before 7): the server's own code
    specs = []
    for item in raw:
        fields = _fields(item)
        flags = _flags(fields.get("flags"))
        if "variable_flags" in flags:
            return None  # the server ignores every spec of such a command
        if "not_key" in flags:
            continue
        try:
            spec = _one(fields, "incomplete" in flags)
        except (KeyError, TypeError, ValueError):
            return None  # unknown, or a shape this does not read
        specs.append(spec)
    return tuple(specs) if specs else None


def _one(fields: Mapping[str, Any], incomplete: bool) -> _Spec:
    begin = _fields(fields["begin_search"])
    find = _fields(fields["find_keys"])
    bs_kind, bs = _text(begin["type"]), _fields(begin["spec"])
    fk_kind, fk = _text(find["type"]), _fields(find["spec"])
    keyword: bytes | None = None
    if bs_kind == "index":
        start = int(bs["index"])
    elif bs_kind == "keyword":
        word = bs["keyword"]
        keyword = (word if isinstance(word, bytes) else str(word).encode()).upper()
        start = int(bs["startfrom"])
    else:
        raise ValueError(bs_kind)  # "unknown": the command's own code
    step = int(fk["keystep"])
    if step < 1:
        raise ValueError("keystep")
    if fk_kind == "range":
        return _Spec(
            keyword, start, False, int(fk["lastkey"]), int(fk["limit"]), step=step,
            incomplete=incomplete,
        )  # fmt: skip
    if fk_kind == "keynum":
        return _Spec(
            keyword, start, True, keynumidx=int(fk["keynumidx"]), firstkey=int(fk["firstkey"]),
            step=step, incomplete=incomplete,
        )  # fmt: skip
    raise ValueError(fk_kind)


def _word(arg: Any) -> bytes | None:
    """An argument as the server sees it (redis-py's encoding), for keyword and count
    matching; None for what redis-py would refuse to send."""
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, str):
        return arg.encode("utf-8", "surrogateescape")
    if isinstance(arg, bool):
        return None
    if isinstance(arg, int | float):
        return repr(arg).encode()
    if isinstance(arg, bytearray | memoryview):
        return bytes(arg)
    return None


def _apply(spec: _Spec, argv: Sequence[Any]) -> list[int] | None:
    """The positions of ``spec``'s keys in ``argv`` (the command's name at 0), or None
    where the server would find the spec invalid and run the command's own code."""
    argc = len(argv)
    if spec.keyword is None:
        first = spec.start
    else:
        startfrom = spec.start
        begin = startfrom if startfrom > 0 else argc + startfrom
        end = argc - 1 if startfrom > 0 else 1
        first = 0
        i = begin
        while i != end:
            if i >= argc or i < 1:
                break
            word = _word(argv[i])
            if word is not None and word.upper() == spec.keyword:
                first = i + 1
                break
            i = i + 1 if begin <= end else i - 1
        if not first:
            return []  # the keyword is absent: no keys from this spec
    if spec.keynum:
        at = first + spec.keynumidx
        if spec.keynumidx >= argc or at >= argc:
            return None
        count = _word(argv[at])
        if count is None or not _WHOLE.match(count) or int(count) < 0:
            return None
        first += spec.firstkey
        last = first + int(count) - 1
    elif spec.lastkey >= 0:
        last = first + spec.lastkey
    elif not spec.limit:
        last = argc + spec.lastkey
    else:
        if first >= argc:
            return None
        last = first + ((argc - first) // spec.limit + spec.lastkey)
    if last >= argc or last < first or first >= argc:
        return None
    if spec.incomplete:
        return None
    return list(range(first, last + 1, spec.step))
