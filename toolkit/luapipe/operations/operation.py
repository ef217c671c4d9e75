"""The operation facade: a checked :class:`~luapipe.operations.model.OperationModel` plus
its generated text and running it in any form.

Built by :func:`luapipe.operations.spec.load_operation`; the text comes from
:mod:`luapipe.operations.generate`, the forms run through :mod:`luapipe.operations.run`.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, overload

import redis

from luapipe.operations import casegen, generate, keyspace
from luapipe.operations import run as runner
from luapipe.operations.casegen import Case
from luapipe.operations.model import (
    FORMS,
    ArgSpec,
    Expr,
    Invariant,
    KeySpec,
    Let,
    OperationModel,
    Read,
    Write,
)
from luapipe.operations.plan import RunResult, plan_of
from luapipe.wire.clients import is_async_client

if TYPE_CHECKING:
    from luapipe.wire.clients import AsyncClient, SyncClient

__all__ = ["FORMS", "ArgSpec", "Expr", "Invariant", "KeySpec", "Let", "Operation", "Read", "Write"]


class Operation(OperationModel):
    """One operation spec, checked. ``run`` any of ``forms``; see DESIGN.md."""

    # -- generated text -----------------------------------------------------------------
    @functools.cached_property
    def lua_body(self) -> str:
        return generate.lua_body(self)

    @functools.cached_property
    def lua_source(self) -> str:
        """The script form's Lua (what ``luapipe generate`` writes to scripts_lua/)."""
        return generate.lua_script(self)

    @functools.cached_property
    def function_source(self) -> str:
        """The Redis Function library (``#!lua name=...``) loaded by the function form."""
        return generate.lua_library(self)

    @functools.cached_property
    def python_source(self) -> str:
        return generate.python_module(self)

    # -- running ------------------------------------------------------------------------
    def run(
        self,
        client: Any,
        form: str,
        *,
        keys: Mapping[str, Any],
        args: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run the operation in ``form``; returns the reply (same value in every form).

        With a ``redis.asyncio`` client this returns a coroutine (``await op.run(...)``).
        """
        plan = plan_of(self)
        if is_async_client(client):
            return _value(runner.run_async(plan, client, form, keys, args or {}))
        return runner.run(plan, client, form, keys, args or {}).value

    @overload
    def run_detailed(
        self,
        client: AsyncClient,
        form: str,
        *,
        keys: Mapping[str, Any],
        args: Mapping[str, Any] | None = None,
        max_retries: int | None = None,
    ) -> Coroutine[Any, Any, RunResult]: ...
    @overload
    def run_detailed(
        self,
        client: SyncClient,
        form: str,
        *,
        keys: Mapping[str, Any],
        args: Mapping[str, Any] | None = None,
        max_retries: int | None = None,
    ) -> RunResult: ...
    def run_detailed(
        self,
        client: Any,
        form: str,
        *,
        keys: Mapping[str, Any],
        args: Mapping[str, Any] | None = None,
        max_retries: int | None = None,
    ) -> Any:
        """Like :meth:`run`, with round trips and WATCH retries (at most ``max_retries``,
        default 20) counted. Cluster clients run every form, routed by key slot."""
        plan = plan_of(self)
        if is_async_client(client):
            return runner.run_async(plan, client, form, keys, args or {}, max_retries=max_retries)
        return runner.run(plan, client, form, keys, args or {}, max_retries=max_retries)

    def sample_case(self, rng: random.Random, namespace: str = "") -> Case:
        """A random initial keyspace and random keys/args (what verify and bench use)."""
        return casegen.sample_case(self, rng, namespace)

    def setup(self, client: redis.Redis, case: Case) -> None:
        """Write ``case``'s initial keyspace (its keys are deleted first)."""
        keyspace.setup(client, case)

    def check_invariant(
        self, client: redis.Redis, *, keys: Mapping[str, Any], args: Mapping[str, Any]
    ) -> Any:
        """The invariant's value now (reads only): a bool to hold, a number to conserve."""
        return runner.invariant(plan_of(self), client, keys, args)


async def _value(pending: Awaitable[RunResult]) -> Any:
    return (await pending).value
