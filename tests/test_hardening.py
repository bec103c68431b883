"""Hostile and unlucky input on both backends: refused with a typed error, or kept exactly.

Seq references of condensations and prunes, values JSON cannot hold, integers beyond the
columns, idempotency keys reused for other content, and lock waits.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime
from typing import Any

import pytest
from conftest import open_store, row_count
from sqlalchemy import create_engine, text

from eventstore import (
    AsyncEventStore,
    Condensation,
    ConfigurationError,
    Custom,
    EventStore,
    EventStoreError,
    IdempotencyError,
    IdempotencyMismatchError,
    InvalidEventError,
    Message,
    NotFoundError,
    PartRef,
    Prune,
    StorageBusyError,
    StorageError,
    TextPart,
)
from eventstore._checks import MAX_DEPTH, check_references


def _session(store: Any, n: int = 3) -> str:
    s = store.create_session()
    store.append(s.id, [Message.user(f"m{i}") for i in range(n)])
    return str(s.id)


def _deep(n: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cur = root
    for _ in range(n):
        cur["a"] = {}
        cur = cur["a"]
    return root


# --------------------------------------------------------------------------- item 1


@pytest.mark.parametrize(
    "fields",
    [
        {"pinned": [1, 2**70]},
        {"pinned": [1, 6]},  # a future seq: it would change view(as_of=4) once seq 6 exists
        {"pinned": [4]},  # the condensation's own seq
        {"pinned": [0]},
        {"pinned": [-1]},
        {"pinned": [2], "forgotten_from": 2},  # pinned inside the forgotten range
        {"supersedes": 9},
        {"supersedes": 2**70},
        {"supersedes": 0},
        {"request_seq": 4},
        {"request_seq": -3},
        {"forgotten_to": 2**70},
        {"forgotten_from": 2**70, "forgotten_to": 2**70},
        {"summary_tokens": -1},
    ],
    ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()),
)
def test_condensation_references_are_checked(api_store: Any, fields: dict[str, Any]) -> None:
    sid = _session(api_store)
    args: dict[str, Any] = {"forgotten_from": 3, "forgotten_to": 3, "summary": "s"} | fields
    with pytest.raises(InvalidEventError) as info:
        api_store.append(sid, [Condensation(**args)], expected_seq=3)
    field = next(iter(fields)).split("_")[0]
    assert f"condensation.{field}" in str(info.value)
    assert api_store.head(sid) == 3
    assert api_store.view(sid).seq == 3  # the session still works


def test_valid_references_are_accepted(api_store: Any) -> None:
    sid = _session(api_store, 4)
    api_store.append(sid, [Condensation(forgotten_from=2, forgotten_to=3, summary="s", pinned=[1])])
    api_store.append(
        sid,
        [Condensation(forgotten_from=2, forgotten_to=4, summary="t", pinned=[1], supersedes=5)],
    )
    view = api_store.view(sid)
    assert [i.seq for i in view.items if i.seq] == [1]
    assert api_store.verify(sid).ok


def test_pinned_future_seq_cannot_rewrite_the_past(store: EventStore) -> None:
    sid = _session(store)
    with pytest.raises(InvalidEventError, match="pinned"):
        store.append(sid, [Condensation(forgotten_from=1, forgotten_to=2, pinned=[6])])
    store.append(sid, [Condensation(forgotten_from=1, forgotten_to=2, pinned=[])])
    before = store.view(sid, as_of=4).to_messages()
    store.append(sid, [Message.user("five"), Message.user("six")])
    assert store.view(sid, as_of=4).to_messages() == before


@pytest.mark.parametrize(
    "ref", [PartRef(seq=2**70, index=0), PartRef(seq=4, index=0), PartRef(seq=0, index=0)]
)
def test_prune_targets_are_checked(api_store: Any, ref: PartRef) -> None:
    sid = _session(api_store)
    with pytest.raises(InvalidEventError, match=r"prune\.targets\[0\]\.seq"):
        api_store.append(sid, [Prune(targets=[ref])])
    assert api_store.head(sid) == 3


def test_prune_index_beyond_the_column(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [Message.tool("c", "out", name="t")])
    with pytest.raises(InvalidEventError, match=r"prune\.targets\[0\]\.index"):
        store.append(s.id, [Prune(targets=[PartRef(seq=1, index=2**63)])])


def test_check_references_is_usable_without_a_store() -> None:
    check_references(Condensation(forgotten_from=1, forgotten_to=1, pinned=[]), 2)
    with pytest.raises(InvalidEventError, match=r"events\[7\]\.condensation\.pinned"):
        check_references(
            Condensation(forgotten_from=1, forgotten_to=1, pinned=[1]), 2, "events[7]."
        )
    check_references(Message.user("x"), 1)


# --------------------------------------------------------------------------- item 4


SURROGATE = "key\udcff"


@pytest.mark.parametrize(
    "evt",
    [
        Custom(name="x", data={SURROGATE: 1}),
        Custom(name="x", data=[{"ok": {SURROGATE: 1}}]),
        Message(role="user", parts=[TextPart(text="x")], provider_metadata={SURROGATE: 1}),
        Message(role="user", parts=[TextPart(text="x")], extra={SURROGATE: 1}),
        Condensation(forgotten_from=1, forgotten_to=1, settings={SURROGATE: 1}),
    ],
    ids=["custom", "custom-nested", "provider_metadata", "extra", "settings"],
)
def test_surrogate_in_a_key_is_refused_not_altered(api_store: Any, evt: Any) -> None:
    sid = _session(api_store)
    with pytest.raises(InvalidEventError, match="lone surrogate"):
        api_store.append(sid, [evt])
    assert api_store.head(sid) == 3


def test_surrogate_in_a_key_as_dict_input_is_refused(api_store: Any) -> None:
    sid = _session(api_store)
    evt = {"kind": "message", "role": "user", "parts": [], "provider_metadata": {SURROGATE: 1}}
    with pytest.raises(InvalidEventError, match="lone surrogate"):
        api_store.append(sid, [evt])


def test_surrogate_in_session_metadata_key_roundtrips(api_store: Any) -> None:
    meta = {SURROGATE: SURROGATE, "n": {SURROGATE: [SURROGATE]}}
    s = api_store.create_session(metadata=meta)
    assert api_store.get_session(s.id).metadata == meta


def test_surrogate_in_values_still_roundtrips(api_store: Any) -> None:
    sid = _session(api_store)
    (seq,) = api_store.append(sid, [Custom(name="x", data={"v": SURROGATE})])
    (got,) = list(api_store.read(sid, from_seq=seq))
    assert got.event.data == {"v": SURROGATE}


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")], ids=str)
def test_non_finite_floats_are_refused(api_store: Any, bad: float) -> None:
    sid = _session(api_store)
    events: list[Any] = [
        Custom(name="x", data={"f": bad}),
        Custom(name="x", data=[1, [bad]]),
        Custom(name="x", data=bad),
        Message(role="user", parts=[TextPart(text="x")], provider_metadata={"f": bad}),
        Condensation(forgotten_from=1, forgotten_to=1, cost=bad),
    ]
    for evt in events:
        with pytest.raises(InvalidEventError, match="NaN or infinite"):
            api_store.append(sid, [evt])
    with pytest.raises(InvalidEventError, match="NaN or infinite"):
        api_store.append(sid, [{"kind": "custom", "name": "x", "data": {"f": bad}}])
    with pytest.raises(InvalidEventError, match="NaN or infinite"):
        api_store.create_session(metadata={"f": bad})
    assert api_store.head(sid) == 3


def test_finite_floats_and_big_json_ints_roundtrip(api_store: Any) -> None:
    sid = _session(api_store)
    data = {"f": 1.5e300, "tiny": 5e-324, "neg": -0.0, "big": 2**70, "neg_big": -(2**70)}
    (seq,) = api_store.append(sid, [Custom(name="x", data=data)])
    (got,) = list(api_store.read(sid, from_seq=seq))
    assert got.event.data == data
    assert json.dumps(got.event.data, sort_keys=True) == json.dumps(data, sort_keys=True)


@pytest.mark.parametrize(
    "call",
    [
        lambda s, sid: s.list_sessions(limit=2**63),
        lambda s, sid: s.list_sessions(offset=2**70),
        lambda s, sid: s.list_sessions(limit=-1),
        lambda s, sid: s.append(sid, [Message.user("x")], expected_seq=2**63),
        lambda s, sid: s.view(sid, as_of=2**63),
        lambda s, sid: s.view(sid, as_of=2**70),
        lambda s, sid: s.fork(sid, 2**63),
        lambda s, sid: s.append(
            sid, [Condensation(forgotten_from=1, forgotten_to=1, summary_tokens=2**31)]
        ),
    ],
    ids=[
        "limit",
        "offset",
        "limit-negative",
        "expected_seq",
        "as_of-63",
        "as_of-70",
        "fork",
        "summary_tokens",
    ],
)
def test_out_of_range_integers_give_one_typed_error(api_store: Any, call: Any) -> None:
    sid = _session(api_store)
    with pytest.raises(InvalidEventError) as info:
        call(api_store, sid)
    assert "outside" in str(info.value) or "over the limit" in str(info.value)
    assert api_store.head(sid) == 3


# --------------------------------------------------------------------------- item 7


@pytest.mark.parametrize("seq", [2**70, 2**63, -(2**70), 0, 4])
def test_original_out_of_range_is_not_found(api_store: Any, seq: int) -> None:
    sid = _session(api_store)
    with pytest.raises(NotFoundError, match="no event at seq"):
        api_store.original(sid, PartRef(seq=seq, index=0))
    with pytest.raises(NotFoundError):
        api_store.original(sid, PartRef(seq=1, index=2**70))


def test_created_at_before_year_one_in_utc(api_store: Any) -> None:
    sid = _session(api_store)
    early = "0001-01-01T00:00:00+05:00"
    with pytest.raises(InvalidEventError, match="created_at") as info:
        api_store.append(sid, [{"kind": "message", "role": "user", "created_at": early}])
    assert "years 1-9999" in str(info.value)
    with pytest.raises(ValueError, match="years 1-9999"):  # the model refuses it too
        Message(role="user", created_at=datetime.fromisoformat(early))
    assert api_store.head(sid) == 3


def test_deeply_nested_json_is_a_typed_error(api_store: Any) -> None:
    sid = _session(api_store)
    deep = _deep(100_000)
    attempts: list[Any] = [
        [{"kind": "custom", "name": "x", "data": deep}],
        [{"kind": "message", "role": "user", "provider_metadata": deep}],
        [Custom(name="x", data=deep)],
        [Message(role="user", parts=[], provider_metadata=deep)],
        [Message(role="user", parts=[], extra=deep)],
        # A batch long enough to be encoded while it is sent (Postgres), looked through
        # for attachments named by digest before any of it is encoded.
        [
            *(Message.user(f"m{i}") for i in range(20)),
            {"kind": "custom", "name": "x", "data": deep},
        ],
    ]
    for events in attempts:
        with pytest.raises(InvalidEventError, match="nested more than"):
            api_store.append(sid, events)
    with pytest.raises(InvalidEventError, match="nested more than"):
        api_store.create_session(metadata=deep)
    assert api_store.head(sid) == 3


def test_nesting_up_to_the_limit_roundtrips(api_store: Any) -> None:
    sid = _session(api_store)
    data = _deep(MAX_DEPTH - 1)
    (seq,) = api_store.append(sid, [Custom(name="x", data=data)])
    (got,) = list(api_store.read(sid, from_seq=seq))
    assert got.event.data == data
    with pytest.raises(InvalidEventError, match="nested more than"):
        api_store.append(sid, [Custom(name="x", data=_deep(MAX_DEPTH + 1))])


def test_every_refusal_is_an_event_store_error(store: EventStore) -> None:
    sid = _session(store)
    n = row_count(store, session_id=sid)
    for bad in (
        lambda: store.append(sid, [Condensation(forgotten_from=1, forgotten_to=1, pinned=[9])]),
        lambda: store.append(sid, [Custom(name="x", data=float("nan"))]),
        lambda: store.original(sid, PartRef(seq=2**70, index=0)),
    ):
        with pytest.raises(EventStoreError):
            bad()
    assert row_count(store, session_id=sid) == n


# --------------------------------------------------------------------------- item 10


@pytest.mark.parametrize("api", ["sync", "async"])
def test_append_behind_a_held_lock_raises_storage_busy(db_url: str, api: str) -> None:
    tenant = f"t-{uuid.uuid4().hex}"
    store = open_store(
        db_url, api, tenant=tenant, upgrade=True, lock_timeout_ms=300, busy_timeout_ms=300
    )
    holder = create_engine(db_url)
    try:
        s = store.create_session()
        store.append(s.id, [Message.user("one")])
        with holder.connect() as conn:
            if db_url.startswith("sqlite"):
                conn.exec_driver_sql("BEGIN IMMEDIATE")  # the database write lock
            else:
                conn.execute(
                    text("SELECT head_seq FROM sessions WHERE id = :sid FOR UPDATE"), {"sid": s.id}
                )
            start = time.monotonic()
            with pytest.raises(StorageBusyError, match="retry") as info:
                store.append(s.id, [Message.user("two")], idempotency_key="k")
            waited = time.monotonic() - start
            assert isinstance(info.value, StorageError)
            conn.rollback()
        assert 0.25 <= waited < 5, waited
        assert store.head(s.id) == 1
        assert store.append(s.id, [Message.user("two")], idempotency_key="k") == [2]
    finally:
        holder.dispose()
        store.close()


def test_lock_timeout_applies_to_a_shared_postgres_engine(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        pytest.skip("row locks and lock_timeout are Postgres features")
    engine = create_engine(db_url)
    store = EventStore(engine=engine, tenant=f"t-{uuid.uuid4().hex}", lock_timeout_ms=300)
    other = store.with_tenant(f"t-{uuid.uuid4().hex}")
    try:
        for st in (store, other):
            s = st.create_session()
            with engine.connect() as conn:
                conn.execute(
                    text("SELECT head_seq FROM sessions WHERE id = :sid FOR UPDATE"), {"sid": s.id}
                )
                start = time.monotonic()
                with pytest.raises(StorageBusyError):
                    st.append(s.id, [Message.user("x")])
                assert time.monotonic() - start < 5
                conn.rollback()
    finally:
        engine.dispose()


@pytest.mark.parametrize("bad", [0, -1, 2**40, "5s", True])
def test_lock_timeout_must_be_a_positive_millisecond_count(db_url: str, bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="lock_timeout_ms"):
        EventStore(db_url, lock_timeout_ms=bad)
    with pytest.raises(ConfigurationError, match="lock_timeout_ms"):
        AsyncEventStore(db_url, lock_timeout_ms=bad)


# --------------------------------------------------------------------------- item 5


def test_idempotency_key_reused_with_other_text_is_a_mismatch(api_store: Any) -> None:
    sid = _session(api_store, 0)
    first = api_store.append(sid, [Message.user("pay 10 EUR")], idempotency_key="k")
    with pytest.raises(IdempotencyMismatchError, match="different append") as info:
        api_store.append(sid, [Message.user("pay 99 EUR")], idempotency_key="k")
    assert isinstance(info.value, IdempotencyError)
    assert "'k'" in str(info.value) and "new key" in str(info.value)
    assert api_store.head(sid) == 1
    # The same batch again is still a replay.
    again = api_store.append_result(sid, [Message.user("pay 10 EUR")], idempotency_key="k")
    assert again.replayed and again.seqs == first


@pytest.mark.parametrize(
    "second",
    [
        [Message.user("a"), Message.user("c")],  # same size, other content
        [Message.user("b"), Message.user("a")],  # same content, other order
        [Message.user("a"), Custom(name="b")],  # other kind
        [Message.user("a"), Message(role="assistant", parts=[TextPart(text="b")])],  # role
        [Message.user("a")],  # other size (typed as a mismatch too)
    ],
    ids=["content", "order", "kind", "role", "size"],
)
def test_idempotency_mismatch_variants(api_store: Any, second: list[Any]) -> None:
    sid = _session(api_store, 0)
    api_store.append(sid, [Message.user("a"), Message.user("b")], idempotency_key="k")
    with pytest.raises(IdempotencyMismatchError):
        api_store.append(sid, second, idempotency_key="k")
    assert api_store.head(sid) == 2


def test_idempotency_compares_given_ids(api_store: Any) -> None:
    sid = _session(api_store, 0)
    one, two = uuid.uuid4().hex, uuid.uuid4().hex
    api_store.append(sid, [Message(id=one, role="user", parts=[])], idempotency_key="k")
    with pytest.raises(IdempotencyMismatchError):
        api_store.append(sid, [Message(id=two, role="user", parts=[])], idempotency_key="k")
    replay = api_store.append_result(
        sid, [Message(id=one, role="user", parts=[])], idempotency_key="k"
    )
    assert replay.replayed


def test_idempotency_retry_without_ids_replays(api_store: Any) -> None:
    """A retry rebuilds its events (no ids given, so the store assigned them): the same
    content is the same request."""
    sid = _session(api_store, 0)
    batch = [Message.user("x"), Custom(name="tool", data={"n": 1})]
    seqs = api_store.append(sid, batch, idempotency_key="retry")
    rebuilt = [Message.user("x"), Custom(name="tool", data={"n": 1})]
    result = api_store.append_result(sid, rebuilt, idempotency_key="retry")
    assert result.replayed and result.seqs == seqs
    assert api_store.head(sid) == 2
