"""The garbage collector's settings during a transcript import, and after it."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventstore import EventStore
from eventstore.importers import import_transcript
from eventstore.importers._collection import YOUNG_THRESHOLD, fewer_collections

SAMPLE = Path(__file__).parent / "data" / "transcripts" / "codex" / "vibecodingtracker-codex.jsonl"


@pytest.fixture
def default_collector() -> Iterator[None]:
    before, enabled = gc.get_threshold(), gc.isenabled()
    gc.enable()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        if not enabled:
            gc.disable()


def test_an_import_collects_less_often_and_puts_everything_back(
    store: EventStore, default_collector: None
) -> None:
    seen: list[tuple[tuple[int, int, int], int]] = []

    def progress(done: int, total: int) -> None:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))

    done = import_transcript(store, SAMPLE, progress=progress)
    assert sum(r.events for r in done) > 0
    assert seen and all(t == (YOUNG_THRESHOLD, 10, 10) and n > 0 for t, n in seen)
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_nested_pauses_end_with_the_outermost(default_collector: None) -> None:
    with fewer_collections():
        with fewer_collections():
            assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_threshold()[0] == YOUNG_THRESHOLD
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_pauses_in_two_threads_put_back_the_settings_once_both_end(
    default_collector: None,
) -> None:
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with fewer_collections():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other)
    t.start()
    assert inside.wait(10)
    with fewer_collections():
        pass
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD  # the other thread's import still runs
    leave.set()
    t.join()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0


def test_a_callers_own_settings_are_left_alone(default_collector: None) -> None:
    gc.freeze()
    try:
        with fewer_collections():
            gc.set_threshold(5000, 10, 10)  # changed by the caller meanwhile
        assert gc.get_threshold() == (5000, 10, 10)
        assert gc.get_freeze_count() > 0  # the caller's freeze is still in place
    finally:
        gc.unfreeze()
    gc.disable()
    with fewer_collections():
        assert gc.get_threshold() == (5000, 10, 10)
        assert gc.get_freeze_count() == 0
    assert not gc.isenabled()
