"""Encoded events sent from one process to another: a transcript import's reading
processes check and encode the events (:func:`~eventstore._append.encode.encode_all`) and
send them to the one process that writes them (:func:`eventstore._append.append_encoded`).

A batch goes as plain tuples (:func:`pack`), not as :class:`~eventstore.codec.Encoded`
objects holding their event models: unpickling a thousand models cost the writing process
more than writing them. A message or custom event is sent as what its rows read of it
(:class:`~eventstore.codec.EventHead`: id, time and kind); any other event whole (a
condensation's or a prune's rows check the seqs it names).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..codec import Encoded, EventHead
from ..events import Custom, Message

__all__ = ["pack", "unpack"]

Packed = tuple[Any, ...]
"""One encoded event as :func:`pack` sends it."""

_NO_BLOBS: dict[str, bytes] = {}  # shared by every unpacked event without one; never written


def pack(encoded: Iterable[Encoded]) -> list[Packed]:
    """``encoded`` as plain tuples, ready to pickle."""
    out: list[Packed] = []
    for enc in encoded:
        evt = enc.event
        head: Any
        if type(evt) is Message or type(evt) is Custom:
            head = (evt.id, evt.created_at)
        elif isinstance(evt, EventHead):
            head = (evt.id, evt.created_at)
        else:
            head = evt
        body = enc.raw if enc.raw is not None else enc.payload
        out.append(
            (head, enc.kind, body, enc.size, enc.token_count, enc.part_rows, enc.blobs or None,
             enc.named, enc.stamps)
        )  # fmt: skip
    return out


def unpack(packed: Iterable[Packed]) -> list[Encoded]:
    """The encodings :func:`pack` sent, as the row maker reads them."""
    out: list[Encoded] = []
    for head, kind, body, size, tokens, part_rows, blobs, named, stamps in packed:
        event = EventHead(head[0], head[1], kind) if type(head) is tuple else head
        raw, text = (body, None) if type(body) is bytes else (None, body)
        out.append(
            Encoded(event, kind, text, size, tokens, part_rows, blobs or _NO_BLOBS, True, named,
                    raw, stamps)
        )  # fmt: skip
    return out
