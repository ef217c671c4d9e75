"""The error replies every engine gives to script and function calls, provoked for real.

:data:`CASES` names each situation, the verb luapipe sent, and how
:func:`luapipe.wire.refusals.refused` must read the reply: ``"refused"`` (the script or
function did not run) or ``"script"`` (its own error). :func:`capture` provokes each one on
the engine that ``LUAPIPE_REDIS_SERVER`` names (servers of its own, and a cluster), and
:func:`capture_fake` on fakeredis. ``engine_replies.json`` beside this file records the
texts per engine; tests/wire/test_refusals.py reads them all through the classification,
and on each engine of the matrix checks that the recording is still what the server says.

Record (or refresh) an engine's texts::

    LUAPIPE_REDIS_SERVER=.../redis-server LUAPIPE_REDIS_CLI=.../redis-cli \\
        .venv/bin/python -m tests.wire.engine_replies          # --fake for fakeredis
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import fakeredis
import redis

from luapipe.bench.cluster import EmbeddedCluster
from luapipe.bench.server import EmbeddedRedis, free_port

from ..engine_matrix import engine_of
from ..helpers import SPIN

RECORDING = Path(__file__).with_name("engine_replies.json")


@dataclass(frozen=True)
class Case:
    verb: str  # what luapipe sent
    expected: str  # "refused" or "script"
    about: str


R, S = "refused", "script"
CASES: dict[str, Case] = {
    c: Case(v, e, a)
    for c, (v, e, a) in {
        # -- refusals by code --------------------------------------------------------------
        "noscript": ("EVALSHA", R, "EVALSHA of a script not in the cache"),
        "noscript_ro": ("EVALSHA_RO", R, "EVALSHA_RO of a script not in the cache"),
        "busy": ("EVALSHA", R, "another script holds the server"),
        "busy_fcall": ("FCALL", R, "another script holds the server"),
        "oom": ("EVAL", R, "a #!lua script that may write, above maxmemory"),
        "readonly": ("EVAL", R, "a #!lua script that may write, on a replica"),
        "noperm_command": ("EVALSHA", R, "an ACL user without +evalsha"),
        "noperm_key": ("EVAL", R, "an ACL user without access to the key"),
        "crossslot": ("EVAL", R, "keys in two cluster slots"),
        "moved": ("EVAL", R, "a key of a slot another node owns"),
        "ask": ("EVAL", R, "a key the migrating slot's node no longer has"),
        "tryagain": ("EVAL", R, "keys split by a slot migration"),
        "clusterdown": ("EVAL", R, "a slot no node serves"),
        "loading": ("EVAL", R, "the server is loading its data set"),
        "masterdown": ("EVAL", R, "a replica without its primary, serve-stale-data no"),
        "misconf": ("EVAL", R, "a #!lua script that may write after a failed RDB save"),
        "noreplicas": ("EVAL", R, "a #!lua script that may write, min-replicas-to-write 1"),
        # -- refusals with a plain ERR -----------------------------------------------------
        "function_not_found": ("FCALL", R, "FCALL of a function no library registers"),
        "numkeys": ("EVALSHA", R, "more keys than arguments"),
        "numkeys_negative": ("EVAL", R, "a negative number of keys"),
        "numkeys_fcall": ("FCALL", R, "more keys than arguments"),
        "ro_write_flag": ("EVAL_RO", R, "EVAL_RO of a #!lua script without no-writes"),
        "ro_write_flag_fcall": ("FCALL_RO", R, "FCALL_RO of a function without no-writes"),
        "unknown_evalsha_ro": ("EVALSHA_RO", R, "a server without EVALSHA_RO"),
        "unknown_eval_ro": ("EVAL_RO", R, "a server without EVAL_RO"),
        "unknown_fcall": ("FCALL", R, "a server without FCALL"),
        "protocol_error": ("EVAL", R, "an argument over proto-max-bulk-len"),
        "max_clients": ("EVALSHA", R, "a connection over maxclients"),
        # -- the script's (or function's) own error ----------------------------------------
        "error": ("EVAL", S, "error('boom')"),
        "runtime": ("EVAL", S, "indexing a nil"),
        "unknown_command_in_script": ("EVAL", S, "redis.call('FOO')"),
        "call_without_arguments": ("EVAL", S, "redis.call()"),
        "wrongtype": ("EVAL", S, "INCR of a string"),
        "nil_argument": ("EVAL", S, "redis.call('GET', nil)"),
        "not_allowed_in_script": ("EVAL", S, "redis.call('EVAL', ...)"),
        "compile": ("EVAL", S, "a syntax error"),
        "own_error_reply": ("EVAL", S, "return redis.error_reply('MYCODE my message')"),
        "own_noscript_reply": ("EVAL", S, "return redis.error_reply('NOSCRIPT not really')"),
        "oom_in_script": ("EVAL", S, "a write above maxmemory in a script without flags"),
        "readonly_in_script": ("EVAL", S, "a write on a replica in a script without flags"),
        "noperm_in_script": ("EVAL", S, "redis.call of a command the ACL user may not run"),
        "write_in_ro_script": ("EVAL_RO", S, "a write in EVAL_RO of a script without flags"),
        "write_in_no_writes": ("EVAL", S, "a write in a #!lua flags=no-writes script"),
        "misconf_in_script": ("EVAL", S, "a write after a failed RDB save, without flags"),
        "function_error": ("FCALL", S, "a function's error('fboom')"),
        "function_unknown_command": ("FCALL", S, "redis.call('FOO') in a function"),
    }.items()
}

LIBRARY = """#!lua name=caplib
redis.register_function('boom', function(keys, args)
  return error('fboom')
end)
redis.register_function('foo', function(keys, args)
  return redis.call('FOO')
end)
redis.register_function('w', function(keys, args) return 1 end)
"""
WRITE = "#!lua\nreturn redis.call('SET', KEYS[1], 'v')\n"  # flags: may write
WRITE_PLAIN = "return redis.call('SET', KEYS[1], 'v')\n"  # no flags: checked at the write
SHA = "0" * 40


def text_of(fn: Callable[[], Any]) -> str | None:
    """The error reply ``fn`` got, code included (redis-py strips some codes), or None."""
    try:
        fn()
    except redis.ResponseError as exc:
        text = str(exc).splitlines()[0] if str(exc) else ""
        code = getattr(exc, "status_code", None)
        return text if not code or text.startswith(f"{code} ") else f"{code} {text}"
    except redis.RedisError as exc:  # BusyLoadingError, AuthenticationError: still replies
        return _reply_line(exc)
    return None


def _reply_line(exc: BaseException) -> str:
    text = str(exc).splitlines()[0]
    if isinstance(exc, redis.exceptions.BusyLoadingError) and not text.startswith("LOADING"):
        return f"LOADING {text}"
    return text


def normalized(text: str) -> str:
    """A reply without what changes from run to run: the ports (MOVED, ASK) read 7000."""
    return re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:7000", text)


def _raw(port: int, payload: bytes) -> str:
    """The first reply line to ``payload`` sent on a fresh connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        if payload:
            s.sendall(payload)
        data = b""
        while not data.endswith(b"\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    return data.decode(errors="replace").strip().lstrip("-")


@contextlib.contextmanager
def _servers() -> Iterator[dict[str, Any]]:
    """The servers the cases need, each stopped by its PID afterwards."""
    started: list[EmbeddedRedis] = []

    def start(*args: str) -> redis.Redis:
        server = EmbeddedRedis(list(args))
        started.append(server)
        info = server.start()
        return redis.Redis(port=info.port, protocol=2)

    try:
        yield {
            "main": start("--enable-debug-command", "yes"),
            "renamed": start(
                *("--rename-command", "EVALSHA_RO", ""),
                *("--rename-command", "EVAL_RO", ""),
                *("--rename-command", "FCALL", ""),
                *("--enable-protected-configs", "yes"),  # CONFIG SET dir, for MISCONF
            ),
            "replica": start("--replicaof", "127.0.0.1", str(free_port())),
            "unserved": start("--cluster-enabled", "yes", "--cluster-config-file", "n.conf"),
        }
    finally:
        for server in started:
            server.stop()


def _while_busy(main: redis.Redis, probes: list[Callable[[], Any]]) -> list[str | None]:
    """The replies to ``probes`` while a read-only script holds the server (then killed)."""
    main.config_set("busy-reply-threshold", 50)
    holder = redis.Redis(connection_pool=main.connection_pool)
    ended: list[BaseException | None] = []

    def hold() -> None:
        try:
            holder.eval(SPIN, 0, 3000)
            ended.append(None)
        except redis.RedisError as exc:  # killed, as planned
            ended.append(exc)

    thread = threading.Thread(target=hold)
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while (text_of(main.ping) or "").split(" ", 1)[0] != "BUSY":
            assert not ended, f"the script ended before the server was seen busy: {ended}"
            assert time.monotonic() < deadline, "the server never got busy"
            time.sleep(0.01)
        return [text_of(p) for p in probes]
    finally:
        with contextlib.suppress(redis.RedisError):
            main.script_kill()
        thread.join()
        main.config_set("busy-reply-threshold", 5000)


def _loading() -> str | None:
    """A server loading its RDB at start answers LOADING (DEBUG RELOAD would block
    everyone instead): 5000 keys, 200 us each, so the loading lasts about a second."""
    d = tempfile.mkdtemp(prefix="luapipe-loading-")
    try:
        debug = ["--enable-debug-command", "yes"]
        with EmbeddedRedis(debug, directory=d) as first, redis.Redis(port=first.port) as c:
            c.execute_command("DEBUG", "POPULATE", 5000)
            c.save()
        port = free_port()
        slow = ("--key-load-delay", "200", "--loading-process-events-interval-bytes", "1024")
        server = EmbeddedRedis(slow, port=port, directory=d)
        starting = threading.Thread(target=server.start)  # returns once it has loaded
        starting.start()
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    text = _raw(port, b"*3\r\n$4\r\nEVAL\r\n$8\r\nreturn 1\r\n$1\r\n0\r\n")
                    if text.startswith("LOADING"):
                        return text
                time.sleep(0.005)
            return None
        finally:
            starting.join()
            server.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _misconf(server: redis.Redis) -> tuple[str | None, str | None]:
    gone = tempfile.mkdtemp(prefix="luapipe-misconf-")
    old_dir = server.config_get("dir")["dir"]
    server.config_set("dir", gone)
    shutil.rmtree(gone)  # the RDB child cannot create its file
    server.config_set("save", "3600 1")
    server.bgsave()
    deadline = time.monotonic() + 10
    while server.info("persistence")["rdb_last_bgsave_status"] != "err":
        assert time.monotonic() < deadline, "the RDB save did not fail"
        time.sleep(0.02)
    try:
        return (
            text_of(lambda: server.eval(WRITE, 1, "k")),
            text_of(lambda: server.eval(WRITE_PLAIN, 1, "k")),
        )
    finally:
        server.config_set("dir", old_dir)
        server.config_set("save", "")


def _cluster_cases(cluster: EmbeddedCluster) -> dict[str, str | None]:
    rc = cluster.client()
    try:
        nodes = {n.name: rc.get_redis_connection(n) for n in rc.get_primaries()}
        tag = "{luapipe-capture}"
        slot = rc.keyslot(tag)
        owner = rc.nodes_manager.get_node_from_slot(slot)
        a = nodes[owner.name]
        b_name = next(n for n in nodes if n != owner.name)
        b = nodes[b_name]
        out = {
            "crossslot": text_of(lambda: a.eval("return 1", 2, "a", "b")),
            "moved": text_of(lambda: b.eval("return 1", 1, f"{tag}:x")),
        }
        a_id, b_id = a.execute_command("CLUSTER", "MYID"), b.execute_command("CLUSTER", "MYID")
        a.set(f"{tag}:here", 1)
        b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", a_id)
        a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", b_id)
        try:
            out["ask"] = text_of(lambda: a.eval("return 1", 1, f"{tag}:gone"))
            out["tryagain"] = text_of(lambda: a.eval("return 1", 2, f"{tag}:here", f"{tag}:gone"))
        finally:
            a.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
            b.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
            a.delete(f"{tag}:here")
        return out
    finally:
        rc.close()


def capture(cluster: EmbeddedCluster | None = None) -> dict[str, str | None]:
    """Every case's reply text on the engine the launcher starts."""
    with contextlib.ExitStack() as stack:
        if cluster is None:
            cluster = stack.enter_context(EmbeddedCluster(primaries=3, replicas=0))
        s = stack.enter_context(_servers())
        main, renamed, replica = s["main"], s["renamed"], s["replica"]
        out: dict[str, str | None] = {"engine": engine_of(main).name}
        main.function_load(LIBRARY)
        port = main.connection_pool.connection_kwargs["port"]

        def ev(*args: Any, client: redis.Redis = main, verb: str = "EVAL") -> Callable[[], Any]:
            return lambda: client.execute_command(verb, *args)

        out["noscript"] = text_of(ev(SHA, 0, verb="EVALSHA"))
        out["noscript_ro"] = text_of(ev(SHA, 0, verb="EVALSHA_RO"))
        out["busy"], out["busy_fcall"] = _while_busy(
            main, [ev(SHA, 0, verb="EVALSHA"), ev("w", 0, verb="FCALL")]
        )
        main.config_set("maxmemory-policy", "noeviction")
        main.config_set("maxmemory", 1)
        try:
            out["oom"] = text_of(ev(WRITE, 1, "k"))
            out["oom_in_script"] = text_of(ev(WRITE_PLAIN, 1, "k"))
        finally:
            main.config_set("maxmemory", 0)
        out["readonly"] = text_of(ev(WRITE, 1, "k", client=replica))
        out["readonly_in_script"] = text_of(ev(WRITE_PLAIN, 1, "k", client=replica))
        replica.config_set("replica-serve-stale-data", "no")
        out["masterdown"] = text_of(ev("return 1", 0, client=replica))
        main.execute_command("ACL", "SETUSER", "noeval", "on", ">pw", "~*", "+@all", "-evalsha")
        main.execute_command("ACL", "SETUSER", "onlya", "on", ">pw", "~a*", "+@all")
        main.execute_command("ACL", "SETUSER", "noincr", "on", ">pw", "~*", "+@all", "-incr")
        for user, case, words in (
            ("noeval", "noperm_command", ("EVALSHA", SHA, 0)),
            ("onlya", "noperm_key", ("EVAL", "return 1", 1, "b")),
            ("noincr", "noperm_in_script", ("EVAL", "return redis.call('INCR', KEYS[1])", 1, "n")),
        ):
            limited = redis.Redis(port=port, username=user, password="pw", protocol=2)
            try:
                out[case] = text_of(lambda c=limited, w=words: c.execute_command(*w))
            finally:
                limited.close()
        out.update(_cluster_cases(cluster))
        out["clusterdown"] = text_of(ev("return 1", 1, "k", client=s["unserved"]))
        out["loading"] = _loading()
        out["misconf"], out["misconf_in_script"] = _misconf(renamed)
        main.config_set("min-replicas-to-write", 1)
        try:
            out["noreplicas"] = text_of(ev(WRITE, 1, "k"))
        finally:
            main.config_set("min-replicas-to-write", 0)
        out["function_not_found"] = text_of(ev("nosuch", 0, verb="FCALL"))
        out["numkeys"] = text_of(ev(SHA, 5, "k", verb="EVALSHA"))
        out["numkeys_negative"] = text_of(ev("return 1", -1))
        out["numkeys_fcall"] = text_of(ev("w", 5, "k", verb="FCALL"))
        out["ro_write_flag"] = text_of(ev("#!lua\nreturn 1", 0, verb="EVAL_RO"))
        out["ro_write_flag_fcall"] = text_of(ev("w", 0, verb="FCALL_RO"))
        out["unknown_evalsha_ro"] = text_of(ev(SHA, 1, "k", client=renamed, verb="EVALSHA_RO"))
        out["unknown_eval_ro"] = text_of(ev("return 1", 0, client=renamed, verb="EVAL_RO"))
        out["unknown_fcall"] = text_of(ev("w", 0, client=renamed, verb="FCALL"))
        renamed_port = renamed.connection_pool.connection_kwargs["port"]
        renamed.config_set("proto-max-bulk-len", 1024 * 1024)
        out["protocol_error"] = _raw(renamed_port, b"*3\r\n$4\r\nEVAL\r\n$2000000\r\n")
        renamed.config_set("maxclients", 1)
        try:
            out["max_clients"] = _raw(renamed_port, b"")
        finally:
            renamed.config_set("maxclients", 10000)
        out.update(_script_errors(main))
        out["write_in_ro_script"] = text_of(ev(WRITE_PLAIN, 1, "k", verb="EVAL_RO"))
        out["write_in_no_writes"] = text_of(
            ev("#!lua flags=no-writes\nreturn redis.call('SET', KEYS[1], 'v')\n", 1, "k")
        )
        out["function_error"] = text_of(ev("boom", 0, verb="FCALL"))
        out["function_unknown_command"] = text_of(ev("foo", 0, verb="FCALL"))
        return out


#: the script's own errors every engine (fakeredis too) can give through a plain EVAL
SCRIPT_ERRORS = {
    "error": "local x = 1\nreturn error('boom')\n",
    "runtime": "local x = nil\nreturn x.y\n",
    "unknown_command_in_script": "local x = 1\nreturn redis.call('FOO')\n",
    "call_without_arguments": "local x = 1\nreturn redis.call()\n",
    "wrongtype": "redis.call('SET', 'wt', 'x')\nreturn redis.call('INCR', 'wt')\n",
    "nil_argument": "local x = 1\nreturn redis.call('GET', nil)\n",
    "not_allowed_in_script": "local x = 1\nreturn redis.call('EVAL', 'return 1', 0)\n",
    "compile": "local x = 1\nreturn x +\n",
    "own_error_reply": "return redis.error_reply('MYCODE my message')\n",
    "own_noscript_reply": "return redis.error_reply('NOSCRIPT not really')\n",
}


def _script_errors(client: redis.Redis) -> dict[str, str | None]:
    out = {}
    for case, source in SCRIPT_ERRORS.items():
        try:
            out[case] = text_of(lambda s=source: client.eval(s, 0))
        except TypeError:  # fakeredis: redis.call() raises in Python, no reply at all
            out[case] = None
    return out


def capture_fake() -> dict[str, str | None]:
    """The cases fakeredis can give (no servers, no cluster, no BUSY, no ACL on scripts)."""
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 0)), protocol=2)
    out: dict[str, str | None] = {"engine": f"fakeredis-{fakeredis.__version__}"}
    client.function_load(LIBRARY)

    def ev(verb: str, *args: Any) -> str | None:
        return text_of(lambda: client.execute_command(verb, *args))

    out["noscript"] = ev("EVALSHA", SHA, 0)
    out["function_not_found"] = ev("FCALL", "nosuch", 0)
    out["numkeys"] = ev("EVAL", "return 1", 5, "k")  # fakeredis: EVALSHA says NOSCRIPT first
    out["numkeys_negative"] = ev("EVAL", "return 1", -1)
    out["numkeys_fcall"] = ev("FCALL", "w", 5, "k")
    out["unknown_evalsha_ro"] = ev("EVALSHA_RO", SHA, 1, "k")
    out["unknown_eval_ro"] = ev("EVAL_RO", "return 1", 0)
    out.update(_script_errors(client))
    out["function_error"] = ev("FCALL", "boom", 0)
    out["function_unknown_command"] = ev("FCALL", "foo", 0)
    client.close()
    return out


def recorded() -> dict[str, dict[str, str]]:
    """{engine: {case: text}} as recorded."""
    data: dict[str, dict[str, str]] = json.loads(RECORDING.read_text())
    return data


def record(texts: dict[str, str | None]) -> None:
    engine = str(texts.pop("engine"))
    data = recorded() if RECORDING.exists() else {}
    data[engine] = {k: normalized(v) for k, v in sorted(texts.items()) if v is not None}
    RECORDING.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"{RECORDING}: {engine}: {len(data[engine])} replies")


if __name__ == "__main__":
    record(capture_fake() if "--fake" in sys.argv[1:] else capture())
