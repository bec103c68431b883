"""The benchmark harness runs end to end at tiny sizes and writes every table.

Timings are not asserted: they depend on the machine. What is checked is that one
command measures the store, the raw floors (and the peers when installed) on SQLite and
Postgres, and that the report and the JSON hold every measure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import PG_URL, drop_pg_database, require_pg
from sqlalchemy.engine import make_url

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.report import TABLE_TITLES  # noqa: E402

MEASURES = {"append_single", "append_batch", "view", "view_memory", "decision"}


def _run(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--smoke",
            "--out",
            str(tmp_path / "out"),
            "--workdir",
            str(tmp_path / "db"),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )


@pytest.fixture
def bench_pg_url() -> Iterator[str]:
    """Databases of their own for one run (the harness drops and recreates them by name),
    so concurrent test runs never drop each other's."""
    require_pg()
    name = f"{make_url(PG_URL).database}_bench_{uuid.uuid4().hex[:8]}"
    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    yield url
    for suffix in ("", "_adk", "_openai"):
        drop_pg_database(make_url(url).set(database=name + suffix).render_as_string(False))


def test_smoke_run_writes_every_table_for_both_backends(tmp_path: Path, bench_pg_url: str) -> None:
    proc = _run(tmp_path, "--pg-url", bench_pg_url)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "", "progress belongs on stderr"
    assert "done in" in proc.stderr

    report = (tmp_path / "out" / "RESULTS.md").read_text()
    for title in TABLE_TITLES:
        assert title in report, title
    for backend in ("| sqlite |", "| postgres |"):
        assert backend in report
    assert "(not measured)" not in report
    assert "smoke mode" in report
    # Every target has a verdict line, and the peers either ran or were skipped by name.
    assert report.count("**pass**") + report.count("**FAIL**") >= 10
    for peer in ("google-adk", "openai-agents"):
        assert peer in report

    data = json.loads((tmp_path / "out" / "results.json").read_text())
    assert data["mode"] == "smoke"
    assert data["machine"]["postgres"]
    assert data["machine"]["sqlite"]
    seen = {(s["measure"], s["backend"]) for s in data["samples"]}
    for measure in MEASURES:
        for backend in ("sqlite", "postgres"):
            assert (measure, backend) in seen, (measure, backend)
    subjects = {s["subject"] for s in data["samples"] if s["measure"] == "append_single"}
    assert {"eventstore", "sqlite3", "psycopg", "driver, store's SQL"} <= subjects
    batch = {s["subject"] for s in data["samples"] if s["measure"] == "append_batch"}
    assert {"eventstore", "sqlite3 executemany", "psycopg executemany", "psycopg COPY"} <= batch
    assert "driver, store's rows" in batch
    assert "store's rows via driver" in report
    # Every repetition is kept, with its individual latencies.
    reps = [s for s in data["samples"] if s["measure"] == "append_single"]
    assert all(len(s["values"]["latencies_ms"]) == 5 for s in reps)
    assert {t["backend"] for t in data["targets"]} == {"sqlite", "postgres"}
    assert set(data["profiles"]) == {"sqlite", "postgres"}
    # The view keeps the same tail at every size: that is what makes it comparable.
    views = [s for s in data["samples"] if s["measure"] == "view" and s["subject"] == "eventstore"]
    assert len({s["values"]["messages"] for s in views}) == 1

    for peer in ("google-adk", "openai-agents"):
        ran = any(s["subject"] == peer for s in data["samples"])
        skipped = any(peer in n and "skipped" in n for n in data["notes"])
        assert ran != skipped, (peer, data["notes"])

    # The report can be rewritten from the saved JSON alone, identically.
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--render",
            str(tmp_path / "out" / "results.json"),
            "--out",
            str(tmp_path / "again"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert (tmp_path / "again" / "RESULTS.md").read_text() == report


def test_unreachable_postgres_is_skipped_with_the_reason(tmp_path: Path) -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1:1/nothing_bench"
    proc = _run(tmp_path, "--pg-url", url, "--no-peers")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = (tmp_path / "out" / "RESULTS.md").read_text()
    assert "postgres: skipped" in report
    assert "| sqlite | 100 |" in report and "| postgres | 100 |" not in report


def test_refuses_to_drop_a_database_not_named_for_benchmarks(tmp_path: Path) -> None:
    # The name is checked before connecting, so this needs no server.
    proc = _run(tmp_path, "--pg-url", PG_URL, "--no-peers")
    assert proc.returncode != 0
    assert "must contain 'bench'" in proc.stderr


def test_concurrency_smoke_reports_store_and_floor_per_writer_count(
    tmp_path: Path, bench_pg_url: str
) -> None:
    out = tmp_path / "conc"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "concurrency",
            "--smoke",
            "--writers",
            "1,2",
            "--seconds",
            "0.5",
            "--out",
            str(out),
            "--pg-url",
            bench_pg_url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "concurrency.json").read_text())
    seen = {(r["backend"], r["kind"], r["writers"]) for r in data["rows"]}
    assert seen == {
        (b, k, n) for b in ("sqlite", "postgres") for k in ("threads", "processes") for n in (1, 2)
    }
    for r in data["rows"]:
        assert r["store_appends_per_s"] > 0 and r["raw_inserts_per_s"] > 0
    table = (out / "CONCURRENCY.md").read_text()
    assert table.count("| postgres |") == 4 and table.count("| sqlite |") == 4
    # CPU per append on each side: the server runs on this machine, so its share is read.
    cpu = {r["subject"]: r for r in data["cpu_per_append"]}
    assert set(cpu) == {"eventstore", "raw insert"}
    for r in cpu.values():
        assert r["appends"] == 1_000 and r["client_cpu_ms"] > 0
        assert r["server_cpu_ms"] is not None and r["server_cpu_ms"] >= 0
    assert "## CPU per append (Postgres, one writer)" in table
    assert "| eventstore |" in table and "| raw insert |" in table


def test_concurrency_rejects_bad_writer_counts(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "concurrency", "--writers", "0", "--no-postgres"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and "--writers" in done.stderr


def test_search_smoke_finds_the_pruned_phrase_on_both_backends(
    tmp_path: Path, bench_pg_url: str
) -> None:
    out = tmp_path / "search"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "search",
            "--smoke",
            "--events",
            "600",
            "--repeat",
            "2",
            "--out",
            str(out),
            "--pg-url",
            bench_pg_url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr
    data = json.loads((out / "search.json").read_text())
    assert [r["backend"] for r in data["results"]] == ["sqlite", "postgres"]
    for r in data["results"]:
        assert r["found_pruned_phrase"] and r["indexed"] == 601
        assert {q["hits"] for q in r["queries"][:2]} == {1}
        assert all(q["median_ms"] > 0 for q in r["queries"])
    # One table row per query of each backend.
    table = (out / "SEARCH.md").read_text()
    for r in data["results"]:
        assert len(r["queries"]) >= 5  # the rare phrase (twice), common word, two words, rare word
        assert table.count(f"| {r['backend']} |") == len(r["queries"])


def test_scale_smoke_loads_both_databases_measures_and_drops_them(
    tmp_path: Path, bench_pg_url: str
) -> None:
    import psycopg

    out = tmp_path / "scale"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "scale",
            "--smoke",
            "--events",
            "1200",
            "--sessions",
            "60",
            "--baseline",
            "200",
            "--partitions",
            "4",
            "--out",
            str(out),
            "--pg-url",
            bench_pg_url,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "large: 1,200/1,200 events (100.0%)" in done.stderr, "the load's progress line"
    data = json.loads((out / "scale.json").read_text())
    assert data["settings"]["events_per_session"] == 20
    assert data["load_large"]["events"] == 1200 and data["load_small"]["events"] == 200
    assert data["size_large"]["database_bytes_per_event"] > 0
    assert data["size_large"]["events_and_parts_bytes_per_event"] > 0
    rows = {m["measure"]: m for m in data["measures"]}
    assert len(rows) == 4 and all(m["large_p50_ms"] > 0 for m in rows.values())
    assert rows["view (50-event tail)"]["goal"] == "<= 1.2x"
    report = (out / "SCALE.md").read_text()
    assert "| verify one session |" in report and "bytes per event" in report
    try:
        import starlette  # noqa: F401
    except ImportError:
        assert data.get("viewer") in (None, [])
    else:  # every viewer page kind answered 200 on the large database
        routes = {t["route"] for t in data["viewer"]}
        assert {
            "/",
            "/?q=no-such-title",
            "/sessions/ID/view",
            "/sessions/ID/export.jsonl",
        } <= routes
        assert "| `/sessions/ID/events` |" in report
    name = make_url(bench_pg_url).database
    admin = make_url(bench_pg_url).set(database="postgres", drivername="postgresql")
    with psycopg.connect(admin.render_as_string(hide_password=False)) as conn:
        left = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (f"{name}%",)
        ).fetchall()
    assert left == [], "the benchmark drops both of its databases"
