"""How the audit viewer shows messages: laid out to read on the view and event pages, with
their exact JSON a click away, on SQLite and Postgres. The readable form is checked against a
real Claude Code transcript (thinking blocks, tool calls and results) imported by the
importer, and against hostile content that must come out escaped."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator

import pytest
from click.testing import CliRunner
from markupsafe import escape

pytest.importorskip("starlette")
pytest.importorskip("jinja2")

from starlette.testclient import TestClient  # noqa: E402
from viewer_data import CLAUDE, HOSTILE, hostile_session  # noqa: E402

from eventstore import (  # noqa: E402
    EventStore,
    Message,
    ReasoningPart,
    ToolCallPart,
)
from eventstore.cli import cli  # noqa: E402
from eventstore.cli.viewer import create_app  # noqa: E402
from eventstore.cli.viewer.app import SECURITY_HEADERS  # noqa: E402
from eventstore.cli.viewer.messages import (  # noqa: E402
    message_blocks,
    pretty_arguments,
    show_messages,
)
from eventstore.importers import import_transcript  # noqa: E402

LOCAL = "http://127.0.0.1:8765"


@pytest.fixture
def client(store: EventStore) -> Iterator[TestClient]:
    yield TestClient(create_app(store), base_url=LOCAL)


def messages_of(page: str) -> list[str]:
    """Each ``<li class="msg ...">`` of the view page's message list."""
    listing = page[page.index('<ol class="messages" id="messages">') :]
    return re.split(r'<li class="msg ', listing)[1:]


def blocks_of(item: str) -> list[str]:
    """Each block of one message, from its class attribute on."""
    return item.split('<details class="block ')[1:]


def exact_json(item: str) -> object:
    found = re.search(r'<details class="json"><summary>JSON</summary><pre>(.*?)</pre>', item, re.S)
    assert found, item[:300]
    return json.loads(html.unescape(found.group(1)))


def test_a_claude_code_session_reads_as_messages_with_thinking_calls_and_paired_results(
    store: EventStore, client: TestClient
) -> None:
    [imported] = import_transcript(store, CLAUDE)
    sid = imported.session_id
    view = store.view(sid)
    sent = view.to_messages()
    page = client.get(f"/sessions/{sid}/view").text
    items = messages_of(page)
    assert len(items) == len(sent)
    # One click away: each message's JSON is exactly what the model was sent.
    assert [exact_json(item) for item in items] == sent

    thinking = [b["thinking"] for m in sent for b in m.get("thinking_blocks") or []]
    assert thinking, "the sample holds thinking blocks"
    blocks = re.findall(
        r'<details class="block reasoning"[^>]*>\s*<summary><span class="tag">thinking[^<]*</span>'
        r".*?</summary>\s*<pre>(.*?)</pre>",
        page,
        re.S,
    )
    assert [html.unescape(b) for b in blocks] == thinking

    # Every call links to the message holding its result and back, and the two share a colour.
    where: dict[str, int] = {}
    for n, m in enumerate(sent, 1):
        if m["role"] == "tool":
            where[m["tool_call_id"]] = n
    calls = [(n, c["id"]) for n, m in enumerate(sent, 1) for c in m.get("tool_calls") or []]
    assert len(calls) == len(where) == 31
    for n, call_id in calls:
        [block] = [b for b in blocks_of(items[n - 1]) if f'<code class="call-id">{call_id}<' in b]
        found = re.match(
            r'tool_call (pair-\d)" id="(m\d+-call-\d+)".*?'
            r'<a class="pair" href="#(m(\d+)-result-\d+)">its result in message (\d+)</a>',
            block,
            re.S,
        )
        assert found, block[:300]
        colour, anchor, result_anchor, result_n, said = found.groups()
        assert int(result_n) == int(said) == where[call_id] > n
        result = items[where[call_id] - 1]
        assert f'<details class="block tool_result {colour}" id="{result_anchor}"' in result
        assert f'href="#{anchor}">its call in message {n}</a>' in result

    # A result's line breaks are kept, not escaped as \n.
    read = next(m for m in sent if m["role"] == "tool" and "\n" in m["content"])
    first, second = read["content"].split("\n")[:2]
    assert escape(f"{first}\n{second}") in page
    # A call's arguments are laid out key by key.
    assert "<dt>file_path</dt><dd><pre>/home/wei/repo/claude-code/go.mod</pre></dd>" in page

    # The fingerprint is still the CLI's.
    result = CliRunner().invoke(
        cli, ["--db", store.url, "--tenant", store.tenant, "view", sid, "--json"]
    )
    assert result.exit_code == 0, result.output
    shown = re.search(r'id="fingerprint">([0-9a-f]{64})<', page)
    assert shown and shown.group(1) == json.loads(result.stdout)["fingerprint"]


def test_an_imported_event_page_shows_its_thinking_and_calls_readably(
    store: EventStore, client: TestClient
) -> None:
    [imported] = import_transcript(store, CLAUDE)
    sid = imported.session_id
    seq, msg = next(
        (s.seq, s.event)
        for s in store.read(sid)
        if isinstance(s.event, Message)
        and any(isinstance(p, ReasoningPart) for p in s.event.parts)
        and s.event.tool_calls
    )
    page = client.get(f"/sessions/{sid}/events/{seq}", params={"fragment": 1}).text
    reasoning = next(p for p in msg.parts if isinstance(p, ReasoningPart))
    assert '<details class="block reasoning" open>' in page
    assert f"<pre>{escape(reasoning.text)}</pre>" in page
    results = {
        p.tool_call_id: s.seq
        for s in store.read(sid)
        if isinstance(s.event, Message)
        for p in s.event.tool_results
    }
    for call in msg.tool_calls:
        assert f'<code class="call-id">{call.id}</code>' in page
        # The call links to the event holding its result, and that one back.
        seq_of_result = results[call.id]
        assert (
            f'<a class="pair" href="/sessions/{sid}/events/{seq_of_result}">'
            f"its result at seq {seq_of_result}</a>"
        ) in page
        back = client.get(f"/sessions/{sid}/events/{seq_of_result}").text
        assert f'href="/sessions/{sid}/events/{seq}">its call at seq {seq}</a>' in back
    stored = page[page.index('<details class="json">') :]
    assert json.loads(html.unescape(re.search(r"<pre>(.*?)</pre>", stored, re.S).group(1)))[  # type: ignore[union-attr]
        "parts"
    ] == [p.model_dump(mode="json", exclude_none=True) for p in msg.parts]


def test_hostile_content_in_outputs_arguments_and_ids_is_escaped(
    store: EventStore, client: TestClient
) -> None:
    sid = hostile_session(store)
    pages = [client.get(f"/sessions/{sid}/view")]
    pages += [client.get(f"/sessions/{sid}/events/{seq}") for seq in range(1, 5)]
    pages += [client.get(f"/sessions/{sid}/events/{seq}", params={"fragment": 1}) for seq in (2, 3)]
    for response in pages:
        assert response.status_code == 200
        page = response.text
        assert "<script>alert" not in page and "<img src=x" not in page
        assert "</details>\n</pre>" not in page  # a closing tag in an output stays text
        # The only scripts are the viewer's own files (none in a fragment); the policy is
        # unchanged.
        own = ['<script src="/static/htmx.min.js">', '<script src="/static/viewer.js">']
        assert re.findall(r"<script[^>]*>", page) == (own if "<html" in page else [])
        assert (
            response.headers["content-security-policy"]
            == SECURITY_HEADERS["Content-Security-Policy"]
        )
    view = pages[0].text
    assert escape(HOSTILE) in view
    # The argument key and its value, escaped, with the value's line break kept.
    assert f"<dt>&lt;b&gt;{escape(HOSTILE)}</dt>" in view
    assert f"<pre>line one\n{escape(HOSTILE)}</pre>" in view
    assert "image: image/png, 2.0 KB inline" in view
    assert f"file: {escape(HOSTILE)}, image/png, 4 bytes inline" in view
    assert f"image: {escape(HOSTILE)}, image/png, 4 bytes inline" in pages[4].text
    assert client.post(f"/sessions/{sid}/view").status_code == 405


def test_long_blocks_start_folded_and_short_ones_open(
    store: EventStore, client: TestClient
) -> None:
    sid = store.create_session().id
    long_output = "\n".join(f"row {i}" for i in range(100))
    store.append(
        sid,
        [
            Message.user("x" * 5000),
            Message.assistant("", tool_calls=[ToolCallPart(id="c1", name="ls", arguments="{}")]),
            Message.tool("c1", long_output, name="ls"),
            Message.assistant("", tool_calls=[ToolCallPart(id="c2", name="ls", arguments="-la")]),
            Message.tool("c2", "short", name="ls"),
        ],
    )
    items = messages_of(client.get(f"/sessions/{sid}/view").text)
    assert '<details class="block text"><summary><span class="tag">text</span>' in items[0]
    assert "1 lines, 5,000 characters" in items[0]
    assert re.search(r'<details class="block tool_result pair-0" id="m3-result-0">', items[2])
    assert "100 lines, " in items[2] and "row 99" in items[2]
    assert re.search(r'<details class="block tool_result pair-1" id="m5-result-0" open>', items[4])
    # Arguments that are not JSON are shown as they are.
    assert "<pre>-la</pre>" in items[3]


def test_message_blocks_name_every_part_and_keep_other_fields() -> None:
    blocks = message_blocks(
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look", "cache_control": {"type": "ephemeral"}},
                {"type": "image_url", "image_url": {"url": "https://example.org/a.png"}},
                {"type": "file", "file": {"filename": "spec.pdf", "file_id": "file-1"}},
                {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                {"type": "reasoning", "encrypted_content": "zz"},
            ],
            "metadata": {"turn": 1},
        }
    )
    assert [(b.kind, b.label) for b in blocks] == [
        ("text", ""),
        ("other", "text part fields"),
        ("attachment", "image: https://example.org/a.png"),
        ("attachment", "file: spec.pdf, file-1"),
        ("attachment", "audio: wav, 3 bytes"),
        ("other", "reasoning"),
        ("other", "other fields"),
    ]
    assert json.loads(blocks[1].text) == {"cache_control": {"type": "ephemeral"}}
    assert json.loads(blocks[-1].text) == {"metadata": {"turn": 1}}
    redacted = message_blocks(
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "plan",
            "thinking_blocks": [{"type": "redacted_thinking", "data": "abc"}],
        }
    )
    assert [(b.kind, b.label, b.text) for b in redacted] == [
        ("reasoning", "reasoning", "plan"),
        ("reasoning", "redacted thinking (3 characters)", ""),
    ]


def test_pretty_arguments_lay_out_objects_and_keep_anything_else() -> None:
    assert pretty_arguments('{"cmd": "ls\\n-la", "n": [1, 2]}') == (
        [("cmd", "ls\n-la"), ("n", "[\n  1,\n  2\n]")],
        "",
    )
    assert pretty_arguments("not json {") == (None, "not json {")
    assert pretty_arguments("[1]") == (None, "[\n  1\n]")
    assert pretty_arguments("{}") == (None, "{}")


def test_results_pair_with_calls_in_order_when_an_id_repeats() -> None:
    call = {"id": "same", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    shown = show_messages(
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "same", "content": "first"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "same", "content": "second"},
            {"role": "tool", "tool_call_id": "unknown", "content": "stray"},
        ]
    )
    assert [b.pair for m in shown for b in m.blocks] == [2, 1, 4, 3, None]
    assert shown[4].blocks[0].anchor == "" and shown[4].blocks[0].colour is None


def test_a_page_of_messages_numbers_and_links_from_its_first() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    shown = show_messages(
        [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "ok"},
        ],
        start=41,
    )
    assert [m.number for m in shown] == [41, 42]
    assert (shown[0].blocks[0].pair, shown[0].blocks[0].pair_href) == (42, "#m42-result-0")
    assert (shown[1].blocks[0].pair, shown[1].blocks[0].pair_href) == (41, "#m41-call-0")
