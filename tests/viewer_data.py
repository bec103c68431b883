"""Databases for the viewer tests: a real trajectory condensed turn by turn, a small
synthetic session with a prune, a condensation, llm calls and a fork, and a session of
hostile markup."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from conftest import corpus_files

from condensers import CondensationPolicy
from eventstore import (
    Condensation,
    EventStore,
    FilePart,
    Message,
    PartRef,
    Prune,
    ReasoningPart,
    TextPart,
    ToolCallPart,
)
from eventstore.budget import Budget
from eventstore.importers import load_transcripts

# The shortest SWE-agent trajectories that still fill a small window several times over.
TRAJECTORIES = [
    p
    for p in corpus_files("swe-agent/**/*.traj")
    if "marshmallow-1867" in str(p) and "default_sys-env_window100" in str(p)
]
# A small window: results are capped before they are sent, so an 8k one rarely fills up.
WINDOW = Budget(max_input_tokens=4096, reserved_output=512, buffer=205)


@dataclass
class AuditDb:
    url: str
    tenant: str
    synthetic: str = ""
    fork: str = ""
    real: str | None = None
    condensations: dict[str, list[int]] = field(default_factory=dict)


def replay_trajectory(store: EventStore, path: Path) -> str:
    """Import a trajectory the way an agent would have written it: before each model call
    the policy may condense, then the view sent is recorded, then the reply appended."""
    transcript = load_transcripts(path, "swe-agent")[0]
    sid = store.create_session(title=transcript.title, metadata=transcript.metadata).id
    # Condensing early (at 80%) makes the chart show real condensations.
    policy = CondensationPolicy(
        WINDOW, threshold=0.8, token_counter=store.token_counter, max_failures=1000
    )
    for evt in transcript.events:
        if isinstance(evt, Message) and evt.role == "assistant":
            out = policy.maybe_condense(store, sid)
            assert out.error is None, out.error
            view = store.view(sid)
            store.record_llm_call(sid, view, model="replay", append_response=False)
        store.append(sid, [evt])
    return sid


def synthetic_session(store: EventStore) -> str:
    """Twelve events: a tool call and its pruned result, a condensation, llm calls."""
    sid = store.create_session(title="synthetic audit", user_id="alice").id
    store.append(
        sid,
        [
            Message.system("You are a careful coding agent."),
            Message.user("Find the failing test in ledger/export.py"),
            Message.assistant(
                "Looking.", tool_calls=[ToolCallPart(id="call_ls", name="bash", arguments="ls")]
            ),
            Message.tool("call_ls", "OUTPUT-LINE\n" * 200, name="bash"),
        ],
    )
    view = store.view(sid)
    store.record_llm_call(sid, view, model="gpt-4o-mini", append_response=False)  # seq 5, sees 1..4
    store.append(
        sid,
        [
            Message.assistant("The test is test_export_since."),
            Prune(targets=[PartRef(seq=4, index=0)], tokens_freed=500, strategy="tool-output"),
            Message.user("Fix it please"),
            Message.assistant("Fixed: the --since flag now parses dates."),
        ],
    )
    store.append(
        sid,
        [
            Condensation(
                forgotten_from=3,
                forgotten_to=6,
                summary="SUMMARY-TEXT: the agent listed files and found test_export_since.",
                summary_tokens=20,
                pinned=[1, 2],
                forgotten_events=4,
                condenser="extractive",
                trigger="manual",
                tokens_before=900,
                tokens_after=120,
            )
        ],
    )
    view = store.view(sid)
    store.record_llm_call(sid, view, model="gpt-4o-mini", append_response=False)
    store.append(sid, [Message.assistant("All done.")])
    return sid


def build(url: str, tenant: str, *, real: bool = True) -> AuditDb:
    db = AuditDb(url=url, tenant=tenant)
    with EventStore(url, tenant=tenant, upgrade=True) as store:
        db.synthetic = synthetic_session(store)
        db.fork = store.fork(db.synthetic, 7, title="fork of the synthetic session").id
        if real and TRAJECTORIES:
            db.real = replay_trajectory(store, TRAJECTORIES[0])
        for sid in filter(None, (db.synthetic, db.real)):
            db.condensations[sid] = [e.seq for e in store.read(sid, kinds=["condensation"])]
    return db


#: A real Claude Code session with thinking blocks, tool calls and results (see
#: data/transcripts/PROVENANCE.md).
CLAUDE = Path(__file__).parent / "data/transcripts/claude-code/vibecodingtracker-claude_code.jsonl"
#: Markup that must reach every page as text.
HOSTILE = "<script>alert('x')</script>"


def hostile_session(store: EventStore) -> str:
    """Four messages with markup in a text, a reasoning, a tool call's id, name, argument
    key and value, a tool output, and a file name."""
    sid = store.create_session(title=HOSTILE).id
    store.append(
        sid,
        [
            Message.user(f"</pre>{HOSTILE}<pre>"),
            Message(
                role="assistant",
                parts=[
                    ReasoningPart(text=f"thinking {HOSTILE}"),
                    TextPart(text="calling"),
                    ToolCallPart(
                        id='call"><img src=x onerror=alert(1)>',
                        name=f"tool{HOSTILE}",
                        arguments=json.dumps({f"<b>{HOSTILE}": f"line one\n{HOSTILE}"}),
                    ),
                ],
            ),
            Message.tool(
                'call"><img src=x onerror=alert(1)>', f"out\n{HOSTILE}\n</details>", name="t"
            ),
            Message(
                role="user",
                parts=[
                    FilePart(media_type="image/png", data=b"\x89PNG" + b"0" * 2044),
                    FilePart(media_type="image/png", data=b"\x89PNG", name=HOSTILE),
                ],
            ),
        ],
    )
    return sid
