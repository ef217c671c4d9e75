"""The forms at stake at a point, and the stated policy that picks among equivalent forms.

At stake:

- an operation whose writes depend on its reads (``read_compute_write``): its atomic forms
  (transaction, script, function). The non-atomic ones race when calls meet on a key: what
  they would gain, and what they lost, is stated beside, never recommended;
- otherwise (``blind_writes``, ``read_only``): pipelined, script and function, and every
  form with the fewest round trips per op that ran, atomic or not (update_token: pipelined,
  transaction, script and function, all one round trip). Atomicity is then a stated reason
  of the policy, not a condition.

The policy, among forms the data calls equivalent (:data:`POLICY`): atomic over non-atomic,
then fewer moving parts (:data:`TRAITS`: a function is one call, replicated and persisted; a
transaction needs nothing deployed but sends MULTI/EXEC around the commands and retries under
WATCH; a script needs each node's cache, lost on restart or failover), then the lower server
CPU. A form of a team's own (any other name) is ranked after these by its record's
``atomic`` flag; give it traits with :func:`register_form`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ATOMIC",
    "AUTO",
    "KINDS",
    "POLICY",
    "TRAITS",
    "FormTraits",
    "at_stake",
    "is_atomic",
    "kind_of",
    "policy_key",
    "policy_reason",
    "register_form",
    "traits_of",
]

Row = dict[str, Any]


@dataclass(frozen=True)
class FormTraits:
    """What the policy knows of a form beyond the measurements."""

    atomic: bool
    rank: int  # among equivalent forms of the same atomicity: lower is preferred
    merit: str  # why the policy prefers it to a higher-ranked form, in words
    cost: str  # what weighs against it, in words (said of a form the policy passed over)


TRAITS: dict[str, FormTraits] = {
    "function": FormTraits(
        True, 0, "one call that survives a failover, replicated and persisted", "a library"
    ),
    "transaction": FormTraits(
        True,
        1,
        "nothing deployed, nothing lost in a failover",
        "MULTI/EXEC around the commands, WATCH retries when it reads",
    ),
    "script": FormTraits(True, 2, "one call", "a per-node cache, lost on restart or failover"),
    "pipelined": FormTraits(False, 0, "plain commands, nothing deployed", "not atomic"),
    "naive": FormTraits(False, 1, "plain commands", "one round trip per command"),
}
#: an auto-pipelined form (``bench --tasks``: calls of many tasks share writes) has its
#: form's traits; a transaction holds its connection and has no such variant
AUTO = "auto "
TRAITS.update({AUTO + f: t for f, t in list(TRAITS.items()) if f != "transaction"})
ATOMIC = frozenset(f for f, t in TRAITS.items() if t.atomic)
#: the policy among equivalent forms, stated once per report
POLICY = (
    "among equivalent forms a stated policy picks: atomic over non-atomic, then fewer moving "
    "parts (function: one call that survives a failover; transaction: nothing deployed, but "
    "MULTI/EXEC and WATCH retries; script: a per-node cache lost on failover), then the lower "
    "server CPU"
)

#: kind -> the forms always at stake when they ran
KINDS: dict[str, tuple[str, ...]] = {  # the auto-pipelined variants run only with --tasks
    "read_compute_write": ("transaction", "script", "function", "auto script", "auto function"),
    "blind_writes": ("pipelined", "script", "function", "auto pipelined", "auto script",
                     "auto function"),
    "read_only": ("pipelined", "script", "function", "auto pipelined", "auto script",
                  "auto function"),
}  # fmt: skip
_FEWEST_SLACK = 0.25  # round trips per op within this of the fewest count as the fewest


def register_form(name: str, traits: FormTraits) -> None:
    """Give a form of a team's own its place in the policy (and its words)."""
    TRAITS[name] = traits


def traits_of(r: Row) -> FormTraits:
    """The form's traits; an unknown form is atomic as its record says, ranked last."""
    known = TRAITS.get(str(r["form"]))
    if known is not None:
        return known
    return FormTraits(bool(r.get("atomic")), 9, "", "")


def is_atomic(r: Row) -> bool:
    return traits_of(r).atomic


def policy_key(r: Row) -> tuple[int, int, float]:
    """Sort key of the policy: the first is picked."""
    t = traits_of(r)
    return (0 if t.atomic else 1, t.rank, float(r.get("server_usec_per_op") or 0.0))


def policy_reason(chosen: Row, others: Sequence[Row]) -> str:
    """Why the policy picked ``chosen`` over ``others``, each by the first rule that
    separates them: "function by policy: atomic (pipelined is not); one call, ..."."""
    mine = traits_of(chosen)
    non_atomic = [str(o["form"]) for o in others if not traits_of(o).atomic]
    ranked = [o for o in others if traits_of(o).atomic == mine.atomic]
    later = [o for o in ranked if traits_of(o).rank > mine.rank]
    same = [o for o in ranked if traits_of(o).rank == mine.rank]
    parts = []
    if mine.atomic and non_atomic:
        parts.append(f"atomic ({_and(non_atomic)} {'is' if len(non_atomic) == 1 else 'are'} not)")
    if later:
        costs = "; ".join(f"{o['form']}: {traits_of(o).cost}" for o in later)
        parts.append(f"{mine.merit or 'fewer moving parts'} ({costs})")
    if same:
        cpu = float(chosen.get("server_usec_per_op") or 0.0)
        parts.append(f"lower server CPU ({cpu:.1f} us/op)")
    why = "; ".join(parts) or "the only candidate"
    return f"{chosen['form']} by policy: {why}"


def _and(names: Sequence[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def kind_of(rows: Sequence[Row]) -> str:
    """read_compute_write, blind_writes or read_only (from the records' flags)."""
    if any(r.get("read_compute_write") for r in rows):
        return "read_compute_write"
    declared = [r.get("write_share_declared") for r in rows]
    if declared and all(d is not None and float(d) == 0.0 for d in declared):
        return "read_only"
    return "blind_writes"


def at_stake(kind: str, rows: Sequence[Row]) -> tuple[str, tuple[str, ...]]:
    """``(kind, forms at stake)`` among the forms of ``rows``, in the order they ran (see the
    module's docstring); ``("other", every form)`` when fewer than two would be at stake."""
    forms = list(dict.fromkeys(str(r["form"]) for r in rows))
    if kind == "read_compute_write":  # even one, even none: a racing form is never the answer
        atomic = {str(r["form"]) for r in rows if is_atomic(r)}
        return kind, tuple(f for f in forms if f in atomic)
    # an auto-pipelined form's round trips per op are shared writes, not the operation's
    trips = {str(r["form"]): r.get("round_trips_per_op") for r in rows}
    trips = {f: t for f, t in trips.items() if not f.startswith(AUTO)}
    known = [float(t) for t in trips.values() if t is not None]
    fewest = min(known) if known else None
    wanted = set(KINDS.get(kind, ())) | {
        f
        for f, t in trips.items()
        if fewest is not None and t is not None and float(t) <= fewest + _FEWEST_SLACK
    }
    stake = tuple(f for f in forms if f in wanted)
    if len(stake) >= 2:
        return kind, stake
    return "other", tuple(forms)
