#!/usr/bin/env python3
"""The engine matrix: build the server engines once, run the guarantee tests on each.

    engines.py build --src DIR --cache DIR      verify SHA256SUMS, build each tarball once
    engines.py list  --src DIR --cache DIR      the engines a matrix run would use
    engines.py test  --src DIR --cache DIR [--only NAME] [--skip NAME] [-- PYTEST ARGS]

An engine is Debian's redis-server (the default one, on PATH) or a source tarball of
``--src`` listed in its ``SHA256SUMS`` (``redis-7.2.6.tar.gz``, ``valkey-8.0.1.tar.gz``).
A tarball's server and redis-cli are built with TLS (``BUILD_TLS=yes``, see
:data:`BUILD_FLAGS`) and installed into ``<cache>/<name>-<sha256[:12]>/bin`` (a Valkey build
also answers to ``redis-server`` and ``redis-cli`` there); a later run finds it there and
builds nothing, and a changed tarball (another checksum) is a new directory. The build
happens outside the source tree, in a temporary directory of the cache, under a lock, and
appears whole or not at all.

``test`` runs pytest once per engine with ``LUAPIPE_REDIS_SERVER`` and ``LUAPIPE_REDIS_CLI``
naming its binaries (the fixtures and luapipe's launcher take them from there) and, unless
pytest arguments are given, ``-m engines`` (the guarantee tests, see tests/engine_matrix.py),
then prints one table row per engine. Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

DEFAULT = "default"
#: TLS for the TLS tests; libc malloc and -O2 (no link-time optimisation, which compiles
#: everything twice) keep a build near a minute on two cores: the tests check behaviour,
#: not speed
BUILD_FLAGS = ("BUILD_TLS=yes", "MALLOC=libc", "OPTIMIZATION=-O2")


@dataclass(frozen=True)
class Engine:
    name: str  # redis-7.2.6, valkey-8.0.1, or "default" (redis-server on PATH)
    server: str  # path of redis-server (valkey installs a redis-server link to itself)
    cli: str


class Problem(Exception):
    """A one-line reason to stop (exit 1)."""


def _sums(src: Path) -> dict[str, str]:
    sums_file = src / "SHA256SUMS"
    if not sums_file.is_file():
        raise Problem(f"{sums_file}: missing (one '<sha256>  <file>' line per tarball)")
    sums: dict[str, str] = {}
    for n, line in enumerate(sums_file.read_text().splitlines(), 1):
        if not line.strip():
            continue
        m = re.fullmatch(r"([0-9a-f]{64})\s+\*?(\S+)", line.strip())
        if m is None:
            raise Problem(f"{sums_file}:{n}: not '<sha256>  <file>'")
        sums[m[2]] = m[1]
    return sums


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _tarballs(src: Path) -> list[tuple[str, Path, str]]:
    """(name, tarball, sha256) of every tarball in ``src``, each checked against its sum."""
    if not src.is_dir():
        return []
    sums = _sums(src)
    found = []
    for tarball in sorted(src.glob("*.tar.gz")):
        expected = sums.get(tarball.name)
        if expected is None:
            raise Problem(f"{tarball}: not listed in {src / 'SHA256SUMS'}; refusing to build it")
        found.append((tarball.name.removesuffix(".tar.gz"), tarball, expected))
    return found


def _install_dir(cache: Path, name: str, sha: str) -> Path:
    return cache / f"{name}-{sha[:12]}"


def _recipe(sha: str, tarball: str) -> str:
    """What a build was made from, kept in its SOURCE file: a cached build made otherwise
    (another tarball, other flags) is built again."""
    return f"{sha}  {tarball}\nmake {' '.join(BUILD_FLAGS)}\n"


def _built(prefix: Path, sha: str, tarball: str) -> bool:
    source = prefix / "SOURCE"
    return (
        (prefix / "bin" / "redis-server").exists()
        and source.is_file()
        and (source.read_text() == _recipe(sha, tarball))
    )


def _engine_at(name: str, prefix: Path) -> Engine:
    return Engine(name, str(prefix / "bin" / "redis-server"), str(prefix / "bin" / "redis-cli"))


@contextlib.contextmanager
def _locked(cache: Path) -> Iterator[None]:
    cache.mkdir(parents=True, exist_ok=True)
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _safe_members(tar: tarfile.TarFile, top: str) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for m in members:
        parts = Path(m.name).parts
        if not parts or parts[0] != top or ".." in parts or Path(m.name).is_absolute():
            raise Problem(f"{tar.name}: member {m.name!r} is outside {top}/")
    return members


def build(src: Path, cache: Path, jobs: int) -> list[Engine]:
    """Build every tarball of ``src`` not yet in ``cache``; the engines, built or cached."""
    engines = []
    tarballs = _tarballs(src)
    if not tarballs:
        print(f"engines: no engine sources in {src}; only the default redis-server")
        return []
    with _locked(cache):
        for name, tarball, expected in tarballs:
            prefix = _install_dir(cache, name, expected)
            if _built(prefix, expected, tarball.name):
                print(f"engines: {name}: cached in {prefix}")
                engines.append(_engine_at(name, prefix))
                continue
            actual = _sha256(tarball)
            if actual != expected:
                raise Problem(
                    f"{tarball}: SHA-256 {actual} does not match SHA256SUMS ({expected}); "
                    "refusing to build it"
                )
            t0 = time.monotonic()
            print(f"engines: {name}: building with TLS (make -j{jobs}) into {prefix}", flush=True)
            work = Path(tempfile.mkdtemp(prefix=f".build-{name}-", dir=cache))
            try:
                with tarfile.open(tarball) as tar:
                    tar.extractall(work, members=_safe_members(tar, name))
                tree = work / name / "src"
                log = work / "build.log"
                staged = work / "install"
                family = "valkey" if name.startswith("valkey") else "redis"
                server, cli = f"{family}-server", f"{family}-cli"
                make = ["make", "-C", str(tree), f"-j{jobs}", *BUILD_FLAGS, server, cli]
                with log.open("w") as out:
                    if subprocess.run(make, stdout=out, stderr=subprocess.STDOUT).returncode:
                        tail = log.read_text(errors="replace").strip().splitlines()[-15:]
                        print("\n".join(tail), file=sys.stderr)
                        raise Problem(f"{name}: build failed (see the lines above)")
                (staged / "bin").mkdir(parents=True)
                for built, as_redis in ((server, "redis-server"), (cli, "redis-cli")):
                    shutil.copy2(tree / built, staged / "bin" / built)
                    if built != as_redis:  # Valkey answers to redis-server's options too
                        (staged / "bin" / as_redis).symlink_to(built)
                (staged / "SOURCE").write_text(_recipe(expected, tarball.name))
                if prefix.exists():  # made otherwise: replaced whole
                    shutil.rmtree(prefix)
                staged.rename(prefix)  # whole or not at all
            finally:
                shutil.rmtree(work, ignore_errors=True)
            print(f"engines: {name}: built in {time.monotonic() - t0:.0f} s", flush=True)
            engines.append(_engine_at(name, prefix))
    return engines


def available(src: Path, cache: Path) -> list[Engine]:
    """The default redis-server, then every engine of ``src`` already built in ``cache``."""
    server, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    if server is None or cli is None:
        raise Problem("redis-server or redis-cli not on PATH (make server-deps installs them)")
    engines = [Engine(DEFAULT, server, cli)]
    for name, tarball, sha in _tarballs(src):
        prefix = _install_dir(cache, name, sha)
        if not _built(prefix, sha, tarball.name):
            raise Problem(f"{name}: not built (or built otherwise) in {cache}; run make engines")
        engines.append(_engine_at(name, prefix))
    return engines


def version(engine: Engine) -> str:
    """``redis-server 7.0.15`` or ``valkey-server 8.0.1``, from ``--version``."""
    out = subprocess.run([engine.server, "--version"], capture_output=True, text=True).stdout
    m = re.match(r"(\w+) server v=(\S+)", out)
    family = m[1].lower() if m else "redis"
    return f"{family}-server {m[2]}" if m else out.strip()


@dataclass
class Row:
    engine: str
    server: str
    tests: int = 0
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    seconds: float = 0.0


def _counts(junit: Path, row: Row) -> None:
    if not junit.exists():
        return
    root = ET.parse(junit).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return
    tests = int(suite.get("tests", 0))
    bad = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
    row.tests, row.failed, row.skipped = tests, bad, skipped
    row.passed = tests - bad - skipped


def test(engines: list[Engine], pytest_args: list[str]) -> list[Row]:
    rows = []
    args = pytest_args or ["-m", "engines"]
    for engine in engines:
        label = version(engine)
        row = Row(engine.name, label)
        print(f"\n=== {engine.name}: {label} ({engine.server})", flush=True)
        env = {
            **os.environ,
            "LUAPIPE_REDIS_SERVER": engine.server,
            "LUAPIPE_REDIS_CLI": engine.cli,
            "LUAPIPE_ENGINE": engine.name,
        }
        with tempfile.TemporaryDirectory(prefix="luapipe-matrix-") as tmp:
            junit = Path(tmp) / "junit.xml"
            cmd = [sys.executable, "-m", "pytest", "-q", f"--junitxml={junit}", *args]
            t0 = time.monotonic()
            rc = subprocess.run(cmd, env=env).returncode
            row.seconds = time.monotonic() - t0
            _counts(junit, row)
            if rc not in (0, 5) and row.failed == 0:  # pytest itself failed (usage, crash)
                row.failed = max(1, row.failed)
        rows.append(row)
    return rows


def table(rows: list[Row]) -> str:
    head = ("engine", "server", "tests", "passed", "failed", "skipped", "wall")
    lines = [head] + [
        (
            r.engine,
            r.server,
            str(r.tests),
            str(r.passed),
            str(r.failed),
            str(r.skipped),
            f"{r.seconds:.0f} s",
        )
        for r in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    cells = ((c, w, i < 2) for ln in lines for i, (c, w) in enumerate(zip(ln, widths, strict=True)))
    out = [c.ljust(w) if left else c.rjust(w) for c, w, left in cells]
    n = len(head)
    return "\n".join("  ".join(out[k : k + n]) for k in range(0, len(out), n))


def main(argv: list[str]) -> int:
    pytest_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pytest_args = argv[:cut], argv[cut + 1 :]
    p = argparse.ArgumentParser(prog="engines.py", description=__doc__.split("\n\n")[0])
    p.add_argument("command", choices=("build", "list", "test"))
    p.add_argument("--src", type=Path, required=True, help="directory of tarballs + SHA256SUMS")
    p.add_argument("--cache", type=Path, required=True, help="where built engines are kept")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--only", action="append", default=[], help="engine name (repeatable)")
    p.add_argument("--skip", action="append", default=[], help="engine name (repeatable)")
    opts = p.parse_args(argv)
    try:
        if opts.command == "build":
            build(opts.src.resolve(), opts.cache, opts.jobs)
            return 0
        engines = available(opts.src.resolve(), opts.cache)
        unknown = {*opts.only, *opts.skip} - {e.name for e in engines}
        if unknown:
            known = ", ".join(e.name for e in engines)
            raise Problem(f"unknown engine {sorted(unknown)[0]!r}; known: {known}")
        engines = [
            e for e in engines if (not opts.only or e.name in opts.only) and e.name not in opts.skip
        ]
        if opts.command == "list":
            for e in engines:
                print(f"{e.name}\t{version(e)}\t{e.server}")
            return 0
        t0 = time.monotonic()
        rows = test(engines, pytest_args)
        print(f"\nengine matrix ({time.monotonic() - t0:.0f} s):")
        print(table(rows))
        return 1 if any(r.failed or not r.tests for r in rows) else 0
    except Problem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
