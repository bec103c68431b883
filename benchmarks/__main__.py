"""``python -m benchmarks``: measure the store, its raw floors and its peers in one run.

Other benchmarks, each with a ``--smoke`` mode: ``quality`` (condensation quality, see
:mod:`benchmarks.quality_report`), ``concurrency`` (concurrent writers,
:mod:`benchmarks.concurrency`), ``search`` (full-text search over one long session,
:mod:`benchmarks.search`), ``adk`` (ADK ``get_session`` on short and long sessions, the
``adk`` extra, :mod:`benchmarks.adk`), ``mcp`` (the MCP server's tools at 100k events, the
``mcp`` extra, :mod:`benchmarks.mcp`), ``langgraph`` (checkpoint storage against
LangGraph's own savers, the ``langgraph`` extra, :mod:`benchmarks.langgraph`),
``importers`` (importing coding-agent transcripts, :mod:`benchmarks.importers`),
``citus`` (a Citus cluster against plain Postgres, :mod:`benchmarks.citus`), ``scale``
(ten million events on one hash-partitioned Postgres against 100k, :mod:`benchmarks.scale`)
and ``tail`` (the 50-event-tail view against the OpenAI Agents SDK's ``get_items(50)``,
:mod:`benchmarks.tail`).

Writes ``RESULTS.md`` and ``results.json`` (the full mode into ``benchmarks/``, the quick
and smoke modes into ``benchmarks/<mode>-results/`` unless ``--out`` says otherwise).
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from .harness import (
    MODES,
    Recorder,
    Settings,
    load_average,
    log,
    machine_info,
    package_versions,
    recorder_from_json,
)
from .measures import Backend, run_store
from .peers import ADK, OPENAI, run_peers
from .raw import RawPostgres, RawSQLite, pg_autovacuum, pg_conninfo
from .report import evaluate_targets, render

DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench"
HERE = Path(__file__).resolve().parent
PROFILE_APPENDS = {"full": 300, "quick": 100, "smoke": 20}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    mode.add_argument("--smoke", action="store_true", help="tiny sizes (tests the harness)")
    p.add_argument("--out", type=Path, help="directory for RESULTS.md and results.json")
    p.add_argument(
        "--pg-url",
        default=os.environ.get("EVENTSTORE_BENCH_PG_URL", DEFAULT_PG_URL),
        help="Postgres URL (EVENTSTORE_BENCH_PG_URL); its database and two siblings "
        "suffixed _adk and _openai are dropped and recreated",
    )
    p.add_argument("--no-postgres", action="store_true", help="SQLite only")
    p.add_argument("--no-peers", action="store_true", help="skip the peer session stores")
    p.add_argument("--workdir", type=Path, help="where SQLite files go (default: a temp dir)")
    p.add_argument(
        "--render",
        type=Path,
        metavar="RESULTS_JSON",
        help="only rewrite RESULTS.md from a saved results.json (no measuring)",
    )
    return p.parse_args(argv)


def _prepare_postgres(url: str) -> tuple[str, dict[str, str]]:
    """Drop and recreate the benchmark databases; return the server version and URLs."""
    import psycopg

    u = make_url(url).set(drivername="postgresql+psycopg")
    name = u.database or ""
    if "bench" not in name:
        raise SystemExit(
            f"refusing to drop database {name!r}: the benchmark recreates its databases, so "
            "the name must contain 'bench' (set EVENTSTORE_BENCH_PG_URL or --pg-url)"
        )
    names = {"store": name, ADK: f"{name}_adk", OPENAI: f"{name}_openai"}
    admin = pg_conninfo(u.set(database="postgres").render_as_string(hide_password=False))
    with psycopg.connect(**admin, autocommit=True) as conn:
        version = str(conn.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        for db in names.values():
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{db}"')
    urls = {
        key: (u if key == "store" else u.set(drivername="postgresql+asyncpg"))
        .set(database=db)
        .render_as_string(hide_password=False)
        for key, db in names.items()
    }
    return version, urls


def _backends(
    args: argparse.Namespace, workdir: Path, rec: Recorder
) -> tuple[list[Backend], str | None]:
    sqlite = Backend(
        name="sqlite",
        store_url=f"sqlite:///{workdir / 'eventstore.db'}",
        make_raw=lambda: RawSQLite(workdir / "raw.db"),
        peer_urls={
            ADK: f"sqlite+aiosqlite:///{workdir / 'adk.db'}",
            OPENAI: f"sqlite+aiosqlite:///{workdir / 'openai.db'}",
        },
    )
    out = [sqlite]
    pg_version = None
    if args.no_postgres:
        rec.note("postgres: skipped (--no-postgres)")
        return out, None
    try:
        pg_version, urls = _prepare_postgres(args.pg_url)
    except SystemExit:
        raise
    except Exception as exc:
        shown = make_url(args.pg_url).render_as_string(hide_password=True)
        rec.note(f"postgres: skipped: {shown} unavailable ({type(exc).__name__}: {exc})")
        return out, None
    store_url = urls["store"]
    out.append(
        Backend(
            name="postgres",
            store_url=store_url,
            make_raw=lambda: RawPostgres(store_url),
            peer_urls={ADK: urls[ADK], OPENAI: urls[OPENAI]},
        )
    )
    return out, pg_version


def _profile(backend: Backend, settings: Settings) -> dict[str, Any]:
    from eventstore import EventStore

    from .profiling import profile_append

    store = EventStore(backend.store_url, upgrade=True)
    try:
        return profile_append(store, PROFILE_APPENDS[settings.mode], settings.batch)
    finally:
        store.close()


def _render_only(path: Path, out: Path | None) -> int:
    data = json.loads(path.read_text())
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in data["settings"].items()}
    settings = Settings(**fields)
    rec = recorder_from_json(data)
    targets = evaluate_targets(rec, settings)
    data["targets"] = [asdict(t) for t in targets]
    dest = out or path.parent
    dest.mkdir(parents=True, exist_ok=True)
    text = render(
        rec,
        settings,
        data["machine"],
        data["packages"],
        targets,
        data["profiles"],
        _command(settings),
    )
    (dest / "RESULTS.md").write_text(text)
    (dest / "results.json").write_text(json.dumps(data, indent=1) + "\n")
    log(f"rewrote {dest / 'RESULTS.md'} from {path}")
    return 0


def _command(settings: Settings) -> str:
    flag = {"full": "", "quick": " --quick", "smoke": " --smoke"}[settings.mode]
    return "python -m benchmarks" + flag


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["quality"]:
        from .quality_report import main as quality_main

        return quality_main(argv[1:])
    if argv[:1] == ["concurrency"]:
        from .concurrency import main as concurrency_main

        return concurrency_main(argv[1:])
    if argv[:1] == ["adk"]:
        from .adk import main as adk_main

        return adk_main(argv[1:])
    if argv[:1] == ["mcp"]:
        from .mcp import main as mcp_main

        return mcp_main(argv[1:])
    if argv[:1] == ["langgraph"]:
        from .langgraph import main as langgraph_main

        return langgraph_main(argv[1:])
    if argv[:1] == ["importers"]:
        from .importers import main as importers_main

        return importers_main(argv[1:])
    if argv[:1] == ["citus"]:
        from .citus import main as citus_main

        return citus_main(argv[1:])
    if argv[:1] == ["scale"]:
        from .scale import main as scale_main

        return scale_main(argv[1:])
    if argv[:1] == ["tail"]:
        from .tail import main as tail_main

        return tail_main(argv[1:])
    if argv[:1] == ["search"]:
        from .search import main as search_main

        return search_main(argv[1:])
    args = _parse(argv)
    if args.render:
        return _render_only(args.render, args.out)
    settings = MODES["smoke" if args.smoke else "quick" if args.quick else "full"]
    out = args.out or (HERE if settings.mode == "full" else HERE / f"{settings.mode}-results")
    out.mkdir(parents=True, exist_ok=True)
    own_workdir = args.workdir is None
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="eventstore-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    for f in workdir.glob("*.db*"):
        f.unlink()
    rec = Recorder()
    started = time.perf_counter()
    try:
        backends, pg_version = _backends(args, workdir, rec)
        machine = machine_info(workdir, pg_version)
        if pg_version is not None:
            machine["postgres_autovacuum"] = pg_autovacuum(backends[-1].store_url)
            machine["postgres_analyze"] = (
                "run by the harness after each build (every 20,000 events)"
            )
        log(f"{settings.mode} mode; SQLite files in {workdir}; results to {out}")
        profiles: dict[str, Any] = {}
        for backend in backends:
            run_store(backend, settings, rec)
            if args.no_peers:
                rec.note(f"{backend.name}: peers skipped (--no-peers)")
            else:
                run_peers(backend.peer_urls, settings, rec, backend.name)
            profiles[backend.name] = _profile(backend, settings)
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)
    targets = evaluate_targets(rec, settings)
    packages = package_versions()
    command = _command(settings)
    machine["duration_s"] = round(time.perf_counter() - started, 1)
    machine["load_average_at_end"] = load_average()
    (out / "RESULTS.md").write_text(
        render(rec, settings, machine, packages, targets, profiles, command)
    )
    rec.extra.update(
        mode=settings.mode,
        settings=asdict(settings),
        machine=machine,
        packages=packages,
        targets=[asdict(t) for t in targets],
        profiles=profiles,
    )
    (out / "results.json").write_text(json.dumps(rec.to_json(), indent=1) + "\n")
    failed = [t for t in targets if t.passed is False]
    log(
        f"done in {machine['duration_s']:.0f}s: {out / 'RESULTS.md'}; "
        f"{sum(t.passed is True for t in targets)} targets passed, {len(failed)} missed"
    )
    for t in failed:
        log(f"missed: {t.backend}: {t.name}: {t.measured} (goal {t.goal})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
