"""Generated operations as benchmark workloads, and name -> workload resolution.

An :class:`OperationWorkload` samples a pool of cases (initial keyspace + keys + args) from
the operation spec, each in its own key namespace. Contention picks which case a call
touches: ``hot`` (every client on one case: WATCH conflicts, lost updates), ``spread``
(uniform over the pool) or ``zipf:S``. The invariant is checked on every case after a slice:
a boolean must still hold, a number must be conserved.

With ``batch`` N > 1 one call is N operations on N picks of the contention policy, sent as
:func:`luapipe.bench.batching.run_batch` does: naive and transaction one after another,
pipelined and function in lockstep (pipelined batches are not atomic across operations: N
read-compute-writes on one key race), script as N EVALSHA in one pipeline. A single server
only (refused on a cluster).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from multiprocessing.sharedctypes import RawArray
from pathlib import Path
from typing import Any

import redis

from luapipe.bench.batching import CLUSTER_REFUSAL
from luapipe.bench.benchkeys import delete_matching, patterns
from luapipe.bench.opcalls import AsyncOpCalls, OpCalls
from luapipe.bench.opcases import invariants, select_cases, write_copies, write_states
from luapipe.bench.profile import (
    DEFAULT_WRITE_SHARE,
    CallArgs,
    copy_namespace,
    rebase,
)
from luapipe.bench.workloads import (
    KeyChooser,
    OpFn,
    PingWorkload,
    UpdateTokenWorkload,
    Workload,
    zipf_exponent,
)
from luapipe.errors import LuapipeError
from luapipe.operations.benchprofile import BenchDraw
from luapipe.operations.catalogue import catalogue_dir, catalogue_names, spec_path
from luapipe.operations.clustersafety import safety_for, skipped_forms
from luapipe.operations.libraries import LibrarySnapshot, restore_library, snapshot_library
from luapipe.wire.routing import is_cluster

__all__ = [
    "BUILTINS",
    "OperationWorkload",
    "catalogue_dir",
    "resolve_workloads",
    "shadowed_script",
    "with_forms",
]

BUILTINS = ("ping", "update_token")


#: pre-set copies of a case renewed on refusal ("refused"), at most, over all cases
COPY_BUDGET = 4096


@dataclass(frozen=True)
class OperationWorkload:
    op: Any  # luapipe.operations.operation.Operation
    contention: str = "spread"
    pool: int = 64
    seed: int = 1
    cases: tuple[Any, ...] = field(default=(), compare=False)
    baseline: dict[int, Any] = field(default_factory=dict, compare=False)
    batch: int = 1
    #: the function library as found before the first run; put back by :meth:`cleanup`
    libraries: list[LibrarySnapshot | None] = field(default_factory=list, compare=False)
    #: mutable run state: the shared copy frontier, copies pre-set, the last check's counts
    state: dict[str, Any] = field(default_factory=dict, compare=False)
    #: time only these of the operation's forms (empty: every form)
    only: tuple[str, ...] = ()

    @property
    def draw(self) -> BenchDraw | None:
        """The profile's draw for this contention (None: no ``[bench]`` table)."""
        bench = self.op.bench
        return bench.for_contention(self.contention) if bench is not None else None

    @property
    def write_share_declared(self) -> float:
        if self.draw is not None:
            return float(self.draw.write_share)
        return DEFAULT_WRITE_SHARE if self.op.writes else 0.0

    @property
    def renew(self) -> str | int:
        return self.draw.renew if self.draw is not None else "never"

    @property
    def name(self) -> str:
        return str(self.op.name)

    @property
    def forms(self) -> tuple[str, ...]:
        return tuple(f for f in self.op.forms if not self.only or f in self.only)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "generated",
            "read_compute_write": bool(self.op.reads) and bool(self.op.writes),
            "path": str(self.op.path),
            "description": str(self.op.description),
            "contention": self.contention,
            "cases": self.pool if self.contention != "hot" else 1,
            "batch": self.batch,
            "lua": str(self.op.lua_source),
            "bench_profile": self.profile_summary(),
        }

    def profile_summary(self) -> dict[str, Any]:
        """How the bench draws state and arguments (the manifest's ``bench_profile``)."""
        d = self.draw
        bench = self.op.bench
        out: dict[str, Any] = {
            "source": "spec" if bench is not None else "default",
            "description": bench.description
            if bench is not None
            else ("no [bench] table: verify-style cases whose trial calls took the write path"),
            "write_share": self.write_share_declared,
            "wrote": self.op.wrote,
            "renew": self.renew,
        }
        if d is not None:
            out["state"] = {s.name: s.describe() for s in d.state}
            out["args"] = {a.name: a.describe() for a in d.args}
        return out

    def reset(self, client: redis.Redis) -> None:
        """Delete this workload's keys (never FLUSHDB), write every case's initial state and
        the copies a "refused" renewal may move to."""
        if not self.libraries and "function" in self.forms:  # before any form has run
            self.libraries.append(snapshot_library(self.op, client))
        delete_matching(client, patterns(self.name))
        if not self.cases:
            rng, want = random.Random(self.seed), 1 if self.contention == "hot" else self.pool
            cases = select_cases(self.op, client, self.draw, want, rng)
            object.__setattr__(self, "cases", cases)
            delete_matching(client, patterns(self.name))
        write_states(client, self.cases)
        if self.op.invariant is not None and not self.baseline:  # the same every slice
            self.baseline.update(enumerate(invariants(self.op, client, self.cases)))
        self.state["frontier"] = RawArray("q", len(self.cases))
        if self.renew == "refused":
            self._preset_copies(client)

    def _preset_copies(self, client: redis.Redis) -> None:
        """Copies 1..n-1 of every case, as many as the last slices needed (x4), within
        :data:`COPY_BUDGET`; with an empty initial state nothing needs writing."""
        budget = max(2, COPY_BUDGET // len(self.cases))
        if not any(c.state for c in self.cases):
            self.state["copies"] = 1_000_000
            return
        # 64 before any slice said how far they go, then 4x what the last slices reached
        n = min(budget, int(self.state.get("need", 64)))
        write_copies(client, self.cases, n)
        self.state["copies"] = n

    def _invariant(self, client: redis.Redis, case: Any) -> Any:
        return self.op.check_invariant(client, keys=case.keys_dict, args=case.args_dict)

    def cluster_skips(self, client: Any) -> dict[str, str]:
        """``{form: reason}`` for the forms that cannot run with these cases' keys."""
        if self.batch > 1:  # the runner asks this first on a cluster: refuse before running
            raise LuapipeError(f"{self.name}: {CLUSTER_REFUSAL}")
        if not self.cases:
            self.reset(client)
        return skipped_forms(
            [safety_for(self.op, client, c.keys_dict, c.args_dict) for c in self.cases]
        )

    def prepare(self, client: redis.Redis, form: str) -> None:
        return None  # the discarded warm-up loads scripts and functions

    def cleanup(self, client: redis.Redis) -> None:
        """After the run: the function library as it was found (the runner deletes the
        keys); a cached script stays, as SCRIPT LOAD would leave it."""
        for snapshot in self.libraries:
            restore_library(snapshot)

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        if self.batch > 1 and is_cluster(client):
            raise LuapipeError(f"{self.name}: {CLUSTER_REFUSAL}")
        return OpCalls(
            self.op,
            client,
            form,
            self.cases,
            KeyChooser(self.contention, len(self.cases)),
            random.Random(seed * 1000 + worker),
            draws=CallArgs.of(self.op, self.draw),
            renew=self.renew,
            frontier=self.state.get("frontier") or [0] * len(self.cases),
            copies=int(self.state.get("copies", 1)),
            worker=worker,
            batch=self.batch,
        )

    def op_fn_async(self, client: Any, form: str, worker: int, seed: int) -> AsyncOpCalls:
        """The asyncio calls (``--tasks``): ``client`` is a ``redis.asyncio`` client or an
        auto-pipeline over one (``op.run`` takes either)."""
        return AsyncOpCalls(
            self.op,
            client,
            form,
            self.cases,
            KeyChooser(self.contention, len(self.cases)),
            random.Random(seed * 1000 + worker),
            draws=CallArgs.of(self.op, self.draw),
            renew=self.renew,
            frontier=self.state.get("frontier") or [0] * len(self.cases),
            copies=int(self.state.get("copies", 1)),
            worker=worker,
        )

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        """Every case, and every copy a "refused" renewal used, against its baseline.
        ``state["checked"]`` is then ``(broken, checked)``."""
        inv = self.op.invariant
        frontier = self.state.get("frontier") or [0] * len(self.cases)
        reached = max((int(x) for x in frontier), default=0)
        self.state["need"] = max(int(self.state.get("need", 0)), 4 * reached + 16)
        if inv is None:
            self.state["checked"] = (0, 0)
            return True, "no invariant declared"
        where = [
            (i, rebase(case, copy_namespace(case.namespace, str(j))) if j else case)
            for i, case in enumerate(self.cases)
            for j in range(int(frontier[i]) + 1)
        ]
        bad = []
        for (i, case), now in zip(
            where, invariants(self.op, client, [c for _, c in where]), strict=True
        ):
            ok = now == self.baseline.get(i) if inv.conserved else bool(now)
            if not ok and inv.conserved:
                bad.append(f"{case.namespace} {now!r}, was {self.baseline.get(i)!r}")
            elif not ok:  # a bool check: its value says nothing; its description does
                bad.append(f"{case.namespace} no longer holds: {inv.description}")
        checked = len(where)
        self.state["checked"] = (len(bad), checked)
        if bad:
            return False, f"invariant broken in {len(bad)} of {checked} cases: {bad[0]}"
        return True, f"invariant held in {checked} cases ({ops_done} ops)"


def with_forms(w: Workload, forms: tuple[str, ...]) -> Workload:
    """``w`` timing only those of its forms that are in ``forms`` (in its own order)."""
    keep = tuple(f for f in w.forms if f in forms)
    if isinstance(w, OperationWorkload):
        return replace(w, only=keep)
    if isinstance(w, UpdateTokenWorkload | PingWorkload):
        return replace(w, forms=keep)
    raise LuapipeError(f"{w.name}: its forms cannot be chosen")


def shadowed_script(name: str, scripts_dir: str | None = None) -> Path | None:
    """The script of the scripts directory that ``name`` also names, when the built-in or
    catalogue operation of that name comes first (that script is benched by its file)."""
    from luapipe.bench.scripttargets import is_script_target
    from luapipe.bench.scripttargets import scripts_dir as directory_of

    if is_script_target(name) or "/" in name:
        return None
    if name not in BUILTINS and spec_path(name) is None:
        return None
    found = directory_of(scripts_dir) / f"{name}.lua"
    return found if found.is_file() else None


def resolve_workloads(
    names: list[str],
    *,
    contention: str = "spread",
    batch: int = 1,
    seed: int = 1,
    scripts_dir: str | None = None,
    tasks: int = 1,
) -> list[Workload]:
    """Built-in names, spec paths, or catalogue names (``examples/operations/<name>.toml``);
    a team's own script: a ``.lua`` file, its ``.bench.toml`` profile, or the name of a
    script of ``scripts_dir`` (see :mod:`luapipe.bench.scripttargets`)."""
    from luapipe.bench.scripttargets import is_script_target, script_workload

    try:
        zipf_exponent(contention)
    except ValueError as exc:
        raise LuapipeError(f"--contention: {exc}") from None
    out: list[Workload] = []
    for name in names:
        if name == "ping":
            out.append(PingWorkload(batch=batch))
        elif name == "update_token":
            out.append(UpdateTokenWorkload(contention=contention, batch=batch))
        elif is_script_target(name) or spec_path(name) is None:
            found = script_workload(
                name, scripts_dir, contention=contention, seed=seed, batch=batch, tasks=tasks
            )
            if found is None:
                known = ", ".join(catalogue_names())
                raise LuapipeError(
                    f"unknown operation {name!r}: not a file, not built in "
                    f"({', '.join(BUILTINS)}), not in the catalogue ({known}), not a script "
                    "of the scripts directory (--dir)"
                )
            out.append(found)
        else:
            path = spec_path(name)
            assert path is not None
            from luapipe.operations.spec import load_operation

            op = load_operation(path)
            out.append(OperationWorkload(op, contention=contention, seed=seed, batch=batch))
    named: dict[str, str] = {}
    for name, w in zip(names, out, strict=True):
        if w.name in named and named[w.name] == name:
            raise LuapipeError(f"{name} is named twice: bench it once")
        if w.name in named:
            raise LuapipeError(
                f"{named[w.name]} and {name} are both timed as {w.name!r}: their results and "
                "their bench keys would be mixed up; bench them one at a time, or give a copy "
                "of one another name"
            )
        named[w.name] = name
    return out
