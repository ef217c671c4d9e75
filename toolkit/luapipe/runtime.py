"""The generated-code ABI: the only luapipe module a generated operation module imports.

A module written by ``luapipe generate`` builds its :class:`Plan` from :class:`ReadStep`
and :class:`WriteStep` values whose lambdas call the helpers below (the Python twins of the
Lua prelude: integers exact within +-(2^53-1), ``OVERFLOW``/``FLOAT``/``DIVZERO``/``NOTINT``
as :class:`OpError`), normalises replies with :func:`flat`, :func:`score` and
:func:`opt_text`, and runs a form with :func:`run` or :func:`run_async`.

``__all__`` is pinned by a test, as ``luapipe.__all__`` is: generated modules already on
disk keep working across luapipe releases, so names are added, never renamed or removed.
"""

from __future__ import annotations

from luapipe.operations.plan import Plan, ReadStep, WriteStep, flat, opt_text, score
from luapipe.operations.prelude import (
    OpError,
    ck,
    co,
    contains,
    div,
    fk,
    floor,
    flt,
    fmt,
    fsum,
    idiv,
    idx,
    imod,
    is_nil,
    isum,
    length,
    pflt,
    pint,
    rflt,
    rint,
    text,
    trunc,
    wopt,
)
from luapipe.operations.run import run, run_async

__all__ = [
    "OpError",
    "Plan",
    "ReadStep",
    "WriteStep",
    "ck",
    "co",
    "contains",
    "div",
    "fk",
    "flat",
    "floor",
    "flt",
    "fmt",
    "fsum",
    "idiv",
    "idx",
    "imod",
    "is_nil",
    "isum",
    "length",
    "opt_text",
    "pflt",
    "pint",
    "rflt",
    "rint",
    "run",
    "run_async",
    "score",
    "text",
    "trunc",
    "wopt",
]
