"""Versioned library names: ``luapipe_<base>_<hash>``, the hash being that of the code.

Function names are global on a server, and a library is replaced only whole. So that two
versions of an application run side by side (a rolling deploy) without reloading or
replacing each other's code, the libraries luapipe writes (an operation's function form,
and a directory of scripts built into one library by ``luapipe functions build``) carry a
version in their names: the library is ``luapipe_<base>_<10 hex>`` and every function name
in it starts with that name. The hash is sha1 of the library's whole text rendered with
:func:`hole` in place of the name, so any change of the code is a new name and the same
code is the same name in every process.

:func:`versioned_base` recognises such a library from its name and code alone; a library
of that shape whose hash is not that of its code is not luapipe's, whoever named it so.
That is all ``luapipe functions gc`` ever deletes.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["VERSIONED_NAME", "hole", "versioned_base", "versioned_name"]

#: ``luapipe_<base>_<10 hex>``: the name of a library luapipe versions
VERSIONED_NAME = re.compile(r"^luapipe_(?P<op>[A-Za-z_][A-Za-z0-9_]*)_(?P<hash>[0-9a-f]{10})$")
#: a base name: what the versioned name is built from (an operation, a built library)
BASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def hole(base: str) -> str:
    """What stands for the name while the library's hash is taken."""
    return f"luapipe_{base}_{'_' * 10}"


def versioned_name(base: str, holed_text: str) -> str:
    """``luapipe_<base>_<hash>`` of a library text rendered with :func:`hole` as its name."""
    # code read from a server (functions gc) may hold bytes that are not UTF-8
    digest = hashlib.sha1(holed_text.encode("utf-8", "surrogateescape")).hexdigest()
    return f"luapipe_{base}_{digest[:10]}"


def versioned_base(library: str, code: str) -> str | None:
    """The base name of ``library`` if it is a versioned library with ``code`` (its hash is
    that of the code), else None."""
    found = VERSIONED_NAME.match(library)
    if found is None:
        return None
    holed = code.replace(library, hole(found["op"]))
    return found["op"] if versioned_name(found["op"], holed) == library else None
