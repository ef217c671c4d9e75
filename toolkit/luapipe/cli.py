"""The ``luapipe`` command: a thin click shell over the library.

Each command parses options, calls one library function, renders the result and turns a
:class:`~luapipe.errors.LuapipeError` into one line on stderr and exit code 1 (click's
usage errors exit 2). This is the only module that imports click or prints.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import redis

from luapipe.connect import client_from_url, resolve_url
from luapipe.deploy import LOCK_NAME, deploy
from luapipe.errors import LuapipeError, mask_url
from luapipe.lint import lint_scripts, luac_available
from luapipe.loader import discover
from luapipe.registry import ScriptRegistry, bundled_scripts_dir

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
    for row in rows:
        keys = "unchecked" if row["keys"] is None else ", ".join(row["keys"]) or "-"
        args = "unchecked" if row["args"] is None else ", ".join(row["args"]) or "-"
        flags = f"  [{', '.join(row['flags'])}]" if row["flags"] else ""
        click.echo(f"{row['name']:<20} {row['sha'][:12]}  keys: {keys}  args: {args}{flags}")


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
        click.echo(f"{len(found)} scripts, {len(issues)} problems{note}", err=True)
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
    for name, sha in shas.items():
        click.echo(f"{name:<20} {sha}")


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
        for n in nodes:
            for s in n.scripts:
                click.echo(
                    f"{n.node}  {s.name:<20} {s.sha[:12]}  {'loaded' if s.loaded else 'MISSING'}"
                )
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
@dir_option
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
    """Load every script on the server and write the lock file (name -> SHA)."""
    reg = _registry(directory)
    lock_path = (
        Path(lock) if lock else (Path(directory) if directory else _registry_dir()) / LOCK_NAME
    )
    report = deploy(reg, _client(url), lock_path, check=check)
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
        for name, sha in report.scripts:
            click.echo(f"{name:<20} {sha}")
        state = "written" if report.lock_written else "unchanged"
        nodes = ", ".join(report.nodes)
        click.echo(
            f"deployed {len(report.scripts)} scripts to {nodes}; lock {report.lock_path} {state}"
        )
    if not report.ok:
        sys.exit(1)


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
    from luapipe.generate import generate_files

    for result in generate_files(specs, out, py_out):
        state = "written" if result.changed else "unchanged"
        click.echo(f"{result.lua}  {result.python}  ({state})")


@main.command("verify")
@click.argument("specs", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--url", default=None, help="Redis URL [default: a private embedded server].")
@click.option("--fake", is_flag=True, help="Use an in-process fakeredis server.")
@click.option("--cases", default=200, show_default=True, type=click.IntRange(1))
@click.option("--seed", default=1, show_default=True, type=int)
@handle_errors
def verify_cmd(specs: tuple[str, ...], url: str | None, fake: bool, cases: int, seed: int) -> None:
    """Prove the forms of each SPEC agree: same replies, same keyspace (exit 1 if not)."""
    import contextlib

    from luapipe.verify import verify_files

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
def _floats(text: str, what: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{what} must be comma-separated numbers, not {text!r}") from None
    if not values or any(v < 0 for v in values):
        raise click.BadParameter(f"{what} must be one or more numbers >= 0")
    return values


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
    """The server to benchmark: ``--url``/REDIS_URL, else a private embedded redis-server."""
    import contextlib
    import os

    from luapipe.bench.server import EmbeddedRedis

    url = url or os.environ.get("REDIS_URL")
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
    from luapipe.recommend import recommend
    from luapipe.report import render_table, write_csv, write_html, write_json

    data = result.as_dict() if hasattr(result, "as_dict") else result
    recs = recommend(data["records"], data.get("skipped"))
    data["recommendations"] = [r.as_dict() for r in recs]
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
@click.option("--url", help="Redis to benchmark (default: REDIS_URL, else a private server)")
@click.option("--rtt", default="0", show_default=True, help="simulated RTTs in ms, comma-separated")
@click.option("--clients", default="1", show_default=True, help="clients, comma-separated")
@click.option("--duration", type=float, default=2.0, show_default=True, help="timed s per form")
@click.option("--warmup", type=float, default=0.3, show_default=True, help="discarded s per form")
@click.option("--rounds", type=int, default=4, show_default=True, help="ABAB rounds per form")
@click.option("--contention", default="spread", show_default=True, help="hot | spread | zipf:S")
@click.option(
    "--batch",
    type=int,
    default=1,
    show_default=True,
    help="ops per call (one server): N operations batched as each form allows",
)
@click.option("--rate", type=float, help="open loop: total calls per second")
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
    rtt: str,
    clients: str,
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

    rtts = _floats(rtt, "--rtt")
    counts = tuple(int(c) for c in _floats(clients, "--clients"))
    if any(c < 1 for c in counts) or duration <= 0 or rounds < 1 or batch < 1:
        raise click.BadParameter("clients, duration, rounds and batch must be positive")
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
@click.option("--url", help="Redis to use (default: a private redis-server)")
@click.option("--out", default="demo-out", show_default=True, type=click.Path(file_okay=False))
@click.option("--duration", type=float, default=0.8, show_default=True, help="timed s per form")
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
