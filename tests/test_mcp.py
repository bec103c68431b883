"""``eventstore mcp``: the MCP server, driven by the official SDK's own client.

Every transport the command serves is exercised on both backends: the server in process,
``eventstore mcp`` as a real stdio subprocess, and ``eventstore mcp --http`` as a real HTTP
server. The scenario is the one the server exists for: a phrase that lives only in a tool
output that was pruned and then condensed away is found across the tenant's sessions and
recalled byte for byte, while another tenant's sessions stay invisible and nothing is written.

The ``mcp`` extra is optional: without it these tests skip, unless ``EVENTSTORE_REQUIRE_MCP=1``
(set by ``.ci/run``) turns the skip into a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from eventstore import (
    Condensation,
    EventStore,
    Message,
    PartRef,
    Prune,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from eventstore.cli import cli

REQUIRE = (
    os.environ.get("EVENTSTORE_REQUIRE_MCP") == "1"
    or os.environ.get("EVENTSTORE_REQUIRE_ADAPTERS") == "1"
)
try:
    import httpx2
    from mcp import Client, StdioServerParameters
    from mcp.client.streamable_http import streamable_http_client
except ImportError as exc:  # pragma: no cover - depends on the environment
    if REQUIRE:
        raise
    pytest.skip(f"the mcp extra is not installed ({exc})", allow_module_level=True)

from eventstore.cli.mcp_server import MAX_PAGE_CHARS, PAGE_CHARS, create_server  # noqa: E402

PHRASE = "quartermaster ledger overflow in settlement batch"
BIG_CHARS = 5 * 1024 * 1024
TOKEN = "s3cret-token-for-the-test-0123456789"
TOOLS = {"list_sessions", "search_history", "recall", "get_view", "get_event"}


@dataclass
class Scenario:
    """The stored sessions the tests ask about."""

    url: str
    tenant: str
    sid: str
    """The condensed session: its seq 3 is the pruned, condensed-away output."""
    other_sid: str
    """A second session of the same tenant (search goes across sessions)."""
    foreign_sid: str
    """A session of another tenant that holds the phrase too."""
    output: str
    """The forgotten tool output, exactly as stored."""
    big: str
    """A 5 MB tool output (seq 7), still in view."""


def _build(url: str) -> Scenario:
    tenant = f"t-{uuid.uuid4().hex}"
    output = f"total 3\n-rw-r--r-- ledger.csv\n\tmismatch: {PHRASE} (row 17)\r\nµ ✓ end\n"
    big = "".join(f"line {i:07d} of the long build log\n" for i in range(BIG_CHARS // 34 + 1))
    big = big[:BIG_CHARS]
    with EventStore(url, tenant=tenant, upgrade=True) as store:
        s = store.create_session(title="ledger debugging", user_id="ana", key="ledger-42")
        store.append(
            s.id,
            [
                Message(role="user", parts=[TextPart(text="Why does the nightly import fail?")]),
                Message(
                    role="assistant",
                    parts=[ToolCallPart(id="c1", name="bash", arguments='{"cmd": "ls -l"}')],
                ),
                Message(
                    role="tool",
                    parts=[ToolResultPart(tool_call_id="c1", name="bash", output=output)],
                ),
                Message(role="assistant", parts=[TextPart(text="The ledger file is there.")]),
            ],
        )
        store.append(s.id, [Prune(targets=[PartRef(seq=3, index=0)], strategy="test")])
        store.append(
            s.id,
            [
                Condensation(
                    forgotten_from=2,
                    forgotten_to=4,
                    forgotten_events=3,
                    summary="The agent listed the files; the ledger file exists.",
                    condenser="test",
                ),
                Message(
                    role="tool",
                    parts=[ToolResultPart(tool_call_id="c2", name="build", output=big)],
                ),
            ],
        )
        other = store.create_session(title="release notes")
        store.append(other.id, [Message(role="user", parts=[TextPart(text="Draft notes")])])
        with store.with_tenant(f"{tenant}-other") as foreign_store:
            foreign = foreign_store.create_session(title="secret of another tenant")
            foreign_store.append(
                foreign.id,
                [Message(role="user", parts=[TextPart(text=f"{PHRASE} in the other tenant")])],
            )
        # The phrase is in no view any more: pruned, then condensed away.
        assert PHRASE not in json.dumps(store.view(s.id).to_messages())
    return Scenario(url, tenant, s.id, other.id, foreign.id, output, big)


@pytest.fixture
def scenario(db_url: str) -> Scenario:
    return _build(db_url)


def _text(result: Any) -> str:
    assert not result.is_error, result.content
    return "".join(block.text for block in result.content)


async def _pages(client: Client, tool: str, args: dict[str, Any]) -> tuple[str, int]:
    """A paged answer joined, following each page's continuation; and the number of pages."""
    out, offset, pages = [], 0, 0
    while True:
        result = await client.call_tool(tool, {**args, "offset": offset})
        assert not result.is_error, result.content
        pages += 1
        out.append(result.content[0].text)
        if len(result.content) == 1:
            return "".join(out), pages
        note = result.content[-1].text
        found = re.search(r"offset=(\d+)", note)
        assert found, note
        assert int(found.group(1)) == offset + len(result.content[0].text)
        offset = int(found.group(1))
        assert pages < 1_000


def _snapshot(sc: Scenario) -> Any:
    with EventStore(sc.url, tenant=sc.tenant) as store:
        heads = {s.id: (s.head_seq, s.updated_at) for s in store.list_sessions(limit=None)}
        stats = store.stats()
    return heads, stats


async def check_acceptance(client: Client, sc: Scenario, *, big_page: int) -> None:
    """What every transport must show (the issue's acceptance, in one place)."""
    before = _snapshot(sc)

    listed = await client.list_tools()
    assert {t.name for t in listed.tools} == TOOLS
    for tool in listed.tools:
        assert tool.description and len(tool.description) > 60
        assert tool.input_schema["type"] == "object"
        assert tool.annotations is not None and tool.annotations.read_only_hint is True

    # list_sessions: the server's tenant only, with title, key, user, updated, events.
    sessions = json.loads(_text(await client.call_tool("list_sessions", {})))["sessions"]
    assert {s["session_id"] for s in sessions} == {sc.sid, sc.other_sid}
    mine = next(s for s in sessions if s["session_id"] == sc.sid)
    assert (mine["title"], mine["key"], mine["user_id"], mine["events"]) == (
        "ledger debugging",
        "ledger-42",
        "ana",
        7,
    )
    assert mine["updated_at"]
    filtered = json.loads(_text(await client.call_tool("list_sessions", {"query": "LEDGER"})))
    assert [s["session_id"] for s in filtered["sessions"]] == [sc.sid]

    # search_history across sessions finds the forgotten phrase (and not the other tenant's).
    found = json.loads(_text(await client.call_tool("search_history", {"query": f'"{PHRASE}"'})))
    assert [(h["session_id"], h["seq"], h["ref"]) for h in found["hits"]] == [(sc.sid, 3, "3:0")]
    assert "quartermaster" in found["hits"][0]["snippet"]
    assert found["next_page"] is None

    # recall returns it byte for byte.
    recalled = await client.call_tool("recall", {"session_id": sc.sid, "ref": "3:0"})
    assert _text(recalled) == sc.output
    assert len(recalled.content) == 1

    # A 5 MB output comes back in bounded pages that join to the original.
    joined, pages = await _pages(
        client, "recall", {"session_id": sc.sid, "ref": "7:0", "max_chars": big_page}
    )
    assert joined == sc.big
    assert pages == -(-len(sc.big) // big_page)

    # get_view equals `eventstore view --json`, fingerprint included.
    printed = CliRunner().invoke(
        cli, ["--db", sc.url, "--tenant", sc.tenant, "view", sc.sid, "--json"]
    )
    assert printed.exit_code == 0, printed.output
    view_text, _ = await _pages(
        client, "get_view", {"session_id": sc.sid, "max_chars": MAX_PAGE_CHARS}
    )
    assert view_text + "\n" == printed.output
    at_text = _text(await client.call_tool("get_view", {"session_id": sc.sid, "at": 4}))
    assert json.loads(at_text)["seq"] == 4
    assert json.loads(at_text)["fingerprint"] != json.loads(view_text)["fingerprint"]

    # get_event: the whole event, as `log --json` shows it.
    event = json.loads(_text(await client.call_tool("get_event", {"session_id": sc.sid, "seq": 3})))
    assert event["seq"] == 3
    assert event["event"]["parts"][0]["output"] == sc.output

    # Another tenant's ids: tool errors that say what to do, with none of its data.
    for tool, args in [
        ("recall", {"session_id": sc.foreign_sid, "ref": "1:0"}),
        ("get_view", {"session_id": sc.foreign_sid}),
        ("get_event", {"session_id": sc.foreign_sid, "seq": 1}),
        ("search_history", {"query": "quartermaster", "session_id": sc.foreign_sid}),
    ]:
        result = await client.call_tool(tool, args)
        assert result.is_error, (tool, result.content)
        message = result.content[0].text
        assert "list_sessions" in message
        assert "another tenant" not in message and "Traceback" not in message

    after = _snapshot(sc)
    assert after == before, "a tool wrote to the log"


# --------------------------------------------------------------------------- in process


async def test_in_process_acceptance(scenario: Scenario) -> None:
    with EventStore(scenario.url, tenant=scenario.tenant) as store:
        async with Client(create_server(store)) as client:
            await check_acceptance(client, scenario, big_page=MAX_PAGE_CHARS)


async def test_recall_pages_a_5mb_output_at_the_default_size(scenario: Scenario) -> None:
    with EventStore(scenario.url, tenant=scenario.tenant) as store:
        async with Client(create_server(store)) as client:
            first = await client.call_tool("recall", {"session_id": scenario.sid, "ref": "7:0"})
            assert len(first.content[0].text) == PAGE_CHARS
            assert f"of {len(scenario.big):,}" in first.content[1].text
            joined, pages = await _pages(
                client, "recall", {"session_id": scenario.sid, "ref": "7:0"}
            )
    assert joined == scenario.big
    assert pages == -(-len(scenario.big) // PAGE_CHARS)


async def test_errors_say_the_fix_and_never_show_a_traceback(store: EventStore) -> None:
    s = store.create_session(title="one")
    store.append(s.id, [Message(role="user", parts=[TextPart(text="hello there")])])
    async with Client(create_server(store)) as client:
        cases = {
            ("recall", json.dumps({"session_id": s.id, "ref": "x"})): '"12:0"',
            ("recall", json.dumps({"session_id": s.id, "ref": "9:0"})): "search_history",
            ("recall", json.dumps({"session_id": s.id, "ref": "1:5"})): "no part 5",
            ("recall", json.dumps({"session_id": s.id, "ref": "1:0", "offset": 99})): "offset",
            ("get_event", json.dumps({"session_id": s.id, "seq": 5})): "events 1..1",
            ("get_view", json.dumps({"session_id": s.id, "at": 7})): "seqs 0..1",
            ("get_view", json.dumps({"session_id": "zz"})): "list_sessions",
            ("search_history", json.dumps({"query": "  ...  "})): "no words",
            ("list_sessions", json.dumps({"limit": 0})): "greater than or equal to 1",
        }
        for (tool, args), hint in cases.items():
            result = await client.call_tool(tool, json.loads(args))
            assert result.is_error, (tool, args)
            message = result.content[0].text
            assert hint in message, (tool, args, message)
            assert "Traceback" not in message


async def test_a_unique_id_prefix_names_a_session(store: EventStore) -> None:
    s = store.create_session(title="prefixed")
    store.append(s.id, [Message(role="user", parts=[TextPart(text="hi")])])
    async with Client(create_server(store)) as client:
        event = await client.call_tool("get_event", {"session_id": s.id[:12], "seq": 1})
        assert json.loads(_text(event))["seq"] == 1


async def test_search_pages_and_names_the_matching_part(store: EventStore) -> None:
    sessions = [store.create_session(title=f"s{i}") for i in range(3)]
    for s in sessions:
        store.append(
            s.id,
            [
                Message(
                    role="assistant",
                    parts=[
                        TextPart(text="let me look"),
                        ToolCallPart(id="c", name="grep", arguments='{"q": "walrus"}'),
                    ],
                )
                for _ in range(5)
            ],
        )
    async with Client(create_server(store)) as client:
        first = json.loads(_text(await client.call_tool("search_history", {"query": "walrus"})))
        second = json.loads(
            _text(await client.call_tool("search_history", {"query": "walrus", "page": 1}))
        )
        scoped = json.loads(
            _text(
                await client.call_tool(
                    "search_history", {"query": "walrus", "session_id": sessions[0].id}
                )
            )
        )
    assert len(first["hits"]) == 10 and first["next_page"] == 1
    assert len(second["hits"]) == 5 and second["next_page"] is None
    seen = {(h["session_id"], h["seq"]) for h in first["hits"] + second["hits"]}
    assert len(seen) == 15
    assert all(h["ref"] == f"{h['seq']}:1" for h in first["hits"])
    assert {h["session_id"] for h in scoped["hits"]} == {sessions[0].id}


async def test_session_resource(store: EventStore) -> None:
    from mcp import MCPError

    s = store.create_session(title="as a resource")
    async with Client(create_server(store)) as client:
        templates = await client.list_resource_templates()
        assert [t.uri_template for t in templates.resource_templates] == [
            "eventstore://sessions/{session_id}"
        ]
        read = await client.read_resource(f"eventstore://sessions/{s.id}")
        assert json.loads(read.contents[0].text)["title"] == "as a resource"
        with store.with_tenant(store.tenant + "-x") as other:
            foreign = other.create_session(title="hidden")
        with pytest.raises(MCPError, match="list_sessions"):
            await client.read_resource(f"eventstore://sessions/{foreign.id}")


# --------------------------------------------------------------------------- subprocesses


def _eventstore() -> str:
    found = Path(sys.executable).with_name("eventstore")
    return str(found) if found.exists() else shutil.which("eventstore") or "eventstore"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("EVENTSTORE_MCP_TOKEN", None)
    env["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    return env


async def test_stdio_subprocess_acceptance(scenario: Scenario) -> None:
    params = StdioServerParameters(
        command=_eventstore(),
        args=["--db", scenario.url, "mcp", "--tenant", scenario.tenant],
        env=_env(),
    )
    async with Client(params) as client:
        await check_acceptance(client, scenario, big_page=MAX_PAGE_CHARS)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def http_server(scenario: Scenario) -> Iterator[tuple[Scenario, str]]:
    port = _free_port()
    proc = subprocess.Popen(
        [_eventstore(), "--db", scenario.url, "--tenant", scenario.tenant, "mcp", "--http"]
        + ["--port", str(port), "--token", TOKEN],
        env=_env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the server exited: {proc.stderr.read() if proc.stderr else ''}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        yield scenario, f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@asynccontextmanager
async def _http_client(url: str, token: str) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


async def test_http_acceptance(http_server: tuple[Scenario, str]) -> None:
    scenario, url = http_server
    async with _http_client(url, TOKEN) as client:
        await check_acceptance(client, scenario, big_page=MAX_PAGE_CHARS)


async def test_http_refuses_without_the_token_and_checks_host_and_origin(
    http_server: tuple[Scenario, str],
) -> None:
    _scenario, url = http_server
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx2.AsyncClient(timeout=30) as http:
        missing = await http.post(url, json=body, headers=accept)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        wrong = await http.post(url, json=body, headers={**accept, "Authorization": "Bearer no"})
        assert wrong.status_code == 401
        rebound = await http.post(url, json=body, headers={**accept, **auth, "Host": "evil.test"})
        assert rebound.status_code == 421
        browser = await http.post(
            url, json=body, headers={**accept, **auth, "Origin": "https://evil.test"}
        )
        assert browser.status_code == 403
        local = await http.post(
            url, json=body, headers={**accept, **auth, "Origin": "http://localhost:3000"}
        )
        assert local.status_code == 200


def test_a_non_loopback_host_needs_a_token(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'e.db'}"
    EventStore(db).close()
    refused = CliRunner().invoke(
        cli, ["--db", db, "mcp", "--http", "--host", "192.0.2.10"], env={"EVENTSTORE_MCP_TOKEN": ""}
    )
    assert refused.exit_code == 1
    assert "--token" in refused.output and "127.0.0.1" in refused.output
    wildcard = CliRunner().invoke(
        cli, ["--db", db, "mcp", "--http", "--host", "0.0.0.0", "--token", TOKEN]
    )
    assert wildcard.exit_code == 1 and "--allow-host" in wildcard.output
    short = CliRunner().invoke(cli, ["--db", db, "mcp", "--http", "--token", "abc"])
    assert short.exit_code == 1 and "16 characters" in short.output


def test_the_command_refuses_a_missing_database(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    result = CliRunner().invoke(cli, ["--db", f"sqlite:///{missing}", "mcp"])
    assert result.exit_code == 1 and "no database" in result.output
    assert not missing.exists()


def test_help_does_not_import_the_sdk() -> None:
    code = (
        "import sys; from eventstore.cli import main\n"
        "try:\n    main(['mcp', '--help'])\nexcept SystemExit:\n    pass\n"
        "assert 'mcp' not in sys.modules, 'the SDK was imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env())
    assert done.returncode == 0, done.stderr
    assert "streamable HTTP" in done.stdout


# --------------------------------------------------------------------------- docs, benchmark

ROOT = Path(__file__).resolve().parent.parent


def test_the_python_blocks_of_the_docs_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "mcp.md").read_text(), re.S)
    assert blocks
    for block in blocks:
        done = subprocess.run(
            [sys.executable, "-c", block], capture_output=True, text=True, env=_env(), timeout=120
        )
        assert done.returncode == 0, done.stderr[-3000:]


def test_benchmark_smoke_finds_and_recalls_on_both_backends(tmp_path: Path) -> None:
    from conftest import PG_URL, drop_pg_database, require_pg
    from sqlalchemy.engine import make_url

    require_pg()
    name = f"{make_url(PG_URL).database}_bench_mcp_{uuid.uuid4().hex[:8]}"
    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "benchmarks", "mcp", "--smoke", "--events", "600"]
            + ["--sessions", "3", "--repeat", "2", "--out", str(tmp_path), "--pg-url", url],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            env=_env(),
        )
    finally:
        drop_pg_database(url)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads((tmp_path / "mcp.json").read_text())
    assert [r["backend"] for r in data["results"]] == ["sqlite", "postgres"]
    for r in data["results"]:
        assert r["found_and_recalled"] and r["events"] == 602
        assert all(c["median_ms"] > 0 for c in r["calls"])
    assert (tmp_path / "MCP.md").read_text().count("| postgres |") == len(r["calls"])
