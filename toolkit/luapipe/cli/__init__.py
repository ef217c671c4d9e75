"""The ``luapipe`` command: a thin click shell over the library.

Each command parses options, calls one library function, renders the result and turns a
:class:`~luapipe.errors.LuapipeError` into one line on stderr and exit code 1 (click's
usage errors exit 2). This is the only module that imports click or prints.
"""

from __future__ import annotations

import functools
import json
import math
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import redis
import redis.exceptions

from luapipe.errors import LuapipeError, mask_url
from luapipe.scripts.deploy import LOCK_NAME, deploy
from luapipe.scripts.lint import lint_scripts, luac_available
from luapipe.scripts.loader import discover
from luapipe.scripts.registry import ScriptRegistry, bundled_scripts_dir
from luapipe.wire.connect import client_from_url, resolve_url

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> None:
    click.echo(f"error: {mask_url(message)}", err=True)
    sys.exit(1)


def handle_errors(func: F) -> F:
    """Turn library errors into one masked line and exit code 1 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except LuapipeError as exc:
            fail(str(exc))
        except redis.exceptions.RedisClusterException as exc:  # not translated by the library
            where = resolve_url(kwargs.get("url"))
            fail(f"cannot use {where} as a Redis Cluster: {exc}")
        except BrokenPipeError:  # output piped into `head`
            sys.stderr.close()
            sys.exit(0)
        except OSError as exc:  # files the user named
            where = f"{exc.filename}: " if exc.filename else ""
            fail(f"{where}{exc.strerror or exc}")

    return wrapper  # type: ignore[return-value]


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="luapipe")
@click.option(
    "--cluster/--no-cluster",
    default=None,
    help="Treat --url as a Redis Cluster node, or as a single server [default: ask it].",
)
@click.pass_context
def main(ctx: click.Context, cluster: bool | None) -> None:
    """luapipe: Redis Lua scripts vs pipelines: deploy, generate, verify and benchmark."""
    ctx.meta["luapipe.cluster"] = cluster
    _sigterm_like_ctrl_c(ctx)


def _on_sigterm(signum: int, frame: Any) -> None:
    # A second SIGTERM must not cut the clean-up short (stopping the private server).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def _sigterm_like_ctrl_c(ctx: click.Context) -> None:
    """SIGTERM (a CI cancel, ``timeout``) unwinds like Ctrl-C, so every context manager stops
    what it started: the private redis-server, the RTT proxy, the benchmark's workers."""
    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    ctx.call_on_close(lambda: signal.signal(signal.SIGTERM, previous))


# === script commands (scripts, deploy) ===


def _registry(directory: str | None) -> ScriptRegistry:
    if directory is None:
        local = Path("scripts_lua")
        return ScriptRegistry.from_directory(local if local.is_dir() else None)
    return ScriptRegistry.from_directory(directory)


def _client(url: str | None) -> redis.Redis:
    ctx = click.get_current_context(silent=True)
    cluster = ctx.meta.get("luapipe.cluster") if ctx is not None else None
    return client_from_url(resolve_url(url), cluster=cluster)


dir_option = click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Scripts directory [default: ./scripts_lua, else the bundled library].",
)
url_option = click.option(
    "--url", default=None, help="Redis URL [default: $REDIS_URL or redis://127.0.0.1:6379/0]."
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@main.group()
def scripts() -> None:
    """List, lint, load, inspect, call and flush Lua scripts."""


@scripts.command("list")
@dir_option
@json_option
@handle_errors
def scripts_list(directory: str | None, as_json: bool) -> None:
    """List the scripts with their keys, args, flags and SHA (no server needed)."""
    reg = _registry(directory)
    rows: list[dict[str, Any]] = [
        {
            "name": s.name,
            "sha": s.sha,
            "keys": None
            if s.keys is None
            else [p.name + ("..." if p.variadic else "") for p in s.keys],
            "args": None
            if s.args is None
            else [p.name + ("..." if p.variadic else "") for p in s.args],
            "flags": list(s.flags),
            "path": s.path,
            "description": s.description,
        }
        for s in reg
    ]
    if as_json:
        emit_json(rows)
        return
    width = _name_width(row["name"] for row in rows)
    for row in rows:
        keys = "unchecked" if row["keys"] is None else ", ".join(row["keys"]) or "-"
        args = "unchecked" if row["args"] is None else ", ".join(row["args"]) or "-"
        flags = f"  [{', '.join(row['flags'])}]" if row["flags"] else ""
        click.echo(f"{row['name']:<{width}} {row['sha'][:12]}  keys: {keys}  args: {args}{flags}")


def _name_width(names: Any) -> int:
    """The name column: as wide as the longest name (at least 20), so columns line up."""
    return max([20, *(len(n) for n in names)])


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@scripts.command("lint")
@dir_option
@json_option
@handle_errors
def scripts_lint(directory: str | None, as_json: bool) -> None:
    """Compile every script without a server; flag undeclared KEYS/ARGV and globals."""
    found = discover(Path(directory) if directory else _registry_dir())
    issues = lint_scripts(found)
    if as_json:
        emit_json(
            [{"location": i.location, "severity": i.severity, "message": i.message} for i in issues]
        )
    else:
        for issue in issues:
            click.echo(str(issue))
        note = "" if luac_available() else " (globals not checked: luac5.1 not installed)"
        click.echo(f"{_plural(len(found), 'script')}, {_plural(len(issues), 'problem')}{note}")
    if any(i.severity == "error" for i in issues):
        sys.exit(1)


def _registry_dir() -> Path:
    local = Path("scripts_lua")
    return local if local.is_dir() else bundled_scripts_dir()


@scripts.command("load")
@dir_option
@url_option
@json_option
@handle_errors
def scripts_load(directory: str | None, url: str | None, as_json: bool) -> None:
    """SCRIPT LOAD every script; prints each name and SHA."""
    reg = _registry(directory)
    shas = reg.load(_client(url))
    if as_json:
        emit_json(shas)
        return
    width = _name_width(shas)
    for name, sha in shas.items():
        click.echo(f"{name:<{width}} {sha}")


@scripts.command("status")
@dir_option
@url_option
@json_option
@handle_errors
def scripts_status(directory: str | None, url: str | None, as_json: bool) -> None:
    """Which scripts each node has cached (exit 1 if any is missing)."""
    nodes = _registry(directory).status(_client(url))
    if as_json:
        emit_json(
            [
                {
                    "node": n.node,
                    "scripts": [
                        {"name": s.name, "sha": s.sha, "loaded": s.loaded} for s in n.scripts
                    ],
                }
                for n in nodes
            ]
        )
    else:
        width = _name_width(s.name for n in nodes for s in n.scripts)
        for n in nodes:
            for s in n.scripts:
                state = "loaded" if s.loaded else "MISSING"
                click.echo(f"{n.node}  {s.name:<{width}} {s.sha[:12]}  {state}")
    if any(n.missing for n in nodes):
        sys.exit(1)


@scripts.command("call")
@click.argument("name")
@click.option("--key", "-k", "keys", multiple=True, help="A key (repeat, in order).")
@click.option("--arg", "-a", "args", multiple=True, help="An argument (repeat, in order).")
@dir_option
@url_option
@json_option
@handle_errors
def scripts_call(
    name: str,
    keys: tuple[str, ...],
    args: tuple[str, ...],
    directory: str | None,
    url: str | None,
    as_json: bool,
) -> None:
    """Call script NAME with --key/--arg values and print its reply."""
    reg = _registry(directory)
    reg[name].check_call(keys, args)  # before connecting
    result = _plain(reg.call(_client(url), name, keys=keys, args=args))
    click.echo(json.dumps(result) if as_json else _show(result))


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="backslashreplace")
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(_plain(k)): _plain(v) for k, v in value.items()}
    return value


def _show(value: Any) -> str:
    return json.dumps(value) if isinstance(value, list | dict) else str(value)


@scripts.command("flush")
@url_option
@click.option("--yes", is_flag=True, help="Do not ask: flush the whole script cache.")
@handle_errors
def scripts_flush(url: str | None, yes: bool) -> None:
    """SCRIPT FLUSH: empties the server's whole script cache (every application's)."""
    if not yes and not click.confirm("Flush every cached script on the server?", default=False):
        fail("not flushed (pass --yes to skip the question)")
    nodes = ScriptRegistry([]).flush(_client(url))
    click.echo(f"flushed the script cache on {', '.join(nodes)}")


@scripts.command("kill")
@url_option
@handle_errors
def scripts_kill(url: str | None) -> None:
    """SCRIPT KILL a runaway read-only script (a script that wrote is UNKILLABLE)."""
    killed = ScriptRegistry([]).kill(_client(url))
    click.echo(
        f"killed the running script on {', '.join(killed)}" if killed else "no script running"
    )


@main.command("deploy")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Scripts directory [default: ./scripts_lua; without one, --dir is required].",
)
@url_option
@click.option(
    "--lock",
    "lock",
    type=click.Path(dir_okay=False),
    default=None,
    help=f"Lock file [default: <dir>/{LOCK_NAME}].",
)
@click.option("--check", is_flag=True, help="Only report drift (exit 1 if any); change nothing.")
@json_option
@handle_errors
def deploy_cmd(
    directory: str | None, url: str | None, lock: str | None, check: bool, as_json: bool
) -> None:
    """Load every script of --dir (default ./scripts_lua) on the server and write the lock
    file (name -> SHA)."""
    scripts_dir = _deploy_dir(directory)
    reg = ScriptRegistry.from_directory(scripts_dir)
    lock_path = Path(lock) if lock else scripts_dir / LOCK_NAME
    report = deploy(reg, _client(url), lock_path, check=check, directory=scripts_dir)
    if as_json:
        emit_json(
            {
                "ok": report.ok,
                "lock": report.lock_path,
                "nodes": list(report.nodes),
                "scripts": dict(report.scripts),
                "drift": [
                    {"kind": d.kind, "name": d.name, "node": d.node, "detail": d.detail}
                    for d in report.drift
                ],
            }
        )
    elif check:
        for d in report.drift:
            click.echo(str(d))
        verdict = "no drift" if report.ok else f"{len(report.drift)} drift"
        nodes = ", ".join(report.nodes)
        click.echo(f"{verdict}: {len(report.scripts)} scripts, nodes {nodes}")
    else:
        width = _name_width(name for name, _ in report.scripts)
        for name, sha in report.scripts:
            click.echo(f"{name:<{width}} {sha}")
        state = "written" if report.lock_written else "unchanged"
        nodes = ", ".join(report.nodes)
        click.echo(
            f"deployed {len(report.scripts)} scripts to {nodes}; lock {report.lock_path} {state}"
        )
    if not report.ok:
        sys.exit(1)


def _deploy_dir(directory: str | None) -> Path:
    """--dir, else ./scripts_lua. Never the bundled library: its lock file would be written
    into the installed package, and a deploy pipeline must name what it deploys."""
    if directory is not None:
        return Path(directory)
    local = Path("scripts_lua")
    if local.is_dir():
        return local
    raise LuapipeError(
        "deploy needs a scripts directory: pass --dir DIR or run it where ./scripts_lua is "
        "(the bundled library is not deployed)"
    )


# === generation commands (generate, verify) ===
@main.command()
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--out",
    default="scripts_lua",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where op_<name>.lua goes (a scripts directory the registry loads).",
)
@click.option(
    "--py-out",
    default="examples/operations/generated",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Where the Python module op_<name>.py goes.",
)
@handle_errors
def generate(specs: tuple[str, ...], out: str, py_out: str) -> None:
    """Generate every form of each operation SPEC (Lua script, Function, Python module)."""
    from luapipe.operations.generate import generate_files

    for result in generate_files(specs, out, py_out):
        state = "written" if result.changed else "unchanged"
        click.echo(f"{result.lua}  {result.python}  ({state})")


@main.command("verify")
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "--url",
    default=None,
    help="Redis URL [default: a private embedded server; REDIS_URL is not used].",
)
@click.option("--fake", is_flag=True, help="Use an in-process fakeredis server.")
@click.option("--cases", default=200, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=1, show_default=True, type=int)
@handle_errors
def verify_cmd(specs: tuple[str, ...], url: str | None, fake: bool, cases: int, seed: int) -> None:
    """Prove the forms of each SPEC agree: same replies, same keyspace (exit 1 if not)."""
    import contextlib

    from luapipe.operations.verify import verify_files

    if fake and url:
        raise click.UsageError("--url and --fake exclude each other")
    client: redis.Redis
    with contextlib.ExitStack() as stack:
        if fake:
            try:
                import fakeredis
            except ImportError:
                fail("--fake needs fakeredis: pip install 'fakeredis[lua]'")
            client = fakeredis.FakeRedis(server=fakeredis.FakeServer(version=(7, 0)), protocol=2)
        else:
            server_url = stack.enter_context(_bench_server(url))
            client = _client(server_url)
        reports = verify_files(specs, client, cases=cases, seed=seed)
    for rep in reports:
        click.echo(rep.summary())
        if rep.mismatch is not None:
            click.echo(rep.mismatch.describe())
    if not all(rep.ok for rep in reports):
        sys.exit(1)


# === bench commands (bench, report) ===
MAX_RTT_MS = 1000.0  # beyond this the harness's own timeouts (30 s per call) are too near


def _items(text: str, example: str) -> list[str]:
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise click.BadParameter(f"empty item in {text!r}: give comma-separated values ({example})")
    return items


def _rtt_list(ctx: click.Context, param: click.Parameter, text: str) -> tuple[float, ...]:
    values = []
    for item in _items(text, "milliseconds, e.g. 0,1,5"):
        try:
            v = float(item)
        except ValueError:
            raise click.BadParameter(f"{item!r} is not a number of milliseconds") from None
        if not (math.isfinite(v) and 0 <= v <= MAX_RTT_MS):
            raise click.BadParameter(
                f"each RTT must be a number from 0 to {MAX_RTT_MS:g} ms, not {item}"
            )
        values.append(v)
    return tuple(values)


def _client_list(ctx: click.Context, param: click.Parameter, text: str) -> tuple[int, ...]:
    values = []
    for item in _items(text, "client counts, e.g. 1,4,16"):
        try:
            v = int(item)
        except ValueError:
            v = 0
        if v < 1:
            raise click.BadParameter(f"each client count must be a whole number >= 1, not {item!r}")
        values.append(v)
    return tuple(values)


def _finite(minimum: float, *, inclusive: bool) -> Callable[..., float | None]:
    """A click callback: the value is a finite number above ``minimum`` (or equal to it)."""

    def check(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
        if value is None:
            return None
        ok = value >= minimum if inclusive else value > minimum
        if not (math.isfinite(value) and ok):
            bound = f"{'>=' if inclusive else '>'} {minimum:g}"
            raise click.BadParameter(f"must be a finite number {bound}, not {value}")
        return value

    return check


def _contention(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from luapipe.bench.workloads import zipf_exponent

    try:
        zipf_exponent(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _progress_line(p: Any) -> None:
    """A live bar on a terminal; in a log (CI, a file) a plain line every tenth of the run."""
    if not sys.stderr.isatty():
        step = max(1, p.total // 10)
        if p.done % step == 0 or p.done >= p.total:
            click.echo(f"progress {p.done}/{p.total}: {p.label}", err=True)
        return
    width = 24
    filled = int(width * p.done / max(p.total, 1))
    bar = "#" * filled + "." * (width - filled)
    click.echo(f"\r[{bar}] {p.done}/{p.total} {p.label[:60]:<60}", nl=False, err=True)
    if p.done >= p.total:
        click.echo("", err=True)


def _bench_server(url: str | None) -> Any:
    """The server to benchmark: ``--url``, else a private embedded redis-server.

    Never REDIS_URL: that names the server the other commands deploy to, often one with real
    data, and a benchmark or a verify run writes to the server it is given."""
    import contextlib

    from luapipe.bench.server import EmbeddedRedis

    if url:
        return contextlib.nullcontext(url)

    @contextlib.contextmanager
    def embedded() -> Any:
        with EmbeddedRedis() as server:
            click.echo(
                f"started a private redis-server on {server.address} (pid {server.pid})", err=True
            )
            yield server.url

    return embedded()


def _finish(
    result: Any,
    json_path: str | None,
    csv_path: str | None,
    html_path: str | None,
    notes: tuple[str, ...] = (),
) -> None:
    from luapipe.bench.verdict import recommendations
    from luapipe.report import render_table, write_csv, write_html, write_json

    data = result.as_dict() if hasattr(result, "as_dict") else result
    data["recommendations"] = recommendations(data["records"], data.get("skipped"))
    data["notes"] = [*notes, *data.get("notes", [])]
    click.echo(render_table(data))
    for path, writer in ((json_path, write_json), (csv_path, write_csv), (html_path, write_html)):
        if path:
            from pathlib import Path

            Path(path).parent.mkdir(parents=True, exist_ok=True)
            writer(data, path)
            click.echo(f"wrote {path}", err=True)


@main.command()
@click.argument("specs", nargs=-1)
@click.option(
    "--url",
    help="Redis to benchmark; it keeps its data: the run writes and then deletes only "
    "luapipe:bench: keys [default: a private redis-server; REDIS_URL is not used]",
)
@click.option(
    "--rtt",
    "rtts",
    default="0",
    show_default=True,
    callback=_rtt_list,
    help="simulated RTTs in ms, comma-separated",
)
@click.option(
    "--clients",
    "counts",
    default="1",
    show_default=True,
    callback=_client_list,
    help="clients, comma-separated",
)
@click.option(
    "--duration",
    type=float,
    default=2.0,
    show_default=True,
    callback=_finite(0, inclusive=False),
    help="timed s per form",
)
@click.option(
    "--warmup",
    type=float,
    default=0.3,
    show_default=True,
    callback=_finite(0, inclusive=True),
    help="discarded s per form",
)
@click.option(
    "--rounds", type=click.IntRange(min=1), default=4, show_default=True, help="ABAB rounds"
)
@click.option(
    "--contention",
    default="spread",
    show_default=True,
    callback=_contention,
    help="hot | spread | zipf:S (S > 0)",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="ops per call (one server): N operations batched as each form allows",
)
@click.option(
    "--rate",
    type=float,
    callback=_finite(0, inclusive=False),
    help="open loop: total calls per second",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--no-bystander", is_flag=True, help="skip the bystander GET probe")
@click.option("--anchors", is_flag=True, help="reproduce the published figures instead")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="write results JSON")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="write results CSV")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="write an HTML report")
@handle_errors
def bench(
    specs: tuple[str, ...],
    url: str | None,
    rtts: tuple[float, ...],
    counts: tuple[int, ...],
    duration: float,
    warmup: float,
    rounds: int,
    contention: str,
    batch: int,
    rate: float | None,
    seed: int,
    no_bystander: bool,
    anchors: bool,
    json_path: str | None,
    csv_path: str | None,
    html_path: str | None,
) -> None:
    """Benchmark every form of SPEC|NAME... (default: update_token) across RTT and clients."""
    from luapipe.bench.opworkload import resolve_workloads
    from luapipe.bench.runner import BenchConfig, run_bench

    with _bench_server(url) as target:
        if anchors:
            from luapipe.bench.anchors import run_anchors

            rep = run_anchors(target, progress=_progress_line)
            click.echo("\n".join(rep.lines()))
            _finish(rep.bench, json_path, csv_path, html_path, tuple(rep.lines()))
            return
        workloads = resolve_workloads(
            list(specs) or ["update_token"], contention=contention, batch=batch, seed=seed
        )
        config = BenchConfig(
            rtts_ms=rtts,
            clients=counts,
            duration_s=duration,
            warmup_s=warmup,
            rounds=rounds,
            rate=rate,
            bystander=not no_bystander,
            seed=seed,
        )
        result = run_bench(target, workloads, config, progress=_progress_line)
        _finish(result, json_path, csv_path, html_path)


@main.command()
@click.argument("results", type=click.Path(exists=True, dir_okay=False))
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="write an HTML report")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False), help="write CSV")
@handle_errors
def report(results: str, html_path: str | None, csv_path: str | None) -> None:
    """Render RESULTS.json (from `luapipe bench --json`) as a table, HTML and/or CSV."""
    from luapipe.report import load_results

    data = load_results(results)
    _finish(data, None, csv_path, html_path)


@main.command()
@click.option(
    "--url",
    help="Redis to use; it keeps its data: only luapipe:bench: keys are written and deleted "
    "[default: a private redis-server; REDIS_URL is not used]",
)
@click.option("--out", default="demo-out", show_default=True, type=click.Path(file_okay=False))
@click.option(
    "--duration",
    type=float,
    default=0.8,
    show_default=True,
    callback=_finite(0, inclusive=False),
    help="timed s per form",
)
@handle_errors
def demo(url: str | None, out: str, duration: float) -> None:
    """A one-minute tour: a few catalogue operations at RTT 0, 0.25 and 1 ms, with a report."""
    from pathlib import Path

    from luapipe.bench.opworkload import catalogue_dir, resolve_workloads
    from luapipe.bench.runner import BenchConfig, run_bench

    names = ["update_token"] + [
        n for n in ("reserve_stock", "rate_limit") if (catalogue_dir() / f"{n}.toml").exists()
    ]
    workloads = resolve_workloads(names)
    config = BenchConfig(rtts_ms=(0.0, 0.25, 1.0), duration_s=duration, warmup_s=0.15, rounds=2)
    Path(out).mkdir(parents=True, exist_ok=True)
    with _bench_server(url) as target:
        click.echo(f"benchmarking {', '.join(names)} at RTT 0, 0.25 and 1 ms", err=True)
        result = run_bench(target, workloads, config, progress=_progress_line)
        _finish(
            result,
            str(Path(out) / "results.json"),
            str(Path(out) / "results.csv"),
            str(Path(out) / "report.html"),
        )
    click.echo(f"open {Path(out) / 'report.html'} in a browser")
