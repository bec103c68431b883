"""The README's Python example runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def _example() -> str:
    text = README.read_text()
    section = text.split("## An agent loop", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README lost its Python example"
    return match.group(1)


def test_readme_agent_loop_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EVENTSTORE_URL", raising=False)
    namespace: dict[str, object] = {"__name__": "readme_example"}
    exec(compile(_example(), "README.md", "exec"), namespace)
    out = capsys.readouterr().out
    # The example is written so that the small budget forces condensation.
    assert "view" in out and "->" in out
    assert (tmp_path / "agent.db").exists()
    store = namespace["store"]
    try:
        kinds = {e.kind for e in store.read(namespace["session"].id)}  # type: ignore[attr-defined]
        assert {"message", "llm_call"} <= kinds
        assert kinds & {"prune", "condensation"}
    finally:
        store.close()  # type: ignore[attr-defined]
