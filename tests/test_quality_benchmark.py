"""The condensation quality benchmark measures what it claims to.

The metric machinery is checked on small synthetic sessions whose right answers are known
(a forgotten probe is lost, a split tool pair is invalid, a rewritten prefix breaks the
cache, ...); the smoke mode runs the whole command on two corpus trajectories.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from condensers import CondensationPolicy, Pipeline, WindowCondenser
from eventstore import Condensation, EventStore, Message
from eventstore.budget import Budget
from eventstore.events import ToolCallPart

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.probes import (  # noqa: E402
    command_words,
    error_lines,
    extract_probes,
    occurs,
    path_probes,
    tokens,
    tool_probes,
    view_text,
)
from benchmarks.quality import (  # noqa: E402
    Trajectory,
    ViewRecord,
    floor_tokens,
    invalid_reasons,
    is_cache_break,
    pool,
    replay,
    score,
    stitched,
    targets,
    task_index,
    tool_output_tokens,
)

BUDGET = Budget(4096, 512, 205)
SYSTEM = {"role": "system", "content": "You are an agent."}


def call(cid: str, name: str = "bash", **args: Any) -> ToolCallPart:
    return ToolCallPart(id=cid, name=name, arguments=json.dumps(args))


def assistant(text: str, *calls: ToolCallPart) -> Message:
    return Message(role="assistant", parts=[{"type": "text", "text": text}, *calls])


def rendered_call(cid: str, name: str = "bash") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": "{}"}}


# --------------------------------------------------------------------------- probes


def test_paths_follow_the_slash_and_extension_rules() -> None:
    text = (
        "open /testbed/src/app.py then ./run.sh and src/pkg/mod (two slashes), "
        "a/b has neither, notes.md is a bare doc, e.g. is no path, string.So ends a "
        "sentence, </div> is a tag, see https://example.com/x/y.py, ../up and ~/home"
    )
    found = path_probes(text)
    for want in ("/testbed/src/app.py", "./run.sh", "src/pkg/mod", "notes.md", "../up", "~/home"):
        assert want in found, want
    for unwanted in ("a/b", "e.g", "string.So", "/div", "//example.com/x/y.py"):
        assert unwanted not in found, unwanted


def test_error_lines_skip_headers_viewer_code_and_exit_code_zero() -> None:
    text = "\n".join(
        [
            "Traceback (most recent call last):",
            '  File "x.py", line 3, in <module>',
            "ValueError: bad value   here",
            "12:    raise ValueError('shown by a viewer')",
            "except KeyError:",
            "bash: foo: command not found",
            "Process finished with exit code 0",
            "Process finished with exit code 2",
            "x" * 200 + " FAILED",
        ]
    )
    lines = error_lines(text)
    assert "ValueError: bad value here" in lines  # whitespace-normalized
    assert "bash: foo: command not found" in lines
    assert "Process finished with exit code 2" in lines
    assert "Process finished with exit code 0" not in lines
    assert not any("viewer" in x or x.startswith(("except", "Traceback")) for x in lines)
    assert ("x" * 120) in lines  # the first 120 chars of a long line


def test_tool_probes_take_command_words_and_fenced_blocks() -> None:
    assert command_words("A=1 cd /x && python -m pytest | tee log; git status\nls -la") == [
        "cd",
        "python",
        "tee",
        "git",
        "ls",
    ]
    assert command_words("cat <<'EOF' > a.py\nimport os\nEOF\nrm a.py") == ["cat", "rm"]
    msg = assistant("run it", call("c1", "bash", command="grep -r foo . || make test"))
    assert tool_probes(msg) == ["bash", "grep", "make"]
    text_mode = assistant("Let me look.\n```\nopen src/app.py 10\n```")
    assert tool_probes(text_mode) == ["open"]
    shell_block = assistant("THOUGHT\n```mswea_bash_command\ncd /r && sed -n 1p f.py\n```")
    assert tool_probes(shell_block) == ["cd", "sed"]


def test_trivial_probes_are_those_in_the_system_prompt_or_first_user_message() -> None:
    msgs = [
        Message.system("Use the bash tool. Files live in /repo/main.py."),
        Message.user("Fix /repo/main.py"),
        assistant("edit", call("c1", "bash", command="sed -i 1d /repo/main.py /repo/other.py")),
        Message.tool("c1", "sed: can't read /repo/other.py: No such file or directory"),
    ]
    probes = extract_probes(msgs)
    assert list(probes.found["paths"]) == ["/repo/other.py"]
    assert list(probes.found["tools"]) == ["sed"]  # bash is in the system prompt
    assert list(probes.found["errors"]) == [
        "sed: can't read /repo/other.py: No such file or directory"
    ]
    assert probes.trivial["paths"] == 1 and probes.trivial["tools"] == 1


def test_tools_match_whole_words_only() -> None:
    assert occurs("tools", "ls", "ran ls -la")
    assert not occurs("tools", "ls", "see tools and ls-files")
    assert not occurs("tools", "sed", "it was used")


def test_tokens_count_chars_over_four_plus_four_per_message() -> None:
    msgs = [
        {"role": "user", "content": "x" * 9},  # ceil(9/4) + 4 = 7
        {"role": "assistant", "content": "", "tool_calls": [rendered_call("c", "ab")]},
    ]  # name "ab" + "{}" = 4 chars -> 1 + 4 = 5
    assert tokens(msgs) == 12


# --------------------------------------------------------------------------- views


def test_a_split_tool_pair_or_an_orphan_result_is_invalid() -> None:
    history = [Message.system("You are an agent."), Message.user("go")]
    good = [
        SYSTEM,
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [rendered_call("a"), rendered_call("b")],
        },
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
    ]
    history.append(Message.tool("a", "1"))
    assert invalid_reasons(good, history) == []
    split = good[:4] + [{"role": "user", "content": "x"}, good[4]]
    assert any("answered by" in r for r in invalid_reasons(split, history))
    orphan = [SYSTEM, {"role": "tool", "tool_call_id": "z", "content": "?"}, good[4]]
    reasons = invalid_reasons(orphan, history)
    assert any("without its call" in r for r in reasons)


def test_a_view_without_its_system_prompt_or_newest_message_is_invalid() -> None:
    history = [Message.system("You are an agent."), Message.user("go"), Message.user("newest")]
    view = [
        {"role": "user", "content": "go"},
        {"role": "user", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "user", "content": "c"},
    ]
    reasons = invalid_reasons(view, history)
    assert "system prompt not first and verbatim" in reasons
    assert "newest message not among the last 3" in reasons
    assert invalid_reasons([SYSTEM, {"role": "user", "content": "newest"}], history) == []
    assert invalid_reasons([SYSTEM, {"role": "user", "content": "newest"}], history, "boom")


def test_a_view_that_rewrites_the_prefix_breaks_the_cache() -> None:
    a = [SYSTEM, {"role": "user", "content": "one"}]
    grown = [*a, {"role": "assistant", "content": "two"}]
    assert not is_cache_break(a, grown)
    assert not is_cache_break(a, a)
    rewritten = [SYSTEM, {"role": "user", "content": "summary"}, grown[2]]
    assert is_cache_break(a, rewritten)
    assert is_cache_break(grown, a)  # shorter: the old prefix is gone


def test_the_task_is_the_first_user_message_after_a_demonstration() -> None:
    msgs = [
        Message.system("s"),
        Message.user("Here is a demonstration of how to do it"),
        Message.user("The real task"),
        assistant("ok"),
        Message.user("an observation, not a task"),
    ]
    assert task_index(msgs, tool_role=False) == 2
    assert task_index([msgs[0], msgs[3], msgs[4]], tool_role=False) is None


def test_over_budget_is_avoidable_only_when_the_head_and_newest_group_fit() -> None:
    small = Budget(200, 0, 0)
    history = [
        Message.system("s"),
        Message.user("task"),
        assistant("a"),
        Message.user("x" * 400),  # 104 tokens: old, could go
        assistant("b"),
        Message.user("y" * 40),
    ]
    assert floor_tokens(history, 1) < small.available
    big = [{"role": "user", "content": "z" * 1000}]
    s = score("t", history, [ViewRecord(big, len(history), turn=False)], small, tool_role=False)
    assert (s.over_budget, s.avoidable_over) == (1, 1)
    huge = [*history[:5], Message.user("y" * 1000)]  # the newest group alone is too big
    s = score("t", huge, [ViewRecord(big, len(huge), turn=False)], small, tool_role=False)
    assert (s.over_budget, s.avoidable_over) == (1, 0)


def test_scoring_counts_lost_probes_missing_tasks_and_cache_breaks() -> None:
    history = [
        Message.system("You are an agent."),
        Message.user("Fix the bug in the parser"),
        assistant("look", call("c1", "bash", command="cat /src/parser.py")),
        Message.tool("c1", "ValueError: unexpected token"),
        assistant("done"),
    ]
    rendered = [
        SYSTEM,
        {"role": "user", "content": "Fix the bug in the parser"},
        {
            "role": "assistant",
            "content": "look",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command": "cat /src/parser.py"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "ValueError: unexpected token"},
    ]
    turn1 = ViewRecord(rendered[:2], 2, turn=True)
    turn2 = ViewRecord(rendered, 4, turn=True)
    # The final view forgot the call and its error and dropped the task.
    final_msgs = [SYSTEM, {"role": "user", "content": "summary: nothing"}]
    final_msgs.append({"role": "assistant", "content": "done"})
    final = ViewRecord(final_msgs, 5, turn=False)
    s = score("t", history, [turn1, turn2, final], BUDGET)
    assert (s.probes, s.retained) == (
        {"paths": 1, "errors": 1, "tools": 2},
        {"paths": 0, "errors": 0, "tools": 0},
    )
    assert s.lost["paths"] == ["/src/parser.py"] and s.lost["tools"] == ["bash", "cat"]
    assert (s.task_checked, s.task_kept) == (3, 2)
    assert (s.turns, s.cache_turns, s.cache_breaks) == (2, 1, 0)
    assert s.invalid == 0
    kept = ViewRecord([*rendered, {"role": "assistant", "content": "done"}], 5, turn=False)
    s = score("t", history, [turn1, turn2, kept], BUDGET)
    assert s.retained == {"paths": 1, "errors": 1, "tools": 2}


def test_view_text_includes_decoded_tool_arguments() -> None:
    args = json.dumps({"command": "cat 'a  b'\n/x/y.py"})
    msgs = [{"role": "assistant", "content": None, "tool_calls": [rendered_call("c")]}]
    msgs[0]["tool_calls"][0]["function"]["arguments"] = args
    assert "cat 'a b' /x/y.py" in view_text(msgs)


# --------------------------------------------------------------------------- replay


def _long_session() -> Trajectory:
    events: list[Any] = [
        Message.system("You are an agent."),
        Message.user("Make the tests pass"),
        assistant("first I read it", call("c0", "bash", command="cat /srv/early/config.toml")),
        Message.tool("c0", "KeyError: 'database'"),
    ]
    for i in range(1, 12):
        events.append(assistant(f"step {i}", call(f"c{i}", "bash", command=f"echo {i}")))
        events.append(Message.tool(f"c{i}", f"{i} " + "output line\n" * 120))
    events.append(assistant("done"))
    return Trajectory("synthetic", "openai", events)


def test_long_runs_join_one_format_after_the_first_head() -> None:
    one, two = _long_session(), _long_session()
    two.events[1] = Message.user("A second task")
    other = Trajectory("other", "swe-agent", list(_long_session().events[:4]))  # short
    (run,) = stitched([one, two, other], over=1_000)
    assert run.format == "openai" and run.name == "openai: 2 trajectories back to back"
    assert run.events[: len(one.events)] == one.events  # the first whole, head included
    assert run.events[len(one.events) :] == two.events[2:]  # the next without its head
    out = tool_output_tokens(run.messages, run.tool_role)
    assert out == 2 * tool_output_tokens(one.messages, one.tool_role)
    assert stitched([one, two], over=out) == []  # not long enough


def test_replay_scores_a_forgetting_policy_as_losing_probes(tmp_path: Path) -> None:
    traj = _long_session()
    store = EventStore(f"sqlite:///{tmp_path / 'q.db'}", upgrade=True)
    try:

        def forgetful(budget: Budget) -> CondensationPolicy:
            return CondensationPolicy(budget, Pipeline([WindowCondenser()]))

        rep = replay(store, traj, BUDGET, forgetful)
        s = score(traj.name, traj.messages, rep.views, BUDGET)
        assert rep.condensations >= 1
        assert rep.tool_prunes == 0
        assert len(rep.views) == 14 and rep.views[-1].turn is False
        assert "/srv/early/config.toml" in s.lost["paths"]
        assert "KeyError: 'database'" in s.lost["errors"]
        assert s.invalid == 0
        assert s.cache_breaks >= 1  # every window condensation rewrites the prefix
        pooled = pool([s])
        verdicts = {t.name: t for t in targets({"4k": pooled, "8k": pooled})}
        # Retention has a goal at 8k and 32k; at 4k it is reported only.
        assert verdicts["final-view retention: paths"].passed["8k"] is False
        assert verdicts["final-view retention: paths"].passed["4k"] is None
        assert verdicts["invalid views"].passed["4k"] is True
        assert verdicts["pruner fires on runs > 40k tool-output tokens"].passed["4k"] is None
    finally:
        store.close()


def test_replay_leaves_out_the_compactions_a_transcript_brings(tmp_path: Path) -> None:
    # A coding agent's own compaction (imported as a condensation forgetting everything)
    # is not the policy's decision: the replay leaves it out, so the task stays in view.
    traj = _long_session()
    native = Condensation(
        forgotten_from=1, forgotten_to=4, forgotten_events=4, summary="earlier work",
        condenser="claude-code", trigger="import",
    )  # fmt: skip
    traj.events.insert(4, native)
    store = EventStore(f"sqlite:///{tmp_path / 'q.db'}", upgrade=True)
    try:
        rep = replay(store, traj, Budget(32_768, 4_096, 1_638), CondensationPolicy)
        s = score(traj.name, traj.messages, rep.views, BUDGET)
        assert rep.condensations == 0
        assert s.task_checked > 0 and s.task_kept == s.task_checked
    finally:
        store.close()


def test_smoke_mode_writes_the_report_and_json(tmp_path: Path) -> None:
    """The benchmark's own corpus (compressed, split into tune and test) in smoke mode."""
    env = {k: v for k, v in os.environ.items() if k != "EVENTSTORE_CORPUS"}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "quality", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout == "", "progress belongs on stderr"
    assert "[4k 1/2]" in proc.stderr and "[32k 2/2]" in proc.stderr
    report = (tmp_path / "QUALITY_RESULTS.md").read_text()
    assert "## Test (targets read here)" in report and "## Tune" in report
    assert "| measured at 4k | measured at 8k | measured at 32k |" in report
    data = json.loads((tmp_path / "quality_results.json").read_text())
    assert set(data["sides"]) == {"test", "tune"}
    for side in data["sides"].values():
        assert set(side["pooled"]) == {"4k", "8k", "32k"}
        assert len(side["runs"]["4k"]) == 2 and len(side["targets"]) == 9
        assert "silent_overflows" in side["pooled"]["4k"]


def test_quality_mode_skips_cleanly_without_a_corpus(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "quality", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EVENTSTORE_CORPUS": str(tmp_path / "absent")},
    )
    assert proc.returncode == 0, proc.stderr
    assert "not found" in proc.stderr
    assert not (tmp_path / "QUALITY_RESULTS.md").exists()


def test_the_break_model_counts_one_break_per_overflow() -> None:
    """The model behind the report's bound: a 400-token head in a 1,000-token budget, turns
    of 100 + 200 tokens; cutting observations and smaller summaries mean fewer breaks."""
    from benchmarks.quality_bound import bound

    events: list[Any] = [Message.system("x" * 1_584)]  # 396 + 4 tokens
    for _ in range(10):
        events += [Message.assistant("x" * 384), Message.user("x" * 784)]  # 100 and 200
    traj = Trajectory(name="synthetic", format="mini-swe-agent", events=events)
    budget = Budget(max_input_tokens=1_000, reserved_output=0, buffer=0)
    # Before turn k the view is the head plus k groups of 300: the third overflows; after
    # that a condensation leaves head + summary 100 + newest group = 800, so each next
    # group overflows again (7 breaks in 9 turns).
    assert bound([traj], budget, 100, None) == (7, 9)
    # Without a summary the 700 left take one more group: every other turn breaks.
    assert bound([traj], budget, 0, None) == (4, 9)
    # Observations cut to a quarter of the 600-token room (150): groups of 250.
    assert bound([traj], budget, 100, 0.25) == (4, 9)
