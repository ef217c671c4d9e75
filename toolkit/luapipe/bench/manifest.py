"""What a result was measured on: Redis version and config, machine, libraries, settings."""

from __future__ import annotations

import datetime as dt
import os
import platform
from importlib import metadata
from pathlib import Path
from typing import Any

import redis

from luapipe.errors import EnvironmentProblem, printable_url

__all__ = ["build_manifest", "netem_available", "refuse_fake"]

CONFIG_KEYS = (
    "maxmemory",
    "maxmemory-policy",
    "appendonly",
    "save",
    "io-threads",
    "hz",
    "busy-reply-threshold",
    "lua-time-limit",
)
LIBRARIES = ("luapipe", "redis", "hiredis", "hdrhistogram", "jinja2", "click")


def refuse_fake(client: Any) -> None:
    """The benchmark only runs on a real redis-server: fakeredis timings mean nothing."""
    module = type(client).__module__ + type(client.connection_pool).__module__
    conn_cls = getattr(client.connection_pool, "connection_class", object)
    if "fakeredis" in module or "fakeredis" in getattr(conn_cls, "__module__", ""):
        raise EnvironmentProblem("refusing to benchmark fakeredis: use a real redis-server")


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def netem_available() -> bool:
    """Whether the kernel has sch_netem (tc netem in a namespace could then replace the proxy)."""
    release = platform.release()
    for path in (f"/lib/modules/{release}/kernel/net/sched", "/sys/module/sch_netem"):
        p = Path(path)
        if p.name == "sch_netem" and p.exists():
            return True
        if p.is_dir() and any(f.name.startswith("sch_netem") for f in p.iterdir()):
            return True
    return False


def _versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def build_manifest(admin: redis.Redis, url: str, spec: dict[str, Any]) -> dict[str, Any]:
    info: dict[str, Any] = dict(admin.info("server"))
    config: dict[str, Any] = {}
    for key in CONFIG_KEYS:
        try:
            config.update({str(k): v for k, v in dict(admin.config_get(key)).items()})
        except redis.RedisError:
            config[key] = "unavailable"
    return {
        "created_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "redis": {
            "url": printable_url(url),
            # Valkey 8 says server_name:valkey, valkey_version:8.0.1 and server_mode, and
            # keeps redis_version at 7.2.4 (the Redis it forked from) for old clients
            "server": info.get("server_name") or "redis",
            "version": info.get("valkey_version") or info.get("redis_version"),
            "mode": info.get("redis_mode") or info.get("server_mode"),
            "os": info.get("os"),
            "config": {k: str(v) for k, v in sorted(config.items())},
        },
        "machine": {
            "kernel": platform.release(),
            "system": platform.system(),
            "cpu": _cpu_model(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        },
        "libraries": _versions(),
        "rtt_method": "delay proxy (user space, sleep-then-spin)"
        + ("" if netem_available() else "; kernel has no sch_netem"),
        "spec": spec,
    }
