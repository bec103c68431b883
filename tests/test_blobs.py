"""Attachments: stored once per tenant by content hash, proven by verify, priced per provider,
and replaced by a stand-in for models that do not take them.

Storage tests run over (sqlite, postgres) x (sync, async).
"""

from __future__ import annotations

import json
import os
import struct
import uuid
import zlib
from typing import Any

import pytest
from sqlalchemy import text

from eventstore import EventStore, FilePart, HeuristicTokenCounter, Message, TextPart
from eventstore.media import image_size, image_tokens
from eventstore.views import ViewOptions


def _png(width: int, height: int, payload: int = 0) -> bytes:
    """A PNG header of the given size, padded with ``payload`` random bytes."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    chunk = b"IHDR" + ihdr
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + chunk
    return head + struct.pack(">I", zlib.crc32(chunk)) + os.urandom(payload)


def _image_message(data: bytes, note: str = "what is in this picture?") -> Message:
    return Message(
        role="user",
        parts=[TextPart(text=note), FilePart(media_type="image/png", data=data, name="shot.png")],
    )


def test_a_large_image_in_three_sessions_is_stored_once(api_store: Any) -> None:
    image = _png(1024, 768, 1024 * 1024)  # about 1 MB
    sessions = [api_store.create_session() for _ in range(3)]
    for s in sessions:
        api_store.append(s.id, [_image_message(image)])
    sync = api_store if isinstance(api_store, EventStore) else api_store.inner.sync
    with sync.engine.connect() as conn:
        rows = conn.execute(
            text("SELECT size FROM blobs WHERE tenant = :t"), {"t": sync.tenant}
        ).all()
        payload_sizes = [
            r[0]
            for r in conn.execute(
                text("SELECT size FROM events WHERE session_id IN (:a, :b, :c)"),
                dict(zip("abc", [s.id for s in sessions], strict=True)),
            )
        ]
    assert [r[0] for r in rows] == [len(image)]  # one row for three sends
    assert max(payload_sizes) < 2_000  # the payloads name the blob, they do not hold it
    for s in sessions:
        (stored,) = api_store.read(s.id)
        part = stored.event.parts[1]
        assert part.data == image and part.blob and part.blob.startswith("sha256:")
        assert api_store.get_event(s.id, stored.id).event.parts[1].data == image
        assert api_store.read_tail(s.id, 1)[0].event.parts[1].data == image
        msgs = api_store.view(s.id).to_messages()
        sent = json.dumps(msgs)
        assert "data:image/png;base64," in sent and len(sent) > len(image)
        assert api_store.verify(s.id).ok
    items = list(api_store.tail())
    assert all(i.stored.event.parts[1].data == image for i in items)


def test_attachments_in_a_bulk_batch_are_stored_and_read_back(store: EventStore) -> None:
    """A batch past the bulk threshold (on Postgres encoded while its rows stream out)
    keeps its attachments as blobs, shared where equal, and reads them back whole."""
    images = [_png(640, 480, 200_000 + i % 3) for i in range(3)]
    batch = [_image_message(images[i % 3], f"n{i}") for i in range(30)]
    sid = store.create_session().id
    assert store.append(sid, batch) == list(range(1, 31))
    with store.engine.connect() as conn:
        sizes = sorted(
            r[0]
            for r in conn.execute(
                text("SELECT size FROM blobs WHERE tenant = :t"), {"t": store.tenant}
            )
        )
    assert sizes == sorted(len(i) for i in images)
    for stored in store.read(sid):
        part = stored.event.parts[1]  # type: ignore[union-attr]
        assert part.data == images[(stored.seq - 1) % 3]
    assert store.verify(sid).ok


def test_small_attachments_stay_inline(store: EventStore) -> None:
    s = store.create_session()
    store.append(s.id, [_image_message(_png(16, 16, 100))])
    with store.engine.connect() as conn:
        held = conn.execute(
            text("SELECT count(*) FROM blobs WHERE tenant = :t"), {"t": store.tenant}
        ).scalar_one()
    assert held == 0
    (stored,) = store.read(s.id)
    assert stored.event.parts[1].blob is None
    with EventStore(store.url, tenant=store.tenant, blob_threshold=None) as inline:
        s2 = inline.create_session()
        inline.append(s2.id, [_image_message(_png(16, 16, 200_000))])
        assert inline.read_tail(s2.id, 1)[0].event.parts[1].blob is None


def test_verify_proves_the_blob_bytes(store: EventStore, backend: str) -> None:
    s = store.create_session()
    image = _png(640, 480, 300_000)
    store.append(s.id, [_image_message(image)])
    assert store.verify(s.id).ok
    with store.engine.begin() as conn:
        conn.execute(
            text("UPDATE blobs SET data = :d WHERE tenant = :t"),
            # Flip the last byte: always a change, whatever the random bytes were.
            {"d": image[:-1] + bytes([image[-1] ^ 0xFF]), "t": store.tenant},
        )
    report = store.verify(s.id)
    assert not report.ok and any("changed after append" in p for p in report.problems)
    with store.engine.begin() as conn:
        conn.execute(text("DELETE FROM blobs WHERE tenant = :t"), {"t": store.tenant})
    report = store.verify(s.id)
    assert any("is missing" in p for p in report.problems)


def test_image_tokens_follow_the_provider() -> None:
    assert image_size(_png(1024, 768)) == (1024, 768)
    assert image_size(b"not an image") is None
    openai = image_tokens(1024, 768, "openai")
    assert image_tokens(4000, 3000, "openai") == 765  # scaled to 1024x768 first
    assert image_tokens(2048, 512, "openai") == 85 + 170 * 4  # 2048x512: 4x1 tiles
    assert openai == 85 + 170 * 4  # 1024x768 -> 1024x768, 2x2 tiles
    assert image_tokens(1024, 768, "openai", detail="low") == 85
    assert image_tokens(1024, 768, "anthropic") == 1049  # ceil(1024*768/750)
    assert image_tokens(300, 300, "gemini") == 258
    part = FilePart(media_type="image/png", data=_png(1024, 768))
    msg = Message(role="user", parts=[part])
    counted = {
        provider: HeuristicTokenCounter(provider=provider)
        for provider in (None, "anthropic", "gemini")
    }
    from eventstore.tokens import count_part

    got = {p: count_part(c, msg.parts[0]) for p, c in counted.items()}
    assert got == {None: openai, "anthropic": 1049, "gemini": 516}  # 2x1 tiles of 768


def test_models_that_take_no_images_get_a_stand_in(store: EventStore) -> None:
    s = store.create_session()
    image = _png(512, 512, 200_000)
    store.append(s.id, [_image_message(image), Message.assistant("A cat.")])
    vision = store.view(s.id, options=ViewOptions.for_model("gpt-4o"))
    assert vision.to_messages()[0]["content"][1]["type"] in ("image_url", "file")
    blind_options = ViewOptions.for_model("gpt-3.5-turbo")
    assert blind_options.accepts == ()
    blind = store.view(s.id, options=blind_options)
    sent = json.dumps(blind.to_messages()[0]["content"])
    assert "not shown" in sent and "shot.png" in sent
    assert blind.tokens < vision.tokens  # the stand-in is counted, not the image
    assert "data:image" not in json.dumps(blind.to_messages())
    # Recorded calls rebuild with the same options, so verify still matches.
    store.record_llm_call(s.id, blind, model="gpt-3.5-turbo")
    assert store.verify(s.id).ok


def test_blob_threshold_is_validated(tmp_path: Any) -> None:
    from eventstore import ConfigurationError

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigurationError):
            EventStore(f"sqlite:///{tmp_path / f'{uuid.uuid4().hex}.db'}", blob_threshold=bad)


def _by_digest(digest: str) -> Message:
    return Message(role="user", parts=[FilePart(media_type="image/png", blob=digest)])


def test_a_file_part_naming_a_blob_the_user_does_not_hold_is_refused(api_store: Any) -> None:
    import hashlib

    from eventstore import InvalidEventError

    image = _png(256, 256, 200 * 1024)
    digest = "sha256:" + hashlib.sha256(image).hexdigest()
    alice = api_store.create_session(user_id="alice").id
    api_store.append(alice, [_image_message(image)])
    # Alice may name her own blob again by its digest, in another session of hers.
    again = api_store.create_session(user_id="alice").id
    api_store.append(again, [_by_digest(digest)])
    assert [e.event.parts[0].data for e in api_store.read(again)] == [image]
    # Bob (and a session without a user) may not read it by naming it.
    bob = api_store.create_session(user_id="bob").id
    nobody = api_store.create_session().id
    for sid in (bob, nobody):
        with pytest.raises(InvalidEventError, match="does not hold"):
            api_store.append(sid, [_by_digest(digest)])
        # ...nor in a big batch (the bulk paths).
        batch = [Message.user(f"m{i}") for i in range(40)] + [_by_digest(digest)]
        with pytest.raises(InvalidEventError, match=r"events\[40\].*does not hold"):
            api_store.append(sid, batch)
        assert api_store.head(sid) == 0
    # A digest the tenant holds nowhere is refused too (it could never be verified).
    with pytest.raises(InvalidEventError, match="does not hold"):
        api_store.append(alice, [_by_digest("sha256:" + "0" * 64)])
    assert api_store.verify(alice).ok and api_store.verify(again).ok
    # Another tenant's Alice does not hold it either.
    other = api_store.with_tenant(f"o-{uuid.uuid4().hex}")
    theirs = other.create_session(user_id="alice").id
    with pytest.raises(InvalidEventError, match="does not hold"):
        other.append(theirs, [_by_digest(digest)])


def test_an_import_naming_a_blob_nobody_holds_is_refused(db_url: str, tmp_path: Any) -> None:
    from eventstore.importers import ImportFormatError, import_file

    store = EventStore(db_url, tenant=f"t-{uuid.uuid4().hex}", upgrade=True)
    try:
        path = tmp_path / "chat.json"
        path.write_text(
            json.dumps(
                [
                    {"role": "user", "content": "look"},
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "x"}],
                    },
                ]
            )
        )
        import_file(store, path, "openai")  # an ordinary import still works
        from eventstore.importers import Transcript, import_transcripts

        bad = Transcript(events=[_by_digest("sha256:" + "1" * 64)], title="bad")
        with pytest.raises(ImportFormatError, match="does not hold"):
            import_transcripts(store, [bad])
        assert len(store.list_sessions()) == 1
    finally:
        store.close()


def test_a_big_batch_of_dicts_naming_a_foreign_blob_is_refused(store: EventStore) -> None:
    """The check looks at a lazily encoded batch before encoding it: events given as
    dicts, not yet validated, are looked at too."""
    from eventstore import InvalidEventError

    sid = store.create_session(user_id="bob").id
    named = {
        "kind": "message",
        "role": "user",
        "parts": [{"type": "file", "media_type": "image/png", "blob": "sha256:" + "1" * 64}],
    }
    batch = [{"kind": "message", "role": "user", "parts": [{"type": "text", "text": "hi"}]}] * 30
    with pytest.raises(InvalidEventError, match=r"events\[30\].*does not hold"):
        store.append(sid, [*batch, named])
    assert store.head(sid) == 0
    store.append(sid, batch)
    assert store.head(sid) == 30


def test_a_big_batch_naming_no_blob_is_not_encoded_before_its_rows_go(
    store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Postgres encodes a big batch while its rows stream out by COPY: the blob check
    must not encode every event first when none names a blob by its digest."""
    import importlib

    encode = importlib.import_module("eventstore._append.encode")  # the package shadows it
    locked = importlib.import_module("eventstore._append.locked")
    encoded: list[int] = []
    at_insert: list[int] = []
    one, insert_rows = encode.encode_one, locked.insert_rows

    def counting(*args: Any) -> Any:
        encoded.append(1)
        return one(*args)

    def spying(*args: Any, **kw: Any) -> None:
        at_insert.append(len(encoded))
        insert_rows(*args, **kw)

    monkeypatch.setattr(encode, "encode_one", counting)
    monkeypatch.setattr(locked, "insert_rows", spying)
    sid = store.create_session().id
    store.append(sid, [Message.user(f"m{i}") for i in range(200)])
    assert store.head(sid) == 200
    assert len(encoded) == 200
    if store.dialect == "postgresql":
        assert at_insert == [0]  # encoded as the rows were sent, not before
