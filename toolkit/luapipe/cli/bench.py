"""Job 3 on the command line: ``luapipe bench``, ``luapipe report`` and ``luapipe demo``."""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from jinja2 import TemplateError

from luapipe.cli import _common as common
from luapipe.errors import LuapipeError

__all__ = ["COMMANDS"]

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


def _file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """An output file: an empty path (``--html "$OUT"`` with OUT unset) is a usage error,
    never a run that writes nothing."""
    if value is not None and not value.strip():
        raise click.BadParameter("an empty path: name a file")
    return value


#: in a log, a step that ends this long after the last printed line is printed too
LOG_EVERY_S = 3.0


def _progress() -> Callable[[Any], None]:
    """A live bar on a terminal; in a log (CI, a file) a plain line at each tenth of the run,
    and for any step that ends more than :data:`LOG_EVERY_S` after the last line printed."""
    import time

    last = [float("-inf")]

    def line(p: Any) -> None:
        if not sys.stderr.isatty():
            step = max(1, p.total // 10)
            now = time.monotonic()
            if p.done % step == 0 or p.done >= p.total or now - last[0] >= LOG_EVERY_S:
                click.echo(f"progress {p.done}/{p.total}: {p.label}", err=True)
                last[0] = now
            return
        width = 24
        filled = int(width * p.done / max(p.total, 1))
        bar = "#" * filled + "." * (width - filled)
        click.echo(f"\r[{bar}] {p.done}/{p.total} {p.label[:60]:<60}", nl=False, err=True)
        if p.done >= p.total:
            click.echo("", err=True)

    return line


def _outputs(*paths: str | None) -> list[Path]:
    """Each output file, created now (before a run that may take minutes), so that a path
    nobody can write is refused in one line before any timing. A missing directory is never
    created: it is named, and so is a parent that is a file. Returns the files this created
    (removed again if the run fails: nothing half-written is left)."""
    created: list[Path] = []
    try:
        for path in paths:
            if not path:
                continue
            p = Path(path)
            parent = _directory_of(path)
            existed = p.exists()
            try:
                with open(p, "a"):
                    pass
            except OSError as exc:
                why = exc.strerror or str(exc)
                if isinstance(exc, FileNotFoundError) and parent.is_dir():
                    why += f": {parent} takes no new files"
                raise LuapipeError(f"{path}: cannot write it ({why})") from None
            if not existed:
                created.append(p)
    except BaseException:  # a later path refused: the files made for earlier ones go again
        _drop(created)
        raise
    return created


def _directory_of(path: str) -> Path:
    """The directory ``path`` goes into, which must exist: else a one-line error naming the
    missing directory, or the part of the path that is a file."""
    parent = Path(path).parent
    for above in (parent, *parent.parents):  # the nearest part that exists
        if above.exists():
            if not above.is_dir():
                raise LuapipeError(f"{path}: cannot write it: {above} is a file, not a directory")
            if above != parent:
                raise LuapipeError(
                    f"{path}: cannot write it: directory {parent} does not exist (create it first)"
                )
            break
    return parent


def _drop(created: list[Path]) -> None:
    """Remove the output files made by :func:`_outputs` that the run never filled."""
    for p in created:
        with contextlib.suppress(OSError):
            if p.stat().st_size == 0:
                p.unlink()


#: bench options that --anchors does not take (it runs its own fixed figures)
NOT_WITH_ANCHORS = (
    "rtts",
    "counts",
    "warmup",
    "rounds",
    "contention",
    "batch",
    "rate",
    "seed",
    "directory",
)


def _anchors_alone(ctx: click.Context, specs: tuple[str, ...]) -> None:
    """--anchors reproduces fixed figures: operation names or their options are a mistake."""
    if specs:
        raise click.UsageError(f"--anchors runs its own figures: drop {' '.join(specs)}")
    given = [
        f"--{(p.opts[0] if p.opts else p.name or '').lstrip('-')}"
        for p in ctx.command.params
        if p.name in NOT_WITH_ANCHORS
        and ctx.get_parameter_source(p.name) is click.core.ParameterSource.COMMANDLINE
    ]
    if given:
        raise click.UsageError(f"--anchors runs its own figures: {', '.join(given)} do not apply")


def _finish(
    result: Any,
    json_path: str | None,
    csv_path: str | None,
    html_path: str | None,
    notes: tuple[str, ...] = (),
    *,
    wide: bool = False,
) -> None:
    from luapipe.bench.verdict import method, recommendations
    from luapipe.report import render_table, write_csv, write_html, write_json

    data = result.as_dict() if hasattr(result, "as_dict") else result
    if not data.get("recommendations"):  # a results file of an older luapipe
        data["recommendations"] = recommendations(data["records"], data.get("skipped"))
        data["method"] = data.get("method") or method(data["records"])
    data["notes"] = [*notes, *data.get("notes", [])]
    click.echo(render_table(data, wide=wide))
    for path, writer in ((json_path, write_json), (csv_path, write_csv), (html_path, write_html)):
        if path:
            writer(data, path)
            click.echo(f"wrote {path}", err=True)


#: --wide: the table's every column (the default fits 100 columns)
WIDE = click.option(
    "--wide", is_flag=True, help="every column of the table (default: fits 100 columns)"
)


@click.command()
@click.argument("specs", nargs=-1, callback=common.finite_files)
@common.url_options(
    "Redis to benchmark; it keeps its data: the run writes and then deletes only "
    "luapipe:bench: keys [default: a private redis-server; REDIS_URL is not used]",
    common.TCP_SCHEMES,
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
    "--rounds",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="interleaved (ABAB) rounds; intervals and ties come from them",
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
    "--tasks",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="asyncio tasks per client (requests in flight); > 1 adds the auto-pipelined forms",
)
@click.option(
    "--rate",
    type=float,
    callback=_finite(0, inclusive=False),
    help="open loop: total calls per second",
)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False),
    default=None,
    help="Where a script NAME is looked for [default: ./scripts_lua, else the bundled ones].",
)
@click.option("--no-bystander", is_flag=True, help="skip the bystander GET probe")
@click.option("--anchors", is_flag=True, help="reproduce the published figures instead")
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False),
    help="write results JSON",
    callback=_file,
)
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False), help="write results CSV", callback=_file
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="write an HTML report",
    callback=_file,
)
@WIDE
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
    tasks: int,
    rate: float | None,
    seed: int,
    directory: str | None,
    no_bystander: bool,
    anchors: bool,
    json_path: str | None,
    csv_path: str | None,
    html_path: str | None,
    wide: bool,
) -> None:
    """Benchmark every form of SPEC|NAME|SCRIPT... (default: update_token) across RTT and
    clients. A SCRIPT (x.lua, its x.bench.toml profile, or a script NAME of --dir) is timed
    beside its Function twin and the Python forms its profile names."""
    ctx = click.get_current_context()
    created = _outputs(json_path, csv_path, html_path)  # before a run that may take minutes
    try:
        paths = (json_path, csv_path, html_path)
        _bench(ctx, specs, url, rtts, counts, duration, warmup, rounds, contention, batch, tasks,
               rate, seed, directory, no_bystander, anchors, paths, wide)  # fmt: skip
    except BaseException:
        _drop(created)
        raise


def _bench(
    ctx: click.Context,
    specs: tuple[str, ...],
    url: str | None,
    rtts: tuple[float, ...],
    counts: tuple[int, ...],
    duration: float,
    warmup: float,
    rounds: int,
    contention: str,
    batch: int,
    tasks: int,
    rate: float | None,
    seed: int,
    directory: str | None,
    no_bystander: bool,
    anchors: bool,
    paths: tuple[str | None, str | None, str | None],
    wide: bool,
) -> None:
    from luapipe.bench.opworkload import resolve_workloads
    from luapipe.bench.runner import BenchConfig, run_bench

    if anchors:
        _anchors_alone(ctx, specs)
        from luapipe.bench.anchors import DURATION_S, run_anchors

        given = ctx.get_parameter_source("duration") is click.core.ParameterSource.COMMANDLINE
        with common.bench_server(url) as target:
            rep = run_anchors(
                target, duration_s=duration if given else DURATION_S, progress=_progress()
            )
        click.echo("\n".join(rep.lines()))
        _finish(rep.bench, *paths, tuple(rep.lines()), wide=wide)
        return
    if tasks > 1 and (rate is not None or batch > 1):
        raise click.UsageError("--tasks > 1 runs closed loops of single calls: drop --rate/--batch")
    workloads = resolve_workloads(  # every name and spec checked before a server starts
        list(specs) or ["update_token"],
        contention=contention,
        batch=batch,
        seed=seed,
        scripts_dir=directory,
        tasks=tasks,
    )
    from luapipe.bench.opworkload import shadowed_script

    for name in specs:
        shadow = shadowed_script(name, directory)
        if shadow is not None:
            click.echo(
                f"note: {name} is the built-in or catalogue operation of that name; to bench "
                f"{shadow}, name its file: luapipe bench {shadow}",
                err=True,
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
        tasks=tasks,
    )
    with common.bench_server(url) as target:
        result = run_bench(target, workloads, config, progress=_progress())
    _finish(result, *paths, wide=wide)


@click.command()
@click.argument(
    "results", type=click.Path(exists=True, dir_okay=False), callback=common.finite_files
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="write an HTML report",
    callback=_file,
)
@click.option(
    "--csv", "csv_path", type=click.Path(dir_okay=False), help="write CSV", callback=_file
)
@WIDE
def report(results: str, html_path: str | None, csv_path: str | None, wide: bool) -> None:
    """Render RESULTS.json (from `luapipe bench --json`) as a table, HTML and/or CSV."""
    from luapipe.report import load_results

    data = load_results(results)  # checks the fields the renderers read
    created = _outputs(html_path, csv_path)
    try:
        _finish(data, None, csv_path, html_path, wide=wide)
    except (TypeError, ValueError, KeyError, AttributeError, IndexError, TemplateError) as exc:
        # a shape the checks do not cover (inside calibration, crossovers...): one line
        _drop(created)
        raise LuapipeError(
            f"{results}: cannot render it ({type(exc).__name__}: {exc}); is it a file that "
            "`luapipe bench --json` wrote?"
        ) from None
    except BaseException:  # a write that failed (a full disk), an interrupt
        _drop(created)
        raise


#: the demo: three catalogue operations with one client at three RTTs, the forms that are
#: at stake somewhere (naive, one command per round trip, is not: it shows in the contention
#: slice); 20 rounds, fixed up front
DEMO_OPERATIONS = ("update_token", "reserve_stock", "rate_limit")
DEMO_FORMS = ("pipelined", "transaction", "script", "function")
DEMO_RTTS_MS = (0.0, 0.25, 1.0)
DEMO_ROUNDS = 20
#: and at RTT 0 in each round the forms take turns of 16 calls for three times a form's
#: slice (there the host's stalls dominate a call)
DEMO_TURNS = 3.0
#: its contention slice: the operations whose writes depend on their reads, every form, 4
#: clients on one hot key each at RTT 0, so lost updates show where they happen
DEMO_HOT = ("reserve_stock", "rate_limit")
DEMO_HOT_CLIENTS = 4
DEMO_HOT_ROUNDS = 6


def demo_parts(duration: float) -> list[tuple[list[Any], Any]]:
    """What `luapipe demo` measures: the 1-client sweep, then the contention slice (no
    bystander probe: the demo's table does not show it, and it would compete for the CPU)."""
    from luapipe.bench.opworkload import catalogue_dir, resolve_workloads, with_forms
    from luapipe.bench.runner import BenchConfig

    def known(names: tuple[str, ...]) -> list[str]:
        return [n for n in names if n == "update_token" or (catalogue_dir() / f"{n}.toml").exists()]

    sweep = BenchConfig(rtts_ms=DEMO_RTTS_MS, duration_s=duration, warmup_s=0.05,
                        rounds=DEMO_ROUNDS, bystander=False, turns=DEMO_TURNS)  # fmt: skip
    hot = BenchConfig(rtts_ms=(0.0,), clients=(DEMO_HOT_CLIENTS,), duration_s=duration / 2,
                      warmup_s=0.05, rounds=DEMO_HOT_ROUNDS, bystander=False)  # fmt: skip
    first = [with_forms(w, DEMO_FORMS) for w in resolve_workloads(known(DEMO_OPERATIONS))]
    return [(first, sweep), (resolve_workloads(known(DEMO_HOT), contention="hot"), hot)]


@click.command()
@common.url_options(
    "Redis to use; it keeps its data: only luapipe:bench: keys are written and deleted "
    "[default: a private redis-server; REDIS_URL is not used]",
    common.TCP_SCHEMES,
)
@click.option("--out", default="demo-out", show_default=True, type=click.Path(file_okay=False))
@click.option(
    "--duration",
    type=float,
    default=0.6,
    show_default=True,
    callback=_finite(0, inclusive=False),
    help="timed s per form and RTT (in 20 rounds)",
)
@WIDE
def demo(url: str | None, out: str, duration: float, wide: bool) -> None:
    """A one-minute tour: three catalogue operations in every form at RTT 0, 0.25 and 1 ms
    with one client, then 4 clients on hot keys, ending in the verdicts and a report."""
    from luapipe.bench.runner import run_bench

    folder = Path(out)
    made = not folder.is_dir()
    if made:
        if folder.exists():
            raise click.BadParameter(f"{out} is a file", param_hint="--out")
        _directory_of(out)  # the demo makes its folder, never the folders above it
        folder.mkdir()
    paths = [str(folder / n) for n in ("results.json", "results.csv", "report.html")]
    try:
        created = _outputs(*paths)
    except BaseException:
        if made:
            folder.rmdir()
        raise
    (first, sweep), (hot, contended) = demo_parts(duration)
    try:
        with common.bench_server(url) as target:
            click.echo(
                f"benchmarking {', '.join(w.name for w in first)} at RTT 0, 0.25 and 1 ms with "
                f"1 client, then {', '.join(w.name for w in hot)} with {DEMO_HOT_CLIENTS} clients "
                "on hot keys (update_token's writes do not depend on its reads: it has no update "
                "to lose)",
                err=True,
            )
            result = run_bench(target, first, sweep, progress=_progress(),
                               also=[(hot, contended)])  # fmt: skip
            _finish(result, paths[0], paths[1], paths[2], wide=wide)
    except BaseException:
        _drop(created)
        if made:  # the folder it made, if nothing else went into it
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise
    click.echo(f"open {folder / 'report.html'} in a browser")


COMMANDS = (bench, report, demo)
