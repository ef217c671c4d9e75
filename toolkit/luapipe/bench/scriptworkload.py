"""A team's own script as a benchmark workload: the script, its Function twin, their Python.

The forms timed side by side:

- ``script``: the script, called as the application calls it (``reg.call``: EVALSHA);
- ``function``: its Function twin, built as ``luapipe functions build`` builds it (one
  function of a library ``luapipe_bench_<hash>``), called with FCALL; left out, with the
  reason, for a script a function cannot run;
- each Python form of the profile (``[forms]``, see :mod:`luapipe.bench.pyforms`), atomic
  or not as the profile declares.

Cases come from the profile (:mod:`luapipe.bench.scriptprofile`): the declared state in
each case's own key namespace (``{luapipe:bench:<script>:<i>}:<key>``), the args drawn per
call. Without a profile, cases are drawn as ``verify`` draws them for a script, edge values
left out, and kept where :data:`TRIALS` trial calls succeed. Contention, ``renew``, the
measured write share and the invariant (a Python callable: a bool that must hold in every
case, or a number that must not change) work as for a spec's operation
(:class:`~luapipe.bench.opworkload.OperationWorkload`), so the whole verdict applies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from multiprocessing.sharedctypes import RawArray
from typing import Any

import redis

from luapipe.bench.benchkeys import delete_matching, patterns, tagged
from luapipe.bench.opcalls import AsyncOpCalls
from luapipe.bench.opcases import write_copies, write_states
from luapipe.bench.profile import DEFAULT_KEY_COUNT, CallArgs, copy_namespace, rebase
from luapipe.bench.pyforms import PythonForm, awaitable_error, load_callable
from luapipe.bench.scriptcalls import Calls, Flag, Target, async_runner, sync_runner
from luapipe.bench.scriptprofile import ScriptProfile
from luapipe.bench.workloads import KeyChooser, OpFn
from luapipe.errors import LuapipeError, ScriptError
from luapipe.operations.benchprofile import BenchDraw
from luapipe.operations.casegen import Case, KeyState
from luapipe.operations.libraries import LibrarySnapshot, restore_library, snapshot_named
from luapipe.operations.scriptcases import flat, script_case
from luapipe.scripts.build import build_library
from luapipe.scripts.registry import ScriptRegistry

__all__ = ["TRIALS", "ScriptWorkload"]

TRIALS = 3  # calls a profile-less case must succeed in, to be chosen
BASE = "bench"  # the Function twin's library: luapipe_bench_<hash>
_EDGE_TEXT = ("abc", "", "1.5", " 1", "007", "x y", "é")


@dataclass(frozen=True)
class ScriptWorkload:
    profile: ScriptProfile
    contention: str = "spread"
    pool: int = 64
    seed: int = 1
    batch: int = 1
    #: ``--tasks``: asyncio tasks per client; > 1 times only what runs on an event loop
    tasks: int = 1
    cases: tuple[Case, ...] = field(default=(), compare=False)
    baseline: dict[int, Any] = field(default_factory=dict, compare=False)
    libraries: list[LibrarySnapshot | None] = field(default_factory=list, compare=False)
    state: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.batch != 1:
            raise LuapipeError(
                f"{self.name}: --batch applies to the catalogue's operations; a script of "
                "your own is timed one call at a time"
            )
        script = self.profile.script
        self.state["scripts"] = ScriptRegistry([script], check=False)
        try:
            build_library([script], BASE)
        except ScriptError as exc:
            self.state["unconverted"] = str(exc).split(": ", 2)[-1]
        else:
            self.state["functions"] = ScriptRegistry([script], check=False, functions=BASE)

    # -- what the runner reads ---------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.profile.script.name

    @property
    def python_forms(self) -> dict[str, PythonForm]:
        return {f.name: f for f in self.profile.forms}

    @property
    def forms(self) -> tuple[str, ...]:
        built = ("function",) if "functions" in self.state else ()
        return ("script", *built, *(f.name for f in self.profile.forms if f not in self._blocking))

    @property
    def not_timed(self) -> dict[str, str]:
        """``{form: reason}``: the forms left out (the results list them as skipped)."""
        out = {"function": self.state["unconverted"]} if "unconverted" in self.state else {}
        for f in self._blocking:
            out[f.name] = "a plain Python function is timed with --tasks 1 (an async def runs "
            out[f.name] += "with --tasks N: a plain one would block the event loop)"
        return out

    @property
    def _blocking(self) -> tuple[PythonForm, ...]:
        """With ``--tasks`` > 1, the plain functions: they would block the event loop."""
        return tuple(f for f in self.profile.forms if self.tasks > 1 and not f.is_async)

    @property
    def atomic_forms(self) -> frozenset[str]:
        """The script and its function, and the Python forms the profile declares atomic."""
        return frozenset({"script", "function"} | {f.name for f in self.profile.forms if f.atomic})

    @property
    def draw(self) -> BenchDraw | None:
        bench = self.profile.bench
        return bench.for_contention(self.contention) if bench is not None else None

    @property
    def write_share_declared(self) -> float | None:
        return float(self.draw.write_share) if self.draw is not None else None

    @property
    def wrote(self) -> str | None:
        return self.profile.bench.wrote if self.profile.bench is not None else None

    def describe(self) -> dict[str, Any]:
        script = self.profile.script
        out: dict[str, Any] = {
            "name": self.name,
            "kind": "script",
            "path": script.path,
            "description": script.description,
            "read_compute_write": self.profile.read_compute_write,
            "contention": self.contention,
            "cases": 1 if self.contention == "hot" else self.pool,
            "batch": 1,
            "lua": script.source,
            "forms": {
                "script": {"call": "EVALSHA", "atomic": True},
                **(
                    {"function": {"call": "FCALL", "atomic": True}}
                    if "functions" in self.state
                    else {}
                ),
                **{f.name: f.describe() for f in self.profile.forms},
            },
            "bench_profile": self.profile.describe(self.contention),
        }
        if "unconverted" in self.state:
            out["function"] = f"not timed: {self.state['unconverted']}"
        if self._blocking:
            names = ", ".join(f.name for f in self._blocking)
            out["not_timed"] = f"{names}: a plain Python function is timed with --tasks 1"
        return out

    # -- cases -------------------------------------------------------------------------------
    def _profile_case(self, draw: BenchDraw, namespace: str, rng: random.Random) -> Case:
        counts = dict(draw.key_count)
        keys: list[tuple[str, Any]] = []
        for k in self.profile.keys:
            if k.variadic:
                n = counts.get(k.name, DEFAULT_KEY_COUNT)
                keys.append((k.name, tuple(f"{namespace}{k.name}:{i}" for i in range(n))))
            else:
                keys.append((k.name, f"{namespace}{k.name}"))
        drawn = {a.name: a for a in draw.args}
        args = []
        for a in self.profile.args:
            d = drawn.get(a.name)
            if d is None:
                break
            v = d.draw(rng)
            args.append((a.name, tuple(v) if isinstance(v, list) else v))
        named = dict(keys)
        state = [
            KeyState(key, init.family, init.value)
            for init in draw.state
            for key in (
                named[init.name] if isinstance(named[init.name], tuple) else (named[init.name],)
            )
        ]
        universe = tuple(x for _, v in keys for x in (v if isinstance(v, tuple) else (v,)))
        return Case(0, 0, namespace, tuple(keys), tuple(args), tuple(state), universe)

    def _default_cases(self, client: Any, want: int, rng: random.Random) -> tuple[Case, ...]:
        """``verify``-style cases without edge values, kept where trial calls succeed."""
        script = self.profile.script
        reg = self.state["scripts"]
        chosen: list[Case] = []
        for _ in range(want * 20):
            case = script_case(script, rng, tagged(self.name, len(chosen)))
            if any(s.type == "string" and s.value[0] in _EDGE_TEXT for s in case.state):
                continue
            if any(
                a in _EDGE_TEXT for _, v in case.args for a in (v if isinstance(v, tuple) else (v,))
            ):
                continue
            case = replace(case, state=tuple(replace(s, ttl=False) for s in case.state))
            try:
                write_states(client, [case])
                for _ in range(TRIALS):
                    reg.call(client, script.name, flat(case.keys), flat(case.args))
            except (LuapipeError, redis.RedisError):
                continue
            chosen.append(case)
            if len(chosen) == want:
                break
        if not chosen:
            raise LuapipeError(
                f"{self.name}: no sampled case runs without an error; write a bench profile "
                f"({self.name}.bench.toml beside the script) with the state and args it needs"
            )
        return tuple(chosen)

    def reset(self, client: redis.Redis) -> None:
        """Delete this workload's keys (never FLUSHDB) and write every case's state."""
        if not self.libraries and "functions" in self.state:
            built = self.state["functions"].built
            self.libraries.append(snapshot_named(built.name, client))
        delete_matching(client, patterns(self.name))
        if not self.cases:
            rng, want = random.Random(self.seed), 1 if self.contention == "hot" else self.pool
            draw = self.draw
            if draw is not None:
                cases = tuple(
                    self._profile_case(draw, tagged(self.name, i), rng) for i in range(want)
                )
            else:
                cases = self._default_cases(client, want, rng)
            object.__setattr__(self, "cases", cases)
            delete_matching(client, patterns(self.name))
        write_states(client, self.cases)
        self.baseline.clear()
        if self.profile.invariant is not None:
            self.baseline.update(enumerate(self._invariants(client, self.cases)))
        self.state["frontier"] = RawArray("q", len(self.cases))
        renew = self.draw.renew if self.draw is not None else "never"
        if renew == "refused":
            n = max(64, int(self.state.get("need", 0)))
            write_copies(client, self.cases, n)
            self.state["copies"] = n

    def prepare(self, client: redis.Redis, form: str) -> None:
        return None  # the discarded warm-up loads the script and the library

    def cleanup(self, client: redis.Redis) -> None:
        """After the run: the Function twin's library as it was found."""
        for snapshot in self.libraries:
            restore_library(snapshot)

    def cluster_skips(self, client: Any) -> dict[str, str]:
        """On a cluster: an asyncio form runs on a single server only."""
        return {
            f.name: "an asyncio Python form runs on a single server (not a cluster) here"
            for f in self.profile.forms
            if f.is_async
        }

    # -- calls -------------------------------------------------------------------------------
    def _target(self, form: str) -> Target:
        p = self.profile
        if form in ("script", "function"):
            reg = self.state["scripts" if form == "script" else "functions"]
            return Target(self.name, p.keys, p.args, registry=reg)
        return Target(self.name, p.keys, p.args, python=self.python_forms[form])

    def _picks(self, worker: int, seed: int) -> dict[str, Any]:
        """How a worker picks cases and draws args (the same for every form)."""
        draw = self.draw
        drawn = tuple((d, False) for d in draw.args if not d.fixed) if draw is not None else ()
        return {
            "chooser": KeyChooser(self.contention, len(self.cases)),
            "rng": random.Random(seed * 1000 + worker),
            "draws": CallArgs(drawn),
            "renew": draw.renew if draw is not None else "never",
            "frontier": self.state.get("frontier") or [0] * len(self.cases),
            "copies": int(self.state.get("copies", 1)),
            "worker": worker,
        }

    def op_fn(self, client: redis.Redis, form: str, worker: int, seed: int) -> OpFn:
        run, caller = sync_runner(self._target(form), client)
        flag = Flag(self.wrote)
        calls = Calls(flag, client, form, self.cases, run=run, **self._picks(worker, seed))
        calls.caller = caller
        return calls

    def op_fn_async(self, client: Any, form: str, worker: int, seed: int) -> AsyncOpCalls:
        """The asyncio calls (``--tasks``): ``client`` is a ``redis.asyncio`` client or an
        auto-pipeline over one (see :func:`~luapipe.bench.scriptcalls.async_runner`)."""
        run = async_runner(self._target(form))
        flag = Flag(self.wrote)
        return AsyncOpCalls(flag, client, form, self.cases, run=run, **self._picks(worker, seed))

    # -- the invariant -----------------------------------------------------------------------
    def _invariants(self, client: Any, cases: Any) -> list[Any]:
        assert self.profile.invariant is not None
        fn = load_callable(self.profile.invariant, "invariant")
        found = [fn(client, flat(c.keys), flat(c.args)) for c in cases]
        what = f"invariant {self.profile.invariant}"
        hidden = [e for e in (awaitable_error(what, v) for v in found) if e is not None]
        if hidden:  # an async def behind a plain function: it never ran
            raise hidden[0]
        return found

    def check_invariant(self, client: redis.Redis, ops_done: int) -> tuple[bool, str]:
        """Every case, and every copy a renewal used, against its baseline (a bool must
        hold, a number must be unchanged); ``state["checked"]`` is ``(broken, checked)``."""
        frontier = self.state.get("frontier") or [0] * len(self.cases)
        reached = max((int(x) for x in frontier), default=0)
        self.state["need"] = max(int(self.state.get("need", 0)), 4 * reached + 16)
        if self.profile.invariant is None:
            self.state["checked"] = (0, 0)
            return True, "no invariant declared"
        where = [
            (i, rebase(case, copy_namespace(case.namespace, str(j))) if j else case)
            for i, case in enumerate(self.cases)
            for j in range(int(frontier[i]) + 1)
        ]
        bad = []
        for (i, case), now in zip(
            where, self._invariants(client, [c for _, c in where]), strict=True
        ):
            before = self.baseline.get(i)
            ok = bool(now) if isinstance(now, bool) or now is None else now == before
            if not ok:
                bad.append(
                    f"{case.namespace} {now!r}"
                    + ("" if isinstance(now, bool) else f", was {before!r}")
                )
        self.state["checked"] = (len(bad), len(where))
        if bad:
            return False, f"invariant broken in {len(bad)} of {len(where)} cases: {bad[0]}"
        return True, f"invariant held in {len(where)} cases ({ops_done} ops)"
