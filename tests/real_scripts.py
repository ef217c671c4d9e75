"""Real Lua scripts from well-known open-source Python packages, fetched at test time.

The scripts are not copied into this repository: each package's wheel is downloaded from
PyPI (pinned version and sha256) into ``.cache/real-scripts/`` and its Lua files (or the
Lua strings inside its Python source, read with :mod:`ast`, never imported) are written
to one directory per project, with the package's license text. See
``tests/REAL_SCRIPTS.md`` for the packages, versions and licenses.

A wheel that cannot be fetched fails the tests that need it, loudly: nothing is skipped.
"""

from __future__ import annotations

import ast
import hashlib
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "real-scripts"


@dataclass(frozen=True)
class Package:
    project: str  # the directory the scripts go to
    name: str
    version: str
    sha256: str
    license: str
    #: wheel members under this folder that end in .lua (file scripts) ...
    lua_dir: str = ""
    #: ... or (module path in the wheel, prefix of the string constants holding Lua)
    inline: tuple[str, str] | None = None

    @property
    def wheel(self) -> str:
        dist = self.name.replace("-", "_")
        return f"{dist}-{self.version}-py3-none-any.whl"


PACKAGES = (
    Package(
        "bullmq",
        "bullmq",
        "3.4.4",
        "21759de6b8d43ff81370cc120292443b23c4fba0e71da9c18d8dc438486df148",
        "MIT",
        lua_dir="bullmq/commands/",
    ),
    Package(
        "limits",
        "limits",
        "5.8.0",
        "ae1b008a43eb43073c3c579398bd4eb4c795de60952532dc24720ab45e1ac6b8",
        "MIT",
        lua_dir="limits/resources/redis/lua_scripts/",
    ),
    Package(
        "walrus",
        "walrus",
        "0.9.8",
        "2eb09fd9c3e107f5ba2053d285238ae35c1ca5bdb0af351653aa685317275912",
        "MIT",
        lua_dir="walrus/scripts/",
    ),
    Package(
        "python-redis-lock",
        "python-redis-lock",
        "4.0.1",
        "1d39f579ff3f96d7c14e523680951aa60eb4d397f4ad1bc72a3440b7460d18d5",
        "BSD-2-Clause",
        inline=("redis_lock/__init__.py", ""),
    ),
    Package(
        "redis-py",
        "redis",
        "8.1.0",
        "a4fe1aac3d3b3cc791d4b3d5931c5a956045dc951ee74d1c913ee3ac4d2ee9fb",
        "MIT",
        inline=("redis/lock.py", "Lock."),
    ),
)


def _fetch(pkg: Package) -> Path:
    """The pinned wheel, downloaded once into the cache and checked against its sha256."""
    CACHE.mkdir(parents=True, exist_ok=True)
    wheel = CACHE / pkg.wheel
    if not wheel.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        cmd += ["--disable-pip-version-check", "-q", "-d", str(CACHE)]
        done = subprocess.run([*cmd, f"{pkg.name}=={pkg.version}"], capture_output=True, text=True)
        if done.returncode != 0 or not wheel.exists():
            raise RuntimeError(
                f"cannot download {pkg.name}=={pkg.version} from PyPI for the real-script "
                f"tests: {done.stderr.strip()[-300:]}"
            )
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != pkg.sha256:
        raise RuntimeError(f"{wheel}: sha256 {digest}, expected {pkg.sha256} (pinned)")
    return wheel


def _inline_scripts(source: bytes, prefix: str) -> dict[str, str]:
    """Module-level and class-level string constants whose text calls redis.call."""
    found = {}
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1):
            continue
        target, value = node.targets[0], node.value
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            text = value.value.decode() if isinstance(value.value, bytes) else value.value
            if isinstance(text, str) and "redis.call" in text:
                found[f"{prefix}{target.id}"] = text
    return found


def _extract(pkg: Package, wheel: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        if pkg.inline is None:
            for member in names:
                if member.startswith(pkg.lua_dir) and member.endswith(".lua"):
                    (into / Path(member).name).write_bytes(zf.read(member))
        else:
            module, prefix = pkg.inline
            for name, text in _inline_scripts(zf.read(module), prefix).items():
                (into / f"{name}.lua").write_text(text, encoding="utf-8")
        licenses = [m for m in names if ".dist-info/" in m and "LICEN" in m.upper()]
        notice = zf.read(licenses[0]).decode() if licenses else _metadata_license(zf, names)
        (into.parent / f"{pkg.project}.LICENSE").write_text(notice, encoding="utf-8")


def _metadata_license(zf: zipfile.ZipFile, names: list[str]) -> str:
    """A wheel without a license file: its METADATA's license lines (bullmq)."""
    meta = next(m for m in names if m.endswith(".dist-info/METADATA"))
    lines = zf.read(meta).decode().splitlines()
    keep = [ln for ln in lines if ln.startswith(("Name:", "Version:", "Author", "License"))]
    keep += [ln for ln in lines if "License ::" in ln]
    return "\n".join(keep) + "\n"


def real_scripts() -> Path:
    """A directory with one sub-directory of ``*.lua`` per project (built once)."""
    sample = CACHE / "sample"
    done = sample / ".complete"
    pins = "".join(f"{p.name}=={p.version} {p.sha256}\n" for p in PACKAGES)
    if not done.exists() or done.read_text() != pins:
        for pkg in PACKAGES:
            _extract(pkg, _fetch(pkg), sample / pkg.project)
        done.write_text(pins)
    return sample
