"""The checked model of one read-compute-write operation: pure data and its analysis.

Built by :func:`luapipe.operations.spec.load_operation` (as the
:class:`~luapipe.operations.operation.Operation` facade, which adds the generated text and
running); everything that only reads the model (generation, case generation, cluster safety)
takes an :class:`OperationModel`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from luapipe.operations.benchprofile import BenchProfile, write_flag
from luapipe.operations.expr.check import Types
from luapipe.operations.expr.parse import (
    Binary,
    Call,
    Index,
    Lambda,
    ListLit,
    Name,
    Node,
    Type,
    Unary,
)

__all__ = [
    "FORMS",
    "ArgSpec",
    "Expr",
    "Invariant",
    "KeySpec",
    "Let",
    "OperationModel",
    "Read",
    "Write",
]

FORMS = ("naive", "pipelined", "transaction", "script", "function")


def free_names(node: Node, bound: frozenset[str] = frozenset()) -> frozenset[str]:
    if isinstance(node, Name):
        return frozenset() if node.name in bound else frozenset({node.name})
    if isinstance(node, Lambda):
        return free_names(node.body, bound | {node.param})
    kids: tuple[Node, ...] = ()
    if isinstance(node, Unary):
        kids = (node.operand,)
    elif isinstance(node, Binary):
        kids = (node.left, node.right)
    elif isinstance(node, Call):
        kids = node.args
    elif isinstance(node, Index):
        kids = (node.target, node.index)
    elif isinstance(node, ListLit):
        kids = node.items
    out: frozenset[str] = frozenset()
    for k in kids:
        out |= free_names(k, bound)
    return out


@dataclass(frozen=True)
class Expr:
    """A parsed, type-checked expression and where it came from."""

    text: str
    node: Node = field(repr=False)
    type: Type
    types: Types = field(repr=False, compare=False, hash=False)

    @property
    def names(self) -> frozenset[str]:
        return free_names(self.node)


@dataclass(frozen=True)
class KeySpec:
    name: str
    doc: str = ""
    variadic: bool = False


@dataclass(frozen=True)
class ArgSpec:
    name: str
    type: Type
    doc: str = ""
    min: Any = None
    max: Any = None
    samples: tuple[Any, ...] = ()
    key_prefix: bool = False


@dataclass(frozen=True)
class Read:
    name: str
    cmd: str
    key: Expr
    args: tuple[Expr, ...]
    conv: str | None
    default: Expr | None
    each: Expr | None
    type: Type
    level: int
    dynamic: bool
    reply: str


@dataclass(frozen=True)
class Let:
    name: str
    expr: Expr


@dataclass(frozen=True)
class Write:
    """One write command. A named write's reply is bound to ``name`` (of ``type``: the
    command's ``reply`` kind, converted by ``conv``, optional under ``when``, a list under
    ``each``), for the returns only: every form knows it only after its writes."""

    cmd: str
    key: Expr
    args: tuple[Expr, ...]
    when: Expr | None
    each: Expr | None
    dynamic: bool
    name: str | None = None
    reply: str | None = None  # int, bool, float, str? (see commands.WRITE_REPLIES)
    conv: str | None = None  # "int" or "float": a str? reply converted
    type: Type | None = None


@dataclass(frozen=True)
class Invariant:
    """``check`` is a bool that must hold, or a number that must be conserved."""

    description: str
    check: Expr

    @property
    def conserved(self) -> bool:
        return self.check.type.kind != "bool"


@dataclass(frozen=True)
class OperationModel:
    """One operation spec, checked: what it reads, computes and writes."""

    name: str
    description: str
    path: str
    keys: tuple[KeySpec, ...]
    args: tuple[ArgSpec, ...]
    reads: tuple[Read, ...]
    lets: tuple[Let, ...]
    writes: tuple[Write, ...]
    returns: tuple[Expr, ...]
    returns_tuple: bool
    invariant: Invariant | None = None
    #: the spec's ``[bench]`` table: how the benchmark draws state and arguments
    bench: BenchProfile | None = None

    # -- analysis -----------------------------------------------------------------------
    @property
    def forms(self) -> tuple[str, ...]:
        return FORMS

    @property
    def wrote(self) -> str | None:
        """How a reply tells that the call wrote (see :func:`~luapipe.operations.
        benchprofile.write_flag`): declared in ``[bench]`` or inferred."""
        if self.bench is not None and self.bench.wrote is not None:
            return self.bench.wrote
        return write_flag(self.writes, self.returns, self.returns_tuple)

    @property
    def write_names(self) -> frozenset[str]:
        """The names bound to write replies."""
        return frozenset(w.name for w in self.writes if w.name is not None)

    @property
    def late_returns(self) -> bool:
        """The reply uses a write's reply, so every form computes it after the writes (an
        error in it then comes after the writes ran; otherwise it comes before any)."""
        names = self.write_names
        return any(r.names & names for r in self.returns)

    @property
    def read_only(self) -> bool:
        """No writes: the function form uses FCALL_RO, the script EVALSHA_RO (no-writes)."""
        return not self.writes

    @property
    def dynamic_keys(self) -> bool:
        """Some key is computed (from args or reads): the script and function forms are
        then only safe on a single node or when every key shares one hash tag."""
        return any(r.dynamic for r in self.reads) or any(w.dynamic for w in self.writes)

    @property
    def read_levels(self) -> int:
        """Read rounds: 0 without reads, 1 when no read depends on another, and so on."""
        return max((r.level + 1 for r in self.reads), default=0)

    def round_trips(self, form: str) -> int | None:
        """Round trips per call in steady state (None for ``naive``: one per command).

        ``pipelined`` saves its write round trip when every write's ``when`` is false."""
        if form in ("script", "function"):
            return 1
        if form == "pipelined":
            return max(1, self.read_levels + (1 if self.writes else 0))
        if form == "transaction":
            if self.read_levels == 0 or (self.read_levels == 1 and not self.writes):
                return 1
            return self.read_levels + 1
        if form == "naive":
            return None
        raise ValueError(f"unknown form {form!r}; forms: {', '.join(FORMS)}")
