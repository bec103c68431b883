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


@pytest.fixture
def audit(db_url: str) -> AuditDb:
    return build(db_url, f"t-{uuid.uuid4().hex}")


@pytest.fixture
def client(audit: AuditDb) -> Iterator[TestClient]:
    store = EventStore(audit.url, tenant=audit.tenant, upgrade=False)
    try:
        yield TestClient(create_app(store))
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
    assert "<html" not in full and full.count("OUTPUT-LINE") == 200


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
        client = TestClient(create_app(store, inline_limit=3))
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
                page = TestClient(create_app(tampered)).get(f"/sessions/{audit.synthetic}/verify")
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
