"""Run the generated forms on a Redis Cluster (``redis.cluster.RedisCluster``).

- naive / pipelined: every command goes to the primary that owns its key's slot; a
  pipelined step whose keys live on several nodes is one round trip per node, replies
  put back in the caller's order. A command answered MOVED/ASK/TRYAGAIN/CLUSTERDOWN did not
  run: the slot map is re-read and only those commands are re-sent.
- transaction: WATCH/MULTI/EXEC on the node that owns the (one) slot of the declared keys.
- script: through the registry, which already routes by slot and loads on demand.
- function: FCALL on the slot's node; the library is loaded there on demand (FUNCTION LOAD
  is replicated, so a promoted replica has it).

Keys of an atomic form in different slots raise :class:`~luapipe.errors.CrossSlotError`
before anything is sent (see :mod:`luapipe.operations.clustersafety` to know beforehand).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

from luapipe.errors import (
    CallArgumentError,
    ConnectionFailed,
    ServerError,
)
from luapipe.operations import clientforms, serverforms
from luapipe.operations.plan import Env, Plan, RunResult, bind, plan_of, to_wire
from luapipe.wire import _legacy as cluster
from luapipe.wire import sync as transport
from luapipe.wire.policy import DEFAULT
from luapipe.wire.replies import Redirect

__all__ = [
    "ATTEMPTS",
    "RoutedSession",
    "execute_routed",
    "group",
    "invariant_of",
    "plan_slot",
    "routed_session",
    "run_cluster",
    "run_op",
    "settle",
]

ATTEMPTS = DEFAULT.redirects


N = TypeVar("N")
T = TypeVar("T")


def _key_of(args: Sequence[Any]) -> Any:
    return args[1] if len(args) > 1 else None


# -- I/O-free routing rules, shared with the asyncio twin (operations.aio_clusterforms) ----


def group(
    client: Any,
    cmds: Sequence[Sequence[Any]],
    pending: Sequence[int],
    locate: Callable[[int | None], tuple[str, N]],
) -> dict[str, tuple[N, list[int]]]:
    """``{node name: (node, indexes)}``: the ``pending`` commands grouped by the node that
    ``locate`` says owns the slot of their key (one key each, at position 1)."""
    groups: dict[str, tuple[N, list[int]]] = {}
    for i in pending:
        key = _key_of(cmds[i])
        name, node = locate(None if key is None else int(client.keyslot(key)))
        groups.setdefault(name, (node, []))[1].append(i)
    return groups


def settle(
    idx: Sequence[int],
    out: Sequence[Any],
    replies: list[Any],
    asks: dict[int, str] | None = None,
) -> list[int]:
    """Put one node's replies in their places; the indexes answered with a redirect (they
    did not run: route them again). ``asks`` records, per index, the node an ``ASK`` named
    (send it there next, after ASKING) and forgets it for any other reply."""
    retry: list[int] = []
    for i, reply in zip(idx, out, strict=True):
        ask = None
        redirect = Redirect.of(reply)
        if redirect is not None:
            retry.append(i)
            ask = redirect.ask
        else:
            replies[i] = reply
        if asks is not None:
            if ask is None:
                asks.pop(i, None)
            else:
                asks[i] = ask
    return retry


def plan_slot(plan: Plan, client: Any, env: Env) -> int | None:
    """The one slot of a call's declared keys: :class:`CrossSlotError` before sending."""
    return cluster.slot_of(client, [x for k, _ in plan.keys for x in to_wire(env[k])])


class _Held:
    """One held session per node for the length of a routed session (like one connection
    held for a whole call on a single server)."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.sessions: dict[str, transport.Session] = {}

    def get(self, name: str, node: Any) -> transport.Session:
        s = self.sessions.get(name)
        if s is None or s.broken:
            s = self.sessions[name] = self.stack.enter_context(transport.session(node))
        return s


def execute_routed(
    client: Any,
    commands: Sequence[Sequence[Any]],
    *,
    parse: bool = False,
    held: _Held | None = None,
) -> tuple[list[Any], int]:
    """Send ``commands`` (one key each, at position 1) to the nodes that own their keys:
    one write per node; ``(replies in order, round trips)``. Error replies are
    :class:`~luapipe.wire.sync.ReplyError` values, as in :mod:`luapipe.wire.sync`."""
    cmds = [tuple(c) for c in commands]
    if not cluster.is_cluster(client):
        with transport.session(client) as one:
            return one.execute(cmds, parse=parse), one.round_trips
    if held is None:
        mine = _Held()
        with mine.stack:
            return execute_routed(client, cmds, parse=parse, held=mine)
    replies: list[Any] = [None] * len(cmds)
    pending = list(range(len(cmds)))
    trips = 0
    asks: dict[int, str] = {}  # command -> the node an ASK named (its slot is migrating)
    for attempt in range(ATTEMPTS):
        batches = _asked(client, asks, pending)  # first: it forgets ASKs to unknown nodes
        routed = [i for i in pending if i not in asks]
        batches += [
            (name, node, idx, False)
            for name, (node, idx) in group(
                client, cmds, routed, lambda slot: cluster.node_client(client, slot)
            ).items()
        ]
        retry: list[int] = []
        for name, node, idx, asking in batches:
            try:
                s = held.get(name, node)
                before = s.round_trips
                out = s.execute([cmds[i] for i in idx], parse=parse, asking=asking)
                trips += s.round_trips - before
            except ConnectionFailed:  # nothing was sent: route again
                retry.extend(idx)
                continue
            retry += settle(idx, out, replies, asks)
        if not retry:
            return replies, trips
        pending = sorted(retry)
        if any(i not in asks for i in pending):  # ASK goes on at once; the rest waits for
            cluster.refresh_later(client, attempt)  # the new slot map
    raise ServerError(f"no node would take {len(pending)} command(s) after {ATTEMPTS} attempts")


def _asked(
    client: Any, asks: dict[int, str], pending: Sequence[int]
) -> list[tuple[str, Any, list[int], bool]]:
    """The pending commands an ASK sent elsewhere, grouped per named node; an ASK naming a
    node the client cannot find is forgotten (the command is routed by the slot map)."""
    by_node: dict[str, tuple[Any, list[int]]] = {}
    for i in pending:
        if i not in asks:
            continue
        found = cluster.node_by_address(client, asks[i])
        if found is None:
            del asks[i]
            continue
        by_node.setdefault(found[0], (found[1], []))[1].append(i)
    return [(name, node, idx, True) for name, (node, idx) in by_node.items()]


class RoutedSession(transport.Session):
    """A :class:`~luapipe.wire.sync.Session` look-alike whose batches are routed per key;
    use it as a context manager (it holds a connection per node it has used)."""

    __slots__ = ("_cluster", "_held")

    def __init__(self, client: Any) -> None:  # no connection of its own
        self._cluster = client
        self._held = _Held()
        self.client = client
        self.conn = None
        self.address = "cluster"
        self.round_trips = 0
        self.broken = False

    def __enter__(self) -> RoutedSession:
        return self

    def __exit__(self, *exc: Any) -> None:
        self._held.stack.__exit__(*exc)

    def execute(
        self,
        commands: Sequence[transport.Command | Sequence[Any]],
        *,
        parse: bool = False,
        asking: bool = False,  # routed per command: each ASK is followed on its own
    ) -> list[Any]:
        raw = [c.args if isinstance(c, transport.Command) else tuple(c) for c in commands]
        if not raw:
            return []
        replies, trips = execute_routed(self._cluster, raw, parse=parse, held=self._held)
        self.round_trips += trips
        return replies

    def send_one(self, args: tuple[Any, ...]) -> Any:
        return self.execute([args])[0]


@contextlib.contextmanager
def routed_session(client: Any) -> Iterator[transport.Session]:
    """A routed session on a cluster client, the usual one-connection session otherwise."""
    if cluster.is_cluster(client):
        with RoutedSession(client) as routed:
            yield routed
    else:
        with transport.session(client) as s:
            yield s


def _on_slot_node(plan: Plan, client: Any, env: Env, run: Callable[[Any, bool], T]) -> T:
    """``run(node, asking)`` on the node owning the call's slot (see
    :func:`luapipe.wire.routing.on_slot_node`). A call that may have run
    (:class:`OutcomeUnknown`) is never sent again."""
    return cluster.on_slot_node(client, plan_slot(plan, client, env), run, what=repr(plan.name))


def run_cluster(plan: Plan, client: Any, form: str, env: Env, max_retries: int) -> RunResult:
    """Run one bound call of ``plan`` in ``form`` on the cluster ``client``."""
    if form == "script":
        return RunResult(serverforms.script(plan, client, env), form, 1)
    if form == "function":
        value = _on_slot_node(
            plan, client, env, lambda n, asking: serverforms.function(plan, n, env, asking=asking)
        )
        return RunResult(value, form, 1)
    if form == "transaction":

        def transaction(node: Any, asking: bool) -> RunResult:
            return clientforms.transaction(plan, node, env, max_retries, asking=asking)

        return _on_slot_node(plan, client, env, transaction)
    runner = {"naive": clientforms.naive, "pipelined": clientforms.pipelined}.get(form)
    if runner is None:
        raise CallArgumentError(
            f"unknown form {form!r} (naive, pipelined, transaction, script, function)"
        )
    with RoutedSession(client) as s:
        return RunResult(runner(plan, s, env), form, s.round_trips)


def run_op(
    op: Any,
    client: Any,
    form: str,
    keys: Mapping[str, Any],
    args: Mapping[str, Any],
    *,
    max_retries: int = 20,
) -> RunResult:
    """``op.run_detailed`` that also takes a cluster client (every form, routed by slot)."""
    if not cluster.is_cluster(client):
        done: RunResult = op.run_detailed(
            client, form, keys=keys, args=args, max_retries=max_retries
        )
        return done
    plan = plan_of(op)
    return run_cluster(plan, client, form, bind(plan, keys, args), max_retries)


def invariant_of(op: Any, client: Any, keys: Mapping[str, Any], args: Mapping[str, Any]) -> Any:
    """``op.check_invariant`` that also takes a cluster client (reads routed per key)."""
    if not cluster.is_cluster(client):
        return op.check_invariant(client, keys=keys, args=args)
    plan = plan_of(op)
    if plan.invariant is None:
        return None
    env = bind(plan, keys, args)
    with RoutedSession(client) as s:
        for level in range(plan.levels):
            clientforms.read_level(s, plan, level, env)
    for name, fn in plan.lets:
        env[name] = fn(env)
    return plan.invariant(env)
