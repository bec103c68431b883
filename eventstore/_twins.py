"""How :class:`~eventstore.AsyncEventStore` is derived from :class:`~eventstore.EventStore`:
each coroutine runs the synchronous method, one whole transaction, in a worker thread, and
each async iterator pulls the synchronous iterator a page at a time."""

from __future__ import annotations

import asyncio
import functools
import itertools
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from typing import Any, Concatenate, ParamSpec, TypeVar

__all__ = ["awaitable", "streaming"]

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")  # the sync store

_STREAM_PAGE = 256


def awaitable(
    method: Callable[Concatenate[S, P], T],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The coroutine twin of an :class:`EventStore` method: same parameters, same body,
    run in a worker thread."""

    @functools.wraps(method)
    async def call(self: Any, *args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(method, self.sync, *args, **kwargs)

    return call


def streaming(
    method: Callable[Concatenate[S, P], Iterator[T]],
) -> Callable[Concatenate[Any, P], AsyncIterator[T]]:
    """The async-iterator twin of an :class:`EventStore` method that streams: each page is
    pulled from the sync iterator in a worker thread."""

    @functools.wraps(method)
    async def stream(self: Any, *args: P.args, **kwargs: P.kwargs) -> AsyncIterator[T]:
        it = await asyncio.to_thread(lambda: iter(method(self.sync, *args, **kwargs)))
        while True:
            page = await asyncio.to_thread(lambda: list(itertools.islice(it, _STREAM_PAGE)))
            for item in page:
                yield item
            if len(page) < _STREAM_PAGE:
                return

    return stream
