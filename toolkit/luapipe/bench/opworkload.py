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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis

from luapipe.bench.batching import CLUSTER_REFUSAL, first_error, run_batch
from luapipe.bench.benchkeys import delete_matching, patterns, tagged
from luapipe.bench.workloads import (
    KeyChooser,
    OpFn,
    PingWorkload,
    UpdateTokenWorkload,
    Workload,
    zipf_exponent,
)
from luapipe.errors import LuapipeError
from luapipe.operations.clustersafety import safety_for, skipped_forms
from luapipe.operations.libraries import LibrarySnapshot, restore_library, snapshot_library
from luapipe.wire.routing import is_cluster

__all__ = ["BUILTINS", "OperationWorkload", "catalogue_dir", "resolve_workloads"]

BUILTINS = ("ping", "update_token")


def catalogue_dir() -> Path:
    """The built-in catalogue: ``luapipe/catalogue`` in an installed wheel, else
    ``examples/operations`` of this checkout."""
    package = Path(__file__).resolve().parents[1]
    installed = package / "catalogue"
    return installed if installed.is_dir() else package.parents[1] / "examples" / "operations"


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

    def _select_cases(self, client: redis.Redis) -> None:
        """Sample cases that run cleanly: verify's edge cases (wrong types, non-numbers,
        states that already break the invariant) are for equivalence, not for timing. Each
        candidate is set up and run three times (script form, or one that can run here) with
        the invariant checked before each run and after; one that errors or breaks the
        invariant is skipped. Each case's keys share a hash tag (one cluster slot) under
        the benchmark's prefix: ``{luapipe:bench:<name>:<i>}:<key>``."""
        rng = random.Random(self.seed)
        want = 1 if self.contention == "hot" else self.pool
        chosen: list[Any] = []
        for _ in range(want * 20):
            case = self.op.sample_case(rng, tagged(self.name, len(chosen)))
            safe = safety_for(self.op, client, case.keys_dict, case.args_dict)
            form = "script" if safe["script"].ok else "pipelined"
            try:
                self.op.setup(client, case)
                for _ in range(3):
                    if not self._holds(client, case):
                        raise ValueError("the invariant does not hold in this state")
                    self.op.run_detailed(client, form, keys=case.keys_dict, args=case.args_dict)
                if not self._holds(client, case):
                    raise ValueError("the invariant does not hold in this state")
                self.op.setup(client, case)
            except Exception:  # any failure (server error, OpError...) disqualifies the case
                continue
            chosen.append(case)
            if len(chosen) == want:
                break
        if not chosen:
            raise LuapipeError(f"{self.name}: no sampled case runs without an error")
        object.__setattr__(self, "cases", tuple(chosen))

    @property
    def name(self) -> str:
        return str(self.op.name)

    @property
    def forms(self) -> tuple[str, ...]:
        return tuple(self.op.forms)

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
        }

    def reset(self, client: redis.Redis) -> None:
        """Delete this workload's keys (never FLUSHDB) and write every case's initial state."""
        if not self.libraries and "function" in self.forms:  # before any form has run
            self.libraries.append(snapshot_library(self.op, client))
        delete_matching(client, patterns(self.name))
        if not self.cases:
            self._select_cases(client)
            delete_matching(client, patterns(self.name))
        self.baseline.clear()
        for i, case in enumerate(self.cases):
            self.op.setup(client, case)
            if self.op.invariant is not None:
                self.baseline[i] = self._invariant(client, case)

    def _holds(self, client: redis.Redis, case: Any) -> bool:
        inv = self.op.invariant
        return inv is None or inv.conserved or bool(self._invariant(client, case))

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
        rng = random.Random(seed * 1000 + worker)
        chooser = KeyChooser(self.contention, len(self.cases))
        calls = [(c.keys_dict, c.args_dict) for c in self.cases]
        run = self.op.run_detailed
        n = max(1, self.batch)
        if n > 1:
            if is_cluster(client):
                raise LuapipeError(f"{self.name}: {CLUSTER_REFUSAL}")
            op = self.op

            def many(i: int) -> int:
                picked = [calls[chooser.pick(rng)] for _ in range(n)]
                outcomes = run_batch(op, client, form, picked)
                error = first_error(outcomes)
                if error is not None:
                    raise error
                return sum(o.retries for o in outcomes)

            return many

        def call(i: int) -> int:
            keys, args = calls[chooser.pick(rng)]
            return int(run(client, form, keys=keys, args=args).retries)

        return call

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        inv = self.op.invariant
        if inv is None:
            return True, "no invariant declared"
        bad = []
        for i, case in enumerate(self.cases):
            now = self._invariant(client, case)
            ok = now == self.baseline.get(i) if inv.conserved else bool(now)
            if not ok:
                bad.append(f"{case.namespace} {now!r} (was {self.baseline.get(i)!r})")
        if bad:
            return False, f"invariant broken in {len(bad)} of {len(self.cases)} cases: {bad[0]}"
        return True, f"invariant held in {len(self.cases)} cases ({ops_done} ops)"


def resolve_workloads(
    names: list[str], *, contention: str = "spread", batch: int = 1, seed: int = 1
) -> list[Workload]:
    """Built-in names, spec paths, or catalogue names (``examples/operations/<name>.toml``)."""
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
        else:
            path = Path(name)
            if not path.exists():
                path = catalogue_dir() / f"{name}.toml"
            if not path.exists():
                known = sorted(p.stem for p in catalogue_dir().glob("*.toml"))
                raise LuapipeError(
                    f"unknown operation {name!r}: not a file, not built in "
                    f"({', '.join(BUILTINS)}), not in the catalogue ({', '.join(known)})"
                )
            from luapipe.operations.spec import load_operation

            op = load_operation(path)
            out.append(OperationWorkload(op, contention=contention, seed=seed, batch=batch))
    return out
