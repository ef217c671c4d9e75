"""Writing a rendered report to the path a user named: whole or not at all.

The text goes into a file beside the target, which then replaces it, so a write that fails
midway (a full disk, a file size limit) leaves neither a truncated report nor a damaged
older one; the error names the path. A path that is not a regular file (a symbolic link,
``/dev/stdout``, a pipe) is written where it is.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from luapipe.errors import LuapipeError

__all__ = ["write_whole"]


def write_whole(path: str | Path, text: str) -> None:
    """``text`` into ``path`` whole, or a one-line :class:`LuapipeError` naming ``path``."""
    p = Path(path)
    in_place = p.is_symlink() or (p.exists() and not p.is_file())
    tmp = p.with_name(f".{p.name}.luapipe-tmp")
    try:
        if in_place:
            p.write_text(text)
            return
        try:
            tmp.write_text(text)
            os.replace(tmp, p)
        except BaseException:  # a failed write, or Ctrl-C before the rename
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise
    except OSError as exc:
        raise LuapipeError(f"{path}: cannot write it ({exc.strerror or exc})") from None
