"""``python -m benchmarks importers [--smoke] [--mb N]``: importing coding-agent transcripts.

Synthesises about ``--mb`` megabytes (default 100) of Claude Code, Codex CLI and Gemini CLI
transcripts from the real samples under ``tests/data/transcripts`` (each file repeats a
sample's records under a new session id, with fresh record, message and tool ids), then
imports the whole directory with :func:`eventstore.importers.import_transcript` on SQLite
(and Postgres unless ``--no-postgres``), file by file as ``eventstore import DIR`` does.

Measured: events written per second (wall time of the import, conversion included), bytes
per second, and the peak resident memory of a separate process doing the import (streamed
in batches, so it stays flat as the files grow). A second import of the same directory is
timed too: it converts everything again and writes nothing ("up to date"). Then the same
process times the stages on their own (parsing the lines, converting the records, encoding
the events), which with the first import's CPU time say where each event's CPU time goes.

Writes ``IMPORTERS.md`` and ``importers.json`` (into ``benchmarks/``, or
``benchmarks/smoke-results/`` with ``--smoke``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from eventstore.importers import default_jobs
from eventstore.importers._pipeline import AUTO_MIN_BYTES

from .harness import load_average, machine_info, package_versions
from .raw import fresh_pg_database

HERE = Path(__file__).resolve().parent
DATA = HERE.parent / "tests" / "data" / "transcripts"
SOURCES = {
    "claude-code": DATA / "claude-code" / "vibecodingtracker-claude_code.jsonl",
    "codex": DATA / "codex" / "vibecodingtracker-codex.jsonl",
    "gemini-cli": DATA / "gemini-cli" / "vibecodingtracker-gemini.jsonl",
}
SHARE = {"claude-code": 0.6, "codex": 0.3, "gemini-cli": 0.1}
FILE_MB = 5
DEFAULT_PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/eventstore_bench"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks importers", description=__doc__)
    p.add_argument("--smoke", action="store_true", help="about 2 MB of transcripts")
    p.add_argument("--mb", type=float, default=None, help="megabytes to synthesise (100)")
    p.add_argument("--out", type=Path)
    p.add_argument("--no-postgres", action="store_true")
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="processes for the import (default: as `eventstore import` picks them)",
    )
    p.add_argument("--pg-url", default=os.environ.get("EVENTSTORE_BENCH_PG_URL", DEFAULT_PG_URL))
    return p.parse_args(argv)


# --------------------------------------------------------------------------- synthesis


def _fresh_ids(value: Any, suffix: str, keys: set[str]) -> Any:
    """``value`` with every id-like string field suffixed (ids stay unique per copy)."""
    if isinstance(value, dict):
        return {
            k: (
                f"{v}-{suffix}" if k in keys and isinstance(v, str) else _fresh_ids(v, suffix, keys)
            )
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_fresh_ids(v, suffix, keys) for v in value]
    return value


_ID_KEYS = {
    "claude-code": {"uuid", "parentUuid", "id", "tool_use_id", "requestId", "messageId"},
    "codex": {"call_id", "id"},
    "gemini-cli": {"id"},
}


def synthesise(folder: Path, megabytes: float) -> dict[str, Any]:
    """Write transcripts totalling about ``megabytes`` into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    written = {"files": 0, "bytes": 0}
    for fmt, src in SOURCES.items():
        records = [json.loads(x) for x in src.read_text(encoding="utf-8").splitlines() if x.strip()]
        budget = megabytes * SHARE[fmt] * 1_000_000
        while budget > 0:
            sid = str(uuid.uuid4())
            path = folder / fmt / f"{sid}.jsonl"
            path.parent.mkdir(exist_ok=True)
            size = 0
            copy = 0
            with path.open("w", encoding="utf-8") as fp:
                while size < min(budget, FILE_MB * 1_000_000):
                    copy += 1
                    for n, rec in enumerate(records):
                        rec = _fresh_ids(rec, str(copy), _ID_KEYS[fmt])
                        if fmt == "claude-code":
                            rec["sessionId"] = sid
                        elif fmt == "codex" and rec.get("type") == "session_meta":
                            if copy > 1:
                                continue  # one header per rollout
                            rec["payload"]["id"] = sid
                        elif fmt == "gemini-cli" and n == 0:
                            if copy > 1:
                                continue
                            rec["sessionId"] = sid
                        line = json.dumps(rec, ensure_ascii=False) + "\n"
                        fp.write(line)
                        size += len(line.encode("utf-8"))
            budget -= size
            written["files"] += 1
            written["bytes"] += size
    return written


# --------------------------------------------------------------------------- measuring


_CHILD = """
import json, resource, sys, time
from eventstore import EventStore
from eventstore.importers import import_files, transcripts_under
store = EventStore(sys.argv[1], upgrade=True)
jobs = int(sys.argv[3])
out = []
def cpu(who=resource.RUSAGE_SELF):
    u = resource.getrusage(who)
    return u.ru_utime + u.ru_stime
for attempt in ("first", "again"):
    events = 0
    start, cpu0, workers0 = time.perf_counter(), cpu(), cpu(resource.RUSAGE_CHILDREN)
    # The formats are detected as the import goes, as `eventstore import DIR` does.
    files = [(path, None) for path in transcripts_under(sys.argv[2])]
    for path, done in import_files(store, files, jobs=jobs):
        if isinstance(done, Exception):
            raise done
        events += sum(r.events for r in done)
    writer = cpu() - cpu0
    workers = cpu(resource.RUSAGE_CHILDREN) - workers0  # the workers have exited: counted
    out.append({"run": attempt, "events": events, "seconds": time.perf_counter() - start,
                "cpu_seconds": writer + workers, "writer_cpu_seconds": writer})
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
# Where the CPU time goes, stage by stage, over the same files, streamed as the import
# streams them: reading and parsing the lines alone, then converting each record and
# encoding the events in batches of 1,000 (the conversion timed without the parsing).
from eventstore._append import encode as encode_events
from eventstore.importers._agent import Torn
from eventstore.importers._collection import fewer_collections
from eventstore.importers._keyed import (
    AGENT_FORMATS, detect_agent_format, first_time, source_records,
)
stages = {"parse": 0.0, "convert": 0.0, "encode": 0.0}
pause = fewer_collections()  # the collector as the import sets it
pause.__enter__()
def encode_timed(events):
    cpu0 = cpu()
    list(encode_events(store, events))
    stages["encode"] += cpu() - cpu0
for path in transcripts_under(sys.argv[2]):
    fmt = detect_agent_format(path)
    cpu0 = cpu()
    for _ in source_records(path, fmt, [0]):
        pass
    stages["parse"] += cpu() - cpu0
    conv = AGENT_FORMATS[fmt](path)
    conv.when = first_time(path) or conv.when
    batch = []
    for rec in source_records(path, fmt, [0]):
        if isinstance(rec, Torn):
            break
        cpu0 = cpu()
        conv.push(*rec)
        batch += [item.event for item in conv.drain()]
        stages["convert"] += cpu() - cpu0
        if len(batch) >= 1000:
            encode_timed(batch)
            batch = []
    cpu0 = cpu()
    conv.finish()
    batch += [item.event for item in conv.drain()]
    stages["convert"] += cpu() - cpu0
    encode_timed(batch)
pause.__exit__(None, None, None)
print(json.dumps({"runs": out, "peak_rss_kb": peak, "stages": stages}))
"""


def measure(backend: str, url: str, folder: Path, total_bytes: int, jobs: int) -> dict[str, Any]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, url, str(folder), str(jobs)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    peak_all = _RssSampler(proc.pid)
    peak_all.start()
    stdout, stderr = proc.communicate()
    peak_all.stop()
    if proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, "import", stdout, stderr)
    data = json.loads(stdout.strip().splitlines()[-1])
    first, again = data["runs"]
    return {
        "backend": backend,
        "jobs": jobs,
        "events": first["events"],
        "seconds": round(first["seconds"], 3),
        "events_per_second": round(first["events"] / first["seconds"]),
        "cpu_seconds": round(first["cpu_seconds"], 3),
        "writer_cpu_seconds": round(first["writer_cpu_seconds"], 3),
        "events_per_cpu_second": round(first["events"] / max(first["cpu_seconds"], 1e-9)),
        "mb_per_second": round(total_bytes / 1e6 / first["seconds"], 2),
        "reimport_seconds": round(again["seconds"], 3),
        "reimport_cpu_seconds": round(again["cpu_seconds"], 3),
        "reimport_events": again["events"],
        "peak_rss_mb": round(data["peak_rss_kb"] / 1024, 1),
        "peak_rss_all_mb": round(peak_all.peak_kb / 1024, 1),
        "stage_cpu_seconds": {k: round(v, 3) for k, v in data["stages"].items()},
    }


class _RssSampler(threading.Thread):
    """The largest sum of the resident memory of a process and its descendants, sampled
    every 50 ms (from outside: the sampling costs the measured processes nothing)."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.peak_kb = pid, 0
        self._done = threading.Event()

    def stop(self) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        while not self._done.wait(0.05):
            self.peak_kb = max(self.peak_kb, _tree_rss_kb(self.pid))


def _tree_rss_kb(root: int) -> int:
    parents: dict[int, int] = {}
    rss: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pid = int(entry.name)
        parents[pid] = int(fields.get("PPid", "0").strip() or 0)
        rss[pid] = int((fields.get("VmRSS", "0 kB").split() or ["0"])[0])
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parents.items() if pp in tree and p not in tree}
        tree |= more
        grew = bool(more)
    return sum(rss.get(p, 0) for p in tree)


def default_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _baseline_rss() -> float:
    """Peak memory of a process that only imports the library (for comparison)."""
    code = (
        "import resource, eventstore.importers, eventstore.store;"
        "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return round(int(out.stdout.strip()) / 1024, 1)


def render(data: dict[str, Any]) -> str:
    lines = [
        "# Importing coding-agent transcripts",
        "",
        f"{data['files']} transcripts, {data['bytes'] / 1e6:.1f} MB, synthesised from the real "
        "Claude Code (60%), Codex CLI (30%) and Gemini CLI (10%) samples under "
        "`tests/data/transcripts` (`python -m benchmarks importers"
        + (" --smoke" if data["smoke"] else "")
        + "`). The directory is imported as `eventstore import DIR` does it, with "
        f"{_jobs_text(data['results'][0].get('jobs', 1))} (appends of 1,000 events), then "
        "imported again (everything converted again, nothing written). Events "
        f"average {data['bytes'] / max(1, data['results'][0]['events']):,.0f} bytes of "
        "transcript each: these sessions read and write whole files.",
        "",
        "| backend | jobs | events | seconds | events/s | CPU s | events per CPU s | writer CPU s "
        "| MB/s | re-import (s) | re-import CPU s | peak RSS, all processes (MB) "
        "| writer peak RSS (MB) | load average before, after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in data["results"]:
        lines.append(
            f"| {r['backend']} | {r.get('jobs', 1)} | {r['events']:,} | {r['seconds']:.2f} | "
            f"{r['events_per_second']:,} | {r['cpu_seconds']:.2f} | "
            f"{r['events_per_cpu_second']:,} | {r.get('writer_cpu_seconds', r['cpu_seconds']):.2f} "
            f"| {r['mb_per_second']:.1f} | "
            f"{r['reimport_seconds']:.2f} | {r.get('reimport_cpu_seconds', 0):.2f} | "
            f"{r.get('peak_rss_all_mb', r['peak_rss_mb']):.0f} | {r['peak_rss_mb']:.0f} | "
            f"{_loads(r.get('load_average'))} |"
        )
    lines += ["", *_stage_table(data["results"])]
    lines += [
        "",
        _verdict(data),
        "",
        "CPU s is the CPU time of the importing processes, the writer's and its workers' "
        "(user and system; on Postgres the server's work is not in it); writer CPU s the "
        "writing process's alone. On a shared, loaded machine wall time measures the load "
        "as much as the importer, CPU time much less so. Peak RSS, all processes: the "
        "largest sum of the resident memory of the writer and its workers, sampled every "
        "50 ms (each worker counts the library's pages it shares with the others).",
        "",
        f"A process that only imports the library peaks at {data['baseline_rss_mb']:.0f} MB. "
        f"Machine: {data['machine'].get('cpu_count')} cores ({data['machine'].get('cpu_model')}; "
        f"{data['machine'].get('usable_cores', data['machine'].get('cpu_count'))} usable), "
        f"load average {data['machine'].get('load_average_at_start')} at the start and "
        f"{data['load']} at the end (a shared machine).",
        "",
    ]
    return "\n".join(lines)


def _jobs_text(jobs: int) -> str:
    if jobs == 1:
        return "one process (`--jobs 1`: file by file)"
    workers = (
        "1 worker process reads, converts and encodes"
        if jobs == 2
        else f"{jobs - 1} workers read, convert and encode"
    )
    return f"`--jobs {jobs}`: {workers} the files while one process writes them"


def _loads(pair: Any) -> str:
    if not pair:
        return ""
    return " → ".join(f"{p[0]:.2f}" for p in pair)


def _stage_table(results: list[dict[str, Any]]) -> list[str]:
    """Where the first import's CPU time goes, in microseconds per event: reading and
    parsing the lines, converting the records to events, encoding them (checks, canonical
    JSON, token counts), and the rest of the import (rows, hashes, SQL, commits)."""
    rows = [r for r in results if r.get("stage_cpu_seconds")]
    if not rows:
        return []
    lines = [
        "CPU time per event of the first import, by stage (microseconds): reading and "
        "parsing the lines, converting the records to events, encoding them (checks, "
        "canonical JSON, token counts), each timed on its own over the same files as the "
        "import streams them, in one process; the last stage (rows, hash chain, SQL, "
        "commits, and with workers sending the batches from one process to the other) is "
        "the import's CPU time, all processes', less the other three.",
        "",
        "| backend | parse | convert | encode | rows, hashes, SQL, commit | total |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        st = r["stage_cpu_seconds"]
        parse, convert, enc = st["parse"], st["convert"], st["encode"]
        write = r["cpu_seconds"] - parse - convert - enc
        per = [1e6 * x / max(1, r["events"]) for x in (parse, convert, enc, write)]
        lines.append(
            f"| {r['backend']} | " + " | ".join(f"{x:.0f}" for x in per) + f" | {sum(per):.0f} |"
        )
    return lines


TARGET = 20_000
"""Events per second the import should reach on SQLite."""


def _verdict(data: dict[str, Any]) -> str:
    sqlite = next((r for r in data["results"] if r["backend"] == "sqlite"), None)
    if sqlite is None:
        return ""
    met = sqlite["events_per_second"] >= TARGET
    return (
        f"Target: at least {TARGET:,} events/s on SQLite: **{'met' if met else 'not met'}** "
        f"({sqlite['events_per_second']:,} events/s of wall time, "
        f"{sqlite['events_per_cpu_second']:,} per CPU second). The re-import CPU column is "
        "what reading and converting the transcripts costs (it writes nothing); the rest of "
        "the first import's CPU time is the store encoding, hashing and writing payloads of "
        "this size. Wall time on a machine whose load is several times its cores counts the "
        "waiting for a core: the events per CPU second say what the import itself costs."
        + _writer_bound(sqlite)
    )


def _writer_bound(r: dict[str, Any]) -> str:
    """What the writing process alone allows, when its workers keep up with it."""
    if r.get("jobs", 1) == 1 or not r.get("writer_cpu_seconds"):
        return ""
    return (
        f" The writing process spent {r['writer_cpu_seconds']:.2f} CPU s of the "
        f"{r['cpu_seconds']:.2f}: with workers that keep up and a core of its own it would "
        f"write {r['events'] / r['writer_cpu_seconds']:,.0f} events/s."
    )


def main(argv: list[str]) -> int:
    args = _parse(argv)
    mb = args.mb or (2.0 if args.smoke else 100.0)
    out = args.out or (HERE / "smoke-results" if args.smoke else HERE)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "transcripts"
        written = synthesise(folder, mb)
        print(
            f"synthesised {written['files']} files, {written['bytes'] / 1e6:.1f} MB",
            file=sys.stderr,
        )
        machine = machine_info(Path(tmp), None)
        # `eventstore import` picks the processes by the cores (and the size, over
        # AUTO_MIN_BYTES here): the benchmark uses what it would.
        jobs = args.jobs or (default_jobs() if written["bytes"] >= AUTO_MIN_BYTES else 1)
        machine["usable_cores"] = default_cores()
        loads = [load_average()]
        results.append(
            measure(
                "sqlite", f"sqlite:///{Path(tmp) / 'import.db'}", folder, written["bytes"], jobs
            )
        )
        loads.append(load_average())
        if not args.no_postgres:
            url = fresh_pg_database(args.pg_url)
            results.append(measure("postgres", url, folder, written["bytes"], jobs))
            loads.append(load_average())
        for r, before, after in zip(results, loads, loads[1:], strict=False):
            r["load_average"] = [before, after]
    data = {
        "smoke": args.smoke,
        **written,
        "machine": machine,
        "load": load_average(),
        "packages": package_versions(),
        "baseline_rss_mb": _baseline_rss(),
        "results": results,
        "max_rss_kb_units": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss > 0,
    }
    (out / "importers.json").write_text(json.dumps(data, indent=2) + "\n")
    (out / "IMPORTERS.md").write_text(render(data))
    print(render(data))
    return 0
