"""Which values redis-py can send, checked before anything is: one rule for script and
function calls, explicit pipelines and the auto-pipeline.

redis-py's own refusal of a bad value (None, a bool, a dict, an IntEnum) names neither the
command nor the value, comes only when the batch is packed (dropping what was queued
before it), and its asyncio encoder sends an IntEnum's repr (``'<Status.OK: 1>'``). Here a
bad value is refused when it is called or queued, by position and declared name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from redis.exceptions import DataError

from luapipe.errors import CallArgumentError

__all__ = ["PLAIN", "Named", "check_values", "param_name", "shown"]

#: the classes of the usual values, checked by identity on the hot path
PLAIN = frozenset({str, bytes, int, float})
_SENDABLE = (str, bytes, bytearray, memoryview, int, float)


class Named(Protocol):
    """A declared key or argument (``luapipe.scripts.header.Param``)."""

    @property
    def name(self) -> str: ...
    @property
    def variadic(self) -> bool: ...


def shown(value: object, width: int = 40) -> str:
    """``value`` as a message shows it: its repr, cut to ``width`` characters (a value of
    megabytes must not make a message of megabytes)."""
    if isinstance(value, str | bytes):  # without the whole repr of a long one
        value = value[: width + 1]
    text = repr(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def param_name(params: Sequence[Named] | None, i: int) -> str:
    """`` (limit)``: the declared name of position ``i`` (a variadic one names the rest),
    or ``""`` where nothing is declared."""
    if not params:
        return ""
    if i < len(params):
        return f" ({params[i].name})"
    return f" ({params[-1].name})" if params[-1].variadic else ""


def check_values(
    what: str, kind: str, values: Sequence[object], params: Sequence[Named] | None = None
) -> None:
    """Refuse what redis-py cannot send (None, a bool, a dict, an int subclass...), before
    sending; ``what`` names the callee (``script 'x'``, ``command SET``), ``params`` the
    declared names (``args[1] (limit)``)."""
    for v in values:
        if v.__class__ not in PLAIN:
            break
    else:
        return  # the usual case, checked without building anything
    for i, v in enumerate(values):
        # an int subclass (IntEnum...) too: hiredis refuses it unnamed, the asyncio encoder
        # sends its repr ('<Status.OK: 1>')
        if (
            isinstance(v, bool)
            or not isinstance(v, _SENDABLE)
            or (isinstance(v, int) and v.__class__ is not int)
        ):
            raise CallArgumentError(
                f"{what}: {kind}[{i}]{param_name(params, i)} is {shown(v)} ({type(v).__name__}); "
                "keys and args must be str, bytes, int or float; nothing was sent",
                like=DataError,
            )
