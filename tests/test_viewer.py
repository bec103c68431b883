"""The audit viewer's routes through Starlette's TestClient, on SQLite and Postgres.

The database holds a real SWE-agent trajectory replayed through the condensation policy
turn by turn (skipped when the corpus is absent) and a small synthetic session with a
prune, a condensation, llm calls and a fork.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient  # noqa: E402
from viewer_data import AuditDb, build  # noqa: E402

from eventstore import EventStore  # noqa: E402
from eventstore.cli import cli  # noqa: E402
from eventstore.cli.viewer import create_app  # noqa: E402

#: The address the viewer answers by default (the TestClient default, testserver, is refused).
LOCAL = "http://127.0.0.1:8765"


@pytest.fixture
def audit(db_url: str) -> AuditDb:
    return build(db_url, f"t-{uuid.uuid4().hex}")


@pytest.fixture
def client(audit: AuditDb) -> Iterator[TestClient]:
    store = EventStore(audit.url, tenant=audit.tenant, upgrade=False)
    try:
        yield TestClient(create_app(store), base_url=LOCAL)
    finally:
        store.close()


def cli_out(audit: AuditDb, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--db", audit.url, "--tenant", audit.tenant, *args])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_index_lists_every_session_with_its_counts_and_the_fork_under_its_parent(
    client: TestClient, audit: AuditDb
) -> None:
    page = client.get("/").text
    assert audit.synthetic in page and audit.fork in page and "synthetic audit" in page
    assert "alice" in page
    # The fork is nested right after its parent.
    assert page.index(audit.synthetic) < page.index(audit.fork)
    assert f"/sessions/{audit.synthetic}/row" in page
    row = client.get(f"/sessions/{audit.synthetic}/row").text
    cells = re.findall(r'<td class="num[^"]*">([^<]*)</td>', row)
    # events, head seq, raw tokens, view tokens, condensations, prunes
    assert cells[0] == "12" and cells[1] == "12" and cells[4] == "1" and cells[5] == "1", cells
    with EventStore(audit.url, tenant=audit.tenant) as store:
        assert cells[3] == f"{store.view(audit.synthetic).tokens:,}"
    filtered = client.get("/", params={"q": "fork of the"}).text
    assert audit.fork in filtered and f"/sessions/{audit.synthetic}/row" not in filtered


def test_timeline_pages_events_links_tool_pairs_and_badges_compacted_parts(
    client: TestClient, audit: AuditDb
) -> None:
    sid = audit.synthetic
    shell = client.get(f"/sessions/{sid}").text
    assert f'hx-get="/sessions/{sid}/events?after=0' in shell
    assert f'hx-get="/sessions/{sid}/chart"' in shell
    rows = client.get(f"/sessions/{sid}/events").text
    assert len(re.findall(r'<tr class="event ', rows)) == 12
    assert "result of bash → 4" in rows and "call bash → 3" in rows
    assert "part 0 pruned @7" in rows
    assert rows.count("condensed @10") == 4  # seqs 3..6
    only = client.get(f"/sessions/{sid}/events", params={"kind": "condensation"}).text
    assert re.findall(r'data-seq="(\d+)"', only) == ["10"]
    after = client.get(f"/sessions/{sid}/events", params={"after": 10}).text
    assert re.findall(r'<tr class="event [^"]*" id="seq-(\d+)"', after) == ["11", "12"]
    full = client.get(f"/sessions/{sid}/events/4", params={"fragment": 1}).text
    readable, _, exact = full.partition('<details class="json">')
    # The output in full, folded (200 lines is long), and again in the event's exact JSON.
    assert "<html" not in full and readable.count("OUTPUT-LINE") == 200
    assert '<details class="block tool_result">' in readable and exact.count("OUTPUT-LINE") == 200


def test_timeline_never_renders_more_than_a_page(client: TestClient, audit: AuditDb) -> None:
    from eventstore import Message

    with EventStore(audit.url, tenant=audit.tenant) as store:
        sid = store.create_session(title="long").id
        store.append(sid, [Message.user(f"line {i}") for i in range(250)])
    rows = client.get(f"/sessions/{sid}/events").text
    assert re.findall(r'<tr class="event [^"]*" id="seq-(\d+)"', rows) == [
        str(i) for i in range(1, 101)
    ]
    assert f"/sessions/{sid}/events?after=100" in rows
    last = client.get(f"/sessions/{sid}/events", params={"after": 200}).text
    assert len(re.findall(r'<tr class="event ', last)) == 50 and "next 100" not in last


def test_chart_is_inline_svg_with_a_marker_per_condensation(
    client: TestClient, audit: AuditDb
) -> None:
    for sid, conds in audit.condensations.items():
        svg = client.get(f"/sessions/{sid}/chart").text
        assert "<svg" in svg and 'class="view"' in svg and 'class="raw"' in svg
        markers = re.findall(r'class="condensation-marker" data-seq="(\d+)"', svg)
        assert [int(m) for m in markers] == conds
    if audit.real is not None:
        assert audit.condensations[audit.real], "the replay condensed nothing"


def test_the_view_page_fingerprint_equals_the_cli_at_every_llm_call_seq(
    client: TestClient, audit: AuditDb
) -> None:
    for sid in filter(None, (audit.synthetic, audit.real)):
        with EventStore(audit.url, tenant=audit.tenant) as store:
            seqs = [e.event.view_seq for e in store.read(sid, kinds=["llm_call"])]  # type: ignore[union-attr]
        assert seqs
        for at in seqs[:3] + seqs[-3:]:
            page = client.get(f"/sessions/{sid}/view", params={"at": at}).text
            shown = re.search(r'id="fingerprint">([0-9a-f]{64})<', page)
            assert shown, page[:500]
            expected = json.loads(cli_out(audit, "view", sid, "--at", str(at), "--json"))
            assert shown.group(1) == expected["fingerprint"]


def test_the_view_page_shows_summary_and_the_diff_against_the_previous_call(
    client: TestClient, audit: AuditDb
) -> None:
    page = client.get(f"/sessions/{audit.synthetic}/view", params={"at": 12}).text
    assert "SUMMARY-TEXT" in page
    # The previous llm call (seq 11) sent the view at seq 10; since then one message came.
    assert "sent the view at" in page and "seq 10" in page
    assert "1 message added" in page and "All done." in page
    first = client.get(f"/sessions/{audit.synthetic}/view", params={"at": 4}).text
    assert "no llm call was recorded before this seq" in first


def test_event_pages_explain_condensations_and_prunes(client: TestClient, audit: AuditDb) -> None:
    sid = audit.synthetic
    cond = client.get(f"/sessions/{sid}/events/10").text
    assert "extractive" in cond and "SUMMARY-TEXT" in cond and "900 → 120" in cond
    forgotten = cond[cond.index('class="forgotten"') :]
    assert re.findall(rf'<li><a href="/sessions/{sid}/events/(\d+)"', forgotten) == [
        "3",
        "4",
        "5",
        "6",
    ]
    prune = client.get(f"/sessions/{sid}/events/7").text
    assert "tool-output" in prune and prune.count("OUTPUT-LINE") == 200
    call = client.get(f"/sessions/{sid}/events/5").text
    assert "match" in call and "MISMATCH" not in call


def test_unknown_sessions_and_seqs_are_404_pages_and_bad_numbers_400(
    client: TestClient, audit: AuditDb
) -> None:
    sid = audit.synthetic
    for url in (
        "/sessions/no-such-session",
        "/sessions/no-such-session/view",
        "/sessions/no-such-session/verify",
        "/sessions/no-such-session/export.jsonl",
        f"/sessions/{sid}/events/13",
        f"/sessions/{sid}/events/0",
        f"/sessions/{sid}/events/abc",
        f"/sessions/{sid}/view?at=13",
        "/nowhere",
    ):
        r = client.get(url)
        assert r.status_code == 404, url
        assert "<html" in r.text and "not found" in r.text, url
    assert client.get(f"/sessions/{sid}/view?at=x").status_code == 400
    assert client.get(f"/sessions/{sid}?kind=bogus").status_code == 400


def test_everything_but_get_is_405(client: TestClient, audit: AuditDb) -> None:
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for url in ("/", f"/sessions/{audit.synthetic}", "/nowhere"):
            r = client.request(method, url)
            assert r.status_code == 405, (method, url)
            assert r.headers["allow"] == "GET, HEAD"


def test_export_route_bytes_equal_the_cli_export(client: TestClient, audit: AuditDb) -> None:
    for sid in filter(None, (audit.synthetic, audit.fork, audit.real)):
        r = client.get(f"/sessions/{sid}/export.jsonl")
        assert r.status_code == 200
        assert r.content == cli_out(audit, "export", sid).encode("utf-8")


def test_verify_page_reports_ok_with_the_head_hash(client: TestClient, audit: AuditDb) -> None:
    page = client.get(f"/sessions/{audit.synthetic}/verify").text
    assert "OK: no problem found" in page
    with EventStore(audit.url, tenant=audit.tenant) as store:
        head = list(store.read(audit.synthetic, 12, 12))[0]
    assert head.hash in page


def test_verify_in_the_background_for_big_sessions(
    audit: AuditDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    with EventStore(audit.url, tenant=audit.tenant) as store:
        # Hold the background verify until the first page is served, so the page
        # must show the pending state whatever the thread scheduling.
        gate = threading.Event()
        real_verify = store.verify

        def gated_verify(*args: Any, **kwargs: Any) -> Any:
            gate.wait(30)
            return real_verify(*args, **kwargs)

        monkeypatch.setattr(store, "verify", gated_verify)
        client = TestClient(create_app(store, inline_limit=3), base_url=LOCAL)
        first = client.get(f"/sessions/{audit.synthetic}/verify").text
        assert "in the background" in first and "/verify/result" in first
        gate.set()
        for _ in range(200):
            result = client.get(f"/sessions/{audit.synthetic}/verify/result").text
            if "in the background" not in result:
                break
            time.sleep(0.05)
        assert "OK: no problem found" in result
        chart = client.get(f"/sessions/{audit.synthetic}/chart").text
        for _ in range(200):
            if "<svg" in chart:
                break
            time.sleep(0.05)
            chart = client.get(f"/sessions/{audit.synthetic}/chart").text
        assert "<svg" in chart


def test_timeline_badges_while_the_log_is_still_being_read(audit: AuditDb) -> None:
    """Before the background read finishes, badges come from an indexed read of the
    condensations and prunes alone (events out of seq order, with gaps)."""
    from eventstore.cli.viewer.app import Viewer

    with EventStore(audit.url, tenant=audit.tenant) as store:
        viewer = Viewer(store)
        s = store.get_session(audit.synthetic)
        marks = viewer._marks(s, [])  # warm nothing: build the sparse markers directly
        assert marks == []
        sparse = viewer._small_digest(s, list(store.read(s.id, 3, 4)))
    assert sparse.condensations == [10] and sparse.prunes == [7]
    assert sparse.forgotten_by(4) == 10 and sparse.pruned == {4: [(0, 7)]}
    assert sparse.results == {"call_ls": 4} and sparse.calls == {"call_ls": 3}
    assert len(sparse.raw) == 0


def test_a_tampered_event_shows_a_visible_verify_failure(db_url: str, tmp_path: Path) -> None:
    from conftest import drop_pg_database, fresh_pg_database
    from test_store import _tamper

    own = db_url if db_url.startswith("sqlite") else fresh_pg_database()
    try:
        audit = build(own, "default", real=False)
        with EventStore(own, tenant="default") as store:
            sql = (
                "UPDATE events SET payload = replace(payload, 'Fix it please', 'Delete it all') "
                f"WHERE session_id = '{audit.synthetic}' AND seq = ?"
            )
            tampered = _tamper(store, tmp_path, sql, v=8)
            try:
                page = TestClient(create_app(tampered), base_url=LOCAL).get(
                    f"/sessions/{audit.synthetic}/verify"
                )
                assert page.status_code == 200
                assert "FAILED" in page.text and "seq 8: hash mismatch" in page.text
                assert "hash chain" in page.text
            finally:
                if tampered is not store:
                    tampered.close()
    finally:
        if not db_url.startswith("sqlite"):
            drop_pg_database(own)


def test_serve_refuses_a_missing_database_and_names_the_extra(tmp_path: Path) -> None:
    from eventstore.cli import serve

    missing = tmp_path / "nothing.db"
    result = CliRunner().invoke(cli, ["--db", f"sqlite:///{missing}", "serve"])
    assert result.exit_code == 1 and "no database" in result.output
    assert not missing.exists()
    original = serve.VIEWER_MODULES
    serve.VIEWER_MODULES = ("starlette", "no_such_module_for_the_viewer")
    try:
        result = CliRunner().invoke(cli, ["serve"])
    finally:
        serve.VIEWER_MODULES = original
    assert result.exit_code == 1
    assert 'pip install "agent-eventstore[viewer]"' in result.output


def test_requests_naming_another_host_or_origin_are_refused(client: TestClient) -> None:
    # DNS rebinding: a page at evil.example whose name now resolves to 127.0.0.1 sends
    # its requests with Host: evil.example (and its own Origin).
    assert client.get("/").status_code == 200
    assert client.get("/", headers={"Host": "localhost:8765"}).status_code == 200
    assert client.get("/", headers={"Host": "[::1]:8765"}).status_code == 200
    for headers in (
        {"Host": "evil.example:8765"},
        {"Host": "evil.example"},
        {"Host": "127.0.0.1.evil.example"},
        {"Origin": "http://evil.example:8765"},
        {"Origin": "null"},
    ):
        r = client.get("/", headers=headers)
        assert r.status_code == 421, headers
        assert "--allow-host" in r.text and "session" not in r.text.lower()
    r = client.get("/sessions/x/export.jsonl", headers={"Host": "evil.example"})
    assert r.status_code == 421
    assert client.get("/", headers={"Origin": "http://127.0.0.1:8765"}).status_code == 200


def test_allow_host_adds_a_name_and_the_cli_passes_it(audit: AuditDb) -> None:
    store = EventStore(audit.url, tenant=audit.tenant, upgrade=False)
    try:
        app = create_app(store, allowed_hosts=["127.0.0.1", "viewer.internal"])
        client = TestClient(app, base_url="http://viewer.internal:8765")
        assert client.get("/").status_code == 200
        assert client.get("/", headers={"Host": "other.internal"}).status_code == 421
    finally:
        store.close()
    result = CliRunner().invoke(cli, ["serve", "--help"])
    assert "--allow-host" in result.output


def test_every_response_carries_the_security_headers(client: TestClient, audit: AuditDb) -> None:
    for url in ("/", f"/sessions/{audit.synthetic}", "/static/viewer.css", "/nowhere"):
        r = client.get(url)
        assert r.headers["x-content-type-options"] == "nosniff", url
        assert r.headers["x-frame-options"] == "DENY", url
        csp = r.headers["content-security-policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp, url
    assert client.post("/").headers["x-frame-options"] == "DENY"
    assert client.get("/", headers={"Host": "evil.example"}).headers["x-frame-options"] == "DENY"
    # No inline script handler the policy would block.
    page = client.get(f"/sessions/{audit.synthetic}/verify").text
    assert "onclick" not in page


def test_head_of_an_export_reads_nothing(client: TestClient, audit: AuditDb) -> None:
    store = client.app.state.viewer.store  # type: ignore[attr-defined]
    reads: list[str] = []
    original = store.read

    def counting_read(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[0])
        return original(*args, **kwargs)

    store.read = counting_read
    try:
        r = client.head(f"/sessions/{audit.synthetic}/export.jsonl")
        assert r.status_code == 200 and r.content == b""
        assert r.headers["content-type"].startswith("application/x-ndjson")
        assert "attachment" in r.headers["content-disposition"]
        assert reads == []
        missing = "/sessions/00000000-0000-0000-0000-000000000000/export.jsonl"
        assert client.head(missing).status_code == 404
        assert client.get(f"/sessions/{audit.synthetic}/export.jsonl").status_code == 200
        assert reads  # the GET does read the log
    finally:
        store.read = original


def test_aborted_export_downloads_leave_no_thread_behind(db_url: str) -> None:
    import socket

    import uvicorn

    from eventstore import Message

    tenant = f"t-{uuid.uuid4().hex}"
    store = EventStore(db_url, tenant=tenant, upgrade=True)
    sid = store.create_session(title="big export").id
    # About 12 MB of JSONL: far more than the socket buffers hold.
    for start in range(0, 3000, 500):
        store.append(sid, [Message.user(f"{i} " + "x" * 4000) for i in range(start, start + 500)])
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "the viewer did not start"
        time.sleep(0.05)

    def pooled(t: threading.Thread) -> bool:
        return "AnyIO worker" in t.name or "asyncio" in t.name

    try:
        before = {t.ident for t in threading.enumerate()}
        request = (
            f"GET /sessions/{sid}/export.jsonl HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        ).encode()
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as conn:
                conn.sendall(request)
                assert b"200 OK" in conn.recv(4096)
            # closed after the first bytes: the download is aborted
        head = request.replace(b"GET", b"HEAD")
        for _ in range(5):
            with socket.create_connection(("127.0.0.1", port)) as conn:
                conn.sendall(head)
                assert b"200 OK" in conn.recv(4096)
        deadline = time.monotonic() + 10
        while True:
            left = [t for t in threading.enumerate() if t.ident not in before and not pooled(t)]
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert left == [], f"threads still running after aborted downloads: {left}"
        # And a whole download still works.
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            got = b""
            while chunk := conn.recv(1 << 16):
                got += chunk
        assert got.count(b'"seq"') == 3000
    finally:
        srv.should_exit = True
        thread.join(10)
        store.close()


def test_the_index_pages_sessions_in_the_database(db_url: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    store = EventStore(db_url, tenant=tenant, upgrade=True)
    try:
        ids = [
            store.create_session(title=f"task {i}{' needle_x' if i % 50 == 0 else ''}").id
            for i in range(230)
        ]
        gone = store.create_session(title="deleted needle_x").id
        store.delete_session(gone)

        def no_full_listing(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("the index must not load every session")

        store.list_sessions = no_full_listing  # type: ignore[method-assign]
        client = TestClient(create_app(store), base_url=LOCAL)
        first = client.get("/").text
        assert "230 sessions" in first and ids[-1] in first and ids[0] not in first
        assert first.count('class="session-row"') == 100
        seen, page = [], first
        while True:
            seen += re.findall(r'data-session="([^"]+)"', page)
            nxt = re.search(r'href="(/\?q=&(?:amp;)?after=[^"]+)">next', page)
            if nxt is None:
                break
            page = client.get(nxt.group(1).replace("&amp;", "&")).text
        assert seen == ids[::-1]  # every session once, newest first, over three pages
        assert page.count('class="session-row"') == 30 and "page 3" in page
        found = client.get("/?q=NEEDLE_X").text
        assert "5 sessions" in found and gone not in found
        assert found.count('class="session-row"') == 5
        # LIKE wildcards in the filter are literal characters.
        assert "0 sessions" in client.get("/?q=%25").text
    finally:
        store.close()


def _index_statements(store: EventStore, client: TestClient, route: str) -> list[tuple[str, Any]]:
    """The SELECTs on ``sessions`` one index request runs, with their parameters."""
    from sqlalchemy import event

    seen: list[tuple[str, Any]] = []

    def record(conn: Any, cursor: Any, statement: str, params: Any, *rest: Any) -> None:
        if statement.lstrip().startswith("SELECT") and "sessions" in statement:
            seen.append((statement, params))

    event.listen(store.engine, "before_cursor_execute", record)
    try:
        assert client.get(route).status_code == 200
    finally:
        event.remove(store.engine, "before_cursor_execute", record)
    return seen


def test_a_filtered_index_searches_a_window_at_a_time_and_reaches_every_match(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eventstore.cli.viewer import app as viewer_app

    monkeypatch.setattr(viewer_app, "SCAN_WINDOW", 50)
    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        ids = [
            store.create_session(title=f"task {i}{' needle_y' if i % 50 == 7 else ''}").id
            for i in range(230)
        ]
        client = TestClient(create_app(store), base_url=LOCAL)
        page = client.get("/?q=needle_y").text
        # The newest 50 sessions (229..180) hold one match (207); the next page goes on.
        assert "1 session among the 50 searched" in page
        seen, pages = [], 1
        while True:
            seen += re.findall(r'data-session="([^"]+)"', page)
            nxt = re.search(r'href="(/\?q=needle_y&(?:amp;)?after=[^"]+)">next', page)
            if nxt is None:
                break
            page = client.get(nxt.group(1).replace("&amp;", "&")).text
            pages += 1
        assert seen == [ids[i] for i in (207, 157, 107, 57, 7)] and pages == 5
        assert "among the" not in page, "the last window reaches the oldest session"
    finally:
        store.close()


def test_index_queries_seek_the_created_at_index_and_read_a_bounded_number_of_rows(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shape, not the time: each index statement starts from the (tenant,
    created_at) index, a later page seeks to where the previous one ended, and on Postgres
    no statement reads more rows than a page, the count's cap or a filter's window."""
    from eventstore.cli.viewer import app as viewer_app

    window = 40
    monkeypatch.setattr(viewer_app, "SCAN_WINDOW", window)
    monkeypatch.setattr(viewer_app, "COUNT_CAP", 30)
    monkeypatch.setattr(viewer_app, "SESSIONS_PAGE", 20)
    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        ids = [store.create_session(title=f"task {i}").id for i in range(400)]
        client = TestClient(create_app(store), base_url=LOCAL)
        routes = ["/", f"/?after={ids[200]}&page=2", "/?q=no-such-title", "/?q=task 1"]
        with store.engine.connect() as conn:
            if store.dialect == "postgresql":
                conn.exec_driver_sql("ANALYZE sessions")
            for route in routes:
                statements = _index_statements(store, client, route)
                assert statements, route
                for sql, params in statements:
                    if store.dialect == "sqlite":
                        plan = " | ".join(
                            str(r[-1])
                            for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}", params)
                        )
                        assert "SCAN sessions" not in plan, (route, plan)
                        if "created_at <" in sql and "WHERE sessions.id =" not in sql:
                            assert "created_at<?" in plan, (route, plan)
                        continue
                    (doc,) = conn.exec_driver_sql(
                        f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params
                    ).scalar_one()
                    scans = []

                    def walk(node: dict[str, Any], scans: list[dict[str, Any]] = scans) -> None:
                        if node.get("Relation Name") == "sessions":
                            scans.append(node)
                        for child in node.get("Plans", []):
                            walk(child)

                    walk(doc["Plan"])
                    assert scans, (route, sql)
                    for node in scans:
                        read = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
                        assert read <= window + 1, (route, sql, node["Node Type"], read)
                    if "created_at <" in sql and "WHERE sessions.id =" not in sql:
                        assert any("created_at <=" in n.get("Index Cond", "") for n in scans)
    finally:
        store.close()
