"""A Redis Function library: a ``#!lua name=<library>`` file and the functions it registers.

This module holds the values only (what the rest of luapipe passes around). How a file
becomes a :class:`FunctionLibrary` (its functions read by running its top level in a
sandbox, their keys and args from ``-- @function`` header blocks) lives beside the script
loader; how a call is sent (``FCALL``/``FCALL_RO``, healed on the exact
``ERR Function not found``) lives in :mod:`luapipe.scripts.calls`.

Function names are global on a server: two libraries cannot register the same name, so a
function's name alone says what to call, and its library says what to load when the
server answers that the function is not there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from luapipe.scripts.header import Param
from luapipe.scripts.script import check_count, check_values
from luapipe.wire.replies import Value

__all__ = ["BASE_VERSION", "FunctionLibrary", "LuaFunction", "library_sha"]

#: the ``redis.REDIS_VERSION`` a library's top level sees where no server is at hand
#: (``scripts list``, ``lint``, a registry): 7.0.0, the oldest server with Functions. Where
#: one is (``deploy``, ``--check``, ``--rollback``), that node's own version is used.
BASE_VERSION = "7.0.0"


def library_sha(source: str) -> str:
    """sha1 of a library's code as sent (UTF-8): what the lock file and drift checks keep.
    Code read from a server may hold bytes that are not UTF-8 (a hand-loaded library),
    kept as surrogates: they hash as those bytes."""
    return hashlib.sha1(source.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class LuaFunction:
    """One function of a library, as the server registers it.

    ``keys``/``args`` come from the library's header (``-- @function name`` with its
    ``-- @key``/``-- @arg`` lines); None where the header declares nothing, so calls are
    not checked. ``flags`` are those passed to ``redis.register_function``.
    """

    name: str
    library: str
    keys: tuple[Param, ...] | None = None
    args: tuple[Param, ...] | None = None
    flags: tuple[str, ...] = ()
    description: str = ""
    #: the line of the library file that registers it (None when unknown)
    line: int | None = None
    #: the ``-- @return`` line of its header block
    returns: str = ""

    @property
    def read_only(self) -> bool:
        """Registered ``no-writes``: called with FCALL_RO, allowed on replicas."""
        return "no-writes" in self.flags

    @property
    def checked(self) -> bool:
        """Whether the header declares keys/args (so calls are checked before sending)."""
        return self.keys is not None

    def check_call(self, keys: Sequence[Value], args: Sequence[Value]) -> None:
        """Raise :class:`~luapipe.errors.CallArgumentError` unless the counts fit the header
        and every value is one redis-py can send; nothing is sent otherwise."""
        what = f"function {self.name!r}"
        check_values(what, "keys", keys, self.keys)
        check_values(what, "args", args, self.args)
        check_count(what, self.keys, len(keys), "key")
        check_count(what, self.args, len(args), "arg")

    def fcall_args(self, keys: Sequence[Value], args: Sequence[Value]) -> tuple[Any, ...]:
        """The words of the call: FCALL (FCALL_RO for ``no-writes``)."""
        verb = "FCALL_RO" if self.read_only else "FCALL"
        return (verb, self.name, len(keys), *keys, *args)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "library": self.library,
            "keys": None if self.keys is None else [p.display for p in self.keys],
            "args": None if self.args is None else [p.display for p in self.args],
            "flags": list(self.flags),
            "description": self.description,
        }

    def signature(self) -> tuple[Any, ...]:
        """What a caller depends on: keys, args (display names; None: undeclared) and
        flags. A change of it under the same name breaks callers of the old version."""
        keys = None if self.keys is None else tuple(p.display for p in self.keys)
        args = None if self.args is None else tuple(p.display for p in self.args)
        return (keys, args, tuple(sorted(self.flags)))


@dataclass(frozen=True)
class FunctionLibrary:
    """A library as it is sent with ``FUNCTION LOAD``: ``sha`` is sha1 of ``source``."""

    name: str
    source: str
    sha: str
    functions: tuple[LuaFunction, ...] = ()
    path: str | None = None
    description: str = ""
    #: where the library came from: "file" (a team's own), "generated" (an operation's
    #: function form) or "built" (``luapipe functions build``)
    origin: str = "file"
    line_map: tuple[int, ...] = field(default=(), repr=False)
    #: the ``redis.REDIS_VERSION`` its top level saw when its functions were read
    version: str = BASE_VERSION
    #: the functions a newer server registers and ``version`` does not (under a version
    #: check in the top level): callable (a node without them says so), never compared
    later: tuple[LuaFunction, ...] = ()

    @classmethod
    def of(
        cls,
        name: str,
        source: str,
        functions: Sequence[LuaFunction] = (),
        *,
        path: str | None = None,
        origin: str = "file",
        description: str = "",
        version: str = BASE_VERSION,
        later: Sequence[LuaFunction] = (),
    ) -> FunctionLibrary:
        """A library from its parts (the loader reads them from a file); ``version``: the
        ``redis.REDIS_VERSION`` its functions were read at; ``later``: those only a newer
        server registers."""
        sha = library_sha(source)
        return cls(
            name,
            source,
            sha,
            tuple(functions),
            path,
            description,
            origin,
            version=version,
            later=tuple(later),
        )

    @property
    def function_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.functions)

    def as_dict(self) -> dict[str, Any]:
        """The library as ``scripts list --json`` prints it."""
        return {
            "library": self.name,
            "sha": self.sha,
            "path": self.path,
            "description": self.description,
            "functions": [f.as_dict() for f in self.functions],
            "read_at_redis_version": self.version,
            "later_functions": [f.as_dict() for f in self.later],
        }

    def function(self, name: str) -> LuaFunction | None:
        """The function ``name`` registered at :attr:`version` (None: not registered)."""
        for f in self.functions:
            if f.name == name:
                return f
        return None

    def file_line(self, line: int) -> str:
        """``path:line`` in the file for a line number of the sent code."""
        mapped = self.line_map[line - 1] if 0 < line <= len(self.line_map) else line
        return f"{self.path or self.name}:{mapped}"

    def error_source(self, function: str) -> Any:
        """What an error of ``function`` is read against (its file and code): the library
        itself; a built library gives the script the function was built from."""
        return self

    def load_args(self, *, replace: bool = False) -> tuple[str, ...]:
        """FUNCTION LOAD [REPLACE] <code>."""
        return (
            ("FUNCTION", "LOAD", "REPLACE", self.source)
            if replace
            else (
                "FUNCTION",
                "LOAD",
                self.source,
            )
        )
