"""Post-compaction rehydration: a summary keeps the newest output of the last files the
agent read or changed (``rehydrate_files``)."""

from __future__ import annotations

import json

import pytest

from condensers import CondensationPolicy, ExtractiveCondenser, Pipeline, registry
from condensers.summarizing import rehydrate
from eventstore import ConfigurationError, EventStore, Message, ToolCallPart
from eventstore.budget import Budget

BUDGET = Budget(4096, 512, 205)


def _touch(store: EventStore, sid: str, i: int, tool: str, path: str | None, out: str) -> int:
    args = {"path": path} if path is not None else {"command": "ls -la"}
    call = ToolCallPart(id=f"c{i}", name=tool, arguments=json.dumps(args))
    seqs = store.append(
        sid, [Message.assistant(f"step {i}", tool_calls=[call]), Message.tool(f"c{i}", out)]
    )
    return seqs[-1]


def _file(name: str, version: str, lines: int = 20) -> str:
    return "\n".join(f"# {name} {version} line {k}" for k in range(lines))


def _condense(store: EventStore, sid: str, files: int = 2) -> str:
    condenser = ExtractiveCondenser(rehydrate_files=files, rehydrate_tokens=120)
    policy = CondensationPolicy(BUDGET, Pipeline([condenser]), token_counter=store.token_counter)
    out = policy.condense(store, sid)
    assert out.condensed, out
    view = store.view(sid)
    assert view.summary is not None and view.tokens <= BUDGET.available
    return view.summary


def _session(store: EventStore) -> tuple[str, dict[str, int]]:
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Fix the parser.")])
    seqs = {
        "read a": _touch(store, sid, 1, "read_file", "src/a.py", _file("a.py", "v1")),
        "read b": _touch(store, sid, 2, "read_file", "src/b.py", _file("b.py", "v1")),
        "read c": _touch(store, sid, 3, "read_file", "src/c.py", _file("c.py", "v1", 400)),
        "edit a": _touch(store, sid, 4, "edit_file", "src/a.py", _file("a.py", "v2")),
    }
    for i in range(5, 9):
        _touch(store, sid, i, "bash", None, "total 0\n" * 400)
    return sid, seqs


def test_the_last_files_touched_stay_in_the_summary(store: EventStore) -> None:
    sid, seqs = _session(store)
    summary = _condense(store, sid)
    core, entries = rehydrate.split(summary)
    assert core is not None and rehydrate.HEADING not in core
    # Touched in the order a, b, c, a again: the last two are c and a (its edit).
    assert [e.path for e in entries] == ["src/c.py", "src/a.py"]
    c, a = entries
    # The edit tool's reply is not the file: a.py shows what was read, marked as changed
    # since by the edit (the call's seq), so the agent knows to read it again.
    assert a.header == (
        f"src/a.py (read_file, seq {seqs['read a']}) changed at seq {seqs['edit a'] - 1}"
    )
    assert a.body == _file("a.py", "v1")
    assert "a.py v2" not in summary
    # A long output keeps its head and tail, and says how to get the rest.
    assert c.body.startswith("# c.py v1 line 0") and c.body.endswith("# c.py v1 line 399")
    assert f'recall(ref="{seqs["read c"]}:0")' in c.body
    assert len(c.body) < len(_file("c.py", "v1", 400)) // 4
    # Outputs are indented: a line of one never reads as a heading.
    assert all(
        ln.startswith(("## ", "### ", "    ")) or not ln
        for ln in summary[summary.index(rehydrate.HEADING) :].split("\n")
    )


def test_the_section_is_carried_and_updated_by_the_next_condensation(
    store: EventStore,
) -> None:
    sid, _ = _session(store)
    _condense(store, sid)
    read_b = _touch(store, sid, 20, "read_file", "src/b.py", _file("b.py", "v3"))
    for i in range(21, 26):
        _touch(store, sid, i, "bash", None, "total 0\n" * 400)
    summary = _condense(store, sid)
    _, entries = rehydrate.split(summary)
    assert [e.path for e in entries] == ["src/a.py", "src/b.py"]  # c.py is the oldest now
    assert entries[1].header == f"src/b.py (read_file, seq {read_b})"
    assert entries[0].body == _file("a.py", "v1")  # carried from the previous summary
    assert summary.count(rehydrate.HEADING) == 1
    assert store.verify(sid).ok


def test_a_file_the_kept_tail_shows_again_is_left_out(store: EventStore) -> None:
    sid, _ = _session(store)
    _touch(store, sid, 30, "read_file", "src/a.py", _file("a.py", "v4"))  # newest step
    _, entries = rehydrate.split(_condense(store, sid))
    assert "src/a.py" not in [e.path for e in entries]


def test_off_by_default_and_checked() -> None:
    assert ExtractiveCondenser().rehydrate_files == 0
    assert registry.strategy("summarize", rehydrate_files=3).rehydrate_files == 3  # type: ignore[attr-defined]
    with pytest.raises(ConfigurationError, match="rehydrate_files"):
        ExtractiveCondenser(rehydrate_files=-1)
    with pytest.raises(ConfigurationError, match="rehydrate_tokens"):
        ExtractiveCondenser(rehydrate_files=1, rehydrate_tokens=0)


def test_without_rehydration_the_summary_has_no_file_section(store: EventStore) -> None:
    sid, _ = _session(store)
    assert rehydrate.HEADING not in _condense(store, sid, files=0)


def test_split_reads_back_what_section_writes() -> None:
    assert rehydrate.split(None) == (None, [])
    assert rehydrate.split("## Goal\n- x") == ("## Goal\n- x", [])
    text = "## Goal\n- fix\n\n" + "\n".join(
        [rehydrate.HEADING, "### a.md (read, seq 4)", "    # Title", "", "    body"]
    )
    core, entries = rehydrate.split(text)
    assert core == "## Goal\n- fix"
    assert entries == [rehydrate.FileEntry("a.md", "a.md (read, seq 4)", "# Title\n\nbody")]


def test_a_file_written_whole_shows_what_was_written_not_the_reply(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(sid, [Message.system("You fix bugs."), Message.user("Add a module.")])
    text = _file("new.py", "v1")
    call = ToolCallPart(
        id="w1",
        name="str_replace_editor",
        arguments=json.dumps({"command": "create", "path": "src/new.py", "file_text": text}),
    )
    store.append(
        sid,
        [
            Message.assistant("creating", tool_calls=[call]),
            Message.tool("w1", "File created successfully at: src/new.py"),
        ],
    )
    for i in range(5, 9):
        _touch(store, sid, i, "bash", None, "total 0\n" * 400)
    _, entries = rehydrate.split(_condense(store, sid))
    assert [e.path for e in entries] == ["src/new.py"]
    assert entries[0].body == text and "written at seq" in entries[0].header
