"""luapipe: Redis Lua scripts vs pipelined commands — deploy, generate, verify, benchmark."""

from __future__ import annotations

from luapipe.errors import LuapipeError
from luapipe.script import LuaScript

__all__ = ["LuaScript", "LuapipeError"]
__version__ = "0.1.0"
