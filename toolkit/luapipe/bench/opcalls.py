"""One worker's timed calls of a generated operation: pick a case, its current copy, draw
the arguments, run the form, count the calls that wrote.

``renew`` (from the bench profile) moves calls to fresh copies of a case:

- ``"refused"``: all clients share the copy in use (a ``frontier`` per case, in shared
  memory for forked workers); a call that did not write moves it on to the next pre-set
  copy. Under hot contention that is a sold-out item followed by the next one: the boundary
  the invariant guards is crossed again and again, so racing forms show their lost updates.
- ``N``: each client moves to a fresh copy (all keys missing) after N calls on a case, e.g.
  a new rate-limit window.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from luapipe.bench.batching import first_error, run_batch
from luapipe.bench.profile import CallArgs, copy_namespace, rebase, wrote_in
from luapipe.bench.workloads import KeyChooser
from luapipe.operations.casegen import Case

__all__ = ["AsyncOpCalls", "OpCalls"]

Call = tuple[int, int, dict[str, Any], dict[str, Any]]  # case, copy, keys, args


class OpCalls:
    """The callable a worker times: ``calls(i) -> WATCH retries``; ``wrote`` counts the
    operations whose reply says they took the write path (None when a reply cannot tell)."""

    def __init__(
        self,
        op: Any,
        client: Any,
        form: str,
        cases: Sequence[Case],
        chooser: KeyChooser,
        rng: random.Random,
        *,
        draws: CallArgs,
        renew: str | int,
        frontier: Any,
        copies: int,
        worker: int,
        batch: int = 1,
        run: Any = None,
    ) -> None:
        self.op, self.client, self.form, self.cases = op, client, form, list(cases)
        self.chooser, self.rng, self.draws = chooser, rng, draws
        self.renew, self.frontier, self.copies, self.worker = renew, frontier, copies, worker
        self.batch = max(1, batch)
        self.run = run or op.run_detailed
        self.flag = op.wrote
        self.wrote: int | None = None if wrote_in(self.flag, 1) is None else 0
        self.current: dict[int, tuple[str, dict[str, Any], dict[str, Any], str]] = {}
        self.uses = [0] * len(self.cases)

    def _copy(self, c: int, label: str) -> tuple[dict[str, Any], dict[str, Any], str]:
        held = self.current.get(c)
        if held is not None and held[0] == label:
            return held[1], held[2], held[3]
        case = self.cases[c]
        moved = rebase(case, copy_namespace(case.namespace, label)) if label else case
        self.current[c] = (label, moved.keys_dict, moved.args_dict, moved.namespace)
        return moved.keys_dict, moved.args_dict, moved.namespace

    def pick(self) -> Call:
        c = self.chooser.pick(self.rng)
        if self.renew == "refused":
            j = int(self.frontier[c])
            label = str(j) if j else ""
        elif isinstance(self.renew, int):
            j = self.uses[c] // self.renew
            self.uses[c] += 1
            label = f"w{self.worker}.{j}"
        else:
            j, label = 0, ""
        keys, args, namespace = self._copy(c, label)
        return c, j, keys, self.draws.apply(args, namespace, self.rng)

    def settle(self, c: int, j: int, value: Any) -> None:
        if self.wrote is None:
            return
        if wrote_in(self.flag, value):
            self.wrote += 1
        elif self.renew == "refused" and int(self.frontier[c]) == j and j + 1 < self.copies:
            self.frontier[c] = j + 1

    def __call__(self, i: int) -> int:
        if self.batch == 1:
            c, j, keys, args = self.pick()
            result = self.run(self.client, self.form, keys=keys, args=args)
            self.settle(c, j, result.value)
            return int(result.retries)
        picked = [self.pick() for _ in range(self.batch)]
        outcomes = run_batch(self.op, self.client, self.form, [(k, a) for _, _, k, a in picked])
        error = first_error(outcomes)
        if error is not None:
            raise error
        for (c, j, _, _), o in zip(picked, outcomes, strict=True):
            self.settle(c, j, o.value)
        return sum(o.retries for o in outcomes)


class AsyncOpCalls(OpCalls):
    """The asyncio twin (``--tasks``): the same picks and bookkeeping, one awaited call each
    (no batches: many tasks are what puts several calls in flight)."""

    async def __call__(self, i: int) -> int:  # type: ignore[override]
        c, j, keys, args = self.pick()
        result = await self.run(self.client, self.form, keys=keys, args=args)
        self.settle(c, j, result.value)
        return int(result.retries)
