"""Which forms of an operation can run on a Redis Cluster, and why not.

A cluster refuses a script, a function or a MULTI/EXEC whose keys hash to different slots
(``CROSSSLOT``), so the atomic forms need every key of a call in one slot: the declared keys,
and the keys computed at run time (``prefix .. it``) too. A computed key is provably in the
declared keys' slot only when the value it starts with (a key-prefix argument or a literal)
holds a complete hash tag of that slot. The naive and pipelined forms send each command on
its own, so they run with keys anywhere (a pipelined step is one round trip per node).

::

    cluster_safety(op)                                  # static: from the spec alone
    cluster_safety(op, keys={"src": "a", "dst": "b"})   # for these keys and args
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.crc import key_slot

from luapipe.operations.expr.parse import Binary, Literal, Name, Node
from luapipe.operations.model import Expr, OperationModel
from luapipe.wire.clients import is_cluster

__all__ = [
    "ATOMIC_FORMS",
    "Safety",
    "cluster_safety",
    "hash_tag",
    "safety_for",
    "skipped_forms",
    "slot",
]

ATOMIC_FORMS = ("transaction", "script", "function")
HINT = "give every key one hash tag, e.g. {order:42}:stock and {order:42}:log"


@dataclass(frozen=True)
class Safety:
    """Whether one form can run on a cluster; ``reason`` says why (or why not)."""

    ok: bool
    reason: str


def hash_tag(key: str) -> str | None:
    """The hash tag of ``key`` (the text inside its first ``{...}``), None without one."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1 : end] if end > start + 1 else None


def slot(key: str | bytes) -> int:
    """The cluster slot of ``key`` (CRC16 of its hash tag, or of the whole key)."""
    return int(key_slot(key.encode() if isinstance(key, str) else key))


def _flat(keys: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    for v in keys.values():
        out.extend(str(x) for x in v) if isinstance(v, list | tuple) else out.append(str(v))
    return out


def _leftmost(node: Node) -> Node:
    while isinstance(node, Binary) and node.op == "..":
        node = node.left
    return node


def _dynamic_exprs(op: OperationModel) -> list[Expr]:
    steps: Sequence[Any] = (*op.reads, *op.writes)
    return [s.key for s in steps if s.dynamic]


def _prefix_value(node: Node, args: Mapping[str, Any], keys: Mapping[str, Any]) -> str | None:
    """The known text a computed key starts with, or None."""
    head = _leftmost(node)
    if isinstance(head, Literal) and isinstance(head.value, str):
        return head.value
    if isinstance(head, Name):
        value = args.get(head.name, keys.get(head.name))
        return value if isinstance(value, str) else None
    return None


def _dynamic_verdict(
    op: OperationModel, keys: Mapping[str, Any], args: Mapping[str, Any], slots: set[int]
) -> Safety:
    for expr in _dynamic_exprs(op):
        prefix = _prefix_value(expr.node, args, keys)
        tag = hash_tag(prefix) if prefix is not None else None
        if tag is None or (slots and slot(tag) not in slots):
            if prefix is None:
                where = "its start is not known before it runs"
            elif tag is None:
                where = f"{prefix!r} has no hash tag"
            else:
                where = f"hash tag {{{tag}}} is in another slot"
            return Safety(
                False,
                f"key '{expr.text}' is computed at run time and may hash to another slot "
                f"({where}); {HINT}",
            )
        slots = slots or {slot(tag)}
    return Safety(True, f"every key, computed ones too, is in slot {min(slots)}")


def cluster_safety(
    op: OperationModel, keys: Mapping[str, Any] | None = None, args: Mapping[str, Any] | None = None
) -> dict[str, Safety]:
    """``{form: Safety}`` for running ``op`` on a cluster, for these ``keys``/``args`` (or,
    without ``keys``, from the spec alone: computed keys then make the atomic forms unsafe)."""
    out = {"naive": Safety(True, "each command goes to the node that owns its key")}
    if keys is None:
        out["pipelined"] = Safety(True, "commands are grouped per node: a round trip per node")
        if op.dynamic_keys:
            exprs = ", ".join(sorted({e.text for e in _dynamic_exprs(op)}))
            atomic = Safety(
                False,
                f"keys computed at run time ({exprs}) may hash to other slots: unsafe on a "
                "cluster unless every key shares one hash tag",
            )
        else:
            atomic = Safety(True, f"safe when the declared keys share one hash tag ({HINT})")
        return out | {f: atomic for f in ATOMIC_FORMS if f in op.forms}
    names = _flat(keys)
    by_slot: dict[int, list[str]] = {}
    for k in names:
        by_slot.setdefault(slot(k), []).append(k)
    spread = len(by_slot) > 1
    out["pipelined"] = Safety(
        True,
        f"keys in {len(by_slot)} slots: one round trip per node per step"
        if spread
        else "keys in one slot: one node",
    )
    if spread:
        shown = "; ".join(f"slot {s}: {', '.join(ks)}" for s, ks in sorted(by_slot.items()))
        atomic = Safety(
            False, f"CROSSSLOT: the declared keys are in {len(by_slot)} slots ({shown}); {HINT}"
        )
    elif op.dynamic_keys:
        atomic = _dynamic_verdict(op, keys, args or {}, set(by_slot))
    else:
        atomic = Safety(True, f"every key is in slot {min(by_slot)}" if by_slot else "no keys")
    return out | {f: atomic for f in ATOMIC_FORMS if f in op.forms}


def safety_for(
    op: OperationModel,
    client: Any,
    keys: Mapping[str, Any] | None = None,
    args: Mapping[str, Any] | None = None,
) -> dict[str, Safety]:
    """:func:`cluster_safety` for a cluster client; every form is safe on one node."""
    if not is_cluster(client):
        return {f: Safety(True, "single node") for f in op.forms}
    return cluster_safety(op, keys, args)


def skipped_forms(verdicts: Sequence[Mapping[str, Safety]]) -> dict[str, str]:
    """``{form: reason}`` for every form unsafe in any of ``verdicts`` (first reason kept)."""
    out: dict[str, str] = {}
    for v in verdicts:
        for form, s in v.items():
            if not s.ok and form not in out:
                out[form] = s.reason
    return out
