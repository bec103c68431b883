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
