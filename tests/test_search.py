"""Full-text search over history: what the model no longer sees is still found.

Runs over (sqlite, postgres) x (sync, async).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

from eventstore import (
    Condensation,
    InvalidEventError,
    Message,
    NotFoundError,
    PartRef,
    Prune,
    ToolCallPart,
)

BIG_OUTPUT = "\n".join(
    [f"line {i}: nothing to see" for i in range(200)]
    + ["Traceback (most recent call last):", "ZeroDivisionError: division by zero in ledger.py"]
)


def _agent_run(store: Any) -> tuple[str, int]:
    s = store.create_session()
    call = ToolCallPart(id="c1", name="run_tests", arguments='{"path": "tests/"}')
    store.append(
        s.id,
        [
            Message.user("Fix the failing ledger tests."),
            Message(role="assistant", parts=[call]),
            Message.tool("c1", BIG_OUTPUT, name="run_tests"),
            Message.assistant("The ledger divides by the number of accounts; patching."),
        ],
    )
    (prune_seq,) = store.append(s.id, [Prune(targets=[PartRef(seq=3, index=0)])])
    return s.id, prune_seq


def test_search_finds_a_phrase_from_a_pruned_tool_output(api_store: Any) -> None:
    sid, _ = _agent_run(api_store)
    rendered = json.dumps(api_store.view(sid).to_messages())
    assert "ZeroDivisionError" not in rendered  # the model no longer sees it
    hits = api_store.search('"division by zero"')
    assert [(h.session_id, h.seq) for h in hits] == [(sid, 3)]
    assert hits[0].kind == "message" and hits[0].role == "tool"
    assert "division by zero" in hits[0].snippet
    # The original behind the hit, byte for byte.
    assert api_store.original(sid, PartRef(seq=3, index=0)).output == BIG_OUTPUT


def test_words_phrases_case_and_punctuation(api_store: Any) -> None:
    sid, _ = _agent_run(api_store)
    assert {h.seq for h in api_store.search("LEDGER")} == {1, 3, 4}
    assert {h.seq for h in api_store.search("ledger patching")} == {4}  # every word
    assert api_store.search('"zero division"') == []  # a phrase keeps its order
    assert {h.seq for h in api_store.search("ledger.py")} == {3}
    assert {h.seq for h in api_store.search("run_tests")} == {2, 3}  # tool names count
    assert api_store.search("nonexistentword") == []


def test_pages_are_disjoint_and_ranked(api_store: Any) -> None:
    s = api_store.create_session()
    api_store.append(s.id, [Message.user(f"deploy step {i} of the rollout") for i in range(25)])
    api_store.append(s.id, [Message.user("rollout rollout rollout: the rollout failed")])
    first = api_store.search("rollout", limit=10)
    second = api_store.search("rollout", limit=10, offset=10)
    third = api_store.search("rollout", limit=10, offset=20)
    seqs = [h.seq for h in first + second + third]
    assert len(seqs) == 26 and len(set(seqs)) == 26
    assert first[0].seq == 26  # the densest match ranks first
    ranks = [h.rank for h in first + second + third]
    assert ranks == sorted(ranks, reverse=True)


def test_search_is_tenant_and_session_scoped(api_store: Any) -> None:
    sid, _ = _agent_run(api_store)
    other_sid, _ = _agent_run(api_store)
    other_tenant = api_store.with_tenant(f"other-{uuid.uuid4().hex}")
    foreign, _ = _agent_run(other_tenant)
    assert {h.session_id for h in api_store.search("ledger")} == {sid, other_sid}
    assert {h.session_id for h in api_store.search("ledger", session_id=sid)} == {sid}
    assert {h.session_id for h in other_tenant.search("ledger")} == {foreign}
    with pytest.raises(NotFoundError):
        api_store.search("ledger", session_id=foreign)
    # A fork searches what it inherited, and its own events.
    fork = api_store.fork(sid, 2)
    api_store.append(fork.id, [Message.user("try the ledger rounding instead")])
    found = {(h.session_id, h.seq) for h in api_store.search("ledger", session_id=fork.id)}
    assert found == {(sid, 1), (fork.id, 3)}


def test_the_index_follows_new_appends_and_summaries(api_store: Any) -> None:
    sid, prune_seq = _agent_run(api_store)
    assert api_store.search("quarterly") == []
    api_store.append(
        sid,
        [
            Condensation(
                forgotten_from=2,
                forgotten_to=prune_seq,
                summary="Fixed the quarterly ledger division bug.",
                summary_tokens=9,
            )
        ],
    )
    api_store.enqueue(sid, "next: the quarterly report")
    hits = api_store.search("quarterly")
    assert {h.kind for h in hits} == {"condensation", "queued"}
    assert api_store.index_search() == 0  # already caught up


def test_bad_queries_are_refused(api_store: Any) -> None:
    for bad in ["", "   ", '"" ...', None]:
        with pytest.raises(InvalidEventError):
            api_store.search(bad)
    with pytest.raises(InvalidEventError):
        api_store.search("x", limit=0)
    with pytest.raises(InvalidEventError):
        api_store.search("x", offset=-1)


def test_search_from_the_command_line(db_url: str) -> None:
    from click.testing import CliRunner

    from eventstore import EventStore
    from eventstore.cli import cli

    tenant = f"t-{uuid.uuid4().hex}"
    with EventStore(db_url, tenant=tenant, upgrade=True) as store:
        sid, _ = _agent_run(store)
    runner = CliRunner()
    base = ["--db", db_url, "--tenant", tenant]
    out = runner.invoke(cli, [*base, "search", '"division by zero"', "--json"])
    assert out.exit_code == 0, out.output
    (hit,) = json.loads(out.output)
    assert (hit["session_id"], hit["seq"]) == (sid, 3)
    human = runner.invoke(cli, [*base, "search", "ledger", "--session", sid])
    assert human.exit_code == 0 and human.output.count(sid[:8]) == 3
    empty = runner.invoke(cli, [*base, "search", "..."])
    assert empty.exit_code != 0 and "no words" in empty.output


def test_a_multi_megabyte_output_is_indexed_on_both_backends(store: Any) -> None:
    # Postgres refuses a tsvector over 1 MB; one such output used to fail indexing and so
    # every later search of the tenant. This one has 2 MB of distinct words.
    log_lines = [f"step {i:07d} compiled module m{i}" for i in range(160_000)]
    log_lines[5_000] = "final verdict: zanzibar"
    output = "starting the nightly build\n" + "\n".join(log_lines)
    assert len(output) > 5_000_000
    s = store.create_session()
    store.append(s.id, [Message.tool("c1", output, name="build")])
    store.append(s.id, [Message.user("a later message about zanzibar")])
    assert {h.seq for h in store.search('"starting the nightly build"')} == {1}
    assert {h.seq for h in store.search("zanzibar verdict")} == {1}
    assert {h.seq for h in store.search("zanzibar")} == {1, 2}


def test_a_tool_output_too_large_for_one_tsvector_never_breaks_search(store: Any) -> None:
    from eventstore.tools import handle_tool_call

    sid = store.create_session().id
    # About 3 MB of distinct words, like a package-lock.json full of integrity hashes.
    lock = "\n".join(
        f'"pkg{i}": "sha512-{uuid.uuid5(uuid.NAMESPACE_OID, str(i)).hex}"' for i in range(60_000)
    )
    call = ToolCallPart(id="c1", name="read_file", arguments='{"path": "package-lock.json"}')
    store.append(
        sid,
        [
            Message(role="assistant", parts=[call]),
            Message.tool("c1", "lockfileversion " + lock, name="read_file"),
        ],
    )
    assert [h.seq for h in store.search("lockfileversion")] == [2]
    assert [h.seq for h in store.search("pkg3")] == [2]  # near the start: indexed
    store.append(sid, [Message.user("the build is green again")])
    assert [h.seq for h in store.search("green")] == [3]  # later events still indexed
    # What the model gets back is bounded, hits and errors alike.
    out = handle_tool_call(store, sid, "search_history", {"query": "lockfileversion"})
    assert out is not None and 'ref="2"' in out and len(out) < 1_000
    out = handle_tool_call(store, sid, "search_history", {"query": "!" * 200_000})
    assert out is not None and out.startswith("Error:") and len(out) < 1_000


def test_hits_of_deleted_sessions_are_dropped_before_the_page_is_cut(store: Any) -> None:
    gone = store.create_session().id
    store.append(gone, [Message.user("quokka quokka quokka") for _ in range(5)])
    kept = store.create_session().id
    store.append(kept, [Message.user("a quokka, once")])
    store.delete_session(gone)
    first = store.search("quokka", limit=3)
    assert [(h.session_id, h.seq) for h in first] == [(kept, 1)]
    assert store.search("quokka", limit=3, offset=1) == []


def test_a_fork_of_a_deleted_parent_searches_what_it_inherited(store: Any) -> None:
    parent = store.create_session().id
    store.append(parent, [Message.user("the axolotl migration"), Message.assistant("ok")])
    fork = store.fork(parent, 2)
    store.append(fork.id, [Message.user("continue the axolotl work")])
    store.delete_session(parent)
    found = {(h.session_id, h.seq) for h in store.search("axolotl", session_id=fork.id)}
    assert found == {(parent, 1), (fork.id, 3)}
    # The whole tenant's search leaves the deleted parent's own events out.
    assert {(h.session_id, h.seq) for h in store.search("axolotl")} == {(fork.id, 3)}


def test_ranks_do_not_depend_on_other_tenants_documents(store: Any) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.user("the pangolin escaped"),
            Message.user("pangolin pangolin: two pangolin sightings near the pangolin house"),
            Message.user("a long note that mentions the pangolin once among many other words"),
        ],
    )
    before = [(h.seq, h.rank) for h in store.search("pangolin")]
    other = store.with_tenant(f"other-{uuid.uuid4().hex}")
    osid = other.create_session().id
    other.append(osid, [Message.user(f"pangolin report {i}") for i in range(300)])
    other.append(osid, [Message.user(f"unrelated words {i} " * 30) for i in range(300)])
    assert other.search("pangolin", limit=1)
    after = [(h.seq, h.rank) for h in store.search("pangolin")]
    assert after == before
    assert before[0][0] == 2  # the document about it ranks first


def test_a_word_ranks_by_its_occurrences_not_by_substrings(api_store: Any) -> None:
    s = api_store.create_session()
    api_store.append(
        s.id,
        [
            Message.user("index index index alpha beta gamma"),
            Message.user("index index alpha beta gamma delta"),
            Message.user("index indexing reindexed indexes indexer indexed"),
        ],
    )
    # Same length, three, two and one occurrence: a count of substrings (6 in the last)
    # or of documents (a tie, broken by recency) puts the last one first.
    hits = api_store.search("index")
    assert [h.seq for h in hits] == [1, 2, 3]
    assert hits[0].rank > hits[1].rank > hits[2].rank


def test_sqlite_ranks_are_bm25_term_frequencies_against_a_fixed_length(tmp_path: Any) -> None:
    """On SQLite a rank is BM25's per-document part: for each query token, with ``tf``
    its occurrences in the document and ``dl`` the document's tokens, ``tf * 2.2 / (tf +
    1.2 * (0.25 + 0.75 * dl / 64))``, summed. Lengths of one, two and three bytes in
    FTS5's docsize record, and a word that the index splits at its underscore."""
    from eventstore import EventStore
    from eventstore._features.search import _AVGDL, _B, _K1

    def bm25(tf: int, dl: int) -> float:
        return tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * dl / _AVGDL))

    docs = {  # text: (tf, dl) of "okapi"
        "okapi okapi okapi filler words here": (3, 6),
        "okapi " + "filler " * 199 + "okapi": (2, 201),
        "okapi " * 7 + "filler " * 19_993: (7, 20_000),
        "okapi_gnu gnu okapi": (2, 4),  # tokens okapi, gnu, gnu, okapi
    }
    with EventStore(f"sqlite:///{tmp_path / 'rank.db'}", upgrade=True) as store:
        sid = store.create_session().id
        store.append(sid, [Message.user(text) for text in docs])
        got = {h.seq: h.rank for h in store.search("okapi", limit=10)}
        want = {seq: bm25(*counts) for seq, counts in enumerate(docs.values(), 1)}
        assert got == pytest.approx(want, rel=1e-12)
        (both,) = store.search("okapi_gnu")
        # okapi and gnu, each twice
        assert both.seq == 4 and both.rank == pytest.approx(2 * bm25(2, 4), rel=1e-12)


def test_a_purge_waits_for_an_indexer_that_read_the_erased_text(db_url: str) -> None:
    """A purge that committed while an indexer held the erased text in hand left the
    words searchable for good (the indexer wrote them after the purge's delete)."""
    import threading
    import time

    from sqlalchemy import text

    from eventstore import EventStore

    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        sid = store.create_session().id
        store.append(sid, [Message.user("hello")])
        store.search("hello")  # the tenant's progress row exists
        store.append(sid, [Message.user("my secret is zebracorn")])
        errors: list[BaseException] = []

        def run(fn: Any) -> threading.Thread:
            def body() -> None:
                try:
                    fn()
                except BaseException as exc:  # pragma: no cover - reported below
                    errors.append(exc)

            t = threading.Thread(target=body)
            t.start()
            return t

        if store.dialect == "postgresql":
            # Hold the indexer after it read the payload and wrote its words, before it
            # commits: it waits for the progress row this transaction locks.
            with store.engine.connect() as conn, conn.begin():
                conn.execute(
                    text("SELECT 1 FROM search_progress WHERE tenant = :t FOR UPDATE"),
                    {"t": store.tenant},
                )
                indexer = run(store.index_search)
                time.sleep(1.0)
                purger = run(lambda: store.purge(sid))
                time.sleep(1.0)
            indexer.join(20)
            purger.join(20)
        else:
            for t in [run(store.index_search), run(lambda: store.purge(sid))]:
                t.join(20)
        assert errors == []
        assert store.search("zebracorn") == []
    finally:
        store.close()


def test_purged_words_leave_no_trace_in_the_index_or_the_file(db_url: str, tmp_path: Any) -> None:
    from sqlalchemy import text

    from eventstore import EventStore

    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        sid = store.create_session().id
        keep = store.create_session().id
        store.append(keep, [Message.user(f"ordinary words {i}") for i in range(50)])
        store.append(sid, [Message.user("the password is qxzvwordlyk")])
        assert store.search("qxzvwordlyk")
        store.purge(sid)
        assert store.search("qxzvwordlyk") == []
        assert store.search("ordinary", limit=1)
        with store.engine.connect() as conn:
            if store.dialect == "postgresql":
                left = conn.execute(
                    text("SELECT count(*) FROM search_docs WHERE tsv @@ 'qxzvwordlyk'::tsquery")
                ).scalar()
                assert left == 0
            else:
                conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
                blobs = conn.exec_driver_sql("SELECT block FROM search_fts_data").all()
                assert not any(b"qxzvwordlyk" in bytes(b[0] or b"") for b in blobs)
        if store.dialect == "sqlite":
            store.close()
            path = db_url.removeprefix("sqlite:///")
            data = open(path, "rb").read()
            assert b"qxzvwordlyk" not in data
    finally:
        store.close()


def test_a_purge_merges_the_index_in_short_steps(db_url: str, monkeypatch: Any) -> None:
    """Without FTS5's secure-delete (SQLite before 3.42) the purge leaves out the erased
    words by merging the index into one segment: it did that with one ``optimize``, a
    write of seconds on a large index while every other writer waited. It now merges a few
    pages per transaction, and the words are gone all the same."""
    import sqlite3

    from sqlalchemy import text

    from eventstore import EventStore
    from eventstore._features import purge

    steps: list[bool] = []
    merge = purge.merge_search

    def counted(conn: Any) -> bool:
        more = merge(conn)
        steps.append(more)
        return more

    monkeypatch.setattr(purge, "merge_search", counted)
    monkeypatch.setattr(purge, "MERGE_PAGES", 1)
    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        keep = store.create_session().id
        for round_ in range(12):  # each indexing pass writes a segment of its own
            store.append(keep, [Message.user(f"ordinary words {round_} {i}") for i in range(40)])
            assert store.search(f"ordinary {round_}", limit=1)
        sid = store.create_session().id
        store.append(sid, [Message.user("the password is zqxvmerged")])
        assert store.search("zqxvmerged")
        store.purge(sid)
        assert store.search("zqxvmerged") == []
        assert len(store.search("ordinary", limit=500)) == 480
        if store.dialect == "postgresql":
            assert steps == []  # its search rows are deleted by key in the last step
        elif sqlite3.sqlite_version_info >= (3, 42):
            assert steps == [False]  # the deletes already removed the words
        else:
            assert len(steps) >= 2 and steps[-1] is False and all(steps[:-1])
            with store.engine.connect() as conn:
                blobs = conn.exec_driver_sql("SELECT block FROM search_fts_data").all()
                assert not any(b"zqxvmerged" in bytes(b[0] or b"") for b in blobs)
                left = conn.execute(text("SELECT count(*) FROM search_fts_data")).scalar()
                assert left is not None and left > 0
    finally:
        store.close()
