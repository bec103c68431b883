"""The extractive summary keeps the facts an agent needs, through any number of rounds.

Each test builds its session here; none depends on the corpus.
"""

from __future__ import annotations

import json

from condensers import ExtractiveSummarizer
from condensers.summarizing.extractive import MAX_ERROR_LINES
from condensers.summarizing.template import HEADINGS
from eventstore import EventStore, Message, ToolCallPart
from eventstore.tokens import HeuristicTokenCounter

TRACEBACK = """Traceback (most recent call last):
  File "/repo/src/ledger/io.py", line 12, in load
    return parse(text)
  File "/repo/src/ledger/parse.py", line 40, in parse
    raise ValueError("bad header")
ValueError: bad header
"""
VIEWER = """[File: src/ledger/parse.py (60 lines total)]
38:    if not text:
39:        # raise ValueError when empty
40:        raise ValueError("bad header")
"""


TEXT_MODE_REPLY = (
    "Let me look at ./src/pkg/ and tests/test_api.py.\n"
    + "```bash\ncd src && grep -rn TODO . | head\n```"
)


def _shell(call_id: str, command: str) -> Message:
    return Message.assistant(
        None, [ToolCallPart(id=call_id, name="bash", arguments=f'{{"command": "{command}"}}')]
    )


def _events(store: EventStore, sid: str) -> list:
    return list(store.read(sid))


def test_error_lines_prefer_the_exception_and_skip_code(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.user("Fix the loader."),
            _shell("c1", "python -m ledger load data.csv"),
            Message.tool("c1", TRACEBACK + "Error: exit code 1\n", name="bash"),
            _shell("c2", "cat -n src/ledger/parse.py"),
            Message.tool("c2", VIEWER, name="bash"),
            _shell("c3", "python -m ledger load data.csv"),
            Message.tool("c3", TRACEBACK, name="bash"),  # the same error again
        ],
    )
    text = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    errors = text.split("## Errors and fixes", 1)[1].split("##", 1)[0]
    lines = [ln for ln in errors.splitlines() if ln.startswith("- ")]
    # The exception line comes before the other error lines of its output; the same error
    # at the second run is one entry naming both (placed where it last occurred), with the
    # file and line the traceback ends in.
    assert lines == [
        "- [3] bash: Error: exit code 1",
        "- [3, 7] bash: ValueError: bad header (at /repo/src/ledger/parse.py:40)",
    ]
    first = ExtractiveSummarizer().summarize(None, _events(store, sid)[:3]).text
    assert first.split("## Errors and fixes", 1)[1].index("ValueError: bad header") < first.split(
        "## Errors and fixes", 1
    )[1].index("exit code 1")
    assert "Traceback (most recent call last)" not in errors  # the header is no error
    assert "40:" not in errors and "raise ValueError" not in errors  # shown code is not either
    # Paths named in a traceback are kept (after those the agent named itself).
    assert "/repo/src/ledger/parse.py" in text and "data.csv" in text


def test_paths_and_commands_from_text_mode_agents(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.user("Make the tests pass."),
            Message.assistant(TEXT_MODE_REPLY),
            Message.user("src/pkg/api.py:3: # TODO"),
        ],
    )
    text = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    assert "./src/pkg/" in text and "tests/test_api.py" in text
    assert "commands run:" in text
    for word in ("cd", "grep", "head"):
        assert f"{word} x1" in text


def test_bare_file_names_of_common_languages_count_as_paths(store: EventStore) -> None:
    sid = store.create_session().id
    names = ["printenv.pl", "Main.kt", "App.swift", "init.lua", "deploy.tf", "notes.org"]
    store.append(
        sid,
        [
            Message.user("Look around."),
            Message.assistant("I will open " + ", ".join(names) + " next; see v1.2 and e.g."),
        ],
    )
    text = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    files = text[text.index("## Files") :]
    for name in names:
        assert f"- {name}" in files
    assert "v1.2" not in files and "e.g" not in files  # not file names


def test_a_file_named_short_and_in_full_is_listed_once(store: EventStore) -> None:
    sid = store.create_session().id
    text = "Edit decrypt.py, then /work/ctf/decrypt.py, a.py in src/a.py, ./b.py and src/b.py."
    store.append(sid, [Message.user("Look around."), Message.assistant(text)])
    summary = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    section = summary[summary.index("## Files") :].split("\n\n")[0]
    files = [f for f in section.split("\n") if f.startswith("- ")]
    assert files == ["- /work/ctf/decrypt.py", "- src/a.py", "- ./b.py", "- src/b.py"]


def test_facts_survive_five_condensations(store: EventStore) -> None:
    """Multi-line requests, errors and paths of every round are still there after the
    fifth summary of summaries."""
    sid = store.create_session().id
    summarizer = ExtractiveSummarizer()
    summary = None
    facts: list[str] = []
    for round_ in range(5):
        start = store.head(sid)
        request = f"Round {round_}: rename the field.\nKeep API v{round_} stable."
        store.append(
            sid,
            [
                Message.user(request),
                _shell(f"r{round_}", f"cat src/mod_{round_}.py"),
                Message.tool(f"r{round_}", f"KeyError: 'field_{round_}'", name="bash"),
                Message.assistant(f"Done with round {round_}."),
            ],
        )
        facts += [
            f"Keep API v{round_} stable.",
            f"src/mod_{round_}.py",
            f"KeyError: 'field_{round_}'",
        ]
        new = [e for e in store.read(sid) if e.seq > start]
        summary = summarizer.summarize(summary, new).text
    for fact in facts:
        assert fact in summary, fact


def test_lists_keep_three_entries_under_pressure(store: EventStore) -> None:
    sid = store.create_session().id
    batch = [Message.user("Fix everything. " + "context " * 400)]
    for i in range(12):
        batch += [
            _shell(f"c{i}", f"cat src/file_{i}.py"),
            Message.tool(f"c{i}", f"OSError: disk {i} failed", name="bash"),
        ]
    store.append(sid, batch)
    tight = ExtractiveSummarizer().summarize(None, _events(store, sid), limit_tokens=150)
    files = tight.text.split("## Files and resources touched", 1)[1].split("##", 1)[0]
    errors = tight.text.split("## Errors and fixes", 1)[1].split("##", 1)[0]
    assert sum(ln.startswith("- src/") for ln in files.splitlines()) >= 3
    assert sum("OSError" in ln for ln in errors.splitlines()) >= 3


def test_a_command_written_out_in_the_text_is_not_repeated_as_call_arguments(
    store: EventStore,
) -> None:
    """A text-mode agent writes its command in a fenced block and the importer makes it a
    call: the summary quotes the command once. A call whose arguments are not in the text
    keeps them, and "In progress" points at the quote instead of repeating it."""
    command = "curl -X POST http://web.example:8000/cgi-bin/file.pl?/root/flag"
    sid = store.create_session().id
    written = Message.assistant(
        f"Let us read the flag.\n```\n{command}\n```",
        [ToolCallPart(id="c1", name="curl", arguments=json.dumps({"command": command}))],
    )
    silent = Message.assistant(
        "Now the config.",
        [ToolCallPart(id="c2", name="bash", arguments=json.dumps({"command": "cat /etc/app.ini"}))],
    )
    store.append(
        sid, [Message.user("Find the flag."), written, Message.tool("c1", "no", name="curl")]
    )
    text = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    assert text.count(command) == 1 and "curl(...)" in text
    assert "quoted under Current state" in text
    store.append(sid, [silent, Message.tool("c2", "[app]", name="bash")])
    text = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    assert 'bash({"command": "cat /etc/app.ini"})' in text


def test_the_same_error_at_several_steps_is_one_entry_listing_them(store: EventStore) -> None:
    sid = store.create_session().id
    events: list[Message] = [Message.user("Make the import work.")]
    for i in range(1, 4):
        events += [
            _shell(f"c{i}", "python -m app"),
            Message.tool(f"c{i}", "ModuleNotFoundError: No module named 'yaml'", name="bash"),
        ]
    store.append(sid, events[:5])
    first = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    store.append(sid, events[5:])
    stored = _events(store, sid)
    text = ExtractiveSummarizer().summarize(first, stored[5:]).text  # anchored on the first
    errors = text.split("## Errors and fixes", 1)[1].split("##", 1)[0]
    lines = [ln for ln in errors.splitlines() if ln.startswith("- ")]
    seqs = [str(e.seq) for e in stored if e.event.role == "tool"]  # type: ignore[union-attr]
    assert lines == [f"- [{', '.join(seqs)}] bash: ModuleNotFoundError: No module named 'yaml'"]


def test_the_same_error_from_two_tools_is_one_entry_and_other_errors_stay(
    store: EventStore,
) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.user("Fix it."),
            _shell("c1", "flake8 app.py"),
            Message.tool("c1", "E999 IndentationError: unexpected indent", name="bash"),
            _shell("c2", "edit 3:3"),
            Message.tool("c2", "E999 IndentationError: unexpected indent", name="edit"),
            Message.user("ValueError: bad input"),
            _shell("c3", "python app.py"),
            Message.tool("c3", "KeyError: bad input", name="bash"),
        ],
    )
    stored = _events(store, sid)
    text = ExtractiveSummarizer().summarize(None, stored).text
    errors = text.split("## Errors and fixes", 1)[1].split("##", 1)[0]
    lines = [ln for ln in errors.splitlines() if ln.startswith("- ")]
    s = [str(e.seq) for e in stored]
    assert lines == [
        f"- [{s[2]}, {s[4]}] edit: E999 IndentationError: unexpected indent",
        f"- [{s[5]}] ValueError: bad input",
        f"- [{s[7]}] bash: KeyError: bad input",
    ]


def _files_run(store: EventStore, files: int) -> str:
    """A session reading ``files`` modules one by one, and coming back every tenth turn to
    one early file (the most referenced)."""
    sid = store.create_session().id
    batch: list[Message] = [Message.user("Tidy the package.")]
    for i in range(files):
        batch.append(_shell(f"c{i}", f"cat src/pkg/module_{i:03d}.py"))
        batch.append(Message.tool(f"c{i}", "ok", name="bash"))
        if i % 10 == 0:
            batch.append(_shell(f"r{i}", "cat src/pkg/core_config.py"))
            batch.append(Message.tool(f"r{i}", "ok", name="bash"))
    store.append(sid, [Message.system("rules"), *batch])
    return sid


def test_inventories_keep_the_newest_and_most_referenced_and_say_what_was_left_out(
    store: EventStore,
) -> None:
    sid = _files_run(store, 300)
    summary = ExtractiveSummarizer(max_files=40).summarize(None, _events(store, sid)).text
    files = summary.split(f"## {HEADINGS[5]}", 1)[1]
    assert "src/pkg/module_299.py" in files  # the newest
    assert "src/pkg/core_config.py" in files  # the most referenced
    assert "src/pkg/module_000.py" not in files
    assert "older files omitted; search_history finds them" in files


def test_text_mode_actions_count_as_commands(store: EventStore) -> None:
    sid = store.create_session().id
    store.append(
        sid,
        [
            Message.system("rules"),
            Message.user("Find the bug."),
            Message.assistant("Let me look.\nACTION: grep -rn parse src/ | head -5"),
            Message.user("src/a.py:3: parse()"),
            Message.assistant("Now run it:\n```bash\ncd src && python -m pytest -q\n```"),
            Message.user("1 failed"),
        ],
    )
    summary = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    commands = next(ln for ln in summary.splitlines() if ln.startswith("- commands run:"))
    for word in ("grep", "head", "cd", "python"):
        assert f"{word} x" in commands


def test_an_inventory_over_its_limit_fills_the_room_and_names_what_it_left_out(
    store: EventStore,
) -> None:
    """Sized to a limit, the file list keeps as many entries as fit (not a power-of-two
    share of its cap), the newest and the most referenced verbatim, and says how many
    it left out and that search_history finds them."""
    sid = _files_run(store, 200)
    summarizer = ExtractiveSummarizer()
    events = _events(store, sid)
    whole = summarizer.summarize(None, events).text
    counter = HeuristicTokenCounter()  # what the summary is sized with when given none
    limit = counter.count(whole) // 2
    summary = summarizer.summarize(None, events, limit_tokens=limit).text
    used = counter.count(summary)
    assert used <= limit
    assert used >= limit * 0.9  # the room is used, not halved away
    files = summary.split(f"## {HEADINGS[5]}", 1)[1].split("\n## ", 1)[0]
    kept = [ln for ln in files.splitlines() if ln.startswith("- src/")]
    assert "src/pkg/module_199.py" in files  # the newest
    assert "src/pkg/core_config.py" in files  # the most referenced
    assert "src/pkg/module_000.py" not in files
    left_out = 201 - len(kept)
    assert f"- ({left_out} older files omitted; search_history finds them by name)" in files


def test_a_directory_or_name_another_entry_holds_is_listed_once(store: EventStore) -> None:
    """A path whose text another entry contains (its directory, its bare name) is not
    listed again, and the entry holding it moves to where it was named last."""
    sid = store.create_session().id
    text = (
        "Open ~/.cfg/app.json and /srv/site/index.html, then src/util.py. "
        "Back to ~/.cfg/ and index.html, and tests/ next to tests/test_a.py."
    )
    store.append(sid, [Message.user("Look around."), Message.assistant(text)])
    summary = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    section = summary[summary.index("## Files") :].split("\n\n")[0]
    files = [f[2:] for f in section.split("\n") if f.startswith("- ")]
    assert files == ["src/util.py", "~/.cfg/app.json", "/srv/site/index.html", "tests/test_a.py"]


def test_numbered_viewer_lines_with_an_arrow_are_not_errors(store: EventStore) -> None:
    sid = store.create_session().id
    shown = "   12→class CLIError extends Error {\n   13→  // Error handling\n"
    store.append(
        sid,
        [
            Message.user("Read the CLI."),
            Message.assistant(None, [ToolCallPart(id="v", name="Read", arguments="{}")]),
            Message.tool("v", shown + "TypeError: x is undefined", name="Read"),
        ],
    )
    summary = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    errors = summary.split(f"## {HEADINGS[3]}", 1)[1].split("\n## ", 1)[0]
    assert "TypeError: x is undefined" in errors
    assert "CLIError" not in errors and "Error handling" not in errors


def test_over_its_cap_the_file_list_drops_words_with_a_slash_before_paths(
    store: EventStore,
) -> None:
    sid = store.create_session().id
    text = "Turn it on/off in src/app.py, send application/json to lib/net.py and ./run.sh."
    store.append(sid, [Message.user("Look around."), Message.assistant(text)])
    summary = ExtractiveSummarizer(max_files=3).summarize(None, _events(store, sid)).text
    files = summary.split(f"## {HEADINGS[5]}", 1)[1].split("\n## ", 1)[0]
    for path in ("src/app.py", "lib/net.py", "./run.sh"):
        assert f"- {path}" in files
    assert "on/off" not in files and "application/json" not in files
    assert "(2 older files omitted; search_history finds them by name)" in files


def test_a_message_sent_again_word_for_word_is_one_request_listing_its_seqs(
    store: EventStore,
) -> None:
    sid = store.create_session().id
    nag = "Please always provide EXACTLY ONE action in triple backticks.\nTry again."
    batch = [Message.user("Fix the parser."), Message.assistant("a")]
    for i in range(3):
        batch += [Message.user(nag), Message.assistant(f"attempt {i}")]
    store.append(sid, batch)
    summary = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    intent = summary.split(f"## {HEADINGS[1]}", 1)[0]
    assert intent.count("EXACTLY ONE action") == 1
    assert "- [3, 5, 7] Please always provide EXACTLY ONE action" in intent
    assert intent.index("Fix the parser.") < intent.index("EXACTLY ONE")


def test_an_output_with_many_error_lines_adds_the_newest_and_counts_the_rest(
    store: EventStore,
) -> None:
    """A failing suite prints an error line per test: one output adds at most
    ``MAX_ERROR_LINES`` of them to the inventory, and the rest are counted with the way to
    find them, never dropped silently."""
    sid = store.create_session().id
    report = "".join(
        f"FAILED tests/test_api.py::test_case_{i} - AssertionError\n" for i in range(55)
    )
    store.append(
        sid,
        [Message.user("Fix the API."), _shell("c1", "pytest -q"), Message.tool("c1", report)],
    )
    text = ExtractiveSummarizer().summarize(None, _events(store, sid)).text
    errors = text.split("## Errors and fixes", 1)[1].split("##", 1)[0]
    listed = [ln for ln in errors.splitlines() if "FAILED tests/test_api.py" in ln]
    assert len(listed) == MAX_ERROR_LINES
    assert f"({55 - MAX_ERROR_LINES} earlier errors omitted; search_history" in errors
